/* memsample.c - RSS sampler thread; see memsample.h. */
#include "memsample.h"

#include "config.h"
#include "log.h"
#include "sampler.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pb_sampler sampler;
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
    /* the peak first: a reader that sees the new current value sees a peak at least as high */
    float peak = atomic_load_explicit(&peak_mb, memory_order_relaxed);
    while (mb > peak && !atomic_compare_exchange_weak_explicit(&peak_mb, &peak, mb, memory_order_relaxed,
                                                               memory_order_relaxed)) {
    }
    atomic_store_explicit(&current_mb, mb, memory_order_release);
}

/* One sample: the RSS now. [sampler thread] */
static void sample(void) { publish(read_rss_mb()); }

int pb_memsample_start(void)
{
    if (sampler.running) return 0;
    page_size = sysconf(_SC_PAGESIZE);
    statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (statm_fd < 0) return -errno;
    publish(read_rss_mb());
    atomic_store(&peak_mb, atomic_load(&current_mb));
    long period = (long)pb_config_int("PROBING_MEM_SAMPLE_MS", 5);
    if (period < 1) period = 1;
    sampler.tick = sample;
    sampler.period_ms = period;
    sampler.tick_first = 1;
    sampler.fixed_rate = 1;
    int rc = pb_sampler_start(&sampler);
    if (rc) {
        close(statm_fd);
        statm_fd = -1;
    }
    return rc;
}

void pb_memsample_stop(void)
{
    if (!sampler.running) return;
    pb_sampler_stop(&sampler);
    close(statm_fd);
    statm_fd = -1;
}

void pb_memsample_forget_after_fork(void)
{
    pb_sampler_forget_after_fork(&sampler); /* the thread does not exist in the child */
    if (statm_fd >= 0) close(statm_fd);
    statm_fd = -1;
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
