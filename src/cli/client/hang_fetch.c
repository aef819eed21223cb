/*
 * hang_fetch.c - the network rounds and the stack reads of the hang analysis (hang_fetch.h);
 * the analysis itself is src/report/hang.c, its text src/report/hang_render.c.
 *
 * Stacks are read from outside the interpreter (pystack.h), so a rank holding the GIL in a C
 * call still shows where it is: here for ranks on this host (through their pid), by the rank's
 * own agent (GET /api/stack, the same reader on its own pid) for ranks on other hosts, or for a
 * rank on this host that cannot be read from here. A stack read here is handed to the analysis
 * in /api/stack's shape, so the analysis reads one kind of stack.
 */
#include "client/hang_fetch.h"

#include "client/target.h"
#include "hang.h"
#include "out/cli.h"
#include "out/format.h"
#include "pystack.h"

#include <stdlib.h>
#include <string.h>

pb_fanout_req *pb_hang_fetch_ask(const pb_rank_ep *eps, int n, long deadline_ms)
{
    pb_fanout_req *reqs = calloc((size_t)(n > 0 ? n : 1), sizeof *reqs);
    if (!reqs) {
        pb_cli_error("out of memory");
        return NULL;
    }
    for (int r = 0; r < n; r++) pb_fanout_prepare(&reqs[r], &eps[r]);
    pb_fanout_run(reqs, n, "GET", "/api/rank", NULL, deadline_ms);
    /* group names, op names, errors: what the job wrote, printed as text by the analysis */
    for (int r = 0; r < n; r++) pb_format_sanitize_json(reqs[r].root);
    return reqs;
}

int pb_hang_fetch_answered(const pb_fanout_req *asked, int r)
{
    return asked[r].root && asked[r].status == 200;
}

/* The main thread of pid (the thread whose native id is pid, else the first), read from outside,
 * as GET /api/stack's answer: {"threads": [{"main": true, "frames": [{"file", "line",
 * "function"}]}]}, names as read (the analysis makes them fit for a terminal). Returns it (caller
 * owns), or NULL with why in err. */
static json_t *stack_from_local(int pid, char *err, size_t errlen)
{
    pb_pystack *s = NULL;
    char why[512] = "";
    if (pb_pystack_read(pid, &s, why, sizeof why)) {
        snprintf(err, errlen, "%s", why[0] ? why : "cannot read its Python stack");
        return NULL;
    }
    pb_pythread *main_thread = NULL;
    for (int t = 0; t < s->thread_count; t++)
        if ((int)s->threads[t].native_id == pid) main_thread = &s->threads[t];
    if (!main_thread && s->thread_count) main_thread = &s->threads[0];
    json_t *frames = json_array();
    json_t *root = json_pack("{s:[{s:b,s:o}]}", "threads", "main", 1, "frames", frames);
    for (int f = 0; root && main_thread && f < main_thread->frame_count; f++) {
        const pb_pyframe *fr = &main_thread->frames[f];
        /* bytes read from another process: not checked as UTF-8, only ever printed escaped */
        json_t *o = json_object();
        /* each call takes its value, on failure too: none is skipped, nothing leaks */
        int bad = json_object_set_new(o, "file", fr->file ? json_string_nocheck(fr->file) : json_null());
        bad |= json_object_set_new(o, "line", json_integer(fr->line));
        bad |= json_object_set_new(o, "function",
                                   fr->function ? json_string_nocheck(fr->function) : json_null());
        if (bad) json_decref(o);
        if (bad || json_array_append_new(frames, o)) {
            json_decref(root);
            root = NULL;
        }
    }
    pb_pystack_free(s);
    if (!root) snprintf(err, errlen, "out of memory");
    return root;
}

int pb_hang_fetch_analyse(const pb_rank_ep *eps, int n, pb_fanout_req *asked, long deadline,
                          json_t **doc)
{
    int rc = PB_EXIT_OK;
    *doc = NULL;
    pb_fanout_req *reqs = asked ? asked : pb_hang_fetch_ask(eps, n, deadline);
    pb_fanout_req *sreqs = calloc((size_t)(n > 0 ? n : 1), sizeof *sreqs);
    pb_hang_rank *ranks = calloc((size_t)(n > 0 ? n : 1), sizeof *ranks);
    json_t **local = calloc((size_t)(n > 0 ? n : 1), sizeof *local);
    char (*err)[512] = calloc((size_t)(n > 0 ? n : 1), sizeof *err);
    pb_hang *h = NULL;
    if (!reqs || !sreqs || !ranks || !local || !err) goto oom;
    for (int r = 0; r < n; r++) {
        ranks[r].host = eps[r].host;
        ranks[r].pid = eps[r].pid;
        ranks[r].answered = pb_hang_fetch_answered(reqs, r);
        ranks[r].answer = reqs[r].root;
        json_t *error = reqs[r].root ? json_object_get(reqs[r].root, "error") : NULL;
        const char *why = json_string_value(error);
        ranks[r].why = why ? why : reqs[r].err;
    }
    if (!(h = pb_hang_study(ranks, n))) goto oom;

    /* Stacks: local ranks read here, the others (and the local ones that cannot be read from
     * here) by their agent. */
    for (int r = 0; r < n; r++) {
        if (!ranks[r].want_stack) continue;
        if (strcmp(eps[r].via, "unix") == 0 && eps[r].pid &&
            (local[r] = stack_from_local(eps[r].pid, err[r], sizeof err[r])))
            continue;
        sreqs[r].target = eps[r].target;
        sreqs[r].usable = 1;
    }
    pb_fanout_run(sreqs, n, "GET", "/api/stack", NULL, deadline);
    for (int r = 0; r < n; r++) pb_format_sanitize_json(sreqs[r].root);
    for (int r = 0; r < n; r++) {
        if (!ranks[r].want_stack) continue;
        if (local[r]) ranks[r].stack = local[r];
        else if (sreqs[r].root && sreqs[r].status == 200) ranks[r].stack = sreqs[r].root;
        else if (!err[r][0]) snprintf(err[r], sizeof err[r], "%s", sreqs[r].err);
        ranks[r].stack_err = err[r];
    }
    /* The ranks that did not answer and run on this host: their process state and stack, read
     * from outside (a stopped process cannot answer, but its memory can be read). */
    for (int r = 0; r < n; r++) {
        if (ranks[r].answered || strcmp(eps[r].via, "unix") != 0 || eps[r].pid <= 0) continue;
        char state = pb_target_pid_state(eps[r].pid);
        ranks[r].process = state ? pb_target_state_text(state) : "gone";
        if (state && state != 'Z' && state != 'X')
            ranks[r].stack = local[r] = stack_from_local(eps[r].pid, err[r], sizeof err[r]);
        ranks[r].stack_err = err[r];
    }
    int done = pb_hang_finish(h, doc);
    if (done < 0) goto oom;
    if (done > 0) rc = PB_EXIT_PARTIAL;
    goto finish;
oom:
    pb_cli_error("out of memory");
    rc = PB_EXIT_ERROR;
finish:
    pb_hang_free(h);
    if (reqs && !asked) {
        pb_fanout_free(reqs, n);
        free(reqs);
    }
    if (sreqs) pb_fanout_free(sreqs, n);
    free(sreqs);
    for (int r = 0; local && r < n; r++) json_decref(local[r]);
    free(local);
    free(ranks);
    free(err);
    return rc;
}

int pb_hang_fetch_job(const pb_target *t, const char *name, double deadline_s, json_t **doc)
{
    long deadline = pb_fanout_deadline_ms(deadline_s);
    pb_rank_ep *eps = NULL;
    int n = 0;
    *doc = NULL;
    if (t->kind == PB_TARGET_FILE)
        return pb_cli_usage_error("%s is a recording file: hang needs the running job (a "
                                  "recording has no live collectives; the job's recordings answer "
                                  "'probing %s query --ranks all \"SELECT ... FROM "
                                  "python.nccl_trace\"')", name, name);
    if (pb_fanout_roster(t, deadline, &eps, &n)) return PB_EXIT_ERROR;
    int rc = pb_hang_fetch_analyse(eps, n, NULL, deadline, doc);
    free(eps);
    return rc;
}
