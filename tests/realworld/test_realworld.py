"""Real architectures under probing (models.py, trained by train.py as their upstreams do).

What a user pointing probing at their own training script needs, checked on each:
- the job ends the same way with the same loss (bit for bit: same seed, one thread), with and
  without probing, every module recorded in detail (PROBING_DETAIL_EVERY=1); torch.compile on
  the default backend (Inductor) with its caches disabled, so that a real compile runs;
- backward self time per module agrees with `probing capture` (torch.profiler, which ties every
  backward op to the module whose forward made its autograd node) on the same steps;
- sibling modules reading one input (BERT's query/key/value) get backward totals of their own;
- a program with two models (DCGAN) and two optimizers gets distinct names for each;
- GEMMs that are not nn.Linear (GPT-2's Conv1D) are in python.layers;
- eval reaches the locals of the training loop's function (probing.frame).

Tolerance for the capture comparison: each of capture's top-3 backward modules must have, in
torch_trace over the same steps, between 0.7 and 1.3 times capture's self time (±30 %; each
side's least time over 5 captured steps), and the
trace must rank them as capture does wherever capture's times differ by more than that. Both
measure the same executions, so the error is probing's attribution plus the profiler's own
overhead (which inflates both sides), not run-to-run noise; ±30 % holds with room on a loaded
2-core machine (measured within 2 % there) while a misattribution (the old order-of-probes
sweep gave ResNet's 1x1 downsample the backward time of both 3x3 convs) is far outside it.
"""
from pathlib import Path

import pytest

from probing_integration_conftest import PYTHON

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "train.py"
ARCHS = ["resnet", "gpt2", "bert", "lstm", "gan", "compiled"]
TOLERANCE = 0.30


def _env(env, session_dir):
    e = dict(env)
    e["PROBING_DETAIL_EVERY"] = "1"
    e["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    e["TORCHINDUCTOR_CACHE_DIR"] = str(Path(session_dir) / "real-inductor-cache")
    return e


@pytest.fixture(scope="module")
def runs(cli, env, session_dir, session_launcher):
    """arch -> (plain process, traced process, recording path): each trained 4 steps, once."""
    done = {}

    def get(arch):
        if arch in done:
            return done[arch]
        e = _env(env, session_dir)
        plain_env = dict(e)
        plain_env.pop("PROBING", None)
        cmd = [PYTHON, "-u", str(TRAIN), arch, "--steps", "4"]
        plain = session_launcher.command(cmd, env=plain_env, expect_socket=False, name=f"plain-{arch}")
        db = Path(session_dir) / f"real-{arch}.db"
        if db.exists():
            db.unlink()
        traced = session_launcher.command([cli.binary, "run", "-o", str(db), "--", *cmd], env=e,
                                          expect_socket=False, name=f"traced-{arch}")
        for p in (plain, traced):
            p.proc.wait(timeout=600)
        done[arch] = (plain, traced, db)
        return done[arch]

    return get


@pytest.mark.parametrize("arch", ARCHS)
def test_job_and_loss_unchanged(runs, arch):
    plain, traced, _ = runs(arch)
    assert plain.proc.returncode == 0, plain.describe()
    assert traced.proc.returncode == 0, f"exited {traced.proc.returncode} under probing:\n{traced.describe()}"
    assert traced.final_loss() == plain.final_loss(), (
        f"loss changed by probing: {traced.final_loss()} vs {plain.final_loss()} without")


def test_compiled_model_is_recorded(runs, cli):
    _, traced, db = runs("compiled")
    assert traced.proc.returncode == 0, traced.describe()
    n = cli.scalar(str(db), "SELECT count(*) FROM python.steps")
    assert n >= 4, f"{n} steps recorded for 4 optimizer steps"
    roots = cli.query(str(db), "SELECT DISTINCT module FROM python.torch_trace WHERE stage='forward' AND depth=0")
    assert {"OptimizedModule"} <= {r["module"] for r in roots}, roots


def test_two_models_two_optimizers_distinct_names(runs, cli):
    _, traced, db = runs("gan")
    assert traced.proc.returncode == 0, traced.describe()
    rows = cli.query(str(db), "SELECT DISTINCT module, type FROM python.torch_trace WHERE stage='forward'")
    types = {}
    for r in rows:
        types.setdefault(r["module"], set()).add(r["type"])
    shared = {m: t for m, t in types.items() if len(t) > 1}
    assert not shared, f"one name for modules of different classes (two models share names): {shared}"
    # netD runs first and keeps named_modules() names; netG's are prefixed by its variable
    assert types.get("main.0") == {"Conv2d"}, types
    assert types.get("netG.main.0") == {"ConvTranspose2d"}, types
    assert types.get("netG") == {"Generator"}, types
    steps = cli.query(str(db), "SELECT DISTINCT module, type FROM python.torch_trace WHERE stage='step'")
    assert {(r["module"], r["type"]) for r in steps} == {("Adam", "Adam"), ("optimizerG", "Adam")}, steps


def test_layers_find_conv1d_gemms(runs, cli):
    _, traced, db = runs("gpt2")
    assert traced.proc.returncode == 0, traced.describe()
    rows = cli.query(str(db), "SELECT module, type, in_features, out_features, rows FROM python.layers")
    got = {r["module"]: r for r in rows}
    want = {"h.0.attn.c_attn": (64, 192), "h.0.attn.c_proj": (64, 64), "h.0.mlp.c_fc": (64, 256),
            "h.0.mlp.c_proj": (256, 64), "h.1.attn.c_attn": (64, 192), "lm_head": (64, 256)}
    for name, (fin, fout) in want.items():
        assert name in got, f"{name} missing from python.layers: {sorted(got)}"
        assert (got[name]["in_features"], got[name]["out_features"]) == (fin, fout), got[name]
    assert got["h.0.attn.c_attn"]["type"] == "Conv1D"
    assert got["h.0.attn.c_attn"]["rows"] == 4 * 32, got["h.0.attn.c_attn"]
    assert "wte" not in got and "wpe" not in got, "an embedding is a lookup, not a GEMM"


def _per_step_least(rows, steps):
    """{module: least over steps of ms} from rows of (module, step, ms); absent steps are 0."""
    by = {}
    for r in rows:
        by.setdefault(r["module"], {})[r["step"]] = r["ms"]
    return {m: min(v.get(s, 0.0) for s in steps) for m, v in by.items()}


def _compare_with_capture(cli, t, steps=5):
    """Capture `steps` steps and compare per-module backward self time, each module's least time
    over the steps on either side: on a loaded machine the scheduler only ever adds time, and
    an interruption between two ops is in probing's time but in no op's, so the least is the
    comparable figure."""
    out = cli(t.target(), "capture", "--steps", steps, timeout=300).stdout
    assert "capture 1" in out, out
    span = cli.query(t.target(), "SELECT DISTINCT step FROM python.torch_ops WHERE capture=1")
    captured = sorted(r["step"] for r in span)
    assert len(captured) >= steps, captured
    cap = _per_step_least(cli.query(
        t.target(), "SELECT module, step, sum(self_cpu_us)/1000.0 AS ms FROM python.torch_ops "
        "WHERE capture=1 AND stage='backward' AND module IS NOT NULL GROUP BY module, step"), captured)
    rows = cli.query(
        t.target(), "SELECT module, step, sum(duration)*1000.0 AS ms, sum(total_duration)*1000.0 AS total "
        f"FROM python.torch_trace WHERE stage='backward' AND step BETWEEN {captured[0]} AND {captured[-1]} "
        "GROUP BY module, step")
    tr = _per_step_least(rows, captured)
    totals = _per_step_least([{**r, "ms": r["total"]} for r in rows], captured)
    order = sorted(cap, key=cap.get, reverse=True)
    top = order[:3]
    report = "\n".join(f"  {m}: capture {cap[m]:.3f} ms, trace {tr.get(m, 0):.3f} ms (least per step)"
                       for m in order[:8])
    for m in top:
        got = tr.get(m, 0.0)
        assert (1 - TOLERANCE) * cap[m] <= got <= (1 + TOLERANCE) * cap[m], (
            f"backward self time of {m} disagrees with capture beyond ±{TOLERANCE:.0%}:\n{report}")
    for a, b in zip(top, top[1:]):
        if cap[a] > (1 + TOLERANCE) * cap[b]:
            assert tr[a] > tr[b], f"rank order differs from capture:\n{report}"
    return tr, totals


@pytest.mark.parametrize("arch", ["resnet", "bert", "gpt2"])
def test_backward_self_time_agrees_with_capture(launcher, cli, env, session_dir, arch):
    wide = ["--wide"] if arch != "resnet" else []
    t = launcher.traced(str(TRAIN), arch, *wide, "--steps", "2", env=_env(env, session_dir))
    t.wait_steps(2)
    tr, totals = _compare_with_capture(cli, t)
    if arch == "bert":
        # siblings reading one input: each one's backward total is its own time, not nested
        for name in ("layer.0.self_attn.query", "layer.0.self_attn.key", "layer.0.self_attn.value"):
            assert totals[name] <= 1.5 * tr[name] + 0.05, (
                f"{name}: backward total {totals[name]:.3f} ms for self {tr[name]:.3f} ms")
    t.finish()


def test_upstream_hf_gpt2(launcher, cli, env, session_dir):
    """Hugging Face's GPT2LMHeadModel itself: its Conv1D GEMMs in python.layers, and backward
    self time against capture. (torchvision's BasicBlock is not run: the torchvision wheel on
    PyPI for torch 2.13 is built against the CUDA torch and does not import with the CPU one,
    `operator torchvision::nms does not exist`; models.BasicBlock is a faithful copy.)"""
    try:
        import transformers  # noqa: F401
    except Exception as e:  # absent, or broken against this torch
        pytest.skip(f"transformers is not importable ({e}); scripts/setup.sh installs it")
    t = launcher.traced(str(TRAIN), "gpt2", "--upstream", "--wide", "--steps", "2", env=_env(env, session_dir))
    t.wait_steps(2)
    _compare_with_capture(cli, t)
    rows = cli.query(t.target(), "SELECT module, type, in_features, out_features FROM python.layers")
    got = {r["module"]: r for r in rows}
    for name in ("transformer.h.0.attn.c_attn", "transformer.h.0.attn.c_proj", "transformer.h.0.mlp.c_fc",
                 "transformer.h.1.mlp.c_proj", "lm_head"):
        assert name in got, f"{name} missing from python.layers: {sorted(got)}"
    assert got["transformer.h.0.attn.c_attn"]["type"] == "Conv1D"
    assert (got["transformer.h.0.attn.c_attn"]["in_features"], got["transformer.h.0.attn.c_attn"]["out_features"]) \
        == (256, 768)
    t.finish()


def test_eval_reaches_the_training_function_locals(launcher, cli, env, session_dir):
    t = launcher.traced(str(TRAIN), "resnet", "--steps", "1", env=_env(env, session_dir))
    t.wait_steps(1)
    out = cli.eval(t.target(), "import probing\nf = probing.frame('main')\n"
                   "print(type(f['model']).__name__, type(f['optimizer']).__name__)")
    assert out.strip() == "SmallResNet SGD", out
    r = cli(t.target(), "eval", "import probing; probing.frame('no_such_function')", check=False)
    assert r.returncode == 1, r
    assert "LookupError: no running function 'no_such_function' in that thread; it runs (innermost first):" \
        in r.stderr, r.stderr
    assert "main" in r.stderr.splitlines()[-1], r.stderr
    t.finish()
