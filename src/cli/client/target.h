/*
 * target.h - turning what the user typed after `probing` into an address to talk to.
 *
 * A target is one of:
 *   12345                  a pid: the agent's socket <socket dir>/12345.sock (paths.h)
 *   host:port, [::1]:port  TCP (the agent was started with PROBING_LISTEN=host:port);
 *                          an optional "http://" prefix is accepted. The agent's token is
 *                          --token, else PROBING_TOKEN, else read from a token file
 *                          <socket dir>/<pid>.token that names the same port (readable only
 *                          by the agent's owner); see docs/security.md
 *   /path/x.sock, ./x      a Unix socket path (anything containing '/' or ending in .sock)
 *   run.db, /path/run.db   a recording: an existing file that starts with SQLite's header
 *                          (probing run -o; answered locally by recording.c)
 * Resolution checks what can be checked without connecting (the process exists, the socket
 * file exists) so that the user gets a message that says what to do next.
 */
#ifndef PB_CLI_TARGET_H
#define PB_CLI_TARGET_H

#include "auth.h"

#include <stddef.h>
#include <sys/types.h>

typedef enum pb_target_kind { PB_TARGET_UNIX, PB_TARGET_TCP, PB_TARGET_FILE } pb_target_kind;

typedef struct pb_target {
    pb_target_kind kind;
    pid_t pid;              /* the process behind a Unix socket when known, else 0 */
    char socket_path[108];  /* PB_TARGET_UNIX: fits struct sockaddr_un.sun_path */
    char host_port[300];    /* PB_TARGET_TCP: "host:port" as it goes into the URL */
    char url_base[320];     /* "http://localhost" (Unix) or "http://host:port" (TCP) */
    char token[260];        /* PB_TARGET_TCP: the token requests are signed with (never sent;
                             * common/auth.h), "" when none was found */
    int rank_known;         /* PB_TARGET_TCP from a job's roster: requests name the rank they are
                             * for, and an agent of another rank refuses them */
    int rank;
    char agent_id[PB_AUTH_AGENT_HEX + 1]; /* PB_TARGET_TCP: the agent requests are signed for
                             * (common/auth.h), from the roster; "" for a typed target, whose
                             * agent each request learns first (client.h) */
    char file_path[4096];   /* PB_TARGET_FILE: the recording */
} pb_target;

/* Sets the token for TCP targets (--token; borrowed, must outlive resolution). It wins over
 * PROBING_TOKEN, which wins over the token file of a local agent listening on the port. */
void pb_target_set_token(const char *token);

/* Parses spec (borrowed) as a TCP target only ("host:port", "[v6]:port", optional "http://")
 * into t, with the token found as for a typed target; never a path or a file. Prints nothing.
 * Returns 0 or -EINVAL. */
int pb_target_parse_tcp(const char *spec, pb_target *t);

/* Resolves spec (borrowed) into t. Returns 0, or prints a "probing: ..." message on stderr and
 * returns the exit code to use (out/cli.h): PB_EXIT_ERROR when the target does not exist or is
 * not traced, PB_EXIT_USAGE when spec is not a target at all. */
int pb_target_resolve(const char *spec, pb_target *t);

/* Fills t for an agent socket found by `probing list`, without checking anything. Returns 0 or
 * -ENAMETOOLONG. */
int pb_target_for_socket(pid_t pid, const char *path, pb_target *t);

/* Collects the pids of live processes with a <pid>.sock in dir (the socket directory), in
 * increasing order, into a malloc'ed array (*out, caller frees; NULL when none). Returns the
 * count, or -errno (ENOENT when the directory does not exist). */
int pb_target_scan(const char *dir, pid_t **out);

/* Returns 1 when the process exists and is not a zombie, else 0. */
int pb_target_pid_alive(pid_t pid);

/* The state letter of /proc/<pid>/stat ('R' running, 'S' sleeping, 'D' in the kernel, 'T'
 * stopped by a signal, 't' stopped by a tracer, 'Z' zombie, ...), or 0 when the process does
 * not exist or its state cannot be read. */
char pb_target_pid_state(pid_t pid);

/* What a state letter means to a user: "stopped (state T: SIGSTOP or Ctrl-Z; kill -CONT
 * resumes it)", "running (state R)", ...; "" for 0. Static text. */
const char *pb_target_state_text(char state);

/* Writes the command line of pid (arguments joined by spaces, control characters replaced)
 * into out, shortened to at most max_chars bytes with a trailing "..." when longer. Writes ""
 * when it cannot be read. */
void pb_target_cmdline(pid_t pid, char *out, size_t outlen, size_t max_chars);

/* True when s is all digits (a pid target). */
int pb_target_is_pid(const char *s);

/* True when s looks like any kind of target (pid, host:port or path); used to tell a target
 * from a mistyped command name. */
int pb_target_looks_like(const char *s);

#endif
