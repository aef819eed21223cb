/*
 * ui.c - the web view's server (serve/ui.h), which `probing <target> ui [--listen ADDR:PORT]
 * [--open]` (cmd/cmd_ui.c) runs; docs/ui.md.
 *
 * A small HTTP server inside the CLI (libmicrohttpd, as the agent): it serves the page (plain
 * HTML/JS/CSS from web/, with the vendored uPlot and d3-flame-graph) and a few JSON routes that
 * the page calls. The routes read the target exactly as the other commands do: /api/query and
 * /api/info through pb_client_request() (client.c for a live agent, recording.c for a recording,
 * which therefore works offline), the report and the folded flame-graph stacks by running this
 * same executable's `report --json` and `flamegraph --folded` (so the page shows what the
 * terminal shows, byte for byte). The agent's security model does not change: the page never
 * talks to an agent, only to this server, which talks to the agent as its owner.
 *
 * Access: 127.0.0.1 on a free port unless --listen says otherwise. A one-time random token is
 * printed in the URL (as Jupyter does). Cookies are per host, not per port: every server on
 * 127.0.0.1, another user's included, receives this view's cookie, and a page from another
 * 127.0.0.1 port is "same site" (SameSite does not stop it). So the cookie only opens the page
 * and its static files (nothing about the job): its value is a random secret of this instance,
 * not the token, under a name of this port (probing_ui_<port>). Every /ui/ route needs the token
 * itself, in the X-Probing-Token header (the page keeps it in sessionStorage, which is per
 * origin, port included, and drops it from the URL with history.replaceState) or in ?token=
 * (scripts). A browser cannot send a custom header to another origin without a CORS preflight,
 * which this server never grants. On every request the Host header must name this server (on a
 * loopback listener: 127.0.0.1, localhost or [::1], with our port: no DNS rebinding), and an
 * Origin header, when present, must be this server's own origin (so a no-cors POST from another
 * port is refused whatever it carries).
 *
 * Connections (docs/security.md, round three): a loopback peer that runs as another uid (found
 * in /proc/net/tcp; listen.c) is closed at accept; up to UI_MAX_CONNECTIONS connections are served, each
 * request must arrive whole within UI_REQUEST_DEADLINE_S (pb_reaper, as the agent's server
 * does) and an idle keep-alive connection is closed after UI_IDLE_TIMEOUT_S, so idle or slow
 * sockets cannot hold the view.
 *
 * Ranks: when the target is one rank of a job, the job's other ranks are found at start
 * (ui_ranks.c: the job's roster, else the local agents of the same job); targets[0] is always the
 * target itself. The page's rank view queries each of them. For a stalled job the page shows
 * `hang`'s text and each stalled rank's stacks (the agent's /api/stack); for a running one,
 * `stragglers --json`: which rank the others wait for in the collectives.
 *
 * Routes (the page and its files need the token or the cookie, /ui/ routes the token):
 *   GET  /                    web/index.html           GET /web/<file>, /web/vendor/<file>
 *   GET  /ui/targets          {"target", "kind", "node", "targets": [{"index","rank","pid",
 *                             "host","node_rank"}], "missing": [{"rank","host","why"}],
 *                             "phases": [{"column","label","short","text","rank_wait",
 *                             "holds_wait"}] (common/phases.h: the page's list of phases)}
 *   POST /ui/query?t=N        /api/query of target N (the agent's status and JSON, relayed)
 *   GET  /ui/info?t=N         /api/info of target N
 *   GET  /ui/report           `probing <target> report --json`
 *   GET  /ui/flamegraph?stage=forward|backward   `probing <target> flamegraph --folded`
 *   GET  /ui/hang             `probing <target> hang` (text)
 *   GET  /ui/stragglers       `probing <target> stragglers --json`
 *   GET  /ui/stack?t=N        /api/stack of target N: its threads' Python stacks
 *   POST /ui/capture, GET /ui/capture, GET /ui/capture/trace   relayed to the target's capture
 *   GET  /ui/queries          the cookbook: {"dir", "queries": [{"name", "sql"}]}
 *
 * Threads: libmicrohttpd runs one thread per connection; the main thread waits for SIGINT or
 * SIGTERM. client.c makes a fresh libcurl handle per request; recording.c keeps one database
 * handle, so requests to a recording are serialised by file_lock.
 */
#include "serve/ui.h"

#include "auth.h"
#include "child.h"
#include "client/client.h"
#include "client/package.h"
#include "client/recording.h"
#include "http.h"
#include "netaddr.h"
#include "out/cli.h"
#include "phases.h"
#include "reaper.h"
#include "serve/listen.h"
#include "serve/ui_server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define UI_MAX_UPLOAD ((size_t)1 << 20)     /* request bodies: SQL, capture options */
#define UI_MAX_ASSET ((size_t)16 << 20)
#define UI_MAX_QUERIES 200
/* Cookies do not tell ports apart: each view's cookie is named after its port
 * (probing_ui_<port>) so that two views open in one browser do not log each other out. */
#define UI_COOKIE_PREFIX "probing_ui_"
#define UI_TOKEN_HEADER "X-Probing-Token"
#define UI_MAX_CONNECTIONS 512u  /* a thread each; idle sockets are reaped, see below */
#define UI_REQUEST_DEADLINE_S 10 /* a request's headers and body, from its first byte */
#define UI_IDLE_TIMEOUT_S 30u    /* a keep-alive connection with no request */
#define UI_CHILD_TIMEOUT_S 120

typedef struct upload {
    pb_buf body;
    int too_big;
} upload;

/* ---- small helpers ---------------------------------------------------------------------- */

static int path_exists(const char *dir, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) return 0;
    return stat(p, &st) == 0;
}

/* Finds the page: $PROBING_WEB_DIR, the installed package's probing/web (meson installs web/
 * there), or web/ of the source tree that holds this build (build/src/cli/probing). Returns 0
 * or -1. */
static int find_web_dir(ui_server *s)
{
    const char *env = getenv("PROBING_WEB_DIR");
    char pkg[PATH_MAX], cand[PATH_MAX + 64];
    if (env && *env && path_exists(env, "index.html")) {
        snprintf(s->web_dir, sizeof s->web_dir, "%s", env);
        return 0;
    }
    if (pb_package_find(pkg, sizeof pkg) == 0) {
        snprintf(cand, sizeof cand, "%s/probing/web", pkg);
        if (path_exists(cand, "index.html") && realpath(cand, s->web_dir)) return 0;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", s->exe);
    char *slash = strrchr(dir, '/');
    if (!slash) return -1;
    *slash = '\0';
    static const char *const rel[] = {"../../../web", "../../web", "../web"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        snprintf(cand, sizeof cand, "%s/%s", dir, rel[i]);
        if (path_exists(cand, "index.html") && path_exists(cand, "ui.js") &&
            realpath(cand, s->web_dir))
            return 0;
    }
    return -1;
}

/* The cookbook of example queries: $PROBING_QUERIES_DIR, examples/queries next to the web
 * directory's parent (the repository or the installed package). Leaves "" when none. */
static void find_queries_dir(ui_server *s)
{
    const char *env = getenv("PROBING_QUERIES_DIR");
    char cand[PATH_MAX + 64];
    s->queries_dir[0] = '\0';
    if (env && *env) {
        snprintf(s->queries_dir, sizeof s->queries_dir, "%s", env);
        return;
    }
    snprintf(cand, sizeof cand, "%s/../examples/queries", s->web_dir);
    if (!realpath(cand, s->queries_dir)) s->queries_dir[0] = '\0';
}

/* ---- responses ---------------------------------------------------------------------------- */

static enum MHD_Result send_bytes(struct MHD_Connection *conn, unsigned status, const char *type,
                                  const void *data, size_t len, int set_cookie, const ui_server *s,
                                  const char *disposition)
{
    char cookie[160];
    if (set_cookie)
        snprintf(cookie, sizeof cookie, "%s=%s; Path=/; HttpOnly; SameSite=Strict",
                 s->cookie_name, s->cookie);
    const char *const headers[] = {
        "Cache-Control", "no-store",
        "X-Content-Type-Options", "nosniff",
        "Referrer-Policy", "no-referrer",
        "Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                                   "img-src 'self' data:; connect-src 'self'",
        "Content-Disposition", disposition,
        "Set-Cookie", set_cookie ? cookie : NULL,
        NULL};
    return pb_http_respond(conn, status, (void *)data, len, MHD_RESPMEM_MUST_COPY, type, headers);
}

static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status, const char *msg)
{
    json_t *o = json_pack("{s:s}", "error", msg);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    enum MHD_Result ret = send_bytes(conn, status, "application/json", text ? text : "{}",
                                     text ? strlen(text) : 2, 0, NULL, NULL);
    free(text);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *conn, json_t *o)
{
    char *text = json_dumps(o, JSON_COMPACT);
    if (!text) return send_error(conn, 500, "out of memory");
    enum MHD_Result ret =
        send_bytes(conn, 200, "application/json", text, strlen(text), 0, NULL, NULL);
    free(text);
    return ret;
}

static const char *content_type(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot) return "application/octet-stream";
    if (!strcmp(dot, ".html")) return "text/html; charset=utf-8";
    if (!strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
    if (!strcmp(dot, ".css")) return "text/css; charset=utf-8";
    if (!strcmp(dot, ".png")) return "image/png";
    if (!strcmp(dot, ".svg")) return "image/svg+xml";
    return "text/plain; charset=utf-8";
}

/* True for a file name the page may ask for: letters, digits, '.', '-', '_', not starting with
 * '.', so no path can leave the web directory. */
static int safe_name(const char *name)
{
    if (!*name || *name == '.') return 0;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '-' || *p == '_'))
            return 0;
    return 1;
}

static int read_file(const char *path, pb_buf *out, size_t max)
{
    FILE *f = fopen(path, "rb");
    char chunk[65536];
    size_t n;
    if (!f) return -errno;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (out->len + n > max || pb_buf_append(out, chunk, n)) {
            fclose(f);
            return -EFBIG;
        }
    }
    int bad = ferror(f);
    fclose(f);
    return bad ? -EIO : 0;
}

static enum MHD_Result serve_asset(struct MHD_Connection *conn, const ui_server *s,
                                   const char *sub, const char *name, int set_cookie)
{
    char path[PATH_MAX * 2];
    pb_buf b = PB_BUF_INIT;
    if (!safe_name(name)) return send_error(conn, 404, "no such file in the web view");
    snprintf(path, sizeof path, "%s/%s%s", s->web_dir, sub, name);
    if (read_file(path, &b, UI_MAX_ASSET)) {
        pb_buf_free(&b);
        return send_error(conn, 404, "no such file in the web view");
    }
    enum MHD_Result ret =
        send_bytes(conn, 200, content_type(name), b.data ? b.data : "", b.len, set_cookie, s, NULL);
    pb_buf_free(&b);
    return ret;
}

/* ---- talking to the target ---------------------------------------------------------------- */

/* pb_client_request() on target `index`, serialised for a recording (recording.c keeps one
 * database handle). [server thread] */
static int target_request(ui_server *s, size_t index, const char *method, const char *path,
                          const char *body, long timeout_ms, pb_response *resp, char *err,
                          size_t errlen)
{
    const pb_target *t = &s->targets[index].t;
    int locked = t->kind == PB_TARGET_FILE;
    if (locked) pthread_mutex_lock(&s->file_lock);
    int rc = pb_client_request(t, method, path, body, timeout_ms, resp, err, errlen);
    if (locked) pthread_mutex_unlock(&s->file_lock);
    return rc;
}

/* Relays one request to target `index`, its status and body unchanged; a transport failure
 * becomes 502 with the CLI's message. disposition (borrowed, may be NULL) marks a 200 answer as
 * a download. [server thread] */
static enum MHD_Result relay(struct MHD_Connection *conn, ui_server *s, size_t index,
                             const char *method, const char *path, const char *body,
                             long timeout_ms, const char *disposition)
{
    pb_response resp;
    char err[1024];
    if (target_request(s, index, method, path, body, timeout_ms, &resp, err, sizeof err))
        return send_error(conn, 502, err);
    enum MHD_Result ret =
        send_bytes(conn, (unsigned)resp.status, "application/json",
                   resp.body.data ? resp.body.data : "",
                   resp.body.len, 0, s, resp.status == 200 ? disposition : NULL);
    pb_buf_free(&resp.body);
    return ret;
}

/* Runs this executable with argv (NULL-terminated; argv[0] is replaced by the executable),
 * collecting stdout into out and stderr into err. Returns the exit status, or -1 when it could
 * not run or ran past UI_CHILD_TIMEOUT_S (then killed). */
/* Set once SIGINT/SIGTERM arrived: children still running are killed (they inherit the blocked
 * signals, and a hostile recording can keep one busy for PROBING_QUERY_TIMEOUT). */
static atomic_int ui_stopping;

static int ui_is_stopping(void) { return atomic_load(&ui_stopping); }

static int run_self(const ui_server *s, char **argv, pb_buf *out, pb_buf *err)
{
    argv[0] = (char *)s->exe;
    /* a TCP target's token goes to the child in its environment, never on its command line
     * (which other users can read in /proc) */
    char **env = environ, **own_env = NULL, token_var[300];
    const pb_target *t = &s->targets[0].t;
    if (t->kind == PB_TARGET_TCP && t->token[0]) {
        size_t n = 0;
        while (environ[n]) n++;
        own_env = calloc(n + 2, sizeof *own_env);
        if (own_env) {
            size_t k = 0;
            for (size_t i = 0; i < n; i++)
                if (strncmp(environ[i], "PROBING_TOKEN=", 14)) own_env[k++] = environ[i];
            snprintf(token_var, sizeof token_var, "PROBING_TOKEN=%s", t->token);
            own_env[k] = token_var;
            env = own_env;
        }
    }
    pb_child_opts opts = {.file = s->exe, .argv = argv, .envp = env,
                          .in = PB_CHILD_NULL, .out = PB_CHILD_PIPE, .err = PB_CHILD_PIPE};
    pid_t pid;
    int out_fd, err_fd;
    int rc = pb_child_start(&opts, &pid, &out_fd, &err_fd);
    free(own_env);
    if (rc) {
        pb_buf_printf(err, "cannot run %s: %s", s->exe, strerror(-rc));
        return -1;
    }
    rc = pb_child_collect(pid, out_fd, err_fd, out, err, PB_CLIENT_MAX_BODY,
                          UI_CHILD_TIMEOUT_S * 1000, ui_is_stopping);
    if (rc == -ECANCELED) pb_buf_printf(err, "stopped: the web view is stopping");
    else if (rc) pb_buf_printf(err, "gave no answer within %d s", UI_CHILD_TIMEOUT_S);
    int status = pb_child_wait(pid);
    return rc ? -1 : status;
}

/* Answers with the stdout of `probing <argv...>` (200), or 502 with its error message. */
static enum MHD_Result serve_self(struct MHD_Connection *conn, ui_server *s, char **argv,
                                  const char *type)
{
    pb_buf out = PB_BUF_INIT, err = PB_BUF_INIT;
    int rc = run_self(s, argv, &out, &err);
    enum MHD_Result ret;
    if (rc == 0) {
        ret = send_bytes(conn, 200, type, out.data ? out.data : "", out.len, 0, s, NULL);
    } else {
        pb_buf_putc(&err, '\0');
        char *msg = err.data ? err.data : "";
        if (!strncmp(msg, "probing: ", 9)) msg += 9;
        size_t n = strlen(msg);
        while (n && msg[n - 1] == '\n') msg[--n] = '\0';
        ret = send_error(conn, 502, *msg ? msg : "the command failed without a message");
    }
    pb_buf_free(&out);
    pb_buf_free(&err);
    return ret;
}

/* ---- routes ------------------------------------------------------------------------------- */

/* GET /ui/hang and GET /ui/stragglers: `probing <target> hang` as text, as the terminal shows
 * it, and `probing <target> stragglers --json`; their exit status 3 (some ranks did not answer:
 * named in the text, or left out of the analysis) is an answer too. A recording has no live
 * collectives: 400. argv[2] is the command. */
static enum MHD_Result route_job(struct MHD_Connection *conn, ui_server *s, char **argv,
                                 const char *type)
{
    char msg[200];
    if (s->targets[0].t.kind == PB_TARGET_FILE) {
        snprintf(msg, sizeof msg, "a recording has no live collectives: %s needs the job", argv[2]);
        return send_error(conn, 400, msg);
    }
    pb_buf out = PB_BUF_INIT, err = PB_BUF_INIT;
    int rc = run_self(s, argv, &out, &err);
    enum MHD_Result ret;
    if (rc == PB_EXIT_OK || rc == PB_EXIT_PARTIAL) {
        ret = send_bytes(conn, 200, type, out.data ? out.data : "", out.len, 0, s, NULL);
    } else {
        pb_buf_putc(&err, '\0');
        const char *why = err.data && !strncmp(err.data, "probing: ", 9) ? err.data + 9
                          : err.data ? err.data : "";
        snprintf(msg, sizeof msg, "%s failed without a message", argv[2]);
        ret = send_error(conn, 502, *why ? why : msg);
    }
    pb_buf_free(&out);
    pb_buf_free(&err);
    return ret;
}

static enum MHD_Result route_targets(struct MHD_Connection *conn, ui_server *s)
{
    json_t *list = json_array();
    for (size_t i = 0; i < s->ntargets; i++)
        json_array_append_new(list, json_pack("{s:I,s:i,s:I,s:s,s:i}", "index", (json_int_t)i,
                                              "rank", s->targets[i].rank, "pid",
                                              (json_int_t)s->targets[i].pid, "host",
                                              s->targets[i].host[0] ? s->targets[i].host
                                                                    : s->node,
                                              "node_rank", s->targets[i].node_rank));
    json_t *phases = json_array();
    for (int p = 0; p < PB_PHASE_COUNT; p++) {
        const pb_phase *ph = &pb_phases[p];
        json_array_append_new(phases, json_pack("{s:s,s:s,s:s,s:s,s:b,s:b}", "column", ph->column,
                                                "label", ph->label, "short", ph->short_name, "text",
                                                ph->short_text, "rank_wait",
                                                !!(ph->flags & PB_PHASE_RANK_WAIT), "holds_wait",
                                                !!(ph->flags & PB_PHASE_HOLDS_WAIT)));
    }
    json_t *o = json_pack("{s:s,s:s,s:s,s:o,s:O,s:o}", "target", s->a->target, "kind",
                          s->targets[0].t.kind == PB_TARGET_FILE ? "recording" : "live", "node",
                          s->node, "targets", list, "missing", s->missing, "phases", phases);
    enum MHD_Result ret = o ? send_json(conn, o) : send_error(conn, 500, "out of memory");
    json_decref(o);
    return ret;
}

static int by_name(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

static enum MHD_Result route_queries(struct MHD_Connection *conn, ui_server *s)
{
    json_t *list = json_array();
    char *names[UI_MAX_QUERIES];
    size_t count = 0;
    DIR *d = s->queries_dir[0] ? opendir(s->queries_dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d)) && count < UI_MAX_QUERIES) {
        size_t n = strlen(e->d_name);
        if (n > 4 && !strcmp(e->d_name + n - 4, ".sql") && safe_name(e->d_name))
            if ((names[count] = strdup(e->d_name))) count++;
    }
    if (d) closedir(d);
    qsort(names, count, sizeof *names, by_name);
    for (size_t i = 0; i < count; i++) {
        char path[PATH_MAX * 2];
        pb_buf b = PB_BUF_INIT;
        snprintf(path, sizeof path, "%s/%s", s->queries_dir, names[i]);
        if (read_file(path, &b, 1 << 20) == 0 && !pb_buf_putc(&b, '\0'))
            json_array_append_new(list, json_pack("{s:s,s:s}", "name", names[i], "sql", b.data));
        pb_buf_free(&b);
        free(names[i]);
    }
    json_t *o = json_pack("{s:s?,s:o}", "dir", s->queries_dir[0] ? s->queries_dir : NULL,
                          "queries", list);
    enum MHD_Result ret = o ? send_json(conn, o) : send_error(conn, 500, "out of memory");
    json_decref(o);
    return ret;
}

/* The ?t= argument: an index into targets, 0 when absent; -1 when out of range. */
static long target_index(struct MHD_Connection *conn, const ui_server *s)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "t");
    if (!v) return 0;
    char *end;
    long i = strtol(v, &end, 10);
    return *v && !*end && i >= 0 && (size_t)i < s->ntargets ? i : -1;
}

static enum MHD_Result route(struct MHD_Connection *conn, ui_server *s, const char *url,
                             const char *method, const char *body, int set_cookie)
{
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (get && (!strcmp(url, "/") || !strcmp(url, "/index.html")))
        return serve_asset(conn, s, "", "index.html", set_cookie);
    if (get && !strncmp(url, "/web/vendor/", 12)) return serve_asset(conn, s, "vendor/", url + 12, 0);
    if (get && !strncmp(url, "/web/", 5)) return serve_asset(conn, s, "", url + 5, 0);
    if (get && !strcmp(url, "/ui/targets")) return route_targets(conn, s);
    if (get && !strcmp(url, "/ui/queries")) return route_queries(conn, s);
    long t = target_index(conn, s);
    if (t < 0) return send_error(conn, 400, "t= names no target of this view (see /ui/targets)");
    if (post && !strcmp(url, "/ui/query"))
        return relay(conn, s, (size_t)t, "POST", "/api/query", body, PB_CLI_QUERY_TIMEOUT_MS, NULL);
    if (get && !strcmp(url, "/ui/info"))
        return relay(conn, s, (size_t)t, "GET", "/api/info", NULL, PB_CLI_INFO_TIMEOUT_MS, NULL);
    if (get && !strcmp(url, "/ui/report")) {
        char *argv[] = {NULL, (char *)s->a->target, "report", "--json", NULL};
        return serve_self(conn, s, argv, "application/json");
    }
    if (get && !strcmp(url, "/ui/flamegraph")) {
        const char *stage = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "stage");
        if (!stage) stage = "forward";
        if (strcmp(stage, "forward") && strcmp(stage, "backward") && strcmp(stage, "step"))
            return send_error(conn, 400, "stage= wants forward, backward or step");
        char *argv[] = {NULL, (char *)s->a->target, "flamegraph", "--folded", "--stage",
                        (char *)stage, NULL};
        return serve_self(conn, s, argv, "text/plain; charset=utf-8");
    }
    if (get && !strcmp(url, "/ui/stack"))
        return relay(conn, s, (size_t)t, "GET", "/api/stack", NULL, PB_CLI_INFO_TIMEOUT_MS, NULL);
    if (get && !strcmp(url, "/ui/hang")) {
        char *argv[] = {NULL, (char *)s->a->target, "hang", NULL};
        return route_job(conn, s, argv, "text/plain; charset=utf-8");
    }
    if (get && !strcmp(url, "/ui/stragglers")) {
        char *argv[] = {NULL, (char *)s->a->target, "stragglers", "--json", NULL};
        return route_job(conn, s, argv, "application/json");
    }
    if (post && !strcmp(url, "/ui/capture"))
        return relay(conn, s, 0, "POST", "/api/capture", body, PB_CLI_INFO_TIMEOUT_MS, NULL);
    if (get && !strcmp(url, "/ui/capture"))
        return relay(conn, s, 0, "GET", "/api/capture", NULL, PB_CLI_INFO_TIMEOUT_MS, NULL);
    if (get && !strcmp(url, "/ui/capture/trace"))
        return relay(conn, s, 0, "GET", "/api/capture/trace", NULL, PB_CLI_QUERY_TIMEOUT_MS,
                     "attachment; filename=\"probing-capture.json\"");
    if (!get && !post) return send_error(conn, 405, "the web view answers GET and POST only");
    return send_error(conn, 404, "no such page in the web view");
}

static const char forbidden_no_token[] =
    "403 forbidden: this web view needs its token. Open the URL that 'probing <target> ui' "
    "printed (it ends in ?token=...); the token changes each time ui starts.\n";
static const char forbidden_cookie_only[] =
    "403 forbidden: the web view's data needs its token (the X-Probing-Token header that its "
    "page sends, or ?token=); the cookie opens the page only. Open the URL that 'probing <target> "
    "ui' printed.\n";
static const char forbidden_host[] =
    "403 forbidden: the Host header does not name this web view (DNS rebinding?); open the URL "
    "that 'probing <target> ui' printed.\n";
static const char forbidden_origin[] =
    "403 forbidden: a request from a page of another origin; the web view answers its own page "
    "only.\n";

/* Host names this server: our port and, on a loopback listener, a loopback name. Writes the
 * origin a page of ours would send ("http://" Host) to origin. */
static int host_is_ours(const ui_server *s, const char *host, char *origin, size_t originlen)
{
    static const char *const loopback[] = {"127.0.0.1", "localhost", "[::1]"};
    const char *colon = host ? strrchr(host, ':') : NULL;
    if (!colon || colon == host || !colon[1]) return 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port != s->port) return 0;
    size_t hl = (size_t)(colon - host);
    int named = !s->loopback;
    for (size_t i = 0; !named && i < sizeof loopback / sizeof loopback[0]; i++)
        named = hl == strlen(loopback[i]) && !strncasecmp(host, loopback[i], hl);
    if (!named) return 0;
    return snprintf(origin, originlen, "http://%s", host) < (int)originlen;
}

/* Who may have this request answered (file header, "Access"): NULL when it may (by_query set
 * when it carried ?token=, which earns the cookie), else the 403 text. [server thread] */
static const char *admit(struct MHD_Connection *conn, const ui_server *s, const char *url,
                         int *by_query)
{
    char own_origin[300];
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
    if (!host_is_ours(s, host, own_origin, sizeof own_origin)) return forbidden_host;
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (origin && strcasecmp(origin, own_origin)) return forbidden_origin;
    const char *q = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "token");
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, UI_TOKEN_HEADER);
    const char *c = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, s->cookie_name);
    *by_query = q && pb_auth_token_equal(q, strlen(q), s->token);
    if (*by_query || (h && pb_auth_token_equal(h, strlen(h), s->token))) return NULL;
    if (!(c && pb_auth_token_equal(c, strlen(c), s->cookie))) return forbidden_no_token;
    /* the cookie alone: the page and its static files, nothing about the job */
    int page = !strcmp(url, "/") || !strcmp(url, "/index.html") || !strncmp(url, "/web/", 5);
    return page ? NULL : forbidden_cookie_only;
}

/* [server thread] */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    ui_server *s = cls;
    upload *up = *con_cls;
    if (!up) {
        if (!(up = calloc(1, sizeof *up))) return MHD_NO;
        *con_cls = up;
        return MHD_YES;
    }
    if (*data_size) {
        if (up->body.len + *data_size > UI_MAX_UPLOAD) up->too_big = 1;
        else if (pb_buf_append(&up->body, data, *data_size)) up->too_big = 1;
        *data_size = 0;
        return MHD_YES;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    pb_reaper_read(s->reaper, ci ? ci->socket_context : NULL);
    int by_query = 0;
    const char *refused = admit(conn, s, url, &by_query);
    if (refused)
        return send_bytes(conn, 403, "text/plain; charset=utf-8", refused, strlen(refused), 0, s,
                          NULL);
    if (up->too_big) return send_error(conn, 413, "request body over 1 MiB");
    if (pb_buf_putc(&up->body, '\0')) return send_error(conn, 500, "out of memory");
    return route(conn, s, url, method, up->body.data, by_query);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code)
{
    ui_server *s = cls;
    upload *up = *con_cls;
    if (up) {
        pb_buf_free(&up->body);
        free(up);
    }
    *con_cls = NULL;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    pb_reaper_next(s->reaper, ci ? ci->socket_context : NULL);
}

/* Watches each connection's request deadline (pb_reaper). [server thread] */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    ui_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? pb_reaper_open(s->reaper, ci->connect_fd) : NULL;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        pb_reaper_close(s->reaper, *socket_context);
        *socket_context = NULL;
    }
}

/* MHD's accept policy: a loopback peer that runs as another user (not root) is closed at once,
 * before it takes a connection slot; it could not know the token anyway (listen.h).
 * [server thread] */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)cls, (void)addrlen;
    return pb_listen_peer_allowed(addr) ? MHD_YES : MHD_NO;
}

/* ---- start-up ----------------------------------------------------------------------------- */

/* --open: the user's browser ($BROWSER, else xdg-open), not waited for: returns its pid (to
 * reap later) or 0. */
static pid_t open_browser(const char *url)
{
    const char *browser = getenv("BROWSER");
    char *argv[] = {(char *)(browser && *browser ? browser : "xdg-open"), (char *)url, NULL};
    pid_t pid;
    pb_child_opts opts = {.file = argv[0], .argv = argv, .search = 1, .in = PB_CHILD_NULL,
                          .out = PB_CHILD_NULL};
    int rc = pb_child_start(&opts, &pid, NULL, NULL);
    if (rc) {
        pb_cli_error("warning: --open: cannot start %s (%s); open the URL above by hand",
                     argv[0], strerror(-rc));
        return 0;
    }
    return pid;
}

int pb_ui_serve(const pb_ui_options *a)
{
    ui_server s;
    struct MHD_Daemon *d = NULL;
    json_t *info = NULL;
    int rc = PB_EXIT_ERROR, fd = -1;
    char shown[300], url[400];
    sigset_t stop;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.file_lock, NULL);
    s.a = a;
    ssize_t n = readlink("/proc/self/exe", s.exe, sizeof s.exe - 1);
    if (n <= 0) {
        pb_cli_error("cannot find this executable (/proc/self/exe): %s", strerror(errno));
        goto done;
    }
    s.exe[n] = '\0';
    if (find_web_dir(&s)) {
        pb_cli_error("cannot find the web view's files (index.html): reinstall probing, or set "
                     "PROBING_WEB_DIR to the directory that holds them (web/ in the source)");
        goto done;
    }
    find_queries_dir(&s);
    pb_netaddr_host_name(NULL, s.node, sizeof s.node);
    if (!(s.targets = calloc(1, sizeof *s.targets))) goto oom;
    s.targets[0].t = a->resolved;
    s.ntargets = 1;
    info = pb_ui_info_of(&s, &a->resolved, PB_CLI_INFO_TIMEOUT_MS);
    if (!info) { /* say why, as every command does */
        json_t *root = NULL;
        long status = 0;
        if (pb_client_call(&a->resolved, "GET", "/api/info", NULL, PB_CLI_INFO_TIMEOUT_MS, &root,
                           &status) == 0)
            pb_client_print_error(status, root);
        json_decref(root);
        goto done;
    }
    s.targets[0].rank = (int)json_integer_value(json_object_get(info, "rank"));
    s.targets[0].pid = (long long)json_integer_value(json_object_get(info, "pid"));
    if (!(s.missing = json_array())) goto oom;
    if (pb_ui_roster_ranks(&s, info)) pb_ui_find_ranks(&s, info);
    if (pb_auth_random_hex(s.token, 24) || pb_auth_random_hex(s.cookie, 24)) {
        pb_cli_error("cannot draw a random token: %s", strerror(errno));
        goto done;
    }
    int port = 0;
    fd = pb_listen_open(a->listen ? a->listen : "127.0.0.1:0", shown, sizeof shown, &port,
                       &s.loopback);
    s.port = port;
    if (fd < 0) {
        rc = a->listen ? PB_EXIT_USAGE : PB_EXIT_ERROR;
        goto done;
    }
    snprintf(s.cookie_name, sizeof s.cookie_name, UI_COOKIE_PREFIX "%d", port);
    /* SIGINT/SIGTERM are taken by sigwait below: block them before the server's threads start
     * so that they inherit the mask. */
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (pb_reaper_start(&s.reaper, UI_REQUEST_DEADLINE_S)) {
        pb_cli_error("cannot start the web server's connection watchdog: out of resources");
        goto done;
    }
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                             MHD_USE_POLL,
                         0, on_accept, NULL, on_request, &s, MHD_OPTION_LISTEN_SOCKET, fd,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, &s,
                         MHD_OPTION_NOTIFY_CONNECTION, on_connection, &s,
                         MHD_OPTION_CONNECTION_TIMEOUT, UI_IDLE_TIMEOUT_S,
                         MHD_OPTION_CONNECTION_LIMIT, UI_MAX_CONNECTIONS, MHD_OPTION_END);
    if (!d) {
        pb_cli_error("cannot start the web server on %s", shown);
        goto done;
    }
    fd = -1; /* the daemon owns it now and closes it when stopped */
    snprintf(url, sizeof url, "http://%s/?token=%s", shown, s.token);
    printf("%s\n", url);
    fflush(stdout);
    fprintf(stderr, "probing: the web view of %s is at the URL above; Ctrl-C stops it\n",
            a->target);
    pid_t browser = a->open_browser ? open_browser(url) : 0;
    struct timespec tick = {1, 0};
    while (sigtimedwait(&stop, NULL, &tick) < 0) /* EAGAIN each second, EINTR */
        if (browser > 0 && waitpid(browser, NULL, WNOHANG) == browser) browser = 0;
    /* A thread may be reading a recording (a slow or hostile file): stop its statement, or
     * MHD_stop_daemon below would wait for it. */
    atomic_store(&ui_stopping, 1);
    pb_recording_interrupt_all();
    rc = PB_EXIT_OK;
    goto done;
oom:
    pb_cli_error("out of memory");
done:
    if (d) MHD_stop_daemon(d);
    pb_reaper_stop(s.reaper); /* after the daemon: its connections are closed */
    if (fd >= 0) close(fd);
    json_decref(info);
    json_decref(s.missing);
    free(s.targets);
    pthread_mutex_destroy(&s.file_lock);
    return rc;
}
