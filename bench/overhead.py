"""Overhead benchmark: the same models with and without probing and the tools users would
pick instead, interleaved in one run.

    make bench            (or: python3 bench/overhead.py [--reps 5] [--steps 40] [--modes ...])

Modes (see _child.py): plain, probing, probing-fwd, pyhooks, torchprof (torch.profiler every
step), torchprof-sched (schedule wait=1 warmup=1 active=3), anchor (Probing 0.2.4 from PyPI with
torch tracing at full rate, in its own virtual environment bench/out/anchor-venv, created on
first use), pyspy (the plain run under `py-spy record --rate 100`).

For each repetition, every (model, mode) pair runs once in a fresh process, in a shuffled order,
so drift in the machine's speed spreads over all modes alike. Each process reports the median of
its per-step times after warm-up; the table shows min / median / max of those medians across
repetitions, and the added time relative to `plain` (median vs median).

The `noop` model (1,000 modules whose forward returns its input, run under no_grad) isolates the
cost of one module call: (median probing - median plain) / 1,000 calls. `pyhooks` are no-op
Python global hooks: the floor any profiler built on torch's global hooks pays, since torch
leaves its fast call path as soon as any global hook exists.

Results are written to bench/RESULTS.md (the section between the BEGIN/END markers is replaced).
"""
import argparse
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "_child.py")
RESULTS = os.path.join(HERE, "RESULTS.md")

MODELS = {
    "many": "272 tiny modules (Linear+Tanh+Scale blocks), batch 32, SGD",
    "transformer": "4-block transformer, 54 modules, batch 8 x 32 tokens, SGD",
    "resnet": "ResNet-style CNN with inplace ReLU, 33 modules, batch 16 x 3x32x32, SGD",
    "noop": "1,000 no-op modules, forward only under no_grad (per-call cost)",
}


ANCHOR_VENV = os.path.join(HERE, "out", "anchor-venv")
ANCHOR_VERSION = "0.2.4"


def anchor_python():
    """The interpreter of a separate virtual environment holding Probing (the anchor) and the
    same torch; created on first use (Probing's package is also called `probing`)."""
    py = os.path.join(ANCHOR_VENV, "bin", "python")
    if not os.path.exists(py):
        print(f"creating {ANCHOR_VENV} with probing=={ANCHOR_VERSION} (the Rust Probing)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", ANCHOR_VENV], check=True)
        import torch
        subprocess.run([py, "-m", "pip", "install", "-q", f"torch=={torch.__version__.split('+')[0]}",
                        f"probing=={ANCHOR_VERSION}"], check=True)
    return py


def pyspy():
    exe = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(exe):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True)
    return exe


def run_child(mode, model, steps, warmup):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("PROBING"):
            del env[k]
    child_mode, prefix, python = mode, [], sys.executable
    if mode == "anchor":
        python = anchor_python()
        env["PROBING"] = "1"
    elif mode == "pyspy":
        child_mode = "plain"
        prefix = [pyspy(), "record", "--rate", "100", "--format", "raw", "-o", os.devnull, "--"]
    cmd = prefix + [python, CHILD, "--mode", child_mode, "--model", model, "--steps", str(steps),
                    "--warmup", str(warmup)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"benchmark child failed: {' '.join(cmd)}\n{out.stderr}")
    lines = [ln for ln in out.stdout.strip().splitlines() if ln.startswith("{")]
    return json.loads(lines[-1])


def fmt_ms(ns):
    return f"{ns / 1e6:.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--models", default="many,transformer,resnet,noop")
    ap.add_argument("--modes", default="plain,probing,probing-fwd,pyhooks,torchprof,torchprof-sched,anchor,pyspy")
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = ap.parse_args()
    models = args.models.split(",")
    modes = args.modes.split(",")
    if "plain" not in modes:
        modes.insert(0, "plain")
    samples = {(m, k): [] for m in models for k in modes}
    rng = random.Random(0)
    for rep in range(args.reps):
        pairs = [(m, k) for m in models for k in modes]
        rng.shuffle(pairs)
        for m, k in pairs:
            r = run_child(k, m, args.steps, args.warmup)
            samples[(m, k)].append(r["median_ns"])
            print(f"rep {rep + 1}/{args.reps} {m:12s} {k:8s} {fmt_ms(r['median_ns'])} ms", flush=True)

    lines = []
    lines.append("| model | mode | step ms (min / median / max of per-run medians) | added vs plain |")
    lines.append("|---|---|---|---|")
    per_call = {}
    for m in models:
        base = statistics.median(samples[(m, "plain")])
        for k in modes:
            v = samples[(m, k)]
            med = statistics.median(v)
            added = "" if k == "plain" else f"{(med / base - 1) * 100:+.1f}%"
            lines.append(f"| {m} | {k} | {fmt_ms(min(v))} / {fmt_ms(med)} / {fmt_ms(max(v))} | {added} |")
        if m == "noop":
            for k in modes:
                if k != "plain":
                    per_call[k] = (statistics.median(samples[(m, k)]) - base) / 1000.0
    table = "\n".join(lines)
    print(table)

    try:
        import torch
        torch_version = torch.__version__
    except Exception:
        torch_version = "?"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    section = [
        "<!-- BEGIN overhead -->",
        f"## Step-time overhead (CPU) — {datetime.date.today().isoformat()}",
        "",
        f"Machine: {cpu}, {os.cpu_count()} cores; Python {platform.python_version()}, torch {torch_version}.",
        f"Method: {args.reps} repetitions; in each, every (model, mode) pair runs once in a fresh process, "
        f"in shuffled order; each process times {args.steps} training steps after {args.warmup} warm-up "
        "steps (perf_counter_ns around forward+loss+backward+optimizer step+zero_grad) and reports "
        "their median. Command: `make bench`.",
        "",
        "Models: " + "; ".join(f"`{m}`: {MODELS[m]}" for m in models) + ".",
        "",
        table,
        "",
    ]
    if per_call:
        parts = ", ".join(f"{k} {v:.0f} ns" for k, v in per_call.items())
        section.append(
            f"Cost per module call (`noop` model, (median - plain) / 1,000 calls): {parts}. Global "
            "hooks (pyhooks, torch.profiler's module events aside) take torch's slow path in "
            "`Module._call_impl`; probing's C `__call__` wrapper keeps the fast path.")
        if "anchor" in per_call and "probing" in per_call and per_call["probing"] > 0:
            section.append(f"Probing (anchor) / probing per module call: {per_call['anchor'] / per_call['probing']:.1f}x.")
        section.append("")
    section.append("<!-- END overhead -->")
    text = "\n".join(section)
    if args.no_write:
        return
    old = open(RESULTS).read() if os.path.exists(RESULTS) else "# Benchmark results\n\n"
    if "<!-- BEGIN overhead -->" in old:
        head, rest = old.split("<!-- BEGIN overhead -->", 1)
        tail = rest.split("<!-- END overhead -->", 1)[1] if "<!-- END overhead -->" in rest else ""
        new = head + text + tail
    else:
        new = old.rstrip("\n") + "\n\n" + text + "\n"
    with open(RESULTS, "w") as f:
        f.write(new)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
