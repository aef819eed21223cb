/*
 * client.h - one HTTP request to an agent, and the checks every command makes on the answer.
 *
 * libcurl over a Unix socket (CURLOPT_UNIX_SOCKET_PATH) or TCP; proxies are never used. A
 * response body is kept in memory up to PB_CLIENT_MAX_BODY. Transport failures become a message
 * a user can act on ("process 12345 has exited", "connection refused by host:port", ...).
 * The caller must have called curl_global_init() (main.c does).
 */
#ifndef PB_CLI_CLIENT_H
#define PB_CLI_CLIENT_H

#include "auth.h"
#include "buf.h"
#include "client/response.h"
#include "client/target.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stddef.h>

#define PB_CLIENT_MAX_BODY ((size_t)1 << 30) /* 1 GiB */


/* Checks the process at the other end of the connected Unix socket fd (SO_PEERCRED): it must
 * run as our effective uid or as root, and be expected_pid when that is > 0. Returns 0, or
 * -EACCES (another uid, another pid) or getsockopt's negative errno, with a message for the
 * user in why (path names the socket in it). [any thread] */
int pb_client_check_peer(int fd, pid_t expected_pid, const char *path, char *why, size_t whylen);

/* What one request to a target must show before and after it is sent (one copy for client.c
 * and fanout.c): on a Unix socket, the socket directory is ours and the peer runs as our uid
 * (and is the target's pid when known), checked on the connected socket before a byte goes out;
 * over TCP, the request is signed with the token (common/auth.h: the token itself is never
 * sent) and the answer must come back signed with it. */
typedef struct pb_client_guard {
    const pb_target *target;
    int fd;                     /* Unix: the socket libcurl connects, or -1 */
    char refused[768];          /* Unix: non-empty when the peer check refused, and why */
    int signed_request;         /* TCP: 1 when the request carries a signature */
    char authorization[PB_AUTH_HEADER_MAX + 32]; /* "Authorization: ..." */
    char nonce[PB_AUTH_NONCE_HEX + 1];
    char signature[PB_AUTH_HASH_HEX + 1]; /* the answer's PB_AUTH_ANSWER_HEADER, "" none */
    char answered_by[PB_AUTH_AGENT_HEX + 24]; /* the answer's PB_AUTH_AGENT_HEADER, "" none */
    char agent[PB_AUTH_AGENT_HEX + 1]; /* TCP: the agent that answered (as its signature proves) */
    int agent_rank;                    /* ... and its rank */
} pb_client_guard;

/* Prepares g for one request of method path with body (NULL: none) to t (borrowed; g keeps t):
 * checks what can be checked before connecting (the socket directory), signs a TCP request when
 * t has a token (for t's agent_id and rank; a target whose agent is not known yet can only ask
 * GET PB_AUTH_IDENTITY_PATH, which pb_client_request does first), and installs on h the Unix
 * peer check and the answer's header callback. Adds the Authorization header to *headers. Returns 0, or a negative error.h code (the socket
 * directory's, from pb_paths_check_dir; the signer's; -ENOMEM) with why in err. */
int pb_client_guard_setup(pb_client_guard *g, const pb_target *t, CURL *h, const char *method,
                          const char *path, const char *body, struct curl_slist **headers,
                          char *err, size_t errlen);

/* After the transfer (a predicate): 1 when the answer (status, body[0..len)) may be used: any
 * answer on a Unix socket (its peer was checked), a TCP answer signed with the token by the
 * agent it was signed for (t's agent_id and rank; for the identity request, by the agent and
 * rank its PB_AUTH_AGENT_HEADER names, which g->agent and g->agent_rank then hold), or a TCP 401
 * (the agent's refusal, which it cannot sign; nothing in it is trusted). Else 0 with why in
 * err. */
int pb_client_guard_answer(pb_client_guard *g, long status, const char *body, size_t len,
                           char *err, size_t errlen);

/* Sends method path (e.g. "GET", "/api/info") with an optional JSON body (borrowed, may be
 * NULL) to t, waiting at most timeout_ms for the whole exchange. To a TCP target whose agent is
 * not known (a typed host:port), it first asks GET PB_AUTH_IDENTITY_PATH, whose signed answer
 * proves which agent (id and rank) listens there, and signs the request for that agent only;
 * when that first answer is not a 200 (a 401: wrong token), it is the one returned. Returns 0 when an HTTP
 * response arrived, whatever its status; resp->body then holds it (the caller frees it). On
 * failure returns a negative error.h code (-ECONNREFUSED, -ENOENT, -ESRCH the process exited,
 * PB_ESTOPPED the process is stopped, PB_ECANCELLED (pb_client_set_cancel), -ECONNRESET closed without answering, -EACCES peer or
 * answer refused, PB_ETIMEOUT, PB_ETOOBIG, -ENOMEM, -EPROTO not HTTP, -EIO otherwise, ...) with
 * a message (no "probing: " prefix) in err and resp->body empty. Callers test it against 0 only. */
int pb_client_request(const pb_target *t, const char *method, const char *path,
                      const char *body, long timeout_ms, pb_response *resp, char *err,
                      size_t errlen);

/* A request to a local process (a Unix target whose pid is known) that is stopped (state T or
 * t, target.h) for PB_CLI_STOPPED_FOR_MS ends with PB_ESTOPPED and "process N is stopped (state
 * T: ...)" instead of waiting for its timeout. on=0 turns that off for this process (the
 * exporter, whose scrape deadline already bounds a stopped rank). [before any request] */
void pb_client_watch_stopped(int on);

/* Sets a check that every request makes about once a second while it waits (NULL: none): when it
 * returns non-zero the request ends with PB_ECANCELLED ("the request was cancelled"). The MCP
 * server's (mcp/stdio.h): its client cancelled the request or went away. [before any request] */
void pb_client_set_cancel(int (*cancelled)(void));

/* The exit status of a command that returns rc: PB_EXIT_STOPPED when rc is PB_EXIT_ERROR and a
 * request of this run ended because its process was stopped, else rc. [main thread] */
int pb_client_exit_status(int rc);

/* pb_client_request() plus decoding: the request body is request (borrowed, may be NULL); on
 * success *root receives the response's JSON object (caller owns it, json_decref) and *status
 * the HTTP status, whatever it is. On failure prints the error ("probing: ...") and returns
 * PB_EXIT_ERROR; *root is then NULL. */
int pb_client_call(const pb_target *t, const char *method, const char *path, json_t *request,
                   long timeout_ms, json_t **root, long *status);

/* pb_client_call() for a request whose only good answer is 200 OK: returns its JSON object
 * (caller owns), or NULL after printing why (the connection's error, or the agent's for any
 * other status). request is borrowed and may be NULL. */
json_t *pb_client_call_ok(const pb_target *t, const char *method, const char *path,
                          json_t *request, long timeout_ms);

/* Runs sql (borrowed) on t through POST /api/query, waiting at most timeout_ms, for the report
 * library (pb_report_query_fn's contract): on success *rows receives an array of row objects
 * keyed by column name (caller owns) and 0 is returned; on failure a negative error.h code
 * (pb_client_request's, -ENOMEM, -EPROTO for an answer that is not a result, PB_ESQL when
 * the agent refused the statement) with *error (caller frees) saying why. Prints nothing.
 * [any thread] */
int pb_client_query_objects(const pb_target *t, const char *sql, long timeout_ms, json_t **rows,
                            char **error);

/* GET path of t, quietly: the answer's JSON object when it came with status 200 (caller owns),
 * else NULL. [any thread] */
json_t *pb_client_get_object(const pb_target *t, const char *path, long timeout_ms);

/* Prints the error of a non-200 answer: its "error" field, or a generic line naming the status
 * when there is none. root is borrowed. */
void pb_client_print_error(long status, json_t *root);

/* GET /api/tables of t: the answer (caller owns), whose "tables" is an array (tables.md), or NULL
 * after printing why. [main thread] */
json_t *pb_client_tables(const pb_target *t);

/* Rows per request of pb_client_query_rows(). */
#define PB_CLIENT_PAGE_ROWS 100000

/* Runs the read-only query sql (borrowed; a SELECT that may be wrapped as a subquery) on t,
 * fetching its rows in pages of PB_CLIENT_PAGE_ROWS (LIMIT/OFFSET) so that a record of millions
 * of rows stays under the agent's answer limit. sql should ORDER BY so pages do not overlap.
 * On success *rows is an array of row arrays (caller owns) and 0 is returned; on failure the
 * error is printed ("probing: ...") and PB_EXIT_ERROR returned. [main thread] */
int pb_client_query_rows(const pb_target *t, const char *sql, json_t **rows);

#endif
