"""torch.compile under probing (issue 45): real compiles of tests/workloads/compiled.py recorded
with `probing run -o`, their python.compiles rows held against torch's own counts, and what
`probing report` makes of them; and probing's Module.__call__ wrapper adds no graph break and no
compile to a compiled model (torch._dynamo's counters and CompilationMetrics with and without
probing).

Backends: the recompile, graph-break and recompile-limit cases compile with backend="eager":
guards, recompiles, graph breaks and the limit are Dynamo's, decided before any backend runs, and
Inductor would add seconds of C++ per recompile. The healthy case compiles with Inductor (its
C++ backend works on CPU), in a cache directory of this module's own (TORCHINDUCTOR_CACHE_DIR),
because Inductor's allocations while it compiles are what a report once read as a leak. The
with/without-probing comparison uses aot_eager: Dynamo and AOT autograd, where a wrapper could
break a graph, without the C++ compile.
"""
import json
import re
import subprocess

import pytest

from conftest import PYTHON, WORKLOADS

STEPS = 12
FORWARD_LINE = next(i for i, line in enumerate((WORKLOADS / "compiled.py").read_text().splitlines(), 1)
                    if line.strip().startswith("def forward("))

CASES = {
    # the batch grows by one every step (dynamic=False), under a limit the run never reaches
    "every": ["--shapes", "every", "--limit", 64],
    # four batch sizes in turn: four compiles in the first four steps, then none
    "rotate": ["--shapes", "rotate"],
    # forward calls .item(): a graph break on every call
    "graph_break": ["--graph-break"],
    # a new batch size every step under recompile_limit 3: the frame gives up at step 3
    "limit": ["--shapes", "every", "--limit", 3],
    # one batch size, Inductor: one compile at the start
    "healthy": ["--backend", "inductor"],
}


class Run:
    def __init__(self, cli, db, stdout):
        self.cli, self.db, self.stdout = cli, db, stdout
        m = re.search(r"^dynamo: frames (\d+) graph_breaks (\d+) unique_graphs (\d+)$", stdout, re.M)
        assert m, stdout
        self.torch_frames, self.torch_breaks, self.torch_graphs = map(int, m.groups())
        self.rows = cli.query(db, "SELECT * FROM python.compiles ORDER BY rowid")
        self.steps = cli.query(db, "SELECT step, wall, compile_time FROM python.steps ORDER BY step")
        self.report = json.loads(cli(db, "report", "--json").stdout)
        self.text = cli(db, "report").stdout

    def forward_rows(self):
        return [r for r in self.rows if r["kind"] != "backward"]

    def finding(self, fid):
        found = [f for f in self.report["findings"] if f["id"] == fid]
        return found[0] if found else None


@pytest.fixture(scope="module")
def runs(cli, tmp_path_factory):
    """Each case recorded once, one after the other (the machine's two cores are shared)."""
    work = tmp_path_factory.mktemp("compile")
    env = dict(cli.env, TORCHINDUCTOR_CACHE_DIR=str(work / "inductor"))
    out = {}
    for name, args in CASES.items():
        db = work / f"{name}.db"
        r = cli("run", "-o", db, "--", PYTHON, "-u", WORKLOADS / "compiled.py", "--steps", STEPS,
                *args, env=env, timeout=300)
        assert "probing: " not in r.stderr, r.stderr
        out[name] = Run(cli, db, r.stdout)
    # torch's helper processes (Inductor's ISA probe, its compile workers) start no agent, so
    # they leave no run.pid<P>.db of their own beside the recordings
    assert sorted(p.name for p in work.glob("*.db")) == sorted(f"{n}.db" for n in CASES)
    return out


def batch(case, step):
    return 32 + step if case in ("every", "limit") else (32, 40, 48, 56)[step % 4]


def assert_compile_time_per_step(run):
    """python.steps.compile_time is the sum of the step's compiles' durations."""
    per_step = {}
    for r in run.rows:
        per_step[r["step"]] = per_step.get(r["step"], 0) + r["duration"]
    for s in run.steps:
        assert s["compile_time"] == pytest.approx(per_step.get(s["step"], 0), abs=1e-5), s
        assert s["compile_time"] <= s["wall"] + 1e-6, s


@pytest.mark.parametrize("case", ["every", "rotate"])
def test_recompiles_recorded_with_the_failed_guard(runs, case):
    run = runs[case]
    rows = run.forward_rows()
    compiled_steps = STEPS if case == "every" else 4
    assert [r["kind"] for r in rows] == ["compile"] + ["recompile"] * (compiled_steps - 1), rows
    assert [r["step"] for r in rows] == list(range(compiled_steps))
    assert [r["compile_id"] for r in rows] == [f"0/{i}" for i in range(compiled_steps)]
    for r in rows:
        assert (r["function"], r["line"]) == ("forward", FORWARD_LINE), r
        assert r["file"].endswith("tests/workloads/compiled.py"), r
        assert r["graph_breaks"] == 0 and r["break_reason"] == "", r
        assert r["duration"] > 0 and r["dynamo"] > 0, r
        assert r["inductor"] == 0, r  # backend="eager"
    assert rows[0]["reason"] == ""
    for prev, r in enumerate(rows[1:]):
        # the guard that failed: the batch dimension of x, from the last size to this one
        assert f"tensor 'x' size mismatch at index 0. expected {batch(case, prev)}, actual " \
               f"{batch(case, prev + 1)}" in r["reason"], r
        assert r["reason"].startswith(f"0/{prev}: "), r
    assert run.torch_frames == len(rows) and run.torch_breaks == 0
    assert_compile_time_per_step(run)


def test_recompile_every_step_is_the_primary_finding(runs):
    run = runs["every"]
    assert run.report["primary"] == "recompiles", run.text
    f = run.finding("recompiles")
    assert f["severity"] == "critical"
    # the window is steps 0..11; the second half, steps 6..11, recompiled in every step
    assert f["numbers"]["steady_recompiles"] == 6 and f["numbers"]["recompiles"] == STEPS - 1, f
    assert "expected 42, actual 43" in f["numbers"]["reason"], f
    assert "dynamic=True" in f["recommendation"] and "mark_dynamic" in f["recommendation"]
    assert run.text.startswith("probing report") and "primary finding: torch.compile recompiles " \
        "in steady state" in run.text, run.text
    # the compiler's allocations are not a leak, and slow compiling steps are compiles
    memory = run.finding("memory_growth")
    assert memory["severity"] == "skipped" and "torch.compile compiled in" in memory["claim"], memory
    assert not re.search(r"memory (grows|climbs)|leak", run.text, re.I), run.text
    slow = run.finding("outlier_steps")
    if slow:  # a recompile slower than the others (the machine decides): named as a compile
        assert slow["severity"] == "info" and "torch.compile compiled in" in slow["claim"], slow
    assert run.finding("compile_time") is None  # not "at the start": it goes on


def test_recompiles_in_rotation_are_compile_time_at_the_start(runs):
    run = runs["rotate"]
    assert run.report["primary"] is None, run.text
    f = run.finding("compile_time")
    assert f and f["severity"] == "info", run.text
    assert (f["numbers"]["first_step"], f["numbers"]["last_step"], f["numbers"]["recompiles"]) \
        == (0, 3, 3), f
    assert "compile time at the start: steps 0..3 ran 4 compile(s) (3 recompile(s))" in run.text
    # the four compiling steps are warm-up, said to be compiling, not left out silently (a
    # loaded machine can make the step after them slow enough to count as warm-up too: the
    # warm-up is timed, the compiles are recorded)
    warm = run.finding("first_iteration")
    assert warm["numbers"]["warmup_steps"] >= 4, warm
    assert warm["numbers"]["warmup_compile_s"] > 0 and "torch.compile compiled for" in warm["claim"]
    assert run.finding("recompiles") is None and run.finding("recompile_limit") is None


def test_graph_break_in_the_hot_path(runs):
    run = runs["graph_break"]
    rows = run.forward_rows()
    first = rows[0]
    assert (first["kind"], first["function"], first["step"]) == ("compile", "forward", 0), rows
    assert first["graph_breaks"] == 1, first
    assert "Tensor.item()" in first["break_reason"], first
    # the code after the break is a frame of its own, compiled on the same first call
    resume = [r for r in rows if r["function"].startswith("torch_dynamo_resume_in_forward_at_")]
    assert resume and resume[0]["kind"] == "compile" and resume[0]["step"] == 0, rows
    assert all(r["graph_breaks"] == 0 for r in rows[1:]), rows
    assert sum(r["graph_breaks"] for r in rows) == run.torch_breaks == 1
    assert len(rows) == run.torch_frames
    assert max(r["step"] for r in rows) <= 1, rows  # nothing compiles in steady state
    assert_compile_time_per_step(run)
    assert run.report["primary"] == "graph_breaks", run.text
    f = run.finding("graph_breaks")
    assert f["severity"] == "warning" and f["numbers"]["graph_breaks"] == 1, f
    assert "Tensor.item()" in f["claim"] and f"forward (compiled.py:{FORWARD_LINE})" in f["claim"]
    assert "capture_scalar_outputs" in f["recommendation"]


def test_recompile_limit_reached(runs):
    run = runs["limit"]
    rows = run.forward_rows()
    assert [(r["step"], r["kind"]) for r in rows] == [
        (0, "compile"), (1, "recompile"), (2, "recompile"), (3, "limit")], rows
    limit = rows[3]
    assert "recompile limit" in limit["reason"] and \
        "last guard failure: 0/2: tensor 'x' size mismatch at index 0. expected 34, actual 35" \
        in limit["reason"], limit
    # from step 3 on the frame runs eagerly: nothing more compiles
    assert all(s["compile_time"] == 0 for s in run.steps if s["step"] > 3), run.steps
    assert run.report["primary"] == "recompile_limit", run.text
    f = run.finding("recompile_limit")
    assert f["severity"] == "critical" and f["numbers"]["step"] == 3, f
    assert "runs eagerly" in f["claim"]


def test_healthy_compiled_model_is_clean(runs):
    run = runs["healthy"]
    rows = run.rows
    forward = run.forward_rows()
    assert [(r["kind"], r["function"], r["step"]) for r in forward] == [("compile", "forward", 0)]
    # Inductor compiled it (AOT autograd inside the backend, Inductor inside that)
    assert forward[0]["inductor"] > 0 and forward[0]["aot_autograd"] >= forward[0]["inductor"]
    assert forward[0]["duration"] >= forward[0]["aot_autograd"]
    assert all(r["step"] == 0 for r in rows), rows
    assert {r["kind"] for r in rows} <= {"compile", "backward"}, rows
    assert run.torch_frames == 1 and run.torch_breaks == 0
    assert_compile_time_per_step(run)
    assert run.report["primary"] is None, run.text
    assert "primary finding: none" in run.text
    f = run.finding("compile_time")
    assert f and f["numbers"]["first_step"] == 0 and f["numbers"]["last_step"] == 0, f
    assert "compile time at the start: steps 0..0" in run.text
    assert run.finding("first_iteration")["numbers"]["warmup_compile_s"] > 0
    assert run.finding("compiled_model"), run.text
    memory = run.finding("memory_growth")
    assert memory["severity"] in ("ok", "info", "skipped"), memory
    # a healthy run's RSS may still climb over 12 steps ("too few steps to tell ... under the
    # 16 MB that tells a leak from caches filling"): never a leak claim or its advice
    assert not re.search(r"memory grows|keeps a reference", run.text, re.I), run.text
    for fid in ("recompiles", "recompile_limit", "graph_breaks"):
        assert run.finding(fid) is None, run.text


# ------------------------------------------------------------------ probing adds no compile

VARIANTS = r'''
import json, sys
if sys.argv[1] == "probing":
    import probing
    assert probing.endpoint(), "agent did not start"
import torch, torch._dynamo
from torch import nn
from torch._dynamo.utils import counters, _compilation_metrics

torch.manual_seed(0)
torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self, brk=False):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
        self.head = nn.Linear(16, 1)
        self.brk = brk

    def forward(self, x):
        h = self.body(x)
        if self.brk and h.sum().item() > 1e9:
            h = h * 0
        return self.head(h.relu())


def in_place():
    m = Net()
    m.compile(backend="eager")
    return m


def function():
    m = Net()
    return torch.compile(lambda x: m(x) * 2, backend="eager")


# Each way of compiling a module takes its own path through Dynamo: an OptimizedModule of a user
# module compiles Module.__call__'s frame, of a torch.nn module (Sequential) torch's own
# wrap_inline frame, Module.compile() the module's _call_impl, a compiled function inlines the
# module call. aot_eager for the first (AOT autograd traces the graph's backward too), eager for
# the others: what a wrapper could break is Dynamo's tracing.
VARIANTS = {
    "torch.compile(module)": lambda: torch.compile(Net(), backend="aot_eager"),
    "graph break": lambda: torch.compile(Net(brk=True), backend="eager"),
    "nn.Sequential": lambda: torch.compile(
        nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1)), backend="eager"),
    "module.compile()": in_place,
    "compiled function": function,
}
out = {}
for name, make in VARIANTS.items():
    torch._dynamo.reset()
    counters.clear()
    _compilation_metrics.clear()
    f = make()
    for b in (8, 8, 12):  # 12: a recompile (automatic dynamic shapes)
        f(torch.randn(b, 16)).sum().backward()
    out[name] = {
        "frames": counters["frames"]["total"],
        "graph_breaks": counters["graph_break"].total(),
        "unique_graphs": counters["stats"]["unique_graphs"],
        "calls_captured": counters["stats"]["calls_captured"],
        "compiles": [[str(m.compile_id), m.co_name, m.graph_op_count,
                      sorted(r.splitlines()[0] for r in m.restart_reasons or ()),
                      (m.recompile_reason or "").split(":")[0]] for m in _compilation_metrics],
    }
print(json.dumps(out))
'''


def test_probing_adds_no_graph_break_and_no_compile(cli, tmp_path):
    """The same compiled models in a process with and one without probing: torch._dynamo's
    counters and compilation records are the same. Before probing's Module.__call__ wrapper
    carried the original's __name__ and __code__, torch.compile(module) wrapped it in
    external_utils.wrap_inline (a C callable has no source file) and Dynamo broke the graph on
    it: an extra frame `inner` with "Unsupported method call ... Wrapper", whose own guards
    doubled the recompiles."""
    script = tmp_path / "variants.py"
    script.write_text(VARIANTS)
    plain_env = {k: v for k, v in cli.env.items() if k != "PROBING"}

    def counts(mode):
        p = subprocess.run([PYTHON, str(script), mode], env=plain_env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        assert "probing: " not in p.stderr, p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1])

    plain, probed = counts("plain"), counts("probing")
    assert plain["torch.compile(module)"]["graph_breaks"] == 0
    assert plain["torch.compile(module)"]["frames"] == 2  # the first compile and one recompile
    assert plain["graph break"]["graph_breaks"] >= 1
    for name in plain:
        assert probed[name] == plain[name], (name, probed[name], plain[name])
