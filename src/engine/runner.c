/* Model runner (see runner.h): KV region, workspace, batch assembly. */
#include "engine/runner.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"

struct pg_runner {
    pg_llama *model;
    pg_runner_config cfg;
    void *kv_mem;
    size_t kv_mem_bytes;
    pg_paged_kv *layers; /* [num_hidden_layers] */
    pg_llama_workspace *ws;
    float *logits;       /* [max_num_seqs][vocab] */
    int32_t *logit_rows; /* [max_num_seqs] */
};

uint64_t pg_runner_kv_bytes_per_token(const pg_llama *model, pg_dtype kv_dtype) {
    const pg_model_config *c = pg_llama_config(model);
    return 2ULL * (uint64_t)c->num_hidden_layers * (uint64_t)c->num_key_value_heads *
           (uint64_t)c->head_dim * (kv_dtype == PG_F32 ? 4u : 2u);
}

pagoda_status pg_runner_create(pg_llama *model, const pg_runner_config *cfg, pg_runner **out) {
    *out = NULL;
    const pg_model_config *c = pg_llama_config(model);
    pg_runner *r = calloc(1, sizeof *r);
    if (!r) return pg_error(PAGODA_ERR_NOMEM, "runner: out of memory");
    r->model = model;
    r->cfg = *cfg;
    int L = c->num_hidden_layers;
    size_t half = pg_paged_kv_bytes(cfg->kv_dtype, cfg->num_blocks, c->num_key_value_heads,
                                    cfg->block_size, c->head_dim);
    pagoda_status st = PAGODA_OK;
    r->layers = calloc((size_t)L, sizeof *r->layers);
    if (!r->layers || half == 0) {
        st = half ? pg_error(PAGODA_ERR_NOMEM, "runner: out of memory")
                  : pg_error(PAGODA_ERR_INVALID_ARG, "runner: bad KV cache shape");
        goto fail;
    }
    r->kv_mem_bytes = half * 2 * (size_t)L;
    r->kv_mem = pg_alloc_huge(r->kv_mem_bytes);
    if (!r->kv_mem) {
        st = pg_error(PAGODA_ERR_NOMEM, "runner: cannot allocate %zu bytes of KV cache",
                      r->kv_mem_bytes);
        goto fail;
    }
    for (int l = 0; l < L; l++) {
        uint8_t *base = (uint8_t *)r->kv_mem + (size_t)l * 2 * half;
        r->layers[l] = (pg_paged_kv){.k = base,
                                     .v = base + half,
                                     .dtype = cfg->kv_dtype,
                                     .num_blocks = cfg->num_blocks,
                                     .num_kv_heads = c->num_key_value_heads,
                                     .block_size = cfg->block_size,
                                     .head_dim = c->head_dim};
    }
    if ((st = pg_paged_kv_check(&r->layers[0])) != PAGODA_OK) goto fail;
    if ((st = pg_llama_workspace_create(model, cfg->max_num_batched_tokens, cfg->max_num_seqs,
                                        cfg->max_model_len, &r->layers[0], &r->ws)) != PAGODA_OK)
        goto fail;
    r->logits = pg_malloc_aligned((size_t)cfg->max_num_seqs * (size_t)c->vocab_size * 4);
    r->logit_rows = malloc((size_t)cfg->max_num_seqs * sizeof(int32_t));
    if (!r->logits || !r->logit_rows) {
        st = pg_error(PAGODA_ERR_NOMEM, "runner: out of memory");
        goto fail;
    }
    *out = r;
    return PAGODA_OK;
fail:
    pg_runner_free(r);
    return st;
}

void pg_runner_free(pg_runner *r) {
    if (!r) return;
    if (r->kv_mem) pg_free_huge(r->kv_mem, r->kv_mem_bytes);
    free(r->layers);
    pg_llama_workspace_free(r->ws);
    pg_free(r->logits);
    free(r->logit_rows);
    free(r);
}

size_t pg_runner_kv_bytes(const pg_runner *r) {
    return r->kv_mem_bytes;
}
size_t pg_runner_workspace_bytes(const pg_runner *r) {
    return pg_llama_workspace_bytes(r->ws);
}

pagoda_status pg_runner_execute(pg_runner *r, const pg_sched_output *so, float **logits_out,
                                int32_t *row_of) {
    int32_t n_logits = 0;
    for (int32_t i = 0; i < so->num_reqs; i++) {
        row_of[i] = -1;
        if (so->samples[i]) {
            row_of[i] = n_logits;
            r->logit_rows[n_logits++] = so->query_start_loc[i + 1] - 1;
        }
    }
    pg_llama_batch b = {.num_tokens = so->num_tokens,
                        .num_seqs = so->num_reqs,
                        .token_ids = so->token_ids,
                        .positions = so->positions,
                        .slot_mapping = so->slot_mapping, /* group 0 */
                        .query_start_loc = so->query_start_loc,
                        .seq_lens = so->seq_lens,
                        .block_tables = so->block_tables, /* group 0: [0 * req_stride + i] */
                        .logit_rows = r->logit_rows,
                        .num_logits = n_logits};
    *logits_out = r->logits;
    return pg_llama_forward_batch(r->model, r->ws, r->layers, &b, r->logits);
}
