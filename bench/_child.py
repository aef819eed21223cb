"""One measurement for bench/overhead.py: trains (or runs) one model in one mode, prints JSON.

    python3 bench/_child.py --mode MODE --model many|resnet|transformer|noop

Modes (what is attached to the training process):
  plain           nothing
  probing         `import probing` first: the agent with its default recording, exactly what
                  `probing run` / PROBING=1 do
  probing-fwd     the same with PROBING_BACKWARD=0 (forward and optimizer rows only)
  pyhooks         no-op Python global forward pre/post hooks (the floor of any profiler built on
                  torch's global hooks)
  torchprof       torch.profiler recording every step (CPU activities), seed 000's "continuous"
  torchprof-sched torch.profiler with schedule(wait=1, warmup=1, active=3), cycling, prof.step()
                  every step
  anchor          Probing (`pip install probing`, the Rust tool) with its torch tracing at full
                  rate (mode=random, rate=1.0: every module, every step). Must run with the
                  interpreter of the virtual environment Probing is installed in.
py-spy is not a mode here: overhead.py runs `plain` under `py-spy record --rate 100`.

Timing: time.perf_counter_ns around each whole training step (forward, loss, backward,
optimizer step, zero_grad), after --warmup steps. The noop model times one forward of 1,000
no-op modules under no_grad (per-call cost); it does one optimizer step on a dummy parameter
first, because Probing installs its hooks at the first optimizer step.
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

MODES = ["plain", "probing", "probing-fwd", "pyhooks", "torchprof", "torchprof-sched", "anchor"]
p = argparse.ArgumentParser()
p.add_argument("--mode", required=True, choices=MODES)
p.add_argument("--model", required=True, choices=["many", "resnet", "transformer", "noop"])
p.add_argument("--warmup", type=int, default=10)
p.add_argument("--steps", type=int, default=40)
args = p.parse_args()

if args.mode in ("probing", "probing-fwd"):
    if args.mode == "probing-fwd":
        os.environ["PROBING_BACKWARD"] = "0"  # forward and optimizer rows only
    import probing  # noqa: F401  starts the agent; hooks go in when torch is imported
elif args.mode == "anchor":
    import probing  # Probing (the anchor), from its own virtual environment
    from probing.profiling.torch_probe import configure
    configure("on,mode=random,rate=1.0")  # every module, every step (its default samples one)

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


def profiler():
    from torch.profiler import ProfilerActivity, profile, schedule
    if args.mode == "torchprof":
        return profile(activities=[ProfilerActivity.CPU])
    if args.mode == "torchprof-sched":
        return profile(activities=[ProfilerActivity.CPU],
                       schedule=schedule(wait=1, warmup=1, active=3))
    return contextlib.nullcontext()


model, x, y = build()
n_modules = sum(1 for _ in model.modules())
times = []
with profiler() as prof:
    def step_done():
        if args.mode == "torchprof-sched":
            prof.step()

    if args.model == "noop":
        dummy = nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([dummy], lr=0.0)
        dummy.sum().backward()
        opt.step()  # Probing (anchor) installs its module hooks at the first optimizer step
        with torch.no_grad():
            for i in range(args.warmup + args.steps):
                t0 = time.perf_counter_ns()
                model(x)
                t1 = time.perf_counter_ns()
                step_done()
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
            step_done()
            if i >= args.warmup:
                times.append(t1 - t0)

print(json.dumps({
    "mode": args.mode, "model": args.model, "modules": n_modules,
    "median_ns": statistics.median(times), "mean_ns": statistics.fmean(times),
    "min_ns": min(times), "max_ns": max(times), "steps": len(times),
}))
