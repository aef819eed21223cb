/*
 * torch_names.c - which name a module or an optimizer gets in python.torch_trace: the module
 * address -> interned names map, and the naming of models and optimizers in a program with
 * several.
 *
 * Runs when a module is first seen (pb_torch_discover, the slow path of a module call:
 * torch_hooks.c's enter() looks the map up inline, torch_state.h) and when an optimizer is
 * first named, never otherwise per call. Names are found once per model by walking
 * root.named_modules() the first time a root module runs; a weakref callback forgets modules
 * that die. The map is pb_torch's (torch_state.h): this file inserts, the hooks look up, a
 * remove clears (pb_torch_state_reset). Calls nothing of the hooks. Everything here runs with
 * the GIL held.
 */
#include "torch_names.h"

#include "collect.h"
#include "intern.h"
#include "torch_state.h"
#include "wrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static PyObject *str_named_modules;

/* ---- module address -> interned names ---- */

static PyObject *module_died(PyObject *self, PyObject *wr);
static PyMethodDef died_def = {"_module_died", (PyCFunction)module_died, METH_O, NULL};
static PyObject *died_fn;

int pb_torch_names_ready(void)
{
    str_named_modules = PyUnicode_InternFromString("named_modules");
    died_fn = pb_wrap_function(&died_def);
    return str_named_modules && died_fn ? 0 : -1;
}

static int map_grow(void)
{
    size_t ncap = pb_torch.map_cap ? pb_torch.map_cap * 2 : 1024;
    pb_mod_entry *n = calloc(ncap, sizeof *n);
    if (!n) return -1;
    for (size_t j = 0; j < pb_torch.map_cap; j++) {
        pb_mod_entry *e = &pb_torch.map[j];
        if (e->key == NULL || e->key == PB_MOD_TOMB) continue;
        size_t i = pb_hash_ptr(e->key) & (ncap - 1);
        while (n[i].key) i = (i + 1) & (ncap - 1);
        n[i] = *e;
    }
    size_t live = 0;
    for (size_t j = 0; j < ncap; j++) live += n[j].key != NULL;
    free(pb_torch.map);
    pb_torch.map = n;
    pb_torch.map_cap = ncap;
    pb_torch.map_used = live;
    return 0;
}

/* Inserts key with names; takes a weakref so the entry goes when the module dies. */
static pb_mod_entry *map_insert(PyObject *key, uint32_t name, uint32_t type)
{
    if ((pb_torch.map_used + 1) * 2 > pb_torch.map_cap && map_grow()) return NULL;
    PyObject *wr = PyWeakref_NewRef(key, died_fn);
    if (!wr) {
        PyErr_Clear(); /* not weak-referenceable: name it on every call instead of caching */
        return NULL;
    }
    size_t mask = pb_torch.map_cap - 1, i = pb_hash_ptr(key) & mask;
    while (pb_torch.map[i].key && pb_torch.map[i].key != PB_MOD_TOMB) i = (i + 1) & mask;
    if (pb_torch.map[i].key == NULL) pb_torch.map_used++;
    pb_torch.map[i].key = key;
    pb_torch.map[i].weakref = wr;
    pb_torch.map[i].name = name;
    pb_torch.map[i].type = type;
    pb_torch.map[i].layer_pending = (uint8_t)pb_collect_is_layer(key);
    pb_torch.map[i].provisional = 0;
    pb_torch.map[i].tree_root = 0;
    pb_torch.map[i].prefix = 0;
    return &pb_torch.map[i];
}

static PyObject *module_died(PyObject *self, PyObject *wr)
{
    for (size_t j = 0; j < pb_torch.map_cap; j++) {
        if (pb_torch.map[j].key != NULL && pb_torch.map[j].key != PB_MOD_TOMB && pb_torch.map[j].weakref == wr) {
            pb_torch.map[j].key = PB_MOD_TOMB;
            pb_torch.map[j].weakref = NULL;
            Py_DECREF(wr);
            break;
        }
    }
    Py_RETURN_NONE;
}

/* ---- names of models and optimizers in a program with several ---- */

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
            found = PyUnicode_CompareWithASCIIString(holder, "self") == 0 ? pb_torch_new_ref(k)
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
            else if (pass == 1 && v == obj && !is_self) found = pb_torch_new_ref(key);
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
    if (pb_torch.ntrees++ == 0) return 0;
    uint32_t id = user_name_of(root);
    if (id) return id;
    char text[160];
    snprintf(text, sizeof text, "%s#%d", pb_torch_class_name(root), pb_torch.ntrees);
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
    pb_mod_entry *re = pb_torch_map_find(root);
    int known = re && re->tree_root;
    uint32_t prefix = known ? re->prefix : 0;
    if (!known && n > 1) {
        int inherited = 0;
        for (Py_ssize_t i = 1; i < n && !inherited; i++) {
            PyObject *item = PyList_GET_ITEM(items, i);
            pb_mod_entry *e = PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2 ? pb_torch_map_find(PyTuple_GET_ITEM(item, 1))
                                                                                 : NULL;
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
        pb_mod_entry *have = pb_torch_map_find(mod);
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
            name = len ? pb_intern(s, (size_t)len) : pb_intern_cstr(pb_torch_class_name(mod));
        }
        if (!have) {
            pb_mod_entry *e = map_insert(mod, name, pb_intern_cstr(pb_torch_class_name(mod)));
            if (e) e->provisional = (uint8_t)provisional;
        } else {
            have->name = name;
            have->provisional = (uint8_t)provisional;
            if (mod == pb_torch.primary_root) { /* it was never the model's root */
                pb_torch.primary_root = NULL;
                pb_torch.primary_ran = 0;
            }
        }
    }
    if (n > 1 && (re = pb_torch_map_find(root))) {
        re->tree_root = 1;
        re->prefix = prefix;
    }
fail:
    if (PyErr_Occurred()) PyErr_Clear(); /* a module whose named_modules() fails: fall back below */
    Py_XDECREF(items);
    Py_XDECREF(all);
}

/* Slow path: a module seen for the first time. [GIL held] */
pb_mod_entry *pb_torch_discover(PyObject *mod, pb_tstate *ts, pb_mod_entry *fallback)
{
    PyObject *root = ts->depth ? ts->stack[0].module : mod;
    pb_mod_entry *re = ts->depth ? pb_torch_map_find(root) : NULL;
    name_tree(root, ts->depth == 0 || !re || re->provisional);
    pb_mod_entry *e = pb_torch_map_find(mod);
    if (e) return e;
    /* Called inside a model but not part of its tree (a module held elsewhere): class name. */
    uint32_t type = pb_intern_cstr(pb_torch_class_name(mod));
    e = map_insert(mod, type, type);
    if (e) return e;
    fallback->name = fallback->type = type;
    fallback->layer_pending = 0;
    return fallback;
}

/* An optimizer's name in step rows: its class for the program's first (`Adam`), for later ones
 * the variable holding it (`optimizerD`), else class and ordinal (`Adam#2`). Found once per
 * optimizer and kept in the module map (optimizers are weakly referenceable too). [GIL held] */
uint32_t pb_torch_optimizer_name(PyObject *opt, uint32_t type)
{
    pb_mod_entry *e = pb_torch_map_find(opt);
    if (e) return e->name;
    uint32_t name = type;
    if (pb_torch.noptimizers++ > 0 && !(name = user_name_of(opt))) {
        char text[160];
        snprintf(text, sizeof text, "%s#%d", pb_torch_class_name(opt), pb_torch.noptimizers);
        name = pb_intern_cstr(text);
    }
    if ((e = map_insert(opt, name, type))) e->layer_pending = 0;
    return name;
}
