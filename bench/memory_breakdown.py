"""Cost of one python.memory_breakdown row: the walk over an optimizer's parameters, gradients and
state that the agent makes at the first optimizer step and every PROBING_MEMORY_PHASE_EVERY-th.

    python bench/memory_breakdown.py [--layers 50,500] [--steps 60] [--reps 3] [--no-write]

For each model size (a stack of L nn.Linear(64, 64): 2L parameter tensors, and Adam's 3 state
tensors each, so 8L tensors are walked), a child process imports probing, trains --steps steps
with Adam and times every `optimizer.step()` call (perf_counter_ns around it; the post-hook that
makes the row runs inside it). It runs once with PROBING_MEMORY_PHASE_EVERY=1 (a breakdown row,
and the after_optimizer phase row, in every step) and once with PROBING_MEMORY_PHASE_EVERY=0 (no
row), in alternating order, --reps times; the cost of a row is the difference of the median
optimizer-step times. The first 10 steps are warm-up and left out. Results go to
bench/RESULTS.md between the BEGIN/END breakdown markers.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

from _results import machine, write_section

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import json, sys, time
import probing, torch
from torch import nn
layers, steps = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(layers)])
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(8, 64)
times = []
for i in range(steps):
    opt.zero_grad(set_to_none=True)
    model(x).sum().backward()
    t0 = time.perf_counter_ns()
    opt.step()
    times.append(time.perf_counter_ns() - t0)
print(json.dumps(times[10:]))
"""


def run(layers, steps, every):
    env = dict(os.environ, PROBING="1", PROBING_MEMORY_PHASE_EVERY=str(every))
    build = os.path.join(ROOT, "build", "python")
    if os.path.isdir(build):
        env["PYTHONPATH"] = build + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", CHILD, str(layers), str(steps)], env=env,
                         capture_output=True, text=True, check=True, timeout=600)
    return statistics.median(json.loads(out.stdout.strip().splitlines()[-1]))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", default="50,500")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    rows = []
    for layers in [int(x) for x in args.layers.split(",")]:
        on, off = [], []
        for rep in range(args.reps):
            for every in ((1, 0) if rep % 2 == 0 else (0, 1)):
                (on if every else off).append(run(layers, args.steps, every))
        cost_ns = statistics.median(on) - statistics.median(off)
        tensors = 8 * layers
        rows.append((layers, tensors, statistics.median(off) / 1e6, statistics.median(on) / 1e6,
                     cost_ns / 1e6, cost_ns / 1e3 / tensors))
        print(f"layers {layers}: step {rows[-1][2]:.3f} ms without, {rows[-1][3]:.3f} ms with a "
              f"row; a row costs {rows[-1][4]:.3f} ms ({rows[-1][5]:.2f} us per tensor)",
              flush=True)
    text = [f"## Memory breakdown row cost (CPU) — {datetime.date.today().isoformat()}", "",
            f"{machine()} Method: `bench/memory_breakdown.py` (median "
            f"`optimizer.step()` time with a breakdown row in every step minus without; "
            f"{args.reps} alternating repetitions, {args.steps - 10} timed steps each).", "",
            "| Linear layers | tensors walked (params, grads, Adam state) | optimizer.step() "
            "ms without | with a row | one row costs ms | us per tensor |",
            "|---|---|---|---|---|---|"]
    for r in rows:
        text.append(f"| {r[0]} | {r[1]} | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.3f} | {r[5]:.2f} |")
    text.append("")
    text.append("At the default PROBING_MEMORY_PHASE_EVERY=50 a row is made on one step in 50 "
                "(and on the first optimizer step): the cost above divided by 50 per step.")
    block = "\n".join(text)
    print(block)
    if not args.no_write:
        write_section("breakdown", block)


if __name__ == "__main__":
    main()
