"""`probing <target> eval "CODE"`: the seed's eval examples run verbatim in the target's
__main__, and eval's failure modes (exception, timeout) say what happened without hurting the
training process. The seed examples live outside the repository: without them their tests are
skipped (conftest.needs_seeds); the repository's examples/eval are tested in test_examples.py."""
import re
import shutil
import time

import pytest

from conftest import needs_seeds, seed_file

# Examples that need a GPU must answer quickly on this machine, not hang.
QUICK_S = 60


def run_seed_eval(cli, run, name, timeout=QUICK_S):
    start = time.monotonic()
    r = cli(run.target(), "eval", seed_file(name), check=False, timeout=timeout)
    return r, time.monotonic() - start


def assert_still_serving(cli, run):
    assert run.alive(), f"the target died:\n{run.describe()}"
    assert cli.scalar(run.target(), "SELECT 1") == 1
    assert cli.eval(run.target(), "print('still here')") == "still here\n"


@pytest.fixture(scope="module")
def training(session_launcher):
    """A ResNet that keeps training (and printing every step) for the whole module."""
    t = session_launcher.traced("resnet_inplace.py", "--steps", 1_000_000, "--workers", 0,
                                "--print-every", 1, hold=False)
    t.wait_steps(3)
    yield t
    t.kill()


# ----------------------------------------------------------------------------- seed examples


@needs_seeds
def test_03_batch_load_time(cli, resnet_run):
    r, _ = run_seed_eval(cli, resnet_run, "eval-03-batch-load-time.py")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"Batch load time: \d+\.\d\d ms\n", r.stdout), r.stdout
    # a fresh iterator forked two workers from inside the agent's eval; all is still well
    assert_still_serving(cli, resnet_run)


@needs_seeds
def test_04_worker_analysis(cli, resnet_run):
    r, _ = run_seed_eval(cli, resnet_run, "eval-04-worker-analysis.py")
    assert r.returncode == 0, r.stderr
    # resnet_run was started with --workers 2 and no pin_memory
    assert r.stdout == "Num workers: 2\nPin memory: False\nPrefetch factor: 2\n"


@needs_seeds
def test_06_attention_memory(cli, transformer_run):
    r, _ = run_seed_eval(cli, transformer_run, "eval-06-attention-memory.py")
    assert r.returncode == 0, r.stderr
    # transformer.py: max_position_embeddings=32, num_attention_heads=4
    assert cli.eval(transformer_run.target(),
                    "print(model.config.max_position_embeddings, model.config.hidden_size, "
                    "model.config.num_attention_heads)") == "32 64 4\n"
    expected = 32 * 32 * 4 * 4 / 1024 ** 3
    assert r.stdout == f"Estimated attention memory: {expected:.2f} GB\n"


@needs_seeds
def test_07_comment_only_prints_nothing(cli, resnet_run):
    r, _ = run_seed_eval(cli, resnet_run, "eval-07-check-compute-memory-bound.py")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


@needs_seeds
def test_08_torch_compile_assignment(cli, traced):
    run = traced("many_modules.py", "--steps", 3)
    run.wait_holding()
    r, _ = run_seed_eval(cli, run, "eval-08-torch-compile.py", timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Model compiled with torch.compile\n"
    # the assignment happened in the script's __main__
    assert cli.eval(run.target(), "print(type(model).__name__, model._orig_mod is trainer.model)"
                    ) == "OptimizedModule True\n"
    assert_still_serving(cli, run)
    run.finish()


@needs_seeds
def test_10_gradient_checkpointing(cli, transformer_run, resnet_run):
    r, _ = run_seed_eval(cli, transformer_run, "eval-10-gradient-checkpointing.py")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "".join(f"layers.{i}: checkpoint=False\n" for i in range(4))
    # the ResNet's modules have no such attribute: nothing to print
    r, _ = run_seed_eval(cli, resnet_run, "eval-10-gradient-checkpointing.py")
    assert (r.returncode, r.stdout) == (0, ""), r.stderr


@needs_seeds
def test_11_throughput_runs_ten_real_steps(cli, resnet_run):
    target = resnet_run.target()
    steps_before = int(cli.eval(target, "print(trainer.step)"))
    rows_before = cli.scalar(target, "SELECT COUNT(*) FROM python.steps")
    r, _ = run_seed_eval(cli, resnet_run, "eval-11-throughput.py", timeout=300)
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(r"Throughput: (\d+\.\d) samples/sec\n", r.stdout)
    assert m and float(m.group(1)) > 0, r.stdout
    assert int(cli.eval(target, "print(trainer.step)")) == steps_before + 10
    # the steps run by eval are recorded like any other
    rows_after = cli.scalar(target, "SELECT COUNT(*) FROM python.steps")
    assert rows_after == rows_before + 10
    assert_still_serving(cli, resnet_run)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
@needs_seeds
def test_01_gpu_utilization_without_nvidia_smi(cli, resnet_run):
    r, elapsed = run_seed_eval(cli, resnet_run, "eval-01-gpu-utilization.py")
    assert r.returncode == 1
    assert "Traceback" in r.stderr and "FileNotFoundError" in r.stderr
    assert "nvidia-smi" in r.stderr
    assert elapsed < QUICK_S
    assert_still_serving(cli, resnet_run)


@needs_seeds
def test_02_cuda_sync_without_cuda(cli, resnet_run):
    r, _ = run_seed_eval(cli, resnet_run, "eval-02-cuda-sync-time.py")
    assert r.returncode == 1, r.stdout
    assert "Torch not compiled with CUDA enabled" in r.stderr
    assert_still_serving(cli, resnet_run)


@needs_seeds
def test_05_allreduce_without_distributed(cli, resnet_run):
    r, _ = run_seed_eval(cli, resnet_run, "eval-05-allreduce-scaling.py")
    # not a distributed run: the example's `if` skips everything
    assert (r.returncode, r.stdout) == (0, ""), r.stderr
    assert_still_serving(cli, resnet_run)


@needs_seeds
def test_09_amp_enabled_without_cuda(cli, resnet_run):
    r, _ = run_seed_eval(cli, resnet_run, "eval-09-amp-enabled.py")
    if r.returncode == 0:
        assert r.stdout == "AMP enabled: False\n"
    else:
        # torch 2.13: torch.cuda.amp.autocast_mode has no is_autocast_enabled
        assert r.returncode == 1
        assert "Traceback" in r.stderr and "AttributeError" in r.stderr
        assert "is_autocast_enabled" in r.stderr
    assert_still_serving(cli, resnet_run)


# ----------------------------------------------------------------------------- eval itself


def test_runs_in_main_namespace_and_keeps_names(cli, resnet_run):
    target = resnet_run.target()
    assert cli.eval(target, "print(__name__, type(model).__name__, batch_size)") == \
        "__main__ ResNetSmall 8\n"
    cli.eval(target, "probing_test_value = 41")
    assert cli.eval(target, "print(probing_test_value + 1)") == "42\n"
    cli.eval(target, "del probing_test_value")


def test_prints_stdout_and_stderr_separately(cli, resnet_run):
    r = cli(resnet_run.target(), "eval", "import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert r.stdout == "out\n"
    assert "err" in r.stderr and "out" not in r.stderr


def test_exception_prints_traceback_and_exits_1(cli, resnet_run):
    r = cli(resnet_run.target(), "eval", "print('before')\nraise ValueError('boom 42')",
            check=False)
    assert r.returncode == 1
    assert r.stdout == "before\n"
    assert "Traceback" in r.stderr
    assert "ValueError: boom 42" in r.stderr
    assert_still_serving(cli, resnet_run)


def test_syntax_error_exits_1(cli, resnet_run):
    r = cli(resnet_run.target(), "eval", "def broken(:\n    pass", check=False)
    assert r.returncode == 1
    assert "SyntaxError" in r.stderr
    assert_still_serving(cli, resnet_run)


def test_exception_does_not_reach_training(cli, training):
    """An exception in eval stays in eval: the training loop goes on."""
    r = cli(training.target(), "eval", "1/0", check=False)
    assert r.returncode == 1 and "ZeroDivisionError" in r.stderr
    done = training.steps_done()
    training.wait_steps(done + 3, timeout=60)


def test_busy_loop_times_out_and_training_goes_on(cli, training):
    start = time.monotonic()
    r = cli(training.target(), "eval", "--timeout", "2", "while True: pass", check=False,
            timeout=60)
    elapsed = time.monotonic() - start
    assert r.returncode == 124, (r.returncode, r.stderr)
    assert r.stderr.startswith("probing: ")
    assert "timeout" in r.stderr.lower() or "timed out" in r.stderr.lower(), r.stderr
    assert elapsed < 10, f"eval with --timeout 2 took {elapsed:.1f} s"
    # the target trains on ...
    done = training.steps_done()
    training.wait_steps(done + 5, timeout=60)
    # ... and the runaway code was stopped: eval answers again
    r = cli(training.target(), "eval", "--timeout", "20", "print('after')", check=False,
            timeout=60)
    assert (r.returncode, r.stdout) == (0, "after\n"), r.stderr


def test_sleeping_code_times_out(cli, training):
    """Code that would sleep for 10 minutes, under a 1 s timeout: the CLI answers with the
    timeout (no wall-clock bound here beyond "long before the code would end", so a loaded
    machine cannot fail it), and the TimeoutError raised in the code ends it: the next eval
    runs long before the 10 minutes are up."""
    start = time.monotonic()
    r = cli(training.target(), "eval", "--timeout", "1",
            "import time\nfor _ in range(12000):\n    time.sleep(0.05)", check=False, timeout=300)
    assert r.returncode == 124, (r.returncode, r.stderr)
    assert "eval timed out: the code was still running after 1 s" in r.stderr, r.stderr
    assert time.monotonic() - start < 300
    assert cli(training.target(), "eval", "--timeout", "120", "print(6 * 7)",
               timeout=300).stdout == "42\n"
    assert training.alive()


def test_training_thread_prints_are_not_captured(cli, training):
    before = training.steps_done()
    r = cli(training.target(), "eval",
            "import time\nprint('eval-begin')\ntime.sleep(2)\nprint('eval-end')", timeout=60)
    # the training loop printed "step N" lines meanwhile: they went to its own stdout
    assert r.stdout == "eval-begin\neval-end\n"
    assert training.steps_done() > before + 5
    assert "eval-begin" not in training.stdout()


def test_eval_while_training_sees_live_state(cli, training):
    first = int(cli.eval(training.target(), "print(trainer.step)"))
    training.wait_steps(training.steps_done() + 3, timeout=60)
    second = int(cli.eval(training.target(), "print(trainer.step)"))
    assert second > first
