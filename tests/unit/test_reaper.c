/*
 * test_reaper.c - the request-deadline watchdog (src/server/reaper.c).
 *
 * Each connection is one end of a socketpair, watched as the server watches its connections;
 * the other end plays the client and sees what a client would: EOF once the reaper has shut its
 * connection down. Checked: a request not read whole by its deadline is cut; one read whole is
 * left alone while its handler runs, however long; after pb_reaper_next the next request gets a
 * deadline of its own; a closed connection is forgotten. The deadline is 0.2 s and the reaper
 * wakes once a second, so a connection is cut within about 1.2 s; the waits here are 3 s.
 */
#include "check.h"
#include "reaper.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* 1 when the client end sees EOF within wait_ms (the server end was shut down). */
static int client_sees_eof(int fd, int wait_ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0) return 0;
    char c;
    return read(fd, &c, 1) == 0;
}

int main(void)
{
    pb_reaper *r = NULL;
    CHECK(pb_reaper_start(&r, 0) == -EINVAL && !r, "a deadline of 0 is refused (-EINVAL)");
    int rc = pb_reaper_start(&r, 0.2);
    CHECK(rc == 0 && r, "a reaper starts");
    if (!r) return check_summary();

    int late[2], served[2], again[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, late);
    socketpair(AF_UNIX, SOCK_STREAM, 0, served);
    socketpair(AF_UNIX, SOCK_STREAM, 0, again);
    pb_reaper_conn *late_c = pb_reaper_open(r, late[0]);
    pb_reaper_conn *served_c = pb_reaper_open(r, served[0]);
    pb_reaper_conn *again_c = pb_reaper_open(r, again[0]);
    CHECK(late_c && served_c && again_c, "connections are watched");
    pb_reaper_read(r, served_c); /* its request came whole: the handler runs */
    pb_reaper_read(r, again_c);

    CHECK(client_sees_eof(late[1], 3000), "a request not read whole by its deadline is cut");
    CHECK(!client_sees_eof(served[1], 3000),
          "a request read whole is left alone while its handler runs");
    CHECK(pb_reaper_reaped(r) == 1, "one connection was reaped (%lu)", pb_reaper_reaped(r));

    pb_reaper_next(r, again_c); /* answered; keep-alive: the next request's clock starts */
    CHECK(client_sees_eof(again[1], 3000), "the next request on a connection has a deadline too");

    pb_reaper_close(r, late_c);
    pb_reaper_close(r, served_c);
    pb_reaper_close(r, again_c);
    pb_reaper_close(r, NULL);
    pb_reaper_read(r, NULL);
    pb_reaper_next(r, NULL);
    CHECK(pb_reaper_reaped(r) == 2, "closed connections are forgotten (%lu reaped)",
          pb_reaper_reaped(r));
    for (int i = 0; i < 2; i++) {
        close(late[i]);
        close(served[i]);
        close(again[i]);
    }
    /* one left open at stop is freed by the stop */
    int left[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, left);
    CHECK(pb_reaper_open(r, left[0]) != NULL, "a connection open at stop");
    pb_reaper_stop(r);
    pb_reaper_stop(NULL);
    close(left[0]);
    close(left[1]);
    return check_summary();
}
