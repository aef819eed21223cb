"""GPU workloads for scripts/gpu_check.sh (run on a CUDA machine; never in CI).

    python3 workload.py KIND --steps N [--probing-free]

KIND:
  mlp    a small deterministic MLP (fp32, cuBLAS deterministic): prints each step's loss as
         float.hex, so runs with and without probing compare bit for bit
  heavy  4 bf16 Linear(8192, 8192) layers, batch 8192: GPU-bound (the host queues far ahead);
         the loss is read every 10th step only
  tiny   200 Linear(64, 64) layers, batch 32: many tiny kernels, launch-bound
  item   the heavy model with loss.item() on every step: the host waits for the device there
  nccl   one-rank NCCL process group: an all_reduce of 256 MB per step beside a little compute

heavy also prints `EVENTS fwd_ms=.. bwd_ms=..`: medians of torch.cuda.Event pairs around model(x)
and loss.backward() in the same steps (from the first quarter on), the reference gpu_check
compares probing's device times with.
Prints `STEP_MS <median ms>` (whole-step time from the host, synchronised every 10 steps) last.
"""
import argparse
import os
import statistics
import time

import torch
import torch.nn as nn


def model_for(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    if kind in ("heavy", "item"):
        return nn.Sequential(*[nn.Linear(8192, 8192, bias=False) for _ in range(4)]).to(torch.bfloat16)
    if kind == "tiny":
        return nn.Sequential(*[nn.Linear(64, 64) for _ in range(200)])
    if kind == "nccl":
        return nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096))
    raise SystemExit(f"unknown kind {kind}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind")
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    dev = torch.device("cuda")
    model = model_for(args.kind).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    if args.kind == "mlp":
        x = torch.randn(512, 256, device=dev)
        y = torch.randint(0, 10, (512,), device=dev)
    elif args.kind in ("heavy", "item"):
        x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    elif args.kind == "tiny":
        x = torch.randn(32, 64, device=dev)
    else:
        x = torch.randn(1024, 4096, device=dev)
    if args.kind == "nccl":
        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=0, world_size=1)
        payload = torch.ones(64 * 1024 * 1024, device=dev)  # 256 MB
    times = []
    # heavy: the reference, torch.cuda.Event pairs around model(x) and loss.backward() in the same
    # steps probing measures (read once the step is done: at every 10th step's synchronize)
    ref = args.kind == "heavy"
    ref_fwd, ref_bwd, pending = [], [], []
    t0 = time.perf_counter()
    for step in range(args.steps):
        if ref:
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            ev[0].record()
        out = model(x)
        if ref:
            ev[1].record()
        if args.kind == "mlp":
            loss = nn.functional.cross_entropy(out, y)
        else:
            loss = out.float().pow(2).mean()
        if ref:
            ev[2].record()
        loss.backward()
        if ref:
            ev[3].record()
            if step >= args.steps // 4:
                pending.append(ev)
        if args.kind == "nccl":
            dist.all_reduce(payload)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if args.kind == "mlp":
            print("LOSS", step, loss.item().hex(), flush=True)
        elif args.kind == "item":
            loss.item()
        if step % 10 == 9:
            if args.kind != "mlp":
                loss.item()
            torch.cuda.synchronize()
            for e in pending:
                ref_fwd.append(e[0].elapsed_time(e[1]))
                ref_bwd.append(e[2].elapsed_time(e[3]))
            pending = []
            t1 = time.perf_counter()
            times.append((t1 - t0) / 10 * 1000)
            t0 = t1
    torch.cuda.synchronize()
    if ref_fwd:
        print(f"EVENTS fwd_ms={statistics.median(ref_fwd):.4f} bwd_ms={statistics.median(ref_bwd):.4f} steps={len(ref_fwd)}", flush=True)
    if args.kind == "nccl":
        import torch.distributed as dist
        dist.destroy_process_group()
    if times:
        print(f"STEP_MS {statistics.median(times[1:] or times):.4f}", flush=True)


if __name__ == "__main__":
    main()
