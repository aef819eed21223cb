/*
 * compare_fetch.c - the two sides of `probing compare` reached and compared (compare_fetch.h).
 *
 * A side is a target (a recording, a pid, a socket, host:port) with an optional window of its
 * steps after a colon: `run.db:100-200`, `run.db:500-` (from step 500 on), `run.db:-500` (up to
 * step 500), `12345:last200` (its last 200 complete steps). A live side is read once, from what
 * its rings hold; a recording still being written is read as flushed so far, and the verdict
 * says so. The analysis is src/report/compare.c.
 */
#include "client/compare_fetch.h"

#include "client/client.h"
#include "client/conditions.h"
#include "compare.h"
#include "out/cli.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CONFIDENCE 0.95

typedef struct side_input {
    const char *spec;       /* as typed */
    char target[4200];      /* the target part */
    pb_target resolved;
    pb_report_window window;
    json_t *info, *conditions;
    char why[1200];
    char note[600];
    pb_report_source src;
} side_input;

static int query_target(void *ctx, const char *sql, json_t **rows, char **error)
{
    return pb_client_query_objects(ctx, sql, PB_CLI_QUERY_TIMEOUT_MS, rows, error);
}

/* Parses a window ("100-200", "100-", "-200", "last200") into w. Returns 1 when text is one. */
static int parse_window(const char *text, pb_report_window *w)
{
    char *end;
    w->first = w->last = -1;
    w->last_n = 0;
    if (!strncmp(text, "last", 4)) {
        if (!isdigit((unsigned char)text[4])) return 0;
        long n = strtol(text + 4, &end, 10);
        if (*end || n < 1 || n > 100000000) return 0;
        w->last_n = (int)n;
        return 1;
    }
    const char *dash = strchr(text, '-');
    if (!dash || strchr(dash + 1, '-') || (dash == text && !dash[1])) return 0;
    for (const char *p = text; *p; p++)
        if (p != dash && !isdigit((unsigned char)*p)) return 0;
    if (dash != text) w->first = strtoll(text, NULL, 10);
    if (dash[1]) w->last = strtoll(dash + 1, NULL, 10);
    return !(w->first >= 0 && w->last >= 0 && w->last < w->first);
}

/* Splits spec into its target and window. A colon followed by something that is not a window
 * belongs to the target (host:port). */
static int split_side(side_input *s)
{
    const char *colon = strrchr(s->spec, ':');
    s->window.first = s->window.last = -1;
    s->window.last_n = 0;
    if (colon && colon[1] && (colon[1] == '-' || isdigit((unsigned char)colon[1]) ||
                              !strncmp(colon + 1, "last", 4)) && strpbrk(colon + 1, "-t")) {
        if (!parse_window(colon + 1, &s->window))
            return pb_cli_usage_error("'%s' is not a window of steps: FIRST-LAST, FIRST-, -LAST or "
                                      "lastN (e.g. run.db:100-200, 12345:last200)", colon + 1);
        snprintf(s->target, sizeof s->target, "%.*s", (int)(colon - s->spec), s->spec);
    } else {
        snprintf(s->target, sizeof s->target, "%s", s->spec);
    }
    return 0;
}

/* A recording still being written by a live process (probe.run says running): its note. */
static void recording_state(side_input *s)
{
    json_t *rows = NULL;
    char *err = NULL;
    if (s->resolved.kind != PB_TARGET_FILE) return;
    if (query_target(&s->resolved, "SELECT state, pid, last_step FROM probe.run LIMIT 1", &rows,
                     &err) == 0) {
        json_t *r = json_array_get(rows, 0);
        const char *state = json_string_value(json_object_get(r, "state"));
        json_t *pid = json_object_get(r, "pid");
        if (state && !strcmp(state, "running") && json_is_integer(pid)) {
            if (pb_target_pid_alive((pid_t)json_integer_value(pid)))
                snprintf(s->note, sizeof s->note,
                         "%s is still being written by process %lld: compared as flushed so far "
                         "(the steps of the last second may be missing)",
                         s->target, (long long)json_integer_value(pid));
            else
                snprintf(s->note, sizeof s->note,
                         "%s ended without its last flush (process %lld was killed or the "
                         "machine went down): compared as far as it was written",
                         s->target, (long long)json_integer_value(pid));
        }
    }
    json_decref(rows);
    free(err);
}

static int open_side(side_input *s)
{
    long status = 0;
    int rc = split_side(s);
    if (rc) return rc;
    if ((rc = pb_target_resolve(s->target, &s->resolved))) return rc;
    if ((rc = pb_client_call(&s->resolved, "GET", "/api/info", NULL, PB_CLI_INFO_TIMEOUT_MS,
                             &s->info, &status)))
        return rc;
    if (status != 200) {
        pb_client_print_error(status, s->info);
        return PB_EXIT_ERROR;
    }
    const char *why = NULL;
    if (s->resolved.kind != PB_TARGET_FILE)
        s->conditions = pb_conditions_fetch(&s->resolved, s->why, sizeof s->why, &why);
    else
        why = "a recording (no process to ask)";
    recording_state(s);
    memset(&s->src, 0, sizeof s->src);
    s->src.query = query_target;
    s->src.ctx = &s->resolved;
    s->src.target = s->target;
    s->src.info = s->info;
    s->src.conditions = s->conditions;
    s->src.conditions_error = why;
    return 0;
}

/* 1 when both sides are one target (one recording file, however named; one socket, pid or
 * host:port) with the same window: nothing to compare. */
static int same_side(const side_input *a, const side_input *b)
{
    const pb_target *x = &a->resolved, *y = &b->resolved;
    if (x->kind != y->kind || a->window.first != b->window.first ||
        a->window.last != b->window.last || a->window.last_n != b->window.last_n)
        return 0;
    switch (x->kind) {
    case PB_TARGET_FILE: {
        struct stat sx, sy;
        if (stat(x->file_path, &sx) || stat(y->file_path, &sy)) return !strcmp(x->file_path, y->file_path);
        return sx.st_dev == sy.st_dev && sx.st_ino == sy.st_ino;
    }
    case PB_TARGET_UNIX:
        return (x->pid > 0 && x->pid == y->pid) || !strcmp(x->socket_path, y->socket_path);
    case PB_TARGET_TCP:
        return !strcmp(x->host_port, y->host_port) && x->rank_known == y->rank_known &&
               (!x->rank_known || x->rank == y->rank);
    default:
        return 0;
    }
}

/* After a failure: a live side whose process is gone gets that said. */
static void explain_exit(const side_input *s, const char *label)
{
    if (s->resolved.kind == PB_TARGET_UNIX && s->resolved.pid > 0 &&
        !pb_target_pid_alive(s->resolved.pid))
        pb_cli_error("%s (%s): process %d exited while compare read it; record it with "
                     "'probing run -o FILE.db' and compare the recording", label, s->spec,
                     (int)s->resolved.pid);
}

int pb_compare_fetch(const char *before, const char *after, double min_effect_pct,
                     json_t **doc)
{
    side_input *s = NULL;
    char *error = NULL;
    int rc = PB_EXIT_ERROR;
    *doc = NULL;
    if (!(s = calloc(2, sizeof *s))) return pb_cli_error("out of memory");
    s[0].spec = before;
    s[1].spec = after;
    for (int i = 0; i < 2; i++)
        if ((rc = open_side(&s[i]))) goto done;
    if (same_side(&s[0], &s[1])) {
        rc = pb_cli_usage_error("BEFORE and AFTER are the same: %s and %s are one target with the "
                                "same steps; compare two recordings or targets, or two windows "
                                "of one (%s:-500 %s:501-)",
                                before, after, s[0].target, s[0].target);
        goto done;
    }
    rc = PB_EXIT_ERROR;
    pb_compare_side sides[2];
    for (int i = 0; i < 2; i++) {
        sides[i].src = &s[i].src;
        sides[i].window = s[i].window;
        sides[i].name = s[i].spec;
        sides[i].note = s[i].note[0] ? s[i].note : NULL;
    }
    pb_compare_options options = {min_effect_pct > 0 ? min_effect_pct : PB_COMPARE_MIN_EFFECT_PCT,
                                  CONFIDENCE};
    if (pb_compare_build(&sides[0], &sides[1], &options, doc, &error)) {
        pb_cli_error("%s", error ? error : "cannot compare");
        explain_exit(&s[0], "BEFORE");
        explain_exit(&s[1], "AFTER");
        goto done;
    }
    rc = PB_EXIT_OK;
done:
    for (int i = 0; s && i < 2; i++) {
        json_decref(s[i].info);
        json_decref(s[i].conditions);
    }
    free(s);
    free(error);
    return rc;
}
