"""Training loops written as the users of three frameworks write them, for
tests/realworld/test_frameworks.py:

  lightning    PyTorch Lightning: Trainer.fit with validation every few batches and
               accumulate_grad_batches (forward and backward run inside optimizer.step(closure))
  accelerate   Hugging Face accelerate: Accelerator(gradient_accumulation_steps) with
               accelerator.accumulate(model)
  fsdp         FSDP2 (torch.distributed.fsdp.fully_shard) on two gloo ranks, under torchrun:
               all-gathers and reduce-scatters run inside module forward and backward

Each prints `optimizer steps N` at the end: the framework's own count (Lightning's
trainer.global_step; accelerate's sync_gradients steps). A planted cause (--plant) slows the job
as users' code does: `host` sleeps in training_step (host work in the closure), `collate` sleeps
in the DataLoader's collate_fn (1.5 ms per sample, as a tokenizer would), `leak` keeps every
step's loss tensor (with its graph and activations) in a list.

  python frameworks.py lightning [--plant host] [--batches 24]
"""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)


def dataset(n):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 64, generator=g)
    y = (x[:, :8].sum(1) > 0).long()
    return TensorDataset(x, y)


def net():
    return nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 2))


def slow_collate(batch):
    time.sleep(0.0015 * len(batch))
    return torch.utils.data.default_collate(batch)


def lightning(args):
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl

    class Classifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = net()
            self.loss = nn.CrossEntropyLoss()

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = self.loss(self.model(x), y)
            if args.plant == "host":
                time.sleep(0.02)  # host work in the step (logging, metrics, a .tolist())
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", self.loss(self.model(x), y))

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    collate = slow_collate if args.plant == "collate" else None
    train = DataLoader(dataset(64 * args.batches), batch_size=64, collate_fn=collate)
    val = DataLoader(dataset(128), batch_size=64)
    trainer = pl.Trainer(max_epochs=1, accumulate_grad_batches=2, val_check_interval=8, limit_val_batches=2,
                         accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Classifier(), train, val)
    print(f"optimizer steps {trainer.global_step}", flush=True)


def accelerate(args):
    from accelerate import Accelerator

    torch.manual_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=2, cpu=True)
    model = net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    collate = slow_collate if args.plant == "collate" else None
    loader = DataLoader(dataset(64 * args.batches), batch_size=64, collate_fn=collate)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    loss_fn = nn.CrossEntropyLoss()
    steps = 0
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = loss_fn(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        steps += accelerator.sync_gradients
    print(f"optimizer steps {steps}", flush=True)


def fsdp(args):
    import os

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    model = net()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = 1024  # per rank: enough work per step that the all-gathers of 4 MB layers are not most of it
    data = dataset(batch * dist.get_world_size() * args.batches)
    sampler = torch.utils.data.distributed.DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=batch, sampler=sampler)
    loss_fn = nn.CrossEntropyLoss()
    kept, steps = [], 0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        steps += 1
        if args.plant == "leak":
            kept.append(loss)  # the classic: a running list of losses, each holding its graph
    print(f"rank {os.environ.get('RANK')} optimizer steps {steps}", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("framework", choices=["lightning", "accelerate", "fsdp"])
    p.add_argument("--plant", choices=["none", "host", "collate", "leak"], default="none")
    p.add_argument("--batches", type=int, default=24)
    args = p.parse_args()
    {"lightning": lightning, "accelerate": accelerate, "fsdp": fsdp}[args.framework](args)


if __name__ == "__main__":
    main()
