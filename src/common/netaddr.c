/*
 * netaddr.c - the listening-address grammar and this machine's name (netaddr.h).
 */
#include "netaddr.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
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

/* The first address of res that binds and listens, or the negative errno of the last one. */
static int listen_first(struct addrinfo *res, int backlog, int v6only_off)
{
    int rc = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (v6only_off && ai->ai_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0) return fd;
        rc = -errno;
        close(fd);
    }
    return rc;
}

int pb_netaddr_listen(const pb_netaddr *a, int backlog, int dual_stack,
                      struct sockaddr_storage *bound, int *lookup_err)
{
    int wildcard = !a->host[0], both = wildcard && dual_stack;
    struct addrinfo hints = {.ai_family = both ? AF_INET6 : AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (lookup_err) *lookup_err = 0;
    int gai = getaddrinfo(wildcard ? NULL : a->host, a->port, &hints, &res);
    int fd = gai ? -EAFNOSUPPORT : listen_first(res, backlog, both);
    if (res) freeaddrinfo(res), res = NULL;
    if (fd == -EAFNOSUPPORT && both) { /* no IPv6 on this machine: IPv4 alone */
        hints.ai_family = AF_INET;
        gai = getaddrinfo(NULL, a->port, &hints, &res);
        if (!gai) fd = listen_first(res, backlog, 0);
        if (res) freeaddrinfo(res);
    }
    if (gai) {
        if (lookup_err) *lookup_err = gai;
        return -EINVAL;
    }
    if (fd >= 0 && bound) {
        socklen_t len = sizeof *bound;
        if (getsockname(fd, (struct sockaddr *)bound, &len) != 0) memset(bound, 0, sizeof *bound);
    }
    return fd;
}
