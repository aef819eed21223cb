"""Data-parallel training started with torch.multiprocessing.spawn, as PyTorch's DDP tutorial
writes it (MASTER_ADDR/MASTER_PORT set by the parent, rank and world size passed to
init_process_group), on CPU with gloo:

    python3 tests/workloads/spawn_ddp.py --steps 40 --port 29533

A straggler can be planted: --slow-rank R gives rank R a batch --slow-factor times larger (more
forward and backward work per step); the other rank waits for it in DDP's gradient all-reduce.
The training data goes through a DataLoader with --workers worker processes (they must stay
untraced). Each rank prints "rank R pid P", and with --hold-file waits for PATH.<rank> at the end.
"""
import gc
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

from _workload import hold, make_deterministic, make_parser, report_final, report_step, say


def train(rank, world_size, args):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    make_deterministic(args.seed)
    say(f"rank {rank} pid {os.getpid()}")
    batch = args.batch_size * (args.slow_factor if rank == args.slow_rank else 1)
    g = torch.Generator().manual_seed(rank)
    inputs = torch.randn(batch * 8, 128, generator=g)
    labels = inputs[:, :4].argmax(dim=1)
    loader = DataLoader(TensorDataset(inputs, labels), batch_size=batch, shuffle=True,
                        num_workers=args.workers, persistent_workers=args.workers > 0)
    model = DDP(nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    step, loss = 0, None
    while step < args.steps:
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if rank == 0:
                report_step(step, loss, args.print_every)
            if step == args.steps:
                break
    if rank == 0:
        report_final(loss)
    hold(f"{args.hold_file}.{rank}" if args.hold_file else None)
    # DDP's Reducer goes before the process group. A Reducer that holds the group's last
    # reference destroys it with the GIL held, and the group's destructor then waits for gloo's
    # worker thread, which may still be freeing its last work's tensors and so waits for the GIL:
    # a hang at exit (pytorch/pytorch#56297), seen here in tests/workloads/ddp_gloo.py.
    del model
    gc.collect()
    dist.destroy_process_group()


def main():
    parser = make_parser(__doc__.splitlines()[0], steps=40)
    parser.add_argument("--port", type=int, default=29533)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-factor", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    mp.spawn(train, args=(args.world_size, args), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
