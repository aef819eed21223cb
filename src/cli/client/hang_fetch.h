/*
 * hang_fetch.h - what the hang analysis (src/report/hang.h) needs from a job, fetched
 * (hang_fetch.c): every rank's GET /api/rank, the stacks the analysis asks for, and the process
 * state of the ranks on this host that did not answer. `probing <target> hang` (cmd_hang.c) and
 * the "Hang" section of `report` (report_fetch.c) call it, and the MCP server's hang tool.
 */
#ifndef PB_CLI_HANG_FETCH_H
#define PB_CLI_HANG_FETCH_H

#include "client/fanout.h"

#include <jansson.h>

/* The first round of the analysis: GET /api/rank to every rank of eps (a roster from
 * pb_fanout_roster, borrowed) within deadline_ms, the answers made fit for a terminal. Returns n
 * requests (caller frees with pb_fanout_free, then free), or NULL after printing "out of
 * memory". `report` makes this round once, right after the roster, and uses it both to leave
 * out the ranks that do not answer and for pb_hang_fetch_analyse. [main thread] */
pb_fanout_req *pb_hang_fetch_ask(const pb_rank_ep *eps, int n, long deadline_ms);

/* Whether rank r answered the round of pb_hang_fetch_ask. */
int pb_hang_fetch_answered(const pb_fanout_req *asked, int r);

/* The hang analysis of the n ranks of eps (a roster from pb_fanout_roster, borrowed): asks them
 * for their collectives (asked: the first round's answers from pb_hang_fetch_ask, borrowed and
 * possibly changed, or NULL to make that round here), runs pb_hang_study, reads the stacks it
 * wants (ranks on this host from outside through their pid, the others with GET /api/stack,
 * within deadline_ms) and the process state and stack of the ranks on this host that did not
 * answer, then pb_hang_finish, whose document (hang.h: the screen for pb_hang_render and the
 * summary `report` keeps) goes to *doc (caller owns, json_decref; NULL after an error).
 * Returns PB_EXIT_OK, PB_EXIT_PARTIAL when some ranks did not answer (named in the document),
 * or PB_EXIT_ERROR after printing "out of memory". [main thread] */
int pb_hang_fetch_analyse(const pb_rank_ep *eps, int n, pb_fanout_req *asked, long deadline_ms,
                          json_t **doc);

/* `probing <target> hang`'s analysis of the job t (borrowed; name: as typed) belongs to: its
 * roster (pb_fanout_roster), then pb_hang_fetch_analyse within deadline_s seconds (0: the
 * default, PB_FANOUT_DEADLINE_MS). Returns as pb_hang_fetch_analyse, with *doc; or, after
 * printing why, PB_EXIT_USAGE (t is a recording: it has no live collectives) or PB_EXIT_ERROR
 * (no roster) with *doc NULL. [main thread] */
int pb_hang_fetch_job(const pb_target *t, const char *name, double deadline_s, json_t **doc);

#endif
