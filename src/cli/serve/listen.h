/*
 * listen.h - the web view's listening socket and whom it serves (listen.c): --listen's address
 * opened, and the check at accept that keeps other users of this machine out.
 */
#ifndef PB_CLI_LISTEN_H
#define PB_CLI_LISTEN_H

#include <stddef.h>
#include <sys/socket.h>

/* Parses --listen ADDR:PORT ("127.0.0.1:8080", "[::1]:0", "localhost:8080"; netaddr.h's
 * grammar, a host required) and opens the listening socket; writes the bound address as a URL
 * host ("127.0.0.1:41234", "[::1]:41234") to shown, the bound port to *port_out and whether it is
 * a loopback address to *loopback_out; warns on stderr when it is not. Returns the socket, or -1
 * after printing why. [main thread] */
int pb_listen_open(const char *spec, char *shown, size_t shownlen, int *port_out,
                    int *loopback_out);

/* Whether a connection from addr may be served: not when it comes from a loopback address and
 * its socket (found in /proc/net/tcp or tcp6) belongs to another user than this one or root.
 * Returns 1 or 0. [any thread] */
int pb_listen_peer_allowed(const struct sockaddr *addr);

#endif
