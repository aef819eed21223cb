/*
 * test_auth.c - the HMAC-SHA256 signatures of src/common/auth.c against values computed apart
 * (Python's hmac and hashlib), the agent binding (a request and an answer are for one agent and
 * rank), the older form refused, and the parser on malformed Authorization values; first the
 * SHA-256 and HMAC-SHA256 underneath (sha256.h) against FIPS 180-4's examples and RFC 4231.
 */
#include "check.h"
#include "auth.h"
#include "sha256.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define TOKEN "job-token-0123456789"

#define AGENT "0123456789abcdef0123456789abcdef"

static const char *hex(const uint8_t d[PB_SHA256_LEN])
{
    static char out[2 * PB_SHA256_LEN + 1];
    for (int i = 0; i < PB_SHA256_LEN; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
    return out;
}

static void check_sha256(void)
{
    static const struct { const char *in, *want; } v[] = {
        { "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
        { "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
        { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
    };
    uint8_t d[PB_SHA256_LEN];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        pb_sha256(v[i].in, strlen(v[i].in), d);
        CHECK(strcmp(hex(d), v[i].want) == 0, "SHA-256 of FIPS example %zu (%s)", i, hex(d));
    }
    /* the padding's edges: 55 bytes fit one block, 56 and 64 need a second */
    static const struct { size_t n; const char *want; } edge[] = {
        { 55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072" },
        { 56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e" },
        { 64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c" },
    };
    char xs[64];
    memset(xs, 'x', sizeof xs);
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        pb_sha256(xs, edge[i].n, d);
        CHECK(strcmp(hex(d), edge[i].want) == 0, "SHA-256 of %zu bytes (hashlib)", edge[i].n);
    }
    /* a million 'a' fed in uneven pieces: the streaming update */
    pb_sha256_ctx c;
    char as[1000];
    memset(as, 'a', sizeof as);
    pb_sha256_init(&c);
    for (size_t done = 0, step = 1; done < 1000000; done += step, step = step % 997 + 3) {
        if (step > 1000000 - done) step = 1000000 - done;
        pb_sha256_update(&c, as, step);
    }
    pb_sha256_final(&c, d);
    CHECK(strcmp(hex(d), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0,
          "SHA-256 of a million 'a' in pieces");

    /* RFC 4231 test cases 1, 2 and 6 (a key longer than the block) */
    uint8_t k1[20], k6[131];
    memset(k1, 0x0b, sizeof k1);
    memset(k6, 0xaa, sizeof k6);
    pb_hmac_sha256(k1, sizeof k1, "Hi There", 8, d);
    CHECK(strcmp(hex(d), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7") == 0,
          "HMAC-SHA256, RFC 4231 case 1");
    pb_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, d);
    CHECK(strcmp(hex(d), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843") == 0,
          "HMAC-SHA256, RFC 4231 case 2");
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    pb_hmac_sha256(k6, sizeof k6, m6, strlen(m6), d);
    CHECK(strcmp(hex(d), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54") == 0,
          "HMAC-SHA256, RFC 4231 case 6");
    CHECK(pb_memeq_ct("abcd", "abcd", 4) == 0 && pb_memeq_ct("abcd", "abce", 4) != 0 &&
              pb_memeq_ct("xbcd", "abcd", 4) != 0, "the constant-time compare");
}

int main(void)
{
    char sig[PB_AUTH_HASH_HEX + 1], header[PB_AUTH_HEADER_MAX], nonce[PB_AUTH_NONCE_HEX + 1];
    const char *body = "{\"ok\":true}", *zeros = "00000000000000000000000000000000";

    check_sha256();

    /* python3: hmac.new(b"job-token-0123456789", b"probing-answer-v2\n" + AGENT + b"\n2\n"
     *          + b"0"*32 + b"\n200\n" + sha256(b'{"ok":true}').hexdigest().encode(),
     *          sha256).hexdigest() */
    CHECK(pb_auth_sign_answer(TOKEN, AGENT, 2, zeros, 200, body, strlen(body), sig) == 0 &&
              strcmp(sig, "3d3705eb4090091f0948c6f7b0757a6dade2326ab122fb29dad0d03d756b12ce") == 0,
          "answer signature matches Python's hmac (%s)", sig);
    CHECK(pb_auth_verify_answer(TOKEN, AGENT, 2, zeros, 200, body, strlen(body), sig), "it verifies");
    CHECK(!pb_auth_verify_answer(TOKEN, AGENT, 2, zeros, 500, body, strlen(body), sig),
          "not for another status");
    CHECK(!pb_auth_verify_answer(TOKEN, AGENT, 2, zeros, 200, "{\"ok\":1}", 8, sig),
          "not for another body");
    CHECK(!pb_auth_verify_answer(TOKEN, AGENT, 2, "11111111111111111111111111111111", 200, body,
                                 strlen(body), sig), "not for another nonce");
    CHECK(!pb_auth_verify_answer(TOKEN, "1123456789abcdef0123456789abcdef", 2, zeros, 200, body,
                                 strlen(body), sig), "not by another agent");
    CHECK(!pb_auth_verify_answer(TOKEN, AGENT, 1, zeros, 200, body, strlen(body), sig),
          "not by another rank");
    CHECK(!pb_auth_verify_answer("job-token-0123456780", AGENT, 2, zeros, 200, body, strlen(body),
                                 sig), "not with another key");
    CHECK(!pb_auth_verify_answer(TOKEN, AGENT, 2, zeros, 200, body, strlen(body), NULL),
          "not without one");
    CHECK(!pb_auth_verify_answer(TOKEN, AGENT, 2, zeros, 200, body, strlen(body), "3d3705eb"),
          "not a prefix");
    CHECK(!pb_auth_verify_answer(TOKEN, "", 2, zeros, 200, body, strlen(body), sig),
          "never for no agent");

    /* the agent header */
    char agent[PB_AUTH_AGENT_HEX + 1];
    int rank = -1;
    CHECK(pb_auth_parse_agent(AGENT " 12", agent, &rank) == 0 && rank == 12 &&
              strcmp(agent, AGENT) == 0, "an agent header parses");
    CHECK(pb_auth_parse_agent(AGENT " -1", agent, &rank) && pb_auth_parse_agent(AGENT, agent, &rank) &&
              pb_auth_parse_agent("0123 1", agent, &rank) &&
              pb_auth_parse_agent(AGENT " 1x", agent, &rank) && pb_auth_parse_agent(NULL, agent, &rank),
          "malformed agent headers refused");
    CHECK(pb_auth_new_agent_id(agent) == 0 && strlen(agent) == PB_AUTH_AGENT_HEX &&
              strcmp(agent, AGENT) != 0, "a new agent id is 32 hex digits");

    /* a request, with a mac computed apart (rank 2, agent AGENT, t 1700000000, nonce "ab" x 16):
     * the text "probing-request-v2\nPOST\n/api/query\n1700000000\n" + "ab"*16 + "\n2\n" AGENT
     * "\n" + sha256(body) */
    pb_auth_request a;
    const char *known = PB_AUTH_SCHEME " t=1700000000,n=abababababababababababababababab,r=2,"
        "a=" AGENT ",b=f25189374bfbf48658282bc196f4f8b6d09c7e4aa745f5b2351c827a8ef5aad9,"
        "m=5d24d3b6683a934e820483343187961329f54b147b620c589dd0f9e40d0a8639";
    const char *sql = "{\"sql\":\"SELECT 1\"}";
    CHECK(pb_auth_parse(known, &a) == 0 && a.time_s == 1700000000 && a.rank == 2 &&
              strcmp(a.agent, AGENT) == 0, "a header made apart parses");
    CHECK(pb_auth_verify_request(TOKEN, &a, "POST", "/api/query"), "its mac verifies");
    CHECK(pb_auth_body_matches(&a, sql, strlen(sql)), "its body hash matches the body");
    CHECK(!pb_auth_body_matches(&a, "{}", 2), "... and not another body");
    CHECK(!pb_auth_verify_request(TOKEN, &a, "GET", "/api/query"), "not for another method");
    CHECK(!pb_auth_verify_request(TOKEN, &a, "POST", "/api/eval"), "not for another path");
    CHECK(!pb_auth_verify_request("", &a, "POST", "/api/query"), "never with an empty token");
    a.rank = 1;
    CHECK(!pb_auth_verify_request(TOKEN, &a, "POST", "/api/query"), "not for another rank");
    a.rank = 2;
    a.agent[0] = '1';
    CHECK(!pb_auth_verify_request(TOKEN, &a, "POST", "/api/query"), "not for another agent");
    /* the older form: every field but a= */
    CHECK(pb_auth_parse(PB_AUTH_SCHEME " t=1700000000,n=abababababababababababababababab,r=-,"
                        "b=f25189374bfbf48658282bc196f4f8b6d09c7e4aa745f5b2351c827a8ef5aad9,"
                        "m=c86e4472d26b9934d6ba66199c42d5fd9a790884eba2ca307474867ae7c2e120",
                        &a) == -EPROTO, "a header of the older form (no a=) -> -EPROTO");

    /* round trip, and the token is nowhere in the header */
    CHECK(pb_auth_sign_request(TOKEN, "GET", "/api/info?x=1", NULL, 0, -1, NULL, 1700000123,
                               header, sizeof header, nonce) == 0, "sign a request for no agent");
    CHECK(strstr(header, TOKEN) == NULL && strlen(nonce) == PB_AUTH_NONCE_HEX,
          "the header holds no token, the nonce 32 hex digits");
    CHECK(pb_auth_parse(header, &a) == 0 && a.rank == -1 && !a.agent[0] &&
              strcmp(a.nonce, nonce) == 0 && pb_auth_verify_request(TOKEN, &a, "GET", "/api/info"),
          "it parses and verifies (the query string is not signed)");
    CHECK(pb_auth_sign_request(TOKEN, "GET", "/api/info", NULL, 0, 7, AGENT, 1700000123, header,
                               sizeof header, nonce) == 0 &&
              pb_auth_parse(header, &a) == 0 && a.rank == 7 && strcmp(a.agent, AGENT) == 0 &&
              pb_auth_verify_request(TOKEN, &a, "GET", "/api/info"),
          "a request for an agent of a rank parses and verifies");
    CHECK(pb_auth_sign_request(TOKEN, "GET", "/api/info", NULL, 0, 7, "xyz", 1700000123, header,
                               sizeof header, nonce) == -EINVAL, "an agent id that is not one is refused");
    char second[PB_AUTH_NONCE_HEX + 1];
    pb_auth_sign_request(TOKEN, "GET", "/api/info", NULL, 0, -1, NULL, 1700000123, header,
                         sizeof header, second);
    CHECK(strcmp(nonce, second) != 0, "every request gets a new nonce");

    static const char *const bad[] = {
        PB_AUTH_SCHEME " t=1,n=abababababababababababababababab,r=-,a=0123,"
        "b=f25189374bfbf48658282bc196f4f8b6d09c7e4aa745f5b2351c827a8ef5aad9,"
        "m=c86e4472d26b9934d6ba66199c42d5fd9a790884eba2ca307474867ae7c2e120",
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
