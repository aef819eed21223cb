"""What bench/floor_cost.py and bench/record_function_cost.py share: a small C++ extension built
with torch.utils.cpp_extension at -O3 (as probing's shim is: torch's JIT build passes no
optimisation flag by default), one training step of the tiny-module model `many`, and the
alternating turns that compare modes in one process."""
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "workloads"))


def build_extension(name, source, functions):
    """The extension, or None (the reason printed) where no C++ compiler or torch headers are."""
    from torch.utils.cpp_extension import load_inline
    try:
        with tempfile.TemporaryDirectory() as build:
            return load_inline(name, cpp_sources=source, functions=functions,
                               build_directory=build, extra_cflags=["-O3"])
    except Exception as e:  # no compiler or no headers: nothing to measure here
        print(f"{name}: not run, the extension did not build: {e}")
        return None


def many_step(warmup=30):
    """One intra-op thread and a function that runs one SGD step of `many`, warmed up."""
    import torch
    import torch.nn as nn
    from many_modules import ManyModules
    torch.set_num_threads(1)
    model = ManyModules()
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        loss_fn(model(x), y).backward()
        opt.step()
        opt.zero_grad()

    for _ in range(warmup):
        step()
    return step


def turns(step, modes, rounds, turn, begin=lambda mode: None, end=lambda mode: None):
    """Each round, every mode in a new random order: begin(mode), a warm-up step, `turn` timed
    steps, end(mode). Returns {mode: [ms a step, one per round]}."""
    times = {m: [] for m in modes}
    for _ in range(rounds):
        order = list(modes)
        random.shuffle(order)
        for mode in order:
            begin(mode)
            step()
            t0 = time.perf_counter_ns()
            for _ in range(turn):
                step()
            times[mode].append((time.perf_counter_ns() - t0) / turn / 1e6)
            end(mode)
    return times


def added(times, mode, base="plain"):
    """Percent added to `base`: the median over the rounds of each round's ratio."""
    return 100 * statistics.median(b / a - 1 for a, b in zip(times[base], times[mode]))
