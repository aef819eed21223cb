/*
 * test_child.c - src/common/child.c: a child's stdout and stderr captured apart, its exit
 * status, a missing executable, PATH search, the deadline (the child is killed) and a
 * cancellation.
 */
#include "check.h"
#include "child.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static int cancel_now(void) { return 1; }

int main(void)
{
    char *argv[] = {"sh", "-c", "printf out; printf err >&2; exit 3", NULL};
    pb_child_opts o = {.file = "/bin/sh", .argv = argv, .in = PB_CHILD_NULL, .out = PB_CHILD_PIPE,
                       .err = PB_CHILD_PIPE};
    pid_t pid;
    int out_fd, err_fd;
    pb_buf out = PB_BUF_INIT, err = PB_BUF_INIT;
    CHECK(pb_child_start(&o, &pid, &out_fd, &err_fd) == 0 && out_fd >= 0 && err_fd >= 0,
          "a child starts with two pipes");
    CHECK(pb_child_collect(pid, out_fd, err_fd, &out, &err, 1 << 20, 10000, NULL) == 0,
          "both streams read to their end");
    CHECK(out.len == 3 && memcmp(out.data, "out", 3) == 0, "stdout captured");
    CHECK(err.len == 3 && memcmp(err.data, "err", 3) == 0, "stderr captured apart");
    CHECK(pb_child_wait(pid) == 3, "its exit status");
    pb_buf_free(&out);
    pb_buf_free(&err);

    char *cat_argv[] = {"cat", NULL};
    pb_child_opts cat = {.file = "cat", .argv = cat_argv, .search = 1, .in = PB_CHILD_NULL,
                         .out = PB_CHILD_PIPE, .err = PB_CHILD_NULL};
    CHECK(pb_child_start(&cat, &pid, &out_fd, NULL) == 0, "found in PATH");
    CHECK(pb_child_collect(pid, out_fd, -1, &out, NULL, 1 << 20, 10000, NULL) == 0 &&
              out.len == 0 && pb_child_wait(pid) == 0,
          "stdin is /dev/null: cat ends at once with nothing");
    pb_buf_free(&out);

    char *cap_argv[] = {"sh", "-c", "printf 0123456789", NULL};
    o.argv = cap_argv;
    CHECK(pb_child_start(&o, &pid, &out_fd, &err_fd) == 0 &&
              pb_child_collect(pid, out_fd, err_fd, &out, &err, 4, 10000, NULL) == 0 &&
              out.len == 0 && pb_child_wait(pid) == 0,
          "a read past max is dropped, not appended");
    pb_buf_free(&out);

    char *missing_argv[] = {"nope", NULL};
    pb_child_opts missing = {.file = "/nonexistent/probing-test", .argv = missing_argv};
    CHECK(pb_child_start(&missing, &pid, NULL, NULL) == -ENOENT, "a missing executable: -ENOENT");
    pb_child_opts piped_in = {.file = "/bin/sh", .argv = argv, .in = PB_CHILD_PIPE};
    CHECK(pb_child_start(&piped_in, &pid, NULL, NULL) == -EINVAL, "a piped stdin: -EINVAL");

    char *sleep_argv[] = {"sh", "-c", "exec sleep 30", NULL};
    o.argv = sleep_argv;
    CHECK(pb_child_start(&o, &pid, &out_fd, &err_fd) == 0 &&
              pb_child_collect(pid, out_fd, err_fd, &out, &err, 1 << 20, 400, NULL) == -ETIMEDOUT,
          "past the deadline: -ETIMEDOUT");
    CHECK(pb_child_wait(pid) == -1, "... and the child was killed");
    CHECK(pb_child_start(&o, &pid, &out_fd, &err_fd) == 0 &&
              pb_child_collect(pid, out_fd, err_fd, &out, &err, 1 << 20, 10000, cancel_now) ==
                  -ECANCELED &&
              pb_child_wait(pid) == -1,
          "cancelled: -ECANCELED, the child killed");
    pb_buf_free(&out);
    pb_buf_free(&err);
    return check_summary();
}
