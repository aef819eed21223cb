/* capture_state.c - the capture state machine and its JSON; see capture_state.h. */
#include "capture_state.h"

#include "api.h"
#include "clock.h"
#include "error.h"
#include "jsonw.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TRACE_MAX_BYTES ((size_t)1 << 30) /* what the CLI accepts in one answer */

_Atomic int pb_capture_wanted;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Everything below is protected by lock. */
static struct {
    pb_capture_phase phase;
    uint32_t id;                 /* of the current (or last) capture; 0 before the first */
    pb_capture_request options;
    int64_t requested_step, first_step, end_step; /* end_step: first step not captured */
    int64_t steps_done;
    int64_t requested_ns;
    unsigned long thread;        /* the thread that started the profiler */
    int started;                 /* first_step and thread are valid */
    int stopped;                 /* end_step is valid */
    int cancel_requested;
    int with_device;             /* CUDA activities were captured */
    int finished;                /* rows, events, processing_s are valid */
    uint64_t rows, events;
    double processing_s;
    char error[1024];
    char trace_prefix[480];
    char trace_path[512];        /* the trace file of this capture, until it is sent */
    char trace_error[512];       /* why the trace could not be written, or "" */
    int trace_sent;
    int closed;                  /* detaching: no new captures */
} st;

static const char *const phase_names[] = {"none", "pending", "running", "processing", "done",
                                          "failed", "cancelled"};

static int active(pb_capture_phase p)
{
    return p == PB_CAPTURE_PENDING || p == PB_CAPTURE_RUNNING || p == PB_CAPTURE_PROCESSING;
}

/* Sets the phase and whether the step hook must call in. Lock held. */
static void set_phase(pb_capture_phase p)
{
    st.phase = p;
    atomic_store_explicit(&pb_capture_wanted, p == PB_CAPTURE_PENDING || p == PB_CAPTURE_RUNNING,
                          memory_order_relaxed);
}

/* Removes the trace file of the current capture, if any. Lock held. */
static void drop_trace(void)
{
    if (st.trace_path[0]) unlink(st.trace_path);
    st.trace_path[0] = '\0';
}

static void set_error(const char *error)
{
    snprintf(st.error, sizeof st.error, "%s", error ? error : "unknown error");
}

void pb_capture_state_reset(const char *trace_prefix)
{
    pthread_mutex_lock(&lock);
    drop_trace();
    uint32_t id = st.id; /* ids keep counting across a restart of the agent */
    memset(&st, 0, sizeof st);
    st.id = id;
    snprintf(st.trace_prefix, sizeof st.trace_prefix, "%s", trace_prefix ? trace_prefix : "");
    set_phase(PB_CAPTURE_NONE);
    pthread_mutex_unlock(&lock);
}

void pb_capture_state_free(void)
{
    pthread_mutex_lock(&lock);
    drop_trace();
    if (active(st.phase)) {
        set_error("the agent stopped before the capture ended");
        set_phase(PB_CAPTURE_CANCELLED);
    }
    st.closed = 1;
    pthread_mutex_unlock(&lock);
}

/* ---- JSON ---- */

/* Writes the status object. Lock held. */
static int write_status(pb_buf *out)
{
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "capture");
    if (st.phase == PB_CAPTURE_NONE) pb_jsonw_null(&w);
    else pb_jsonw_int(&w, st.id);
    pb_jsonw_key(&w, "state");
    pb_jsonw_str(&w, phase_names[st.phase]);
    if (st.phase != PB_CAPTURE_NONE) {
        pb_jsonw_key(&w, "steps");
        pb_jsonw_int(&w, st.options.steps);
        pb_jsonw_key(&w, "steps_done");
        pb_jsonw_int(&w, st.stopped ? st.end_step - st.first_step : st.steps_done);
        pb_jsonw_key(&w, "requested_at_step");
        pb_jsonw_int(&w, st.requested_step);
        pb_jsonw_key(&w, "first_step");
        pb_jsonw_int_or_null(&w, st.started, st.first_step);
        pb_jsonw_key(&w, "last_step");
        pb_jsonw_int_or_null(&w, st.stopped, st.end_step - 1);
        pb_jsonw_key(&w, "options");
        pb_jsonw_obj_begin(&w);
        pb_jsonw_key(&w, "memory");
        pb_jsonw_bool(&w, st.options.memory);
        pb_jsonw_key(&w, "shapes");
        pb_jsonw_bool(&w, st.options.shapes);
        pb_jsonw_key(&w, "stack");
        pb_jsonw_bool(&w, st.options.stack);
        pb_jsonw_key(&w, "trace");
        pb_jsonw_bool(&w, st.options.trace);
        pb_jsonw_obj_end(&w);
        pb_jsonw_key(&w, "activities");
        if (st.started) {
            pb_jsonw_arr_begin(&w);
            pb_jsonw_str(&w, "cpu");
            if (st.with_device) pb_jsonw_str(&w, "cuda");
            pb_jsonw_arr_end(&w);
        } else {
            pb_jsonw_null(&w);
        }
        pb_jsonw_key(&w, "rows");
        pb_jsonw_int_or_null(&w, st.finished, (int64_t)st.rows);
        pb_jsonw_key(&w, "events");
        pb_jsonw_int_or_null(&w, st.finished, (int64_t)st.events);
        pb_jsonw_key(&w, "processing_s");
        pb_jsonw_double_or_null(&w, st.finished, st.processing_s);
        pb_jsonw_key(&w, "trace");
        struct stat sb;
        if (st.trace_path[0] && stat(st.trace_path, &sb) == 0) pb_jsonw_str(&w, "ready");
        else if (st.trace_sent) pb_jsonw_str(&w, "sent");
        else pb_jsonw_null(&w);
        pb_jsonw_key(&w, "trace_error");
        pb_jsonw_str_or_null(&w, st.trace_error);
        pb_jsonw_key(&w, "cancel_requested");
        pb_jsonw_bool(&w, st.cancel_requested);
        pb_jsonw_key(&w, "age_s");
        pb_jsonw_double(&w, (double)(pb_now_ns() - st.requested_ns) / 1e9);
        pb_jsonw_key(&w, "error");
        pb_jsonw_str_or_null(&w, st.error);
    }
    return pb_jsonw_obj_end(&w);
}

static int status_answer(int http_status, pb_buf *out)
{
    pb_buf_reset(out);
    if (write_status(out)) return pb_api_error(out, 500, "out of memory");
    return http_status;
}

/* "capture 3 is running (1 of 3 steps captured)". Lock held. */
static void describe_active(char *buf, size_t len)
{
    switch (st.phase) {
    case PB_CAPTURE_PENDING:
        snprintf(buf, len, "capture %u is waiting for the next step boundary (asked for during "
                 "step %lld)", st.id, (long long)st.requested_step);
        break;
    case PB_CAPTURE_RUNNING:
        snprintf(buf, len, "capture %u is running (%lld of %d steps captured)", st.id,
                 (long long)st.steps_done, st.options.steps);
        break;
    default:
        snprintf(buf, len, "capture %u is being processed (its %d steps are captured)", st.id,
                 st.options.steps);
        break;
    }
}

/* ---- server threads ---- */

int pb_capture_state_request(const pb_capture_request *req, int64_t current_step, int torch_ready,
                             pb_buf *out)
{
    char what[256];
    int status;
    pthread_mutex_lock(&lock);
    if (st.closed) {
        status = pb_api_error(out, 503, "the agent is detaching from this process; no new "
                              "capture can start");
    } else if (active(st.phase)) {
        describe_active(what, sizeof what);
        status = pb_api_error(out, 409, "one capture runs at a time and %s; wait for it to "
                              "end", what);
    } else if (!torch_ready) {
        status = pb_api_error(out, 503, "capture needs torch: this process has not imported "
                              "torch under the agent (or runs with PROBING_TORCH=0), so no "
                              "training step can be seen");
    } else {
        drop_trace();
        char prefix[sizeof st.trace_prefix];
        uint32_t id = st.id + 1;
        memcpy(prefix, st.trace_prefix, sizeof prefix);
        memset(&st, 0, sizeof st);
        memcpy(st.trace_prefix, prefix, sizeof prefix);
        st.id = id;
        st.options = *req;
        st.options.id = id;
        st.requested_step = current_step;
        st.requested_ns = pb_now_ns();
        if (req->trace && st.trace_prefix[0])
            snprintf(st.trace_path, sizeof st.trace_path, "%s.capture-%u.json", st.trace_prefix,
                     id);
        set_phase(PB_CAPTURE_PENDING);
        status = status_answer(202, out);
    }
    pthread_mutex_unlock(&lock);
    return status;
}

int pb_capture_state_status(pb_buf *out)
{
    pthread_mutex_lock(&lock);
    int status = status_answer(200, out);
    pthread_mutex_unlock(&lock);
    return status;
}

int pb_capture_state_cancel(uint32_t id, pb_buf *out)
{
    int status;
    pthread_mutex_lock(&lock);
    if (id && (st.phase == PB_CAPTURE_NONE || id != st.id)) {
        if (st.phase == PB_CAPTURE_NONE)
            status = pb_api_error(out, 409, "there is no capture %u in this process", id);
        else
            status = pb_api_error(out, 409, "capture %u is not the current capture (%u); "
                                  "nothing was cancelled", id, st.id);
    } else {
        if (st.phase == PB_CAPTURE_PENDING) {
            st.cancel_requested = 1;
            set_error("cancelled before it started: no step boundary came");
            drop_trace();
            set_phase(PB_CAPTURE_CANCELLED);
        } else if (st.phase == PB_CAPTURE_RUNNING) {
            st.cancel_requested = 1;
        }
        status = status_answer(200, out);
    }
    pthread_mutex_unlock(&lock);
    return status;
}

/* Reads path into out (reset first). Returns 0, PB_ETOOBIG or a negative errno. */
static int read_file(const char *path, pb_buf *out)
{
    int rc = 0;
    pb_buf_reset(out);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return -errno;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        rc = -errno;
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = -EINVAL;
        goto done;
    }
    if ((size_t)sb.st_size > TRACE_MAX_BYTES) {
        rc = PB_ETOOBIG;
        goto done;
    }
    if ((rc = pb_buf_reserve(out, (size_t)sb.st_size + 1))) goto done;
    for (;;) {
        char chunk[65536];
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0) break;
        if (out->len + (size_t)n > TRACE_MAX_BYTES) {
            rc = PB_ETOOBIG;
            break;
        }
        if ((rc = pb_buf_append(out, chunk, (size_t)n))) break;
    }
done:
    close(fd);
    return rc;
}

int pb_capture_state_trace(pb_buf *out)
{
    char path[sizeof st.trace_path];
    uint32_t id;
    int status = 0;
    path[0] = '\0';
    pthread_mutex_lock(&lock);
    id = st.id;
    if (st.phase == PB_CAPTURE_NONE) {
        status = pb_api_error(out, 404, "no capture has been made in this process");
    } else if (active(st.phase)) {
        char what[256];
        describe_active(what, sizeof what);
        status = pb_api_error(out, 409, "%s; its trace is written when it ends", what);
    } else if (st.phase != PB_CAPTURE_DONE) {
        status = pb_api_error(out, 404, "capture %u %s: it has no trace", id,
                              st.phase == PB_CAPTURE_FAILED ? "failed" : "was cancelled");
    } else if (st.trace_sent) {
        status = pb_api_error(out, 404, "the trace of capture %u was already sent (a trace is "
                              "sent once, then removed from the process's directory)", id);
    } else if (st.trace_error[0]) {
        status = pb_api_error(out, 500, "the trace of capture %u could not be written: %s", id,
                              st.trace_error);
    } else if (!st.trace_path[0]) {
        status = pb_api_error(out, 404, "capture %u was made without a trace (ask for one "
                              "with -o FILE)", id);
    } else {
        /* Taken out of the state, so that one request sends it; read without the lock. */
        memcpy(path, st.trace_path, sizeof path);
        st.trace_path[0] = '\0';
        st.trace_sent = 1;
    }
    pthread_mutex_unlock(&lock);
    if (status) return status;
    int rc = read_file(path, out);
    unlink(path);
    if (rc == PB_ETOOBIG)
        return pb_api_error(out, 413, "the trace of capture %u is over 1 GiB; capture fewer "
                            "steps", id);
    if (rc == -ENOENT)
        return pb_api_error(out, 404, "the trace of capture %u was not written (see the "
                            "capture's error)", id);
    if (rc) return pb_api_error(out, 500, "cannot read the trace of capture %u: %s", id,
                                strerror(-rc));
    return 200;
}

int pb_capture_state_close(pb_buf *out)
{
    int status = 200;
    pthread_mutex_lock(&lock);
    if (st.phase == PB_CAPTURE_PENDING || st.phase == PB_CAPTURE_RUNNING) {
        char what[256];
        describe_active(what, sizeof what);
        status = pb_api_error(out, 409, "cannot detach while %s: the capture must end first "
                              "(the training thread stops torch.profiler at a step boundary); "
                              "wait for it, or cancel it", what);
    } else {
        st.closed = 1;
    }
    pthread_mutex_unlock(&lock);
    return status;
}

void pb_capture_state_reopen(void)
{
    pthread_mutex_lock(&lock);
    st.closed = 0;
    pthread_mutex_unlock(&lock);
}

/* ---- the training thread ---- */

pb_capture_action pb_capture_state_boundary(int64_t step, unsigned long thread, pb_capture_job *job)
{
    pb_capture_action act = PB_CAPTURE_ACT_NONE;
    pthread_mutex_lock(&lock);
    if (st.phase == PB_CAPTURE_PENDING) {
        act = PB_CAPTURE_ACT_START;
    } else if (st.phase == PB_CAPTURE_RUNNING && thread == st.thread) {
        st.steps_done = step - st.first_step;
        if (st.cancel_requested) {
            act = PB_CAPTURE_ACT_ABORT;
        } else if (st.steps_done >= st.options.steps) {
            /* Processing from now: the thread that processes the results may be done before
             * the caller of this function is back from starting it. */
            act = PB_CAPTURE_ACT_STOP;
            st.stopped = 1;
            st.end_step = step;
            set_phase(PB_CAPTURE_PROCESSING);
        } else {
            act = PB_CAPTURE_ACT_MARK;
        }
    }
    if (act != PB_CAPTURE_ACT_NONE) {
        job->id = st.id;
        job->options = st.options;
        job->first_step = st.first_step;
        memcpy(job->trace_path, st.trace_path, sizeof job->trace_path);
    }
    pthread_mutex_unlock(&lock);
    return act;
}

pb_capture_action pb_capture_state_root_call(unsigned long thread)
{
    pthread_mutex_lock(&lock);
    int abort_now = st.phase == PB_CAPTURE_RUNNING && st.cancel_requested && thread == st.thread;
    pthread_mutex_unlock(&lock);
    return abort_now ? PB_CAPTURE_ACT_ABORT : PB_CAPTURE_ACT_NONE;
}

int pb_capture_state_started(uint32_t id, int64_t first_step, unsigned long thread,
                             const char *device, const char *error)
{
    int running = 0;
    pthread_mutex_lock(&lock);
    if (st.phase == PB_CAPTURE_PENDING && id == st.id) {
        if (error) {
            set_error(error);
            drop_trace();
            set_phase(PB_CAPTURE_FAILED);
        } else {
            st.started = 1;
            st.first_step = first_step;
            st.thread = thread;
            st.with_device = device != NULL;
            set_phase(PB_CAPTURE_RUNNING);
            running = 1;
        }
    }
    pthread_mutex_unlock(&lock);
    return running;
}

void pb_capture_state_stop_failed(uint32_t id, const char *error)
{
    pthread_mutex_lock(&lock);
    if (st.phase == PB_CAPTURE_PROCESSING && id == st.id) {
        set_error(error);
        drop_trace();
        set_phase(PB_CAPTURE_FAILED);
    }
    pthread_mutex_unlock(&lock);
}

void pb_capture_state_aborted(uint32_t id)
{
    pthread_mutex_lock(&lock);
    if (st.phase == PB_CAPTURE_RUNNING && id == st.id) {
        set_error("cancelled while running: the profiler was stopped and its data dropped");
        drop_trace();
        set_phase(PB_CAPTURE_CANCELLED);
    }
    pthread_mutex_unlock(&lock);
}

void pb_capture_state_finished(uint32_t id, uint64_t rows, uint64_t events, double processing_s,
                               const char *error, const char *trace_error)
{
    pthread_mutex_lock(&lock);
    if (st.phase == PB_CAPTURE_PROCESSING && id == st.id) {
        st.finished = 1;
        if (trace_error) {
            snprintf(st.trace_error, sizeof st.trace_error, "%s", trace_error);
            drop_trace();
        }
        st.rows = rows;
        st.events = events;
        st.processing_s = processing_s;
        if (error) {
            set_error(error);
            drop_trace();
            set_phase(PB_CAPTURE_FAILED);
        } else {
            set_phase(PB_CAPTURE_DONE);
        }
    }
    pthread_mutex_unlock(&lock);
}

pb_capture_phase pb_capture_state_phase(uint32_t *id, unsigned long *thread)
{
    pthread_mutex_lock(&lock);
    pb_capture_phase p = st.phase;
    if (id) *id = st.id;
    if (thread) *thread = st.thread;
    pthread_mutex_unlock(&lock);
    return p;
}
