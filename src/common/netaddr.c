/*
 * netaddr.c - this machine's name (netaddr.h).
 */
#include "netaddr.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void pb_netaddr_host_name(const char *override, char *out, size_t outlen)
{
    if (override && *override) snprintf(out, outlen, "%s", override);
    else if (gethostname(out, outlen) != 0) snprintf(out, outlen, "localhost");
    out[outlen - 1] = '\0';
}
