"""Recording size benchmark: bytes of a `probing run -o` recording per 1,000 steps, against the
size of torch.profiler's Chrome trace of the same training.

    python bench/recording_size.py [--steps 1000] [--no-write]

For each workload (tests/workloads/planted.py --case healthy: an MLP fed by a DataLoader; and
tests/workloads/resnet_inplace.py: a small ResNet), two runs of the same script with the same
arguments:
  1. `probing run -o rec.db -- python <script> --steps N`: the size of rec.db after exit, and
     its rows per table;
  2. the script under torch.profiler.profile(activities=[CPU]) with default options (no shapes,
     no stacks, no memory), run with runpy so the script is unchanged, then
     prof.export_chrome_trace(trace.json): the size of trace.json. The profiler covers the whole
     script (setup included); setup adds few events next to N training steps.
Sizes are scaled to 1,000 steps (size * 1000 / N). Results are written to bench/RESULTS.md
between the BEGIN/END recording markers.
"""
import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from _results import write_section

REPO = Path(__file__).resolve().parent.parent
PROBING = REPO / "build" / "src" / "cli" / "probing"
WORKLOADS = REPO / "tests" / "workloads"
PROFILE = """
import runpy, sys, torch
out, script, *argv = sys.argv[1:]
sys.argv = [script, *argv]
sys.path.insert(0, str(__import__('pathlib').Path(script).parent))
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    try:
        runpy.run_path(script, run_name='__main__')
    except SystemExit:
        pass
prof.export_chrome_trace(out)
"""
CASES = [("planted.py healthy (MLP + DataLoader)", "planted.py", ["--case", "healthy"]),
         ("resnet_inplace.py (small ResNet)", "resnet_inplace.py", [])]


def mb(n):
    return f"{n / 1e6:.2f} MB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    env = dict(os.environ)
    env.pop("PROBING", None)
    rows_out = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, script, extra in CASES:
            argv = [str(WORKLOADS / script), *extra, "--steps", str(args.steps), "--print-every", "0"]
            sizes, counts = {}, {}
            for mode, extra_env in (("default", {}), ("all", {"PROBING_DETAIL_EVERY": "1"})):
                rec = Path(tmp) / f"rec-{mode}.db"
                subprocess.run([str(PROBING), "run", "-o", str(rec), "--", sys.executable, *argv],
                               env=dict(env, **extra_env), check=True, capture_output=True)
                con = sqlite3.connect(rec)
                counts[mode] = {n: con.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0]
                                for (n,) in con.execute("SELECT name FROM tables")}
                con.close()
                sizes[mode] = rec.stat().st_size
                rec.unlink()
            trace = Path(tmp) / "trace.json"
            subprocess.run([sys.executable, "-c", PROFILE, str(trace), *argv], env=env, check=True,
                           capture_output=True)
            trace_size = trace.stat().st_size
            scale = 1000 / args.steps
            rows_out.append((label, sizes["default"] * scale, sizes["all"] * scale, trace_size * scale,
                             counts))
            print(label, mb(sizes["default"] * scale), mb(sizes["all"] * scale), mb(trace_size * scale),
                  counts, flush=True)
            trace.unlink()
    lines = ["## Recording size per 1,000 steps", "",
             f"`python bench/recording_size.py --steps {args.steps}` (CPU, torch "
             f"{__import__('torch').__version__}); sizes scaled to 1,000 steps.", "",
             "| workload | `probing run -o` recording (default detail windows) | the same, every step in "
             "detail (`PROBING_DETAIL_EVERY=1`) | torch.profiler Chrome trace (CPU, defaults) "
             "| trace / every-step recording | torch_trace rows (default / every step) |",
             "|---|---|---|---|---|---|"]
    for label, rec_size, all_size, trace_size, counts in rows_out:
        rows = f"{counts['default'].get('torch_trace', 0)} / {counts['all'].get('torch_trace', 0)}"
        lines.append(f"| {label} | {mb(rec_size)} | {mb(all_size)} | {mb(trace_size)} | "
                     f"{trace_size / all_size:.0f}x | {rows} |")
    lines += ["", "The recording holds probing's own tables (module executions, steps, data "
              "waits, memory, system samples); torch.profiler's trace holds every aten op, which "
              "probing's recording does not. The trace is the whole script under the profiler. With the "
              "default detail windows the recording keeps every step's python.steps row and the module "
              "rows of the detail steps only."]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("recording", text)


if __name__ == "__main__":
    main()
