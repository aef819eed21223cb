/*
 * recpath.h - the rules for a recording's path, shared by the CLI (`run -o`, before the job
 * starts) and the agent (`record -o`, and every process that `run -o` starts).
 *
 * One rule for both ways in (docs/recordings.md, "The recording path"):
 *   - the path must not exist, or be a regular file (never a symlink, directory, device, FIFO
 *     or socket: those are refused, never unlinked);
 *   - an existing regular file is replaced only with --force, and only when it is a probing
 *     recording (it starts with the SQLite header); any other file is never replaced;
 *   - a file another live recorder writes (it holds a flock on it) is refused, naming its pid.
 * The agent then writes the new recording beside the old one and renames it over, so a failure
 * leaves the old file intact, and holds a flock on it for as long as it records.
 */
#ifndef PB_COMMON_RECPATH_H
#define PB_COMMON_RECPATH_H

#include <stddef.h>
#include <sys/types.h>

/* Checks that file may become a recording (force: an existing recording may be replaced).
 * Returns 0 (it does not exist, or force and it is a recording nobody records into), or a
 * negative code with the reason, in words a user reads after "cannot record to FILE: ", in why:
 * -EEXIST (a recording, force 0), -EBUSY (a live recorder holds it), -ELOOP (symlink),
 * -EISDIR, -ENODEV (device, FIFO or socket), -ENOTSUP (a regular file that is not a
 * recording), another negative errno (cannot be examined). Changes nothing. [any thread] */
int pb_recpath_check(const char *file, int force, char *why, size_t whylen);

/* The pid holding a flock on the open file fd (from /proc/locks), or 0 when none is found.
 * [any thread] */
pid_t pb_recpath_lock_holder(int fd);

/* Expands a recording path template into out: %r the rank (env RANK, else 0), %h the host
 * name, %p the pid, %% a percent sign. Returns 1 when the template held a % sequence, 0 when
 * it had none (out is a copy), -ENAMETOOLONG or -EINVAL (an unknown % sequence). [any thread] */
int pb_recpath_expand(const char *template_path, pid_t pid, char *out, size_t outlen);

/* Inserts ".<tag>" before the extension of path ("run.db" + "rank1" -> "run.rank1.db"; no
 * extension: appended). Returns 0 or -ENAMETOOLONG. [any thread] */
int pb_recpath_tag(const char *path, const char *tag, char *out, size_t outlen);

#endif
