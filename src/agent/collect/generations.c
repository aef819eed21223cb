/*
 * generations.c - python.generations and python.tokens: their columns and the pushes; see
 * generations.h. The rings are made and registered by collect.c with the other tables.
 */
#include "generations.h"

#include "step.h"

#include <stdatomic.h>

#define COL PB_COL

static const char *const token_kinds[] = {"prefill", "decode", NULL};

static const pb_column generation_cols[] = {
    COL("id", PB_COL_I64, pb_generation_row, id, "1, 2, ... in the order the generate() calls began"),
    COL("step", PB_COL_I64, pb_generation_row, step, "step number when the call began (a process that only generates ends one step per generation)"),
    COL("thread_id", PB_COL_I64, pb_generation_row, thread_id, "threading.get_ident() of the thread that called generate()"),
    COL("start", PB_COL_F64, pb_generation_row, start_unix, "Unix time of the call"),
    COL("wall", PB_COL_NS_SEC, pb_generation_row, wall_ns, "seconds from the call to its return"),
    COL("batch_size", PB_COL_I64_NULL, pb_generation_row, batch_size, "sequences generated at once: the first dimension of the input ids; NULL when the input was not a token tensor (inputs_embeds)"),
    COL("prompt_tokens", PB_COL_I64_NULL, pb_generation_row, prompt_tokens, "tokens of each prompt as passed (the padded length: the second dimension of the input ids); NULL when unknown"),
    COL("new_tokens", PB_COL_I64_NULL, pb_generation_row, new_tokens, "tokens generated per sequence: the output's length less the prompt's (less 1, the start token, for encoder-decoder models); NULL when the output was not read"),
    COL("forwards", PB_COL_I64, pb_generation_row, forwards, "root module forwards on the calling thread during the call: the prefill and the decode forwards"),
    COL("prefill", PB_COL_NS_SEC, pb_generation_row, prefill_ns, "seconds of the first forward (the whole prompt)"),
    COL("ttft", PB_COL_F64, pb_generation_row, ttft_s, "seconds from the call to the end of the first forward: time to first token (its logits); NULL when no forward ran"),
    COL("decode", PB_COL_NS_SEC, pb_generation_row, decode_ns, "seconds of the decode forwards (every forward after the first), summed; the time between them is in python.tokens.latency"),
    COL("kv_cache_bytes", PB_COL_I64_NULL, pb_generation_row, kv_cache_bytes, "bytes of the key and value tensors of the cache the last forward returned (DynamicCache layers, or legacy tuples), read once at the end; NULL without a cache (use_cache=False) or a cache of another kind"),
    COL("cache", PB_COL_U8, pb_generation_row, cache, "1 when the forwards returned a past_key_values cache; 0: every decode forward recomputed the whole sequence"),
    COL("grad", PB_COL_U8, pb_generation_row, grad, "1 when autograd was on at the call"),
    COL("request", PB_COL_I64_NULL, pb_generation_row, request, "python.requests.id of the request it was made for; NULL outside a request"),
    COL("rank", PB_COL_U16, pb_generation_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

static const pb_column token_cols[] = {
    COL("generation", PB_COL_I64, pb_token_row, generation, "python.generations.id of the call"),
    COL("idx", PB_COL_I64, pb_token_row, index, "0 for the prefill, then 1, 2, ... for each decode forward"),
    {"kind", PB_COL_ENUM_U8, offsetof(pb_token_row, kind), token_kinds, "prefill or decode"},
    COL("position", PB_COL_I64_NULL, pb_token_row, position, "sequence length the forward completes (prompt tokens + idx); NULL when the prompt length is unknown"),
    COL("forward", PB_COL_NS_SEC, pb_token_row, forward_ns, "seconds of the forward"),
    COL("latency", PB_COL_NS_SEC, pb_token_row, latency_ns, "seconds from the end of the previous forward (idx 0: from the call) to the end of this one: the inter-token latency, sampling and the loop's host work included"),
    COL("thread_id", PB_COL_I64, pb_token_row, thread_id, "threading.get_ident() of the generating thread"),
    COL("rank", PB_COL_U16, pb_token_row, rank, "distributed rank (RANK), 0 when not distributed"),
};

pb_table pb_table_generations = {
    .schema = "python", .name = "generations",
    .doc = "one row per transformers generate() call: batch size, prompt and new tokens, prefill, time to first token, decode, KV-cache bytes",
    .columns = generation_cols, .ncolumns = (int)(sizeof generation_cols / sizeof generation_cols[0]),
    .row_size = sizeof(pb_generation_row), .step_column = -1,
    .empty_reason = "empty until a transformers generate() call returns",
};

pb_table pb_table_tokens = {
    .schema = "python", .name = "tokens",
    .doc = "one row per model forward inside a generate() call: the prefill, then each decode forward, with the inter-token latency",
    .columns = token_cols, .ncolumns = (int)(sizeof token_cols / sizeof token_cols[0]),
    .row_size = sizeof(pb_token_row), .step_column = -1,
    .empty_reason = "empty until a transformers generate() call runs a forward",
};

static int recording(const pb_table *t)
{
    return t->ring && atomic_load_explicit(&pb_step_enabled, memory_order_relaxed);
}

void pb_generations_push(const pb_generation_row *row)
{
    if (recording(&pb_table_generations)) pb_ring_push(pb_table_generations.ring, row);
}

void pb_generations_push_token(const pb_token_row *row)
{
    if (recording(&pb_table_tokens)) pb_ring_push(pb_table_tokens.ring, row);
}
