/*
 * cmd_info.c - `probing <target> info [-f table|json]`: who the target is.
 *
 * GET /api/info, printed as aligned "key: value" lines; fields this version does not know are
 * printed after the known ones so a newer agent's additions still show.
 */
#include "client/client.h"
#include "cmd/command.h"
#include "out/format.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static const struct {
    const char *key;
    const char *label;
} known_fields[] = {
    {"pid", "pid"},         {"cmdline", "command"}, {"python", "python"},
    {"torch", "torch"},     {"started_unix", "started"}, {"uptime_s", "uptime"},
    {"endpoint", "endpoint"}, {"tcp", "tcp"},       {"rank", "rank"},
    {"detail", "detail"},   {"paths", "paths"},     {"version", "probing"},
    {"ended", "ended"},
};

static int is_known(const char *key)
{
    for (size_t i = 0; i < sizeof known_fields / sizeof known_fields[0]; i++)
        if (strcmp(known_fields[i].key, key) == 0) return 1;
    return 0;
}

/* A recording's "ended" object (probe.run) in words: "exception ValueError: bad input (exit
 * status 1) after step 149". */
static void put_ended(pb_buf *b, json_t *v)
{
    const char *state = json_string_value(json_object_get(v, "state"));
    const char *type = json_string_value(json_object_get(v, "exception_type"));
    const char *message = json_string_value(json_object_get(v, "message"));
    const char *note = json_string_value(json_object_get(v, "note"));
    json_t *status = json_object_get(v, "status"), *step = json_object_get(v, "last_step");
    char text[96];
    if (!state) state = "?";
    if (strcmp(state, "running") == 0) {
        pb_buf_puts(b, "no end recorded: the process was killed (SIGKILL, crash) or still runs");
    } else if (strcmp(state, "exception") == 0 && type) {
        pb_buf_puts(b, "exception ");
        pb_format_sanitize(b, type, strlen(type));
        if (message && *message) {
            pb_buf_puts(b, ": ");
            pb_format_sanitize(b, message, strlen(message) > 200 ? 200 : strlen(message));
        }
    } else if (strcmp(state, "exited") == 0) {
        pb_buf_puts(b, "exited");
    } else if (strcmp(state, "terminated") == 0) {
        pb_buf_puts(b, "terminated by SIGTERM");
    } else {
        pb_format_sanitize(b, state, strlen(state));
        if (note) {
            pb_buf_puts(b, ": ");
            pb_format_sanitize(b, note, strlen(note));
        }
    }
    if (json_is_integer(status)) {
        snprintf(text, sizeof text, " (exit status %lld)", (long long)json_integer_value(status));
        pb_buf_puts(b, text);
    }
    if (json_is_integer(step)) {
        snprintf(text, sizeof text, " after step %lld", (long long)json_integer_value(step));
        pb_buf_puts(b, text);
    }
    if (type && json_is_string(json_object_get(v, "stack")))
        pb_buf_puts(b, "; stack: probing FILE.db query \"SELECT stack FROM probe.run\"");
}

/* Appends the value of key for humans. */
static void put_value(pb_buf *b, const char *key, json_t *v)
{
    char text[96];
    if (!v || json_is_null(v)) {
        pb_buf_puts(b, strcmp(key, "torch") == 0 ? "not imported" : "-");
    } else if (strcmp(key, "cmdline") == 0 && json_is_array(v)) {
        size_t i;
        json_t *arg;
        json_array_foreach(v, i, arg) {
            if (i) pb_buf_putc(b, ' ');
            if (json_is_string(arg))
                pb_format_sanitize(b, json_string_value(arg), json_string_length(arg));
        }
    } else if (strcmp(key, "started_unix") == 0 && json_is_number(v)) {
        time_t t = (time_t)json_number_value(v);
        struct tm tm;
        if (localtime_r(&t, &tm) && strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S %Z", &tm))
            pb_buf_puts(b, text);
    } else if (strcmp(key, "uptime_s") == 0 && json_is_number(v)) {
        pb_format_duration(json_number_value(v), text, sizeof text);
        pb_buf_puts(b, text);
    } else if (strcmp(key, "detail") == 0 && json_is_object(v)) {
        /* which steps are detail steps (docs/tables.md, "Detail steps") */
        json_t *every = json_object_get(v, "every"), *cost = json_object_get(v, "cost");
        const char *mode = json_string_value(json_object_get(v, "mode"));
        long long window = (long long)json_integer_value(json_object_get(v, "window")),
                  period = (long long)json_integer_value(json_object_get(v, "period"));
        if (mode && strcmp(mode, "every step") == 0)
            snprintf(text, sizeof text, "every step but %lld of every %lld (auto", period - window, period);
        else
            snprintf(text, sizeof text, "%lld step%s every %lld (%s", window, window == 1 ? "" : "s", period,
                     json_is_string(every) ? json_string_value(every) : "fixed");
        pb_buf_puts(b, text);
        if (json_is_string(every)) {
            double budget = json_number_value(json_object_get(v, "budget_pct"));
            if (json_is_number(cost))
                snprintf(text, sizeof text, ": a detail step costs %+.1f%%, %s the %.2g%% budget",
                         json_number_value(cost) * 100, json_number_value(cost) * 100 <= budget ? "within" : "over",
                         budget);
            else
                snprintf(text, sizeof text, ": cost not measured yet, budget %.2g%%", budget);
            pb_buf_puts(b, text);
            json_t *spread = json_object_get(v, "spread"), *desch = json_object_get(v, "descheduled");
            if (json_is_array(spread) && json_array_size(spread) == 2) {
                snprintf(text, sizeof text, "; samples %+.1f..%+.1f%%",
                         json_number_value(json_array_get(spread, 0)) * 100,
                         json_number_value(json_array_get(spread, 1)) * 100);
                pb_buf_puts(b, text);
            }
            if (json_integer_value(desch) > 0) {
                snprintf(text, sizeof text, ", %lld descheduled step%s left out", (long long)json_integer_value(desch),
                         json_integer_value(desch) == 1 ? "" : "s");
                pb_buf_puts(b, text);
            }
        }
        pb_buf_puts(b, json_is_true(json_object_get(v, "now")) ? "); this step: detail" : "); this step: summary");
    } else if (strcmp(key, "paths") == 0 && json_is_object(v)) {
        /* one line per path, under the label (lifecycle.c's "paths") */
        static const struct { const char *key, *label; } paths[] = {
            {"backward", "backward timing"}, {"gil", "GIL sampler"}, {"nvml", "NVML"}};
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
            const char *s = json_string_value(json_object_get(v, paths[i].key));
            if (!s) continue;
            pb_buf_puts(b, i ? "\n           " : "");
            pb_buf_puts(b, paths[i].label);
            pb_buf_puts(b, ": ");
            pb_format_sanitize(b, s, strlen(s));
        }
    } else if (strcmp(key, "ended") == 0 && json_is_object(v)) {
        put_ended(b, v);
    } else if (json_is_string(v)) {
        pb_format_sanitize(b, json_string_value(v), json_string_length(v));
    } else {
        pb_buf scratch = PB_BUF_INIT;
        if (!pb_format_json_value(&scratch, v)) pb_format_sanitize(b, scratch.data, scratch.len);
        pb_buf_free(&scratch);
    }
}

static void print_line(const char *label, const char *key, json_t *v)
{
    pb_buf b = PB_BUF_INIT;
    put_value(&b, key, v);
    printf("%-10s %s\n", label, b.data ? b.data : "");
    pb_buf_free(&b);
}

/* A live agent's recording (GET /api/record) as one line: where to, and whether it still
 * writes or why it stopped (a full disk: "stopped: disk full at step N"). Nothing when the
 * agent never recorded or does not answer this route (TCP). */
static void print_recording(const pb_target *t)
{
    pb_response resp;
    char err[256];
    if (t->kind == PB_TARGET_FILE ||
        pb_client_request(t, "GET", "/api/record", NULL, PB_CLI_INFO_TIMEOUT_MS, &resp, err,
                          sizeof err) != 0)
        return;
    json_t *st = resp.status == 200 ? json_loadb(resp.body.data, resp.body.len, 0, NULL) : NULL;
    pb_buf_free(&resp.body);
    const char *path = json_string_value(json_object_get(st, "path"));
    const char *error = json_string_value(json_object_get(st, "error"));
    if (path) {
        pb_buf b = PB_BUF_INIT;
        pb_format_sanitize(&b, path, strlen(path));
        if (error) {
            pb_buf_puts(&b, " (stopped: ");
            pb_format_sanitize(&b, error, strlen(error));
            pb_buf_puts(&b, ")");
        } else {
            pb_buf_puts(&b, json_is_true(json_object_get(st, "recording")) ? " (recording)"
                                                                            : " (stopped)");
        }
        printf("%-10s %s\n", "recording:", b.data ? b.data : "");
        pb_buf_free(&b);
    }
    json_decref(st);
}

/* The options of info (option.h): the parser and 'info --help' read them. */
const pb_option pb_options_info[] = {
    PB_OPTION_FORMAT("table|json", NULL),
    PB_OPTION_TABLE_END,
};

int cmd_info(const pb_cli_args *a)
{
    pb_format fmt;
    int rc = pb_format_parse(a->format, PB_FORMAT_TABLE | PB_FORMAT_JSON, "info", &fmt);
    if (rc) return rc;
    json_t *root =
        pb_client_call_ok(&a->resolved, "GET", "/api/info", NULL, PB_CLI_INFO_TIMEOUT_MS);
    if (!root) return PB_EXIT_ERROR;
    if (fmt == PB_FORMAT_JSON) {
        pb_format_json_pretty(stdout, root);
    } else {
        char label[64];
        for (size_t i = 0; i < sizeof known_fields / sizeof known_fields[0]; i++) {
            json_t *v = json_object_get(root, known_fields[i].key);
            if (!v && strcmp(known_fields[i].key, "torch") != 0) continue;
            snprintf(label, sizeof label, "%s:", known_fields[i].label);
            print_line(label, known_fields[i].key, v);
        }
        const char *key;
        json_t *v;
        json_object_foreach(root, key, v) {
            if (is_known(key)) continue;
            pb_buf b = PB_BUF_INIT;
            pb_format_sanitize(&b, key, strlen(key));
            pb_buf_putc(&b, ':');
            print_line(b.data, key, v);
            pb_buf_free(&b);
        }
        print_recording(&a->resolved);
    }
    json_decref(root);
    return PB_EXIT_OK;
}
