/*
 * exposition.c - the metric families of `probing exporter` and their text exposition
 * (exposition.h). The family table is the one place that names, types and documents a metric;
 * docs/exporter.md repeats it for users.
 */
#include "out/exposition.h"

#include <errno.h>
#include <math.h>
#include <string.h>

typedef struct family {
    const char *name;
    const char *type; /* counter, gauge, histogram */
    const char *help;
} family;

static const family families[PB_METRIC_COUNT] = {
    [PB_METRIC_UP] = {"probing_up", "gauge",
        "1 when the agent answered this scrape within the deadline, 0 when it did not"},
    [PB_METRIC_INFO] = {"probing_agent_info", "gauge",
        "always 1; the labels say the agent's probing, Python and torch versions"},
    [PB_METRIC_STEP] = {"probing_step", "gauge", "the training step the process is in"},
    [PB_METRIC_STEPS_TOTAL] = {"probing_steps_total", "counter",
        "training steps completed (seen by this exporter, from python.steps)"},
    [PB_METRIC_STEP_DURATION] = {"probing_step_duration_seconds", "histogram",
        "wall time of each completed training step (python.steps.wall)"},
    [PB_METRIC_STEP_PHASE_SECONDS] = {"probing_step_phase_seconds_total", "counter",
        "seconds of completed steps spent in each phase: data_wait, forward, backward, "
        "optimizer, collectives, grad_sync, other (python.steps)"},
    [PB_METRIC_SAMPLES_TOTAL] = {"probing_samples_total", "counter",
        "samples (batch sizes summed) of completed steps; rate() gives samples per second"},
    [PB_METRIC_COLLECTIVE_SECONDS] = {"probing_collective_seconds_total", "counter",
        "host seconds in torch.distributed collectives by operation (python.nccl_trace)"},
    [PB_METRIC_COLLECTIVES_TOTAL] = {"probing_collectives_total", "counter",
        "torch.distributed collective calls by operation (python.nccl_trace)"},
    [PB_METRIC_COLLECTIVE_BYTES] = {"probing_collective_bytes_total", "counter",
        "bytes sent or reduced by torch.distributed collectives by operation"},
    [PB_METRIC_ARRIVAL_LAG] = {"probing_collective_arrival_lag_seconds", "gauge",
        "median, over the complete collectives of the group in the ranks' arrival windows (the "
        "last 512 per group), of how long after the group's first rank this rank entered"},
    [PB_METRIC_ARRIVED_LAST] = {"probing_collective_arrived_last_total", "counter",
        "complete collectives of the group this rank entered last (each counted once, as the "
        "arrival windows show them)"},
    [PB_METRIC_COLLECTIVE_AFTER] = {"probing_collective_after_seconds_total", "counter",
        "seconds the group's complete collectives took after their last rank entered (the "
        "median completion minus the last entry), summed (each counted once): the collectives' "
        "own time, which no rank's lateness explains; it rises on a slow link or network"},
    [PB_METRIC_MEMORY_BYTES] = {"probing_memory_bytes", "gauge",
        "memory by kind: allocated, max_allocated, reserved, rss at the last step end "
        "(python.memory); parameters, gradients, optimizer_state at the last breakdown "
        "(python.memory_breakdown)"},
    [PB_METRIC_GPU_INFO] = {"probing_gpu_info", "gauge",
        "always 1: the GPU the rank computes on (its torch device at the last step end), "
        "labelled gpu, UUID, Hostname as NVIDIA's DCGM exporter labels it, for joins"},
    [PB_METRIC_AMP_SCALE] = {"probing_amp_grad_scale", "gauge",
        "the GradScaler's scale at the last optimizer step (python.amp_trace)"},
    [PB_METRIC_AMP_SKIPPED] = {"probing_amp_skipped_steps_total", "counter",
        "optimizer steps the GradScaler skipped (inf/NaN gradients)"},
    [PB_METRIC_FINDING] = {"probing_finding", "gauge",
        "1 for each current finding of `probing report` (id, severity), refreshed every 30 s"},
    [PB_METRIC_AGENT_OVERHEAD] = {"probing_agent_overhead_ratio", "gauge",
        "the agent's own estimate of its cost: detail steps per period x measured detail cost / period, "
        "as a fraction of step time"},
    [PB_METRIC_AGENT_ROWS_DROPPED] = {"probing_agent_rows_dropped_total", "counter",
        "rows the agent's rings overwrote before they were read, by table"},
    [PB_METRIC_SCRAPE_SECONDS] = {"probing_scrape_duration_seconds", "gauge",
        "seconds this exporter spent asking the agent for this scrape"},
    [PB_METRIC_EXPORTER_AGENTS] = {"probing_exporter_agents", "gauge",
        "agents found in the socket directory at this scrape"},
};

const double pb_exposition_bucket_bounds[PB_EXPOSITION_BUCKETS] = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};

/* Length of the valid UTF-8 character at p (1-4), or 0 when p does not start one (a stray
 * continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short). */
static size_t utf8_char(const unsigned char *p)
{
    if (p[0] < 0x80) return 1;
    if (p[0] >= 0xC2 && p[0] <= 0xDF) return (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (p[0] >= 0xE0 && p[0] <= 0xEF) {
        if ((p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (p[0] == 0xE0 && p[1] < 0xA0) return 0; /* overlong */
        if (p[0] == 0xED && p[1] >= 0xA0) return 0; /* surrogate */
        return 3;
    }
    if (p[0] >= 0xF0 && p[0] <= 0xF4) {
        if ((p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (p[0] == 0xF0 && p[1] < 0x90) return 0;
        if (p[0] == 0xF4 && p[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

int pb_exposition_label_value(pb_buf *b, const char *value)
{
    const size_t room = PB_EXPOSITION_LABEL_MAX - 3; /* "..." marks a cut value */
    const unsigned char *p = (const unsigned char *)value;
    size_t written = 0;
    int rc = 0;
    while (*p && !rc) {
        char piece[4];
        size_t n = utf8_char(p), len;
        if (*p == '\\' || *p == '"' || *p == '\n') {
            piece[0] = '\\';
            piece[1] = *p == '\n' ? 'n' : (char)*p;
            len = 2;
        } else if (n) {
            memcpy(piece, p, n);
            len = n;
        } else { /* not UTF-8: U+FFFD, the replacement character */
            memcpy(piece, "\xEF\xBF\xBD", 3);
            len = 3;
            n = 1;
        }
        if (written + len > room) {
            rc = pb_buf_puts(b, "...");
            break;
        }
        rc = pb_buf_append(b, piece, len);
        written += len;
        p += n;
    }
    return rc ? -ENOMEM : 0;
}

static int put_value(pb_buf *b, double v)
{
    if (isnan(v)) return pb_buf_puts(b, "NaN");
    if (isinf(v)) return pb_buf_puts(b, v > 0 ? "+Inf" : "-Inf");
    return pb_buf_printf(b, "%.17g", v);
}

int pb_exposition_add(pb_exposition *e, pb_metric m, const char *suffix, const char *labels,
                      const char *extra, double value)
{
    pb_buf *b = &e->lines[m];
    int has_labels = labels && *labels, has_extra = extra && *extra;
    int rc = pb_buf_puts(b, families[m].name);
    if (!rc && suffix) rc = pb_buf_puts(b, suffix);
    if (!rc && (has_labels || has_extra))
        rc = pb_buf_printf(b, "{%s%s%s}", has_labels ? labels : "",
                           has_labels && has_extra ? "," : "", has_extra ? extra : "");
    if (!rc) rc = pb_buf_putc(b, ' ');
    if (!rc) rc = put_value(b, value);
    if (!rc) rc = pb_buf_putc(b, '\n');
    return rc ? -ENOMEM : 0;
}

int pb_exposition_write(pb_buf *out, pb_exposition *const *all, size_t n)
{
    int rc = 0;
    for (int m = 0; m < PB_METRIC_COUNT && !rc; m++) {
        int any = 0;
        for (size_t i = 0; i < n && !any; i++) any = all[i] && all[i]->lines[m].len > 0;
        if (!any) continue;
        rc = pb_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", families[m].name,
                           families[m].help, families[m].name, families[m].type);
        for (size_t i = 0; i < n && !rc; i++)
            if (all[i] && all[i]->lines[m].len)
                rc = pb_buf_append(out, all[i]->lines[m].data, all[i]->lines[m].len);
    }
    return rc ? -ENOMEM : 0;
}

void pb_exposition_free(pb_exposition *e)
{
    if (!e) return;
    for (int m = 0; m < PB_METRIC_COUNT; m++) pb_buf_free(&e->lines[m]);
}
