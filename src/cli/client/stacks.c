/*
 * stacks.c - the Python (and native) stacks of every thread of a process, read from outside it
 * (stacks.h).
 *
 * No agent is involved (src/remote/pystack.h): this works on a process that never imported
 * probing, on a deadlocked one and on one whose main thread holds the GIL in a long C call.
 * Text, innermost frame first as in py-spy:
 *   Process 4242: python3 train.py
 *   Python 3.11.7 (/usr/lib/libpython3.11.so.1.0)
 *
 *   Thread 4242 "python3" MainThread (holds the GIL) active
 *       step (train.py:31)
 *       <module> (train.py:40)
 *
 *   Thread 4250 "python3" QueueFeederThread idle
 *       ...
 * After the OS name (/proc comm) comes threading's name of the thread where it can be read
 * (CPython 3.11+; pystack.h), then whether the thread holds the GIL and its state.
 */
#include "client/stacks.h"

#include "client/target.h"
#include "out/cli.h"
#include "out/format.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_sanitized(FILE *out, const char *s)
{
    pb_buf b = PB_BUF_INIT;
    if (s && pb_format_sanitize(&b, s, strlen(s)) == 0 && b.data) fputs(b.data, out);
    pb_buf_free(&b);
}


static void print_native(FILE *out, const pb_stacks *ns, int i)
{
    if (!ns->frames) return;
    if (ns->counts[i] < 0) {
        fprintf(out, "  native: (not read: %s)\n", strerror(-ns->counts[i]));
        return;
    }
    fprintf(out, "  native:\n");
    for (int k = 0; k < ns->counts[i]; k++) {
        const pb_native_frame *f = &ns->frames[(size_t)i * PB_STACKS_NATIVE_MAX + k];
        fprintf(out, "    ");
        if (f->symbol[0]) {
            print_sanitized(out, f->symbol);
            fprintf(out, "+0x%llx", (unsigned long long)f->offset);
        } else {
            fprintf(out, "0x%llx", (unsigned long long)f->ip);
        }
        fprintf(out, " (");
        print_sanitized(out, f->object[0] ? f->object : "?");
        fprintf(out, ")\n");
    }
}

/* "active" (running or runnable), "idle" (sleeping: waiting on a lock, I/O, a timer), or
 * another kernel state in words, from /proc/<pid>/task/<tid>/stat; "" when it cannot be read
 * (the thread ended meanwhile). */
static const char *thread_state(pid_t pid, unsigned long long tid)
{
    char path[96], line[512];
    snprintf(path, sizeof path, "/proc/%d/task/%llu/stat", (int)pid, tid);
    FILE *f = fopen(path, "re");
    if (!f) return "";
    const char *state = "";
    if (fgets(line, sizeof line, f)) {
        const char *close = strrchr(line, ')'); /* the name may hold spaces and parentheses */
        char c = close && close[1] == ' ' ? close[2] : '?';
        state = c == 'R' ? "active" : c == 'S' ? "idle" : c == 'D' ? "waiting on disk I/O"
              : c == 't' || c == 'T' ? "stopped" : c == 'Z' ? "exited" : "";
    }
    fclose(f);
    return state;
}

/* threading's name of thread t: read from the process (pystack.h), or MainThread for the
 * process's first thread; "" when unknown (then only the OS name shows). */
static const char *python_name(const pb_pystack *s, const pb_pythread *t)
{
    if (t->python_name[0]) return t->python_name;
    return (pid_t)t->native_id == s->pid ? "MainThread" : "";
}

int pb_stacks_text(FILE *out, const pb_stacks *st)
{
    const pb_pystack *s = st->py;
    char cmd[512];
    pb_target_cmdline(s->pid, cmd, sizeof cmd, 200);
    fprintf(out, "Process %d: ", (int)s->pid);
    print_sanitized(out, cmd);
    fprintf(out, "\nPython %s (", s->python_version);
    print_sanitized(out, s->library);
    fprintf(out, ")\n");
    for (int i = 0; i < s->thread_count; i++) {
        const pb_pythread *t = &s->threads[i];
        fprintf(out, "\nThread %llu \"", (unsigned long long)t->native_id);
        print_sanitized(out, t->name);
        const char *state = thread_state(s->pid, (unsigned long long)t->native_id);
        const char *py = python_name(s, t);
        fprintf(out, "\"%s", *py ? " " : "");
        print_sanitized(out, py);
        fprintf(out, "%s%s%s%s\n", t->holds_gil ? " (holds the GIL)" : "",
               t->frame_count || t->truncated ? "" : " (no Python frames)", *state ? " " : "",
               state);
        for (int k = 0; k < t->frame_count; k++) {
            fprintf(out, "    ");
            print_sanitized(out, t->frames[k].function);
            fprintf(out, " (");
            print_sanitized(out, t->frames[k].file);
            fprintf(out, ":%d)\n", t->frames[k].line);
        }
        if (t->truncated) fprintf(out, "    ... (the rest of this stack could not be read)\n");
        print_native(out, st, i);
    }
    return ferror(out) ? -EIO : 0;
}

static json_t *native_json(const pb_stacks *ns, int i)
{
    json_t *list = json_array();
    for (int k = 0; list && k < ns->counts[i]; k++) {
        const pb_native_frame *f = &ns->frames[(size_t)i * PB_STACKS_NATIVE_MAX + k];
        json_array_append_new(list, json_pack("{s:I, s:s?, s:I, s:s?}", "ip", (json_int_t)f->ip,
                                              "symbol", f->symbol[0] ? f->symbol : NULL, "offset",
                                              (json_int_t)f->offset, "object",
                                              f->object[0] ? f->object : NULL));
    }
    return list;
}

json_t *pb_stacks_json(const pb_stacks *st)
{
    const pb_pystack *s = st->py;
    char cmd[4096];
    json_t *threads = json_array();
    pb_target_cmdline(s->pid, cmd, sizeof cmd, sizeof cmd - 1);
    if (!threads) return NULL;
    for (int i = 0; i < s->thread_count; i++) {
        const pb_pythread *t = &s->threads[i];
        json_t *frames = json_array();
        for (int k = 0; frames && k < t->frame_count; k++)
            json_array_append_new(frames, json_pack("{s:s, s:s, s:i}", "function",
                                                    t->frames[k].function, "file",
                                                    t->frames[k].file, "line", t->frames[k].line));
        json_t *th = json_pack("{s:I, s:I, s:s, s:b, s:b, s:o*}", "native_id",
                               (json_int_t)t->native_id, "thread_id", (json_int_t)t->thread_id,
                               "name", t->name, "holds_gil", t->holds_gil, "truncated",
                               t->truncated, "frames", frames);
        const char *state = thread_state(s->pid, (unsigned long long)t->native_id);
        if (th && *state) json_object_set_new(th, "state", json_string(state));
        if (th && *python_name(s, t))
            json_object_set_new(th, "python_name", json_string(python_name(s, t)));
        if (th) /* the process's first thread is the one threading calls MainThread */
            json_object_set_new(th, "main", json_boolean((pid_t)t->native_id == s->pid));
        if (th && st->frames) {
            if (st->counts[i] >= 0)
                json_object_set_new(th, "native", native_json(st, i));
            else
                json_object_set_new(th, "native_error", json_string(strerror(-st->counts[i])));
        }
        json_array_append_new(threads, th);
    }
    json_t *root = json_pack("{s:i, s:s, s:s, s:s, s:o}", "pid", (int)s->pid, "cmdline", cmd,
                             "python", s->python_version, "library", s->library, "threads",
                             threads);
    return root;
}

int pb_stacks_read(const char *spec, int native, pb_stacks *st)
{
    pb_pystack *s = NULL;
    char why[512];
    memset(st, 0, sizeof *st);
    if (!pb_target_is_pid(spec)) {
        pb_cli_error("backtrace reads a process from outside and needs a pid, not '%s': "
                     "probing <pid> backtrace", spec);
        return PB_EXIT_USAGE;
    }
    if (native && !pb_native_available()) {
        pb_cli_error("backtrace --native needs libunwind, and this probing was built without it "
                     "(install libunwind-dev and rebuild); run it without --native for the "
                     "Python frames");
        return PB_EXIT_USAGE;
    }
    long v = strtol(spec, NULL, 10);
    pid_t pid = (pid_t)v;
    if (v <= 0 || v > 0x7fffffffL || !pb_target_pid_alive(pid)) {
        pb_cli_error("no such process: %s", spec);
        return PB_EXIT_ERROR;
    }
    int rc = pb_pystack_read(pid, &s, why, sizeof why);
    if (rc == -EPERM || rc == -EACCES) {
        pb_cli_error("not allowed to read the memory of process %d. Run probing as the same "
                     "user as the process with kernel.yama.ptrace_scope=0 (sudo sysctl "
                     "kernel.yama.ptrace_scope=0), or as root / with CAP_SYS_PTRACE",
                     (int)pid);
        return PB_EXIT_ERROR;
    }
    if (rc == -ESRCH) {
        pb_cli_error("process %d has exited", (int)pid);
        return PB_EXIT_ERROR;
    }
    if (rc) {
        if (why[0])
            pb_cli_error("%s", why);
        else
            pb_cli_error("cannot read the Python stacks of process %d: %s", (int)pid,
                         strerror(-rc));
        return PB_EXIT_ERROR;
    }
    if (s->note[0]) fprintf(pb_cli_messages(), "probing: %s\n", s->note); /* stacks follow */
    st->py = s;
    if (native && s->thread_count > 0) {
        st->frames = calloc((size_t)s->thread_count * PB_STACKS_NATIVE_MAX, sizeof *st->frames);
        st->counts = calloc((size_t)s->thread_count, sizeof *st->counts);
        if (!st->frames || !st->counts) {
            pb_stacks_free(st);
            pb_cli_error("out of memory");
            return PB_EXIT_ERROR;
        }
        for (int i = 0; i < s->thread_count; i++) {
            st->counts[i] = pb_native_stack(pid, (pid_t)s->threads[i].native_id,
                                            &st->frames[(size_t)i * PB_STACKS_NATIVE_MAX], PB_STACKS_NATIVE_MAX);
            if (st->counts[i] == -EPERM) {
                pb_cli_error("not allowed to stop the threads of process %d for --native "
                             "(ptrace): run probing as the same user with "
                             "kernel.yama.ptrace_scope=0, or as root / with CAP_SYS_PTRACE; "
                             "another debugger may be attached. Without --native the Python "
                             "stacks need no stop", (int)pid);
                pb_stacks_free(st);
                return PB_EXIT_ERROR;
            }
        }
    }
    return PB_EXIT_OK;
}

void pb_stacks_free(pb_stacks *st)
{
    if (!st) return;
    free(st->frames);
    free(st->counts);
    pb_pystack_free(st->py);
    memset(st, 0, sizeof *st);
}
