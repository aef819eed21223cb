/* sampler.c - the samplers' thread; see sampler.h. */
#include "sampler.h"

#include "clock.h"

#include <errno.h>
#include <signal.h>
#include <time.h>

static void *sampler_main(void *arg)
{
    pb_sampler *s = arg;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    int tick = s->tick_first;
    pthread_mutex_lock(&s->lock);
    while (!s->stop_requested) {
        if (tick) {
            pthread_mutex_unlock(&s->lock);
            s->tick();
            pthread_mutex_lock(&s->lock);
            if (!s->fixed_rate) clock_gettime(CLOCK_MONOTONIC, &next);
        }
        tick = 1;
        next = pb_timespec_add_ns(next, (int64_t)s->period_ms * 1000000);
        while (!s->stop_requested && pthread_cond_timedwait(&s->cond, &s->lock, &next) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

int pb_sampler_start(pb_sampler *s)
{
    if (s->running) return 0;
    if (!s->lock_ready) {
        pthread_mutex_init(&s->lock, NULL);
        s->lock_ready = 1;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    s->stop_requested = 0;
    sigset_t all, old;
    sigfillset(&all); /* the sampler must never receive the program's signals */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, sampler_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        pthread_cond_destroy(&s->cond);
        return -rc;
    }
    s->running = 1;
    return 0;
}

void pb_sampler_stop(pb_sampler *s)
{
    if (!s->running) return;
    pthread_mutex_lock(&s->lock);
    s->stop_requested = 1;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cond);
    s->running = 0;
}

void pb_sampler_forget_after_fork(pb_sampler *s)
{
    s->running = 0;
    pthread_mutex_init(&s->lock, NULL);
    s->lock_ready = 1;
}
