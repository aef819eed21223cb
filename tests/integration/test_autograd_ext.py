"""Backward timing below Python (probing._autograd, docs/tables.md "How backward is timed"):
with every step in detail, the C++ extension gives the same backward rows as the Python-level
probes, says which one runs, and leaves training unchanged on the shapes that stress autograd:
inplace ops and the user's own hooks (edge_cases.py), activation checkpointing (forwards
recomputed inside backward) and torch.compile'd modules. Real training processes, the real
binary."""
import json
import re
import subprocess
import textwrap
from collections import Counter

import pytest

from conftest import PYTHON

EVERY_STEP = {"PROBING_DETAIL_EVERY": "1"}


def extension_built(env):
    """Whether the probing package the traced processes import has probing._autograd (a build
    without a C++ compiler or torch headers has not: the agent then uses its Python probes)."""
    r = subprocess.run([PYTHON, "-c", "import torch, probing._autograd"], env=env,
                       capture_output=True, text=True, timeout=120)
    return r.returncode == 0


def backward_probes(cli, t):
    return json.loads(cli(t.target(), "info", "-f", "json").stdout)["detail"]["backward"]


def rows(cli, t, first_step):
    """Every torch_trace row from first_step on, as (step, stage, module, depth), counted."""
    got = cli.query(t.target(), "SELECT step, stage, module, depth FROM python.torch_trace "
                                f"WHERE step >= {first_step}")
    return Counter((r["step"], r["stage"], r["module"], r["depth"]) for r in got)


def loss_lines(stdout):
    return [line for line in stdout.splitlines()
            if re.match(r"^(step \d+ |final loss: |hook calls: )", line)]


def test_extension_and_python_probes_give_the_same_rows(cli, launcher, env):
    """edge_cases.py (inplace ReLU, tuple/dict outputs, a shared module, user hooks that change
    outputs and gradients, a checkpointed block), every step in detail, with and without the
    extension: the same forward and backward rows, the same losses and hook calls."""
    built = extension_built(env)
    ext = launcher.traced("edge_cases.py", "--steps", 6, env={**env, **EVERY_STEP})
    py = launcher.traced("edge_cases.py", "--steps", 6,
                         env={**env, **EVERY_STEP, "PROBING_AUTOGRAD_EXT": "0"})
    ext.wait_holding()
    py.wait_holding()
    if built:
        assert re.fullmatch(r"extension \(probing\._autograd, torch [^)]+\)",
                            backward_probes(cli, ext)), backward_probes(cli, ext)
    else:
        # not installed with the package: built on first use (_autograd_build.py), or why not
        assert re.match(r"python \(probing\._autograd |extension \(probing\._autograd, torch [^;]+; built on first "
                        r"use", backward_probes(cli, ext)), backward_probes(cli, ext)
    assert backward_probes(cli, py) == "python (PROBING_AUTOGRAD_EXT=0)"
    with_ext, with_py = rows(cli, ext, 1), rows(cli, py, 1)
    backward = [k for k in with_ext if k[1] == "backward"]
    assert {k[0] for k in backward} == {1, 2, 3, 4, 5}, "backward rows on every step"
    assert with_ext == with_py
    assert loss_lines(ext.finish()) == loss_lines(py.finish())


def test_same_rows_when_the_graph_changes_size_every_step(cli, launcher, env):
    """edge_cases.py --vary-depth: 0 to 120 extra module calls per forward, so the extension's
    probes, kept from step to step, are reused for fewer nodes, for more (the node table grows
    after a reuse) and for none: the rows still match the Python probes' row for row."""
    args = ("edge_cases.py", "--steps", 6, "--vary-depth")
    ext = launcher.traced(*args, env={**env, **EVERY_STEP})
    py = launcher.traced(*args, env={**env, **EVERY_STEP, "PROBING_AUTOGRAD_EXT": "0"})
    ext.wait_holding()
    py.wait_holding()
    with_ext, with_py = rows(cli, ext, 1), rows(cli, py, 1)
    for stage in ("forward", "backward"):
        extra = Counter()
        for (step, st, module, depth), n in with_ext.items():
            if st == stage and module.endswith("extra"):
                extra[step] += n
        # probing's step s is the (s+1)-th forward
        assert {s: extra[s] for s in range(1, 6)} == {s: 40 * ((s + 1) % 4) for s in range(1, 6)}, stage
    assert with_ext == with_py
    assert loss_lines(ext.finish()) == loss_lines(py.finish())


def test_checkpointed_blocks_every_step(cli, launcher, env):
    """Activation checkpointing with every step in detail: each block's backward is timed on
    every step, the recomputed forwards are forward time, the step's parts fit in its wall
    time, and the losses are bit-identical to a run without probing."""
    args = ("transformer.py", "--steps", 12, "--layers", 2, "--checkpointing", "--print-every", 1)
    t = launcher.traced(*args, env={**env, **EVERY_STEP})
    plain = launcher.plain(*args)
    t.wait_holding()
    blocks = cli.query(t.target(), "SELECT step, module, total_duration AS total FROM python.torch_trace "
                                   "WHERE stage = 'backward' AND module LIKE 'layers._' "
                                   "AND step BETWEEN 1 AND 11")
    per_step = Counter(r["step"] for r in blocks)
    assert per_step == {s: 2 for s in range(1, 12)}, per_step  # 2 blocks (transformer.py)
    assert all(r["total"] > 0 for r in blocks)
    steps = cli.query(t.target(), "SELECT step, wall, forward, backward, optimizer "
                                  "FROM python.steps WHERE step BETWEEN 1 AND 11")
    assert len(steps) == 11
    for s in steps:
        assert s["backward"] > 0 and s["forward"] > 0
        assert s["forward"] + s["backward"] + s["optimizer"] <= s["wall"] * 1.001, s
    assert loss_lines(t.finish()) == loss_lines(plain.finish())


COMPILE_SCRIPT = textwrap.dedent("""\
    import os, sys, time
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

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.compile(nn.Sequential(Block(), Block()), backend=sys.argv[1])
            self.head = nn.Linear(16, 4)
        def forward(self, x):
            return self.head(self.body(x))

    model = Net()
    x = torch.randn(32, 16)
    y = torch.randint(0, 4, (32,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 9):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.6f}", flush=True)
    print("final loss:", loss.item().hex(), flush=True)
    if len(sys.argv) > 2:
        print("HOLDING", flush=True)
        deadline = time.monotonic() + 600
        while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline:
            time.sleep(0.05)
""")


def test_compiled_module_backward_every_step(cli, launcher, env):
    """A torch.compile'd submodule (aot_eager: dynamo and AOTAutograd, no C++ compiler): its
    backward node is AOTAutograd's own; it is timed on every step like any module's, and the
    losses are the same as without probing."""
    script = launcher.workdir / "compiled_submodule.py"
    script.write_text(COMPILE_SCRIPT)
    release = launcher.workdir / "compiled_submodule.release"
    t = launcher.command([cli.binary, "run", "--", PYTHON, "-u", script, "aot_eager", release],
                         env={**env, **EVERY_STEP}, name="compiled-ext")
    plain_env = dict(env)
    plain_env.pop("PROBING", None)
    plain = launcher.command([PYTHON, "-u", script, "aot_eager"], env=plain_env,
                             expect_socket=False, name="compiled-plain")
    try:
        t.wait_holding(timeout=300)
        body = cli.query(t.target(), "SELECT step, total_duration AS total FROM python.torch_trace "
                                     "WHERE stage = 'backward' AND module = 'body' AND step >= 1")
        assert sorted(r["step"] for r in body) == list(range(1, 8)), body
        assert all(r["total"] > 0 for r in body)
        head = cli.query(t.target(), "SELECT DISTINCT step FROM python.torch_trace "
                                     "WHERE stage = 'backward' AND module = 'head' AND step >= 1")
        assert len(head) == 7
    finally:
        release.touch()
    assert loss_lines(t.finish(timeout=300)) == loss_lines(plain.finish(timeout=300))
    assert "probing: " not in t.stderr(), t.stderr()
