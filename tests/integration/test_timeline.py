"""`probing <target> timeline` and `probing <target> flamegraph`: the real binary against a real,
finished-but-holding CPU training (tests/workloads/planted.py, healthy: an MLP fed by a
DataLoader), checked against the same record read through SQL."""
import json
import xml.etree.ElementTree as ET

import pytest

STEPS = 8


@pytest.fixture(scope="module")
def healthy(session_launcher):
    t = session_launcher.traced("planted.py", "--case", "healthy", "--steps", STEPS, "--print-every", 1)
    t.wait_holding()
    yield t
    t.kill()


def timeline(cli, t, tmp_path):
    out = tmp_path / "run.json"
    r = cli(t.target(), "timeline", "-o", out)
    assert r.stdout == ""
    assert r.stderr.startswith("probing: wrote "), r.stderr
    with open(out) as f:
        return json.load(f)


def test_timeline_is_a_nested_chrome_trace_with_every_step(cli, healthy, tmp_path):
    doc = timeline(cli, healthy, tmp_path)
    events = doc["traceEvents"]
    assert events
    for e in events:
        assert set(e) >= {"name", "ph", "ts", "dur", "pid", "tid"}, e
        assert e["ph"] == "X" and isinstance(e["name"], str) and e["name"]
        assert e["ts"] >= 0 and e["dur"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    # Slices nest within each thread: sorted by start (longest first), each one ends inside
    # every slice still open when it starts.
    by_thread = {}
    for e in events:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    eps = 0.0015  # microseconds are printed with 3 decimals
    for slices in by_thread.values():
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in slices:
            while open_ends and open_ends[-1] <= e["ts"] + eps:
                open_ends.pop()
            if open_ends:
                assert e["ts"] + e["dur"] <= open_ends[-1] + eps, (e, open_ends[-1])
            open_ends.append(e["ts"] + e["dur"])
    # Every recorded step is one slice; steps follow each other.
    steps = [r["step"] for r in cli.query(healthy.target(),
                                          "SELECT step FROM python.steps ORDER BY step")]
    assert steps == list(range(STEPS))
    step_slices = sorted((e for e in events if e["cat"] == "step"), key=lambda e: e["ts"])
    assert [e["name"] for e in step_slices] == [f"step {s}" for s in steps]
    for a, b in zip(step_slices, step_slices[1:]):
        assert abs(a["ts"] + a["dur"] - b["ts"]) < 0.01
    # Every module execution and data wait of those steps is there, inside its step.
    rows = int(cli.scalar(healthy.target(),
                          f"SELECT COUNT(*) FROM python.torch_trace WHERE step < {STEPS}"))
    modules = [e for e in events if e["cat"] in ("forward", "backward", "optimizer")]
    assert len([e for e in modules if e["args"]["step"] < STEPS]) == rows
    names = set(healthy.modules()) | healthy.other_roots() | {healthy.optimizer_name()}
    assert {e["name"] for e in modules} <= names
    waits = int(cli.scalar(healthy.target(),
                           f"SELECT COUNT(*) FROM python.dataloader_trace WHERE step < {STEPS}"))
    assert waits >= STEPS
    assert len([e for e in events if e["cat"] == "data" and e["args"]["step"] < STEPS]) == waits
    start = {e["args"]["step"]: e for e in step_slices}
    for e in events:
        s = start.get(e["args"]["step"])
        if s and e["tid"] == s["tid"] and e["cat"] != "step":
            assert s["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + eps


def test_timeline_to_stdout(cli, healthy):
    r = cli(healthy.target(), "timeline", "-o", "-")
    assert r.stderr == ""
    assert json.loads(r.stdout)["traceEvents"]


def folded(cli, t, *extra):
    r = cli(t.target(), "flamegraph", "--folded", *extra)
    assert r.stderr == ""
    lines = r.stdout.splitlines()
    assert lines
    out = {}
    for line in lines:
        stack, us = line.rsplit(" ", 1)
        assert stack not in out, f"stack printed twice: {stack}"
        out[stack] = int(us)
    return out


@pytest.mark.parametrize("stage", ["forward", "backward", "all"])
def test_folded_lines_sum_to_recorded_self_time(cli, healthy, stage):
    stacks = folded(cli, healthy, *([] if stage == "forward" else ["--stage", stage]))
    where = "" if stage == "all" else f" WHERE stage = '{stage}'"
    total_us = float(cli.scalar(healthy.target(),
                                f"SELECT SUM(duration) * 1e6 FROM python.torch_trace{where}"))
    # Each line is rounded to a microsecond.
    assert abs(sum(stacks.values()) - total_us) <= len(stacks), (sum(stacks.values()), total_us)
    root = healthy.root_name()
    modules = set(healthy.modules())
    for stack in stacks:
        frames = stack.split(";")
        if stage == "all":
            assert frames[0] in ("forward", "backward", "step")
            frames = frames[1:]
        if frames[0] == root and len(frames) > 1:
            # root;layer1;layer1.0;...: each frame extends the previous qualified name.
            for parent, child in zip(frames[1:], frames[2:]):
                assert child.startswith(parent + "."), stack
            assert frames[-1] in modules, stack
    if stage == "forward":
        assert any(s.split(";")[0] == root and len(s.split(";")) > 1 for s in stacks)


def test_flamegraph_svg_is_well_formed(cli, healthy, tmp_path):
    out = tmp_path / "modules.svg"
    r = cli(healthy.target(), "flamegraph", "-o", out)
    assert r.stdout == "" and r.stderr == ""
    svg = ET.parse(out).getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    ns = {"s": "http://www.w3.org/2000/svg"}
    titles = [t.text for t in svg.iterfind(".//s:g/s:title", ns)]
    assert any(t.startswith("all (") for t in titles)
    assert any(t.startswith(healthy.root_name() + " (") for t in titles), titles
    assert svg.findall(".//s:g/s:rect", ns)


def test_flamegraph_folded_to_a_file(cli, healthy, tmp_path):
    out = tmp_path / "modules.folded"
    r = cli(healthy.target(), "flamegraph", "--folded", "-o", out)
    assert r.stdout == "" and r.stderr == ""
    assert out.read_text() == cli(healthy.target(), "flamegraph", "--folded").stdout


@pytest.mark.parametrize("args, message", [
    (["timeline"], "probing: timeline needs an output file: probing <target> timeline -o "
                   "run.json\n"),
    (["timeline", "-o"], "probing: option -o needs a value\n"),
    (["timeline", "--stage", "all", "-o", "x.json"],
     "probing: unknown option '--stage' for timeline; see 'probing timeline --help' (use -- "
     "before an argument that starts with '-')\n"),
    (["flamegraph"], "probing: flamegraph needs -o FILE.svg, or --folded for text: probing "
                     "<target> flamegraph -o modules.svg\n"),
    (["flamegraph", "--folded", "--stage", "sideways"],
     "probing: --stage wants forward, backward, step or all, not 'sideways'\n"),
    (["flamegraph", "extra", "--folded"],
     "probing: flamegraph takes no arguments (got 'extra'); see 'probing flamegraph --help'\n"),
])
def test_bad_input(cli, healthy, args, message):
    r = cli(healthy.target(), *args, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", message)


@pytest.mark.parametrize("command", [["timeline", "-o"], ["flamegraph", "-o"]])
def test_unwritable_output(cli, healthy, command):
    r = cli(healthy.target(), *command, "/nonexistent-dir/out", check=False)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == "probing: cannot write /nonexistent-dir/out: No such file or directory\n"
