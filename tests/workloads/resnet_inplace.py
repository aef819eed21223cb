"""A small ResNet-style CNN with inplace ReLUs, trained with SGD on synthetic 3x32x32 images
served by a DataLoader with worker processes.

What it exercises: nn.ReLU(inplace=True) right after BatchNorm and after residual adds (full
module backward hooks break these), BatchNorm buffers, a map-style Dataset read through
DataLoader(num_workers=2) by default (forked workers), and an optimizer step that ends each step.

Globals for `probing eval` (the seed's examples use them): model, train_loader, optimizer,
batch_size, trainer.

    python3 tests/workloads/resnet_inplace.py --steps 250 --workers 2
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import _workload as wl


class SyntheticImages(Dataset):
    """Image i is fixed by i alone (its own generator), so any worker count gives the same
    batches. Ten classes, each a different mean pattern plus noise, so the loss can fall."""

    def __init__(self, length=512, classes=10):
        self.length = length
        self.classes = classes
        g = torch.Generator().manual_seed(1234)
        self.patterns = torch.randn(classes, 3, 32, 32, generator=g) * 0.5

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(10_000 + index)
        label = index % self.classes
        image = self.patterns[label] + torch.randn(3, 32, 32, generator=g)
        return image, label


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNetSmall(nn.Module):
    def __init__(self, classes=10, widths=(16, 32, 64)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        layers = []
        cin = widths[0]
        for i, w in enumerate(widths):
            layers.append(nn.Sequential(BasicBlock(cin, w, 1 if i == 0 else 2)))
            cin = w
        self.layer1, self.layer2, self.layer3 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


parser = wl.make_parser(__doc__.splitlines()[0], steps=100)
parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
parser.add_argument("--batch-size", type=int, default=8)

if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)

    batch_size = args.batch_size
    train_loader = DataLoader(SyntheticImages(), batch_size=batch_size, shuffle=True,
                              num_workers=args.workers, drop_last=True,
                              generator=torch.Generator().manual_seed(args.seed))
    model = ResNetSmall()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    trainer = wl.Trainer(model, train_loader, optimizer, nn.CrossEntropyLoss())

    model.train()
    loss = None
    for step in range(1, args.steps + 1):
        loss = trainer.train_step()
        wl.report_step(step, loss, args.print_every)
    wl.report_final(loss)
    wl.hold(args.hold_file)
