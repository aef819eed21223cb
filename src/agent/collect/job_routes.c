/*
 * job_routes.c - the job unit's HTTP routes (job.h): GET /api/job (the roster), /api/rank (this
 * rank's step and collectives, and PyTorch's flight recorder), /api/stack and /api/arrivals.
 *
 * Every function here runs on the server thread (pb_job_arrivals_json: any thread) and never
 * takes the GIL: a hung job may hold it. What needs the GIL (a roster read from the c10d store,
 * a flight recorder reading) is asked of job.c's thread ("probing-job") under pb_job.mu, and
 * waited for a bounded time; the collective slots are read without a lock (job_state.h says
 * who writes what).
 */
#include "job.h"
#include "job_state.h"

#include "clock.h"
#include "flight_recorder.h"
#include "intern.h"
#include "jsonw.h"
#include "pystack.h"
#include "registry.h"
#include "step.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void self_fields(pb_jsonw *w)
{
    pb_jsonw_key(w, "rank");
    pb_jsonw_int(w, pb_job.registered ? pb_job.my_rank : pb_job_env_int("RANK", 0));
    pb_jsonw_key(w, "host");
    pb_jsonw_str(w, pb_job_host());
    pb_jsonw_key(w, "pid");
    pb_jsonw_int(w, getpid());
    pb_jsonw_key(w, "now");
    pb_jsonw_double(w, (double)pb_wall_ns() / 1e9);
}

/* Sets *wanted for the job thread and waits, at most `seconds`, for it to bump *gen (a fresh
 * reading). Returns 1 when it did, 0 on time-out or with no job thread (the caller then answers
 * with the last reading). [server thread, mu held] */
static int ask_job_thread(int *wanted, const uint64_t *gen, int seconds)
{
    uint64_t before = *gen;
    *wanted = 1;
    pthread_cond_broadcast(&pb_job.cv);
    struct timespec until;
    until = pb_deadline_ns(CLOCK_REALTIME, (int64_t)seconds * 1000000000);
    while (pb_job.thread_running && *gen == before &&
           pthread_cond_timedwait(&pb_job.cv, &pb_job.mu, &until) == 0) {}
    return *gen != before;
}

int pb_job_json(void *ctx, pb_buf *out)
{
    (void)ctx;
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "registered");
    pb_jsonw_bool(&w, pb_job.registered);
    self_fields(&w);
    pb_jsonw_key(&w, "world");
    pb_jsonw_int(&w, pb_job.registered ? pb_job.world : 1);
    if (!pb_job.registered) {
        pb_jsonw_key(&w, "reason");
        pb_jsonw_str(&w, "not part of a torch.distributed job: init_process_group has not run in "
                         "this process, or its world size is 1");
        pb_jsonw_obj_end(&w);
        return pb_jsonw_error(&w); /* sticky: the first failed write */
    }
    pb_jsonw_key(&w, "job");
    pb_jsonw_str(&w, pb_job.job_id);
    pthread_mutex_lock(&pb_job.mu);
    int fresh = ask_job_thread(&pb_job.roster_wanted, &pb_job.roster_gen, 2);
    pb_jsonw_key(&w, "fresh");
    pb_jsonw_bool(&w, fresh);
    pb_jsonw_key(&w, "roster_age_s");
    pb_jsonw_double_or_null(&w, pb_job.roster_read_ns != 0, (double)(pb_now_ns() - pb_job.roster_read_ns) / 1e9);
    pb_buf_printf(out, ",\"ranks\":[%s],\"missing\":[%s]", pb_job.roster.data ? pb_job.roster.data : "",
                  pb_job.missing.data ? pb_job.missing.data : "");
    pthread_mutex_unlock(&pb_job.mu);
    pb_jsonw_obj_end(&w);
    return pb_jsonw_error(&w); /* sticky: the first failed write */
}

static const char *state_name(int s)
{
    switch (s) {
    case COLL_ENTERED: return "entered";
    case COLL_COMPLETED: return "completed";
    case COLL_FAILED: return "failed";
    default: return "none";
    }
}

/* "flight_recorder": when the job has PyTorch's flight recorder on, asks the job thread for a
 * reading and waits at most 1 s for it (the server thread never takes the GIL itself: a hung job
 * may hold it); else, or on time-out, the last reading with its age ("fresh": false). Absent when
 * the recorder is off or this rank is not registered. [server thread] */
static void flight_recorder_json(pb_jsonw *w, pb_buf *out)
{
    if (!pb_job.registered || !pb_fr_enabled()) return;
    pthread_mutex_lock(&pb_job.mu);
    int fresh = ask_job_thread(&pb_job.fr_wanted, &pb_job.fr_gen, 1);
    if (pb_job.fr_read_ns) {
        pb_jsonw_key(w, "flight_recorder");
        pb_jsonw_obj_begin(w);
        pb_jsonw_key(w, "fresh");
        pb_jsonw_bool(w, fresh);
        pb_jsonw_key(w, "age_s");
        pb_jsonw_double(w, (double)(pb_now_ns() - pb_job.fr_read_ns) / 1e9);
        pb_jsonw_key(w, "groups");
        pb_buf_printf(out, "[%s]", pb_job.fr_groups.data ? pb_job.fr_groups.data : "");
        pb_jsonw_obj_end(w);
    }
    pthread_mutex_unlock(&pb_job.mu);
}

/* The median wall time of the last (at most 31) rows of python.steps, in seconds; -1 when no
 * step has finished yet (or the table is not there). The rows are read from the table's ring
 * like a query would (a row overwritten during the read is skipped), found through the
 * registry, so this file needs nothing of the collector that writes them. [any thread] */
static double step_median_s(void)
{
    pb_table *t = pb_registry_find("python", "steps");
    int wall = -1;
    for (int c = 0; t && c < t->ncolumns; c++)
        if (strcmp(t->columns[c].name, "wall") == 0) wall = c;
    if (!t || !t->ring || wall < 0 || t->row_size > 512) return -1;
    unsigned char row[512];
    int64_t v[31];
    int n = 0;
    uint64_t head = pb_ring_head(t->ring), first = pb_ring_first(t->ring);
    for (uint64_t i = head; i > first && n < 31; i--) {
        if (!pb_ring_read(t->ring, i - 1, row)) continue;
        int64_t ns;
        memcpy(&ns, row + t->columns[wall].offset, sizeof ns);
        int k = n++;
        while (k > 0 && v[k - 1] > ns) { /* insertion sort: at most 31 values */
            v[k] = v[k - 1];
            k--;
        }
        v[k] = ns;
    }
    if (!n) return -1;
    return (n % 2 ? (double)v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2) / 1e9;
}

int pb_job_rank_json(void *ctx, pb_buf *out)
{
    (void)ctx;
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    self_fields(&w);
    pb_jsonw_key(&w, "world");
    pb_jsonw_int(&w, pb_job.registered ? pb_job.world : 1);
    int64_t now = pb_now_ns(), wall = pb_wall_ns();
    pb_jsonw_key(&w, "step");
    pb_jsonw_int(&w, pb_step_current());
    int64_t start = pb_step_start();
    pb_jsonw_key(&w, "step_started");
    pb_jsonw_double_or_null(&w, start > 0, (double)(wall - (now - start)) / 1e9);
    /* How long the current step has run, on this host's monotonic clock (no clock offset
     * between hosts matters), and the median of the recent steps: hang.c's stall check. */
    pb_jsonw_key(&w, "step_for_s");
    pb_jsonw_double_or_null(&w, start > 0, (double)(now - start) / 1e9);
    double median = step_median_s();
    pb_jsonw_key(&w, "step_median_s");
    pb_jsonw_double_or_null(&w, median >= 0, median);
    pb_jsonw_key(&w, "collectives");
    pb_jsonw_arr_begin(&w);
    int n = atomic_load(&pb_job.nslots);
    for (int i = 0; i < n; i++) {
        coll_slot *s = &pb_job.slots[i];
        uint32_t v0, v1, name, op;
        uint64_t seq;
        int state;
        int64_t bytes, ew, em, xm;
        int tries = 0;
        do {
            v0 = atomic_load(&s->version);
            name = atomic_load(&s->name_id);
            seq = atomic_load(&s->seq);
            op = atomic_load(&s->op_id);
            state = atomic_load(&s->state);
            bytes = atomic_load(&s->bytes);
            ew = atomic_load(&s->enter_wall_ns);
            em = atomic_load(&s->enter_mono_ns);
            xm = atomic_load(&s->exit_mono_ns);
            v1 = atomic_load(&s->version);
        } while ((v0 != v1 || (v0 & 1)) && ++tries < 100);
        if (!name || !seq) continue;
        pb_jsonw_obj_begin(&w);
        pb_jsonw_key(&w, "group");
        pb_jsonw_str(&w, pb_intern_get(name));
        pb_jsonw_key(&w, "seq");
        pb_jsonw_int(&w, (int64_t)seq);
        pb_jsonw_key(&w, "op");
        pb_jsonw_str(&w, pb_intern_get(op));
        pb_jsonw_key(&w, "bytes");
        pb_jsonw_int(&w, bytes);
        pb_jsonw_key(&w, "state");
        pb_jsonw_str(&w, state_name(state));
        pb_jsonw_key(&w, "entered");
        pb_jsonw_double(&w, (double)ew / 1e9);
        pb_jsonw_key(&w, "for_s");
        pb_jsonw_double(&w, (double)((state == COLL_ENTERED ? now : xm) - em) / 1e9);
        pb_jsonw_obj_end(&w);
    }
    pb_jsonw_arr_end(&w);
    flight_recorder_json(&w, out);
    pb_jsonw_obj_end(&w);
    return pb_jsonw_error(&w); /* sticky: the first failed write */
}

int pb_job_stack_json(void *ctx, pb_buf *out)
{
    (void)ctx;
    char why[512] = "";
    pb_pystack *st = NULL;
    int rc = pb_pystack_read(getpid(), &st, why, sizeof why);
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    self_fields(&w);
    if (rc) {
        pb_jsonw_key(&w, "error");
        pb_jsonw_str(&w, why[0] ? why : "cannot read this process's Python stacks");
        pb_jsonw_obj_end(&w);
        return pb_jsonw_error(&w); /* sticky: the first failed write */
    }
    pb_jsonw_key(&w, "threads");
    pb_jsonw_arr_begin(&w);
    for (int t = 0; t < st->thread_count; t++) {
        pb_pythread *th = &st->threads[t];
        pb_jsonw_obj_begin(&w);
        pb_jsonw_key(&w, "native_id");
        pb_jsonw_int(&w, (int64_t)th->native_id);
        pb_jsonw_key(&w, "name");
        pb_jsonw_str(&w, th->name);
        if (th->python_name[0]) { /* threading's name (pystack.h) */
            pb_jsonw_key(&w, "python_name");
            pb_jsonw_str(&w, th->python_name);
        }
        pb_jsonw_key(&w, "main");
        pb_jsonw_bool(&w, (pid_t)th->native_id == getpid());
        pb_jsonw_key(&w, "frames");
        pb_jsonw_arr_begin(&w);
        for (int f = 0; f < th->frame_count; f++) {
            pb_jsonw_obj_begin(&w);
            pb_jsonw_key(&w, "function");
            pb_jsonw_str(&w, th->frames[f].function ? th->frames[f].function : "?");
            pb_jsonw_key(&w, "file");
            pb_jsonw_str(&w, th->frames[f].file ? th->frames[f].file : "?");
            pb_jsonw_key(&w, "line");
            pb_jsonw_int(&w, th->frames[f].line);
            pb_jsonw_obj_end(&w);
        }
        pb_jsonw_arr_end(&w);
        pb_jsonw_obj_end(&w);
    }
    pb_jsonw_arr_end(&w);
    pb_jsonw_obj_end(&w);
    pb_pystack_free(st);
    return pb_jsonw_error(&w); /* sticky: the first failed write */
}

int pb_job_arrivals_json(void *ctx, pb_buf *out)
{
    (void)ctx;
    arrival *copy = malloc(sizeof pb_job.rings[0].e);
    if (!copy) return -ENOMEM;
    pb_jsonw w;
    pb_jsonw_init(&w, out);
    pb_jsonw_obj_begin(&w);
    pb_jsonw_key(&w, "rank");
    pb_jsonw_int(&w, atomic_load(&pb_job.rank_registered));
    pb_jsonw_key(&w, "now"); /* for the CLI's clock offset (fanout.h) */
    pb_jsonw_double(&w, (double)pb_wall_ns() / 1e9);
    pb_jsonw_key(&w, "host");
    pb_jsonw_str(&w, pb_job_host());
    double median = step_median_s();
    pb_jsonw_key(&w, "step_median_s");
    pb_jsonw_double_or_null(&w, median >= 0, median);
    pb_jsonw_key(&w, "groups");
    pb_jsonw_arr_begin(&w);
    int n = atomic_load(&pb_job.nslots);
    for (int i = 0; i < n; i++) {
        uint32_t name = atomic_load(&pb_job.slots[i].name_id);
        if (!name) continue;
        pthread_mutex_lock(&pb_job.rings[i].mu);
        memcpy(copy, pb_job.rings[i].e, sizeof pb_job.rings[i].e);
        pthread_mutex_unlock(&pb_job.rings[i].mu);
        /* Oldest first: the smallest seq present. */
        size_t first = 0;
        for (size_t k = 0; k < PB_JOB_ARRIVALS; k++)
            if (copy[k].seq && (!copy[first].seq || copy[k].seq < copy[first].seq)) first = k;
        pb_jsonw_obj_begin(&w);
        pb_jsonw_key(&w, "group");
        pb_jsonw_str(&w, pb_intern_get(name));
        pb_jsonw_key(&w, "arrivals");
        pb_jsonw_arr_begin(&w);
        for (size_t k = 0; k < PB_JOB_ARRIVALS; k++) {
            const arrival *a = &copy[(first + k) % PB_JOB_ARRIVALS];
            if (!a->seq) continue;
            pb_jsonw_arr_begin(&w);
            pb_jsonw_int(&w, (int64_t)a->seq);
            pb_jsonw_str(&w, pb_intern_get(a->op_id));
            pb_jsonw_int(&w, a->bytes);
            pb_jsonw_double(&w, (double)a->enter_wall_ns / 1e9);
            if (a->exit_mono_ns)
                pb_jsonw_double(&w, (double)(a->enter_wall_ns + (a->exit_mono_ns - a->enter_mono_ns)) / 1e9);
            else pb_jsonw_null(&w);
            pb_jsonw_arr_end(&w);
        }
        pb_jsonw_arr_end(&w);
        pb_jsonw_obj_end(&w);
    }
    pb_jsonw_arr_end(&w);
    pb_jsonw_obj_end(&w);
    free(copy);
    return pb_jsonw_error(&w); /* sticky: the first failed write */
}
