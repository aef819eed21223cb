/* paths.c - socket directory and names; see paths.h. */
#include "paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int pb_paths_dir(char *out, size_t outlen)
{
    const char *d = getenv("PROBING_DIR");
    int n;
    if (d && *d) n = snprintf(out, outlen, "%s", d);
    else n = snprintf(out, outlen, "/tmp/probing-%u", (unsigned)getuid());
    return (n < 0 || (size_t)n >= outlen) ? -ENAMETOOLONG : 0;
}

int pb_paths_socket(pid_t pid, char *out, size_t outlen)
{
    char dir[512];
    int rc = pb_paths_dir(dir, sizeof dir);
    if (rc) return rc;
    int n = snprintf(out, outlen, "%s/%d.sock", dir, (int)pid);
    return (n < 0 || (size_t)n >= outlen) ? -ENAMETOOLONG : 0;
}

int pb_paths_ensure_dir(void)
{
    char dir[512];
    int rc = pb_paths_dir(dir, sizeof dir);
    if (rc) return rc;
    if (mkdir(dir, 0700) && errno != EEXIST) return -errno;
    struct stat st;
    if (stat(dir, &st)) return -errno;
    if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
    if (st.st_uid != getuid()) return -EPERM;
    if (st.st_mode & 0022) return -EPERM;
    return 0;
}
