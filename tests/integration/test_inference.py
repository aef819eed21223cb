"""Inference under transformers' generate() (issue 44): each generate() call is a row of
python.generations and each of its forwards a row of python.tokens, the forwards inside a call
are no steps, the report speaks of generations and tokens (no training words), and the tokens
generated are bit-identical with and without probing.

One tiny random-weight GPT-2 (tests/workloads/generate_job.py, built from a config: nothing is
downloaded), greedy: a run with the KV cache and one with use_cache=False, both traced and
holding, and the cached run once more without probing."""
import importlib.util
import json
import re
import tempfile
from pathlib import Path

import pytest

from conftest import Launcher

if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed (scripts/setup-extras.sh installs it)",
                allow_module_level=True)

CALLS, BATCH, PROMPT, NEW = 5, 3, 10, 16
ARGS = ("--steps", CALLS, "--batch-size", BATCH, "--prompt-tokens", PROMPT,
        "--new-tokens", NEW, "--print-every", 1)
TRAINING_WORDS = ("optimizer", "backward to match", "training thread", "samples/s")


@pytest.fixture(scope="module")
def runs(cli, env, session_dir, socket_dir):
    launcher = Launcher(cli, env, Path(tempfile.mkdtemp(prefix="inf", dir=session_dir)), socket_dir)
    cached = launcher.traced("generate_job.py", *ARGS)
    uncached = launcher.traced("generate_job.py", "--no-cache", *ARGS)
    plain = launcher.plain("generate_job.py", *ARGS)
    cached.wait_holding()
    uncached.wait_holding()
    yield {"cached": cached, "uncached": uncached, "plain": plain}
    launcher.cleanup()


def test_one_row_per_generate_call_with_its_shape(cli, runs):
    t = runs["cached"].target()
    rows = cli.query(t, "SELECT id, batch_size, prompt_tokens, new_tokens, forwards, prefill, ttft, "
                        "decode, wall, cache, kv_cache_bytes FROM python.generations ORDER BY id")
    assert len(rows) == CALLS, rows
    for r in rows:
        assert (r["batch_size"], r["prompt_tokens"], r["new_tokens"]) == (BATCH, PROMPT, NEW), r
        # the prefill, then one decode forward per new token but the first
        assert r["forwards"] == NEW and r["cache"] == 1, r
        assert 0 < r["prefill"] <= r["ttft"] <= r["wall"] and 0 < r["decode"] < r["wall"], r
        # GPT-2's DynamicCache: 2 layers x (key + value) x batch x heads x positions x head dim,
        # float32; the cache holds every position but the last token's
        assert r["kv_cache_bytes"] == 2 * 2 * BATCH * 64 * (PROMPT + NEW - 1) * 4, r


def test_tokens_are_the_prefill_then_each_decode_forward(cli, runs):
    t = runs["cached"].target()
    rows = cli.query(t, "SELECT generation, kind, COUNT(*) AS n, MIN(idx) AS lo, MAX(idx) AS hi, "
                        "MIN(position) AS first_position FROM python.tokens "
                        "GROUP BY generation, kind ORDER BY generation, kind")
    assert [(r["generation"], r["kind"], r["n"]) for r in rows] == \
        [row for g in range(1, CALLS + 1) for row in ((g, "decode", NEW - 1), (g, "prefill", 1))], rows
    decode = [r for r in rows if r["kind"] == "decode"]
    assert all((r["lo"], r["hi"], r["first_position"]) == (1, NEW - 1, PROMPT + 1) for r in decode), rows
    prefill = [r for r in rows if r["kind"] == "prefill"]
    assert all(r["lo"] == 0 and r["first_position"] == PROMPT for r in prefill), rows


def test_forwards_inside_a_generation_are_no_steps(cli, runs):
    t = runs["cached"].target()
    forwards = cli.scalar(t, "SELECT COUNT(*) FROM python.torch_trace WHERE depth = 0 "
                             "AND stage = 'forward'")
    steps = cli.scalar(t, "SELECT COUNT(*) FROM python.steps")
    # CALLS x NEW root forwards, one step per generation (ended at generate()'s return)
    assert forwards == CALLS * NEW, forwards
    assert steps == CALLS, steps


def test_report_speaks_of_generations(cli, runs):
    t = runs["cached"].target()
    out = cli(t, "report").stdout
    assert "primary finding: none" in out, out
    assert re.search(rf"{CALLS} generations of {CALLS * BATCH} sequences on 1 thread: "
                     rf"{CALLS * BATCH * NEW} new tokens", out), out
    assert "time to first token (ms): p50" in out and "time per output token (ms): p50" in out, out
    for word in TRAINING_WORDS:
        assert word not in out, (word, out)
    doc = json.loads(cli(t, "report", "--json").stdout)
    assert doc["workload"] == "inference" and doc["baseline"] is None, doc
    assert doc["inference"]["tokens_per_s"] > 0 and doc["inference"]["ttft_p50_s"] > 0, doc


def test_use_cache_false_is_the_finding(cli, runs):
    t = runs["uncached"].target()
    assert cli.scalar(t, "SELECT COUNT(*) FROM python.generations WHERE cache = 0 "
                         "AND kv_cache_bytes IS NULL") == CALLS
    out = cli(t, "report").stdout
    assert re.search(r"^primary finding: \d+ of \d+ generations ran without a KV cache "
                     r"\(use_cache=False\)", out, re.M), out
    assert "use_cache=True" in out, out


def test_tokens_bit_identical_with_and_without_probing(runs):
    def tokens(run, stdout):
        m = re.search(r"^final tokens: (\w+)$", stdout, re.M)
        assert m, run.describe()
        return m.group(1), [line for line in stdout.splitlines() if line.startswith("step ")]

    plain = runs["plain"]
    assert tokens(plain, plain.finish()) == tokens(runs["cached"], runs["cached"].finish())
    assert "probing: " not in runs["cached"].stderr(), runs["cached"].stderr()
