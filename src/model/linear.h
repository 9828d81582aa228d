/* Linear layers for every architecture: binding a layer's weights from a
 * model source, the precision / quantization policy, packing for the GEMM
 * kernels, and y = x W^T (+ b) with a fused epilogue.
 *
 * A pg_linear is one packed GEMM weight [n_out, n_in]: one source layer,
 * several stacked row-wise (Q, K, V into one), or a SwiGLU pair (gate, up
 * packed together: y = silu(x Wg^T) * (x Wu^T)). Where it comes from:
 *   F32 / F16 / BF16 weights -> the BF16 or F32 GEMM per the compute dtype
 *     (kernels/gemm.h), or quantized at load to W8A8 / W4A8 (policy bits);
 *   GGUF Q8_0 / Q4_0 -> the W8A8 / W4A8 kernels as stored (kernels/qgemm.h);
 *   compressed-tensors int8 / int4 layers -> unpacked once and packed for
 *     the same kernels; their mapped source pages are released.
 * Stacked parts of different dtypes are packed separately and run one
 * after another into their column ranges (same result per column).
 * docs/QUANTIZATION.md has the schemes and their accuracy. */
#ifndef PAGODA_MODEL_LINEAR_H
#define PAGODA_MODEL_LINEAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/pool.h"
#include "base/status.h"
#include "kernels/gemm.h"
#include "model/compressed_tensors.h"
#include "model/source.h"

/* ---- binding weights from a source ---------------------------------------- */

/* The weights of one model while it binds: the source, its
 * compressed-tensors config, and the f32 copies of small tensors (norm
 * weights, biases) the model keeps (released with pg_weights_release). */
typedef struct pg_weights {
    const pg_model_source *src;
    const pg_ct_config *ct; /* or NULL */
    float **owned;
    int n_owned, cap_owned;
    /* prepended to every name looked up (NULL: none): "mtp." binds a
     * multi-token-prediction head's layer with the layer loaders */
    const char *prefix;
} pg_weights;

void pg_weights_init(pg_weights *w, const pg_model_source *src);
void pg_weights_release(pg_weights *w);

/* Tensor named by the printf format: shape [d0] (d1 < 0) or [d0, d1], of a
 * dtype the GEMM paths take (F32, F16, BF16, Q8_0, Q4_0) with whole blocks
 * per row. *out NULL when absent and `optional`. Errors: PAGODA_ERR_NOT_FOUND
 * ("missing tensor 'X'"), PAGODA_ERR_FORMAT (shape vs config),
 * PAGODA_ERR_UNSUPPORTED (dtype). */
pagoda_status pg_weights_tensor(pg_weights *w, int64_t d0, int64_t d1, bool optional,
                                const pg_tensor **out, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* An f32 copy [n] of a 1-D tensor, owned by w (*out NULL when absent and optional). */
pagoda_status pg_weights_vector(pg_weights *w, int64_t n, bool optional, const float **out,
                                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* An f32 copy [d0 * d1] (row-major) of a small 2-D tensor, owned by w (e.g.
 * a depthwise conv1d weight). Errors as pg_weights_tensor. */
pagoda_status pg_weights_matrix(pg_weights *w, int64_t d0, int64_t d1, const float **out,
                                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* One linear layer as the source holds it. */
typedef struct pg_linear_src {
    const void *w; /* [n_out, n_in] in place in the source; NULL for ct */
    pg_dtype dtype;
    const float *bias; /* f32 [n_out] owned by pg_weights, or NULL */
    int64_t n_out, n_in;
    bool ct; /* compressed-tensors quantized layer (ct_w) */
    pg_ct_layer ct_w;
    void *owned; /* a column shard's copy that w points into (pg_linear_src_release), or NULL */
} pg_linear_src;

/* Linear layer "<prefix>.weight" [n_out, n_in] (+ "<prefix>.bias" when
 * with_bias), the prefix given by the printf format. Errors as
 * pg_weights_tensor. */
pagoda_status pg_weights_linear(pg_weights *w, int64_t n_out, int64_t n_in, bool with_bias,
                                pg_linear_src *out, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* ---- precision policy ------------------------------------------------------- */

typedef struct pg_linear_policy {
    pg_dtype compute;       /* PG_DTYPE_COUNT (auto), PG_F32, PG_BF16: see model.h */
    int bits;               /* 0 / 8 / 4: float weights quantized at load */
    int64_t group;          /* weight group (0 = per channel) */
    int64_t act_group;      /* activation scales per (token, group); 0 = per token */
    int lm_head_bits;       /* the lm_head's own quantization (0 = as stored) */
    int64_t lm_head_group;  /* its group */
    bool lm_head_act;       /* its activations per (token, group) */
    const pg_ct_config *ct; /* the checkpoint's compressed-tensors config, or NULL */
    int32_t tp_rank, tp_size; /* tensor parallelism: the shard loaded (size 0 / 1: all) */
} pg_linear_policy;

/* The policy for model options: bits 0/8/4, group 0 or a multiple of 32,
 * act_group 0 or a multiple of 32 up to 4096 equal to the weight group
 * (group 0 with act_group G means group G). The lm_head: W8 per channel for
 * W8A8 and per-channel W4A8, W4 with the group for group-wise W4A8, the
 * activation groups' scheme when act_group is set (docs/QUANTIZATION.md);
 * PAGODA_QUANT_LM_HEAD = none | w8 | w4 overrides. Errors:
 * PAGODA_ERR_INVALID_ARG (values, an unknown PAGODA_QUANT_LM_HEAD),
 * PAGODA_ERR_UNSUPPORTED (quantizing an already quantized compressed-tensors
 * checkpoint). */
pagoda_status pg_linear_policy_init(pg_linear_policy *p, pg_dtype compute, int bits, int64_t group,
                                    int64_t act_group, const pg_ct_config *ct);

/* ---- tensor-parallel shards of a source layer (issue 22) --------------------- */

/* Keep rows [r0, r0 + n) of s [n_out, n_in] (a column-parallel shard: this
 * rank's output features) and of its bias; s->w and s->bias then point
 * into the source rows (no copy). `what` names the layer in errors.
 * Errors: PAGODA_ERR_INVALID_ARG (range outside [0, n_out)),
 * PAGODA_ERR_UNSUPPORTED (compressed-tensors layer). */
pagoda_status pg_linear_src_rows(pg_linear_src *s, int64_t r0, int64_t n, const char *what);
/* Keep columns [c0, c0 + n) of s [n_out, n_in] (a row-parallel shard: this
 * rank's input features) as a copy owned by s (free it with
 * pg_linear_src_release once packed); the bias is dropped when drop_bias
 * (a row-parallel layer's bias is added by one rank only). Block-quantized
 * rows (Q8_0 / Q4_0 / MXFP4: 32, K-quants: 256) and the policy's
 * load-time quantization groups (p->group, p->act_group) must not straddle
 * the split. Errors: PAGODA_ERR_UNSUPPORTED (a split off a block or group
 * boundary, naming both; compressed-tensors layer), PAGODA_ERR_INVALID_ARG
 * (range), PAGODA_ERR_NOMEM. */
pagoda_status pg_linear_src_cols(const pg_linear_policy *p, pg_linear_src *s, int64_t c0, int64_t n,
                                 bool drop_bias, const char *what);
/* Free a column shard's copy (no-op otherwise). */
void pg_linear_src_release(pg_linear_src *s);

/* ---- packed linear layers ------------------------------------------------------- */

#define PG_LINEAR_MAX_PARTS 4

typedef struct pg_linear {
    int64_t n_out, n_in; /* n_out: all parts (a SwiGLU pair: the gate's rows) */
    bool swiglu;
    int n_parts;                                 /* packed weights run one after another */
    pg_packed_weight *part[PG_LINEAR_MAX_PARTS]; /* rows [col[i], col[i+1]) of the output */
    int64_t col[PG_LINEAR_MAX_PARTS + 1];
    float *bias; /* f32 [n_out] (stacked), owned, or NULL */
} pg_linear;

/* Pack n source layers (same n_in) stacked row-wise into one weight under
 * the policy (quantize 0: keep float weights float whatever p->bits).
 * `what` names the layer in errors ("layer 3 q/k/v_proj").
 * Errors: PAGODA_ERR_UNSUPPORTED (compressed-tensors quantized and float
 * parts mixed), PAGODA_ERR_INVALID_ARG (n_in differs), PAGODA_ERR_NOMEM,
 * errors of pg_gemm_pack*. */
pagoda_status pg_linear_pack(const pg_linear_policy *p, const pg_linear_src *const *parts, int n,
                             bool quantize, const char *what, pg_linear *out);
/* Gate and up as one SwiGLU weight (same dtype, shape and origin; else
 * PAGODA_ERR_UNSUPPORTED). */
pagoda_status pg_linear_pack_swiglu(const pg_linear_policy *p, const pg_linear_src *gate,
                                    const pg_linear_src *up, const char *what, pg_linear *out);
/* The lm_head under the policy's lm_head rule (a tied embedding gets its
 * own packed copy; the embedding lookup keeps reading the original). */
pagoda_status pg_linear_pack_lm_head(const pg_linear_policy *p, const pg_linear_src *head,
                                     pg_linear *out);
void pg_linear_free(pg_linear *l);

/* Progress of this thread's model load (model/hub_progress.h, task
 * "load"): begin with the bytes of the source's tensors (name: the model
 * file or directory's last component); every linear weight packed or taken
 * from the packed-weight cache then adds its source bytes; end prints the
 * final line when ok. No-ops without a begin. */
void pg_linear_progress_begin(const char *name, long long total_bytes);
void pg_linear_progress_end(bool ok);

/* Link the decode prefetch hints (pg_gemm_set_next) of ls[0..n) in forward
 * order, the last one to the first (the next step's). NULL entries skipped. */
void pg_linear_chain(pg_linear *const *ls, int n);

/* Scratch for pg_linear_forward* with up to M rows on nt threads. */
size_t pg_linear_scratch_bytes(const pg_linear *l, int64_t M, int nt);
/* Bytes one forward streams (the packed copies). */
size_t pg_linear_bytes(const pg_linear *l);
/* True when the weight is quantized (int8 activations). */
bool pg_linear_is_quantized(const pg_linear *l);

/* out[T, n_out] (ldc) = x[T, n_in] W^T + bias, through the epilogue ep
 * (PG_GEMM_STORE, PG_GEMM_RESIDUAL: out +=, PG_GEMM_SWIGLU for a pair: out
 * [T, n_out]). scratch: pg_linear_scratch_bytes. Errors of pg_gemm. */
pagoda_status pg_linear_forward(const pg_linear *l, const float *x, int64_t T, float *out,
                                int64_t ldc, pg_gemm_epilogue ep, pg_pool *pool, void *scratch);
/* The same on RMSNorm(x) (weight norm_w [n_in], eps): fused into the input
 * stage of a quantized weight (pg_qgemm_rmsnorm), else normed into xb [T,
 * n_in] first (bitwise the same either way; see kernels/qgemm.h). */
pagoda_status pg_linear_forward_rmsnorm(const pg_linear *l, const float *x, int64_t T,
                                        const float *norm_w, float eps, float *xb, float *out,
                                        int64_t ldc, pg_gemm_epilogue ep, pg_pool *pool,
                                        void *scratch);

/* RMSNorm of the T rows of x [T, n] into out with the dispatch table's
 * rmsnorm_f32 (sum order depends only on n: batch invariant), rows split
 * over the pool when large. out may equal x. */
void pg_rmsnorm_rows(float *out, const float *x, const float *w, int64_t T, size_t n, float eps,
                     pg_pool *pool);

#endif
