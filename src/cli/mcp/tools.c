/*
 * tools.c - the MCP server's tools (tools.h).
 *
 * One row per tool in the table below: its name, title and description for the model, its
 * input schema (JSON Schema, as text), the function that runs it and whether it only reads.
 * The schema's property names are the arguments a call may give: any other name is refused
 * with the list of the right ones. A tool function reads its arguments with the arg_*
 * helpers, calls the command's function and writes the text item into `text`; everything it
 * prints through out/cli.h's messages is captured and follows that text (on success: notes
 * such as "the result was truncated"; on failure: the error, as the command prints it).
 *
 * Bounds: the text item at most MAX_TEXT_BYTES (cut at a line, and it says so), the structured
 * content at most MAX_STRUCTURED_BYTES (else left out, and the text says so), a query's rows at
 * most max_rows (default QUERY_DEFAULT_ROWS, at most QUERY_MAX_ROWS) from at most
 * QUERY_MAX_BYTES of the agent's JSON.
 */
#include "mcp/tools.h"

#include "client/agents.h"
#include "client/arrivals.h"
#include "client/client.h"
#include "client/compare_fetch.h"
#include "client/eval.h"
#include "client/hang_fetch.h"
#include "client/query.h"
#include "client/ranks.h"
#include "client/report_fetch.h"
#include "client/stacks.h"
#include "client/target.h"
#include "compare.h"
#include "hang.h"
#include "out/cli.h"
#include "out/format.h"
#include "report.h"
#include "stragglers.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEXT_BYTES ((size_t)200 << 10)
#define MAX_STRUCTURED_BYTES ((size_t)4 << 20)
#define QUERY_DEFAULT_ROWS 200
#define QUERY_MAX_ROWS 10000
#define QUERY_MAX_BYTES ((size_t)2 << 20)
#define SPEC_MAX 4200 /* a target as typed: a recording's path may be long */

typedef int (*tool_run)(json_t *args, FILE *text, json_t **structured);

enum {
    TOOL_READ_ONLY = 1, /* reads the job, changes nothing */
    TOOL_EVAL = 2,      /* runs code in the job: listed and run only with --allow-eval */
};

typedef struct tool {
    const char *name, *title, *description;
    const char *input_schema; /* JSON text */
    tool_run run;
    unsigned flags;
} tool;

static const tool *calling; /* the tool being run, for the messages about its arguments */

/* ---- arguments */

/* "query's argument 'max_rows' must be <wants>, not <what it got>". Returns PB_EXIT_USAGE. */
static int bad_argument(const char *key, const char *wants, json_t *got)
{
    char *shown = json_dumps(got, JSON_ENCODE_ANY | JSON_COMPACT);
    size_t len = shown ? strlen(shown) : 0;
    int rc = pb_cli_usage_error("%s's argument '%s' must be %s, not %.*s%s", calling->name, key,
                                wants, len > 80 ? 80 : (int)len, shown ? shown : "?",
                                len > 80 ? "..." : "");
    free(shown);
    return rc;
}

static json_t *argument(json_t *args, const char *key)
{
    json_t *v = json_object_get(args, key);
    return json_is_null(v) ? NULL : v;
}

/* A string argument: *out borrowed from args (NULL when absent and not required). */
static int arg_string(json_t *args, const char *key, int required, const char *what,
                      const char **out)
{
    json_t *v = argument(args, key);
    *out = NULL;
    if (!v) return required ? pb_cli_usage_error("%s needs the argument '%s' (%s)", calling->name,
                                                 key, what)
                            : 0;
    if (!json_is_string(v)) return bad_argument(key, "a string", v);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return bad_argument(key, "a string without NUL characters", v);
    *out = json_string_value(v);
    return 0;
}

/* A whole number from min to max; dflt when absent. */
static int arg_int(json_t *args, const char *key, long long min, long long max, long long dflt,
                   long long *out)
{
    json_t *v = argument(args, key);
    *out = dflt;
    if (!v) return 0;
    double d = json_is_real(v) ? json_real_value(v) : 0;
    if (json_is_integer(v)) *out = json_integer_value(v);
    else if (json_is_real(v) && d == floor(d) && fabs(d) < 9e15) *out = (long long)d;
    else *out = min - 1;
    if (*out < min || *out > max) {
        char wants[96];
        snprintf(wants, sizeof wants, "a whole number from %lld to %lld", min, max);
        return bad_argument(key, wants, v);
    }
    return 0;
}

/* A number of seconds above 0, up to max; dflt when absent. */
static int arg_seconds(json_t *args, const char *key, double max, double dflt, double *out)
{
    json_t *v = argument(args, key);
    *out = dflt;
    if (!v) return 0;
    if (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > max) {
        char wants[96];
        snprintf(wants, sizeof wants, "a number of seconds above 0 (up to %g)", max);
        return bad_argument(key, wants, v);
    }
    *out = json_number_value(v);
    return 0;
}

static int arg_bool(json_t *args, const char *key, int *out)
{
    json_t *v = argument(args, key);
    *out = 0;
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad_argument(key, "true or false", v);
    *out = json_is_true(v);
    return 0;
}

/* The target as typed (a pid may come as a number) into spec. */
static int arg_spec(json_t *args, const char *key, char *spec, size_t len)
{
    json_t *v = argument(args, key);
    if (json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) <= INT_MAX) {
        snprintf(spec, len, "%lld", (long long)json_integer_value(v));
        return 0;
    }
    const char *s;
    int rc = arg_string(args, key, 1, "a pid from list_targets, host:port, a socket or a "
                        "recording file", &s);
    if (rc) return rc;
    if (!*s || strlen(s) >= len) return bad_argument(key, "a target (a pid from list_targets)", v);
    snprintf(spec, len, "%s", s);
    return 0;
}

/* The target of key resolved into t, as the command line's would be. */
static int arg_target(json_t *args, const char *key, char *spec, size_t len, pb_target *t)
{
    int rc = arg_spec(args, key, spec, len);
    return rc ? rc : pb_target_resolve(spec, t);
}

/* The arguments every whole-job tool (hang, stragglers, ranks) takes: its target, resolved, and
 * deadline_s (0 when absent: the command line's default). */
static int arg_job(json_t *args, char *spec, size_t len, pb_target *t, double *deadline)
{
    int rc = arg_target(args, "target", spec, len, t);
    return rc ? rc : arg_seconds(args, "deadline_s", 3600, 0, deadline);
}

static int blank(const char *s) { return strspn(s, " \t\r\n") == strlen(s); }

/* ---- the tools */

static int tool_list_targets(json_t *args, FILE *text, json_t **structured)
{
    char dir[PATH_MAX];
    json_t *agents = NULL;
    (void)args;
    int rc = pb_agents_list(dir, sizeof dir, &agents);
    if (rc) return rc;
    *structured = json_pack("{s:o,s:s}", "targets", agents, "socket_dir", dir);
    if (!*structured) return pb_cli_error("out of memory");
    if (!json_array_size(agents))
        fprintf(text, "no processes traced by probing on this machine (socket dir: %s)\n", dir);
    else
        pb_format_json_pretty(text, *structured);
    return PB_EXIT_OK;
}

static int tool_query(json_t *args, FILE *text, json_t **structured)
{
    char spec[SPEC_MAX];
    pb_target t;
    const char *sql, *ranks;
    long long max_rows;
    int rc;
    if ((rc = arg_target(args, "target", spec, sizeof spec, &t)) ||
        (rc = arg_string(args, "sql", 1, "a read-only SELECT statement", &sql)) ||
        (rc = arg_string(args, "ranks", 0, NULL, &ranks)) ||
        (rc = arg_int(args, "max_rows", 1, QUERY_MAX_ROWS, QUERY_DEFAULT_ROWS, &max_rows)))
        return rc;
    if (blank(sql)) return pb_cli_usage_error("the SQL is empty");
    json_t *answer = NULL, *columns = NULL, *rows = NULL, *notes = NULL, *shown = NULL;
    const char *cut_by_agent = NULL;
    if (ranks) {
        rc = pb_query_ranks(&t, sql, ranks, 0, &columns, &rows, &notes);
    } else if ((rc = pb_query_run(&t, sql, QUERY_MAX_BYTES, &answer)) == 0) {
        columns = json_incref(json_object_get(answer, "columns"));
        rows = json_incref(json_object_get(answer, "rows"));
        if (json_is_true(json_object_get(answer, "truncated"))) {
            cut_by_agent = json_string_value(json_object_get(answer, "message"));
            if (!cut_by_agent || !*cut_by_agent)
                cut_by_agent = "the result was truncated by the target; add a LIMIT or select "
                               "fewer columns";
        }
    }
    if (rc != PB_EXIT_OK && rc != PB_EXIT_PARTIAL) goto done;
    if (!columns) columns = json_array();
    if (!rows) rows = json_array();
    size_t total = json_array_size(rows);
    int cut = total > (size_t)max_rows;
    shown = cut ? json_array() : json_incref(rows);
    for (size_t i = 0; cut && shown && i < (size_t)max_rows; i++)
        json_array_append(shown, json_array_get(rows, i));
    char note[640] = "";
    if (cut)
        snprintf(note, sizeof note, "only the first %lld of the %zu rows are shown (max_rows %lld); "
                 "add a LIMIT, a WHERE clause or an aggregate, or raise max_rows (at most %d)",
                 max_rows, total, max_rows, QUERY_MAX_ROWS);
    else if (cut_by_agent)
        snprintf(note, sizeof note, "%s", cut_by_agent);
    if (json_array_size(columns)) pb_format_rows(text, PB_FORMAT_TABLE, PB_TABLE_GRID, columns, shown);
    if (note[0]) fprintf(text, "note: %s\n", note);
    *structured = json_pack("{s:O,s:O,s:I,s:b,s:s*,s:O*}", "columns", columns, "rows", shown,
                            "row_count", (json_int_t)json_array_size(shown), "truncated",
                            cut || cut_by_agent, "note", note[0] ? note : NULL, "missing", notes);
    if (!*structured) rc = pb_cli_error("out of memory");
done:
    pb_cli_print_notes(notes); /* the ranks that did not answer */
    json_decref(answer);
    json_decref(columns);
    json_decref(rows);
    json_decref(shown);
    json_decref(notes);
    return rc;
}

static int tool_report(json_t *args, FILE *text, json_t **structured)
{
    char spec[SPEC_MAX];
    pb_target t;
    long long last;
    int rc;
    if ((rc = arg_target(args, "target", spec, sizeof spec, &t)) ||
        (rc = arg_int(args, "last", 1, 100000000, 0, &last)))
        return rc;
    json_t *others = argument(args, "other_recordings");
    size_t n = json_array_size(others);
    if (others && !json_is_array(others)) return bad_argument("other_recordings", "an array of recording files", others);
    char **recordings = n ? calloc(n, sizeof *recordings) : NULL;
    if (n && !recordings) return pb_cli_error("out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(others, i);
        if (!json_is_string(v) || !*json_string_value(v)) {
            free(recordings);
            return bad_argument("other_recordings", "an array of recording files", others);
        }
        recordings[i] = (char *)json_string_value(v);
    }
    pb_report_ask ask = {&t, spec, (int)last, recordings, (int)n};
    json_t *doc = NULL;
    rc = pb_report_fetch(&ask, &doc);
    free(recordings);
    if (rc) return rc;
    pb_report_render(text, doc);
    *structured = doc;
    return PB_EXIT_OK;
}

static int tool_tables(json_t *args, FILE *text, json_t **structured)
{
    char spec[SPEC_MAX];
    pb_target t;
    int rc = arg_target(args, "target", spec, sizeof spec, &t);
    if (rc) return rc;
    json_t *root = pb_client_tables(&t);
    if (!root) return PB_EXIT_ERROR;
    pb_format_tables(text, json_object_get(root, "tables"));
    *structured = root;
    return PB_EXIT_OK;
}

static int tool_info(json_t *args, FILE *text, json_t **structured)
{
    char spec[SPEC_MAX];
    pb_target t;
    int rc = arg_target(args, "target", spec, sizeof spec, &t);
    if (rc) return rc;
    json_t *root = pb_client_call_ok(&t, "GET", "/api/info", NULL, PB_CLI_INFO_TIMEOUT_MS);
    if (!root) return PB_EXIT_ERROR;
    pb_format_json_pretty(text, root);
    *structured = root;
    return PB_EXIT_OK;
}

static int tool_backtrace(json_t *args, FILE *text, json_t **structured)
{
    char spec[SPEC_MAX];
    int native, rc;
    pb_stacks st;
    if ((rc = arg_spec(args, "target", spec, sizeof spec)) || (rc = arg_bool(args, "native", &native)))
        return rc;
    if ((rc = pb_stacks_read(spec, native, &st))) return rc;
    pb_stacks_text(text, &st);
    *structured = pb_stacks_json(&st);
    pb_stacks_free(&st);
    return *structured ? PB_EXIT_OK : pb_cli_error("out of memory");
}

static int tool_hang(json_t *args, FILE *text, json_t **structured)
{
    char spec[SPEC_MAX];
    pb_target t;
    double deadline;
    int rc = arg_job(args, spec, sizeof spec, &t, &deadline);
    if (rc) return rc;
    json_t *doc = NULL;
    rc = pb_hang_fetch_job(&t, spec, deadline, &doc);
    if (doc) pb_hang_render(text, doc);
    *structured = doc;
    return rc;
}

static int tool_stragglers(json_t *args, FILE *text, json_t **structured)
{
    char spec[SPEC_MAX];
    pb_target t;
    double deadline;
    int rc = arg_job(args, spec, sizeof spec, &t, &deadline);
    if (rc) return rc;
    long long last;
    if ((rc = arg_int(args, "last", 1, 512, 0, &last))) return rc;
    pb_job_arrivals job;
    pb_sg_result res;
    rc = pb_job_stragglers(&t, spec, deadline, (uint64_t)last, pb_cli_messages(), &job, &res);
    if (rc == PB_EXIT_OK || rc == PB_EXIT_PARTIAL) {
        *structured = pb_stragglers_json(&res, 0, job.group_names, job.n_groups);
        if (*structured) pb_stragglers_render(text, &res, job.group_names, job.n_groups);
        else rc = pb_cli_error("out of memory");
    }
    pb_stragglers_free(&res);
    pb_job_arrivals_free(&job);
    return rc;
}

static int tool_ranks(json_t *args, FILE *text, json_t **structured)
{
    char spec[SPEC_MAX];
    pb_target t;
    double deadline;
    int rc = arg_job(args, spec, sizeof spec, &t, &deadline);
    if (rc) return rc;
    json_t *columns = NULL, *rows = NULL, *notes = NULL;
    rc = pb_ranks_states(&t, spec, deadline, &columns, &rows, &notes);
    if (rc != PB_EXIT_OK && rc != PB_EXIT_PARTIAL) return rc;
    pb_format_rows(text, PB_FORMAT_TABLE, PB_TABLE_PLAIN, columns, rows);
    pb_cli_print_notes(notes);
    *structured = json_pack("{s:o,s:o,s:o}", "columns", columns, "rows", rows, "notes", notes);
    return *structured ? rc : pb_cli_error("out of memory");
}

static int tool_compare(json_t *args, FILE *text, json_t **structured)
{
    const char *before, *after;
    int rc;
    json_t *v = argument(args, "min_effect_pct");
    if ((rc = arg_string(args, "before", 1, "a recording or target, with an optional window of "
                         "steps: run.db:100-200, 12345:last200", &before)) ||
        (rc = arg_string(args, "after", 1, "a recording or target, with an optional window of "
                         "steps", &after)))
        return rc;
    if (v && (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > 1000))
        return bad_argument("min_effect_pct", "a percentage above 0 (up to 1000)", v);
    json_t *doc = NULL;
    if ((rc = pb_compare_fetch(before, after, v ? json_number_value(v) : 0, &doc))) return rc;
    pb_compare_render(text, doc);
    *structured = doc;
    return PB_EXIT_OK;
}

static int tool_eval(json_t *args, FILE *text, json_t **structured)
{
    char spec[SPEC_MAX];
    pb_target t;
    const char *code;
    double timeout;
    int rc;
    if ((rc = arg_target(args, "target", spec, sizeof spec, &t)) ||
        (rc = arg_string(args, "code", 1, "Python code to run in the target's __main__", &code)) ||
        (rc = arg_seconds(args, "timeout_s", 3600, PB_EVAL_DEFAULT_TIMEOUT_S, &timeout)))
        return rc;
    if (blank(code)) return pb_cli_usage_error("the code is empty");
    json_t *answer = NULL;
    rc = pb_eval_send(&t, code, timeout, text, &answer);
    *structured = answer;
    return rc;
}

#define TARGET_PROPERTY                                                                       \
    "\"target\": {\"type\": \"string\", \"description\": \"the traced process: its pid (see "   \
    "list_targets), or host:port, an agent socket path, or a recording file (run.db)\"}"
#define LIVE_TARGET_PROPERTY                                                                  \
    "\"target\": {\"type\": \"string\", \"description\": \"one rank of the running "            \
    "torch.distributed job: its pid (see list_targets) or host:port\"}"
#define DEADLINE_PROPERTY                                                                     \
    "\"deadline_s\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"maximum\": 3600, "      \
    "\"description\": \"how long to wait for the ranks (default 5 s)\"}"

static const tool tools[] = {
    {"list_targets", "Traced processes",
     "The processes traced by probing on this machine (as `probing list`): pid, command, rank "
     "and world size, Python and torch versions, uptime, current step, endpoint. Start here: "
     "the pid is the target of the other tools.",
     "{\"type\": \"object\", \"properties\": {}, \"additionalProperties\": false}",
     tool_list_targets, TOOL_READ_ONLY},
    {"query", "SQL query",
     "Runs one read-only SQL statement (SQLite) on the target's tables (see the tables tool or "
     "the probing://tables resource): python.steps, python.torch_trace, python.memory, ... "
     "Returns the columns and rows, at most max_rows (default 200) and about 2 MB, and says when "
     "it cut them. With ranks, on those ranks of its torch.distributed job, with rank and host "
     "columns first.",
     "{\"type\": \"object\", \"properties\": {" TARGET_PROPERTY ", "
     "\"sql\": {\"type\": \"string\", \"description\": \"a read-only SELECT statement, e.g. "
     "SELECT step, wall FROM python.steps ORDER BY step DESC LIMIT 10\"}, "
     "\"ranks\": {\"type\": \"string\", \"description\": \"run it on these ranks of the job: "
     "'all' or a list such as 0,2-5\"}, "
     "\"max_rows\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 10000, \"default\": 200, "
     "\"description\": \"the most rows returned\"}}, "
     "\"required\": [\"target\", \"sql\"], \"additionalProperties\": false}",
     tool_query, TOOL_READ_ONLY},
    {"report", "Diagnosis (the four-phase method)",
     "`probing <target> report`: the diagnosis over the recorded steps, in the method's order "
     "(baseline, bottleneck type, component, operation) with the memory breakdown and the "
     "checks; its second line is the primary finding. Every finding has its numbers, the SQL "
     "behind them and what to do next; what the data cannot support is listed as missing. "
     "Profile before you optimise: run this before proposing any change.",
     "{\"type\": \"object\", \"properties\": {" TARGET_PROPERTY ", "
     "\"last\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"only the last N "
     "complete steps (default: every step recorded)\"}, "
     "\"other_recordings\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, "
     "\"description\": \"when the target is a recording: the recordings of the job's other "
     "ranks, for the load-imbalance check\"}}, "
     "\"required\": [\"target\"], \"additionalProperties\": false}",
     tool_report, TOOL_READ_ONLY},
    {"tables", "Tables and columns",
     "Every table the target can query, with its columns, types and meanings, its row count, "
     "capacity and rows dropped, and why an empty one is empty.",
     "{\"type\": \"object\", \"properties\": {" TARGET_PROPERTY "}, "
     "\"required\": [\"target\"], \"additionalProperties\": false}",
     tool_tables, TOOL_READ_ONLY},
    {"info", "Target info",
     "Who the target is: pid, command line, Python and torch versions, start time and uptime, "
     "rank and world size, current step, which steps are detail steps and why, the measurement "
     "paths (backward timing, GIL sampler, NVML); for a recording, how the job ended.",
     "{\"type\": \"object\", \"properties\": {" TARGET_PROPERTY "}, "
     "\"required\": [\"target\"], \"additionalProperties\": false}",
     tool_info, TOOL_READ_ONLY},
    {"backtrace", "Thread stacks",
     "The Python stack of every thread of a process, read from outside it (no agent needed: "
     "works on a deadlocked or stuck process), innermost frame first, with which thread holds "
     "the GIL; native (C) stacks too with native.",
     "{\"type\": \"object\", \"properties\": {"
     "\"target\": {\"type\": \"string\", \"description\": \"the process's pid\"}, "
     "\"native\": {\"type\": \"boolean\", \"default\": false, \"description\": \"also the "
     "native stack of each thread (each thread is stopped for a moment)\"}}, "
     "\"required\": [\"target\"], \"additionalProperties\": false}",
     tool_backtrace, TOOL_READ_ONLY},
    {"hang", "Is the job stuck in a collective",
     "For a torch.distributed job: which rank the others wait for, in which collective, and "
     "that rank's stack; or a stall outside collectives with the ranks' stacks grouped; or that "
     "the job is running.",
     "{\"type\": \"object\", \"properties\": {" LIVE_TARGET_PROPERTY ", " DEADLINE_PROPERTY "}, "
     "\"required\": [\"target\"], \"additionalProperties\": false}",
     tool_hang, TOOL_READ_ONLY},
    {"stragglers", "Which rank makes the others wait",
     "For a torch.distributed job: which rank enters the collectives last, how often and by how "
     "much (median lag), in which phase of its step the time goes, or a late node; with last, "
     "over the newest collectives only (the job as it is now, after a change).",
     "{\"type\": \"object\", \"properties\": {" LIVE_TARGET_PROPERTY ", " DEADLINE_PROPERTY
     ", \"last\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 512, \"description\": "
     "\"only the N newest collectives of each process group (an agent keeps 512)\"}}, "
     "\"required\": [\"target\"], \"additionalProperties\": false}",
     tool_stragglers, TOOL_READ_ONLY},
    {"ranks", "Ranks of the job",
     "Every rank of the target's torch.distributed job on every node: host, pid, step, how long "
     "ago that step started, and its state (training, in a collective, not answering, gone).",
     "{\"type\": \"object\", \"properties\": {" LIVE_TARGET_PROPERTY ", " DEADLINE_PROPERTY "}, "
     "\"required\": [\"target\"], \"additionalProperties\": false}",
     tool_ranks, TOOL_READ_ONLY},
    {"compare", "Did the change help",
     "Compares AFTER with BEFORE (recordings, live targets, or windows of their steps: "
     "run.db:100-200, run.db:500-, 12345:last200): slower, faster or no significant change, "
     "with the 95 % interval of the shift of the median step, then the conditions that differ, "
     "phases, modules, memory and the findings that changed.",
     "{\"type\": \"object\", \"properties\": {"
     "\"before\": {\"type\": \"string\", \"description\": \"the run before the change: a "
     "recording or target, with an optional window (run.db:-500)\"}, "
     "\"after\": {\"type\": \"string\", \"description\": \"the run after it (run.db:501-)\"}, "
     "\"min_effect_pct\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"description\": "
     "\"the smallest change of the step time called a change (default 2)\"}}, "
     "\"required\": [\"before\", \"after\"], \"additionalProperties\": false}",
     tool_compare, TOOL_READ_ONLY},
    {"eval", "Run Python in the job",
     "Runs Python code in the target's __main__ (the training process itself, while it trains) "
     "and returns what it printed; an exception is an error with its traceback. Globals of the "
     "training script (model, optimizer, train_loader, ...) are there. Only when the server was "
     "started with --allow-eval.",
     "{\"type\": \"object\", \"properties\": {" TARGET_PROPERTY ", "
     "\"code\": {\"type\": \"string\", \"description\": \"Python code; print() what you want "
     "back\"}, "
     "\"timeout_s\": {\"type\": \"number\", \"exclusiveMinimum\": 0, \"maximum\": 3600, "
     "\"default\": 30, \"description\": \"give up after this long\"}}, "
     "\"required\": [\"target\", \"code\"], \"additionalProperties\": false}",
     tool_eval, TOOL_EVAL},
};

#define TOOL_COUNT (sizeof tools / sizeof tools[0])

/* ---- results */

/* The length of the valid UTF-8 sequence at s[0..len), or 0 when it is not one (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_sequence(const unsigned char *s, size_t len)
{
    unsigned c = s[0];
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || n > len || (n == 2 && c < 0xC2) || c > 0xF4) return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (n == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0))) return 0;
    if (n == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))) return 0;
    return n;
}

/* A JSON string of s[0..len), each byte that is not part of valid UTF-8 replaced by U+FFFD
 * (text made for terminals may hold any byte; JSON strings may not). */
static json_t *text_value(const char *s, size_t len)
{
    pb_buf b = PB_BUF_INIT;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_sequence((const unsigned char *)s + i, len - i);
        if (n) pb_buf_append(&b, s + i, n);
        else pb_buf_append(&b, "\xEF\xBF\xBD", 3);
        i += n ? n : 1;
    }
    json_t *v = json_stringn(b.data ? b.data : "", b.len);
    pb_buf_free(&b);
    return v;
}

/* Cuts b to MAX_TEXT_BYTES at a line (or a character) and says so. */
static void bound_text(pb_buf *b)
{
    if (b->len <= MAX_TEXT_BYTES) return;
    size_t total = b->len, cut = MAX_TEXT_BYTES;
    while (cut > MAX_TEXT_BYTES / 2 && b->data[cut - 1] != '\n') cut--;
    if (b->data[cut - 1] != '\n') {
        cut = MAX_TEXT_BYTES;
        while (cut && ((unsigned char)b->data[cut] & 0xC0) == 0x80) cut--;
    }
    b->len = cut;
    b->data[cut] = '\0';
    pb_buf_printf(b, "%s[cut: the first %zu of %zu bytes; structuredContent holds the whole "
                  "result where it fits, else ask for less]\n", cut && b->data[cut - 1] == '\n' ? "" : "\n",
                  cut, total);
}

/* {content: [{type: text, text}], structuredContent?, isError}. Takes structured. */
static json_t *result_of(const char *text, size_t len, json_t *structured, int is_error)
{
    pb_buf b = PB_BUF_INIT;
    pb_buf_append(&b, text, len);
    if (structured && !json_is_object(structured)) {
        json_decref(structured);
        structured = NULL;
    }
    if (structured && json_dumpb(structured, NULL, 0, JSON_COMPACT) > MAX_STRUCTURED_BYTES) {
        json_decref(structured);
        structured = NULL;
        pb_buf_printf(&b, "%s[the structured result is over %zu MB and was left out; ask for "
                      "less]\n", b.len && b.data[b.len - 1] != '\n' ? "\n" : "",
                      MAX_STRUCTURED_BYTES >> 20);
    }
    bound_text(&b);
    json_t *item = json_pack("{s:s,s:o}", "type", "text", "text",
                             text_value(b.data ? b.data : "", b.len));
    pb_buf_free(&b);
    json_t *result = json_pack("{s:[o],s:b}", "content", item, "isError", is_error);
    if (result && structured) json_object_set_new(result, "structuredContent", structured);
    else json_decref(structured);
    return result;
}

/* Refuses an argument the tool's schema does not name. Returns 0 or PB_EXIT_USAGE. */
static int check_names(const tool *t, json_t *schema, json_t *args)
{
    json_t *properties = json_object_get(schema, "properties");
    const char *key;
    json_t *v;
    json_object_foreach(args, key, v) {
        if (json_object_get(properties, key)) continue;
        pb_buf names = PB_BUF_INIT;
        const char *name;
        json_t *p;
        json_object_foreach(properties, name, p) pb_buf_printf(&names, "%s%s", names.len ? ", " : "", name);
        int rc = pb_cli_usage_error("%s takes no argument '%s' (%s)", t->name, key,
                                    names.len ? names.data : "it takes none");
        pb_buf_free(&names);
        return rc;
    }
    return 0;
}

json_t *pb_mcp_tools_list(int allow_eval)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < TOOL_COUNT; i++) {
        const tool *t = &tools[i];
        if ((t->flags & TOOL_EVAL) && !allow_eval) continue;
        json_t *schema = json_loads(t->input_schema, 0, NULL);
        json_t *entry = json_pack("{s:s,s:s,s:s,s:o,s:{s:s,s:b,s:b,s:b,s:b}}", "name", t->name,
                                  "title", t->title, "description", t->description,
                                  "inputSchema", schema, "annotations", "title", t->title,
                                  "readOnlyHint", (t->flags & TOOL_READ_ONLY) != 0,
                                  "destructiveHint", (t->flags & TOOL_EVAL) != 0,
                                  "idempotentHint", (t->flags & TOOL_READ_ONLY) != 0,
                                  "openWorldHint", 0);
        if (!schema || !entry || json_array_append_new(list, entry)) {
            json_decref(list);
            return NULL;
        }
    }
    return list;
}

int pb_mcp_tools_call(const char *name, json_t *args, int allow_eval, json_t **result)
{
    const tool *t = NULL;
    *result = NULL;
    for (size_t i = 0; i < TOOL_COUNT && !t; i++)
        if (strcmp(tools[i].name, name) == 0) t = &tools[i];
    if (!t) return -ENOENT;
    if ((t->flags & TOOL_EVAL) && !allow_eval) {
        static const char off[] =
            "probing: eval is off: this MCP server was started without --allow-eval, and eval "
            "runs code inside the training process; to allow it, start the server as 'probing "
            "mcp --allow-eval' (the other tools only read)\n";
        *result = result_of(off, sizeof off - 1, NULL, 1);
        return *result ? 0 : -ENOMEM;
    }
    char *text = NULL;
    size_t len = 0;
    json_t *structured = NULL, *schema = json_loads(t->input_schema, 0, NULL);
    FILE *out = open_memstream(&text, &len);
    if (!schema || !out || pb_cli_capture_begin()) {
        if (out) fclose(out);
        free(text);
        json_decref(schema);
        return -ENOMEM;
    }
    calling = t;
    int rc = check_names(t, schema, args);
    if (!rc) rc = t->run(args, out, &structured);
    calling = NULL;
    json_decref(schema);
    int failed = fclose(out) != 0;
    char *messages = pb_cli_capture_end();
    if (failed || !messages) {
        free(text);
        free(messages);
        json_decref(structured);
        return -ENOMEM;
    }
    int is_error = rc != PB_EXIT_OK && rc != PB_EXIT_PARTIAL;
    pb_buf all = PB_BUF_INIT;
    pb_buf_append(&all, text, len);
    if (*messages && all.len && all.data[all.len - 1] != '\n') pb_buf_putc(&all, '\n');
    pb_buf_puts(&all, messages);
    if (is_error && !all.len) pb_buf_printf(&all, "probing: %s failed (exit status %d)\n", t->name, rc);
    free(text);
    free(messages);
    *result = result_of(all.data ? all.data : "", all.len, structured, is_error);
    pb_buf_free(&all);
    return *result ? 0 : -ENOMEM;
}
