/*
 * rules.h - the rules of the report, each in a file of its own; report.c, the driver, calls them
 * in the order of docs/report.md ("Method") and is the only file that does. A rule includes this
 * header for its own prototype and toolkit.h for everything it calls; it never calls another
 * rule or the driver.
 *
 * Each rule adds its findings (some also a section of the document) and none fails: missing
 * data becomes a skipped finding that says what is missing. [any thread]: one report at a time
 * per pb__report.
 */
#ifndef PB_REPORT_RULES_H
#define PB_REPORT_RULES_H

#include "toolkit.h"

/* baseline.c, phase 1 (docs/report.md, "Baseline" and "Slow steps"); only with steps in the
 * window. */
void pb__report_baseline(pb__report *r);    /* the "baseline" section; first_iteration */
void pb__report_slow_steps(pb__report *r);  /* outlier_steps: slow steps, their period */
void pb__report_sample_size(pb__report *r); /* small_sample, one_step */

/* compile.c (docs/report.md, "Compilation"): recompiles, the recompile limit, graph breaks,
 * compile time at the start, from python.compiles; silent without compiles. */
void pb__report_compiles(pb__report *r);

/* bottleneck.c, phases 2 and 3 (docs/report.md, "Bottleneck type"): the "bottleneck" and
 * "component" sections and one finding per cause of lost time; only with steps in the window. */
void pb__report_bottleneck(pb__report *r);

/* checks.c: the checks of docs/report.md, "Host time", "Communication", "Mixed precision". */
void pb__report_check_gil(pb__report *r);         /* gil_contention; steps needed */
void pb__report_check_collectives(pb__report *r); /* collectives; steps needed */
void pb__report_check_amp(pb__report *r);         /* amp (GradScaler) */
void pb__report_check_syncs(pb__report *r);       /* host_syncs; steps needed */

/* device.c (docs/report.md, "Device time"): GPU-bound, launch-bound or host-bound from
 * python.device_steps; silent on a CPU model. */
void pb__report_device_time(pb__report *r); /* device_time */

/* memory_section.c (docs/report.md, "Memory"); only with steps in the window. */
void pb__report_memory_growth(pb__report *r); /* memory_growth: a leak, and when it ends the job */
void pb__report_memory(pb__report *r);        /* the "memory" section: breakdown, fragmentation */

/* amp.c (docs/report.md, "Mixed precision"): bf16 support, tensor-core alignment; steps needed. */
void pb__report_amp_hardware(pb__report *r);

/* ranks.c (docs/report.md, "Distributed"): load imbalance across the ranks of the job. */
void pb__report_ranks(pb__report *r);

/* cluster.c (docs/report.md, "Distributed"; docs/cluster.md): stragglers and slow nodes. */
void pb__report_cluster(pb__report *r);

/* arrival_order.c (docs/report.md, "Distributed"; docs/cluster.md): the rank, or the node, that
 * enters the job's collectives last, from every rank's arrivals (pb_report_source.arrivals). */
void pb__report_arrival_order(pb__report *r);

/* inference.c (docs/report.md, "Inference"): whether the process generates or serves and does
 * not train (python.generations or python.requests has rows, python.steps no optimizer or
 * backward time), and the "inference" section with its findings (no_kv_cache); null without
 * generations. */
int pb__report_is_inference(pb__report *r);
void pb__report_inference(pb__report *r);

/* serving.c (docs/report.md, "Inference", "Requests"): the "requests" section of a process that
 * serves (python.requests) and its findings (serialised_requests, host_work_per_request);
 * null without requests. */
void pb__report_requests(pb__report *r);

#endif
