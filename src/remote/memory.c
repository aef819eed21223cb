/*
 * memory.c - reading another process's memory and listing the files it maps (see remote.h).
 */
#include "remote.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

int pb_remote_read(pid_t pid, uint64_t addr, void *dst, size_t len)
{
    struct iovec local = {dst, len};
    struct iovec remote = {(void *)(uintptr_t)addr, len};
    if (len == 0) return 0;
    if (addr == 0) return -EFAULT;
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0) return errno == EPERM || errno == ESRCH || errno == ENOMEM ? -errno : -EFAULT;
    return (size_t)n == len ? 0 : -EFAULT;
}

int pb_remote_read_u64(pid_t pid, uint64_t addr, uint64_t *out)
{
    return pb_remote_read(pid, addr, out, sizeof *out);
}

static int has_prefix(const char *path, const char *const *prefixes)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (int i = 0; prefixes[i]; i++)
        if (strncmp(base, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return 0;
}

int pb_remote_mapped_files(pid_t pid, const char *const *prefixes, pb_remote_file *files,
                           int max)
{
    char maps_path[64];
    snprintf(maps_path, sizeof maps_path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(maps_path, "r");
    if (!f) return errno == ENOENT ? -ESRCH : -errno;
    char line[4096 + 256];
    int count = 0;
    while (count < max && fgets(line, sizeof line, f)) {
        int name_at = 0;
        sscanf(line, "%*s %*s %*s %*s %*s %n", &name_at);
        if (!name_at || line[name_at] != '/') continue;
        char *name = line + name_at;
        name[strcspn(name, "\n")] = '\0';
        if (!has_prefix(name, prefixes)) continue;
        int seen = 0;
        for (int i = 0; i < count && !seen; i++) seen = strcmp(files[i].path, name) == 0;
        if (seen || strlen(name) >= sizeof files[0].path) continue;
        strcpy(files[count++].path, name);
    }
    fclose(f);
    return count;
}

int pb_remote_write(pid_t pid, uint64_t addr, const void *src, size_t len)
{
    struct iovec local = {(void *)src, len};
    struct iovec remote = {(void *)(uintptr_t)addr, len};
    if (len == 0) return 0;
    if (addr == 0) return -EFAULT;
    ssize_t n = process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (n < 0) return errno == EPERM || errno == ESRCH || errno == ENOMEM ? -errno : -EFAULT;
    return (size_t)n == len ? 0 : -EFAULT;
}

int pb_remote_python_files(pid_t pid, pb_remote_file *files, int max)
{
    static const char *const prefixes[] = {"libpython", "python", NULL};
    if (max < 2) return -EINVAL;
    int count = pb_remote_mapped_files(pid, prefixes, files, max - 1);
    if (count < 0) return count;
    /* The executable itself, for an embedding program or a python not named python*. */
    char exe_link[64];
    snprintf(exe_link, sizeof exe_link, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(exe_link, files[count].path, sizeof files[count].path - 1);
    if (n > 0) files[count++].path[n] = '\0';
    return count;
}

/* The "3.10" in ".../libpython3.10.so.1.0" or ".../python3.10", or "" when there is none. */
void pb_remote_version_from_path(const char *path, char *out, size_t len)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *p = strstr(base, "python");
    out[0] = '\0';
    if (!p) return;
    p += 6;
    size_t n = strspn(p, "0123456789.");
    while (n && p[n - 1] == '.') n--;
    if (n && n < len) {
        memcpy(out, p, n);
        out[n] = '\0';
    }
}
