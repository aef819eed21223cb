"""The user's program must not notice probing: exceptions, signatures, detaching, both modes.

probing sees module executions by wrapping torch.nn.Module.__call__ in C (PROBING_HOOK_MODE=call,
the default) or through torch's global forward hooks (PROBING_HOOK_MODE=hooks). These tests run
small scripts in a real Python with the real agent, both ways, and compare with plain runs.
"""
import json
import subprocess

import pytest

from conftest import PYTHON

SCRIPT = r'''
import inspect, json, os, sys
if sys.argv[1] == "probing":
    import probing
    assert probing.endpoint(), "agent did not start"
import torch
from torch import nn

class Boom(nn.Module):
    def forward(self, x):
        raise ValueError(f"boom {x.shape[0]}")

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.boom = Boom()
    def forward(self, x, explode=False):
        x = self.a(x)
        return self.boom(x) if explode else x

torch.manual_seed(0)
net = Net()
out = {}
try:
    net(torch.randn(2, 3), explode=True)
except ValueError as e:
    out["exception"] = [type(e).__name__, str(e)]
    tb = e.__traceback__
    frames = []
    while tb:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    out["user_frames"] = [f for f in frames if f in ("forward",)]
out["signature"] = str(inspect.signature(net))
out["call_signature"] = str(inspect.signature(net.__call__))
y = net(torch.randn(2, 3), explode=False)
out["after"] = y.shape[0]
out["callable"] = callable(net)
if sys.argv[1] == "probing":
    import probing, torch.nn.modules.module as M
    probing.stop()
    out["restored"] = torch.nn.Module.__call__ is getattr(M.Module, "_wrapped_call_impl", None)
    out["global_hooks_left"] = len(M._global_forward_hooks) + len(M._global_forward_pre_hooks)
    out["endpoint_after_stop"] = probing.endpoint()
    out["still_runs"] = net(torch.randn(1, 3)).shape[0]
print(json.dumps(out))
'''


def run(env, mode, hook_mode=None, tmp_path=None):
    e = dict(env)
    if hook_mode:
        e["PROBING_HOOK_MODE"] = hook_mode
    script = tmp_path / "transparency.py"
    script.write_text(SCRIPT)
    p = subprocess.run([PYTHON, str(script), mode], env=e, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("hook_mode", ["call", "hooks"])
def test_program_cannot_tell(env, tmp_path, hook_mode):
    plain = run(env, "plain", tmp_path=tmp_path)
    probed = run(env, "probing", hook_mode, tmp_path=tmp_path)
    for key in ("exception", "user_frames", "signature", "call_signature", "after", "callable"):
        assert probed[key] == plain[key], (key, probed[key], plain[key])
    assert plain["exception"] == ["ValueError", "boom 2"]
    # probing.stop() gives torch back exactly as it was
    assert probed["restored"] is True
    assert probed["global_hooks_left"] == 0
    assert probed["endpoint_after_stop"] is None
    assert probed["still_runs"] == 1




def test_exception_leaves_depths_right(cli, launcher):
    """After a module raised, the next executions get depth 0 at the root again."""
    script = launcher.workdir / "raiser.py"
    hold = launcher.workdir / "raiser.release"
    script.write_text(r'''
import os, sys, time
import torch
from torch import nn
class Boom(nn.Module):
    def forward(self, x):
        raise RuntimeError("inside")
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(2, 2), Boom())
        self.ok = nn.Linear(2, 2)
    def forward(self, x, fail):
        return self.inner(x) if fail else self.ok(x)
net = Net()
for i in range(4):
    try:
        net(torch.randn(1, 2), fail=(i % 2 == 0))
    except RuntimeError:
        pass
print("HOLDING", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
''')
    t = launcher.command([cli.binary, "run", "--", PYTHON, "-u", str(script), str(hold)],
                         name="raiser")
    t.hold_file = hold
    t.wait_holding()
    rows = cli.query(t.target(), "SELECT module, depth, COUNT(*) AS n FROM python.torch_trace "
                                 "WHERE stage = 'forward' GROUP BY module, depth ORDER BY module")
    got = {(r["module"], r["depth"]): r["n"] for r in rows}
    # two good calls: Net (depth 0) and ok (depth 1); failed calls record no rows for the modules
    # that raised (Net, inner, 1) but do record inner.0, which finished
    assert got[("Net", 0)] == 2, got
    assert got[("ok", 1)] == 2, got
    assert got[("inner.0", 2)] == 2, got
    assert all(depth <= 2 for (_, depth) in got), got
    t.finish()
