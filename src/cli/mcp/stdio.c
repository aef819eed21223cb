/*
 * stdio.c - the MCP stdio transport (stdio.h).
 *
 * The reader thread owns the protocol's stdin and a queue of inputs (at most QUEUE_MAX waiting: beyond that it
 * stops reading until the server catches up, so a flooding client costs bounded memory); the
 * main thread takes them one by one and alone writes on the protocol's stdout. The one message
 * the reader looks into is notifications/cancelled, and only its requestId, compared with the
 * request the main thread is working on.
 */
#include "mcp/stdio.h"

#include "buf.h"
#include "out/format.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define QUEUE_MAX 64
#define CHUNK 65536

typedef struct queued {
    pb_mcp_input in;
    struct queued *next;
} queued;

static struct {
    int in;              /* the protocol's stdin (fd 0 now reads /dev/null) */
    FILE *out;           /* the protocol's stdout */
    pthread_t reader;
    int reader_started;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    queued *head, *tail; /* under lock */
    size_t count;        /* under lock */
    int ended;           /* under lock: the reader queued PB_MCP_EOF and returned */
    char *working;       /* under lock: the id (JSON text) of the request in progress */
    int out_fd;          /* io.out's descriptor */
    atomic_int cancelled;
} io = {.out_fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER};

static queued eof_fallback;

/* An id as JSON text, so that 7 and "7" stay different. Caller frees. */
static char *id_text(json_t *id) { return id ? json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT) : NULL; }

/* A notifications/cancelled for the request in progress marks it cancelled. [reader thread] */
static void watch_cancel(const char *line, size_t len)
{
    if (!memmem(line, len, "notifications/cancelled", 23)) return;
    json_t *msg = json_loadb(line, len, 0, NULL);
    const char *method = json_string_value(json_object_get(msg, "method"));
    if (method && strcmp(method, "notifications/cancelled") == 0) {
        char *key = id_text(json_object_get(json_object_get(msg, "params"), "requestId"));
        pthread_mutex_lock(&io.lock);
        if (key && io.working && strcmp(key, io.working) == 0) atomic_store(&io.cancelled, 1);
        pthread_mutex_unlock(&io.lock);
        free(key);
    }
    json_decref(msg);
}

/* Queues an input (takes line), waiting while the queue is full. [reader thread] */
static void push(pb_mcp_input_kind kind, char *line, size_t len)
{
    queued *q = calloc(1, sizeof *q);
    if (!q) { /* out of memory: the message is lost, as an unreadable one would be */
        free(line);
        if (kind != PB_MCP_EOF) return;
        q = &eof_fallback; /* the end must get through */
    }
    q->in.kind = kind;
    q->in.line = line;
    q->in.len = len;
    pthread_mutex_lock(&io.lock);
    while (io.count >= QUEUE_MAX && kind != PB_MCP_EOF) pthread_cond_wait(&io.changed, &io.lock);
    if (io.tail) io.tail->next = q;
    else io.head = q;
    io.tail = q;
    io.count++;
    if (kind == PB_MCP_EOF) io.ended = 1;
    pthread_cond_broadcast(&io.changed);
    pthread_mutex_unlock(&io.lock);
}

/* One line read (its '\r' too): queued, unless blank. [reader thread] */
static void finish_line(pb_buf *line, int too_long)
{
    if (too_long) {
        pb_buf_reset(line);
        push(PB_MCP_TOO_LONG, NULL, 0);
        return;
    }
    while (line->len && (line->data[line->len - 1] == '\r' || line->data[line->len - 1] == ' ' ||
                         line->data[line->len - 1] == '\t'))
        line->data[--line->len] = '\0';
    if (!line->len) return;
    watch_cancel(line->data, line->len);
    size_t len = 0;
    char *text = pb_buf_steal(line, &len);
    if (text) push(PB_MCP_LINE, text, len);
}

static void *read_stdin(void *unused)
{
    (void)unused;
    pb_buf line = PB_BUF_INIT;
    int too_long = 0;
    char *chunk = malloc(CHUNK);
    for (;;) {
        ssize_t n = chunk ? read(io.in, chunk, CHUNK) : -1;
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (size_t i = 0; i < (size_t)n;) {
            char *nl = memchr(chunk + i, '\n', (size_t)n - i);
            size_t take = nl ? (size_t)(nl - (chunk + i)) : (size_t)n - i;
            if (!too_long && (line.len + take > PB_MCP_MAX_LINE || pb_buf_append(&line, chunk + i, take))) {
                too_long = 1; /* the rest of the line is read and dropped */
                pb_buf_free(&line);
            }
            i += take;
            if (nl) {
                i++;
                finish_line(&line, too_long);
                too_long = 0;
            }
        }
    }
    if (too_long || line.len) finish_line(&line, too_long); /* a last line without newline */
    pb_buf_free(&line);
    free(chunk);
    close(io.in);
    push(PB_MCP_EOF, NULL, 0);
    return NULL;
}

int pb_mcp_stdio_start(void)
{
    signal(SIGPIPE, SIG_IGN);
    int in = fcntl(0, F_DUPFD_CLOEXEC, 3), out = fcntl(1, F_DUPFD_CLOEXEC, 3);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in < 0 || out < 0 || null < 0 || dup2(null, 0) < 0 || dup2(2, 1) < 0 ||
        !(io.out = fdopen(out, "w"))) {
        int e = errno;
        if (in >= 0) close(in);
        if (out >= 0) close(out);
        if (null >= 0) close(null);
        return -e;
    }
    close(null);
    io.in = in;
    io.out_fd = out;
    int rc = pthread_create(&io.reader, NULL, read_stdin, NULL);
    if (rc) return -rc;
    io.reader_started = 1;
    return 0;
}

void pb_mcp_stdio_next(pb_mcp_input *in)
{
    pthread_mutex_lock(&io.lock);
    while (!io.head) pthread_cond_wait(&io.changed, &io.lock);
    queued *q = io.head;
    io.head = q->next;
    if (!io.head) io.tail = NULL;
    io.count--;
    pthread_cond_broadcast(&io.changed);
    pthread_mutex_unlock(&io.lock);
    *in = q->in;
    if (q->in.kind == PB_MCP_EOF) {
        /* stays last: every later call sees the end again */
        pthread_mutex_lock(&io.lock);
        q->next = NULL;
        io.head = io.tail = q;
        io.count++;
        pthread_mutex_unlock(&io.lock);
        return;
    }
    free(q);
}

int pb_mcp_stdio_send(json_t *msg)
{
    pb_buf text = PB_BUF_INIT; /* the CLI's JSON: reals in their shortest exact form */
    if (pb_format_json_value(&text, msg) || pb_buf_putc(&text, '\n')) {
        pb_buf_free(&text);
        return -ENOMEM;
    }
    int bad = fwrite(text.data, 1, text.len, io.out) != text.len || fflush(io.out) != 0;
    int e = errno;
    pb_buf_free(&text);
    return bad ? (e == EPIPE ? -EPIPE : -EIO) : 0;
}

void pb_mcp_stdio_working_on(json_t *id)
{
    char *key = id_text(id);
    pthread_mutex_lock(&io.lock);
    free(io.working);
    io.working = key;
    atomic_store(&io.cancelled, 0);
    pthread_mutex_unlock(&io.lock);
}

/* The client closed its end of our stdout (a pipe's write end then polls POLLERR): nobody reads
 * the answer any more. */
static int client_gone(void)
{
    struct pollfd p = {io.out_fd, POLLOUT, 0};
    return io.out_fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

int pb_mcp_stdio_cancelled(void) { return atomic_load(&io.cancelled) || client_gone(); }

void pb_mcp_stdio_stop(void)
{
    pthread_mutex_lock(&io.lock);
    int ended = io.ended;
    pthread_mutex_unlock(&io.lock);
    if (io.reader_started) {
        if (ended) pthread_join(io.reader, NULL);
        else pthread_detach(io.reader); /* blocked in read(): it ends with the process */
        io.reader_started = 0;
    }
    if (ended) {
        queued *q = io.head;
        while (q) {
            queued *next = q->next;
            free(q->in.line);
            if (q != &eof_fallback) free(q);
            q = next;
        }
        io.head = io.tail = NULL;
        io.count = 0;
    }
    free(io.working);
    io.working = NULL;
    if (io.out) fclose(io.out);
    io.out = NULL;
    io.out_fd = -1;
}
