/*
 * elf.c - symbol lookup in the ELF64 files another process has mapped (see remote.h).
 *
 * The file is read with pread() (no mmap: it may be large and we want a few tables of it).
 * Both .dynsym and .symtab are searched: _PyRuntime is in .dynsym of libpython and of a python
 * executable linked with --export-dynamic, in .symtab of a static one that is not stripped.
 * The load bias is the start of the mapping at file offset 0 minus the page-aligned p_vaddr of
 * the PT_LOAD segment at file offset 0 (0 for a non-PIE executable, whose vaddrs are absolute).
 */
#include "remote.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TABLE_BYTES ((size_t)256 << 20)

static int read_exact(int fd, uint64_t offset, void *dst, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)dst + done, len - done, (off_t)(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? -errno : -ENOEXEC;
        done += (size_t)n;
    }
    return 0;
}

/* Lowest start address of a mapping of path at file offset 0 in pid, via /proc/<pid>/maps. */
static int mapping_base(pid_t pid, const char *path, uint64_t *base)
{
    char maps_path[64];
    snprintf(maps_path, sizeof maps_path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(maps_path, "r");
    if (!f) return errno == ENOENT ? -ESRCH : -errno;
    char line[4096 + 256];
    int rc = -ENOENT;
    while (fgets(line, sizeof line, f)) {
        uint64_t start, end, offset;
        int name_at = 0;
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %*s %" SCNx64 " %*s %*s %n", &start, &end,
                   &offset, &name_at) < 3 || !name_at)
            continue;
        char *name = line + name_at;
        name[strcspn(name, "\n")] = '\0';
        if (offset == 0 && strcmp(name, path) == 0) {
            *base = start;
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

/* Searches one symbol table section (with its string table) for names. */
static int search_table(int fd, const Elf64_Shdr *symtab, const Elf64_Shdr *strtab,
                        const char *const *names, int count, uint64_t *values, uint64_t bias)
{
    int rc = 0, found = 0;
    Elf64_Sym *syms = NULL;
    char *strings = NULL;
    if (symtab->sh_entsize != sizeof(Elf64_Sym) || symtab->sh_size > MAX_TABLE_BYTES ||
        strtab->sh_size > MAX_TABLE_BYTES || strtab->sh_size == 0)
        return 0;
    syms = malloc(symtab->sh_size ? symtab->sh_size : 1);
    strings = malloc(strtab->sh_size + 1);
    if (!syms || !strings) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = read_exact(fd, symtab->sh_offset, syms, symtab->sh_size)) ||
        (rc = read_exact(fd, strtab->sh_offset, strings, strtab->sh_size)))
        goto fail;
    strings[strtab->sh_size] = '\0';
    size_t n = symtab->sh_size / sizeof(Elf64_Sym);
    for (size_t i = 0; i < n; i++) {
        if (syms[i].st_name >= strtab->sh_size || syms[i].st_shndx == SHN_UNDEF ||
            syms[i].st_value == 0)
            continue;
        const char *name = strings + syms[i].st_name;
        for (int k = 0; k < count; k++) {
            if (!values[k] && strcmp(name, names[k]) == 0) {
                values[k] = syms[i].st_value + bias;
                found++;
            }
        }
    }
    rc = found;
fail:
    free(syms);
    free(strings);
    return rc;
}

int pb_remote_symbols(pid_t pid, const char *path, const char *const *names, int count,
                      uint64_t *values)
{
    int rc, fd = -1, found = 0;
    Elf64_Ehdr eh;
    Elf64_Phdr *ph = NULL;
    Elf64_Shdr *sh = NULL;
    uint64_t base = 0, bias = 0;
    char file_path[4096 + 64];

    for (int k = 0; k < count; k++) values[k] = 0;
    if ((rc = mapping_base(pid, path, &base))) goto fail;
    /* Through the target's root, so that a process in a container is read from its own file. */
    snprintf(file_path, sizeof file_path, "/proc/%d/root%s", (int)pid, path);
    fd = open(file_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        goto fail;
    }
    if ((rc = read_exact(fd, 0, &eh, sizeof eh))) goto fail;
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        eh.e_phnum == 0 || eh.e_shnum == 0) {
        rc = -ENOEXEC;
        goto fail;
    }
    ph = calloc(eh.e_phnum, sizeof *ph);
    sh = calloc(eh.e_shnum, sizeof *sh);
    if (!ph || !sh) {
        rc = -ENOMEM;
        goto fail;
    }
    if ((rc = read_exact(fd, eh.e_phoff, ph, eh.e_phnum * sizeof *ph)) ||
        (rc = read_exact(fd, eh.e_shoff, sh, eh.e_shnum * sizeof *sh)))
        goto fail;
    for (int i = 0; i < eh.e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD && ph[i].p_offset == 0) {
            uint64_t align = ph[i].p_align > 1 ? ph[i].p_align : 4096;
            bias = eh.e_type == ET_DYN ? base - (ph[i].p_vaddr & ~(align - 1)) : 0;
            break;
        }
    }
    for (int i = 0; i < eh.e_shnum && found < count; i++) {
        if (sh[i].sh_type != SHT_DYNSYM && sh[i].sh_type != SHT_SYMTAB) continue;
        if (sh[i].sh_link >= eh.e_shnum) continue;
        rc = search_table(fd, &sh[i], &sh[sh[i].sh_link], names, count, values, bias);
        if (rc < 0) goto fail;
        found = 0;
        for (int k = 0; k < count; k++) found += values[k] != 0;
    }
    rc = found;
fail:
    if (fd >= 0) close(fd);
    free(ph);
    free(sh);
    return rc;
}
