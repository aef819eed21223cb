/*
 * netaddr.h - network names as a user types them: this machine's host name, and a listening
 * address "HOST:PORT". One definition for the agent's TCP listener (src/server/server.c,
 * PROBING_LISTEN), the exporter (serve/exporter.c, --listen) and the web view (serve/ui.c, --listen),
 * and one host name for the job roster (src/agent/collect/job.c), the CLI's fan-out
 * (src/cli/client/fanout.c) and the web view and exporter. Parses text only: no socket, no lookup.
 * [any thread]
 */
#ifndef PB_COMMON_NETADDR_H
#define PB_COMMON_NETADDR_H

#include <stddef.h>

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

#endif
