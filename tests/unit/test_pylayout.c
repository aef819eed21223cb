/*
 * test_pylayout.c - the offset tables of src/remote/pylayout.c.
 *
 * 1. The offsets derived with offsetof() from the struct copies (cpython_layouts.h) are the
 *    numbers pystack.c used before, for every version that had numbers (3.9 to 3.12 and the
 *    3.13 values not in _Py_DebugOffsets, the dict offsets of the thread names included): no
 *    behaviour changed, but for one 3.13 read that was a slot off (see test_debug_offsets_313).
 * 2. The glibc offset of a thread's kernel id is where this process's own struct pthread keeps
 *    gettid() (x86_64), and unknown (-1) elsewhere.
 * 3. `test_pylayout --print 3.11` prints one version's table as "name offset" lines, for
 *    test_pylayout_live.py, which checks them against the live objects of the Python it runs in.
 */
#include "pylayout.h"

#include "check.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* What pystack.c had as numbers (commit 06b71b1), x86_64. */
static const pb_pylayout before_39 = {
    .runtime_interpreters_head = 32, .interp_next = 0, .interp_threads_head = 8,
    .gil_kind = PB_GIL_IN_RUNTIME, .gil_base = 352, .gil_locked = 16, .gil_holder = 8,
    .tstate_next = 8, .tstate_thread_id = 176, .tstate_native_id = 0,
    .has_cframe = 0, .tstate_frame = 24,
    .frame_code = 32, .frame_previous = 24, .frame_instr = 104,
    .owner_cstack = PB_PYLAYOUT_OWNER_NONE,
    .code_filename = 104, .code_qualname = 112, .code_firstlineno = 40, .code_linetable = 120,
    .code_adaptive = 128, .lines = PB_LINES_LNOTAB, .legacy = 1, .lasti_units = 0,
    .unicode_state = 32, .unicode_length = 16, .ascii_size = 48, .compact_size = 72,
    .bytes_size = 16, .bytes_sval = 32,
};

static const pb_pylayout before_310 = {
    .runtime_interpreters_head = 32, .interp_next = 0, .interp_threads_head = 8,
    .gil_kind = PB_GIL_IN_RUNTIME, .gil_base = 352, .gil_locked = 16, .gil_holder = 8,
    .tstate_next = 8, .tstate_thread_id = 176, .tstate_native_id = 0,
    .has_cframe = 0, .tstate_frame = 24,
    .frame_code = 32, .frame_previous = 24, .frame_instr = 96,
    .owner_cstack = PB_PYLAYOUT_OWNER_NONE,
    .code_filename = 104, .code_qualname = 112, .code_firstlineno = 40, .code_linetable = 120,
    .code_adaptive = 128, .lines = PB_LINES_310, .legacy = 1, .lasti_units = 1,
    .unicode_state = 32, .unicode_length = 16, .ascii_size = 48, .compact_size = 72,
    .bytes_size = 16, .bytes_sval = 32,
};

/* The dict reading of 3.11+ (the thread names), as numbers in pystack.c before (commit
 * 3d64242): the keys object, its entries, ma_keys / ma_values and ob_type. */
#define DICT_BEFORE                                                                            \
    .object_type = 8, .dict_keys = 32, .dict_values = 40, /* pystack.c's "+ 8", DICT_MA_* */ \
    .keys = {.log2_index_bytes = 9, .kind = 10, .nentries = 24, .indices = 32, /* KEYS_* */    \
             .entry_size = 24, .entry_key = 8, .entry_value = 16,  /* kind 0: 24, 8, key + 8 */ \
             .unicode_entry_size = 16, .unicode_entry_key = 0, .unicode_entry_value = 8}

/* 3.11 had gil_base 0 and the runtime offsets of locked / last_holder (376 / 368): the same
 * addresses as gil_base + gil_locked / gil_holder, which is what is compared. */
static const pb_pylayout before_311 = {
    .runtime_interpreters_head = 40, .interp_next = 0, .interp_threads_head = 16,
    .gil_kind = PB_GIL_IN_RUNTIME, .gil_base = 0, .gil_locked = 376, .gil_holder = 368,
    .tstate_next = 8, .tstate_thread_id = 152, .tstate_native_id = 160,
    .has_cframe = 1, .tstate_frame = 56, .cframe_current_frame = 8,
    .frame_code = 32, .frame_previous = 48, .frame_instr = 56, .frame_owner = 69,
    .owner_cstack = PB_PYLAYOUT_OWNER_NONE,
    .code_filename = 112, .code_qualname = 128, .code_firstlineno = 72, .code_linetable = 136,
    .code_adaptive = 184,
    .unicode_state = 32, .unicode_length = 16, .ascii_size = 48, .compact_size = 72,
    .bytes_size = 16, .bytes_sval = 32,
    .names = PB_NAMES_311, .frame_localsplus = 72, .type_flags = 168, .heaptype_cached_keys = 872,
    .managed_values_before = 32, .managed_dict_before = 24, .values_array = 0, DICT_BEFORE,
};

static const pb_pylayout before_312 = {
    .runtime_interpreters_head = 40, .interp_next = 0, .interp_threads_head = 72,
    .gil_kind = PB_GIL_POINTER_IN_INTERP, .gil_base = 384, .gil_locked = 16, .gil_holder = 8,
    .tstate_next = 8, .tstate_thread_id = 136, .tstate_native_id = 144,
    .has_cframe = 1, .tstate_frame = 56, .cframe_current_frame = 0,
    .frame_code = 0, .frame_previous = 8, .frame_instr = 56, .frame_owner = 70,
    .owner_cstack = 3,
    .code_filename = 112, .code_qualname = 128, .code_firstlineno = 68, .code_linetable = 136,
    .code_adaptive = 192,
    .unicode_state = 32, .unicode_length = 16, .ascii_size = 40, .compact_size = 56,
    .bytes_size = 16, .bytes_sval = 32,
    .names = PB_NAMES_312, .frame_localsplus = 72, .type_flags = 168, .heaptype_cached_keys = 880,
    .managed_dict_before = 24, .values_array = 0, DICT_BEFORE,
};

/* Every field, by name: the same list drives the comparison and --print. */
#define FIELDS(X)                                                                              \
    X(runtime_interpreters_head) X(interp_next) X(interp_threads_head) X(gil_kind)             \
    X(tstate_next) X(tstate_thread_id) X(tstate_native_id) X(has_cframe) X(tstate_frame)       \
    X(cframe_current_frame) X(frame_code) X(frame_previous) X(frame_instr) X(frame_owner)      \
    X(owner_cstack) X(code_filename) X(code_qualname) X(code_firstlineno) X(code_linetable)    \
    X(code_adaptive) X(lines) X(legacy) X(lasti_units) X(unicode_state) X(unicode_length)      \
    X(ascii_size) X(compact_size) X(bytes_size) X(bytes_sval) X(names) X(frame_localsplus)     \
    X(type_flags) X(heaptype_cached_keys) DICT_FIELDS(X)

#define DICT_FIELDS(X)                                                                         \
    X(object_type) X(managed_dict_before) X(managed_values_before) X(inline_values)            \
    X(values_valid) X(values_array) X(dict_keys) X(dict_values) X(keys.log2_index_bytes)       \
    X(keys.kind) X(keys.nentries) X(keys.indices) X(keys.entry_size) X(keys.entry_key)         \
    X(keys.entry_value) X(keys.unicode_entry_size) X(keys.unicode_entry_key)                   \
    X(keys.unicode_entry_value)

/* Where the GIL's fields are, from the runtime (3.9-3.11) or from the gil state (3.12). */
static uint64_t gil_at(const pb_pylayout *l, uint64_t field)
{
    return l->gil_kind == PB_GIL_IN_RUNTIME ? l->gil_base + field : field;
}

static void compare(const char *version, const pb_pylayout *got, const pb_pylayout *want)
{
    int same = 1;
#define COMPARE(f)                                                                             \
    if ((uint64_t)got->f != (uint64_t)want->f) {                                               \
        printf("       %s %s: derived %llu, before %llu\n", version, #f,                       \
               (unsigned long long)got->f, (unsigned long long)want->f);                       \
        same = 0;                                                                              \
    }
    FIELDS(COMPARE)
#undef COMPARE
    CHECK(same, "%s: every field derived with offsetof() is the number used before", version);
    CHECK(gil_at(got, got->gil_locked) == gil_at(want, want->gil_locked) &&
              gil_at(got, got->gil_holder) == gil_at(want, want->gil_holder) &&
              (got->gil_kind != PB_GIL_POINTER_IN_INTERP || got->gil_base == want->gil_base),
          "%s: the GIL's locked flag and holder are read where they were before", version);
}

static int print_layout(const char *version)
{
    unsigned major = 0, minor = 0;
    const pb_pylayout *l;
    if (sscanf(version, "%u.%u", &major, &minor) != 2 || !(l = pb_pylayout_get(major, minor))) {
        fprintf(stderr, "no layout for Python %s\n", version);
        return 2;
    }
#define PRINT(f) printf("%s %llu\n", #f, (unsigned long long)l->f);
    FIELDS(PRINT)
#undef PRINT
    printf("gil_base %llu\n", (unsigned long long)l->gil_base);
    printf("gil_locked %llu\n", (unsigned long long)l->gil_locked);
    printf("gil_holder %llu\n", (unsigned long long)l->gil_holder);
    return 0;
}

static void test_debug_offsets_313(void)
{
    pb_pylayout_debug_offsets_313 d;
    pb_pylayout l;
    memset(&d, 0, sizeof d);
    d.unicode_object.asciiobject_size = 40;
    d.thread_state.native_thread_id = 160;
    d.frame.owner = 74;
    pb_pylayout_from_debug_offsets(&d, &l);
    CHECK(l.heaptype_cached_keys == 880, "3.13: ht_cached_keys from the 3.13 copy is 880 as "
          "before (got %llu)", (unsigned long long)l.heaptype_cached_keys);
    CHECK(l.compact_size == 56, "3.13: a compact str's characters follow utf8_length and utf8 "
          "(asciiobject_size + 16, got %llu)", (unsigned long long)l.compact_size);
    CHECK(l.tstate_native_id == 160 && l.frame_owner == 74 && l.owner_cstack == 3 &&
              l.gil_kind == PB_GIL_IN_INTERP && l.names == PB_NAMES_313,
          "3.13: the rest is the target's own _Py_DebugOffsets");

    /* The dict reading: ob_type, ma_keys and ma_values from the debug offsets (3.13.0 has 8,
     * 32, 40: the numbers pystack.c used), the rest from the copies of 3.13.0's structs. */
    d.pyobject.ob_type = 8;
    d.dict_object.ma_keys = 32;
    d.dict_object.ma_values = 40;
    pb_pylayout_from_debug_offsets(&d, &l);
    pb_pylayout want = {DICT_BEFORE};
    want.managed_dict_before = 24; /* "obj - 24" */
    want.inline_values = 16;       /* "obj + 16": values inline after the object head */
    want.values_valid = 3;         /* "obj + 16 + 3" */
    want.values_array = 8;         /* "obj + 16 + 8"; the dict path read ma_values' values[]
                                    * at 0, which is 3.11/3.12's place: 3.13 puts 4 bytes
                                    * before it, so that read was a slot off (fixed) */
    int same = 1;
#define COMPARE_DICT(f)                                                                        \
    if (l.f != want.f) {                                                                       \
        printf("       3.13 %s: derived %llu, before %llu\n", #f, (unsigned long long)l.f,     \
               (unsigned long long)want.f);                                                    \
        same = 0;                                                                              \
    }
    DICT_FIELDS(COMPARE_DICT)
#undef COMPARE_DICT
    CHECK(same, "3.13: the dict offsets are the numbers used before");
}

/* A second thread: says its kernel id, then stays alive (its struct pthread keeps the tid
 * only while it runs: the kernel clears it at exit) until the main thread has read it. */
typedef struct second_thread {
    pid_t tid;
    pthread_barrier_t told, read;
} second_thread;

static void *report_tid(void *arg)
{
    second_thread *t = arg;
    t->tid = (pid_t)syscall(SYS_gettid);
    pthread_barrier_wait(&t->told);
    pthread_barrier_wait(&t->read);
    return NULL;
}

static void test_pthread_tid(void)
{
    int64_t offset = pb_pylayout_pthread_tid_offset();
#if defined(__x86_64__)
    pid_t own = (pid_t)syscall(SYS_gettid);
    const char *self = (const char *)pthread_self();
    CHECK(offset == 720, "x86_64: tid at 720 in glibc's struct pthread");
    CHECK(offset >= 0 && *(const pid_t *)(self + offset) == own,
          "x86_64: this thread's struct pthread holds its gettid() there (%d)", (int)own);
    second_thread other = {0};
    pthread_t t;
    pthread_barrier_init(&other.told, NULL, 2);
    pthread_barrier_init(&other.read, NULL, 2);
    if (pthread_create(&t, NULL, report_tid, &other) == 0) {
        pthread_barrier_wait(&other.told);
        pid_t at = offset >= 0 ? *(const pid_t *)((const char *)t + offset) : 0;
        pthread_barrier_wait(&other.read);
        pthread_join(t, NULL);
        CHECK(at == other.tid && other.tid != own,
              "x86_64: a second thread's struct pthread holds its own gettid() (%d)",
              (int)other.tid);
    }
    pthread_barrier_destroy(&other.told);
    pthread_barrier_destroy(&other.read);
#else
    (void)report_tid;
    CHECK(offset == -1, "%s: the struct pthread offset is unknown, so it is never read",
          pb_pylayout_arch());
#endif
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--print") == 0) return print_layout(argv[2]);
    compare("3.9", pb_pylayout_get(3, 9), &before_39);
    compare("3.10", pb_pylayout_get(3, 10), &before_310);
    compare("3.11", pb_pylayout_get(3, 11), &before_311);
    compare("3.12", pb_pylayout_get(3, 12), &before_312);
    CHECK(!pb_pylayout_get(3, 8) && !pb_pylayout_get(3, 13) && !pb_pylayout_get(2, 7),
          "no table for 3.8, 2.7, nor 3.13 (its offsets come from the target)");
    test_debug_offsets_313();
    test_pthread_tid();
    return check_summary();
}
