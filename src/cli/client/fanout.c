/*
 * fanout.c - parallel requests to the ranks of a job (libcurl multi) and the job's roster; see
 * fanout.h.
 *
 * Why libcurl multi rather than a thread per rank: one thread drives every transfer with
 * poll(), so 1,000 ranks cost 1,000 sockets and easy handles, not 1,000 stacks; at most
 * PB_FANOUT_PARALLEL are in flight so that a big job does not run the CLI out of descriptors or
 * hit every agent's node at the same instant.
 */
#include "client/fanout.h"

#include "buf.h"
#include "client/client.h"
#include "clock.h"
#include "netaddr.h"
#include "out/cli.h"
#include "out/format.h"
#include "paths.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct xfer {
    pb_fanout_req *req;
    CURL *h;
    struct curl_slist *headers;
    pb_buf body;
    pb_client_guard guard; /* the checks of a typed target: peer on Unix, signatures on TCP */
} xfer;

static size_t on_body(char *data, size_t size, size_t count, void *user)
{
    xfer *x = user;
    size_t n = size * count;
    return pb_buf_append(&x->body, data, n) ? 0 : n;
}

static void describe(pb_fanout_req *r, CURLcode cc, long os_errno, long deadline_ms)
{
    const pb_target *t = &r->target;
    const char *where = t->kind == PB_TARGET_UNIX ? t->socket_path : t->host_port;
    switch (cc) {
    case CURLE_OPERATION_TIMEDOUT:
        snprintf(r->err, sizeof r->err, "did not answer within %.1f s (stopped, overloaded or "
                 "its node unreachable?)", (double)deadline_ms / 1000);
        break;
    case CURLE_COULDNT_CONNECT:
        if (t->kind == PB_TARGET_UNIX && t->pid && !pb_target_pid_alive(t->pid))
            snprintf(r->err, sizeof r->err, "process %d has exited", (int)t->pid);
        else if (os_errno == ECONNREFUSED || os_errno == ENOENT)
            snprintf(r->err, sizeof r->err, "connection refused by %s (the process exited?)", where);
        else
            snprintf(r->err, sizeof r->err, "cannot connect to %s: %s", where,
                     os_errno ? strerror((int)os_errno) : curl_easy_strerror(cc));
        break;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
        snprintf(r->err, sizeof r->err, "closed the connection before answering (did the process "
                 "exit?)");
        break;
    default:
        snprintf(r->err, sizeof r->err, "request to %s failed: %s", where, curl_easy_strerror(cc));
        break;
    }
}

/* Adds x's request to m. Returns 0, or a negative error.h code with why in x->req->err. */
static int start_xfer(CURLM *m, xfer *x, const char *method, const char *path, const char *body,
                      long timeout_ms)
{
    pb_fanout_req *r = x->req;
    char url[512];
    x->h = curl_easy_init();
    if (!x->h) {
        snprintf(r->err, sizeof r->err, "cannot start libcurl (out of memory?)");
        return -ENOMEM;
    }
    memset(&x->body, 0, sizeof x->body);
    x->body.max_len = r->max_answer_bytes ? r->max_answer_bytes : PB_CLIENT_MAX_BODY;
    snprintf(url, sizeof url, "%s%s", r->target.url_base, path);
    curl_easy_setopt(x->h, CURLOPT_URL, url);
    x->headers = curl_slist_append(NULL, "Expect:");
    int rc = pb_client_guard_setup(&x->guard, &r->target, x->h, method, path, body, &x->headers,
                                   r->err, sizeof r->err);
    if (rc) return rc;
    curl_easy_setopt(x->h, CURLOPT_PROXY, "");
    curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(x->h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->h, CURLOPT_USERAGENT, "probing-cli/" PB_VERSION);
    if (body) {
        x->headers = curl_slist_append(x->headers, "Content-Type: application/json");
        curl_easy_setopt(x->h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(x->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    curl_easy_setopt(x->h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->headers);
    r->sent = pb_wall_s();
    if (curl_multi_add_handle(m, x->h) == CURLM_OK) return 0;
    snprintf(r->err, sizeof r->err, "cannot start libcurl (out of memory?)");
    return -ENOMEM;
}

static void finish_xfer(CURLM *m, xfer *x, CURLcode cc, long timeout_ms, const char *path)
{
    pb_fanout_req *r = x->req;
    r->answered = pb_wall_s();
    long status = 0;
    char why[600];
    if (cc == CURLE_OK) curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
    if (cc != CURLE_OK && x->guard.refused[0]) {
        /* the Unix peer check of a typed target refused the socket the roster names */
        r->forged = 1;
        snprintf(r->err, sizeof r->err, "forged roster entry: %.490s", x->guard.refused);
    } else if (cc == CURLE_WRITE_ERROR && x->body.len + CURL_MAX_WRITE_SIZE > x->body.max_len) {
        snprintf(r->err, sizeof r->err, "its answer passed the %zu MB this command takes from "
                 "one rank, and was dropped (%s)", x->body.max_len >> 20,
                 strcmp(path, "/api/query") == 0
                     ? "an older agent that cannot cut its rows; add a LIMIT"
                     : "more than a probing agent of this version sends: is it one?");
    } else if (cc != CURLE_OK) {
        long os_errno = 0;
        curl_easy_getinfo(x->h, CURLINFO_OS_ERRNO, &os_errno);
        describe(r, cc, os_errno, timeout_ms);
    } else if (r->target.kind == PB_TARGET_TCP &&
               (status == 401 || !pb_client_guard_answer(&x->guard, status, x->body.data,
                                                        x->body.len, why, sizeof why))) {
        /* No signature with the job's token: an endpoint that does not hold it (or refuses
         * ours), whatever it says; nothing it sent is used. */
        r->forged = 1;
        snprintf(r->err, sizeof r->err, "forged roster entry: %s did not prove that it holds the "
                 "job's token (%s); its answer was not used", r->target.host_port,
                 status == 401 ? "it refused the request as not signed with its token or for "
                                 "another agent (HTTP 401)"
                 : x->guard.signature[0] ? "its answer is signed with another key or by another agent"
                                         : "its answer is not signed");
    } else {
        r->status = status;
        json_error_t jerr;
        json_t *root = x->body.len ? json_loadb(x->body.data, x->body.len, 0, &jerr) : NULL;
        if (json_is_object(root)) {
            r->root = root;
        } else {
            json_decref(root);
            snprintf(r->err, sizeof r->err, "answered something that is not JSON (HTTP %ld); is it a "
                     "probing agent of the same version?", r->status);
            r->status = 0;
        }
    }
    curl_multi_remove_handle(m, x->h);
    curl_easy_cleanup(x->h);
    curl_slist_free_all(x->headers);
    pb_buf_free(&x->body);
    x->h = NULL;
    x->headers = NULL;
}

int pb_fanout_run(pb_fanout_req *reqs, int n, const char *method, const char *path,
                  const char *body, long deadline_ms)
{
    CURLM *m = curl_multi_init();
    xfer *xs = calloc((size_t)(n > 0 ? n : 1), sizeof *xs);
    if (!m || !xs) {
        for (int i = 0; i < n; i++)
            if (reqs[i].usable) snprintf(reqs[i].err, sizeof reqs[i].err, "out of memory");
        free(xs);
        if (m) curl_multi_cleanup(m);
        return -ENOMEM;
    }
    double start = pb_mono_s() * 1e3;
    int next = 0, running = 0;
    /* Recordings are answered here, in this process (recording.c), one after the other. */
    for (int i = 0; i < n; i++) {
        pb_fanout_req *r = &reqs[i];
        if (!r->usable || r->target.kind != PB_TARGET_FILE) continue;
        pb_response resp;
        /* Each file is read as a rank would answer in parallel: within the deadline of its
         * own; under the default deadline (made for networks, not for reading a big file),
         * within PROBING_QUERY_TIMEOUT only (recording.c). */
        long limit = deadline_ms == PB_FANOUT_DEADLINE_MS ? 0 : deadline_ms;
        r->sent = pb_wall_s();
        if (pb_client_request(&r->target, method, path, body, limit, &resp, r->err,
                              sizeof r->err) == 0) {
            json_t *root = json_loadb(resp.body.data, resp.body.len, 0, NULL);
            if (json_is_object(root)) {
                r->root = root;
                r->status = resp.status;
            } else {
                json_decref(root);
                snprintf(r->err, sizeof r->err, "the recording's answer is not JSON");
            }
            pb_buf_free(&resp.body);
        }
        r->answered = pb_wall_s();
        r->usable = 0; /* done: the loop below skips it */
        r->file_done = 1;
    }
    for (;;) {
        while (running < PB_FANOUT_PARALLEL && next < n) {
            pb_fanout_req *r = &reqs[next];
            xs[next].req = r;
            if (r->file_done) {
                r->usable = 1;
                next++;
                continue;
            }
            r->status = 0;
            r->root = NULL;
            r->forged = 0;
            if (!r->usable) {
                next++;
                continue;
            }
            long left = deadline_ms - (long)(pb_mono_s() * 1e3 - start);
            if (left < 1) {
                snprintf(r->err, sizeof r->err, "not asked: the deadline of %.1f s passed first "
                         "(raise --deadline)", (double)deadline_ms / 1000);
                next++;
                continue;
            }
            int started = start_xfer(m, &xs[next], method, path, body, left);
            if (started) { /* r->err says why */
                if (xs[next].h) curl_easy_cleanup(xs[next].h);
                curl_slist_free_all(xs[next].headers);
                xs[next].h = NULL;
                xs[next].headers = NULL;
            } else {
                running++;
            }
            next++;
        }
        if (!running && next >= n) break;
        int still = 0;
        curl_multi_perform(m, &still);
        CURLMsg *msg;
        int left_msgs;
        while ((msg = curl_multi_info_read(m, &left_msgs))) {
            if (msg->msg != CURLMSG_DONE) continue;
            xfer *x = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode cc = msg->data.result;
            finish_xfer(m, x, cc, deadline_ms, path);
            running--;
        }
        if (running) curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    curl_multi_cleanup(m);
    free(xs);
    return 0;
}

double pb_fanout_clock_offset(const pb_fanout_req *r, double now, double *uncertainty)
{
    double lo = now - r->answered, hi = now - r->sent; /* fanout.h */
    if (uncertainty) *uncertainty = r->answered - r->sent;
    return lo > 0 ? lo : hi < 0 ? hi : 0;
}

void pb_fanout_free(pb_fanout_req *reqs, int n)
{
    for (int i = 0; i < n; i++) {
        json_decref(reqs[i].root);
        reqs[i].root = NULL;
    }
}

/* ---------------------------------------------------------------- the roster */

const char *pb_fanout_local_host(void)
{
    static char host[256];
    if (!host[0]) pb_netaddr_host_name(getenv("PROBING_HOST"), host, sizeof host);
    return host;
}

static void fill_endpoint(pb_rank_ep *e, json_t *entry)
{
    const char *host = json_string_value(json_object_get(entry, "host"));
    const char *unix_path = json_string_value(json_object_get(entry, "unix"));
    const char *tcp = json_string_value(json_object_get(entry, "tcp"));
    e->registered = 1;
    pb_buf_sanitize_into(e->host, sizeof e->host, host ? host : "?");
    e->pid = (int)json_integer_value(json_object_get(entry, "pid"));
    e->local_rank = (int)json_integer_value(json_object_get(entry, "local_rank"));
    e->node_rank = (int)json_integer_value(json_object_get(entry, "node_rank"));
    e->heartbeat = json_number_value(json_object_get(entry, "hb"));
    int same_host = host && strcmp(host, pb_fanout_local_host()) == 0;
    struct stat st;
    /* Only the kind of endpoint the entry claims, with the checks of a typed target: a socket
     * (its directory and peer are checked when connecting, client.h), a host:port (never a
     * path, so never a recording; its answers must be signed with the job's token). */
    if (same_host && unix_path && stat(unix_path, &st) == 0 && S_ISSOCK(st.st_mode) &&
        pb_target_for_socket(e->pid, unix_path, &e->target) == 0) {
        snprintf(e->via, sizeof e->via, "unix");
        return;
    }
    char shown[160]; /* what the roster says, fit for a terminal */
    pb_buf_sanitize_into(shown, sizeof shown, tcp ? tcp : unix_path ? unix_path : "?");
    if (tcp && *tcp) {
        if (pb_target_parse_tcp(tcp, &e->target) == 0) {
            e->target.rank_known = 1;
            e->target.rank = e->rank;
            /* The agent requests are signed for (auth.h). The store is not authenticated, but
             * a wrong id buys nothing: only the agent holding it serves them, and only its
             * signed answer is used. */
            const char *agent = json_string_value(json_object_get(entry, "agent"));
            if (agent && strlen(agent) == PB_AUTH_AGENT_HEX &&
                strspn(agent, "0123456789abcdef") == PB_AUTH_AGENT_HEX)
                memcpy(e->target.agent_id, agent, PB_AUTH_AGENT_HEX + 1);
            snprintf(e->via, sizeof e->via, "tcp");
            if (!e->target.token[0])
                snprintf(e->why, sizeof e->why, "no token for %s: set PROBING_TOKEN (or "
                         "PROBING_TOKEN_FILE, or --token) to the job's token", shown);
            else if (!e->target.agent_id[0])
                snprintf(e->why, sizeof e->why, "its roster entry names no agent id (an agent "
                         "older than this probing, or a rewritten entry): a TCP request is signed "
                         "for one agent only");
            return;
        }
        snprintf(e->why, sizeof e->why, "its TCP address '%s' is not host:port", shown);
        return;
    }
    char socket_shown[160];
    pb_buf_sanitize_into(socket_shown, sizeof socket_shown, unix_path ? unix_path : "?");
    if (same_host && unix_path && stat(unix_path, &st) == 0)
        snprintf(e->why, sizeof e->why, "its entry's socket %s is not a socket", socket_shown);
    else if (same_host)
        snprintf(e->why, sizeof e->why, "its socket %s is gone (did the process exit?)",
                 socket_shown);
    else
        snprintf(e->why, sizeof e->why, "no TCP endpoint: set PROBING_TOKEN for the job");
}

/* /api/info of a recording within timeout_ms, or NULL (quiet). */
static json_t *recording_info(const pb_target *t, long timeout_ms)
{
    pb_response resp;
    char err[512];
    if (pb_client_request(t, "GET", "/api/info", NULL, timeout_ms, &resp, err, sizeof err))
        return NULL;
    json_t *info = json_loadb(resp.body.data, resp.body.len, 0, NULL);
    pb_buf_free(&resp.body);
    if (resp.status != 200 || !json_is_object(info)) {
        json_decref(info);
        return NULL;
    }
    return info;
}

static int is_sqlite_file(const char *path)
{
    char head[16];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return 0;
    ssize_t got = read(fd, head, sizeof head);
    close(fd);
    return got == (ssize_t)sizeof head && memcmp(head, "SQLite format 3", 16) == 0;
}

/* The roster of a recording: the recordings in its directory that recorded the same job (job
 * and world_size of their saved /api/info), one per rank (the first found in name order). */
static int recording_roster(const pb_target *t, long deadline_ms, pb_rank_ep **out, int *n)
{
    double start = pb_mono_s() * 1e3;
    json_t *info = recording_info(t, deadline_ms);
    if (!info) {
        pb_cli_error("cannot read the recording's /api/info (%s)", t->file_path);
        return PB_EXIT_ERROR;
    }
    const char *job = json_string_value(json_object_get(info, "job"));
    json_int_t world = json_integer_value(json_object_get(info, "world_size"));
    json_int_t my_rank = json_integer_value(json_object_get(info, "rank"));
    if (world < 1 || !job) world = 1;
    if (world > 100000 || my_rank < 0 || my_rank >= world) world = 1, my_rank = 0;
    pb_rank_ep *eps = calloc((size_t)world, sizeof *eps);
    if (!eps) {
        json_decref(info);
        pb_cli_error("out of memory");
        return PB_EXIT_ERROR;
    }
    for (int r = 0; r < world; r++) {
        eps[r].rank = r;
        snprintf(eps[r].why, sizeof eps[r].why, "no recording of this rank of job %.80s beside %.120s",
                 job ? job : "?", t->file_path);
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", t->file_path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    struct dirent **names = NULL;
    int count = world > 1 ? scandir(dir, &names, NULL, alphasort) : 0;
    /* the target itself first, so its rank is always its own file */
    for (int i = -1; i < count; i++) {
        pb_target rt;
        memset(&rt, 0, sizeof rt);
        rt.kind = PB_TARGET_FILE;
        snprintf(rt.url_base, sizeof rt.url_base, "file:");
        if (i < 0) {
            rt = *t;
        } else {
            if (names[i]->d_name[0] == '.' ||
                snprintf(rt.file_path, sizeof rt.file_path, "%s/%s", dir, names[i]->d_name) >=
                    (int)sizeof rt.file_path ||
                !is_sqlite_file(rt.file_path))
                continue;
        }
        /* A stray file in the directory (hostile or merely slow) costs at most what is left of
         * the deadline, and then nothing more. */
        long left = deadline_ms - (long)(pb_mono_s() * 1e3 - start);
        json_t *other = i < 0 ? json_incref(info) : left < 1 ? NULL : recording_info(&rt, left);
        const char *ojob = json_string_value(json_object_get(other, "job"));
        json_int_t ow = json_integer_value(json_object_get(other, "world_size"));
        json_int_t orank = json_integer_value(json_object_get(other, "rank"));
        if (other && (i < 0 || (job && ojob && !strcmp(job, ojob) && ow == world)) && orank >= 0 &&
            orank < world && !eps[orank].registered) {
            pb_rank_ep *e = &eps[orank];
            const char *host = json_string_value(json_object_get(other, "host"));
            e->registered = 1;
            e->why[0] = '\0';
            pb_buf_sanitize_into(e->host, sizeof e->host, host ? host : "");
            e->pid = (int)json_integer_value(json_object_get(other, "pid"));
            e->local_rank = e->node_rank = -1;
            e->target = rt;
            snprintf(e->via, sizeof e->via, "file");
        }
        json_decref(other);
    }
    for (int i = 0; i < count; i++) free(names[i]);
    free(names);
    json_decref(info);
    *out = eps;
    *n = (int)world;
    return 0;
}

int pb_fanout_roster(const pb_target *t, long deadline_ms, pb_rank_ep **out, int *n)
{
    *out = NULL;
    *n = 0;
    if (t->kind == PB_TARGET_FILE) return recording_roster(t, deadline_ms, out, n);
    json_t *root = pb_client_call_ok(t, "GET", "/api/job", NULL, deadline_ms + 2000);
    if (!root) return PB_EXIT_ERROR;
    int registered = json_is_true(json_object_get(root, "registered"));
    json_int_t world = json_integer_value(json_object_get(root, "world"));
    if (!registered || world < 1) world = 1;
    if (world > 1000000) {
        pb_cli_error("the target reports a world size of %lld; that is not a job probing can "
                     "list", (long long)world);
        json_decref(root);
        return PB_EXIT_ERROR;
    }
    pb_rank_ep *eps = calloc((size_t)world, sizeof *eps);
    if (!eps) {
        pb_cli_error("out of memory");
        json_decref(root);
        return PB_EXIT_ERROR;
    }
    for (int r = 0; r < world; r++) {
        eps[r].rank = r;
        snprintf(eps[r].why, sizeof eps[r].why, "not in the job's store (not started, exited, "
                 "or its agent is off)");
    }
    if (!registered) {
        /* One process: itself. */
        eps[0].registered = 1;
        eps[0].rank = (int)json_integer_value(json_object_get(root, "rank"));
        const char *host = json_string_value(json_object_get(root, "host"));
        pb_buf_sanitize_into(eps[0].host, sizeof eps[0].host, host ? host : "?");
        eps[0].pid = (int)json_integer_value(json_object_get(root, "pid"));
        eps[0].target = *t;
        snprintf(eps[0].via, sizeof eps[0].via, t->kind == PB_TARGET_TCP ? "tcp" : "unix");
        eps[0].why[0] = '\0';
    } else {
        json_t *ranks = json_object_get(root, "ranks"), *item;
        size_t i;
        json_array_foreach(ranks, i, item) {
            const char *text = json_string_value(item);
            json_t *entry = text ? json_loads(text, 0, NULL) : NULL;
            json_int_t r = json_integer_value(json_object_get(entry, "rank"));
            if (json_is_object(entry) && r >= 0 && r < world) {
                eps[r].why[0] = '\0';
                fill_endpoint(&eps[r], entry);
            }
            json_decref(entry);
        }
        if (!json_is_true(json_object_get(root, "fresh")))
            pb_cli_error("the job's store did not answer in time; the roster is %.0f s old",
                         json_number_value(json_object_get(root, "roster_age_s")));
    }
    json_decref(root);
    *out = eps;
    *n = (int)world;
    return 0;
}

int pb_fanout_parse_ranks(const char *spec, int n, unsigned char *sel)
{
    memset(sel, 0, (size_t)n);
    if (strcmp(spec, "all") == 0) {
        memset(sel, 1, (size_t)n);
        return 0;
    }
    const char *p = spec;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0) goto bad;
        p = end;
        if (*p == '-') {
            const char *q = p + 1;
            b = strtol(q, &end, 10);
            if (end == q || b < a) goto bad;
            p = end;
        }
        if (*p == ',') p++;
        else if (*p) goto bad;
        if (b >= n) return pb_cli_usage_error("--ranks %s: the job has ranks 0 to %d", spec, n - 1);
        for (long r = a; r <= b; r++) sel[r] = 1;
    }
    return 0;
bad:
    return pb_cli_usage_error("--ranks wants 'all' or a list of ranks and ranges such as 0,2-5, "
                              "not '%s'", spec);
}

int pb_fanout_reachable(const pb_rank_ep *ep)
{
    return ep->via[0] && !(ep->target.kind == PB_TARGET_TCP &&
                           (!ep->target.token[0] || !ep->target.agent_id[0]));
}

int pb_fanout_prepare(pb_fanout_req *req, const pb_rank_ep *ep)
{
    if (pb_fanout_reachable(ep)) {
        req->target = ep->target;
        req->usable = 1;
    } else {
        req->usable = 0;
        snprintf(req->err, sizeof req->err, "%s", ep->why);
    }
    return req->usable;
}

long pb_fanout_deadline_ms(double deadline_s)
{
    return deadline_s > 0 ? (long)(deadline_s * 1000) : PB_FANOUT_DEADLINE_MS;
}

pb_fanout_req *pb_fanout_requests(const pb_rank_ep *eps, int n, const unsigned char *sel)
{
    pb_fanout_req *reqs = calloc((size_t)(n ? n : 1), sizeof *reqs);
    if (!reqs) {
        pb_cli_error("out of memory");
        return NULL;
    }
    for (int r = 0; r < n; r++) {
        if (sel && !sel[r]) continue;
        pb_fanout_prepare(&reqs[r], &eps[r]);
    }
    return reqs;
}

int pb_fanout_local_ranks(const char *dir, const char *job, long long world, long long my_rank,
                          pid_t my_pid, pb_local_rank **out)
{
    pid_t *pids = NULL;
    pb_local_rank *found = NULL;
    int count, n = 0;
    *out = NULL;
    count = pb_target_scan(dir, &pids);
    if (count <= 0) return count;
    if (!(found = calloc((size_t)count, sizeof *found))) {
        free(pids);
        return -ENOMEM;
    }
    for (int i = 0; i < count; i++) {
        char path[PATH_MAX];
        pb_local_rank *r = &found[n];
        if (pids[i] == my_pid) continue;
        if (pb_paths_socket(pids[i], path, sizeof path) ||
            pb_target_for_socket(pids[i], path, &r->target))
            continue;
        json_t *other = pb_client_get_object(&r->target, "/api/info", PB_CLI_LIST_TIMEOUT_MS);
        const char *other_job = json_string_value(json_object_get(other, "job"));
        json_t *other_world = json_object_get(other, "world_size");
        json_t *other_rank = json_object_get(other, "rank");
        int same = other_job && !strcmp(other_job, job) && json_is_integer(other_world) &&
                   json_integer_value(other_world) == world && json_is_integer(other_rank) &&
                   json_integer_value(other_rank) != my_rank;
        for (int k = 0; same && k < n; k++)
            if (found[k].rank == (int)json_integer_value(other_rank)) same = 0;
        if (same) {
            r->pid = pids[i];
            r->rank = (int)json_integer_value(other_rank);
            n++;
        }
        json_decref(other);
    }
    free(pids);
    if (n == 0) {
        free(found);
        found = NULL;
    }
    *out = found;
    return n;
}
