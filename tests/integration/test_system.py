"""system.process and system.gpu: the agent's ~1 s sampler of the process (kernel counters) and of
NVIDIA GPUs (NVML by dlopen). This machine has no GPU: the NVML path runs against the fake
library built in build/tests/fake_nvml (PROBING_NVML_LIBRARY), and the no-driver path is the real
one here."""
import os
import time

import pytest

from conftest import PYTHON, REPO

FAKE_NVML = REPO / "build" / "tests" / "fake_nvml" / "libfake_nvml.so"

# Imports torch (a real training-process shape), then spins or sleeps until released.
SCRIPT = """
import os, sys, time, torch
print("READY", flush=True)
while not os.path.exists(sys.argv[2]):
    if sys.argv[1] != "spin":
        time.sleep(0.02)
"""


def start(launcher, cli, env, mode="sleep", **extra):
    name = f"sys{launcher.counter}"
    release = launcher.workdir / f"{name}.go"
    e = dict(env, PROBING_SYSTEM_SAMPLE_MS="50", **extra)
    t = launcher.command([cli.binary, "run", "--", PYTHON, "-c", SCRIPT, mode, release], env=e)
    t.hold_file = release
    return t


def wait_rows(cli, t, table, n, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        rows = cli.query(t.target(), f"SELECT * FROM {table}")
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def tables_text(cli, t, name):
    """The block `probing <pid> tables` prints for one table: its line and the indented ones."""
    out = cli(t.target(), "tables").stdout
    lines = out[out.index(name + " "):].splitlines()
    return "\n".join([lines[0], *_take_block(lines[1:])])


def _take_block(lines):
    for line in lines:
        if line and not line.startswith(" "):
            return
        yield line


def test_process_rows_follow_the_process(cli, launcher, env):
    t = start(launcher, cli, env, mode="spin")
    rows = wait_rows(cli, t, "system.process", 10)
    assert len(rows) >= 10, rows
    assert list(rows[0]) == ["time", "cpu_percent", "rss_mb", "threads", "voluntary_ctx_switches",
                             "involuntary_ctx_switches"]
    now = time.time()
    assert all(now - 120 < r["time"] <= now + 1 for r in rows)
    assert [r["time"] for r in rows] == sorted(r["time"] for r in rows)
    # torch is imported: far more than 16 MB resident, and the figure is the kernel's
    status = open(f"/proc/{t.pid}/status").read()
    vmrss_mb = int(next(l for l in status.splitlines() if l.startswith("VmRSS:")).split()[1]) / 1024
    assert 50 < rows[-1]["rss_mb"] < 4 * vmrss_mb
    tasks = len(os.listdir(f"/proc/{t.pid}/task"))
    assert all(2 <= r["threads"] <= tasks + 8 for r in rows), (rows[-1], tasks)
    vol = [r["voluntary_ctx_switches"] for r in rows]
    assert vol == sorted(vol) and vol[-1] > 0
    # the main thread spins: the process uses a good part of a core in most samples
    busy = sorted(r["cpu_percent"] for r in rows[1:])
    assert busy[len(busy) // 2] > 20, busy


def test_gpu_rows_from_nvml(cli, launcher, env):
    if not FAKE_NVML.exists():
        pytest.fail(f"{FAKE_NVML} not built (meson builds tests/fake_nvml)", pytrace=False)
    t = start(launcher, cli, env, PROBING_NVML_LIBRARY=str(FAKE_NVML))
    rows = wait_rows(cli, t, "system.gpu", 4)
    assert len(rows) >= 4
    by_device = {}
    for r in rows:
        by_device.setdefault(r["device"], r)
    assert sorted(by_device) == [0, 1]
    for d, r in by_device.items():
        assert r["utilization"] == 40 + d
        assert r["memory_used_mb"] == 1024 + d
        assert r["memory_total_mb"] == 81920
        assert r["temperature_c"] == 50 + d
        assert r["power_w"] == 300 + d
        assert r["sm_clock_mhz"] == 1410 + d
    # both devices are sampled at the same instants, and with the process rows
    times = cli.query(t.target(), "SELECT DISTINCT time FROM system.gpu "
                                  "WHERE time IN (SELECT time FROM system.process)")
    assert len(times) >= 2


def test_no_driver_says_why(cli, launcher, env):
    missing = "/nonexistent/libnvidia-ml.so.1"
    t = start(launcher, cli, env, PROBING_NVML_LIBRARY=missing)
    wait_rows(cli, t, "system.process", 2)
    assert cli.query(t.target(), "SELECT COUNT(*) AS n FROM system.gpu") == [{"n": 0}]
    text = tables_text(cli, t, "system.gpu")
    assert (f"(empty: no NVIDIA driver: {missing} could not be loaded ({missing}: cannot open "
            "shared object file: No such file or directory))") in text, text


def test_default_library_absent_here(cli, launcher, env):
    """This machine has no NVIDIA driver: the real default name fails to load, and that is all."""
    t = start(launcher, cli, env)
    reason = cli.query(t.target(), "SELECT empty_reason FROM probe.tables "
                                   "WHERE schema = 'system' AND name = 'gpu'")
    assert reason and reason[0]["empty_reason"].startswith(
        "no NVIDIA driver: libnvidia-ml.so.1 could not be loaded ("), reason


def test_nvml_init_failure_says_why(cli, launcher, env):
    t = start(launcher, cli, env, PROBING_NVML_LIBRARY=str(FAKE_NVML), FAKE_NVML_INIT_ERROR="9")
    text = tables_text(cli, t, "system.gpu")
    assert "(empty: NVML could not start (nvmlInit_v2: Driver Not Loaded))" in text, text
    assert cli.query(t.target(), "SELECT COUNT(*) AS n FROM system.gpu") == [{"n": 0}]


def test_process_table_listed_with_columns(cli, launcher, env):
    t = start(launcher, cli, env)
    text = tables_text(cli, t, "system.process")
    for column in ["time", "cpu_percent", "rss_mb", "threads", "voluntary_ctx_switches",
                   "involuntary_ctx_switches"]:
        assert column in text
