/*
 * generations.h - the inference tables (docs/tables.md): python.generations, one row per
 * generate() call of Hugging Face transformers (GenerationMixin.generate), and python.tokens,
 * one row per model forward inside one (the prefill, then each decode forward), in a bounded
 * ring.
 *
 * hot/generate.c fills the rows from what the generate() wrapper and the root forwards show it;
 * this file only owns the two tables (their rows, columns and rings) and pushes. collect.c
 * registers them with the other tables. [GIL held]
 */
#ifndef PB_AGENT_GENERATIONS_H
#define PB_AGENT_GENERATIONS_H

#include <stdint.h>

#include "registry.h"

typedef struct pb_generation_row {
    int64_t id;            /* 1, 2, ... in the order generations started in the process */
    int64_t step;          /* step number when the generation started */
    int64_t thread_id;     /* threading.get_ident() of the calling thread */
    double start_unix;     /* wall clock at the call */
    int64_t wall_ns;       /* call to return */
    int64_t batch_size;    /* INT64_MIN (NULL) when the input was not a token tensor */
    int64_t prompt_tokens; /* per sequence (padded length); INT64_MIN (NULL) when unknown */
    int64_t new_tokens;    /* per sequence; INT64_MIN (NULL) when unknown */
    int64_t forwards;      /* root module forwards during the call */
    int64_t prefill_ns;    /* the first forward */
    double ttft_s;         /* call to the end of the first forward; NaN (NULL) without one */
    int64_t decode_ns;     /* the other forwards, summed */
    int64_t kv_cache_bytes; /* the cache's tensors at the end; INT64_MIN (NULL) unknown */
    int64_t request;       /* python.requests.id it was made for; INT64_MIN (NULL) none */
    uint8_t cache;         /* 1: the forwards returned a past_key_values cache */
    uint8_t grad;          /* 1: autograd was on at the call (generate() itself turns it off) */
    uint16_t rank;
} pb_generation_row;

typedef struct pb_token_row {
    int64_t generation;    /* python.generations.id */
    int64_t index;         /* 0 the prefill, then 1, 2, ... each decode forward */
    int64_t position;      /* sequence length the forward completes: prompt + index; INT64_MIN unknown */
    int64_t forward_ns;    /* the forward's duration */
    int64_t latency_ns;    /* since the previous forward's end (index 0: since the call) */
    int64_t thread_id;
    uint8_t kind;          /* 0 prefill, 1 decode */
    uint16_t rank;
} pb_token_row;

extern pb_table pb_table_generations __attribute__((visibility("hidden")));
extern pb_table pb_table_tokens __attribute__((visibility("hidden")));

/* Pushes a row; nothing when the rings are gone (detached) or recording is off. [GIL held] */
void pb_generations_push(const pb_generation_row *row);
void pb_generations_push_token(const pb_token_row *row);

#endif
