"""One rank of a small gloo job that keeps training until it is killed: the workload of the
multi-node tests (tests/integration/test_cluster.py). Started once per rank with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment (no torchrun, so a test can put
ranks on different network namespaces).

Each step: load_batch() (which sleeps while CONTROL.sleep.<rank> exists: a rank stuck in its
input pipeline; CONTROL.slow.<rank> makes it take 30 ms more), a forward/backward on a small linear model, an optimizer step, then an
all_reduce of the loss on the default group, so the other ranks wait for a sleeping one in that
all_reduce. With --grad-kb N, an all_reduce of N KB of gradients follows (the gradient sync of
a data-parallel job, big enough for the link's speed to matter). With --width W the model is
two W-wide layers on a batch of 64 (a few milliseconds of CPU a step at 512, so a node whose CPU
is throttled falls behind); the default is one 16-wide layer. After 3 steps each rank
prints "READY <rank>". About 20 steps a second (fewer with --grad-kb).

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python cluster_job.py CONTROL
"""
import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist


def load_batch(control, rank, width):
    while os.path.exists(f"{control}.sleep.{rank}"):
        time.sleep(0.05)
    if os.path.exists(f"{control}.slow.{rank}"):
        time.sleep(0.03)
    return torch.randn(64 if width > 16 else 8, width)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("control")
    p.add_argument("--grad-kb", type=int, default=0)
    p.add_argument("--width", type=int, default=16)
    args = p.parse_args()
    control = args.control
    grads = torch.ones(args.grad_kb * 256) if args.grad_kb else None  # float32: 256 a KB
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    w = args.width
    model = (torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, 4))
             if w > 16 else torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while True:
        x = load_batch(control, rank, w)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        total = loss.detach().clone()
        dist.all_reduce(total)
        if grads is not None:
            dist.all_reduce(grads)
            grads.div_(dist.get_world_size())  # an average, as DDP's: stays 1.0
        step += 1
        if step == 3:
            print(f"READY {rank}", flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    main()
