"""What the rows of python.torch_trace mean: module names as named_modules() gives them, depth,
stages, steps (optimizer.step() ends a step; without an optimizer one root forward is one step),
and that DataLoader workers and torch.compile behave exactly as without probing."""
import json
import os
import re
import textwrap

import pytest

from conftest import PYTHON

CONTAINERS = {"ModuleList", "ModuleDict", "ParameterList", "ParameterDict"}  # never called


@pytest.fixture(params=["resnet", "transformer"])
def run(request):
    return request.getfixturevalue(f"{request.param}_run")


def called_modules(run):
    """{name: class} of every module a training step calls: the model's modules except pure
    containers (a ModuleList is iterated, never called), plus the loss module."""
    called = {n: kind for n, kind in run.modules().items() if kind not in CONTAINERS}
    called.update({name: name for name in run.other_roots()})
    return called


def test_forward_modules_are_named_modules(cli, run):
    called = called_modules(run)
    rows = cli.query(run.target(), "SELECT DISTINCT module, type FROM python.torch_trace "
                                   "WHERE stage = 'forward'")
    assert {r["module"] for r in rows} == set(called)
    for r in rows:
        assert r["type"] == called[r["module"]], r


def test_depth_follows_the_dots(cli, run):
    """depth counts the called modules the module is nested in: the dots of its name, less the
    containers that are never called (layers.0.ln1 sits in the root and layers.0: depth 2)."""
    called = called_modules(run)
    roots = {run.root_name()} | run.other_roots()
    rows = cli.query(run.target(), "SELECT DISTINCT module, depth FROM python.torch_trace "
                                   "WHERE stage != 'step'")
    assert rows
    for r in rows:
        name = r["module"]
        if name in roots:
            expected = 0
        else:
            parts = name.split(".")
            enclosing = [".".join(parts[:i]) for i in range(1, len(parts))]
            expected = 1 + sum(1 for prefix in enclosing if prefix in called)
        assert r["depth"] == expected, r


def test_stages_and_steps(cli, run):
    target = run.target()
    stages = {r["stage"] for r in cli.query(target, "SELECT DISTINCT stage FROM python.torch_trace")}
    assert stages == {"forward", "backward", "step"}
    optimizer = run.optimizer_name()
    # one 'step' row per detail step, naming the optimizer; python.steps has a row for every
    # step the script's trainer ran
    per_step = cli.query(target, "SELECT step, COUNT(*) AS n, MIN(module) AS m FROM "
                                 "python.torch_trace WHERE stage = 'step' GROUP BY step")
    assert all(r["n"] == 1 and r["m"] == optimizer for r in per_step), per_step[:5]
    all_steps = cli.query(target, "SELECT step, detail FROM python.steps ORDER BY step")
    assert len(all_steps) == int(cli.eval(target, "print(trainer.step)"))
    assert [r["step"] for r in all_steps] == list(range(len(all_steps)))
    steps = [r["step"] for r in per_step]
    assert steps == [r["step"] for r in all_steps if r["detail"]]
    assert steps[:8] == list(range(8))
    # one root forward per step
    root = run.root_name()
    assert cli.scalar(target, f"SELECT COUNT(*) FROM python.torch_trace WHERE module = '{root}' "
                              f"AND stage = 'forward'") == len(per_step)


def test_backward_rows(cli, run):
    modules = run.modules()
    rows = cli.query(run.target(), "SELECT DISTINCT module FROM python.torch_trace "
                                   "WHERE stage = 'backward'")
    backward = {r["module"] for r in rows}
    assert backward <= set(modules) | run.other_roots()
    leaves_with_weights = cli.eval(run.target(), textwrap.dedent("""\
        for n, m in model.named_modules():
            if not list(m.children()) and list(m.parameters(recurse=False)):
                print(n)"""))
    expected = set(leaves_with_weights.split()) - {"embed_tokens", "embed_positions"}
    # (an embedding's input is integer indices: no gradient flows into the module's input)
    assert expected and expected <= backward, sorted(expected - backward)


def test_order_and_time_within_a_step(cli, run):
    target = run.target()
    check = cli.query(target, """
        SELECT step, COUNT(*) AS n, COUNT(DISTINCT seq) AS distinct_seq,
               MIN(time_offset) AS first, MIN(duration) AS shortest
        FROM python.torch_trace GROUP BY step""")
    for r in check:
        assert r["n"] == r["distinct_seq"], r
        assert r["first"] >= 0 and r["shortest"] >= 0, r
    # within a step, seq follows time: the optimizer step comes last, the root forward first
    root = run.root_name()
    last = cli.scalar(target, "SELECT MAX(step) FROM python.steps WHERE detail = 1")  # a whole step
    rows = cli.query(target, f"SELECT seq, module, stage, time_offset FROM python.torch_trace "
                             f"WHERE step = {last} ORDER BY seq")
    assert rows[-1]["stage"] == "step"
    offsets = [r["time_offset"] for r in rows if r["stage"] == "forward"]
    forward_root = [r for r in rows if r["module"] == root and r["stage"] == "forward"]
    assert len(forward_root) == 1
    assert forward_root[0]["time_offset"] == min(offsets)


def test_duration_is_self_time(cli, run):
    """`duration` is a module's own time (nested modules excluded) and `total_duration` its
    whole span, so the seed's SUM(duration) per stage counts every moment once."""
    target = run.target()
    root = run.root_name()
    others = run.other_roots()
    assert cli.scalar(target, "SELECT COUNT(*) FROM python.torch_trace "
                              "WHERE total_duration < duration - 1e-9") == 0
    not_other = " AND ".join(f"module != '{o}'" for o in others) or "1"
    rows = cli.query(target, f"""
        SELECT step, stage, SUM(duration) AS own,
               MAX(CASE WHEN module = '{root}' THEN total_duration END) AS root_total
        FROM python.torch_trace
        WHERE step > (SELECT MAX(step) - 5 FROM python.torch_trace) AND stage != 'step'
          AND {not_other}
        GROUP BY step, stage""")
    # a forward and a backward group for each recorded step among the last 5 step numbers
    # (5 with every step in detail; a run may end inside a detail window, leaving fewer)
    steps = {r["step"] for r in rows}
    assert 1 <= len(steps) <= 5 and len(rows) == 2 * len(steps), rows
    for r in rows:
        if r["stage"] == "forward":
            # the model's own times add up to its root forward, exactly
            assert abs(r["own"] - r["root_total"]) <= 1e-3 * r["root_total"] + 2e-6, r
        else:
            assert r["own"] <= r["root_total"] * 1.01 + 2e-6, r
            assert r["own"] >= r["root_total"] * 0.5, r
    # a module with no module inside: its own time is its whole time
    called = called_modules(run)
    leaves = [n for n in called if n != root and n not in others
              and not any(other.startswith(n + ".") for other in called)]
    names = ", ".join(f"'{n}'" for n in leaves)
    assert cli.scalar(target, f"SELECT MAX(ABS(total_duration - duration)) FROM "
                              f"python.torch_trace WHERE stage = 'forward' AND module IN ({names})"
                      ) < 1e-9


def test_one_thread_and_rank_while_training(cli, run):
    rows = cli.query(run.target(), "SELECT COUNT(DISTINCT thread) AS threads, "
                                   "COUNT(DISTINCT rank) AS ranks, MIN(rank) AS rank "
                                   "FROM python.torch_trace WHERE step BETWEEN 5 AND 200")
    assert rows == [{"threads": 1, "ranks": 1, "rank": 0}]


def test_memory_columns(cli, run):
    row = cli.query(run.target(), "SELECT MIN(allocated) AS lo, MAX(allocated) AS hi, "
                                  "MIN(max_allocated - allocated) AS gap FROM python.torch_trace")[0]
    # RSS in MB on CPU: a torch process uses tens of MB at least
    assert 10 < row["lo"] <= row["hi"] < 1_000_000
    assert row["gap"] >= 0, "max_allocated is never below allocated"


# ----------------------------------------------------------------------------- other workloads


def test_inference_one_forward_is_one_step(cli, traced, env):
    t = traced("inference.py", "--steps", 20, env=dict(env, PROBING_DETAIL_EVERY="1"))
    t.wait_holding()
    rows = cli.query(t.target(), "SELECT step, COUNT(*) AS n FROM python.torch_trace "
                                 "WHERE module = 'Classifier' GROUP BY step ORDER BY step")
    assert len(rows) == 20 and all(r["n"] == 1 for r in rows)
    steps = [r["step"] for r in rows]
    assert steps == list(range(steps[0], steps[0] + 20))
    assert cli.scalar(t.target(), "SELECT COUNT(*) FROM python.torch_trace "
                                  "WHERE stage != 'forward'") == 0
    # each step holds the whole forward: root, encoder and its 4 layers, dropout, head
    per_step = cli.query(t.target(), "SELECT step, COUNT(*) AS n FROM python.torch_trace "
                                     "GROUP BY step")
    assert {r["n"] for r in per_step} == {8}
    t.finish()


def test_edge_cases_are_recorded(cli, traced):
    t = traced("edge_cases.py", "--steps", 5)
    t.wait_holding()
    forward = {(r["module"]): r["n"] for r in cli.query(
        t.target(), "SELECT module, COUNT(*) AS n FROM python.torch_trace "
                    "WHERE stage = 'forward' AND step = (SELECT MAX(step) FROM python.torch_trace) "
                    "GROUP BY module")}
    # tuple and dict outputs, parameter-free modules, keyword arguments
    for name in ("EdgeModel", "split", "gate", "identity", "head", "hooked", "block"):
        assert forward.get(name) == 1, (name, forward)
    # the shared module, called twice per forward
    assert forward.get("shared") == 2, forward
    backward = {r["module"] for r in cli.query(
        t.target(), "SELECT DISTINCT module FROM python.torch_trace WHERE stage = 'backward'")}
    for name in ("stem.0", "shared", "split.proj", "hooked", "head.fc", "block.inner.0",
                 "block.inner.2", "split", "head"):
        assert name in backward, (name, sorted(backward))
    # the user's hooks ran once per step each
    assert "hook calls: pre=5 forward=5 backward=5" in t.finish()


def test_dataloader_workers_do_not_serve(cli, traced, socket_dir):
    t = traced("resnet_inplace.py", "--steps", 1_000_000, "--workers", 2, "--print-every", 1,
               hold=False)
    t.wait_steps(3)
    workers = children_of(t.pid)
    assert len(workers) >= 2, f"expected 2 DataLoader workers under {t.pid}, found {workers}"
    sockets = sorted(p.name for p in socket_dir.iterdir() if p.name.endswith(".sock"))
    assert f"{t.pid}.sock" in sockets
    for w in workers:
        assert f"{w}.sock" not in sockets
        r = cli(w, "query", "SELECT 1", check=False)
        assert r.returncode == 1 and "is not traced by probing" in r.stderr, r.stderr
    # an epoch is 64 steps: workers are replaced at each epoch, and training goes on
    t.wait_steps(140, timeout=240)
    assert cli.scalar(t.target(), "SELECT COUNT(*) >= 140 FROM python.steps WHERE optimizer > 0") == 1
    for w in children_of(t.pid):
        assert not (socket_dir / f"{w}.sock").exists()
    t.kill()


def children_of(pid):
    kids = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return kids


COMPILE_SCRIPT = textwrap.dedent("""\
    import os, sys
    import torch
    from torch import nn

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)
            self.act = nn.ReLU(inplace=True)
        def forward(self, x):
            return x + self.act(self.fc(x))

    model = nn.Sequential(Block(), Block(), nn.LayerNorm(16), nn.Linear(16, 4))
    x = torch.randn(32, 16)
    y = torch.randint(0, 4, (32,))
    explained = torch._dynamo.explain(model)(x)
    print("graph_break_count", explained.graph_break_count, flush=True)
    print("graph_count", explained.graph_count, flush=True)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=sys.argv[1])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 11):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(compiled(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}", flush=True)
    print("final loss:", loss.item().hex(), flush=True)
""")


def test_torch_compile_same_graphs_with_and_without_probing(cli, launcher):
    script = launcher.workdir / "compile_script.py"
    script.write_text(COMPILE_SCRIPT)
    # aot_eager runs dynamo and AOTAutograd (where graph breaks and hook handling happen)
    # without spending minutes in a C++ compiler
    traced = launcher.command([cli.binary, "run", "--", PYTHON, "-u", script, "aot_eager"],
                              name="compile-traced")
    plain_env = dict(cli.env)
    plain_env.pop("PROBING", None)
    plain = launcher.command([PYTHON, "-u", script, "aot_eager"], env=plain_env,
                             expect_socket=False, name="compile-plain")
    with_probing, without = traced.finish(timeout=300), plain.finish(timeout=300)

    def lines(out):
        return [l for l in out.splitlines() if re.match(r"^(graph_|step |final loss)", l)]

    assert re.search(r"^graph_break_count 0$", without, re.M), without
    assert lines(with_probing) == lines(without)
    assert "probing: " not in traced.stderr(), traced.stderr()
