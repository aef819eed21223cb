"""Device time (docs/tables.md, "Device time") without a GPU: what CI can check.

On this machine there is no CUDA, so python.device_steps and python.device_trace stay empty and
say why, the agent's info says device timing is off, and the CPU run is otherwise unchanged (the
other suites check that). The device track of `timeline` is checked on a real recording into
which rows are written by hand as a GPU run would record them (SIMULATED device rows, labelled so
here): that the track lands where device_steps.time_offset and device_trace.time_offset place
it. The event bookkeeping itself is tests/unit/test_devtime.c (a simulated CUDA runtime); the
real thing is scripts/gpu_check.sh on a GPU (bench/RESULTS.md, "Device time on a GPU")."""
import json
import sqlite3

from conftest import PYTHON, WORKLOADS

STEPS = 8


def test_cpu_run_has_empty_device_tables_with_the_reason(cli, launcher, tmp_path):
    path = tmp_path / "run.db"
    t = launcher.command([cli.binary, "run", "-o", path, "--", PYTHON, "-u", WORKLOADS / "resnet_inplace.py",
                          "--steps", STEPS, "--hold-file", launcher.workdir / "dev.release"], name="dev")
    t.hold_file = launcher.workdir / "dev.release"
    t.wait_holding()
    tables = {(x["schema"], x["name"]): x for x in json.loads(cli(t.target(), "tables", "-f", "json").stdout)["tables"]}
    for name in ("device_steps", "device_trace"):
        tab = tables[("python", name)]
        assert tab["rows"] == 0, tab
        assert "no CUDA" in json.dumps(tab), tab
    info = json.loads(cli(t.target(), "info", "-f", "json").stdout)
    assert info["paths"]["device_time"].startswith("off"), info["paths"]
    t.finish()
    assert int(cli.scalar(path, "SELECT COUNT(*) FROM python.device_steps")) == 0
    report = json.loads(cli(path, "report", "--json").stdout)
    assert not [f for f in report["findings"] if f["id"] == "device_time"], "a CPU job has no device finding"


def test_timeline_places_the_device_track(cli, launcher, tmp_path):
    path = tmp_path / "run.db"
    t = launcher.command([cli.binary, "run", "-o", path, "--", PYTHON, "-u", WORKLOADS / "resnet_inplace.py",
                          "--steps", STEPS], name="devtl")
    t.finish()
    db = sqlite3.connect(path)
    steps = db.execute("SELECT step, wall FROM steps ORDER BY step").fetchall()
    assert len(steps) == STEPS
    # SIMULATED device rows: step s ran on the device 2 ms after the host began it, for 5 ms, and
    # its root module 1 ms into that for 3 ms.
    cols = [r[1] for r in db.execute("PRAGMA table_info(device_steps)")]
    for step, _ in steps:
        row = {c: 0 for c in cols}
        row.update(step=step, device=0, wall=0.005, forward=0.005, time_offset=0.002)
        db.execute(f"INSERT INTO device_steps ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                   [row[c] for c in cols])
        tcols = [r[1] for r in db.execute("PRAGMA table_info(device_trace)")]
        trow = {c: 0 for c in tcols}
        trow.update(step=step, seq=0, module="ResNetInplace", type="ResNetInplace", stage="forward", duration=0.003,
                    total_duration=0.003, time_offset=0.001)
        db.execute(f"INSERT INTO device_trace ({', '.join(tcols)}) VALUES ({', '.join('?' * len(tcols))})",
                   [trow[c] for c in tcols])
    db.commit()
    db.close()
    out = tmp_path / "t.json"
    cli(path, "timeline", "-o", out)
    events = json.loads(out.read_text())["traceEvents"]
    host = {e["args"]["step"]: e for e in events if e.get("cat") == "step"}
    dev = {e["args"]["step"]: e for e in events if e.get("cat") == "device" and e["name"].endswith("(device)")}
    mods = {e["args"]["step"]: e for e in events if e.get("cat") == "device" and e["name"] == "ResNetInplace"}
    assert sorted(dev) == sorted(host) == [s for s, _ in steps]
    for s in dev:
        assert abs(dev[s]["ts"] - (host[s]["ts"] + 2000)) <= 1, (dev[s], host[s])
        assert abs(dev[s]["dur"] - 5000) <= 1
        assert dev[s]["tid"] != host[s]["tid"], "the device has a track of its own"
        assert abs(mods[s]["ts"] - (dev[s]["ts"] + 1000)) <= 1 and abs(mods[s]["dur"] - 3000) <= 1
        assert mods[s]["tid"] == dev[s]["tid"]
