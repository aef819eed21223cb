"""Shared plumbing for the workload scripts in this folder.

Each workload is a small, deterministic CPU training (or inference) script that the integration
tests, the benchmarks and the demos run under probing. They share one command line:

    --steps N         how many steps to run
    --hold-file PATH  after the last step print "HOLDING" and wait until PATH exists (at most
                      300 s), so a test can query a finished-but-alive process
    --print-every K   print "step N loss X" every K steps (flushed; 0: never)

and end by printing "final loss: <float.hex()>" so two runs can be compared bit for bit.

Scripts import this module by name; it sits beside them, so `python3 tests/workloads/x.py`
finds it without any setup.
"""
import argparse
import os
import sys
import time

import torch

# How long a held process waits for its release file; longer for slow (sanitizer) runs.
HOLD_LIMIT_S = float(os.environ.get("PROBING_TEST_HOLD_S", "300"))


def make_parser(description, steps):
    """Returns an ArgumentParser with the options every workload understands."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=steps, help="steps to run (default %(default)s)")
    p.add_argument("--hold-file", default=None,
                   help="after training print HOLDING and wait until this file exists")
    p.add_argument("--print-every", type=int, default=1, help="print a step line every K steps")
    p.add_argument("--seed", type=int, default=0)
    return p


def make_deterministic(seed):
    """Same numbers on every run on this machine: fixed seed, one thread, deterministic kernels."""
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def say(*parts):
    # One write per line: ranks of a job share one stdout, and print() under -u writes the text
    # and the newline separately, so two ranks' lines could interleave ("HOLDINGHOLDING").
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def report_step(step, value, every, name="loss"):
    if every > 0 and (step % every == 0):
        say(f"step {step} {name} {float(value):.6f}")


def report_final(loss, label="final loss"):
    if loss is None:  # --steps 0
        say(f"{label}: none")
        return
    say(f"{label}: {float(loss).hex()}")


def hold(path):
    """Keeps the process alive (and idle) until `path` exists or HOLD_LIMIT_S pass."""
    if not path:
        return
    say("HOLDING")
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not os.path.exists(path):
        print(f"hold file {path} did not appear in {HOLD_LIMIT_S:.0f} s; exiting", file=sys.stderr,
              flush=True)


class Trainer:
    """One training step at a time over an endless stream of batches from `loader`.

    `train_step()` is what the seed's throughput example calls through `probing eval`; the
    scripts' own loops call it too, so both paths do exactly the same work.
    """

    def __init__(self, model, loader, optimizer, loss_fn):
        self.model = model
        self.loader = loader
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.step = 0
        self.last_loss = None
        self._batches = None

    def next_batch(self):
        if self._batches is None:
            self._batches = iter(self.loader)
        try:
            return next(self._batches)
        except StopIteration:
            self._batches = iter(self.loader)
            return next(self._batches)

    def train_step(self):
        inputs, targets = self.next_batch()
        self.optimizer.zero_grad(set_to_none=True)
        output = self.model(inputs)
        loss = self.loss_fn(output, targets)
        loss.backward()
        self.optimizer.step()
        self.step += 1
        self.last_loss = loss.detach()
        return self.last_loss
