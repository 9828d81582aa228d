/* Requests: token storage, incremental block hashing, finish conditions. */
#include "engine/request.h"

#include <stdlib.h>
#include <string.h>

static void hash_new_blocks(pg_request *r) {
    if (!r->hash_blocks) return;
    int32_t bs = r->block_size;
    while ((r->num_block_hashes + 1) * bs <= r->num_tokens) {
        int32_t b = r->num_block_hashes;
        const pg_block_hash *parent = b > 0 ? &r->block_hashes[b - 1] : NULL;
        r->block_hashes[b] =
            pg_block_hash_compute(r->hash_algo, parent, r->tokens + (size_t)b * bs, bs,
                                  b == 0 ? r->salt : NULL, b == 0 ? r->salt_len : 0);
        r->num_block_hashes++;
    }
}

pagoda_status pg_request_create(uint64_t id, const int32_t *prompt, int32_t num_prompt_tokens,
                                int32_t max_tokens, int32_t max_model_len, pg_request **out) {
    *out = NULL;
    unsigned long long idl = (unsigned long long)id;
    if (max_model_len < 2)
        return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: max_model_len %d", idl,
                        max_model_len);
    if (!prompt || num_prompt_tokens < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: empty prompt", idl);
    if (num_prompt_tokens >= max_model_len)
        return pg_error(
            PAGODA_ERR_LIMIT,
            "request %llu: prompt of %d tokens does not fit max_model_len %d (at most %d "
            "prompt tokens, leaving room for one output token)",
            idl, num_prompt_tokens, max_model_len, max_model_len - 1);
    if (max_tokens < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: max_tokens %d must be >= 1", idl,
                        max_tokens);
    for (int32_t i = 0; i < num_prompt_tokens; i++)
        if (prompt[i] < 0)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "request %llu: prompt token %d is negative (%d)", idl, i, prompt[i]);

    int64_t total = (int64_t)num_prompt_tokens + max_tokens;
    if (total > max_model_len) total = max_model_len;
    pg_request *r = calloc(1, sizeof *r);
    if (!r) return pg_error(PAGODA_ERR_NOMEM, "request %llu: out of memory", idl);
    r->max_total_tokens = (int32_t)total;
    r->tokens = malloc((size_t)total * sizeof *r->tokens);
    if (!r->tokens) {
        pg_request_destroy(r);
        return pg_error(PAGODA_ERR_NOMEM, "request %llu: out of memory for %lld tokens", idl,
                        (long long)total);
    }
    r->id = id;
    r->kv_slot = -1;
    r->state_restore = r->state_snap_decode = -1;
    r->scheduled_step = -1;
    r->status = PG_REQ_WAITING;
    r->stop_token = -1;
    memcpy(r->tokens, prompt, (size_t)num_prompt_tokens * sizeof *r->tokens);
    r->num_tokens = r->num_prompt_tokens = num_prompt_tokens;
    r->max_tokens = max_tokens;
    r->eos_token_id = -1;
    r->encoder_slot = -1;
    *out = r;
    return PAGODA_OK;
}

pagoda_status pg_request_set_salt(pg_request *r, const void *salt, size_t len) {
    if (r->num_block_hashes > 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: salt set after block hashing",
                        (unsigned long long)r->id);
    free(r->salt);
    r->salt = NULL;
    r->salt_len = 0;
    if (!salt || !len) return PAGODA_OK;
    if (!(r->salt = malloc(len)))
        return pg_error(PAGODA_ERR_NOMEM, "request %llu: out of memory", (unsigned long long)r->id);
    memcpy(r->salt, salt, len);
    r->salt_len = len;
    return PAGODA_OK;
}

pagoda_status pg_request_hash_blocks(pg_request *r, int32_t block_size,
                                     const pg_block_hash_algo *algo) {
    unsigned long long id = (unsigned long long)r->id;
    if (block_size < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: block_size %d", id, block_size);
    if (r->num_tokens != r->num_prompt_tokens)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "request %llu: block hashing set up after %d outputs", id,
                        r->num_tokens - r->num_prompt_tokens);
    if (algo && (!r->block_hashes || block_size < r->block_size)) {
        pg_block_hash *h =
            malloc(((size_t)r->max_total_tokens / (size_t)block_size + 1) * sizeof *h);
        if (!h) return pg_error(PAGODA_ERR_NOMEM, "request %llu: out of memory", id);
        free(r->block_hashes);
        r->block_hashes = h;
    }
    r->block_size = block_size;
    r->hash_blocks = algo != NULL;
    r->hash_algo = algo ? *algo : PG_BLOCK_HASH_SHA256;
    r->num_block_hashes = 0;
    hash_new_blocks(r);
    return PAGODA_OK;
}

pagoda_status pg_request_validate(const pg_request *r) {
    unsigned long long id = (unsigned long long)r->id;
    if (r->min_tokens < 0 || r->min_tokens > r->max_tokens)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "request %llu: min_tokens %d must be in 0..max_tokens %d", id,
                        r->min_tokens, r->max_tokens);
    if (r->num_stop_token_ids < 0 || r->num_stop_token_ids > PG_MAX_STOP_TOKENS)
        return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: %d stop token ids (at most %d)", id,
                        r->num_stop_token_ids, PG_MAX_STOP_TOKENS);
    for (int32_t i = 0; i < r->num_stop_token_ids; i++)
        if (r->stop_token_ids[i] < 0)
            return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: stop token id %d is negative",
                            id, r->stop_token_ids[i]);
    if (r->encoder_steps < 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: encoder_steps %d is negative", id,
                        r->encoder_steps);
    if (r->probe_len < 0 || r->probe_len > r->num_prompt_tokens)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "request %llu: probe_len %d outside 0..%d prompt tokens", id, r->probe_len,
                        r->num_prompt_tokens);
    return PAGODA_OK;
}

void pg_request_destroy(pg_request *r) {
    if (!r) return;
    free(r->tokens);
    free(r->block_hashes);
    free(r->salt);
    free(r);
}

pagoda_status pg_request_append_token(pg_request *r, int32_t token) {
    if (r->num_tokens >= r->max_total_tokens)
        return pg_error(PAGODA_ERR_LIMIT, "request %llu: already holds its maximum of %d tokens",
                        (unsigned long long)r->id, r->max_total_tokens);
    r->tokens[r->num_tokens++] = token;
    hash_new_blocks(r);
    return PAGODA_OK;
}

pg_finish_reason pg_request_check_stop(const pg_request *r) {
    int32_t n_out = pg_request_num_output_tokens(r);
    if (n_out > 0 && n_out >= r->min_tokens) {
        int32_t last = r->tokens[r->num_tokens - 1];
        if (!r->ignore_eos && r->eos_token_id >= 0 && last == r->eos_token_id)
            return PG_FINISH_STOP;
        for (int32_t i = 0; i < r->num_stop_token_ids; i++)
            if (last == r->stop_token_ids[i]) return PG_FINISH_STOP;
    }
    if (n_out >= r->max_tokens || r->num_tokens >= r->max_total_tokens) return PG_FINISH_LENGTH;
    return PG_FINISH_NONE;
}
