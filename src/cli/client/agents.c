/*
 * agents.c - the traced processes of this user on this machine (agents.h).
 *
 * Sockets whose process is gone are skipped and left in place: removing them is the agent's
 * business, and a racing agent may be about to reuse the name. A directory that is not ours is
 * not read at all (docs/security.md).
 */
#include "client/agents.h"

#include "client/client.h"
#include "out/cli.h"
#include "paths.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GET /api/info of the agent of pid: its object, or {"pid", "endpoint", "error"}. */
static json_t *ask(pid_t pid)
{
    char path[PATH_MAX], err[512] = "";
    pb_target t;
    pb_response resp;
    json_t *info = NULL;
    if (pb_paths_socket(pid, path, sizeof path) || pb_target_for_socket(pid, path, &t)) {
        snprintf(err, sizeof err, "socket path too long");
    } else if (pb_client_request(&t, "GET", "/api/info", NULL, PB_CLI_LIST_TIMEOUT_MS, &resp, err,
                                 sizeof err) == 0) {
        info = json_loadb(resp.body.data, resp.body.len, JSON_ALLOW_NUL, NULL);
        if (resp.status != 200 || !json_is_object(info)) {
            json_decref(info);
            info = NULL;
            snprintf(err, sizeof err, resp.status == 200 ? "not valid JSON" : "HTTP %ld",
                     resp.status);
        }
        pb_buf_free(&resp.body);
    }
    if (info) return info;
    if (strncmp(err, "the target did not answer", 25) == 0)
        snprintf(err, sizeof err, "no answer within %ld s", PB_CLI_LIST_TIMEOUT_MS / 1000);
    return json_pack("{s:I,s:s,s:s}", "pid", (json_int_t)pid, "endpoint", path, "error", err);
}

int pb_agents_list(char *dir, size_t dirlen, json_t **agents)
{
    *agents = NULL;
    if (pb_paths_dir(dir, dirlen))
        return pb_cli_error("the socket directory name is too long; set PROBING_DIR to a shorter "
                            "one");
    pid_t *pids = NULL;
    int count = pb_target_scan(dir, &pids);
    char untrusted[768]; /* another user's directory: its sockets are not listed (security.md) */
    if (count != -ENOENT && pb_paths_check_dir(dir, untrusted, sizeof untrusted) != 0) {
        free(pids);
        return pb_cli_error("%s", untrusted);
    }
    if (count < 0 && count != -ENOENT)
        return pb_cli_error("cannot read the socket directory %s: %s", dir, strerror(-count));
    json_t *list = json_array();
    for (int i = 0; list && i < count; i++) {
        json_t *entry = ask(pids[i]);
        if (!entry || json_array_append_new(list, entry)) {
            json_decref(list);
            list = NULL;
        }
    }
    free(pids);
    if (!list) return pb_cli_error("out of memory");
    *agents = list;
    return PB_EXIT_OK;
}
