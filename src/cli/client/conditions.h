/*
 * conditions.h - what the training in a live target runs with (device, parameter dtype, batch
 * size, loader workers, threads, torch and Python versions), learned by one short eval, for
 * `report` and `compare`. A recording has no process to ask: its conditions stay unknown.
 */
#ifndef PB_CLI_CONDITIONS_H
#define PB_CLI_CONDITIONS_H

#include "client/target.h"

#include <jansson.h>
#include <stddef.h>

/* Runs pb_report_conditions_code in t (borrowed) with a timeout of a few seconds. Returns the
 * object (caller owns), or NULL with *why set to a static reason or one written in buf (len
 * bytes). [main thread] */
json_t *pb_conditions_fetch(const pb_target *t, char *buf, size_t len, const char **why);

#endif
