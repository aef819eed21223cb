/*
 * inject.c - queueing Python source into a running CPython through ptrace (see inject.h).
 *
 * Register handling, per architecture:
 *   x86_64   PTRACE_GETREGS/SETREGS for the general registers; NT_X86_XSTATE (falling back to
 *            PTRACE_GETFPREGS) for x87/SSE/AVX, which the called functions may use. A call is
 *            rip = function, rdi/rsi/... = arguments, rsp 16-byte aligned below the red zone
 *            with a return address of 0: the return faults at address 0 (SIGSEGV), which is
 *            how the end of the call is seen. orig_rax = -1 while calling, so that the kernel
 *            does not "restart" a system call the thread was interrupted in on top of our call;
 *            the saved orig_rax comes back with the other registers and the interrupted call
 *            restarts as after a signal.
 *   aarch64  NT_PRSTATUS for x0-x30/sp/pc/pstate, NT_PRFPREG for the SIMD registers; x30 (the
 *            link register) = 0 as the return address; NT_ARM_SYSTEM_CALL = -1 plays the part
 *            of orig_rax.
 * Stops are waited for with waitpid(__WALL | WNOHANG) polling, so every wait has a deadline.
 */
#include "inject.h"

#include "remote.h"

#include "clock.h"

#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef NT_X86_XSTATE
#define NT_X86_XSTATE 0x202
#endif
#ifndef NT_ARM_SYSTEM_CALL
#define NT_ARM_SYSTEM_CALL 0x404
#endif

#define CALL_TIMEOUT_MS 2000      /* a call that takes longer waits for a lock: give up */
#define ATTEMPTS 8                /* tries when the pending-calls lock is held */
#define RETRY_PAUSE_MS 250
#define STACK_GAP 1024            /* bytes left untouched below the thread's stack pointer */

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* ------------------------------------------------------------------------------- symbols */

/* The version from the file name (Pythons before 3.11 have no Py_Version). */
static void parse_version_from_path(const char *path, pb_inject_python *py)
{
    char v[16];
    int minor;
    pb_remote_version_from_path(path, v, sizeof v);
    if (sscanf(v, "3.%d", &minor) != 1) return;
    py->major = 3;
    py->minor = minor;
    py->micro = -1;
}

int pb_inject_find_python(pid_t pid, pb_inject_python *py)
{
    static const char *const names[] = {"Py_AddPendingCall", "PyRun_SimpleString", "Py_Version"};
    pb_remote_file *files = calloc(9, sizeof *files);
    int rc = PB_INJECT_ENOTPYTHON;
    memset(py, 0, sizeof *py);
    if (!files) return -ENOMEM;
    int count = pb_remote_python_files(pid, files, 9);
    if (count < 0) {
        free(files);
        return count;
    }
    for (int i = 0; i < count; i++) {
        uint64_t v[3];
        if (pb_remote_symbols(pid, files[i].path, names, 3, v) <= 0 || !v[0] || !v[1]) continue;
        snprintf(py->library, sizeof py->library, "%s", files[i].path);
        uint64_t version = 0;
        if (v[2] && pb_remote_read_u64(pid, v[2], &version) == 0 && (version >> 24 & 255) == 3) {
            py->major = 3;
            py->minor = (int)(version >> 16 & 255);
            py->micro = (int)(version >> 8 & 255);
        } else {
            parse_version_from_path(files[i].path, py);
        }
        rc = 0;
        break;
    }
    free(files);
    return rc;
}

/* Run-time addresses of what the injection calls. */
typedef struct targets {
    uint64_t add_pending_call, run_simple_string, mmap, munmap;
} targets;

static int find_targets(pid_t pid, targets *t, char *why, size_t why_len)
{
    static const char *const py_names[] = {"Py_AddPendingCall", "PyRun_SimpleString"};
    static const char *const libc_names[] = {"mmap", "munmap"};
    static const char *const libc_prefixes[] = {"libc.so", "libc-", "ld-musl", NULL};
    pb_inject_python py;
    int rc = pb_inject_find_python(pid, &py);
    if (rc == PB_INJECT_ENOTPYTHON) {
        snprintf(why, why_len, "process %d is not a Python process (no libpython or python "
                 "executable defining Py_AddPendingCall is mapped)", (int)pid);
        return rc;
    }
    if (rc) return rc;
    uint64_t v[2];
    if (pb_remote_symbols(pid, py.library, py_names, 2, v) < 2) return PB_INJECT_ENOTPYTHON;
    t->add_pending_call = v[0];
    t->run_simple_string = v[1];

    pb_remote_file files[4];
    int count = pb_remote_mapped_files(pid, libc_prefixes, files, 4);
    for (int i = 0; i < count; i++) {
        if (pb_remote_symbols(pid, files[i].path, libc_names, 2, v) == 2 && v[0] && v[1]) {
            t->mmap = v[0];
            t->munmap = v[1];
            return 0;
        }
    }
    snprintf(why, why_len, "process %d has no C library with mmap() mapped (a statically linked "
             "Python cannot be injected)", (int)pid);
    return PB_INJECT_ENOLIBC;
}

/* ------------------------------------------------------------------------- registers */

typedef struct regs_state {
#if defined(__x86_64__)
    struct user_regs_struct gp;
#elif defined(__aarch64__)
    struct user_regs_struct gp; /* regs[31], sp, pc, pstate */
    int syscall_nr;
    int have_syscall_nr;
#endif
    unsigned char vector[16384]; /* NT_X86_XSTATE or NT_PRFPREG */
    size_t vector_len;
} regs_state;

static int get_regset(pid_t pid, int type, void *buf, size_t *len)
{
    struct iovec io = {buf, *len};
    if (ptrace(PTRACE_GETREGSET, pid, (void *)(uintptr_t)type, &io) != 0) return -errno;
    *len = io.iov_len;
    return 0;
}

static int set_regset(pid_t pid, int type, void *buf, size_t len)
{
    struct iovec io = {buf, len};
    return ptrace(PTRACE_SETREGSET, pid, (void *)(uintptr_t)type, &io) != 0 ? -errno : 0;
}

static int save_regs(pid_t pid, regs_state *s)
{
    memset(s, 0, sizeof *s);
#if defined(__x86_64__)
    if (ptrace(PTRACE_GETREGS, pid, NULL, &s->gp) != 0) return -errno;
    s->vector_len = sizeof s->vector;
    if (get_regset(pid, NT_X86_XSTATE, s->vector, &s->vector_len) != 0) {
        s->vector_len = sizeof s->vector;
        if (get_regset(pid, NT_PRFPREG, s->vector, &s->vector_len) != 0) return -errno;
    }
#elif defined(__aarch64__)
    size_t len = sizeof s->gp;
    int rc = get_regset(pid, NT_PRSTATUS, &s->gp, &len);
    if (rc) return rc;
    len = sizeof s->syscall_nr;
    s->have_syscall_nr = get_regset(pid, NT_ARM_SYSTEM_CALL, &s->syscall_nr, &len) == 0;
    s->vector_len = sizeof s->vector;
    if ((rc = get_regset(pid, NT_PRFPREG, s->vector, &s->vector_len))) return rc;
#else
#error "probing inject supports x86_64 and aarch64"
#endif
    return 0;
}

static int restore_regs(pid_t pid, regs_state *s)
{
    int rc = 0;
#if defined(__x86_64__)
    if (ptrace(PTRACE_SETREGS, pid, NULL, &s->gp) != 0) rc = -errno;
    if (set_regset(pid, NT_X86_XSTATE, s->vector, s->vector_len) != 0 &&
        set_regset(pid, NT_PRFPREG, s->vector, s->vector_len) != 0 && !rc)
        rc = -errno;
#elif defined(__aarch64__)
    rc = set_regset(pid, NT_PRSTATUS, &s->gp, sizeof s->gp);
    if (s->have_syscall_nr) set_regset(pid, NT_ARM_SYSTEM_CALL, &s->syscall_nr, sizeof s->syscall_nr);
    if (set_regset(pid, NT_PRFPREG, s->vector, s->vector_len) != 0 && !rc) rc = -errno;
#endif
    return rc;
}

/* Calls func(args...) in the stopped thread pid, whose registers at the stop are in saved.
 * Returns 0 with the call's return value in *ret; -ETIMEDOUT when it did not return in
 * timeout_ms (the thread is stopped again); -EFAULT when it faulted; -ESRCH. The caller
 * restores the registers afterwards in every case. */
static int call(pid_t pid, const regs_state *saved, uint64_t func, const uint64_t *args, int nargs,
                uint64_t *ret, long timeout_ms)
{
    int rc, status;
#if defined(__x86_64__)
    struct user_regs_struct r = saved->gp;
    uint64_t sp = ((r.rsp - STACK_GAP) & ~(uint64_t)15) - 8, zero = 0;
    if ((rc = pb_remote_write(pid, sp, &zero, sizeof zero))) return rc;
    unsigned long long *slots[6] = {&r.rdi, &r.rsi, &r.rdx, &r.rcx, &r.r8, &r.r9};
    for (int i = 0; i < nargs && i < 6; i++) *slots[i] = args[i];
    r.rsp = sp;
    r.rip = func;
    r.rax = 0;
    r.orig_rax = (unsigned long long)-1;
    if (ptrace(PTRACE_SETREGS, pid, NULL, &r) != 0) return -errno;
#elif defined(__aarch64__)
    struct user_regs_struct r = saved->gp;
    for (int i = 0; i < nargs && i < 8; i++) r.regs[i] = args[i];
    r.regs[30] = 0;
    r.sp = (r.sp - STACK_GAP) & ~(uint64_t)15;
    r.pc = func;
    if ((rc = set_regset(pid, NT_PRSTATUS, &r, sizeof r))) return rc;
    if (saved->have_syscall_nr) {
        int none = -1;
        set_regset(pid, NT_ARM_SYSTEM_CALL, &none, sizeof none);
    }
#endif
    if (ptrace(PTRACE_CONT, pid, NULL, NULL) != 0) return -errno;
    int64_t deadline = pb_now_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        long left = (long)((deadline - pb_now_ns()) / 1000000);
        rc = pb_remote_wait_stop(pid, &status, left > 0 ? left : 0);
        if (rc == -ETIMEDOUT) {
            int irc = pb_remote_interrupt(pid);
            return irc ? irc : -ETIMEDOUT;
        }
        if (rc) return rc;
        int sig = WSTOPSIG(status);
        if (pb_remote_is_event_stop(status)) {
            /* A job-control stop or a stray interrupt: keep the call going. */
            if (ptrace(PTRACE_CONT, pid, NULL, NULL) != 0) return -errno;
            continue;
        }
        if (sig == SIGSEGV || sig == SIGBUS) {
#if defined(__x86_64__)
            struct user_regs_struct now;
            if (ptrace(PTRACE_GETREGS, pid, NULL, &now) != 0) return -errno;
            if (now.rip != 0) return -EFAULT;
            *ret = now.rax;
#elif defined(__aarch64__)
            struct user_regs_struct now;
            if ((rc = get_regset(pid, NT_PRSTATUS, &now, &(size_t){sizeof now}))) return rc;
            if (now.pc != 0) return -EFAULT;
            *ret = now.regs[0];
#endif
            return 0;
        }
        /* Some other signal for the thread: deliver it (a handler runs and returns into the
         * call) and keep waiting. */
        if (ptrace(PTRACE_CONT, pid, NULL, (void *)(uintptr_t)sig) != 0) return -errno;
    }
}

/* ----------------------------------------------------------------------------- inject */

static int explain(int rc, pid_t pid, char *why, size_t why_len)
{
    if (rc == -EPERM || rc == -EACCES) {
        snprintf(why, why_len,
                 "not allowed to ptrace process %d: run probing as the same user as the process "
                 "with kernel.yama.ptrace_scope=0 (sudo sysctl kernel.yama.ptrace_scope=0), or as "
                 "root / with CAP_SYS_PTRACE (in a container: --cap-add SYS_PTRACE); another "
                 "debugger (gdb, strace, py-spy) may also be attached", (int)pid);
    } else if (rc == -ESRCH) {
        snprintf(why, why_len, "process %d exited during the attach; nothing was changed",
                 (int)pid);
    } else if (rc == -EAGAIN) {
        snprintf(why, why_len, "process %d is stopped (SIGSTOP or Ctrl-Z); resume it (kill -CONT "
                 "%d) and try again", (int)pid, (int)pid);
    } else if (!*why) {
        snprintf(why, why_len, "attaching to process %d failed: %s", (int)pid, strerror(-rc));
    }
    return rc;
}

/* Replaces every token (16 characters) in text by value in 16 hex digits. */
static void patch(char *text, const char *token, uint64_t value)
{
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, value);
    for (char *p = strstr(text, token); p; p = strstr(p + 16, token)) memcpy(p, hex, 16);
}

/* One attempt: seize, call, restore, detach. *page is mapped on the first successful attempt
 * and kept for the next ones. Returns 0 when queued. */
static int attempt(pid_t pid, const targets *t, const char *source, size_t source_len,
                   uint64_t *page, size_t page_len, regs_state *saved, char *why, size_t why_len)
{
    int rc = pb_remote_stop(pid);
    if (rc) return explain(rc, pid, why, why_len);
    if ((rc = save_regs(pid, saved))) {
        pb_remote_release(pid);
        return explain(rc, pid, why, why_len);
    }
    uint64_t ret = 0;
    if (!*page) {
        uint64_t args[6] = {0, page_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            (uint64_t)-1, 0};
        rc = call(pid, saved, t->mmap, args, 6, &ret, CALL_TIMEOUT_MS);
        if (rc == 0 && (ret == (uint64_t)MAP_FAILED || ret == 0)) {
            snprintf(why, why_len, "mmap() in process %d failed", (int)pid);
            rc = PB_INJECT_ECALL;
        }
        if (rc == 0) {
            *page = ret;
            char *text = malloc(source_len + 1);
            if (!text) {
                rc = -ENOMEM;
            } else {
                memcpy(text, source, source_len + 1);
                patch(text, PB_INJECT_PAGE_ADDR, *page);
                patch(text, PB_INJECT_PAGE_SIZE, page_len);
                rc = pb_remote_write(pid, *page, text, source_len + 1);
                free(text);
            }
        }
    }
    if (rc == 0) {
        uint64_t args[2] = {t->run_simple_string, *page};
        rc = call(pid, saved, t->add_pending_call, args, 2, &ret, CALL_TIMEOUT_MS);
        if (rc == -ETIMEDOUT) rc = PB_INJECT_EBUSY;
        else if (rc == 0 && (int32_t)ret != 0) rc = PB_INJECT_EQUEUE;
    }
    int restore_rc = rc == -ESRCH ? 0 : restore_regs(pid, saved);
    pb_remote_release(pid);
    if (rc == 0 && restore_rc) rc = restore_rc; /* queued, but the thread may be disturbed */
    return rc;
}

int pb_inject_source(pid_t pid, const char *source, char *why, size_t why_len)
{
    targets t;
    int rc;
    why[0] = '\0';
    if ((rc = find_targets(pid, &t, why, why_len))) return explain(rc, pid, why, why_len);
    size_t source_len = strlen(source);
    long page_size = sysconf(_SC_PAGESIZE);
    size_t page_len = (source_len + 1 + (size_t)page_size - 1) / (size_t)page_size *
                      (size_t)page_size;
    uint64_t page = 0;
    regs_state *saved = malloc(sizeof *saved);
    if (!saved) return -ENOMEM;
    for (int i = 0; i < ATTEMPTS; i++) {
        if (i) sleep_ms(RETRY_PAUSE_MS);
        rc = attempt(pid, &t, source, source_len, &page, page_len, saved, why, why_len);
        if (rc != PB_INJECT_EBUSY) break;
    }
    if (rc == PB_INJECT_EBUSY) {
        snprintf(why, why_len, "the interpreter of process %d kept its pending-calls lock held "
                 "for %d attempts; nothing was queued, try again", (int)pid, ATTEMPTS);
    } else if (rc == PB_INJECT_EQUEUE) {
        snprintf(why, why_len, "the interpreter of process %d has a full pending-call queue "
                 "(its main thread has not run Python code for a while); try again later",
                 (int)pid);
    } else if (rc == -EFAULT && !*why) {
        snprintf(why, why_len, "a call made in process %d faulted; the thread was put back as "
                 "it was and nothing was queued", (int)pid);
    }
    if (rc && page) {
        /* Give the page back; a failure here only leaves one page mapped. */
        if (pb_remote_stop(pid) == 0) {
            uint64_t args[2] = {page, page_len}, ret;
            if (save_regs(pid, saved) == 0) {
                call(pid, saved, t.munmap, args, 2, &ret, CALL_TIMEOUT_MS);
                restore_regs(pid, saved);
            }
            pb_remote_release(pid);
        }
    }
    free(saved);
    return rc ? explain(rc, pid, why, why_len) : 0;
}
