/*
 * job_state.h - the state of the job unit (job.c, job_routes.c; job.h is the interface): one
 * struct, pb_job, shared by the two files and by no one else.
 *
 * Who writes what:
 *   - the endpoint (agent_unix, agent_unix_set, agent_tcp_port): the agent's start and stop,
 *     with the GIL held and the heartbeat thread not running;
 *   - the collective slots: the training threads with the GIL (pb_job_coll_enter) and Work
 *     callbacks (pb_job_coll_exit_at); read without a lock by the server thread (a per-slot
 *     version makes the read consistent); the arrival rings under their own mutex;
 *   - the registry (registered, store, the keys, the rank's numbers): registration and stop,
 *     with the GIL held; the server thread only reads them once registered is set;
 *   - the fields marked "under mu": the job thread ("probing-job") and the server thread, which
 *     asks it for a roster or a flight recorder reading and waits on cv;
 *   - rank_registered: atomic, read by any thread;
 *   - host: filled on first use by pb_job_host (job.c), from whichever thread asks first.
 * pb_job_reset (job.c) is the one reset, at agent start (after a detach) and in a forked child.
 *
 * Include job.h first (PB_JOB_ARRIVALS): this header does not, so that the job unit (job.c,
 * job.h) depends on it and not the other way round (scripts/depcheck.py).
 */
#ifndef PB_AGENT_JOB_STATE_H
#define PB_AGENT_JOB_STATE_H

#include <Python.h>

#include "buf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#ifndef PB_AGENT_JOB_H
#error "include job.h before job_state.h"
#endif

#define PB_JOB_MAX_GROUPS 16

enum { COLL_NONE, COLL_ENTERED, COLL_COMPLETED, COLL_FAILED };

typedef struct coll_slot {
    PyObject *group;          /* strong ref; NULL for the default group [GIL held] */
    _Atomic uint32_t version; /* odd while being written */
    _Atomic uint32_t name_id; /* interned group name; 0: slot unused */
    _Atomic uint64_t seq;
    _Atomic uint32_t op_id;
    _Atomic int state;
    _Atomic int64_t bytes;
    _Atomic int64_t enter_wall_ns, enter_mono_ns, exit_mono_ns;
} coll_slot;

/* Per slot, the last PB_JOB_ARRIVALS calls (entry seq % PB_JOB_ARRIVALS): stragglers' input.
 * Written under the GIL (enter) or from a Work's future callback (exit), read by the HTTP
 * thread: one mutex per ring, held for a few stores or one copy. */
typedef struct arrival {
    uint64_t seq; /* 0: empty */
    uint32_t op_id;
    int64_t bytes, enter_wall_ns, enter_mono_ns, exit_mono_ns; /* exit 0: not completed */
} arrival;
struct arrival_ring {
    pthread_mutex_t mu;
    arrival e[PB_JOB_ARRIVALS];
};

typedef struct pb_job_state {
    /* Where this agent listens (pb_job_set_endpoint): what its registry entry advertises. */
    char agent_unix[512];
    int agent_unix_set, agent_tcp_port;
    char agent_id[40]; /* the TCP agent id (common/auth.h), "" without TCP */

    /* Collective state. */
    coll_slot slots[PB_JOB_MAX_GROUPS];
    struct arrival_ring rings[PB_JOB_MAX_GROUPS];
    _Atomic int nslots;
    PyObject *default_group; /* the default process group object, to call it WORLD */

    /* Registry state. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int registered;         /* [GIL held] */
    int thread_running;     /* under mu */
    int stop_requested;     /* under mu */
    int roster_wanted;      /* under mu */
    uint64_t roster_gen;    /* under mu: bumped after each roster read */
    int64_t roster_read_ns; /* under mu */
    pb_buf roster;          /* under mu: ",\"...\"" items of the "ranks" array */
    pb_buf missing;         /* under mu: "1,5" */
    int fr_wanted;          /* under mu: /api/rank asks for a flight recorder reading */
    uint64_t fr_gen;        /* under mu: bumped after each reading */
    int64_t fr_read_ns;     /* under mu */
    pb_buf fr_groups;       /* under mu: the "groups" array's items of the last reading */
    char job_id[256];
    char key_prefix[320];
    char self_key[340];
    int world, my_rank, local_rank, node_rank;
    _Atomic int rank_registered; /* my_rank while registered, else -1 [any thread] */
    pid_t registered_pid;
    double started_unix;
    PyObject *store; /* strong ref, used by the thread with the GIL */
    char host[256];
    char tcp_addr[300];
} pb_job_state;

extern pb_job_state pb_job; /* defined in job.c */

/* The integer in environment variable name, deflt when unset or empty. [any thread] */
static inline int pb_job_env_int(const char *name, int deflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : deflt;
}

#endif
