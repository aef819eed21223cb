/*
 * listen.c - the web view's listening socket and whom it serves (listen.h), apart from its
 * routes (ui.c).
 */
#include "serve/listen.h"

#include "netaddr.h"
#include "out/cli.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The uid that owns the local TCP socket at addr (the peer of one of our connections), from
 * /proc/net/tcp or tcp6, whose lines hold "sl local rem st queues tr retrnsmt uid ...". Returns
 * 0, or -1 when not found. */
static int tcp_socket_uid(const struct sockaddr *addr, uid_t *out)
{
    char want[64];
    const char *table;
    if (addr->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        snprintf(want, sizeof want, "%08X:%04X", (unsigned)in->sin_addr.s_addr,
                 (unsigned)ntohs(in->sin_port));
        table = "/proc/net/tcp";
    } else if (addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
        uint32_t w[4];
        memcpy(w, &in6->sin6_addr, sizeof w);
        snprintf(want, sizeof want, "%08X%08X%08X%08X:%04X", (unsigned)w[0], (unsigned)w[1],
                 (unsigned)w[2], (unsigned)w[3], (unsigned)ntohs(in6->sin6_port));
        table = "/proc/net/tcp6";
    } else {
        return -1;
    }
    FILE *f = fopen(table, "re");
    char line[512], local[64];
    unsigned long uid;
    int found = -1;
    while (f && found && fgets(line, sizeof line, f))
        if (sscanf(line, " %*s %63s %*s %*s %*s %*s %*s %lu", local, &uid) == 2 &&
            !strcmp(local, want)) {
            *out = (uid_t)uid;
            found = 0;
        }
    if (f) fclose(f);
    return found;
}

int pb_listen_peer_allowed(const struct sockaddr *addr)
{
    int loopback = 0;
    if (addr->sa_family == AF_INET)
        loopback = (ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr) >> 24) == 127;
    else if (addr->sa_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)addr)->sin6_addr;
        loopback = IN6_IS_ADDR_LOOPBACK(a6) ||
                   (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
    }
    uid_t uid;
    if (!loopback || tcp_socket_uid(addr, &uid)) return 1;
    return uid == getuid() || uid == 0;
}

int pb_listen_open(const char *spec, char *shown, size_t shownlen, int *port_out,
                    int *loopback_out)
{
    pb_netaddr listen_addr;
    if (pb_netaddr_parse(spec, &listen_addr) || !listen_addr.host[0]) {
        pb_cli_error("--listen wants ADDR:PORT (127.0.0.1:8080, or port 0 for a free one), not "
                     "'%s'",
                     spec);
        return -1;
    }
    struct sockaddr_storage ss;
    int gai = 0, fd = pb_netaddr_listen(&listen_addr, 64, 0, &ss, &gai);
    if (gai) {
        pb_cli_error("--listen: cannot use the address '%s': %s", listen_addr.host,
                     gai_strerror(gai));
        return -1;
    }
    if (fd < 0) {
        pb_cli_error("cannot listen on %s: %s; choose another address or port with --listen "
                     "ADDR:PORT, or leave --listen out for a free port on 127.0.0.1",
                     spec, strerror(-fd));
        return -1;
    }
    char addr[INET6_ADDRSTRLEN] = "?";
    int bound_port = 0;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &in->sin_addr, addr, sizeof addr);
        bound_port = ntohs(in->sin_port);
        snprintf(shown, shownlen, "%s:%d", addr, bound_port);
        *loopback_out = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        if (in->sin_addr.s_addr != htonl(INADDR_LOOPBACK))
            fprintf(stderr, "probing: warning: %s is reachable from other machines; anyone "
                            "with the URL's token can read this job\n", addr);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof addr);
        bound_port = ntohs(in6->sin6_port);
        snprintf(shown, shownlen, "[%s]:%d", addr, bound_port);
        *loopback_out = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
        if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
            fprintf(stderr, "probing: warning: %s is reachable from other machines; anyone "
                            "with the URL's token can read this job\n", addr);
    }
    *port_out = bound_port;
    return fd;
}

