"""Training stacks nobody here wrote, under probing (frameworks.py, written as their users write
them): PyTorch Lightning (Trainer.fit with validation and accumulate_grad_batches), Hugging Face
accelerate (gradient_accumulation_steps) and FSDP2 (fully_shard) on two gloo ranks.

What they do to a step that a plain loop does not: Lightning runs training_step, forward and
backward inside optimizer.step(closure); FSDP2 runs its all-gathers and reduce-scatters inside
module forward and backward; both accumulate gradients over several forwards before the first
optimizer.step(). On each (docs/tables.md, python.steps):
- step numbers are the framework's own optimizer-step count (Lightning's global_step);
- every step's columns add up to its wall time (each instant counted once, for the innermost
  activity), and so do the report's shares;
- the per-module self times of a step never exceed the phase they sit in;
- a healthy run's report has no warning or critical finding (Lightning, accelerate), and one
  planted cause is its primary finding: host work in training_step (Lightning), a slow
  collate_fn (accelerate), a leak (FSDP2).
Skipped, with the reason, where the framework is not installed (scripts/setup.sh installs them).
"""
import json
import re
from pathlib import Path

import pytest

from probing_integration_conftest import PYTHON, free_port

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "frameworks.py"
PHASES = ("data_wait", "forward", "backward", "optimizer", "collectives", "grad_sync", "other")


def _need(module):
    try:
        __import__(module)
    except Exception as e:  # absent, or broken against this torch
        pytest.skip(f"{module} is not importable ({e}); scripts/setup.sh installs it")


@pytest.fixture(scope="module")
def runs(cli, env, session_dir, session_launcher):
    """(framework, plant) -> ([recording per rank], [optimizer steps per rank]): each run once."""
    done = {}

    def get(framework, plant="none"):
        key = (framework, plant)
        if key in done:
            return done[key]
        _need({"lightning": "lightning", "accelerate": "accelerate", "fsdp": "torch.distributed.fsdp"}[framework])
        e = dict(env, PROBING_DETAIL_EVERY="1")
        stem = Path(session_dir) / f"fw-{framework}-{plant}"
        args = [str(WORKLOAD), framework, "--plant", plant]
        if framework == "fsdp":
            out = f"{stem}.rank%r.db"
            # The leak needs more steps: on the CPU its trend is the RSS's, and with 12 steps a
            # plateau of the last two (the allocator reusing freed pages) took the fit's r2 to
            # 0.896 in 1 of 12 ranks measured (memory_growth "ok" on a 104 MB climb); with 24,
            # r2 >= 0.936 in 8 of 8, in about the same time (the step is short).
            batches = "24" if plant == "leak" else "12"
            cmd = [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                   str(free_port()), *args, "--batches", batches]
            dbs = [Path(f"{stem}.rank{r}.db") for r in (0, 1)]
        else:
            out = f"{stem}.db"
            cmd = [PYTHON, "-u", *args]
            dbs = [Path(out)]
        for db in dbs:
            if db.exists():
                db.unlink()
        p = session_launcher.command([cli.binary, "run", "-o", out, "--", *cmd], env=e, expect_socket=False,
                                     name=f"fw-{framework}-{plant}")
        p.proc.wait(timeout=600)
        assert p.proc.returncode == 0, p.describe()
        counts = [int(n) for n in re.findall(r"optimizer steps (\d+)", p.stdout())]
        assert len(counts) == len(dbs), p.describe()
        done[key] = (dbs, counts)
        return done[key]

    return get


FRAMEWORKS = ["lightning", "accelerate", "fsdp"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_step_numbers_are_the_frameworks_optimizer_steps(runs, cli, framework):
    dbs, counts = runs(framework)
    for db, n in zip(dbs, counts):
        steps = [r["step"] for r in cli.query(str(db), "SELECT step FROM python.steps ORDER BY step")]
        # one step per optimizer step, numbered as the framework counts them: no step for each
        # accumulated micro-batch before the first optimizer.step(), none for Lightning's sanity
        # check validation
        assert steps == list(range(n)), f"{db.name}: steps {steps} for {n} optimizer steps"
        opt = [r["step"] for r in cli.query(str(db), "SELECT step FROM python.torch_trace WHERE stage = 'step' ORDER BY step")]
        assert opt == list(range(n)), f"{db.name}: optimizer rows in steps {opt}"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_shares_add_up_and_modules_stay_inside_their_phase(runs, cli, framework):
    dbs, _ = runs(framework)
    for db in dbs:
        rows = cli.query(str(db), f"""
            SELECT s.step, s.wall, {', '.join('s.' + c for c in PHASES)},
              (SELECT COALESCE(SUM(duration), 0) FROM python.torch_trace t WHERE t.step = s.step AND t.stage = 'forward') AS fwd_self,
              (SELECT COALESCE(SUM(duration), 0) FROM python.torch_trace t WHERE t.step = s.step AND t.stage = 'backward') AS bwd_self,
              (SELECT COALESCE(SUM(duration), 0) FROM python.torch_trace t WHERE t.step = s.step AND t.stage = 'step') AS opt_self
            FROM python.steps s ORDER BY s.step""")
        assert rows
        for r in rows:
            total = sum(r[c] for c in PHASES)
            assert abs(total - r["wall"]) <= 2e-6 * len(PHASES), f"{db.name} step {r['step']}: phases {total} != wall {r['wall']}: {r}"
            assert all(r[c] >= 0 for c in PHASES), r
            for own, phase in (("fwd_self", "forward"), ("bwd_self", "backward"), ("opt_self", "optimizer")):
                assert r[own] <= r[phase] * 1.01 + 1e-4, f"{db.name} step {r['step']}: module {own} {r[own]} > {phase} {r[phase]}"
        doc = json.loads(cli(str(db), "report", "--json").stdout)
        shares = {k: v for k, v in doc["component"]["shares"].items() if v is not None}
        assert abs(sum(shares.values()) - 1) < 0.002, f"{db.name}: report shares {shares} add up to {sum(shares.values())}"


@pytest.mark.parametrize("framework", ["lightning", "accelerate"])
def test_healthy_run_has_no_false_finding(runs, cli, framework):
    dbs, _ = runs(framework)
    doc = json.loads(cli(str(dbs[0]), "report", "--json").stdout)
    bad = [(f["id"], f["severity"], f.get("text") or f.get("claim")) for f in doc["findings"]
           if f["severity"] in ("warning", "critical")]
    assert doc["primary"] is None and not bad, f"healthy {framework} run: primary {doc['primary']}, {bad}"


@pytest.mark.parametrize("framework, plant, primary", [
    ("lightning", "host", "unaccounted_time"),  # host work in training_step, inside the closure
    ("accelerate", "collate", "data_bound"),
    ("fsdp", "leak", "memory_growth"),
])
def test_planted_cause_is_the_primary_finding(runs, cli, framework, plant, primary):
    dbs, _ = runs(framework, plant)
    for db in dbs:
        doc = json.loads(cli(str(db), "report", "--json").stdout)
        found = {f["id"]: f["severity"] for f in doc["findings"]}
        assert found.get(primary) in ("critical", "warning"), f"{db.name}: {primary} not found: {found}"
        if framework == "fsdp" and doc["primary"] == "communication":
            # The report puts the bottleneck before memory (docs/report.md): two gloo ranks on a
            # loaded 2-core machine can really spend 30 % or more of a step in collectives
            # (waiting for each other), and then that is the first critical finding; the leak
            # must still be critical beside it.
            assert doc["component"]["shares"]["collectives"] >= 0.3, doc["component"]["shares"]
            assert found[primary] == "critical", found
            continue
        assert doc["primary"] == primary, (
            f"{db.name}: primary {doc['primary']}, findings "
            f"{[(f['id'], f['severity']) for f in doc['findings'] if f['severity'] in ('warning', 'critical')]}")
