/*
 * torch_hooks.c - the recording hot path: module executions, backward and optimizer steps, in C.
 *
 * Everything here runs with the GIL held (torch calls into it from Python), so the shared state
 * below needs no lock; only the ring push (lock-free) is seen by other threads.
 *
 * Module executions are seen through a C wrapper of torch.nn.Module.__call__ (default) or through
 * torch's global forward pre/post hooks (PROBING_HOOK_MODE=hooks); both feed enter()/leave().
 * Per execution the work is: one hash lookup for the module's interned name, a push onto a
 * per-thread frame stack, two clock reads, one row pushed into the ring. Names are found once per
 * model by walking root.named_modules() the first time a root module runs; a weakref callback
 * forgets modules that die. `duration` is self time (frames accumulate their children's time).
 *
 * Steps: an optimizer.step() (global optimizer step hooks) ends the step; its own duration is a
 * 'step' row. Until the first optimizer step is seen, the start of a new forward of the first
 * root module ends the step, so inference loops get one step per forward. An evaluation loop
 * after training (forwards of that module under no_grad, more of them since the last optimizer
 * step than any optimizer step had) goes back to one step per forward, until a forward with
 * autograd on or an optimizer step: see evaluation_stretch().
 *
 * Detail and summary steps (detail.h): rows are pushed only on detail steps. On the others a
 * module call costs a frame push and pop (no name lookup, no clock read below the root, no
 * grad_fn lookups), and the step's forward, backward and optimizer times still reach
 * python.steps: forward from the root module calls, backward from one probe per root output
 * (the backward pass: its first probed node to the engine's final callback).
 *
 * Backward: see the section "backward: probes on autograd nodes" below.
 */
#include "torch_hooks.h"

#include "autograd_api.h"
#include "capture.h"
#include "capture_state.h"
#include "clock.h"
#include "collect.h"
#include "config.h"
#include "detail.h"
#include "intern.h"
#include "log.h"
#include "memsample.h"
#include "tables.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_DEPTH 256

/* ---- state shared across threads (written under the GIL) ---- */

static _Atomic int enabled;
static int installed;
static PyObject *handles[4];       /* RemovableHandles of our four registrations */
static PyTypeObject *tensor_type;  /* torch._C.TensorBase */
static PyObject *queue_callback;   /* bound Variable._execution_engine.queue_callback */
static PyObject *is_grad_enabled;  /* torch._C.is_grad_enabled */
static PyObject *str_grad_fn, *str_register_prehook, *str_named_modules, *str_remove;
static char torch_version[64];
static _Atomic int torch_version_set;

static _Atomic int64_t step;
static int64_t step_start_ns;
static uint32_t seq;
static int training_latched;       /* an optimizer step has been seen */
static int evaluating;             /* training_latched was dropped for an evaluation stretch */
static int64_t nograd_forwards;    /* root forwards of primary_root under no_grad since the last
                                      optimizer step (counted while training_latched) */
static int64_t nograd_per_optimizer; /* the most of them any optimizer step has had */
static int nograd_learned;         /* nograd_per_optimizer was measured over a whole optimizer step */
static PyObject *primary_root;     /* compared by address only, never dereferenced */
static int primary_ran;
static uint16_t rank;
static int record_backward = 1; /* PROBING_BACKWARD */
/* The extension probing._autograd (autograd_api.h), or NULL: backward probes are then Python
 * callables on grad_fn objects (PROBING_AUTOGRAD_EXT=0, or the extension is missing). */
static const pb_autograd_api *ag;
static char ag_status[160] = "python"; /* pb_torch_backward_probes() */
static int64_t opt_start_ns;
static uint32_t opt_seq;
static pb_detail detail_policy;
static int detail;          /* the current step records rows (detail.h) */
static int detail_measured; /* no capture ran in the current step: it counts for the policy */
/* copies of the policy for other threads (pb_torch_detail) */
static _Atomic int64_t shown_period, shown_window, shown_cost_ppm = -1, shown_budget_pct_e6;
static _Atomic int shown_automatic, shown_now;

static void show_detail(void)
{
    atomic_store_explicit(&shown_period, detail_policy.period, memory_order_relaxed);
    atomic_store_explicit(&shown_window, detail_policy.window, memory_order_relaxed);
    atomic_store_explicit(&shown_cost_ppm, detail_policy.cost < 0 ? -1 : (int64_t)(detail_policy.cost * 1e6),
                          memory_order_relaxed);
    atomic_store_explicit(&shown_budget_pct_e6, (int64_t)(detail_policy.budget * 1e8), memory_order_relaxed);
    atomic_store_explicit(&shown_automatic, detail_policy.automatic, memory_order_relaxed);
    atomic_store_explicit(&shown_now, detail, memory_order_relaxed);
}

/* ---- per-thread frame stacks ---- */

struct bspan;

typedef struct frame {
    PyObject *module;     /* borrowed: only compared */
    struct bspan *span;   /* owned or NULL: this execution's backward span, made at enter so that
                           * the spans of nested executions can point to it (detail frames) */
    PyObject *in_grad_fn; /* owned or NULL: the input's grad_fn before forward ran (with the
                           * extension: the node's address, held by in_handle) */
    uint64_t in_handle;   /* the extension's handle of in_grad_fn */
    PyObject *range;      /* owned or NULL: the profiler range of a capture (capture.h) */
    int64_t start_ns;
    int64_t child_ns;     /* inclusive time of nested executions, subtracted for self time */
    uint32_t name, type, seq;
    uint8_t layer_capture; /* first execution of a Linear/convolution: python.layers row at the end */
    uint8_t detail;        /* recorded in detail (the root's mode, inherited by nested calls) */
} frame;

typedef struct tstate {
    int depth;
    int overflow; /* pre-hooks not pushed because the stack was full */
    uint32_t tid;
    frame stack[MAX_DEPTH];
} tstate;

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static __thread tstate *tls_state __attribute__((tls_model("initial-exec")));

static void tls_free(void *p) { free(p); /* frames' grad_fn refs leak if a thread dies mid-forward */ }
static void tls_init(void) { pthread_key_create(&tls_key, tls_free); }

static tstate *get_tstate(void)
{
    tstate *ts = tls_state;
    if (ts) return ts;
    pthread_once(&tls_once, tls_init);
    ts = calloc(1, sizeof *ts); /* once per thread */
    if (!ts) return NULL;
    ts->tid = (uint32_t)syscall(SYS_gettid);
    pthread_setspecific(tls_key, ts);
    tls_state = ts;
    return ts;
}

/* ---- module address -> interned names ---- */

typedef struct mod_entry {
    PyObject *key; /* NULL = empty, TOMB = deleted */
    PyObject *weakref; /* owned */
    uint32_t name, type;
    uint8_t layer_pending; /* a Linear/convolution whose python.layers row is not written yet */
    uint8_t provisional;   /* named relative to a module first seen outside any other: renamed
                            * if that module turns out to be inside a bigger tree */
    uint8_t tree_root;     /* the root of a named tree with children (a model) */
    uint32_t prefix;       /* tree roots: what its tree's names begin with (0: nothing) */
} mod_entry;

#define TOMB ((PyObject *)1)
static mod_entry *map;
static size_t map_cap, map_used; /* used counts tombstones */

static inline size_t hash_ptr(const void *p)
{
    uintptr_t x = (uintptr_t)p >> 4;
    return (size_t)(x * 0x9E3779B97F4A7C15ull);
}

static inline mod_entry *map_find(PyObject *key)
{
    if (!map) return NULL;
    size_t mask = map_cap - 1, i = hash_ptr(key) & mask;
    for (;;) {
        mod_entry *e = &map[i];
        if (e->key == key) return e;
        if (e->key == NULL) return NULL;
        i = (i + 1) & mask;
    }
}

static int map_grow(void)
{
    size_t ncap = map_cap ? map_cap * 2 : 1024;
    mod_entry *n = calloc(ncap, sizeof *n);
    if (!n) return -1;
    for (size_t j = 0; j < map_cap; j++) {
        mod_entry *e = &map[j];
        if (e->key == NULL || e->key == TOMB) continue;
        size_t i = hash_ptr(e->key) & (ncap - 1);
        while (n[i].key) i = (i + 1) & (ncap - 1);
        n[i] = *e;
    }
    size_t live = 0;
    for (size_t j = 0; j < ncap; j++) live += n[j].key != NULL;
    free(map);
    map = n;
    map_cap = ncap;
    map_used = live;
    return 0;
}

static PyObject *module_died(PyObject *self, PyObject *wr);
static PyMethodDef died_def = {"_module_died", (PyCFunction)module_died, METH_O, NULL};
static PyObject *died_fn;

/* Inserts key with names; takes a weakref so the entry goes when the module dies. */
static mod_entry *map_insert(PyObject *key, uint32_t name, uint32_t type)
{
    if ((map_used + 1) * 2 > map_cap && map_grow()) return NULL;
    PyObject *wr = PyWeakref_NewRef(key, died_fn);
    if (!wr) {
        PyErr_Clear(); /* not weak-referenceable: name it on every call instead of caching */
        return NULL;
    }
    size_t mask = map_cap - 1, i = hash_ptr(key) & mask;
    while (map[i].key && map[i].key != TOMB) i = (i + 1) & mask;
    if (map[i].key == NULL) map_used++;
    map[i].key = key;
    map[i].weakref = wr;
    map[i].name = name;
    map[i].type = type;
    map[i].layer_pending = (uint8_t)pb_collect_is_layer(key);
    map[i].provisional = 0;
    map[i].tree_root = 0;
    map[i].prefix = 0;
    return &map[i];
}

static PyObject *module_died(PyObject *self, PyObject *wr)
{
    for (size_t j = 0; j < map_cap; j++) {
        if (map[j].key != NULL && map[j].key != TOMB && map[j].weakref == wr) {
            map[j].key = TOMB;
            map[j].weakref = NULL;
            Py_DECREF(wr);
            break;
        }
    }
    Py_RETURN_NONE;
}

static void map_clear(void)
{
    for (size_t j = 0; j < map_cap; j++)
        if (map[j].key != NULL && map[j].key != TOMB) Py_XDECREF(map[j].weakref);
    free(map);
    map = NULL;
    map_cap = map_used = 0;
}

static const char *class_name(PyObject *o)
{
    const char *n = Py_TYPE(o)->tp_name;
    const char *dot = strrchr(n, '.');
    return dot ? dot + 1 : n;
}

/* ---- names of models and optimizers in a program with several ---- */

static int ntrees;      /* models named so far (roots with children) */
static int noptimizers; /* optimizers named so far */

/* Whether a Python frame runs torch's or probing's own code (skipped when looking for the
 * user's variable). */
static int frame_is_library(PyObject *pyframe)
{
    PyObject *g = PyObject_GetAttrString(pyframe, "f_globals");
    PyObject *n = g && PyDict_Check(g) ? PyDict_GetItemString(g, "__name__") : NULL; /* borrowed */
    const char *cs = n && PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : NULL;
    int lib = cs && (strncmp(cs, "torch.", 6) == 0 || strncmp(cs, "probing", 7) == 0);
    Py_XDECREF(g);
    PyErr_Clear();
    return lib;
}

static inline PyObject *new_ref(PyObject *o) /* Py_NewRef, which Python 3.9 lacks */
{
    Py_INCREF(o);
    return o;
}

/* Name of obj among the attributes of v (its instance dict): "holder.attr", or just "attr" when
 * holder is `self`. New reference or NULL. */
static PyObject *attr_name(PyObject *holder, PyObject *v, PyObject *obj)
{
    PyObject *d, *k, *av, *found = NULL;
    if (PyModule_Check(v) || PyType_Check(v)) return NULL;
    if (!(d = PyObject_GenericGetDict(v, NULL))) { /* no instance dict */
        PyErr_Clear();
        return NULL;
    }
    Py_ssize_t pos = 0;
    while (PyDict_Check(d) && PyDict_Next(d, &pos, &k, &av)) {
        if (av == obj && PyUnicode_Check(k)) {
            found = PyUnicode_CompareWithASCIIString(holder, "self") == 0 ? new_ref(k)
                                                                           : PyUnicode_FromFormat("%U.%U", holder, k);
            break;
        }
    }
    Py_DECREF(d);
    return found;
}

/* The name a mapping (a frame's locals or globals) gives obj: an attribute of `self` first (a
 * method's `self.netD` is the model's lasting name; a local bound to it may be a loop's alias),
 * then a key whose value is obj, then "key.attr" for another value (a trainer object) whose
 * instance dict holds obj. New reference or NULL. */
static PyObject *name_in(PyObject *mapping, PyObject *obj)
{
    PyObject *items = PyMapping_Items(mapping), *found = NULL;
    if (!items) goto out;
    Py_ssize_t n = PyList_GET_SIZE(items);
    for (int pass = 0; pass < 3 && !found; pass++) {
        for (Py_ssize_t i = 0; i < n && !found; i++) {
            PyObject *kv = PyList_GET_ITEM(items, i);
            if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(kv, 0))) continue;
            PyObject *key = PyTuple_GET_ITEM(kv, 0), *v = PyTuple_GET_ITEM(kv, 1);
            int is_self = PyUnicode_CompareWithASCIIString(key, "self") == 0;
            if (pass == 0 && is_self) found = attr_name(key, v, obj);
            else if (pass == 1 && v == obj && !is_self) found = new_ref(key);
            else if (pass == 2 && !is_self) found = attr_name(key, v, obj);
        }
    }
out:
    Py_XDECREF(items);
    PyErr_Clear();
    return found;
}

/* The variable (or attribute of one) that holds obj in the user's code calling it now: the
 * locals of the innermost frames that are not torch's, then their globals. An interned id, or
 * 0 when none is found. Once per model or optimizer. [GIL held] */
static uint32_t user_name_of(PyObject *obj)
{
    PyObject *pyframe = (PyObject *)PyEval_GetFrame(); /* borrowed */
    uint32_t id = 0;
    Py_XINCREF(pyframe);
    for (int hops = 0; pyframe && pyframe != Py_None && hops < 12 && !id; hops++) {
        if (!frame_is_library(pyframe)) {
            static const char *const where[] = {"f_locals", "f_globals", NULL};
            for (int w = 0; where[w] && !id; w++) {
                PyObject *m = PyObject_GetAttrString(pyframe, where[w]);
                PyObject *name = m ? name_in(m, obj) : NULL;
                Py_ssize_t len = 0;
                const char *cs = name ? PyUnicode_AsUTF8AndSize(name, &len) : NULL;
                if (cs && len > 0) id = pb_intern(cs, (size_t)len);
                Py_XDECREF(name);
                Py_XDECREF(m);
            }
        }
        PyObject *back = PyObject_GetAttrString(pyframe, "f_back");
        Py_DECREF(pyframe);
        pyframe = back;
    }
    Py_XDECREF(pyframe);
    PyErr_Clear();
    return id;
}

/* What the names of a new model's tree begin with: nothing for the program's first model (its
 * names stay as named_modules() gives them), else the variable holding it (`netD`), else its
 * class and ordinal (`Discriminator#2`). */
static uint32_t tree_prefix(PyObject *root)
{
    if (ntrees++ == 0) return 0;
    uint32_t id = user_name_of(root);
    if (id) return id;
    char text[160];
    snprintf(text, sizeof text, "%s#%d", class_name(root), ntrees);
    return pb_intern_cstr(text);
}

/* Names root's whole tree (named_modules(), root under its class name). Modules already named
 * keep their names, except provisional ones found below root: a module first seen at the top
 * (the agent arrived in the middle of a forward, through inject or a late import, and saw the
 * children of a model whose own call had already begun) was named as a root of its own, and
 * its subtree relative to it; when the real root is called, they get their qualified names.
 * Entries made here are provisional when root was itself first seen at the top.
 * A program with several models (a GAN's generator and discriminator) names the second and
 * later ones with a prefix (tree_prefix), so that no two modules share a name; a tree that
 * takes in an earlier model (the real root called after its children were named as roots)
 * takes over that model's prefix. [GIL held] */
static void name_tree(PyObject *root, int provisional)
{
    PyObject *items = NULL, *all = PyObject_CallMethodNoArgs(root, str_named_modules);
    if (!all) goto fail;
    items = PySequence_List(all);
    if (!items) goto fail;
    Py_ssize_t n = PyList_GET_SIZE(items);
    mod_entry *re = map_find(root);
    int known = re && re->tree_root;
    uint32_t prefix = known ? re->prefix : 0;
    if (!known && n > 1) {
        int inherited = 0;
        for (Py_ssize_t i = 1; i < n && !inherited; i++) {
            PyObject *item = PyList_GET_ITEM(items, i);
            mod_entry *e = PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2 ? map_find(PyTuple_GET_ITEM(item, 1)) : NULL;
            if (e && e->tree_root && e->provisional) {
                inherited = 1;
                prefix = e->prefix;
                e->tree_root = 0;
            }
        }
        if (!inherited) prefix = tree_prefix(root);
    }
    const char *pfx = prefix ? pb_intern_get(prefix) : NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) continue;
        PyObject *qname = PyTuple_GET_ITEM(item, 0), *mod = PyTuple_GET_ITEM(item, 1);
        mod_entry *have = map_find(mod);
        Py_ssize_t len = 0;
        const char *s = PyUnicode_Check(qname) ? PyUnicode_AsUTF8AndSize(qname, &len) : NULL;
        if (!s || (have && !(have->provisional && len > 0))) continue;
        uint32_t name;
        if (pfx && len) {
            char buf[512];
            int k = snprintf(buf, sizeof buf, "%s.%s", pfx, s);
            name = k > 0 && (size_t)k < sizeof buf ? pb_intern(buf, (size_t)k) : pb_intern(s, (size_t)len);
        } else if (pfx) {
            name = prefix;
        } else {
            name = len ? pb_intern(s, (size_t)len) : pb_intern_cstr(class_name(mod));
        }
        if (!have) {
            mod_entry *e = map_insert(mod, name, pb_intern_cstr(class_name(mod)));
            if (e) e->provisional = (uint8_t)provisional;
        } else {
            have->name = name;
            have->provisional = (uint8_t)provisional;
            if (mod == primary_root) { /* it was never the model's root */
                primary_root = NULL;
                primary_ran = 0;
            }
        }
    }
    if (n > 1 && (re = map_find(root))) {
        re->tree_root = 1;
        re->prefix = prefix;
    }
fail:
    if (PyErr_Occurred()) PyErr_Clear(); /* a module whose named_modules() fails: fall back below */
    Py_XDECREF(items);
    Py_XDECREF(all);
}

/* Slow path: a module seen for the first time. [GIL held] */
static mod_entry *discover(PyObject *mod, tstate *ts, mod_entry *fallback)
{
    PyObject *root = ts->depth ? ts->stack[0].module : mod;
    mod_entry *re = ts->depth ? map_find(root) : NULL;
    name_tree(root, ts->depth == 0 || !re || re->provisional);
    mod_entry *e = map_find(mod);
    if (e) return e;
    /* Called inside a model but not part of its tree (a module held elsewhere): class name. */
    uint32_t type = pb_intern_cstr(class_name(mod));
    e = map_insert(mod, type, type);
    if (e) return e;
    fallback->name = fallback->type = type;
    fallback->layer_pending = 0;
    return fallback;
}

/* ---- rows ---- */

static inline void push_row(int64_t start_ns, int64_t end_ns, int64_t self_ns, uint32_t row_seq, uint32_t name,
                            uint32_t type, uint16_t depth, uint8_t stage, uint32_t tid)
{
    pb_torch_row r;
    /* A hook that was already running when the agent detached (it ran Python code and so let
     * go of the GIL) ends here after the rings are freed: drop its row. Pushes and the free
     * both hold the GIL, so this check cannot race with the free. */
    if (!atomic_load_explicit(&enabled, memory_order_relaxed) || !pb_table_torch_trace.ring) return;
    r.step = atomic_load_explicit(&step, memory_order_relaxed);
    r.duration_ns = self_ns;
    r.total_ns = end_ns - start_ns;
    r.time_offset_ns = start_ns - step_start_ns;
    r.allocated_mb = pb_memsample_current_mb();
    r.max_allocated_mb = pb_memsample_peak_mb();
    r.seq = row_seq;
    r.module = name;
    r.type = type;
    r.thread = tid;
    r.depth = depth;
    r.rank = rank;
    r.stage = stage;
    pb_ring_push(pb_table_torch_trace.ring, &r);
}

static int pass_active, bwd_paused;
static void pass_abandon(void);

static void end_step(int64_t now)
{
    int64_t done = atomic_load_explicit(&step, memory_order_relaxed), wall = now - step_start_ns;
    pb_collect_step_end(done, wall, detail);
    pb_detail_step_done(&detail_policy, done, wall, detail, detail_measured && !pb_capture_ranges);
    atomic_fetch_add_explicit(&step, 1, memory_order_relaxed);
    step_start_ns = now;
    seq = 0;
    primary_ran = 0;
    pb_memsample_reset_peak();
    /* No backward pass is running at a step boundary (the optimizer steps after backward
     * returned; a recomputing forward inside backward does not end steps once an optimizer was
     * seen), so one still marked active raised or never reached the engine's final callbacks:
     * its spans are dropped. Graphs built and never run backward are let go either way. */
    if (!bwd_paused) pass_abandon();
    if (atomic_load_explicit(&pb_capture_wanted, memory_order_relaxed))
        pb_capture_boundary(atomic_load_explicit(&step, memory_order_relaxed));
    detail = pb_detail_on(&detail_policy, atomic_load_explicit(&step, memory_order_relaxed)) || pb_capture_ranges;
    detail_measured = !pb_capture_ranges;
    show_detail();
}

/* First grad_fn among a hook argument's tensors (a tensor, or a tuple/list/dict of them).
 * Returns a new reference or NULL; with the extension, the node's address (never dereferenced,
 * released with node_drop) and its handle in *handle. [GIL held] */
static PyObject *first_grad_fn(PyObject *o, int depth, uint64_t *handle)
{
    if (PyObject_TypeCheck(o, tensor_type)) {
        if (ag) {
            const void *id;
            *handle = ag->node_of(o, &id);
            return (PyObject *)id;
        }
        PyObject *gf = PyObject_GetAttr(o, str_grad_fn);
        if (!gf) {
            PyErr_Clear();
            return NULL;
        }
        if (gf == Py_None) {
            Py_DECREF(gf);
            return NULL;
        }
        return gf;
    }
    if (depth > 1) return NULL;
    if (PyTuple_Check(o) || PyList_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        PyObject **items = PySequence_Fast_ITEMS(o);
        for (Py_ssize_t i = 0; i < n && i < 16; i++) {
            PyObject *gf = first_grad_fn(items[i], depth + 1, handle);
            if (gf) return gf;
        }
    } else if (PyDict_Check(o)) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        int seen = 0;
        while (PyDict_Next(o, &pos, &k, &v) && seen++ < 16) {
            PyObject *gf = first_grad_fn(v, depth + 1, handle);
            if (gf) return gf;
        }
    }
    return NULL;
}

/* Lets go of what first_grad_fn returned (the extension's handles are held until
 * node_map_clear). [GIL held] */
static inline void node_drop(PyObject **gf)
{
    if (!ag) Py_XDECREF(*gf);
    *gf = NULL;
}

/* ---- backward: probes on autograd nodes, spans per module execution ----
 *
 * A module's backward runs from the moment its output's grad_fn executes (the gradient reached
 * the module: start) to the moment the grad_fn its input had before the forward executes (the
 * module's input gradient is complete: end). One node is usually both: the output node of one
 * module is the input node of the next, and a container shares its nodes with its first and last
 * children. So each node gets at most one probe: a small callable registered once with
 * grad_fn.register_prehook(), holding the spans that end and the spans that start there. The
 * registration is the expensive part (torch builds an OrderedDict and a RemovableHandle in
 * Python); sharing probes makes it once per distinct node rather than twice per module. Spans are
 * plain C structs (refcounted, from a free list), so they cost the garbage collector nothing.
 *
 * Node wrappers seen during the forward are kept in a map (grad_fn object -> probe) until the
 * backward pass ends or the step ends, so the same node is found again and its identity cannot be
 * reused by another node.
 *
 * Self time follows the autograd graph (as torch.profiler ties a backward op to the module whose
 * forward made its node): each probe has an owner, the span of the innermost execution that
 * returned the node as its output (executions return innermost first, so the first to claim a
 * node owns it; one returning its input unchanged claims nothing). At every backward event the
 * time since the previous event goes to the owner of the probe that fired before it: the engine
 * runs one node at a time, and the unprobed nodes that follow (AccumulateGrad of the module's
 * weights) are the same module's. A node no execution returned (a residual add, attention's
 * matmuls written in the attention module itself) goes to the parent of the execution that
 * consumed it, the code that made it; failing that, to the innermost active span. Spans are
 * made at enter, so a span knows its parent's; a span's total runs from its start to the end of
 * the last time given to it or to a span nested in it (backward intervals do not nest: siblings
 * that read one input all end when its gradient is complete, and would otherwise contain each
 * other). Time spent in forward executions inside backward
 * (activation-checkpoint recomputation) goes to those forward rows. When the first probe of a
 * backward pass runs, backward_done is queued with the autograd engine: it closes spans whose
 * end is the end of the pass (modules whose input has no grad_fn), drops spans whose end never
 * came, and adds the pass (first probe to final callback, recomputing forwards left out) to the
 * step's backward time. On summary steps the only probes are those on the root modules'
 * outputs: they time the pass and hold no spans.
 *
 * Two ways to run a probe, the same steps either way (probe_fire):
 * - with the extension probing._autograd (autograd_api.h; `ag`, loaded at install): nodes are
 *   read from tensors without grad_fn objects, a probe is a C struct owned by node_map and named
 *   by a tag in a C++ pre-hook on the node; backward appends (tag, time) without calling the
 *   agent, and backward_done replays the events in order (ext_replay). A forward recomputed
 *   inside backward marks its start and end in the same events, so the replay pauses there.
 * - without it: a probe is a Python object registered with grad_fn.register_prehook(), called by
 *   torch in backward.
 */

typedef struct probe probe;

typedef struct bspan {
    struct bspan *next_free;
    struct bspan *parent; /* owned or NULL: the span of the execution this one was nested in */
    int refs;            /* probes that list or own it, the active list, frames, child spans */
    int64_t start_ns;
    int64_t self_ns;
    int64_t last_ns;     /* end of the last time credited to it or to a span nested in it */
    uint32_t name, type, seq;
    uint16_t depth;
    uint8_t started;     /* in the active list */
    uint8_t engine_end;  /* ends at the end of the backward pass */
    probe *end_probe;    /* borrowed: the probe whose node ends it (identity modules start there too) */
} bspan;

static bspan *free_spans;

static bspan *span_new(void)
{
    bspan *s = free_spans;
    if (s) free_spans = s->next_free;
    else if (!(s = malloc(sizeof *s))) return NULL;
    memset(s, 0, sizeof *s);
    return s;
}

static void span_unref(bspan *s)
{
    while (s && --s->refs <= 0) {
        bspan *parent = s->parent;
        s->next_free = free_spans;
        free_spans = s;
        s = parent;
    }
}

struct probe {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    bspan *owner;           /* owned or NULL: the innermost execution whose forward made the node */
    bspan **ends, **starts; /* owned references */
    int nends, nstarts, cap_ends, cap_starts;
};

static int list_add(bspan ***list, int *n, int *cap, bspan *s)
{
    if (*n == *cap) {
        int ncap = *cap ? *cap * 2 : 2;
        bspan **l = realloc(*list, (size_t)ncap * sizeof *l);
        if (!l) return -1;
        *list = l;
        *cap = ncap;
    }
    (*list)[(*n)++] = s;
    s->refs++;
    return 0;
}

#define MAX_ACTIVE 1024
static bspan *active[MAX_ACTIVE]; /* each holds a ref */
static int nactive;
static int64_t last_event_ns;
static bspan *cur_owner; /* owned or NULL: the span running the node whose probe fired last */
/* pass_active: a probe ran and backward_done is queued; bwd_paused: a forward runs inside it
 * (declared above end_step) */
static int64_t pass_start_ns, pass_paused_ns, pause_start_ns;
static PyObject *backward_done_fn, *backward_synced_fn;
static int64_t backward_done_ns;  /* when backward_done ran; 0 when no backward_synced is due */
static void node_map_clear(void);
static probe *ext_probe(uint64_t tag);

/* Time since the previous event goes to the execution whose node ran in it: the owner of the
 * node whose probe fired last (the engine runs one node at a time per device; nodes without a
 * probe that run after it, such as AccumulateGrad for its weights, go with it). A node made by no
 * module's forward directly (a residual add, attention's matmuls in the attention module's own
 * code) has no owner: its time goes to the innermost active span, deepest and latest started. */
static void sweep(int64_t now)
{
    if (!bwd_paused) {
        bspan *in = cur_owner && cur_owner->started ? cur_owner : NULL;
        if (!in && nactive) {
            in = active[0];
            for (int i = 1; i < nactive; i++) {
                bspan *c = active[i];
                if (c->depth > in->depth || (c->depth == in->depth && c->start_ns >= in->start_ns)) in = c;
            }
        }
        if (in) {
            in->self_ns += now - last_event_ns;
            for (bspan *a = in; a; a = a->parent) a->last_ns = now;
        }
    }
    last_event_ns = now;
}

static void set_owner(bspan *s)
{
    if (s) s->refs++;
    if (cur_owner) span_unref(cur_owner);
    cur_owner = s;
}

/* The first probe of a backward pass ran: queue backward_done with the engine. */
static void pass_begin(int64_t now)
{
    if (!queue_callback) return; /* without it no pass can be closed: spans of input modules stay open */
    PyObject *r = PyObject_CallOneArg(queue_callback, backward_done_fn);
    if (!r) {
        PyErr_Clear();
        return;
    }
    Py_DECREF(r);
    pass_active = 1;
    pass_start_ns = now;
    pass_paused_ns = 0;
}

/* Drops the spans of a pass whose final callback never ran, and the probed nodes. */
static void pass_abandon(void)
{
    if (ag) ag->reset();
    for (int i = 0; i < nactive; i++) {
        active[i]->started = 0;
        span_unref(active[i]);
    }
    nactive = 0;
    pass_active = 0;
    set_owner(NULL);
    node_map_clear();
}

static void span_start(bspan *s, int64_t now)
{
    if (s->started) return;
    if (nactive >= MAX_ACTIVE) return; /* pathological graph: this execution gets no row */
    s->start_ns = now;
    s->last_ns = now;
    s->self_ns = 0;
    s->seq = seq++;
    s->started = 1;
    s->refs++;
    active[nactive++] = s;
}

static void span_end(bspan *s, int64_t now)
{
    if (!s->started) return;
    for (int i = 0; i < nactive; i++) {
        if (active[i] == s) {
            active[i] = active[--nactive];
            break;
        }
    }
    s->started = 0;
    tstate *ts = get_tstate();
    push_row(s->start_ns, s->last_ns, s->self_ns, s->seq, s->name, s->type, s->depth, PB_STAGE_BACKWARD,
             ts ? ts->tid : 0);
    span_unref(s);
}

/* The node executes at `now`: modules that consumed its output are done, modules that produced
 * it begin. [GIL held] */
static void probe_fire(probe *p, int64_t now)
{
    if (!pass_active) pass_begin(now);
    sweep(now);
    /* the node's owner runs from here; a node no module made is its consumer's parent's code */
    bspan *owner = p->owner;
    if (!owner) {
        bspan *deepest = NULL;
        for (int i = 0; i < p->nends; i++)
            if (!deepest || p->ends[i]->depth > deepest->depth) deepest = p->ends[i];
        owner = deepest ? deepest->parent : NULL;
    }
    set_owner(owner);
    for (int i = 0; i < p->nends; i++) span_end(p->ends[i], now);
    for (int i = 0; i < p->nstarts; i++) {
        bspan *s = p->starts[i];
        span_start(s, now);
        if (s->end_probe == p) span_end(s, now); /* output node == input node: nothing in between */
    }
}

/* A Python-level probe is called by torch as the node's pre-hook. [GIL held] */
static PyObject *probe_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    if (atomic_load_explicit(&enabled, memory_order_relaxed)) probe_fire((probe *)self, pb_now_ns());
    Py_RETURN_NONE;
}

/* Drops what a probe holds (not the probe itself). */
static void probe_clear(probe *p)
{
    for (int i = 0; i < p->nends; i++) span_unref(p->ends[i]);
    for (int i = 0; i < p->nstarts; i++) span_unref(p->starts[i]);
    if (p->owner) span_unref(p->owner);
    free(p->ends);
    free(p->starts);
}

static void probe_dealloc(PyObject *self)
{
    probe_clear((probe *)self);
    PyObject_Free(self);
}

static PyTypeObject probe_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "probing._agent.NodeProbe",
    .tp_basicsize = sizeof(probe),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(probe, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = probe_dealloc,
    .tp_doc = "probing: times module backward; registered as a pre-hook on one autograd node",
};

/* Markers the agent adds to the extension's events: a forward inside backward begins / ends. */
#define EXT_PAUSE 1
#define EXT_RESUME 2

/* With the extension, backward ran without calling the agent: its events (node executions and
 * the agent's own markers, in order) are replayed here, after the pass, through the same steps
 * a Python-level probe takes while it runs; the rows come out the same. [GIL held] */
static void ext_replay(void)
{
    size_t n, dropped;
    const pb_autograd_event *ev = ag->events(&n, &dropped);
    for (size_t i = 0; i < n; i++) {
        int64_t t = ev[i].ns;
        if (ev[i].tag & PB_AUTOGRAD_MARK) {
            if ((ev[i].tag & ~PB_AUTOGRAD_MARK) == EXT_PAUSE && pass_active && !bwd_paused) {
                sweep(t);
                bwd_paused = 1;
                pause_start_ns = t;
            } else if ((ev[i].tag & ~PB_AUTOGRAD_MARK) == EXT_RESUME && bwd_paused) {
                bwd_paused = 0;
                pass_paused_ns += t - pause_start_ns;
                last_event_ns = t;
            }
            continue;
        }
        if (!pass_active) { /* the extension queued backward_done at this first event */
            pass_active = 1;
            pass_start_ns = t;
            pass_paused_ns = 0;
            last_event_ns = t;
        }
        probe *p = ext_probe(ev[i].tag);
        if (p) {
            probe_fire(p, t);
        } else { /* a node hooked before the last clear (retain_graph): it times the pass only */
            sweep(t);
            set_owner(NULL);
        }
    }
    if (dropped) pb_log_debug("backward: %zu node events over the extension's limit were not timed", dropped);
    bwd_paused = 0;
    ag->reset();
}

/* Queued with the autograd engine: the backward pass has finished. [GIL held] */
static PyObject *backward_done(PyObject *self, PyObject *unused)
{
    if (ag) ext_replay();
    int64_t now = pb_now_ns();
    sweep(now);
    int n = nactive;
    bspan *left[MAX_ACTIVE];
    memcpy(left, active, (size_t)n * sizeof left[0]);
    nactive = 0;
    for (int i = 0; i < n; i++) {
        bspan *s = left[i];
        s->started = 0;
        if (s->engine_end && atomic_load_explicit(&enabled, memory_order_relaxed)) {
            tstate *ts = get_tstate();
            push_row(s->start_ns, s->last_ns, s->self_ns, s->seq, s->name, s->type, s->depth, PB_STAGE_BACKWARD,
                     ts ? ts->tid : 0);
        }
        span_unref(s);
    }
    set_owner(NULL);
    node_map_clear();
    if (pass_active) {
        int64_t pass_ns = now - pass_start_ns - pass_paused_ns;
        pb_collect_stage_time(PB_STAGE_BACKWARD, pass_ns > 0 ? pass_ns : 0);
        pass_active = 0;
    }
    if (atomic_load_explicit(&enabled, memory_order_relaxed)) pb_collect_phase(PB_PHASE_AFTER_BACKWARD);
    /* Callbacks queued while the engine runs its final callbacks run after the ones already
     * queued: DistributedDataParallel's, which waits for the gradient all-reduces. The time until
     * this one runs is python.steps.grad_sync. */
    backward_done_ns = 0;
    if (queue_callback && backward_synced_fn) {
        PyObject *r = PyObject_CallOneArg(queue_callback, backward_synced_fn);
        if (r) {
            Py_DECREF(r);
            backward_done_ns = pb_now_ns();
        } else {
            PyErr_Clear();
        }
    }
    Py_RETURN_NONE;
}
static PyMethodDef backward_done_def = {"_backward_done", (PyCFunction)backward_done, METH_NOARGS, NULL};

/* Queued by backward_done: the engine's final callbacks (DDP's gradient sync) are over. */
static PyObject *backward_synced(PyObject *self, PyObject *unused)
{
    if (backward_done_ns && atomic_load_explicit(&enabled, memory_order_relaxed))
        pb_collect_grad_sync(pb_now_ns() - backward_done_ns);
    backward_done_ns = 0;
    Py_RETURN_NONE;
}
static PyMethodDef backward_synced_def = {"_backward_synced", (PyCFunction)backward_synced, METH_NOARGS, NULL};

/* grad_fn object -> its probe, for the nodes seen since the last backward pass or step.
 * With the extension the key is the node's address (its handle holds the node) and the map owns
 * the probes, plain C structs that are never Python objects; hooks name them by tag, their
 * index in ext_probes and the generation, which changes at every clear, so that a hook that
 * runs after its probe is gone finds nothing. */
typedef struct node_entry {
    PyObject *node; /* owned (with the extension: the address) */
    probe *probe;   /* borrowed: owned by the node's hook dict, alive while node is (with the
                     * extension: owned) */
} node_entry;
static node_entry *node_map;
static size_t node_cap, node_used;
static probe **ext_probes; /* with the extension: the probes by tag index (borrowed from the map) */
static uint32_t ext_nprobes, ext_cap, ext_generation = 1;

static void node_map_clear(void)
{
    if (ag) {
        ext_generation++;
        ext_nprobes = 0;
    }
    if (!node_used) {
        if (ag) ag->release_all(); /* handles taken for nodes that got no probe */
        return;
    }
    /* DECREFs can free graphs, whose probes' deallocation touches nothing here. */
    node_entry *m = node_map;
    size_t cap = node_cap;
    node_map = NULL;
    node_cap = node_used = 0;
    for (size_t i = 0; i < cap; i++) {
        if (!m[i].node) continue;
        if (ag) {
            probe_clear(m[i].probe);
            free(m[i].probe);
        } else {
            Py_DECREF(m[i].node);
        }
    }
    free(m);
    if (ag) ag->release_all();
}

/* The probe a hook's tag names, or NULL when it is from before the last clear. */
static probe *ext_probe(uint64_t tag)
{
    uint32_t i = (uint32_t)tag;
    return (uint32_t)(tag >> 32) == ext_generation && i < ext_nprobes ? ext_probes[i] : NULL;
}

/* A new probe on node `handle` (the extension's hook); NULL on failure. [GIL held] */
static probe *ext_probe_new(uint64_t handle)
{
    if (ext_nprobes == ext_cap) {
        uint32_t ncap = ext_cap ? ext_cap * 2 : 256;
        probe **n = realloc(ext_probes, (size_t)ncap * sizeof *n);
        if (!n) return NULL;
        ext_probes = n;
        ext_cap = ncap;
    }
    probe *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    if (ag->hook(handle, ((uint64_t)ext_generation << 32) | ext_nprobes)) {
        free(p);
        return NULL;
    }
    ext_probes[ext_nprobes++] = p;
    return p;
}

static int node_map_grow(void)
{
    size_t ncap = node_cap ? node_cap * 2 : 256;
    node_entry *n = calloc(ncap, sizeof *n);
    if (!n) return -1;
    for (size_t j = 0; j < node_cap; j++) {
        if (!node_map[j].node) continue;
        size_t i = hash_ptr(node_map[j].node) & (ncap - 1);
        while (n[i].node) i = (i + 1) & (ncap - 1);
        n[i] = node_map[j];
    }
    free(node_map);
    node_map = n;
    node_cap = ncap;
    return 0;
}

/* grad_fn.register_prehook() is implemented in C++ (registerFunctionPreHook), which asks the
 * Python staticmethod torch.autograd.function.Function._register_hook(hooks_dict, hook) for the
 * dict to keep on the node and the handle to return: for a node without Python hooks yet it
 * builds an OrderedDict and a torch.utils.hooks.RemovableHandle (weak references, an id
 * counter) in Python, about 6 us, which made registration the largest part of recording
 * backward (one new node per module per step). Probing's own probes take a C fast path: a
 * fresh OrderedDict holding the probe (keyed by itself, so no RemovableHandle id can collide)
 * and no handle (probing never removes a probe: the node dies with its graph). Every other
 * call, and a probe on a node that already has Python hooks, goes to torch's own function,
 * unchanged. The wrapper is a staticmethod, as the original; detach deletes it again. */
static PyObject *function_cls, *wrap_register_hook, *ordered_dict;

static PyObject *fast_register_hook(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (kwnames || PyVectorcall_NARGS(nargsf) != 2 || args[0] != Py_None || !Py_IS_TYPE(args[1], &probe_type) ||
        !ordered_dict)
        return PyObject_Vectorcall(orig, args, nargsf, kwnames);
    PyObject *d = PyObject_CallNoArgs(ordered_dict);
    if (!d) return NULL;
    PyObject *res = PyDict_SetItem(d, args[1], args[1]) ? NULL : PyTuple_Pack(2, d, Py_None);
    Py_DECREF(d);
    return res;
}

static void install_fast_register_hook(void)
{
    PyObject *fmod = PyImport_ImportModule("torch.autograd.function");
    PyObject *coll = fmod ? PyImport_ImportModule("collections") : NULL;
    Py_XSETREF(function_cls, fmod ? PyObject_GetAttrString(fmod, "Function") : NULL);
    Py_XSETREF(ordered_dict, coll ? PyObject_GetAttrString(coll, "OrderedDict") : NULL);
    Py_XDECREF(fmod);
    Py_XDECREF(coll);
    if (!function_cls || !ordered_dict || pb_wrap_attr(function_cls, "_register_hook", fast_register_hook, &wrap_register_hook)) {
        PyErr_Clear();
        pb_log_debug("grad_fn hooks are registered through torch's own Function._register_hook");
        return;
    }
    PyObject *sm = PyStaticMethod_New(wrap_register_hook);
    if (!sm || PyObject_SetAttrString(function_cls, "_register_hook", sm)) {
        PyErr_Clear();
        pb_unwrap_attr(function_cls, "_register_hook", &wrap_register_hook);
    }
    Py_XDECREF(sm);
}

static void remove_fast_register_hook(void)
{
    if (function_cls && wrap_register_hook) pb_unwrap_attr(function_cls, "_register_hook", &wrap_register_hook);
    Py_CLEAR(function_cls);
    Py_CLEAR(ordered_dict);
}

/* The probe on node gf, registering one if there is none yet. Returns NULL on failure. */
static probe *probe_for(PyObject *gf, uint64_t handle)
{
    if ((node_used + 1) * 2 > node_cap && node_map_grow()) return NULL;
    size_t mask = node_cap - 1, i = hash_ptr(gf) & mask;
    while (node_map[i].node) {
        if (node_map[i].node == gf) return node_map[i].probe;
        i = (i + 1) & mask;
    }
    if (ag) {
        probe *p = ext_probe_new(handle);
        if (!p) return NULL;
        node_map[i].node = gf;
        node_map[i].probe = p;
        node_used++;
        return p;
    }
    probe *p = PyObject_New(probe, &probe_type);
    if (!p) return NULL;
    p->vectorcall = probe_vectorcall;
    p->owner = NULL;
    p->ends = p->starts = NULL;
    p->nends = p->nstarts = p->cap_ends = p->cap_starts = 0;
    PyObject *h = PyObject_CallMethodOneArg(gf, str_register_prehook, (PyObject *)p);
    if (!h) {
        Py_DECREF(p);
        return NULL;
    }
    Py_DECREF(h);
    Py_DECREF(p); /* the node's hook dict holds it now */
    Py_INCREF(gf);
    node_map[i].node = gf;
    node_map[i].probe = p;
    node_used++;
    return p;
}

/* The frame's execution made a graph: its span starts at out_gf and ends at the node its input
 * had (or at the end of the pass). The first execution to claim out_gf, the innermost one that
 * made it (nested executions return first), owns the node's time. */
static void register_backward(frame *f, PyObject *out_gf, uint64_t out_handle, uint16_t depth)
{
    bspan *s = f->span;
    if (!s) {
        if (!(s = span_new())) return;
        s->refs = 1; /* the frame's */
        f->span = s;
    }
    s->name = f->name;
    s->type = f->type;
    s->depth = depth;
    s->engine_end = f->in_grad_fn == NULL;
    probe *start = probe_for(out_gf, out_handle);
    probe *end = f->in_grad_fn ? probe_for(f->in_grad_fn, f->in_handle) : NULL;
    if (!start || (f->in_grad_fn && !end)) {
        PyErr_Clear();
        return;
    }
    s->end_probe = end;
    if (end) list_add(&end->ends, &end->nends, &end->cap_ends, s);
    list_add(&start->starts, &start->nstarts, &start->cap_starts, s);
    if (!start->owner && out_gf != f->in_grad_fn) { /* a module returning its input made no node */
        start->owner = s;
        s->refs++;
    }
}

/* Drops a frame's span reference (its probes keep the span while the graph lives). */
static inline void frame_drop_span(frame *f)
{
    if (f->span) span_unref(f->span);
    f->span = NULL;
}

/* ---- the hooks ---- */

/* Whether autograd records right now (no backward to time under no_grad/inference_mode): one
 * C call, cheaper than looking for grad_fn on every input and output. */
static inline int grad_enabled(void)
{
    if (ag) return ag->grad_enabled();
    if (!is_grad_enabled) return 1;
    PyObject *r = PyObject_CallNoArgs(is_grad_enabled);
    if (!r) {
        PyErr_Clear();
        return 1;
    }
    int on = r == Py_True;
    Py_DECREF(r);
    return on;
}

/* A forward of the model (primary_root) begins in a training job (an optimizer step was seen):
 * does an evaluation stretch begin or end here?
 * Training steps end at optimizer.step(), however many forwards they run (gradient
 * accumulation, a target computed under no_grad); an evaluation loop after training has no
 * optimizer step, and one step would take all of its forwards. So: a forward under no_grad (or
 * inference_mode), after the model already ran in this step, when more no_grad forwards have run
 * since the last optimizer step than any optimizer step had (measured over the optimizer steps
 * after the first, whose stretch began with the agent in forward-only mode) and more than
 * PB_EVAL_STRETCH_MIN, starts an evaluation stretch (a shorter evaluation pass inside the
 * training loop stays in its training step, so step numbers keep counting iterations and the
 * report sees that step as a periodic slow step): steps end at each forward again, as before the first optimizer step (the
 * caller ends this one). The next forward with autograd on, or an optimizer step, ends the
 * stretch. One is_grad_enabled() call per forward of the model. [GIL held] */
#define PB_EVAL_STRETCH_MIN 512 /* no_grad forwards: a shorter pass stays in its training step */
static void evaluation_stretch(void)
{
    int grad = grad_enabled();
    if (evaluating) {
        if (!grad) return;
        evaluating = 0; /* training again: this forward opens a training step */
        if (primary_ran) end_step(pb_now_ns());
        training_latched = 1;
        return;
    }
    if (grad) return;
    int64_t threshold = nograd_per_optimizer > PB_EVAL_STRETCH_MIN ? nograd_per_optimizer
                                                                    : PB_EVAL_STRETCH_MIN;
    if (nograd_forwards++ > threshold && nograd_learned && primary_ran) {
        training_latched = 0;
        evaluating = 1;
        nograd_forwards = 0;
    }
}

/* An optimizer step (or a step the GradScaler skipped) ends the step. [GIL held] */
static void optimizer_stepped(void)
{
    if (training_latched) { /* no_grad forwards were counted since the last optimizer step */
        if (nograd_forwards > nograd_per_optimizer) nograd_per_optimizer = nograd_forwards;
        nograd_learned = 1;
    }
    training_latched = 1;
    evaluating = 0;
    nograd_forwards = 0;
    end_step(pb_now_ns());
}

/* A module execution begins. inputs[0..n) are its arguments (positional, then keyword values).
 * [GIL held] */
static void enter(PyObject *mod, PyObject *const *inputs, Py_ssize_t n)
{
    tstate *ts = get_tstate();
    if (!ts) return;
    if (ts->depth >= MAX_DEPTH) {
        ts->overflow++;
        return;
    }
    if (ts->depth == 0) {
        if (pb_capture_ranges) pb_capture_root_call();
        if (pass_active) { /* a forward inside backward (checkpoint recompute): its time is forward's */
            int64_t now = pb_now_ns();
            sweep(now);
            bwd_paused = 1;
            pause_start_ns = now;
        } else if (ag && ag->pass_running()) { /* the same, replayed by ext_replay */
            ag->mark(EXT_PAUSE, pb_now_ns());
            bwd_paused = 1;
        }
        if (!primary_root) primary_root = mod;
        else if (mod == primary_root && (training_latched || evaluating)) evaluation_stretch();
        if (!training_latched && mod == primary_root && primary_ran) end_step(pb_now_ns());
        if (mod == primary_root) pb_collect_forward_begin();
    }
    frame *f = &ts->stack[ts->depth];
    f->module = mod;
    f->span = NULL;
    f->in_grad_fn = NULL;
    f->in_handle = 0;
    f->range = NULL;
    f->layer_capture = 0;
    f->detail = (uint8_t)(ts->depth ? ts->stack[ts->depth - 1].detail : detail);
    ts->depth++;
    if (!f->detail) { /* summary: only the root's time is needed */
        if (ts->depth == 1) f->start_ns = pb_now_ns();
        return;
    }
    mod_entry fallback, *e = map_find(mod);
    if (!e) e = discover(mod, ts, &fallback);
    f->name = e->name;
    f->type = e->type;
    f->seq = seq++;
    f->child_ns = 0;
    f->layer_capture = e->layer_pending;
    e->layer_pending = 0;
    if (record_backward && grad_enabled()) {
        for (Py_ssize_t i = 0; i < n && i < 16 && !f->in_grad_fn; i++) f->in_grad_fn = first_grad_fn(inputs[i], 1, &f->in_handle);
        if ((f->span = span_new())) {
            frame *up = ts->depth > 1 ? &ts->stack[ts->depth - 2] : NULL;
            f->span->refs = 1; /* the frame's */
            f->span->parent = up ? up->span : NULL;
            if (f->span->parent) f->span->parent->refs++;
        }
    }
    f->range = pb_capture_ranges ? pb_capture_range_enter(f->name) : NULL;
    f->start_ns = pb_now_ns();
}

/* Ends a frame's capture range, if it has one. [GIL held] */
static inline void end_capture_range(frame *f)
{
    if (f->range) {
        PyObject *handle = f->range;
        f->range = NULL;
        pb_capture_range_exit(handle);
    }
}

/* A root module call of a summary step returned `output`: a probe on its grad_fn times the
 * backward pass that will run through it. [GIL held] */
static void probe_root_output(PyObject *output)
{
    if (!record_backward || output == Py_None || !grad_enabled()) return;
    uint64_t handle = 0;
    PyObject *gf = first_grad_fn(output, 0, &handle);
    if (!gf) return;
    if (!probe_for(gf, handle)) PyErr_Clear();
    node_drop(&gf);
}

/* A module execution ended with `output`, or with an exception (output NULL: no row). The
 * clock is read here, first thing once the frame is found, and only for the frames whose time is
 * kept (detail frames and root calls): a summary step's nested calls read no clock. [GIL held] */
static void leave(PyObject *mod, PyObject *output)
{
    tstate *ts = get_tstate();
    if (!ts) return;
    if (ts->overflow) {
        ts->overflow--;
        return;
    }
    /* Normally the top frame; deeper only if an execution began without ending (hooks installed
     * in the middle of a forward, an exception that skipped a post-hook). */
    int d = ts->depth - 1;
    while (d >= 0 && ts->stack[d].module != mod) d--;
    if (d < 0) return;
    while (ts->depth - 1 > d) {
        frame *skipped = &ts->stack[--ts->depth];
        end_capture_range(skipped);
        node_drop(&skipped->in_grad_fn);
        frame_drop_span(skipped);
    }
    frame *f = &ts->stack[--ts->depth];
    uint16_t depth = (uint16_t)ts->depth;
    if (!f->detail && depth > 0) return; /* a summary step's nested call: nothing to record */
    int64_t now = pb_now_ns(), total = now - f->start_ns;
    if (f->detail) {
        end_capture_range(f);
        if (output) {
            push_row(f->start_ns, now, total - f->child_ns, f->seq, f->name, f->type, depth, PB_STAGE_FORWARD, ts->tid);
            if (record_backward && output != Py_None && (f->in_grad_fn || grad_enabled())) {
                uint64_t out_handle = 0;
                PyObject *out_gf = first_grad_fn(output, 0, &out_handle);
                if (out_gf) {
                    register_backward(f, out_gf, out_handle, depth);
                    node_drop(&out_gf);
                }
            }
        }
        if (depth > 0) ts->stack[depth - 1].child_ns += total;
        node_drop(&f->in_grad_fn);
        frame_drop_span(f);
        if (f->layer_capture) { /* last use of f: reading the layer may run Python that enters modules */
            uint32_t name = f->name, type = f->type;
            f->layer_capture = 0;
            if (output) {
                pb_collect_layer(mod, name, type, output);
            } else { /* raised: try again at its next execution */
                mod_entry *e = map_find(mod);
                if (e) e->layer_pending = 1;
            }
        }
    } else if (depth == 0 && output) {
        probe_root_output(output);
    }
    if (depth > 0) return;
    /* a root call: its whole time is forward time (self times of its tree sum to it) */
    if (output) pb_collect_stage_time(PB_STAGE_FORWARD, total);
    if (bwd_paused && ag && !pass_active) {
        ag->mark(EXT_RESUME, pb_now_ns());
        bwd_paused = 0;
    } else if (bwd_paused) {
        int64_t t = pb_now_ns();
        bwd_paused = 0;
        pass_paused_ns += t - pause_start_ns;
        last_event_ns = t;
    }
    if (output) pb_collect_phase(mod == primary_root ? PB_PHASE_AFTER_FORWARD : PB_PHASE_AFTER_LOSS);
    if (mod == primary_root) primary_ran = 1;
}

/* forward pre-hook(module, args) — PROBING_HOOK_MODE=hooks */
static PyObject *fwd_pre(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (atomic_load_explicit(&enabled, memory_order_relaxed) && nargs >= 1) enter(args[0], args + 1, nargs - 1);
    Py_RETURN_NONE;
}

/* forward hook(module, args, output), registered with always_call=True */
static PyObject *fwd_post(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (atomic_load_explicit(&enabled, memory_order_relaxed) && nargs >= 1)
        leave(args[0], nargs >= 3 ? args[2] : Py_None);
    Py_RETURN_NONE;
}

/* ---- Wrapper: torch.nn.Module.__call__ replaced by a C wrapper (PROBING_HOOK_MODE=call) ----
 *
 * The same type wraps other torch functions for the collectors (pb_wrap_attr, collect.c): then
 * its vectorcall is wrap_vectorcall, which hands each call to a C function with the original.
 *
 * With any global module hook registered, torch leaves its fast call path for every module and
 * runs several microseconds of Python per call (closures, hook dict iteration) — more than a
 * small module's work. Wrapping Module.__call__ instead keeps torch on its fast path: the wrapper
 * records, then calls the original __call__ with the very same arguments (vectorcall, no
 * repacking), and records again. User hooks, compiled modules and everything else run inside the
 * original as before. The wrapper is a method descriptor (unbound calls, no bound-method object
 * per call); attribute access yields a real bound method whose __func__ is the wrapper, which is
 * what torch.compile checks to recognise an unpatched Module.__call__ (probing points dynamo's
 * reference at the wrapper, so compiled regions still inline forward directly).
 */

typedef struct modcall {
    PyObject_HEAD
    vectorcallfunc vectorcall; /* modcall_vectorcall, or wrap_vectorcall for pb_wrap_attr */
    PyObject *orig; /* the callable it wraps (owned) */
    PyObject *dict; /* __wrapped__, __name__, ... for inspect */
    pb_wrap_fn fn;  /* pb_wrap_attr wrappers only */
    int inherited;  /* the owner (a class) had no attribute of its own: unwrapping deletes ours */
} modcall;

/* Generic wrapper (pb_wrap_attr): hands the call to fn with the original. */
static PyObject *wrap_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    modcall *mc = (modcall *)self;
    if (!atomic_load_explicit(&enabled, memory_order_relaxed)) return PyObject_Vectorcall(mc->orig, args, nargsf, kwnames);
    return mc->fn(mc->orig, args, nargsf, kwnames);
}

static PyObject *modcall_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    modcall *mc = (modcall *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || !atomic_load_explicit(&enabled, memory_order_relaxed))
        return PyObject_Vectorcall(mc->orig, args, nargsf, kwnames);
    PyObject *mod = args[0];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    enter(mod, args + 1, nargs - 1 + nkw);
    PyObject *res = PyObject_Vectorcall(mc->orig, args, nargsf, kwnames);
    if (res) {
        leave(mod, res);
    } else {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb); /* our bookkeeping must not see or disturb the user's exception */
        leave(mod, NULL);
        PyErr_Restore(et, ev, tb);
    }
    return res;
}

static PyObject *modcall_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static void modcall_dealloc(PyObject *self)
{
    modcall *mc = (modcall *)self;
    Py_XDECREF(mc->orig);
    Py_XDECREF(mc->dict);
    PyObject_Free(self);
}

static PyTypeObject modcall_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "probing._agent.Wrapper",
    .tp_basicsize = sizeof(modcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(modcall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = modcall_get,
    .tp_dealloc = modcall_dealloc,
    .tp_dictoffset = offsetof(modcall, dict),
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_doc = "probing: a torch function with recording around the original (see __wrapped__)",
};

static modcall *installed_call;

/* A new wrapper of orig (borrowed) with its inspect attributes, or NULL with an exception. */
static modcall *wrapper_new(PyObject *orig, vectorcallfunc call, pb_wrap_fn fn)
{
    modcall *mc = PyObject_New(modcall, &modcall_type);
    if (!mc) return NULL;
    mc->vectorcall = call;
    mc->fn = fn;
    mc->inherited = 0;
    Py_INCREF(orig);
    mc->orig = orig;
    mc->dict = PyDict_New();
    if (!mc->dict || PyDict_SetItemString(mc->dict, "__wrapped__", orig)) goto fail;
    static const char *const copied[] = {"__name__", "__qualname__", "__doc__", "__module__", NULL};
    for (int i = 0; copied[i]; i++) {
        PyObject *v = PyObject_GetAttrString(orig, copied[i]);
        if (v) {
            int rc = PyDict_SetItemString(mc->dict, copied[i], v);
            Py_DECREF(v);
            if (rc) goto fail;
        }
        PyErr_Clear();
    }
    return mc;
fail:
    Py_DECREF(mc);
    return NULL;
}

int pb_wrap_attr(PyObject *owner, const char *attr, pb_wrap_fn fn, PyObject **wrapper)
{
    int rc = -1;
    modcall *mc = NULL;
    PyObject *orig = PyObject_GetAttrString(owner, attr);
    if (!orig) goto out;
    if (Py_TYPE(orig) == &modcall_type) { /* already ours */
        rc = 0;
        goto out;
    }
    if (!(mc = wrapper_new(orig, wrap_vectorcall, fn))) goto out;
    if (PyType_Check(owner)) {
        PyObject *own = PyDict_GetItemString(((PyTypeObject *)owner)->tp_dict, attr); /* borrowed */
        mc->inherited = own == NULL;
    }
    if (PyObject_SetAttrString(owner, attr, (PyObject *)mc)) goto out;
    Py_XSETREF(*wrapper, (PyObject *)mc);
    mc = NULL;
    rc = 0;
out:
    Py_XDECREF(mc);
    Py_XDECREF(orig);
    return rc;
}

void pb_unwrap_attr(PyObject *owner, const char *attr, PyObject **wrapper)
{
    if (!*wrapper) return;
    PyObject *cur = PyObject_GetAttrString(owner, attr);
    if (cur == *wrapper) {
        if (((modcall *)*wrapper)->inherited) PyObject_DelAttrString(owner, attr);
        else PyObject_SetAttrString(owner, attr, ((modcall *)*wrapper)->orig);
    }
    /* else wrapped again by someone after us: theirs stays; ours passes calls through */
    PyErr_Clear();
    Py_XDECREF(cur);
    Py_CLEAR(*wrapper);
}

/* Points dynamo's notion of the unpatched Module.__call__ from `from` to `to`, in the modules
 * that hold it (already imported ones; later imports read the patched attribute themselves). */
static void retarget_dynamo(PyObject *from, PyObject *to)
{
    static const char *const mods[] = {"torch._dynamo.utils", "torch._dynamo.variables.nn_module",
                                       "torch._dynamo.variables.functions", "torch._dynamo.trace_rules", NULL};
    PyObject *sysmods = PyImport_GetModuleDict(); /* borrowed */
    for (int i = 0; mods[i]; i++) {
        PyObject *m = PyDict_GetItemString(sysmods, mods[i]); /* borrowed */
        if (!m) continue;
        PyObject *cur = PyObject_GetAttrString(m, "unpatched_nn_module_call");
        if (cur == from) PyObject_SetAttrString(m, "unpatched_nn_module_call", to);
        Py_XDECREF(cur);
        PyErr_Clear();
    }
}

static int install_call_wrapper(void)
{
    int rc = -1;
    PyObject *nn = NULL, *Module = NULL, *orig = NULL, *name = NULL;
    modcall *mc = NULL;
    nn = PyImport_ImportModule("torch.nn");
    if (!nn) goto out;
    Module = PyObject_GetAttrString(nn, "Module");
    if (!Module) goto out;
    orig = PyObject_GetAttrString(Module, "__call__");
    if (!orig) goto out;
    if (Py_TYPE(orig) == &modcall_type) { /* already wrapped (a second agent start) */
        rc = 0;
        goto out;
    }
    if (!(mc = wrapper_new(orig, modcall_vectorcall, NULL))) goto out;
    name = PyUnicode_FromString("__call__");
    if (!name || PyDict_SetItemString(mc->dict, "__name__", name)) goto out;
    if (PyObject_SetAttrString(Module, "__call__", (PyObject *)mc)) goto out;
    retarget_dynamo(orig, (PyObject *)mc);
    installed_call = mc;
    mc = NULL;
    rc = 0;
out:
    Py_XDECREF(mc);
    Py_XDECREF(name);
    Py_XDECREF(orig);
    Py_XDECREF(Module);
    Py_XDECREF(nn);
    return rc;
}

static void remove_call_wrapper(void)
{
    if (!installed_call) return;
    PyObject *nn = PyImport_ImportModule("torch.nn");
    PyObject *Module = nn ? PyObject_GetAttrString(nn, "Module") : NULL;
    PyObject *cur = Module ? PyObject_GetAttrString(Module, "__call__") : NULL;
    if (cur == (PyObject *)installed_call) PyObject_SetAttrString(Module, "__call__", installed_call->orig);
    /* else someone wrapped it after us: leave theirs in place; ours passes calls straight through
     * once disabled */
    retarget_dynamo((PyObject *)installed_call, installed_call->orig);
    PyErr_Clear();
    Py_XDECREF(cur);
    Py_XDECREF(Module);
    Py_XDECREF(nn);
    if (cur == (PyObject *)installed_call) Py_CLEAR(installed_call);
}

/* An optimizer's name in step rows: its class for the program's first (`Adam`), for later ones
 * the variable holding it (`optimizerD`), else class and ordinal (`Adam#2`). Found once per
 * optimizer and kept in the module map (optimizers are weakly referenceable too). [GIL held] */
static uint32_t optimizer_name(PyObject *opt, uint32_t type)
{
    mod_entry *e = map_find(opt);
    if (e) return e->name;
    uint32_t name = type;
    if (noptimizers++ > 0 && !(name = user_name_of(opt))) {
        char text[160];
        snprintf(text, sizeof text, "%s#%d", class_name(opt), noptimizers);
        name = pb_intern_cstr(text);
    }
    if ((e = map_insert(opt, name, type))) e->layer_pending = 0;
    return name;
}

/* optimizer step pre-hook(optimizer, args, kwargs) */
static PyObject *opt_pre(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!atomic_load_explicit(&enabled, memory_order_relaxed)) Py_RETURN_NONE;
    opt_seq = seq++;
    opt_start_ns = pb_now_ns();
    Py_RETURN_NONE;
}

/* optimizer step post-hook(optimizer, args, kwargs) */
static PyObject *opt_post(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t now = pb_now_ns();
    if (!atomic_load_explicit(&enabled, memory_order_relaxed) || nargs < 1) Py_RETURN_NONE;
    if (opt_start_ns) {
        pb_collect_stage_time(PB_STAGE_STEP, now - opt_start_ns);
        if (detail) {
            tstate *ts = get_tstate();
            uint32_t type = pb_intern_cstr(class_name(args[0])), name = optimizer_name(args[0], type);
            push_row(opt_start_ns, now, now - opt_start_ns, opt_seq, name, type, 0, PB_STAGE_STEP, ts ? ts->tid : 0);
        }
    }
    opt_start_ns = 0;
    pb_collect_optimizer_done(args[0]);
    optimizer_stepped();
    Py_RETURN_NONE;
}

void pb_torch_end_step(void) { optimizer_stepped(); }

int64_t pb_torch_step_start_ns(void) { return step_start_ns; }

uint16_t pb_torch_rank(void) { return rank; }

static PyMethodDef hook_defs[] = {
    {"_forward_pre_hook", (PyCFunction)(void (*)(void))fwd_pre, METH_FASTCALL, NULL},
    {"_forward_hook", (PyCFunction)(void (*)(void))fwd_post, METH_FASTCALL, NULL},
    {"_optimizer_pre_hook", (PyCFunction)(void (*)(void))opt_pre, METH_FASTCALL, NULL},
    {"_optimizer_post_hook", (PyCFunction)(void (*)(void))opt_post, METH_FASTCALL, NULL},
};

/* ---- install / remove ---- */

static PyObject *call_register(const char *modname, const char *fn, PyObject *hook, int always_call)
{
    PyObject *m = NULL, *reg = NULL, *args = NULL, *kw = NULL, *h = NULL;
    m = PyImport_ImportModule(modname);
    if (!m) goto out;
    reg = PyObject_GetAttrString(m, fn);
    if (!reg) goto out;
    args = PyTuple_Pack(1, hook);
    if (!args) goto out;
    if (always_call) {
        kw = Py_BuildValue("{s:O}", "always_call", Py_True);
        if (!kw) goto out;
    }
    h = PyObject_Call(reg, args, kw);
out:
    Py_XDECREF(m);
    Py_XDECREF(reg);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return h;
}

static PyObject *hook_fns[4]; /* created once, kept for the life of the process */

/* A C function object for def, named probing._agent.<name>: a builtin made without a module has
 * __module__ None, and torch.compile's config (dynamo's ignore_logger_methods, which holds the
 * hook functions) is serialised by Inductor's codegen_config(), whose get_module_name() adds
 * strings to __module__: every real compile failed with a TypeError. [GIL held] */
static PyObject *agent_function(PyMethodDef *def)
{
    static PyObject *modname;
    if (!modname && !(modname = PyUnicode_InternFromString("probing._agent"))) return NULL;
    return PyCFunction_NewEx(def, NULL, modname);
}

int pb_torch_hooks_ready_types(void)
{
    if (PyType_Ready(&probe_type) || PyType_Ready(&modcall_type)) return -1;
    if (!backward_done_fn && !(backward_done_fn = agent_function(&backward_done_def))) return -1;
    if (!backward_synced_fn && !(backward_synced_fn = agent_function(&backward_synced_def))) return -1;
    for (int i = 0; i < 4; i++) {
        if (!hook_fns[i] && !(hook_fns[i] = agent_function(&hook_defs[i]))) return -1;
    }
    return 0;
}

PyObject *pb_torch_hook_functions(void)
{
    return PyTuple_Pack(4, hook_fns[0], hook_fns[1], hook_fns[2], hook_fns[3]);
}

/* Loads probing._autograd if wanted and usable; ag stays NULL otherwise, and ag_status says
 * why. [GIL held] */
static void ext_load(void)
{
    ag = NULL;
    if (!record_backward) {
        snprintf(ag_status, sizeof ag_status, "off (PROBING_BACKWARD=0)");
        return;
    }
    if (!pb_config_int("PROBING_AUTOGRAD_EXT", 1)) {
        snprintf(ag_status, sizeof ag_status, "python (PROBING_AUTOGRAD_EXT=0)");
        return;
    }
    PyObject *mod = PyImport_ImportModule("probing._autograd"); /* PyCapsule_Import does not */
    const pb_autograd_api *a = mod ? PyCapsule_Import(PB_AUTOGRAD_CAPSULE, 0) : NULL;
    Py_XDECREF(mod);
    if (!a || a->version != PB_AUTOGRAD_API_VERSION || !backward_done_fn) {
        const char *why = "its interface version differs from the agent's";
        PyObject *et, *ev, *tb, *msg = NULL;
        PyErr_Fetch(&et, &ev, &tb);
        if (ev && (msg = PyObject_Str(ev)) && PyUnicode_AsUTF8(msg)) why = PyUnicode_AsUTF8(msg);
        snprintf(ag_status, sizeof ag_status, "python (probing._autograd not usable: %s)", why);
        Py_XDECREF(msg);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        PyErr_Clear();
        pb_log_debug("backward is timed by Python-level probes: %s", ag_status);
        return;
    }
    a->set_pass_end(backward_done_fn);
    a->reset();
    ag = a;
    snprintf(ag_status, sizeof ag_status, "extension (probing._autograd, torch %s)", a->torch_version);
}

const char *pb_torch_backward_probes(void) { return ag_status; }

int pb_torch_hooks_install(void)
{
    if (installed) return 0;
    PyObject *torch = NULL, *tc = NULL, *var = NULL, *engine = NULL, *ver = NULL;
    PyObject **fns = hook_fns;
    int rc = -1;

    if (!str_grad_fn) {
        str_grad_fn = PyUnicode_InternFromString("grad_fn");
        str_register_prehook = PyUnicode_InternFromString("register_prehook");
        str_named_modules = PyUnicode_InternFromString("named_modules");
        str_remove = PyUnicode_InternFromString("remove");
        died_fn = agent_function(&died_def);
        if (!str_grad_fn || !str_register_prehook || !str_named_modules || !str_remove || !died_fn) goto out;
    }
    torch = PyImport_ImportModule("torch");
    if (!torch) goto out;
    tc = PyObject_GetAttrString(torch, "_C");
    if (!tc) goto out;
    Py_XDECREF(tensor_type);
    tensor_type = (PyTypeObject *)PyObject_GetAttrString(tc, "TensorBase");
    if (!tensor_type) {
        PyErr_Clear();
        tensor_type = (PyTypeObject *)PyObject_GetAttrString(tc, "_TensorBase");
        if (!tensor_type) goto out;
    }
    Py_XDECREF(is_grad_enabled);
    is_grad_enabled = PyObject_GetAttrString(tc, "is_grad_enabled");
    PyErr_Clear();
    if (!PyType_Check((PyObject *)tensor_type)) {
        PyErr_SetString(PyExc_TypeError, "torch._C.TensorBase is not a type");
        goto out;
    }
    var = PyImport_ImportModule("torch.autograd.variable");
    if (var) {
        PyObject *V = PyObject_GetAttrString(var, "Variable");
        if (V) {
            engine = PyObject_GetAttrString(V, "_execution_engine");
            Py_DECREF(V);
        }
        if (engine) queue_callback = PyObject_GetAttrString(engine, "queue_callback");
    }
    PyErr_Clear(); /* without queue_callback, backward of input modules is simply not closed */
    ver = PyObject_GetAttrString(torch, "__version__");
    if (ver) {
        PyObject *s = PyObject_Str(ver);
        const char *cs = s ? PyUnicode_AsUTF8(s) : NULL;
        if (cs) {
            snprintf(torch_version, sizeof torch_version, "%s", cs);
            atomic_store(&torch_version_set, 1);
        }
        Py_XDECREF(s);
    }
    PyErr_Clear();

    record_backward = pb_config_int("PROBING_BACKWARD", 1) != 0;
    ext_load();
    if (pb_detail_init(&detail_policy, pb_config_str("PROBING_DETAIL_EVERY"), pb_config_int("PROBING_DETAIL_STEPS", 8),
                       pb_config_double("PROBING_DETAIL_BUDGET", 0.5)))
        pb_log_warn("ignoring PROBING_DETAIL_EVERY=%s: not 'auto' or a number of steps; using auto",
                    pb_config_str("PROBING_DETAIL_EVERY"));
    detail = pb_detail_on(&detail_policy, atomic_load_explicit(&step, memory_order_relaxed));
    detail_measured = 1;
    show_detail();
    const char *r = getenv("RANK");
    rank = r ? (uint16_t)atoi(r) : 0;
    if (!step_start_ns) step_start_ns = pb_now_ns();

    atomic_store(&enabled, 1);
    const char *mode = pb_config_str("PROBING_HOOK_MODE");
    if (mode && strcmp(mode, "hooks") == 0) {
        handles[0] = call_register("torch.nn.modules.module", "register_module_forward_pre_hook", fns[0], 0);
        if (!handles[0]) goto out;
        handles[1] = call_register("torch.nn.modules.module", "register_module_forward_hook", fns[1], 1);
        if (!handles[1]) goto out;
    } else if (install_call_wrapper()) {
        goto out;
    }
    if (record_backward) install_fast_register_hook();
    handles[2] = call_register("torch.optim.optimizer", "register_optimizer_step_pre_hook", fns[2], 0);
    if (!handles[2]) goto out;
    handles[3] = call_register("torch.optim.optimizer", "register_optimizer_step_post_hook", fns[3], 0);
    if (!handles[3]) goto out;
    installed = 1;
    if (pb_collect_install()) { /* the collectors are extras: module recording goes on */
        PyErr_Clear();
        pb_log_warn("data loader, AMP and sync collectors are off: torch is not as expected");
    }
    rc = 0;
out:
    if (rc) {
        atomic_store(&enabled, 0);
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        remove_call_wrapper();
        remove_fast_register_hook();
        for (int i = 0; i < 4; i++) {
            if (handles[i]) {
                PyObject *x = PyObject_CallMethodNoArgs(handles[i], str_remove);
                Py_XDECREF(x);
                Py_CLEAR(handles[i]);
            }
        }
        PyErr_Restore(et, ev, tb);
    }
    Py_XDECREF(torch);
    Py_XDECREF(tc);
    Py_XDECREF(var);
    Py_XDECREF(engine);
    Py_XDECREF(ver);
    return rc;
}

void pb_torch_hooks_remove(void)
{
    atomic_store(&enabled, 0);
    pb_collect_remove();
    remove_call_wrapper();
    remove_fast_register_hook();
    for (int i = 0; i < 4; i++) {
        if (!handles[i]) continue;
        PyObject *x = PyObject_CallMethodNoArgs(handles[i], str_remove);
        if (!x) PyErr_Clear();
        Py_XDECREF(x);
        Py_CLEAR(handles[i]);
    }
    map_clear();
    ntrees = noptimizers = 0;
    pass_abandon();
    bwd_paused = 0;
    backward_done_ns = 0;
    Py_CLEAR(queue_callback);
    installed = 0;
    primary_root = NULL;
    primary_ran = 0;
    training_latched = 0;
    evaluating = 0;
    nograd_forwards = nograd_per_optimizer = 0;
    nograd_learned = 0;
}

void pb_torch_hooks_disable(void) { atomic_store(&enabled, 0); }

int pb_torch_hooks_active(void) { return installed && atomic_load(&enabled); }

const char *pb_torch_version(void) { return atomic_load(&torch_version_set) ? torch_version : NULL; }

int64_t pb_torch_current_step(void) { return atomic_load_explicit(&step, memory_order_relaxed); }

void pb_torch_detail(pb_torch_detail_info *out)
{
    memset(out, 0, sizeof *out);
    out->installed = pb_torch_hooks_active();
    if (!out->installed) return;
    out->automatic = atomic_load_explicit(&shown_automatic, memory_order_relaxed);
    out->now = atomic_load_explicit(&shown_now, memory_order_relaxed);
    out->period = atomic_load_explicit(&shown_period, memory_order_relaxed);
    out->window = atomic_load_explicit(&shown_window, memory_order_relaxed);
    out->budget_pct = (double)atomic_load_explicit(&shown_budget_pct_e6, memory_order_relaxed) / 1e6;
    int64_t ppm = atomic_load_explicit(&shown_cost_ppm, memory_order_relaxed);
    out->cost = ppm < 0 ? -1 : (double)ppm / 1e6;
}
