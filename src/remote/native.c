/*
 * native.c - native stacks of another process's threads through libunwind-ptrace (see native.h).
 */
#include "native.h"

#include "remote.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#ifdef PB_HAVE_LIBUNWIND
#include <libunwind-ptrace.h>

int pb_native_available(void) { return 1; }

/* Base name of the file mapped at ip in pid. */
static void object_at(pid_t pid, uint64_t ip, char *out, size_t len)
{
    char path[64], line[4096 + 256];
    out[0] = '\0';
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        uint64_t start, end;
        int name_at = 0;
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %*s %*s %*s %*s %n", &start, &end, &name_at) < 2)
            continue;
        if (ip < start || ip >= end) continue;
        char *name = name_at ? line + name_at : line + strlen(line);
        name[strcspn(name, "\n")] = '\0';
        const char *base = strrchr(name, '/');
        snprintf(out, len, "%s", base ? base + 1 : name);
        break;
    }
    fclose(f);
}

int pb_native_stack(pid_t pid, pid_t tid, pb_native_frame *frames, int max)
{
    int rc = pb_remote_stop(tid);
    if (rc) return rc;
    unw_addr_space_t as = NULL;
    void *upt = NULL;
    int n = 0;
    as = unw_create_addr_space(&_UPT_accessors, 0);
    upt = as ? _UPT_create(tid) : NULL;
    unw_cursor_t cursor;
    if (!upt || unw_init_remote(&cursor, as, upt) < 0) {
        rc = -EIO;
        goto out;
    }
    do {
        unw_word_t ip = 0, off = 0;
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
        pb_native_frame *fr = &frames[n++];
        memset(fr, 0, sizeof *fr);
        fr->ip = ip;
        if (unw_get_proc_name(&cursor, fr->symbol, sizeof fr->symbol, &off) == 0)
            fr->offset = off;
        else
            fr->symbol[0] = '\0';
    } while (n < max && unw_step(&cursor) > 0);
out:
    if (upt) _UPT_destroy(upt);
    if (as) unw_destroy_addr_space(as);
    pb_remote_release(tid);
    if (rc) return rc;
    /* The thread runs again; the file names come from the maps, which do not change meanwhile
     * for code that is on a stack. */
    for (int i = 0; i < n; i++) object_at(pid, frames[i].ip, frames[i].object, sizeof frames[i].object);
    return n;
}

#else /* no libunwind */

int pb_native_available(void) { return 0; }

int pb_native_stack(pid_t pid, pid_t tid, pb_native_frame *frames, int max)
{
    (void)pid, (void)tid, (void)frames, (void)max;
    return -ENOSYS;
}

#endif
