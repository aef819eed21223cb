/*
 * exporter_scrape.c - one scrape of the exporter (serve/exporter_scrape.h): every agent of this
 * user asked for its numbers, and the Prometheus series (out/exposition.h) rendered from them.
 * exporter.c serves them; this file opens no socket of its own but the agents'.
 *
 * A scrape: the socket directory is scanned as `probing list` scans it, and every agent is asked
 * in its own thread, over its Unix socket and the existing HTTP API (GET /api/info, POST
 * /api/query), so the agents open no port and no request takes the GIL (the agent answers both
 * from C, docs/architecture.md). Every request of an agent is bounded by one deadline
 * (--timeout, default 5 s, or less when Prometheus announces a shorter scrape timeout): a
 * stopped or stuck agent costs the scrape that deadline, gets `probing_up 0` and no other
 * series, and the others are reported as usual.
 *
 * Counters: the agent keeps its last rows in rings, so the exporter keeps, per agent (pid and
 * start time), the highest step it has counted and the running sums of every counter and of the
 * step-duration histogram; each scrape asks only for the steps after it (and for the
 * collectives and GradScaler rows of those steps). A restarted exporter starts its counters from
 * the rows the rings still hold, which Prometheus's rate() treats as a counter reset. The
 * report's findings (src/report, no eval: conditions are left unknown) are rebuilt at most
 * every FINDINGS_EVERY_S seconds per agent over its last FINDINGS_LAST_STEPS steps.
 *
 * Arrivals (issue 31): for each job of two ranks or more among the agents that answered, the
 * job's roster is read through one of them and every rank, on every node, is asked for its
 * arrival window (arrivals.h), in what is left of the deadline; each rank this exporter scrapes
 * gets its median lag behind the first arrival per process group and a counter of the
 * collectives it entered last (each counted once: the highest sequence number counted is kept
 * per agent and group).
 *
 * Labels of every agent series: job (the agent's job: MASTER_ADDR:MASTER_PORT[/run id], "" when
 * it has none), rank, local_rank, node_rank (LOCAL_RANK and GROUP_RANK, else NODE_RANK, read
 * from /proc/<pid>/environ: ours, same user), host (this node's name) and pid. Memory of a CUDA
 * device also carries the GPU as NVIDIA's DCGM exporter labels it (`gpu`, `UUID`, `Hostname`),
 * and probing_gpu_info maps each rank to its GPU for PromQL joins with DCGM's series.
 *
 * State: `scraper` below. Its host is written once by pb_exporter_scrape_init before the server
 * starts; its states (what is remembered of each agent between scrapes) are read and written by
 * the scrape only, which runs under exporter.c's scrape lock (one at a time), each agent's by
 * that agent's thread while the scrape waits for them.
 */
#include "serve/exporter_scrape.h"

#include "client/arrivals.h"
#include "client/client.h"
#include "clock.h"
#include "out/exposition.h"
#include "paths.h"
#include "phases.h"
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FINDINGS_EVERY_S 30.0
#define FINDINGS_LAST_STEPS 200
#define MAX_COLLECTIVE_OPS 32
#define MAX_AGENTS 1024
#define MAX_ARRIVAL_GROUPS 16
#define ROSTER_MIN_MS 2500 /* the roster request may take 2 s past the deadline it is given */
#define STEP_PAGE_ROWS 100000

typedef struct collective_sum {
    char op[64];
    double seconds, calls, bytes;
} collective_sum;

/* The collectives of one process group a rank entered last, counted once each: the group's
 * sequence numbers are the same on every member, so the highest one counted is the mark. */
typedef struct arrived_last {
    char group[256];
    uint64_t counted_seq;
    double total;       /* collectives this rank entered last */
    double after_s;     /* the after times of the complete collectives, summed */
} arrived_last;

/* What the exporter remembers of one agent between scrapes. [scrape lock] */
typedef struct agent_state {
    pid_t pid;
    double started_unix;           /* with pid, tells a new process from an old one */
    int in_use, seen;              /* seen: found by the current scrape */
    long long last_step;           /* highest step counted; -1 none */
    double buckets[PB_EXPOSITION_BUCKETS], count, sum;
    double phase_seconds[PB_PHASE_COUNT]; /* per phase of pb_phases[] */
    double samples, amp_skipped;
    int has_samples;
    collective_sum collectives[MAX_COLLECTIVE_OPS];
    int collective_count;
    json_t *findings;              /* last report's findings array (owned), NULL before one */
    double findings_at;            /* monotonic seconds of that report */
    arrived_last arrived[MAX_ARRIVAL_GROUPS]; /* per process group of its job (arrival_series) */
    int arrived_count;
} agent_state;

/* One agent in one scrape. */
typedef struct agent_job {
    pid_t pid;
    pb_target target;
    agent_state *state;
    double deadline;               /* monotonic seconds */
    double budget_s;               /* the scrape's deadline, from its start */
    char labels[2048];             /* rendered common labels: 6 of at most
                                      PB_EXPOSITION_LABEL_MAX bytes each, never cut */
    pb_exposition out;
    int up;
    char job[512];                 /* its /api/info job ("" none), world size and rank */
    long long world, rank;
} agent_job;

static struct {
    agent_state states[MAX_AGENTS]; /* [the scrape, under exporter.c's scrape lock] */
    char host[256];                 /* this node's name, set before the first scrape */
} scraper;

void pb_exporter_scrape_init(const char *host)
{
    snprintf(scraper.host, sizeof scraper.host, "%s", host);
}

void pb_exporter_scrape_free(void)
{
    for (int i = 0; i < MAX_AGENTS; i++) json_decref(scraper.states[i].findings);
}

static long remaining_ms(const agent_job *j)
{
    double left = j->deadline - pb_mono_s();
    return left <= 0.001 ? 0 : (long)(left * 1000.0);
}

/* GET/POST with what is left of the agent's deadline. Returns the decoded object (caller owns)
 * or NULL. [scrape thread] */
static json_t *call(agent_job *j, const char *method, const char *path, const char *body)
{
    long ms = remaining_ms(j);
    char err[512];
    pb_response resp;
    if (ms <= 0) return NULL;
    if (pb_client_request(&j->target, method, path, body, ms, &resp, err, sizeof err)) return NULL;
    json_t *root = json_loadb(resp.body.data, resp.body.len, JSON_ALLOW_NUL, NULL);
    long status = resp.status;
    pb_buf_free(&resp.body);
    if (status != 200 || !json_is_object(root)) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* Runs sql; returns the rows array (caller owns) or NULL (table missing, error, deadline).
 * *error, when not NULL, receives a malloc'ed message on failure. [scrape thread] */
static json_t *query(agent_job *j, const char *sql, char **error)
{
    json_t *req = json_pack("{s:s}", "sql", sql);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (error) *error = NULL;
    if (!body) return NULL;
    long ms = remaining_ms(j);
    char err[512] = "the scrape deadline has passed";
    pb_response resp;
    json_t *rows = NULL, *root = NULL;
    if (ms > 0 && pb_client_request(&j->target, "POST", "/api/query", body, ms, &resp, err,
                                    sizeof err) == 0) {
        root = json_loadb(resp.body.data, resp.body.len, JSON_ALLOW_NUL, NULL);
        pb_buf_free(&resp.body);
        rows = json_object_get(root, "rows");
        if (resp.status == 200 && json_is_array(rows)) {
            json_incref(rows);
        } else {
            const char *msg = json_string_value(json_object_get(root, "error"));
            snprintf(err, sizeof err, "%s", msg ? msg : "the agent sent an incomplete answer");
            rows = NULL;
        }
        json_decref(root);
    }
    free(body);
    if (!rows && error) *error = strdup(err);
    return rows;
}

static double num(json_t *row, size_t i)
{
    json_t *v = json_array_get(row, i);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* pb_report_query_fn within the scrape's deadline: rows as objects, as the report wants them. */
static int report_query(void *ctx, const char *sql, json_t **rows, char **error)
{
    agent_job *j = ctx;
    long ms = remaining_ms(j);
    *rows = NULL;
    if (ms <= 0) {
        *error = strdup("the scrape deadline has passed");
        return -1;
    }
    return pb_client_query_objects(&j->target, sql, ms, rows, error);
}

/* Reads NAME=value from /proc/<pid>/environ into out ("" when absent or unreadable). */
static void environ_value(pid_t pid, const char *name, char *out, size_t outlen)
{
    char path[64], buf[65536];
    size_t name_len = strlen(name), n = 0;
    ssize_t got;
    out[0] = '\0';
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    while (n < sizeof buf - 1 && (got = read(fd, buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)got;
    close(fd);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i += strlen(buf + i) + 1) {
        if (strncmp(buf + i, name, name_len) == 0 && buf[i + name_len] == '=') {
            snprintf(out, outlen, "%s", buf + i + name_len + 1);
            return;
        }
    }
}

static void add_label(pb_buf *b, const char *name, const char *value)
{
    pb_buf_printf(b, "%s%s=\"", b->len ? "," : "", name);
    pb_exposition_label_value(b, value);
    pb_buf_putc(b, '"');
}

/* Common labels of an agent from its info (may be NULL when it did not answer). */
static void render_labels(agent_job *j, json_t *info)
{
    char rank[32], local_rank[64], node_rank[64], pid[32];
    const char *job = json_string_value(json_object_get(info, "job"));
    json_t *r = json_object_get(info, "rank");
    environ_value(j->pid, "LOCAL_RANK", local_rank, sizeof local_rank);
    environ_value(j->pid, "GROUP_RANK", node_rank, sizeof node_rank);
    if (!node_rank[0]) environ_value(j->pid, "NODE_RANK", node_rank, sizeof node_rank);
    if (json_is_integer(r)) {
        snprintf(rank, sizeof rank, "%lld", (long long)json_integer_value(r));
    } else {
        environ_value(j->pid, "RANK", rank, sizeof rank);
        if (!rank[0]) snprintf(rank, sizeof rank, "0");
    }
    if (!local_rank[0]) snprintf(local_rank, sizeof local_rank, "%s", rank);
    if (!node_rank[0]) snprintf(node_rank, sizeof node_rank, "0");
    snprintf(pid, sizeof pid, "%d", (int)j->pid);
    pb_buf b = PB_BUF_INIT;
    add_label(&b, "job", job ? job : "");
    add_label(&b, "rank", rank);
    add_label(&b, "local_rank", local_rank);
    add_label(&b, "node_rank", node_rank);
    add_label(&b, "host", scraper.host);
    add_label(&b, "pid", pid);
    snprintf(j->labels, sizeof j->labels, "%s", b.data ? b.data : "");
    pb_buf_free(&b);
}

/* One label pair rendered into a static-size buffer, for the extra labels of a sample. */
static const char *extra_label(char *out, size_t outlen, const char *name, const char *value)
{
    pb_buf b = PB_BUF_INIT;
    add_label(&b, name, value);
    snprintf(out, outlen, "%s", b.data ? b.data : "");
    pb_buf_free(&b);
    return out;
}

/* Counts the completed steps after state->last_step, and the collectives and GradScaler rows of
 * those steps. [scrape thread] */
static void count_steps(agent_job *j)
{
    agent_state *s = j->state;
    char sql[512], columns[256];
    if (pb_phase_columns(columns, sizeof columns, 0, ", ") < 0) return;
    snprintf(sql, sizeof sql,
             "SELECT step, %s, %s, samples FROM python.steps WHERE step > %lld ORDER BY step "
             "LIMIT %d",
             pb_phase_wall.column, columns, s->last_step, STEP_PAGE_ROWS);
    json_t *rows = query(j, sql, NULL), *row;
    size_t i;
    long long from = s->last_step, to = s->last_step;
    json_array_foreach(rows, i, row) {
        double wall = num(row, 1);
        long long step = (long long)num(row, 0);
        if (isnan(wall)) continue;
        for (int b = 0; b < PB_EXPOSITION_BUCKETS; b++)
            if (wall <= pb_exposition_bucket_bounds[b]) s->buckets[b] += 1;
        s->count += 1;
        s->sum += wall;
        for (int p = 0; p < PB_PHASE_COUNT; p++) {
            double v = num(row, 2 + (size_t)p);
            if (!isnan(v)) s->phase_seconds[p] += v;
        }
        double samples = num(row, 2 + PB_PHASE_COUNT);
        if (!isnan(samples) && samples > 0) {
            s->samples += samples;
            s->has_samples = 1;
        }
        if (step > to) to = step;
    }
    json_decref(rows);
    if (to == from) return;
    s->last_step = to;

    snprintf(sql, sizeof sql,
             "SELECT operation_type, COUNT(*), SUM(duration_ms) / 1000.0, SUM(bytes) FROM "
             "python.nccl_trace WHERE step > %lld AND step <= %lld GROUP BY operation_type",
             from, to);
    rows = query(j, sql, NULL);
    json_array_foreach(rows, i, row) {
        const char *op = json_string_value(json_array_get(row, 0));
        if (!op) continue;
        int k;
        for (k = 0; k < s->collective_count && strcmp(s->collectives[k].op, op) != 0; k++) {}
        if (k == s->collective_count) {
            if (k == MAX_COLLECTIVE_OPS) continue;
            snprintf(s->collectives[k].op, sizeof s->collectives[k].op, "%s", op);
            s->collective_count++;
        }
        double calls = num(row, 1), seconds = num(row, 2), bytes = num(row, 3);
        if (!isnan(calls)) s->collectives[k].calls += calls;
        if (!isnan(seconds)) s->collectives[k].seconds += seconds;
        if (!isnan(bytes)) s->collectives[k].bytes += bytes;
    }
    json_decref(rows);

    snprintf(sql, sizeof sql,
             "SELECT COALESCE(SUM(skipped), 0) FROM python.amp_trace WHERE step > %lld AND "
             "step <= %lld", from, to);
    rows = query(j, sql, NULL);
    double skipped = num(json_array_get(rows, 0), 0);
    if (!isnan(skipped)) s->amp_skipped += skipped;
    json_decref(rows);
}

static void emit_counters(agent_job *j)
{
    agent_state *s = j->state;
    pb_exposition *e = &j->out;
    char extra[512]; /* one label: its name and PB_EXPOSITION_LABEL_MAX bytes */
    if (s->last_step < 0 && s->count == 0) return; /* nothing completed yet */
    pb_exposition_add(e, PB_METRIC_STEPS_TOTAL, NULL, j->labels, NULL, s->count);
    for (int b = 0; b < PB_EXPOSITION_BUCKETS; b++) {
        char le[64];
        snprintf(le, sizeof le, "%g", pb_exposition_bucket_bounds[b]);
        pb_exposition_add(e, PB_METRIC_STEP_DURATION, "_bucket", j->labels,
                          extra_label(extra, sizeof extra, "le", le), s->buckets[b]);
    }
    pb_exposition_add(e, PB_METRIC_STEP_DURATION, "_bucket", j->labels, "le=\"+Inf\"", s->count);
    pb_exposition_add(e, PB_METRIC_STEP_DURATION, "_sum", j->labels, NULL, s->sum);
    pb_exposition_add(e, PB_METRIC_STEP_DURATION, "_count", j->labels, NULL, s->count);
    for (int p = 0; p < PB_PHASE_COUNT; p++)
        pb_exposition_add(e, PB_METRIC_STEP_PHASE_SECONDS, NULL, j->labels,
                          extra_label(extra, sizeof extra, "phase", pb_phases[p].column),
                          s->phase_seconds[p]);
    if (s->has_samples)
        pb_exposition_add(e, PB_METRIC_SAMPLES_TOTAL, NULL, j->labels, NULL, s->samples);
    for (int k = 0; k < s->collective_count; k++) {
        extra_label(extra, sizeof extra, "op", s->collectives[k].op);
        pb_exposition_add(e, PB_METRIC_COLLECTIVE_SECONDS, NULL, j->labels, extra,
                          s->collectives[k].seconds);
        pb_exposition_add(e, PB_METRIC_COLLECTIVES_TOTAL, NULL, j->labels, extra,
                          s->collectives[k].calls);
        pb_exposition_add(e, PB_METRIC_COLLECTIVE_BYTES, NULL, j->labels, extra,
                          s->collectives[k].bytes);
    }
}

/* The GPU of torch device "cuda:N" as NVIDIA's DCGM exporter names it: `gpu` is the NVML
 * index, `UUID` the GPU's UUID. torch numbers the devices CUDA_VISIBLE_DEVICES lets it see, so
 * entry N of that list (read from the process's environment) is the GPU: an index gives `gpu`,
 * a "GPU-..." UUID gives `UUID`; without the variable N is the NVML index. Returns 0, or -1 when
 * device is not a CUDA device. */
static int gpu_of(pid_t pid, const char *device, char *gpu, size_t gpulen, char *uuid,
                  size_t uuidlen)
{
    char visible[1024], *save = NULL;
    gpu[0] = uuid[0] = '\0';
    if (!device || strncmp(device, "cuda:", 5) != 0) return -1;
    long n = strtol(device + 5, NULL, 10);
    environ_value(pid, "CUDA_VISIBLE_DEVICES", visible, sizeof visible);
    if (!visible[0]) {
        snprintf(gpu, gpulen, "%ld", n);
        return 0;
    }
    long i = 0;
    for (char *tok = strtok_r(visible, ",", &save); tok; tok = strtok_r(NULL, ",", &save), i++) {
        if (i != n) continue;
        while (*tok == ' ') tok++;
        if (strncmp(tok, "GPU-", 4) == 0 || strncmp(tok, "MIG-", 4) == 0)
            snprintf(uuid, uuidlen, "%s", tok);
        else
            snprintf(gpu, gpulen, "%s", tok);
    }
    return 0;
}

/* Labels `gpu`, `UUID` (when known) and `Hostname` of a CUDA device, DCGM's names, into b. */
static void add_gpu_labels(agent_job *j, pb_buf *b, const char *device)
{
    char gpu[64], uuid[256];
    if (gpu_of(j->pid, device, gpu, sizeof gpu, uuid, sizeof uuid)) return;
    if (gpu[0]) add_label(b, "gpu", gpu);
    if (uuid[0]) add_label(b, "UUID", uuid);
    add_label(b, "Hostname", scraper.host);
}

/* Adds one memory sample of `kind` on `device` ("cpu", "cuda:N", "mixed") in bytes. */
static void emit_memory(agent_job *j, const char *kind, const char *device, double bytes)
{
    char extra[2048]; /* 5 labels of at most PB_EXPOSITION_LABEL_MAX bytes */
    pb_buf b = PB_BUF_INIT;
    if (isnan(bytes)) return;
    add_label(&b, "kind", kind);
    add_label(&b, "torch_device", device ? device : "");
    add_gpu_labels(j, &b, device);
    snprintf(extra, sizeof extra, "%s", b.data ? b.data : "");
    pb_buf_free(&b);
    pb_exposition_add(&j->out, PB_METRIC_MEMORY_BYTES, NULL, j->labels, extra, bytes);
}

static void gauges(agent_job *j)
{
    json_t *rows = query(j,
        "SELECT device, allocated_mb, max_allocated_mb, reserved_mb, rss_mb FROM python.memory "
        "WHERE phase = 'step' ORDER BY step DESC LIMIT 1", NULL);
    json_t *row = json_array_get(rows, 0);
    if (row) {
        const char *device = json_string_value(json_array_get(row, 0));
        static const char *const kinds[] = {"allocated", "max_allocated", "reserved", "rss"};
        for (size_t k = 0; k < 4; k++)
            emit_memory(j, kinds[k], k == 3 ? "cpu" : device, num(row, k + 1) * 1048576.0);
        pb_buf b = PB_BUF_INIT;
        add_gpu_labels(j, &b, device);
        if (b.len) pb_exposition_add(&j->out, PB_METRIC_GPU_INFO, NULL, j->labels, b.data, 1);
        pb_buf_free(&b);
    }
    json_decref(rows);
    rows = query(j,
        "SELECT device, SUM(param_bytes), SUM(grad_bytes), SUM(state_bytes) FROM "
        "python.memory_breakdown WHERE step = (SELECT MAX(step) FROM python.memory_breakdown) "
        "GROUP BY device", NULL);
    size_t i;
    json_array_foreach(rows, i, row) {
        const char *device = json_string_value(json_array_get(row, 0));
        emit_memory(j, "parameters", device, num(row, 1));
        emit_memory(j, "gradients", device, num(row, 2));
        emit_memory(j, "optimizer_state", device, num(row, 3));
    }
    json_decref(rows);
    rows = query(j, "SELECT scale FROM python.amp_trace WHERE scale IS NOT NULL ORDER BY step "
                    "DESC LIMIT 1", NULL);
    double scale = num(json_array_get(rows, 0), 0);
    if (!isnan(scale)) pb_exposition_add(&j->out, PB_METRIC_AMP_SCALE, NULL, j->labels, NULL, scale);
    json_decref(rows);
    if (j->state->last_step >= 0 || j->state->amp_skipped > 0)
        pb_exposition_add(&j->out, PB_METRIC_AMP_SKIPPED, NULL, j->labels, NULL,
                          j->state->amp_skipped);
    rows = query(j, "SELECT schema || '.' || name, rows_dropped FROM probe.tables ORDER BY 1", NULL);
    json_array_foreach(rows, i, row) {
        const char *table = json_string_value(json_array_get(row, 0));
        double dropped = num(row, 1);
        char extra[512]; /* one label: its name and PB_EXPOSITION_LABEL_MAX bytes */
        if (!table || isnan(dropped)) continue;
        pb_exposition_add(&j->out, PB_METRIC_AGENT_ROWS_DROPPED, NULL, j->labels,
                          extra_label(extra, sizeof extra, "table", table), dropped);
    }
    json_decref(rows);
}

/* Rebuilds the findings when the last report is older than FINDINGS_EVERY_S and rebuild is
 * allowed, then emits the latest ones. */
static void findings(agent_job *j, json_t *info, int rebuild)
{
    agent_state *s = j->state;
    double now = pb_mono_s();
    if (rebuild && (!s->findings || now - s->findings_at >= FINDINGS_EVERY_S)) {
        pb_report_source src;
        json_t *report = NULL;
        char *error = NULL;
        memset(&src, 0, sizeof src);
        src.query = report_query;
        src.ctx = j;
        src.target = j->target.socket_path;
        src.info = info;
        src.conditions_error = "not asked by the exporter (eval would take the GIL)";
        src.peers_note = "not looked for by the exporter";
        if (pb_report_build(&src, FINDINGS_LAST_STEPS, &report, &error) == 0 && remaining_ms(j) > 0) {
            json_t *list = json_object_get(report, "findings");
            if (json_is_array(list)) {
                json_decref(s->findings);
                s->findings = json_incref(list);
                s->findings_at = now;
            }
        }
        json_decref(report);
        free(error);
    }
    size_t i;
    json_t *f;
    json_array_foreach(s->findings, i, f) {
        const char *id = json_string_value(json_object_get(f, "id"));
        const char *severity = json_string_value(json_object_get(f, "severity"));
        if (!id || !severity || strcmp(severity, "skipped") == 0) continue;
        pb_buf b = PB_BUF_INIT;
        add_label(&b, "id", id);
        add_label(&b, "severity", severity);
        pb_exposition_add(&j->out, PB_METRIC_FINDING, NULL, j->labels, b.data, 1);
        pb_buf_free(&b);
    }
}

/* Asks one agent for everything. [own thread, one per agent and scrape] */
static void *scrape_agent(void *arg)
{
    agent_job *j = arg;
    double t0 = pb_mono_s();
    json_t *info = call(j, "GET", "/api/info", NULL);
    render_labels(j, info);
    if (info) {
        agent_state *s = j->state;
        double started = json_number_value(json_object_get(info, "started_unix"));
        if (s->started_unix != started) { /* a new process behind a reused pid */
            json_decref(s->findings);
            memset(s, 0, sizeof *s);
            s->pid = j->pid;
            s->started_unix = started;
            s->in_use = 1;
            s->last_step = -1;
        }
        s->seen = 1;
        const char *job = json_string_value(json_object_get(info, "job"));
        snprintf(j->job, sizeof j->job, "%s", job ? job : "");
        j->world = json_integer_value(json_object_get(info, "world_size"));
        j->rank = json_integer_value(json_object_get(info, "rank"));
        count_steps(j);
        gauges(j);
        j->up = remaining_ms(j) > 0; /* an answer cut by the deadline is not an answer */
        /* The report is many queries: rebuilt only with half the deadline still ahead, so a
         * slow one costs the findings (kept from the last report) and never the metrics. */
        if (j->up) findings(j, info, remaining_ms(j) > (long)(j->budget_s * 500.0));
    }
    if (j->up) {
        pb_buf b = PB_BUF_INIT;
        json_t *step = json_object_get(info, "step"), *detail = json_object_get(info, "detail");
        const char *version = json_string_value(json_object_get(info, "version"));
        const char *torch = json_string_value(json_object_get(info, "torch"));
        add_label(&b, "version", version ? version : "");
        const char *python = json_string_value(json_object_get(info, "python"));
        char first[64] = "";
        if (python) snprintf(first, sizeof first, "%.*s", (int)strcspn(python, " "), python);
        add_label(&b, "python", first);
        add_label(&b, "torch", torch ? torch : "");
        pb_exposition_add(&j->out, PB_METRIC_INFO, NULL, j->labels, b.data, 1);
        pb_buf_free(&b);
        if (json_is_number(step))
            pb_exposition_add(&j->out, PB_METRIC_STEP, NULL, j->labels, NULL,
                              json_number_value(step));
        json_t *cost = json_object_get(detail, "cost"), *period = json_object_get(detail, "period"),
               *window = json_object_get(detail, "window");
        if (json_is_number(cost) && json_is_integer(period) && json_integer_value(period) > 0 &&
            json_is_integer(window))
            pb_exposition_add(&j->out, PB_METRIC_AGENT_OVERHEAD, NULL, j->labels, NULL,
                              json_number_value(cost) * (double)json_integer_value(window) /
                                  (double)json_integer_value(period));
        emit_counters(j);
    } else {
        /* Only the up series for an agent that did not answer in time. */
        pb_exposition_free(&j->out);
        memset(&j->out, 0, sizeof j->out);
    }
    pb_exposition_add(&j->out, PB_METRIC_UP, NULL, j->labels, NULL, j->up ? 1 : 0);
    pb_exposition_add(&j->out, PB_METRIC_SCRAPE_SECONDS, NULL, j->labels, NULL, pb_mono_s() - t0);
    json_decref(info);
    return NULL;
}

/* The slot of group in s, made when new; NULL when s has MAX_ARRIVAL_GROUPS already. */
static arrived_last *arrived_slot(agent_state *s, const char *group)
{
    for (int k = 0; k < s->arrived_count; k++)
        if (!strcmp(s->arrived[k].group, group)) return &s->arrived[k];
    if (s->arrived_count == MAX_ARRIVAL_GROUPS || strlen(group) >= sizeof s->arrived[0].group)
        return NULL;
    arrived_last *a = &s->arrived[s->arrived_count++];
    snprintf(a->group, sizeof a->group, "%s", group);
    return a;
}

/* The series of one rank's membership m of a group: its lag gauge, its arrived-last counter and
 * the group's after-time counter, the collectives after its mark in lasts[0..nl-1] counted
 * first. */
static void member_series(agent_job *j, const char *group, const pb_sg_member *m,
                          const pb_sg_last *lasts, size_t nl)
{
    char extra[512];
    arrived_last *slot = arrived_slot(j->state, group);
    if (!slot) return;
    uint64_t mark = slot->counted_seq;
    for (size_t i = 0; i < nl; i++) {
        if (lasts[i].group != m->group || lasts[i].seq <= slot->counted_seq) continue;
        if (lasts[i].rank == m->rank) slot->total += 1;
        if (lasts[i].after_ms >= 0) slot->after_s += lasts[i].after_ms / 1e3;
        if (lasts[i].seq > mark) mark = lasts[i].seq;
    }
    slot->counted_seq = mark;
    extra_label(extra, sizeof extra, "group", group);
    pb_exposition_add(&j->out, PB_METRIC_ARRIVAL_LAG, NULL, j->labels, extra,
                      m->median_behind_ms / 1e3);
    pb_exposition_add(&j->out, PB_METRIC_ARRIVED_LAST, NULL, j->labels, extra, slot->total);
    pb_exposition_add(&j->out, PB_METRIC_COLLECTIVE_AFTER, NULL, j->labels, extra, slot->after_s);
}

/* The arrival series (docs/exporter.md) of every job of two ranks or more among the agents that
 * answered: the job's roster through one of its agents, every rank's arrivals (arrivals.h, in
 * what is left of the scrape's deadline), and the series of the ranks this exporter scrapes
 * (every node's exporter writes its own ranks'). [server thread, under the scrape lock] */
static void arrival_series(agent_job *jobs, int count, double deadline)
{
    for (int i = 0; i < count; i++) {
        agent_job *j = &jobs[i];
        if (!j->pid || !j->up || !j->job[0] || j->world < 2) continue;
        int done = 0;
        for (int k = 0; k < i && !done; k++)
            done = jobs[k].pid && jobs[k].up && jobs[k].world >= 2 && !strcmp(jobs[k].job, j->job);
        long ms = (long)((deadline - pb_mono_s()) * 1000.0);
        if (done || ms < ROSTER_MIN_MS) continue;
        pb_rank_ep *eps = NULL;
        int n = 0;
        pb_job_arrivals a;
        pb_sg_member *members = NULL;
        pb_sg_last *lasts = NULL;
        size_t nm = 0, nl = 0;
        memset(&a, 0, sizeof a);
        if (pb_fanout_roster(&j->target, ms - 2000, &eps, &n) || n < 2) goto next;
        ms = (long)((deadline - pb_mono_s()) * 1000.0);
        if (ms <= 0 || pb_job_arrivals_fetch(eps, n, NULL, ms, NULL, &a) || a.count < 2 ||
            pb_stragglers_members(a.ranks, a.count, &members, &nm, &lasts, &nl))
            goto next;
        for (size_t m = 0; m < nm; m++) {
            long long rank = a.ranks[members[m].rank].rank;
            for (int k = 0; k < count; k++)
                if (jobs[k].pid && jobs[k].up && jobs[k].rank == rank && !strcmp(jobs[k].job, j->job))
                    member_series(&jobs[k], a.group_names[members[m].group], &members[m], lasts, nl);
        }
    next:
        free(members);
        free(lasts);
        pb_job_arrivals_free(&a);
        free(eps);
    }
}

static agent_state *state_for(pid_t pid)
{
    agent_state *free_slot = NULL;
    for (int i = 0; i < MAX_AGENTS; i++) {
        agent_state *s = &scraper.states[i];
        if (s->in_use && s->pid == pid) return s;
        if (!s->in_use && !free_slot) free_slot = s;
    }
    if (!free_slot) return NULL;
    memset(free_slot, 0, sizeof *free_slot);
    free_slot->pid = pid;
    free_slot->in_use = 1;
    free_slot->started_unix = -1;
    free_slot->last_step = -1;
    return free_slot;
}

int pb_exporter_scrape(double timeout_s, pb_buf *out)
{
    char dir[PATH_MAX];
    pid_t *pids = NULL;
    int rc = 0;
    if (pb_paths_dir(dir, sizeof dir)) return -ENAMETOOLONG;
    int count = pb_target_scan(dir, &pids);
    if (count < 0) count = 0; /* no directory yet: no agents */
    if (count > MAX_AGENTS) count = MAX_AGENTS;
    agent_job *jobs = calloc((size_t)count + 1, sizeof *jobs);
    pthread_t *threads = calloc((size_t)count + 1, sizeof *threads);
    pb_exposition **all = calloc((size_t)count + 2, sizeof *all);
    pb_exposition node;
    memset(&node, 0, sizeof node);
    if (!jobs || !threads || !all) {
        rc = -ENOMEM;
        goto fail;
    }
    for (int i = 0; i < MAX_AGENTS; i++) scraper.states[i].seen = 0;
    double deadline = pb_mono_s() + timeout_s;
    int started = 0;
    for (int i = 0; i < count; i++) {
        agent_job *j = &jobs[i];
        char path[PATH_MAX];
        j->pid = pids[i];
        j->deadline = deadline;
        j->budget_s = timeout_s;
        j->state = state_for(pids[i]);
        if (!j->state || pb_paths_socket(pids[i], path, sizeof path) ||
            pb_target_for_socket(pids[i], path, &j->target) ||
            pthread_create(&threads[i], NULL, scrape_agent, j) != 0) {
            j->pid = 0; /* skipped */
            continue;
        }
        started++;
    }
    for (int i = 0; i < count; i++)
        if (jobs[i].pid) pthread_join(threads[i], NULL);
    arrival_series(jobs, count, deadline);
    /* Forget agents that are gone. */
    for (int i = 0; i < MAX_AGENTS; i++) {
        agent_state *s = &scraper.states[i];
        if (s->in_use && !s->seen && !pb_target_pid_alive(s->pid)) {
            json_decref(s->findings);
            memset(s, 0, sizeof *s);
        }
    }
    pb_exposition_add(&node, PB_METRIC_EXPORTER_AGENTS, NULL, "", NULL, started);
    size_t n = 0;
    for (int i = 0; i < count; i++)
        if (jobs[i].pid) all[n++] = &jobs[i].out;
    all[n++] = &node;
    rc = pb_exposition_write(out, all, n);
fail:
    for (int i = 0; jobs && i < count; i++) pb_exposition_free(&jobs[i].out);
    pb_exposition_free(&node);
    free(jobs);
    free(threads);
    free(all);
    free(pids);
    return rc;
}
