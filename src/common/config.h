/*
 * config.h - every setting probing reads, in one static table.
 *
 * Settings come from environment variables (PROBING_*), read once when the agent starts
 * (pb_config_load). The table doubles as documentation: probe.config lists it with values, and
 * docs/configuration.md is written from it. Values are kept as text and parsed by typed getters.
 */
#ifndef PB_COMMON_CONFIG_H
#define PB_COMMON_CONFIG_H

#include <stdint.h>

typedef struct pb_config_entry {
    const char *name;    /* environment variable, e.g. "PROBING_RING_ROWS" */
    const char *deflt;   /* default as text ("" = unset) */
    const char *doc;
    const char *value;   /* current value (points into env or deflt) */
} pb_config_entry;

/* Reads the environment into the table. [start-up only] */
void pb_config_load(void);

/* Current value of a setting, or NULL for an unknown name. [any thread after load] */
const char *pb_config_str(const char *name);

/* Parses the setting as an integer (suffixes k, M, G accepted); returns deflt_if_bad when it
 * does not parse and remembers the complaint for pb_config_problems(). */
int64_t pb_config_int(const char *name, int64_t deflt_if_bad);
double pb_config_double(const char *name, double deflt_if_bad);

int pb_config_count(void);
const pb_config_entry *pb_config_at(int i);

#endif
