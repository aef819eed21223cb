/*
 * test_recpath.c - the rules for a recording's path (src/common/recpath.c): what may be
 * recorded over (nothing, or a recording with force) and what never (symlink, directory,
 * FIFO, device, a file that is not a recording, a file another recorder holds), path
 * templates (%r %h %p %%) and per-rank names.
 */
#include "check.h"
#include "recpath.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/pb-recpath-cli-lane-XXXXXX";

static void path_of(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

int main(void)
{
    char p[512], q[512], why[512], out[512];
    if (!mkdtemp(dir)) return 1;

    path_of(p, sizeof p, "absent.db");
    CHECK(pb_recpath_check(p, 0, why, sizeof why) == 0, "a path that does not exist is fine");

    path_of(p, sizeof p, "rec.db");
    write_file(p, "SQLite format 3"); /* the 16-byte header: its NUL comes from the truncate */
    (void)!truncate(p, 100);
    CHECK(pb_recpath_check(p, 0, why, sizeof why) == -EEXIST, "a recording needs force");
    CHECK_STR(why, "it exists; pass --force to replace it", "  and says so");
    CHECK(pb_recpath_check(p, 1, why, sizeof why) == 0, "a recording may be replaced with force");

    int fd = open(p, O_RDONLY);
    CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0, "a recorder holds the file");
    CHECK(pb_recpath_lock_holder(fd) == getpid(), "the holder is found in /proc/locks");
    CHECK(pb_recpath_check(p, 1, why, sizeof why) == -EBUSY, "a held recording is refused");
    snprintf(out, sizeof out, "process %ld is recording into it; stop that recording first "
             "(probing %ld record --stop) or choose another path", (long)getpid(),
             (long)getpid());
    CHECK_STR(why, out, "  naming the holder");
    close(fd);
    CHECK(pb_recpath_check(p, 1, why, sizeof why) == 0, "the lock goes with its descriptor");

    path_of(q, sizeof q, "notes.db");
    write_file(q, "my notes\n");
    CHECK(pb_recpath_check(q, 1, why, sizeof why) == -ENOTSUP,
          "a file that is not a recording is never replaced");

    path_of(q, sizeof q, "link.db");
    CHECK(symlink(p, q) == 0 && pb_recpath_check(q, 1, why, sizeof why) == -ELOOP,
          "a symbolic link is refused, even to a recording");
    path_of(q, sizeof q, "fifo.db");
    CHECK(mkfifo(q, 0600) == 0 && pb_recpath_check(q, 1, why, sizeof why) == -ENODEV,
          "a FIFO is refused");
    CHECK_STR(why, "it is a FIFO, not a file; probing never replaces it: choose another path",
              "  and named");
    CHECK(pb_recpath_check("/dev/null", 1, why, sizeof why) == -ENODEV,
          "a character device is refused");
    CHECK(pb_recpath_check(dir, 1, why, sizeof why) == -EISDIR, "a directory is refused");
    CHECK(pb_recpath_check("/proc/version/x.db", 0, why, sizeof why) == -ENOTDIR,
          "a path under a file: the OS's reason");

    setenv("RANK", "3", 1);
    CHECK(pb_recpath_expand("/d/job.rank%r.p%p.%%.db", 42, out, sizeof out) == 1 &&
              strcmp(out, "/d/job.rank3.p42.%.db") == 0, "%%r %%p %%%% expand: %s", out);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    snprintf(q, sizeof q, "/d/%s.db", host);
    CHECK(pb_recpath_expand("/d/%h.db", 1, out, sizeof out) == 1 && strcmp(out, q) == 0,
          "%%h is the host name");
    CHECK(pb_recpath_expand("/d/run.db", 1, out, sizeof out) == 0 &&
              strcmp(out, "/d/run.db") == 0, "a plain path is copied");
    CHECK(pb_recpath_expand("/d/run%x.db", 1, out, sizeof out) == -EINVAL,
          "an unknown %%-sequence is refused");
    CHECK(pb_recpath_expand("/d/run%r.db", 1, out, 8) == -ENAMETOOLONG, "too long");
    setenv("RANK", "oops", 1);
    CHECK(pb_recpath_expand("%r", 1, out, sizeof out) == 1 && strcmp(out, "0") == 0,
          "a RANK that is not a number counts as 0");

    CHECK(pb_recpath_tag("/d/job.db", "rank1", out, sizeof out) == 0 &&
              strcmp(out, "/d/job.rank1.db") == 0, "the tag goes before the extension");
    CHECK(pb_recpath_tag("/d.x/job", "pid7", out, sizeof out) == 0 &&
              strcmp(out, "/d.x/job.pid7") == 0, "no extension: appended (%s)", out);
    CHECK(pb_recpath_tag("/d/.hidden", "rank0", out, sizeof out) == 0 &&
              strcmp(out, "/d/.hidden.rank0") == 0, "a leading dot is not an extension");

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)!system(cmd);
    return check_summary();
}
