/*
 * job.h - the job registry: every rank of a torch.distributed job finds the others through the
 * job's own c10d store, and the state of each rank's collectives for `probing hang`.
 *
 * After init_process_group (world size > 1) each agent writes its endpoint (host, rank, local
 * rank, node rank, pid, Unix socket, TCP address when it listens) as JSON under
 * "probing/v1/<run id>/rank/<rank>" in the default group's store, refreshes it every
 * PROBING_JOB_HEARTBEAT seconds and deletes it at exit (best effort, at most 200 ms). The store
 * holds endpoints only, never the token. One thread ("probing-job") does all store traffic with
 * the GIL taken for the duration of one store call (the store's bindings let go of it while they
 * wait on the network); the server thread never takes the GIL: GET /api/job asks that thread for
 * a fresh roster and waits at most 2 s for it, else answers with the last one it has.
 *
 * Collective state: every recorded collective (distributed.c) goes through pb_job_coll_enter /
 * pb_job_coll_exit_at, which keep per process group a sequence number (1 for the first call on that
 * group), the operation, its payload bytes, and whether it is entered or completed, with the
 * times. GET /api/rank reads them without a lock (a per-slot sequence counter makes the read
 * consistent). See docs/cluster.md.
 */
#ifndef PB_AGENT_JOB_H
#define PB_AGENT_JOB_H

#include <Python.h>

#include "buf.h"

#include <stdint.h>

/* The agent listens on unix_path (NULL: the agent stopped; nothing is registered until it starts
 * again) and on tcp_port (0: no TCP), where signed requests name agent_id (common/auth.h; NULL
 * without TCP; copied). Its registry entry advertises them. Called by the agent's start and
 * stop. [GIL held, heartbeat thread not running] */
void pb_job_set_endpoint(const char *unix_path, int tcp_port, const char *agent_id);

/* Registers this rank in the default group's store and starts the heartbeat thread, when
 * torch.distributed is initialised with a world size above 1; else does nothing. Idempotent.
 * Never raises: returns 0, or a negative code with the reason logged at debug level.
 * [GIL held] */
int pb_job_register(void);

/* The same with any object that has the c10d Store methods set/get/check/delete_key (bench/
 * fanout.py registers lightweight agents, without torch, through a store of files). Returns 0,
 * -EALREADY (registered, or the agent is off) or -EINVAL. [GIL held] */
int pb_job_register_store(PyObject *store, int rank, int world);

/* The rank this process registered as in its job, or -1 when it is not registered (for the
 * server: a signed TCP request names the rank it is meant for). ctx is unused (a pb_server_opts
 * callback). [any thread] */
int pb_job_registered_rank(void *ctx);

/* Stops the heartbeat thread and deletes this rank's key, waiting at most 200 ms for the store.
 * [GIL held; lets go of it while waiting] */
void pb_job_stop(void);

/* The one reset of the job unit's state (pb_job, job_state.h): what the last agent in this
 * process left (after a detach: its registry entry's fields, the last roster, the collective
 * slots and arrivals, its references to the store and the process groups) or what a forked
 * child must not inherit. forked=0: agent start, before anything registers [GIL held; the
 * collective hooks removed]; the fields a job thread that pb_job_stop could not join still uses
 * are left to it. forked=1: the child after fork(), from the atfork handler: only flags and
 * making the locks anew (the child has one thread and any lock may have been held), the
 * parent's references and buffers forgotten without touching them. */
void pb_job_reset(int forked);

/* Per-group collective state. group: the call's group argument (borrowed; NULL or None = the
 * default group). Returns a slot handle for pb_job_coll_exit_at, or -1 when untracked.
 * [GIL held] */
int pb_job_coll_enter(PyObject *group, uint32_t op_id, int64_t bytes);

/* The sequence number of the slot's last call (0 for slot -1). [GIL held] */
uint64_t pb_job_coll_seq(int slot);

/* The call numbered seq (pb_job_coll_seq, read right after enter) on the slot ended: completed
 * (ok) or failed. Nothing when a later call on the group has the slot now. At the return of a
 * synchronous call; for an async collective, whose Work completes after the call returned, from
 * a future's callback. [GIL held] */
void pb_job_coll_exit_at(int slot, uint64_t seq, int ok);

/* GET /api/job: {"registered", "job", "world", "self": {...}, "ranks": [entry text...],
 * "missing": [...], "roster_age_s", "reason"}. [server thread] */
int pb_job_json(void *ctx, pb_buf *out);

/* GET /api/rank: this rank's state: rank, host, pid, step, step times (the current step's age
 * and the median of the last 31 steps, for hang.c's stall check), collectives.
 * [server thread] */
int pb_job_rank_json(void *ctx, pb_buf *out);

/* GET /api/stack: this process's Python stacks, read from outside the interpreter (pystack.h,
 * on its own pid: no GIL needed, so it works while the main thread holds it). [server thread] */
int pb_job_stack_json(void *ctx, pb_buf *out);

/* GET /api/arrivals: per process group, the last PB_JOB_ARRIVALS collectives this rank entered,
 * oldest first: {"rank","now","host","step_median_s","groups":[{"group","arrivals":[[seq, op, bytes,
 * entered_unix_s, completed_unix_s|null], ...]}]}. Times are this host's CLOCK_REALTIME (the CLI
 * aligns hosts with timeline's offsets). A bounded summary: at most 16 groups x 512 entries.
 * Any thread; takes each ring's mutex briefly. Returns 0, or ENOMEM when its copy buffer
 * cannot be allocated. */
enum { PB_JOB_ARRIVALS = 512 };
int pb_job_arrivals_json(void *ctx, pb_buf *out);

/* The host name ranks are listed under: PROBING_HOST, else gethostname(). [any thread] */
const char *pb_job_host(void);

#endif
