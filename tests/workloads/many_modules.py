"""Hundreds of tiny modules: a deep stack of small Linear + activation blocks in nested
containers, trained with SGD. The per-module work is small, so this is the worst case for the
cost probing adds per module call (bench/ uses it for the overhead benchmark).

Globals for `probing eval`: model, train_loader, optimizer, batch_size, trainer.

    python3 tests/workloads/many_modules.py --steps 100
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import _workload as wl


class Scale(nn.Module):
    """Parameter-free: multiplies by a constant."""

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class TinyBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.Tanh()
        self.scale = Scale(0.5)

    def forward(self, x):
        return x + self.scale(self.act(self.fc(x)))


class Stage(nn.Module):
    def __init__(self, width, blocks):
        super().__init__()
        self.blocks = nn.Sequential(*(TinyBlock(width) for _ in range(blocks)))
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(self.blocks(x))


class ManyModules(nn.Module):
    def __init__(self, width=16, stages=4, blocks_per_stage=16, classes=4):
        super().__init__()
        self.stem = nn.Linear(width, width)
        self.stages = nn.ModuleList(Stage(width, blocks_per_stage) for _ in range(stages))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.head(x)


parser = wl.make_parser(__doc__.splitlines()[0], steps=100)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--blocks-per-stage", type=int, default=16)

if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)

    width, classes = 16, 4
    g = torch.Generator().manual_seed(4321)
    inputs = torch.randn(1024, width, generator=g)
    labels = (inputs[:, :classes].argmax(dim=1))
    batch_size = args.batch_size
    train_loader = DataLoader(TensorDataset(inputs, labels), batch_size=batch_size, shuffle=True,
                              drop_last=True, generator=torch.Generator().manual_seed(args.seed))
    model = ManyModules(width, blocks_per_stage=args.blocks_per_stage, classes=classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    trainer = wl.Trainer(model, train_loader, optimizer, nn.CrossEntropyLoss())

    model.train()
    loss = None
    for step in range(1, args.steps + 1):
        loss = trainer.train_step()
        wl.report_step(step, loss, args.print_every)
    wl.report_final(loss)
    wl.hold(args.hold_file)
