/*
 * capture_ranks.c - `probing <target> capture --ranks all|0,2-5 [-o DIR]`: the same capture on
 * every selected rank of the target's job at once.
 *
 * The ranks come from the job's roster (fanout.h: Unix socket on this host, TCP with the job's
 * token elsewhere). Every reachable rank gets POST /api/capture with the same request; the
 * command then polls GET /api/capture on all of them together (one libcurl multi round per
 * poll) until each capture has ended or --timeout has passed, cancels what has not ended, and
 * with -o DIR fetches each rank's Chrome trace (GET /api/capture/trace) into DIR/rank<R>.json.
 * The agent stamps each trace with its rank, world size and ProfilerStep#N steps, so DIR is a
 * trace directory for Holistic Trace Analysis. A rank that cannot be reached, refuses, fails or
 * does not finish is named with its reason; the others' results are kept (exit status 3).
 */
#include "cmd/capture_ranks.h"

#include "client/client.h"
#include "client/fanout.h"
#include "clock.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

static long long int_field(json_t *o, const char *key, long long deflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : deflt;
}

/* Per selected rank: where its capture stands. */
typedef struct rank_capture {
    long long id;      /* the capture id its agent gave, 0 when not started */
    int ended;         /* 1: done; -1: failed, cancelled or lost (why says) */
    json_t *status;    /* its last GET /api/capture answer (owned) */
    char why[4800];    /* why this rank has no result (may name a path) */
} rank_capture;

/* Whether state is one a capture does not leave. */
static int final_state(const char *state)
{
    return state && (strcmp(state, "done") == 0 || strcmp(state, "failed") == 0 ||
                     strcmp(state, "cancelled") == 0);
}

/* Creates dir unless it exists as a directory. Returns 0 or prints why and returns 1. */
static int make_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return 0;
        pb_cli_error("capture --ranks writes one trace per rank into a directory, and %s is a "
                     "file: give -o a directory (it is created when missing)", dir);
        return 1;
    }
    if (mkdir(dir, 0777) != 0) {
        pb_cli_error("cannot create the directory %s: %s", dir, strerror(errno));
        return 1;
    }
    return 0;
}

/* GET /api/capture/trace of one rank into DIR/rank<R>.json. Returns 0, or writes why into
 * rc->why and returns -1. */
static int fetch_trace(const pb_cli_args *a, const pb_rank_ep *ep, const pb_target *t,
                       rank_capture *c)
{
    char path[4096], err[512];
    pb_response resp;
    snprintf(path, sizeof path, "%s/rank%d.json", a->output, ep->rank);
    if (pb_client_request(t, "GET", "/api/capture/trace", NULL, PB_CLI_QUERY_TIMEOUT_MS, &resp,
                          err, sizeof err)) {
        snprintf(c->why, sizeof c->why, "its trace could not be fetched: %s", err);
        return -1;
    }
    int rc = -1;
    if (resp.status != 200) {
        json_t *root = json_loadb(resp.body.data ? resp.body.data : "", resp.body.len, 0, NULL);
        const char *msg = json_string_value(json_object_get(root, "error"));
        snprintf(c->why, sizeof c->why, "its trace could not be fetched: HTTP %ld: %s",
                 resp.status, msg ? msg : "no reason given");
        json_decref(root);
        goto done;
    }
    FILE *f = fopen(path, "w");
    if (!f || fwrite(resp.body.data, 1, resp.body.len, f) != resp.body.len) {
        snprintf(c->why, sizeof c->why, "cannot write %s: %s", path, strerror(errno));
        if (f) fclose(f);
        unlink(path);
        goto done;
    }
    if (fclose(f) != 0) {
        snprintf(c->why, sizeof c->why, "cannot write %s: %s", path, strerror(errno));
        unlink(path);
        goto done;
    }
    printf("rank %d: wrote %s (%.1f MB Chrome trace)\n", ep->rank, path,
           (double)resp.body.len / 1e6);
    rc = 0;
done:
    pb_buf_free(&resp.body);
    return rc;
}

/* Asks every rank whose capture has not ended to cancel it (one fan-out round). */
static void cancel_unfinished(pb_fanout_req *reqs, rank_capture *caps, int n, long deadline,
                              const char *why)
{
    pb_fanout_req *cancel = calloc((size_t)(n ? n : 1), sizeof *cancel);
    if (!cancel) return;
    for (int r = 0; r < n; r++) {
        if (!caps[r].id || caps[r].ended) continue;
        char body[64];
        snprintf(body, sizeof body, "{\"capture\":%lld}", caps[r].id);
        cancel[r].target = reqs[r].target;
        cancel[r].usable = 1;
        pb_fanout_run(&cancel[r], 1, "POST", "/api/capture/cancel", body, deadline);
        long long done = int_field(caps[r].status, "steps_done", 0);
        snprintf(caps[r].why, sizeof caps[r].why, "%s with %lld of %lld steps captured; its "
                 "capture %lld was cancelled (the process runs on untouched)", why, done,
                 int_field(caps[r].status, "steps", 0), caps[r].id);
        caps[r].ended = -1;
    }
    pb_fanout_free(cancel, n);
    free(cancel);
}

int pb_capture_ranks(const pb_cli_args *a)
{
    int steps = a->steps ? a->steps : PB_CAPTURE_DEFAULT_STEPS;
    double timeout_s = a->timeout_s > 0 ? a->timeout_s : PB_CAPTURE_DEFAULT_TIMEOUT_S;
    long deadline = pb_fanout_deadline_ms(a->deadline_s);
    pb_rank_ep *eps = NULL;
    pb_fanout_req *reqs = NULL;
    rank_capture *caps = NULL;
    unsigned char *sel = NULL;
    char *body = NULL;
    int n = 0, rc = PB_EXIT_ERROR, handler = 0;
    struct sigaction sa, old_sa;

    if (a->resolved.kind == PB_TARGET_FILE) {
        pb_cli_error("a recording cannot capture: capture --ranks needs a live rank of the job "
                     "(its pid, socket or host:port)");
        return PB_EXIT_ERROR;
    }
    if (a->output && strcmp(a->output, "-") == 0) {
        pb_cli_error("capture --ranks writes one trace per rank: give -o a directory, not '-'");
        return PB_EXIT_USAGE;
    }
    if (a->output && make_dir(a->output)) return PB_EXIT_ERROR;
    if (pb_fanout_roster(&a->resolved, deadline, &eps, &n)) return PB_EXIT_ERROR;
    sel = calloc((size_t)(n ? n : 1), 1);
    reqs = calloc((size_t)(n ? n : 1), sizeof *reqs);
    caps = calloc((size_t)(n ? n : 1), sizeof *caps);
    json_t *request = json_pack("{s:i,s:b,s:b,s:b,s:b}", "steps", steps, "memory", a->memory,
                                "shapes", a->shapes, "stack", a->stack, "trace",
                                a->output != NULL);
    body = request ? json_dumps(request, JSON_COMPACT) : NULL;
    json_decref(request);
    if (!sel || !reqs || !caps || !body) {
        pb_cli_error("out of memory");
        goto done;
    }
    if ((rc = pb_fanout_parse_ranks(a->ranks, n, sel))) goto done;
    rc = PB_EXIT_ERROR;
    for (int r = 0; r < n; r++) {
        if (!sel[r]) continue;
        if (!pb_fanout_prepare(&reqs[r], &eps[r]))
            snprintf(caps[r].why, sizeof caps[r].why, "%s", reqs[r].err);
    }

    /* Start: the same request to every rank at once. */
    pb_fanout_run(reqs, n, "POST", "/api/capture", body, deadline);
    int started = 0, selected = 0;
    for (int r = 0; r < n; r++) selected += sel[r] != 0;
    for (int r = 0; r < n; r++) {
        if (!sel[r] || !reqs[r].usable) continue;
        if (reqs[r].status == 202 && int_field(reqs[r].root, "capture", 0) > 0) {
            caps[r].id = int_field(reqs[r].root, "capture", 0);
            started++;
            continue;
        }
        const char *msg = json_string_value(json_object_get(reqs[r].root, "error"));
        if (reqs[r].status)
            snprintf(caps[r].why, sizeof caps[r].why, "refused the capture (HTTP %ld): %s",
                     reqs[r].status, msg ? msg : "no reason given");
        else
            snprintf(caps[r].why, sizeof caps[r].why, "did not answer: %s", reqs[r].err);
        reqs[r].usable = 0;
    }
    pb_fanout_free(reqs, n);
    if (started) {
        printf("capture of %d step%s started on %d of %d selected rank%s\n", steps,
               steps == 1 ? "" : "s", started, selected, selected == 1 ? "" : "s");
        fflush(stdout);
    }

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    handler = sigaction(SIGINT, &sa, &old_sa) == 0;

    /* Wait: one status round for all unfinished ranks at a time. */
    double start = pb_mono_s(), pause = 0.05;
    int unfinished = started;
    while (unfinished > 0) {
        if (interrupted) {
            cancel_unfinished(reqs, caps, n, deadline, "interrupted (Ctrl-C)");
            break;
        }
        if (pb_mono_s() - start >= timeout_s) {
            char why[96];
            snprintf(why, sizeof why, "no result within %g s (--timeout)", timeout_s);
            cancel_unfinished(reqs, caps, n, deadline, why);
            break;
        }
        for (int r = 0; r < n; r++) reqs[r].usable = caps[r].id && !caps[r].ended;
        pb_fanout_run(reqs, n, "GET", "/api/capture", NULL, deadline);
        unfinished = 0;
        for (int r = 0; r < n; r++) {
            if (!caps[r].id || caps[r].ended) continue;
            json_t *st = reqs[r].root;
            if (reqs[r].status != 200 || !st) {
                unfinished++; /* a slow answer: asked again next round, until --timeout */
                continue;
            }
            json_decref(caps[r].status);
            caps[r].status = json_incref(st);
            const char *state = json_string_value(json_object_get(st, "state"));
            if (int_field(st, "capture", 0) != caps[r].id) {
                snprintf(caps[r].why, sizeof caps[r].why, "its capture %lld ended and another "
                         "capture started since", caps[r].id);
                caps[r].ended = -1;
            } else if (final_state(state)) {
                const char *error = json_string_value(json_object_get(st, "error"));
                caps[r].ended = strcmp(state, "done") == 0 ? 1 : -1;
                if (caps[r].ended < 0)
                    snprintf(caps[r].why, sizeof caps[r].why, "its capture %lld %s: %s",
                             caps[r].id, strcmp(state, "failed") == 0 ? "failed"
                             : "was cancelled", error ? error : "no reason given");
            } else {
                unfinished++;
            }
        }
        pb_fanout_free(reqs, n);
        if (unfinished) {
            struct timespec ts = {0, (long)(pause * 1e9)};
            nanosleep(&ts, NULL);
            pause = pause * 1.5 > 0.25 ? 0.25 : pause * 1.5;
        }
    }

    /* Results, in rank order. */
    int ok = 0, missing = 0;
    for (int r = 0; r < n; r++) {
        if (!sel[r]) continue;
        if (caps[r].ended == 1) {
            json_t *st = caps[r].status;
            long long first = int_field(st, "first_step", 0), last = int_field(st, "last_step", 0);
            printf("rank %d (%s): capture %lld: %lld step%s (%lld-%lld), %lld rows in "
                   "python.torch_ops\n", eps[r].rank, eps[r].host[0] ? eps[r].host : "?",
                   caps[r].id, last - first + 1, last == first ? "" : "s", first, last,
                   int_field(st, "rows", 0));
            if (a->output && fetch_trace(a, &eps[r], &reqs[r].target, &caps[r])) {
                caps[r].ended = -1;
                missing++;
                continue;
            }
            ok++;
        } else {
            missing++;
        }
    }
    if (ok)
        printf("top ops of each rank's latest capture: probing %s query --ranks %s \"SELECT "
               "name, sum(calls) AS calls, round(sum(self_cpu_us) / 1000, 3) AS self_cpu_ms FROM "
               "python.torch_ops WHERE capture = (SELECT max(capture) FROM python.torch_ops) AND "
               "device_type = 'cpu' GROUP BY name ORDER BY self_cpu_ms DESC LIMIT 5\"\n",
               a->target, a->ranks);
    fflush(stdout);
    for (int r = 0; r < n; r++) {
        if (!sel[r] || caps[r].ended == 1) continue;
        pb_cli_error("rank %d (%s) has no capture: %s", eps[r].rank,
                     eps[r].host[0] ? eps[r].host : "host unknown",
                     caps[r].why[0] ? caps[r].why : "no reason recorded");
    }
    rc = interrupted ? PB_EXIT_INTERRUPTED : !ok ? PB_EXIT_ERROR
         : missing ? PB_EXIT_PARTIAL : PB_EXIT_OK;
done:
    if (handler) sigaction(SIGINT, &old_sa, NULL);
    for (int r = 0; caps && r < n; r++) json_decref(caps[r].status);
    if (reqs) pb_fanout_free(reqs, n);
    free(reqs);
    free(caps);
    free(sel);
    free(body);
    free(eps);
    return rc;
}
