/*
 * auth.c - HMAC-SHA256 request and answer signatures; see auth.h.
 *
 * The primitives are OpenSSL's libcrypto (HMAC(), SHA256(), CRYPTO_memcmp()): a library every
 * Linux distribution maintains and that libcurl already loads on this build's platforms; no
 * hand-rolled hash. What is signed is spelled out once here, for both ends.
 */
#include "auth.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
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
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)(data ? data : ""), data ? len : 0, digest);
    to_hex(digest, sizeof digest, out);
}

static int hmac_hex(const char *token, const char *text, size_t len, char out[PB_AUTH_HASH_HEX + 1])
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    if (!HMAC(EVP_sha256(), token, (int)strlen(token), (const unsigned char *)text, len, mac,
              &mac_len) || mac_len != 32)
        return -EIO;
    to_hex(mac, mac_len, out);
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

/* The request's signed text into out; returns its length or -ENAMETOOLONG. */
static int request_text(char *out, size_t outlen, const char *method, const char *path,
                        int64_t time_s, const char *nonce, int rank, const char *body_hash)
{
    size_t path_len = strcspn(path, "?");
    char rank_text[16];
    if (rank < 0) snprintf(rank_text, sizeof rank_text, "-");
    else snprintf(rank_text, sizeof rank_text, "%d", rank);
    int n = snprintf(out, outlen, "probing-request-v1\n%s\n%.*s\n%" PRId64 "\n%s\n%s\n%s", method,
                     (int)path_len, path, time_s, nonce, rank_text, body_hash);
    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : n;
}

int pb_auth_sign_request(const char *token, const char *method, const char *path, const char *body,
                         size_t body_len, int rank, int64_t now_s, char *header, size_t headerlen,
                         char nonce[PB_AUTH_NONCE_HEX + 1])
{
    char body_hash[PB_AUTH_HASH_HEX + 1], mac[PB_AUTH_HASH_HEX + 1], text[4096];
    int rc = pb_auth_random_hex(nonce, PB_AUTH_NONCE_HEX / 2);
    if (rc) return rc;
    sha256_hex(body, body_len, body_hash);
    int len = request_text(text, sizeof text, method, path, now_s, nonce, rank, body_hash);
    if (len < 0) return len;
    rc = hmac_hex(token, text, (size_t)len, mac);
    if (rc) return rc;
    char rank_text[16];
    if (rank < 0) snprintf(rank_text, sizeof rank_text, "-");
    else snprintf(rank_text, sizeof rank_text, "%d", rank);
    int n = snprintf(header, headerlen, PB_AUTH_SCHEME " t=%" PRId64 ",n=%s,r=%s,b=%s,m=%s", now_s,
                     nonce, rank_text, body_hash, mac);
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
    char time_text[24], rank_text[16];
    memset(out, 0, sizeof *out);
    if (!header || strncmp(header, PB_AUTH_SCHEME, scheme_len) != 0 || header[scheme_len] != ' ')
        return -EINVAL;
    const char *p = header + scheme_len;
    if (field(p, "t", time_text, sizeof time_text) || field(p, "n", out->nonce, sizeof out->nonce) ||
        field(p, "r", rank_text, sizeof rank_text) ||
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
    if (strcmp(rank_text, "-") == 0) {
        out->rank = -1;
    } else {
        long r = strtol(rank_text, &end, 10);
        if (end == rank_text || *end || r < 0 || r > 100000000) return -EINVAL;
        out->rank = (int)r;
    }
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
                           a->body_hash);
    if (!token[0] || len < 0 || hmac_hex(token, text, (size_t)len, mac)) return 0;
    return CRYPTO_memcmp(mac, a->mac, PB_AUTH_HASH_HEX) == 0;
}

int pb_auth_body_matches(const pb_auth_request *a, const char *body, size_t len)
{
    char hash[PB_AUTH_HASH_HEX + 1];
    sha256_hex(body, len, hash);
    return CRYPTO_memcmp(hash, a->body_hash, PB_AUTH_HASH_HEX) == 0;
}

int pb_auth_sign_answer(const char *token, const char *nonce, long status, const char *body,
                        size_t len, char out[PB_AUTH_HASH_HEX + 1])
{
    char text[256], hash[PB_AUTH_HASH_HEX + 1];
    sha256_hex(body, len, hash);
    int n = snprintf(text, sizeof text, "probing-answer-v1\n%s\n%ld\n%s", nonce, status, hash);
    if (n < 0 || (size_t)n >= sizeof text) return -ENAMETOOLONG;
    return hmac_hex(token, text, (size_t)n, out);
}

int pb_auth_verify_answer(const char *token, const char *nonce, long status, const char *body,
                          size_t len, const char *signature)
{
    char expected[PB_AUTH_HASH_HEX + 1];
    if (!signature || strlen(signature) != PB_AUTH_HASH_HEX || !token[0] ||
        pb_auth_sign_answer(token, nonce, status, body, len, expected))
        return 0;
    return CRYPTO_memcmp(expected, signature, PB_AUTH_HASH_HEX) == 0;
}
