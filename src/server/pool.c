/*
 * pool.c - idle SQL connections and the admission of queries (slots, result budget); see
 * pool.h.
 *
 * One mutex guards everything here; one condition variable is signalled whenever a slot or
 * budget is given back, and on stop. Deadlines are on CLOCK_MONOTONIC.
 */
#include "pool.h"

#include "api.h"
#include "clock.h"
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define POOL_MAX 8      /* idle SQL connections kept */
#define ACTIVE_MAX 128  /* queries running at once that a stop can interrupt */
#define QUEUE_WAIT_S 5  /* how long a query waits for a slot or result budget */
#define EVAL_CHECK_MS 100 /* how often a waiting eval checks that its client is still there */

struct pb__pool {
    pthread_mutex_t lock; /* guards everything below but stopping */
    pthread_cond_t changed; /* a query slot or result budget was given back, or stopping */
    pb_db *idle[POOL_MAX];
    int idle_len;
    pb_db *active[ACTIVE_MAX]; /* connections running a query now (a stop interrupts them) */
    int queries_running;       /* at most query_threads */
    int query_threads;         /* PROBING_QUERY_THREADS */
    size_t results_in_flight;  /* bytes reserved by queries running or answers not yet sent */
    size_t results_budget;     /* PROBING_RESULTS_MB */
    int eval_running;          /* an eval holds the eval slot (one at a time) */
    _Atomic int stopping;
};

int pb__pool_new(pb__pool **out)
{
    *out = NULL;
    pb__pool *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    pthread_mutex_init(&p->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->changed, &ca);
    pthread_condattr_destroy(&ca);
    p->query_threads = (int)pb_config_int("PROBING_QUERY_THREADS", 2);
    if (p->query_threads < 1) p->query_threads = 1;
    p->results_budget = (size_t)pb_config_int("PROBING_RESULTS_MB", 256) << 20;
    if (p->results_budget < (1u << 20)) p->results_budget = 1u << 20;
    *out = p;
    return 0;
}

void pb__pool_stop(pb__pool *p)
{
    if (!p) return;
    /* Running queries stop at their next progress check; waiting ones give up (503). */
    atomic_store(&p->stopping, 1);
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < ACTIVE_MAX; i++)
        if (p->active[i]) pb_db_interrupt(p->active[i]);
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
}

void pb__pool_free(pb__pool *p)
{
    if (!p) return;
    for (int i = 0; i < p->idle_len; i++) pb_db_close(p->idle[i]);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->changed);
    free(p);
}

int pb__pool_acquire(pb__pool *p, pb_db **out)
{
    *out = NULL;
    pthread_mutex_lock(&p->lock);
    if (p->idle_len > 0) *out = p->idle[--p->idle_len];
    pthread_mutex_unlock(&p->lock);
    return *out ? 0 : pb_db_open(out);
}

void pb__pool_release(pb__pool *p, pb_db *db)
{
    if (!db) return;
    pthread_mutex_lock(&p->lock);
    if (p->idle_len < POOL_MAX) {
        p->idle[p->idle_len++] = db;
        db = NULL;
    }
    pthread_mutex_unlock(&p->lock);
    pb_db_close(db); /* pool full */
}

/* Now plus s seconds, on the condition's clock. */
static struct timespec after_s(double s) { return pb_deadline_s(CLOCK_MONOTONIC, s); }

static struct timespec queue_deadline(void) { return after_s(QUEUE_WAIT_S); }

static double seconds_since(struct timespec t)
{
    return (double)(pb_now_ns() - pb_timespec_ns(t)) / 1e9;
}

/* The busy answer for a spent result budget. [p->lock held] */
static int budget_busy(pb__pool *p, const char *hint, pb_buf *out)
{
    return pb_api_error(out, 503,
                        "busy: %zu MB of results in flight (the limit is %zu MB, "
                        "PROBING_RESULTS_MB); %s",
                        (p->results_in_flight + (1u << 20) - 1) >> 20, p->results_budget >> 20,
                        hint);
}

/* With p->lock held: waits (until QUEUE_WAIT_S from now) until reserve bytes of the result
 * budget are free and, when slot is non-NULL, a query slot too (its index in *slot). Returns 0,
 * or writes the 503 answer into out and returns 503: not_done says what was not done ("the
 * query was not run"), hint what to do about a spent budget. */
static int admit_locked(pb__pool *p, size_t reserve, int *slot, const char *not_done,
                        const char *hint, pb_buf *out)
{
    struct timespec until = queue_deadline();
    for (;;) {
        if (atomic_load(&p->stopping))
            return pb_api_error(out, 503, "the process is exiting or probing is detaching; %s",
                                not_done);
        int fits = p->results_in_flight + reserve <= p->results_budget;
        if (fits && !slot) return 0;
        if (fits && p->queries_running < p->query_threads) {
            for (int i = 0; i < ACTIVE_MAX; i++)
                if (!p->active[i]) {
                    *slot = i;
                    return 0;
                }
        }
        if (pthread_cond_timedwait(&p->changed, &p->lock, &until) == ETIMEDOUT) {
            if (p->results_in_flight + reserve > p->results_budget)
                return budget_busy(p, hint, out);
            return pb_api_error(
                out, 503,
                "busy: %d queries are running (the limit is %d, PROBING_QUERY_THREADS) and "
                "this one waited %d s for its turn; try again in a moment",
                p->queries_running, p->query_threads, QUEUE_WAIT_S);
        }
    }
}

int pb__pool_query_begin(pb__pool *p, pb_db *db, size_t want, size_t *cap, size_t *reserved,
                         pb_buf *out)
{
    int slot = -1;
    if (want > p->results_budget) want = p->results_budget;
    size_t reserve = want + (1u << 20); /* JSON head and tail, last row */
    if (reserve > p->results_budget) reserve = p->results_budget;
    pthread_mutex_lock(&p->lock);
    int status = admit_locked(p, reserve, &slot, "the query was not run",
                              "try again in a moment or ask for less (LIMIT)", out);
    if (status == 0) {
        p->active[slot] = db;
        p->queries_running++;
        p->results_in_flight += reserve;
        *reserved += reserve;
        *cap = want;
    }
    pthread_mutex_unlock(&p->lock);
    return status;
}

int pb__pool_reserve(pb__pool *p, size_t want, size_t *reserved, const char *not_done,
                     const char *hint, pb_buf *out)
{
    if (want > p->results_budget) want = p->results_budget;
    pthread_mutex_lock(&p->lock);
    int status = admit_locked(p, want, NULL, not_done, hint, out);
    if (status == 0) {
        p->results_in_flight += want;
        *reserved += want;
    }
    pthread_mutex_unlock(&p->lock);
    return status;
}

int pb__pool_eval_begin(pb__pool *p, size_t want, double *wait_s, pb_db_cancel_fn cancelled,
                        void *cancel_ctx, size_t *reserved, pb_buf *out)
{
    static const char not_run[] = "try again in a moment (the code was not run)";
    if (want > p->results_budget) want = p->results_budget;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    struct timespec slot_until = after_s(*wait_s), budget_until = {0, 0};
    int status = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        if (atomic_load(&p->stopping)) {
            status = pb_api_error(out, 503, "the process is exiting or probing is detaching; "
                                            "the code was not run");
            break;
        }
        int fits = p->results_in_flight + want <= p->results_budget;
        if (!p->eval_running && fits) {
            p->eval_running = 1;
            p->results_in_flight += want;
            *reserved += want;
            break;
        }
        /* The slot is waited for as long as the eval's own timeout; the budget, once the
         * slot is free, as long as any other request waits for it. */
        if (!p->eval_running && budget_until.tv_sec == 0) budget_until = queue_deadline();
        struct timespec slice = after_s(EVAL_CHECK_MS / 1000.0);
        if (budget_until.tv_sec && !pb_timespec_before(slice, budget_until)) slice = budget_until;
        if (!pb_timespec_before(slice, slot_until)) slice = slot_until;
        pthread_cond_timedwait(&p->changed, &p->lock, &slice);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (atomic_load(&p->stopping)) continue;
        if (!p->eval_running && p->results_in_flight + want <= p->results_budget) continue;
        if (budget_until.tv_sec && !p->eval_running && !pb_timespec_before(now, budget_until)) {
            status = budget_busy(p, not_run, out);
            break;
        }
        if (!pb_timespec_before(now, slot_until)) {
            if (p->eval_running)
                status = pb_api_error(out, 503,
                                      "busy: another eval is running (evals run one at a time) "
                                      "and this one waited its whole timeout, %.3g s; the code "
                                      "was not run. Try again when it ends, or give a longer "
                                      "--timeout",
                                      *wait_s);
            else
                status = budget_busy(p, not_run, out);
            break;
        }
        if (cancelled) {
            pthread_mutex_unlock(&p->lock);
            int why = cancelled(cancel_ctx);
            pthread_mutex_lock(&p->lock);
            if (why) {
                status = pb_api_error(out, 503, "eval was cancelled: %s; the code was not run",
                                      why == PB_DB_CANCEL_CLIENT_GONE
                                          ? "the client closed its connection"
                                          : "the process is exiting");
                break;
            }
        }
    }
    pthread_mutex_unlock(&p->lock);
    if (status == 0) {
        *wait_s -= seconds_since(start);
        if (*wait_s < 0.001) *wait_s = 0.001;
    }
    return status;
}

void pb__pool_eval_end(pb__pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->eval_running = 0;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
}

void pb__pool_results_kept(pb__pool *p, size_t kept, size_t *reserved)
{
    pthread_mutex_lock(&p->lock);
    /* The bytes exist already: a larger answer is counted in full, even past the budget, so
     * that later requests wait for it to be sent. */
    p->results_in_flight = p->results_in_flight - *reserved + kept;
    if (kept < *reserved) pthread_cond_broadcast(&p->changed);
    *reserved = kept;
    pthread_mutex_unlock(&p->lock);
}

void pb__pool_query_end(pb__pool *p, pb_db *db, size_t kept, size_t *reserved)
{
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < ACTIVE_MAX; i++)
        if (p->active[i] == db) {
            p->active[i] = NULL;
            break;
        }
    p->queries_running--;
    /* The answer's bytes stay reserved until it has been sent (pb__pool_results_sent). */
    if (kept < *reserved) {
        p->results_in_flight -= *reserved - kept;
        *reserved = kept;
    }
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
}

void pb__pool_results_sent(pb__pool *p, size_t *reserved)
{
    if (!*reserved) return;
    pthread_mutex_lock(&p->lock);
    p->results_in_flight -= *reserved;
    *reserved = 0;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
}
