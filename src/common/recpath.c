/*
 * recpath.c - the rules for a recording's path; see recpath.h.
 *
 * Why a flock and not SQLite's own locks: SQLite holds its POSIX (fcntl) locks only during a
 * transaction, so between two flushes nothing says the file is in use. flock() locks are
 * separate from fcntl locks on Linux, live as long as the recorder keeps its descriptor open
 * (the process dies: the kernel drops them) and are listed with their pid in /proc/locks,
 * which is how a refused second recorder learns whom to name.
 */
#include "recpath.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define SQLITE_HEADER "SQLite format 3"

pid_t pb_recpath_lock_holder(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0) return 0;
    FILE *f = fopen("/proc/locks", "re");
    if (!f) return 0;
    char line[512];
    pid_t holder = 0;
    while (!holder && fgets(line, sizeof line, f)) {
        /* "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a "->" line waits for a lock) */
        char kind[16], mode[16], access[16];
        long pid;
        unsigned major, minor;
        unsigned long long ino;
        const char *p = strchr(line, ':');
        if (!p || strstr(line, "->")) continue;
        if (sscanf(p + 1, "%15s %15s %15s %ld %x:%x:%llu", kind, mode, access, &pid, &major,
                   &minor, &ino) == 7 &&
            strcmp(kind, "FLOCK") == 0 && ino == (unsigned long long)st.st_ino && pid > 0)
            holder = (pid_t)pid;
    }
    fclose(f);
    return holder;
}

static const char *kind_of(mode_t mode)
{
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

int pb_recpath_check(const char *file, int force, char *why, size_t whylen)
{
    struct stat st;
    if (lstat(file, &st) != 0) {
        if (errno == ENOENT) return 0;
        int rc = -errno;
        snprintf(why, whylen, "%s", strerror(errno));
        return rc;
    }
    if (S_ISLNK(st.st_mode)) {
        snprintf(why, whylen, "it is a symbolic link; a recording path must be a regular file "
                 "or not exist (name the file itself, not a link to it)");
        return -ELOOP;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(why, whylen, "it is a directory; name a file in it, e.g. %s/run.db", file);
        return -EISDIR;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, whylen, "it is %s, not a file; probing never replaces it: choose another "
                 "path", kind_of(st.st_mode));
        return -ENODEV;
    }
    int fd = open(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        snprintf(why, whylen, "it exists and cannot be read: %s", strerror(errno));
        return rc;
    }
    char head[sizeof SQLITE_HEADER];
    ssize_t n = read(fd, head, sizeof head);
    int rc = 0;
    if (st.st_size > 0 && (n != (ssize_t)sizeof head || memcmp(head, SQLITE_HEADER, sizeof head))) {
        snprintf(why, whylen, "it exists and is not a probing recording (no SQLite header); "
                 "probing never replaces it: choose another path or remove it yourself");
        rc = -ENOTSUP;
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        pid_t holder = pb_recpath_lock_holder(fd);
        if (holder)
            snprintf(why, whylen, "process %ld is recording into it; stop that recording first "
                     "(probing %ld record --stop) or choose another path", (long)holder,
                     (long)holder);
        else
            snprintf(why, whylen, "another process is recording into it; stop that recording "
                     "first or choose another path");
        rc = -EBUSY;
    } else if (!force) {
        snprintf(why, whylen, "it exists; pass --force to replace it");
        rc = -EEXIST;
    }
    close(fd); /* drops the test lock */
    return rc;
}

int pb_recpath_expand(const char *template_path, pid_t pid, char *out, size_t outlen)
{
    size_t len = 0;
    int expanded = 0;
    for (const char *p = template_path; *p; p++) {
        char piece[300];
        if (*p != '%') {
            piece[0] = *p;
            piece[1] = '\0';
        } else {
            expanded = 1;
            p++;
            if (*p == 'r') {
                const char *rank = getenv("RANK");
                char *end = NULL;
                long r = rank && *rank ? strtol(rank, &end, 10) : 0;
                if (end && (*end || r < 0)) r = 0;
                snprintf(piece, sizeof piece, "%ld", r);
            } else if (*p == 'p') {
                snprintf(piece, sizeof piece, "%ld", (long)pid);
            } else if (*p == 'h') {
                if (gethostname(piece, sizeof piece - 1) != 0) snprintf(piece, sizeof piece, "host");
                piece[sizeof piece - 1] = '\0';
                for (char *c = piece; *c; c++)
                    if (*c == '/') *c = '_';
            } else if (*p == '%') {
                snprintf(piece, sizeof piece, "%%");
            } else {
                return -EINVAL;
            }
        }
        size_t n = strlen(piece);
        if (len + n >= outlen) return -ENAMETOOLONG;
        memcpy(out + len, piece, n + 1);
        len += n;
    }
    if (len >= outlen) return -ENAMETOOLONG;
    out[len] = '\0';
    return expanded;
}

int pb_recpath_tag(const char *path, const char *tag, char *out, size_t outlen)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base) dot = base + strlen(base);
    int n = snprintf(out, outlen, "%.*s.%s%s", (int)(dot - path), path, tag, dot);
    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}
