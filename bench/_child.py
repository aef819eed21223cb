"""One measurement for bench/overhead.py: trains (or runs) one model in one mode, prints JSON.

    python3 bench/_child.py --mode plain|probing|pyhooks --model many|resnet|transformer|noop

Modes: plain = nothing attached; probing = `import probing` first (the agent with its default
recording, exactly what `probing run` / PROBING=1 do); probing-fwd = the same with
PROBING_BACKWARD=0 (no autograd node hooks: forward and optimizer rows only); pyhooks = no-op Python global forward
pre/post hooks (the cheapest thing a Python-hook profiler could do).
Timing: time.perf_counter_ns around each whole training step (forward, loss, backward,
optimizer step, zero_grad), after --warmup steps.
"""
import argparse
import json
import os
import statistics
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--mode", required=True, choices=["plain", "probing", "probing-fwd", "pyhooks"])
p.add_argument("--model", required=True, choices=["many", "resnet", "transformer", "noop"])
p.add_argument("--warmup", type=int, default=10)
p.add_argument("--steps", type=int, default=40)
args = p.parse_args()

if args.mode in ("probing", "probing-fwd"):
    if args.mode == "probing-fwd":
        os.environ["PROBING_BACKWARD"] = "0"  # forward and optimizer rows only
    import probing  # noqa: F401  starts the agent; hooks go in when torch is imported

import torch
from torch import nn

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "workloads"))
torch.manual_seed(0)
torch.set_num_threads(1)

if args.mode == "pyhooks":
    def _pre(module, inputs):
        return None

    def _post(module, inputs, output):
        return None

    torch.nn.modules.module.register_module_forward_pre_hook(_pre)
    torch.nn.modules.module.register_module_forward_hook(_post)


class Noop(nn.Module):
    def forward(self, x):
        return x


def build():
    if args.model == "many":
        from many_modules import ManyModules
        model = ManyModules()
        x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    elif args.model == "resnet":
        from resnet_inplace import ResNetSmall
        model = ResNetSmall()
        x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    elif args.model == "transformer":
        import types
        from transformer import TinyTransformer
        cfg = types.SimpleNamespace(vocab_size=64, hidden_size=64, num_attention_heads=4,
                                    num_hidden_layers=4, max_position_embeddings=32)
        model = TinyTransformer(cfg)
        x = torch.randint(0, cfg.vocab_size, (8, cfg.max_position_embeddings))
        y = torch.randint(0, cfg.vocab_size, (8, cfg.max_position_embeddings))
    else:
        model = nn.Sequential(*(Noop() for _ in range(1000)))
        x, y = torch.randn(4), None
    return model, x, y


model, x, y = build()
n_modules = sum(1 for _ in model.modules())
times = []
if args.model == "noop":
    # Forward only, no autograd: isolates the cost of one module call (pre-hook + post-hook).
    with torch.no_grad():
        for i in range(args.warmup + args.steps):
            t0 = time.perf_counter_ns()
            model(x)
            t1 = time.perf_counter_ns()
            if i >= args.warmup:
                times.append(t1 - t0)
else:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter_ns()
        out = model(x)
        if out.dim() == 3:
            loss = loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        else:
            loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        t1 = time.perf_counter_ns()
        if i >= args.warmup:
            times.append(t1 - t0)

print(json.dumps({
    "mode": args.mode, "model": args.model, "modules": n_modules,
    "median_ns": statistics.median(times), "mean_ns": statistics.fmean(times),
    "min_ns": min(times), "max_ns": max(times), "steps": len(times),
}))
