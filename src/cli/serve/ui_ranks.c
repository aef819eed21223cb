/*
 * ui_ranks.c - which ranks the web view shows (serve/ui_server.h). When the target is one rank
 * of a job (its /api/info has world_size > 1 and a job), the other ranks are taken at start from
 * the job's roster (fanout.h, as `ranks` and `hang` do: Unix sockets on this machine, TCP with
 * the job's token elsewhere); without a roster, the other local agents of the same job (as
 * `report` finds them). targets[0] is always the target itself; the others follow by rank.
 */
#include "serve/ui_server.h"

#include "client/client.h"
#include "client/fanout.h"
#include "paths.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *pb_ui_info_of(ui_server *s, const pb_target *t, long timeout_ms)
{
    int locked = t->kind == PB_TARGET_FILE;
    if (locked) pthread_mutex_lock(&s->file_lock);
    json_t *info = pb_client_get_object(t, "/api/info", timeout_ms);
    if (locked) pthread_mutex_unlock(&s->file_lock);
    return info;
}

static int by_rank(const void *x, const void *y)
{
    return ((const ui_target *)x)->rank - ((const ui_target *)y)->rank;
}

/* Adds the other local ranks of the target's job (same job and world size in /api/info, as
 * `report` finds them: pb_fanout_local_ranks) after targets[0]; prints how many were found. */
void pb_ui_find_ranks(ui_server *s, json_t *info)
{
    const char *job = json_string_value(json_object_get(info, "job"));
    json_int_t world = json_integer_value(json_object_get(info, "world_size"));
    char dir[PATH_MAX];
    pb_local_rank *found = NULL;
    if (world <= 1 || !job || s->targets[0].t.kind == PB_TARGET_FILE || pb_paths_dir(dir, sizeof dir))
        return;
    int count = pb_fanout_local_ranks(dir, job, world, s->targets[0].rank,
                                      (pid_t)s->targets[0].pid, &found);
    ui_target *grown = count > 0 ? realloc(s->targets, ((size_t)count + 1) * sizeof *grown) : NULL;
    if (grown) s->targets = grown;
    for (int i = 0; grown && i < count; i++) {
        ui_target *u = &s->targets[s->ntargets++];
        u->t = found[i].target;
        u->rank = found[i].rank;
        u->pid = found[i].pid;
    }
    free(found);
    qsort(s->targets + 1, s->ntargets - 1, sizeof *s->targets, by_rank);
    fprintf(stderr, "probing: rank %d of job %s: %zu of the %lld other ranks found on this "
                    "machine\n",
            s->targets[0].rank, job, s->ntargets - 1, (long long)world - 1);
}

/* The other ranks of the target's job from the job's roster (fanout.h: the job's c10d store,
 * as `ranks` and `hang` read it), on this machine and on others (over TCP with the job's token):
 * the reachable ones are added after targets[0], the others go to s->missing with why. Returns
 * 0, or -1 when there is no roster of several ranks (a single process, a job whose store the
 * agents could not register in, a recording): then the local scan (pb_ui_find_ranks) is used. */
int pb_ui_roster_ranks(ui_server *s, json_t *info)
{
    const char *job = json_string_value(json_object_get(info, "job"));
    json_int_t world = json_integer_value(json_object_get(info, "world_size"));
    pb_rank_ep *eps = NULL;
    int n = 0, registered = 0;
    if (world <= 1 || s->targets[0].t.kind == PB_TARGET_FILE ||
        pb_fanout_roster(&s->targets[0].t, PB_FANOUT_DEADLINE_MS, &eps, &n))
        return -1;
    for (int r = 0; r < n; r++) registered += eps[r].registered;
    ui_target *grown = registered > 1 ? realloc(s->targets, ((size_t)n + 1) * sizeof *grown)
                                      : NULL;
    if (!grown) {
        free(eps);
        return -1;
    }
    s->targets = grown;
    size_t local = 0;
    for (int r = 0; r < n; r++) {
        const pb_rank_ep *e = &eps[r];
        if (e->rank == s->targets[0].rank) {
            snprintf(s->targets[0].host, sizeof s->targets[0].host, "%s", e->host);
            s->targets[0].node_rank = e->node_rank;
            continue;
        }
        if (!e->via[0] || !pb_fanout_reachable(e)) {
            json_array_append_new(s->missing, json_pack("{s:i,s:s,s:s}", "rank", e->rank, "host",
                                                        e->host[0] ? e->host : "?", "why",
                                                        e->why[0] ? e->why : "not reachable"));
            continue;
        }
        ui_target *u = &s->targets[s->ntargets++];
        memset(u, 0, sizeof *u);
        u->t = e->target;
        u->rank = e->rank;
        u->pid = e->pid;
        u->node_rank = e->node_rank;
        snprintf(u->host, sizeof u->host, "%s", e->host);
        local += strcmp(e->via, "unix") == 0;
    }
    free(eps);
    qsort(s->targets + 1, s->ntargets - 1, sizeof *s->targets, by_rank);
    fprintf(stderr, "probing: rank %d of job %s: %zu of the %lld other ranks found in the job's "
                    "roster (%zu on this machine)%s\n",
            s->targets[0].rank, job ? job : "?", s->ntargets - 1, (long long)world - 1, local,
            json_array_size(s->missing) ? "; the others are listed on the Ranks page" : "");
    return 0;
}
