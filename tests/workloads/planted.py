"""Training runs with one planted cause each, for `probing <target> report` (tests/integration/
test_report.py). All are small CPU trainings of an MLP on synthetic data; --case picks what is
wrong with it:

    healthy        a balanced run: nothing for the report to flag
    slow_data      the Dataset sleeps in __getitem__ (an input pipeline slower than compute)
    heavy_compute  one wide layer does almost all the work (compute-bound, one module to blame)
    big_optimizer  Adam also updates a huge extra parameter tensor the model never uses
    tiny_modules   hundreds of tiny modules per step (host/per-call overhead dominates)
    leak           every step appends a 4 MB tensor to a global list (memory grows across steps)

--delay-ms MS adds a module `delay` (healthy case) whose forward sleeps MS: one module made
slower by a known amount, for `probing compare` (tests/integration/test_compare.py).

Globals for `probing eval`: model, train_loader, optimizer, batch_size, trainer.

    python3 tests/workloads/planted.py --case slow_data --steps 40
"""
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import _workload as wl

CASES = ("healthy", "slow_data", "heavy_compute", "big_optimizer", "tiny_modules", "leak")


class SlowDataset(Dataset):
    """Each sample takes `delay_s` to "load"."""

    def __init__(self, inputs, labels, delay_s):
        self.inputs, self.labels, self.delay_s = inputs, labels, delay_s

    def __len__(self):
        return len(self.inputs)

    def __getitem__(self, i):
        time.sleep(self.delay_s)
        return self.inputs[i], self.labels[i]


class Delay(nn.Module):
    """The planted slowdown of compare's tests: its forward sleeps `ms` (0: nothing)."""

    def __init__(self, ms):
        super().__init__()
        self.ms = ms

    def forward(self, x):
        if self.ms > 0:
            time.sleep(self.ms / 1000)
        return x


class MLP(nn.Module):
    def __init__(self, width, hidden, classes, depth=2, delay_ms=None):
        super().__init__()
        if delay_ms is not None:
            self.delay = Delay(delay_ms)
        layers = [nn.Linear(width, hidden), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(hidden, hidden), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        if hasattr(self, "delay"):
            x = self.delay(x)
        return self.head(self.body(x))


class Tiny(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.Tanh()

    def forward(self, x):
        return x + self.act(self.fc(x))


class ManyTiny(nn.Module):
    def __init__(self, width, blocks, classes):
        super().__init__()
        self.blocks = nn.Sequential(*(Tiny(width) for _ in range(blocks)))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.blocks(x))


class Wide(nn.Module):
    """A small stem, one very wide layer (the planted hot spot), a small head."""

    def __init__(self, width, classes):
        super().__init__()
        self.stem = nn.Linear(width, 64)
        self.wide = nn.Sequential(nn.Linear(64, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                                  nn.Linear(2048, 64))
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        return self.head(self.wide(torch.relu(self.stem(x))))


parser = wl.make_parser(__doc__.splitlines()[0], steps=40)
parser.add_argument("--case", choices=CASES, default="healthy")
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--hidden", type=int, default=1024, help="healthy case: the MLP's width")
parser.add_argument("--delay-ms", type=float, default=None,
                    help="healthy case: a module `delay` whose forward sleeps this long "
                         "(0: the module, doing nothing; `probing compare`'s planted change)")

leaked = []  # the leak case keeps every step's tensor here

if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)
    width, classes = 64, 8
    g = torch.Generator().manual_seed(4321)
    inputs = torch.randn(4096, width, generator=g)
    labels = inputs[:, :classes].argmax(dim=1)
    batch_size = args.batch_size
    dataset = (SlowDataset(inputs, labels, 0.001) if args.case == "slow_data"
               else TensorDataset(inputs, labels))
    train_loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True,
                              generator=torch.Generator().manual_seed(args.seed))
    if args.case == "tiny_modules":
        model = ManyTiny(8, 150, classes)
        inputs8 = inputs[:, :8].contiguous()
        train_loader = DataLoader(TensorDataset(inputs8, labels), batch_size=batch_size,
                                  shuffle=True, drop_last=True,
                                  generator=torch.Generator().manual_seed(args.seed))
    elif args.case == "heavy_compute":
        model = Wide(width, classes)
    else:
        model = MLP(width, args.hidden, classes, depth=3, delay_ms=args.delay_ms)
    params = list(model.parameters())
    if args.case == "big_optimizer":
        # An extra 4M-element tensor only the optimizer touches: Adam's update of it costs far
        # more than the model's forward and backward.
        extra = nn.Parameter(torch.zeros(4_000_000))
        extra.grad = torch.zeros_like(extra)
        optimizer = torch.optim.Adam(params + [extra], lr=1e-3, foreach=False)
    else:
        optimizer = torch.optim.SGD(params, lr=0.01)
    trainer = wl.Trainer(model, train_loader, optimizer, nn.CrossEntropyLoss())
    if args.case == "big_optimizer":
        # zero_grad(set_to_none=True) would drop the extra gradient; keep it.
        def zero_grad(set_to_none=True):
            for p in params:
                p.grad = None
        optimizer.zero_grad = zero_grad

    model.train()
    loss = None
    for step in range(1, args.steps + 1):
        loss = trainer.train_step()
        if args.case == "leak":
            leaked.append(torch.ones(1024 * 1024))  # 4 MB per step, never freed
        wl.report_step(step, loss, args.print_every)
    wl.report_final(loss)
    wl.hold(args.hold_file)
