/*
 * auth.h - proving knowledge of a TCP token without sending it (HMAC-SHA256, OpenSSL's libcrypto).
 *
 * Every TCP request of the probing CLI carries
 *     Authorization: Probing-HMAC-SHA256 t=<unix s>,n=<nonce>,r=<rank>,a=<agent>,b=<body hash>,m=<mac>
 * where m = HMAC-SHA256(token, "probing-request-v2\n" METHOD "\n" PATH "\n" t "\n" n "\n" r "\n" a
 * "\n" b), n is 16 random bytes in hex, b the SHA-256 of the body in hex, r the rank and a the
 * agent id of the one agent the request is meant for. An agent id is 16 random bytes in hex that
 * the agent draws when it starts listening; the CLI learns it from the job's roster, or for a
 * target the user typed from a first signed exchange, GET PB_AUTH_IDENTITY_PATH, the only request
 * that may name no agent (a=-, and r=- when the rank is not known either). The agent checks m,
 * that t is within PB_AUTH_WINDOW_S of its clock, that a and r are its own and that it has not
 * seen n within the window (it remembers every nonce until its time is PB_AUTH_WINDOW_S past:
 * src/server/nonces.h); then, and only then, it signs its answer:
 *     Probing-Agent: <agent> <rank>
 *     Probing-Signature: HMAC-SHA256(token, "probing-answer-v2\n" agent "\n" rank "\n" n "\n"
 *                                           status "\n" sha256(body))
 * and the CLI uses no answer that does not carry the right signature for the agent it asked
 * (or, for the identity exchange, that does not prove the agent and rank it names). So the token
 * never goes on the wire; an endpoint that does not hold it learns nothing it can use for another
 * request (a request names its method, path, body, time, nonce, rank and agent), and cannot make
 * an answer that the CLI takes for an agent's. A request of the older form (probing-request-v1,
 * no a=) is refused, never served as it was. docs/security.md, "Round four".
 *
 * Used by the transport (src/server/server.c) and the CLI (src/cli/client/client.c, fanout.c), so that
 * both sides share one definition of the strings that are signed. [any thread]
 */
#ifndef PB_COMMON_AUTH_H
#define PB_COMMON_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define PB_AUTH_SCHEME "Probing-HMAC-SHA256"
#define PB_AUTH_ANSWER_HEADER "Probing-Signature"
#define PB_AUTH_AGENT_HEADER "Probing-Agent" /* "<agent id> <rank>" of the agent that answered */
#define PB_AUTH_IDENTITY_PATH "/api/identity" /* GET: {"agent": id, "rank": r}; a=- allowed */
#define PB_AUTH_WINDOW_S 300   /* how far a request's time may be from the agent's clock */
#define PB_AUTH_NONCE_HEX 32   /* 16 random bytes */
#define PB_AUTH_HASH_HEX 64    /* SHA-256 and HMAC-SHA256 in hex */
#define PB_AUTH_AGENT_HEX 32   /* an agent id: 16 random bytes */
#define PB_AUTH_HEADER_MAX 320 /* the Authorization value, scheme included */

/* A parsed Authorization value. rank is -1 and agent "" for "-" (not known yet). */
typedef struct pb_auth_request {
    int64_t time_s;
    char nonce[PB_AUTH_NONCE_HEX + 1];
    int rank;
    char agent[PB_AUTH_AGENT_HEX + 1];
    char body_hash[PB_AUTH_HASH_HEX + 1];
    char mac[PB_AUTH_HASH_HEX + 1];
} pb_auth_request;

/* `bytes` random bytes (getrandom) as 2 * bytes lowercase hex digits and a NUL into out (at
 * least 2 * bytes + 1 long): tokens, cookies and nonces. Returns 0, or a negative errno.
 * [any thread] */
int pb_auth_random_hex(char *out, size_t bytes);

/* 1 when given (given_len bytes, not NUL-terminated) equals the non-empty expected token, else
 * 0; the time taken does not depend on where they differ, so it says nothing about how much of
 * a guess was right. The one comparison of a secret a client sends in the clear: the agent's
 * bearer token on its Unix socket (server.c) and the web view's token and cookie (src/cli/serve/ui.c).
 * Borrows both. [any thread] */
int pb_auth_token_equal(const char *given, size_t given_len, const char *expected);

/* Writes the Authorization value (without "Authorization: ") for method path (the part before
 * any '?' is signed) with body[0..body_len) (NULL: empty), meant for the agent agent (NULL or "":
 * not known, which only PB_AUTH_IDENTITY_PATH accepts) of rank rank (-1: not known), at now_s,
 * into header; the nonce it chose into nonce (for pb_auth_verify_answer). Borrows everything.
 * Returns 0, or a negative errno (no randomness, too long, -EINVAL an agent id that is not
 * PB_AUTH_AGENT_HEX lowercase hex digits). */
int pb_auth_sign_request(const char *token, const char *method, const char *path, const char *body,
                         size_t body_len, int rank, const char *agent, int64_t now_s, char *header,
                         size_t headerlen, char nonce[PB_AUTH_NONCE_HEX + 1]);

/* Parses an Authorization value of the scheme above into out. Returns 0; -EPROTO when it is of
 * the older form (every field of probing-request-v1 and no a=: it binds the request to no one
 * agent, and is refused); -EINVAL when it is not one (another scheme, a field missing or
 * malformed). */
int pb_auth_parse(const char *header, pb_auth_request *out);

/* A new agent id (PB_AUTH_AGENT_HEX random hex digits and a NUL) into out. Returns 0 or a
 * negative errno. */
int pb_auth_new_agent_id(char out[PB_AUTH_AGENT_HEX + 1]);

/* Parses a PB_AUTH_AGENT_HEADER value ("<agent id> <rank>", borrowed) into agent and *rank.
 * Returns 0 or -EINVAL. */
int pb_auth_parse_agent(const char *value, char agent[PB_AUTH_AGENT_HEX + 1], int *rank);

/* 1 when a's mac is the token's for method and path (constant time), else 0. The body is
 * checked apart, once read: pb_auth_body_matches(). */
int pb_auth_verify_request(const char *token, const pb_auth_request *a, const char *method,
                           const char *path);

/* 1 when body[0..len) hashes to a->body_hash, else 0. */
int pb_auth_body_matches(const pb_auth_request *a, const char *body, size_t len);

/* The answer's signature (hex, into out) of the agent agent (its id) of rank rank, for the
 * request's nonce, the status and the body. Returns 0 or a negative errno. */
int pb_auth_sign_answer(const char *token, const char *agent, int rank, const char *nonce,
                        long status, const char *body, size_t len, char out[PB_AUTH_HASH_HEX + 1]);

/* 1 when signature (borrowed, may be NULL) is pb_auth_sign_answer()'s for these, else 0. */
int pb_auth_verify_answer(const char *token, const char *agent, int rank, const char *nonce,
                          long status, const char *body, size_t len, const char *signature);

#endif
