"""Instructions per training step, counted by valgrind's callgrind: plain, probing between
detail windows (probing-summary), probing with every step in detail (probing-all; backward
timed by the C++ extension probing._autograd), the same with backward timed by Python-level
probes (probing-all-py, PROBING_AUTOGRAD_EXT=0), and what the default recording adds once its
detail windows are counted at their share.

    make bench            (or: python3 bench/instructions.py [--models many,transformer,resnet])

Why: wall time on this 2-core VM moves by +-1.5 % between two identical processes (the noise
floor row of the overhead table), which is as large as the targets. Instruction counts are
deterministic: the same binary, inputs and environment give the same count, whatever else the
machine does. They are not time (a cache miss costs more than an add), so they complement the
wall-time table rather than replace it.

Method: each (model, mode) runs under `valgrind --tool=callgrind --instr-atstart=no`
(bench/_child.py, one intra-op thread, OpenBLAS threads off so no spinning thread adds noise,
PYTHONHASHSEED=0 so that every process lays out its dicts the same way):
3 warm-up steps uninstrumented, instrumentation on, 2 more steps, counters zeroed
(callgrind_control), --steps steps, and the training thread's counter read; / --steps. The
agent's own threads (samplers every 5 ms and 1 s, the server) are not in these figures: their
work is per second, not per step, and valgrind's slowdown would inflate it ~50x; the wall-time
table holds their cost. The default recording's figure is
composed: (1 - d) x summary + d x all, where d is the share of detail steps at the period the
agent chose for that model in the last overhead run (bench/out/overhead.json, written by
bench/overhead.py), or window / period from --period when given.

Results go to bench/RESULTS.md between the BEGIN/END instructions markers.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import re
import shutil
import subprocess
import sys

from _results import machine, write_section

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "_child.py")
OVERHEAD_JSON = os.path.join(HERE, "out", "overhead.json")
MODES = ["plain", "probing-summary", "probing-all", "probing-all-py"]
WINDOW = 8


EVENTS = ("Ir",)
CACHE_EVENTS = ("Ir", "I1mr", "D1mr", "D1mw")


def count(model, mode, steps, cache=False):
    """Counts of `steps` training steps of (model, mode) on the training thread: {event: n},
    instructions (Ir), and with cache=True callgrind's simulated first-level cache misses too
    (I1mr instruction fetch, D1mr data read, D1mw data write)."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("PROBING"):
            del env[k]
    # One string-hash seed for every run: with Python's random one, dict and set layouts differ
    # between processes, and the same plain run counted 28.11 M to 28.25 M instructions per step
    # on the `many` model (+-0.25 %, as large as the summary figure); with PYTHONHASHSEED=0 two
    # plain runs differ by ~5 k (0.02 %).
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", BENCH_NO_VIEW="1",
               PYTHONHASHSEED="0")
    events = CACHE_EVENTS if cache else EVENTS
    cmd = ["valgrind", "--tool=callgrind", *(["--cache-sim=yes"] if cache else []),
           "--instr-atstart=no", "--callgrind-out-file=/dev/null",
           sys.executable, CHILD, "--mode", mode, "--model", model, "--warmup", "3"]
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def expect(word):
        for line in p.stdout:
            if line.startswith(word):
                return
        raise SystemExit(f"callgrind run failed: {' '.join(cmd)}")

    def control(*opts):
        r = subprocess.run(["callgrind_control", *opts, str(p.pid)], capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            raise SystemExit(f"callgrind_control {' '.join(opts)} failed: {r.stderr}")
        return r.stdout

    def step(n):
        p.stdin.write(f"RUN {n}\n")
        p.stdin.flush()
        expect("DONE")

    try:
        expect("READY")
        control("--instr=on")
        step(2)  # steps whose code valgrind translates for the first time are not counted
        control("--zero")
        step(steps)
        out = control("-e", ",".join(events))
        p.stdin.write("END\n")
        p.stdin.flush()
        p.wait(timeout=600)
    finally:
        p.kill()
    # Thread 1 is the training thread (on the CPU autograd runs backward on the calling
    # thread). The agent's sampler and server threads are left out: they run per second, not
    # per step, and under valgrind a step takes ~50x longer, which would multiply their share.
    main = re.search(r"^\s*Th\s+1\s+([\d,]+(?:\s+[\d,]+)*)\s*$", out, re.M)
    if not main or len(main.group(1).split()) != len(events):
        raise SystemExit(f"no counts from callgrind_control:\n{out}")
    return dict(zip(events, (int(v.replace(",", "")) for v in main.group(1).split())))


def print_cache_table(models, modes, counts, steps):
    """Per step: instructions and simulated L1 misses of each mode, and what each adds to plain.
    The misses are what instruction counts leave out: on the `many` model every step in detail
    adds ~2-3 % instructions but ~3 % more instruction-fetch misses, and a miss costs tens of
    instructions' time (bench/RESULTS.md, "the instruction cache")."""
    print()
    print("| model | mode | instr/step | I1 misses/step | D1 misses/step | added instr | added I1 misses "
          "| added D1 misses |")
    print("|---|---|---|---|---|---|---|---|")
    for m in models:
        base = counts[(m, "plain")]
        for mode in modes:
            c = counts[(m, mode)]
            d1, d1b = c["D1mr"] + c["D1mw"], base["D1mr"] + base["D1mw"]
            add = lambda x, b: "-" if mode == "plain" else f"{(x - b) / steps:+,.0f} ({(x / b - 1) * 100:+.2f}%)"
            print(f"| {m} | {mode} | {c['Ir'] / steps:,.0f} | {c['I1mr'] / steps:,.0f} | "
                  f"{d1 / steps:,.0f} | {add(c['Ir'], base['Ir'])} | {add(c['I1mr'], base['I1mr'])} | "
                  f"{add(d1, d1b)} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="many,transformer,resnet")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--period", type=int, default=0, help="detail period to compose the default with")
    ap.add_argument("--modes", default=",".join(MODES),
                    help="modes to count (plain is always counted: the others are relative to it)")
    ap.add_argument("--cache", action="store_true",
                    help="also simulate the first-level caches (valgrind --cache-sim, ~2x slower) "
                         "and print instruction-fetch and data misses per step beside the "
                         "instructions (not written to RESULTS.md)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        print("bench/instructions.py: skipped: valgrind is not installed (apt-get install valgrind); "
              "bench/RESULTS.md keeps its previous instructions section")
        return
    models = args.models.split(",")
    periods = {}
    if os.path.exists(OVERHEAD_JSON):
        with open(OVERHEAD_JSON) as f:
            periods = json.load(f).get("periods", {})
    modes = ["plain"] + [m for m in args.modes.split(",") if m in MODES and m != "plain"]
    unknown = [m for m in args.modes.split(",") if m not in MODES]
    if unknown:
        raise SystemExit(f"bench/instructions.py: unknown mode(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(MODES)}")
    jobs = [(m, mode) for m in models for mode in modes]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        counts = dict(zip(jobs, ex.map(lambda j: count(*j, args.steps, args.cache), jobs)))
    totals = {j: c["Ir"] for j, c in counts.items()}
    lines = ["| model | plain instr/step | probing-summary | probing-all (every step in detail) | "
             "probing-all-py (backward in Python) | period (source) | default: detail share | "
             "default recording |",
             "|---|---|---|---|---|---|---|---|"]
    for m in models:
        per = {mode: totals[(m, mode)] / args.steps for mode in modes}
        base = per["plain"]
        nan = float("nan")
        s = per["probing-summary"] / base - 1 if "probing-summary" in per else nan
        a = per["probing-all"] / base - 1 if "probing-all" in per else nan
        a_py = per["probing-all-py"] / base - 1 if "probing-all-py" in per else nan
        period, source = args.period, "--period"
        if not period and m in periods:
            period, source = int(periods[m]), "overhead run"
        if period and s == s and a == a:
            d = min(1.0, WINDOW / period)
            default = f"{((1 - d) * s + d * a) * 100:+.2f}%"
            share = f"{d * 100:.2f}%"
            psrc = f"{period} ({source})"
        else:
            default = share = psrc = "-"
        pct = lambda x: f"{x * 100:+.2f}%" if x == x else "-"  # nan: mode not counted
        lines.append(f"| {m} | {base / 1e6:.2f} M | {pct(s)} | {pct(a)} | {pct(a_py)} | "
                     f"{psrc} | {share} | "
                     f"**{default}** |")
    table = "\n".join(lines)
    print(table)
    if args.cache:
        print_cache_table(models, modes, counts, args.steps)
        return
    vg = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
    section = "\n".join([
        f"## Instructions per step (callgrind) — {datetime.date.today().isoformat()}",
        "",
        f"{machine()} {vg}. "
        f"Method: `python bench/instructions.py` (`make bench`): each (model, mode) under callgrind, "
        f"counters zeroed after 5 steps, then {args.steps} steps counted on the training thread. "
        "The default recording is composed as (1 - d) x summary + d x all with d = "
        f"{WINDOW} / period, the period the agent chose in the overhead run. Deterministic, unlike wall "
        "time, but not time: not what a cache miss or a wait costs, and not the agent's own threads "
        "(their work is per second; the wall-time table holds it).",
        "",
        table,
    ])
    if not args.no_write:
        write_section("instructions", section)


if __name__ == "__main__":
    main()
