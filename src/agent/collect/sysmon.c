/*
 * sysmon.c - system.process and system.gpu sampler; see sysmon.h and docs/tables.md.
 *
 * One thread wakes every PROBING_SYSTEM_SAMPLE_MS (default 1000) on a CLOCK_MONOTONIC deadline
 * and pushes one system.process row and one system.gpu row per device. Sources:
 *   CPU %          getrusage(RUSAGE_SELF) user+system time delta over the wall-clock delta
 *                  (all threads; 100 = one core busy)
 *   context sw.    getrusage ru_nvcsw / ru_nivcsw (all threads, cumulative since start)
 *   RSS            /proc/self/statm      threads   /proc/self/stat field 20
 *   GPU            NVML, dlopen()ed; its types and the nine functions used are declared here so
 *                  that no NVML header or library is needed to build.
 */
#include "sysmon.h"

#include "clock.h"
#include "config.h"
#include "log.h"
#include "sampler.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- NVML, declared by hand */

typedef int nvml_return;           /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef struct nvml_device *nvml_device;
typedef struct { unsigned int gpu, memory; } nvml_utilization;
typedef struct { unsigned long long total, free, used; } nvml_memory;
enum { NVML_TEMPERATURE_GPU = 0, NVML_CLOCK_SM = 1 };

static struct {
    nvml_return (*init)(void);
    nvml_return (*device_count)(unsigned int *);
    nvml_return (*handle_by_index)(unsigned int, nvml_device *);
    nvml_return (*utilization)(nvml_device, nvml_utilization *);
    nvml_return (*memory)(nvml_device, nvml_memory *);
    nvml_return (*temperature)(nvml_device, int, unsigned int *);
    nvml_return (*power)(nvml_device, unsigned int *);
    nvml_return (*clock)(nvml_device, int, unsigned int *);
    const char *(*error_string)(nvml_return);
} nvml;

#define PB_GPU_MAX 64
static int nvml_tried;
static unsigned int gpu_count;
static nvml_device gpus[PB_GPU_MAX];
static char gpu_empty_reason[320];

/* ---------------------------------------------------------------- tables */

#define COL PB_COL

static const pb_column process_cols[] = {
    COL("time", PB_COL_F64, pb_process_row, time, "unix seconds of the sample"),
    COL("cpu_percent", PB_COL_F32, pb_process_row, cpu_percent, "CPU time of all threads over wall time since the previous sample, in percent (100 = one core)"),
    COL("rss_mb", PB_COL_F32, pb_process_row, rss_mb, "resident set size, MB"),
    COL("threads", PB_COL_U32, pb_process_row, threads, "OS threads in the process"),
    COL("voluntary_ctx_switches", PB_COL_I64, pb_process_row, voluntary_ctx_switches, "voluntary context switches of all threads since the process started (cumulative)"),
    COL("involuntary_ctx_switches", PB_COL_I64, pb_process_row, involuntary_ctx_switches, "involuntary context switches of all threads since the process started (cumulative)"),
};

static const pb_column gpu_cols[] = {
    COL("time", PB_COL_F64, pb_gpu_row, time, "unix seconds of the sample"),
    COL("device", PB_COL_U32, pb_gpu_row, device, "NVML device index (all GPUs of the machine, not only CUDA_VISIBLE_DEVICES)"),
    COL("utilization", PB_COL_F32, pb_gpu_row, utilization, "percent of the last sample period a kernel ran"),
    COL("memory_used_mb", PB_COL_F32, pb_gpu_row, memory_used_mb, "device memory in use by all processes, MB"),
    COL("memory_total_mb", PB_COL_F32, pb_gpu_row, memory_total_mb, "device memory, MB"),
    COL("temperature_c", PB_COL_F32, pb_gpu_row, temperature_c, "GPU die temperature, Celsius"),
    COL("power_w", PB_COL_F32, pb_gpu_row, power_w, "board power draw, watts"),
    COL("sm_clock_mhz", PB_COL_F32, pb_gpu_row, sm_clock_mhz, "SM clock, MHz"),
};

pb_table pb_table_system_process = {
    .schema = "system",
    .name = "process",
    .doc = "the traced process: CPU, memory, threads, context switches, about every second",
    .columns = process_cols,
    .ncolumns = (int)(sizeof process_cols / sizeof process_cols[0]),
    .row_size = sizeof(pb_process_row),
    .step_column = -1,
    .empty_reason = "empty until the first sample (PROBING_SYSTEM_SAMPLE_MS after start)",
};

pb_table pb_table_system_gpu = {
    .schema = "system",
    .name = "gpu",
    .doc = "every NVIDIA GPU of the machine (NVML): utilisation, memory, temperature, power, SM clock",
    .columns = gpu_cols,
    .ncolumns = (int)(sizeof gpu_cols / sizeof gpu_cols[0]),
    .row_size = sizeof(pb_gpu_row),
    .step_column = -1,
    .empty_reason = "NVML was not loaded",
};

int pb_sysmon_tables_init(void)
{
    int rc;
    if ((rc = pb_ring_create(&pb_table_system_process.ring, sizeof(pb_process_row), 86400))) goto fail;
    if ((rc = pb_ring_create(&pb_table_system_gpu.ring, sizeof(pb_gpu_row), 1 << 18))) goto fail;
    if ((rc = pb_registry_add(&pb_table_system_process))) goto fail;
    if ((rc = pb_registry_add(&pb_table_system_gpu))) goto fail;
    return 0;
fail:
    pb_sysmon_tables_free();
    return rc;
}

void pb_sysmon_tables_free(void)
{
    pb_ring_destroy(pb_table_system_process.ring);
    pb_table_system_process.ring = NULL;
    pb_ring_destroy(pb_table_system_gpu.ring);
    pb_table_system_gpu.ring = NULL;
}

/* ---------------------------------------------------------------- NVML loading */

__attribute__((format(printf, 1, 2))) static void set_gpu_reason(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gpu_empty_reason, sizeof gpu_empty_reason, fmt, ap);
    va_end(ap);
    pb_table_system_gpu.empty_reason = gpu_empty_reason;
}

/* Loads NVML and lists the devices, once per process. Leaves gpu_count 0 and the reason in
 * system.gpu's empty_reason when it cannot. [start-up, before the server thread exists] */
static void nvml_load(void)
{
    if (nvml_tried) return;
    nvml_tried = 1;
    const char *name = pb_config_str("PROBING_NVML_LIBRARY");
    if (!name || !*name) name = "libnvidia-ml.so.1";
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        set_gpu_reason("no NVIDIA driver: %s could not be loaded (%s)", name, dlerror());
        return;
    }
    static const struct { const char *symbol; size_t offset; } wanted[] = {
        {"nvmlInit_v2", offsetof(__typeof__(nvml), init)},
        {"nvmlDeviceGetCount_v2", offsetof(__typeof__(nvml), device_count)},
        {"nvmlDeviceGetHandleByIndex_v2", offsetof(__typeof__(nvml), handle_by_index)},
        {"nvmlDeviceGetUtilizationRates", offsetof(__typeof__(nvml), utilization)},
        {"nvmlDeviceGetMemoryInfo", offsetof(__typeof__(nvml), memory)},
        {"nvmlDeviceGetTemperature", offsetof(__typeof__(nvml), temperature)},
        {"nvmlDeviceGetPowerUsage", offsetof(__typeof__(nvml), power)},
        {"nvmlDeviceGetClockInfo", offsetof(__typeof__(nvml), clock)},
        {"nvmlErrorString", offsetof(__typeof__(nvml), error_string)},
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        void *fn = dlsym(lib, wanted[i].symbol);
        if (!fn) {
            set_gpu_reason("%s has no %s: NVML too old or not NVML", name, wanted[i].symbol);
            memset(&nvml, 0, sizeof nvml);
            return;
        }
        memcpy((char *)&nvml + wanted[i].offset, &fn, sizeof fn);
    }
    nvml_return r = nvml.init();
    if (r != 0) {
        set_gpu_reason("NVML could not start (nvmlInit_v2: %s)", nvml.error_string(r));
        return;
    }
    unsigned int n = 0;
    r = nvml.device_count(&n);
    if (r != 0) {
        set_gpu_reason("NVML cannot count devices (nvmlDeviceGetCount_v2: %s)", nvml.error_string(r));
        return;
    }
    if (n > PB_GPU_MAX) n = PB_GPU_MAX;
    unsigned int usable = 0;
    for (unsigned int i = 0; i < n; i++)
        if (nvml.handle_by_index(i, &gpus[i]) == 0) usable = i + 1;
        else gpus[i] = NULL;
    gpu_count = usable;
    if (!gpu_count) set_gpu_reason("NVML found no GPU");
    else set_gpu_reason("empty until the first sample (PROBING_SYSTEM_SAMPLE_MS after start)");
}

void pb_sysmon_nvml_status(char *out, size_t outlen)
{
    if (gpu_count) snprintf(out, outlen, "%u GPU%s (system.gpu)", gpu_count, gpu_count == 1 ? "" : "s");
    else if (!nvml_tried) snprintf(out, outlen, "not loaded");
    else snprintf(out, outlen, "%s", gpu_empty_reason);
}

/* ---------------------------------------------------------------- sampling [sampler thread] */

static pb_sampler sampler;
static int64_t last_cpu, last_wall; /* at the previous sample [sampler thread] */
static int stat_fd = -1, statm_fd = -1;
static long page_size;

static int64_t timeval_ns(struct timeval tv) { return (int64_t)tv.tv_sec * 1000000000 + tv.tv_usec * 1000; }


static float read_rss_mb(void)
{
    char buf[128];
    ssize_t n = pread(statm_fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strchr(buf, ' ');
    if (!p) return 0;
    return (float)((double)strtol(p + 1, NULL, 10) * (double)page_size / (1024.0 * 1024.0));
}

static uint32_t read_threads(void)
{
    char buf[1024];
    ssize_t n = pread(stat_fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and ')' */
    if (!p) return 0;
    p++;
    for (int field = 3; field < 20 && p; field++) p = strchr(p + 1, ' '); /* p: the space before field 20 */
    return p ? (uint32_t)strtoul(p + 1, NULL, 10) : 0;
}

static int64_t cpu_ns(struct rusage *ru)
{
    getrusage(RUSAGE_SELF, ru);
    return timeval_ns(ru->ru_utime) + timeval_ns(ru->ru_stime);
}

static void sample_gpus(double now)
{
    for (unsigned int i = 0; i < gpu_count; i++) {
        if (!gpus[i]) continue;
        pb_gpu_row r = {.time = now, .device = i};
        nvml_utilization u;
        nvml_memory m;
        unsigned int v;
        r.utilization = nvml.utilization(gpus[i], &u) == 0 ? (float)u.gpu : -1;
        if (nvml.memory(gpus[i], &m) == 0) {
            r.memory_used_mb = (float)((double)m.used / (1024.0 * 1024.0));
            r.memory_total_mb = (float)((double)m.total / (1024.0 * 1024.0));
        }
        r.temperature_c = nvml.temperature(gpus[i], NVML_TEMPERATURE_GPU, &v) == 0 ? (float)v : -1;
        r.power_w = nvml.power(gpus[i], &v) == 0 ? (float)v / 1000.0f : -1;
        r.sm_clock_mhz = nvml.clock(gpus[i], NVML_CLOCK_SM, &v) == 0 ? (float)v : -1;
        pb_ring_push(pb_table_system_gpu.ring, &r);
    }
}

/* One sample: a python.system_process row and one python.system_gpu row per GPU. [sampler
 * thread] */
static void sample(void)
{
    struct rusage ru;
    int64_t cpu = cpu_ns(&ru), wall = pb_now_ns();
    pb_process_row r = {.time = pb_wall_s()};
    r.cpu_percent = wall > last_wall ? (float)(100.0 * (double)(cpu - last_cpu) / (double)(wall - last_wall)) : 0;
    r.rss_mb = read_rss_mb();
    r.threads = read_threads();
    r.voluntary_ctx_switches = ru.ru_nvcsw;
    r.involuntary_ctx_switches = ru.ru_nivcsw;
    last_cpu = cpu;
    last_wall = wall;
    pb_ring_push(pb_table_system_process.ring, &r);
    sample_gpus(r.time);
}

int pb_sysmon_start(void)
{
    int rc;
    if (sampler.running) return 0;
    nvml_load();
    page_size = sysconf(_SC_PAGESIZE);
    stat_fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (stat_fd < 0 || statm_fd < 0) {
        rc = -errno;
        goto fail;
    }
    long period = (long)pb_config_int("PROBING_SYSTEM_SAMPLE_MS", 1000);
    if (period < 10) period = 10;
    struct rusage ru;
    last_cpu = cpu_ns(&ru); /* the first sample's CPU share is over its first period */
    last_wall = pb_now_ns();
    sampler.tick = sample;
    sampler.period_ms = period;
    sampler.tick_first = 0;
    sampler.fixed_rate = 1;
    if ((rc = pb_sampler_start(&sampler))) goto fail;
    return 0;
fail:
    if (stat_fd >= 0) close(stat_fd);
    if (statm_fd >= 0) close(statm_fd);
    stat_fd = statm_fd = -1;
    return rc;
}

void pb_sysmon_stop(void)
{
    if (!sampler.running) return;
    pb_sampler_stop(&sampler);
    close(stat_fd);
    close(statm_fd);
    stat_fd = statm_fd = -1;
}

void pb_sysmon_forget_after_fork(void)
{
    pb_sampler_forget_after_fork(&sampler);
    if (stat_fd >= 0) close(stat_fd);
    if (statm_fd >= 0) close(statm_fd);
    stat_fd = statm_fd = -1;
}
