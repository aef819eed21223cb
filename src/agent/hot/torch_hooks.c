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
 * Steps: an optimizer.step() (global optimizer step hooks) ends the step; its own duration (less
 * a closure passed to it) is a 'step' row. Once an optimizer is constructed (Optimizer.__init__
 * wrapped) or stepped, only optimizer steps end steps, so gradient accumulation before the first
 * one makes no extra steps; before that (no optimizer: inference), the start of a new forward of
 * the first root module ends the step, so inference loops get one step per forward. An evaluation loop
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
 * Backward: autograd.c (probes on autograd nodes). The callable wrapper is wrap.c, the frame
 * stacks and the row push frames.h, the step state step.h: this file calls them, never the other
 * way round.
 */
#include "torch_hooks.h"

#include "autograd.h"
#include "capture.h"
#include "capture_state.h"
#include "clock.h"
#include "collect.h"
#include "config.h"
#include "detail.h"
#include "device.h"
#include "frames.h"
#include "intern.h"
#include "log.h"
#include "memsample.h"
#include "step.h"
#include "torch_trace.h"
#include "walk.h"
#include "wrap.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- state shared across threads (written under the GIL) ---- */

static PyObject *handles[4];       /* RemovableHandles of our four registrations */
static PyTypeObject *tensor_type;  /* torch._C.TensorBase */
static PyObject *is_grad_enabled;  /* torch._C.is_grad_enabled */
static PyObject *str_grad_fn, *str_named_modules, *str_remove;
static char torch_version[64];
static _Atomic int torch_version_set;

static int training_latched;       /* an optimizer step has been seen */
static int evaluating;             /* training_latched was dropped for an evaluation stretch */
static int64_t nograd_forwards;    /* root forwards of primary_root under no_grad since the last
                                      optimizer step (counted while training_latched) */
static int64_t nograd_per_optimizer; /* the most of them any optimizer step has had */
static int nograd_learned;         /* nograd_per_optimizer was measured over a whole optimizer step */
static PyObject *primary_root;     /* compared by address only, never dereferenced */
static int primary_ran;
static int record_backward = 1; /* PROBING_BACKWARD */
static int64_t opt_start_ns;
static int64_t opt_closure_ns; /* time in the closure of the running optimizer.step() */
static uint32_t opt_seq;
static int opt_device;                          /* 1: optimizer phase marked on the device, 2: and its module span */
static uint32_t opt_device_name, opt_device_type; /* the optimizer's row, for its device END */
static pb_detail detail_policy;
static int detail;          /* the current step records rows (detail.h) */
static int detail_measured; /* no capture ran in the current step: it counts for the policy */
/* copies of the policy for other threads (pb_torch_detail) */
static _Atomic int64_t shown_period, shown_window, shown_cost_ppm = -1, shown_budget_pct_e6;
static _Atomic int shown_automatic, shown_windows_only, shown_every_step, shown_now;
static _Atomic int64_t shown_steps;
static _Atomic int64_t shown_spread_lo_ppm, shown_spread_hi_ppm, shown_rejected;

static void show_detail(void)
{
    atomic_store_explicit(&shown_period, detail_policy.period, memory_order_relaxed);
    atomic_store_explicit(&shown_window, detail_policy.window, memory_order_relaxed);
    atomic_store_explicit(&shown_cost_ppm, detail_policy.cost < 0 ? -1 : (int64_t)(detail_policy.cost * 1e6),
                          memory_order_relaxed);
    atomic_store_explicit(&shown_budget_pct_e6, (int64_t)(detail_policy.budget * 1e8), memory_order_relaxed);
    atomic_store_explicit(&shown_automatic, detail_policy.automatic, memory_order_relaxed);
    atomic_store_explicit(&shown_windows_only, detail_policy.windows_only, memory_order_relaxed);
    atomic_store_explicit(&shown_every_step, detail_policy.mode == PB_DETAIL_EVERY_STEP, memory_order_relaxed);
    atomic_store_explicit(&shown_steps, detail_policy.steps, memory_order_relaxed);
    atomic_store_explicit(&shown_now, detail, memory_order_relaxed);
    atomic_store_explicit(&shown_spread_lo_ppm, (int64_t)(detail_policy.spread_lo * 1e6), memory_order_relaxed);
    atomic_store_explicit(&shown_spread_hi_ppm, (int64_t)(detail_policy.spread_hi * 1e6), memory_order_relaxed);
    atomic_store_explicit(&shown_rejected, detail_policy.rejected, memory_order_relaxed);
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

static inline mod_entry *map_find(PyObject *key)
{
    if (!map) return NULL;
    size_t mask = map_cap - 1, i = pb_hash_ptr(key) & mask;
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
        size_t i = pb_hash_ptr(e->key) & (ncap - 1);
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
    size_t mask = map_cap - 1, i = pb_hash_ptr(key) & mask;
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
static mod_entry *discover(PyObject *mod, pb_tstate *ts, mod_entry *fallback)
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



/* The training thread's CPU time at the last step boundary, and which thread that was: the
 * step's CPU time tells the detail policy whether the step was descheduled (detail.h). */
static int64_t step_start_cpu_ns = -1;
static unsigned long step_cpu_thread;

static void end_step(int64_t now)
{
    int64_t done = atomic_load_explicit(&pb_step_number, memory_order_relaxed), wall = now - pb_step_start_ns;
    int64_t cpu_now = pb_thread_cpu_ns(), cpu = -1;
    unsigned long thread = PyThread_get_thread_ident();
    if (cpu_now >= step_start_cpu_ns && step_start_cpu_ns >= 0 && thread == step_cpu_thread)
        cpu = cpu_now - step_start_cpu_ns;
    step_start_cpu_ns = cpu_now;
    step_cpu_thread = thread;
    pb_collect_step_end(done, wall, cpu, detail);
    pb_device_step_end(done);
    pb_detail_step_done(&detail_policy, done, wall, cpu, detail, detail_measured && !pb_capture_ranges);
    atomic_fetch_add_explicit(&pb_step_number, 1, memory_order_relaxed);
    pb_step_start_ns = now;
    pb_step_seq = 0;
    primary_ran = 0;
    pb_memsample_reset_peak();
    /* No backward pass is running at a step boundary (the optimizer steps after backward
     * returned; a recomputing forward inside backward does not end steps once an optimizer was
     * seen), so one still marked active raised or never reached the engine's final callbacks:
     * its spans are dropped. Graphs built and never run backward are let go either way. */
    pb_autograd_step_end();
    if (atomic_load_explicit(&pb_capture_wanted, memory_order_relaxed))
        pb_capture_boundary(atomic_load_explicit(&pb_step_number, memory_order_relaxed));
    detail = pb_detail_on(&detail_policy, atomic_load_explicit(&pb_step_number, memory_order_relaxed)) || pb_capture_ranges;
    detail_measured = !pb_capture_ranges;
    show_detail();
}

typedef struct node_found {
    PyObject *gf;    /* new reference, or with the extension the node's address */
    uint64_t handle; /* the extension's handle */
} node_found;

/* A visit of pb_walk_tensors: stops at a tensor with a grad_fn, kept in *ctx (a node_found). */
static int grad_fn_visit(PyObject *t, void *ctx)
{
    node_found *found = ctx;
    if (pb_autograd_ext) { /* no grad_fn object: the node read from the tensor (autograd_api.h) */
        const void *id;
        found->handle = pb_autograd_ext->node_of(t, &id);
        found->gf = (PyObject *)id;
        return id != NULL;
    }
    PyObject *gf = PyObject_GetAttr(t, str_grad_fn);
    if (!gf) {
        PyErr_Clear();
        return 0;
    }
    if (gf == Py_None) {
        Py_DECREF(gf);
        return 0;
    }
    found->gf = gf;
    return 1;
}

/* First grad_fn among a hook argument's tensors (a tensor, or a tuple/list/dict of them; walk.h).
 * Returns a new reference or NULL; with the extension, the node's address (never dereferenced)
 * and its handle in *handle. Released with pb_autograd_node_drop. [GIL held] */
static PyObject *first_grad_fn(PyObject *o, int depth, uint64_t *handle)
{
    node_found found = {NULL, 0};
    pb_walk_tensors(o, tensor_type, depth, grad_fn_visit, &found);
    *handle = found.handle;
    return found.gf;
}

/* ---- the hooks ---- */

/* Whether autograd records right now (no backward to time under no_grad/inference_mode): one
 * C call, cheaper than looking for grad_fn on every input and output. */
static inline int grad_enabled(void)
{
    if (pb_autograd_ext) return pb_autograd_ext->grad_enabled();
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
    pb_tstate *ts = pb_frames_get();
    if (!ts) return;
    if (ts->depth >= PB_FRAMES_MAX_DEPTH) {
        ts->overflow++;
        return;
    }
    if (ts->depth == 0) {
        if (pb_capture_ranges) pb_capture_root_call();
        if (pb_autograd_in_pass()) pb_autograd_pause(); /* a forward inside backward (checkpoint
                                                            * recompute): its time is forward's */
        if (!primary_root) primary_root = mod;
        else if (mod == primary_root && (training_latched || evaluating)) evaluation_stretch();
        if (!training_latched && mod == primary_root && primary_ran) end_step(pb_now_ns());
        if (mod == primary_root) pb_collect_forward_begin();
    }
    pb_frame *f = &ts->stack[ts->depth];
    f->module = mod;
    f->span = NULL;
    f->in_grad_fn = NULL;
    f->in_handle = 0;
    f->range = NULL;
    f->layer_capture = 0;
    f->detail = (uint8_t)(ts->depth ? ts->stack[ts->depth - 1].detail : detail);
    ts->depth++;
    if (ts->depth == 1) pb_device_begin(PB_ACT_FORWARD);
    if (!f->detail) { /* summary: only the root's time is needed */
        if (ts->depth == 1) f->start_ns = pb_now_ns();
        return;
    }
    mod_entry fallback, *e = map_find(mod);
    if (!e) e = discover(mod, ts, &fallback);
    f->name = e->name;
    f->type = e->type;
    f->seq = pb_step_seq++;
    f->child_ns = 0;
    f->collectives_at_start = pb_step_collectives_total_ns;
    f->layer_capture = e->layer_pending;
    e->layer_pending = 0;
    if (record_backward && grad_enabled()) {
        for (Py_ssize_t i = 0; i < n && i < 16 && !f->in_grad_fn; i++) f->in_grad_fn = first_grad_fn(inputs[i], 1, &f->in_handle);
        pb_autograd_frame_begin(f, ts->depth > 1 ? &ts->stack[ts->depth - 2] : NULL);
    }
    f->range = pb_capture_ranges ? pb_capture_range_enter(f->name) : NULL;
    if (pb_device_on) pb_device_module(1, (pb_activity)-1, f->name, f->type, f->seq, PB_STAGE_FORWARD, ts->depth - 1);
    f->start_ns = pb_now_ns();
}

/* Ends a frame's capture range, if it has one. [GIL held] */
static inline void end_capture_range(pb_frame *f)
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
    pb_autograd_probe_root(gf, handle);
    pb_autograd_node_drop(&gf);
}

/* A module execution ended with `output`, or with an exception (output NULL: no row). The
 * clock is read here, first thing once the frame is found, and only for the frames whose time is
 * kept (detail frames and root calls): a summary step's nested calls read no clock. [GIL held] */
static void leave(PyObject *mod, PyObject *output)
{
    pb_tstate *ts = pb_frames_get();
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
        pb_frame *skipped = &ts->stack[--ts->depth];
        end_capture_range(skipped);
        pb_autograd_node_drop(&skipped->in_grad_fn);
        pb_autograd_frame_drop(skipped);
    }
    pb_frame *f = &ts->stack[--ts->depth];
    uint16_t depth = (uint16_t)ts->depth;
    if (!f->detail && depth > 0) return; /* a summary step's nested call: nothing to record */
    int64_t now = pb_now_ns(), total = now - f->start_ns;
    if (f->detail) {
        end_capture_range(f);
        if (pb_device_on) pb_device_module(0, (pb_activity)-1, f->name, f->type, f->seq, PB_STAGE_FORWARD, depth);
        int64_t own = total - (pb_step_collectives_total_ns - f->collectives_at_start); /* without collectives */
        if (output) {
            pb_frames_push_row(f->start_ns, now, own - f->child_ns, f->seq, f->name, f->type, depth, PB_STAGE_FORWARD, ts->tid);
            if (record_backward && output != Py_None && (f->in_grad_fn || grad_enabled())) {
                uint64_t out_handle = 0;
                PyObject *out_gf = first_grad_fn(output, 0, &out_handle);
                if (out_gf) {
                    pb_autograd_frame_output(f, out_gf, out_handle, depth);
                    pb_autograd_node_drop(&out_gf);
                }
            }
        }
        if (depth > 0) ts->stack[depth - 1].child_ns += own;
        pb_autograd_node_drop(&f->in_grad_fn);
        pb_autograd_frame_drop(f);
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
    /* a root call: its whole time is forward time on the step's timeline, less what runs
     * inside it (collectives, a nested backward), which the timeline gives to the innermost */
    pb_step_interval(PB_ACT_FORWARD, f->start_ns, now);
    pb_device_end(PB_ACT_FORWARD);
    if (pb_autograd_paused) pb_autograd_resume();
    if (output) pb_collect_phase(mod == primary_root ? PB_PHASE_AFTER_FORWARD : PB_PHASE_AFTER_LOSS);
    if (mod == primary_root) primary_ran = 1;
}

/* forward pre-hook(module, args) — PROBING_HOOK_MODE=hooks */
static PyObject *fwd_pre(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (atomic_load_explicit(&pb_step_enabled, memory_order_relaxed) && nargs >= 1) enter(args[0], args + 1, nargs - 1);
    Py_RETURN_NONE;
}

/* forward hook(module, args, output), registered with always_call=True */
static PyObject *fwd_post(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (atomic_load_explicit(&pb_step_enabled, memory_order_relaxed) && nargs >= 1)
        leave(args[0], nargs >= 3 ? args[2] : Py_None);
    Py_RETURN_NONE;
}


/* ---- torch.nn.Module.__call__ replaced by a C wrapper (PROBING_HOOK_MODE=call; wrap.h) ---- */

static PyObject *modcall_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    pb_wrapper *mc = (pb_wrapper *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || !atomic_load_explicit(&pb_step_enabled, memory_order_relaxed))
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

static pb_wrapper *installed_call;

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
    pb_wrapper *mc = NULL;
    nn = PyImport_ImportModule("torch.nn");
    if (!nn) goto out;
    Module = PyObject_GetAttrString(nn, "Module");
    if (!Module) goto out;
    orig = PyObject_GetAttrString(Module, "__call__");
    if (!orig) goto out;
    if (Py_TYPE(orig) == &pb_wrapper_type) { /* already wrapped (a second agent start) */
        rc = 0;
        goto out;
    }
    if (!(mc = pb_wrapper_new(orig, modcall_vectorcall, NULL))) goto out;
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

/* torch.optim.Optimizer.__init__(self, ...) returned: a training job, whose steps end at
 * optimizer.step() from now on, also before the first one (gradient accumulation, Lightning's
 * sanity-check validation: no forward ends a step). An inference loop that merely holds an
 * optimizer still gets a step per forward once its no_grad forwards pass the evaluation
 * stretch's minimum (evaluation_stretch()). [GIL held] */
static PyObject *optimizer_made(PyObject *orig, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *res = PyObject_Vectorcall(orig, args, nargsf, kwnames);
    if (res && !training_latched && !evaluating) {
        if (primary_ran) end_step(pb_now_ns()); /* forwards before it (an inference pass) were steps */
        training_latched = 1;
        nograd_learned = 1;
        nograd_forwards = 0;
    }
    return res;
}
static PyObject *wrap_optimizer_init;

/* A closure passed to optimizer.step(closure) (Lightning's training_step, forward and
 * backward; LBFGS' re-evaluations): its time is not the optimizer's. The wrapper marks it as host
 * time on the step's timeline, so the forward and backward inside it are theirs, and what is
 * left of optimizer.step() is the optimizer's own work. */
static PyObject *closure_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    pb_wrapper *w = (pb_wrapper *)self;
    int64_t start = pb_now_ns();
    int device = pb_device_on;
    if (device) pb_device_phase(1, PB_ACT_HOST);
    PyObject *res = PyObject_Vectorcall(w->orig, args, nargsf, kwnames);
    if (device) pb_device_phase(0, PB_ACT_HOST);
    if (atomic_load_explicit(&pb_step_enabled, memory_order_relaxed)) {
        int64_t end = pb_now_ns();
        pb_step_interval(PB_ACT_HOST, start, end);
        opt_closure_ns += end - start;
    }
    return res;
}

/* (args, kwargs) with the closure among them wrapped (closure_vectorcall), or NULL (no closure,
 * or it could not be wrapped: the step runs unchanged). New reference. [GIL held] */
static PyObject *with_wrapped_closure(PyObject *step_args, PyObject *step_kwargs)
{
    PyObject *closure = NULL, *new_args = NULL, *new_kwargs = NULL, *result = NULL;
    int in_kwargs = 0;
    if (step_kwargs && PyDict_Check(step_kwargs)) {
        closure = PyDict_GetItemString(step_kwargs, "closure"); /* borrowed */
        in_kwargs = closure != NULL;
    }
    if (!closure && step_args && PyTuple_Check(step_args) && PyTuple_GET_SIZE(step_args) >= 2)
        closure = PyTuple_GET_ITEM(step_args, 1);
    if (!closure || closure == Py_None || !PyCallable_Check(closure) || Py_TYPE(closure) == &pb_wrapper_type) return NULL;
    pb_wrapper *w = pb_wrapper_new(closure, closure_vectorcall, NULL);
    if (!w) goto out;
    if (in_kwargs) {
        new_args = new_ref(step_args);
        if (!(new_kwargs = PyDict_Copy(step_kwargs)) || PyDict_SetItemString(new_kwargs, "closure", (PyObject *)w)) goto out;
    } else {
        Py_ssize_t n = PyTuple_GET_SIZE(step_args); /* a new tuple: GetSlice may return the same one */
        if (!(new_args = PyTuple_New(n))) goto out;
        for (Py_ssize_t i = 0; i < n; i++)
            PyTuple_SET_ITEM(new_args, i, new_ref(i == 1 ? (PyObject *)w : PyTuple_GET_ITEM(step_args, i)));
        new_kwargs = step_kwargs && PyDict_Check(step_kwargs) ? new_ref(step_kwargs) : PyDict_New();
        if (!new_kwargs) goto out;
    }
    result = PyTuple_Pack(2, new_args, new_kwargs);
out:
    Py_XDECREF((PyObject *)w);
    Py_XDECREF(new_args);
    Py_XDECREF(new_kwargs);
    PyErr_Clear();
    return result;
}

/* optimizer step pre-hook(optimizer, args, kwargs): returns None, or (args, kwargs) with the
 * closure wrapped */
static PyObject *opt_pre(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!atomic_load_explicit(&pb_step_enabled, memory_order_relaxed)) Py_RETURN_NONE;
    opt_seq = pb_step_seq++;
    opt_closure_ns = 0;
    opt_device = 0;
    if (pb_device_on) { /* on detail steps also the optimizer's own row in python.device_trace */
        opt_device = 1;
        pb_device_phase(1, PB_ACT_OPTIMIZER);
        if (detail && nargs >= 1) {
            opt_device_type = pb_intern_cstr(class_name(args[0]));
            opt_device_name = optimizer_name(args[0], opt_device_type);
            pb_device_module(1, (pb_activity)-1, opt_device_name, opt_device_type, opt_seq, PB_STAGE_STEP, 0);
            opt_device = 2;
        }
    }
    opt_start_ns = pb_now_ns();
    PyObject *changed = nargs >= 3 ? with_wrapped_closure(args[1], args[2]) : NULL;
    if (changed) return changed;
    Py_RETURN_NONE;
}

/* optimizer step post-hook(optimizer, args, kwargs) */
static PyObject *opt_post(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t now = pb_now_ns();
    if (!atomic_load_explicit(&pb_step_enabled, memory_order_relaxed) || nargs < 1) Py_RETURN_NONE;
    if (opt_device == 2) pb_device_module(0, (pb_activity)-1, opt_device_name, opt_device_type, opt_seq, PB_STAGE_STEP, 0);
    if (opt_device) pb_device_phase(0, PB_ACT_OPTIMIZER);
    opt_device = 0;
    if (opt_start_ns) {
        pb_step_interval(PB_ACT_OPTIMIZER, opt_start_ns, now);
        if (detail) {
            pb_tstate *ts = pb_frames_get();
            uint32_t type = pb_intern_cstr(class_name(args[0])), name = optimizer_name(args[0], type);
            pb_frames_push_row(opt_start_ns, now, now - opt_start_ns - opt_closure_ns, opt_seq, name, type, 0, PB_STAGE_STEP,
                               ts ? ts->tid : 0);
        }
    }
    opt_start_ns = 0;
    pb_collect_optimizer_done(args[0]);
    optimizer_stepped();
    Py_RETURN_NONE;
}

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

int pb_torch_hooks_ready_types(void)
{
    if (pb_autograd_ready_types() || pb_wrap_ready_types()) return -1;
    for (int i = 0; i < 4; i++) {
        if (!hook_fns[i] && !(hook_fns[i] = pb_wrap_function(&hook_defs[i]))) return -1;
    }
    return 0;
}

PyObject *pb_torch_hook_functions(void)
{
    return PyTuple_Pack(4, hook_fns[0], hook_fns[1], hook_fns[2], hook_fns[3]);
}

int pb_torch_hooks_install(void)
{
    if (pb_step_installed) return 0;
    PyObject *torch = NULL, *tc = NULL, *var = NULL, *engine = NULL, *ver = NULL;
    PyObject **fns = hook_fns;
    int rc = -1;

    if (!str_grad_fn) {
        str_grad_fn = PyUnicode_InternFromString("grad_fn");
        str_named_modules = PyUnicode_InternFromString("named_modules");
        str_remove = PyUnicode_InternFromString("remove");
        died_fn = pb_wrap_function(&died_def);
        if (!str_grad_fn || !str_named_modules || !str_remove || !died_fn) goto out;
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
        if (engine) pb_autograd_set_queue_callback(PyObject_GetAttrString(engine, "queue_callback"));
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
    pb_autograd_load_ext(record_backward);
    if (pb_detail_init(&detail_policy, pb_config_str("PROBING_DETAIL_EVERY"), pb_config_int("PROBING_DETAIL_STEPS", 8),
                       pb_config_double("PROBING_DETAIL_BUDGET", PB_DETAIL_DEFAULT_BUDGET_PCT)))
        pb_log_warn("ignoring PROBING_DETAIL_EVERY=%s: not 'auto', 'windows' or a number of steps; using auto",
                    pb_config_str("PROBING_DETAIL_EVERY"));
    detail = pb_detail_on(&detail_policy, atomic_load_explicit(&pb_step_number, memory_order_relaxed));
    detail_measured = 1;
    show_detail();
    const char *r = getenv("RANK");
    pb_step_rank_id = r ? (uint16_t)atoi(r) : 0;
    if (!pb_step_start_ns) pb_step_start_ns = pb_now_ns();

    atomic_store(&pb_step_enabled, 1);
    const char *mode = pb_config_str("PROBING_HOOK_MODE");
    if (mode && strcmp(mode, "hooks") == 0) {
        handles[0] = call_register("torch.nn.modules.module", "register_module_forward_pre_hook", fns[0], 0);
        if (!handles[0]) goto out;
        handles[1] = call_register("torch.nn.modules.module", "register_module_forward_hook", fns[1], 1);
        if (!handles[1]) goto out;
    } else if (install_call_wrapper()) {
        goto out;
    }
    if (record_backward) pb_autograd_install_fast_register();
    handles[2] = call_register("torch.optim.optimizer", "register_optimizer_step_pre_hook", fns[2], 0);
    if (!handles[2]) goto out;
    handles[3] = call_register("torch.optim.optimizer", "register_optimizer_step_post_hook", fns[3], 0);
    if (!handles[3]) goto out;
    PyObject *optim = PyImport_ImportModule("torch.optim");
    PyObject *optimizer_cls = optim ? PyObject_GetAttrString(optim, "Optimizer") : NULL;
    if (!optimizer_cls || pb_wrap_attr(optimizer_cls, "__init__", optimizer_made, &wrap_optimizer_init))
        PyErr_Clear(); /* without it steps end at forwards until the first optimizer.step(), as before */
    Py_XDECREF(optimizer_cls);
    Py_XDECREF(optim);
    pb_step_installed = 1;
    pb_step_set_boundary(optimizer_stepped);
    if (pb_collect_install()) { /* the collectors are extras: module recording goes on */
        PyErr_Clear();
        pb_log_warn("data loader, AMP and sync collectors are off: torch is not as expected");
    }
    rc = 0;
out:
    if (rc) {
        atomic_store(&pb_step_enabled, 0);
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        remove_call_wrapper();
        pb_autograd_remove_fast_register();
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
    atomic_store(&pb_step_enabled, 0);
    pb_collect_remove();
    if (wrap_optimizer_init) {
        PyObject *optim = PyImport_ImportModule("torch.optim");
        PyObject *optimizer_cls = optim ? PyObject_GetAttrString(optim, "Optimizer") : NULL;
        if (optimizer_cls) pb_unwrap_attr(optimizer_cls, "__init__", &wrap_optimizer_init);
        Py_XDECREF(optimizer_cls);
        Py_XDECREF(optim);
        PyErr_Clear();
    }
    remove_call_wrapper();
    pb_autograd_remove_fast_register();
    for (int i = 0; i < 4; i++) {
        if (!handles[i]) continue;
        PyObject *x = PyObject_CallMethodNoArgs(handles[i], str_remove);
        if (!x) PyErr_Clear();
        Py_XDECREF(x);
        Py_CLEAR(handles[i]);
    }
    map_clear();
    ntrees = noptimizers = 0;
    pb_autograd_reset();
    pb_step_set_boundary(NULL);
    pb_step_installed = 0;
    primary_root = NULL;
    primary_ran = 0;
    training_latched = 0;
    evaluating = 0;
    nograd_forwards = nograd_per_optimizer = 0;
    nograd_learned = 0;
}

void pb_torch_hooks_disable(void) { atomic_store(&pb_step_enabled, 0); }

int pb_torch_hooks_active(void) { return pb_step_active(); }

const char *pb_torch_version(void) { return atomic_load(&torch_version_set) ? torch_version : NULL; }

const char *pb_torch_backward_probes(void) { return pb_autograd_backward_probes(); }

void pb_torch_detail(pb_torch_detail_info *out)
{
    memset(out, 0, sizeof *out);
    out->installed = pb_torch_hooks_active();
    if (!out->installed) return;
    out->automatic = atomic_load_explicit(&shown_automatic, memory_order_relaxed);
    out->windows_only = atomic_load_explicit(&shown_windows_only, memory_order_relaxed);
    out->every_step = atomic_load_explicit(&shown_every_step, memory_order_relaxed);
    out->steps = atomic_load_explicit(&shown_steps, memory_order_relaxed);
    out->now = atomic_load_explicit(&shown_now, memory_order_relaxed);
    out->period = atomic_load_explicit(&shown_period, memory_order_relaxed);
    out->window = atomic_load_explicit(&shown_window, memory_order_relaxed);
    out->budget_pct = (double)atomic_load_explicit(&shown_budget_pct_e6, memory_order_relaxed) / 1e6;
    int64_t ppm = atomic_load_explicit(&shown_cost_ppm, memory_order_relaxed);
    out->cost = ppm < 0 ? -1 : (double)ppm / 1e6;
    out->spread_lo = (double)atomic_load_explicit(&shown_spread_lo_ppm, memory_order_relaxed) / 1e6;
    out->spread_hi = (double)atomic_load_explicit(&shown_spread_hi_ppm, memory_order_relaxed) / 1e6;
    out->rejected = atomic_load_explicit(&shown_rejected, memory_order_relaxed);
}
