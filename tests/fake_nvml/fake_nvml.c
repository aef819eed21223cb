/*
 * fake_nvml.c - a stand-in for libnvidia-ml.so.1, for tests only (never installed).
 *
 * Exports the nine NVML functions the agent's system.gpu sampler calls, with fixed values, so the
 * NVML path runs on machines without an NVIDIA driver: point PROBING_NVML_LIBRARY at the built
 * libfake_nvml.so. FAKE_NVML_INIT_ERROR=<n> makes nvmlInit_v2 fail with code n (the error path).
 *
 * Device i reports: utilization 40+i %, memory used (1024+i) MiB of 81920 MiB, 50+i C,
 * power (300+i) W, SM clock 1410+i MHz. Two devices.
 */
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct { unsigned int gpu, memory; } fake_utilization;
typedef struct { unsigned long long total, free, used; } fake_memory;
typedef struct fake_device fake_device;
struct fake_device { unsigned int index; };

static fake_device devices[2] = {{0}, {1}};
static int initialised;

EXPORT int nvmlInit_v2(void)
{
    const char *e = getenv("FAKE_NVML_INIT_ERROR");
    if (e && *e) return atoi(e);
    initialised = 1;
    return 0;
}

EXPORT const char *nvmlErrorString(int r)
{
    switch (r) {
    case 0: return "Success";
    case 9: return "Driver Not Loaded";
    case 12: return "Not Found";
    default: return "Unknown Error";
    }
}

EXPORT int nvmlDeviceGetCount_v2(unsigned int *n)
{
    if (!initialised) return 1;
    *n = 2;
    return 0;
}

EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int i, fake_device **d)
{
    if (i >= 2) return 2;
    *d = &devices[i];
    return 0;
}

EXPORT int nvmlDeviceGetUtilizationRates(fake_device *d, fake_utilization *u)
{
    u->gpu = 40 + d->index;
    u->memory = 10;
    return 0;
}

EXPORT int nvmlDeviceGetMemoryInfo(fake_device *d, fake_memory *m)
{
    m->total = 81920ull << 20;
    m->used = (1024ull + d->index) << 20;
    m->free = m->total - m->used;
    return 0;
}

EXPORT int nvmlDeviceGetTemperature(fake_device *d, int sensor, unsigned int *t)
{
    if (sensor != 0) return 2;
    *t = 50 + d->index;
    return 0;
}

EXPORT int nvmlDeviceGetPowerUsage(fake_device *d, unsigned int *mw)
{
    *mw = (300 + d->index) * 1000;
    return 0;
}

EXPORT int nvmlDeviceGetClockInfo(fake_device *d, int type, unsigned int *mhz)
{
    if (type != 1) return 2; /* only NVML_CLOCK_SM is asked for */
    *mhz = 1410 + d->index;
    return 0;
}
