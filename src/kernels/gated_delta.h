/* Gated DeltaNet: the linear-attention layer of Qwen3-Next / Qwen3.5
 * (Yang, Kautz, Hatamizadeh 2024, "Gated Delta Networks: Improving Mamba2
 * with Delta Rule", arXiv:2412.06464; transformers' modeling_qwen3_5.py:
 * torch_recurrent_gated_delta_rule, torch_chunk_gated_delta_rule,
 * causal_conv1d_fn / causal_conv1d_update, l2norm, Qwen3_5RMSNormGated).
 * Everything is f32. The pieces a model calls, in layer order:
 *   pg_gdn_conv1d          causal depthwise conv + SiLU over the fused qkv channels
 *   pg_gdn_gates           g (log decay) and beta from the a / b projections
 *   pg_gdn_forward         the gated delta rule over a batch of sequences
 *   pg_gdn_gated_rmsnorm   RMSNorm(o) * w * silu(z) per value head
 *
 * ---- The recurrence (per token t, per value head h) ------------------------
 * State S_h: [dk][dv] f32, one per (sequence, value head). With kh the key
 * head of h (below), scale = p->scale (usually 1/sqrt(dk)):
 *   q = l2norm(q_t[kh]) * scale,  k = l2norm(k_t[kh]),
 *       l2norm(x) = x * (1 / sqrtf(sum_i x_i^2 + 1e-6))
 *   S = S * exp(g_t[h])                     (decay, g <= 0)
 *   kv = S^T k                              (kv[j] = sum_i S[i][j] k[i])
 *   delta = (v_t[h] - kv) * beta_t[h]
 *   S = S + k delta^T                       (S[i][j] += k[i] delta[j])
 *   o_t[h] = S^T q
 * Head map: tiled == false (HF: repeat_interleave): kh = h / (n_v / n_k);
 * tiled == true (llama.cpp GGUF, V heads reordered): kh = h % n_k.
 *
 * ---- Two forms, one result ----------------------------------------------------
 * Each sequence is cut into pieces: the rows inside one chunk of
 * PG_GDN_CHUNK (64) ABSOLUTE positions (chunk c = positions [64c, 64c+64),
 * position of row r = start_pos + r), further cut after row snap_len when a
 * snapshot is asked for. A piece shorter than PG_GDN_MIN_CHUNK (16) runs the
 * recurrent form (the loop above, token by token: decode); a longer one runs
 * the chunked form (the WY / UT transform of torch_chunk_gated_delta_rule,
 * paper section 3: within the piece, cumulative log decays, the strictly
 * lower triangular system (I + A) D = R solved by forward substitution, the
 * output as the old state's read plus the masked intra-piece attention, one
 * state update per piece). The two forms agree to rounding (tests/
 * test_gated_delta.c: max error <= 2e-5 of the tensor's max |value|, ~1e-6
 * seen), and which one a row gets depends only on (start_pos, length,
 * snap_len) of its sequence:
 * a prefill cut into steps at multiples of 64 positions gives bitwise the
 * same outputs and state as one call, and a snapshot taken after n rows is
 * bitwise the state a call of those n rows leaves. Other step boundaries
 * change the pieces, so the last bits may differ (within that tolerance).
 *
 * ---- Threads and batch invariance ------------------------------------------------
 * Work items are (sequence, group of up to 8 value heads, column block of
 * dv), taken from a shared counter by the pool's threads; a group walks its
 * sequence piece by piece, all its heads per piece (the piece's rows are
 * read from memory once). Groups shrink, then heads split into column
 * blocks, when there are fewer than 2 items per thread. Every element's
 * arithmetic depends only on its own (sequence, head) inputs (columns are
 * independent lanes: no sum runs across dv), never on the thread count, the
 * grouping, the column split or the other sequences: a sequence gives the
 * same bits alone or in a batch, at 1 or N threads. */
#ifndef PAGODA_KERNELS_GATED_DELTA_H
#define PAGODA_KERNELS_GATED_DELTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/pool.h"
#include "base/status.h"

#define PG_GDN_CHUNK 64           /* chunk length of the chunked form, in positions */
#define PG_GDN_MIN_CHUNK 16       /* pieces shorter than this run the recurrent form */
#define PG_GDN_MAX_HEAD_DIM 512   /* largest dk / dv */
#define PG_GDN_MAX_CONV_KERNEL 16 /* largest conv kernel K */

/* Micro-kernels of one ISA (the dispatch table's `gdn` entry; specs:
 * pg_ref_gdn_recurrent_uk / pg_ref_gdn_mm_uk in kernels/ref/ref.h, which
 * every variant reproduces bit for bit: same fmaf chains, same order).
 *   recurrent: n tokens of the recurrence through one head's state columns
 *     S[dk][nc] (row stride lds), q and k already normalized and scaled:
 *     token t reads q + t*ldqk, k + t*ldqk, v + t*ldv, eg[t] = expf(g_t),
 *     beta[t], writes o + t*ldo (nc floats each). Per token and column j:
 *       kv   = fmaf chain over i = 0..dk-1 of S[i][j] * k[i], from 0
 *       d    = fmaf(-kv, eg, v[j]) * beta
 *       S[i][j] = fmaf(k[i], d, S[i][j] * eg)   for every i
 *       o[j] = fmaf chain over i = 0..dk-1 of S[i][j] * q[i] (new S), from 0
 *   mm: C[m][n] = c0 + A[m][k] B[k][n], per element one fmaf chain over
 *     p = 0..k-1 in increasing order, c0 = cscale * C (cscale != 0) or 0
 *     (cscale == 0: C is not read). Row-major, strides in floats.
 *   vexp: the vector exp of the same level (pg_kernel_table.vexp_f32). */
typedef struct pg_gdn_ukernels {
    const char *name; /* "scalar", "avx2", "avx512", "neon" */
    void (*recurrent)(int n, int dk, int nc, float *S, int64_t lds, const float *q, const float *k,
                      int64_t ldqk, const float *v, int64_t ldv, const float *eg, const float *beta,
                      float *o, int64_t ldo);
    void (*mm)(int m, int n, int k, const float *a, int64_t lda, const float *b, int64_t ldb,
               float *c, int64_t ldc, float cscale);
    void (*vexp)(const float *x, float *y, size_t n);
} pg_gdn_ukernels;

typedef struct pg_gdn_params {
    int32_t n_k_heads, n_v_heads, dk, dv; /* n_v_heads % n_k_heads == 0; dk, dv <= 512 */
    bool tiled;                           /* head map (above) */
    float scale;                          /* q scale, usually 1/sqrt(dk) */
    const pg_gdn_ukernels *uk;            /* NULL = pg_kernels()->gdn (tests pass a level's) */
} pg_gdn_params;

/* One step's sequences (rows of the flattened token batch). */
typedef struct pg_gdn_batch {
    int32_t n_seqs;
    const int32_t *cu_seqlens; /* [n_seqs+1], from 0, non-decreasing: sequence i is rows
                                  [cu[i], cu[i+1]) */
    const int32_t *start_pos;  /* [n_seqs] absolute position of each sequence's first row
                                  (tokens already in its state), >= 0; NULL = all 0 */
    float *const *states;      /* [n_seqs] each [n_v_heads][dk][dv] f32, in/out (conv:
                                  unused) */
    /* Optional snapshots (NULL = none): when snap_len[i] > 0 (<= the sequence's
     * length), the state after its first snap_len[i] rows is copied to
     * snap_states[i] (same layout as states[i]). pg_gdn_conv1d reads
     * snap_len only and takes its snapshot buffers as an argument. */
    const int32_t *snap_len;
    float *const *snap_states;
    /* Optional per-row snapshots (NULL = none; speculative decoding's
     * verification rolls back to the last accepted row): when row_snaps[i]
     * = n > 0 (<= the sequence's length), the state after each of its rows
     * r = 1..n is copied to row_snap_states[i] + (r - 1) * row_snap_stride
     * floats (pg_gdn_forward: the layout of states[i]; pg_gdn_conv1d: of its
     * conv state, into row_snap_conv[i] + (r - 1) * row_snap_stride). Such a
     * sequence's rows run one at a time (the recurrent form, bit for bit what
     * steps of one token give). */
    const int32_t *row_snaps;
    float *const *row_snap_states;
    float *const *row_snap_conv;
    int64_t row_snap_stride;
} pg_gdn_batch;

/* Scratch bytes pg_gdn_forward needs at nthreads threads (per-thread piece
 * buffers; does not grow with the batch: max_tokens is accepted for API
 * stability and ignored). 0 if p is invalid. */
size_t pg_gdn_scratch_bytes(const pg_gdn_params *p, int32_t max_tokens, int nthreads);

/* The gated delta rule over a batch (semantics, forms and invariance above).
 *   q [T][ldq], k [T][ldk]: n_k_heads heads of dk (head kh at kh*dk), raw
 *     (normalized here);
 *   v [T][ldv]: n_v_heads heads of dv; g, beta [T][n_v_heads] (pg_gdn_gates);
 *   out [T][ldo]: n_v_heads heads of dv (may not alias the inputs);
 *   T = b->cu_seqlens[b->n_seqs]; b->states updated in place;
 *   scratch >= pg_gdn_scratch_bytes(p, T, pg_pool_size(pool)) bytes (64-byte
 *     aligned is best); pool NULL runs on the calling thread.
 * Errors: PAGODA_ERR_INVALID_ARG (shapes, strides smaller than the heads,
 * cu_seqlens not from 0 / decreasing, negative start_pos, snap_len out of
 * [0, length], a NULL state or snapshot, scratch too small). Nothing is
 * written on error. */
pagoda_status pg_gdn_forward(const pg_gdn_params *p, const pg_gdn_batch *b, const float *q,
                             int64_t ldq, const float *k, int64_t ldk, const float *v, int64_t ldv,
                             const float *g, const float *beta, float *out, int64_t ldo,
                             void *scratch, size_t scratch_bytes, pg_pool *pool);

/* The specification of pg_gdn_forward (src/kernels/ref/gated_delta.c): the
 * recurrence above token by token with the arithmetic of
 * pg_ref_gdn_recurrent_uk (so the recurrent form equals it bit for bit),
 * single thread, no scratch, no chunking. Same arguments and errors (p->uk
 * ignored). */
pagoda_status pg_ref_gdn_forward(const pg_gdn_params *p, const pg_gdn_batch *b, const float *q,
                                 int64_t ldq, const float *k, int64_t ldk, const float *v,
                                 int64_t ldv, const float *g, const float *beta, float *out,
                                 int64_t ldo);

/* Causal depthwise conv1d + SiLU over C channels with kernel K (<= 16), the
 * Qwen3.5 / Mamba short conv (transformers causal_conv1d_fn/_update, no bias):
 *   y_t[c] = silu(sum_{j=0}^{K-1} w[c][j] * x_{t-K+1+j}[c])
 * with the sum over j increasing from 0 (f32), silu from the dispatch table
 * (silu_f32). Rows before a sequence's first row come from its
 * conv state conv_states[i] = [K-1][C] f32, oldest first (zeros for a fresh
 * sequence); afterwards it holds the last K-1 inputs (old state rows first
 * when the segment is shorter). w: [C][K] (HF conv1d.weight [C,1,K]
 * squeezed; GGUF ssm_conv1d has the same bytes). x [T][ldx] -> y [T][ldy];
 * y may be x (in place), otherwise they must not overlap. Uses b's
 * n_seqs, cu_seqlens and snap_len (states / start_pos are not read);
 * snap_conv_states[i] (when snap_len[i] > 0) receives the conv state after
 * snap_len[i] rows. pool NULL: calling thread. Per (sequence, channel)
 * independent: batch invariant. Errors: PAGODA_ERR_INVALID_ARG (C < 1, K
 * out of [1, 16], strides < C, bad batch, NULL state / snapshot). */
pagoda_status pg_gdn_conv1d(int32_t C, int32_t K, const float *w, const pg_gdn_batch *b,
                            float *const *conv_states, float *const *snap_conv_states,
                            const float *x, int64_t ldx, float *y, int64_t ldy, pg_pool *pool);

/* Reference conv: same contract, libm silu (pg_silu_f32), single thread. */
pagoda_status pg_ref_gdn_conv1d(int32_t C, int32_t K, const float *w, const pg_gdn_batch *b,
                                float *const *conv_states, float *const *snap_conv_states,
                                const float *x, int64_t ldx, float *y, int64_t ldy);

/* Gates, per token t < T and value head h < n_v_heads:
 *   g[t][h]    = a_neg[h] * softplus(a[t*lda + h] + dt_bias[h])
 *   beta[t][h] = sigmoid(bb[t*ldb + h]) = 1 / (1 + expf(-x))
 * softplus(x) = x > 20 ? x : log1pf(expf(x)) (torch's threshold 20); a_neg =
 * -exp(A_log) (computed once at load; HF: -A_log.float().exp()). g and beta
 * are [T][n_v_heads] (packed). Single thread (T * n_v_heads elements); plain
 * scalar code, its own reference. */
void pg_gdn_gates(int64_t T, int32_t n_v_heads, const float *a, int64_t lda, const float *bb,
                  int64_t ldb, const float *a_neg, const float *dt_bias, float *g, float *beta);

/* Gated RMSNorm (Qwen3_5RMSNormGated, norm before gate), per token t and
 * head h over the dv elements x_th = x + t*ldx + h*dv (z, out likewise):
 *   out[i] = w[i] * (x[i] / sqrt(mean(x^2) + eps)) * silu(z[i])
 * w: [dv]. The RMSNorm and silu come from the dispatch table (rmsnorm_f32,
 * silu_f32; their references pg_ref_rmsnorm / pg_ref_silu), then one
 * multiply. out may alias x. Single thread. */
void pg_gdn_gated_rmsnorm(int64_t T, int32_t n_heads, int32_t dv, const float *x, int64_t ldx,
                          const float *z, int64_t ldz, const float *w, float eps, float *out,
                          int64_t ldo);

/* Reference gated norm: pg_ref_rmsnorm then the libm silu, same contract. */
void pg_ref_gdn_gated_rmsnorm(int64_t T, int32_t n_heads, int32_t dv, const float *x, int64_t ldx,
                              const float *z, int64_t ldz, const float *w, float eps, float *out,
                              int64_t ldo);

/* Shared argument check of pg_gdn_forward / pg_ref_gdn_forward. */
pagoda_status pg_gdn_check(const pg_gdn_params *p, const pg_gdn_batch *b, int64_t ldq, int64_t ldk,
                           int64_t ldv, int64_t ldo);

/* Shared argument check of pg_gdn_conv1d / pg_ref_gdn_conv1d. */
pagoda_status pg_gdn_conv_check(int32_t C, int32_t K, const float *w, const pg_gdn_batch *b,
                                float *const *conv_states, float *const *snap_conv_states,
                                const float *x, int64_t ldx, const float *y, int64_t ldy);

/* The key head value head h reads (the head map above). */
static inline int32_t pg_gdn_k_head(const pg_gdn_params *p, int32_t h) {
    return p->tiled ? h % p->n_k_heads : h / (p->n_v_heads / p->n_k_heads);
}

/* out[i] = x[i] * (1 / sqrtf(sum x^2 + 1e-6)) * scale, i < n: l2norm (the
 * FLA / transformers form, eps inside the root) then the q scale (1 for k).
 * The sum of squares runs in 8 lanes (element i into lane i % 8, in order),
 * then ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)): an order fixed by
 * n, short dependency chains. Shared by the reference and the fast path. */
static inline void pg_gdn_l2norm(const float *restrict x, int n, float scale, float *restrict out) {
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            l[j] += x[i + j] * x[i + j];
    for (int j = 0; i < n; i++, j++)
        l[j] += x[i] * x[i];
    const float ss = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
    const float inv = 1.0f / __builtin_sqrtf(ss + 1e-6f);
    for (i = 0; i + 8 <= n; i += 8) /* fixed-length inner loops vectorize at -O2 */
        for (int j = 0; j < 8; j++)
            out[i + j] = x[i + j] * inv * scale;
    for (; i < n; i++)
        out[i] = x[i] * inv * scale;
}

#endif
