/*
 * generate.h - generations: a Hugging Face transformers GenerationMixin.generate() call and the
 * model forwards inside it, as python.generations and python.tokens rows (collect/generations.h).
 *
 * The wrapper of generate() (torch_hooks.c's pb_torch_generate, installed by torch_install.c when
 * transformers.generation.utils is imported) calls pb_generate_begin before the call and
 * pb_generate_end after it; the root forwards that end on that thread meanwhile are reported by
 * leave() through pb_generate_forward. State is per thread (two threads generating at once keep
 * their own), and only the outermost generate() of a thread records (a wrapper model's generate
 * calling its inner model's). [GIL held]
 */
#ifndef PB_AGENT_GENERATE_H
#define PB_AGENT_GENERATE_H

#include <Python.h>
#include <stdint.h>

/* Whether this thread is inside a generate() call. [GIL held] */
int pb_generate_active(void);

/* Tokens this thread's last outermost generation made (new tokens x batch size), or INT64_MIN
 * when either is unknown. */
int64_t pb_generate_made(void);

/* A generate(self, ...) call begins: args/nargsf/kwnames as the wrapper got them (borrowed).
 * Returns 1 when it is this thread's outermost (the one that records), else 0. */
int pb_generate_begin(PyObject *const *args, size_t nargsf, PyObject *kwnames);

/* A root module forward of this thread returned `output` (borrowed; NULL: it raised) and ran
 * from start_ns to end_ns, inside a generate() call. */
void pb_generate_forward(PyObject *output, int64_t start_ns, int64_t end_ns);

/* The call pb_generate_begin saw returned `result` (borrowed; NULL: it raised, nothing pushed);
 * `self` is the model it was called on. Pairs with every pb_generate_begin. The Python error
 * state is kept. */
void pb_generate_end(PyObject *self, PyObject *result);

#endif
