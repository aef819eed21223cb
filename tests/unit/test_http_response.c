/*
 * test_http_response.c - src/server/http.c: the one way probing's HTTP servers build an answer:
 * Content-Type and the extra headers it was given (a NULL value left out), and the body's
 * ownership in each memory mode.
 */
#include "check.h"
#include "http.h"

#include <stdlib.h>
#include <string.h>

int main(void)
{
    static char text[] = "hello";
    const char *const headers[] = {"Cache-Control", "no-store", "Content-Disposition", NULL,
                                   "X-Content-Type-Options", "nosniff", NULL};
    struct MHD_Response *r =
        pb_http_response(text, 5, MHD_RESPMEM_PERSISTENT, "text/plain; charset=utf-8", headers);
    CHECK(r != NULL, "a response is made");
    if (r) {
        const char *type = MHD_get_response_header(r, "Content-Type");
        CHECK_STR(type, "text/plain; charset=utf-8", "it carries the Content-Type");
        CHECK_STR(MHD_get_response_header(r, "Cache-Control"), "no-store", "and the first header");
        CHECK_STR(MHD_get_response_header(r, "X-Content-Type-Options"), "nosniff",
                  "and the one after a pair left out");
        CHECK(MHD_get_response_header(r, "Content-Disposition") == NULL,
              "a pair whose value is NULL is left out");
        MHD_destroy_response(r);
    }
    r = pb_http_response(text, 5, MHD_RESPMEM_MUST_COPY, NULL, NULL);
    CHECK(r && MHD_get_response_header(r, "Content-Type") == NULL,
          "no type and no headers: none added");
    if (r) MHD_destroy_response(r);
    char *owned = strdup("{\"ok\":true}");
    r = pb_http_response(owned, strlen(owned), MHD_RESPMEM_MUST_FREE, "application/json", NULL);
    CHECK(r != NULL, "a taken body: made (it is freed with the response)");
    if (r) MHD_destroy_response(r);
    CHECK(pb_http_queue(NULL, 200, NULL) == MHD_NO,
          "queueing a response that could not be made answers MHD_NO");
    return check_summary();
}
