"""Overhead benchmark: the same models with and without probing and the tools users would
pick instead, interleaved step by step in one run.

    make bench            (or: python3 bench/overhead.py [--reps 3] [--models ...] [--modes ...])

Modes (see _child.py): plain, probing (the default recording), probing-windows (the default
before 2026-11-27: detail windows at 0.5 %), probing-all (every module every
step; backward timed by the C++ extension probing._autograd), probing-all-py (the same with
backward timed by Python-level probes, PROBING_AUTOGRAD_EXT=0), probing-all-fwd (every module's
forward every step, no backward probes: PROBING_BACKWARD=0; not in the default set), probing-summary (the cost between detail windows), pyhooks, torchprof (torch.profiler
every step), torchprof-sched (schedule wait=1 warmup=1 active=3), anchor (Probing 0.2.4 from
PyPI with torch tracing at full rate, in its own virtual environment bench/out/anchor-venv,
created on first use), pyspy (the plain run under `py-spy record --rate 100`). MODE@pip runs MODE
in the Python named by BENCH_PIP_PYTHON (a venv where `pip install .` ran with build isolation, so
probing._autograd is the build made on first use) in the same run, beside the other modes.

Method: lockstep turns. For each repetition and model, one process per mode is started and
warmed up (--warmup steps); then, round after round, each process in turn (a new random order
every round) runs --turn steps while the others wait on a pipe, until each mode has its steps:
--steps for plain, probing and probing-summary (long enough to hold several of probing's detail
windows), --tool-steps for the rest. This VM's speed drifts by +-5-10 % over seconds; since the
modes take turns a few hundred milliseconds apart, drift falls on all of them alike, which
separate runs one after another cannot give. A mode's added time is the sum of its step times
over the rounds it ran in, divided by the sum of plain's step times over the same rounds, minus
one: a mean over every step, so probing's detail windows count at their real share. The table
shows min / median / max over the repetitions.

The `noop` model (1,000 modules whose forward returns its input, run under no_grad) isolates the
cost of one module call: (probing-all - plain) / 1,000 calls with every call recorded, and
(probing-summary - plain) / 1,000 between detail windows. `pyhooks` are no-op Python global
hooks: the floor any profiler built on torch's global hooks pays, since torch leaves its fast
call path as soon as any global hook exists.

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

from _results import machine, write_section

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "_child.py")
OVERHEAD_JSON = os.path.join(HERE, "out", "overhead.json")

MODELS = {
    "many": "272 tiny modules (Linear+Tanh+Scale blocks), batch 32, SGD",
    "transformer": "4-block transformer, 54 modules, batch 8 x 32 tokens, SGD",
    "resnet": "ResNet-style CNN with inplace ReLU, 33 modules, batch 16 x 3x32x32, SGD",
    "noop": "1,000 no-op modules, forward only under no_grad (per-call cost)",
}
LONG_MODES = ("plain", "plain-2", "plain-thread", "probing", "probing-windows", "probing-summary", "probing@pip")
ALL_MODES = "plain,plain-2,probing,probing-windows,probing-all,probing-all-py,probing-summary,pyhooks,torchprof,torchprof-sched,anchor,pyspy"

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


class Child:
    """One mode's process, driven over its stdin/stdout."""

    def __init__(self, mode, model, warmup):
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("PROBING"):
                del env[k]
        child_mode, prefix, python = mode, [], sys.executable
        if mode.endswith("@pip"):
            # the same mode in the Python of another install (BENCH_PIP_PYTHON: a venv where
            # `pip install .` ran with build isolation), in the same lockstep run
            child_mode, python = mode[:-len("@pip")], os.environ["BENCH_PIP_PYTHON"]
            env.pop("PYTHONPATH", None)
        if mode == "anchor":
            python = anchor_python()
            env["PROBING"] = "1"
        elif mode == "pyspy":
            child_mode = "plain"
            prefix = [pyspy(), "record", "--rate", "100", "--format", "raw", "-o", os.devnull, "--"]
        self.mode = mode
        if os.environ.get("BENCH_NO_ASLR"):
            prefix = ["setarch", platform.machine(), "-R"] + prefix
        self.cmd = prefix + [python, CHILD, "--mode", child_mode, "--model", model,
                             "--warmup", str(warmup)]
        self.proc = subprocess.Popen(self.cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self.expect("READY")

    def expect(self, word):
        while True:
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read()
                raise SystemExit(f"benchmark child failed: {' '.join(self.cmd)}\n{err[-4000:]}")
            if line.startswith(word):
                return line

    def run(self, n):
        self.proc.stdin.write(f"RUN {n}\n")
        self.proc.stdin.flush()
        self.expect("DONE")

    def end(self):
        self.proc.stdin.write("END\n")
        self.proc.stdin.flush()
        line = self.expect("RESULT ")
        self.proc.stdin.close()
        self.proc.wait(timeout=300)
        return json.loads(line[len("RESULT "):])


def one_rep(model, modes, steps, tool_steps, turn, warmup, rng):
    """Runs every mode of one model in lockstep turns; returns {mode: result}, where result
    has the child's JSON plus 'rounds': the round each of its turns belonged to."""
    children = {}
    try:
        for m in modes:
            children[m] = Child(m, model, warmup)
        want = {m: (steps if m in LONG_MODES else tool_steps) for m in modes}
        done = {m: 0 for m in modes}
        rounds = {m: [] for m in modes}
        r = 0
        while any(done[m] < want[m] for m in modes):
            order = [m for m in modes if done[m] < want[m]]
            rng.shuffle(order)
            for m in order:
                n = min(turn, want[m] - done[m])
                children[m].run(n)
                rounds[m].extend([r] * n)
                done[m] += n
            r += 1
        out = {}
        for m in modes:
            res = children.pop(m).end()
            res["rounds"] = rounds[m]
            out[m] = res
        return out
    finally:
        for c in children.values():
            c.proc.kill()


def added_vs_plain(res, mode):
    """Mean step time of `mode` over its rounds vs plain's over the same rounds."""
    mine = res[mode]
    used = set(mine["rounds"])
    plain = [t for t, r in zip(res["plain"]["times_ns"], res["plain"]["rounds"]) if r in used]
    return sum(mine["times_ns"]) / len(mine["times_ns"]), sum(plain) / len(plain)


def probing_split(res):
    """probing's own view of its default run: which timed steps were detail steps
    (python.steps.detail; the agent's step k is the child's k-th step, warm-up included), their
    mean time and the summary steps' as the child timed them, the period it chose and the cost
    it measured."""
    run = res.get("probing") or {}
    view = run.get("probing")
    if not view or "steps" not in view:
        return None
    detail = {s["step"]: bool(s.get("detail")) for s in view["steps"]}
    warm = run["warmup"]
    det, summ = [], []
    for i, t in enumerate(run["times_ns"]):
        (det if detail.get(warm + i) else summ).append(t)
    d = view.get("detail") or {}
    return {"detail_steps": len(det), "summary_steps": len(summ),
            "detail_ms": statistics.fmean(det) / 1e6 if det else None,
            "summary_ms": statistics.fmean(summ) / 1e6 if summ else None,
            "period": d.get("period"), "mode": d.get("mode"), "cost": d.get("cost")}


def fmt_pct(x):
    return f"{x * 100:+.1f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0,
                    help="timed steps of plain/probing/probing-windows/probing-summary (default: 2048, resnet 1024, noop 512)")
    ap.add_argument("--tool-steps", type=int, default=64, help="timed steps of every other mode")
    ap.add_argument("--turn", type=int, default=8, help="steps per turn")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--models", default="many,transformer,resnet,noop")
    ap.add_argument("--modes", default=ALL_MODES)
    ap.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    ap.add_argument("--raw", help="also write every step time of every process to this JSON file")
    args = ap.parse_args()
    models = args.models.split(",")
    modes = args.modes.split(",")
    if "plain" not in modes:
        modes.insert(0, "plain")
    default_steps = {"many": 2048, "transformer": 2048, "resnet": 1024, "noop": 512}
    rng = random.Random(0)
    results = {m: [] for m in models}  # per model: one dict per rep
    for rep in range(args.reps):
        for model in models:
            steps = args.steps or default_steps[model]
            res = one_rep(model, modes, steps, args.tool_steps, args.turn, args.warmup, rng)
            results[model].append(res)
            line = []
            for m in modes:
                mean, base = added_vs_plain(res, m)
                line.append(f"{m} {mean / 1e6:.3f} ms ({fmt_pct(mean / base - 1)})")
            print(f"rep {rep + 1}/{args.reps} {model}: " + ", ".join(line), flush=True)

    if args.raw:
        with open(args.raw, "w") as f:
            json.dump(results, f)
    # The period probing's default recording chose per model (median over the repetitions), for
    # bench/instructions.py.
    periods = {}
    for model in models:
        ps = [sp["period"] for res in results[model] if (sp := probing_split(res)) and sp["period"]]
        if ps:
            periods[model] = statistics.median(ps)
    if periods and not args.no_write:
        os.makedirs(os.path.dirname(OVERHEAD_JSON), exist_ok=True)
        with open(OVERHEAD_JSON, "w") as f:
            json.dump({"date": datetime.date.today().isoformat(), "periods": periods}, f)
    lines = ["| model | mode | steps timed | mean step ms (median of reps) | added vs plain (min / median / max) |",
             "|---|---|---|---|---|"]
    per_call = {}
    splits = []
    for model in models:
        for m in modes:
            ratios, means = [], []
            for res in results[model]:
                mean, base = added_vs_plain(res, m)
                ratios.append(mean / base - 1)
                means.append(mean)
            n = len(results[model][0][m]["times_ns"])
            added = "" if m == "plain" else (f"{fmt_pct(min(ratios))} / **{fmt_pct(statistics.median(ratios))}** / "
                                             f"{fmt_pct(max(ratios))}")
            lines.append(f"| {model} | {m} | {n} | {statistics.median(means) / 1e6:.3f} | {added} |")
            if model == "noop" and m != "plain":
                diffs = []
                for res in results[model]:
                    mean, base = added_vs_plain(res, m)
                    diffs.append((mean - base) / 1000.0)
                per_call[m] = statistics.median(diffs)
        if model != "noop" and "probing" in modes:
            for rep, res in enumerate(results[model]):
                sp = probing_split(res)
                if sp:
                    splits.append((model, rep + 1, sp))
    table = "\n".join(lines)
    print(table)

    section = [
        f"## Step-time overhead (CPU) — {datetime.date.today().isoformat()}",
        "",
        f"{machine()} All figures CPU (no GPU was available to this run).",
        f"Method: `python bench/overhead.py --reps {args.reps}` (`make bench`). Lockstep turns: per repetition "
        "and model one process per mode, warmed up "
        f"({args.warmup} steps), then each process in turn (new random order every round) runs {args.turn} "
        "steps while the others wait, until plain, probing and probing-summary have their long run and the "
        f"other modes {args.tool_steps} steps. Added time = mean step time over the rounds a mode ran in / "
        "plain's mean over the same rounds - 1 (a mean over every step, so probing's detail windows count "
        "at their real share). Each step: perf_counter_ns around forward+loss+backward+optimizer step+"
        "zero_grad, one intra-op thread.",
        "",
        "Models: " + "; ".join(f"`{m}`: {MODELS[m]}" for m in models) + ".",
        "",
        table,
        "",
    ]
    if per_call:
        parts = ", ".join(f"{k} {v:.0f} ns" for k, v in per_call.items())
        section.append(
            f"Cost per module call (`noop` model, (mean - plain) / 1,000 calls, median of reps): {parts}. "
            "Global hooks (pyhooks, torch.profiler's module events aside) take torch's slow path in "
            "`Module._call_impl`; probing's C `__call__` wrapper keeps the fast path.")
        if "anchor" in per_call and "probing-all" in per_call and per_call["probing-all"] > 0:
            section.append(f"Probing (anchor) / probing-all per module call, both recording every call: "
                           f"{per_call['anchor'] / per_call['probing-all']:.1f}x.")
        section.append("")
    if splits:
        section.append("probing's own view of its default runs (python.steps over the timed steps, "
                       "/api/info detail):")
        section.append("")
        section.append("| model | rep | detail steps | summary steps | detail step ms | summary step ms | mode, period at the end | cost measured |")
        section.append("|---|---|---|---|---|---|---|---|")
        for model, rep, sp in splits:
            cost = f"{sp['cost'] * 100:.1f}%" if sp["cost"] is not None else "-"
            dm = f"{sp['detail_ms']:.3f}" if sp["detail_ms"] is not None else "-"
            sm = f"{sp['summary_ms']:.3f}" if sp["summary_ms"] is not None else "-"
            section.append(f"| {model} | {rep} | {sp['detail_steps']} | {sp['summary_steps']} | {dm} | {sm} | "
                           f"{sp.get('mode') or ''} {sp['period']} | {cost} |")
        section.append("")
    text = "\n".join(section)
    print(text)
    if not args.no_write:
        write_section("overhead", text)


if __name__ == "__main__":
    main()
