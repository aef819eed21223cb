/* config.c - the settings table; see config.h. */
#include "config.h"

#include "log.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pb_config_entry entries[] = {
    {"PROBING", "", "1 starts the agent in every Python process that has probing installed", NULL},
    {"PROBING_DIR", "", "directory for agent sockets (default /tmp/probing-<uid>, mode 0700)", NULL},
    {"PROBING_LISTEN", "", "host:port to also serve on TCP (off by default)", NULL},
    {"PROBING_TOKEN", "", "bearer token TCP clients must send (default: 32 random bytes written to <dir>/<pid>.token, mode 0600)", NULL},
    {"PROBING_TCP_EVAL", "", "1 allows eval over TCP (refused by default: it runs code)", NULL},
    {"PROBING_RING_ROWS", "1M", "capacity in rows of python.torch_trace (oldest rows are dropped)", NULL},
    {"PROBING_CAPTURE_ROWS", "128k", "capacity in rows of python.torch_ops, the results of 'probing <target> capture' (oldest rows are dropped)", NULL},
    {"PROBING_QUERY_TIMEOUT", "30", "seconds a query may run before it is interrupted", NULL},
    {"PROBING_MAX_RESULT_MB", "64", "largest query result in MB; longer results are cut with a message", NULL},
    {"PROBING_EVAL_TIMEOUT", "30", "default seconds eval waits for the interpreter and for the code", NULL},
    {"PROBING_RESULTS_MB", "256", "one budget in MB for all query results in flight in the agent (running or being sent); a query that does not fit waits up to 5 s, then gets 503 busy", NULL},
    {"PROBING_QUERY_THREADS", "2", "queries that run at once; more wait up to 5 s for a turn, then get 503 busy", NULL},
    {"PROBING_SERVER_NICE", "19", "added to the nice value of the agent's server threads (0 keeps the job's priority)", NULL},
    {"PROBING_REQUEST_DEADLINE", "10", "seconds a client has to send a whole request (headers and body) before its connection is closed", NULL},
    {"PROBING_TORCH", "1", "0 disables the torch module and optimizer hooks", NULL},
    {"PROBING_HOOK_MODE", "call", "how module executions are seen: 'call' wraps torch.nn.Module.__call__ in C (torch keeps its fast path); 'hooks' uses torch's global forward hooks", NULL},
    {"PROBING_DETAIL_EVERY", "auto", "which steps are detail steps (every module execution in torch_trace): 'auto' records every step in detail but one summary step in every 16 to 128 (to measure what detail costs) while that cost is within PROBING_DETAIL_BUDGET, and windows of PROBING_DETAIL_STEPS detail steps every N steps (N a power of two picked from the cost) when it is not; 'windows' always the windows; N a window every N steps; 1 every step, nothing measured", NULL},
    {"PROBING_DETAIL_STEPS", "8", "detail steps per window (when detail costs more than the budget, or PROBING_DETAIL_EVERY is windows or N)", NULL},
    {"PROBING_DETAIL_BUDGET", "3", "percent of step time detail may cost on average (PROBING_DETAIL_EVERY=auto or windows)", NULL},
    {"PROBING_BACKWARD", "1", "0 records forward and optimizer only (no autograd node hooks: cheaper)", NULL},
    {"PROBING_AUTOGRAD_EXT", "1", "1 times backward nodes with the C++ extension probing._autograd where it was built and matches the running torch (else, and with 0, with Python-level hooks on grad_fn; /api/info says which)", NULL},
    {"PROBING_DDP_HOOK", "", "DistributedDataParallel's all-reduces are recorded through a comm hook by default for power-of-two group sizes (bit-identical); 1 for any size, 0 never", NULL},
    {"PROBING_MEM_SAMPLE_MS", "5", "period of the RSS sampler feeding allocated/max_allocated on CPU", NULL},
    {"PROBING_GIL_SAMPLE_MS", "10", "period of the GIL sampler behind python.gil (which thread holds the GIL); 0 turns it off", NULL},
    {"PROBING_SYSTEM_SAMPLE_MS", "1000", "period of the system.process / system.gpu sampler (minimum 10)", NULL},
    {"PROBING_DEVICE_TIME", "1", "1 times the step's phases and detail steps' modules on the CUDA device with CUDA events (python.device_steps, python.device_trace) once the program uses CUDA; 0 never", NULL},
    {"PROBING_DEVICE_POLL_MS", "10", "period of the thread that reads completed CUDA events (device time)", NULL},
    {"PROBING_NVML_LIBRARY", "", "NVML library to dlopen for system.gpu (default libnvidia-ml.so.1; tests point it at a fake)", NULL},
    {"PROBING_MEMORY_PHASE_EVERY", "50", "python.memory records phase rows (after_data, before_forward, ...) and python.memory_breakdown a row per optimizer on every N-th step (the breakdown also on the first optimizer step); 0 never", NULL},
    {"PROBING_RECORD", "", "path of a SQLite file to keep the whole record in (set by 'probing run -o'; docs/recordings.md)", NULL},
    {"PROBING_RECORD_FLUSH_MS", "1000", "how often the recorder copies new rows to its file (PROBING_RECORD, or 'probing <pid> record -o')", NULL},
    {"PROBING_RECORD_PID", "", "pid of the process 'probing run -o' started; other processes that inherit PROBING_RECORD record into <name>.rank<R>.<ext> (torchrun ranks) or <name>.pid<P>.<ext>", NULL},
    {"PROBING_RECORD_FORCE", "0", "1 lets PROBING_RECORD replace an existing recording (set by 'probing run -o FILE --force')", NULL},
    {"PROBING_TOKEN_FILE", "", "file whose first line is the TCP token (used when PROBING_TOKEN is unset); a rank of a torch.distributed job with a token listens on TCP (docs/cluster.md)", NULL},
    {"PROBING_HOST", "", "host name this process is listed under by 'probing <target> ranks' (default: gethostname())", NULL},
    {"PROBING_ADVERTISE_ADDR", "", "address other nodes reach this rank's TCP endpoint at (default: the address of GLOO_SOCKET_IFNAME or NCCL_SOCKET_IFNAME when set, else the first IPv4 address of an interface that is up and not loopback)", NULL},
    {"PROBING_JOB_HEARTBEAT", "5", "seconds between refreshes of this rank's entry in the job's c10d store (docs/cluster.md)", NULL},
    {"PROBING_DEBUG", "", "1 prints the agent's debug messages to stderr", NULL},
};

#define NENTRIES ((int)(sizeof entries / sizeof entries[0]))

/* What each setting accepts; pb_config_load() checks every value against it, so a bad value is
 * named once on stderr and replaced by the default, and a value out of range is clamped; the
 * table then holds the value in effect (probe.config shows it). Settings not listed take any
 * text (paths, addresses, tokens). */
/* RULE_AUTO_OR_INT: auto, windows or an integer (PROBING_DETAIL_EVERY) */
typedef enum { RULE_INT, RULE_NUMBER, RULE_BOOL, RULE_CHOICE, RULE_AUTO_OR_INT } rule_kind;

static const struct rule {
    const char *name;
    rule_kind kind;
    double min, max;
    const char *choices; /* RULE_CHOICE: "call|hooks" */
} rules[] = {
    {"PROBING_TCP_EVAL", RULE_BOOL, 0, 1, NULL},
    {"PROBING_RING_ROWS", RULE_INT, 1, 268435456, NULL},
    {"PROBING_CAPTURE_ROWS", RULE_INT, 1, 67108864, NULL},
    {"PROBING_QUERY_TIMEOUT", RULE_NUMBER, 0.001, 86400, NULL},
    {"PROBING_MAX_RESULT_MB", RULE_INT, 1, 4096, NULL},
    {"PROBING_EVAL_TIMEOUT", RULE_NUMBER, 0.001, 86400, NULL},
    {"PROBING_TORCH", RULE_BOOL, 0, 1, NULL},
    {"PROBING_HOOK_MODE", RULE_CHOICE, 0, 0, "call|hooks"},
    {"PROBING_DETAIL_EVERY", RULE_AUTO_OR_INT, 1, 1048576, NULL},
    {"PROBING_DETAIL_STEPS", RULE_INT, 1, 64, NULL},
    {"PROBING_DETAIL_BUDGET", RULE_NUMBER, 0.01, 100, NULL},
    {"PROBING_BACKWARD", RULE_BOOL, 0, 1, NULL},
    {"PROBING_AUTOGRAD_EXT", RULE_BOOL, 0, 1, NULL},
    {"PROBING_DDP_HOOK", RULE_BOOL, 0, 1, NULL},
    {"PROBING_MEM_SAMPLE_MS", RULE_INT, 1, 60000, NULL},
    {"PROBING_SYSTEM_SAMPLE_MS", RULE_INT, 10, 3600000, NULL},
    {"PROBING_DEVICE_TIME", RULE_BOOL, 0, 1, NULL},
    {"PROBING_DEVICE_POLL_MS", RULE_INT, 1, 1000, NULL},
    {"PROBING_MEMORY_PHASE_EVERY", RULE_INT, 0, 1073741824, NULL},
    {"PROBING_RECORD_FLUSH_MS", RULE_INT, 10, 3600000, NULL},
    {"PROBING_RECORD_PID", RULE_INT, 1, 2147483647, NULL},
    {"PROBING_RECORD_FORCE", RULE_BOOL, 0, 1, NULL},
    {"PROBING_DEBUG", RULE_BOOL, 0, 1, NULL},
};

static char clamped[NENTRIES][32]; /* a clamped value's text */

/* Parses an integer with an optional k, M or G suffix. Returns 0 or -EINVAL. */
static int parse_int(const char *v, long long *out)
{
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v) return -EINVAL;
    long long scale = 1;
    if (*end == 'k' || *end == 'K') scale = 1024;
    else if (*end == 'M') scale = 1024 * 1024;
    else if (*end == 'G') scale = 1024ll * 1024 * 1024;
    if (scale != 1) end++;
    if (*end || n > LLONG_MAX / scale || n < LLONG_MIN / scale) return -EINVAL;
    *out = n * scale;
    return 0;
}

/* Checks entry i's value against its rule: a bad one is replaced by the default, one out of
 * range by its bound, each with one warning. */
static void validate(int i, const struct rule *r)
{
    pb_config_entry *e = &entries[i];
    const char *v = e->value;
    double x = 0;
    if (!v || !*v || v == e->deflt) return;
    switch (r->kind) {
    case RULE_BOOL:
        if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0) return;
        pb_log_warn("ignoring %s=%s: expected 0 or 1; using %s", e->name, v,
                    *e->deflt ? e->deflt : "the default");
        e->value = e->deflt;
        return;
    case RULE_CHOICE: {
        size_t n = strlen(v);
        for (const char *c = r->choices; c && *c;) {
            const char *bar = strchr(c, '|');
            size_t len = bar ? (size_t)(bar - c) : strlen(c);
            if (len == n && strncmp(c, v, n) == 0) return;
            c = bar ? bar + 1 : NULL;
        }
        char list[128];
        size_t len = 0;
        for (const char *c = r->choices; *c && len + 5 < sizeof list; c++) {
            if (*c == '|') len += (size_t)snprintf(list + len, sizeof list - len, " or ");
            else list[len++] = *c;
        }
        list[len] = '\0';
        pb_log_warn("ignoring %s=%s: expected %s; using %s", e->name, v, list, e->deflt);
        e->value = e->deflt;
        return;
    }
    case RULE_AUTO_OR_INT:
        if (strcmp(v, "auto") == 0 || strcmp(v, "windows") == 0) return;
        /* fall through */
    case RULE_INT: {
        long long n;
        if (parse_int(v, &n)) {
            pb_log_warn("ignoring %s=%s: %s; using %s", e->name, v,
                        r->kind == RULE_INT ? "not an integer" : "not 'auto', 'windows' or a number of steps",
                        e->deflt);
            e->value = e->deflt;
            return;
        }
        x = (double)n;
        break;
    }
    case RULE_NUMBER: {
        char *end;
        x = strtod(v, &end);
        if (end == v || *end || x != x) {
            pb_log_warn("ignoring %s=%s: not a number; using %s", e->name, v, e->deflt);
            e->value = e->deflt;
            return;
        }
        break;
    }
    }
    if (x >= r->min && x <= r->max) return;
    double bound = x < r->min ? r->min : r->max;
    snprintf(clamped[i], sizeof clamped[i], "%.15g", bound);
    pb_log_warn("%s=%s is %s its %s %s; using %s", e->name, v, x < r->min ? "below" : "above",
                x < r->min ? "minimum" : "maximum", clamped[i], clamped[i]);
    e->value = clamped[i];
}

void pb_config_load(void)
{
    for (int i = 0; i < NENTRIES; i++) {
        const char *v = getenv(entries[i].name);
        entries[i].value = (v && *v) ? v : entries[i].deflt;
        for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++)
            if (strcmp(rules[k].name, entries[i].name) == 0) validate(i, &rules[k]);
    }
}

static pb_config_entry *find(const char *name)
{
    for (int i = 0; i < NENTRIES; i++)
        if (strcmp(entries[i].name, name) == 0) return &entries[i];
    return NULL;
}

const char *pb_config_str(const char *name)
{
    pb_config_entry *e = find(name);
    if (!e) return NULL;
    return e->value ? e->value : e->deflt;
}

int64_t pb_config_int(const char *name, int64_t deflt_if_bad)
{
    const char *v = pb_config_str(name);
    if (!v || !*v) return deflt_if_bad;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v) goto bad;
    if (*end == 'k' || *end == 'K') { n *= 1024; end++; }
    else if (*end == 'M') { n *= 1024 * 1024; end++; }
    else if (*end == 'G') { n *= 1024ll * 1024 * 1024; end++; }
    if (*end) goto bad;
    return n;
bad:
    pb_log_warn("ignoring %s=%s: not an integer; using %lld", name, v, (long long)deflt_if_bad);
    return deflt_if_bad;
}

double pb_config_double(const char *name, double deflt_if_bad)
{
    const char *v = pb_config_str(name);
    if (!v || !*v) return deflt_if_bad;
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end) {
        pb_log_warn("ignoring %s=%s: not a number; using %g", name, v, deflt_if_bad);
        return deflt_if_bad;
    }
    return d;
}

int pb_config_count(void) { return NENTRIES; }
const pb_config_entry *pb_config_at(int i) { return (i >= 0 && i < NENTRIES) ? &entries[i] : NULL; }
