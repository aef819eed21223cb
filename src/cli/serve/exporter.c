/*
 * exporter.c - the exporter's server (serve/exporter.h), which `probing exporter [--listen
 * ADDR:PORT] [--sd FILE] [--timeout S]` (cmd/cmd_exporter.c) runs: one process per node serving
 * Prometheus metrics for every probing agent of this user.
 *
 * Serving: libmicrohttpd (as the agent's own server), a thread per connection, plain HTTP
 * `GET /metrics` (text exposition 0.0.4, exposition.c) and `GET /-/healthy`. The default
 * address is every interface, port PB_EXPORTER_DEFAULT_PORT (docs/exporter.md says why that
 * number). The main thread only waits for SIGINT/SIGTERM.
 *
 * A scrape (exporter_scrape.c: asking every agent, the series, the counters kept between
 * scrapes) has one deadline (--timeout, default 5 s, or less when Prometheus announces a
 * shorter scrape timeout). Scrapes run one at a time under exporter.lock; the wait for the
 * scrape before counts against the same deadline (503 "busy" when it runs out).
 *
 * State: `exporter` below. timeout_s and host are written by pb_exporter_serve before the
 * server starts, then only read; lock is taken by the server's connection threads.
 */
#include "serve/exporter.h"

#include "clock.h"
#include "http.h"
#include "netaddr.h"
#include "out/cli.h"
#include "paths.h"
#include "serve/exporter_scrape.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PB_EXPORTER_DEFAULT_PORT_TEXT "10089"
#define DEFAULT_TIMEOUT_S 5.0

static struct {
    pthread_mutex_t lock;          /* one scrape at a time (exporter_scrape.c's state) */
    double timeout_s;
    char host[256];
} exporter = {.lock = PTHREAD_MUTEX_INITIALIZER};

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type,
                               char *body, size_t len)
{
    return pb_http_respond(c, status, body, len, MHD_RESPMEM_MUST_FREE, type, NULL);
}

static enum MHD_Result respond_text(struct MHD_Connection *c, unsigned status, const char *text)
{
    return pb_http_respond(c, status, (void *)text, strlen(text), MHD_RESPMEM_MUST_COPY,
                           "text/plain; charset=utf-8", NULL);
}

/* Takes exporter.lock if it comes free within timeout_s, leaving at least a tenth of a second
 * of it for the scrape. Returns 0 (locked) or -ETIMEDOUT. [server thread] */
static int lock_within(double timeout_s)
{
    double wait_s = timeout_s - 0.1;
    if (wait_s <= 0) return pthread_mutex_trylock(&exporter.lock) ? -ETIMEDOUT : 0;
    /* pthread_mutex_timedlock counts in CLOCK_REALTIME */
    struct timespec until = pb_deadline_s(CLOCK_REALTIME, wait_s);
    int rc;
    while ((rc = pthread_mutex_timedlock(&exporter.lock, &until)) == EINTR) {}
    return rc ? -ETIMEDOUT : 0;
}

/* [server thread] */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)cls, (void)version, (void)upload_data, (void)upload_data_size, (void)con_cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return respond_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET is served\n");
    if (strcmp(url, "/-/healthy") == 0) return respond_text(c, MHD_HTTP_OK, "probing exporter is healthy\n");
    if (strcmp(url, "/") == 0)
        return respond_text(c, MHD_HTTP_OK,
                            "probing exporter: metrics of the probing agents of this node at "
                            "/metrics (docs/exporter.md)\n");
    if (strcmp(url, "/metrics") != 0)
        return respond_text(c, MHD_HTTP_NOT_FOUND,
                            "no such page; the metrics are at /metrics, health at /-/healthy\n");
    double timeout_s = exporter.timeout_s;
    const char *announced =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Prometheus-Scrape-Timeout-Seconds");
    if (announced) { /* leave Prometheus half a second to receive the answer */
        double t = strtod(announced, NULL);
        if (isfinite(t) && t - 0.5 > 0.1 && t - 0.5 < timeout_s) timeout_s = t - 0.5;
    }
    /* Scrapes run one at a time; the wait for the one before counts against this scrape's own
     * deadline, so an answer (503, which Prometheus records as up 0) still comes in time. */
    double started = pb_mono_s();
    if (lock_within(timeout_s)) {
        char text[200];
        snprintf(text, sizeof text,
                 "busy: the previous scrape still runs (an agent is slow to answer); this "
                 "scrape's %.1f s ran out waiting for it\n", timeout_s);
        return respond_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, text);
    }
    pb_buf body = PB_BUF_INIT;
    int rc = pb_exporter_scrape(timeout_s - (pb_mono_s() - started), &body);
    pthread_mutex_unlock(&exporter.lock);
    if (rc) {
        pb_buf_free(&body);
        return respond_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "the scrape failed: out of memory\n");
    }
    size_t len = 0;
    char *data = pb_buf_steal(&body, &len);
    if (!data) data = strdup("");
    return respond(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", data, len);
}

/* Opens the listening socket. Returns the fd, or -1 after printing why. */
static int open_listener(const char *spec, char *bound, size_t boundlen)
{
    pb_netaddr addr;
    if (pb_netaddr_parse(spec, &addr)) {
        pb_cli_error("--listen wants ADDR:PORT, [ADDR]:PORT or :PORT (port 0 to 65535), not "
                     "'%s'", spec);
        return -2;
    }
    struct sockaddr_storage ss;
    int gai = 0, fd = pb_netaddr_listen(&addr, 64, 1, &ss, &gai);
    if (gai) {
        pb_cli_error("cannot listen on '%s': %s", spec, gai_strerror(gai));
        return -1;
    }
    if (fd < 0) {
        pb_cli_error("cannot listen on '%s': %s%s", spec, strerror(-fd),
                     fd == -EADDRINUSE ? "; another exporter may run there: choose another port "
                                         "with --listen :PORT" : "");
        return -1;
    }
    char numhost[256] = "", numport[16] = "";
    socklen_t sl = ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    getnameinfo((struct sockaddr *)&ss, sl, numhost, sizeof numhost, numport, sizeof numport,
                NI_NUMERICHOST | NI_NUMERICSERV);
    int v6 = strchr(addr.host, ':') != NULL;
    if (addr.host[0]) snprintf(bound, boundlen, "%s%s%s:%s", v6 ? "[" : "", addr.host,
                               v6 ? "]" : "", numport);
    else snprintf(bound, boundlen, ":%s", numport);
    return fd;
}

/* Writes the file_sd file: one target group naming this exporter. Returns 0 or 1. */
static int write_sd(const char *path, const char *bound)
{
    char tmp[PATH_MAX], target[600];
    if (bound[0] == ':') snprintf(target, sizeof target, "%s%s", exporter.host, bound);
    else snprintf(target, sizeof target, "%s", bound);
    json_t *doc = json_pack("[{s:[s],s:{s:s}}]", "targets", target, "labels", "host",
                            exporter.host);
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp || !doc) {
        json_decref(doc);
        pb_cli_error("--sd: the file name is too long");
        return 1;
    }
    int rc = json_dump_file(doc, tmp, JSON_INDENT(2));
    json_decref(doc);
    if (rc || rename(tmp, path)) {
        pb_cli_error("cannot write the file_sd targets to %s: %s; give a writable path with "
                     "--sd FILE", path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    return 0;
}

int pb_exporter_serve(const pb_exporter_options *a)
{
    const char *listen_spec = a->listen ? a->listen : ":" PB_EXPORTER_DEFAULT_PORT_TEXT;
    char bound[300], dir[PATH_MAX];
    sigset_t signals;
    exporter.timeout_s = a->timeout_s > 0 ? a->timeout_s : DEFAULT_TIMEOUT_S;
    pb_netaddr_host_name(NULL, exporter.host, sizeof exporter.host);
    pb_exporter_scrape_init(exporter.host);
    if (pb_paths_dir(dir, sizeof dir))
        return pb_cli_error("the socket directory name is too long; set PROBING_DIR to a shorter "
                            "one");
    int fd = open_listener(listen_spec, bound, sizeof bound);
    if (fd < 0) return fd == -2 ? PB_EXIT_USAGE : PB_EXIT_ERROR;
    if (a->sd_file && write_sd(a->sd_file, bound)) {
        close(fd);
        return PB_EXIT_ERROR;
    }
    /* Every thread (libmicrohttpd's, the scrapes') inherits this mask; only sigwait sees them. */
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO |
            MHD_USE_ERROR_LOG,
        0, NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
        MHD_OPTION_END);
    if (!d) {
        pb_cli_error("cannot start the HTTP server on %s", bound);
        close(fd);
        if (a->sd_file) unlink(a->sd_file);
        return PB_EXIT_ERROR;
    }
    printf("probing exporter: serving http://%s/metrics for the agents in %s (deadline %g s per "
           "scrape)\n", bound[0] == ':' ? bound + 0 : bound, dir, exporter.timeout_s);
    fflush(stdout);
    int sig = 0;
    while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {}
    MHD_stop_daemon(d);
    close(fd);
    if (a->sd_file) unlink(a->sd_file);
    pb_exporter_scrape_free();
    printf("probing exporter: stopped (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    return PB_EXIT_OK;
}
