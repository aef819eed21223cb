"""What it would cost to time backward through torch's RecordFunction instead of a pre-hook on
each node (issue 32): one global callback on the BACKWARD_FUNCTION scope that only reads the
clock and keeps (sequence number, time), the least a backward timer could do there, against no
callback, in one process, on the tiny-module model `many`.

Each round runs one turn (a warm-up step, then 8 timed steps) with the callback, one without and
one more without (the control: the noise floor), in a random order; the figure is the median over
the rounds of each round's ratio. The callback is compiled with torch.utils.cpp_extension at -O3, as
probing's shim is (torch's JIT build passes no optimisation flag by default; a C++ compiler and
torch's headers are needed: the machines that build probing._autograd have them).

    python bench/record_function_cost.py [--rounds 200] [--no-write]
"""
import argparse
import os
import random
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "workloads"))

from _results import machine, write_section  # noqa: E402

SOURCE = r'''
#include <torch/extension.h>
#include <ATen/record_function.h>
#include <time.h>
#include <vector>
static at::CallbackHandle handle = 0;
static std::vector<std::pair<int64_t, int64_t>> events;
static std::unique_ptr<at::ObserverContext> start(const at::RecordFunction &fn) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (events.size() < (1u << 20)) events.emplace_back(fn.seqNr(), ts.tv_sec * 1000000000LL + ts.tv_nsec);
    return nullptr;
}
void on() {
    handle = at::addGlobalCallback(at::RecordFunctionCallback(start)
        .scopes({at::RecordScope::BACKWARD_FUNCTION}).needsInputs(false).needsOutputs(false));
}
void off() { at::removeCallback(handle); handle = 0; }
int64_t take() { int64_t n = (int64_t)events.size(); events.clear(); return n; }
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--turn", type=int, default=8)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    import torch
    import torch.nn as nn
    from torch.utils.cpp_extension import load_inline
    from many_modules import ManyModules
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory() as build:
            ext = load_inline("pb_bench_rf", cpp_sources=SOURCE, functions=["on", "off", "take"],
                              build_directory=build, extra_cflags=["-O3"])
    except Exception as e:  # no compiler or no headers: nothing to measure here
        print(f"record_function_cost: not run, the callback did not build: {e}")
        return
    model = ManyModules()
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        loss_fn(model(x), y).backward()
        opt.step()
        opt.zero_grad()

    for _ in range(30):
        step()
    ext.on()
    step()
    nodes = ext.take()
    ext.off()
    times = {"plain": [], "callback": [], "plain-2": []}
    for _ in range(args.rounds):
        order = list(times)
        random.shuffle(order)
        for mode in order:
            if mode == "callback":
                ext.on()
            step()
            t0 = time.perf_counter_ns()
            for _ in range(args.turn):
                step()
            times[mode].append((time.perf_counter_ns() - t0) / args.turn / 1e6)
            if mode == "callback":
                ext.off()
                ext.take()

    def added(mode):
        return 100 * statistics.median(b / a - 1 for a, b in zip(times["plain"], times[mode]))

    plain_ms = statistics.median(times["plain"])
    per_node = (statistics.median(times["callback"]) - plain_ms) * 1e6 / nodes
    body = f"""## Timing backward through RecordFunction instead of node pre-hooks (bench/record_function_cost.py) — {time.strftime('%Y-%m-%d')}

{machine()}
Method: `python bench/record_function_cost.py --rounds {args.rounds}`. One process, the `many`
model (272 modules; {nodes} backward nodes a step), one intra-op thread. Each round runs a turn of
{args.turn} timed steps per mode in a random order; the figure is the median over the rounds of
each round's ratio to plain. `callback`: one global RecordFunction callback on the
BACKWARD_FUNCTION scope (no inputs, no outputs) that reads the clock and keeps (sequence number,
time): the least a backward timer could do there. `plain-2`: no callback, the noise floor.

| mode | step ms (median) | added vs plain |
|---|---|---|
| plain | {plain_ms:.3f} | |
| plain-2 | {statistics.median(times['plain-2']):.3f} | {added('plain-2'):+.2f} % |
| callback | {statistics.median(times['callback']):.3f} | **{added('callback'):+.2f} %** (about {per_node:.0f} ns a node) |

The callback runs for every node of the pass (AccumulateGrad and the nodes no module made
included), and each call builds a RecordFunction with the node's name. probing's whole backward
timing (a C++ pre-hook on the nodes the forward saw, the replay after the pass) adds about 4
points on this model, torch's part of it about 1.4 (the sections above): this route would cost
more than all of it, so backward stays on pre-hooks.
"""
    print(body)
    if not args.no_write:
        write_section("record_function_cost", body)


if __name__ == "__main__":
    main()
