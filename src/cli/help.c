/*
 * help.c - the help text: `probing --help` (every command's usage and summary, what a target
 * is, the exit statuses) and `probing <command> --help` (one command's usage, details, and what
 * target it takes, from its PB_CMD_* needs). The words themselves are in the table
 * (commands.c).
 */
#include "help.h"

#include <stdio.h>

void pb_help_print(FILE *out)
{
    fputs("probing - look inside a running PyTorch process\n\nUsage:\n", out);
    const pb_command *c = pb_commands_table;
    for (size_t i = 0; i < pb_commands_count; i++)
        if (c[i].run) fprintf(out, "  %s\n", c[i].usage);
    fputs("\nCommands:\n", out);
    for (size_t i = 0; i < pb_commands_count; i++)
        if (c[i].run) fprintf(out, "  %-10s %s\n", c[i].name, c[i].summary);
    fputs("\nA target is a pid (12345), host:port or [::1]:port (an agent started with\n"
          "PROBING_LISTEN), the path of an agent socket, or a recording file (run.db, written by\n"
          "'probing run -o' or 'record -o'; query, tables, info, report, timeline, flamegraph,\n"
          "export and ui read it after the process is gone). It may also be given as -t TARGET\n"
          "(--target), before or after the command. A host:port target needs the agent's token:\n"
          "--token T, else $PROBING_TOKEN, else the agent's token file when readable\n"
          "(docs/security.md).\n"
          "\nOptions:\n  -h, --help     show this help; 'probing <command> --help' or 'probing help\n"
          "                 <command>' for one command\n"
          "  -V, --version  show the version\n"
          "\nExit status: 0 success; 1 error (including SQL errors and exceptions in eval);\n"
          "2 usage error; 3 some ranks did not answer (ranks, hang, --ranks); 124 a timeout\n"
          "(eval, capture, inject); 130 capture interrupted (Ctrl-C); run: the command's own\n"
          "status (127: not found).\n",
          out);
}

void pb_help_command(const pb_command *c)
{
    printf("Usage: %s\n\n%s.\n", c->usage, c->summary);
    if (c->details && *c->details) printf("\n%s", c->details);
    if (!(c->needs & PB_CMD_TARGET)) return;
    if (c->needs & PB_CMD_RECORDINGS)
        printf("\nTARGET: a pid, host:port, socket path, or a recording file (run.db, written by\n"
               "'probing run -o' or 'record -o'); may also be given as -t TARGET.\n");
    else if (c->needs & PB_CMD_PID)
        printf("\nTARGET: the pid of a Python process on this machine (a recording file has no\n"
               "process to %s); may also be given as -t TARGET.\n", c->name);
    else
        printf("\nTARGET: a pid, host:port or socket path of a live process (a recording file,\n"
               "written by 'probing run -o' or 'record -o', has no process to %s); may also be\n"
               "given as -t TARGET.\n", c->name);
}
