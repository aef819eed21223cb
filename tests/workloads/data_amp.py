"""A classifier fed by a real DataLoader, optionally with slow samples, worker processes, an
iterable dataset, bf16 autocast with a GradScaler, a forced inf gradient and growing memory.

What the collectors must see (tests/integration/test_collectors_local.py):
  --sleep S         each sample takes S seconds to load: python.dataloader_trace.wait shows it
  --num-workers W   DataLoader worker processes (0: loaded in the training loop)
  --iterable        an IterableDataset instead of a map-style one
  --amp             torch.autocast('cpu', dtype=torch.bfloat16) around the forward and loss, and
                    torch.amp.GradScaler('cpu') around backward and the optimizer step
  --amp-first       autocast around the first Linear only (the rest in float32: partial autocast)
  --inf-at N        at step N the loss is multiplied by inf: the GradScaler skips that step
  --grow-mb M       every step keeps M more MB alive (python.memory shows the growth)
Epochs are short (--samples), so StopIteration ends several epochs during a run.

Prints "step N loss X" lines and "final loss: <float.hex()>". Globals for `probing eval`:
model, optimizer, loader, scaler.

    python3 tests/workloads/data_amp.py --steps 20 --amp --num-workers 2 --sleep 0.002
"""
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

import _workload as wl

FEATURES, CLASSES = 16, 4


class FirstLayerAmp(nn.Module):
    """--amp-first: autocast around the first layer only, as a model's own forward writes it."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = self.net[0](x)
        return self.net[2](self.net[1](hidden.float()))


def make_data(samples):
    g = torch.Generator().manual_seed(7)
    return torch.randn(samples, FEATURES, generator=g), torch.randint(0, CLASSES, (samples,), generator=g)


class SlowMapDataset(Dataset):
    def __init__(self, samples, sleep):
        self.x, self.y = make_data(samples)
        self.sleep = sleep

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.sleep:
            time.sleep(self.sleep)
        return self.x[i], self.y[i]


class SlowIterableDataset(IterableDataset):
    def __init__(self, samples, sleep):
        self.x, self.y = make_data(samples)
        self.sleep = sleep

    def __iter__(self):
        info = get_worker_info()
        start, stride = (info.id, info.num_workers) if info else (0, 1)
        for i in range(start, len(self.x), stride):
            if self.sleep:
                time.sleep(self.sleep)
            yield self.x[i], self.y[i]


parser = wl.make_parser(__doc__.splitlines()[0], steps=20)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--samples", type=int, default=24, help="samples per epoch")
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--num-workers", type=int, default=0)
parser.add_argument("--iterable", action="store_true")
parser.add_argument("--amp", action="store_true")
parser.add_argument("--amp-first", action="store_true")
parser.add_argument("--inf-at", type=int, default=-1)
parser.add_argument("--grow-mb", type=int, default=0)

if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)
    kind = SlowIterableDataset if args.iterable else SlowMapDataset
    dataset = kind(args.samples, args.sleep)
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers,
                        shuffle=False)
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))
    if args.amp_first:
        model = FirstLayerAmp(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler("cpu", enabled=args.amp)
    kept = []
    loss = None
    step = 0
    batches = iter(loader)
    while step < args.steps:
        try:
            inputs, targets = next(batches)
        except StopIteration:  # end of an epoch: start the next one
            batches = iter(loader)
            continue
        step += 1
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
            loss = loss_fn(model(inputs), targets)
        if step == args.inf_at:
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if args.grow_mb:
            kept.append(torch.ones(args.grow_mb * 262144))  # float32: 4 bytes each
        wl.report_step(step, loss.detach(), args.print_every)
    wl.report_final(None if loss is None else loss.detach())
    wl.hold(args.hold_file)
