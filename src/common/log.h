/*
 * log.h - the agent's and CLI's few messages to stderr.
 *
 * Everything is prefixed "probing: ". pb_log_debug() prints only when PROBING_DEBUG is set in the
 * environment. The agent uses pb_log_warn_once()-style discipline at call sites: it speaks once,
 * then keeps quiet, because it lives inside someone else's program. [any thread]
 */
#ifndef PB_COMMON_LOG_H
#define PB_COMMON_LOG_H

void pb_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pb_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
