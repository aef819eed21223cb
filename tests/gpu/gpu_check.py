"""The device-time checks of scripts/gpu_check.sh, on one CUDA GPU (docs/tables.md, "Device time").

Runs tests/gpu/workload.py with and without probing, reads what probing recorded
(`probing run -o X.db`, then `probing X.db query -f json` and `report --json`), and checks:
  identical      the MLP's losses are bit-identical with and without probing
  events_truth   the heavy model's device forward/backward per step (median) agree with
                 torch.cuda.Event pairs the workload records around the same calls in the same
                 steps (within 5 %)
  modules_sum    on detail steps, the forward modules' device self times add up to the step's
                 device forward (within 5 %)
  gpu_bound      the heavy model is called GPU-bound, with device figures
  launch_bound   the model of 200 tiny layers is called launch-bound
  item_wait      a planted loss.item() per step shows its device wait (sync_wait > 0, most of the
                 step)
  nccl           a one-rank NCCL all_reduce has device time in python.device_steps.collectives
  system_gpu     system.gpu has rows from the real NVML
  timeline       `timeline` has a device slice for every device step
  overhead       step time with probing against plain, interleaved in this run (a figure, not a
                 pass/fail)
Writes every figure to the JSON file given with --out; exits 1 when a check failed.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workload.py"


def sh(cmd, env=None, timeout=240):
    t = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return p, time.time() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--probing", required=True, help="the probing binary")
    ap.add_argument("--pythonpath", required=True, help="where the probing package is (build/python)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--quick", action="store_true", help="leave out the overhead runs")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = args.pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    plain_env = {k: v for k, v in env.items() if not k.startswith("PROBING")}
    fig, checks = {}, {}

    import torch
    fig["device"] = torch.cuda.get_device_name(0)
    fig["torch"] = torch.__version__
    fig["cuda"] = torch.version.cuda

    def run_plain(kind, steps):
        p, dt = sh([sys.executable, str(WORKLOAD), kind, "--steps", str(steps)], env=plain_env)
        if p.returncode:
            print(p.stdout[-2000:], p.stderr[-3000:])
        return p

    def run_probed(kind, steps, name):
        db = work / f"{name}.db"
        if db.exists():
            db.unlink()
        p, dt = sh([args.probing, "run", "-o", str(db), "--", sys.executable, str(WORKLOAD), kind, "--steps", str(steps)], env=env)
        if p.returncode:
            print(f"{name}: rc {p.returncode}\n", p.stdout[-2000:], p.stderr[-3000:])
        return p, db

    def query(db, sql):
        p, _ = sh([args.probing, str(db), "query", "-f", "json", sql], env=env)
        if p.returncode:
            print("query failed:", sql, p.stderr[-1500:])
            return []
        return json.loads(p.stdout or "[]")

    def report(db):
        p, _ = sh([args.probing, str(db), "report", "--json"], env=env)
        try:
            return json.loads(p.stdout)
        except Exception:
            print("report failed:", p.stdout[-1500:], p.stderr[-1500:])
            return {}

    def device_finding(rep):
        for f in rep.get("findings", []):
            if f.get("id") == "device_time":
                return f
        return {}

    def step_ms(p):
        m = re.findall(r"STEP_MS ([0-9.]+)", p.stdout)
        return float(m[-1]) if m else None

    # identical
    a = run_plain("mlp", 30)
    b, db = run_probed("mlp", 30, "mlp")
    la = re.findall(r"^LOSS .*$", a.stdout, re.M)
    lb = re.findall(r"^LOSS .*$", b.stdout, re.M)
    checks["identical"] = bool(la) and la == lb
    fig["identical_steps"] = len(la)

    # heavy: GPU-bound, events truth, module sums
    p, db = run_probed("heavy", 40, "heavy")
    rows = query(db, "SELECT * FROM python.device_steps ORDER BY step")
    fig["heavy_device_steps"] = len(rows)
    host = query(db, "SELECT step, wall, forward, backward, optimizer FROM python.steps ORDER BY step")
    if rows:
        steady = rows[len(rows) // 4:]
        fig["heavy_device_ms"] = {k: statistics.median(r[k] for r in steady) * 1e3 for k in
                                  ("wall", "forward", "backward", "optimizer", "other", "lag", "sync_wait", "anchor_error")}
        fig["heavy_dropped"] = rows[-1]["dropped"]
    if host:
        steady = host[len(host) // 4:]
        fig["heavy_host_ms"] = {k: statistics.median(r[k] for r in steady) * 1e3 for k in ("wall", "forward", "backward", "optimizer")}
    ev = re.findall(r"EVENTS fwd_ms=([0-9.]+) bwd_ms=([0-9.]+)", p.stdout)
    if ev and rows:
        fwd, bwd = float(ev[-1][0]), float(ev[-1][1])
        fig["heavy_torch_events_ms"] = {"forward": fwd, "backward": bwd}
        dfwd, dbwd = fig["heavy_device_ms"]["forward"], fig["heavy_device_ms"]["backward"]
        checks["events_truth"] = abs(dfwd - fwd) <= 0.05 * fwd and abs(dbwd - bwd) <= 0.05 * bwd
    else:
        checks["events_truth"] = False
    mods = query(db, "SELECT t.step, SUM(t.duration) AS self_sum, d.forward FROM python.device_trace t JOIN python.device_steps d "
                     "ON d.step = t.step WHERE t.stage = 'forward' GROUP BY t.step")
    fig["heavy_detail_steps"] = len(mods)
    if mods:
        errs = [abs(m["self_sum"] - m["forward"]) / m["forward"] for m in mods if m["forward"]]
        fig["modules_sum_max_rel_err"] = max(errs) if errs else None
        checks["modules_sum"] = bool(errs) and max(errs) <= 0.05
    else:
        checks["modules_sum"] = False
    tl = work / "heavy_timeline.json"
    p_tl, _ = sh([args.probing, str(db), "timeline", "-o", str(tl)], env=env)
    if p_tl.returncode == 0:
        events = json.loads(tl.read_text())["traceEvents"]
        dev_steps = [e for e in events if e.get("cat") == "device" and e["name"].endswith("(device)")]
        fig["timeline_device_slices"] = len([e for e in events if e.get("cat") == "device"])
        checks["timeline"] = len(dev_steps) == len(rows) > 0
    else:
        print("timeline failed:", p_tl.stderr[-1500:])
        checks["timeline"] = False
    f = device_finding(report(db))
    fig["heavy_finding"] = f.get("claim")
    checks["gpu_bound"] = f.get("type") == "gpu_bound"

    # tiny: launch-bound
    p, db = run_probed("tiny", 60, "tiny")
    f = device_finding(report(db))
    fig["tiny_finding"] = f.get("claim")
    rows = query(db, "SELECT * FROM python.device_steps ORDER BY step")
    if rows:
        steady = rows[len(rows) // 4:]
        fig["tiny_device_ms"] = {k: statistics.median(r[k] for r in steady) * 1e3 for k in ("wall", "forward", "backward", "optimizer", "other", "lag")}
    checks["launch_bound"] = f.get("type") == "launch_bound"

    # item: the planted .item() per step
    p, db = run_probed("item", 30, "item")
    rows = query(db, "SELECT step, wall, sync_wait, syncs FROM python.device_steps ORDER BY step")
    if rows:
        steady = rows[len(rows) // 4:]
        sw = statistics.median(r["sync_wait"] for r in steady)
        wall = statistics.median(r["wall"] for r in steady)
        fig["item_sync_wait_ms"] = sw * 1e3
        fig["item_device_wall_ms"] = wall * 1e3
        fig["item_syncs"] = statistics.median(r["syncs"] for r in steady)
        checks["item_wait"] = sw > 0.3 * wall
    else:
        checks["item_wait"] = False
    fig["item_finding"] = device_finding(report(db)).get("claim")

    # nccl
    p, db = run_probed("nccl", 20, "nccl")
    rows = query(db, "SELECT step, collectives, wall FROM python.device_steps ORDER BY step")
    nrows = query(db, "SELECT COUNT(*) AS n FROM python.nccl_trace")
    crows = query(db, "SELECT COUNT(*) AS n, AVG(total_duration) AS d FROM python.device_trace WHERE stage = 'collective'")
    fig["nccl_device_trace_rows"] = crows[0] if crows else None
    if rows:
        fig["nccl_device_collectives_ms"] = statistics.median(r["collectives"] for r in rows[len(rows) // 4:]) * 1e3
        checks["nccl"] = fig["nccl_device_collectives_ms"] > 0 and bool(crows) and crows[0]["n"] >= 15
    else:
        checks["nccl"] = False
    fig["nccl_trace_rows"] = nrows[0]["n"] if nrows else 0

    # system.gpu from the real NVML
    g = query(db, "SELECT COUNT(*) AS n, MAX(utilization) AS util, MAX(memory_used_mb) AS mem FROM system.gpu")
    fig["system_gpu"] = g[0] if g else None
    checks["system_gpu"] = bool(g) and g[0]["n"] > 0

    # overhead, interleaved: plain, probing, probing without device time (PROBING_DEVICE_TIME=0)
    def run_probed_env(kind, steps, name, extra):
        saved = dict(env)
        env.update(extra)
        try:
            return run_probed(kind, steps, name)
        finally:
            env.clear()
            env.update(saved)

    for kind, steps in () if args.quick else (("heavy", 40), ("tiny", 150)):
        res = {"plain_ms": [], "probing_ms": [], "probing_no_device_ms": []}
        for _ in range(2):
            res["plain_ms"].append(step_ms(run_plain(kind, steps)))
            res["probing_ms"].append(step_ms(run_probed(kind, steps, f"{kind}_oh")[0]))
            res["probing_no_device_ms"].append(step_ms(run_probed_env(kind, steps, f"{kind}_oh0", {"PROBING_DEVICE_TIME": "0"})[0]))
        if all(x for v in res.values() for x in v):
            base = statistics.mean(res["plain_ms"])
            res["ratio"] = statistics.mean(res["probing_ms"]) / base
            res["ratio_no_device"] = statistics.mean(res["probing_no_device_ms"]) / base
        fig[f"overhead_{kind}"] = res

    fig["checks"] = checks
    Path(args.out).write_text(json.dumps(fig, indent=1))
    print(json.dumps(fig, indent=1))
    failed = [k for k, v in checks.items() if not v]
    print("gpu_check:", "all checks passed" if not failed else "FAILED: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
