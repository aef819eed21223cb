/*
 * netaddr.h - network names: this machine's host name, one definition for the job roster
 * (src/agent/collect/job.c), the CLI's fan-out (src/cli/fanout.c), the web view and the
 * exporter. [any thread]
 */
#ifndef PB_COMMON_NETADDR_H
#define PB_COMMON_NETADDR_H

#include <stddef.h>

/* This machine's name as probing lists it: override when it is non-empty (PROBING_HOST, read
 * by the caller from its config or environment), else gethostname(), else "localhost". Writes
 * it NUL-terminated (cut to outlen - 1 bytes) into out (outlen > 0). */
void pb_netaddr_host_name(const char *override, char *out, size_t outlen);

#endif
