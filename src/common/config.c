/* config.c - the settings table; see config.h. */
#include "config.h"

#include "log.h"

#include <errno.h>
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
    {"PROBING_DETAIL_EVERY", "auto", "a window of PROBING_DETAIL_STEPS detail steps (every module execution in torch_trace) starts every N steps; 'auto' picks N (a power of two) from the measured cost of detail so that it stays under PROBING_DETAIL_BUDGET; 1 records every step in detail", NULL},
    {"PROBING_DETAIL_STEPS", "8", "consecutive detail steps per window", NULL},
    {"PROBING_DETAIL_BUDGET", "0.5", "percent of step time the detail windows may cost on average (PROBING_DETAIL_EVERY=auto)", NULL},
    {"PROBING_BACKWARD", "1", "0 records forward and optimizer only (no autograd node hooks: cheaper)", NULL},
    {"PROBING_DDP_HOOK", "", "DistributedDataParallel's all-reduces are recorded through a comm hook by default for power-of-two group sizes (bit-identical); 1 for any size, 0 never", NULL},
    {"PROBING_MEM_SAMPLE_MS", "5", "period of the RSS sampler feeding allocated/max_allocated on CPU", NULL},
    {"PROBING_SYSTEM_SAMPLE_MS", "1000", "period of the system.process / system.gpu sampler (minimum 10)", NULL},
    {"PROBING_NVML_LIBRARY", "", "NVML library to dlopen for system.gpu (default libnvidia-ml.so.1; tests point it at a fake)", NULL},
    {"PROBING_MEMORY_PHASE_EVERY", "50", "python.memory records phase rows (after_data, before_forward, ...) and python.memory_breakdown a row per optimizer on every N-th step (the breakdown also on the first optimizer step); 0 never", NULL},
    {"PROBING_RECORD", "", "path of a SQLite file to keep the whole record in (set by 'probing run -o'; docs/recordings.md)", NULL},
    {"PROBING_RECORD_FLUSH_MS", "1000", "how often the recorder copies new rows to its file (PROBING_RECORD, or 'probing <pid> record -o')", NULL},
    {"PROBING_RECORD_PID", "", "pid of the process 'probing run -o' started; other processes that inherit PROBING_RECORD record into <path>.<pid>", NULL},
    {"PROBING_DEBUG", "", "1 prints the agent's debug messages to stderr", NULL},
};

#define NENTRIES ((int)(sizeof entries / sizeof entries[0]))

void pb_config_load(void)
{
    for (int i = 0; i < NENTRIES; i++) {
        const char *v = getenv(entries[i].name);
        entries[i].value = (v && *v) ? v : entries[i].deflt;
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
