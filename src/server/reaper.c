/*
 * reaper.c - the request-deadline watchdog of a thread-per-connection MHD daemon; see reaper.h.
 *
 * The watched connections are a list under one mutex; the thread holds it while it walks the
 * list once a second, so the server threads' updates (a few per request) never race a
 * shutdown() on a closed fd.
 */
#include "reaper.h"

#include "clock.h"
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

struct pb_reaper_conn {
    pb_reaper_conn *next;
    int fd;
    int64_t request_started_ns; /* first byte of the current request (or connection open) */
    int reading;                /* 1 until the request is read whole (then its handler runs) */
};

struct pb_reaper {
    double deadline_s;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pb_reaper_conn *conns;
    unsigned long reaped;
    int stopping;
    pthread_t thread;
};

static void *reaper_main(void *arg)
{
    pb_reaper *r = arg;
    pthread_mutex_lock(&r->lock);
    while (!r->stopping) {
        struct timespec until = pb_deadline_ns(CLOCK_MONOTONIC, 1000000000);
        pthread_cond_timedwait(&r->wake, &r->lock, &until);
        int64_t limit = pb_now_ns() - (int64_t)(r->deadline_s * 1e9);
        for (pb_reaper_conn *c = r->conns; c; c = c->next)
            if (c->reading && c->request_started_ns < limit) {
                pb_log_debug("http: closing a connection that sent no whole request within %g s",
                             r->deadline_s);
                shutdown(c->fd, SHUT_RDWR);
                c->reading = 0;
                r->reaped++;
            }
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

int pb_reaper_start(pb_reaper **out, double deadline_s)
{
    *out = NULL;
    if (!(deadline_s > 0)) return -EINVAL;
    pb_reaper *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->deadline_s = deadline_s;
    pthread_mutex_init(&r->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->wake, &ca);
    pthread_condattr_destroy(&ca);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&r->thread, NULL, reaper_main, r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        pthread_cond_destroy(&r->wake);
        pthread_mutex_destroy(&r->lock);
        free(r);
        return -rc;
    }
    *out = r;
    return 0;
}

void pb_reaper_stop(pb_reaper *r)
{
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    r->stopping = 1;
    pthread_cond_broadcast(&r->wake);
    pthread_mutex_unlock(&r->lock);
    pthread_join(r->thread, NULL);
    while (r->conns) {
        pb_reaper_conn *c = r->conns;
        r->conns = c->next;
        free(c);
    }
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

pb_reaper_conn *pb_reaper_open(pb_reaper *r, int fd)
{
    pb_reaper_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    c->request_started_ns = pb_now_ns();
    c->reading = 1;
    pthread_mutex_lock(&r->lock);
    c->next = r->conns;
    r->conns = c;
    pthread_mutex_unlock(&r->lock);
    return c;
}

void pb_reaper_read(pb_reaper *r, pb_reaper_conn *c)
{
    if (!c) return;
    pthread_mutex_lock(&r->lock);
    c->reading = 0;
    pthread_mutex_unlock(&r->lock);
}

void pb_reaper_next(pb_reaper *r, pb_reaper_conn *c)
{
    if (!c) return;
    pthread_mutex_lock(&r->lock);
    c->request_started_ns = pb_now_ns();
    c->reading = 1;
    pthread_mutex_unlock(&r->lock);
}

void pb_reaper_close(pb_reaper *r, pb_reaper_conn *c)
{
    if (!c) return;
    pthread_mutex_lock(&r->lock);
    for (pb_reaper_conn **p = &r->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    pthread_mutex_unlock(&r->lock);
    free(c);
}

unsigned long pb_reaper_reaped(pb_reaper *r)
{
    pthread_mutex_lock(&r->lock);
    unsigned long n = r->reaped;
    pthread_mutex_unlock(&r->lock);
    return n;
}
