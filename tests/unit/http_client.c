/*
 * http_client.c - the tiny libcurl client test_http.c drives the server with (http_client.h).
 */
#include "http_client.h"

#include "auth.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    return pb_buf_append(&((reply *)ctx)->body, data, size * n) == 0 ? size * n : 0;
}

static size_t on_header(char *data, size_t size, size_t n, void *ctx)
{
    reply *r = ctx;
    if (size * n > 7 && strncasecmp(data, "Allow: ", 7) == 0)
        sscanf(data + 7, "%31[^\r\n]", r->allow);
    if (size * n > 19 && strncasecmp(data, PB_AUTH_ANSWER_HEADER ": ", 19) == 0)
        sscanf(data + 19, "%79[^\r\n]", r->signature);
    if (size * n > 15 && strncasecmp(data, PB_AUTH_AGENT_HEADER ": ", 15) == 0)
        sscanf(data + 15, "%79[^\r\n]", r->agent);
    return size * n;
}

const char *bearer;

json_t *http(const char *unix_path, const char *url_or_path, const char *method,
             const char *body, size_t body_len, reply *r)
{
    char url[256];
    struct curl_slist *headers = NULL;
    memset(r, 0, sizeof *r);
    CURL *c = curl_easy_init();
    if (bearer) headers = curl_slist_append(headers, bearer);
    /* A large body goes only after the server agreed (as curl does by itself above 1 MB): the
     * 413 then arrives before any of it is sent, instead of racing the upload on a closed
     * socket (curl error 55 on a busy machine). */
    if (body_len > 64 * 1024) {
        headers = curl_slist_append(headers, "Expect: 100-continue");
        curl_easy_setopt(c, CURLOPT_EXPECT_100_TIMEOUT_MS, 10000L);
    }
    if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    if (unix_path) {
        snprintf(url, sizeof url, "http://localhost%s", url_or_path);
        curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, unix_path);
    } else {
        snprintf(url, sizeof url, "%s", url_or_path);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    else r->status = -(long)cc;
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    json_t *j = r->body.data ? json_loadb(r->body.data, r->body.len, 0, NULL) : NULL;
    r->kept_len = r->body.len < sizeof r->kept ? r->body.len : 0;
    if (r->kept_len) memcpy(r->kept, r->body.data, r->kept_len);
    pb_buf_free(&r->body);
    return j;
}
