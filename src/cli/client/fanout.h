/*
 * fanout.h - one request to many agents at once, and the roster of a job.
 *
 * pb_fanout_run sends the same kind of request to N targets through one libcurl multi handle,
 * at most `parallel` at a time, and stops waiting at a deadline: a rank that does not answer
 * in time gets a reason ("did not answer within 3 s") and the others' answers are kept. Each
 * request records the wall-clock times it was sent and answered, for the clock offset of a
 * rank (pb_fanout_clock_offset: the smallest correction its answer allows).
 *
 * pb_fanout_roster asks one agent for its job's roster (GET /api/job) and turns each rank's
 * entry into a target: the Unix socket when the rank is on this host (PROBING_HOST or
 * gethostname() equal to the entry's host), else its TCP address (host:port only, never a path)
 * signed with the job's token (--token, PROBING_TOKEN, PROBING_TOKEN_FILE) for that rank;
 * ranks without either keep a reason. The store has no authentication, so every request gets
 * the checks of a typed target (client.h pb_client_guard) and an endpoint that fails them is
 * marked forged (pb_fanout_req.forged). See docs/cluster.md and docs/security.md.
 * See docs/cluster.md.
 */
#ifndef PB_CLI_FANOUT_H
#define PB_CLI_FANOUT_H

#include "client/target.h"

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#define PB_FANOUT_PARALLEL 64      /* requests in flight at once */
#define PB_FANOUT_DEADLINE_MS 5000L /* default --deadline */

typedef struct pb_fanout_req {
    /* in */
    pb_target target;
    int usable;          /* 0: not sent (err says why) */
    size_t max_answer_bytes; /* a longer answer is refused (err says so); 0: PB_CLIENT_MAX_BODY */
    /* out */
    long status;         /* HTTP status, 0 when no answer */
    json_t *root;        /* the answer's JSON object (owned), NULL when none */
    char err[512];       /* why there is no answer */
    int forged;          /* the endpoint failed the checks of a rank of this job (err starts
                          * "forged roster entry: "): a Unix socket of another uid or pid, or a
                          * TCP endpoint that did not sign its answer with the job's token */
    double sent, answered; /* wall clock, seconds */
    int file_done;       /* internal: a recording, answered before the network requests */
} pb_fanout_req;

/* Sends method path (body: borrowed JSON text or NULL) to every usable request, waiting at most
 * deadline_ms in all. Fills status/root/err of each. Returns 0, or -ENOMEM when libcurl could
 * not start (err of each says so). [main thread] */
int pb_fanout_run(pb_fanout_req *reqs, int n, const char *method, const char *path,
                  const char *body, long deadline_ms);

/* The offset of the clock of the rank that answered r (its clock minus ours, seconds), given
 * the clock reading `now` in its answer, and in *uncertainty how far it may be off. The rank
 * read its clock between r->sent and r->answered (our clock), so its offset lies in
 * [now - answered, now - sent]. The midpoint of that interval (Cristian's estimate) assumes the
 * request and the answer took the same time; they do not when the rank is busy or throttled
 * (its agent waits for a CPU before it reads the clock), which moved a CPU-throttled node's
 * clock tens of milliseconds. So the estimate is the smallest correction the interval allows:
 * 0 when it holds 0 (the system clocks agree within what one round trip can tell, which they
 * do on one machine and, under NTP or PTP, across a cluster's nodes), else its end nearest 0.
 * *uncertainty is the interval's width (answered - sent). */
double pb_fanout_clock_offset(const pb_fanout_req *r, double now, double *uncertainty);

/* Frees the answers of n requests (not the array). */
void pb_fanout_free(pb_fanout_req *reqs, int n);

/* A command's --deadline in milliseconds: deadline_s seconds, or PB_FANOUT_DEADLINE_MS when it
 * is 0 (not given). */
long pb_fanout_deadline_ms(double deadline_s);

/* One rank of the roster. */
typedef struct pb_rank_ep {
    int rank;
    int registered;      /* has an entry in the store */
    char host[256];
    int pid, local_rank, node_rank;
    double heartbeat;    /* wall clock of its last heartbeat, 0 when none */
    char via[16];        /* "unix", "tcp", "file" (a recording) or "" */
    char why[256];       /* when via is "": why it cannot be reached */
    pb_target target;    /* valid when via is set */
} pb_rank_ep;

/* Whether ep can be asked (1/0): through its Unix socket, its recording, or TCP with a token. */
int pb_fanout_reachable(const pb_rank_ep *ep);

/* Prepares req to ask ep: its target and usable = 1 when reachable, else usable = 0 and err
 * saying why (ep->why). Returns usable. */
int pb_fanout_prepare(pb_fanout_req *req, const pb_rank_ep *ep);

/* Requests for the ranks of the roster eps[0..n-1] selected in sel (every rank when sel is
 * NULL), each prepared by pb_fanout_prepare; the others are not sent. Returns an array of n
 * (caller frees with pb_fanout_free, then free), or NULL after printing "out of memory". */
pb_fanout_req *pb_fanout_requests(const pb_rank_ep *eps, int n, const unsigned char *sel);

/* The roster of the job t belongs to, ranks 0..world-1 in order (*out malloc'ed, caller frees;
 * *n = world). A process outside a distributed job gives a roster of itself (world 1). On
 * failure prints why ("probing: ...") and returns PB_EXIT_ERROR. [main thread] */
int pb_fanout_roster(const pb_target *t, long deadline_ms, pb_rank_ep **out, int *n);

/* Parses "all", "3", "0,2-5" into sel[0..n-1] (1 = selected). Returns 0, or prints why and
 * returns PB_EXIT_USAGE. */
int pb_fanout_parse_ranks(const char *spec, int n, unsigned char *sel);

/* This host's name as the roster means it (PROBING_HOST, else gethostname()). */
const char *pb_fanout_local_host(void);

/* Another agent on this machine that is a rank of the same job (pb_fanout_local_ranks). */
typedef struct pb_local_rank {
    pb_target target; /* its Unix socket */
    pid_t pid;
    int rank;
} pb_local_rank;

/* The other ranks of a job among this user's agents on this machine, for when the job has no
 * roster to ask (`report` and `ui` of a live rank): every live agent in the socket directory
 * dir but the one of pid my_pid is asked GET /api/info (PB_CLI_LIST_TIMEOUT_MS each), and one
 * that names the same job and world size and an integer rank other than my_rank and the ranks
 * already found is kept, in the directory's (pid) order. Returns how many, with *out malloc'ed
 * (caller frees; NULL when none), or a negative errno (dir cannot be read, out of memory).
 * Borrows dir and job. [main thread] */
int pb_fanout_local_ranks(const char *dir, const char *job, long long world, long long my_rank,
                          pid_t my_pid, pb_local_rank **out);

#endif
