/*
 * hang.h - the hang analysis of a job (hang.c) and its renderer (hang_render.c): from every
 * rank's answer to GET /api/rank, where each is in its collectives, it builds one document
 * holding what `probing <target> hang` shows and whether the job is stalled (some rank waits
 * inside a collective, or no rank finishes steps) for the "Hang" section of `report`;
 * pb_hang_render writes that document as text, as pb_report_render does for the report.
 *
 * Pure analysis, in two halves because the second needs stacks the first decides on: the
 * caller (src/cli/client/hang_fetch.c) asks the ranks, calls pb_hang_study, reads the stack of
 * every rank it marks want_stack (from outside for ranks on this host, else GET /api/stack) and
 * of the ranks on this host that did not answer, then calls pb_hang_finish, which hands out the
 * document. No socket, no process is touched here. [one thread per pb_hang]
 */
#ifndef PB_REPORT_HANG_H
#define PB_REPORT_HANG_H

#include <jansson.h>
#include <stdio.h>

/* One rank of the job, in roster order (index = rank). Strings are borrowed and, like every
 * string inside the JSON values, already fit for a terminal (the caller sanitizes what the job
 * wrote). */
typedef struct pb_hang_rank {
    const char *host;   /* its host as the roster names it; "" when not known */
    int pid;            /* 0 when not known */
    int answered;       /* it answered GET /api/rank with 200 and a JSON body */
    json_t *answer;     /* that answer (borrowed; pb_hang_study may rewrite its "collectives"
                         * from its flight recorder reading); NULL when none */
    const char *why;    /* when it did not answer: why */
    const char *process; /* when it did not answer and runs on this host: its process state in
                          * words ("gone" when there is none); NULL otherwise */
    int want_stack;     /* set by pb_hang_study: pb_hang_finish wants this rank's stack */
    json_t *stack;      /* set by the caller before pb_hang_finish, for the ranks with want_stack
                         * and the ranks on this host that did not answer: the main thread's stack
                         * in GET /api/stack's shape ({"threads": [{"main", "frames": [{"file",
                         * "line", "function"}]}]}, or {"error"}); borrowed; NULL when none */
    const char *stack_err; /* why there is no stack; NULL or "" when not known */
} pb_hang_rank;

typedef struct pb_hang pb_hang;

/* The first half: compares the ranks' collectives (on PyTorch's flight recorder numbers when
 * every rank that answered sent a fresh reading), notes in the document which rank the job waits
 * for, or that the job is stalled outside collectives, or that nothing is stuck, and sets
 * ranks[r].want_stack for the ranks whose stack the second half shows. ranks (n of them) must
 * outlive the result. Returns the analysis (free with pb_hang_free), or NULL when out of
 * memory. */
pb_hang *pb_hang_study(pb_hang_rank *ranks, int n);

/* The second half, once the stacks are in ranks: adds the ranks that did not answer (with their
 * process state and stack when on this host; while other ranks wait in a collective, the job
 * waits for them), the odd ranks and the waiting ranks grouped by where they wait, each with its
 * stack, and the flight recorder's "source:" line, then hands out the document in *doc (caller
 * owns, json_decref; NULL on failure). Call it once per analysis.
 *
 * The document is {"summary": {...}, "screen": [entry, ...]}. "screen" is what the text shows,
 * one entry per block of lines, in order, each {"what": ...} with the numbers and names of its
 * lines (strings already fit for a terminal); stacks are "where" (the frame the rank is said to
 * be in: the innermost outside Python's standard library) and "stack" ([{"file", "line",
 * "function"}], from that frame down). Only pb_hang_render reads it.
 *
 * "summary" is what `report` keeps: {"stalled": bool, "groups": [{"group", "op", "seq",
 * "waiting_s", "waiting_ranks", "not_entered_ranks", "mismatch"}], "not_answered": [rank, ...],
 * "source"}, a group entry for each group in which some rank waits. "stalled" is true when some
 * rank has waited in a collective for longer than 10 times the median step and 5 s, or when no
 * rank waits in a collective but no step finished on any rank for as long: then "groups" is
 * empty and the summary adds "no_step_for_s", "median_step_s" and "odd_ranks". "source" says
 * whose sequence numbers were compared: "flight_recorder" or "probing" (the agent's own
 * counters). A running job (every rank answered, no wait as long as a stall) is one line,
 * "nothing is stuck: ...", with "longest_wait_s" in the summary and no groups.
 * Returns 0, 1 when some ranks did not answer (named in the document), or -1 when out of
 * memory. */
int pb_hang_finish(pb_hang *h, json_t **doc);

/* Destroys the analysis (the document handed out by pb_hang_finish is the caller's). NULL is
 * fine. */
void pb_hang_free(pb_hang *h);

/* Writes the document of pb_hang_finish (borrowed) as the text `probing <target> hang` prints:
 * which rank the job waits for and where every rank of interest is, each stack a frame a line.
 * Returns 0, or -EIO when the stream failed. [any thread] */
int pb_hang_render(FILE *out, json_t *doc);

#endif
