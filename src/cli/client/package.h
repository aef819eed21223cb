/*
 * package.h - where the probing Python package with its built extension is, and the Python to
 * run its helpers with (package.c): for run, inject, export, ui and doctor.
 */
#ifndef PB_CLI_PACKAGE_H
#define PB_CLI_PACKAGE_H

#include <stddef.h>

/* Writes the directory that contains the probing Python package with its built extension into
 * out (run, inject, export, ui; where it is looked for: package.c). Returns 0, or -ENOENT when
 * none is found. */
int pb_package_find(char *out, size_t outlen);

/* Writes the Python to run the package's helpers with into out: $PROBING_PYTHON, else the python3
 * beside this executable (a virtual environment's bin/), else "python3" (PATH). (export, doctor) */
void pb_package_python(char *out, size_t outlen);

#endif
