/*
 * report_fetch.c - the report's data and the report (report_fetch.h).
 *
 * The rules live in src/report; this file only gives them their data: a query function that
 * posts each SQL statement to the target's /api/query, the agent's /api/info, the measurement
 * conditions from one short eval (client/conditions.h), and the other ranks of the target's job. When
 * eval is unavailable or times out the report says the conditions are unknown; it never fails
 * for that.
 *
 * Other ranks: when the target's /api/info says it is one rank of a job (world_size > 1 and a
 * job: the rendezvous address every rank of a torchrun job shares), the agents in the socket
 * directory are asked for their /api/info (as `probing list` does, 1 s each) and those of the
 * same job and world size with another rank become the report's peers, queried the same way.
 * With the job's roster, every rank's collective arrivals too (arrivals.h), for the finding of
 * the rank that enters them last (report/arrival_order.c).
 *
 * Recordings hold one rank each: `probing rank0.db report rank1.db ...` reads the files named
 * after `report` as the other ranks of the same job (each must be a recording of another rank
 * of the same world size), so load imbalance is checked offline too.
 */
#include "client/report_fetch.h"

#include "client/arrivals.h"
#include "client/client.h"
#include "client/conditions.h"
#include "client/fanout.h"
#include "client/hang_fetch.h"
#include "hang.h"
#include "out/cli.h"
#include "paths.h"
#include "report.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* pb_report_query_fn over POST /api/query. ctx is the pb_target. [main thread] */
static int query_target(void *ctx, const char *sql, json_t **rows, char **error)
{
    return pb_client_query_objects(ctx, sql, PB_CLI_QUERY_TIMEOUT_MS, rows, error);
}

/* GET /api/info of t with the `list` timeout: the object (caller owns) or NULL. */
static json_t *peer_info(const pb_target *t)
{
    return pb_client_get_object(t, "/api/info", PB_CLI_LIST_TIMEOUT_MS);
}

typedef struct peers {
    pb_target *targets;
    pb_report_peer *list;
    char (*names)[16];
    size_t count;
    char note[PATH_MAX + 200];
    pb_rank_ep *roster; /* job_peers: the roster the hosts point into */
    int nroster;        /* its length (the job's world size) */
    pb_fanout_req *asked; /* job_peers: every rank's GET /api/rank (client/hang_fetch.h), nroster of them */
} peers;

/* The other ranks from the job's roster in its c10d store, on every node (docs/cluster.md).
 * Returns 1 when the target is registered in a job (p filled), 0 to look in the socket
 * directory instead (an agent without /api/job, or not in a registered job). */
static int job_peers(const pb_target *t, long long my_rank, peers *p)
{
    char err[512];
    pb_response resp;
    if (pb_client_request(t, "GET", "/api/job", NULL, PB_CLI_INFO_TIMEOUT_MS, &resp,
                          err, sizeof err))
        return 0;
    json_t *job = json_loadb(resp.body.data, resp.body.len, 0, NULL);
    pb_buf_free(&resp.body);
    int registered = resp.status == 200 && json_is_true(json_object_get(job, "registered"));
    json_decref(job);
    int n = 0;
    if (!registered || pb_fanout_roster(t, PB_FANOUT_DEADLINE_MS, &p->roster, &n))
        return 0;
    p->nroster = n;
    /* One round to every rank: who answers (a rank that does not is left out of the report's
     * queries, which would each wait for it), and the hang check's answers (add_hang). */
    p->asked = pb_hang_fetch_ask(p->roster, n, PB_FANOUT_DEADLINE_MS);
    p->targets = calloc((size_t)n, sizeof *p->targets);
    p->list = calloc((size_t)n, sizeof *p->list);
    p->names = calloc((size_t)n, sizeof *p->names);
    int unreachable = 0;
    char silent[256] = "";
    size_t silent_len = 0;
    for (int r = 0; r < n && p->targets && p->list && p->names; r++) {
        pb_rank_ep *e = &p->roster[r];
        if (r == my_rank) continue;
        if (!pb_fanout_reachable(e)) {
            unreachable++;
            continue;
        }
        if (p->asked && !pb_hang_fetch_answered(p->asked, r)) {
            int w = snprintf(silent + silent_len, sizeof silent - silent_len, "%s%d", silent_len ? "," : "", r);
            if (w > 0 && (size_t)w < sizeof silent - silent_len) silent_len += (size_t)w;
            continue;
        }
        p->targets[p->count] = e->target;
        if (e->target.kind == PB_TARGET_UNIX)
            snprintf(p->names[p->count], sizeof p->names[p->count], "%d", e->pid);
        else
            snprintf(p->names[p->count], sizeof p->names[p->count], "rank %d", r);
        p->list[p->count].rank = r;
        p->list[p->count].target = p->names[p->count];
        p->list[p->count].query = query_target;
        p->list[p->count].ctx = &p->targets[p->count];
        p->list[p->count].host = e->host;
        p->count++;
    }
    snprintf(p->note, sizeof p->note, "%zu of the %d other ranks reached through the job's roster "
             "(its c10d store)%s%s%s%s", p->count, n - 1,
             unreachable ? "; the others have no reachable endpoint (see probing <target> ranks)" : "",
             silent_len ? "; left out, not answering within 5 s: rank " : "", silent,
             silent_len ? " (see probing <target> ranks)" : "");
    return 1;
}

/* Finds the other ranks of the target's job among this user's agents (see the file header).
 * Fills p (free with peers_free); p->note says how they were looked for or why not. */
static void find_peers(const pb_target *t, json_t *info, peers *p)
{
    json_t *world_v = json_object_get(info, "world_size"), *rank_v = json_object_get(info, "rank");
    const char *job = json_string_value(json_object_get(info, "job"));
    long long world = json_is_integer(world_v) ? json_integer_value(world_v) : 0;
    long long my_rank = json_is_integer(rank_v) ? json_integer_value(rank_v) : 0;
    long long my_pid = (long long)json_integer_value(json_object_get(info, "pid"));
    char dir[PATH_MAX];
    memset(p, 0, sizeof *p);
    if (world <= 1) return;
    if (t->kind == PB_TARGET_FILE) {
        snprintf(p->note, sizeof p->note, "the target is a recording, which holds one rank");
        return;
    }
    if (job_peers(t, my_rank, p)) return;
    if (!job) {
        snprintf(p->note, sizeof p->note,
                 "the agent names no job (MASTER_ADDR/MASTER_PORT unset), so its other ranks "
                 "cannot be told from other jobs' processes");
        return;
    }
    if (pb_paths_dir(dir, sizeof dir)) {
        snprintf(p->note, sizeof p->note, "the socket directory name is too long");
        return;
    }
    pb_local_rank *found = NULL;
    int count = pb_fanout_local_ranks(dir, job, world, my_rank, (pid_t)my_pid, &found);
    if (count > 0) {
        p->targets = calloc((size_t)count, sizeof *p->targets);
        p->list = calloc((size_t)count, sizeof *p->list);
        p->names = calloc((size_t)count, sizeof *p->names);
    }
    for (int i = 0; i < count && p->targets && p->list && p->names; i++) {
        p->targets[p->count] = found[i].target;
        snprintf(p->names[p->count], sizeof p->names[p->count], "%d", (int)found[i].pid);
        p->list[p->count].rank = found[i].rank;
        p->list[p->count].target = p->names[p->count];
        p->list[p->count].query = query_target;
        p->list[p->count].ctx = &p->targets[p->count];
        p->count++;
    }
    free(found);
    snprintf(p->note, sizeof p->note,
             "%zu of the %lld other rank%s found among the agents in %s%s", p->count, world - 1,
             world == 2 ? "" : "s", dir,
             (long long)p->count < world - 1
                 ? "; ranks on other machines, or started without probing, cannot be reached "
                   "from here"
                 : "");
}

/* The recordings named after `report`, as the other ranks of the target recording's job. Returns
 * 0, or prints why one cannot be used and returns PB_EXIT_USAGE / PB_EXIT_ERROR. */
static int recording_peers(const pb_report_ask *ask, json_t *info, peers *p)
{
    size_t n = (size_t)ask->n_recordings;
    json_t *rank_v = json_object_get(info, "rank"), *world_v = json_object_get(info, "world_size");
    memset(p, 0, sizeof *p);
    if (ask->target->kind != PB_TARGET_FILE)
        return pb_cli_usage_error("report takes other recordings only when the target is a "
                                  "recording (got '%s' after report; a live rank's other ranks "
                                  "are found by themselves)", ask->recordings[0]);
    p->targets = calloc(n, sizeof *p->targets);
    p->list = calloc(n, sizeof *p->list);
    p->names = calloc(n, sizeof *p->names);
    if (!p->targets || !p->list || !p->names) return pb_cli_error("out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *spec = ask->recordings[i];
        pb_target *t = &p->targets[i];
        int rc = pb_target_resolve(spec, t);
        if (rc) return rc;
        if (t->kind != PB_TARGET_FILE)
            return pb_cli_usage_error("'%s' is not a recording: report reads the other ranks of a "
                                      "recording from their recordings (probing rank0.db report "
                                      "rank1.db ...)", spec);
        json_t *other = peer_info(t);
        json_t *r = json_object_get(other, "rank"), *w = json_object_get(other, "world_size");
        const char *problem = NULL;
        if (!json_is_integer(r))
            problem = "it does not say which rank it recorded (a recording from an older agent)";
        else if (json_is_integer(rank_v) && json_integer_value(r) == json_integer_value(rank_v))
            problem = "it holds the same rank as the target";
        else if (json_is_integer(world_v) && json_is_integer(w) &&
                 json_integer_value(w) != json_integer_value(world_v))
            problem = "its world size differs from the target's: another job";
        for (size_t k = 0; !problem && k < p->count; k++)
            if (p->list[k].rank == (int)json_integer_value(r))
                problem = "another recording given holds the same rank";
        if (problem) {
            pb_cli_error("cannot read '%s' as another rank of '%s': %s", spec, ask->name, problem);
            json_decref(other);
            return PB_EXIT_USAGE;
        }
        snprintf(p->names[p->count], sizeof p->names[p->count], "%s", spec);
        p->list[p->count].rank = (int)json_integer_value(r);
        p->list[p->count].target = spec;
        p->list[p->count].query = query_target;
        p->list[p->count].ctx = t;
        p->count++;
        json_decref(other);
    }
    snprintf(p->note, sizeof p->note, "%zu other rank%s from the recordings given", p->count,
             p->count == 1 ? "" : "s");
    return 0;
}

static void peers_free(peers *p)
{
    free(p->targets);
    free(p->list);
    free(p->names);
    if (p->asked) {
        pb_fanout_free(p->asked, p->nroster);
        free(p->asked);
    }
    free(p->roster);
}

/* The "Hang" section: when the target is a rank of a job with a roster (job_peers) and the
 * hang analysis (client/hang_fetch.c, src/report/hang.c) finds a rank waiting in a collective,
 * doc gets "hang": the summary of the analysis's document plus "text", the lines
 * `probing <target> hang` prints (pb_hang_render of the same document). A job that is not
 * stalled (or a failed analysis) leaves doc as it was, so its report does not change.
 * [main thread] */
static void add_hang(const peers *p, json_t *doc)
{
    char *text = NULL;
    size_t len = 0;
    json_t *hang = NULL, *summary = NULL;
    FILE *mem = NULL;
    if (!p->roster || p->nroster < 2) return;
    int rc = pb_hang_fetch_analyse(p->roster, p->nroster, p->asked, PB_FANOUT_DEADLINE_MS, &hang);
    summary = json_incref(json_object_get(hang, "summary"));
    if (rc == PB_EXIT_ERROR || !json_is_true(json_object_get(summary, "stalled"))) goto out;
    if (!(mem = open_memstream(&text, &len))) goto out;
    int bad = pb_hang_render(mem, hang) != 0;
    if (fclose(mem) != 0 || bad) goto out;
    json_t *lines = json_array();
    for (char *line = text, *nl; lines && line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        json_array_append_new(lines, json_string(line));
    }
    json_object_set_new(summary, "text", lines ? lines : json_array());
    json_object_set(doc, "hang", summary);
out:
    json_decref(summary);
    json_decref(hang);
    free(text);
}

/* Every rank's arrival summary (arrivals.h) for the arrival-order rule, when the target is a
 * rank of a job with a roster (job_peers): the ranks that answered the first round only, so a
 * silent one costs no second deadline. Leaves out zeroed when there is no roster. */
static void job_arrivals(const peers *p, pb_job_arrivals *out)
{
    memset(out, 0, sizeof *out);
    if (!p->roster || p->nroster < 2) return;
    unsigned char *sel = calloc((size_t)p->nroster, 1);
    for (int r = 0; sel && r < p->nroster; r++)
        sel[r] = pb_fanout_reachable(&p->roster[r]) && (!p->asked || pb_hang_fetch_answered(p->asked, r));
    if (sel) pb_job_arrivals_fetch(p->roster, p->nroster, sel, PB_FANOUT_DEADLINE_MS, NULL, out);
    free(sel);
}

int pb_report_fetch(const pb_report_ask *ask, json_t **doc)
{
    json_t *info = NULL, *cond = NULL;
    peers others;
    pb_job_arrivals arrivals;
    long status = 0;
    memset(&others, 0, sizeof others);
    memset(&arrivals, 0, sizeof arrivals);
    char why_buf[1200];
    char *error = NULL;
    *doc = NULL;
    int rc = pb_client_call(ask->target, "GET", "/api/info", NULL, PB_CLI_INFO_TIMEOUT_MS,
                            &info, &status);
    if (rc) return rc;
    rc = PB_EXIT_ERROR;
    if (status != 200) {
        pb_client_print_error(status, info);
        goto done;
    }
    pb_report_source src;
    memset(&src, 0, sizeof src);
    src.query = query_target;
    src.ctx = (void *)ask->target;
    src.target = ask->name;
    src.info = info;
    cond = pb_conditions_fetch(ask->target, why_buf, sizeof why_buf, &src.conditions_error);
    src.conditions = cond;
    if (ask->n_recordings) {
        rc = recording_peers(ask, info, &others);
        if (rc) goto done;
        rc = PB_EXIT_ERROR;
    } else {
        find_peers(ask->target, info, &others);
    }
    src.peers = others.list;
    src.npeers = others.count;
    src.peers_note = others.note[0] ? others.note : NULL;
    job_arrivals(&others, &arrivals);
    src.arrivals = arrivals.count ? arrivals.ranks : NULL;
    src.n_arrivals = arrivals.count;
    src.arrival_groups = arrivals.group_names;
    src.n_arrival_groups = arrivals.n_groups;
    src.arrivals_missing = arrivals.missing;
    if (pb_report_build(&src, ask->last_steps, doc, &error)) {
        pb_cli_error("cannot build the report: %s", error ? error : "unknown error");
        goto done;
    }
    add_hang(&others, *doc);
    rc = PB_EXIT_OK;
done:
    peers_free(&others);
    pb_job_arrivals_free(&arrivals);
    free(error);
    json_decref(info);
    json_decref(cond);
    return rc;
}
