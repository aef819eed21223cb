/*
 * cmd_detach.c - `probing <target> detach`: the agent leaves the process.
 *
 * POST /api/detach. The agent answers first, then (on a thread of its own, with the GIL) removes
 * its hooks and wrappers, stops its threads, frees its rings and removes its socket; the process
 * runs on as if probing had never been loaded. For a local target this command waits (up to
 * PB_CLI_INFO_TIMEOUT_MS) for the socket to go away so that success means the agent is gone.
 */
#include "client/client.h"
#include "cmd/command.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

static int socket_gone(const char *path)
{
    struct stat st;
    return stat(path, &st) != 0 && errno == ENOENT;
}

int cmd_detach(const pb_cli_args *a)
{
    json_t *root = NULL;
    long status = 0;
    int rc = pb_client_call(&a->resolved, "POST", "/api/detach", NULL, PB_CLI_INFO_TIMEOUT_MS,
                            &root, &status);
    if (rc) return rc;
    rc = PB_EXIT_ERROR;
    if (status != 200) {
        pb_client_print_error(status, root);
        goto fail;
    }
    json_int_t pid = json_integer_value(json_object_get(root, "pid"));
    if (a->resolved.kind == PB_TARGET_UNIX) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        for (long waited_ms = 0; !socket_gone(a->resolved.socket_path); waited_ms += 10) {
            if (waited_ms >= PB_CLI_INFO_TIMEOUT_MS) {
                pb_cli_error("process %lld accepted to detach, but its socket %s is still there "
                             "after %ld s (is its interpreter blocked? the agent leaves when it "
                             "gets the GIL)", (long long)pid, a->resolved.socket_path,
                             PB_CLI_INFO_TIMEOUT_MS / 1000);
                goto fail;
            }
            nanosleep(&pause, NULL);
        }
    }
    printf("detached from process %lld: hooks removed, agent stopped, socket removed\n",
           (long long)pid);
    rc = PB_EXIT_OK;
fail:
    json_decref(root);
    return rc;
}
