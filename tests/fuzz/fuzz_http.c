/*
 * fuzz_http.c - libFuzzer target for the agent's HTTP request path, over a real Unix socket.
 *
 * LLVMFuzzerInitialize() starts a pb_server (the agent's server: libmicrohttpd, the peer-uid
 * check, the route table, the SQL pool) on a socket in a temporary directory, over the small
 * table of fuzz_table.h, with fake eval/info/capture/record callbacks (eval echoes the code's
 * length and runs nothing; capture and record answer a status and start nothing, so the request
 * checks of routes.c in front of them are what gets fuzzed). Each input is written as raw bytes on a fresh connection, the write side is then
 * shut down and the answer read to the end. Checks: no sanitizer report in the server's
 * threads; the server answers each connection within 15 s of the client's end of input (the
 * server's own idle timeout is 10 s); an answer is an HTTP/1.x status line, and one that says
 * application/json carries a body that parses as JSON. Queries are limited to 1 s and 1 MB.
 * Built and run by scripts/fuzz.sh.
 */
#include "config.h"
#include "error.h"
#include "fuzz_table.h"
#include "server.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

static char dir[64], sock_path[128];
static pb_server *server;

static int fake_eval(void *ctx, const char *code, double timeout_s, pb_db_cancel_fn cancelled,
                     void *cancel_ctx, pb_buf *out, int *status)
{
    return pb_buf_printf(out, "{\"ok\":true,\"stdout\":\"%zu\",\"stderr\":\"\"}", strlen(code));
}

static int fake_info(void *ctx, pb_buf *out)
{
    return pb_buf_printf(out, "{\"pid\":%d,\"version\":\"fuzz\"}", (int)getpid());
}

static int fake_capture(void *ctx, pb_capture_verb verb, const pb_capture_request *req, pb_buf *out)
{
    if (verb == PB_CAPTURE_TRACE) return pb_buf_printf(out, "{\"error\":\"no trace\"}") ? 500 : 404;
    return pb_buf_printf(out, "{\"capture\":null,\"state\":\"none\",\"steps\":%d}", req ? req->steps : 0) ? 500 : 200;
}

static int fake_record(void *ctx, pb_record_verb verb, const pb_record_request *req, pb_buf *out)
{
    /* the path is only measured: the fuzzer must never make files */
    return pb_buf_printf(out, "{\"recording\":false,\"path_len\":%zu}", req && req->path ? strlen(req->path) : 0)
               ? 500
               : 200;
}

static void stop_server(void)
{
    pb_server_stop(server);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    signal(SIGPIPE, SIG_IGN);
    pb_config_load();
    snprintf(dir, sizeof dir, "/tmp/probing-fuzz-http-XXXXXX");
    if (!mkdtemp(dir)) abort();
    snprintf(sock_path, sizeof sock_path, "%s/%d.sock", dir, (int)getpid());
    pb_server_opts o = {.unix_path = sock_path, .eval = fake_eval, .info = fake_info,
                        .capture = fake_capture, .record = fake_record,
                        .limits = {.max_result_bytes = 1 << 20, .timeout_s = 1.0}};
    int rc = fuzz_table_setup();
    if (!rc) rc = pb_server_start(&server, &o);
    if (rc) {
        fprintf(stderr, "fuzz_http: cannot start the server: %s\n", pb_strerror(rc));
        abort();
    }
    atexit(stop_server);
    return 0;
}

/* Checks the answers (len bytes; several when requests were pipelined), each delimited by its
 * Content-Length. */
static const char *answer_start;
static size_t answer_len;

static void check_answer(const char *a, size_t len)
{
    answer_start = a;
    answer_len = len;
    while (len > 0) { /* len 0: closed without (another) answer, e.g. MHD on a bad request */
        if (len < 12 || memcmp(a, "HTTP/1.", 7) != 0) {
            fprintf(stderr, "fuzz_http: the answer is not HTTP: %.*s\n", (int)(len > 200 ? 200 : len), a);
            if (getenv("FUZZ_HTTP_DEBUG")) fwrite(answer_start, 1, answer_len, stderr);
            abort();
        }
        const char *end = memmem(a, len, "\r\n\r\n", 4);
        if (!end) return; /* cut short by the server closing: not ours to judge here */
        size_t head_len = (size_t)(end - a);
        char *head = strndup(a, head_len);
        if (!head) return;
        const char *body = end + 4;
        size_t body_len = len - head_len - 4;
        const char *cl = strcasestr(head, "\r\nContent-Length: ");
        if (cl) {
            size_t declared = strtoul(cl + 18, NULL, 10);
            if (declared < body_len) body_len = declared;
        }
        if (strcasestr(head, "\r\nContent-Type: application/json") && body_len > 0) {
            json_error_t jerr;
            json_t *j = json_loadb(body, body_len, 0, &jerr);
            if (!json_is_object(j)) {
                fprintf(stderr, "fuzz_http: JSON answer that is not a JSON object (%s)\n%.*s\n",
                        jerr.text, (int)(len > 2000 ? 2000 : len), a);
                abort();
            }
            json_decref(j);
        }
        /* After "Connection: close" the client reads no further. (libmicrohttpd 0.9.75 sends
         * the header block of its own 400 for a malformed Content-Length twice: found by this
         * target, kept in tests/fuzz/regressions/fuzz_http/, not our code.) */
        int closing = strcasestr(head, "\r\nConnection: close") != NULL;
        free(head);
        if (closing) return;
        len -= (size_t)(body + body_len - a);
        a = body + body_len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) abort();
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock_path);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("fuzz_http: connect");
        abort();
    }
    struct timeval tv = {.tv_sec = 15};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    for (size_t off = 0; off < size;) { /* the server may answer and close before reading all */
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);

    static char answer[4 << 20];
    size_t len = 0;
    for (;;) {
        ssize_t n = recv(fd, answer + len, sizeof answer - len, 0);
        if (n > 0) {
            len += (size_t)n;
            if (len == sizeof answer) break;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            fprintf(stderr, "fuzz_http: no end of answer 15 s after the request ended (%zu bytes so far)\n", len);
            abort();
        }
        break; /* EOF or reset */
    }
    close(fd);
    check_answer(answer, len);
    return 0;
}
