"""One process of bench/overhead.py: one model under one mode, run step by step when told.

    python3 bench/_child.py --mode MODE --model many|resnet|transformer|noop [--warmup N]

Protocol (stdin/stdout, one line each): after building the model and running --warmup steps
the child prints "READY"; then for each "RUN n" it runs n steps, timing each one, and prints
"DONE"; on "END" it prints one JSON line with every timed step and exits. overhead.py keeps
one child per mode alive and hands out turns, so all modes run interleaved in time and drift in
the machine's speed falls on all of them alike.

Modes (what is attached to the training process):
  plain            nothing
  plain-2          nothing, a second process: the difference between two identical processes
                   is the noise floor of the comparison
  plain-thread     nothing, but one more thread, idle (blocked on a lock for the whole run): what
                   a process pays for having a second thread at all (glibc's malloc takes its
                   arena lock only once a process has one; the agent's sampler and server are
                   threads, and a GPU job always has some: CUDA's, NCCL's, pin_memory's); a
                   control, not in overhead.py's default set: ask for it with --modes
  probing          `import probing` first: the agent with its default recording, exactly what
                   `probing run` / PROBING=1 do (every module, forward and backward, on every
                   step but one in 128 while that costs at most 3 %, else in detail windows
                   spaced to keep the cost within it; python.steps every step)
  probing-windows  PROBING_DETAIL_EVERY=windows PROBING_DETAIL_BUDGET=0.5: the detail windows
                   whatever detail costs, at 0.5 % (the default before 2026-11-27)
  probing-all      the same with PROBING_DETAIL_EVERY=1: every module, every step (the coverage
                   Probing's tracing has at rate 1.0); backward nodes are timed by the C++
                   extension probing._autograd where it was built (the default)
  probing-all-py   probing-all with PROBING_AUTOGRAD_EXT=0: backward timed by Python-level
                   probes on grad_fn objects (what probing-all was before the extension, and what
                   a build without it does)
  probing-all-fwd  probing-all with PROBING_BACKWARD=0: every module's forward, every step, no
                   backward probes; with probing-all and probing-summary it splits detail's cost
                   into the forward rows and the backward timing
  probing-summary  PROBING_DETAIL_EVERY=10^9 PROBING_DETAIL_STEPS=1: no detail after step 0,
                   the cost between detail windows
  pyhooks          no-op Python global forward pre/post hooks (the floor of any profiler built
                   on torch's global hooks)
  torchprof        torch.profiler recording every step (CPU activities), seed 000's "continuous"
  torchprof-sched  torch.profiler with schedule(wait=1, warmup=1, active=3), prof.step() every
                   step
  anchor           Probing (`pip install probing`, the Rust tool) with its torch tracing at full
                   rate (mode=random, rate=1.0: every module, every step). Must run with the
                   interpreter of the virtual environment Probing is installed in.
py-spy is not a mode here: overhead.py runs `plain` under `py-spy record --rate 100`.

Timing: time.perf_counter_ns around each whole training step (forward, loss, backward,
optimizer step, zero_grad). The noop model times one forward of 1,000 no-op modules under
no_grad (per-call cost); it does one optimizer step on a dummy parameter first, because
Probing installs its hooks at the first optimizer step.
"""
import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

MODES = ["plain", "plain-2", "plain-thread", "probing", "probing-windows", "probing-all", "probing-all-py", "probing-all-fwd",
         "probing-summary", "pyhooks", "torchprof", "torchprof-sched", "anchor"]
p = argparse.ArgumentParser()
p.add_argument("--mode", required=True, choices=MODES)
p.add_argument("--model", required=True, choices=["many", "resnet", "transformer", "noop"])
p.add_argument("--warmup", type=int, default=10)
args = p.parse_args()

if args.mode.startswith("probing"):
    if args.mode in ("probing-all", "probing-all-py", "probing-all-fwd"):
        os.environ["PROBING_DETAIL_EVERY"] = "1"
    if args.mode == "probing-all-fwd":
        os.environ["PROBING_BACKWARD"] = "0"
    if args.mode == "probing-all-py":
        os.environ["PROBING_AUTOGRAD_EXT"] = "0"
    elif args.mode == "probing-windows":
        os.environ["PROBING_DETAIL_EVERY"] = "windows"
        os.environ["PROBING_DETAIL_BUDGET"] = "0.5"
    elif args.mode == "probing-summary":
        os.environ["PROBING_DETAIL_EVERY"] = str(10 ** 9)
        os.environ["PROBING_DETAIL_STEPS"] = "1"
    import probing  # noqa: F401  starts the agent; hooks go in when torch is imported
elif args.mode == "plain-thread":
    import threading
    _idle = threading.Lock()
    _idle.acquire()
    threading.Thread(target=_idle.acquire, daemon=True, name="idle").start()
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


def probing_view():
    """What probing's agent says about this run: python.steps (wall, detail) and /api/info's
    detail policy, through the probing CLI on PATH (None when not found)."""
    exe = shutil.which("probing")
    if not exe:
        return None
    pid = str(os.getpid())
    q = subprocess.run([exe, pid, "query", "SELECT step, wall, detail FROM python.steps ORDER BY step",
                        "-f", "json"], capture_output=True, text=True, timeout=120)
    info = subprocess.run([exe, pid, "info", "-f", "json"], capture_output=True, text=True, timeout=120)
    try:
        steps = json.loads(q.stdout)
        detail = json.loads(info.stdout).get("detail")
    except ValueError:
        return {"error": (q.stderr + info.stderr)[-500:]}
    return {"steps": steps, "detail": detail}


model, x, y = build()
n_modules = sum(1 for _ in model.modules())
times = []
with profiler() as prof:
    if args.model == "noop":
        dummy = nn.Parameter(torch.zeros(1))
        dummy_opt = torch.optim.SGD([dummy], lr=0.0)
        dummy.sum().backward()
        dummy_opt.step()  # Probing (anchor) installs its module hooks at the first optimizer step

        def step():
            with torch.no_grad():
                model(x)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loss_fn = nn.CrossEntropyLoss()

        def step():
            out = model(x)
            if out.dim() == 3:
                loss = loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            else:
                loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            opt.zero_grad()

    def timed_step():
        t0 = time.perf_counter_ns()
        step()
        t1 = time.perf_counter_ns()
        if args.mode == "torchprof-sched":
            prof.step()
        return t1 - t0

    for _ in range(args.warmup):
        timed_step()
    print("READY", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "RUN":
            for _ in range(int(cmd[1])):
                times.append(timed_step())
            print("DONE", flush=True)
        elif cmd[0] == "END":
            break

view = probing_view() if args.mode.startswith("probing") and not os.environ.get("BENCH_NO_VIEW") else None
print("RESULT " + json.dumps({"mode": args.mode, "model": args.model, "modules": n_modules,
                              "warmup": args.warmup, "times_ns": times, "probing": view}), flush=True)
