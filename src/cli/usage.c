/*
 * usage.c - the usage line of a command, made from its option table (git and clap do the same):
 * adding an option to a command's table adds it to the usage line, in the table's order. Each
 * option is shown as [-s VALUE] (the short spelling when it has one), [--long VALUE] or
 * [--flag]; a PB_OPTION_ARGUMENTS row shows the positional arguments where it stands. What a
 * flat list cannot say (flamegraph's "(-o FILE.svg | --folded [-o FILE])", --deadline only
 * with --ranks) is the PB_USAGE text of a row, written beside the option in cmd/cmd_<name>.c.
 */
#include "usage.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Appends to line (size bytes) at *used, advancing *used; output past the end is cut. */
static void append(char *line, size_t size, size_t *used, const char *format, ...)
{
    if (*used + 1 >= size) return;
    va_list ap;
    va_start(ap, format);
    int n = vsnprintf(line + *used, size - *used, format, ap);
    va_end(ap);
    if (n < 0) return;
    *used += (size_t)n < size - *used ? (size_t)n : size - *used - 1;
}

/* The placeholder of the target that c takes before its name, or NULL when it takes none. */
static const char *target_placeholder(const pb_command *c)
{
    if (!(c->needs & PB_CMD_TARGET)) return NULL;
    if (c->needs & PB_CMD_TARGETS) return "<target-or-recording...>";
    if (c->needs & PB_CMD_PID) return "<pid>";
    return "<target>";
}

const char *pb_usage_line(const pb_command *c, char *line, size_t size)
{
    size_t used = 0;
    if (!size) return line;
    line[0] = '\0';
    const char *target = target_placeholder(c);
    append(line, size, &used, "probing %s%s%s", target ? target : "", target ? " " : "",
           c->name);
    for (const pb_option *o = c->options; o && o->kind != PB_OPTION_END; o++) {
        if (o->usage || o->kind == PB_OPTION_ARGUMENTS) {
            if (o->usage && *o->usage) append(line, size, &used, " %s", o->usage);
        } else if (o->short_name) {
            append(line, size, &used, " [-%c%s%s]", o->short_name, o->value_name ? " " : "",
                   o->value_name ? o->value_name : "");
        } else {
            append(line, size, &used, " [--%s%s%s]", o->long_name, o->value_name ? " " : "",
                   o->value_name ? o->value_name : "");
        }
    }
    return line;
}
