/*
 * cmd_capture.c - `probing <target> capture [--steps N] [--memory] [--shapes] [--stack]
 * [-o FILE] [--timeout S]`: torch.profiler for N steps of a live job.
 *
 * POST /api/capture asks for it; the agent starts the profiler at the next step boundary on the
 * training thread and stops it N steps later. This command polls GET /api/capture until the
 * capture has ended, then prints the top ops from python.torch_ops (POST /api/query) and, with
 * -o, fetches the Chrome trace (GET /api/capture/trace) and writes it here: the agent writes it
 * only to a file of its own and never to a path a client names. On --timeout or Ctrl-C the
 * capture is cancelled (POST /api/capture/cancel) so it cannot start or go on unwatched.
 * With --ranks the same capture runs on many ranks of a job at once (capture_ranks.c).
 */
#include "client/client.h"
#include "clock.h"
#include "cmd/capture_ranks.h"
#include "cmd/command.h"
#include "out/format.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TOP_OPS 10

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    nanosleep(&ts, NULL); /* Ctrl-C cuts it short, which is what we want */
}

static long long int_field(json_t *o, const char *key, long long deflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : deflt;
}

static const char *str_field(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* GET /api/capture. Returns the status object (caller owns) or NULL after printing why. */
static json_t *get_status(const pb_target *t)
{
    return pb_client_call_ok(t, "GET", "/api/capture", NULL, PB_CLI_INFO_TIMEOUT_MS);
}

/* POST /api/capture/cancel for id. Returns the status after it (caller owns) or NULL. */
static json_t *cancel(const pb_target *t, long long id)
{
    json_t *req = json_pack("{s:I}", "capture", (json_int_t)id);
    if (!req) {
        pb_cli_error("out of memory");
        return NULL;
    }
    json_t *root = pb_client_call_ok(t, "POST", "/api/capture/cancel", req, PB_CLI_INFO_TIMEOUT_MS);
    json_decref(req);
    return root;
}

/* The capture did not end in time (or Ctrl-C): cancel it and say what happened. */
static int give_up(const pb_cli_args *a, long long id, double waited_s, int by_signal)
{
    json_t *st = cancel(&a->resolved, id);
    if (!st) return PB_EXIT_ERROR;
    const char *state = str_field(st, "state");
    long long done = int_field(st, "steps_done", 0), steps = int_field(st, "steps", 0);
    char why[128];
    if (by_signal) snprintf(why, sizeof why, "interrupted");
    else snprintf(why, sizeof why, "no result within %g s (--timeout)", waited_s);
    int rc = by_signal ? PB_EXIT_INTERRUPTED : PB_EXIT_TIMEOUT;
    if (!state) {
        pb_cli_error("capture %lld: %s; the target's answer to the cancel is incomplete", id, why);
    } else if (strcmp(state, "cancelled") == 0 && json_is_null(json_object_get(st, "first_step"))) {
        pb_cli_error("capture %lld: %s: the target did not reach a step boundary (it ends a "
                     "training step at optimizer.step(), or, without an optimizer, at the next "
                     "forward of its model). Is it training? The capture was cancelled; the "
                     "process runs on untouched.", id, why);
    } else if (strcmp(state, "running") == 0) {
        pb_cli_error("capture %lld: %s, with %lld of %lld steps captured (the steps are slow, or "
                     "training stopped); cancelled: the training thread stops the profiler and "
                     "drops its data at its next step boundary or model call. Give a longer "
                     "--timeout or fewer --steps.", id, why, done, steps);
    } else if (strcmp(state, "processing") == 0) {
        pb_cli_error("capture %lld: %s; its steps are captured and the process is still turning "
                     "them into rows: they will appear in python.torch_ops (capture = %lld)", id,
                     why, id);
    } else {
        pb_cli_error("capture %lld: %s; it is %s", id, why, state);
    }
    json_decref(st);
    return rc;
}

/* Prints the top ops of the capture, by self CPU time (and kernels by device time). */
static int print_summary(const pb_cli_args *a, json_t *st, FILE *out)
{
    long long id = int_field(st, "capture", 0);
    long long first = int_field(st, "first_step", 0), last = int_field(st, "last_step", 0);
    json_t *activities = json_object_get(st, "activities");
    int with_device = json_array_size(activities) > 1;
    fprintf(out, "capture %lld: %lld step%s (%lld-%lld) of %s, %s\n", id, last - first + 1,
            last == first ? "" : "s", first, last, a->target,
            with_device ? "CPU and CUDA activities"
                        : "CPU activities only (the process does not use CUDA: no kernel rows, "
                          "device columns NULL)");
    fprintf(out, "%lld rows in python.torch_ops from %lld profiler events (processed in %.1f s)\n",
            int_field(st, "rows", 0), int_field(st, "events", 0),
            json_number_value(json_object_get(st, "processing_s")));

    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT name, sum(calls) AS calls, round(sum(self_cpu_us) / 1000, 3) AS self_cpu_ms, "
             "round(100.0 * sum(self_cpu_us) / (SELECT sum(self_cpu_us) FROM python.torch_ops "
             "WHERE capture = %lld), 1) AS pct, round(sum(total_cpu_us) / 1000, 3) AS "
             "total_cpu_ms FROM python.torch_ops WHERE capture = %lld AND device_type = 'cpu' "
             "GROUP BY name ORDER BY sum(self_cpu_us) DESC LIMIT %d", id, id, TOP_OPS);
    json_t *req = json_pack("{s:s}", "sql", sql), *root = NULL;
    long status;
    int rc = req ? pb_client_call(&a->resolved, "POST", "/api/query", req,
                                  PB_CLI_QUERY_TIMEOUT_MS, &root, &status)
                 : PB_EXIT_ERROR;
    json_decref(req);
    if (rc) return rc;
    if (status != 200) {
        pb_client_print_error(status, root);
        json_decref(root);
        return PB_EXIT_ERROR;
    }
    fprintf(out, "\ntop ops by self CPU time, all captured steps:\n");
    if (pb_format_rows(out, PB_FORMAT_TABLE, PB_TABLE_PLAIN, json_object_get(root, "columns"),
                       json_object_get(root, "rows"))) {
        json_decref(root);
        return PB_EXIT_ERROR;
    }
    json_decref(root);

    if (with_device) {
        snprintf(sql, sizeof sql,
                 "SELECT name, sum(calls) AS calls, round(sum(self_device_us) / 1000, 3) AS "
                 "device_ms FROM python.torch_ops WHERE capture = %lld AND device_type <> 'cpu' "
                 "GROUP BY name ORDER BY sum(self_device_us) DESC LIMIT %d", id, TOP_OPS);
        req = json_pack("{s:s}", "sql", sql);
        rc = req ? pb_client_call(&a->resolved, "POST", "/api/query", req,
                                  PB_CLI_QUERY_TIMEOUT_MS, &root, &status)
                 : PB_EXIT_ERROR;
        json_decref(req);
        if (rc) return rc;
        if (status == 200) {
            fprintf(out, "\ntop kernels by device time:\n");
            pb_format_rows(out, PB_FORMAT_TABLE, PB_TABLE_PLAIN, json_object_get(root, "columns"),
                           json_object_get(root, "rows"));
        }
        json_decref(root);
    }
    fprintf(out, "\nper module and stage: probing %s query \"SELECT module, stage, name, "
            "sum(calls) AS calls, sum(self_cpu_us) AS self_us FROM python.torch_ops WHERE "
            "capture = %lld GROUP BY module, stage, name ORDER BY self_us DESC LIMIT 20\"\n",
            a->target, id);
    return PB_EXIT_OK;
}

/* GET /api/capture/trace into out (already open). */
static int write_trace(const pb_cli_args *a, FILE *out, const char *name, FILE *note)
{
    pb_response resp;
    char err[512];
    if (pb_client_request(&a->resolved, "GET", "/api/capture/trace", NULL, PB_CLI_QUERY_TIMEOUT_MS,
                          &resp, err, sizeof err)) {
        pb_cli_error("%s", err);
        return PB_EXIT_ERROR;
    }
    int rc = PB_EXIT_ERROR;
    if (resp.status != 200) {
        json_error_t jerr;
        json_t *root = json_loadb(resp.body.data ? resp.body.data : "", resp.body.len, 0, &jerr);
        pb_client_print_error(resp.status, root);
        json_decref(root);
        goto done;
    }
    if (fwrite(resp.body.data, 1, resp.body.len, out) != resp.body.len || fflush(out) != 0) {
        pb_cli_error("cannot write %s: %s", name, strerror(errno));
        goto done;
    }
    if (out != stdout)
        fprintf(note, "trace: wrote %s (%.1f MB Chrome trace: open it in https://ui.perfetto.dev "
                "or chrome://tracing)\n", name, (double)resp.body.len / 1e6);
    rc = PB_EXIT_OK;
done:
    pb_buf_free(&resp.body);
    return rc;
}

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

/* The options of capture (option.h): the parser and 'capture --help' read them. */
const pb_option pb_options_capture[] = {
    PB_OPTION_INT_("steps", "N", steps, 1, PB_CLI_CAPTURE_MAX_STEPS,
                   "a number of steps from 1 to " STRINGIFY(PB_CLI_CAPTURE_MAX_STEPS),
                   "steps to capture, 1 to " STRINGIFY(PB_CLI_CAPTURE_MAX_STEPS) " (default 3)"),
    PB_OPTION_FLAG_("memory", memory,
                    "also record memory allocated and freed per op (profile_memory)"),
    PB_OPTION_FLAG_("shapes", shapes,
                    "also record input shapes (record_shapes): one row per op and shapes"),
    PB_OPTION_FLAG_("stack", stack,
                    "also record the Python frames that called each op (with_stack)"),
    PB_OPTION_OUTPUT("FILE", "also write the profiler's Chrome trace (Perfetto, chrome://tracing); "
                             "'-o -' writes it to stdout and the summary to stderr",
                     PB_USAGE("[-o FILE.json]")),
    PB_OPTION_TIMEOUT("give up after S seconds (default 120) and cancel the capture; exit 2"),
    PB_OPTION_RANKS("the same capture on ranks R of the target's job at once ('all' or 0,2-5); "
                    "-o DIR then writes DIR/rank<R>.json per rank (an HTA trace directory); ranks "
                    "without a capture are named with why (then exit status 3)",
                    PB_USAGE("[--ranks all|0,2-5 [-o DIR] [--deadline S]]")),
    PB_OPTION_DEADLINE("with --ranks: wait at most S seconds for each round of answers "
                       "(default 5)",
                       PB_USAGE_SHOWN_ABOVE),
    PB_OPTION_TABLE_END,
};

int cmd_capture(const pb_cli_args *a)
{
    int steps = a->steps ? a->steps : PB_CAPTURE_DEFAULT_STEPS;
    double timeout_s = a->timeout_s > 0 ? a->timeout_s : PB_CAPTURE_DEFAULT_TIMEOUT_S;
    int to_stdout = a->output && strcmp(a->output, "-") == 0;
    FILE *trace = NULL, *note = to_stdout ? stderr : stdout;
    json_t *req = NULL, *root = NULL;
    long status;
    int rc = PB_EXIT_ERROR;
    struct sigaction sa, old_sa;
    int handler = 0;

    if (a->ranks) return pb_capture_ranks(a); /* every selected rank of the job */
    if (a->deadline_s > 0) {
        pb_cli_error("--deadline goes with --ranks (the time to wait for each rank's answer)");
        return PB_EXIT_USAGE;
    }
    if (a->resolved.kind == PB_TARGET_FILE) {
        pb_cli_error("a recording cannot capture: capture needs a live process (read a "
                     "recording's captures with 'probing %s query \"SELECT ... FROM "
                     "python.torch_ops\"')", a->target);
        return PB_EXIT_ERROR;
    }
    /* Fail on an unwritable file before the job is profiled, not after. */
    if (a->output) {
        trace = to_stdout ? stdout : fopen(a->output, "w");
        if (!trace) {
            pb_cli_error("cannot write %s: %s", a->output, strerror(errno));
            return PB_EXIT_ERROR;
        }
    }
    req = json_pack("{s:i,s:b,s:b,s:b,s:b}", "steps", steps, "memory", a->memory, "shapes",
                    a->shapes, "stack", a->stack, "trace", a->output != NULL);
    if (!req) {
        pb_cli_error("out of memory");
        goto done;
    }
    if (pb_client_call(&a->resolved, "POST", "/api/capture", req, PB_CLI_INFO_TIMEOUT_MS, &root,
                       &status))
        goto done;
    if (status != 202) {
        pb_client_print_error(status, root);
        goto done;
    }
    long long id = int_field(root, "capture", 0);
    json_decref(root);
    root = NULL;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    handler = sigaction(SIGINT, &sa, &old_sa) == 0;

    double start = pb_mono_s(), pause = 0.02;
    for (;;) {
        if (interrupted) {
            rc = give_up(a, id, pb_mono_s() - start, 1);
            goto done;
        }
        if (!(root = get_status(&a->resolved))) goto done;
        const char *state = str_field(root, "state");
        if (int_field(root, "capture", 0) != id) {
            pb_cli_error("capture %lld ended and another capture has started since; its rows are "
                         "in python.torch_ops (capture = %lld)", id, id);
            goto done;
        }
        if (state && (strcmp(state, "done") == 0 || strcmp(state, "failed") == 0 ||
                      strcmp(state, "cancelled") == 0))
            break;
        json_decref(root);
        root = NULL;
        if (pb_mono_s() - start >= timeout_s) {
            rc = give_up(a, id, timeout_s, 0);
            goto done;
        }
        sleep_s(pause);
        pause = pause * 1.5 > 0.25 ? 0.25 : pause * 1.5;
    }
    const char *state = str_field(root, "state"), *error = str_field(root, "error");
    if (strcmp(state, "done") != 0) {
        pb_cli_error("capture %lld %s: %s", id, strcmp(state, "failed") == 0 ? "failed"
                     : "was cancelled", error ? error : "(no reason given)");
        goto done;
    }
    if ((rc = print_summary(a, root, note))) goto done;
    if (trace) rc = write_trace(a, trace, a->output, note);
done:
    if (handler) sigaction(SIGINT, &old_sa, NULL);
    json_decref(req);
    json_decref(root);
    if (trace && trace != stdout) {
        if (fclose(trace) != 0 && rc == PB_EXIT_OK) {
            pb_cli_error("cannot write %s: %s", a->output, strerror(errno));
            rc = PB_EXIT_ERROR;
        }
        if (rc != PB_EXIT_OK) unlink(a->output);
    }
    return rc;
}
