/*
 * http_client.h - a tiny libcurl client for the HTTP server tests (test_http.c): one request
 * over a Unix socket or TCP, its status, body, Allow, Probing-Signature and Probing-Agent headers.
 */
#ifndef PB_TESTS_HTTP_CLIENT_H
#define PB_TESTS_HTTP_CLIENT_H

#include "buf.h"

#include <curl/curl.h>
#include <jansson.h>
#include <stddef.h>

typedef struct reply {
    long status;
    pb_buf body;
    char allow[32];
    char signature[80];   /* the answer's Probing-Signature header, "" none */
    char agent[80];       /* the answer's Probing-Agent header, "" none */
    char kept[4096];      /* the body's first bytes, for checking the signature */
    size_t kept_len;
} reply;

extern const char *bearer; /* "Authorization: Bearer ..." sent by http() when set */

/* Sends one request; returns the parsed JSON body (or NULL), status in r->status (a curl
 * failure: -CURLcode). unix_path NULL: url_or_path is a full URL. */
json_t *http(const char *unix_path, const char *url_or_path, const char *method,
             const char *body, size_t body_len, reply *r);

#endif
