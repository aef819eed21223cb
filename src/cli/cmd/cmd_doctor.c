/*
 * cmd_doctor.c - `probing doctor [-f table|json]`: which measurement paths this machine, this
 * Python and this torch give (module backward timing, the GIL sampler, NVML, CUDA device
 * timing), and what would enable the others.
 *
 * Only the Python that will run the training can answer (its torch, its headers, a build of
 * probing._autograd made on first use for it), so this command runs
 * `python -m probing._doctor` with the Python of pb_package_python (client/package.h), the
 * probing package on its path and PROBING=0, in place of itself (same pid and exit status).
 * Nothing is built or installed. The same paths as a running job has them: `probing <target> info`.
 */
#include "client/package.h"
#include "cmd/command.h"

#include "out/cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The options of doctor (option.h): the parser and 'doctor --help' read them. */
const pb_option pb_options_doctor[] = {
    PB_OPTION_FORMAT("table|json", NULL),
    PB_OPTION_TABLE_END,
};

int cmd_doctor(const pb_cli_args *a)
{
    char package[PATH_MAX], python[PATH_MAX], path[2 * PATH_MAX + 2];
    int json = a->format && strcmp(a->format, "json") == 0;
    if (a->format && !json && strcmp(a->format, "table") != 0)
        return pb_cli_usage_error("doctor prints -f table or -f json, not '%s'", a->format);
    if (pb_package_find(package, sizeof package))
        return pb_cli_error("cannot find the probing Python package; set PROBING_PYTHONPATH to the "
                            "directory that contains probing/");
    pb_package_python(python, sizeof python);
    const char *old = getenv("PYTHONPATH");
    snprintf(path, sizeof path, "%s%s%s", package, old && *old ? ":" : "", old && *old ? old : "");
    if (setenv("PYTHONPATH", path, 1) || setenv("PROBING", "0", 1))
        return pb_cli_error("cannot set the environment: %s", strerror(errno));
    char *argv[] = {python, "-m", "probing._doctor", json ? "--json" : NULL, NULL};
    fflush(stdout);
    execvp(python, argv);
    return pb_cli_error("cannot run %s: %s; set PROBING_PYTHON to the Python that runs your training",
                        python, strerror(errno));
}
