/*
 * cmd_list.c - `probing list [-f table|json]`: the traced processes of this user.
 *
 * The agents as client/agents.c finds them (the socket directory's live sockets, each asked
 * for /api/info with a short timeout), printed as a table or as their /api/info objects.
 */
#include "client/agents.h"
#include "client/target.h"
#include "cmd/command.h"
#include "out/format.h"
#include "paths.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMMAND_MAX_CHARS 200 /* last column: long script paths stay readable */

/* The command line from info (string or array of strings), shortened. */
static json_t *command_of(json_t *info, pid_t pid)
{
    char text[COMMAND_MAX_CHARS + 8];
    json_t *cmdline = json_object_get(info, "cmdline");
    pb_buf b = PB_BUF_INIT;
    if (json_is_string(cmdline)) {
        pb_buf_append(&b, json_string_value(cmdline), json_string_length(cmdline));
    } else if (json_is_array(cmdline)) {
        size_t i;
        json_t *arg;
        json_array_foreach(cmdline, i, arg) {
            if (i) pb_buf_putc(&b, ' ');
            if (json_is_string(arg)) pb_buf_puts(&b, json_string_value(arg));
        }
    }
    if (!b.len) {
        pb_buf_free(&b);
        pb_target_cmdline(pid, text, sizeof text, COMMAND_MAX_CHARS);
        return json_string(text);
    }
    if (b.len > COMMAND_MAX_CHARS) {
        size_t cut = COMMAND_MAX_CHARS - 3;
        while (cut && ((unsigned char)b.data[cut] & 0xC0) == 0x80) cut--;
        b.len = cut;
        pb_buf_puts(&b, "...");
    }
    json_t *s = json_stringn(b.data, b.len);
    pb_buf_free(&b);
    return s ? s : json_string("?");
}

/* "3.11.4 (main, ...)" -> "3.11.4" */
static json_t *first_word(json_t *v)
{
    const char *s = json_string_value(v);
    if (!s || !*s) return json_string("-");
    size_t n = strcspn(s, " ");
    return json_stringn(s, n);
}

/* "R/N" for a rank of a job of N processes, "-" for a process on its own. */
static json_t *rank_of(json_t *info)
{
    json_t *rank = json_object_get(info, "rank"), *world = json_object_get(info, "world_size");
    if (!json_is_integer(rank) || !json_is_integer(world) || json_integer_value(world) <= 1)
        return json_string("-");
    char text[48];
    snprintf(text, sizeof text, "%lld/%lld", (long long)json_integer_value(rank),
             (long long)json_integer_value(world));
    return json_string(text);
}

static json_t *table_row(pid_t pid, const char *socket_path, json_t *info, const char *failure)
{
    char uptime[32] = "?", cmd[COMMAND_MAX_CHARS + 8];
    if (!info) {
        pb_buf b = PB_BUF_INIT;
        pb_target_cmdline(pid, cmd, sizeof cmd, COMMAND_MAX_CHARS);
        pb_buf_printf(&b, "%s (not answering: %s)", cmd, failure);
        json_t *row = json_pack("[I,s,s,s,s,s,s]", (json_int_t)pid, "?", "?", "?", "?", socket_path,
                                b.data ? b.data : "");
        pb_buf_free(&b);
        return row;
    }
    json_t *uptime_s = json_object_get(info, "uptime_s");
    if (json_is_number(uptime_s)) pb_format_duration(json_number_value(uptime_s), uptime, sizeof uptime);
    const char *endpoint = json_string_value(json_object_get(info, "endpoint"));
    const char *tcp = json_string_value(json_object_get(info, "tcp"));
    pb_buf ep = PB_BUF_INIT;
    pb_buf_puts(&ep, endpoint && *endpoint ? endpoint : socket_path);
    if (tcp && *tcp) pb_buf_printf(&ep, " %s", tcp);
    json_t *row = json_pack("[I,o,s,o,o,s,o]", (json_int_t)pid, rank_of(info), uptime,
                            first_word(json_object_get(info, "python")),
                            first_word(json_object_get(info, "torch")), ep.data,
                            command_of(info, pid));
    pb_buf_free(&ep);
    return row;
}

/* The options of list (option.h): the parser and 'list --help' read them. */
const pb_option pb_options_list[] = {
    PB_OPTION_FORMAT("table|json", NULL),
    PB_OPTION_TABLE_END,
};

int cmd_list(const pb_cli_args *a)
{
    pb_format fmt;
    int rc = pb_format_parse(a->format, PB_FORMAT_TABLE | PB_FORMAT_JSON, "list", &fmt);
    if (rc) return rc;
    char dir[PATH_MAX];
    json_t *agents = NULL;
    if ((rc = pb_agents_list(dir, sizeof dir, &agents))) return rc;
    if (json_array_size(agents) == 0) {
        if (fmt == PB_FORMAT_JSON) printf("[]\n");
        else printf("no processes traced by probing on this machine (socket dir: %s)\n", dir);
        json_decref(agents);
        return PB_EXIT_OK;
    }
    if (fmt == PB_FORMAT_JSON) {
        pb_format_json_pretty(stdout, agents);
        json_decref(agents);
        return PB_EXIT_OK;
    }
    json_t *columns = json_pack("[s,s,s,s,s,s,s]", "PID", "RANK", "UPTIME", "PYTHON", "TORCH", "ENDPOINT",
                                "COMMAND");
    json_t *rows = json_array(), *agent;
    size_t i;
    json_array_foreach(agents, i, agent) {
        pid_t pid = (pid_t)json_integer_value(json_object_get(agent, "pid"));
        const char *error = json_string_value(json_object_get(agent, "error"));
        char path[PATH_MAX] = "";
        if (error) snprintf(path, sizeof path, "%s", json_string_value(json_object_get(agent, "endpoint")) ?: "");
        else if (pb_paths_socket(pid, path, sizeof path)) path[0] = '\0';
        json_array_append_new(rows, table_row(pid, path, error ? NULL : agent, error));
    }
    pb_format_rows(stdout, PB_FORMAT_TABLE, PB_TABLE_PLAIN, columns, rows);
    json_decref(columns);
    json_decref(rows);
    json_decref(agents);
    return PB_EXIT_OK;
}
