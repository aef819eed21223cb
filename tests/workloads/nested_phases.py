"""Phases nested as frameworks nest them, in a plain loop: --mode closure runs forward, backward
and --host-ms of host work inside optimizer.step(closure) (Lightning's automatic optimisation,
LBFGS), the closure passed positionally; --mode checkpoint recomputes the model's blocks inside
backward (torch.utils.checkpoint). --accumulate micro-batches per optimizer step.

Prints "step N" lines and at the end "final loss: <float.hex()>". Globals for `probing eval`:
model, optimizer.

    python3 tests/workloads/nested_phases.py --mode closure --steps 10 --host-ms 20
"""
import time

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import _workload as wl


class Blocks(nn.Module):
    def __init__(self, width=256, depth=3, recompute=False):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth))
        self.head = nn.Linear(width, 10)
        self.recompute = recompute

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.recompute else block(x)
        return self.head(x)


parser = wl.make_parser(__doc__.splitlines()[0], steps=10)
parser.add_argument("--mode", choices=["closure", "checkpoint"], default="closure")
parser.add_argument("--host-ms", type=float, default=0.0)
parser.add_argument("--accumulate", type=int, default=1)

if __name__ == "__main__":
    args = parser.parse_args()
    wl.make_deterministic(args.seed)
    model = Blocks(recompute=args.mode == "checkpoint")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(7)
    loss = None

    def micro_batch():
        x = torch.randn(64, 256, generator=g)
        y = torch.randint(0, 10, (64,), generator=g)
        out = loss_fn(model(x), y)
        (out / args.accumulate).backward()
        return out

    for step in range(1, args.steps + 1):
        for _ in range(args.accumulate - 1):
            micro_batch()

        def closure():
            global loss
            loss = micro_batch()
            if args.host_ms:
                time.sleep(args.host_ms / 1000)  # host work in the step: logging, metrics
            return loss

        if args.mode == "closure":
            optimizer.step(closure)
        else:
            closure()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        wl.report_step(step, loss, args.print_every)
    wl.report_final(loss)
    wl.hold(args.hold_file)
