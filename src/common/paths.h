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

/* Whether dir may be trusted with our sockets: a real directory (lstat: a symbolic link is
 * refused), owned by the effective uid, not writable by group or others. Returns 0, or a
 * negative errno (-ELOOP symlink, -ENOTDIR, -EPERM wrong owner or mode, or lstat's) with, when
 * why is not NULL, a message for the user (what is wrong, what to do) in why. The CLI checks it
 * before it lists or connects; the agent before it listens. [any thread] */
int pb_paths_check_dir(const char *dir, char *why, size_t whylen);

/* Creates the socket directory (mode 0700) if missing, and checks it with
 * pb_paths_check_dir(). Returns 0 or a negative errno. */
int pb_paths_ensure_dir(void);

/* pb_paths_ensure_dir() with, on failure, a message for the user in why (what is wrong with
 * the directory and what to do). [any thread] */
int pb_paths_prepare_dir(char *why, size_t whylen);

#endif
