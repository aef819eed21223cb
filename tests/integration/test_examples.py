"""The query cookbook (examples/queries/*.sql, examples/eval/*.py) run as a user runs it,
`probing <target> query "$(cat FILE)"` and `probing <target> eval "$(cat FILE)"`, through the
real binary against live, finished-but-holding training runs of 250 steps; each answer is
checked against what the run did (the same numbers found another way). Every example is listed
in README.md and docs/tables.md with the question it answers."""
import math
import re
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO, example_file

QUERIES = sorted(p.name for p in (EXAMPLES / "queries").glob("*.sql"))
EVALS = sorted(p.name for p in (EXAMPLES / "eval").glob("*.py"))


def query(cli, run, name):
    return cli.query(run.target(), example_file(name))


def evaluate(cli, run, name, timeout=120):
    """stdout of the example, run as `probing <pid> eval "$(cat FILE)"`; it must succeed, print
    nothing on stderr and leave no name behind in the script's __main__."""
    names = "print(sorted(globals()))"
    before = cli.eval(run.target(), names)
    r = cli(run.target(), "eval", example_file(name), timeout=timeout)
    assert r.stderr == "", r.stderr
    assert cli.eval(run.target(), names) == before, "the example left names in __main__"
    return r.stdout


def known_names(run):
    return set(run.modules()) | run.other_roots() | {run.optimizer_name()}


def last_detail_steps(cli, run, n):
    return [r["step"] for r in cli.query(run.target(), "SELECT step FROM python.steps WHERE "
                                                       f"detail = 1 ORDER BY step DESC LIMIT {n}")]


# ----------------------------------------------------------------------------- the files


def test_every_example_says_what_it_answers_and_is_listed():
    assert len(QUERIES) >= 12 and len(EVALS) >= 8, (QUERIES, EVALS)
    readme = (REPO / "README.md").read_text()
    tables = (REPO / "docs" / "tables.md").read_text()
    for folder, names, comment in (("queries", QUERIES, "-- "), ("eval", EVALS, "# ")):
        for name in names:
            first = (EXAMPLES / folder / name).read_text().splitlines()[0]
            assert first.startswith(comment) and "?" in first, f"{folder}/{name}: {first!r}"
            assert f"examples/{folder}/{name}" in tables, f"{name} is not in docs/tables.md"
            assert f"{folder}/{name}" in readme, f"{name} is not in README.md"


@pytest.mark.parametrize("name", QUERIES)
def test_query_runs_as_typed_in_every_format(cli, resnet_run, name):
    sql = example_file(name)
    out = {}
    for fmt in ("table", "csv", "json"):
        r = cli(resnet_run.target(), "query", sql, "-f", fmt)
        assert r.stderr == "", r.stderr
        out[fmt] = r.stdout
    rows = cli.query(resnet_run.target(), sql)
    header = out["csv"].splitlines()[0].split(",")
    assert header[0] in out["table"].splitlines()[0]
    if rows:
        assert header == list(rows[0]), (header, rows[0])


# ----------------------------------------------------------------------------- queries


@pytest.mark.parametrize("run_name", ["resnet_run", "transformer_run"])
def test_overall_profile(cli, request, run_name):
    run = request.getfixturevalue(run_name)
    rows = query(cli, run, "overall-profile.sql")
    assert 1 <= len(rows) <= 15
    names = known_names(run)
    for r in rows:
        assert r["module"] in names, r
        assert r["stage"] in ("forward", "backward", "step")
        assert math.isclose(r["total_ms"], r["avg_ms"] * r["executions"], rel_tol=1e-6)
    totals = [r["total_ms"] for r in rows]
    assert totals == sorted(totals, reverse=True)
    # The window is the last 8 complete detail steps: the root module's forward and the
    # optimizer ran once in each of them.
    steps = last_detail_steps(cli, run, 8)
    assert len(steps) == 8
    every = cli.query(run.target(), example_file("overall-profile.sql").replace("LIMIT 15", ""))
    by_key = {(r["module"], r["stage"]): r for r in every}
    assert by_key[(run.root_name(), "forward")]["executions"] == 8
    assert by_key[(run.optimizer_name(), "step")]["executions"] == 8
    assert math.isclose(sum(r["pct_time"] for r in every), 100.0, rel_tol=1e-6)
    total_s = cli.scalar(run.target(), "SELECT SUM(duration) FROM python.torch_trace WHERE step "
                                       f"IN ({', '.join(map(str, steps))})")
    for r in every:
        assert math.isclose(r["pct_time"], r["total_ms"] / 10 / total_s, rel_tol=1e-6)


def test_step_breakdown(cli, resnet_run):
    rows = query(cli, resnet_run, "step-breakdown.sql")
    last = cli.scalar(resnet_run.target(), "SELECT MAX(step) FROM python.steps")
    assert [r["step"] for r in rows] == list(range(last - 9, last + 1))
    for r in rows:
        parts = (r["data_wait_ms"] + r["forward_ms"] + r["backward_ms"] + r["optimizer_ms"]
                 + r["communication_ms"])
        assert r["forward_ms"] > 0 and r["backward_ms"] > 0 and r["optimizer_ms"] > 0, r
        assert r["communication_ms"] >= 0 and r["other_ms"] >= 0
        # `other` is what nothing else accounts for: the parts add up to the step's wall time
        assert parts <= r["wall_ms"] * 1.001 + 1e-3, r
        if r["other_ms"] > 0:
            assert math.isclose(parts + r["other_ms"], r["wall_ms"], rel_tol=1e-6), r
        assert r["detail"] in (0, 1)


def test_module_memory(cli, resnet_run):
    rows = query(cli, resnet_run, "module-memory.sql")
    assert 1 <= len(rows) <= 10
    names = known_names(resnet_run)
    for r in rows:
        assert r["module"] in names
        # on CPU the figures are the process RSS in MB: tens of MB at least for a torch process
        assert 10 < r["avg_allocated_mb"] <= r["peak_mb"] < 1_000_000, r
        assert r["avg_ms"] > 0 and r["executions"] >= 1
    peaks = [r["peak_mb"] for r in rows]
    assert peaks == sorted(peaks, reverse=True)


def test_memory_breakdown(cli, resnet_run):
    rows = query(cli, resnet_run, "memory-breakdown.sql")
    assert len(rows) == 1, rows
    r = rows[0]
    assert (r["optimizer"], r["device"]) == ("SGD", "cpu")
    count, size = map(int, cli.eval(resnet_run.target(), "print(len(list(model.parameters())), "
                                    "sum(p.numel() * p.element_size() for p in model.parameters()))"
                                    ).split())
    assert r["params"] == count
    assert r["params_mb"] == pytest.approx(size / 2**20)
    assert r["grads_mb"] == pytest.approx(size / 2**20)
    # SGD with momentum keeps one buffer the size of each parameter
    assert r["optimizer_state_mb"] == pytest.approx(size / 2**20)
    assert r["total_mb"] == pytest.approx(3 * size / 2**20)


def test_collective_times_empty_without_distributed(cli, resnet_run):
    # with collectives: test_distributed.py test_example_collective_times
    assert query(cli, resnet_run, "collective-times.sql") == []
    # and `tables` says why, naming both ways rows come (the program's calls and DDP)
    assert cli.scalar(resnet_run.target(), "SELECT empty_reason FROM probe.tables WHERE schema = "
                      "'python' AND name = 'nccl_trace'") == (
        "empty until the program calls a torch.distributed collective or a "
        "DistributedDataParallel model all-reduces its gradients (docs/tables.md)")


def test_attention_modules(cli, transformer_run, resnet_run):
    rows = query(cli, transformer_run, "attention-modules.sql")
    expected = {n for n in transformer_run.modules() if "attn" in n}
    assert {r["module"] for r in rows} == expected
    assert {r["type"] for r in rows} == {"SelfAttention", "Linear"}
    for r in rows:
        assert r["forward_ms"] > 0 and r["backward_ms"] > 0 and r["avg_allocated_mb"] > 0, r
    costs = [r["forward_ms"] + r["backward_ms"] for r in rows]
    assert costs == sorted(costs, reverse=True)
    assert query(cli, resnet_run, "attention-modules.sql") == []


@pytest.mark.parametrize("run_name", ["resnet_run", "transformer_run"])
def test_slowest_modules(cli, request, run_name):
    run = request.getfixturevalue(run_name)
    rows = query(cli, run, "slowest-modules.sql")
    assert len(rows) == 5
    assert all(r["module"] in run.modules() for r in rows), rows
    costs = [r["ms_per_step"] for r in rows]
    assert costs == sorted(costs, reverse=True) and costs[-1] > 0
    detail_steps = cli.scalar(run.target(), "SELECT COUNT(DISTINCT step) FROM python.torch_trace")
    for r in rows:
        assert r["steps"] == detail_steps  # each of them runs in every detail step
        total = cli.scalar(run.target(), "SELECT SUM(duration) FROM python.torch_trace WHERE "
                                         f"module = '{r['module']}' AND stage != 'step'")
        assert math.isclose(r["ms_per_step"], 1000 * total / detail_steps, rel_tol=1e-6)
    # no other module costs more per step
    sixth = cli.scalar(run.target(), "SELECT MAX(c) FROM (SELECT SUM(duration) / COUNT(DISTINCT "
                                     "step) AS c FROM python.torch_trace WHERE stage != 'step' "
                                     "GROUP BY module ORDER BY c DESC LIMIT -1 OFFSET 5)")
    assert 1000 * sixth <= costs[-1] * (1 + 1e-9)


def test_compare_windows(cli, resnet_run):
    rows = query(cli, resnet_run, "compare-windows.sql")
    assert [(r["period"], r["first_step"], r["last_step"], r["steps"]) for r in rows] == [
        ("before", 100, 110, 11), ("after", 200, 210, 11)]
    for r, (low, high) in zip(rows, ((100, 110), (200, 210))):
        wall = cli.scalar(resnet_run.target(), "SELECT AVG(wall) FROM python.steps WHERE step "
                                               f"BETWEEN {low} AND {high}")
        assert math.isclose(r["wall_ms"], 1000 * wall, rel_tol=1e-9)
        assert 0 < r["compute_ms"] < r["wall_ms"] and r["data_wait_ms"] >= 0


def test_data_loader_wait(cli, resnet_run):
    rows = query(cli, resnet_run, "data-loader-wait.sql")
    assert len(rows) == 1
    r = rows[0]
    steps = cli.scalar(resnet_run.target(), "SELECT COUNT(*) FROM python.steps WHERE step > 0")
    assert r["steps"] == steps
    # resnet_run: 2 workers, no pinning (this machine has no accelerator)
    assert (r["num_workers"], r["pin_memory"]) == (2, 0)
    waited = cli.scalar(resnet_run.target(), "SELECT SUM(wait) FROM python.dataloader_trace "
                                             "WHERE step > 0")
    wall = cli.scalar(resnet_run.target(), "SELECT SUM(wall) FROM python.steps WHERE step > 0")
    assert math.isclose(r["pct_waiting"], 100 * waited / wall, rel_tol=1e-6)
    assert 0 <= r["pct_waiting"] < 100


def test_throughput(cli, resnet_run):
    rows = query(cli, resnet_run, "throughput.sql")
    assert len(rows) == 1
    r = rows[0]
    assert r["steps"] == 50
    # The window is the last 50 steps, whose samples add up to the query's. batch_size 8,
    # drop_last: every training step trained on 8 samples (the step the held process was in
    # may have 16: test_eval's verbatim seed throughput example, when it ran first on this
    # process, trains 10 steps of its own, the first of them in that step).
    last = cli.query(resnet_run.target(), "SELECT step, samples FROM python.steps "
                                          "ORDER BY step DESC LIMIT 50")
    assert r["samples"] == sum(x["samples"] for x in last)
    assert all(x["samples"] in (8, 16) for x in last), last
    assert sum(x["samples"] == 8 for x in last) >= 49, last
    assert math.isclose(r["samples_per_s"], r["samples"] / r["seconds"], rel_tol=1e-9)
    assert math.isclose(r["step_ms"], 1000 * r["seconds"] / 50, rel_tol=1e-9)


def test_amp_status_without_amp(cli, resnet_run):
    rows = query(cli, resnet_run, "amp-status.sql")
    steps = cli.scalar(resnet_run.target(), "SELECT COUNT(*) FROM python.steps")
    assert rows == [{"autocast_enabled": 0, "autocast_dtype": "", "autocast_device": "",
                     "optimizer_steps": steps, "min_scale": None, "max_scale": None,
                     "skipped_steps": 0}]


def test_gpu_utilization_empty_without_a_driver(cli, resnet_run):
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA driver")
    assert query(cli, resnet_run, "gpu-utilization.sql") == []


# ----------------------------------------------------------------------------- eval


def test_loader_settings(cli, resnet_run):
    assert evaluate(cli, resnet_run, "loader-settings.py") == (
        "train_loader: num_workers=2 pin_memory=False prefetch_factor=2 "
        "persistent_workers=False batch_size=8\n")


def test_batch_load_time_leaves_the_training_iterator_alone(cli, resnet_run):
    iterator = "print(id(trainer._batches))"
    before = cli.eval(resnet_run.target(), iterator)
    out = evaluate(cli, resnet_run, "batch-load-time.py")
    m = re.fullmatch(r"train_loader: one batch of 8 samples built in (\d+\.\d\d) ms \(one "
                     r"thread; the loader uses 2 worker processes\)\n", out)
    assert m and float(m.group(1)) > 0, out
    assert cli.eval(resnet_run.target(), iterator) == before


def test_attention_memory(cli, transformer_run, resnet_run):
    # transformer.py: batch 8, 4 heads, 32 positions, 4 layers, float32
    per_layer = 8 * 4 * 32 * 32 * 4
    assert evaluate(cli, transformer_run, "attention-memory.py") == (
        f"attention scores: batch 8 x 4 heads x 32x32 x 4 bytes = {per_layer / 2**20:.3f} MiB "
        f"per layer, {4 * per_layer / 2**20:.3f} MiB for 4 layers\n")
    assert evaluate(cli, resnet_run, "attention-memory.py") == (
        "model.config has no max_position_embeddings and num_attention_heads: nothing to "
        "estimate\n")


def test_mixed_precision_without_amp(cli, resnet_run):
    params = cli.eval(resnet_run.target(), "print(len(list(model.parameters())))").strip()
    assert evaluate(cli, resnet_run, "mixed-precision.py") == (
        f"no GradScaler among the script's globals\nmodel parameters: {params} float32\n")


def test_throughput_counts_live_forwards_and_removes_its_hook(cli, traced, resnet_run):
    run = traced("resnet_inplace.py", "--steps", 1_000_000, "--workers", 0, "--print-every", 1,
                 hold=False)
    run.wait_steps(3)
    out = evaluate(cli, run, "throughput.py", timeout=60)
    m = re.fullmatch(r"throughput: (\d+\.\d) samples/s \((\d+) forwards in (\d+\.\d) s\)\n", out)
    assert m and float(m.group(1)) > 0 and int(m.group(2)) >= 1, out
    # batch size 8: samples/s is 8 forwards per elapsed second
    assert math.isclose(float(m.group(1)), 8 * int(m.group(2)) / float(m.group(3)), rel_tol=0.06)
    assert cli.eval(run.target(), "print(len(model._forward_hooks))") == "0\n"
    done = run.steps_done()
    run.wait_steps(done + 2, timeout=60)  # training goes on
    # a finished run: no forward to count
    assert evaluate(cli, resnet_run, "throughput.py", timeout=60) == (
        "the model ran no forward in 2 s: it is not training or serving now\n")


def test_cuda_sync_time_without_cuda(cli, resnet_run):
    assert evaluate(cli, resnet_run, "cuda-sync-time.py") == (
        "this process does not use CUDA: no device work to wait for\n")


def test_compiled(cli, resnet_run):
    assert evaluate(cli, resnet_run, "compiled.py") == (
        "model: ResNetSmall, not compiled with torch.compile\n")


def test_compiled_finds_a_compiled_model_under_any_name(cli, traced):
    """The compiled model is not the global named `model` (issue 28): a compiled copy under
    another name, a compiled submodule, a model kept in another object."""
    run = traced("resnet_inplace.py", "--steps", 3, "--print-every", 0)
    run.wait_holding()
    cli.eval(run.target(), "import torch; fast = torch.compile(model, backend='eager')\n"
                           "for part in model.modules(): pass")  # a part left in a global
    assert evaluate(cli, run, "compiled.py") == (
        "fast: ResNetSmall, compiled with torch.compile (OptimizedModule)\n")
    cli.eval(run.target(), "del fast, model; "
                           "trainer.model.fc = torch.compile(trainer.model.fc, backend='eager')")
    assert evaluate(cli, run, "compiled.py") == (
        "trainer.model: ResNetSmall, not compiled itself; compiled submodules: fc\n")


def test_gradient_checkpointing(cli, transformer_run, resnet_run):
    assert evaluate(cli, transformer_run, "gradient-checkpointing.py") == "".join(
        f"model.layers.{i}: gradient_checkpointing=False\n" for i in range(4))
    assert evaluate(cli, resnet_run, "gradient-checkpointing.py") == (
        "no module uses activation checkpointing (no gradient_checkpointing attribute, no "
        "torch.utils.checkpoint in a forward, no CheckpointWrapper)\n")


def test_gradient_checkpointing_sees_torch_utils_checkpoint(cli, traced):
    """edge_cases.py checkpoints a block with torch.utils.checkpoint in its forward and no
    gradient_checkpointing attribute (issue 28)."""
    run = traced("edge_cases.py", "--steps", 3, "--print-every", 0)
    run.wait_holding()
    out = evaluate(cli, run, "gradient-checkpointing.py")
    assert re.fullmatch(r"model\.block: its forward calls torch\.utils\.checkpoint "
                        r"\(CheckpointedBlock\.forward, /\S+/edge_cases\.py:\d+\)\n", out), out


def test_mixed_precision_with_bf16_autocast_and_a_grad_scaler(cli, traced):
    """data_amp.py --amp: bf16 autocast on CPU, GradScaler('cpu'); step 5's loss is inf, so the
    scaler skips it."""
    run = traced("data_amp.py", "--steps", 12, "--amp", "--inf-at", 5, "--print-every", 0)
    run.wait_holding()
    rows = query(cli, run, "amp-status.sql")
    assert len(rows) == 1, rows
    r = rows[0]
    assert (r["autocast_enabled"], r["autocast_dtype"], r["autocast_device"]) == (1, "bfloat16",
                                                                                 "cpu")
    assert (r["optimizer_steps"], r["skipped_steps"]) == (12, 1)
    assert 0 < r["min_scale"] < r["max_scale"]  # the skipped step halved the scale
    scale = cli.eval(run.target(), "print(f'{scaler.get_scale():g}')").strip()
    params = cli.eval(run.target(), "print(len(list(model.parameters())))").strip()
    assert evaluate(cli, run, "mixed-precision.py") == (
        f"scaler: GradScaler enabled=True scale={scale}\nmodel parameters: {params} float32\n")
    run.finish()
