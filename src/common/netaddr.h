/*
 * netaddr.h - network names as a user types them: this machine's host name, and a listening
 * address "HOST:PORT" and its socket. One definition for the agent's TCP listener
 * (src/server/server.c, PROBING_LISTEN), the exporter (serve/exporter.c, --listen) and the web
 * view (serve/listen.c, --listen), and one host name for the job roster
 * (src/agent/collect/job.c), the CLI's fan-out (src/cli/client/fanout.c) and the web view and
 * exporter. [any thread]
 */
#ifndef PB_COMMON_NETADDR_H
#define PB_COMMON_NETADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* A parsed listening address. */
typedef struct pb_netaddr {
    char host[256]; /* without brackets; "" for ":PORT" (the caller decides what no host means) */
    char port[12];  /* the port in decimal, no leading zeros ("0": the system picks a free one) */
    int port_number;
} pb_netaddr;

/* Parses spec (borrowed) in the one grammar of a listening address:
 *     HOST:PORT      127.0.0.1:8080, localhost:0, ::1:8080 (HOST is all before the last ':')
 *     [HOST]:PORT    [::1]:8080 (brackets for an IPv6 address; HOST not empty)
 *     :PORT          no host
 * PORT is 1 to 5 decimal digits and no more than 65535 (no sign, no spaces); HOST is at most 255
 * bytes and holds no '[' or ']' outside the bracket form. Fills *out and returns 0, or returns
 * -EINVAL (not this grammar) or -ENAMETOOLONG (HOST too long); the caller says which flag or
 * variable was wrong. */
int pb_netaddr_parse(const char *spec, pb_netaddr *out);

/* This machine's name as probing lists it: override when it is non-empty (PROBING_HOST, read
 * by the caller from its config or environment), else gethostname(), else "localhost". Writes
 * it NUL-terminated (cut to outlen - 1 bytes) into out (outlen > 0). */
void pb_netaddr_host_name(const char *override, char *out, size_t outlen);

/* Opens a listening TCP socket on a (close-on-exec, SO_REUSEADDR, listen(backlog)): the first of
 * getaddrinfo's addresses for a->host and a->port that binds. With no host, every address of
 * this machine: when dual_stack, IPv6 and IPv4 on one socket (IPV6_V6ONLY off), or IPv4 alone
 * where the machine has no IPv6; else the wildcard getaddrinfo gives first (IPv4 on Linux).
 * Fills *bound with the address bound (the port the system picked for port 0; bound may be
 * NULL). Returns the socket; or -EINVAL with *lookup_err (may be NULL) set to getaddrinfo's
 * error (gai_strerror says it) when the host does not resolve; or the negative errno of the last
 * address tried (-EADDRINUSE, -EADDRNOTAVAIL, ...), *lookup_err 0. The caller says which flag
 * or variable gave the address. */
int pb_netaddr_listen(const pb_netaddr *a, int backlog, int dual_stack,
                      struct sockaddr_storage *bound, int *lookup_err);

#endif
