"""python.steps as a timeline (docs/tables.md): every instant of a step counted once, for the
innermost activity on the training thread, with phases nested as frameworks nest them
(tests/workloads/nested_phases.py): forward, backward and host work inside
optimizer.step(closure); blocks recomputed inside backward (activation checkpointing); gradient
accumulation. The C attribution itself is tests/unit/test_timeline.c."""
import pytest

PHASES = ("data_wait", "forward", "backward", "optimizer", "collectives", "grad_sync", "other")
HOST_MS = 30
STEPS = 8


def step_rows(cli, target):
    return cli.query(target, f"""
        SELECT s.step, s.wall, {', '.join('s.' + c for c in PHASES)},
          (SELECT COALESCE(SUM(duration), 0) FROM python.torch_trace t WHERE t.step = s.step AND t.stage = 'forward') AS fwd_self,
          (SELECT COALESCE(SUM(duration), 0) FROM python.torch_trace t WHERE t.step = s.step AND t.stage = 'backward') AS bwd_self,
          (SELECT COALESCE(SUM(duration), 0) FROM python.torch_trace t WHERE t.step = s.step AND t.stage = 'step') AS opt_self,
          (SELECT COUNT(*) FROM python.torch_trace t WHERE t.step = s.step AND t.stage = 'step') AS opt_rows
        FROM python.steps s ORDER BY s.step""")


def check_adds_up(rows):
    for r in rows:
        total = sum(r[c] for c in PHASES)
        assert total == pytest.approx(r["wall"], abs=2e-6 * len(PHASES)), r
        for own, phase in (("fwd_self", "forward"), ("bwd_self", "backward"), ("opt_self", "optimizer")):
            assert r[own] <= r[phase] * 1.01 + 1e-4, f"step {r['step']}: {own} {r[own]} > {phase} {r[phase]}"


def test_closure_inside_optimizer_step_is_not_optimizer_time(cli, traced, env):
    t = traced("nested_phases.py", "--mode", "closure", "--steps", STEPS, "--host-ms", HOST_MS,
               "--accumulate", 2, "--print-every", 0, env=dict(env, PROBING_DETAIL_EVERY="1"))
    t.wait_holding()
    rows = step_rows(cli, t.target())
    # one step per optimizer step, the first one too (two micro-batches each)
    assert [r["step"] for r in rows] == list(range(STEPS)) and all(r["opt_rows"] == 1 for r in rows), rows
    check_adds_up(rows)
    for r in rows[1:]:
        # the closure's sleep is host time, not the optimizer's (AdamW on 200k parameters: ~1 ms)
        assert r["other"] >= 0.9 * HOST_MS / 1000, r
        assert r["forward"] > 0 and r["backward"] > 0, r
    # ...and the optimizer's own time stays far below the sleep: over the steps' median, since
    # one step's AdamW can be preempted on a loaded machine (40 ms once under ASan)
    opt = sorted(r["optimizer"] for r in rows[1:])
    assert opt[len(opt) // 2] < HOST_MS / 1000 / 2, rows
    t.finish()


def test_forward_recomputed_in_backward_counts_once(cli, traced, env):
    t = traced("nested_phases.py", "--mode", "checkpoint", "--steps", STEPS, "--print-every", 0,
               env=dict(env, PROBING_DETAIL_EVERY="1"))
    t.wait_holding()
    rows = step_rows(cli, t.target())
    assert [r["step"] for r in rows] == list(range(STEPS))
    check_adds_up(rows)
    t.finish()
