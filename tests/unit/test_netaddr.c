/*
 * test_netaddr.c - src/common/netaddr.c: the listening-address grammar (every form it takes and
 * the near misses it refuses) and this machine's name.
 */
#include "check.h"
#include "netaddr.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

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
    return check_summary();
}
