/*
 * test_netaddr.c - src/common/netaddr.c: the listening-address grammar (every form it takes and
 * the near misses it refuses), this machine's name, and the listening socket (a free port, the
 * same port taken twice, a host that does not resolve, the wildcard on IPv6 and IPv4 at once).
 */
#include "check.h"
#include "netaddr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int port_of(const struct sockaddr_storage *ss)
{
    return ntohs(ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
                                           : ((const struct sockaddr_in *)ss)->sin_port);
}

/* A connection to 127.0.0.1:port is accepted on fd. */
static int reaches(int fd, int port)
{
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = c >= 0 && connect(c, (struct sockaddr *)&to, sizeof to) == 0;
    int a = ok ? accept(fd, NULL, NULL) : -1;
    if (a >= 0) close(a);
    if (c >= 0) close(c);
    return a >= 0;
}

static void listening(void)
{
    pb_netaddr a;
    struct sockaddr_storage ss;
    int gai = -1;
    pb_netaddr_parse("127.0.0.1:0", &a);
    int fd = pb_netaddr_listen(&a, 8, 0, &ss, &gai);
    int port = fd >= 0 ? port_of(&ss) : 0;
    CHECK(fd >= 0 && gai == 0 && ss.ss_family == AF_INET && port > 0,
          "127.0.0.1:0: a socket on a free port (%d, port %d)", fd, port);
    CHECK(fd >= 0 && reaches(fd, port), "it accepts a connection on that port");
    char spec[32];
    snprintf(spec, sizeof spec, "127.0.0.1:%d", port);
    pb_netaddr_parse(spec, &a);
    int again = pb_netaddr_listen(&a, 8, 0, NULL, &gai);
    CHECK(again == -EADDRINUSE && gai == 0, "the same port again: -EADDRINUSE (%d)", again);
    if (again >= 0) close(again);
    if (fd >= 0) close(fd);

    pb_netaddr_parse("no-such-host.invalid:0", &a);
    int bad = pb_netaddr_listen(&a, 8, 0, NULL, &gai);
    CHECK(bad == -EINVAL && gai != 0, "a host that does not resolve: -EINVAL, the lookup's "
          "error (%s)", gai ? gai_strerror(gai) : "none");

    pb_netaddr_parse(":0", &a);
    fd = pb_netaddr_listen(&a, 8, 1, &ss, &gai);
    port = fd >= 0 ? port_of(&ss) : 0;
    CHECK(fd >= 0 && port > 0, "the wildcard, dual stack: a socket (family %d, port %d)",
          fd >= 0 ? ss.ss_family : -1, port);
    CHECK(fd >= 0 && reaches(fd, port), "an IPv4 connection reaches it");
    if (fd >= 0) close(fd);
}

static void accepts(const char *spec, const char *host, const char *port, int number)
{
    pb_netaddr a;
    memset(&a, 'x', sizeof a);
    int rc = pb_netaddr_parse(spec, &a);
    CHECK(rc == 0 && strcmp(a.host, host) == 0 && strcmp(a.port, port) == 0 &&
              a.port_number == number,
          "'%s' -> host '%s', port %s (got rc %d, '%.255s', '%.11s')", spec, host, port, rc,
          rc ? "" : a.host, rc ? "" : a.port);
}

static void refuses(const char *spec, int want)
{
    pb_netaddr a;
    int rc = pb_netaddr_parse(spec, &a);
    CHECK(rc == want, "'%s' refused with %d (got %d)", spec, want, rc);
}

int main(void)
{
    accepts("127.0.0.1:8080", "127.0.0.1", "8080", 8080);
    accepts("localhost:0", "localhost", "0", 0);
    accepts(":10089", "", "10089", 10089);
    accepts("[::1]:8080", "::1", "8080", 8080);
    accepts("[fe80::1%eth0]:65535", "fe80::1%eth0", "65535", 65535);
    accepts("::1:8080", "::1", "8080", 8080); /* HOST is all before the last ':' */
    accepts("0.0.0.0:007", "0.0.0.0", "7", 7);
    refuses("", -EINVAL);
    refuses("8080", -EINVAL);                 /* no ':' */
    refuses("localhost", -EINVAL);
    refuses("localhost:", -EINVAL);           /* no port */
    refuses("localhost:http", -EINVAL);       /* a name, not digits */
    refuses("localhost:65536", -EINVAL);
    refuses("localhost:123456", -EINVAL);     /* six digits */
    refuses("localhost:-1", -EINVAL);
    refuses("localhost:+80", -EINVAL);        /* strtol took a sign; the grammar does not */
    refuses("localhost: 80", -EINVAL);        /* nor a space */
    refuses("localhost:80 ", -EINVAL);
    refuses("[::1]8080", -EINVAL);            /* no ':' after ']' */
    refuses("[::1:8080", -EINVAL);            /* no ']' */
    refuses("[]:8080", -EINVAL);              /* empty brackets */
    refuses("::1]:8080", -EINVAL);            /* a bracket outside the bracket form */
    char long_spec[300];
    memset(long_spec, 'h', 256);
    strcpy(long_spec + 256, ":80");
    refuses(long_spec, -ENAMETOOLONG);
    long_spec[255] = '\0';
    strcat(long_spec, ":80");
    pb_netaddr a;
    CHECK(pb_netaddr_parse(long_spec, &a) == 0 && strlen(a.host) == 255, "a 255-byte host fits");

    char name[256], system_name[256] = "", small[4];
    pb_netaddr_host_name("node-7", name, sizeof name);
    CHECK_STR(name, "node-7", "a non-empty override is the name");
    if (gethostname(system_name, sizeof system_name) != 0) strcpy(system_name, "localhost");
    pb_netaddr_host_name("", name, sizeof name);
    CHECK_STR(name, system_name, "an empty override: gethostname()");
    pb_netaddr_host_name(NULL, name, sizeof name);
    CHECK_STR(name, system_name, "no override: gethostname()");
    pb_netaddr_host_name("a-long-name", small, sizeof small);
    CHECK_STR(small, "a-l", "cut to the buffer, NUL-terminated");
    listening();
    return check_summary();
}
