"""FSDP2 (torch.distributed.fsdp.fully_shard) on one gloo rank: every parameter, its gradient and
Adam's state are DTensors, whose bytes live in each rank's local shard (DTensor._local_tensor).
Trains --steps steps of a 64-256-8 MLP with Adam and prints "final loss" (the memory breakdown
test, tests/integration/test_distributed.py, checks python.memory_breakdown against it).

    python fsdp2_sharded.py --steps 5
"""
import argparse
import os

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--port", type=int, default=29731)
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 8))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss = None
    for _ in range(args.steps):
        loss = model(torch.randn(16, 64)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    print(f"parameter type: {type(next(model.parameters())).__name__}")
    print(f"final loss: {loss.item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
