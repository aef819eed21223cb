/* error.c - pb_strerror() for errno values and probing's own codes. */
#include "error.h"

#include <string.h>

const char *pb_strerror(int err)
{
    switch (err) {
    case 0: return "success";
    case PB_EINTERNAL: return "internal error";
    case PB_ESQL: return "SQL error";
    case PB_ETOOBIG: return "too large";
    case PB_ETIMEOUT: return "timed out";
    case PB_ENOPYTHON: return "Python interpreter not available";
    case PB_EDISABLED: return "probing agent is disabled";
    case PB_EBADTOKEN: return "PROBING_TOKEN must be 16 to 256 characters without whitespace";
    case PB_ECANCELLED: return "cancelled";
    case PB_EBUSY: return "busy";
    case PB_ESTOPPED: return "the process is stopped";
    default: break;
    }
    if (err < 0 && err > -4096) return strerror(-err); /* strerror is safe enough for static codes */
    return "unknown error";
}
