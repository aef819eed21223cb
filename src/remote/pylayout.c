/*
 * pylayout.c - the offset table of pystack.c, derived from CPython's structs (see pylayout.h).
 *
 * Every offset of 3.9 to 3.12 below is offsetof() on a copy of that version's struct in
 * cpython_layouts.h, whose comment names the header and tag it was copied from; the unit test
 * (tests/unit/test_pylayout.c) checks them against the numbers used before and, for the
 * interpreter it runs under, against the live objects. Copies are made for LP64 targets built
 * on an LP64 host: a pointer, long and size_t are 8 bytes on both sides.
 */
#include "pylayout.h"

#include "cpython_layouts.h"

#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(void *) == 8 && sizeof(long) == 8,
               "the CPython struct copies describe LP64 targets: build for an LP64 host");
_Static_assert(sizeof(pb_pylayout_debug_offsets_313) == 73 * 8,
               "_Py_DebugOffsets of 3.13 is 73 words");

#define OFF(type, field) ((uint64_t)offsetof(type, field))
/* How far before the object a field of what precedes it sits (the struct ends at the object). */
#define BEFORE(type, field) ((uint64_t)(sizeof(type) - offsetof(type, field)))

/* The dict reading of 3.11 to 3.13: the keys object, its entries and PyDictObject are the same
 * in all three (cpython_layouts.h); 3.13 takes ma_keys / ma_values from the debug offsets. */
#define DICT_KEYS_311                                                                          \
    {                                                                                          \
        .log2_index_bytes = OFF(py311_dict_keys_object, dk_log2_index_bytes),                  \
        .kind = OFF(py311_dict_keys_object, dk_kind),                                          \
        .nentries = OFF(py311_dict_keys_object, dk_nentries),                                  \
        .indices = OFF(py311_dict_keys_object, dk_indices),                                    \
        .entry_size = sizeof(py311_dict_key_entry),                                            \
        .entry_key = OFF(py311_dict_key_entry, me_key),                                        \
        .entry_value = OFF(py311_dict_key_entry, me_value),                                    \
        .unicode_entry_size = sizeof(py311_dict_unicode_entry),                                \
        .unicode_entry_key = OFF(py311_dict_unicode_entry, me_key),                            \
        .unicode_entry_value = OFF(py311_dict_unicode_entry, me_value),                        \
    }

/* 3.9: PyFrameObject chain (f_back, f_code, f_lasti in bytes), co_name (no co_qualname),
 * co_lnotab, no native thread id (read from glibc's struct pthread). */
static const pb_pylayout layout_39 = {
    .runtime_interpreters_head = OFF(py39_runtime_state, interpreters.head),
    .interp_next = OFF(py39_interpreter_state, next),
    .interp_threads_head = OFF(py39_interpreter_state, tstate_head),
    .gil_kind = PB_GIL_IN_RUNTIME,
    .gil_base = OFF(py39_runtime_state, ceval.gil),
    .gil_locked = OFF(py39_gil_runtime_state, locked),
    .gil_holder = OFF(py39_gil_runtime_state, last_holder),
    .tstate_next = OFF(py39_thread_state, next),
    .tstate_thread_id = OFF(py39_thread_state, thread_id),
    .tstate_native_id = 0,
    .has_cframe = 0,
    .tstate_frame = OFF(py39_thread_state, frame),
    .frame_code = OFF(py39_frame_object, f_code),
    .frame_previous = OFF(py39_frame_object, f_back),
    .frame_instr = OFF(py39_frame_object, f_lasti),
    .owner_cstack = PB_PYLAYOUT_OWNER_NONE,
    .code_filename = OFF(py39_code_object, co_filename),
    .code_qualname = OFF(py39_code_object, co_name),
    .code_firstlineno = OFF(py39_code_object, co_firstlineno),
    .code_linetable = OFF(py39_code_object, co_lnotab),
    .code_adaptive = OFF(py39_code_object, co_zombieframe),
    .lines = PB_LINES_LNOTAB, .legacy = 1, .lasti_units = 0,
    .unicode_state = OFF(py39_ascii_object, state),
    .unicode_length = OFF(py39_ascii_object, length),
    .ascii_size = sizeof(py39_ascii_object),
    .compact_size = sizeof(py39_compact_unicode_object),
    .bytes_size = OFF(py_bytes_object, ob_base.ob_size),
    .bytes_sval = OFF(py_bytes_object, ob_sval),
};

/* 3.10: as 3.9, with f_lasti in code units and the PEP 626 line table. */
static const pb_pylayout layout_310 = {
    .runtime_interpreters_head = OFF(py39_runtime_state, interpreters.head),
    .interp_next = OFF(py39_interpreter_state, next),
    .interp_threads_head = OFF(py39_interpreter_state, tstate_head),
    .gil_kind = PB_GIL_IN_RUNTIME,
    .gil_base = OFF(py39_runtime_state, ceval.gil),
    .gil_locked = OFF(py39_gil_runtime_state, locked),
    .gil_holder = OFF(py39_gil_runtime_state, last_holder),
    .tstate_next = OFF(py310_thread_state, next),
    .tstate_thread_id = OFF(py310_thread_state, thread_id),
    .tstate_native_id = 0,
    .has_cframe = 0,
    .tstate_frame = OFF(py310_thread_state, frame),
    .frame_code = OFF(py310_frame_object, f_code),
    .frame_previous = OFF(py310_frame_object, f_back),
    .frame_instr = OFF(py310_frame_object, f_lasti),
    .owner_cstack = PB_PYLAYOUT_OWNER_NONE,
    .code_filename = OFF(py39_code_object, co_filename),
    .code_qualname = OFF(py39_code_object, co_name),
    .code_firstlineno = OFF(py39_code_object, co_firstlineno),
    .code_linetable = OFF(py39_code_object, co_lnotab),
    .code_adaptive = OFF(py39_code_object, co_zombieframe),
    .lines = PB_LINES_310, .legacy = 1, .lasti_units = 1,
    .unicode_state = OFF(py39_ascii_object, state),
    .unicode_length = OFF(py39_ascii_object, length),
    .ascii_size = sizeof(py39_ascii_object),
    .compact_size = sizeof(py39_compact_unicode_object),
    .bytes_size = OFF(py_bytes_object, ob_base.ob_size),
    .bytes_sval = OFF(py_bytes_object, ob_sval),
};

/* 3.11: interpreter frames hang off tstate.cframe; the GIL still sits in the runtime. */
static const pb_pylayout layout_311 = {
    .runtime_interpreters_head = OFF(py311_runtime_state, interpreters.head),
    .interp_next = OFF(py311_interpreter_state, next),
    .interp_threads_head = OFF(py311_interpreter_state, threads.head),
    .gil_kind = PB_GIL_IN_RUNTIME,
    .gil_base = OFF(py311_runtime_state, ceval.gil),
    .gil_locked = OFF(py39_gil_runtime_state, locked),
    .gil_holder = OFF(py39_gil_runtime_state, last_holder),
    .tstate_next = OFF(py311_thread_state, next),
    .tstate_thread_id = OFF(py311_thread_state, thread_id),
    .tstate_native_id = OFF(py311_thread_state, native_thread_id),
    .has_cframe = 1,
    .tstate_frame = OFF(py311_thread_state, cframe),
    .cframe_current_frame = OFF(py311_cframe, current_frame),
    .frame_code = OFF(py311_interpreter_frame, f_code),
    .frame_previous = OFF(py311_interpreter_frame, previous),
    .frame_instr = OFF(py311_interpreter_frame, prev_instr),
    .frame_owner = OFF(py311_interpreter_frame, owner),
    .owner_cstack = PB_PYLAYOUT_OWNER_NONE,
    .code_filename = OFF(py311_code_object, co_filename),
    .code_qualname = OFF(py311_code_object, co_qualname),
    .code_firstlineno = OFF(py311_code_object, co_firstlineno),
    .code_linetable = OFF(py311_code_object, co_linetable),
    .code_adaptive = OFF(py311_code_object, co_code_adaptive),
    .lines = PB_LINES_LOCATIONS,
    .unicode_state = OFF(py39_ascii_object, state),
    .unicode_length = OFF(py39_ascii_object, length),
    .ascii_size = sizeof(py39_ascii_object),
    .compact_size = sizeof(py39_compact_unicode_object),
    .bytes_size = OFF(py_bytes_object, ob_base.ob_size),
    .bytes_sval = OFF(py_bytes_object, ob_sval),
    .names = PB_NAMES_311,
    .frame_localsplus = OFF(py311_interpreter_frame, localsplus),
    .type_flags = OFF(py311_type_object, tp_flags),
    .heaptype_cached_keys = OFF(py311_heap_type_object, ht_cached_keys),
    .object_type = OFF(py_object, ob_type),
    .managed_dict_before = BEFORE(py311_managed_preheader, dict),
    .managed_values_before = BEFORE(py311_managed_preheader, values),
    .values_array = OFF(py311_dict_values, values),
    .dict_keys = OFF(py311_dict_object, ma_keys),
    .dict_values = OFF(py311_dict_object, ma_values),
    .keys = DICT_KEYS_311,
};

/* 3.12: each interpreter points to its GIL; shim frames owned by the C stack are skipped. */
static const pb_pylayout layout_312 = {
    .runtime_interpreters_head = OFF(py312_runtime_state, interpreters.head),
    .interp_next = OFF(py312_interpreter_state, next),
    .interp_threads_head = OFF(py312_interpreter_state, threads.head),
    .gil_kind = PB_GIL_POINTER_IN_INTERP,
    .gil_base = OFF(py312_interpreter_state, ceval.gil),
    .gil_locked = OFF(py39_gil_runtime_state, locked),
    .gil_holder = OFF(py39_gil_runtime_state, last_holder),
    .tstate_next = OFF(py312_thread_state, next),
    .tstate_thread_id = OFF(py312_thread_state, thread_id),
    .tstate_native_id = OFF(py312_thread_state, native_thread_id),
    .has_cframe = 1,
    .tstate_frame = OFF(py312_thread_state, cframe),
    .cframe_current_frame = OFF(py312_cframe, current_frame),
    .frame_code = OFF(py312_interpreter_frame, f_code),
    .frame_previous = OFF(py312_interpreter_frame, previous),
    .frame_instr = OFF(py312_interpreter_frame, prev_instr),
    .frame_owner = OFF(py312_interpreter_frame, owner),
    .owner_cstack = PY312_FRAME_OWNED_BY_CSTACK,
    .code_filename = OFF(py312_code_object, co_filename),
    .code_qualname = OFF(py312_code_object, co_qualname),
    .code_firstlineno = OFF(py312_code_object, co_firstlineno),
    .code_linetable = OFF(py312_code_object, co_linetable),
    .code_adaptive = OFF(py312_code_object, co_code_adaptive),
    .lines = PB_LINES_LOCATIONS,
    .unicode_state = OFF(py312_ascii_object, state),
    .unicode_length = OFF(py312_ascii_object, length),
    .ascii_size = sizeof(py312_ascii_object),
    .compact_size = sizeof(py312_compact_unicode_object),
    .bytes_size = OFF(py_bytes_object, ob_base.ob_size),
    .bytes_sval = OFF(py_bytes_object, ob_sval),
    .names = PB_NAMES_312,
    .frame_localsplus = OFF(py312_interpreter_frame, localsplus),
    .type_flags = OFF(py312_type_object, tp_flags),
    .heaptype_cached_keys = OFF(py312_heap_type_object, ht_cached_keys),
    .object_type = OFF(py_object, ob_type),
    .managed_dict_before = BEFORE(py312_managed_preheader, dict_or_values),
    .values_array = OFF(py311_dict_values, values), /* the same struct in 3.12 */
    .dict_keys = OFF(py311_dict_object, ma_keys),
    .dict_values = OFF(py311_dict_object, ma_values),
    .keys = DICT_KEYS_311,
};

const pb_pylayout *pb_pylayout_get(unsigned major, unsigned minor)
{
    if (major != 3) return NULL;
    switch (minor) {
    case 9: return &layout_39;
    case 10: return &layout_310;
    case 11: return &layout_311;
    case 12: return &layout_312;
    default: return NULL;
    }
}

void pb_pylayout_from_debug_offsets(const pb_pylayout_debug_offsets_313 *d, pb_pylayout *l)
{
    memset(l, 0, sizeof *l);
    l->runtime_interpreters_head = d->runtime_state.interpreters_head;
    l->interp_next = d->interpreter_state.next;
    l->interp_threads_head = d->interpreter_state.threads_head;
    l->gil_kind = PB_GIL_IN_INTERP;
    l->gil_locked = d->interpreter_state.gil_runtime_state_locked;
    l->gil_holder = d->interpreter_state.gil_runtime_state_holder;
    l->tstate_next = d->thread_state.next;
    l->tstate_thread_id = d->thread_state.thread_id;
    l->tstate_native_id = d->thread_state.native_thread_id;
    l->has_cframe = 0;
    l->tstate_frame = d->thread_state.current_frame;
    l->frame_code = d->frame.executable;
    l->frame_previous = d->frame.previous;
    l->frame_instr = d->frame.instr_ptr;
    l->frame_owner = d->frame.owner;
    l->owner_cstack = 3; /* FRAME_OWNED_BY_CSTACK, Include/internal/pycore_frame.h (3.13) */
    l->code_filename = d->code_object.filename;
    l->code_qualname = d->code_object.qualname;
    l->code_firstlineno = d->code_object.firstlineno;
    l->code_linetable = d->code_object.linetable;
    l->code_adaptive = d->code_object.co_code_adaptive;
    l->unicode_state = d->unicode_object.state;
    l->unicode_length = d->unicode_object.length;
    l->ascii_size = d->unicode_object.asciiobject_size;
    /* PyCompactUnicodeObject adds utf8_length and utf8 to PyASCIIObject (3.12 and 3.13) */
    l->compact_size = d->unicode_object.asciiobject_size +
                      (sizeof(py312_compact_unicode_object) - sizeof(py312_ascii_object));
    l->bytes_size = d->bytes_object.ob_size;
    l->bytes_sval = d->bytes_object.ob_sval;
    l->names = PB_NAMES_313;
    l->frame_localsplus = d->frame.localsplus;
    l->type_flags = d->type_object.tp_flags;
    /* not in the debug offsets: from the copy of 3.13.0's PyHeapTypeObject */
    l->heaptype_cached_keys = OFF(py313_heap_type_object, ht_cached_keys);
    l->object_type = d->pyobject.ob_type;
    l->dict_keys = d->dict_object.ma_keys;
    l->dict_values = d->dict_object.ma_values;
    /* not in the debug offsets: from the copies of 3.13.0's structs */
    l->managed_dict_before = BEFORE(py313_managed_preheader, dict);
    l->inline_values = sizeof(py_object); /* _PyObject_InlineValues: right after the head */
    l->values_valid = OFF(py313_dict_values, valid);
    l->values_array = OFF(py313_dict_values, values);
    l->keys = (struct pb_pylayout_keys)DICT_KEYS_311;
}

/* The kernel thread id is `pid_t tid` of glibc's struct pthread (nptl/descr.h), which starts
 * with a union of the thread control block header and `void *__padding[24]`, then `list_t
 * list` (two pointers), then tid. So the offset depends on glibc and on the architecture's
 * header: on x86_64 (TLS_TCB_AT_TP) the header is the whole tcbhead_t of
 * sysdeps/x86_64/nptl/tls.h, and tid sits 720 bytes in (the number used since the first
 * release of this reader, stated for glibc 2.17 to 2.40; test_pylayout checks it against this
 * machine's own threads, and pystack.c keeps a value read there only if /proc/<pid>/task/<value>
 * exists). Other architectures lay the header out differently (aarch64 is TLS_DTV_AT_TP) and
 * musl's struct pthread is another layout altogether: no offset is known here for them, so
 * the caller must not read at all. glibc does not install descr.h, so this one number cannot
 * come from offsetof() like the CPython ones. */
int64_t pb_pylayout_pthread_tid_offset(void)
{
#if defined(__x86_64__)
    return 720;
#else
    return -1;
#endif
}

const char *pb_pylayout_arch(void)
{
#if defined(__x86_64__)
    return "x86_64";
#elif defined(__aarch64__)
    return "aarch64";
#elif defined(__powerpc64__)
    return "ppc64";
#elif defined(__riscv)
    return "riscv";
#else
    return "this architecture";
#endif
}
