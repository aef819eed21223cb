"""Tracing never changes training: the same deterministic CPU run gives bit-identical losses
(every printed step and the final one, as float.hex()) with and without probing."""
import re

import pytest

CASES = {
    "resnet, DataLoader without workers": ("resnet_inplace.py", "--steps", 40, "--workers", 0),
    "resnet, DataLoader with 2 workers": ("resnet_inplace.py", "--steps", 40, "--workers", 2),
    "edge cases": ("edge_cases.py", "--steps", 30),
    "transformer with activation checkpointing": ("transformer.py", "--steps", 20,
                                                  "--checkpointing"),
}


def loss_lines(stdout):
    return [line for line in stdout.splitlines()
            if re.match(r"^(step \d+ |final loss: |hook calls: )", line)]


@pytest.mark.parametrize("case", list(CASES))
def test_bit_identical_with_and_without_probing(cli, launcher, case):
    script, *args = CASES[case]
    # both at once: each uses one thread, and this machine has two cores
    traced = launcher.traced(script, *args, hold=False)  # returns once its socket is up
    plain = launcher.plain(script, *args)
    with_probing = traced.finish()
    without = plain.finish()
    assert re.search(r"^final loss: \S+$", without, re.M), without
    assert loss_lines(with_probing) == loss_lines(without)
    # the agent stayed on (it says so on stderr when it turns itself off)
    assert "probing: " not in traced.stderr(), traced.stderr()
