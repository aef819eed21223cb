/*
 * pystack.c - Python stacks of another process, read from outside (see pystack.h).
 *
 * The walk, for every interpreter and every thread state:
 *   _PyRuntime.interpreters.head -> interp (-> interp.next ...)
 *   interp.threads.head -> tstate (-> tstate.next ...)
 *   3.11/3.12: tstate.cframe -> cframe.current_frame;  3.13: tstate.current_frame
 *   frame.f_code (3.13: f_executable) -> code; frame.previous -> the caller's frame
 * A frame's line is the location-table line of its current instruction: the instruction
 * pointer (3.11/3.12 prev_instr, 3.13 instr_ptr) minus the start of co_code_adaptive, in
 * 2-byte code units. Shim frames owned by the C stack (3.12+) are skipped.
 * Every read may fail (the process runs on, threads come and go): a thread whose walk fails
 * keeps the frames read so far and is marked truncated; nothing is trusted without a bound.
 */
#include "pystack.h"

#include "pylayout.h"
#include "remote.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_THREADS 4096
#define MAX_FRAMES 4096
#define MAX_STRING_CHARS 4096
#define MAX_LINETABLE_BYTES ((size_t)1 << 20)

typedef pb_pylayout layout; /* the offsets of one CPython version (pylayout.h) */

/* ------------------------------------------------------------------------- line numbers */

static int read_varint(const uint8_t *t, size_t len, size_t *pos, uint64_t *out)
{
    uint64_t value = 0;
    int shift = 0;
    for (;;) {
        if (*pos >= len || shift > 56) return -1;
        uint8_t b = t[(*pos)++];
        value |= (uint64_t)(b & 63) << shift;
        shift += 6;
        if (!(b & 64)) break;
    }
    *out = value;
    return 0;
}

static int read_svarint(const uint8_t *t, size_t len, size_t *pos, int64_t *out)
{
    uint64_t u;
    if (read_varint(t, len, pos, &u)) return -1;
    *out = (u & 1) ? -(int64_t)(u >> 1) : (int64_t)(u >> 1);
    return 0;
}

int pb_pystack_line_311(const uint8_t *table, size_t len, int first_line, int64_t instr)
{
    size_t pos = 0;
    int64_t line = first_line, addr = 0;
    if (instr < 0) return first_line;
    while (pos < len) {
        uint8_t head = table[pos++];
        if (!(head & 128)) return 0; /* not at an entry start: a corrupt or torn table */
        int code = (head >> 3) & 15;
        int64_t length = (head & 7) + 1;
        int has_line = 1;
        int64_t delta = 0;
        uint64_t skip;
        if (code == 15) {
            has_line = 0;
        } else if (code == 14) {
            if (read_svarint(table, len, &pos, &delta) || read_varint(table, len, &pos, &skip) ||
                read_varint(table, len, &pos, &skip) || read_varint(table, len, &pos, &skip))
                return 0;
        } else if (code == 13) {
            if (read_svarint(table, len, &pos, &delta)) return 0;
        } else if (code >= 10) {
            delta = code - 10;
            pos += 2;
        } else {
            pos += 1;
        }
        line += delta;
        if (instr < addr + length) return has_line && line > 0 ? (int)line : 0;
        addr += length;
    }
    return 0;
}

int pb_pystack_line_lnotab(const uint8_t *table, size_t len, int first_line, int64_t addr)
{
    /* CPython 3.9 PyCode_Addr2Line: (address increment, signed line increment) byte pairs. */
    int64_t line = first_line, at = 0;
    for (size_t i = 0; i + 1 < len; i += 2) {
        at += table[i];
        if (at > addr) break;
        line += (int8_t)table[i + 1];
    }
    return line > 0 ? (int)line : 0;
}

int pb_pystack_line_310(const uint8_t *table, size_t len, int first_line, int64_t addr)
{
    /* CPython 3.10 (PEP 626): (byte length, signed line delta or -128 for none) pairs, each a
     * range [start, start + length) of the bytecode. */
    int64_t line = first_line, start = 0;
    if (addr < 0) return first_line;
    for (size_t i = 0; i + 1 < len; i += 2) {
        int64_t end = start + table[i];
        int8_t delta = (int8_t)table[i + 1];
        if (delta != -128) line += delta;
        if (addr >= start && addr < end) return delta == -128 || line <= 0 ? 0 : (int)line;
        start = end;
    }
    return 0;
}

/* ----------------------------------------------------------------------------- reading */

typedef struct reader {
    pid_t pid;
    const layout *l;
} reader;

/* Reads a str object into a malloc'ed UTF-8 string; NULL when it cannot be read. */
static char *read_string(const reader *r, uint64_t addr)
{
    uint8_t header[128];
    uint32_t state;
    int64_t length;
    const layout *l = r->l;
    if (l->compact_size > sizeof header || pb_remote_read(r->pid, addr, header, l->ascii_size))
        return NULL;
    memcpy(&state, header + l->unicode_state, sizeof state);
    memcpy(&length, header + l->unicode_length, sizeof length);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || length < 0 || (kind != 1 && kind != 2 && kind != 4)) return NULL;
    if (length > MAX_STRING_CHARS) length = MAX_STRING_CHARS;
    size_t bytes = (size_t)length * kind;
    uint8_t *raw = malloc(bytes + 1);
    char *utf8 = malloc((size_t)length * 4 + 1);
    if (!raw || !utf8 ||
        pb_remote_read(r->pid, addr + (ascii ? l->ascii_size : l->compact_size), raw, bytes)) {
        free(raw);
        free(utf8);
        return NULL;
    }
    size_t o = 0;
    for (int64_t i = 0; i < length; i++) {
        uint32_t c = kind == 1 ? raw[i] : kind == 2 ? ((uint16_t *)raw)[i] : ((uint32_t *)raw)[i];
        if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD; /* lone surrogates: not valid UTF-8 */
        if (c < 0x80) {
            utf8[o++] = (char)c;
        } else if (c < 0x800) {
            utf8[o++] = (char)(0xC0 | (c >> 6));
            utf8[o++] = (char)(0x80 | (c & 63));
        } else if (c < 0x10000) {
            utf8[o++] = (char)(0xE0 | (c >> 12));
            utf8[o++] = (char)(0x80 | ((c >> 6) & 63));
            utf8[o++] = (char)(0x80 | (c & 63));
        } else {
            if (c > 0x10FFFF) c = 0xFFFD;
            utf8[o++] = (char)(0xF0 | (c >> 18));
            utf8[o++] = (char)(0x80 | ((c >> 12) & 63));
            utf8[o++] = (char)(0x80 | ((c >> 6) & 63));
            utf8[o++] = (char)(0x80 | (c & 63));
        }
    }
    utf8[o] = '\0';
    free(raw);
    return utf8;
}

/* Reads one frame's code object into f; returns 0 or -1 when it cannot be read. */
static int read_frame(const reader *r, uint64_t code, uint64_t instr, pb_pyframe *f)
{
    const layout *l = r->l;
    uint8_t head[512];
    uint64_t filename, qualname, linetable;
    int32_t first_line;
    int64_t table_len;
    if (l->code_adaptive > sizeof head || pb_remote_read(r->pid, code, head, l->code_adaptive))
        return -1;
    memcpy(&filename, head + l->code_filename, 8);
    memcpy(&qualname, head + l->code_qualname, 8);
    memcpy(&linetable, head + l->code_linetable, 8);
    memcpy(&first_line, head + l->code_firstlineno, 4);
    f->file = read_string(r, filename);
    f->function = read_string(r, qualname);
    if (!f->file || !f->function) return -1;
    f->line = first_line;
    if (pb_remote_read(r->pid, linetable + l->bytes_size, &table_len, 8) == 0 && table_len > 0 &&
        (size_t)table_len <= MAX_LINETABLE_BYTES) {
        uint8_t *table = malloc((size_t)table_len);
        if (table && pb_remote_read(r->pid, linetable + l->bytes_sval, table,
                                    (size_t)table_len) == 0) {
            int line;
            if (l->lines == PB_LINES_LNOTAB) {
                line = pb_pystack_line_lnotab(table, (size_t)table_len, first_line,
                                              (int32_t)instr);
            } else if (l->lines == PB_LINES_310) {
                line = pb_pystack_line_310(table, (size_t)table_len, first_line,
                                           (int64_t)(int32_t)instr * 2);
            } else {
                int64_t index = ((int64_t)instr - (int64_t)(code + l->code_adaptive)) / 2;
                line = pb_pystack_line_311(table, (size_t)table_len, first_line, index);
            }
            if (line > 0) f->line = line;
        }
        free(table);
    }
    return 0;
}

static void read_thread_name(pid_t pid, uint64_t tid, char *name, size_t len)
{
    char path[96];
    name[0] = '\0';
    snprintf(path, sizeof path, "/proc/%d/task/%" PRIu64 "/comm", (int)pid, tid);
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fgets(name, (int)len, f)) name[strcspn(name, "\n")] = '\0';
    fclose(f);
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

/* Walks the frames of tstate into t; *bootstrap gets the outermost Thread._bootstrap frame of
 * threading.py (0 when there is none: the main thread, a thread not started by threading). */
static int walk_thread(const reader *r, uint64_t tstate, pb_pythread *t, uint64_t *bootstrap)
{
    const layout *l = r->l;
    uint64_t frame = 0;
    *bootstrap = 0;
    pb_pyframe *frames = calloc(64, sizeof *frames);
    int capacity = 64;
    if (!frames) return -ENOMEM;
    t->frames = frames;
    if (pb_remote_read_u64(r->pid, tstate + l->tstate_frame, &frame)) goto torn;
    if (l->has_cframe && frame &&
        pb_remote_read_u64(r->pid, frame + l->cframe_current_frame, &frame))
        goto torn;
    for (int depth = 0; frame; depth++) {
        uint64_t code, previous, instr;
        uint8_t owner = 0;
        if (depth >= MAX_FRAMES) goto torn;
        if (pb_remote_read_u64(r->pid, frame + l->frame_code, &code) ||
            pb_remote_read_u64(r->pid, frame + l->frame_previous, &previous) ||
            pb_remote_read_u64(r->pid, frame + l->frame_instr, &instr) ||
            (!l->legacy && pb_remote_read(r->pid, frame + l->frame_owner, &owner, 1)))
            goto torn;
        uint64_t here = frame;
        frame = previous;
        if (l->legacy) instr &= 0xffffffffu; /* f_lasti is an int; what follows is f_lineno */
        else if (owner == l->owner_cstack) continue;
        if (t->frame_count == capacity) {
            pb_pyframe *grown = realloc(t->frames, (size_t)capacity * 2 * sizeof *grown);
            if (!grown) return -ENOMEM;
            memset(grown + capacity, 0, (size_t)capacity * sizeof *grown);
            t->frames = grown;
            capacity *= 2;
        }
        pb_pyframe *f = &t->frames[t->frame_count];
        if (read_frame(r, code, instr, f)) {
            free(f->file);
            free(f->function);
            memset(f, 0, sizeof *f);
            goto torn;
        }
        t->frame_count++;
        if (strcmp(f->function, "Thread._bootstrap") == 0 && ends_with(f->file, "threading.py"))
            *bootstrap = here;
    }
    return 0;
torn:
    t->truncated = 1;
    return 0;
}

/* ------------------------------------------------------------------------- thread names */

/* A Thread object's _name is read from its instance dict, 3.11 to 3.13 (the layout's keys,
 * dict_* and managed_* offsets, from cpython_layouts.h): the keys object is a header, then
 * dk_indices (1 << dk_log2_index_bytes bytes), then the entries in insertion order:
 * PyDictUnicodeEntry {key, value} for str-only keys (kinds 1 and 2), PyDictKeyEntry {hash,
 * key, value} for kind 0. A split dict (kind 2) keeps the values apart in a PyDictValues,
 * values[i] belonging to entry i. The flags are Py_TPFLAGS_* of Include/object.h. */
#define TPFLAGS_INLINE_VALUES (1u << 2)  /* 3.13 */
#define TPFLAGS_MANAGED_DICT (1u << 4)   /* 3.11+ */
#define MAX_ATTRIBUTES 256

/* The value of the str key `attr` in the keys object keys (values: the split PyDictValues, or
 * 0 when the values sit in the entries); 0 when it is absent or cannot be read. str_type is
 * the type of str (the key's type), used to tell a str value. */
static uint64_t keys_lookup(const reader *r, uint64_t keys, uint64_t values, const char *attr,
                            uint64_t *str_type)
{
    const struct pb_pylayout_keys *k = &r->l->keys;
    uint8_t head[64];
    int64_t entries;
    if (!keys || k->indices > sizeof head || pb_remote_read(r->pid, keys, head, k->indices))
        return 0;
    memcpy(&entries, head + k->nentries, sizeof entries);
    unsigned index_log2 = head[k->log2_index_bytes], kind = head[k->kind];
    if (entries <= 0 || entries > MAX_ATTRIBUTES || index_log2 > 20 || kind > 2) return 0;
    uint64_t start = keys + k->indices + ((uint64_t)1 << index_log2);
    uint64_t size = kind == 0 ? k->entry_size : k->unicode_entry_size;
    uint64_t key_at = kind == 0 ? k->entry_key : k->unicode_entry_key;
    uint64_t value_at = kind == 0 ? k->entry_value : k->unicode_entry_value;
    for (int64_t i = 0; i < entries; i++) {
        uint64_t key = 0, value = 0, entry = start + (uint64_t)i * size;
        if (pb_remote_read_u64(r->pid, entry + key_at, &key) || !key) continue;
        char *name = read_string(r, key);
        int match = name && strcmp(name, attr) == 0;
        free(name);
        if (!match) continue;
        if (pb_remote_read_u64(r->pid, key + r->l->object_type, str_type)) return 0;
        /* values[i]: an array of object pointers (8 bytes on the LP64 targets read) */
        if (values ? pb_remote_read_u64(r->pid,
                                        values + r->l->values_array + 8 * (uint64_t)i, &value)
                   : pb_remote_read_u64(r->pid, entry + value_at, &value))
            return 0;
        return value;
    }
    return 0;
}

/* The attribute `attr` of a plain Python object obj (a class without __slots__, whose instance
 * dict is "managed": a dict or split values kept beside the object by the interpreter); 0 when
 * it cannot be read. */
static uint64_t object_attribute(const reader *r, uint64_t obj, const char *attr,
                                 uint64_t *str_type)
{
    const layout *l = r->l;
    uint64_t type = 0, flags = 0, dict = 0, values = 0, keys = 0;
    if (pb_remote_read_u64(r->pid, obj + l->object_type, &type) || !type ||
        pb_remote_read_u64(r->pid, type + l->type_flags, &flags) ||
        !(flags & TPFLAGS_MANAGED_DICT))
        return 0;
    switch (l->names) {
    case PB_NAMES_311: /* a values pointer and a dict pointer before the object */
        if (pb_remote_read_u64(r->pid, obj - l->managed_values_before, &values) ||
            pb_remote_read_u64(r->pid, obj - l->managed_dict_before, &dict))
            return 0;
        break;
    case PB_NAMES_312: { /* one word before the object: a dict, or values - 1 (odd: tagged) */
        uint64_t word = 0;
        if (pb_remote_read_u64(r->pid, obj - l->managed_dict_before, &word)) return 0;
        if (word & 1) values = word + 1;
        else dict = word;
        break;
    }
    case PB_NAMES_313: { /* a dict before the object, else values inline after its head */
        uint8_t valid = 0;
        if (pb_remote_read_u64(r->pid, obj - l->managed_dict_before, &dict)) return 0;
        if (!dict && (flags & TPFLAGS_INLINE_VALUES) &&
            pb_remote_read(r->pid, obj + l->inline_values + l->values_valid, &valid, 1) == 0 &&
            valid)
            values = obj + l->inline_values;
        break;
    }
    default: return 0;
    }
    if (values) {
        if (pb_remote_read_u64(r->pid, type + l->heaptype_cached_keys, &keys)) return 0;
        return keys_lookup(r, keys, values, attr, str_type);
    }
    if (!dict || pb_remote_read_u64(r->pid, dict + l->dict_keys, &keys) ||
        pb_remote_read_u64(r->pid, dict + l->dict_values, &values))
        return 0;
    return keys_lookup(r, keys, values, attr, str_type);
}

/* Fills t->python_name with Thread._name of the Thread object that is `self` in frame (the
 * thread's Thread._bootstrap frame); leaves it empty when it cannot be read. */
static void read_python_name(const reader *r, uint64_t frame, pb_pythread *t)
{
    uint64_t self = 0, name = 0, str_type = 0, value_type = 0;
    if (r->l->names == PB_NAMES_NONE ||
        pb_remote_read_u64(r->pid, frame + r->l->frame_localsplus, &self) || !self)
        return;
    name = object_attribute(r, self, "_name", &str_type);
    /* a str only: the value's type must be the key's (both are str objects) */
    if (!name || pb_remote_read_u64(r->pid, name + r->l->object_type, &value_type) ||
        value_type != str_type)
        return;
    char *text = read_string(r, name);
    if (text) snprintf(t->python_name, sizeof t->python_name, "%s", text);
    free(text);
}

/* The kernel thread id behind a pthread_t (3.9/3.10 keep only that), or 0 when it cannot be
 * told: read from glibc's struct pthread and kept only if it is a thread of pid. Not read at
 * all where the offset is not known (pb_pylayout_pthread_tid_offset: x86_64 only). */
static uint64_t native_id_from_pthread(pid_t pid, uint64_t pthread)
{
    int32_t tid = 0;
    char path[96];
    struct stat st;
    int64_t offset = pb_pylayout_pthread_tid_offset();
    if (!pthread || offset < 0 ||
        pb_remote_read(pid, pthread + (uint64_t)offset, &tid, 4) || tid <= 0)
        return 0;
    snprintf(path, sizeof path, "/proc/%d/task/%d", (int)pid, (int)tid);
    return stat(path, &st) == 0 ? (uint64_t)tid : 0;
}

/* The thread state that holds the GIL of interp, or 0. */
static uint64_t gil_holder(const reader *r, uint64_t runtime, uint64_t interp)
{
    const layout *l = r->l;
    uint64_t gil = 0, holder = 0;
    int32_t locked = 0;
    switch (l->gil_kind) {
    case PB_GIL_IN_RUNTIME: gil = runtime + l->gil_base; break;
    case PB_GIL_IN_INTERP: gil = interp; break;
    case PB_GIL_POINTER_IN_INTERP:
        if (pb_remote_read_u64(r->pid, interp + l->gil_base, &gil)) return 0;
        break;
    }
    if (!gil || pb_remote_read(r->pid, gil + l->gil_locked, &locked, 4) ||
        pb_remote_read_u64(r->pid, gil + l->gil_holder, &holder))
        return 0;
    return locked ? holder : 0;
}

/* ------------------------------------------------------------------------ finding Python */

static int find_runtime(pid_t pid, pb_pystack *s, uint64_t *runtime, uint64_t *py_version,
                        char *why, size_t why_len)
{
    static const char *const names[] = {"_PyRuntime", "Py_Version"};
    pb_remote_file *files = calloc(9, sizeof *files);
    int rc, count;
    if (!files) return -ENOMEM;
    count = pb_remote_python_files(pid, files, 9);
    if (count < 0) {
        rc = count;
        goto fail;
    }
    for (int i = 0; i < count; i++) {
        uint64_t values[2];
        if (pb_remote_symbols(pid, files[i].path, names, 2, values) <= 0 || !values[0])
            continue;
        *runtime = values[0];
        *py_version = 0;
        snprintf(s->library, sizeof s->library, "%s", files[i].path);
        if (values[1]) {
            rc = pb_remote_read_u64(pid, values[1], py_version);
            if (rc) goto fail;
            *py_version &= 0xffffffffu;
        }
        rc = 0;
        goto fail;
    }
    snprintf(why, why_len, "process %d is not a Python process (no libpython or python "
             "executable with _PyRuntime is mapped)", (int)pid);
    rc = PB_PYSTACK_ENOTPYTHON;
fail:
    free(files);
    return rc;
}

int pb_pystack_read(pid_t pid, pb_pystack **out, char *why, size_t why_len)
{
    pb_pystack *s = calloc(1, sizeof *s);
    uint64_t runtime = 0, py_version = 0, interp = 0;
    pb_pylayout l313;
    reader r = {pid, NULL};
    int rc;
    why[0] = '\0';
    *out = NULL;
    if (!s) return -ENOMEM;
    s->pid = pid;
    if ((rc = find_runtime(pid, s, &runtime, &py_version, why, why_len))) goto fail;
    unsigned major = (py_version >> 24) & 255, minor = (py_version >> 16) & 255;
    if (py_version == 0) { /* Py_Version exists since 3.11: before, the file name tells */
        char v[16];
        pb_remote_version_from_path(s->library, v, sizeof v);
        if (strcmp(v, "3.9") == 0 || strcmp(v, "3.10") == 0) {
            snprintf(s->python_version, sizeof s->python_version, "%s", v);
            r.l = pb_pylayout_get(3, strcmp(v, "3.9") == 0 ? 9 : 10);
        } else {
            snprintf(why, why_len, "Python %s is not supported by backtrace (supported: %s)",
                     *v ? v : "older than 3.9", PB_PYSTACK_SUPPORTED);
            rc = PB_PYSTACK_EVERSION;
            goto fail;
        }
    } else {
        snprintf(s->python_version, sizeof s->python_version, "%u.%u.%u", major, minor,
                 (unsigned)(py_version >> 8) & 255);
    }
    if (r.l) {
        /* 3.9 / 3.10, chosen above */
    } else if (major == 3 && minor == 13) {
        pb_pylayout_debug_offsets_313 d;
        if ((rc = pb_remote_read(pid, runtime, &d, sizeof d))) goto fail;
        if (memcmp(d.cookie, "xdebugpy", 8) != 0 || ((d.version >> 16) & 0xffff) != 0x030d) {
            snprintf(why, why_len, "the _Py_DebugOffsets of Python %s are not where 3.13 keeps "
                     "them", s->python_version);
            rc = PB_PYSTACK_EVERSION;
            goto fail;
        }
        pb_pylayout_from_debug_offsets(&d, &l313);
        r.l = &l313;
    } else if (!(r.l = pb_pylayout_get(major, minor))) {
        snprintf(why, why_len, "Python %s is not supported by backtrace (supported: %s)",
                 s->python_version, PB_PYSTACK_SUPPORTED);
        rc = PB_PYSTACK_EVERSION;
        goto fail;
    }
    if (!r.l->tstate_native_id && pb_pylayout_pthread_tid_offset() < 0)
        snprintf(s->note, sizeof s->note, "the kernel thread ids of Python %s threads are not "
                 "shown: they are read from glibc's struct pthread, whose layout is known here "
                 "for x86_64 only, not %s (not supported on this architecture)",
                 s->python_version, pb_pylayout_arch());
    if ((rc = pb_remote_read_u64(pid, runtime + r.l->runtime_interpreters_head, &interp)))
        goto fail;
    if (!interp) {
        snprintf(why, why_len, "the Python interpreter of process %d is not running (starting "
                 "or exiting)", (int)pid);
        rc = PB_PYSTACK_ENOTREADY;
        goto fail;
    }
    s->threads = calloc(MAX_THREADS, sizeof *s->threads);
    if (!s->threads) {
        rc = -ENOMEM;
        goto fail;
    }
    for (int interps = 0; interp && interps < 64; interps++) {
        uint64_t tstate = 0, holder = gil_holder(&r, runtime, interp);
        if ((rc = pb_remote_read_u64(pid, interp + r.l->interp_threads_head, &tstate))) goto fail;
        /* A thread that ends while it is read takes its state with it: the list ends there
         * (what was read is shown) unless the whole process is gone. */
        while (tstate && s->thread_count < MAX_THREADS) {
            pb_pythread *t = &s->threads[s->thread_count];
            if ((rc = pb_remote_read_u64(pid, tstate + r.l->tstate_thread_id, &t->thread_id)) ||
                (r.l->tstate_native_id &&
                 (rc = pb_remote_read_u64(pid, tstate + r.l->tstate_native_id, &t->native_id)))) {
                if (rc == -ESRCH || rc == -EPERM) goto fail;
                break;
            }
            if (!r.l->tstate_native_id) t->native_id = native_id_from_pthread(pid, t->thread_id);
            s->thread_count++;
            t->holds_gil = holder == tstate;
            read_thread_name(pid, t->native_id, t->name, sizeof t->name);
            uint64_t bootstrap = 0;
            if ((rc = walk_thread(&r, tstate, t, &bootstrap))) goto fail;
            if (bootstrap) read_python_name(&r, bootstrap, t);
            if (pb_remote_read_u64(pid, tstate + r.l->tstate_next, &tstate)) break;
        }
        if (pb_remote_read_u64(pid, interp + r.l->interp_next, &interp)) break;
    }
    rc = 0;
    *out = s;
    return 0;
fail:
    pb_pystack_free(s);
    return rc;
}

void pb_pystack_free(pb_pystack *s)
{
    if (!s) return;
    for (int i = 0; s->threads && i < s->thread_count; i++) {
        for (int k = 0; k < s->threads[i].frame_count; k++) {
            free(s->threads[i].frames[k].file);
            free(s->threads[i].frames[k].function);
        }
        free(s->threads[i].frames);
    }
    free(s->threads);
    free(s);
}
