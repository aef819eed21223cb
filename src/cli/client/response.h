/*
 * response.h - an answer of the agent's HTTP API as the CLI holds it, whether it came over a
 * socket (client.c) or was made from a recording file (recording.c). Header only.
 */
#ifndef PB_CLI_RESPONSE_H
#define PB_CLI_RESPONSE_H

#include "buf.h"

typedef struct pb_response {
    long status;   /* HTTP status */
    pb_buf body;   /* owned; free with pb_buf_free() */
} pb_response;

#endif
