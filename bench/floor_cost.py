"""The floor under issue 32's target: what the least an every-module, every-step timer could do
with torch's public interfaces costs on the tiny-module model `many`, before any of probing's own
work. Compiled with torch.utils.cpp_extension, in one process, in alternating turns:

- `wrap`: torch.nn.Module.__call__ replaced by a C vectorcall wrapper that only calls the
  original (the interception every per-module forward timer needs, probing's included);
- `rows`: and each module call's clock read before and after, kept as (tag, start, end) in a
  preallocated vector (a forward row with nothing else: no name, no memory, no ring);
- `hooks`: and a C++ pre-hook (torch::autograd::FunctionPreHook) on the grad_fn of each module's
  first input and of its output, at most one of ours a node, that reads the clock and keeps
  (tag, time) when backward reaches the node: what timing each module's backward needs, with
  no bookkeeping at all (no spans, no owners, no replay, no rows).

Each round runs one turn (a warm-up step, then 8 timed steps) of every mode and of plain twice
(`plain-2`, the control: the noise floor), in a random order; the figure is the median over the
rounds of each round's ratio to plain. A C++ compiler and torch's headers are needed; the extension is built at -O3, as probing's
shim is (torch's JIT build passes no optimisation flag by default).

    python bench/floor_cost.py [--rounds 200] [--no-write]
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
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/python_variable.h>
#include <atomic>
#include <time.h>
#include <vector>

using torch::autograd::variable_list;

namespace {
int64_t now() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
struct Ev { uint64_t tag; int64_t a, b; };
constexpr size_t CAP = 1u << 20;
std::vector<Ev> evs;
int mode;          // 0 wrap, 1 rows, 2 hooks
uint64_t tags;
PyObject *orig;
PyObject *cls;
PyObject *wrapper;

// Freed hooks kept for the next ones (as probing's shim does: hundreds a step are more than
// glibc's per-thread cache keeps of one size). Nodes may die on any thread: a try-lock.
std::atomic<bool> pool_busy{false};
void *pool;

struct Hook : torch::autograd::FunctionPreHook {
    uint64_t tag;
    explicit Hook(uint64_t t) : tag(t) {}
    static void *operator new(size_t size) {
        if (size == sizeof(Hook) && !pool_busy.exchange(true, std::memory_order_acquire)) {
            void *p = pool;
            if (p) pool = *(void **)p;
            pool_busy.store(false, std::memory_order_release);
            if (p) return p;
        }
        return ::operator new(size);
    }
    static void operator delete(void *p, size_t size) {
        if (size == sizeof(Hook) && !pool_busy.exchange(true, std::memory_order_acquire)) {
            *(void **)p = pool;
            pool = p;
            pool_busy.store(false, std::memory_order_release);
            return;
        }
        ::operator delete(p);
    }
    variable_list operator()(const variable_list &grads) override {
        if (evs.size() < CAP) evs.push_back({tag, now(), 0});
        return grads;
    }
};

void hook_node(PyObject *o, uint64_t tag) {
    if (!THPVariable_Check(o)) return;
    const at::Tensor &t = THPVariable_Unpack(o);
    const auto &n = t.grad_fn();
    if (!n) return;
    const auto &hs = n->pre_hooks();
    if (!hs.empty() && dynamic_cast<Hook *>(hs.back().get())) return;
    n->add_pre_hook(std::make_unique<Hook>(tag));
}

PyObject *call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (mode == 0 || n < 1) return PyObject_Vectorcall(orig, args, nargsf, kwnames);
    uint64_t tag = tags++;
    bool grads = mode >= 2 && c10::GradMode::is_enabled();
    if (grads && n >= 2) hook_node(args[1], tag | (1ull << 63));
    int64_t a = now();
    PyObject *r = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    int64_t b = now();
    if (evs.size() < CAP) evs.push_back({tag, a, b});
    if (r && grads) hook_node(r, tag);
    return r;
}

struct Wrap { PyObject_HEAD vectorcallfunc vc; };

PyObject *wrap_get(PyObject *self, PyObject *obj, PyObject *) {
    if (!obj) { Py_INCREF(self); return self; }
    return PyMethod_New(self, obj);
}

PyTypeObject WrapType = {PyVarObject_HEAD_INIT(nullptr, 0)};
}  // namespace

void install(py::object module_cls) {
    if (wrapper) return;
    if (!WrapType.tp_name) {
        WrapType.tp_name = "pb_floor.Wrap";
        WrapType.tp_basicsize = sizeof(Wrap);
        WrapType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR;
        WrapType.tp_vectorcall_offset = offsetof(Wrap, vc);
        WrapType.tp_call = PyVectorcall_Call;
        WrapType.tp_descr_get = wrap_get;
        if (PyType_Ready(&WrapType) < 0) throw py::error_already_set();
    }
    cls = module_cls.ptr();
    Py_INCREF(cls);
    orig = PyObject_GetAttrString(cls, "__call__");
    Wrap *w = PyObject_New(Wrap, &WrapType);
    w->vc = call;
    wrapper = (PyObject *)w;
    PyObject_SetAttrString(cls, "__call__", wrapper);
    evs.reserve(CAP);
}
void uninstall() {
    if (!wrapper) return;
    PyObject_SetAttrString(cls, "__call__", orig);
    Py_CLEAR(wrapper);
    Py_CLEAR(orig);
    Py_CLEAR(cls);
}
void set_mode(int m) { mode = m; }
int64_t take() { int64_t n = (int64_t)evs.size(); evs.clear(); return n; }
'''

MODES = {"wrap": 0, "rows": 1, "hooks": 2}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--turn", type=int, default=8)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    import torch.nn as nn
    ext = build_extension("pb_bench_floor", SOURCE, ["install", "uninstall", "set_mode", "take"])
    if ext is None:
        return
    step = many_step()
    # what one step of `hooks` records: module calls (forward rows) and hooked nodes reached
    ext.install(nn.Module)
    ext.set_mode(MODES["hooks"])
    step()
    per_step = ext.take()
    ext.set_mode(MODES["rows"])
    step()
    calls = ext.take()
    ext.uninstall()
    hooked = per_step - calls

    def begin(mode):
        if mode in MODES:
            ext.install(nn.Module)
            ext.set_mode(MODES[mode])

    def end(mode):
        if mode in MODES:
            ext.uninstall()
        ext.take()

    times = turns(step, ["plain", "plain-2", *MODES], args.rounds, args.turn, begin, end)
    plain_ms = statistics.median(times["plain"])
    rows = "\n".join(f"| {m} | {statistics.median(times[m]):.3f} | {added(times, m):+.2f} % |"
                     for m in ["plain-2", *MODES])
    body = f"""## The floor under every module, every step (bench/floor_cost.py) — {time.strftime('%Y-%m-%d')}

{machine()}
Method: `python bench/floor_cost.py --rounds {args.rounds}`. One process, the `many` model, one
intra-op thread; {calls} module calls and {hooked} hooked nodes reached a step. Each round runs a
turn of {args.turn} timed steps per mode in a random order; the figure is the median over the
rounds of each round's ratio to plain. `wrap`: `Module.__call__` replaced by a C wrapper that
only calls the original; `rows`: and two clock reads a call kept in a preallocated vector;
`hooks`: and a C++ pre-hook on each module's input and output grad_fn (one of ours a node) that
reads the clock and keeps (tag, time). None of them names, attributes or stores anything.

| mode | step ms (median) | added vs plain |
|---|---|---|
| plain | {plain_ms:.3f} | |
{rows}
"""
    print(body)
    if not args.no_write:
        write_section("floor_cost", body)


if __name__ == "__main__":
    main()
