/*
 * test_auth.c - the HMAC-SHA256 signatures of src/common/auth.c against values computed apart
 * (Python's hmac and hashlib), and the parser on malformed Authorization values.
 */
#include "check.h"
#include "auth.h"

#include <stdio.h>
#include <string.h>

#define TOKEN "job-token-0123456789"

int main(void)
{
    char sig[PB_AUTH_HASH_HEX + 1], header[PB_AUTH_HEADER_MAX], nonce[PB_AUTH_NONCE_HEX + 1];
    const char *body = "{\"ok\":true}", *zeros = "00000000000000000000000000000000";

    /* python3: hmac.new(b"job-token-0123456789", b"probing-answer-v1\n" + b"0"*32 + b"\n200\n"
     *          + sha256(b'{"ok":true}').hexdigest().encode(), sha256).hexdigest() */
    CHECK(pb_auth_sign_answer(TOKEN, zeros, 200, body, strlen(body), sig) == 0 &&
              strcmp(sig, "07be14c9063dc6ae3d6c6c3f6f71b33140e2f66c45ede4e00fb60435835b266e") == 0,
          "answer signature matches Python's hmac (%s)", sig);
    CHECK(pb_auth_verify_answer(TOKEN, zeros, 200, body, strlen(body), sig), "it verifies");
    CHECK(!pb_auth_verify_answer(TOKEN, zeros, 500, body, strlen(body), sig), "not for another status");
    CHECK(!pb_auth_verify_answer(TOKEN, zeros, 200, "{\"ok\":1}", 8, sig), "not for another body");
    CHECK(!pb_auth_verify_answer(TOKEN, "11111111111111111111111111111111", 200, body,
                                 strlen(body), sig), "not for another nonce");
    CHECK(!pb_auth_verify_answer("job-token-0123456780", zeros, 200, body, strlen(body), sig),
          "not with another key");
    CHECK(!pb_auth_verify_answer(TOKEN, zeros, 200, body, strlen(body), NULL), "not without one");
    CHECK(!pb_auth_verify_answer(TOKEN, zeros, 200, body, strlen(body), "07be14c9"), "not a prefix");

    /* a request, with a mac computed apart (rank 2, t 1700000000, nonce "ab" x 16) */
    pb_auth_request a;
    const char *known = PB_AUTH_SCHEME " t=1700000000,n=abababababababababababababababab,r=2,"
        "b=f25189374bfbf48658282bc196f4f8b6d09c7e4aa745f5b2351c827a8ef5aad9,"
        "m=c86e4472d26b9934d6ba66199c42d5fd9a790884eba2ca307474867ae7c2e120";
    const char *sql = "{\"sql\":\"SELECT 1\"}";
    CHECK(pb_auth_parse(known, &a) == 0 && a.time_s == 1700000000 && a.rank == 2,
          "a header made apart parses");
    CHECK(pb_auth_verify_request(TOKEN, &a, "POST", "/api/query"), "its mac verifies");
    CHECK(pb_auth_body_matches(&a, sql, strlen(sql)), "its body hash matches the body");
    CHECK(!pb_auth_body_matches(&a, "{}", 2), "... and not another body");
    CHECK(!pb_auth_verify_request(TOKEN, &a, "GET", "/api/query"), "not for another method");
    CHECK(!pb_auth_verify_request(TOKEN, &a, "POST", "/api/eval"), "not for another path");
    CHECK(!pb_auth_verify_request("", &a, "POST", "/api/query"), "never with an empty token");
    a.rank = 1;
    CHECK(!pb_auth_verify_request(TOKEN, &a, "POST", "/api/query"), "not for another rank");

    /* round trip, and the token is nowhere in the header */
    CHECK(pb_auth_sign_request(TOKEN, "GET", "/api/info?x=1", NULL, 0, -1, 1700000123, header,
                               sizeof header, nonce) == 0, "sign a request");
    CHECK(strstr(header, TOKEN) == NULL && strlen(nonce) == PB_AUTH_NONCE_HEX,
          "the header holds no token, the nonce 32 hex digits");
    CHECK(pb_auth_parse(header, &a) == 0 && a.rank == -1 && strcmp(a.nonce, nonce) == 0 &&
              pb_auth_verify_request(TOKEN, &a, "GET", "/api/info"),
          "it parses and verifies (the query string is not signed)");
    char second[PB_AUTH_NONCE_HEX + 1];
    pb_auth_sign_request(TOKEN, "GET", "/api/info", NULL, 0, -1, 1700000123, header,
                         sizeof header, second);
    CHECK(strcmp(nonce, second) != 0, "every request gets a new nonce");

    static const char *const bad[] = {
        "Bearer " TOKEN,
        PB_AUTH_SCHEME,
        PB_AUTH_SCHEME "t=1,n=abababababababababababababababab,r=-,b=" /* no space */,
        PB_AUTH_SCHEME " n=abababababababababababababababab,r=-,"
        "b=f25189374bfbf48658282bc196f4f8b6d09c7e4aa745f5b2351c827a8ef5aad9,"
        "m=c86e4472d26b9934d6ba66199c42d5fd9a790884eba2ca307474867ae7c2e120",
        PB_AUTH_SCHEME " t=-5,n=abababababababababababababababab,r=-,"
        "b=f25189374bfbf48658282bc196f4f8b6d09c7e4aa745f5b2351c827a8ef5aad9,"
        "m=c86e4472d26b9934d6ba66199c42d5fd9a790884eba2ca307474867ae7c2e120",
        PB_AUTH_SCHEME " t=1,n=ABABABABABABABABABABABABABABABAB,r=-,"
        "b=f25189374bfbf48658282bc196f4f8b6d09c7e4aa745f5b2351c827a8ef5aad9,"
        "m=c86e4472d26b9934d6ba66199c42d5fd9a790884eba2ca307474867ae7c2e120",
        PB_AUTH_SCHEME " t=1,n=abababababababababababababababab,r=x,"
        "b=f25189374bfbf48658282bc196f4f8b6d09c7e4aa745f5b2351c827a8ef5aad9,"
        "m=c86e4472d26b9934d6ba66199c42d5fd9a790884eba2ca307474867ae7c2e120",
        PB_AUTH_SCHEME " t=1,n=abababababababababababababababab,r=-,"
        "b=f25189374bfbf48658282bc196f4f8b6d09c7e4aa745f5b2351c827a8ef5aad9,m=c86e",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(pb_auth_parse(bad[i], &a) != 0, "malformed header %zu refused", i);
    /* the constant-time token compare (the agent's bearer token, the web view's token) */
    CHECK(pb_auth_token_equal(TOKEN, strlen(TOKEN), TOKEN), "a token equals itself");
    CHECK(!pb_auth_token_equal(TOKEN, strlen(TOKEN) - 1, TOKEN), "not its prefix");
    CHECK(!pb_auth_token_equal(TOKEN "9", strlen(TOKEN) + 1, TOKEN), "not a longer string");
    CHECK(!pb_auth_token_equal("job-token-0123456780", 20, TOKEN), "not one differing in the last byte");
    CHECK(!pb_auth_token_equal("Job-token-0123456789", 20, TOKEN), "not one differing in the first");
    CHECK(pb_auth_token_equal(TOKEN "tail", strlen(TOKEN), TOKEN),
          "given_len bounds the given bytes (no NUL needed)");
    CHECK(!pb_auth_token_equal("", 0, ""), "an empty expected token never matches");
    return check_summary();
}
