/* log.c - stderr messages with a fixed prefix; debug output gated by PROBING_DEBUG. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static void vlog(const char *fmt, va_list ap)
{
    char line[1024];
    int n = vsnprintf(line, sizeof line, fmt, ap);
    if (n < 0) return;
    fprintf(stderr, "probing: %s\n", line);
}

void pb_log_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}

void pb_log_debug(const char *fmt, ...)
{
    static int enabled = -1;
    if (enabled < 0) {
        const char *v = getenv("PROBING_DEBUG");
        enabled = v && *v && *v != '0';
    }
    if (!enabled) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}
