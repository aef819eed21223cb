/*
 * sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the signatures of auth.h.
 *
 * The compression function is Colin Percival's (FreeBSD's, as libsodium 1.0.18 carries it:
 * crypto_hash/sha256/cp/hash_sha256_cp.c); sha256.c names its origin and licence. In the tree,
 * not a library: the agent maps no TLS library into the job for it (docs/install.md).
 */
#ifndef PB_SHA256_H
#define PB_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define PB_SHA256_LEN 32

typedef struct {
    uint32_t state[8];
    uint64_t count; /* bits hashed */
    uint8_t buf[64];
} pb_sha256_ctx;

void pb_sha256_init(pb_sha256_ctx *c);
void pb_sha256_update(pb_sha256_ctx *c, const void *data, size_t len);
void pb_sha256_final(pb_sha256_ctx *c, uint8_t out[PB_SHA256_LEN]);
/* SHA-256 of data[0..len) */
void pb_sha256(const void *data, size_t len, uint8_t out[PB_SHA256_LEN]);
/* HMAC-SHA256(key, data) */
void pb_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                    uint8_t out[PB_SHA256_LEN]);
/* 0 when a[0..n) equals b[0..n); the time taken does not depend on where they differ */
int pb_memeq_ct(const void *a, const void *b, size_t n);

#endif
