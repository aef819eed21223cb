"""`probing <target> capture`: torch.profiler for N steps of a live CPU training run, started and
stopped at step boundaries on the training thread, its ops in python.torch_ops with the module
they ran under, its Chrome trace fetched over the API; one capture at a time; a process that does
not step times out cleanly and can be captured later; training numbers are unchanged."""
import json
import re
import subprocess
import time

import pytest

from conftest import PYTHON, WORKLOADS, api_get

HEADER = re.compile(r"^capture (\d+): (\d+) steps? \((\d+)-(\d+)\) of (\S+), CPU activities only "
                    r"\(the process does not use CUDA: no kernel rows, device columns NULL\)$", re.M)


def parse_header(stdout):
    m = HEADER.search(stdout)
    assert m, f"no capture header in:\n{stdout}"
    capture, steps, first, last = (int(m.group(i)) for i in range(1, 5))
    return capture, steps, first, last


def linears(t):
    return {name for name, kind in t.modules().items() if kind == "Linear"}


@pytest.fixture(scope="module")
def training(session_launcher):
    """transformer.py training for as long as the tests need it (killed at the end)."""
    t = session_launcher.traced("transformer.py", "--steps", 1_000_000, "--print-every", 10)
    t.wait_steps(10)
    yield t
    t.kill()


@pytest.fixture
def holding(launcher):
    """transformer.py that trained 3 steps and now waits: no step boundary comes by itself;
    `trainer.train_step()` through eval makes steps on demand."""
    t = launcher.traced("transformer.py", "--steps", 3, "--print-every", 1)
    t.wait_holding()
    return t


def capture_status(t):
    status, body = api_get(t.socket_path, "/api/capture")
    assert status == 200, body
    return body


def test_capture_names_the_aten_ops_of_each_module(cli, training, tmp_path):
    trace_path = tmp_path / "trace.json"
    r = cli(training.target(), "capture", "--steps", 3, "-o", trace_path)
    assert r.stderr == ""
    capture, steps, first, last = parse_header(r.stdout)
    assert steps == 3 and last == first + 2
    assert re.search(r"^\d+ rows in python\.torch_ops from \d+ profiler events", r.stdout, re.M)
    assert "top ops by self CPU time" in r.stdout
    assert re.search(r"^aten::\S+\s+\d+\s+[\d.]+", r.stdout, re.M), r.stdout
    assert (f"probing {training.target()} query \"SELECT module, stage, name, sum(calls) AS calls, "
            f"sum(self_cpu_us) AS self_us FROM python.torch_ops WHERE capture = {capture} GROUP BY "
            "module, stage, name ORDER BY self_us DESC LIMIT 20\"") in r.stdout
    assert re.search(rf"^trace: wrote {re.escape(str(trace_path))} \([\d.]+ MB Chrome trace", r.stdout, re.M)

    where = f"FROM python.torch_ops WHERE capture = {capture}"
    # Rows for the captured steps, and only those.
    steps_seen = [row["step"] for row in cli.query(training.target(),
                                                  f"SELECT DISTINCT step {where} ORDER BY step")]
    assert steps_seen == [first, first + 1, first + 2]
    # Every Linear of the model ran aten::linear once per step in forward, and the matmul under
    # it (addmm) is charged to that Linear by its qualified name.
    per_module = cli.query(training.target(), f"SELECT module, step, sum(calls) AS calls {where} "
                           "AND name = 'aten::linear' AND stage = 'forward' GROUP BY module, step")
    expected = linears(training)
    assert len(expected) == 4 * 6 + 1  # q, k, v, out, fc1, fc2 per block, and lm_head
    assert {(row["module"], row["step"]) for row in per_module} == \
        {(m, s) for m in expected for s in steps_seen}
    assert all(row["calls"] == 1 for row in per_module), per_module
    addmm = {row["module"] for row in cli.query(
        training.target(), f"SELECT DISTINCT module {where} AND name = 'aten::addmm' AND stage = 'forward'")}
    assert addmm == expected
    assert "layers.0.attn.q_proj" in addmm
    # Backward matmuls are charged to the module whose forward made them.
    backward = {row["module"] for row in cli.query(
        training.target(), f"SELECT DISTINCT module {where} AND name = 'aten::mm' AND stage = 'backward'")}
    assert expected <= backward, expected - backward
    # The optimizer's ops, and CPU-only columns.
    assert cli.scalar(training.target(), f"SELECT count(*) {where} AND stage = 'optimizer' "
                      "AND name LIKE 'Optimizer.step#Adam%'") == 3
    assert cli.scalar(training.target(), f"SELECT count(*) {where} AND (self_device_us IS NOT NULL "
                      "OR input_shapes IS NOT NULL OR stack IS NOT NULL OR self_cpu_memory IS NOT NULL "
                      "OR device_type <> 'cpu')") == 0
    assert cli.scalar(training.target(), f"SELECT count(*) {where} AND (self_cpu_us < 0 OR "
                      "total_cpu_us < self_cpu_us OR calls < 1)") == 0
    # Aggregated: a few thousand rows for three steps of a 60-module model, not one per call.
    counts = cli.query(training.target(), f"SELECT count(*) AS n, sum(calls) AS c {where}")[0]
    assert counts["n"] < counts["c"] / 2

    # The captured steps are detail steps (module rows to join with), whatever the detail
    # windows would have made them.
    flags = cli.query(training.target(), f"SELECT step, detail FROM python.steps WHERE step BETWEEN "
                      f"{first} AND {last} ORDER BY step")
    assert [(r["step"], r["detail"]) for r in flags] == [(s, 1) for s in steps_seen]
    assert cli.scalar(training.target(), f"SELECT count(DISTINCT step) FROM python.torch_trace "
                      f"WHERE step BETWEEN {first} AND {last}") == 3

    # The Chrome trace holds the same ops and the module ranges.
    doc = json.loads(trace_path.read_text())
    names = {e.get("name") for e in doc["traceEvents"]}
    assert {"aten::addmm", "aten::linear", "module: layers.0.attn.q_proj"} <= names
    # The trace left the process's directory once sent.
    assert not list(training.socket_dir.glob(f"{training.pid}.capture-*"))
    status = capture_status(training)
    assert status["state"] == "done" and status["trace"] == "sent" and status["activities"] == ["cpu"]

    # Training goes on.
    before = training.steps_done()
    training.wait_steps(before + 10)
    assert training.alive()
    tables = cli(training.target(), "tables").stdout
    assert re.search(r"^python\.torch_ops  rows=\d+ capacity=\d+ dropped=0$", tables, re.M)


def test_one_capture_at_a_time(cli, training):
    long = subprocess.Popen([cli.binary, training.target(), "capture", "--steps", "20"],
                            env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while capture_status(training)["state"] not in ("pending", "running"):
            assert time.monotonic() < deadline and long.poll() is None, "the first capture never started"
            time.sleep(0.02)
        r = cli(training.target(), "capture", check=False)
        assert r.returncode == 1 and r.stdout == ""
        assert re.fullmatch(r"probing: one capture runs at a time and capture \d+ is (running \(\d+ of "
                            r"20 steps captured\)|waiting for the next step boundary \(asked for "
                            r"during step \d+\)); wait for it to end\n", r.stderr), r.stderr
        out, err = long.communicate(timeout=240)
    finally:
        if long.poll() is None:
            long.kill()
    assert long.returncode == 0, err
    capture, steps, first, last = parse_header(out)
    assert steps == 20 and last - first == 19


def test_capture_of_a_process_that_is_not_stepping_times_out(cli, holding):
    t0 = time.monotonic()
    r = cli(holding.target(), "capture", "--timeout", "1.5", check=False)
    assert r.returncode == 124 and r.stdout == ""  # a timeout, not a usage error (2)
    assert r.stderr == (
        "probing: capture 1: no result within 1.5 s (--timeout): the target did not reach a step "
        "boundary (it ends a training step at optimizer.step(), or, without an optimizer, at the "
        "next forward of its model). Is it training? The capture was cancelled; the process runs "
        "on untouched.\n")
    assert time.monotonic() - t0 < 30
    status = capture_status(holding)
    assert status["capture"] == 1 and status["state"] == "cancelled" and status["first_step"] is None
    assert holding.alive()

    # Steps made later do not start the cancelled capture; a new capture gets them, with every
    # option on.
    late = subprocess.Popen([cli.binary, holding.target(), "capture", "--steps", "2", "--shapes",
                             "--memory", "--stack", "--timeout", "120"],
                            env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while capture_status(holding).get("capture") != 2:
            assert time.monotonic() < deadline and late.poll() is None, "capture 2 was not asked for"
            time.sleep(0.02)
        # The agent cannot leave while a capture waits to start (or runs).
        r = cli(holding.target(), "detach", check=False)
        assert r.returncode == 1
        assert r.stderr == ("probing: cannot detach while capture 2 is waiting for the next step "
                            "boundary (asked for during step 3): the capture must end first (the "
                            "training thread stops torch.profiler at a step boundary); wait for "
                            "it, or cancel it\n")
        assert holding.socket_path.exists()
        cli.eval(holding.target(), "for _ in range(4): trainer.train_step()")
        out, err = late.communicate(timeout=120)
    finally:
        if late.poll() is None:
            late.kill()
    assert late.returncode == 0, err
    capture, steps, first, last = parse_header(out)
    assert (capture, steps) == (2, 2)
    assert cli.scalar(holding.target(), "SELECT count(*) FROM python.torch_ops WHERE capture <> 2") == 0
    addmm = cli.query(holding.target(), "SELECT module, input_shapes, stack, self_cpu_memory FROM "
                      "python.torch_ops WHERE name = 'aten::addmm' AND module = 'layers.0.mlp.fc1' "
                      "AND stage = 'forward'")
    assert len(addmm) == 2  # one row per step
    for row in addmm:
        assert row["input_shapes"] == "[[256], [256, 64], [64, 256], [], []]"  # bias, x (8*32 x 64), W^T
        assert re.match(r"transformer\.py\(\d+\): forward; .*_workload\.py\(\d+\): train_step$", row["stack"]), row["stack"]
        assert row["self_cpu_memory"] == 256 * 256 * 4  # the output, float32
    # The holding process is fine and finishes as usual.
    holding.finish()


def test_bad_steps_and_options_are_usage_errors(cli):
    for value in ("0", "21", "x", "-1", "2.5", ""):
        r = cli("1", "capture", "--steps", value, check=False)
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr == f"probing: --steps wants a number of steps from 1 to 20, not '{value}'\n"
    r = cli("1", "capture", "--steps", check=False)
    assert r.returncode == 2 and r.stderr == "probing: option --steps needs a value\n"
    r = cli("1", "capture", "--timeout", "0", check=False)
    assert r.returncode == 2 and r.stderr.startswith("probing: --timeout wants a number of seconds above 0")
    r = cli("1", "capture", "--folded", check=False)
    assert r.returncode == 2 and r.stderr.startswith("probing: unknown option '--folded' for capture")
    r = cli("1", "capture", "now", check=False)
    assert r.returncode == 2
    assert r.stderr == "probing: capture takes no arguments (got 'now'); see 'probing capture --help'\n"
    r = cli("capture", check=False)
    assert r.returncode == 2 and r.stderr.startswith("probing: capture needs a target: probing <target> capture")
    help_text = cli("capture", "--help").stdout
    assert help_text.startswith("Usage: probing <target> capture [--steps N] [--memory] [--shapes] "
                                "[--stack] [-o FILE.json] [--timeout S] [--ranks all|0,2-5 [-o DIR] "
                                "[--deadline S]]\n")
    assert "capture" in cli("--help").stdout


def test_unwritable_output_fails_before_capturing(cli, training):
    before = capture_status(training).get("capture")
    r = cli(training.target(), "capture", "-o", "/nonexistent/dir/trace.json", check=False)
    assert r.returncode == 1
    assert r.stderr == "probing: cannot write /nonexistent/dir/trace.json: No such file or directory\n"
    assert capture_status(training).get("capture") == before


def test_training_after_a_capture_is_bit_identical(cli, launcher):
    args = ("transformer.py", "--steps", 150, "--print-every", 1)
    traced = launcher.traced(*args, hold=False)
    traced.wait_steps(3)
    r = cli(traced.target(), "capture", "--steps", 3, "--shapes", "--memory")
    capture, steps, first, last = parse_header(r.stdout)
    with_probing = traced.finish()
    plain = launcher.plain(*args)
    without = plain.finish()
    lines = [line for line in with_probing.splitlines() if re.match(r"^(step \d+ |final loss: )", line)]
    assert len(lines) == 151
    assert lines == [line for line in without.splitlines()
                     if re.match(r"^(step \d+ |final loss: )", line)]
    assert last < 150  # the capture ended while training ran
    assert "probing: " not in traced.stderr(), traced.stderr()


def test_capture_in_an_inference_loop_and_in_a_recording(cli, launcher, tmp_path):
    """Without an optimizer a step is one forward of the model; a recording keeps the rows."""
    path = tmp_path / "run.db"
    env = dict(cli.env, PROBING_RECORD_FLUSH_MS="100")
    cmd = [cli.binary, "run", "-o", path, "--", PYTHON, "-u", WORKLOADS / "inference.py",
           "--steps", 1_000_000, "--print-every", 1000]
    t = launcher.command(cmd, env=env, name="inference")
    t.wait_steps(1000)
    r = cli(t.target(), "capture", "--steps", 4)
    capture, steps, first, last = parse_header(r.stdout)
    assert steps == 4
    live = cli.query(t.target(), "SELECT step, name, module, stage, calls FROM python.torch_ops "
                     "ORDER BY step, name, module")
    assert {row["step"] for row in live} == set(range(first, last + 1))
    assert {row["module"] for row in live if row["name"] == "aten::addmm"} == \
        {"encoder.0", "encoder.2", "head"}
    assert {row["stage"] for row in live} <= {"forward", "other"}  # no_grad: no backward
    deadline = time.monotonic() + 30
    while True:  # the recorder flushes every 100 ms
        recorded = cli.query(path, "SELECT step, name, module, stage, calls FROM python.torch_ops "
                             "ORDER BY step, name, module")
        if recorded == live or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert recorded == live
    nulls = cli.query(path, "SELECT count(input_shapes) AS s, count(self_cpu_memory) AS m, "
                      "count(self_device_us) AS d, count(module) AS mod, count(*) AS n FROM python.torch_ops")[0]
    assert nulls["s"] == nulls["m"] == nulls["d"] == 0 and 0 < nulls["mod"] < nulls["n"]
    r = cli(path, "capture", check=False)
    assert r.returncode == 1
    assert r.stderr.startswith("probing: a recording cannot capture: capture needs a live process")


def test_capture_leaves_nothing_in_the_jobs_stderr(cli, launcher):
    """torch's profiler (Kineto) prints two 'USDT: ... profiler_start/profiler_stop' lines into
    the process's stderr per profile; a capture keeps them out of the job's stderr (issue 28),
    and leaves the program's environment as it was."""
    traced = launcher.traced("transformer.py", "--steps", 150, "--print-every", 1, hold=False)
    traced.wait_steps(3)
    r = cli(traced.target(), "capture", "--steps", 2)
    parse_header(r.stdout)
    env = cli(traced.target(), "eval", "import os; print(os.environ.get('KINETO_LOG_LEVEL'))")
    assert env.stdout.strip() == "None", env.stdout
    traced.finish()
    assert "USDT" not in traced.stderr(), traced.stderr()
    assert "profiler_start" not in traced.stderr(), traced.stderr()
