/*
 * client.c - HTTP requests to an agent through libcurl; see client.h.
 *
 * Each request uses a fresh easy handle: the CLI makes one or a few requests per run, so
 * connection reuse would buy nothing. CURLOPT_NOSIGNAL keeps libcurl away from signal handlers
 * and the body callback enforces the 1 GiB cap by failing the transfer.
 *
 * On a Unix socket nothing is sent before two checks (docs/security.md; the second one in
 * CURLOPT_PREREQFUNCTION, which libcurl calls once connected and before it sends a byte):
 * the socket directory is ours (paths.h pb_paths_check_dir: owner, mode, not a symlink), and the
 * process at the other end (SO_PEERCRED) runs as our uid (or root) and, for a pid target, is
 * that pid. Another user who made /tmp/probing-<uid> first, or planted a socket, gets nothing:
 * no eval code, no query.
 *
 * Over TCP the token is never sent: each request is signed with it (common/auth.h) and an
 * answer is used only when it comes back signed with it (a 401 is only shown). The checks live
 * in pb_client_guard, which fanout.c uses too, so a target from a job's roster gets exactly
 * those of a target the user typed.
 */
#include "client/client.h"

#include "client/recording.h"
#include "clock.h"
#include "error.h"
#include "out/cli.h"

#include "paths.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

typedef struct body_sink {
    pb_buf *buf;
    int too_big;
} body_sink;

static size_t on_body(char *data, size_t size, size_t count, void *user)
{
    body_sink *sink = user;
    size_t n = size * count;
    int rc = pb_buf_append(sink->buf, data, n);
    if (rc) {
        sink->too_big = rc == PB_ETOOBIG;
        return 0; /* makes curl fail with CURLE_WRITE_ERROR */
    }
    return n;
}

int pb_client_check_peer(int fd, pid_t expected_pid, const char *path, char *why, size_t whylen)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    uid_t self = geteuid();
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        int e = errno;
        snprintf(why, whylen, "cannot tell who listens on %s (SO_PEERCRED: %s); nothing was sent",
                 path, strerror(e));
        return e ? -e : -EIO;
    }
    if (cred.uid != self && cred.uid != 0) {
        snprintf(why, whylen,
                 "refusing to talk to %s: the process listening there (pid %d) runs as uid %u, "
                 "not as you (uid %u), so it is not your probing agent; nothing was sent. "
                 "Remove the socket if you did not expect it",
                 path, (int)cred.pid, (unsigned)cred.uid, (unsigned)self);
        return -EACCES;
    }
    if (expected_pid > 0 && cred.pid != expected_pid) {
        snprintf(why, whylen,
                 "refusing to talk to %s: the process listening there is pid %d, not process %d; "
                 "nothing was sent. The socket was made by another process (remove it if the "
                 "process it names has exited)",
                 path, (int)cred.pid, (int)expected_pid);
        return -EACCES;
    }
    return 0;
}

/* Whether socket_path lies in the socket directory (paths.h), whose ownership is then checked. */
static int in_socket_dir(const char *socket_path, char *dir, size_t dirlen)
{
    if (pb_paths_dir(dir, dirlen)) return 0;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = '\0';
    const char *slash = strrchr(socket_path, '/');
    return slash && (size_t)(slash - socket_path) == n && strncmp(socket_path, dir, n) == 0;
}

/* CURLOPT_OPENSOCKETFUNCTION for Unix targets: makes the socket libcurl connects, so that the
 * peer check below knows it. */
static curl_socket_t open_unix(void *user, curlsocktype purpose, struct curl_sockaddr *addr)
{
    pb_client_guard *uc = user;
    (void)purpose;
    uc->fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
    return uc->fd < 0 ? CURL_SOCKET_BAD : uc->fd;
}

/* CURLOPT_PREREQFUNCTION for Unix targets: libcurl has connected and sends nothing until this
 * returns; the peer is checked on the connected socket. */
static int check_before_sending(void *user, char *primary_ip, char *local_ip, int primary_port,
                                int local_port)
{
    pb_client_guard *uc = user;
    (void)primary_ip;
    (void)local_ip;
    (void)primary_port;
    (void)local_port;
    if (uc->fd < 0) {
        snprintf(uc->refused, sizeof uc->refused,
                 "cannot tell who listens on %s (no socket to check); nothing was sent",
                 uc->target->socket_path);
        return CURL_PREREQFUNC_ABORT;
    }
    if (pb_client_check_peer(uc->fd, uc->target->pid, uc->target->socket_path, uc->refused,
                             sizeof uc->refused))
        return CURL_PREREQFUNC_ABORT;
    return CURL_PREREQFUNC_OK;
}

/* Copies the value of header line data[0..n) into out (outlen bytes) when it is name's. */
static void keep_header(const char *data, size_t n, const char *name, char *out, size_t outlen)
{
    size_t name_len = strlen(name);
    if (n <= name_len + 1 || strncasecmp(data, name, name_len) != 0 || data[name_len] != ':')
        return;
    const char *v = data + name_len + 1;
    size_t len = n - name_len - 1;
    while (len && (*v == ' ' || *v == '\t')) v++, len--;
    while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' ')) len--;
    if (len < outlen) {
        memcpy(out, v, len);
        out[len] = '\0';
    }
}

/* CURLOPT_HEADERFUNCTION for TCP targets: keeps the answer's signature and agent headers. */
static size_t on_header(char *data, size_t size, size_t count, void *user)
{
    pb_client_guard *g = user;
    size_t n = size * count;
    keep_header(data, n, PB_AUTH_ANSWER_HEADER, g->signature, sizeof g->signature);
    keep_header(data, n, PB_AUTH_AGENT_HEADER, g->answered_by, sizeof g->answered_by);
    return n;
}

int pb_client_guard_setup(pb_client_guard *g, const pb_target *t, CURL *h, const char *method,
                          const char *path, const char *body, struct curl_slist **headers,
                          char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    g->target = t;
    g->fd = -1;
    if (t->kind == PB_TARGET_UNIX) {
        char dir[PATH_MAX];
        if (in_socket_dir(t->socket_path, dir, sizeof dir)) {
            int rc = pb_paths_check_dir(dir, err, errlen);
            if (rc) return rc;
        }
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, t->socket_path);
        curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_unix);
        curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, g);
        curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, check_before_sending);
        curl_easy_setopt(h, CURLOPT_PREREQDATA, g);
        return 0;
    }
    if (t->kind != PB_TARGET_TCP) return 0;
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, g);
    if (!t->token[0]) return 0; /* the agent answers 401 and says how to give the token */
    char value[PB_AUTH_HEADER_MAX];
    int rc = pb_auth_sign_request(t->token, method, path, body, body ? strlen(body) : 0,
                                  t->rank_known ? t->rank : -1, t->agent_id, (int64_t)time(NULL),
                                  value, sizeof value, g->nonce);
    if (rc) {
        snprintf(err, errlen, "cannot sign the request: %s", strerror(-rc));
        return rc;
    }
    snprintf(g->authorization, sizeof g->authorization, "Authorization: %s", value);
    struct curl_slist *more = curl_slist_append(*headers, g->authorization); /* copies */
    if (!more) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    *headers = more;
    g->signed_request = 1;
    return 0;
}

int pb_client_guard_answer(pb_client_guard *g, long status, const char *body, size_t len,
                           char *err, size_t errlen)
{
    const pb_target *t = g->target;
    if (t->kind != PB_TARGET_TCP || status == 401) return 1;
    if (!g->signed_request) {
        snprintf(err, errlen, "%s answered a request that carried no token: no probing agent "
                 "does; its answer was not used (give the agent's token: --token, PROBING_TOKEN "
                 "or PROBING_TOKEN_FILE)", t->host_port);
        return 0;
    }
    /* The agent asked for, or, for the identity request, the one the answer names. */
    char agent[PB_AUTH_AGENT_HEX + 1];
    int rank = t->rank;
    snprintf(agent, sizeof agent, "%s", t->agent_id);
    if (!agent[0] && pb_auth_parse_agent(g->answered_by, agent, &rank)) agent[0] = '\0';
    if (agent[0] && (!t->rank_known || rank == t->rank) &&
        pb_auth_verify_answer(t->token, agent, rank, g->nonce, status, body, len, g->signature)) {
        memcpy(g->agent, agent, sizeof agent);
        g->agent_rank = rank;
        return 1;
    }
    snprintf(err, errlen, "%s did not prove that it holds the token: its answer (HTTP %ld) is %s; "
             "it was not used (an endpoint that is not this job's agent, or an agent older than "
             "this probing)", t->host_port, status,
             !g->signature[0] ? "not signed"
             : t->agent_id[0] ? "not signed by the agent the request was for"
                              : "signed with another key");
    return 0;
}

/* A stopped process (state T or t in /proc/<pid>/stat, target.h) accepts connections, its kernel
 * queues the request, and nothing answers until it runs again: a request to a local process
 * looks at its state from its first second on (libcurl's progress callback, about once a
 * second while nothing moves), and one seen stopped for PB_CLI_STOPPED_FOR_MS ends. */
typedef struct stop_watch {
    pid_t pid;              /* the process watched, 0: none (only the cancel check) */
    double next_check, stopped_since; /* monotonic s; stopped_since 0: not seen stopped */
    char state;                       /* the state that ended the request, else 0 */
    int cancelled;                    /* the cancel check (pb_client_set_cancel) ended it */
} stop_watch;

static atomic_int stopped_seen; /* a request of this run ended on a stopped process */
static atomic_int stop_watch_on = 1;

void pb_client_watch_stopped(int on) { atomic_store(&stop_watch_on, on); }

static int (*cancel_check)(void); /* pb_client_set_cancel */

void pb_client_set_cancel(int (*cancelled)(void)) { cancel_check = cancelled; }

int pb_client_exit_status(int rc)
{
    return rc == PB_EXIT_ERROR && atomic_load(&stopped_seen) ? PB_EXIT_STOPPED : rc;
}

/* CURLOPT_XFERINFOFUNCTION: non-zero ends the transfer (CURLE_ABORTED_BY_CALLBACK). */
static int watch_stopped(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                         curl_off_t ulnow)
{
    stop_watch *w = user;
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    if (cancel_check && cancel_check()) {
        w->cancelled = 1;
        return 1;
    }
    if (w->pid <= 0) return 0;
    double now = pb_mono_s();
    if (now < w->next_check) return 0;
    w->next_check = now + 0.25;
    char state = pb_target_pid_state(w->pid);
    if (state != 'T' && state != 't') {
        w->stopped_since = 0;
        return 0;
    }
    if (!w->stopped_since) w->stopped_since = now;
    if ((now - w->stopped_since) * 1000 < PB_CLI_STOPPED_FOR_MS) return 0;
    w->state = state;
    return 1;
}

/* Whether pid is gone, or goes within 200 ms: a dying process closes its sockets a moment
 * before /proc shows it dead. */
static int exited_soon(pid_t pid)
{
    for (int i = 0; i < 20; i++) {
        if (!pb_target_pid_alive(pid)) return 1;
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    return 0;
}

/* Words a transport failure for the user in err, and returns its code (error.h). */
static int describe_failure(const pb_target *t, CURLcode cc, long os_errno, int too_big,
                            long timeout_ms, char *err, size_t errlen)
{
    int is_unix = t->kind == PB_TARGET_UNIX;
    int code = -EIO;
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
        if (is_unix && t->pid && !pb_target_pid_alive(t->pid)) {
            snprintf(err, errlen, "process %d has exited", (int)t->pid);
            code = -ESRCH;
        } else if (is_unix && t->pid && (os_errno == 0 || os_errno == ECONNRESET)) {
            /* connect() worked (no errno), then the socket hung up before libcurl could use
             * it: the agent accepted and closed at once, as it does over its connection limit
             * (a process with nothing listening refuses: ECONNREFUSED). */
            snprintf(err, errlen,
                     "process %d is running but its agent closed the connection without "
                     "answering: it is saturated (it serves a bounded number of connections at "
                     "once and closes the rest); try again later", (int)t->pid);
            code = -ECONNRESET;
        } else if (os_errno == ECONNREFUSED || os_errno == 0) {
            code = -ECONNREFUSED;
            if (is_unix && t->pid)
                snprintf(err, errlen,
                         "process %d is running but nothing is listening on %s (the agent "
                         "may have turned itself off; see the process's stderr)",
                         (int)t->pid, t->socket_path);
            else if (is_unix)
                snprintf(err, errlen, "nothing is listening on %s (stale socket?)",
                         t->socket_path);
            else
                snprintf(err, errlen, "connection refused by %s", t->host_port);
        } else if (is_unix && (os_errno == ETIMEDOUT || os_errno == EAGAIN)) {
            snprintf(err, errlen, "the agent at %s accepted no connection within %ld s: its "
                     "queue is full, it is saturated by other clients; try again later",
                     t->socket_path, ((timeout_ms < PB_CLI_CONNECT_TIMEOUT_MS ? timeout_ms
                                       : PB_CLI_CONNECT_TIMEOUT_MS) + 999) / 1000);
            code = -ETIMEDOUT;
        } else if (os_errno == EACCES || os_errno == EPERM) {
            code = -EACCES;
            snprintf(err, errlen, "permission denied connecting to %s (the agent belongs to "
                     "another user?)", is_unix ? t->socket_path : t->host_port);
        } else if (os_errno == ENOENT && is_unix) {
            snprintf(err, errlen, "no socket at %s (did the process exit?)", t->socket_path);
            code = -ENOENT;
        } else {
            snprintf(err, errlen, "cannot connect to %s: %s",
                     is_unix ? t->socket_path : t->host_port, strerror((int)os_errno));
            code = os_errno > 0 ? -(int)os_errno : -EIO;
        }
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
        snprintf(err, errlen, "cannot resolve the host in %s", t->host_port);
        code = -EHOSTUNREACH;
        break;
    case CURLE_OPERATION_TIMEDOUT:
        snprintf(err, errlen, "the target did not answer within %ld s (is the process "
                 "stopped or overloaded?)", (timeout_ms + 999) / 1000);
        code = PB_ETIMEOUT;
        break;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
        code = -ECONNRESET;
        if (is_unix && t->pid && exited_soon(t->pid)) {
            snprintf(err, errlen, "process %d exited before answering", (int)t->pid);
            code = -ESRCH;
        } else if (is_unix && t->pid) {
            snprintf(err, errlen,
                     "process %d is running but its agent closed the connection without "
                     "answering: it is saturated (it serves a bounded number of connections at "
                     "once and closes the rest); try again later", (int)t->pid);
        } else {
            snprintf(err, errlen,
                     "the target closed the connection before answering (the process exited, "
                     "or its agent is saturated and closes connections over its limit)");
        }
        break;
    case CURLE_WRITE_ERROR:
        code = too_big ? PB_ETOOBIG : -ENOMEM;
        if (too_big)
            snprintf(err, errlen, "the target's response is larger than 1 GiB; ask for less "
                     "(add a LIMIT or select fewer columns)");
        else
            snprintf(err, errlen, "out of memory while reading the target's response");
        break;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_UNSUPPORTED_PROTOCOL:
        snprintf(err, errlen, "the target did not answer in HTTP (is it a probing agent?)");
        code = -EPROTO;
        break;
    default:
        snprintf(err, errlen, "request to %s failed: %s",
                 is_unix ? t->socket_path : t->host_port, curl_easy_strerror(cc));
        break;
    }
    return code;
}

/* pb_client_request() without the identity exchange; *answered (may be NULL) gets the guard's
 * view of who answered a TCP request. */
static int request_once(const pb_target *t, const char *method, const char *path,
                        const char *body, long timeout_ms, pb_response *resp, char *err,
                        size_t errlen, pb_client_guard *answered)
{
    int ret = -ENOMEM;
    char url[512];
    struct curl_slist *headers = NULL;
    body_sink sink = {&resp->body, 0};
    if (t->kind == PB_TARGET_FILE)
        return pb_recording_request(t, method, path, body, timeout_ms, resp, err, errlen);
    pb_client_guard uc;
    resp->status = 0;
    memset(&resp->body, 0, sizeof resp->body);
    resp->body.max_len = PB_CLIENT_MAX_BODY;
    CURL *h = curl_easy_init();
    if (!h) {
        snprintf(err, errlen, "cannot start libcurl (out of memory?)");
        goto done;
    }
    snprintf(url, sizeof url, "%s%s", t->url_base, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    headers = curl_slist_append(headers, "Expect:"); /* no 100-continue round trip */
    ret = pb_client_guard_setup(&uc, t, h, method, path, body, &headers, err, errlen);
    if (ret) goto done;
    curl_easy_setopt(h, CURLOPT_PROXY, ""); /* never route through http_proxy */
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     timeout_ms < PB_CLI_CONNECT_TIMEOUT_MS ? timeout_ms
                                                            : PB_CLI_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "probing-cli/" PB_VERSION);
    if (body) {
        headers = curl_slist_append(headers, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    int watch_pid = t->kind == PB_TARGET_UNIX && t->pid > 0 && atomic_load(&stop_watch_on);
    stop_watch watch = {watch_pid ? t->pid : 0, pb_mono_s() + 1.0, 0, 0, 0};
    if (watch_pid || cancel_check) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, watch_stopped);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &watch);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }

    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        long os_errno = 0;
        curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno);
        if (cc == CURLE_ABORTED_BY_CALLBACK && watch.cancelled) {
            snprintf(err, errlen, "the request was cancelled%s", strcmp(path, "/api/eval") == 0
                     ? "; the code was sent and may still run in the target" : "");
            pb_buf_free(&resp->body);
            ret = PB_ECANCELLED;
            goto done;
        }
        if (cc == CURLE_ABORTED_BY_CALLBACK && watch.state) {
            /* The agent reads the request when the process runs again: a query is then
             * answered to nobody, but code sent to eval may still run. */
            snprintf(err, errlen, "process %d is %s: its agent cannot answer until the process "
                     "runs again%s", (int)t->pid, pb_target_state_text(watch.state),
                     strcmp(path, "/api/eval") == 0 ? "; the code was sent and may still run "
                     "when it does" : "");
            atomic_store(&stopped_seen, 1);
            pb_buf_free(&resp->body);
            ret = PB_ESTOPPED;
            goto done;
        }
        if (uc.refused[0]) {
            snprintf(err, errlen, "%s", uc.refused);
            pb_buf_free(&resp->body);
            ret = -EACCES;
            goto done;
        }
        ret = describe_failure(t, cc, os_errno, sink.too_big, timeout_ms, err, errlen);
        pb_buf_free(&resp->body);
        goto done;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
    if (pb_buf_reserve(&resp->body, 0)) { /* an empty body still gets its "" */
        snprintf(err, errlen, "out of memory while reading the target's response");
        pb_buf_free(&resp->body);
        ret = -ENOMEM;
        goto done;
    }
    if (!pb_client_guard_answer(&uc, resp->status, resp->body.data, resp->body.len, err, errlen)) {
        pb_buf_free(&resp->body);
        resp->status = 0;
        ret = -EACCES;
        goto done;
    }
    if (answered) *answered = uc;
    ret = 0;
done:
    curl_slist_free_all(headers);
    if (h) curl_easy_cleanup(h);
    return ret;
}

int pb_client_request(const pb_target *t, const char *method, const char *path,
                      const char *body, long timeout_ms, pb_response *resp, char *err,
                      size_t errlen)
{
    if (t->kind != PB_TARGET_TCP || !t->token[0] || t->agent_id[0] ||
        strcmp(path, PB_AUTH_IDENTITY_PATH) == 0)
        return request_once(t, method, path, body, timeout_ms, resp, err, errlen, NULL);
    /* A typed host:port: which agent listens there, as its signed answer proves; then the
     * request is signed for that agent alone, which every other agent refuses (auth.h). */
    double start = pb_mono_s();
    pb_client_guard who;
    int rc = request_once(t, "GET", PB_AUTH_IDENTITY_PATH, NULL, timeout_ms, resp, err, errlen,
                          &who);
    if (rc || resp->status != 200) return rc; /* a 401 (wrong token) is the answer */
    pb_buf_free(&resp->body);
    pb_target *bound = malloc(sizeof *bound);
    if (!bound) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    *bound = *t;
    memcpy(bound->agent_id, who.agent, sizeof bound->agent_id);
    bound->rank = who.agent_rank;
    bound->rank_known = 1;
    long left = timeout_ms - (long)((pb_mono_s() - start) * 1e3);
    rc = request_once(bound, method, path, body, left > 0 ? left : 1, resp, err, errlen, NULL);
    free(bound);
    return rc;
}

int pb_client_call(const pb_target *t, const char *method, const char *path, json_t *request,
                   long timeout_ms, json_t **root, long *status)
{
    char err[1024];
    char *body = NULL;
    pb_response resp;
    json_error_t jerr;

    *root = NULL;
    *status = 0;
    if (request) {
        body = json_dumps(request, JSON_COMPACT);
        if (!body) {
            pb_cli_error("out of memory");
            return PB_EXIT_ERROR;
        }
    }
    int rc = pb_client_request(t, method, path, body, timeout_ms, &resp, err, sizeof err);
    free(body);
    if (rc) {
        pb_cli_error("%s", err);
        return PB_EXIT_ERROR;
    }
    *status = resp.status;
    json_t *parsed = json_loadb(resp.body.data, resp.body.len, JSON_ALLOW_NUL, &jerr);
    pb_buf_free(&resp.body);
    if (!parsed || !json_is_object(parsed)) {
        json_decref(parsed);
        if (resp.status == 200)
            pb_cli_error("the target sent a response that is not valid JSON");
        else
            pb_cli_error("the target sent a response that is not valid JSON (HTTP %ld)",
                         resp.status);
        return PB_EXIT_ERROR;
    }
    *root = parsed;
    return PB_EXIT_OK;
}

json_t *pb_client_call_ok(const pb_target *t, const char *method, const char *path,
                          json_t *request, long timeout_ms)
{
    json_t *root = NULL;
    long status;
    if (pb_client_call(t, method, path, request, timeout_ms, &root, &status)) return NULL;
    if (status != 200) {
        pb_client_print_error(status, root);
        json_decref(root);
        return NULL;
    }
    return root;
}

void pb_client_print_error(long status, json_t *root)
{
    const char *msg = json_string_value(json_object_get(root, "error"));
    if (msg && *msg) {
        pb_cli_error("%s", msg);
        return;
    }
    switch (status) {
    case 404:
        pb_cli_error("the target does not know this request (HTTP 404); is it an older "
                     "probing agent?");
        break;
    default:
        pb_cli_error("the target answered HTTP %ld without saying why", status);
        break;
    }
}

int pb_client_query_rows(const pb_target *t, const char *sql, json_t **rows)
{
    json_t *all = json_array();
    *rows = NULL;
    if (!all) {
        pb_cli_error("out of memory");
        return PB_EXIT_ERROR;
    }
    for (long long offset = 0;; offset += PB_CLIENT_PAGE_ROWS) {
        char *paged = NULL;
        if (asprintf(&paged, "SELECT * FROM (%s) LIMIT %lld OFFSET %lld", sql,
                     (long long)PB_CLIENT_PAGE_ROWS, offset) < 0) {
            pb_cli_error("out of memory");
            goto fail;
        }
        json_t *request = json_pack("{s:s}", "sql", paged), *root = NULL;
        long status = 0;
        free(paged);
        int rc = request ? pb_client_call(t, "POST", "/api/query", request,
                                          PB_CLI_QUERY_TIMEOUT_MS, &root, &status)
                         : (pb_cli_error("out of memory"), PB_EXIT_ERROR);
        json_decref(request);
        if (rc) goto fail;
        json_t *page = json_object_get(root, "rows");
        if (status != 200 || !json_is_array(page)) {
            pb_client_print_error(status, root);
            json_decref(root);
            goto fail;
        }
        if (json_is_true(json_object_get(root, "truncated"))) {
            pb_cli_error("the target cut a page of %d rows at PROBING_MAX_RESULT_MB; raise it in "
                         "the target's environment", PB_CLIENT_PAGE_ROWS);
            json_decref(root);
            goto fail;
        }
        size_t n = json_array_size(page);
        json_array_extend(all, page);
        json_decref(root);
        if (n < (size_t)PB_CLIENT_PAGE_ROWS) break;
    }
    *rows = all;
    return 0;
fail:
    json_decref(all);
    return PB_EXIT_ERROR;
}

int pb_client_query_objects(const pb_target *t, const char *sql, long timeout_ms, json_t **rows,
                            char **error)
{
    json_t *root = NULL, *request = json_pack("{s:s}", "sql", sql);
    long status = 0;
    char err[1024];
    pb_response resp;
    json_error_t jerr;
    *rows = NULL;
    *error = NULL;
    char *body = request ? json_dumps(request, JSON_COMPACT) : NULL;
    json_decref(request);
    if (!body) {
        *error = strdup("out of memory");
        return -ENOMEM;
    }
    int rc = pb_client_request(t, "POST", "/api/query", body, timeout_ms, &resp,
                               err, sizeof err);
    free(body);
    if (rc) {
        *error = strdup(err);
        return rc;
    }
    status = resp.status;
    root = json_loadb(resp.body.data, resp.body.len, JSON_ALLOW_NUL, &jerr);
    pb_buf_free(&resp.body);
    if (!json_is_object(root)) {
        json_decref(root);
        *error = strdup("the target sent a response that is not valid JSON");
        return -EPROTO;
    }
    json_t *columns = json_object_get(root, "columns"), *data = json_object_get(root, "rows");
    if (status != 200 || !json_is_array(columns) || !json_is_array(data)) {
        const char *msg = json_string_value(json_object_get(root, "error"));
        *error = strdup(msg ? msg : "the target sent an incomplete answer");
        json_decref(root);
        return status != 200 ? PB_ESQL : -EPROTO;
    }
    json_t *out = json_array(), *row;
    size_t i;
    json_array_foreach(data, i, row) {
        json_t *obj = json_object();
        for (size_t c = 0; c < json_array_size(columns) && c < json_array_size(row); c++)
            json_object_set(obj, json_string_value(json_array_get(columns, c)),
                            json_array_get(row, c));
        json_array_append_new(out, obj);
    }
    json_decref(root);
    *rows = out;
    return 0;
}

json_t *pb_client_get_object(const pb_target *t, const char *path, long timeout_ms)
{
    char err[512];
    pb_response resp;
    if (pb_client_request(t, "GET", path, NULL, timeout_ms, &resp, err, sizeof err)) return NULL;
    json_t *root = json_loadb(resp.body.data, resp.body.len, JSON_ALLOW_NUL, NULL);
    pb_buf_free(&resp.body);
    if (resp.status != 200 || !json_is_object(root)) {
        json_decref(root);
        return NULL;
    }
    return root;
}

json_t *pb_client_tables(const pb_target *t)
{
    json_t *root = pb_client_call_ok(t, "GET", "/api/tables", NULL, PB_CLI_INFO_TIMEOUT_MS);
    if (root && !json_is_array(json_object_get(root, "tables"))) {
        pb_cli_error("the target sent an incomplete answer (no \"tables\"); is it a probing "
                     "agent of the same version?");
        json_decref(root);
        return NULL;
    }
    return root;
}
