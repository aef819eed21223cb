/*
 * pylayout.h - where the fields that pystack.c reads sit in a Python process's memory.
 *
 * One pb_pylayout per CPython minor version: the byte offsets of the fields of the runtime,
 * interpreter, thread state, frame, code, str and bytes objects that the stack walk reads, and
 * of the dicts that hold a Thread object's name (3.11+).
 * 3.9 to 3.12 are taken with offsetof() from copies of that version's own structs
 * (cpython_layouts.h); 3.13 describes itself in _Py_DebugOffsets at the start of _PyRuntime,
 * read from the target and turned into a pb_pylayout here. All of them assume an LP64 target
 * of the same architecture as this program (x86_64 or aarch64: the layouts do not differ).
 * Also here: the one glibc offset the walk needs (3.9/3.10 keep no kernel thread id).
 */
#ifndef PB_REMOTE_PYLAYOUT_H
#define PB_REMOTE_PYLAYOUT_H

#include <stdint.h>

enum pb_pylayout_gil {
    PB_GIL_IN_RUNTIME,       /* 3.9 to 3.11: runtime.ceval.gil */
    PB_GIL_POINTER_IN_INTERP, /* 3.12: interp.ceval.gil is a pointer to it */
    PB_GIL_IN_INTERP,        /* 3.13: the debug offsets give locked/holder from the interp */
};

enum pb_pylayout_lines {
    PB_LINES_LOCATIONS,      /* 3.11+: co_linetable, Objects/locations.md */
    PB_LINES_LNOTAB,         /* 3.9: co_lnotab */
    PB_LINES_310,            /* 3.10: co_linetable of PEP 626 */
};

enum pb_pylayout_names {     /* how a Thread object's managed dict is found (pystack.c) */
    PB_NAMES_NONE, PB_NAMES_311, PB_NAMES_312, PB_NAMES_313,
};

#define PB_PYLAYOUT_OWNER_NONE 255

/* Byte offsets of the fields the walk reads, for one CPython minor version. */
typedef struct pb_pylayout {
    uint64_t runtime_interpreters_head;
    uint64_t interp_next, interp_threads_head;
    enum pb_pylayout_gil gil_kind;
    uint64_t gil_base;                /* runtime/interp offset of the gil (or of its pointer) */
    uint64_t gil_locked, gil_holder;  /* offsets inside the gil state */
    uint64_t tstate_next, tstate_thread_id, tstate_native_id; /* native: 0 = none (3.9/3.10) */
    int has_cframe;                   /* 3.11/3.12: the current frame hangs off tstate.cframe */
    uint64_t tstate_frame;            /* tstate.frame (3.9/3.10), .cframe (3.11/3.12) or
                                       * .current_frame (3.13) */
    uint64_t cframe_current_frame;
    uint64_t frame_code, frame_previous, frame_instr, frame_owner;
    unsigned owner_cstack;            /* PB_PYLAYOUT_OWNER_NONE where no such frames exist */
    uint64_t code_filename, code_qualname, code_firstlineno, code_linetable;
    uint64_t code_adaptive;           /* 3.11+: co_code_adaptive; 3.9/3.10: the bytes of the
                                       * code object read (up to the line table) */
    enum pb_pylayout_lines lines;
    int legacy;          /* 3.9/3.10: PyFrameObject chain, f_lasti (int) instead of a pointer */
    int lasti_units;     /* 3.10: f_lasti counts 2-byte code units; 3.9: bytes */
    uint64_t unicode_state, unicode_length, ascii_size, compact_size;
    uint64_t bytes_size, bytes_sval;
    enum pb_pylayout_names names;
    uint64_t frame_localsplus, type_flags, heaptype_cached_keys;
    /* Reading a Thread object's attributes (names != PB_NAMES_NONE: 3.11+; 0 elsewhere). */
    uint64_t object_type;             /* PyObject.ob_type */
    uint64_t managed_dict_before;     /* bytes before the object: its dict (3.12: dict or
                                       * values, tagged) */
    uint64_t managed_values_before;   /* 3.11: bytes before the object: its values pointer */
    uint64_t inline_values;           /* 3.13: PyDictValues start this far into the object */
    uint64_t values_valid, values_array; /* PyDictValues: valid flag (3.13), values[] */
    uint64_t dict_keys, dict_values;  /* PyDictObject.ma_keys, ma_values */
    struct pb_pylayout_keys {         /* PyDictKeysObject and its entries */
        uint64_t log2_index_bytes, kind, nentries, indices;
        uint64_t entry_size, entry_key, entry_value;          /* PyDictKeyEntry (kind 0) */
        uint64_t unicode_entry_size, unicode_entry_key, unicode_entry_value; /* kinds 1, 2 */
    } keys;
} pb_pylayout;

/* The layout of CPython 3.<minor> for 9 <= minor <= 12, or NULL (3.13 and later: see below).
 * [any thread] */
const pb_pylayout *pb_pylayout_get(unsigned major, unsigned minor);

/* _Py_DebugOffsets of 3.13 (Include/internal/pycore_runtime.h, v3.13.0): the first bytes of
 * _PyRuntime, every field a uint64_t, read from the target as they are. */
typedef struct pb_pylayout_debug_offsets_313 {
    char cookie[8];  /* "xdebugpy" */
    uint64_t version, free_threaded;
    struct { uint64_t size, finalizing, interpreters_head; } runtime_state;
    struct {
        uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins,
            ceval_gil, gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked,
            gil_runtime_state_holder;
    } interpreter_state;
    struct {
        uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id,
            datastack_chunk, status;
    } thread_state;
    struct { uint64_t size, previous, executable, instr_ptr, localsplus, owner; } frame;
    struct {
        uint64_t size, filename, name, qualname, linetable, firstlineno, argcount,
            localsplusnames, localspluskinds, co_code_adaptive;
    } code_object;
    struct { uint64_t size, ob_type; } pyobject;
    struct { uint64_t size, tp_name, tp_repr, tp_flags; } type_object;
    struct { uint64_t size, ob_item, ob_size; } tuple_object, list_object;
    struct { uint64_t size, ma_keys, ma_values; } dict_object;
    struct { uint64_t size, ob_fval; } float_object;
    struct { uint64_t size, lv_tag, ob_digit; } long_object;
    struct { uint64_t size, ob_size, ob_sval; } bytes_object;
    struct { uint64_t size, state, length, asciiobject_size; } unicode_object;
    struct { uint64_t size, collecting; } gc;
} pb_pylayout_debug_offsets_313;

/* Fills *l from the debug offsets d of a 3.13 target (both borrowed). [any thread] */
void pb_pylayout_from_debug_offsets(const pb_pylayout_debug_offsets_313 *d, pb_pylayout *l);

/* The offset of the kernel thread id (`tid`) inside glibc's struct pthread, where a
 * pthread_t (3.9/3.10's PyThreadState.thread_id) points; -1 on an architecture whose offset
 * is not known here (all but x86_64). See pylayout.c for what it depends on. [any thread] */
int64_t pb_pylayout_pthread_tid_offset(void);

/* The name of the architecture this program was built for ("x86_64", "aarch64", ...). */
const char *pb_pylayout_arch(void);

#endif
