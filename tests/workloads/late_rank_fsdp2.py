"""One rank of a 4-rank gloo FSDP2 job (torch.distributed.fsdp.fully_shard) where one rank may
spend extra time preparing its batch: the FSDP workload of tests/integration/test_stragglers.py.
Started with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment; runs until killed.

Each step: a batch (on the slow rank, --slow-ms more of Python work before the forward: a slower
input transform; sleeping stands in for it), a forward through a 3-layer MLP whose layers are
each fully_shard'ed (FSDP2 all-gathers every layer's parameters in forward and again in
backward, and reduce-scatters its gradients), backward, an optimizer step. The others wait for
the slow rank in the first all-gather of its forward and then enter the rest together with it:
it is last in few of the step's collectives, by far in one. After 5 steps each rank prints
"READY <rank>".

    RANK=0 WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python late_rank_fsdp2.py --slow-rank 1
"""
import argparse
import datetime
import time

import torch
import torch.distributed as dist
from torch import nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=30.0)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    from torch.distributed.fsdp import fully_shard

    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 4))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    slow_s = args.slow_ms / 1e3 if rank == args.slow_rank else 0
    step = 0
    while True:
        x = torch.randn(32, 64)
        if slow_s:
            time.sleep(slow_s)  # this rank's slower batch preparation
        y = x[:, :4].argmax(dim=1)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        step += 1
        if step == 5:
            print(f"READY {rank}", flush=True)
        time.sleep(0.02)  # the rest of the loop: logging, checkpoint bookkeeping


if __name__ == "__main__":
    main()
