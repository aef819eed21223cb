/*
 * pystack.h - the Python stacks of every thread of another process, read from outside.
 *
 * How: find _PyRuntime (and Py_Version) in libpython or the python executable mapped by the
 * target (remote.h), pick the layout of the interpreter's structures for its version, then walk
 * interpreters -> thread states -> interpreter frames (PyFrameObjects on 3.9/3.10) -> code
 * objects with process_vm_readv.
 * CPython 3.13 describes its own layout in _Py_DebugOffsets at the start of _PyRuntime (cookie
 * "xdebugpy"); 3.9 to 3.12 use offsets taken with offsetof() from copies of their own structs
 * (pylayout.h, cpython_layouts.h), for LP64 targets (x86_64, aarch64). Line numbers come
 * from the code object's location table (co_linetable, Objects/locations.md) and the frame's
 * current instruction.
 * The target is not stopped: a thread that runs while it is read may show a torn stack; one
 * that waits (a lock, I/O) or holds the GIL in C code shows exactly where it is.
 */
#ifndef PB_REMOTE_PYSTACK_H
#define PB_REMOTE_PYSTACK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Errors besides negative errno values. */
enum {
    PB_PYSTACK_ENOTPYTHON = -20001,  /* no _PyRuntime in any mapped file */
    PB_PYSTACK_EVERSION = -20002,    /* a CPython this version cannot read */
    PB_PYSTACK_ENOTREADY = -20003,   /* interpreter not initialised or finalising */
};

#define PB_PYSTACK_SUPPORTED "3.9 to 3.13"

typedef struct pb_pyframe {
    char *function; /* co_qualname (malloc'ed) */
    char *file;     /* co_filename (malloc'ed) */
    int line;       /* 0 when unknown */
} pb_pyframe;

typedef struct pb_pythread {
    uint64_t thread_id;      /* threading.get_ident() */
    uint64_t native_id;      /* the kernel's thread id (threading.get_native_id()) */
    char name[32];           /* /proc/<pid>/task/<tid>/comm, "" when unknown */
    char python_name[128];   /* threading's Thread.name (3.11+), "" when not read (the main
                              * thread, a thread threading did not start, 3.9/3.10) */
    int holds_gil;           /* 1 when this thread holds the GIL right now */
    int truncated;           /* 1 when the walk stopped early (unreadable frame, too deep) */
    pb_pyframe *frames;      /* innermost first */
    int frame_count;
} pb_pythread;

typedef struct pb_pystack {
    pid_t pid;
    char python_version[32]; /* "3.11.7" */
    char library[4096];      /* the file that holds _PyRuntime */
    char note[256];          /* a sentence about what was not read though the stacks were
                              * (native thread ids of 3.9/3.10 off x86_64); "" normally */
    pb_pythread *threads;
    int thread_count;
} pb_pystack;

/* Reads the Python stacks of every thread of pid. On success returns 0 and *out (caller frees
 * with pb_pystack_free). On failure returns a negative errno (-ESRCH: no such process, -EPERM /
 * -EACCES: not allowed to read it) or PB_PYSTACK_E*, and writes a sentence about it into why
 * (may be empty). */
int pb_pystack_read(pid_t pid, pb_pystack **out, char *why, size_t why_len);

/* Frees what pb_pystack_read returned. Accepts NULL. */
void pb_pystack_free(pb_pystack *s);

/* Decodes a CPython 3.11+ location table (borrowed, len bytes) starting at first_line and
 * returns the line of the instruction at code-unit index instr (0 when it has none).
 * Exposed for the unit test. [any thread] */
int pb_pystack_line_311(const uint8_t *table, size_t len, int first_line, int64_t instr);

/* The same for CPython 3.9's co_lnotab and 3.10's co_linetable, at byte offset addr of the
 * bytecode (3.9: f_lasti; 3.10: f_lasti * 2). Exposed for the unit test. */
int pb_pystack_line_lnotab(const uint8_t *table, size_t len, int first_line, int64_t addr);
int pb_pystack_line_310(const uint8_t *table, size_t len, int first_line, int64_t addr);

#endif
