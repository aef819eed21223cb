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
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _results import machine, write_section  # noqa: E402
from _turns import added, build_extension, many_step, turns  # noqa: E402

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
    ext = build_extension("pb_bench_rf", SOURCE, ["on", "off", "take"])
    if ext is None:
        return
    step = many_step()
    ext.on()
    step()
    nodes = ext.take()
    ext.off()

    def begin(mode):
        if mode == "callback":
            ext.on()

    def end(mode):
        if mode == "callback":
            ext.off()
            ext.take()

    times = turns(step, ["plain", "callback", "plain-2"], args.rounds, args.turn, begin, end)
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
| plain-2 | {statistics.median(times['plain-2']):.3f} | {added(times, 'plain-2'):+.2f} % |
| callback | {statistics.median(times['callback']):.3f} | **{added(times, 'callback'):+.2f} %** (about {per_node:.0f} ns a node) |

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
