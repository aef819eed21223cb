/*
 * child.c - starting a child process with pipes and a deadline (child.h).
 */
#include "child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int add_stream(posix_spawn_file_actions_t *fa, enum pb_child_io io, int fd,
                      int pipe_fds[2])
{
    if (io == PB_CHILD_NULL)
        return posix_spawn_file_actions_addopen(fa, fd, "/dev/null", O_WRONLY, 0);
    if (io == PB_CHILD_PIPE) {
        if (pipe2(pipe_fds, O_CLOEXEC)) return errno;
        return posix_spawn_file_actions_adddup2(fa, pipe_fds[1], fd);
    }
    return 0;
}

int pb_child_start(const pb_child_opts *o, pid_t *pid, int *out_fd, int *err_fd)
{
    int op[2] = {-1, -1}, ep[2] = {-1, -1}, rc;
    posix_spawn_file_actions_t fa;
    if (o->in == PB_CHILD_PIPE) return -EINVAL;
    if ((rc = posix_spawn_file_actions_init(&fa))) return -rc;
    if (!(rc = o->in == PB_CHILD_NULL
                   ? posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)
                   : 0) &&
        !(rc = add_stream(&fa, o->out, 1, op)) && !(rc = add_stream(&fa, o->err, 2, ep))) {
        char *const *env = o->envp ? o->envp : environ;
        rc = o->search ? posix_spawnp(pid, o->file, &fa, NULL, o->argv, env)
                       : posix_spawn(pid, o->file, &fa, NULL, o->argv, env);
    }
    posix_spawn_file_actions_destroy(&fa);
    if (op[1] >= 0) close(op[1]);
    if (ep[1] >= 0) close(ep[1]);
    if (rc) {
        if (op[0] >= 0) close(op[0]);
        if (ep[0] >= 0) close(ep[0]);
        op[0] = ep[0] = -1;
    }
    if (out_fd) *out_fd = op[0];
    else if (op[0] >= 0) close(op[0]);
    if (err_fd) *err_fd = ep[0];
    else if (ep[0] >= 0) close(ep[0]);
    return -rc;
}

int pb_child_collect(pid_t pid, int out_fd, int err_fd, pb_buf *out, pb_buf *err, size_t max,
                     int timeout_ms, int (*cancelled)(void))
{
    struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    pb_buf *bufs[2] = {out, err};
    int open_fds = (out_fd >= 0) + (err_fd >= 0), waited_ms = 0, rc = 0;
    while (open_fds > 0) {
        if (waited_ms >= timeout_ms) {
            rc = -ETIMEDOUT;
            break;
        }
        if (cancelled && cancelled()) {
            rc = -ECANCELED;
            break;
        }
        int n = poll(fds, 2, 200);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0) {
            waited_ms += 200;
            continue;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char chunk[65536];
            ssize_t got = read(fds[i].fd, chunk, sizeof chunk);
            if (got > 0) {
                if (bufs[i] && bufs[i]->len + (size_t)got <= max)
                    pb_buf_append(bufs[i], chunk, (size_t)got);
            } else if (got == 0 || errno != EINTR) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            }
        }
    }
    if (open_fds > 0) kill(pid, SIGKILL);
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0) close(fds[i].fd);
    return rc;
}

int pb_child_wait(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
