/*
 * target.c - resolving a target (pid, host:port, socket path) into an address; see target.h.
 *
 * Only cheap local checks happen here (/proc/<pid>, stat of the socket). What can only be known
 * by connecting (refused, stale socket, process exited meanwhile) is reported by client.c, which
 * uses the pid remembered in pb_target to word its message.
 */
#include "client/target.h"

#include "out/cli.h"
#include "paths.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *token_option; /* --token */

void pb_target_set_token(const char *token) { token_option = token; }

/* Looks in the socket directory for a token file "<pid>.token" whose "port N" line names port
 * and whose process is alive; copies its token into out. Files we may not read are skipped:
 * then the agent answers 401 and says how to pass the token. */
static void token_from_files(int port, char *out, size_t outlen)
{
    char dir[PATH_MAX];
    if (pb_paths_dir(dir, sizeof dir)) return;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[PATH_MAX + 256], text[512], token[260];
        int file_port = 0;
        size_t n = strlen(e->d_name);
        if (n < 7 || strcmp(e->d_name + n - 6, ".token") != 0) continue;
        long pid = strtol(e->d_name, NULL, 10);
        if (pid <= 0 || pid > INT_MAX || !pb_target_pid_alive((pid_t)pid)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) continue;
        ssize_t len = read(fd, text, sizeof text - 1);
        close(fd);
        if (len <= 0) continue;
        text[len] = '\0';
        if (sscanf(text, "%259s port %d", token, &file_port) == 2 && file_port == port &&
            strlen(token) < outlen) {
            strcpy(out, token);
            break;
        }
    }
    closedir(d);
}

static void find_token(int port, char *out, size_t outlen)
{
    const char *given = token_option;
    if (!given || !*given) given = getenv("PROBING_TOKEN");
    if (given && *given) {
        snprintf(out, outlen, "%s", given);
        return;
    }
    /* A job's token file (docs/cluster.md): its first line. */
    const char *file = getenv("PROBING_TOKEN_FILE");
    FILE *f = file && *file ? fopen(file, "re") : NULL;
    if (f) {
        int ok = fgets(out, (int)outlen, f) != NULL;
        fclose(f);
        if (ok) out[strcspn(out, "\r\n")] = '\0';
        if (ok && out[0]) return;
        out[0] = '\0';
    }
    token_from_files(port, out, outlen);
}

int pb_target_is_pid(const char *s)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return 0;
    return 1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int is_path_spec(const char *s) { return strchr(s, '/') || ends_with(s, ".sock"); }

/* An existing regular file that starts with "SQLite format 3\0": a recording. */
static int is_recording(const char *s)
{
    char header[16];
    struct stat st;
    if (pb_target_is_pid(s) || stat(s, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    int fd = open(s, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, header, sizeof header);
    close(fd);
    return n == (ssize_t)sizeof header && memcmp(header, "SQLite format 3", 16) == 0;
}

/* A name a user gives a recording (run.db, run.sqlite): such a target that is not a recording
 * gets a file's error ("no such file"), not a socket's or an address's. */
static int is_recording_name(const char *s)
{
    return ends_with(s, ".db") || ends_with(s, ".sqlite") || ends_with(s, ".sqlite3");
}

int pb_target_looks_like(const char *s)
{
    return pb_target_is_pid(s) || strchr(s, ':') || is_path_spec(s) || is_recording(s) ||
           is_recording_name(s);
}

/* A recording's name that is no recording: missing, unreadable, or another kind of file. Returns
 * the exit status of the error printed, or 0 for a socket so named (an agent after all). */
static int recording_name_error(const char *spec)
{
    struct stat st;
    if (stat(spec, &st) != 0) {
        if (errno == ENOENT)
            return pb_cli_error("no such file: %s (a recording is written by 'probing run -o %s "
                                "-- <command>' or 'probing <pid> record -o %s')",
                                spec, spec, spec);
        return pb_cli_error("cannot read %s: %s", spec, strerror(errno));
    }
    if (S_ISSOCK(st.st_mode)) return 0;
    if (S_ISDIR(st.st_mode)) return pb_cli_error("%s is a directory, not a recording", spec);
    if (access(spec, R_OK) != 0) return pb_cli_error("cannot read %s: %s", spec, strerror(errno));
    return pb_cli_error("%s is not a recording: it does not start with SQLite's header (recordings "
                        "are written by 'probing run -o FILE.db')", spec);
}

/* The state letter of /proc/<pid>/stat; 0 when absent, '?' when present but unreadable. */
static char read_pid_state(pid_t pid)
{
    char path[64], stat_line[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : '?';
    ssize_t n = read(fd, stat_line, sizeof stat_line - 1);
    close(fd);
    if (n <= 0) return 0;
    stat_line[n] = '\0';
    /* "pid (comm) S ...": the state follows the last ')' (comm may contain parentheses). */
    const char *p = strrchr(stat_line, ')');
    return p && p[1] == ' ' && p[2] ? p[2] : '?';
}

int pb_target_pid_alive(pid_t pid)
{
    char state = read_pid_state(pid);
    return state && state != 'Z' && state != 'X'; /* unreadable but present: call it alive */
}

char pb_target_pid_state(pid_t pid)
{
    char state = read_pid_state(pid);
    return state == '?' ? 0 : state;
}

const char *pb_target_state_text(char state)
{
    switch (state) {
    case 0: return "";
    case 'R': return "running (state R)";
    case 'S': return "sleeping (state S)";
    case 'D': return "waiting in the kernel (state D)";
    case 'T': return "stopped (state T: SIGSTOP or Ctrl-Z; kill -CONT resumes it)";
    case 't': return "stopped by a debugger (state t)";
    case 'Z': case 'X': return "gone (a zombie: it exited, its parent has not reaped it)";
    default: return "in an unusual state";
    }
}

void pb_target_cmdline(pid_t pid, char *out, size_t outlen, size_t max_chars)
{
    char path[64], raw[4096];
    if (!outlen) return;
    out[0] = '\0';
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, raw, sizeof raw - 1);
    close(fd);
    if (n <= 0) return;
    while (n > 0 && raw[n - 1] == '\0') n--; /* the final argument's terminator */
    if (max_chars + 1 > outlen) max_chars = outlen - 1;
    size_t len = 0;
    for (ssize_t i = 0; i < n && len < outlen - 1; i++) {
        unsigned char c = (unsigned char)raw[i];
        out[len++] = (c == '\0' || c < 0x20 || c == 0x7f) ? ' ' : (char)c;
    }
    out[len] = '\0';
    if (len > max_chars && max_chars >= 3) {
        size_t cut = max_chars - 3;
        while (cut > 0 && ((unsigned char)out[cut] & 0xC0) == 0x80) cut--; /* keep UTF-8 whole */
        memcpy(out + cut, "...", 4);
    }
}

int pb_target_for_socket(pid_t pid, const char *path, pb_target *t)
{
    memset(t, 0, sizeof *t);
    t->kind = PB_TARGET_UNIX;
    t->pid = pid;
    if (strlen(path) >= sizeof t->socket_path) return -ENAMETOOLONG;
    strcpy(t->socket_path, path);
    strcpy(t->url_base, "http://localhost");
    return 0;
}

/* The pid in a socket name "<digits>.sock", or 0. */
static pid_t pid_from_socket_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n <= 5 || n > 15 || !ends_with(base, ".sock")) return 0;
    char digits[16];
    memcpy(digits, base, n - 5);
    digits[n - 5] = '\0';
    if (!pb_target_is_pid(digits)) return 0;
    long v = strtol(digits, NULL, 10);
    return v > 0 && v <= INT_MAX ? (pid_t)v : 0;
}

static int resolve_pid(const char *spec, pb_target *t)
{
    errno = 0;
    long long v = strtoll(spec, NULL, 10);
    if (errno || v <= 0 || v > INT_MAX) return pb_cli_error("no such process: %s", spec);
    pid_t pid = (pid_t)v;
    char path[PATH_MAX], proc_dir[64];
    struct stat st;
    int socket_exists = pb_paths_socket(pid, path, sizeof path) == 0 && stat(path, &st) == 0;
    snprintf(proc_dir, sizeof proc_dir, "/proc/%d", (int)pid);
    if (!pb_target_pid_alive(pid)) {
        /* A leftover socket or a zombie means it was there and is gone. */
        if (socket_exists || stat(proc_dir, &st) == 0)
            pb_cli_error("process %d has exited; to keep what a job records after it ends, "
                         "start it with 'probing run -o run.db -- <command>' next time",
                         (int)pid);
        else
            pb_cli_error("no such process: %s", spec);
        return PB_EXIT_ERROR;
    }
    if (pb_paths_socket(pid, path, sizeof path) || pb_target_for_socket(pid, path, t))
        return pb_cli_error("the socket path for process %d is too long (over %zu bytes); set "
                            "PROBING_DIR to a shorter directory", (int)pid,
                            sizeof t->socket_path - 1);
    if (!socket_exists) {
        char cmd[128], shown[140] = "";
        pb_target_cmdline(pid, cmd, sizeof cmd, 60);
        if (cmd[0]) snprintf(shown, sizeof shown, " (%s)", cmd);
        return pb_cli_error("process %d%s is not traced by probing: no agent socket at %s. Load "
                            "the agent into it now, without restarting it: probing %d inject (or "
                            "start it with 'probing run -- <command>' or PROBING=1).", (int)pid,
                            shown, path, (int)pid);
    }
    return 0;
}

static int resolve_path(const char *spec, pb_target *t)
{
    struct stat st;
    if (strlen(spec) >= sizeof t->socket_path)
        return pb_cli_error("socket path too long (at most %zu bytes): %s",
                            sizeof t->socket_path - 1, spec);
    if (stat(spec, &st) != 0) {
        if (errno == ENOENT)
            pb_cli_error("no socket at %s (see 'probing list' for traced processes)", spec);
        else
            pb_cli_error("cannot use %s: %s", spec, strerror(errno));
        return PB_EXIT_ERROR;
    }
    if (!S_ISSOCK(st.st_mode)) return pb_cli_error("%s is not a socket", spec);
    pb_target_for_socket(pid_from_socket_name(spec), spec, t);
    return 0;
}

static int valid_host_char(char c)
{
    return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_';
}

int pb_target_parse_tcp(const char *spec, pb_target *t)
{
    const char *s = spec, *host, *port;
    size_t host_len;
    char hostbuf[256];
    if (strncmp(s, "http://", 7) == 0) s += 7;
    size_t len = strlen(s);
    while (len && s[len - 1] == '/') len--;
    if (len >= sizeof hostbuf) goto bad;
    memcpy(hostbuf, s, len);
    hostbuf[len] = '\0';
    if (hostbuf[0] == '[') {
        char *close_bracket = strchr(hostbuf, ']');
        if (!close_bracket || close_bracket[1] != ':') goto bad;
        host = hostbuf;
        host_len = (size_t)(close_bracket - hostbuf) + 1;
        port = close_bracket + 2;
        for (const char *p = hostbuf + 1; p < close_bracket; p++)
            if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.') goto bad;
        if (host_len < 3) goto bad;
    } else {
        char *colon = strrchr(hostbuf, ':');
        if (!colon) goto bad;
        if (memchr(hostbuf, ':', (size_t)(colon - hostbuf)))
            return -EINVAL;
        host = hostbuf;
        host_len = (size_t)(colon - hostbuf);
        port = colon + 1;
        if (!host_len) goto bad;
        for (size_t i = 0; i < host_len; i++)
            if (!valid_host_char(hostbuf[i])) goto bad;
    }
    if (!pb_target_is_pid(port) || strlen(port) > 5 || atoi(port) < 1 || atoi(port) > 65535)
        goto bad;
    memset(t, 0, sizeof *t);
    t->kind = PB_TARGET_TCP;
    snprintf(t->host_port, sizeof t->host_port, "%.*s:%d", (int)host_len, host, atoi(port));
    snprintf(t->url_base, sizeof t->url_base, "http://%s", t->host_port);
    find_token(atoi(port), t->token, sizeof t->token);
    return 0;
bad:
    return -EINVAL;
}

static int resolve_tcp(const char *spec, pb_target *t)
{
    if (pb_target_parse_tcp(spec, t) == 0) return 0;
    const char *s = strncmp(spec, "http://", 7) == 0 ? spec + 7 : spec;
    const char *colon = strrchr(s, ':');
    if (s[0] != '[' && colon && memchr(s, ':', (size_t)(colon - s)))
        return pb_cli_usage_error("'%s' is not a target: write an IPv6 address in brackets, as "
                                  "[::1]:8080", spec);
    return pb_cli_usage_error("'%s' is not a target: give a pid, host:port or a socket path "
                              "(see 'probing list')", spec);
}

int pb_target_resolve(const char *spec, pb_target *t)
{
    if (pb_target_is_pid(spec)) return resolve_pid(spec, t);
    if (is_recording(spec)) {
        memset(t, 0, sizeof *t);
        t->kind = PB_TARGET_FILE;
        if (strlen(spec) >= sizeof t->file_path)
            return pb_cli_usage_error("the recording's path is too long: %s", spec);
        snprintf(t->file_path, sizeof t->file_path, "%s", spec);
        snprintf(t->url_base, sizeof t->url_base, "file:");
        return 0;
    }
    if (is_recording_name(spec)) {
        int rc = recording_name_error(spec);
        if (rc) return rc;
    }
    if (strncmp(spec, "http://", 7) != 0 && is_path_spec(spec)) return resolve_path(spec, t);
    return resolve_tcp(spec, t);
}

static int compare_pids(const void *x, const void *y)
{
    pid_t a = *(const pid_t *)x, b = *(const pid_t *)y;
    return (a > b) - (a < b);
}

int pb_target_scan(const char *dir, pid_t **out)
{
    DIR *d = opendir(dir);
    if (!d) return -errno;
    pid_t *pids = NULL;
    int count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n <= 5 || n > 15 || strcmp(e->d_name + n - 5, ".sock") != 0) continue;
        char digits[16];
        memcpy(digits, e->d_name, n - 5);
        digits[n - 5] = '\0';
        if (!pb_target_is_pid(digits)) continue;
        long v = strtol(digits, NULL, 10);
        if (v <= 0 || v > INT_MAX || !pb_target_pid_alive((pid_t)v)) continue;
        if (count == cap) {
            int new_cap = cap ? cap * 2 : 16;
            pid_t *p = realloc(pids, (size_t)new_cap * sizeof *p);
            if (!p) break;
            pids = p;
            cap = new_cap;
        }
        pids[count++] = (pid_t)v;
    }
    closedir(d);
    if (count) qsort(pids, (size_t)count, sizeof *pids, compare_pids);
    *out = pids;
    return count;
}
