"""Data-parallel training on CPU with the gloo backend: run under torchrun, e.g.

    torchrun --nproc_per_node 2 tests/workloads/ddp_gloo.py --steps 5

A small MLP wrapped in DistributedDataParallel (with --comm-hook, torch's allreduce_hook
registered as its communication hook); each step also averages the loss across ranks
with an explicit dist.all_reduce (what training loops do for logging), and the run starts with a
barrier and a broadcast and ends with an async all_gather_into_tensor. Rank 0 prints the step
lines and the final loss; every rank holds at the end when --hold-file is given (each rank waits
for PATH.<rank>).

Load imbalance can be planted: --slow-rank R --slow-ms M makes rank R sleep M ms in each step
before its forward (a rank whose input pipeline is slower); the other ranks then wait for it in
the gradient all-reduce. --width W sets the hidden width (more work per step).
"""
import gc
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from _workload import hold, make_deterministic, make_parser, report_final, report_step, say


def main():
    parser = make_parser(__doc__, steps=5)
    parser.add_argument("--comm-hook", action="store_true",
                        help="register torch's allreduce_hook as DDP's communication hook")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-ms", type=float, default=0.0)
    parser.add_argument("--width", type=int, default=64)
    args = parser.parse_args()
    make_deterministic(args.seed)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DistributedDataParallel(nn.Sequential(nn.Linear(32, args.width), nn.ReLU(),
                                                  nn.Linear(args.width, 4)))
    if args.comm_hook:  # the program's own DDP communication hook (torch's allreduce_hook)
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, default_hooks.allreduce_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    dist.barrier()
    start = torch.zeros(1)
    if rank == 0:
        start += 1
    dist.broadcast(start, src=0)
    g = torch.Generator().manual_seed(1000 + rank)
    loss = None
    for step in range(args.steps):
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 4, generator=g)
        optimizer.zero_grad()
        if rank == args.slow_rank:
            time.sleep(args.slow_ms / 1000.0)
        out = loss_fn(model(x), y)
        out.backward()
        optimizer.step()
        mean = out.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        loss = mean
        if rank == 0:
            report_step(step + 1, mean, args.print_every)
    gathered = torch.zeros(world, dtype=torch.float64)
    work = dist.all_gather_into_tensor(gathered, torch.full((1,), float(rank), dtype=torch.float64),
                                       async_op=True)
    work.wait()
    if rank == 0:
        report_final(loss)
    say(f"rank {rank} pid {os.getpid()}")
    dist.barrier()
    if args.hold_file:
        hold(f"{args.hold_file}.{rank}")
    # DDP's Reducer goes before the process group. A Reducer that holds the group's last
    # reference destroys it with the GIL held, and the group's destructor then waits for gloo's
    # worker thread, which may still be freeing its last work's tensors and so waits for the GIL:
    # a hang at exit (pytorch/pytorch#56297), seen here about once in ten plain runs.
    del model
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
