"""One rank of a gloo job, DDP (--wrap ddp, the default) or FSDP2 (--wrap fsdp2,
torch.distributed.fsdp.fully_shard), where one rank may spend extra time each step: the workload
of tests/integration/test_stragglers.py (4 ranks on this machine) and test_cluster_ranks8.py
(8 ranks on two network-namespace nodes). Started with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT in the environment; runs until killed.

Each step: a batch, a forward through a small MLP, backward, an optimizer step, then 20 ms of
the rest of the loop. With --slow-rank R and --slow-ms M, rank R spends about M ms more each
step (sleeping stands in for the slow code of one rank, as a slower input transform or a
throttled core would):
- --slow-in forward (DDP only): in a feature step of its model (a Python preprocessing of its
  activations); the others wait for it in DDP's gradient all-reduce.
- --slow-in batch: preparing its batch, before the forward. Under DDP with --batch-norm (a
  BatchNorm layer, whose buffers DDP broadcasts from rank 0 at the start of every forward) the
  others wait for it in that broadcast, not in the gradient all-reduce. Under FSDP2 (every
  Linear fully_shard'ed: all-gathers of each layer's parameters in forward and again in
  backward, reduce-scatters of its gradients) they wait in the first all-gather of the forward
  and then enter the rest together with it: it is last in few of the step's collectives, by
  far in one.
- --slow-in backward: in the backward of a feature step (an autograd function whose gradient
  takes slow_ms longer, as a custom kernel's backward would); under DDP the others wait for it
  in the gradient all-reduce, which its bucket starts only when that backward is done.
After 5 steps each rank prints "READY <rank>".

    RANK=0 WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python late_rank.py --slow-rank 2
    ... python late_rank.py --wrap fsdp2 --slow-in batch --slow-rank 1
"""
import argparse
import datetime
import time

import torch
import torch.distributed as dist
from torch import nn


class Features(nn.Module):
    """The rank's own preprocessing of its activations; on a slow rank it takes slow_ms longer."""

    def __init__(self, slow_ms):
        super().__init__()
        self.slow_s = slow_ms / 1e3

    def forward(self, x):
        if self.slow_s:
            time.sleep(self.slow_s)
        return x


class _SlowGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, slow_s):
        ctx.slow_s = slow_s
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.slow_s)
        return grad, None


class SlowBackward(nn.Module):
    """An identity whose backward takes slow_ms longer on a slow rank (none elsewhere)."""

    def __init__(self, slow_ms):
        super().__init__()
        self.slow_s = slow_ms / 1e3

    def forward(self, x):
        return _SlowGrad.apply(x, self.slow_s) if self.slow_s else x


def ddp_model(rank, slow_forward_ms, batch_norm, slow_backward_ms=0):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(rank)  # DDP broadcasts rank 0's parameters at construction
    layers = [nn.Linear(64, 256)] + ([nn.BatchNorm1d(256)] if batch_norm else [])
    layers += [nn.ReLU(), Features(slow_forward_ms), SlowBackward(slow_backward_ms),
               nn.Linear(256, 4)]
    return DDP(nn.Sequential(*layers))


def fsdp2_model(slow_backward_ms=0):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)  # fully_shard shards what each rank holds: the same on every rank
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          SlowBackward(slow_backward_ms), nn.Linear(256, 4))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    return fully_shard(model)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--wrap", choices=("ddp", "fsdp2"), default="ddp")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=30.0)
    p.add_argument("--slow-in", choices=("forward", "batch", "backward"), default="forward")
    p.add_argument("--batch-norm", action="store_true", help="DDP: a BatchNorm layer")
    args = p.parse_args()
    if args.wrap == "fsdp2" and (args.slow_in == "forward" or args.batch_norm):
        p.error("--wrap fsdp2 takes --slow-in batch or backward and no --batch-norm")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.set_num_threads(1)
    slow = args.slow_ms if rank == args.slow_rank else 0
    if args.wrap == "ddp":
        model = ddp_model(rank, slow if args.slow_in == "forward" else 0, args.batch_norm,
                          slow if args.slow_in == "backward" else 0)
    else:
        model = fsdp2_model(slow if args.slow_in == "backward" else 0)
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
