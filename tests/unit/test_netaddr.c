/*
 * test_netaddr.c - src/common/netaddr.c: this machine's name.
 */
#include "check.h"
#include "netaddr.h"

#include <string.h>
#include <unistd.h>

int main(void)
{
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
