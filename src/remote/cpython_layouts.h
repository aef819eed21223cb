/*
 * cpython_layouts.h - copies of the CPython structures that pystack.c reads, per version.
 *
 * Only pylayout.c includes this file: it takes the byte offsets of the fields the walk reads
 * with offsetof() on these copies (as Austin does), so no offset is a number typed by hand.
 * Each struct is CPython's own definition of that version, in field order and with the same
 * C types, cut after the last field that is read (what follows does not move what comes
 * before). Rules of the copy:
 *   - CPython's names keep their spelling; the struct tag gets a version prefix (py39_ ... ).
 *   - Pointers to other CPython types are `void *` (the same size); function pointer fields
 *     are `void *` as well (LP64 targets only, asserted in pylayout.c).
 *   - Where a run of fields is not read and is all function pointers (PyNumberMethods and
 *     friends), it is written as an array of that many `void *`, its first and last names in
 *     the comment.
 *   - _Py_atomic_int / _Py_atomic_address are structs of one int / uintptr_t (pycore_atomic.h);
 *     bitfield blocks declared as `unsigned int x:1, ...` are one `unsigned int`.
 * Sources: the struct definitions of these CPython tags and files (the fields read do not
 * move within a minor version):
 *   3.9  v3.9.18   Include/internal/pycore_runtime.h, pycore_interp.h, pycore_gil.h,
 *                  Include/cpython/pystate.h, Include/cpython/frameobject.h,
 *                  Include/cpython/code.h, Include/cpython/unicodeobject.h, bytesobject.h
 *   3.10 v3.10.13  the same files
 *   3.11 v3.11.7   the same, with Include/internal/pycore_frame.h (_PyInterpreterFrame),
 *                  Include/cpython/object.h (PyTypeObject, PyHeapTypeObject)
 *   3.12 v3.12.1   the same as 3.11, with Include/internal/pycore_gc.h and pycore_ceval_state.h
 *   3.13 v3.13.0   PyTypeObject's tail only: the rest comes from the target's _Py_DebugOffsets
 *   dicts          3.11 to 3.13 (the keys, entries, values and what precedes a managed-dict
 *                  object): see their section at the end, copied from pyenv's installed headers
 * How they were made: 3.11 from the 3.11.2 headers of Debian's python3.11-dev; 3.9, 3.10 and
 * 3.12 from the definitions bindgen generated from CPython 3.9.5, 3.10.0 and 3.12.0 (py-spy's
 * src/python_bindings), field for field. tests/unit/test_pylayout.c checks that they give the
 * offsets measured before for the tags above, and test_pylayout_live.py reads live objects of
 * pyenv's 3.9.18, 3.10.13, 3.11.7 and 3.12.1 (where installed) at them.
 */
#ifndef PB_REMOTE_CPYTHON_LAYOUTS_H
#define PB_REMOTE_CPYTHON_LAYOUTS_H

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------- shared by 3.9 to 3.12 (object.h) */

typedef struct py_object {          /* PyObject: Include/object.h (non-debug build) */
    intptr_t ob_refcnt;             /* Py_ssize_t (3.12: a union of the same size) */
    void *ob_type;
} py_object;

typedef struct py_var_object {      /* PyVarObject */
    py_object ob_base;
    intptr_t ob_size;
} py_var_object;

typedef struct py_bytes_object {    /* PyBytesObject: Include/cpython/bytesobject.h */
    py_var_object ob_base;
    intptr_t ob_shash;
    char ob_sval[1];
} py_bytes_object;

/* PyASCIIObject / PyCompactUnicodeObject of 3.9 to 3.11 (Include/cpython/unicodeobject.h):
 * the str's characters follow the struct, right after PyASCIIObject when it is ASCII. */
typedef struct py39_ascii_object {
    py_object ob_base;
    intptr_t length;
    intptr_t hash;
    unsigned int state;             /* interned:2, kind:3, compact:1, ascii:1, ready:1 */
    void *wstr;                     /* wchar_t *; gone in 3.12 */
} py39_ascii_object;

typedef struct py39_compact_unicode_object {
    py39_ascii_object _base;
    intptr_t utf8_length;
    char *utf8;
    intptr_t wstr_length;
} py39_compact_unicode_object;

/* PyTypeObject of 3.9 to 3.11 (Include/cpython/object.h, struct _typeobject). */
#define PY_TYPEOBJECT_FIELDS                                                                   \
    py_var_object ob_base;                                                                     \
    const char *tp_name;                                                                       \
    intptr_t tp_basicsize, tp_itemsize;                                                        \
    void *tp_dealloc;                                                                          \
    intptr_t tp_vectorcall_offset;                                                             \
    void *tp_getattr, *tp_setattr, *tp_as_async, *tp_repr, *tp_as_number, *tp_as_sequence,    \
        *tp_as_mapping, *tp_hash, *tp_call, *tp_str, *tp_getattro, *tp_setattro,               \
        *tp_as_buffer;                                                                         \
    unsigned long tp_flags;                                                                    \
    const char *tp_doc;                                                                        \
    void *tp_traverse, *tp_clear, *tp_richcompare;                                             \
    intptr_t tp_weaklistoffset;                                                                \
    void *tp_iter, *tp_iternext, *tp_methods, *tp_members, *tp_getset, *tp_base, *tp_dict,     \
        *tp_descr_get, *tp_descr_set;                                                          \
    intptr_t tp_dictoffset;                                                                    \
    void *tp_init, *tp_alloc, *tp_new, *tp_free, *tp_is_gc, *tp_bases, *tp_mro, *tp_cache,     \
        *tp_subclasses, *tp_weaklist, *tp_del;                                                 \
    unsigned int tp_version_tag;                                                               \
    void *tp_finalize, *tp_vectorcall

typedef struct py311_type_object {
    PY_TYPEOBJECT_FIELDS;
} py311_type_object;

typedef struct py312_type_object {  /* 3.12 adds tp_watched */
    PY_TYPEOBJECT_FIELDS;
    unsigned char tp_watched;
} py312_type_object;

typedef struct py313_type_object {  /* 3.13 adds tp_versions_used (in what was padding) */
    PY_TYPEOBJECT_FIELDS;
    unsigned char tp_watched;
    uint16_t tp_versions_used;
} py313_type_object;

/* PyHeapTypeObject (Include/cpython/object.h, struct _heaptypeobject): the method tables are
 * embedded, so ht_cached_keys moves with them and with the type object. */
#define PY_HEAPTYPE_FIELDS(type_struct)                                                        \
    type_struct ht_type;                                                                       \
    void *as_async[4];    /* PyAsyncMethods: am_await .. am_send */                            \
    void *as_number[36];  /* PyNumberMethods: nb_add .. nb_inplace_matrix_multiply */         \
    void *as_mapping[3];  /* PyMappingMethods: mp_length .. mp_ass_subscript */               \
    void *as_sequence[10]; /* PySequenceMethods: sq_length .. sq_inplace_repeat */            \
    void *as_buffer[2];   /* PyBufferProcs: bf_getbuffer, bf_releasebuffer */                 \
    void *ht_name, *ht_slots, *ht_qualname;                                                    \
    void *ht_cached_keys  /* struct _dictkeysobject *: the shared keys of split dicts */

typedef struct py311_heap_type_object {
    PY_HEAPTYPE_FIELDS(py311_type_object);
} py311_heap_type_object;
typedef struct py312_heap_type_object {
    PY_HEAPTYPE_FIELDS(py312_type_object);
} py312_heap_type_object;
typedef struct py313_heap_type_object {
    PY_HEAPTYPE_FIELDS(py313_type_object);
} py313_heap_type_object;

/* The GIL (Include/internal/pycore_gil.h, 3.9 to 3.12), cut after `locked`. */
typedef struct py39_gil_runtime_state {
    unsigned long interval;
    struct { uintptr_t _value; } last_holder; /* _Py_atomic_address: the PyThreadState * */
    struct { int _value; } locked;            /* _Py_atomic_int */
} py39_gil_runtime_state;

/* _PyErr_StackItem of 3.9 / 3.10 (Include/cpython/pystate.h): embedded in the thread state. */
typedef struct py39_err_stackitem {
    void *exc_type, *exc_value, *exc_traceback, *previous_item;
} py39_err_stackitem;

/* ------------------------------------------------------------------------------- 3.9, 3.10 */

/* _PyRuntimeState of 3.9 and 3.10 (Include/internal/pycore_runtime.h), cut after the GIL. */
typedef struct py39_runtime_state {
    int preinitializing;
    int preinitialized;
    int core_initialized;
    int initialized;
    struct { uintptr_t _value; } _finalizing;
    struct {
        void *mutex;                          /* PyThread_type_lock */
        void *head;                           /* PyInterpreterState *: newest first */
        void *main;
        int64_t next_id;
    } interpreters;
    struct { void *mutex, *head; } xidregistry;
    unsigned long main_thread;
    void *exitfuncs[32];                      /* NEXITFUNCS */
    int nexitfuncs;
    struct {                                  /* struct _ceval_runtime_state */
        struct { int _value; } signals_pending;
        py39_gil_runtime_state gil;
    } ceval;
} py39_runtime_state;

/* PyInterpreterState of 3.9 and 3.10 (Include/internal/pycore_interp.h, struct _is). */
typedef struct py39_interpreter_state {
    void *next;
    void *tstate_head;
} py39_interpreter_state;

/* PyThreadState of 3.9 (Include/cpython/pystate.h, struct _ts), cut after thread_id. */
typedef struct py39_thread_state {
    void *prev, *next, *interp;
    void *frame;                              /* PyFrameObject *: the innermost frame */
    int recursion_depth;
    char overflowed;
    char recursion_critical;
    int stackcheck_counter;
    int tracing;
    int use_tracing;
    void *c_profilefunc, *c_tracefunc, *c_profileobj, *c_traceobj;
    void *curexc_type, *curexc_value, *curexc_traceback;
    py39_err_stackitem exc_state;
    void *exc_info;
    void *dict;
    int gilstate_counter;
    void *async_exc;
    unsigned long thread_id;                  /* pthread_self(): a struct pthread * (glibc) */
} py39_thread_state;

/* PyThreadState of 3.10: recursion_headroom and cframe instead of the 3.9 flags. */
typedef struct py310_thread_state {
    void *prev, *next, *interp;
    void *frame;
    int recursion_depth;
    int recursion_headroom;
    int stackcheck_counter;
    int tracing;
    void *cframe;
    void *c_profilefunc, *c_tracefunc, *c_profileobj, *c_traceobj;
    void *curexc_type, *curexc_value, *curexc_traceback;
    py39_err_stackitem exc_state;
    void *exc_info;
    void *dict;
    int gilstate_counter;
    void *async_exc;
    unsigned long thread_id;
} py310_thread_state;

/* PyFrameObject of 3.9 (Include/cpython/frameobject.h, struct _frame), cut after f_lasti. */
typedef struct py39_frame_object {
    py_var_object ob_base;
    void *f_back, *f_code, *f_builtins, *f_globals, *f_locals;
    void *f_valuestack;
    void *f_stacktop;
    void *f_trace;
    char f_trace_lines;
    char f_trace_opcodes;
    void *f_gen;
    int f_lasti;                              /* bytes into co_code */
    int f_lineno;
} py39_frame_object;

/* PyFrameObject of 3.10: f_stackdepth instead of f_stacktop. */
typedef struct py310_frame_object {
    py_var_object ob_base;
    void *f_back, *f_code, *f_builtins, *f_globals, *f_locals;
    void *f_valuestack;
    void *f_trace;
    int f_stackdepth;
    char f_trace_lines;
    char f_trace_opcodes;
    void *f_gen;
    int f_lasti;                              /* 2-byte code units into co_code */
    int f_lineno;
} py310_frame_object;

/* PyCodeObject of 3.9 and 3.10 (Include/cpython/code.h), cut after the line table; 3.10
 * renamed co_lnotab to co_linetable (another format) in the same place. */
typedef struct py39_code_object {
    py_object ob_base;
    int co_argcount, co_posonlyargcount, co_kwonlyargcount, co_nlocals, co_stacksize,
        co_flags, co_firstlineno;
    void *co_code, *co_consts, *co_names, *co_varnames, *co_freevars, *co_cellvars;
    void *co_cell2arg;                        /* Py_ssize_t * */
    void *co_filename, *co_name;
    void *co_lnotab;                          /* 3.10: co_linetable */
    void *co_zombieframe;
} py39_code_object;

/* -------------------------------------------------------------------------------------- 3.11 */

/* _PyRuntimeState of 3.11 (Include/internal/pycore_runtime.h): 3.9's with `_initialized`
 * first, which moves everything by 4 (8 after alignment). */
typedef struct py311_runtime_state {
    int _initialized;
    int preinitializing;
    int preinitialized;
    int core_initialized;
    int initialized;
    struct { uintptr_t _value; } _finalizing;
    struct {
        void *mutex;
        void *head;
        void *main;
        int64_t next_id;
    } interpreters;
    struct { void *mutex, *head; } xidregistry;
    unsigned long main_thread;
    void *exitfuncs[32];
    int nexitfuncs;
    struct {
        struct { int _value; } signals_pending;
        py39_gil_runtime_state gil;
    } ceval;
} py311_runtime_state;

/* PyInterpreterState of 3.11 (Include/internal/pycore_interp.h). */
typedef struct py311_interpreter_state {
    void *next;
    struct {
        uint64_t next_unique_id;
        void *head;                           /* PyThreadState *: newest first */
        long count;
        size_t stacksize;
    } threads;
} py311_interpreter_state;

/* _PyCFrame of 3.11 (Include/cpython/pystate.h). */
typedef struct py311_cframe {
    uint8_t use_tracing;
    void *current_frame;                      /* struct _PyInterpreterFrame * */
    void *previous;
} py311_cframe;

/* PyThreadState of 3.11 (Include/cpython/pystate.h), cut after native_thread_id. */
typedef struct py311_thread_state {
    void *prev, *next, *interp;
    int _initialized;
    int _static;
    int recursion_remaining;
    int recursion_limit;
    int recursion_headroom;
    int tracing;
    int tracing_what;
    void *cframe;                             /* _PyCFrame * */
    void *c_profilefunc, *c_tracefunc, *c_profileobj, *c_traceobj;
    void *curexc_type, *curexc_value, *curexc_traceback;
    void *exc_info;
    void *dict;
    int gilstate_counter;
    void *async_exc;
    unsigned long thread_id;
    unsigned long native_thread_id;
} py311_thread_state;

/* _PyInterpreterFrame of 3.11 (Include/internal/pycore_frame.h). */
typedef struct py311_interpreter_frame {
    void *f_func, *f_globals, *f_builtins, *f_locals;
    void *f_code;                             /* PyCodeObject * */
    void *frame_obj;
    void *previous;
    void *prev_instr;                         /* _Py_CODEUNIT *, into co_code_adaptive */
    int stacktop;
    _Bool is_entry;
    char owner;
    void *localsplus[1];
} py311_interpreter_frame;

/* PyCodeObject of 3.11 (Include/cpython/code.h, _PyCode_DEF). */
typedef struct py311_code_object {
    py_var_object ob_base;
    void *co_consts, *co_names, *co_exceptiontable;
    int co_flags;
    short co_warmup;
    short _co_linearray_entry_size;
    int co_argcount, co_posonlyargcount, co_kwonlyargcount, co_stacksize, co_firstlineno;
    int co_nlocalsplus, co_nlocals, co_nplaincellvars, co_ncellvars, co_nfreevars;
    void *co_localsplusnames, *co_localspluskinds;
    void *co_filename, *co_name, *co_qualname;
    void *co_linetable;                       /* bytes: the location table */
    void *co_weakreflist;
    void *_co_code;
    char *_co_linearray;
    int _co_firsttraceable;
    void *co_extra;
    char co_code_adaptive[1];
} py311_code_object;

/* -------------------------------------------------------------------------------------- 3.12 */

/* _PyRuntimeState of 3.12 (Include/internal/pycore_runtime.h), cut after interpreters; the
 * GIL moved into the interpreter. */
typedef struct py312_runtime_state {
    int _initialized;
    int preinitializing;
    int preinitialized;
    int core_initialized;
    int initialized;
    struct { uintptr_t _value; } _finalizing;
    struct {
        void *mutex;
        void *head;
        void *main;
        int64_t next_id;
    } interpreters;
} py312_runtime_state;

/* struct _gc_runtime_state of 3.12 (Include/internal/pycore_gc.h): embedded in the
 * interpreter before ceval. */
typedef struct py312_gc_generation {
    struct { uintptr_t _gc_next, _gc_prev; } head; /* PyGC_Head */
    int threshold;
    int count;
} py312_gc_generation;

typedef struct py312_gc_runtime_state {
    void *trash_delete_later;
    int trash_delete_nesting;
    int enabled;
    int debug;
    py312_gc_generation generations[3];       /* NUM_GENERATIONS */
    void *generation0;
    py312_gc_generation permanent_generation;
    struct { intptr_t collections, collected, uncollectable; } generation_stats[3];
    int collecting;
    void *garbage;
    void *callbacks;
    intptr_t long_lived_total;
    intptr_t long_lived_pending;
} py312_gc_runtime_state;

/* PyInterpreterState of 3.12 (Include/internal/pycore_interp.h), cut after ceval.gil. */
typedef struct py312_interpreter_state {
    void *next;
    int64_t id;
    int64_t id_refcount;
    int requires_idref;
    void *id_mutex;
    int _initialized;
    int finalizing;
    uint64_t monitoring_version;
    uint64_t last_restart_version;
    struct {
        uint64_t next_unique_id;
        void *head;
        long count;
        size_t stacksize;
    } threads;
    void *runtime;
    struct { uintptr_t _value; } _finalizing;
    py312_gc_runtime_state gc;
    void *sysdict;
    void *builtins;
    struct {                                  /* struct _ceval_state, pycore_ceval_state.h */
        struct { int _value; } eval_breaker;
        struct { int _value; } gil_drop_request;
        int recursion_limit;
        py39_gil_runtime_state *gil;          /* this interpreter's GIL (own or shared) */
    } ceval;
} py312_interpreter_state;

/* _PyCFrame of 3.12: use_tracing is gone. */
typedef struct py312_cframe {
    void *current_frame;
    void *previous;
} py312_cframe;

/* PyThreadState of 3.12 (Include/cpython/pystate.h), cut after native_thread_id. */
typedef struct py312_thread_state {
    void *prev, *next, *interp;
    unsigned int _status;                     /* initialized:1 .. finalized:1 */
    int py_recursion_remaining;
    int py_recursion_limit;
    int c_recursion_remaining;
    int recursion_headroom;
    int tracing;
    int what_event;
    void *cframe;
    void *c_profilefunc, *c_tracefunc, *c_profileobj, *c_traceobj;
    void *current_exception;
    void *exc_info;
    void *dict;
    int gilstate_counter;
    void *async_exc;
    unsigned long thread_id;
    unsigned long native_thread_id;
} py312_thread_state;

/* _PyInterpreterFrame of 3.12 (Include/internal/pycore_frame.h): f_code and previous first. */
typedef struct py312_interpreter_frame {
    void *f_code;
    void *previous;
    void *f_funcobj, *f_globals, *f_builtins, *f_locals;
    void *frame_obj;
    void *prev_instr;
    int stacktop;
    uint16_t return_offset;
    char owner;
    void *localsplus[1];
} py312_interpreter_frame;

#define PY312_FRAME_OWNED_BY_CSTACK 3         /* enum _frameowner, pycore_frame.h */

/* PyCodeObject of 3.12 (Include/cpython/code.h, _PyCode_DEF). */
typedef struct py312_code_object {
    py_var_object ob_base;
    void *co_consts, *co_names, *co_exceptiontable;
    int co_flags;
    int co_argcount, co_posonlyargcount, co_kwonlyargcount, co_stacksize, co_firstlineno;
    int co_nlocalsplus, co_framesize, co_nlocals, co_ncellvars, co_nfreevars;
    uint32_t co_version;
    void *co_localsplusnames, *co_localspluskinds;
    void *co_filename, *co_name, *co_qualname;
    void *co_linetable;
    void *co_weakreflist;
    void *_co_cached;
    uint64_t _co_instrumentation_version;
    void *_co_monitoring;
    int _co_firsttraceable;
    void *co_extra;
    char co_code_adaptive[1];
} py312_code_object;

/* PyASCIIObject / PyCompactUnicodeObject of 3.12: wstr and wstr_length are gone. */
typedef struct py312_ascii_object {
    py_object ob_base;
    intptr_t length;
    intptr_t hash;
    unsigned int state;                       /* interned:2, kind:3, compact:1, ascii:1, ... */
} py312_ascii_object;

typedef struct py312_compact_unicode_object {
    py312_ascii_object _base;
    intptr_t utf8_length;
    char *utf8;
} py312_compact_unicode_object;

/* ---------------------------------------------- dicts and managed dicts: 3.11, 3.12, 3.13 */

/* Read only to find a Thread object's _name (pystack.c, names != PB_NAMES_NONE); 3.9 and 3.10
 * do not take this path. Copied from the installed headers of pyenv's 3.11.7, 3.12.1 and
 * 3.13.0 (include/python3.X/internal/pycore_dict.h, pycore_object.h, pycore_gc.h,
 * cpython/dictobject.h), which agree with the v3.11.7 / v3.12.1 / v3.13.0 tags. */

typedef struct py_gc_head {         /* PyGC_Head: Include/internal/pycore_gc.h, 3.9 to 3.13 */
    uintptr_t _gc_next, _gc_prev;
} py_gc_head;

/* PyDictKeysObject (struct _dictkeysobject) of 3.11 to 3.13: the same fields in all three
 * (3.13's dk_mutex exists only in free-threaded builds, which are not read). dk_indices holds
 * 1 << dk_log2_index_bytes bytes, then the entries follow in insertion order. */
typedef struct py311_dict_keys_object {
    intptr_t dk_refcnt;
    uint8_t dk_log2_size;
    uint8_t dk_log2_index_bytes;
    uint8_t dk_kind;                /* DICT_KEYS_GENERAL 0, _UNICODE 1, _SPLIT 2 */
    uint32_t dk_version;
    intptr_t dk_usable;
    intptr_t dk_nentries;
    char dk_indices[];
} py311_dict_keys_object;

typedef struct py311_dict_key_entry { /* PyDictKeyEntry: the entries of kind GENERAL */
    intptr_t me_hash;
    void *me_key;
    void *me_value;
} py311_dict_key_entry;

typedef struct py311_dict_unicode_entry { /* PyDictUnicodeEntry: kinds UNICODE and SPLIT */
    void *me_key;
    void *me_value;                 /* unused in a split table: see ma_values */
} py311_dict_unicode_entry;

/* PyDictObject (Include/cpython/dictobject.h) of 3.11 to 3.13 (3.13: ma_version_tag still
 * there, with watcher bits in it). */
typedef struct py311_dict_object {
    py_object ob_base;
    intptr_t ma_used;
    uint64_t ma_version_tag;
    void *ma_keys;                  /* PyDictKeysObject * */
    void *ma_values;                /* PyDictValues *: non-NULL for a split table */
} py311_dict_object;

/* PyDictValues (struct _dictvalues): 3.11 and 3.12 are the array alone; 3.13 puts four bytes
 * (the last says whether inline values are valid) before it. */
typedef struct py311_dict_values {
    void *values[1];
} py311_dict_values;

typedef struct py313_dict_values {
    uint8_t capacity;
    uint8_t size;
    uint8_t embedded;
    uint8_t valid;
    void *values[1];
} py313_dict_values;

/* What a type with Py_TPFLAGS_MANAGED_DICT keeps in front of each object (pycore_object.h;
 * the struct ends where the object starts): CPython writes these as word counts back from the
 * object, here they are the fields before the GC header that every such object has.
 *   3.11 _PyObject_ValuesPointer: obj - 4 words; _PyObject_ManagedDictPointer: obj - 3 words
 *   3.12 _PyObject_DictOrValuesPointer (PyDictOrValues, a dict or a values pointer - 1):
 *        obj - 3 words, after the managed weakref list (MANAGED_WEAKREF_OFFSET, -4 words)
 *   3.13 _PyObject_ManagedDictPointer: MANAGED_DICT_OFFSET, -3 words (not free-threaded); the
 *        values, when valid, are inline after the object head (_PyObject_InlineValues) */
typedef struct py311_managed_preheader {
    void *values;                   /* PyDictValues *, or NULL once a dict is made */
    void *dict;                     /* PyDictObject *, or NULL */
    py_gc_head gc;
} py311_managed_preheader;

typedef struct py312_managed_preheader {
    void *weakreflist;
    void *dict_or_values;           /* PyDictOrValues: tagged, see pystack.c */
    py_gc_head gc;
} py312_managed_preheader;

typedef struct py313_managed_preheader {
    void *weakreflist;
    void *dict;                     /* PyManagedDictPointer */
    py_gc_head gc;
} py313_managed_preheader;

#endif
