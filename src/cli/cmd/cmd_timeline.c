/*
 * cmd_timeline.c - `probing <target> timeline -o run.json`: probing's own continuous record as a
 * Chrome-trace file (the {"traceEvents": [...]} format that Perfetto and chrome://tracing open).
 *
 * Everything comes from SQL over /api/query, in pages (pb_client_query_rows):
 *   python.steps            one slice per step, "step N"
 *   python.torch_trace      one slice per module execution (forward, backward) and optimizer step
 *   python.dataloader_trace one slice per batch the loop waited for, "data wait"
 *   python.nccl_trace       one slice per collective, named by its operation
 *   python.device_steps     on CUDA, the device track: one slice per step as the device ran it
 *   python.device_trace     ... and one per module call of a detail step on the device
 * All are complete events ("ph":"X"), ts and dur in microseconds, pid = rank, tid = the OS
 * thread (torch_trace.thread). Steps, data waits and collectives have no thread column: they are
 * put on the training thread, the thread that ran most root forwards.
 *
 * Absolute times: the tables give offsets from the start of a step, and step k starts where step
 * k-1 ended (python.steps.wall). So a step starts at the sum of the walls of the recorded steps
 * before it, the first recorded step at 0. Rows of the step in progress (not yet in python.steps)
 * start after the last recorded step; rows of steps older than python.steps still holds are left
 * out. Times are computed in integer nanoseconds so nesting is exact; a slice that starts inside
 * another on its thread but would end after it (sibling backward branches overlap, rounding) is
 * cut at its parent's end, so every thread's slices nest.
 *
 * The device track is a thread of its own (tid PB_DEVICE_TID + the CUDA ordinal): a device step
 * starts device_steps.time_offset after its host step, a module device_trace.time_offset after
 * its device step. The device tables are read quietly: a CPU job, or a record from an agent
 * without them, has no device track.
 */
#include "client/client.h"
#include "client/fanout.h"
#include "cmd/command.h"
#include "jsonw.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slice {
    int64_t ts_ns, dur_ns;
    long long pid, tid;
    char *name;         /* owned */
    const char *cat;    /* static */
    long long step;
} slice;

typedef struct slices {
    slice *items;
    size_t count, cap;
} slices;

typedef struct step_starts {
    long long first;    /* first recorded step */
    size_t count;
    int64_t *start_ns;  /* start of step first+i; start_ns[count] = end of the last one */
} step_starts;

static int add_slice(slices *s, int64_t ts_ns, int64_t dur_ns, long long pid, long long tid,
                     const char *name, const char *cat, long long step)
{
    if (s->count == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        slice *items = realloc(s->items, cap * sizeof *items);
        if (!items) return -ENOMEM;
        s->items = items;
        s->cap = cap;
    }
    char *copy = strdup(name ? name : "?");
    if (!copy) return -ENOMEM;
    s->items[s->count++] = (slice){ts_ns, dur_ns < 0 ? 0 : dur_ns, pid, tid, copy, cat, step};
    return 0;
}

static int64_t seconds_ns(json_t *v)
{
    double d = json_number_value(v);
    return isfinite(d) ? (int64_t)llround(d * 1e9) : 0;
}

/* Start of a step in ns, or -1 when python.steps no longer holds it. */
static int64_t step_start(const step_starts *ss, long long step)
{
    if (ss->count == 0) return step == 0 ? 0 : -1;
    if (step < ss->first) return -1;
    if ((unsigned long long)(step - ss->first) >= ss->count) return ss->start_ns[ss->count];
    return ss->start_ns[step - ss->first];
}

#define PB_DEVICE_TID 1000000000LL /* + the CUDA ordinal: no OS thread id is that large */

/* The device track of t (see the top). Returns 0 (also when t has no device rows) or -ENOMEM. */
static int device_slices(const pb_target *t, long long pid, const step_starts *ss, slices *s)
{
    json_t *steps = NULL, *mods = NULL, *row;
    char *error = NULL, label[256];
    size_t i;
    int rc = 0;
    if (pb_client_query_objects(t, "SELECT step, device, time_offset, wall, rank FROM python.device_steps ORDER BY step",
                                PB_CLI_QUERY_TIMEOUT_MS, &steps, &error)) {
        free(error);
        return 0;
    }
    if (pb_client_query_objects(t, "SELECT step, module, time_offset, total_duration FROM python.device_trace "
                                   "ORDER BY step, seq", PB_CLI_QUERY_TIMEOUT_MS, &mods, &error)) {
        free(error);
        error = NULL;
        mods = NULL;
    }
    /* the device start of each step held in ss, for its modules */
    int64_t *dev_start = ss->count ? calloc(ss->count, sizeof *dev_start) : NULL;
    long long *dev_tid = ss->count ? calloc(ss->count, sizeof *dev_tid) : NULL;
    long long *dev_pid = ss->count ? calloc(ss->count, sizeof *dev_pid) : NULL;
    if (ss->count && (!dev_start || !dev_tid || !dev_pid)) {
        rc = -ENOMEM;
        goto done;
    }
    for (size_t k = 0; k < ss->count; k++) dev_start[k] = -1;
#define NUM(o, k) json_object_get(o, k)
    json_array_foreach(steps, i, row) {
        long long step = (long long)json_integer_value(NUM(row, "step"));
        int64_t host = step_start(ss, step);
        if (host < 0 || step < ss->first || (unsigned long long)(step - ss->first) >= ss->count) continue;
        int64_t start = host + seconds_ns(NUM(row, "time_offset"));
        long long tid = PB_DEVICE_TID + (long long)json_integer_value(NUM(row, "device"));
        dev_start[step - ss->first] = start;
        dev_tid[step - ss->first] = tid;
        dev_pid[step - ss->first] = pid >= 0 ? pid : (long long)json_integer_value(NUM(row, "rank"));
        snprintf(label, sizeof label, "step %lld (device)", step);
        if (add_slice(s, start, seconds_ns(NUM(row, "wall")), dev_pid[step - ss->first], tid, label, "device", step)) {
            rc = -ENOMEM;
            goto done;
        }
    }
    json_array_foreach(mods, i, row) {
        long long step = (long long)json_integer_value(NUM(row, "step"));
        if (step < ss->first || (unsigned long long)(step - ss->first) >= ss->count || dev_start[step - ss->first] < 0)
            continue;
        size_t k = (size_t)(step - ss->first);
        if (add_slice(s, dev_start[k] + seconds_ns(NUM(row, "time_offset")), seconds_ns(NUM(row, "total_duration")),
                      dev_pid[k], dev_tid[k],
                      json_string_value(NUM(row, "module")), "device", step)) {
            rc = -ENOMEM;
            goto done;
        }
    }
#undef NUM
done:
    free(dev_start);
    free(dev_tid);
    free(dev_pid);
    json_decref(steps);
    json_decref(mods);
    return rc;
}

static int by_thread_then_time(const void *x, const void *y)
{
    const slice *a = x, *b = y;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
    if (a->ts_ns != b->ts_ns) return a->ts_ns < b->ts_ns ? -1 : 1;
    if (a->dur_ns != b->dur_ns) return a->dur_ns > b->dur_ns ? -1 : 1; /* parent first */
    return 0;
}

/* Cuts every slice that would outlive the enclosing one on its thread. Sorted input. */
static void make_nested(slices *s)
{
    size_t depth = 0;
    int64_t *ends = malloc((s->count + 1) * sizeof *ends);
    if (!ends) return;
    for (size_t i = 0; i < s->count; i++) {
        slice *e = &s->items[i];
        if (i && (e->pid != s->items[i - 1].pid || e->tid != s->items[i - 1].tid)) depth = 0;
        while (depth && ends[depth - 1] <= e->ts_ns) depth--;
        if (depth && e->ts_ns + e->dur_ns > ends[depth - 1]) e->dur_ns = ends[depth - 1] - e->ts_ns;
        ends[depth++] = e->ts_ns + e->dur_ns;
    }
    free(ends);
}

static int write_us(FILE *f, int64_t ns)
{
    return fprintf(f, "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
}

/* meta (borrowed, may be NULL): timeline --ranks' clock notes, put in otherData, and its
 * "process_names" as metadata events naming each pid. */
static int write_trace(FILE *f, const slices *s, json_t *meta)
{
    pb_buf name = PB_BUF_INIT;
    fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"probing timeline\"", f);
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v) {
        if (strcmp(key, "process_names") == 0) continue;
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text) return -ENOMEM;
        fprintf(f, ",\"%s\":%s", key, text);
        free(text);
    }
    fputs("},\"traceEvents\":[", f);
    size_t k;
    int first = 1;
    json_array_foreach(json_object_get(meta, "process_names"), k, v) {
        char *text = json_dumps(json_object_get(v, "name"), JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text) return -ENOMEM;
        fprintf(f, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%lld,\"args\":{\"name\":%s}}",
                first ? "" : ",", (long long)json_integer_value(json_object_get(v, "pid")), text);
        free(text);
        first = 0;
    }
    for (size_t i = 0; i < s->count; i++) {
        const slice *e = &s->items[i];
        name.len = 0;
        if (pb_json_escape(&name, e->name, strlen(e->name))) {
            pb_buf_free(&name);
            return -ENOMEM;
        }
        fprintf(f, "%s\n{\"name\":%.*s,\"cat\":\"%s\",\"ph\":\"X\",\"ts\":", first ? "" : ",",
                (int)name.len, name.data, e->cat);
        first = 0;
        write_us(f, e->ts_ns);
        fputs(",\"dur\":", f);
        write_us(f, e->dur_ns);
        fprintf(f, ",\"pid\":%lld,\"tid\":%lld,\"args\":{\"step\":%lld}}", e->pid, e->tid, e->step);
    }
    fputs("\n]}\n", f);
    pb_buf_free(&name);
    return 0;
}

#define INT(row, i) ((long long)json_integer_value(json_array_get(row, i)))
#define STR(row, i) json_string_value(json_array_get(row, i))

/* Reads t's steps, module executions, data waits and collectives into s. pid: the process id
 * the slices get (< 0: the rank column of each row). anchor_step / anchor_ns: when anchor_ns is
 * not 0, step anchor_step started at anchor_ns on the common clock and every slice is moved by
 * the same amount (timeline --ranks); else the first recorded step starts at 0. *nsteps: steps
 * read. Returns 0, 1 (the error was printed) or -ENOMEM. */
static int collect_slices(const pb_target *t, long long pid, long long anchor_step, int64_t anchor_ns,
                          slices *s, size_t *nsteps)
{
    json_t *steps = NULL, *main_thread = NULL, *modules = NULL, *waits = NULL, *colls = NULL;
    json_t *row;
    step_starts ss = {0};
    long long tid_main = 0;
    size_t i, first_slice = s->count;
    int rc = 1;
    char label[256];

    if (pb_client_query_rows(t, "SELECT step, wall, rank FROM python.steps ORDER BY step", &steps) ||
        pb_client_query_rows(t, "SELECT thread, rank FROM python.torch_trace WHERE depth = 0 AND "
                                "stage = 'forward' GROUP BY thread, rank ORDER BY COUNT(*) DESC "
                                "LIMIT 1", &main_thread) ||
        pb_client_query_rows(t, "SELECT step, module, stage, time_offset, total_duration, thread, "
                                "rank FROM python.torch_trace ORDER BY step, seq", &modules) ||
        pb_client_query_rows(t, "SELECT step, batch_index, time_offset, wait, rank FROM "
                                "python.dataloader_trace ORDER BY step, batch_index", &waits) ||
        pb_client_query_rows(t, "SELECT step, operation_type, time_offset, duration_ms, rank "
                                "FROM python.nccl_trace ORDER BY step, time_offset", &colls))
        goto done;
    rc = -ENOMEM;
    if ((row = json_array_get(main_thread, 0))) tid_main = INT(row, 0);
    ss.count = json_array_size(steps);
    ss.start_ns = calloc(ss.count + 1, sizeof *ss.start_ns);
    if (!ss.start_ns) goto done;
#define PID(row, col) (pid >= 0 ? pid : INT(row, col))
    json_array_foreach(steps, i, row) {
        long long step = INT(row, 0);
        if (i == 0) ss.first = step;
        if (step != ss.first + (long long)i) { /* a gap: keep the contiguous part only */
            ss.count = i;
            break;
        }
        ss.start_ns[i + 1] = ss.start_ns[i] + seconds_ns(json_array_get(row, 1));
        snprintf(label, sizeof label, "step %lld", step);
        if (add_slice(s, ss.start_ns[i], ss.start_ns[i + 1] - ss.start_ns[i], PID(row, 2),
                      tid_main, label, "step", step))
            goto done;
    }
    json_array_foreach(modules, i, row) {
        int64_t start = step_start(&ss, INT(row, 0));
        if (start < 0) continue;
        if (add_slice(s, start + seconds_ns(json_array_get(row, 3)),
                      seconds_ns(json_array_get(row, 4)), PID(row, 6), INT(row, 5), STR(row, 1),
                      STR(row, 2) && strcmp(STR(row, 2), "backward") == 0 ? "backward"
                      : STR(row, 2) && strcmp(STR(row, 2), "step") == 0 ? "optimizer"
                                                                         : "forward",
                      INT(row, 0)))
            goto done;
    }
    json_array_foreach(waits, i, row) {
        int64_t start = step_start(&ss, INT(row, 0));
        if (start < 0) continue;
        if (add_slice(s, start + seconds_ns(json_array_get(row, 2)),
                      seconds_ns(json_array_get(row, 3)), PID(row, 4), tid_main, "data wait",
                      "data", INT(row, 0)))
            goto done;
    }
    json_array_foreach(colls, i, row) {
        int64_t start = step_start(&ss, INT(row, 0));
        if (start < 0) continue;
        double ms = json_number_value(json_array_get(row, 3));
        if (add_slice(s, start + seconds_ns(json_array_get(row, 2)),
                      isfinite(ms) ? (int64_t)llround(ms * 1e6) : 0, PID(row, 4), tid_main,
                      STR(row, 1), "collective", INT(row, 0)))
            goto done;
    }
#undef PID
    if (device_slices(t, pid, &ss, s)) goto done;
    if (anchor_ns) {
        int64_t rel = step_start(&ss, anchor_step);
        int64_t shift = anchor_ns - (rel >= 0 ? rel : ss.start_ns[ss.count]);
        for (i = first_slice; i < s->count; i++) s->items[i].ts_ns += shift;
    }
    *nsteps += ss.count;
    rc = 0;
done:
    free(ss.start_ns);
    json_decref(steps);
    json_decref(main_thread);
    json_decref(modules);
    json_decref(waits);
    json_decref(colls);
    return rc;
}

/* Writes s (sorted and nested) to a->output. Returns the exit status. */
static int write_output(const pb_cli_args *a, const slices *s, json_t *meta, size_t nsteps)
{
    FILE *out = strcmp(a->output, "-") == 0 ? stdout : fopen(a->output, "w");
    if (!out) return pb_cli_error("cannot write %s: %s", a->output, strerror(errno));
    if (write_trace(out, s, meta)) {
        if (out != stdout) fclose(out);
        return pb_cli_error("out of memory");
    }
    if ((out != stdout && fclose(out) != 0) || (out == stdout && fflush(out) != 0))
        return pb_cli_error("cannot write %s: %s", a->output, strerror(errno));
    if (strcmp(a->output, "-") != 0)
        fprintf(stderr, "probing: wrote %zu slices over %zu steps to %s (open it in "
                "https://ui.perfetto.dev or chrome://tracing)\n", s->count, nsteps, a->output);
    return PB_EXIT_OK;
}

static void free_slices(slices *s)
{
    for (size_t i = 0; i < s->count; i++) free(s->items[i].name);
    free(s->items);
}

/* timeline --ranks: one process per rank on the CLI's clock (see the header). */
static int timeline_ranks(const pb_cli_args *a)
{
    long deadline = pb_fanout_deadline_ms(a->deadline_s);
    pb_rank_ep *eps = NULL;
    int n = 0, rc = PB_EXIT_ERROR, missing = 0;
    size_t nsteps = 0;
    slices s = {0};
    if (pb_fanout_roster(&a->resolved, deadline, &eps, &n)) return PB_EXIT_ERROR;
    unsigned char *sel = calloc((size_t)n, 1);
    pb_fanout_req *reqs = calloc((size_t)n, sizeof *reqs);
    json_t *meta = json_object(), *clocks = json_array(), *names = json_array();
    if (!sel || !reqs || !meta || !clocks || !names) {
        pb_cli_error("out of memory");
        goto done;
    }
    if ((rc = pb_fanout_parse_ranks(a->ranks, n, sel))) goto done;
    rc = PB_EXIT_ERROR;
    for (int r = 0; r < n; r++) {
        if (!sel[r]) continue;
        pb_fanout_prepare(&reqs[r], &eps[r]);
    }
    pb_fanout_run(reqs, n, "GET", "/api/rank", NULL, deadline);
    int64_t t0 = 0;
    for (int r = 0; r < n; r++) {
        if (!sel[r]) continue;
        json_t *ans = reqs[r].status == 200 ? reqs[r].root : NULL;
        double now = json_number_value(json_object_get(ans, "now"));
        double started = json_number_value(json_object_get(ans, "step_started"));
        if (!ans || now <= 0) {
            pb_cli_error("rank %d (%s) is missing: %s", r,
                         eps[r].host[0] ? eps[r].host : "host unknown",
                         reqs[r].err[0] ? reqs[r].err : "no clock in its answer");
            missing++;
            continue;
        }
        double unc, offset = pb_fanout_clock_offset(&reqs[r], now, &unc);
        json_array_append_new(clocks, json_pack("{s:i,s:s,s:f,s:f}", "rank", r, "host", eps[r].host,
                                                "offset_ms", offset * 1e3, "uncertainty_ms", unc * 1e3));
        size_t before = s.count;
        int64_t anchor = started > 0 ? (int64_t)llround((started - offset) * 1e9) : 1;
        int c = collect_slices(&reqs[r].target, r, json_integer_value(json_object_get(ans, "step")),
                               anchor, &s, &nsteps);
        if (c == -ENOMEM) {
            pb_cli_error("out of memory");
            goto done;
        }
        if (c) {
            missing++;
            continue;
        }
        for (size_t i = before; i < s.count; i++)
            if (!t0 || s.items[i].ts_ns < t0) t0 = s.items[i].ts_ns;
        char label[400];
        snprintf(label, sizeof label, "rank %d (%s)", r, eps[r].host);
        json_array_append_new(names, json_pack("{s:i,s:s}", "pid", r, "name", label));
    }
    for (size_t i = 0; i < s.count; i++) s.items[i].ts_ns -= t0;
    qsort(s.items, s.count, sizeof *s.items, by_thread_then_time);
    make_nested(&s);
    json_object_set_new(meta, "clock", json_string(
        "each rank's times moved to the CLI's wall clock by offset = the smallest correction "
        "the rank's answer allows (it read its clock between request sent and answer received: "
        "0 when that interval holds 0, else the interval's end nearest 0); the true offset is "
        "within uncertainty (the round trip) of it; ts 0 is start_unix"));
    json_object_set_new(meta, "start_unix", json_real((double)t0 / 1e9));
    json_object_set(meta, "ranks", clocks);
    json_object_set(meta, "process_names", names);
    rc = write_output(a, &s, meta, nsteps);
    if (rc == PB_EXIT_OK && missing) rc = PB_EXIT_PARTIAL;
done:
    free_slices(&s);
    if (reqs) pb_fanout_free(reqs, n);
    free(reqs);
    free(sel);
    free(eps);
    json_decref(meta);
    json_decref(clocks);
    json_decref(names);
    return rc;
}

/* The options of timeline (option.h): the parser and 'timeline --help' read them. */
const pb_option pb_options_timeline[] = {
    PB_OPTION_OUTPUT("FILE.json", "the file to write the trace to; '-o -' writes to stdout",
                     PB_USAGE("-o FILE.json")),
    PB_OPTION_RANKS("one trace for ranks R of the target's job ('all' or 0,2-5): a process per "
                    "rank, on this machine's clock, each rank's clock offset and its uncertainty "
                    "in otherData (docs/cluster.md); exit status 3 when some ranks are missing",
                    PB_USAGE_RANKS_DEADLINE),
    PB_OPTION_DEADLINE("with --ranks: wait at most S seconds for the ranks (default 5)",
                       PB_USAGE_SHOWN_ABOVE),
    PB_OPTION_TABLE_END,
};

int cmd_timeline(const pb_cli_args *a)
{
    if (!a->output)
        return pb_cli_usage_error("timeline needs an output file: probing <target> timeline -o "
                                  "run.json");
    if (a->ranks) return timeline_ranks(a);
    slices s = {0};
    size_t nsteps = 0;
    int rc = collect_slices(&a->resolved, -1, 0, 0, &s, &nsteps);
    if (rc == -ENOMEM) pb_cli_error("out of memory");
    if (rc) {
        free_slices(&s);
        return PB_EXIT_ERROR;
    }
    qsort(s.items, s.count, sizeof *s.items, by_thread_then_time);
    make_nested(&s);
    rc = write_output(a, &s, NULL, nsteps);
    free_slices(&s);
    return rc;
}
