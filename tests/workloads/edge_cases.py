"""The module shapes that tracing must not disturb, in one small model trained with SGD:

- nn.ReLU(inplace=True) on a Linear's output (full module backward hooks break this),
  also inside a checkpointed block;
- a module returning a tuple, one taking two positional inputs, one returning a dict and taking
  a keyword argument;
- parameter-free modules (nn.Identity, a gate);
- one module called twice per forward (shared weights);
- user hooks: a forward pre-hook, a forward hook that changes the output and a full backward
  hook that changes the gradient, on a module with no inplace op on its input or output;
- torch.utils.checkpoint.checkpoint(use_reentrant=False) on a block, so its modules run
  forward again during backward.

With --vary-depth, a Linear+tanh is repeated 40 x (n % 4) times in the n-th forward, so the
autograd graph grows and shrinks from step to step (0 to 120 extra module calls).

It prints the final loss as float.hex() and the hook call counts, which must be the same with
and without probing. Globals for `probing eval`: model, train_loader, optimizer, batch_size,
trainer.

    python3 tests/workloads/edge_cases.py --steps 30
"""
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset

import _workload as wl


class SplitHeads(nn.Module):
    """Returns a tuple."""

    def __init__(self, width):
        super().__init__()
        self.proj = nn.Linear(width, 2 * width)

    def forward(self, x):
        a, b = self.proj(x).chunk(2, dim=-1)
        return a, b


class Gate(nn.Module):
    """Parameter-free, two positional inputs."""

    def forward(self, a, b):
        return a * torch.sigmoid(b)


class CheckpointedBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(width, width), nn.ReLU(inplace=True),
                                   nn.Linear(width, width))

    def forward(self, x):
        return x + checkpoint(self.inner, x, use_reentrant=False)


class DictHead(nn.Module):
    """Returns a dict and takes a keyword argument."""

    def __init__(self, width, classes):
        super().__init__()
        self.fc = nn.Linear(width, classes)

    def forward(self, x, *, temperature=1.0):
        return {"logits": self.fc(x) / temperature, "aux": x.pow(2).mean()}


class EdgeModel(nn.Module):
    def __init__(self, features, width, classes, vary_depth=False):
        super().__init__()
        self.extra = nn.Linear(width, width) if vary_depth else None
        self.forwards = 0
        self.stem = nn.Sequential(nn.Linear(features, width), nn.ReLU(inplace=True))
        self.shared = nn.Linear(width, width)
        self.split = SplitHeads(width)
        self.gate = Gate()
        self.identity = nn.Identity()
        self.hooked = nn.Linear(width, width)
        self.block = CheckpointedBlock(width)
        self.head = DictHead(width, classes)

    def forward(self, x):
        x = self.stem(x)
        x = torch.tanh(self.shared(x))
        x = self.shared(x) + x  # the same module, second call
        a, b = self.split(x)
        x = self.identity(self.gate(a, b))
        x = torch.tanh(self.hooked(x))  # no inplace op touches hooked's input or output
        self.forwards += 1
        if self.extra is not None:
            for _ in range(40 * (self.forwards % 4)):
                x = torch.tanh(self.extra(x))
        x = self.block(x)
        return self.head(x, temperature=2.0)


class HookCounts:
    def __init__(self):
        self.pre = self.forward = self.backward = 0

    def pre_hook(self, module, args):
        self.pre += 1

    def forward_hook(self, module, args, output):
        self.forward += 1
        return output * 0.9

    def backward_hook(self, module, grad_input, grad_output):
        self.backward += 1
        return tuple(None if g is None else g * 0.5 for g in grad_input)


def loss_fn(output, targets):
    return F.cross_entropy(output["logits"], targets) + 0.01 * output["aux"]


parser = wl.make_parser(__doc__.splitlines()[0], steps=30)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--vary-depth", action="store_true",
                    help="repeat a Linear 40 x (n %% 4) times in the n-th forward")

if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)

    features, width, classes = 24, 32, 5
    g = torch.Generator().manual_seed(777)
    inputs = torch.randn(512, features, generator=g)
    labels = (inputs[:, :classes] * 2 + inputs[:, classes:2 * classes]).argmax(dim=1)
    batch_size = args.batch_size
    train_loader = DataLoader(TensorDataset(inputs, labels), batch_size=batch_size, shuffle=True,
                              drop_last=True, generator=torch.Generator().manual_seed(args.seed))
    model = EdgeModel(features, width, classes, args.vary_depth)
    hooks = HookCounts()
    model.hooked.register_forward_pre_hook(hooks.pre_hook)
    model.hooked.register_forward_hook(hooks.forward_hook)
    model.hooked.register_full_backward_hook(hooks.backward_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    trainer = wl.Trainer(model, train_loader, optimizer, loss_fn)

    model.train()
    loss = None
    for step in range(1, args.steps + 1):
        loss = trainer.train_step()
        wl.report_step(step, loss, args.print_every)
    wl.say(f"hook calls: pre={hooks.pre} forward={hooks.forward} backward={hooks.backward}")
    wl.report_final(loss)
    wl.hold(args.hold_file)
