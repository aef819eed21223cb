/*
 * stacks.h - the Python stack of every thread of a process (and, on request, its native
 * stack), read from outside it: what `probing <pid> backtrace` prints and the MCP server's
 * backtrace tool returns (mcp/tools.c).
 */
#ifndef PB_CLI_STACKS_H
#define PB_CLI_STACKS_H

#include "native.h"
#include "pystack.h"

#include <jansson.h>
#include <stdio.h>

#define PB_STACKS_NATIVE_MAX 256 /* native frames read per thread */

/* The stacks of one process. */
typedef struct pb_stacks {
    pb_pystack *py;          /* the Python threads and their frames */
    pb_native_frame *frames; /* with native: py->thread_count * PB_STACKS_NATIVE_MAX, else NULL */
    int *counts;             /* with native: frames per thread, or a negative errno */
} pb_stacks;

/* Reads the stacks of the process spec names (borrowed: a pid as typed) into st (free with
 * pb_stacks_free), the native ones too when native. Returns 0, or prints why ("probing: ...":
 * not a pid, no such process, not allowed to read it, no libunwind for native) and returns
 * PB_EXIT_USAGE or PB_EXIT_ERROR. A note of the walk (a thread that could not be read whole)
 * is printed on pb_cli_messages() before the caller prints the stacks. [main thread] */
int pb_stacks_read(const char *spec, int native, pb_stacks *st);

/* Frees what st holds (NULL allowed) and zeroes it. */
void pb_stacks_free(pb_stacks *st);

/* Writes st as text (the file header of stacks.c). Returns 0 or -EIO. */
int pb_stacks_text(FILE *out, const pb_stacks *st);

/* st as `backtrace -f json` prints it: {pid, cmdline, python, library, threads: [{native_id,
 * thread_id, name, holds_gil, truncated, frames: [{function, file, line}], state, python_name,
 * main, native or native_error}]}; NULL when out of memory. Caller owns. */
json_t *pb_stacks_json(const pb_stacks *st);

#endif
