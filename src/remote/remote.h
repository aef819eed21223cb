/*
 * remote.h - reading another process from outside: its memory, its mappings, the symbols of
 * the files it has mapped.
 *
 * Used by `probing <pid> backtrace`, which must work on a process that has no agent, is
 * deadlocked, or holds the GIL in a long C call: nothing here needs the target's cooperation.
 * Memory is read with process_vm_readv(2), which needs the same permission as ptrace attach
 * (same user and kernel.yama.ptrace_scope 0, or CAP_SYS_PTRACE); the target is not stopped.
 * Symbols come from the ELF file on disk (.dynsym, then .symtab), opened through
 * /proc/<pid>/root so a process in another mount namespace works too, and are moved to where
 * the file is mapped by the load bias read from /proc/<pid>/maps.
 */
#ifndef PB_REMOTE_REMOTE_H
#define PB_REMOTE_REMOTE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Reads len bytes at addr in pid into dst. Returns 0, -EPERM (no permission), -ESRCH (the
 * process is gone) or -EFAULT (addr is not mapped, or a short read). [any thread] */
int pb_remote_read(pid_t pid, uint64_t addr, void *dst, size_t len);

/* Writes len bytes from src at addr in pid (the mapping must be writable; used only by
 * inject, on memory it mapped itself or on the stack of a thread it has stopped). Same returns
 * as pb_remote_read. */
int pb_remote_write(pid_t pid, uint64_t addr, const void *src, size_t len);

/* Reads a pointer-sized (8-byte) value. Same returns as pb_remote_read. */
int pb_remote_read_u64(pid_t pid, uint64_t addr, uint64_t *out);

/* Looks up symbols in the ELF64 file path (borrowed) as it is mapped in pid: count names,
 * values[i] receives the run-time address of names[i] or 0 when the file does not define it.
 * Returns the number of symbols found (0 or more), -ENOENT when path is not mapped in pid,
 * -ENOEXEC when it is not an ELF64 file, or another negative errno. */
int pb_remote_symbols(pid_t pid, const char *path, const char *const *names, int count,
                      uint64_t *values);

/* A file mapped into the target. */
typedef struct pb_remote_file {
    char path[4096]; /* as /proc/<pid>/maps shows it */
} pb_remote_file;

/* Fills files with the distinct mapped files of pid whose base name starts with one of the
 * prefixes (NULL-terminated list, borrowed), at most max, in map order. Returns how many were
 * found, -ESRCH when pid does not exist, -EACCES/-EPERM when its maps cannot be read. */
int pb_remote_mapped_files(pid_t pid, const char *const *prefixes, pb_remote_file *files,
                           int max);

/* The files that may hold the interpreter of pid: mapped files named libpython* or python*,
 * then the executable (/proc/<pid>/exe), at most max. Same returns as
 * pb_remote_mapped_files. */
int pb_remote_python_files(pid_t pid, pb_remote_file *files, int max);

/* Writes the "3.10" of ".../libpython3.10.so.1.0" or ".../python3.10" into out ("" when the
 * name holds no version): how the version of a Python without Py_Version (< 3.11) is told. */
void pb_remote_version_from_path(const char *path, char *out, size_t len);

/* ---- stopping a thread (ptrace; same permission as above) ----
 * pb_remote_stop: PTRACE_SEIZE + PTRACE_INTERRUPT of thread tid, waiting for its event stop
 * (signals that arrive first are delivered). Returns 0 (stopped; undo with pb_remote_release,
 * the thread resumes where it was), -EPERM, -ESRCH, -ETIMEDOUT, or -EAGAIN when the process is
 * stopped by job control (it is then left as it was).
 * pb_remote_interrupt: the same for a thread already seized.
 * pb_remote_wait_stop: waits up to timeout_ms for the next stop of tid: 0 with *status,
 * -ESRCH when it exited, -ETIMEDOUT. pb_remote_is_event_stop: a PTRACE_EVENT_STOP status. */
int pb_remote_stop(pid_t tid);
int pb_remote_interrupt(pid_t tid);
void pb_remote_release(pid_t tid);
int pb_remote_wait_stop(pid_t tid, int *status, long timeout_ms);
int pb_remote_is_event_stop(int status);

#endif
