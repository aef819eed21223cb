/*
 * hang.h - the hang analysis of a job (hang.c): one call that asks every rank of a roster where
 * it is in its collectives, writes the screen `probing <target> hang` shows, and says whether
 * the job is stalled (some rank waits inside a collective, or no rank finishes steps) for the "Hang" section of `report`.
 */
#ifndef PB_CLI_HANG_H
#define PB_CLI_HANG_H

#include "fanout.h"

#include <jansson.h>
#include <stdio.h>

/* The first round of the analysis: GET /api/rank to every rank of eps (a roster from
 * pb_fanout_roster, borrowed) within deadline_ms. Returns n requests (caller frees with
 * pb_fanout_free, then free), or NULL after printing "out of memory". `report` makes this round
 * once, right after the roster, and uses it both to leave out the ranks that do not answer and
 * for pb_hang_analyse. [main thread] */
pb_fanout_req *pb_hang_ask(const pb_rank_ep *eps, int n, long deadline_ms);

/* Whether rank r answered the round of pb_hang_ask. */
int pb_hang_answered(const pb_fanout_req *asked, int r);

/* Asks the n ranks of eps (a roster from pb_fanout_roster, borrowed) for their collectives and,
 * for the ranks that are behind or waiting, their Python stacks, within deadline_ms for each of
 * the two rounds (asked: the first round's answers from pb_hang_ask, borrowed and possibly
 * changed, or NULL to make that round here); writes the analysis as text to out.
 * When summary is not NULL, *summary receives (caller owns) {"stalled": bool, "groups":
 * [{"group", "op", "seq", "waiting_s", "waiting_ranks", "not_entered_ranks", "mismatch"}],
 * "not_answered": [rank, ...], "source"}, a group entry for each group in which some rank
 * waits. "stalled" is true when some rank has waited in a collective for longer than 10 times
 * the median step and 5 s, or when no rank waits in a collective but no step finished on any
 * rank for as long: then "groups" is empty and the summary adds "no_step_for_s",
 * "median_step_s" and "odd_ranks". "source" says whose sequence numbers were compared:
 * "flight_recorder" (PyTorch's, when every rank that answered sent a fresh reading) or
 * "probing" (the agent's own counters). A running job (every rank answered, no wait as long
 * as a stall) is one line, "nothing is stuck: ...", with "longest_wait_s" in the summary and
 * no groups. A rank that did not answer and runs on this host is named with its process state
 * and its stack, read from outside. Returns PB_EXIT_OK, PB_EXIT_PARTIAL when some ranks did
 * not answer (named in the text), or PB_EXIT_ERROR after printing "out of memory".
 * [main thread] */
int pb_hang_analyse(const pb_rank_ep *eps, int n, pb_fanout_req *asked, long deadline_ms, FILE *out,
                    json_t **summary);

#endif
