"""One rank of a 2-rank gloo job with an async collective one rank does not enter: the workload
of tests/integration/test_hang_report.py. Started with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT in the environment; runs until killed.

Three matching all_reduces, then "READY <rank>". Then rank 0 issues all_reduce(async_op=True)
and blocks in work.wait(), while rank 1 stays in hold_back as long as CONTROL.hold exists (the
test creates it before starting the job), then enters the matching all_reduce. Each rank prints
"COMPLETED <rank>" once its all_reduce is done, then idles.

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python async_job.py CONTROL
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def hold_back(control):
    while os.path.exists(f"{control}.hold"):
        time.sleep(0.05)


def main():
    control = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    for _ in range(3):
        dist.all_reduce(torch.ones(4))
    print(f"READY {rank}", flush=True)
    if rank == 0:
        work = dist.all_reduce(torch.ones(4), async_op=True)
        work.wait()
    else:
        hold_back(control)
        dist.all_reduce(torch.ones(4))
    print(f"COMPLETED {rank}", flush=True)
    while True:
        time.sleep(0.1)


if __name__ == "__main__":
    main()
