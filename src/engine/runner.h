/* Model runner: owns the KV cache memory of every KV cache group and the
 * model's step workspace, and turns the scheduler's flattened batch
 * (pg_sched_output) into one batched forward whose logits are the rows that
 * sample.
 *
 * KV cache groups come from the model (pg_model_layer_cache): layers with
 * equal specs form one group, in order of first appearance; the engine
 * configures the KV cache manager with these groups (pg_runner_plan_kv) and
 * the runner lays out their memory as vLLM v1's hybrid allocator does
 * (vllm/v1/core/kv_cache_utils.py, _get_kv_cache_config_uniform_page_size):
 *   - attention groups (full, sliding window) share one block pool and
 *     max_g(layers in g) paged K/V tensors of num_blocks blocks each
 *     (layout of kernels/attention.h, [2, num_blocks, kv_heads, block_size,
 *     head_dim] per tensor): the j-th layer of every attention group uses
 *     tensor j, which is safe because a block id belongs to one group at a
 *     time. A Llama model is one group of L layers: L tensors, as before.
 *   - recurrent-state groups get max_num_seqs slots of state_bytes per
 *     layer, keyed by the request's KV manager slot (so->kv_slots) and
 *     zeroed when the request is (re)admitted.
 *   - cross-attention groups (encoder-decoder models) are attention groups
 *     too: a request's encoder output K/V sits in its own blocks of the
 *     shared pool, written once by pg_model_encoder_kv; the encoder's state
 *     between its pieces lives in max_num_encoding slots here.
 * Each layer is handed its group's block tables and slot mapping
 * (pg_layer_cache). Idea from vLLM v1 gpu_model_runner.py (execute_model:
 * input ids, positions, slot mapping, query_start_loc, seq_lens, block
 * tables -> logits of the last scheduled token of each sampling request).
 * Not thread-safe: the engine thread owns it. */
#ifndef PAGODA_ENGINE_RUNNER_H
#define PAGODA_ENGINE_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"
#include "engine/kv_cache_manager.h"
#include "engine/scheduler.h"
#include "model/model.h"

typedef struct pg_runner pg_runner;

/* The KV cache groups of a model and what they cost. */
typedef struct pg_kv_plan {
    int32_t num_groups;
    pg_kv_cache_spec groups[PG_KV_MAX_GROUPS]; /* for pg_kvm_config.groups */
    int32_t num_tensors;            /* paged K/V tensors shared by the attention groups */
    int32_t num_kv_heads, head_dim; /* their shape */
    uint64_t kv_bytes_per_token;    /* K and V of one token over the shared tensors */
    uint64_t state_bytes_per_seq;   /* recurrent state of one request over all state layers */
    int32_t state_align;            /* max state_align of the state layers (0: none asked) */
} pg_kv_plan;

/* Group model m's layers for a cache of kv_dtype (PG_F32 / PG_BF16) and
 * block_size. Errors: PAGODA_ERR_LIMIT (more than PG_KV_MAX_GROUPS
 * groups), PAGODA_ERR_UNSUPPORTED (attention layers with different K/V head
 * shapes: their pages would differ). */
pagoda_status pg_runner_plan_kv(const pg_model *m, pg_dtype kv_dtype, int32_t block_size,
                                pg_kv_plan *plan);

typedef struct pg_runner_config {
    int32_t num_blocks;             /* including the null block 0 */
    int32_t block_size;             /* multiple of 16 (attention) */
    pg_dtype kv_dtype;              /* PG_F32 or PG_BF16 */
    int32_t max_num_batched_tokens; /* tokens per step */
    int32_t max_num_seqs;           /* requests per step */
    int32_t max_model_len;
    int32_t num_state_snapshots; /* prefix-cache snapshots of the recurrent states (0: none) */
    int32_t max_num_encoding;    /* encoder-decoder models: encoder state slots (the
                                    scheduler's max_num_encoding) */
    int32_t max_num_spec_rows;   /* speculative decoding: draft tokens per step at most (their
                                    logits rows come on top of max_num_seqs); 0 = none */
    /* Tensor parallelism (NULL or size 1: none): on rank 0, pg_runner_execute
     * broadcasts each step's plain data (token ids, positions,
     * query_start_loc, seq_lens, logit rows, every group's slot mapping and
     * block tables) before its forward and pg_runner_free tells the other
     * ranks to stop; ranks > 0 run pg_runner_follow. Every rank's runner
     * has the same config (num_blocks included); its KV tensors hold its
     * heads only. Attention groups only (no state / cross groups). */
    struct pg_comm *comm;
} pg_runner_config;

/* A step description travels in broadcasts of at most this many bytes (the
 * shared-memory backend's max_bytes). */
#define PG_RUNNER_TP_CHUNK_BYTES ((size_t)1 << 20)

/* Allocate the paged KV tensors (num_blocks * block_size tokens each,
 * zeroed), the state slots and the workspace; `model` must outlive the
 * runner. Errors: PAGODA_ERR_INVALID_ARG (layout), those of
 * pg_runner_plan_kv, PAGODA_ERR_NOMEM. */
pagoda_status pg_runner_create(const pg_model *model, const pg_runner_config *cfg, pg_runner **out);
void pg_runner_free(pg_runner *r);
/* Bytes of KV cache memory: paged tensors + state slots. */
size_t pg_runner_kv_bytes(const pg_runner *r);
size_t pg_runner_workspace_bytes(const pg_runner *r);
/* The plan the runner was made with. */
const pg_kv_plan *pg_runner_plan(const pg_runner *r);

/* Run the step `so`: first its encoder pieces (encoder-decoder models:
 * enc_inputs[j] is job j's encoder input, read when it starts at piece 0;
 * a job that runs the last piece then writes the request's cross-attention
 * K/V into its CROSS group blocks), then the decoder batch (every group's
 * block tables and slot mapping, in the plan's group order; none when
 * so->num_reqs is 0). For every request i with so->samples[i],
 * *logits_out points at the vocab_size logits of its last scheduled token:
 * row r of the returned matrix where rows are the sampling requests in
 * batch order; row_of[i] = r or -1. A request with draft tokens
 * (so->num_spec_tokens[i] = D > 0) gets D + 1 consecutive rows from
 * row_of[i]: the logits after its last token, then after each draft. Then come the probe rows
 * (so->probe_rows): probe_of[i] = the row of i's probe or -1 (probe_of may
 * be NULL). Logits stay valid until the next step.
 * Errors: PAGODA_ERR_INVALID_ARG (groups differ from the plan), errors of
 * pg_model_forward. */
pagoda_status pg_runner_execute(pg_runner *r, const pg_sched_output *so,
                                const float *const *enc_inputs, float **logits_out,
                                int32_t *row_of, int32_t *probe_of);

/* The hidden-state views every following step's forward gets
 * (pg_batch.hidden_in / hidden_out, [max_num_batched_tokens][hidden_size]
 * f32 in the step's token order; NULL: none): speculative decoding's MTP
 * head reads the target's hidden_out and its own (engine/mtp.h). Not under
 * tensor parallelism (execute fails). */
void pg_runner_set_hidden(pg_runner *r, const float *in, float *out);

/* Speculative decoding on a model with recurrent-state layers (Gated
 * DeltaNet): the last pg_runner_execute wrote, for every request i with
 * D = so->num_spec_tokens[i] > 0, each state layer's state after each of
 * its first D query rows (pg_layer_cache.row_snaps). Request i (its index
 * in that step) kept `kept` rows (1..D + 1: its last token and kept - 1
 * accepted drafts): its states become the ones after row `kept` (kept = D
 * + 1: the live states already are). No-op for a request without drafts
 * or a model without state layers. Call before the next execute. Errors:
 * PAGODA_ERR_INVALID_ARG (kept out of range). */
pagoda_status pg_runner_spec_keep(pg_runner *r, int32_t i, int32_t kept);

/* Rank > 0 of a tensor-parallel runner (cfg.comm): receive each step rank
 * 0's pg_runner_execute broadcasts and run the forward on this rank's shard
 * (its logits are discarded: rank 0 samples), until rank 0's pg_runner_free
 * says stop. Returns PAGODA_OK on that stop; PAGODA_ERR_IO when rank 0 (or a
 * peer) is gone, PAGODA_ERR_INVALID_ARG (not a follower, a malformed step),
 * errors of pg_model_forward. */
pagoda_status pg_runner_follow(pg_runner *r);

/* True when the last pg_runner_execute failed in a collective (a rank died
 * or left): the tensor-parallel group is unusable. */
bool pg_runner_comm_failed(const pg_runner *r);

#endif
