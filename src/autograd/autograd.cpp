/*
 * autograd.cpp - probing._autograd: backward node timing below Python (contract:
 * autograd_api.h).
 *
 * The agent (C) calls in through the pb_autograd_api table in the capsule `_C_API`; nothing
 * here calls the agent. The only C++ in probing, because autograd's Node and its pre-hooks have
 * no C or Python API that avoids a Python object per node and a Python call per hook.
 *
 * A hook (PreHook) is one heap object owned by its node: it dies with the node, so a node freed
 * after the agent forgot it leaves nothing behind, and a node that runs after the agent forgot it
 * appends an event whose tag the agent no longer knows (it checks, see torch_hooks.c). Events go
 * to one array with an atomic cursor: the engine runs CPU nodes on the thread that called
 * backward() and device nodes on one thread per device, so appends may come from several
 * threads at once; the reader runs in the engine's final callback, after all of them.
 *
 * Built only when torch's headers are found at build time (meson.build beside this file); the
 * module refuses to import under any torch but the one it was built against (torch.__version__
 * compared whole), and the agent then uses its Python-level probes.
 */
#include <Python.h>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/python_variable.h>

#include <atomic>
#include <cstring>
#include <ctime>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

extern "C" {
#include "autograd_api.h"
}

namespace {

using torch::autograd::Node;
using torch::autograd::variable_list;

/* torch.__version__ at build time, local part included (2.13.0+cpu): node layouts and the
 * library ABI are only known to match for that very build. */
#ifndef PB_TORCH_VERSION
#error "PB_TORCH_VERSION (torch.__version__ of the build) must be defined"
#endif
const char built_torch[] = PB_TORCH_VERSION;

int64_t now_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the agent's clock (clock.h) */
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

pb_autograd_event events_buf[PB_AUTOGRAD_MAX_EVENTS];
std::atomic<size_t> events_n{0};
std::atomic<int> running{0};
PyObject *pass_end; /* owned or NULL */

void append(uint64_t tag, int64_t ns)
{
    size_t i = events_n.fetch_add(1, std::memory_order_relaxed);
    if (i < PB_AUTOGRAD_MAX_EVENTS) events_buf[i] = {tag, ns};
}

/* Runs as the engine's final callback (any engine thread): the pass is over. */
void call_pass_end()
{
    if (!Py_IsInitialized()) return;
    PyGILState_STATE g = PyGILState_Ensure();
    if (pass_end) {
        PyObject *r = PyObject_CallNoArgs(pass_end);
        if (r) Py_DECREF(r);
        else PyErr_Clear();
    }
    PyGILState_Release(g);
}

/* Freed PreHooks, kept for the next ones. A detail step makes one per hooked node and the graph
 * frees them all when backward is done: hundreds per step on a model of many small modules, more
 * than glibc's per-thread cache keeps of one size (7), so each one went through _int_malloc,
 * _int_free and heap consolidation (bench/RESULTS.md, issue 32). Nodes die on any thread (the
 * engine's device threads too): the list has a try-lock, and a caller that finds it taken uses
 * malloc instead of waiting. At most HOOK_POOL_MAX are kept; every hook was allocated by
 * ::operator new, so giving one back to it is always valid. */
constexpr size_t HOOK_POOL_MAX = 1 << 16;
std::atomic<bool> hook_pool_busy{false};
void *hook_pool; /* singly linked through each free hook's first word; guarded by hook_pool_busy */
size_t hook_pool_n;

struct PreHook : torch::autograd::FunctionPreHook {
    std::atomic<uint64_t> tag;
    explicit PreHook(uint64_t t) : tag(t) {}
    static void *operator new(size_t size)
    {
        if (size == sizeof(PreHook) && !hook_pool_busy.exchange(true, std::memory_order_acquire)) {
            void *p = hook_pool;
            if (p) {
                hook_pool = *(void **)p;
                hook_pool_n--;
            }
            hook_pool_busy.store(false, std::memory_order_release);
            if (p) return p;
        }
        return ::operator new(size);
    }
    static void operator delete(void *p, size_t size)
    {
        if (size == sizeof(PreHook) && !hook_pool_busy.exchange(true, std::memory_order_acquire)) {
            bool kept = hook_pool_n < HOOK_POOL_MAX;
            if (kept) {
                *(void **)p = hook_pool;
                hook_pool = p;
                hook_pool_n++;
            }
            hook_pool_busy.store(false, std::memory_order_release);
            if (kept) return;
        }
        ::operator delete(p);
    }
    variable_list operator()(const variable_list &grads) override
    {
        int64_t ns = now_ns();
        if (!running.exchange(1, std::memory_order_acq_rel)) {
            try {
                torch::autograd::Engine::get_default_engine().queue_callback(call_pass_end);
            } catch (...) { /* no graph task here: the agent's step boundary resets the pass */
            }
        }
        append(tag.load(std::memory_order_relaxed), ns);
        return grads;
    }
    /* Compiled autograd asks every hook to describe itself; this one stays out of compiled
     * graphs (it records nothing there) rather than making them fail. */
    void compiled_args(torch::dynamo::autograd::CompiledNodeArgs &) const override {}
};

/* Held node references; a handle is (generation << 32) | (index + 1). The pointer type is
 * whatever Tensor::grad_fn() returns: std::shared_ptr<Node> up to torch 2.12, c10::intrusive_ptr
 * from 2.13. */
using NodeRef = std::decay_t<decltype(std::declval<const at::Tensor &>().grad_fn())>;
std::vector<NodeRef> held;
uint32_t generation = 1;

uint64_t node_of(PyObject *obj, const void **id)
{
    *id = nullptr;
    try {
        if (!THPVariable_Check(obj)) return 0;
        const at::Tensor &t = THPVariable_Unpack(obj);
        if (!t.defined()) return 0;
        NodeRef fn = t.grad_fn();
        if (!fn || held.size() >= 0xffffffffu) return 0;
        *id = fn.get();
        held.push_back(std::move(fn));
        return ((uint64_t)generation << 32) | held.size();
    } catch (...) {
        PyErr_Clear();
        *id = nullptr;
        return 0;
    }
}

int hook(uint64_t handle, uint64_t tag)
{
    uint32_t idx = (uint32_t)handle;
    if ((uint32_t)(handle >> 32) != generation || idx == 0 || idx > held.size()) return -1;
    Node *n = held[idx - 1].get();
    try {
        for (auto &h : n->pre_hooks()) {
            if (auto *ours = dynamic_cast<PreHook *>(h.get())) {
                ours->tag.store(tag, std::memory_order_relaxed);
                return 0;
            }
        }
        n->add_pre_hook(std::make_unique<PreHook>(tag));
    } catch (...) {
        return -1;
    }
    return 0;
}

void release_all()
{
    std::vector<NodeRef> old;
    old.swap(held); /* freeing nodes can run Python (tensor deallocation): state first */
    held.reserve(old.capacity());
    generation++;
}

void set_pass_end(PyObject *callable)
{
    Py_XINCREF(callable);
    Py_XSETREF(pass_end, callable);
}

int pass_running() { return running.load(std::memory_order_acquire); }

const pb_autograd_event *events(size_t *n, size_t *dropped)
{
    size_t total = events_n.load(std::memory_order_acquire);
    *n = total < PB_AUTOGRAD_MAX_EVENTS ? total : PB_AUTOGRAD_MAX_EVENTS;
    *dropped = total - *n;
    return events_buf;
}

void mark(uint64_t tag, int64_t ns) { append(tag | PB_AUTOGRAD_MARK, ns); }

void reset()
{
    events_n.store(0, std::memory_order_relaxed);
    running.store(0, std::memory_order_release);
}

int grad_enabled() { return c10::GradMode::is_enabled(); }

const pb_autograd_api api = {
    PB_AUTOGRAD_API_VERSION, built_torch, node_of, hook, release_all, set_pass_end, pass_running,
    events, mark, reset, grad_enabled,
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_autograd",
    "probing: backward node timing below Python (used by the agent, not a public API)", -1,
    nullptr, nullptr, nullptr, nullptr, nullptr,
};

} // namespace

PyMODINIT_FUNC PyInit__autograd(void)
{
    PyObject *torch = PyImport_ImportModule("torch");
    if (!torch) return nullptr;
    PyObject *ver = PyObject_GetAttrString(torch, "__version__");
    Py_DECREF(torch);
    const char *v = ver ? PyUnicode_AsUTF8(ver) : nullptr;
    if (!v || strcmp(v, built_torch)) {
        if (v) PyErr_Format(PyExc_ImportError, "probing._autograd was built against torch %s, this is torch %s",
                            built_torch, v);
        Py_XDECREF(ver);
        return nullptr;
    }
    Py_DECREF(ver);
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return nullptr;
    PyObject *cap = PyCapsule_New((void *)&api, PB_AUTOGRAD_CAPSULE, nullptr);
    if (!cap || PyModule_AddObject(m, "_C_API", cap)) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return nullptr;
    }
    return m;
}
