/*
 * autograd.c - backward: probes on autograd nodes, spans per module execution; see autograd.h.
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
 * - with the extension probing._autograd (autograd_api.h; found by autograd_ext.c at install):
 *   nodes are read from tensors without grad_fn objects, a probe is a C struct owned by node_map
 *   and named by a tag in a C++ pre-hook on the node; backward appends (tag, time) without
 *   calling the agent, and backward_done replays the events in order (ext_replay). A forward
 *   recomputed inside backward marks its start and end in the same events (pb_autograd_pause).
 * - without it: a probe is a Python object registered with grad_fn.register_prehook()
 *   (autograd_register.c), called by torch in backward.
 */
#include "autograd.h"

#include "autograd_api.h"
#include "autograd_ext.h"

#include "clock.h"
#include "collect.h"
#include "device.h"
#include "log.h"
#include "wrap.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pb_autograd_pass_active, pb_autograd_paused;
static int backward_device; /* grad sync's begin was marked on the device */
static PyObject *queue_callback;   /* bound Variable._execution_engine.queue_callback */
static PyObject *str_register_prehook;

typedef struct probe probe;

typedef struct pb_bspan {
    struct pb_bspan *next_free;
    struct pb_bspan *parent; /* owned or NULL: the span of the execution this one was nested in */
    int refs;            /* probes that list or own it, the active list, frames, child spans */
    int64_t start_ns;
    int64_t self_ns;
    int64_t last_ns;     /* end of the last time credited to it or to a span nested in it */
    uint32_t name, type, seq;
    uint16_t depth;
    uint16_t active_at;  /* its index in active[] while started */
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

/* The spans a probe ends or starts: almost always one or two, kept in the probe itself, so that
 * a module's bookkeeping touches the probe's own lines and not two more heap blocks (every
 * module's probe is visited once a step, between torch's work, and found evicted: issue 32,
 * bench/RESULTS.md). More go to a heap array. items is NULL until the first add (probes are
 * made zeroed), then inl or the heap array. */
#define SPAN_LIST_INLINE 2
typedef struct span_list {
    bspan **items; /* owned references */
    int n, cap;
    bspan *inl[SPAN_LIST_INLINE];
} span_list;

struct probe {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    bspan *owner;           /* owned or NULL: the innermost execution whose forward made the node */
    span_list ends, starts;
    size_t slot; /* with the extension: its entry in node_map */
};

static int list_add(span_list *l, bspan *s)
{
    if (!l->items) {
        l->items = l->inl;
        l->cap = SPAN_LIST_INLINE;
    }
    if (l->n == l->cap) {
        int ncap = l->cap * 2;
        bspan **a = l->items == l->inl ? malloc((size_t)ncap * sizeof *a) : realloc(l->items, (size_t)ncap * sizeof *a);
        if (!a) return -1;
        if (l->items == l->inl) memcpy(a, l->inl, sizeof l->inl);
        l->items = a;
        l->cap = ncap;
    }
    l->items[l->n++] = s;
    s->refs++;
    return 0;
}

/* Frees a list's heap array (the probe is going away); its references were dropped before. */
static void list_free(span_list *l)
{
    if (l->items != l->inl) free(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

#define MAX_ACTIVE 1024
static bspan *active[MAX_ACTIVE]; /* each holds a ref */
static int nactive;
static int64_t last_event_ns;
static bspan *cur_owner; /* owned or NULL: the span running the node whose probe fired last */
static int64_t pass_start_ns, pass_paused_ns, pause_start_ns;
static PyObject *backward_done_fn, *backward_synced_fn;
static int64_t backward_done_ns;  /* when backward_done ran; 0 when no backward_synced is due */
static void node_map_clear(void);
static probe *ext_probe(uint64_t tag);

/* The extension probing._autograd (autograd_api.h), or NULL: probes are then Python callables
 * on grad_fn objects (PROBING_AUTOGRAD_EXT=0, or the extension is missing). */
const pb_autograd_api *pb_autograd_ext;

/* Time since the previous event goes to the execution whose node ran in it: the owner of the
 * node whose probe fired last (the engine runs one node at a time per device; nodes without a
 * probe that run after it, such as AccumulateGrad for its weights, go with it). A node made by no
 * module's forward directly (a residual add, attention's matmuls in the attention module's own
 * code) has no owner: its time goes to the innermost active span, deepest and latest started. */
/* Nanoseconds of [from, to) inside collectives on the step's timeline (FSDP's all-gathers and
 * reduce-scatters run in backward hooks): the collective's, not a module's backward time.
 * Intervals are added in time order and sweeps move forward, so a cursor skips the intervals
 * already behind; the step's end resets the timeline (and the cursor with it). */
static int collectives_cursor;
static uint64_t collectives_cursor_resets; /* the timeline's resets when the cursor was set */
static int64_t collectives_between(int64_t from, int64_t to)
{
    const pb_timeline *tl = &pb_step_timeline;
    if (collectives_cursor_resets != tl->resets || collectives_cursor > tl->count) {
        collectives_cursor = 0;
        collectives_cursor_resets = tl->resets;
    }
    while (collectives_cursor < tl->count && tl->intervals[collectives_cursor].end_ns <= from) collectives_cursor++;
    int64_t in = 0;
    for (int i = collectives_cursor; i < tl->count; i++) {
        const pb_interval *iv = &tl->intervals[i];
        if (iv->activity != PB_ACT_COLLECTIVE) continue;
        int64_t a = iv->start_ns > from ? iv->start_ns : from, b = iv->end_ns < to ? iv->end_ns : to;
        if (b > a) in += b - a;
    }
    return in;
}

static void sweep(int64_t now)
{
    if (!pb_autograd_paused) {
        bspan *in = cur_owner && cur_owner->started ? cur_owner : NULL;
        if (!in && nactive) {
            in = active[0];
            for (int i = 1; i < nactive; i++) {
                bspan *c = active[i];
                if (c->depth > in->depth || (c->depth == in->depth && c->start_ns >= in->start_ns)) in = c;
            }
        }
        if (in) {
            in->self_ns += now - last_event_ns - collectives_between(last_event_ns, now);
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
    pb_autograd_pass_active = 1;
    pass_start_ns = now;
    pass_paused_ns = 0;
}

/* Drops the spans of a pass whose final callback never ran, and the probed nodes. */
void pb_autograd_abandon(void)
{
    if (pb_autograd_ext) pb_autograd_ext->reset();
    for (int i = 0; i < nactive; i++) {
        active[i]->started = 0;
        span_unref(active[i]);
    }
    nactive = 0;
    pb_autograd_pass_active = 0;
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
    s->seq = pb_step_seq++;
    s->started = 1;
    s->refs++;
    s->active_at = (uint16_t)nactive;
    active[nactive++] = s;
}

static void span_end(bspan *s, int64_t now)
{
    if (!s->started) return;
    int i = s->active_at; /* removed as a search would: the last one takes its place */
    active[i] = active[--nactive];
    active[i]->active_at = (uint16_t)i;
    s->started = 0;
    pb_tstate *ts = pb_frames_get();
    pb_frames_push_row(s->start_ns, s->last_ns, s->self_ns, s->seq, s->name, s->type, s->depth, PB_STAGE_BACKWARD,
             ts ? ts->tid : 0);
    span_unref(s);
}

/* The node executes at `now`: modules that consumed its output are done, modules that produced
 * it begin. */
static void probe_fire(probe *p, int64_t now)
{
    if (!pb_autograd_pass_active) pass_begin(now);
    sweep(now);
    /* the node's owner runs from here; a node no module made is its consumer's parent's code */
    bspan *owner = p->owner;
    if (!owner) {
        bspan *deepest = NULL;
        for (int i = 0; i < p->ends.n; i++)
            if (!deepest || p->ends.items[i]->depth > deepest->depth) deepest = p->ends.items[i];
        owner = deepest ? deepest->parent : NULL;
    }
    set_owner(owner);
    for (int i = 0; i < p->ends.n; i++) span_end(p->ends.items[i], now);
    for (int i = 0; i < p->starts.n; i++) {
        bspan *s = p->starts.items[i];
        span_start(s, now);
        if (s->end_probe == p) span_end(s, now); /* output node == input node: nothing in between */
    }
}

/* A Python-level probe is called by torch as the node's pre-hook. */
static PyObject *probe_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    if (atomic_load_explicit(&pb_step_enabled, memory_order_relaxed)) probe_fire((probe *)self, pb_now_ns());
    Py_RETURN_NONE;
}

/* Lets go of what a probe holds and empties it for reuse; its lists keep their memory. */
static void probe_empty(probe *p)
{
    for (int i = 0; i < p->ends.n; i++) span_unref(p->ends.items[i]);
    for (int i = 0; i < p->starts.n; i++) span_unref(p->starts.items[i]);
    if (p->owner) span_unref(p->owner);
    p->owner = NULL;
    p->ends.n = p->starts.n = 0;
}

/* Drops what a probe holds (not the probe itself). */
static void probe_clear(probe *p)
{
    probe_empty(p);
    list_free(&p->ends);
    list_free(&p->starts);
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

int pb_autograd_is_probe(PyObject *o) { return Py_IS_TYPE(o, &probe_type); }

/* Markers the agent adds to the extension's events: a forward inside backward begins / ends. */
#define EXT_PAUSE 1
#define EXT_RESUME 2

/* With the extension, backward ran without calling the agent: its events (node executions and
 * the agent's own markers, in order) are replayed here, after the pass, through the same steps
 * a Python-level probe takes while it runs; the rows come out the same. [GIL held] */
static void ext_replay(void)
{
    size_t n, dropped;
    const pb_autograd_event *ev = pb_autograd_ext->events(&n, &dropped);
    for (size_t i = 0; i < n; i++) {
        int64_t t = ev[i].ns;
        if (ev[i].tag & PB_AUTOGRAD_MARK) {
            if ((ev[i].tag & ~PB_AUTOGRAD_MARK) == EXT_PAUSE && pb_autograd_pass_active && !pb_autograd_paused) {
                sweep(t);
                pb_autograd_paused = 1;
                pause_start_ns = t;
            } else if ((ev[i].tag & ~PB_AUTOGRAD_MARK) == EXT_RESUME && pb_autograd_paused) {
                pb_autograd_paused = 0;
                pass_paused_ns += t - pause_start_ns;
                last_event_ns = t;
            }
            continue;
        }
        if (!pb_autograd_pass_active) { /* the extension queued backward_done at this first event */
            pb_autograd_pass_active = 1;
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
    pb_autograd_paused = 0;
    pb_autograd_ext->reset();
}

/* Queued with the autograd engine: the backward pass has finished. [GIL held] */
static PyObject *backward_done(PyObject *self, PyObject *unused)
{
    if (pb_autograd_ext) ext_replay();
    int64_t now = pb_now_ns();
    sweep(now);
    int n = nactive;
    bspan *left[MAX_ACTIVE];
    memcpy(left, active, (size_t)n * sizeof left[0]);
    nactive = 0;
    for (int i = 0; i < n; i++) {
        bspan *s = left[i];
        s->started = 0;
        if (s->engine_end && atomic_load_explicit(&pb_step_enabled, memory_order_relaxed)) {
            pb_tstate *ts = pb_frames_get();
            pb_frames_push_row(s->start_ns, s->last_ns, s->self_ns, s->seq, s->name, s->type, s->depth, PB_STAGE_BACKWARD,
                     ts ? ts->tid : 0);
        }
        span_unref(s);
    }
    set_owner(NULL);
    node_map_clear();
    if (pb_autograd_pass_active) {
        /* forwards recomputed inside (checkpointing) and collectives are theirs on the timeline */
        pb_step_interval(PB_ACT_BACKWARD, pass_start_ns, now);
        pb_autograd_pass_active = 0;
    }
    if (atomic_load_explicit(&pb_step_enabled, memory_order_relaxed)) pb_collect_phase(PB_PHASE_AFTER_BACKWARD);
    /* Callbacks queued while the engine runs its final callbacks run after the ones already
     * queued: DistributedDataParallel's, which waits for the gradient all-reduces. The time until
     * this one runs is python.steps.grad_sync. */
    backward_done_ns = 0;
    if (queue_callback && backward_synced_fn) {
        PyObject *r = PyObject_CallOneArg(queue_callback, backward_synced_fn);
        if (r) {
            Py_DECREF(r);
            backward_done_ns = pb_now_ns();
            backward_device = pb_device_on;
            if (backward_device) pb_device_phase(1, PB_ACT_GRAD_SYNC);
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
    if (backward_device) pb_device_phase(0, PB_ACT_GRAD_SYNC);
    backward_device = 0;
    if (backward_done_ns && atomic_load_explicit(&pb_step_enabled, memory_order_relaxed))
        pb_step_interval(PB_ACT_GRAD_SYNC, backward_done_ns, pb_now_ns());
    backward_done_ns = 0;
    Py_RETURN_NONE;
}
static PyMethodDef backward_synced_def = {"_backward_synced", (PyCFunction)backward_synced, METH_NOARGS, NULL};

/* grad_fn object -> its probe, for the nodes seen since the last backward pass or step.
 * With the extension the key is the node's address (its handle holds the node) and the probes
 * are plain C structs, never Python objects, owned by ext_probes: hooks name them by tag, their
 * index in ext_probes and the generation, which changes at every clear, so that a hook that
 * runs after its probe is gone finds nothing. The map's table and the probes, with their span
 * lists, are kept across clears and reused: a training loop makes the same nodes every step, so
 * after the first steps recording a node allocates nothing on the agent's side. */
typedef struct node_entry {
    PyObject *node; /* owned (with the extension: the address) */
    probe *probe;   /* borrowed: owned by the node's hook dict, alive while node is (with the
                     * extension: owned by ext_probes) */
} node_entry;
static node_entry *node_map;
static size_t node_cap, node_used;
static probe **ext_probes; /* with the extension: the probes by tag index; [0, ext_made) allocated */
/* Probes are allocated EXT_BLOCK at a time, one block after another in tag order, so that the
 * probes of consecutive modules share cache lines; ext_probes[k * EXT_BLOCK] is block k. */
#define EXT_BLOCK 64u
static uint32_t ext_nprobes, ext_made, ext_cap, ext_generation = 1;

static void node_map_clear(void)
{
    const pb_autograd_api *ag = pb_autograd_ext;
    if (ag) {
        /* Forget first, release after: releasing nodes can free tensors and run Python. */
        uint32_t n = ext_nprobes;
        ext_generation++;
        ext_nprobes = 0;
        /* every used entry is a probe's: emptied one by one, as summary steps use one or two of
         * a table sized for the last detail step */
        for (uint32_t i = 0; i < n; i++) {
            probe_empty(ext_probes[i]);
            node_map[ext_probes[i]->slot].node = NULL;
        }
        node_used = 0;
        ag->release_all(); /* also the handles taken for nodes that got no probe */
        return;
    }
    if (!node_used) return;
    /* DECREFs can free graphs, whose probes' deallocation touches nothing here. */
    node_entry *m = node_map;
    size_t cap = node_cap;
    node_map = NULL;
    node_cap = node_used = 0;
    for (size_t i = 0; i < cap; i++)
        if (m[i].node) Py_DECREF(m[i].node);
    free(m);
}

/* Frees the map and the extension's probes (at reset; nothing may be recorded then). */
static void node_map_free(void)
{
    node_map_clear();
    free(node_map);
    node_map = NULL;
    node_cap = 0;
    for (uint32_t i = 0; i < ext_made; i++) {
        list_free(&ext_probes[i]->ends);
        list_free(&ext_probes[i]->starts);
    }
    for (uint32_t i = 0; i < ext_made; i += EXT_BLOCK) free(ext_probes[i]); /* each block's first */
    free(ext_probes);
    ext_probes = NULL;
    ext_made = ext_cap = 0;
}

/* The probe a hook's tag names, or NULL when it is from before the last clear. */
static probe *ext_probe(uint64_t tag)
{
    uint32_t i = (uint32_t)tag;
    return (uint32_t)(tag >> 32) == ext_generation && i < ext_nprobes ? ext_probes[i] : NULL;
}

/* A probe on node `handle` (the extension's hook), reused from an earlier clear when there is
 * one; NULL on failure. */
static probe *ext_probe_new(uint64_t handle)
{
    if (ext_nprobes == ext_made) {
        if (ext_made == ext_cap) {
            uint32_t ncap = ext_cap ? ext_cap * 2 : 256;
            probe **n = realloc(ext_probes, (size_t)ncap * sizeof *n);
            if (!n) return NULL;
            ext_probes = n;
            ext_cap = ncap;
        }
        if (ext_made % EXT_BLOCK == 0) { /* a new block; the next ones take its following slots */
            probe *block = calloc(EXT_BLOCK, sizeof *block);
            if (!block) return NULL;
            for (uint32_t k = 0; k < EXT_BLOCK && ext_made + k < ext_cap; k++) ext_probes[ext_made + k] = block + k;
        }
        ext_made++;
    }
    if (pb_autograd_ext->hook(handle, ((uint64_t)ext_generation << 32) | ext_nprobes)) return NULL;
    return ext_probes[ext_nprobes++];
}

static int node_map_grow(void)
{
    size_t ncap = node_cap ? node_cap * 2 : 256;
    node_entry *n = calloc(ncap, sizeof *n);
    if (!n) return -1;
    for (size_t j = 0; j < node_cap; j++) {
        if (!node_map[j].node) continue;
        size_t i = pb_hash_ptr(node_map[j].node) & (ncap - 1);
        while (n[i].node) i = (i + 1) & (ncap - 1);
        n[i] = node_map[j];
        n[i].probe->slot = i;
    }
    free(node_map);
    node_map = n;
    node_cap = ncap;
    return 0;
}

/* The probe on node gf, registering one if there is none yet. Returns NULL on failure. */
static probe *probe_for(PyObject *gf, uint64_t handle)
{
    if ((node_used + 1) * 2 > node_cap && node_map_grow()) return NULL;
    size_t mask = node_cap - 1, i = pb_hash_ptr(gf) & mask;
    while (node_map[i].node) {
        if (node_map[i].node == gf) return node_map[i].probe;
        i = (i + 1) & mask;
    }
    if (pb_autograd_ext) {
        probe *p = ext_probe_new(handle);
        if (!p) return NULL;
        p->slot = i;
        node_map[i].node = gf;
        node_map[i].probe = p;
        node_used++;
        return p;
    }
    probe *p = PyObject_New(probe, &probe_type);
    if (!p) return NULL;
    p->vectorcall = probe_vectorcall;
    p->owner = NULL;
    memset(&p->ends, 0, sizeof p->ends);
    memset(&p->starts, 0, sizeof p->starts);
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
void pb_autograd_frame_output(pb_frame *f, PyObject *out_gf, uint64_t out_handle, uint16_t depth)
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
    if (end) list_add(&end->ends, s);
    list_add(&start->starts, s);
    if (!start->owner && out_gf != f->in_grad_fn) { /* a module returning its input made no node */
        start->owner = s;
        s->refs++;
    }
}

void pb_autograd_span_unref(struct pb_bspan *s) { span_unref(s); }

void pb_autograd_set_queue_callback(PyObject *qc) { Py_XSETREF(queue_callback, qc); }

int pb_autograd_in_pass(void)
{
    return pb_autograd_pass_active || (pb_autograd_ext && pb_autograd_ext->pass_running());
}

void pb_autograd_pause(void)
{
    if (pb_autograd_ext && !pb_autograd_pass_active) { /* replayed by ext_replay */
        pb_autograd_ext->mark(EXT_PAUSE, pb_now_ns());
        pb_autograd_paused = 1;
        return;
    }
    int64_t now = pb_now_ns();
    sweep(now);
    pb_autograd_paused = 1;
    pause_start_ns = now;
}

void pb_autograd_resume(void)
{
    if (pb_autograd_ext && !pb_autograd_pass_active) {
        pb_autograd_ext->mark(EXT_RESUME, pb_now_ns());
        pb_autograd_paused = 0;
        return;
    }
    int64_t t = pb_now_ns();
    pb_autograd_paused = 0;
    pass_paused_ns += t - pause_start_ns;
    last_event_ns = t;
}

void pb_autograd_frame_begin(pb_frame *f, pb_frame *up)
{
    if ((f->span = span_new())) {
        f->span->refs = 1; /* the frame's */
        f->span->parent = up ? up->span : NULL;
        if (f->span->parent) f->span->parent->refs++;
    }
}

void pb_autograd_probe_root(PyObject *gf, uint64_t handle)
{
    if (!probe_for(gf, handle)) PyErr_Clear();
}

void pb_autograd_load_ext(int record_backward)
{
    const pb_autograd_api *a = backward_done_fn ? pb_autograd_ext_open(record_backward) : NULL;
    if (a) {
        a->set_pass_end(backward_done_fn);
        a->reset();
    }
    pb_autograd_ext = a;
}

void pb_autograd_step_end(void)
{
    if (pb_autograd_paused) return;
    pb_autograd_abandon();
    /* Python-level probes while the extension is built in the background: at a step boundary,
     * with no pass and no probed node left, switch to it once it is there. */
    if (pb_autograd_ext_built()) {
        int64_t step = pb_step_current();
        pb_autograd_load_ext(1);
        if (pb_autograd_ext) pb_autograd_ext_in_use_from(step);
    }
}

void pb_autograd_reset(void)
{
    pb_autograd_abandon();
    node_map_free();
    pb_autograd_paused = 0;
    backward_done_ns = 0;
    pb_autograd_ext_forget_build();
    Py_CLEAR(queue_callback);
}

int pb_autograd_ready_types(void)
{
    if (PyType_Ready(&probe_type)) return -1;
    if (!str_register_prehook && !(str_register_prehook = PyUnicode_InternFromString("register_prehook"))) return -1;
    if (!backward_done_fn && !(backward_done_fn = pb_wrap_function(&backward_done_def))) return -1;
    if (!backward_synced_fn && !(backward_synced_fn = pb_wrap_function(&backward_synced_def))) return -1;
    return 0;
}
