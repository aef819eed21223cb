/*
 * package.c - where the probing Python package and a Python to run it are (client/package.h).
 *
 * The probing package (pb_package_find: `run`, `inject`, `export`, `ui`) is looked for, in
 * order, in
 *   $PROBING_PYTHONPATH
 *   <exe dir>/../lib/python3.* /site-packages, .../dist-packages   (pip, venv, --user)
 *   <dir of this executable>/python                     (a layout with python/ beside the binary)
 *   <exe dir>/../../python                              (meson build tree: build/src/cli/probing)
 * A directory counts only if the package there has its built extension (_agent*.so).
 */
#include "client/package.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A usable package: probing/__init__.py and the built extension probing/_agent*.so beside it
 * (the source tree has the first without the second). */
static int has_package(const char *dir)
{
    char path[PATH_MAX];
    struct stat st;
    int n = snprintf(path, sizeof path, "%s/probing/__init__.py", dir);
    if (n <= 0 || (size_t)n >= sizeof path || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    n = snprintf(path, sizeof path, "%s/probing/_agent*.so", dir);
    if (n <= 0 || (size_t)n >= sizeof path) return 0;
    glob_t g;
    int found = glob(path, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    if (found) globfree(&g);
    return found;
}

/* Writes dir/name into out; returns 0, or -1 when it does not fit. */
static int join(char *out, size_t outlen, const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    if (a + 1 + b >= outlen) return -1;
    memcpy(out, dir, a);
    out[a] = '/';
    memcpy(out + a + 1, name, b + 1);
    return 0;
}

int pb_package_find(char *out, size_t outlen)
{
    const char *env = getenv("PROBING_PYTHONPATH");
    if (env && *env && has_package(env)) {
        snprintf(out, outlen, "%s", env);
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -ENOENT;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return -ENOENT;
    *slash = '\0';

    char candidate[PATH_MAX];
    static const char *const site_patterns[] = {"../lib/python3.*/site-packages",
                                                "../lib/python3.*/dist-packages",
                                                "../lib/python3/dist-packages"};
    for (size_t i = 0; i < sizeof site_patterns / sizeof site_patterns[0]; i++) {
        glob_t g;
        if (join(candidate, sizeof candidate, exe, site_patterns[i])) continue;
        if (glob(candidate, 0, NULL, &g) != 0) continue;
        int found = 0;
        for (size_t k = g.gl_pathc; k-- > 0 && !found;) /* newest Python first */
            found = has_package(g.gl_pathv[k]) && realpath(g.gl_pathv[k], out) != NULL;
        globfree(&g);
        if (found) return 0;
    }
    static const char *const relative[] = {"python", "../../python"};
    for (size_t i = 0; i < sizeof relative / sizeof relative[0]; i++) {
        if (join(candidate, sizeof candidate, exe, relative[i])) continue;
        if (has_package(candidate) && realpath(candidate, out)) return 0;
    }
    (void)outlen;
    return -ENOENT;
}

void pb_package_python(char *out, size_t outlen)
{
    const char *env = getenv("PROBING_PYTHON");
    char exe[PATH_MAX - 16];
    if (env && *env) {
        snprintf(out, outlen, "%s", env);
        return;
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(out, outlen, "%s/python3", exe);
            if (access(out, X_OK) == 0) return;
        }
    }
    snprintf(out, outlen, "python3");
}
