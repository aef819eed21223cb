/*
 * auth.c - HMAC-SHA256 request and answer signatures; see auth.h.
 *
 * The primitives are sha256.h's SHA-256, HMAC-SHA256 and constant-time compare (FreeBSD's
 * SHA-256, carried in the tree so that the agent maps no TLS library into the job). What is
 * signed is spelled out once here, for both ends.
 */
#include "auth.h"
#include "sha256.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

static void to_hex(const unsigned char *raw, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[raw[i] >> 4];
        out[2 * i + 1] = digits[raw[i] & 15];
    }
    out[2 * n] = '\0';
}

static void sha256_hex(const char *data, size_t len, char out[PB_AUTH_HASH_HEX + 1])
{
    uint8_t digest[PB_SHA256_LEN];
    pb_sha256(data ? data : "", data ? len : 0, digest);
    to_hex(digest, sizeof digest, out);
}

static int hmac_hex(const char *token, const char *text, size_t len, char out[PB_AUTH_HASH_HEX + 1])
{
    uint8_t mac[PB_SHA256_LEN];
    pb_hmac_sha256(token, strlen(token), text, len, mac);
    to_hex(mac, sizeof mac, out);
    return 0;
}

int pb_auth_random_hex(char *out, size_t bytes)
{
    unsigned char raw[64];
    size_t got = 0;
    if (bytes > sizeof raw) return -EINVAL;
    while (got < bytes) {
        ssize_t n = getrandom(raw + got, bytes - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        got += (size_t)n;
    }
    to_hex(raw, bytes, out);
    return 0;
}

static int is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return s[n] == '\0';
}

static void rank_text(int rank, char out[16])
{
    if (rank < 0) snprintf(out, 16, "-");
    else snprintf(out, 16, "%d", rank);
}

/* The request's signed text into out; returns its length or -ENAMETOOLONG. */
static int request_text(char *out, size_t outlen, const char *method, const char *path,
                        int64_t time_s, const char *nonce, int rank, const char *agent,
                        const char *body_hash)
{
    size_t path_len = strcspn(path, "?");
    char rank_s[16];
    rank_text(rank, rank_s);
    int n = snprintf(out, outlen, "probing-request-v2\n%s\n%.*s\n%" PRId64 "\n%s\n%s\n%s\n%s",
                     method, (int)path_len, path, time_s, nonce, rank_s,
                     agent && agent[0] ? agent : "-", body_hash);
    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : n;
}

int pb_auth_new_agent_id(char out[PB_AUTH_AGENT_HEX + 1])
{
    return pb_auth_random_hex(out, PB_AUTH_AGENT_HEX / 2);
}

int pb_auth_sign_request(const char *token, const char *method, const char *path, const char *body,
                         size_t body_len, int rank, const char *agent, int64_t now_s, char *header,
                         size_t headerlen, char nonce[PB_AUTH_NONCE_HEX + 1])
{
    char body_hash[PB_AUTH_HASH_HEX + 1], mac[PB_AUTH_HASH_HEX + 1], text[4096];
    if (agent && agent[0] && (strlen(agent) != PB_AUTH_AGENT_HEX || !is_hex(agent, PB_AUTH_AGENT_HEX)))
        return -EINVAL;
    int rc = pb_auth_random_hex(nonce, PB_AUTH_NONCE_HEX / 2);
    if (rc) return rc;
    sha256_hex(body, body_len, body_hash);
    int len = request_text(text, sizeof text, method, path, now_s, nonce, rank, agent, body_hash);
    if (len < 0) return len;
    rc = hmac_hex(token, text, (size_t)len, mac);
    if (rc) return rc;
    char rank_s[16];
    rank_text(rank, rank_s);
    int n = snprintf(header, headerlen, PB_AUTH_SCHEME " t=%" PRId64 ",n=%s,r=%s,a=%s,b=%s,m=%s",
                     now_s, nonce, rank_s, agent && agent[0] ? agent : "-", body_hash, mac);
    return n < 0 || (size_t)n >= headerlen ? -ENAMETOOLONG : 0;
}

/* Copies field name= of the comma-separated list p into out (outlen bytes, whole or fails). */
static int field(const char *p, const char *name, char *out, size_t outlen)
{
    size_t name_len = strlen(name);
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        size_t n = strcspn(p, ",");
        if (n > name_len && strncmp(p, name, name_len) == 0 && p[name_len] == '=') {
            size_t value_len = n - name_len - 1;
            if (value_len >= outlen) return -EINVAL;
            memcpy(out, p + name_len + 1, value_len);
            out[value_len] = '\0';
            return 0;
        }
        p += n;
    }
    return -EINVAL;
}

int pb_auth_parse(const char *header, pb_auth_request *out)
{
    size_t scheme_len = sizeof PB_AUTH_SCHEME - 1;
    char time_text[24], rank_s[16], agent_s[PB_AUTH_HEADER_MAX]; /* fits any field */
    memset(out, 0, sizeof *out);
    if (!header || strncmp(header, PB_AUTH_SCHEME, scheme_len) != 0 || header[scheme_len] != ' ')
        return -EINVAL;
    const char *p = header + scheme_len;
    if (field(p, "t", time_text, sizeof time_text) || field(p, "n", out->nonce, sizeof out->nonce) ||
        field(p, "r", rank_s, sizeof rank_s) ||
        field(p, "b", out->body_hash, sizeof out->body_hash) ||
        field(p, "m", out->mac, sizeof out->mac))
        return -EINVAL;
    if (!is_hex(out->nonce, PB_AUTH_NONCE_HEX) || !is_hex(out->body_hash, PB_AUTH_HASH_HEX) ||
        !is_hex(out->mac, PB_AUTH_HASH_HEX))
        return -EINVAL;
    char *end;
    errno = 0;
    long long t = strtoll(time_text, &end, 10);
    if (errno || end == time_text || *end || t < 0) return -EINVAL;
    out->time_s = t;
    if (strcmp(rank_s, "-") == 0) {
        out->rank = -1;
    } else {
        long r = strtol(rank_s, &end, 10);
        if (end == rank_s || *end || r < 0 || r > 100000000) return -EINVAL;
        out->rank = (int)r;
    }
    if (strlen(header) >= sizeof agent_s) return -EINVAL;
    if (field(p, "a", agent_s, sizeof agent_s)) return -EPROTO; /* no a=: the v1 form */
    if (strcmp(agent_s, "-") == 0) agent_s[0] = '\0';
    else if (!is_hex(agent_s, PB_AUTH_AGENT_HEX)) return -EINVAL;
    snprintf(out->agent, sizeof out->agent, "%s", agent_s);
    return 0;
}

int pb_auth_token_equal(const char *given, size_t given_len, const char *expected)
{
    size_t expected_len = strlen(expected);
    unsigned char diff = given_len != expected_len;
    for (size_t i = 0; i < expected_len; i++)
        diff |= (unsigned char)(i < given_len ? given[i] : 0) ^ (unsigned char)expected[i];
    return expected_len > 0 && diff == 0;
}

int pb_auth_verify_request(const char *token, const pb_auth_request *a, const char *method,
                           const char *path)
{
    char text[4096], mac[PB_AUTH_HASH_HEX + 1];
    int len = request_text(text, sizeof text, method, path, a->time_s, a->nonce, a->rank,
                           a->agent, a->body_hash);
    if (!token[0] || len < 0 || hmac_hex(token, text, (size_t)len, mac)) return 0;
    return pb_memeq_ct(mac, a->mac, PB_AUTH_HASH_HEX) == 0;
}

int pb_auth_body_matches(const pb_auth_request *a, const char *body, size_t len)
{
    char hash[PB_AUTH_HASH_HEX + 1];
    sha256_hex(body, len, hash);
    return pb_memeq_ct(hash, a->body_hash, PB_AUTH_HASH_HEX) == 0;
}

int pb_auth_parse_agent(const char *value, char agent[PB_AUTH_AGENT_HEX + 1], int *rank)
{
    agent[0] = '\0';
    if (!value || strlen(value) < PB_AUTH_AGENT_HEX + 2 || value[PB_AUTH_AGENT_HEX] != ' ')
        return -EINVAL;
    char id[PB_AUTH_AGENT_HEX + 1], *end;
    memcpy(id, value, PB_AUTH_AGENT_HEX);
    id[PB_AUTH_AGENT_HEX] = '\0';
    const char *r = value + PB_AUTH_AGENT_HEX + 1;
    errno = 0;
    long n = strtol(r, &end, 10);
    if (!is_hex(id, PB_AUTH_AGENT_HEX) || errno || end == r || *end || *r == '-' || *r == '+' ||
        n > 100000000)
        return -EINVAL;
    memcpy(agent, id, sizeof id);
    *rank = (int)n;
    return 0;
}

int pb_auth_sign_answer(const char *token, const char *agent, int rank, const char *nonce,
                        long status, const char *body, size_t len, char out[PB_AUTH_HASH_HEX + 1])
{
    char text[256], hash[PB_AUTH_HASH_HEX + 1];
    sha256_hex(body, len, hash);
    int n = snprintf(text, sizeof text, "probing-answer-v2\n%s\n%d\n%s\n%ld\n%s", agent, rank,
                     nonce, status, hash);
    if (n < 0 || (size_t)n >= sizeof text) return -ENAMETOOLONG;
    return hmac_hex(token, text, (size_t)n, out);
}

int pb_auth_verify_answer(const char *token, const char *agent, int rank, const char *nonce,
                          long status, const char *body, size_t len, const char *signature)
{
    char expected[PB_AUTH_HASH_HEX + 1];
    if (!signature || strlen(signature) != PB_AUTH_HASH_HEX || !token[0] || !agent ||
        strlen(agent) != PB_AUTH_AGENT_HEX ||
        pb_auth_sign_answer(token, agent, rank, nonce, status, body, len, expected))
        return 0;
    return pb_memeq_ct(expected, signature, PB_AUTH_HASH_HEX) == 0;
}
