/*
 * http.c - building, queueing and releasing an HTTP answer (http.h).
 */
#include "http.h"

#include <stdlib.h>

struct MHD_Response *pb_http_response(void *body, size_t len, enum MHD_ResponseMemoryMode mode,
                                      const char *type, const char *const *headers)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(body);
        return NULL;
    }
    if (type) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    for (size_t i = 0; headers && headers[i]; i += 2)
        if (headers[i + 1]) MHD_add_response_header(r, headers[i], headers[i + 1]);
    return r;
}

enum MHD_Result pb_http_queue(struct MHD_Connection *conn, unsigned status,
                              struct MHD_Response *response)
{
    if (!response) return MHD_NO;
    enum MHD_Result ret = MHD_queue_response(conn, status, response);
    MHD_destroy_response(response);
    return ret;
}

enum MHD_Result pb_http_respond(struct MHD_Connection *conn, unsigned status, void *body,
                                size_t len, enum MHD_ResponseMemoryMode mode, const char *type,
                                const char *const *headers)
{
    return pb_http_queue(conn, status, pb_http_response(body, len, mode, type, headers));
}
