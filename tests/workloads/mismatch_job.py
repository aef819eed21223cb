"""One rank of a 2-rank gloo job whose ranks disagree on a collective: the workload of
tests/integration/test_hang_report.py. Three matching all_reduces (4 floats), then "READY
<rank>", then at the same sequence number rank 0 calls all_reduce of 8 floats (32 bytes) and
rank 1 broadcast of 4 floats (16 bytes) from itself. gloo leaves both waiting (an all_reduce
of different sizes instead makes gloo abort the process: "Received data size doesn't match
expected size"), so `probing hang` sees them. Started with RANK, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT in the environment; runs until killed.

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python mismatch_job.py
"""
import datetime
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    for _ in range(3):
        dist.all_reduce(torch.ones(4))
    print(f"READY {rank}", flush=True)
    try:
        if rank == 0:
            dist.all_reduce(torch.ones(8))
        else:
            dist.broadcast(torch.ones(4), src=1)
        print(f"COMPLETED {rank}", flush=True)
    except Exception as e:  # should gloo notice: stay alive and say so
        print(f"RAISED {rank} {type(e).__name__}: {e}", flush=True)
    while True:
        time.sleep(0.1)


if __name__ == "__main__":
    main()
