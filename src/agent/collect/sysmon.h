/*
 * sysmon.h - system.process and system.gpu: a sampler thread that reads the process's CPU time,
 * RSS, thread count and context switches from the kernel, and each NVIDIA GPU's utilisation,
 * memory, temperature, power and SM clock from NVML, about once a second
 * (PROBING_SYSTEM_SAMPLE_MS).
 *
 * NVML is opened with dlopen() when the agent starts (PROBING_NVML_LIBRARY overrides the name
 * libnvidia-ml.so.1; the tests point it at a fake library). Nothing links against NVML, so a
 * machine without an NVIDIA driver runs exactly the same; system.gpu is then empty and its
 * empty_reason says why. The sampler never takes the GIL and never touches Python.
 */
#ifndef PB_AGENT_SYSMON_H
#define PB_AGENT_SYSMON_H

#include "registry.h"

#include <stdint.h>

typedef struct pb_process_row {
    double time;               /* unix seconds */
    int64_t voluntary_ctx_switches;
    int64_t involuntary_ctx_switches;
    float cpu_percent;
    float rss_mb;
    uint32_t threads;
} pb_process_row;

typedef struct pb_gpu_row {
    double time;
    float utilization;
    float memory_used_mb;
    float memory_total_mb;
    float temperature_c;
    float power_w;
    float sm_clock_mhz;
    uint32_t device;
} pb_gpu_row;

extern pb_table pb_table_system_process;
extern pb_table pb_table_system_gpu;

/* Creates both rings and registers both tables. Returns 0 or a negative errno.
 * [start-up, before the server starts] */
int pb_sysmon_tables_init(void);

/* Unregistering is pb_registry_reset()'s job; this frees the rings. After pb_sysmon_stop(). */
void pb_sysmon_tables_free(void);

/* Loads NVML (once per process) and starts the sampler thread. Returns 0 or a negative errno;
 * a missing or failing NVML is not an error (it only empties system.gpu). [start-up] */
int pb_sysmon_start(void);

/* NVML in words for `probing <target> info`: "N GPUs (system.gpu)" or why system.gpu is empty.
 * Written into out (borrowed). [any thread, after pb_sysmon_start] */
void pb_sysmon_nvml_status(char *out, size_t outlen);

/* Stops and joins the sampler; NVML stays loaded. Idempotent. [any thread, not the sampler] */
void pb_sysmon_stop(void);

/* Fork child: the thread does not exist there; forget it. Flags only. [async-signal-safe] */
void pb_sysmon_forget_after_fork(void);

#endif
