/*
 * test_capture.c - the capture state machine (src/agent/collect/capture_state.c) without Python.
 *
 * Plays the three parties by hand: the server threads (request, status, cancel, trace, close),
 * the training thread (boundary, started, stop_failed, aborted, root call) and the thread that
 * stores the results (finished), and checks each transition, what the step hook is told
 * (pb_capture_wanted), the JSON a client reads and the trace file's life.
 */
#include "capture_state.h"
#include "check.h"
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64], prefix[128];

static json_t *parse(pb_buf *b)
{
    json_t *j = json_loadb(b->data ? b->data : "", b->len, 0, NULL);
    pb_buf_reset(b);
    return j;
}

/* GET /api/capture as a parsed object (caller decrefs). */
static json_t *status(void)
{
    pb_buf b = PB_BUF_INIT;
    int http = pb_capture_state_status(&b);
    json_t *j = parse(&b);
    pb_buf_free(&b);
    CHECK(http == 200 && j, "status answers 200 with JSON");
    return j;
}

static const char *state_of(json_t *j) { return json_string_value(json_object_get(j, "state")); }
static long long int_of(json_t *j, const char *k) { return (long long)json_integer_value(json_object_get(j, k)); }

static const char *error_of(pb_buf *b)
{
    static char msg[1024];
    json_t *j = parse(b);
    const char *e = json_string_value(json_object_get(j, "error"));
    snprintf(msg, sizeof msg, "%s", e ? e : "(no error field)");
    json_decref(j);
    return msg;
}

static int wanted(void) { return atomic_load(&pb_capture_wanted); }

static void test_full_capture(void)
{
    pb_buf b = PB_BUF_INIT;
    pb_capture_job job;
    json_t *j = status();
    CHECK_STR(state_of(j), "none", "before any request: state none");
    CHECK(json_is_null(json_object_get(j, "capture")), "... and capture null");
    json_decref(j);
    CHECK(pb_capture_state_boundary(5, 1, &job) == PB_CAPTURE_ACT_NONE, "a boundary with nothing asked: no action");

    pb_capture_request req = {.steps = 2, .shapes = 1, .trace = 1};
    CHECK(pb_capture_state_request(&req, 41, 1, &b) == 202, "request -> 202");
    j = parse(&b);
    CHECK(int_of(j, "capture") == 1 && strcmp(state_of(j), "pending") == 0 && int_of(j, "requested_at_step") == 41 &&
              json_is_null(json_object_get(j, "first_step")) && json_is_null(json_object_get(j, "activities")),
          "202 body: capture 1 pending since step 41, not started");
    CHECK(json_is_true(json_object_get(json_object_get(j, "options"), "shapes")) &&
              json_is_false(json_object_get(json_object_get(j, "options"), "memory")),
          "the options are echoed");
    json_decref(j);
    CHECK(wanted(), "pending: the step hook must call in");

    CHECK(pb_capture_state_request(&req, 41, 1, &b) == 409, "a second request while pending -> 409");
    CHECK_STR(error_of(&b), "one capture runs at a time and capture 1 is waiting for the next step boundary "
              "(asked for during step 41); wait for it to end", "409 message while pending");

    CHECK(pb_capture_state_boundary(42, 7, &job) == PB_CAPTURE_ACT_START && job.id == 1 && job.options.steps == 2,
          "first boundary: START with the options");
    CHECK(pb_capture_state_started(1, 42, 7, NULL, NULL) == 1, "started(): running");
    j = status();
    CHECK(strcmp(state_of(j), "running") == 0 && int_of(j, "first_step") == 42 &&
              json_array_size(json_object_get(j, "activities")) == 1,
          "running from step 42, activities [cpu]");
    json_decref(j);

    CHECK(pb_capture_state_boundary(43, 8, &job) == PB_CAPTURE_ACT_NONE,
          "a boundary on another thread does nothing (the profiler stops where it started)");
    CHECK(pb_capture_state_boundary(43, 7, &job) == PB_CAPTURE_ACT_MARK, "step 43 begins: MARK");
    CHECK(pb_capture_state_request(&req, 43, 1, &b) == 409, "a second request while running -> 409");
    CHECK_STR(error_of(&b), "one capture runs at a time and capture 1 is running (1 of 2 steps captured); wait for it to end",
              "409 message while running");
    CHECK(pb_capture_state_trace(&b) == 409, "trace while running -> 409");
    CHECK_STR(error_of(&b), "capture 1 is running (1 of 2 steps captured); its trace is written when it ends",
              "trace-while-running message");
    CHECK(pb_capture_state_close(&b) == 409, "detach while running -> 409");

    CHECK(pb_capture_state_boundary(44, 7, &job) == PB_CAPTURE_ACT_STOP && job.first_step == 42,
          "step 44 begins after 2 captured steps: STOP");
    char want_path[256];
    snprintf(want_path, sizeof want_path, "%s.capture-1.json", prefix);
    CHECK_STR(job.trace_path, want_path, "the trace goes to <prefix>.capture-<id>.json");
    CHECK(!wanted(), "processing from the STOP on (the results may be in before the stop returns): "
          "the step hook is left alone");
    j = status();
    CHECK(strcmp(state_of(j), "processing") == 0 && int_of(j, "last_step") == 43 && int_of(j, "steps_done") == 2,
          "processing steps 42-43");
    json_decref(j);
    CHECK(pb_capture_state_request(&req, 44, 1, &b) == 409, "a request while processing -> 409");

    FILE *f = fopen(job.trace_path, "w");
    fputs("{\"traceEvents\": []}", f);
    fclose(f);
    pb_capture_state_finished(2, 9, 9, 0.5, NULL, NULL);
    j = status();
    CHECK_STR(state_of(j), "processing", "finished() of another capture id is ignored");
    json_decref(j);
    pb_capture_state_finished(1, 120, 3400, 0.5, NULL, NULL);
    j = status();
    CHECK(strcmp(state_of(j), "done") == 0 && int_of(j, "rows") == 120 && int_of(j, "events") == 3400 &&
              strcmp(json_string_value(json_object_get(j, "trace")), "ready") == 0 &&
              json_is_null(json_object_get(j, "error")),
          "done: rows, events, trace ready");
    json_decref(j);

    CHECK(pb_capture_state_trace(&b) == 200 && b.len == 19 && memcmp(b.data, "{\"traceEvents\": []}", 19) == 0,
          "trace -> 200 with the file as it is");
    pb_buf_reset(&b);
    struct stat sb;
    CHECK(stat(want_path, &sb) != 0, "the trace file is removed once sent");
    CHECK(pb_capture_state_trace(&b) == 404, "a second trace request -> 404");
    CHECK_STR(error_of(&b), "the trace of capture 1 was already sent (a trace is sent once, then removed from "
              "the process's directory)", "trace-sent-once message");
    j = status();
    CHECK_STR(json_string_value(json_object_get(j, "trace")), "sent", "status says the trace was sent");
    json_decref(j);
    pb_buf_free(&b);
}

static void test_cancel_and_failures(void)
{
    pb_buf b = PB_BUF_INIT;
    pb_capture_job job;
    pb_capture_request req = {.steps = 3, .trace = 1};
    json_t *j;

    /* Cancelled while pending: the next boundary starts nothing. */
    CHECK(pb_capture_state_request(&req, 10, 1, &b) == 202, "capture 2 requested");
    pb_buf_reset(&b);
    CHECK(pb_capture_state_cancel(1, &b) == 409, "cancelling an old capture id -> 409");
    CHECK_STR(error_of(&b), "capture 1 is not the current capture (2); nothing was cancelled", "wrong-id message");
    CHECK(pb_capture_state_cancel(2, &b) == 200, "cancel capture 2 -> 200");
    j = parse(&b);
    CHECK(strcmp(state_of(j), "cancelled") == 0 && json_is_null(json_object_get(j, "first_step")),
          "pending -> cancelled at once, never started");
    json_decref(j);
    CHECK(!wanted() && pb_capture_state_boundary(11, 7, &job) == PB_CAPTURE_ACT_NONE,
          "a cancelled capture does not start at the next boundary");
    CHECK(pb_capture_state_trace(&b) == 404, "no trace of a cancelled capture");
    CHECK_STR(error_of(&b), "capture 2 was cancelled: it has no trace", "cancelled-trace message");

    /* Cancelled while running: the profiler's thread aborts at its next boundary or root call. */
    CHECK(pb_capture_state_request(&req, 20, 1, &b) == 202, "capture 3 requested");
    pb_buf_reset(&b);
    pb_capture_state_boundary(21, 7, &job);
    pb_capture_state_started(3, 21, 7, "cuda", NULL);
    j = status();
    CHECK(json_array_size(json_object_get(j, "activities")) == 2, "a device capture lists cpu and cuda");
    json_decref(j);
    CHECK(pb_capture_state_cancel(0, &b) == 200, "cancel the current capture (id 0)");
    j = parse(&b);
    CHECK(strcmp(state_of(j), "running") == 0 && json_is_true(json_object_get(j, "cancel_requested")),
          "running: cancel requested, it stops on its thread");
    json_decref(j);
    CHECK(pb_capture_state_root_call(8) == PB_CAPTURE_ACT_NONE, "a root call on another thread does nothing");
    CHECK(pb_capture_state_root_call(7) == PB_CAPTURE_ACT_ABORT, "a root call on the profiler's thread: ABORT");
    pb_capture_state_aborted(3);
    j = status();
    CHECK(strcmp(state_of(j), "cancelled") == 0 && !wanted(), "aborted -> cancelled");
    json_decref(j);

    /* Cancelled between the START action and started(): the started profiler must be dropped. */
    CHECK(pb_capture_state_request(&req, 30, 1, &b) == 202, "capture 4 requested");
    pb_buf_reset(&b);
    CHECK(pb_capture_state_boundary(31, 7, &job) == PB_CAPTURE_ACT_START, "START");
    pb_capture_state_cancel(4, &b);
    pb_buf_reset(&b);
    CHECK(pb_capture_state_started(4, 31, 7, NULL, NULL) == 0, "started() after a cancel says: drop it");

    /* A start that fails. */
    CHECK(pb_capture_state_request(&req, 40, 1, &b) == 202, "capture 5 requested");
    pb_buf_reset(&b);
    pb_capture_state_boundary(41, 7, &job);
    CHECK(pb_capture_state_started(5, 41, 7, NULL, "RuntimeError: profiler busy") == 0, "a failed start");
    j = status();
    CHECK(strcmp(state_of(j), "failed") == 0 && !wanted(), "start error -> failed");
    CHECK_STR(json_string_value(json_object_get(j, "error")), "RuntimeError: profiler busy", "the error is kept");
    json_decref(j);

    /* Processing that fails. */
    CHECK(pb_capture_state_request(&req, 50, 1, &b) == 202, "capture 6 requested");
    pb_buf_reset(&b);
    pb_capture_state_boundary(51, 7, &job);
    pb_capture_state_started(6, 51, 7, NULL, NULL);
    pb_capture_state_boundary(52, 7, &job);
    pb_capture_state_boundary(53, 7, &job);
    CHECK(pb_capture_state_boundary(54, 7, &job) == PB_CAPTURE_ACT_STOP, "STOP after 3 steps");
    pb_capture_state_finished(6, 0, 10, 0.1, "processing the results failed: ValueError: x", NULL);
    j = status();
    CHECK(strcmp(state_of(j), "failed") == 0, "processing error -> failed");
    json_decref(j);

    /* A trace that cannot be written: the rows are kept, the trace request says why. */
    CHECK(pb_capture_state_request(&req, 60, 1, &b) == 202, "capture 7 requested");
    pb_buf_reset(&b);
    pb_capture_state_boundary(61, 7, &job);
    pb_capture_state_started(7, 61, 7, NULL, NULL);
    pb_capture_state_boundary(62, 7, &job);
    pb_capture_state_boundary(63, 7, &job);
    pb_capture_state_boundary(64, 7, &job);
    FILE *f = fopen(job.trace_path, "w");
    fputs("{\"traceEv", f);
    fclose(f);
    pb_capture_state_finished(7, 50, 500, 0.1, NULL, "OSError: [Errno 28] No space left on device");
    j = status();
    CHECK(strcmp(state_of(j), "done") == 0 && int_of(j, "rows") == 50 && json_is_null(json_object_get(j, "trace")),
          "trace error: done, rows kept, no trace");
    CHECK_STR(json_string_value(json_object_get(j, "trace_error")), "OSError: [Errno 28] No space left on device",
              "status carries the trace error");
    json_decref(j);
    struct stat sb;
    CHECK(stat(job.trace_path, &sb) != 0, "a half-written trace file is removed");
    CHECK(pb_capture_state_trace(&b) == 500, "trace request -> 500");
    CHECK_STR(error_of(&b), "the trace of capture 7 could not be written: OSError: [Errno 28] No space left on device",
              "trace error message");

    /* A stop that fails. */
    CHECK(pb_capture_state_request(&req, 70, 1, &b) == 202, "capture 8 requested");
    pb_buf_reset(&b);
    pb_capture_state_boundary(71, 7, &job);
    pb_capture_state_started(8, 71, 7, NULL, NULL);
    pb_capture_state_boundary(72, 7, &job);
    pb_capture_state_boundary(73, 7, &job);
    pb_capture_state_boundary(74, 7, &job);
    pb_capture_state_stop_failed(8, "RuntimeError: cannot stop");
    j = status();
    CHECK(strcmp(state_of(j), "failed") == 0 && int_of(j, "last_step") == 73, "stop error -> failed after steps 71-73");
    json_decref(j);

    /* Without torch, nothing can step. */
    CHECK(pb_capture_state_request(&req, 0, 0, &b) == 503, "torch not ready -> 503");
    CHECK_STR(error_of(&b), "capture needs torch: this process has not imported torch under the agent (or "
              "runs with PROBING_TORCH=0), so no training step can be seen", "no-torch message");
    pb_buf_free(&b);
}

static void test_close_and_free(void)
{
    pb_buf b = PB_BUF_INIT;
    pb_capture_request req = {.steps = 1};
    CHECK(pb_capture_state_close(&b) == 200, "detach with nothing running: closed");
    CHECK(pb_capture_state_request(&req, 1, 1, &b) == 503, "a request after close -> 503");
    CHECK_STR(error_of(&b), "the agent is detaching from this process; no new capture can start", "closed message");
    pb_capture_state_reopen();
    CHECK(pb_capture_state_request(&req, 1, 1, &b) == 202, "reopened: requests work again");
    pb_buf_reset(&b);
    CHECK(pb_capture_state_close(&b) == 409, "detach while pending -> 409");
    pb_buf_reset(&b);
    pb_capture_state_free();
    json_t *j = status();
    CHECK(strcmp(state_of(j), "cancelled") == 0 && !wanted(), "agent stop: a pending capture is cancelled");
    json_decref(j);
    uint32_t id_before;
    pb_capture_state_phase(&id_before, NULL);
    pb_capture_state_reset(prefix);
    j = status();
    CHECK(strcmp(state_of(j), "none") == 0, "reset: state none");
    json_decref(j);
    CHECK(pb_capture_state_request(&req, 1, 1, &b) == 202, "after a restart requests work");
    j = parse(&b);
    CHECK(int_of(j, "capture") == id_before + 1, "capture numbers go on across a restart");
    json_decref(j);
    pb_buf_free(&b);
}

int main(void)
{
    pb_config_load();
    snprintf(dir, sizeof dir, "/tmp/probing-capture-XXXXXX");
    if (!mkdtemp(dir)) return 2;
    snprintf(prefix, sizeof prefix, "%s/4242", dir);
    pb_capture_state_reset(prefix);
    test_full_capture();
    test_cancel_and_failures();
    test_close_and_free();
    pb_capture_state_free();
    rmdir(dir);
    return check_summary();
}
