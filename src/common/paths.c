/* paths.c - socket directory and names; see paths.h. */
#include "paths.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int pb_paths_check_dir(const char *dir, char *why, size_t whylen)
{
    struct stat st;
    uid_t self = geteuid();
    if (lstat(dir, &st) != 0) {
        int err = errno;
        if (why) snprintf(why, whylen, "cannot use the socket directory %s: %s", dir, strerror(err));
        return -err;
    }
    if (S_ISLNK(st.st_mode)) {
        if (why)
            snprintf(why, whylen,
                     "the socket directory %s is a symbolic link, which anyone who made it could "
                     "point elsewhere; remove it (rm %s) or set PROBING_DIR to a directory of "
                     "your own", dir, dir);
        return -ELOOP;
    }
    if (!S_ISDIR(st.st_mode)) {
        if (why)
            snprintf(why, whylen,
                     "the socket directory %s is not a directory; remove it or set PROBING_DIR "
                     "to a directory of your own", dir);
        return -ENOTDIR;
    }
    if (st.st_uid != self) {
        if (why)
            snprintf(why, whylen,
                     "the socket directory %s belongs to uid %u, not to you (uid %u): another "
                     "user may have made it to pose as your processes; remove it (rm -r %s) or "
                     "set PROBING_DIR to a directory of your own", dir, (unsigned)st.st_uid,
                     (unsigned)self, dir);
        return -EPERM;
    }
    if (st.st_mode & 0022) {
        if (why)
            snprintf(why, whylen,
                     "the socket directory %s is writable by %s (mode %04o): others could plant "
                     "sockets in it; run chmod 700 %s", dir,
                     (st.st_mode & 0002) ? "everyone" : "its group",
                     (unsigned)(st.st_mode & 07777), dir);
        return -EPERM;
    }
    return 0;
}

int pb_paths_prepare_dir(char *why, size_t whylen)
{
    char dir[512];
    int rc = pb_paths_dir(dir, sizeof dir);
    if (rc) {
        if (why) snprintf(why, whylen, "the socket directory name (PROBING_DIR) is too long");
        return rc;
    }
    if (mkdir(dir, 0700) && errno != EEXIST) {
        rc = -errno;
        if (why) snprintf(why, whylen, "cannot use socket directory %s: %s", dir, strerror(-rc));
        return rc;
    }
    return pb_paths_check_dir(dir, why, whylen);
}

int pb_paths_ensure_dir(void) { return pb_paths_prepare_dir(NULL, 0); }
