/*
 * cluster.c - stragglers across the nodes of a job: which ranks, or which node, are slower than
 * the rest, robustly.
 *
 * Only when the ranks reached span two hosts or more (pb_report_peer.host; the CLI finds them
 * through the job's roster, docs/cluster.md): on one machine ranks.c says what there is to say.
 * For each rank: the median over its steady window (the target's, from python.steps) of the
 * step time and of each phase (data wait, forward, backward, optimizer, collectives, other).
 * Then per phase except backward and collectives (where the fast ranks wait for the slow ones,
 * so their time grows there), across ranks:
 *   - a rank is a straggler when its median is above the ranks' median M by more than
 *     max(3.5 x 1.4826 x MAD, FLOOR), MAD being the median absolute deviation (Iglewicz and
 *     Hoaglin's modified z-score over 3.5, with a floor so that equal ranks, MAD 0, do not make
 *     noise an outlier);
 *   - a node is slow when every one of its ranks is slower than every rank of the other nodes by
 *     more than FLOOR (half the ranks slow would move M and MAD; this test does not care);
 * and a node's ranks are named once, as the node, not rank by rank. FLOOR is 2 ms or 5 % of the
 * median step time, whichever is larger: below it, scheduling noise.
 * Every claim keeps the SQL (run on every rank) and the per-rank and per-node medians.
 */
#include "phases.h"
#include "rules.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The parts compared: the step time (C_WALL), then the phases of python.steps that every agent
 * has (phases.h; not grad_sync, which older agents lack), in the table's order. */
enum { C_WALL, C_NPARTS = 1 + PB_PHASE_COUNT };
#define C_WITHOUT PB_PHASE_NEWER

typedef struct c_parts {
    const pb_phase *phase[C_NPARTS];
    int count;
} c_parts;

static void c_parts_init(c_parts *parts)
{
    parts->phase[0] = &pb_phase_wall;
    parts->count = 1;
    for (int p = 0; p < PB_PHASE_COUNT; p++)
        if (pb_phase_selected(p, C_WITHOUT)) parts->phase[parts->count++] = &pb_phases[p];
}

typedef struct c_rank {
    int rank;
    const char *host;
    double part[C_NPARTS];
} c_rank;

static double c_median(double *v, size_t n)
{
    if (!n) return NAN;
    qsort(v, n, sizeof *v, pb__report_cmp_double);
    return pb__report_percentile(v, n, 50);
}

/* "2-3" style list of the ranks k with flag[k] set, by rank number. */
static void c_ranks_text(const c_rank *ranks, const unsigned char *flag, size_t n, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t k = 0; k < n; k++) {
        if (!flag[k]) continue;
        int w = snprintf(out + used, len - used, "%s%d", used ? "," : "", ranks[k].rank);
        if (w < 0 || (size_t)w >= len - used) break;
        used += (size_t)w;
    }
}

/* Appends to the claims text (cut, never overrun, when it is full). */
#define CLAIM(...)                                                                        \
    do {                                                                                  \
        int w_ = snprintf(claims + clen, sizeof claims - clen, __VA_ARGS__);              \
        if (w_ > 0) clen = (size_t)w_ < sizeof claims - clen ? clen + (size_t)w_ : sizeof claims - 1; \
    } while (0)

void pb__report_cluster(pb__report *r)
{
    const pb_report_source *src = r->src;
    size_t n = src->npeers + 1;
    if (!src->npeers || !r->from_steps_table || r->count <= r->warmup) return;
    const char *my_host = json_string_value(json_object_get(src->info, "host"));
    /* Only when the ranks reached span two hosts or more. */
    int hosts = 0;
    for (size_t i = 0; i < src->npeers && !hosts; i++)
        hosts = src->peers[i].host && my_host && strcmp(src->peers[i].host, my_host) != 0;
    if (!hosts) return;

    c_parts parts;
    c_parts_init(&parts);
    char sql[SQL_MAX], columns[256];
    if (pb_phase_columns(columns, sizeof columns, C_WITHOUT, ", ") < 0) return;
    pb__report_sqlf(sql,
                    "SELECT step, %s, %s\nFROM python.steps WHERE step BETWEEN %lld AND %lld "
                    "ORDER BY step",
                    pb_phase_wall.column, columns, pb__report_steady_first(r), r->hi);
    c_rank *ranks = calloc(n, sizeof *ranks);
    double *v = calloc(r->count + n + 1, sizeof *v);
    unsigned char *flag = calloc(n, 1);
    json_t *unread = json_array();
    size_t used = 0;
    if (!ranks || !v || !flag) goto done;
    for (size_t i = 0; i < n; i++) {
        pb_report_query_fn query = i ? src->peers[i - 1].query : src->query;
        void *ctx = i ? src->peers[i - 1].ctx : src->ctx;
        int rank = i ? src->peers[i - 1].rank
                     : (int)json_integer_value(json_object_get(src->info, "rank"));
        const char *host = i ? src->peers[i - 1].host : my_host;
        json_t *rows = NULL;
        char *error = NULL;
        if (query(ctx, sql, &rows, &error) || !json_array_size(rows)) {
            json_array_append_new(unread, json_pack("{s:i,s:s?,s:s}", "rank", rank, "host", host,
                                                    "error", error ? error : "no steady steps"));
            free(error);
            json_decref(rows);
            continue;
        }
        c_rank *d = &ranks[used++];
        d->rank = rank;
        d->host = host ? host : "?";
        for (int p = 0; p < parts.count; p++) {
            size_t m = 0;
            json_t *row;
            size_t j;
            json_array_foreach(rows, j, row) v[m++] =
                pb__report_num(row, parts.phase[p]->column, NULL);
            d->part[p] = c_median(v, m);
        }
        json_decref(rows);
    }
    if (used < 3) goto done; /* a median of two says nothing */

    double med[C_NPARTS], mad[C_NPARTS];
    for (int p = 0; p < parts.count; p++) {
        for (size_t k = 0; k < used; k++) v[k] = ranks[k].part[p];
        med[p] = c_median(v, used);
        for (size_t k = 0; k < used; k++) v[k] = fabs(ranks[k].part[p] - med[p]);
        mad[p] = c_median(v, used);
    }
    double floor_s = fmax(0.002, 0.05 * med[C_WALL]);

    json_t *nums = json_object(), *per_rank = json_array(), *per_node = json_object();
    for (size_t k = 0; k < used; k++) {
        json_t *o = json_pack("{s:i,s:s}", "rank", ranks[k].rank, "host", ranks[k].host);
        for (int p = 0; p < parts.count; p++) {
            char key[32];
            snprintf(key, sizeof key, "%s_s", parts.phase[p]->column);
            json_object_set_new(o, key, pb__report_real(ranks[k].part[p]));
        }
        json_array_append_new(per_rank, o);
        if (!json_object_get(per_node, ranks[k].host)) {
            json_t *node = json_object();
            for (int p = 0; p < parts.count; p++) {
                size_t m = 0;
                for (size_t q = 0; q < used; q++)
                    if (!strcmp(ranks[q].host, ranks[k].host)) v[m++] = ranks[q].part[p];
                char key[32];
                snprintf(key, sizeof key, "%s_s", parts.phase[p]->column);
                json_object_set_new(node, key, pb__report_real(c_median(v, m)));
            }
            json_object_set_new(per_node, ranks[k].host, node);
        }
    }
    json_object_set_new(nums, "ranks_reached", json_integer((json_int_t)used));
    json_object_set_new(nums, "floor_s", pb__report_real(floor_s));
    json_object_set_new(nums, "per_rank", per_rank);
    json_object_set_new(nums, "per_node", per_node);
    if (json_array_size(unread)) json_object_set(nums, "unreadable", unread);

    char claims[4096];
    size_t clen = 0;
    claims[0] = '\0';
    int any = 0;
    for (int p = 0; p < parts.count; p++) {
        /* Backward (DDP's all-reduces block in it) and collectives are where ranks wait for the
         * slow ones: the fast ranks' time grows there. Not evidence of a slow rank. */
        if (parts.phase[p]->flags & (PB_PHASE_HOLDS_WAIT | PB_PHASE_RANK_WAIT)) continue;
        double limit = med[p] + fmax(3.5 * 1.4826 * mad[p], floor_s);
        unsigned char *named = calloc(used, 1);
        if (!named) break;
        /* Nodes first: every rank of the node above every rank elsewhere by more than floor. */
        for (size_t k = 0; k < used; k++) {
            if (named[k]) continue;
            const char *h = ranks[k].host;
            double lo_in = INFINITY, hi_out = -INFINITY, in_med;
            size_t in = 0, out = 0;
            for (size_t q = 0; q < used; q++) {
                if (!strcmp(ranks[q].host, h)) {
                    lo_in = fmin(lo_in, ranks[q].part[p]);
                    v[in++] = ranks[q].part[p];
                } else {
                    hi_out = fmax(hi_out, ranks[q].part[p]);
                    out++;
                }
            }
            in_med = c_median(v, in);
            if (!out || in < 2 || lo_in - hi_out <= floor_s) continue;
            memset(flag, 0, n);
            for (size_t q = 0; q < used; q++)
                if (!strcmp(ranks[q].host, h)) flag[q] = named[q] = 1;
            char list[256];
            c_ranks_text(ranks, flag, used, list, sizeof list);
            CLAIM("%snode %s is slow in %s: its ranks %s take %.1f ms (median), "
                          "%.1f ms more than the slowest rank elsewhere", any ? "; " : "", h,
                          parts.phase[p]->name, list, 1e3 * in_med, 1e3 * (lo_in - hi_out));
            any = 1;
        }
        for (size_t k = 0; k < used; k++) {
            if (named[k] || !(ranks[k].part[p] > limit)) continue;
            named[k] = 1;
            CLAIM("%srank %d (%s) is a straggler in %s: %.1f ms vs the ranks' "
                          "median %.1f ms (MAD %.1f ms)", any ? "; " : "", ranks[k].rank,
                          ranks[k].host, parts.phase[p]->name, 1e3 * ranks[k].part[p],
                          1e3 * med[p], 1e3 * mad[p]);
            any = 1;
        }
        free(named);
    }
    json_object_set_new(nums, "sql_runs_on", json_string("every rank reached, in the target's steady window"));
    if (any) {
        pb__report_finding(r, "stragglers", "check", "warning",
                           pb__report_textf("%s", claims), nums, sql,
                           "The other ranks wait for the slow ones at every synchronisation: "
                           "look at the slow node or rank first (its own report, its data "
                           "loading and its host: other processes, thermal limits, a slower "
                           "link).");
    } else {
        int h = (int)json_object_size(per_node);
        pb__report_finding(r, "stragglers", "check", "ok",
                           pb__report_textf("%zu ranks on %d nodes: no straggler and no slow node "
                                            "(per phase: median + 3.5 MAD, at least %.1f ms)",
                                            used, h, 1e3 * floor_s),
                           nums, sql, NULL);
    }
done:
    json_decref(unread);
    free(ranks);
    free(v);
    free(flag);
}
