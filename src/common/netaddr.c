/*
 * netaddr.c - the listening-address grammar and this machine's name (netaddr.h).
 */
#include "netaddr.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int pb_netaddr_parse(const char *spec, pb_netaddr *out)
{
    const char *host, *colon;
    size_t host_len;
    if (spec[0] == '[') {
        const char *close = strchr(spec, ']');
        if (!close || close[1] != ':' || close == spec + 1) return -EINVAL;
        host = spec + 1;
        host_len = (size_t)(close - host);
        colon = close + 1;
    } else {
        colon = strrchr(spec, ':');
        if (!colon) return -EINVAL;
        host = spec;
        host_len = (size_t)(colon - spec);
    }
    if (memchr(host, '[', host_len) || memchr(host, ']', host_len)) return -EINVAL;
    const char *digits = colon + 1;
    size_t ndigits = strlen(digits);
    if (ndigits == 0 || ndigits > 5 || strspn(digits, "0123456789") != ndigits) return -EINVAL;
    int port = 0;
    for (size_t i = 0; i < ndigits; i++) port = port * 10 + (digits[i] - '0');
    if (port > 65535) return -EINVAL;
    if (host_len >= sizeof out->host) return -ENAMETOOLONG;
    memcpy(out->host, host, host_len);
    out->host[host_len] = '\0';
    snprintf(out->port, sizeof out->port, "%d", port);
    out->port_number = port;
    return 0;
}

void pb_netaddr_host_name(const char *override, char *out, size_t outlen)
{
    if (override && *override) snprintf(out, outlen, "%s", override);
    else if (gethostname(out, outlen) != 0) snprintf(out, outlen, "localhost");
    out[outlen - 1] = '\0';
}
