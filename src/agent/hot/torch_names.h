/*
 * torch_names.h - which name a module or an optimizer gets in python.torch_trace: the module
 * address -> names map (pb_torch.map, torch_state.h) filled in, and the naming of models and
 * optimizers in a program with several. Called by the hooks (torch_hooks.c) when a module is
 * first seen or an optimizer first named, and by install (torch_install.c). [GIL held]
 */
#ifndef PB_AGENT_TORCH_NAMES_H
#define PB_AGENT_TORCH_NAMES_H

#include <Python.h>
#include <stdint.h>

#include "frames.h"
#include "torch_state.h"

/* Makes what naming needs (an interned string, the weakref callback that forgets a module that
 * died). 0, or -1 with a Python exception set. At install. */
int pb_torch_names_ready(void);

/* The slow path of a module call: a module seen for the first time gets its name (and its
 * model's whole tree too). Never NULL: fallback, filled in, when the module cannot be kept in
 * the map. */
pb_mod_entry *pb_torch_discover(PyObject *mod, pb_tstate *ts, pb_mod_entry *fallback);

/* An optimizer's name in step rows (type: its class, interned), found once per optimizer and
 * kept in the map. */
uint32_t pb_torch_optimizer_name(PyObject *opt, uint32_t type);

#endif
