/*
 * suggest.c - "did you mean": the answer to a command name that is not in the table.
 *
 * The closest command by edit distance (insert, delete, replace, swap of neighbours), within 2
 * edits, or else the only command the name begins (at least 2 letters): "probing qury" and
 * "probing fl" get a guess; a name far from every command gets none.
 */
#include "suggest.h"

#include "commands.h"

#include <string.h>

/* Edit distance between a and b (insert, delete, replace, swap of neighbours), capped at 9. */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 30 || lb > 30) return 9;
    int d[32][32];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb] > 9 ? 9 : d[la][lb];
}

/* The command closest to a mistyped name (within 2 edits, or the only one it starts), or
 * NULL. */
static const char *closest_command(const char *name)
{
    const char *best = NULL, *prefixed = NULL;
    int best_d = 3, prefixes = 0;
    for (size_t i = 0; i < pb_commands_count; i++) {
        if (!pb_commands_table[i].run) continue;
        int d = distance(name, pb_commands_table[i].name);
        if (d < best_d) {
            best_d = d;
            best = pb_commands_table[i].name;
        }
        if (strlen(name) >= 2 && strncmp(pb_commands_table[i].name, name, strlen(name)) == 0) {
            prefixes++;
            prefixed = pb_commands_table[i].name;
        }
    }
    if (strcmp(name, "help") != 0 && best) return best;
    return prefixes == 1 ? prefixed : NULL;
}

int pb_suggest_unknown_command(const char *name)
{
    const char *guess = closest_command(name);
    if (guess)
        return pb_cli_usage_error("unknown command '%s'; did you mean '%s'? (see 'probing "
                                  "help')", name, guess);
    return pb_cli_usage_error("unknown command '%s'; see 'probing --help'", name);
}
