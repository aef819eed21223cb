/*
 * sha256.c - SHA-256 and HMAC-SHA256; see sha256.h.
 *
 * The block transform and padding are Colin Percival's implementation, taken from libsodium
 * 1.0.18 (Debian's source package libsodium 1.0.18-1+deb12u1,
 * src/libsodium/crypto_hash/sha256/cp/hash_sha256_cp.c), with libsodium's load/store macros
 * written out as functions and its types renamed. Its licence:
 *
 * Copyright 2005,2007,2009 Colin Percival
 * All rights reserved.
 *
 * Redistribution and use in source and binary forms, with or without
 * modification, are permitted provided that the following conditions
 * are met:
 * 1. Redistributions of source code must retain the above copyright
 *    notice, this list of conditions and the following disclaimer.
 * 2. Redistributions in binary form must reproduce the above copyright
 *    notice, this list of conditions and the following disclaimer in the
 *    documentation and/or other materials provided with the distribution.
 *
 * THIS SOFTWARE IS PROVIDED BY THE AUTHOR AND CONTRIBUTORS ``AS IS'' AND
 * ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
 * IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE
 * ARE DISCLAIMED.  IN NO EVENT SHALL THE AUTHOR OR CONTRIBUTORS BE LIABLE
 * FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL
 * DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS
 * OR SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION)
 * HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT
 * LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY
 * OUT OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF
 * SUCH DAMAGE.
 *
 * HMAC (RFC 2104) is written on top; tests/unit/test_auth.c checks both against the vectors of
 * FIPS 180-4's examples and RFC 4231.
 */
#include "sha256.h"

#include <string.h>

static uint32_t load32_be(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store32_be(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void store64_be(uint8_t *p, uint64_t v)
{
    store32_be(p, (uint32_t)(v >> 32));
    store32_be(p + 4, (uint32_t)v);
}

static uint32_t rotr32(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static const uint32_t Krnd[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
};

#define Ch(x, y, z) ((x & (y ^ z)) ^ z)
#define Maj(x, y, z) ((x & (y | z)) | (y & z))
#define SHR(x, n) (x >> n)
#define ROTR(x, n) rotr32(x, n)
#define S0(x) (ROTR(x, 2) ^ ROTR(x, 13) ^ ROTR(x, 22))
#define S1(x) (ROTR(x, 6) ^ ROTR(x, 11) ^ ROTR(x, 25))
#define s0(x) (ROTR(x, 7) ^ ROTR(x, 18) ^ SHR(x, 3))
#define s1(x) (ROTR(x, 17) ^ ROTR(x, 19) ^ SHR(x, 10))

#define RND(a, b, c, d, e, f, g, h, k) \
    h += S1(e) + Ch(e, f, g) + k;      \
    d += h;                            \
    h += S0(a) + Maj(a, b, c);

#define RNDr(S, W, i, ii)                                                   \
    RND(S[(64 - i) % 8], S[(65 - i) % 8], S[(66 - i) % 8], S[(67 - i) % 8], \
        S[(68 - i) % 8], S[(69 - i) % 8], S[(70 - i) % 8], S[(71 - i) % 8], \
        W[i + ii] + Krnd[i + ii])

#define MSCH(W, ii, i) \
    W[i + ii + 16] = s1(W[i + ii + 14]) + W[i + ii + 9] + s0(W[i + ii + 1]) + W[i + ii]

static void transform(uint32_t state[8], const uint8_t block[64])
{
    uint32_t W[64], S[8];
    int i;

    for (i = 0; i < 16; i++) W[i] = load32_be(block + i * 4);
    memcpy(S, state, 32);
    for (i = 0; i < 64; i += 16) {
        RNDr(S, W, 0, i);
        RNDr(S, W, 1, i);
        RNDr(S, W, 2, i);
        RNDr(S, W, 3, i);
        RNDr(S, W, 4, i);
        RNDr(S, W, 5, i);
        RNDr(S, W, 6, i);
        RNDr(S, W, 7, i);
        RNDr(S, W, 8, i);
        RNDr(S, W, 9, i);
        RNDr(S, W, 10, i);
        RNDr(S, W, 11, i);
        RNDr(S, W, 12, i);
        RNDr(S, W, 13, i);
        RNDr(S, W, 14, i);
        RNDr(S, W, 15, i);
        if (i == 48) break;
        MSCH(W, 0, i);
        MSCH(W, 1, i);
        MSCH(W, 2, i);
        MSCH(W, 3, i);
        MSCH(W, 4, i);
        MSCH(W, 5, i);
        MSCH(W, 6, i);
        MSCH(W, 7, i);
        MSCH(W, 8, i);
        MSCH(W, 9, i);
        MSCH(W, 10, i);
        MSCH(W, 11, i);
        MSCH(W, 12, i);
        MSCH(W, 13, i);
        MSCH(W, 14, i);
        MSCH(W, 15, i);
    }
    for (i = 0; i < 8; i++) state[i] += S[i];
}

void pb_sha256_init(pb_sha256_ctx *c)
{
    static const uint32_t initial[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
    c->count = 0;
    memcpy(c->state, initial, sizeof initial);
}

void pb_sha256_update(pb_sha256_ctx *c, const void *data, size_t len)
{
    const uint8_t *in = data;
    size_t r = (size_t)((c->count >> 3) & 0x3f);

    if (len == 0) return;
    c->count += (uint64_t)len << 3;
    if (len < 64 - r) {
        memcpy(c->buf + r, in, len);
        return;
    }
    memcpy(c->buf + r, in, 64 - r);
    transform(c->state, c->buf);
    in += 64 - r;
    len -= 64 - r;
    while (len >= 64) {
        transform(c->state, in);
        in += 64;
        len -= 64;
    }
    memcpy(c->buf, in, len);
}

void pb_sha256_final(pb_sha256_ctx *c, uint8_t out[PB_SHA256_LEN])
{
    size_t r = (size_t)((c->count >> 3) & 0x3f);

    /* the padding: 0x80, zeros to 56 mod 64, the length in bits */
    c->buf[r++] = 0x80;
    if (r > 56) {
        memset(c->buf + r, 0, 64 - r);
        transform(c->state, c->buf);
        r = 0;
    }
    memset(c->buf + r, 0, 56 - r);
    store64_be(c->buf + 56, c->count);
    transform(c->state, c->buf);
    for (int i = 0; i < 8; i++) store32_be(out + i * 4, c->state[i]);
    memset(c, 0, sizeof *c);
}

void pb_sha256(const void *data, size_t len, uint8_t out[PB_SHA256_LEN])
{
    pb_sha256_ctx c;
    pb_sha256_init(&c);
    pb_sha256_update(&c, data, len);
    pb_sha256_final(&c, out);
}

void pb_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                    uint8_t out[PB_SHA256_LEN])
{
    uint8_t k[64] = { 0 }, pad[64], inner[PB_SHA256_LEN];
    pb_sha256_ctx c;

    /* a key longer than the block is hashed first (RFC 2104, section 2) */
    if (key_len > sizeof k) pb_sha256(key, key_len, k);
    else if (key_len) memcpy(k, key, key_len);

    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
    pb_sha256_init(&c);
    pb_sha256_update(&c, pad, sizeof pad);
    pb_sha256_update(&c, data, len);
    pb_sha256_final(&c, inner);

    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
    pb_sha256_init(&c);
    pb_sha256_update(&c, pad, sizeof pad);
    pb_sha256_update(&c, inner, sizeof inner);
    pb_sha256_final(&c, out);
    memset(k, 0, sizeof k);
    memset(pad, 0, sizeof pad);
}

int pb_memeq_ct(const void *a, const void *b, size_t n)
{
    const volatile uint8_t *x = a, *y = b;
    uint8_t d = 0;
    for (size_t i = 0; i < n; i++) d |= x[i] ^ y[i];
    return d != 0;
}
