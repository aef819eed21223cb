/*
 * torch_state.h - the state of the torch hooks, shared by their three files: torch_hooks.c (the
 * hooks, the hot path), torch_names.c (the module address -> names map and the naming of models
 * and optimizers) and torch_install.c (install and remove). Nothing else includes it.
 *
 * One struct, pb_torch (torch_state.c), written under the GIL only (torch calls the hooks from
 * Python; install and remove run from Python too), so it needs no lock; other threads read none
 * of it (they read copies: pb_torch_detail). Each field's comment says which file writes it.
 * pb_torch_state_reset() is the one reset: what a remove forgets; a fork child only stops
 * recording (pb_torch_hooks_disable) and keeps it. The map lookup is inline here, so a module
 * call pays for it what it paid when all of this was one file.
 */
#ifndef PB_AGENT_TORCH_STATE_H
#define PB_AGENT_TORCH_STATE_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "detail.h"
#include "frames.h"
#include "step.h"

/* One module (or optimizer) the map knows: its interned names. */
typedef struct pb_mod_entry {
    PyObject *key; /* NULL = empty, PB_MOD_TOMB = deleted */
    PyObject *weakref; /* owned */
    uint32_t name, type;
    uint8_t layer_pending; /* a Linear/convolution whose python.layers row is not written yet */
    uint8_t provisional;   /* named relative to a module first seen outside any other: renamed
                            * if that module turns out to be inside a bigger tree */
    uint8_t tree_root;     /* the root of a named tree with children (a model) */
    uint32_t prefix;       /* tree roots: what its tree's names begin with (0: nothing) */
} pb_mod_entry;

#define PB_MOD_TOMB ((PyObject *)1)

typedef struct pb_torch_state {
    /* module address -> interned names: inserted by torch_names.c, looked up by the hooks
     * (pb_torch_map_find), cleared by pb_torch_state_reset */
    pb_mod_entry *map;
    size_t map_cap, map_used; /* used counts tombstones */
    int ntrees;      /* models named so far (roots with children; torch_names.c) */
    int noptimizers; /* optimizers named so far (torch_names.c) */

    /* where steps end: written by torch_hooks.c (and torch_names.c's name_tree, which forgets a
     * primary_root that was never a model's root) */
    int training_latched;         /* an optimizer step has been seen */
    int evaluating;               /* training_latched was dropped for an evaluation stretch */
    int64_t nograd_forwards;      /* root forwards of primary_root under no_grad since the last
                                     optimizer step (counted while training_latched) */
    int64_t nograd_per_optimizer; /* the most of them any optimizer step has had */
    int nograd_learned;           /* nograd_per_optimizer was measured over a whole optimizer step */
    PyObject *primary_root;       /* compared by address only, never dereferenced */
    int primary_ran;

    /* set by install (torch_install.c), read by the hooks; kept across a remove */
    PyTypeObject *tensor_type;  /* torch._C.TensorBase */
    PyObject *is_grad_enabled;  /* torch._C.is_grad_enabled */
    PyObject *str_grad_fn;
    int record_backward;        /* PROBING_BACKWARD */
    pb_detail detail_policy;    /* then advanced by the hooks at each step boundary */
    int detail;                 /* the current step records rows (detail.h) */
    int detail_measured;        /* no capture ran in the current step: it counts for the policy */
} pb_torch_state;

extern pb_torch_state pb_torch PB_STEP_HIDDEN;

/* Forgets every module name (the map, the model and optimizer counts) and where steps end
 * (pb_torch_hooks_remove). [GIL held] */
void pb_torch_state_reset(void);

static inline pb_mod_entry *pb_torch_map_find(PyObject *key)
{
    if (!pb_torch.map) return NULL;
    size_t mask = pb_torch.map_cap - 1, i = pb_hash_ptr(key) & mask;
    for (;;) {
        pb_mod_entry *e = &pb_torch.map[i];
        if (e->key == key) return e;
        if (e->key == NULL) return NULL;
        i = (i + 1) & mask;
    }
}

static inline const char *pb_torch_class_name(PyObject *o)
{
    const char *n = Py_TYPE(o)->tp_name;
    const char *dot = strrchr(n, '.');
    return dot ? dot + 1 : n;
}

static inline PyObject *pb_torch_new_ref(PyObject *o) /* Py_NewRef, which Python 3.9 lacks */
{
    Py_INCREF(o);
    return o;
}

#endif
