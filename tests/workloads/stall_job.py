"""One rank of a 3-rank gloo job that can stall with no rank inside a collective: the workload
of tests/integration/test_hang_stall.py. Started with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT in the environment; runs until killed.

Each step: a forward/backward on a small linear model, an optimizer step (the step boundary),
then an all_reduce of [loss, stall] on the default group, where rank 0 puts stall = 1 while
CONTROL.stall exists. The all_reduce gives every rank the same answer at the same step, so all
of them stop after it, outside any collective, until CONTROL.stall is removed: ranks 0 and 1 in
load_batch (an input pipeline that stopped delivering), the last rank in wait_for_lock (user code
waiting on an event nobody sets, inside threading.py). After 3 steps each rank prints "READY <rank>". About 20 steps
a second.

    RANK=0 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python stall_job.py CONTROL
"""
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist


def load_batch(control):
    while os.path.exists(f"{control}.stall"):
        time.sleep(0.05)
    return torch.randn(8, 16)


def wait_for_lock(control, released):
    # threading.Event.wait is Python code of the standard library (threading.py): the rank must
    # still be named at this line, where its own code waits
    while os.path.exists(f"{control}.stall"):
        released.wait(timeout=0.05)
    return torch.randn(8, 16)


def main():
    control = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    released = threading.Event()  # nobody sets it
    stall, step = False, 0
    while True:
        x = wait_for_lock(control, released) if stall and rank == world - 1 else (
            load_batch(control) if stall else torch.randn(8, 16))
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        flag = 1.0 if rank == 0 and os.path.exists(f"{control}.stall") else 0.0
        total = torch.tensor([loss.item(), flag])
        dist.all_reduce(total)
        stall = total[1].item() > 0
        step += 1
        if step == 3:
            print(f"READY {rank}", flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    main()
