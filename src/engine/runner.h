/* Model runner: owns the paged KV cache memory (one preallocated region,
 * pg_alloc_huge) and the model's step workspace, and turns the scheduler's
 * flattened batch (pg_sched_output) into one batched forward whose logits
 * are the rows that sample.
 *
 * Idea from vLLM v1 vllm/v1/worker/gpu_model_runner.py (execute_model:
 * input ids, positions, slot mapping, query_start_loc, seq_lens, block
 * tables -> logits of the last scheduled token of each request that
 * samples); the CPU backend's KV layout [2, num_blocks, num_kv_heads,
 * block_size, head_size] per layer (see kernels/attention.h).
 * Not thread-safe: the engine thread owns it. */
#ifndef PAGODA_ENGINE_RUNNER_H
#define PAGODA_ENGINE_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"
#include "engine/scheduler.h"
#include "kernels/attention.h"
#include "model/llama.h"

typedef struct pg_runner pg_runner;

typedef struct pg_runner_config {
    int32_t num_blocks;             /* including the null block 0 */
    int32_t block_size;             /* multiple of 16 (attention) */
    pg_dtype kv_dtype;              /* PG_F32 or PG_BF16 */
    int32_t max_num_batched_tokens; /* tokens per step */
    int32_t max_num_seqs;           /* requests per step */
    int32_t max_model_len;
} pg_runner_config;

/* KV bytes per token summed over layers (K and V) for this model and dtype. */
uint64_t pg_runner_kv_bytes_per_token(const pg_llama *model, pg_dtype kv_dtype);

/* Allocate the KV region (num_blocks * block_size tokens, zeroed) and the
 * workspace; `model` must be packed (pg_llama_pack) and outlive the runner.
 * Errors: PAGODA_ERR_INVALID_ARG (layout), PAGODA_ERR_NOMEM. */
pagoda_status pg_runner_create(pg_llama *model, const pg_runner_config *cfg, pg_runner **out);
void pg_runner_free(pg_runner *r);
size_t pg_runner_kv_bytes(const pg_runner *r);
size_t pg_runner_workspace_bytes(const pg_runner *r);

/* Run the step `so` (group 0's block tables and slot mapping). For every
 * request i with so->samples[i], *logits_out points at the vocab_size
 * logits of its last scheduled token: row r of the returned matrix where
 * rows are the sampling requests in batch order; row_of[i] = r or -1.
 * Logits stay valid until the next step. */
pagoda_status pg_runner_execute(pg_runner *r, const pg_sched_output *so, float **logits_out,
                                int32_t *row_of);

#endif
