/*
 * paths.h - where agents put their sockets, shared by the agent and the CLI.
 *
 * Directory: $PROBING_DIR, else /tmp/probing-<uid>, created mode 0700. Each agent listens on
 * <dir>/<pid>.sock (mode 0600). `probing list` scans the directory; a pid target resolves to
 * that path.
 */
#ifndef PB_COMMON_PATHS_H
#define PB_COMMON_PATHS_H

#include <stddef.h>
#include <sys/types.h>

/* Writes the socket directory into out. Returns 0 or -ENAMETOOLONG. [any thread] */
int pb_paths_dir(char *out, size_t outlen);

/* Writes <dir>/<pid>.sock into out. Returns 0 or -ENAMETOOLONG. */
int pb_paths_socket(pid_t pid, char *out, size_t outlen);

/* Creates the socket directory (mode 0700) if missing, and checks that an existing one belongs
 * to us and is not writable by others. Returns 0 or a negative errno. */
int pb_paths_ensure_dir(void);

#endif
