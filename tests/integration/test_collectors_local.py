"""The per-step collectors of the training process: python.dataloader_trace, python.steps,
python.memory and python.amp_trace, against tests/workloads/data_amp.py (a real DataLoader,
real autocast and GradScaler on CPU). Bounds below come from what the workload does (a sample
that sleeps S seconds cannot load faster than S), never from how fast this machine is."""
import json
import re
import subprocess

import pytest

from conftest import PYTHON, api_get

STEPS = 12
BATCH = 4
SLEEP = 0.01
SAMPLES = 20          # 5 batches per epoch: 12 steps run through two StopIterations
GROW_MB = 8
PHASES = {"after_data", "before_forward", "after_forward", "after_loss", "after_backward",
          "after_optimizer", "after_zero_grad"}


@pytest.fixture(scope="module")
def slow_run(session_launcher, env):
    """Map-style dataset whose samples sleep, no workers, memory growing every step, phase rows
    every 5th step."""
    t = session_launcher.traced("data_amp.py", "--steps", STEPS, "--batch-size", BATCH,
                                "--samples", SAMPLES, "--sleep", SLEEP, "--grow-mb", GROW_MB,
                                env=dict(env, PROBING_MEMORY_PHASE_EVERY="5"))
    t.wait_holding()
    return t


@pytest.fixture(scope="module")
def amp_run(session_launcher):
    """Iterable dataset, 2 workers, bf16 autocast and a GradScaler; inf loss at step 6."""
    t = session_launcher.traced("data_amp.py", "--steps", STEPS, "--batch-size", BATCH,
                                "--samples", SAMPLES, "--sleep", 0.002, "--num-workers", 2,
                                "--iterable", "--amp", "--inf-at", 6)
    t.wait_holding()
    return t


# ----------------------------------------------------------------------------- dataloader_trace


def test_dataloader_rows_one_per_batch_and_settings(cli, slow_run):
    rows = cli.query(slow_run.target(), "SELECT * FROM python.dataloader_trace ORDER BY step")
    assert [r["step"] for r in rows] == list(range(STEPS))
    # batch_index restarts with every epoch (5 batches each): StopIteration went through
    assert [r["batch_index"] for r in rows] == [i % (SAMPLES // BATCH) for i in range(STEPS)]
    for r in rows:
        assert r["num_workers"] == 0 and r["prefetch_factor"] == 0
        assert r["pin_memory"] == 0 and r["persistent_workers"] == 0
        assert r["batch_size"] == BATCH and r["rank"] == 0
        assert r["time_offset"] >= 0
    assert list(rows[0]) == ["step", "batch_index", "wait", "time_offset", "num_workers",
                             "pin_memory", "prefetch_factor", "persistent_workers", "batch_size",
                             "rank"]


def test_dataloader_wait_shows_the_slow_dataset(cli, slow_run):
    """Without workers, next() loads BATCH samples of SLEEP seconds each, in the loop."""
    waits = [r["wait"] for r in cli.query(slow_run.target(),
                                          "SELECT wait FROM python.dataloader_trace")]
    assert len(waits) == STEPS
    assert min(waits) >= BATCH * SLEEP, waits


def test_dataloader_with_workers_and_iterable_dataset(cli, amp_run):
    rows = cli.query(amp_run.target(), "SELECT * FROM python.dataloader_trace ORDER BY step")
    assert [r["step"] for r in rows] == list(range(STEPS))
    for r in rows:
        assert r["num_workers"] == 2
        assert r["prefetch_factor"] == 2  # torch's default with workers
    # each worker yields every other sample (10 of 20) in batches of 4, 4, 2; the loader
    # alternates workers: 6 batches an epoch, and 12 steps run through exactly two epochs
    assert [r["batch_size"] for r in rows] == [4, 4, 4, 4, 2, 2] * 2
    assert [r["batch_index"] for r in rows] == list(range(6)) * 2
    samples = cli.query(amp_run.target(), "SELECT samples FROM python.steps ORDER BY step")
    assert [r["samples"] for r in samples] == [4, 4, 4, 4, 2, 2] * 2


def test_dataloader_wait_with_workers_map_style(cli, traced):
    """With workers, a fresh epoch's first next() waits for one worker to load a whole batch of
    sleeping samples; later batches were loaded ahead (prefetch) by the two workers."""
    sleep = 0.02
    t = traced("data_amp.py", "--steps", 10, "--batch-size", BATCH, "--samples", SAMPLES,
               "--sleep", sleep, "--num-workers", 2)
    t.wait_holding()
    rows = cli.query(t.target(), "SELECT * FROM python.dataloader_trace ORDER BY step")
    assert [r["batch_index"] for r in rows] == [0, 1, 2, 3, 4] * 2
    assert all(r["num_workers"] == 2 and r["prefetch_factor"] == 2 and r["batch_size"] == BATCH
               for r in rows)
    firsts = [r["wait"] for r in rows if r["batch_index"] == 0]
    assert min(firsts) >= BATCH * sleep, firsts
    t.finish()


# ----------------------------------------------------------------------------- steps


def test_steps_one_row_per_step_consistent_with_torch_trace(cli, slow_run):
    target = slow_run.target()
    steps = cli.query(target, "SELECT * FROM python.steps ORDER BY step")
    assert [s["step"] for s in steps] == list(range(STEPS))
    assert list(steps[0]) == ["step", "wall", "data_wait", "forward", "backward", "optimizer",
                              "collectives", "grad_sync", "other", "samples", "syncs", "rank",
                              "batches", "detail", "cpu", "involuntary_switches",
                              "compile_time"]
    # an eager job compiles nothing (python.compiles, torch.compile's time in the step)
    assert {s["compile_time"] for s in steps} <= {0, 0.0}, steps
    # the training thread's CPU time and descheduling per step, from the first boundary on
    assert steps[0]["cpu"] is None and steps[0]["involuntary_switches"] is None
    for s in steps[1:]:
        assert 0 < s["cpu"] <= s["wall"] + 0.002, s
        assert s["involuntary_switches"] >= 0, s
    # the default: every step in detail (the first summary steps, 56-63, are past this run)
    assert [s["detail"] for s in steps] == [1] * STEPS
    sums = cli.query(target, "SELECT step, stage, SUM(duration) AS d FROM python.torch_trace "
                             "GROUP BY step, stage")
    by = {(r["step"], r["stage"]): r["d"] for r in sums}
    assert {n for n, _ in by} == set(range(STEPS)), "module rows on every (detail) step"
    waits = {r["step"]: r["wait"] for r in cli.query(
        target, "SELECT step, wait FROM python.dataloader_trace")}
    for s in steps:
        n = s["step"]
        assert s["forward"] > 0 and s["backward"] > 0 and s["optimizer"] > 0
        if s["detail"]:
            assert s["forward"] == pytest.approx(by[(n, "forward")], abs=1e-6)
            # backward is the whole pass; the module rows' self times are inside it
            assert by[(n, "backward")] <= s["backward"] + 1e-6
            assert by[(n, "backward")] >= 0.5 * s["backward"]
            assert s["optimizer"] == pytest.approx(by[(n, "step")], abs=1e-6)
        assert s["data_wait"] == pytest.approx(waits[n], abs=1e-9)
        assert s["collectives"] == 0
        # no DDP: the engine's final callbacks after ours are only its own bookkeeping
        assert 0 <= s["grad_sync"] < 0.005
        parts = s["data_wait"] + s["forward"] + s["backward"] + s["optimizer"] + s["grad_sync"]
        assert s["other"] >= 0
        assert s["wall"] == pytest.approx(parts + s["other"], abs=1e-6)
        assert s["samples"] == BATCH
        assert s["syncs"] == 0  # CPU: nothing synchronises with a device


def test_steps_data_wait_dominates_a_data_bound_run(cli, slow_run):
    """The seed's question "is the input pipeline the bottleneck?" answered from one table."""
    rows = cli.query(slow_run.target(),
                     "SELECT SUM(data_wait) AS w, SUM(wall) AS t FROM python.steps WHERE step > 0")
    assert rows[0]["w"] >= (STEPS - 1) * BATCH * SLEEP


def test_steps_with_global_hooks_mode(cli, traced, env):
    """PROBING_HOOK_MODE=hooks feeds the same accumulators."""
    t = traced("data_amp.py", "--steps", 6, "--batch-size", BATCH, "--amp",
               env=dict(env, PROBING_HOOK_MODE="hooks"))
    t.wait_holding()
    target = t.target()
    steps = cli.query(target, "SELECT * FROM python.steps ORDER BY step")
    assert [s["step"] for s in steps] == list(range(6))
    fwd = {r["step"]: r["d"] for r in cli.query(
        target, "SELECT step, SUM(duration) AS d FROM python.torch_trace "
                "WHERE stage = 'forward' GROUP BY step")}
    for s in steps:
        assert s["forward"] == pytest.approx(fwd[s["step"]], abs=1e-6)
        assert s["samples"] == BATCH
    amp = cli.query(target, "SELECT DISTINCT scale, autocast_dtype FROM python.amp_trace")
    assert amp == [{"scale": 65536.0, "autocast_dtype": "bfloat16"}]
    t.finish()


# ----------------------------------------------------------------------------- memory


def test_memory_grows_every_step(cli, slow_run):
    rows = cli.query(slow_run.target(), "SELECT step, device, allocated_mb, max_allocated_mb, "
                     "typeof(reserved_mb) AS reserved, rss_mb FROM python.memory "
                     "WHERE phase = 'step' ORDER BY step")
    assert [r["step"] for r in rows] == list(range(STEPS))
    for r in rows:
        assert r["device"] == "cpu"
        assert r["reserved"] == "null"
        assert r["allocated_mb"] == r["rss_mb"]
        assert r["max_allocated_mb"] >= r["allocated_mb"]
    # each step keeps GROW_MB more; allow for the allocator returning a little elsewhere
    growth = rows[-1]["rss_mb"] - rows[0]["rss_mb"]
    assert growth >= 0.8 * GROW_MB * (STEPS - 1), [r["rss_mb"] for r in rows]


def test_memory_phase_rows_on_sampled_steps(cli, slow_run):
    rows = cli.query(slow_run.target(), "SELECT step, phase FROM python.memory "
                                        "WHERE phase != 'step' ORDER BY rowid")
    by_step = {}
    for r in rows:
        by_step.setdefault(r["step"], []).append(r["phase"])
    assert sorted(by_step) == [0, 5, 10]  # PROBING_MEMORY_PHASE_EVERY=5
    for step, phases in by_step.items():
        assert sorted(phases) == sorted(PHASES), (step, phases)  # each phase once
        # in the order the workload's loop passes them
        assert phases == ["after_data", "after_zero_grad", "before_forward", "after_forward",
                          "after_loss", "after_backward", "after_optimizer"], phases


def test_memory_phase_every_bad_value_is_said(cli, traced, env):
    t = traced("data_amp.py", "--steps", 3, env=dict(env, PROBING_MEMORY_PHASE_EVERY="often"))
    t.wait_holding()
    assert "probing: ignoring PROBING_MEMORY_PHASE_EVERY=often: not an integer; using 50" \
        in t.stderr(), t.stderr()
    phased = cli.query(t.target(), "SELECT DISTINCT step FROM python.memory WHERE phase != 'step'")
    assert phased == [{"step": 0}]  # the default: every 50th step
    t.finish()


# ----------------------------------------------------------------------------- amp_trace


def test_amp_trace_scale_autocast_and_skipped_step(cli, amp_run):
    rows = cli.query(amp_run.target(), "SELECT * FROM python.amp_trace ORDER BY step")
    assert list(rows[0]) == ["step", "scale", "found_inf", "skipped", "autocast_enabled",
                             "autocast_dtype", "autocast_device", "cuda_capability", "rank"]
    assert [r["step"] for r in rows] == list(range(STEPS))
    for r in rows:
        assert r["autocast_enabled"] == 1 and r["autocast_dtype"] == "bfloat16"
        assert r["autocast_device"] == "cpu"
        assert r["cuda_capability"] is None  # the program never initialised CUDA
    skipped = [r for r in rows if r["skipped"]]
    assert [r["step"] for r in skipped] == [5]  # the workload's step 6 is step 5 (from 0)
    assert skipped[0]["found_inf"] == 1
    # GradScaler starts at 2**16 and halves after a step with inf gradients
    assert [r["scale"] for r in rows[:6]] == [65536.0] * 6
    assert [r["scale"] for r in rows[6:]] == [32768.0] * (STEPS - 6)


def test_skipped_step_still_ends_the_step(cli, amp_run):
    """GradScaler skips optimizer.step() at the inf step: steps stay one per iteration."""
    target = amp_run.target()
    assert [r["step"] for r in cli.query(target, "SELECT step FROM python.steps ORDER BY step")] \
        == list(range(STEPS))
    # the optimizer ran in every step but the skipped one (rows on every step: all detail steps)
    opt = cli.query(target, "SELECT step FROM python.torch_trace WHERE stage = 'step' ORDER BY step")
    assert [r["step"] for r in opt] == [n for n in range(STEPS) if n != 5]
    assert [r["optimizer"] > 0 for r in cli.query(target, "SELECT optimizer FROM python.steps ORDER BY step")] \
        == [n != 5 for n in range(STEPS)]
    assert cli.scalar(target, "SELECT optimizer FROM python.steps WHERE step = 5") == 0


def test_amp_trace_without_grad_scaler_has_null_scale(cli, slow_run):
    rows = cli.query(slow_run.target(), "SELECT typeof(scale) AS scale, found_inf, skipped, "
                                        "autocast_enabled, autocast_dtype FROM python.amp_trace")
    assert len(rows) == STEPS
    assert all(r == {"scale": "null", "found_inf": 0, "skipped": 0, "autocast_enabled": 0,
                     "autocast_dtype": ""} for r in rows), rows
    assert cli.query(slow_run.target(), "SELECT DISTINCT autocast_device FROM python.amp_trace") \
        == [{"autocast_device": ""}]


# ----------------------------------------------------------------------------- memory_breakdown


def test_memory_breakdown_on_first_and_sampled_steps(cli, slow_run):
    """SGD without momentum: parameters and gradients, no state; rows on the first optimizer
    step and every 5th (PROBING_MEMORY_PHASE_EVERY=5), with the sizes the program sees."""
    rows = cli.query(slow_run.target(), "SELECT * FROM python.memory_breakdown ORDER BY step")
    assert list(rows[0]) == ["step", "optimizer", "device", "params", "param_bytes",
                             "grad_bytes", "state_bytes", "state_tensors", "device_total_mb",
                             "rank"]
    assert [r["step"] for r in rows] == [0, 5, 10]
    # Linear(16, 32) and Linear(32, 4), float32
    want = (16 * 32 + 32 + 32 * 4 + 4) * 4
    for r in rows:
        assert (r["optimizer"], r["device"], r["params"]) == ("SGD", "cpu", 4)
        assert r["param_bytes"] == want and r["grad_bytes"] == want
        assert r["state_bytes"] == 0 and r["state_tensors"] == 0
        assert r["device_total_mb"] is None and r["rank"] == 0


def test_memory_breakdown_counts_shared_storage_once(cli, traced):
    """tests/workloads/tied_weights.py: a tied embedding/output weight and two Parameters that
    view one buffer, trained with Adam. Each storage is counted once: the parameters hold the
    seed's sum of p.numel() * p.element_size() over model.parameters(), not the sum of each
    parameter's whole storage; Adam's state is exp_avg, exp_avg_sq and a step counter per
    parameter."""
    t = traced("tied_weights.py", "--steps", 3)
    t.wait_holding()
    rows = cli.query(t.target(), "SELECT step, optimizer, params, param_bytes, grad_bytes, "
                                 "state_bytes, state_tensors FROM python.memory_breakdown")
    want = json.loads(cli.eval(t.target(), SIZES_CODE))
    assert [r["step"] for r in rows] == [0]  # the first optimizer step (default: every 50th)
    r = rows[0]
    assert r["optimizer"] == "Adam" and r["params"] == want["params"] == 5
    assert r["param_bytes"] == want["numel_bytes"], (r, want)
    assert want["storage_per_param_bytes"] > r["param_bytes"]  # the flat buffer, counted twice
    assert r["grad_bytes"] == want["grad_bytes"] == want["numel_bytes"], (r, want)
    assert r["state_tensors"] == want["state_tensors"] == 3 * 5
    assert r["state_bytes"] == want["state_bytes"], (r, want)
    assert want["state_bytes"] == 2 * want["numel_bytes"] + 5 * 4  # + a float32 step each
    t.finish()


SIZES_CODE = r"""
import json, torch
ps = list(model.parameters())
st = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
print(json.dumps({
    'params': len(ps),
    'numel_bytes': sum(p.numel() * p.element_size() for p in ps),
    'storage_per_param_bytes': sum(p.untyped_storage().nbytes() for p in ps),
    'grad_bytes': sum(p.grad.numel() * p.grad.element_size() for p in ps if p.grad is not None),
    'state_bytes': sum(v.numel() * v.element_size() for v in st),
    'state_tensors': len(st),
}))
"""


# ----------------------------------------------------------------------------- layers


def test_layers_one_row_per_linear_at_first_forward(cli, slow_run, amp_run):
    rows = cli.query(slow_run.target(), "SELECT * FROM python.layers ORDER BY module")
    assert list(rows[0]) == ["step", "module", "type", "in_features", "out_features", "rows",
                             "output_shape", "weight_dtype", "compute_dtype", "device", "rank"]
    assert [(r["module"], r["type"], r["in_features"], r["out_features"], r["rows"],
             r["output_shape"]) for r in rows] == [("0", "Linear", 16, 32, BATCH, f"{BATCH}x32"),
                                                   ("2", "Linear", 32, 4, BATCH, f"{BATCH}x4")]
    for r in rows:
        assert (r["step"], r["weight_dtype"], r["compute_dtype"], r["device"]) == \
            (0, "float32", "float32", "cpu")
    # under bf16 autocast the layers compute in bfloat16 from float32 weights
    amp = cli.query(amp_run.target(), "SELECT module, weight_dtype, compute_dtype FROM "
                                      "python.layers ORDER BY module")
    assert amp == [{"module": "0", "weight_dtype": "float32", "compute_dtype": "bfloat16"},
                   {"module": "2", "weight_dtype": "float32", "compute_dtype": "bfloat16"}]


# ----------------------------------------------------------------------------- tables listing


def test_new_tables_are_listed_and_typed(cli, slow_run):
    status, body = api_get(slow_run.socket_path, "/api/tables")
    assert status == 200
    names = {(t["schema"], t["name"]) for t in body["tables"]}
    for name in ("dataloader_trace", "steps", "memory", "amp_trace", "memory_breakdown", "layers"):
        assert ("python", name) in names
    out = cli(slow_run.target(), "tables").stdout
    for name in ("python.dataloader_trace", "python.steps", "python.memory", "python.amp_trace",
                 "python.memory_breakdown", "python.layers"):
        assert name in out


# ----------------------------------------------------------------------------- transparency


def test_bit_identical_with_and_without_probing(launcher):
    args = ("--steps", 15, "--num-workers", 2, "--amp", "--inf-at", 4, "--sleep", 0.001)
    traced = launcher.traced("data_amp.py", *args, hold=False)
    plain = launcher.plain("data_amp.py", *args)
    with_probing, without = traced.finish(), plain.finish()
    lines = lambda out: [l for l in out.splitlines() if re.match(r"^(step \d+ |final loss: )", l)]
    assert re.search(r"^final loss: \S+$", without, re.M), without
    assert lines(with_probing) == lines(without)
    assert "probing: " not in traced.stderr(), traced.stderr()


STOP_CODE = r"""
import torch, torch.utils.data.dataloader as dl
originals = (dl._BaseDataLoaderIter.__dict__["__next__"], torch.amp.GradScaler.__dict__["step"],
             torch.optim.Optimizer.__dict__["zero_grad"], torch.cuda.synchronize)
def sync_error():
    try:
        torch.cuda.synchronize()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "no error"
before = sync_error()
import probing
assert probing.endpoint(), "agent did not start"
wrapped = (dl._BaseDataLoaderIter.__dict__["__next__"], torch.amp.GradScaler.__dict__["step"],
           torch.optim.Optimizer.__dict__["zero_grad"], torch.cuda.synchronize)
print("wrapped", [type(w).__name__ for w in wrapped])
print("wrapped of", [w.__wrapped__ is o for w, o in zip(wrapped, originals)])
print("sync same error", sync_error() == before, before)
# an epoch through the wrapped iterator, then StopIteration as usual
loader = torch.utils.data.DataLoader(list(range(5)), batch_size=2)
print("batches", [b.tolist() for b in loader])
it = iter(loader); [next(it) for _ in range(3)]
try:
    next(it)
except StopIteration as e:
    print("StopIteration", e.value)
probing.stop()
now = (dl._BaseDataLoaderIter.__dict__["__next__"], torch.amp.GradScaler.__dict__["step"],
       torch.optim.Optimizer.__dict__["zero_grad"], torch.cuda.synchronize)
print("restored", [n is o for n, o in zip(now, originals)])
"""


def test_stop_restores_wrapped_functions_and_errors_pass_through(env):
    e = dict(env)
    e.pop("PROBING", None)
    r = subprocess.run([PYTHON, "-c", STOP_CODE], env=e, capture_output=True, text=True,
                       timeout=120, cwd="/")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "wrapped ['Wrapper', 'Wrapper', 'Wrapper', 'Wrapper']" in out, out
    assert "wrapped of [True, True, True, True]" in out, out
    # without CUDA, torch.cuda.synchronize raises exactly what it raised before
    assert "sync same error True AssertionError: Torch not compiled with CUDA enabled" in out, out
    assert "batches [[0, 1], [2, 3], [4]]" in out, out
    assert "StopIteration None" in out, out
    assert "restored [True, True, True, True]" in out, out
