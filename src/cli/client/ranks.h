/*
 * ranks.h - every rank of a target's torch.distributed job, on every node, and its state: what
 * `probing <target> ranks` prints and the MCP server's ranks tool returns (mcp/tools.c).
 */
#ifndef PB_CLI_RANKS_H
#define PB_CLI_RANKS_H

#include "client/target.h"

#include <jansson.h>

/* The roster of t's job (t borrowed; name: as typed) and every rank's GET /api/rank within
 * deadline_s seconds (0: the default): *columns (rank, host, pid, node_rank, local_rank, step,
 * step_started_s_ago, state) and *rows, one per rank, and *notes, the messages to print after
 * them (how many ranks did not answer, a forged roster entry); all three caller-owned. Returns
 * PB_EXIT_OK, PB_EXIT_PARTIAL (some ranks did not answer: their state says why), or after
 * printing why PB_EXIT_USAGE (t is a recording) or PB_EXIT_ERROR (no roster). [main thread] */
int pb_ranks_states(const pb_target *t, const char *name, double deadline_s, json_t **columns,
                    json_t **rows, json_t **notes);

#endif
