/* memsample.c - RSS sampler thread; see memsample.h. */
#include "memsample.h"

#include "config.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_t thread;
static int running;
static pthread_mutex_t stop_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stop_cond = PTHREAD_COND_INITIALIZER;
static int stop_requested;
static int statm_fd = -1;
static long page_size;
static _Atomic float current_mb;
static _Atomic float peak_mb;

static float read_rss_mb(void)
{
    char buf[128];
    ssize_t n = pread(statm_fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return atomic_load_explicit(&current_mb, memory_order_relaxed);
    buf[n] = '\0';
    char *p = strchr(buf, ' '); /* size resident shared ... (pages) */
    if (!p) return 0;
    long resident = strtol(p + 1, NULL, 10);
    return (float)((double)resident * (double)page_size / (1024.0 * 1024.0));
}

static void publish(float mb)
{
    atomic_store_explicit(&current_mb, mb, memory_order_relaxed);
    float peak = atomic_load_explicit(&peak_mb, memory_order_relaxed);
    while (mb > peak && !atomic_compare_exchange_weak_explicit(&peak_mb, &peak, mb, memory_order_relaxed,
                                                               memory_order_relaxed)) {
    }
}

static void *sampler_main(void *arg)
{
    long period_ms = (long)(intptr_t)arg;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    pthread_mutex_lock(&stop_lock);
    while (!stop_requested) {
        publish(read_rss_mb());
        next.tv_nsec += period_ms * 1000000L;
        while (next.tv_nsec >= 1000000000L) {
            next.tv_nsec -= 1000000000L;
            next.tv_sec++;
        }
        /* stop_cond uses CLOCK_MONOTONIC (set in pb_memsample_start) */
        while (!stop_requested && pthread_cond_timedwait(&stop_cond, &stop_lock, &next) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&stop_lock);
    return NULL;
}

int pb_memsample_start(void)
{
    if (running) return 0;
    page_size = sysconf(_SC_PAGESIZE);
    statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (statm_fd < 0) return -errno;
    publish(read_rss_mb());
    atomic_store(&peak_mb, atomic_load(&current_mb));
    long period = (long)pb_config_int("PROBING_MEM_SAMPLE_MS", 5);
    if (period < 1) period = 1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_destroy(&stop_cond);
    pthread_cond_init(&stop_cond, &ca);
    pthread_condattr_destroy(&ca);
    stop_requested = 0;
    /* The sampler must never receive the program's signals. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&thread, NULL, sampler_main, (void *)(intptr_t)period);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        close(statm_fd);
        statm_fd = -1;
        return -rc;
    }
    running = 1;
    return 0;
}

void pb_memsample_stop(void)
{
    if (!running) return;
    pthread_mutex_lock(&stop_lock);
    stop_requested = 1;
    pthread_cond_signal(&stop_cond);
    pthread_mutex_unlock(&stop_lock);
    pthread_join(thread, NULL);
    running = 0;
    close(statm_fd);
    statm_fd = -1;
}

void pb_memsample_forget_after_fork(void)
{
    running = 0; /* the thread does not exist in the child; its fd is closed by the child handler */
    if (statm_fd >= 0) close(statm_fd);
    statm_fd = -1;
    pthread_mutex_init(&stop_lock, NULL);
}

float pb_memsample_current_mb(void) { return atomic_load_explicit(&current_mb, memory_order_relaxed); }
float pb_memsample_peak_mb(void) { return atomic_load_explicit(&peak_mb, memory_order_relaxed); }

void pb_memsample_reset_peak(void)
{
    atomic_store_explicit(&peak_mb, atomic_load_explicit(&current_mb, memory_order_relaxed),
                          memory_order_relaxed);
}

float pb_memsample_read_now_mb(void)
{
    if (statm_fd < 0) return pb_memsample_current_mb();
    float mb = read_rss_mb();
    publish(mb);
    return mb;
}
