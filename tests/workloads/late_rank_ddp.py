"""One rank of a 4-rank gloo DDP job where one rank may spend extra time in its forward: the
workload of tests/integration/test_stragglers.py. Started with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT in the environment; runs until killed.

Each step: a batch, a forward through a small MLP wrapped in DDP, backward (DDP's gradient
all-reduce, where the others wait for a late rank), an optimizer step. With --slow-rank R and
--slow-ms M, rank R's model runs a feature step that costs about M ms more each forward (a
Python preprocessing of its activations: sleeping stands in for the slow code of one rank, as a
slower input transform or a throttled core would). With --slow-in batch the slow rank spends the
time preparing its batch, before the forward, and --batch-norm gives the model a BatchNorm
layer, whose buffers DDP broadcasts from rank 0 at the start of every forward: the others then
wait for the slow rank in that broadcast, not in the gradient all-reduce. After 5 steps each
rank prints "READY <rank>".

    RANK=0 WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python late_rank_ddp.py --slow-rank 2
"""
import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Features(nn.Module):
    """The rank's own preprocessing of its activations; on a slow rank it takes slow_ms longer."""

    def __init__(self, slow_ms):
        super().__init__()
        self.slow_s = slow_ms / 1e3

    def forward(self, x):
        if self.slow_s:
            time.sleep(self.slow_s)
        return x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=30.0)
    p.add_argument("--slow-in", choices=("forward", "batch"), default="forward")
    p.add_argument("--batch-norm", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    slow = args.slow_ms if rank == args.slow_rank else 0
    layers = [nn.Linear(64, 256)] + ([nn.BatchNorm1d(256)] if args.batch_norm else [])
    layers += [nn.ReLU(), Features(slow if args.slow_in == "forward" else 0), nn.Linear(256, 4)]
    model = DDP(nn.Sequential(*layers))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    while True:
        x = torch.randn(32, 64)
        if slow and args.slow_in == "batch":
            time.sleep(slow / 1e3)  # this rank's slower batch preparation
        y = x[:, :4].argmax(dim=1)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        step += 1
        if step == 5:
            print(f"READY {rank}", flush=True)
        time.sleep(0.02)  # the rest of the loop: logging, checkpoint bookkeeping


if __name__ == "__main__":
    main()
