/*
 * server.c - the transport: listeners, libmicrohttpd daemons, who may ask; see server.h.
 *
 * We create the listening sockets ourselves (to own the Unix socket file's life: stale-file
 * check, mode 0600, unlink on stop) and hand them to MHD with MHD_OPTION_LISTEN_SOCKET; one
 * daemon per listener. MHD calls on_request() several times per request: first with the
 * headers (peer uid check, Content-Length check), then with body chunks (collected into a
 * pb_buf), then once more with no data, when routes.c computes the answer.
 *
 * This file calls down into routes.c (what a path does) and pool.c (SQL connections and query
 * admission, which it creates, stops and is told about when an answer has been sent); neither
 * calls back: the routes get the agent's callbacks, the limits and the pool in a
 * pb__routes_env made once here, and each request's "should it stop now?" as a callback.
 */
#include "server.h"

#include "auth.h"
#include "config.h"
#include "error.h"
#include "http.h"
#include "log.h"
#include "netaddr.h"
#include "nonces.h"
#include "pool.h"
#include "reaper.h"
#include "routes.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CONNECTION_IDLE_TIMEOUT 10 /* seconds a connection may send nothing (keep-alive, slow or
                                      * stuck clients); a running handler is not idle */
#define CONNECTION_SPARE 8          /* connections over max_connections still answered (503) */
#define TCP_PER_PEER 8              /* TCP connections one address may hold (slowloris) */

typedef struct listener {
    pb_server *server;
    int is_unix; /* peer uid is checked on Unix sockets only */
    _Atomic int open_connections;
    int fd;      /* listening socket; MHD closes it on stop */
    struct MHD_Daemon *daemon;
} listener;

struct pb_server {
    pb_server_opts opts; /* unix_path and tcp_listen point to the copies below */
    char *unix_path;
    char *tcp_listen;
    dev_t unix_dev;      /* identity of the socket file we created */
    ino_t unix_ino;
    int tcp_port;
    char token[PB_SERVER_TOKEN_MAX + 1]; /* required on TCP; "" without TCP */
    int tcp_eval;                        /* 1: /api/eval is served on TCP too */
    char *token_path;                    /* the token file we wrote, or NULL */
    dev_t token_dev;
    ino_t token_ino;
    int rank;                            /* RANK (0 when unset): a signed request names it, when
                                          * opts.self_rank does not know the job's rank */
    char agent_id[PB_AUTH_AGENT_HEX + 1]; /* drawn at start (TCP): a signed request names it */
    /* The nonce of every signed request served whose time is within the window (auth.h): one
     * served once is refused the next time, so one that was overheard cannot be replayed. */
    pb__nonces *nonces;
    listener unix_l, tcp_l;
    pb__pool *pool;            /* SQL connections, query slots and the result budget */
    pb__routes_env routes;     /* what the routes get: opts' callbacks and limits, the pool */
    int nice;                  /* PROBING_SERVER_NICE: added to server threads' nice value */
    double request_deadline_s; /* PROBING_REQUEST_DEADLINE: whole request, headers to body */
    _Atomic int stopping;
    pb_reaper *reaper;         /* closes connections whose request is late (reaper.h) */
    int forgotten; /* set in a forked child: the object must not be touched again */
};

typedef struct request_state {
    pb_buf body;
    int too_big;
    int out_of_memory;
    int detach_after; /* a 200 answer to POST /api/detach: detach once it has been sent */
    pb_server *server;
    int fd;                 /* the connection's socket, polled for a client that left */
    size_t results_reserved; /* bytes of the result budget this request holds (pool.c) */
    int signed_request;      /* 1: TCP with a valid HMAC header (auth.h): the answer is signed */
    pb_auth_request auth;    /* that header */
    int rank;                /* the rank the request was checked against (the answer names it) */
} request_state;

/* ---- peer credentials ---- */

int pb_server_peer_allowed(uid_t peer, uid_t self) { return peer == self || peer == 0; }

int pb_server_peer_uid(int fd, uid_t *out)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -errno;
    *out = cred.uid;
    return 0;
}

/* ---- listeners ---- */

/* Removes a socket file nobody listens on. Returns 0 (gone or removed), -EADDRINUSE (someone
 * answers), -EEXIST (not a socket: not ours to delete) or a negative errno. */
static int remove_stale_socket(const struct sockaddr_un *addr)
{
    struct stat st;
    if (lstat(addr->sun_path, &st) != 0) return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode)) return -EEXIST;
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0) return -errno;
    int connected = connect(probe, (const struct sockaddr *)addr, sizeof *addr) == 0;
    int err = errno;
    close(probe);
    if (connected || err != ECONNREFUSED) return err == ENOENT ? 0 : -EADDRINUSE;
    if (unlink(addr->sun_path) != 0 && errno != ENOENT) return -errno;
    return 0;
}

static int listen_unix(pb_server *s, const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int rc, fd = -1;
    if (strlen(path) >= sizeof addr.sun_path) return -ENAMETOOLONG;
    strcpy(addr.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        rc = -errno;
        if (rc != -EADDRINUSE) goto fail;
        if ((rc = remove_stale_socket(&addr))) goto fail;
        if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
            rc = -errno;
            goto fail;
        }
    }
    struct stat st;
    if (chmod(path, 0600) != 0 || stat(path, &st) != 0 || listen(fd, 128) != 0) {
        rc = -errno;
        unlink(path);
        goto fail;
    }
    s->unix_dev = st.st_dev;
    s->unix_ino = st.st_ino;
    s->unix_l.fd = fd;
    return 0;
fail:
    close(fd);
    return rc;
}

static int listen_tcp(pb_server *s, const char *spec)
{
    pb_netaddr addr;
    struct sockaddr_storage bound;
    int gai = 0;
    if (pb_netaddr_parse(spec, &addr)) return -EINVAL;
    int fd = pb_netaddr_listen(&addr, 128, 0, &bound, &gai);
    if (fd < 0) return gai == EAI_MEMORY ? -ENOMEM : fd;
    s->tcp_port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
    s->tcp_l.fd = fd;
    return 0;
}

/* ---- requests ---- */

static void request_read(pb_server *s, struct MHD_Connection *conn);

/* Why the request req_ctx (a request_state) should stop now: PB_DB_CANCEL_EXITING (the server
 * is stopping), PB_DB_CANCEL_CLIENT_GONE (the client closed its connection) or 0. The routes
 * get it as the request's pb_db_cancel_fn. [server thread] */
static int request_cancelled(void *req_ctx)
{
    request_state *r = req_ctx;
    if (atomic_load(&r->server->stopping)) return PB_DB_CANCEL_EXITING;
    if (r->fd < 0) return 0;
    struct pollfd p = {.fd = r->fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return PB_DB_CANCEL_CLIENT_GONE;
    return 0;
}

/* Server threads run below the job's threads: nice + s->nice (setpriority on the thread; only
 * ever raised, which needs no privilege), once per thread. [server thread] */
static void lower_priority(pb_server *s)
{
    static _Thread_local int done;
    if (done || s->nice <= 0) return;
    done = 1;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int now = getpriority(PRIO_PROCESS, (id_t)tid);
    if (errno == 0 && now < 19) setpriority(PRIO_PROCESS, (id_t)tid, now + s->nice > 19 ? 19 : now + s->nice);
}

/* Queues body (taken) as the answer. request: a signed request's state, whose answer then
 * carries PB_AUTH_ANSWER_HEADER (auth.h), or NULL. */
static enum MHD_Result respond_signed(struct MHD_Connection *conn, int status, pb_buf *body,
                                      const char *allow, const request_state *request)
{
    static const char oom[] = "{\"error\":\"out of memory\"}";
    const char *const headers[] = {MHD_HTTP_HEADER_CACHE_CONTROL, "no-store",
                                   MHD_HTTP_HEADER_ALLOW, allow, NULL};
    struct MHD_Response *resp = NULL;
    size_t len = 0;
    char *data = pb_buf_steal(body, &len);
    if (data)
        resp = pb_http_response(data, len, MHD_RESPMEM_MUST_FREE, "application/json", headers);
    if (!resp) { /* data, if any, was freed */
        data = (char *)oom;
        len = sizeof oom - 1;
        status = 500;
        resp = pb_http_response((void *)oom, sizeof oom - 1, MHD_RESPMEM_PERSISTENT,
                                "application/json", headers);
        if (!resp) return MHD_NO;
    }
    char signature[PB_AUTH_HASH_HEX + 1], agent[PB_AUTH_AGENT_HEX + 24];
    const pb_server *s = request ? request->server : NULL;
    if (request && request->signed_request &&
        pb_auth_sign_answer(s->token, s->agent_id, request->rank, request->auth.nonce, status, data,
                            len, signature) == 0) {
        snprintf(agent, sizeof agent, "%s %d", s->agent_id, request->rank);
        MHD_add_response_header(resp, PB_AUTH_AGENT_HEADER, agent);
        MHD_add_response_header(resp, PB_AUTH_ANSWER_HEADER, signature);
    }
    return pb_http_queue(conn, (unsigned)status, resp);
}

static enum MHD_Result respond_error(struct MHD_Connection *conn, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum MHD_Result respond_error(struct MHD_Connection *conn, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pb_buf out = PB_BUF_INIT;
    pb_api_error(&out, status, "%s", msg);
    return respond_signed(conn, status, &out, NULL, NULL);
}

/* respond_error() for a request whose headers were accepted: its answer is signed when the
 * request was (the CLI uses no unsigned answer to a signed request). */
static enum MHD_Result respond_request_error(struct MHD_Connection *conn, const request_state *r,
                                             int status, const char *msg)
{
    pb_buf out = PB_BUF_INIT;
    pb_api_error(&out, status, "%s", msg);
    return respond_signed(conn, status, &out, NULL, r);
}

/* The rank this agent is now: the job's, else RANK (auth.h). [server thread] */
static int server_rank(pb_server *s)
{
    int self = s->opts.self_rank ? s->opts.self_rank(s->opts.ctx) : -1;
    return self < 0 ? s->rank : self;
}

/* Whether a TCP request proves it holds our token: a valid "Probing-HMAC-SHA256" header for its
 * method and path (its body is checked once read), within PB_AUTH_WINDOW_S of our clock, meant
 * for this agent (its id and rank; only GET PB_AUTH_IDENTITY_PATH may name no agent), with a
 * nonce not served within the window (r stores it, so that the answer is signed); or, for curl
 * and scripts, "Bearer <our token>" (answered unsigned). Returns 0; 401 with why; or 503 with
 * why when the request is good but the nonce store is full (r->signed_request is then set: the
 * refusal is signed, so that the CLI shows it). */
static int authorized(pb_server *s, struct MHD_Connection *conn, const char *method,
                      const char *url, request_state *r, char *why, size_t whylen)
{
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    snprintf(why, whylen, "this agent's TCP endpoint needs proof of its token: the probing CLI "
             "signs each request with it (--token, PROBING_TOKEN, PROBING_TOKEN_FILE or the token "
             "file in the agent's socket directory when it may read it); curl may send "
             "'Authorization: Bearer <token>'");
    if (!auth) return 401;
    if (strncasecmp(auth, "Bearer ", 7) == 0) {
        auth += 7;
        while (*auth == ' ') auth++;
        size_t len = strlen(auth);
        while (len && auth[len - 1] == ' ') len--;
        return pb_auth_token_equal(auth, len, s->token) ? 0 : 401;
    }
    int parsed = pb_auth_parse(auth, &r->auth);
    if (parsed == -EPROTO) {
        snprintf(why, whylen, "the request is signed in the form of an older probing "
                 "(probing-request-v1), which binds it to no one agent, so that it could be "
                 "replayed to every agent that has the token; this agent serves only requests "
                 "signed for it: use a probing CLI of version " PB_VERSION " or newer");
        return 401;
    }
    if (parsed != 0) return 401;
    if (!pb_auth_verify_request(s->token, &r->auth, method, url)) {
        snprintf(why, whylen, "the request is not signed with this agent's token (the token "
                 "given to probing is not the one this process was started with)");
        return 401;
    }
    int64_t now = (int64_t)time(NULL), skew = now - r->auth.time_s;
    if (skew > PB_AUTH_WINDOW_S || skew < -PB_AUTH_WINDOW_S) {
        snprintf(why, whylen, "the request was signed %lld s %s this agent's clock (at most %d s "
                 "apart are accepted): set the clocks of the two machines right",
                 (long long)(skew < 0 ? -skew : skew), skew < 0 ? "ahead of" : "behind",
                 PB_AUTH_WINDOW_S);
        return 401;
    }
    int self = server_rank(s);
    if (!r->auth.agent[0]) {
        if (strcmp(method, "GET") != 0 || strcmp(url, PB_AUTH_IDENTITY_PATH) != 0) {
            snprintf(why, whylen, "the request names no agent: only GET " PB_AUTH_IDENTITY_PATH
                     " may (it tells which agent this is); a request must be signed for the one "
                     "agent that serves it");
            return 401;
        }
    } else if (strcmp(r->auth.agent, s->agent_id) != 0 || r->auth.rank < 0) {
        snprintf(why, whylen, "the request was signed for another agent (%.8s..., rank %d) and "
                 "this is agent %.8s..., rank %d: it is not served here (a request is bound to the "
                 "one agent it was signed for; an agent that restarted has a new id)",
                 r->auth.agent, r->auth.rank, s->agent_id, self);
        return 401;
    }
    if (r->auth.rank >= 0 && r->auth.rank != self) {
        snprintf(why, whylen, "the request is meant for rank %d and this agent is rank %d: the "
                 "job's roster names the wrong endpoint for rank %d", r->auth.rank, self,
                 r->auth.rank);
        return 401;
    }
    int64_t retry = 0;
    int seen = pb__nonces_add(s->nonces, r->auth.nonce, r->auth.time_s + PB_AUTH_WINDOW_S, now,
                              &retry);
    if (seen == -EEXIST) {
        snprintf(why, whylen, "this signed request was already served once (a replay)");
        return 401;
    }
    r->rank = self;
    r->signed_request = 1;
    if (seen == -ENOSPC) {
        snprintf(why, whylen, "busy: this agent has served %d signed requests in the last %d s, "
                 "as many as it remembers; it refuses more rather than forget one (a forgotten "
                 "request could be replayed); this one was not served, try again in %lld s",
                 PB__NONCES_DEFAULT, PB_AUTH_WINDOW_S, (long long)retry);
        return 503;
    }
    return seen == 0 ? 0 : 401;
}

/* First call for a request: may answer at once (401, 403, 413) before any body is read.
 * Returns 1 when it did. */
static int check_request_start(listener *l, struct MHD_Connection *conn, const char *method,
                               const char *url, request_state *r, enum MHD_Result *ret)
{
    pb_server *s = l->server;
    /* TCP: the token first, so that every later answer, 503 included, is signed (auth.h) */
    char why[400];
    int refused = l->is_unix ? 0 : authorized(s, conn, method, url, r, why, sizeof why);
    if (refused == 503) {
        *ret = respond_request_error(conn, r, 503, why);
        return 1;
    }
    if (refused) {
        *ret = respond_error(conn, 401, "unauthorized: %s", why);
        return 1;
    }
    int open_now = atomic_load(&l->open_connections);
    if (open_now > s->opts.max_connections) {
        char msg[200];
        snprintf(msg, sizeof msg, "too many connections: this agent serves at most %d at once "
                 "and %d are open; try again when some have finished",
                 s->opts.max_connections, open_now - 1);
        *ret = respond_request_error(conn, r, 503, msg);
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 1u);
        return 1;
    }
    if (!l->is_unix) {
        if (!s->tcp_eval && strcmp(url, "/api/eval") == 0) {
            *ret = respond_request_error(conn, r, 403,
                                 "eval over TCP is off: it runs code in the process; use the Unix "
                                 "socket (probing <pid> eval ...), or start the process with "
                                 "PROBING_TCP_EVAL=1 to allow it");
            return 1;
        }
        if (strcmp(url, "/api/record") == 0 || strncmp(url, "/api/record/", 12) == 0) {
            *ret = respond_request_error(conn, r, 403,
                                 "record is refused over TCP: the agent would write a file on its "
                                 "own machine that a network client names; run probing on that "
                                 "machine");
            return 1;
        }
    }
    if (l->is_unix) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        uid_t peer = (uid_t)-1, self = geteuid();
        if (!ci || pb_server_peer_uid(ci->connect_fd, &peer) != 0 || !pb_server_peer_allowed(peer, self)) {
            *ret = respond_error(conn, 403,
                                 "permission denied: this agent serves uid %u (and root) only; "
                                 "the connecting process runs as uid %d",
                                 (unsigned)self, peer == (uid_t)-1 ? -1 : (int)peer);
            return 1;
        }
    }
    const char *length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (length && strtoull(length, NULL, 10) > s->opts.max_request_bytes) {
        char msg[160];
        snprintf(msg, sizeof msg, "request body too large: %.24s bytes, the limit is %zu bytes",
                 length, s->opts.max_request_bytes);
        *ret = respond_request_error(conn, r, 413, msg);
        return 1;
    }
    return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    listener *l = cls;
    pb_server *s = l->server;
    request_state *r = *req_cls;
    if (!r) {
        lower_priority(s);
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        *req_cls = r;
        r->server = s;
        r->fd = -1;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) r->fd = ci->connect_fd;
        enum MHD_Result ret;
        if (check_request_start(l, conn, method, url, r, &ret)) {
            request_read(s, conn);
            return ret;
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!r->too_big && !r->out_of_memory) {
            if (r->body.len + *upload_data_size > s->opts.max_request_bytes) {
                r->too_big = 1;
                pb_buf_free(&r->body);
            } else if (pb_buf_append(&r->body, upload_data, *upload_data_size) != 0) {
                r->out_of_memory = 1;
                pb_buf_free(&r->body);
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    request_read(s, conn);
    if (r->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "request body too large: the limit is %zu bytes",
                 s->opts.max_request_bytes);
        return respond_request_error(conn, r, 413, msg);
    }
    if (r->out_of_memory)
        return respond_request_error(conn, r, 500, "out of memory while reading the request");
    if (r->signed_request && !pb_auth_body_matches(&r->auth, r->body.data, r->body.len)) {
        r->signed_request = 0; /* whoever changed the body gets no signed answer */
        return respond_error(conn, 401, "unauthorized: the request's body is not the one its "
                             "signature was made for");
    }
    pb_buf out = PB_BUF_INIT;
    const char *allow = NULL;
    if (!l->is_unix && strcmp(url, PB_AUTH_IDENTITY_PATH) == 0) { /* the transport's own */
        int ok = strcmp(method, "GET") == 0;
        if (ok)
            pb_buf_printf(&out, "{\"agent\":\"%s\",\"rank\":%d}", s->agent_id, server_rank(s));
        else
            pb_api_error(&out, 405, "method %s not allowed for %s (use GET)", method, url);
        return respond_signed(conn, ok ? 200 : 405, &out, ok ? NULL : "GET", r);
    }
    pb__routes_request req = {.method = method, .path = url, .body = r->body.data,
                              .body_len = r->body.len, .cancelled = request_cancelled,
                              .cancel_ctx = r, .results_reserved = &r->results_reserved};
    int status = pb__routes_answer(&s->routes, &req, &out, &allow);
    r->detach_after = status == 200 && strcmp(method, "POST") == 0 && strcmp(url, "/api/detach") == 0;
    return respond_signed(conn, status, &out, allow, r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode code)
{
    listener *l = cls;
    request_state *r = *req_cls;
    if (!r) return;
    /* The answer is out (or the client left): only now may the agent start going away. */
    if (r->detach_after && l && l->server->opts.detach) l->server->opts.detach(l->server->opts.ctx);
    if (l) pb__pool_results_sent(l->server->pool, &r->results_reserved);
    /* A keep-alive connection's next request gets a deadline of its own. */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (l) pb_reaper_next(l->server->reaper, ci ? ci->socket_context : NULL);
    pb_buf_free(&r->body);
    free(r);
    *req_cls = NULL;
}

/* Counts open connections, so that the one over the limit gets a 503 that says so instead of a
 * closed socket (MHD's own limit, CONNECTION_SPARE higher, only closes). [server thread] */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    listener *l = cls;
    pb_server *s = l->server;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&l->open_connections, 1);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? pb_reaper_open(s->reaper, ci->connect_fd) : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        atomic_fetch_sub(&l->open_connections, 1);
        pb_reaper_close(s->reaper, *socket_context);
        *socket_context = NULL;
    }
}

/* Called when a whole request has been read: the reaper leaves the connection alone while its
 * handler runs and its answer is sent. [server thread] */
static void request_read(pb_server *s, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    pb_reaper_read(s->reaper, ci ? ci->socket_context : NULL);
}

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    pb_log_debug("http: %s", msg);
}

static int start_daemon(pb_server *s, listener *l)
{
    l->server = s;
    l->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO | MHD_USE_ERROR_LOG,
        0, NULL, NULL, on_request, l,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)l->fd,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(s->opts.max_connections + CONNECTION_SPARE),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_IDLE_TIMEOUT,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
        /* On TCP one address may not take every slot before it authenticates (slowloris). */
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)(l->is_unix ? 0 : TCP_PER_PEER),
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, l,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, l,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,
        MHD_OPTION_END);
    return l->daemon ? 0 : PB_EINTERNAL;
}

/* ---- the TCP token ---- */

/* Writes "<token>\nport <port>\n" to the file beside the socket (<dir>/<pid>.token), mode 0600,
 * replacing a leftover file of the same name (pids are reused). Returns 0 or a negative errno. */
static int write_token_file(pb_server *s)
{
    size_t n = strlen(s->unix_path);
    if (n < 5 || strcmp(s->unix_path + n - 5, ".sock") != 0) return 0; /* no place for it */
    s->token_path = malloc(n + 2);
    if (!s->token_path) return -ENOMEM;
    memcpy(s->token_path, s->unix_path, n - 5);
    strcpy(s->token_path + n - 5, ".token");
    char text[128];
    int len = snprintf(text, sizeof text, "%s\nport %d\n", s->token, s->tcp_port);
    unlink(s->token_path);
    int fd = open(s->token_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat st;
    if (fd < 0) goto fail;
    if (write(fd, text, (size_t)len) != len || fstat(fd, &st) != 0) {
        int err = errno ? errno : EIO;
        close(fd);
        unlink(s->token_path);
        errno = err;
        goto fail;
    }
    close(fd);
    s->token_dev = st.st_dev;
    s->token_ino = st.st_ino;
    return 0;
fail:;
    int rc = -errno;
    free(s->token_path);
    s->token_path = NULL;
    return rc;
}

/* Takes the token from opts, else PROBING_TOKEN, else makes one and writes it to the token
 * file. Returns 0, PB_EBADTOKEN (a given token too long, too short or with spaces) or a negative
 * errno. */
static int setup_token(pb_server *s)
{
    const char *given = s->opts.token;
    if (!given || !*given) given = pb_config_str("PROBING_TOKEN");
    if (given && *given) {
        size_t len = strlen(given);
        if (len < PB_SERVER_TOKEN_MIN || len > PB_SERVER_TOKEN_MAX || strpbrk(given, " \t\r\n"))
            return PB_EBADTOKEN;
        memcpy(s->token, given, len + 1);
        return 0;
    }
    int rc = pb_auth_random_hex(s->token, 32); /* 64 hex digits */
    if (rc) return rc;
    return s->unix_path ? write_token_file(s) : 0;
}

/* ---- lifecycle ---- */

int pb_server_start(pb_server **out, const pb_server_opts *opts)
{
    int rc;
    *out = NULL;
    if (!opts->unix_path && !opts->tcp_listen) return -EINVAL;
    pb_server *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    s->unix_l.fd = s->tcp_l.fd = -1;
    if ((rc = pb__pool_new(&s->pool))) goto fail;
    s->nice = (int)pb_config_int("PROBING_SERVER_NICE", 19);
    s->request_deadline_s = pb_config_double("PROBING_REQUEST_DEADLINE", 10);
    if (s->request_deadline_s <= 0) s->request_deadline_s = 10;
    s->opts = *opts;
    s->unix_path = opts->unix_path ? strdup(opts->unix_path) : NULL;
    s->tcp_listen = opts->tcp_listen ? strdup(opts->tcp_listen) : NULL;
    if ((opts->unix_path && !s->unix_path) || (opts->tcp_listen && !s->tcp_listen)) {
        rc = -ENOMEM;
        goto fail;
    }
    s->opts.unix_path = s->unix_path;
    s->opts.tcp_listen = s->tcp_listen;
    if (s->opts.max_connections <= 0) s->opts.max_connections = 64;
    if (s->opts.max_request_bytes == 0) s->opts.max_request_bytes = 4u << 20;
    if (s->opts.limits.max_result_bytes == 0)
        s->opts.limits.max_result_bytes = (size_t)pb_config_int("PROBING_MAX_RESULT_MB", 64) << 20;
    if (s->opts.limits.timeout_s <= 0) s->opts.limits.timeout_s = pb_config_double("PROBING_QUERY_TIMEOUT", 30);
    s->routes = (pb__routes_env){.eval = opts->eval, .info = opts->info, .detach = opts->detach,
                                 .capture = opts->capture, .record = opts->record,
                                 .job = opts->job, .rank = opts->rank, .stack = opts->stack, .arrivals = opts->arrivals,
                                 .ctx = opts->ctx, .limits = s->opts.limits, .pool = s->pool};

    if (s->unix_path && (rc = listen_unix(s, s->unix_path))) goto fail;
    if (s->tcp_listen && (rc = listen_tcp(s, s->tcp_listen))) goto fail;
    if (s->tcp_listen) {
        const char *tcp_eval = pb_config_str("PROBING_TCP_EVAL");
        s->tcp_eval = s->opts.tcp_eval || (tcp_eval && strcmp(tcp_eval, "1") == 0);
        if ((rc = setup_token(s))) goto fail;
        if ((rc = pb_auth_new_agent_id(s->agent_id))) goto fail;
        if ((rc = pb__nonces_new(&s->nonces, PB__NONCES_DEFAULT))) goto fail;
        /* The rank a signed request must name (auth.h), as /api/info reports it. */
        const char *rank = getenv("RANK");
        s->rank = rank && *rank ? atoi(rank) : 0;
    }

    /* Threads inherit the creator's mask: MHD's threads start with every signal blocked. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pb_reaper_start(&s->reaper, s->request_deadline_s);
    if (!rc && s->unix_l.fd >= 0) {
        s->unix_l.is_unix = 1;
        rc = start_daemon(s, &s->unix_l);
    }
    if (!rc && s->tcp_l.fd >= 0) rc = start_daemon(s, &s->tcp_l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) goto fail;
    *out = s;
    return 0;

fail:
    pb_server_stop(s);
    return rc;
}

static void stop_listener(listener *l)
{
    if (l->daemon) MHD_stop_daemon(l->daemon); /* also closes the listening socket */
    else if (l->fd >= 0) close(l->fd);
    l->daemon = NULL;
    l->fd = -1;
}

void pb_server_stop(pb_server *s)
{
    if (!s || s->forgotten) return;
    /* Running queries stop at their next progress check; waiting ones give up (503). The
     * agent cancels evals itself (pb_eval_shutdown) before it gets here. */
    atomic_store(&s->stopping, 1);
    pb__pool_stop(s->pool);
    stop_listener(&s->unix_l);
    stop_listener(&s->tcp_l);
    pb_reaper_stop(s->reaper); /* after the daemons: their connections are closed */
    if (s->unix_path && s->unix_ino) {
        struct stat st; /* another agent may have replaced the file meanwhile: leave theirs */
        if (lstat(s->unix_path, &st) == 0 && st.st_dev == s->unix_dev && st.st_ino == s->unix_ino)
            unlink(s->unix_path);
    }
    if (s->token_path) {
        struct stat st;
        if (lstat(s->token_path, &st) == 0 && st.st_dev == s->token_dev && st.st_ino == s->token_ino)
            unlink(s->token_path);
    }
    pb__pool_free(s->pool);
    pb__nonces_free(s->nonces);
    free(s->unix_path);
    free(s->tcp_listen);
    free(s->token_path);
    explicit_bzero(s->token, sizeof s->token);
    free(s);
}

void pb_server_forget_after_fork(pb_server *s)
{
    if (!s || s->forgotten) return;
    s->forgotten = 1;
    if (s->unix_l.fd >= 0) close(s->unix_l.fd);
    if (s->tcp_l.fd >= 0) close(s->tcp_l.fd);
}

int pb_server_tcp_port(const pb_server *s) { return s ? s->tcp_port : 0; }

const char *pb_server_token_path(const pb_server *s) { return s ? s->token_path : NULL; }

const char *pb_server_agent_id(const pb_server *s)
{
    return s && s->agent_id[0] ? s->agent_id : NULL;
}
