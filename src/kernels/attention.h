/* Paged attention: the KV cache layout, the fused RoPE + KV-store kernel and
 * one attention kernel family for decode, multi-token queries (chunked
 * prefill, speculative verification) and prefill over a cached prefix.
 *
 * ---- KV cache layout (one layer) ------------------------------------------
 * K and V are two arrays (they may be the two halves of one allocation, as
 * vLLM's [2, num_blocks, num_kv_heads, block_size, head_size]), each
 *     [num_blocks][num_kv_heads][block_size * head_dim] elements of `dtype`.
 * Within one (block, kv head) tile of block_size tokens (t) x head_dim (d):
 *   F32   K: [head_dim][block_size]          K^T: 16 tokens of one d are one
 *                                            AVX-512 vector (QK broadcasts q[d])
 *         V: [block_size][head_dim]          row per token (PV broadcasts p[t])
 *   BF16  K: [head_dim/2][block_size][2]     d-pairs interleaved per token: one
 *                                            32-bit lane = (K[t][2i], K[t][2i+1]),
 *                                            the operand of VDPBF16PS / BFDOT
 *         V: [block_size/2][head_dim][2]     token pairs interleaved per column:
 *                                            one 32-bit lane = (V[2u][d], V[2u+1][d])
 * pg_paged_kv_k_index / pg_paged_kv_v_index give the element index of (block, head, t, d).
 * Requirements: dtype PG_F32 or PG_BF16; block_size a multiple of 16 in
 * [16, 1024]; head_dim even in [2, 512]. A token's slot is
 * block_id * block_size + (position % block_size) (the scheduler's slot
 * mapping); block ids come from the request's block table.
 *
 * ---- Attention semantics -----------------------------------------------------
 * Request s has q_len = cu_seqlens_q[s+1] - cu_seqlens_q[s] new tokens and
 * kv_len = seq_lens[s] cached tokens including them; its query token i sits
 * at absolute position p = kv_len - q_len + i and attends to KV positions
 * j <= p (causal), and j > p - sliding_window when sliding_window > 0.
 * Non-causal mode (pg_attn_params.non_causal: an encoder's self-attention,
 * Whisper's cross-attention over the encoder output): every query token of
 * request s attends to all kv_len keys 0 .. kv_len - 1, whatever q_len (which
 * may then exceed kv_len; kv_len 0 gives zero rows); no sliding window.
 * Query head h reads KV head h / (n_heads / n_kv_heads) (GQA). With a
 * sliding window, block-table entries of blocks wholly before the window of
 * the request's first new token are never read (null blocks are fine).
 *   s_j = scale * q . k_j;  s_j = softcap * tanh(s_j / softcap) if softcap > 0
 *   out = sum_j e^{s_j - m} v_j / (sum_j e^{s_j - m} + [sinks] e^{sink_h - m})
 * with m the max over the s_j (and sink_h). Softmax: Milakov & Gimelshein
 * 2018 "Online normalizer calculation for softmax"; tiling: Dao et al. 2022
 * "FlashAttention"; sinks: Xiao et al. 2023 / GPT-OSS (a per-head logit in the
 * denominator only); soft-capping: Gemma 2.
 *
 * ---- Batch invariance ---------------------------------------------------------
 * The fast kernel walks each request's KV in fixed partitions of
 * pg_attn_partition_tokens(block_size) tokens, in steps of
 * pg_attn_superblock_tokens(block_size) (both functions of block_size only). Each partition gets
 * its own online-softmax state, and the states are merged in partition order by one scalar routine,
 * whether the partitions ran on one thread one after another or on several threads (split-KV) with
 * a reduction afterwards. A row's arithmetic depends only on its own q, its own KV and its
 * position, never on the other rows in its tile, the other requests, the thread count or the
 * scratch size: a request gives the same bits alone or in a batch, at 1 or N threads, and a
 * prompt's rows are the same whatever the chunking (tests/test_attention.c). */
#ifndef PAGODA_KERNELS_ATTENTION_H
#define PAGODA_KERNELS_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/pool.h"
#include "base/status.h"

#define PG_KV_MIN_BLOCK_SIZE 16
#define PG_KV_MAX_BLOCK_SIZE 1024
#define PG_KV_MAX_HEAD_DIM 512

/* One layer's paged KV cache (see the layout above). The memory is the
 * caller's (pg_alloc_huge of pg_paged_kv_bytes for each of K and V). */
typedef struct pg_paged_kv {
    void *k, *v;
    pg_dtype dtype; /* PG_F32 or PG_BF16 */
    int32_t num_blocks, num_kv_heads, block_size, head_dim;
} pg_paged_kv;

/* Bytes of ONE of K or V for these shapes (0 on overflow or a bad dtype). */
size_t pg_paged_kv_bytes(pg_dtype dtype, int32_t num_blocks, int32_t num_kv_heads,
                         int32_t block_size, int32_t head_dim);

/* Check dtype, block_size, head_dim, counts and pointers. Errors:
 * PAGODA_ERR_INVALID_ARG / PAGODA_ERR_UNSUPPORTED naming the field. */
pagoda_status pg_paged_kv_check(const pg_paged_kv *kv);

/* Element index into kv->k of K(block, kv head h, token t in block, dim d). */
static inline size_t pg_paged_kv_k_index(const pg_paged_kv *kv, int32_t block, int32_t h, int32_t t,
                                         int32_t d) {
    size_t tile = ((size_t)block * (size_t)kv->num_kv_heads + (size_t)h) * (size_t)kv->block_size *
                  (size_t)kv->head_dim;
    if (kv->dtype == PG_F32) return tile + (size_t)d * (size_t)kv->block_size + (size_t)t;
    return tile + ((size_t)(d >> 1) * (size_t)kv->block_size + (size_t)t) * 2 + (size_t)(d & 1);
}

/* Element index into kv->v of V(block, kv head h, token t in block, dim d). */
static inline size_t pg_paged_kv_v_index(const pg_paged_kv *kv, int32_t block, int32_t h, int32_t t,
                                         int32_t d) {
    size_t tile = ((size_t)block * (size_t)kv->num_kv_heads + (size_t)h) * (size_t)kv->block_size *
                  (size_t)kv->head_dim;
    if (kv->dtype == PG_F32) return tile + (size_t)t * (size_t)kv->head_dim + (size_t)d;
    return tile + ((size_t)(t >> 1) * (size_t)kv->head_dim + (size_t)d) * 2 + (size_t)(t & 1);
}

/* ---- RoPE + KV store ------------------------------------------------------- */

typedef enum pg_rope_style {
    PG_ROPE_INTERLEAVED = 0, /* GGUF / Meta: rotate pairs (2i, 2i+1) */
    PG_ROPE_NEOX = 1,        /* HF rotate_half: pairs (i, i + rotary_dim/2) */
} pg_rope_style;

/* Rotary position embedding (Su et al. 2021, RoFormer), the math of
 * pg_rope / pg_ref_rope (kernels/ops.h) with a per-call layout: pair i is
 * rotated by theta = position * inv_freq[i], formed in double with cos/sin
 * rounded to f32:  (a, b) -> (a cos - b sin, a sin + b cos)  in f32.
 * Only the first rotary_dim dims of each head rotate (partial RoPE); the
 * rest pass through. inv_freq[rotary_dim/2] is the caller's table
 * (pg_rope_inv_freq: computed once per model, Llama-3 scaling included). */
typedef struct pg_rope_spec {
    pg_rope_style style;
    int32_t rotary_dim; /* even, <= head_dim */
    const float *inv_freq;
} pg_rope_spec;

/* Fused RoPE + cache store for one layer and one step:
 *   q [n_tokens][q_stride] f32: heads at q[t*q_stride + h*head_dim], h < n_heads,
 *     rotated in place;
 *   k, v [n_tokens][k_stride / v_stride] f32: kv->num_kv_heads heads each, not
 *     modified; K is rotated and both are written to the token's slot
 *     (converted to BF16, round to nearest even, for a BF16 cache);
 *   positions[n_tokens] (>= 0), slot_mapping[n_tokens]: slot = block_id *
 *     block_size + offset; a negative slot (padding) stores nothing.
 * rope NULL: no rotation (store only). Strides in elements. All slots are
 * checked before anything is written. Errors: PAGODA_ERR_INVALID_ARG (bad
 * cache, rope, a slot >= num_blocks*block_size, negative position, strides
 * too small). */
pagoda_status pg_rope_kv_store(const pg_rope_spec *rope, int32_t n_tokens, const int32_t *positions,
                               const int32_t *slot_mapping, float *q, size_t q_stride,
                               int32_t n_heads, const float *k, size_t k_stride, const float *v,
                               size_t v_stride, pg_paged_kv *kv);

/* RoPE on one vector of head_dim floats in place (the scalar definition the
 * fused kernel and the tests use). */
void pg_rope_apply(const pg_rope_spec *rope, int32_t position, float *x, int32_t head_dim);

/* ---- attention ----------------------------------------------------------------- */

typedef struct pg_attn_params {
    int32_t n_heads, n_kv_heads, head_dim; /* n_heads % n_kv_heads == 0 */
    float scale;                           /* usually 1/sqrt(head_dim) */
    int32_t sliding_window;                /* 0: full; W > 0: a query at p sees (p - W, p] */
    const float *sinks;                    /* [n_heads] per-head sink logits, or NULL */
    float softcap;                         /* 0: none; > 0: s = softcap * tanh(s / softcap) */
    bool non_causal; /* every query row sees all seq_lens[s] keys (no mask; sliding_window 0) */
} pg_attn_params;

/* One step's flattened batch (the scheduler's output, one KV cache group). */
typedef struct pg_attn_batch {
    int32_t n_seqs;
    const int32_t *cu_seqlens_q;        /* [n_seqs + 1], starts at 0, non-decreasing */
    const int32_t *seq_lens;            /* [n_seqs] kv_len incl. the new tokens, >= q_len */
    const int32_t *const *block_tables; /* [n_seqs] -> ceil(kv_len / block_size) block ids */
} pg_attn_batch;

/* Micro-kernels of one ISA for one KV dtype (filled by the dispatch table).
 * Rows are (query token, head) pairs sharing one KV head; a call covers one
 * super-block of nk <= pg_attn_superblock_tokens(block_size) tokens of that
 * KV head: token j lives in tiles[j / block_size] (the (block, kv head) tile
 * of the j / block_size-th block of the super-block) at offset j % block_size.
 *   qk:      s[r*lds + j] = scale * sum_d q[r*ldq + d] * K(j, d),  r < nr,
 *            j < nk (columns up to the next multiple of 16 may be written too;
 *            lds >= the super-block size).
 *   softmax: online-softmax step per row r over s[r*lds + j], j < nk:
 *            m' = max(m, max_j s); s_j <- e^{s_j - m'}; l <- l e^{m - m'} + sum_j s_j;
 *            acc[r] *= e^{m - m'}; a row whose m' is -inf gets s_j = 0 and keeps m, l, acc.
 *   pv:      acc[r*ldacc + d] += sum_{j < nk} p[r*ldp + j] * V(j, d).
 * The per-element order of every sum is fixed by (nk, head_dim) only. */
typedef struct pg_attn_ukernels {
    const char *name; /* "scalar", "avx2", "avx512", "avx512bf16", "neon", "neon_bf16" */
    pg_dtype kv_dtype;
    void (*qk)(const float *q, int ldq, int nr, const void *const *tiles, int block_size, int nk,
               int head_dim, float scale, float *s, int lds);
    void (*softmax)(float *s, int lds, int nr, int nk, float *m, float *l, float *acc, int ldacc,
                    int head_dim);
    void (*pv)(const float *p, int ldp, int nr, const void *const *tiles, int block_size, int nk,
               int head_dim, float *acc, int ldacc);
} pg_attn_ukernels;

/* KV tokens per online-softmax step: block_size * max(1, 128 / block_size),
 * so small blocks are processed 128 tokens at a time (aligned groups of
 * consecutive blocks of the block table). */
int32_t pg_attn_superblock_tokens(int32_t block_size);

/* KV tokens per split-KV partition for this block size (>= 512, a multiple
 * of the super-block). */
int32_t pg_attn_partition_tokens(int32_t block_size);

/* Scratch bytes pg_attention needs for this step at n_threads threads: per
 * thread tiles plus, when the step is split across KV partitions, their
 * partial results. Depends on the shapes only (never on KV contents); 0 if
 * the arguments are invalid. */
size_t pg_attention_scratch_bytes(const pg_attn_params *p, const pg_attn_batch *b,
                                  const pg_paged_kv *kv, int n_threads);

/* Attention over the paged cache (semantics above).
 *   q   [n_tokens][q_stride] f32 (after RoPE), n_tokens = cu_seqlens_q[n_seqs];
 *   out [n_tokens][out_stride] f32, head h at out[t*out_stride + h*head_dim];
 *   scratch: >= pg_attention_scratch_bytes(p, b, kv, pg_pool_size(pool)) bytes,
 *     64-byte aligned is best; a smaller one that still holds the per-thread
 *     tiles only turns split-KV off (same results, less parallelism);
 *   pool: NULL runs on the calling thread; uk: NULL = pg_kernels()' set for
 *     kv->dtype (tests pass a specific set).
 * Errors: PAGODA_ERR_INVALID_ARG (shapes disagree with the cache, q_len >
 * kv_len (causal mode), a sliding window in non-causal mode, a block id out
 * of range, scratch too small, a ukernel set for another dtype). */
pagoda_status pg_attention(const pg_attn_params *p, const pg_attn_batch *b, const pg_paged_kv *kv,
                           const float *q, size_t q_stride, float *out, size_t out_stride,
                           void *scratch, size_t scratch_bytes, pg_pool *pool,
                           const pg_attn_ukernels *uk);

/* The straightforward reference (src/kernels/ref/attention.c): per query
 * token and head, materialise the scores, plain softmax with expf, weighted
 * sum; sequential f32 sums, single thread, no scratch. Same arguments,
 * semantics and errors as pg_attention. */
pagoda_status pg_ref_attention(const pg_attn_params *p, const pg_attn_batch *b,
                               const pg_paged_kv *kv, const float *q, size_t q_stride, float *out,
                               size_t out_stride);

/* Every micro-kernel set this CPU can run for `dtype` (the scalar one
 * first), for tests and benchmarks. Returns the count (<= max). */
int pg_attn_ukernel_variants(pg_dtype dtype, const pg_attn_ukernels **out, int max);

/* Shared argument check of pg_attention / pg_ref_attention. */
pagoda_status pg_attn_check(const pg_attn_params *p, const pg_attn_batch *b, const pg_paged_kv *kv,
                            size_t q_stride, size_t out_stride);

#endif
