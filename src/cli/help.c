/*
 * help.c - the help text: `probing --help` (every command's usage and summary, what a target
 * is, the exit statuses) and `probing <command> --help` (one command's usage, details, its
 * options, and what target it takes, from its PB_CMD_* needs). The words themselves are in the
 * table (commands.c) and, for the options, in each command's option table (cmd/cmd_<name>.c);
 * the usage lines are made from those tables (usage.c): this file lays the option lines out,
 * one per option, wrapped at 80 columns.
 */
#include "help.h"
#include "usage.h"

#include <stdio.h>
#include <string.h>

enum { HELP_WIDTH = 80, HELP_MAX_NAME_COLUMN = 24 };

/* Writes an option's spelling as the help shows it ("-f, --format table|json") into name. */
static void option_spelling(const pb_option *o, char *name, size_t size)
{
    char short_part[5] = "";
    if (o->short_name) snprintf(short_part, sizeof short_part, "-%c, ", o->short_name);
    snprintf(name, size, "%s--%s%s%s", short_part, o->long_name, o->value_name ? " " : "",
             o->value_name ? o->value_name : "");
}

/* Prints text from column `column` (the cursor stands there), wrapped at HELP_WIDTH; each '\n'
 * in text starts a new line at that column. */
static void print_wrapped(const char *text, int column)
{
    int at = column;
    while (*text) {
        if (*text == '\n') {
            printf("\n%*s", column, "");
            at = column;
            text++;
            continue;
        }
        if (*text == ' ') {
            text++;
            continue;
        }
        size_t word = strcspn(text, " \n");
        if (at > column && at + 1 + (int)word > HELP_WIDTH) {
            printf("\n%*s", column, "");
            at = column;
        } else if (at > column) {
            putchar(' ');
            at++;
        }
        printf("%.*s", (int)word, text);
        at += (int)word;
        text += word;
    }
    putchar('\n');
}

/* Prints the "Options:" section of one command from its table: each option's spelling, then its
 * help line, the help lines aligned in one column (on the next line for a long spelling). */
static void print_options(const pb_option *options)
{
    char name[96];
    int column = 0, listed = 0;
    for (const pb_option *o = options; o && o->kind != PB_OPTION_END; o++) {
        if (!o->help || o->kind == PB_OPTION_ARGUMENTS) continue;
        option_spelling(o, name, sizeof name);
        int width = 2 + (int)strlen(name) + 2;
        if (width <= HELP_MAX_NAME_COLUMN && width > column) column = width;
        listed++;
    }
    if (!listed) return;
    printf("\nOptions:\n");
    for (const pb_option *o = options; o && o->kind != PB_OPTION_END; o++) {
        if (!o->help || o->kind == PB_OPTION_ARGUMENTS) continue;
        option_spelling(o, name, sizeof name);
        int width = printf("  %s", name);
        if (width + 2 > column)
            printf("\n%*s", column, "");
        else
            printf("%*s", column - width, "");
        print_wrapped(o->help, column);
    }
}

void pb_help_print(FILE *out)
{
    fputs("probing - look inside a running PyTorch process\n\nUsage:\n", out);
    const pb_command *c = pb_commands_table;
    char usage[PB_USAGE_MAX];
    for (size_t i = 0; i < pb_commands_count; i++)
        if (c[i].run) fprintf(out, "  %s\n", pb_usage_line(&c[i], usage, sizeof usage));
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
    char usage[PB_USAGE_MAX];
    printf("Usage: %s\n\n%s.\n", pb_usage_line(c, usage, sizeof usage), c->summary);
    if (c->details && *c->details) printf("\n%s", c->details);
    print_options(c->options);
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
