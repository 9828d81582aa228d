/* Whisper (see whisper.h): the architecture entry (config fields, tensor
 * table, the conv weights' canonical layout), loading, the encoder, the
 * cross-attention K/V and the decoder step, as sequences of kernel calls. */
#include "model/whisper.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/pool.h"
#include "kernels/dispatch.h"
#include "model/arch.h"
#include "model/hf_config.h"
#include "model/linear.h"

#define LN_EPS 1e-5f  /* nn.LayerNorm's default, openai/whisper and transformers */
#define ENC_BLOCK 128 /* block size of the encoder's own attention K/V (in its state) */
#define ENC_CHUNK 512 /* rows of one encoder piece (attention queries, MLP rows) */

/* ---- the model -------------------------------------------------------------------- */

typedef struct enc_layer {
    const float *ln1_w, *ln1_b; /* self_attn_layer_norm */
    const float *ln2_w, *ln2_b; /* final_layer_norm */
    pg_linear qkv;              /* q | k | v rows (k without bias) */
    pg_linear o, fc1, fc2;
} enc_layer;

typedef struct dec_layer {
    const float *ln1_w, *ln1_b; /* self_attn_layer_norm */
    const float *lnc_w, *lnc_b; /* encoder_attn_layer_norm */
    const float *ln2_w, *ln2_b; /* final_layer_norm */
    pg_linear qkv, o;           /* self-attention */
    pg_linear cq, ckv, co;      /* cross-attention: q, k | v (over the encoder output), out */
    pg_linear fc1, fc2;
} dec_layer;

struct pg_whisper {
    pg_whisper_dims dims;
    pg_weights w; /* owns the f32 copies: norms, biases, position tables */
    pg_linear conv1, conv2;
    const float *enc_pos; /* [n_audio_ctx][d] */
    enc_layer *enc;       /* [enc_layers] */
    const float *enc_ln_w, *enc_ln_b;
    const pg_tensor *embed; /* [vocab][d], in place in the source */
    const float *dec_pos;   /* [n_text_ctx][d] */
    dec_layer *dec;         /* [dec_layers] */
    const float *dec_ln_w, *dec_ln_b;
    pg_linear head; /* proj_out, or a packed copy of the tied embedding */
    pg_attn_params enc_ap, self_ap, cross_ap;
};

struct pg_whisper_ws {
    pg_arena arena;
    int32_t max_tokens, max_seqs;
    float *x;    /* decoder residual [max_tokens][d] */
    float *xb;   /* LayerNorm output [rows][d] */
    float *big;  /* fused projections [rows][3d]; conv1 output [n_frames][d] */
    float *attn; /* attention output [rows][d] */
    float *act;  /* MLP activation; conv im2col rows */
    float *last; /* final-normed logit rows [max_seqs][d] */
    void *gemm_scratch, *attn_scratch;
    size_t gemm_scratch_bytes, attn_scratch_bytes;
    pg_dtype kv_dtype;   /* of the encoder's K/V in its state, and of the decoder's caches */
    void *enc_state;     /* pg_whisper_encode's own window state */
    int32_t *enc_table;  /* [enc blocks]: 0, 1, ... */
    int32_t *iota;       /* [max(n_audio_ctx, max_tokens)]: 0, 1, ... (slots, positions) */
    int32_t *slots;      /* [n_audio_ctx]: cross-attention slot mapping */
    int32_t *cross_lens; /* [max_seqs]: n_audio_ctx */
};

/* ---- row ops over the pool ----------------------------------------------------------- */

typedef struct rows_job {
    float *out;
    const float *x, *w, *b, *add;
    size_t n;
    const pg_kernel_table *kt;
} rows_job;

static void ln_part(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const rows_job *j = ctx;
    j->kt->layernorm_f32(j->out + begin * j->n, j->x + begin * j->n, j->w, j->b, end - begin, j->n,
                         LN_EPS);
}

/* out[T][n] = LayerNorm(x) (weight w, bias b); out may equal x. */
static void layernorm_rows(float *out, const float *x, const float *w, const float *b, int64_t T,
                           int64_t n, pg_pool *pool) {
    rows_job j = {out, x, w, b, NULL, (size_t)n, pg_kernels()};
    if (pool && (size_t)T * (size_t)n >= 32768)
        pg_pool_parallel_for(pool, (size_t)T, 8, ln_part, &j);
    else
        ln_part(&j, 0, (size_t)T, 0);
}

static void gelu_part(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const rows_job *j = ctx;
    j->kt->gelu_f32(j->out + begin * j->n, j->x + begin * j->n, (end - begin) * j->n);
    if (!j->add) return;
    for (size_t t = begin; t < end; t++) {
        float *o = j->out + t * j->n;
        const float *a = j->add + t * j->n;
        for (size_t i = 0; i < j->n; i++)
            o[i] += a[i];
    }
}

/* x[T][n] = GELU(x) (+ add[T][n] when add is given), in place. */
static void gelu_rows(float *x, const float *add, int64_t T, int64_t n, pg_pool *pool) {
    rows_job j = {x, x, NULL, NULL, add, (size_t)n, pg_kernels()};
    if (pool && (size_t)T * (size_t)n >= 32768)
        pg_pool_parallel_for(pool, (size_t)T, 8, gelu_part, &j);
    else
        gelu_part(&j, 0, (size_t)T, 0);
}

/* ---- K/V into a paged cache, token ranges over the pool --------------------------------- */

typedef struct store_job {
    pg_paged_kv *kv;
    const float *k, *v;
    size_t ld;
    const int32_t *slots, *pos;
    atomic_int err;
} store_job;

static void store_part(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    store_job *j = ctx;
    pagoda_status st =
        pg_rope_kv_store(NULL, (int32_t)(end - begin), j->pos + begin, j->slots + begin, NULL, 0, 0,
                         j->k + begin * j->ld, j->ld, j->v + begin * j->ld, j->ld, j->kv);
    if (st != PAGODA_OK) atomic_store(&j->err, (int)st);
}

/* K/V rows [T] (row stride ld) of tokens 0..T-1 into the slots (positions
 * are only checked: no RoPE in Whisper). */
static pagoda_status store_kv(pg_paged_kv *kv, const float *k, const float *v, size_t ld,
                              const int32_t *slots, const int32_t *pos, int64_t T, pg_pool *pool) {
    store_job j = {kv, k, v, ld, slots, pos, 0};
    atomic_init(&j.err, 0);
    if (pool && T >= 64)
        pg_pool_parallel_for(pool, (size_t)T, 32, store_part, &j);
    else
        store_part(&j, 0, (size_t)T, 0);
    const int err = atomic_load(&j.err);
    if (err) /* the message of the failing part is in its thread: say it again here */
        return pg_error((pagoda_status)err, "whisper: K/V store into the paged cache failed");
    return PAGODA_OK;
}

/* ---- encoder --------------------------------------------------------------------------- */

typedef struct im2col_job {
    float *dst;
    const float *src;
    int64_t C, frames; /* channels, input frames */
    int stride;        /* 1: src is mel [C][frames]; 2: src is h [frames][C] */
} im2col_job;

/* Row t of a kernel-3, padding-1 convolution's input: [k][c] = in(stride*t
 * + k - 1, c), zero outside [0, frames); the conv weights are k-major to
 * match (hf_rewrite below). */
static void im2col_part(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const im2col_job *j = ctx;
    const int64_t C = j->C;
    for (size_t t = begin; t < end; t++) {
        float *d = j->dst + (int64_t)t * 3 * C;
        for (int k = 0; k < 3; k++, d += C) {
            const int64_t s = j->stride * (int64_t)t + k - 1;
            if (s < 0 || s >= j->frames) {
                memset(d, 0, (size_t)C * sizeof *d);
            } else if (j->stride == 1) { /* mel bin c's frames are contiguous */
                for (int64_t c = 0; c < C; c++)
                    d[c] = j->src[c * j->frames + s];
            } else {
                memcpy(d, j->src + s * C, (size_t)C * sizeof *d);
            }
        }
    }
}

static void im2col(float *dst, const float *src, int64_t C, int64_t frames, int stride,
                   int64_t rows, pg_pool *pool) {
    im2col_job j = {dst, src, C, frames, stride};
    if (pool)
        pg_pool_parallel_for(pool, (size_t)rows, 16, im2col_part, &j);
    else
        im2col_part(&j, 0, (size_t)rows, 0);
}

/* The conv stem: x = GELU(conv2(GELU(conv1(mel)))) + positions. */
static pagoda_status encode_stem(const pg_whisper *w, pg_whisper_ws *ws, const float *mel, float *x,
                                 pg_pool *pool) {
    const pg_whisper_dims *d = &w->dims;
    const int64_t D = d->d_model, F = d->n_frames, T = d->n_audio_ctx;
    im2col(ws->act, mel, d->n_mels, F, 1, F, pool);
    pagoda_status st =
        pg_linear_forward(&w->conv1, ws->act, F, ws->big, D, PG_GEMM_STORE, pool, ws->gemm_scratch);
    if (st) return st;
    gelu_rows(ws->big, NULL, F, D, pool);
    im2col(ws->act, ws->big, D, F, 2, T, pool);
    if ((st =
             pg_linear_forward(&w->conv2, ws->act, T, x, D, PG_GEMM_STORE, pool, ws->gemm_scratch)))
        return st;
    gelu_rows(x, w->enc_pos, T, D, pool);
    return PAGODA_OK;
}

/* The encoder state of one window (pg_whisper_encoder_state_bytes): x
 * [T][D] f32 (the residual stream), q [T][D] f32 (the current layer's
 * queries) and the current layer's K/V as a paged cache of ENC_BLOCK-token
 * blocks (K then V, in the workspace's KV dtype, room for f32). */
static size_t align_up(size_t n) {
    return (n + PG_ALIGN - 1) / PG_ALIGN * PG_ALIGN;
}

static int32_t enc_blocks(const pg_whisper_dims *d) {
    return (d->n_audio_ctx + ENC_BLOCK - 1) / ENC_BLOCK;
}

static size_t enc_kv_half(const pg_whisper_dims *d, pg_dtype dt) {
    return pg_paged_kv_bytes(dt, enc_blocks(d), d->enc_heads, ENC_BLOCK, d->enc_head_dim);
}

static int32_t enc_chunks(const pg_whisper_dims *d) {
    return (d->n_audio_ctx + ENC_CHUNK - 1) / ENC_CHUNK;
}

size_t pg_whisper_encoder_state_bytes(const pg_whisper *w) {
    const pg_whisper_dims *d = &w->dims;
    const size_t xd = (size_t)d->n_audio_ctx * (size_t)d->d_model * sizeof(float);
    return 2 * align_up(xd) + 2 * align_up(enc_kv_half(d, PG_F32));
}

typedef struct enc_view {
    float *x, *q;
    pg_paged_kv kv;
} enc_view;

static enc_view enc_state(const pg_whisper *w, const pg_whisper_ws *ws, void *state) {
    const pg_whisper_dims *d = &w->dims;
    const size_t xd = align_up((size_t)d->n_audio_ctx * (size_t)d->d_model * sizeof(float));
    const size_t half = align_up(enc_kv_half(d, PG_F32));
    uint8_t *b = state;
    return (enc_view){(float *)b,
                      (float *)(b + xd),
                      {b + 2 * xd, b + 2 * xd + half, ws->kv_dtype, enc_blocks(d), d->enc_heads,
                       ENC_BLOCK, d->enc_head_dim}};
}

/* Piece 1 of a layer: q, k, v of every row (LN1 first); K/V into the
 * state's paged cache, q into the state. */
static pagoda_status encode_qkv(const pg_whisper *w, pg_whisper_ws *ws, const enc_layer *L,
                                enc_view *v, pg_pool *pool) {
    const pg_whisper_dims *d = &w->dims;
    const int64_t D = d->d_model, T = d->n_audio_ctx, ld = L->qkv.n_out;
    layernorm_rows(ws->xb, v->x, L->ln1_w, L->ln1_b, T, D, pool);
    pagoda_status st =
        pg_linear_forward(&L->qkv, ws->xb, T, ws->big, ld, PG_GEMM_STORE, pool, ws->gemm_scratch);
    if (st || (st = store_kv(&v->kv, ws->big + D, ws->big + 2 * D, (size_t)ld, ws->iota, ws->iota,
                             T, pool)))
        return st;
    for (int64_t t = 0; t < T; t++)
        memcpy(v->q + t * D, ws->big + t * ld, (size_t)D * sizeof(float));
    return PAGODA_OK;
}

/* Rows [r0, r0 + n): x += out(attn(q, K, V)) over all T keys (non-causal). */
static pagoda_status encode_attn(const pg_whisper *w, pg_whisper_ws *ws, const enc_layer *L,
                                 enc_view *v, int64_t r0, int64_t n, pg_pool *pool) {
    const int64_t D = w->dims.d_model;
    const int32_t cu[2] = {0, (int32_t)n}, len = w->dims.n_audio_ctx;
    const int32_t *tables[1] = {ws->enc_table};
    const pg_attn_batch ab = {1, cu, &len, tables};
    pagoda_status st = pg_attention(&w->enc_ap, &ab, &v->kv, v->q + r0 * D, (size_t)D, ws->attn,
                                    (size_t)D, ws->attn_scratch, ws->attn_scratch_bytes, pool, NULL);
    return st ? st
              : pg_linear_forward(&L->o, ws->attn, n, v->x + r0 * D, D, PG_GEMM_RESIDUAL, pool,
                                  ws->gemm_scratch);
}

/* Rows [r0, r0 + n): x += fc2(GELU(fc1(LN2(x)))). */
static pagoda_status encode_mlp(const pg_whisper *w, pg_whisper_ws *ws, const enc_layer *L,
                                enc_view *v, int64_t r0, int64_t n, pg_pool *pool) {
    const int64_t D = w->dims.d_model;
    float *x = v->x + r0 * D;
    layernorm_rows(ws->xb, x, L->ln2_w, L->ln2_b, n, D, pool);
    pagoda_status st = pg_linear_forward(&L->fc1, ws->xb, n, ws->act, L->fc1.n_out, PG_GEMM_STORE,
                                         pool, ws->gemm_scratch);
    if (st) return st;
    gelu_rows(ws->act, NULL, n, L->fc1.n_out, pool);
    return pg_linear_forward(&L->fc2, ws->act, n, x, D, PG_GEMM_RESIDUAL, pool, ws->gemm_scratch);
}

int32_t pg_whisper_encoder_steps(const pg_whisper *w) {
    return 1 + w->dims.enc_layers * (1 + 2 * enc_chunks(&w->dims));
}

int32_t pg_whisper_encoder_step_rows(const pg_whisper *w) {
    return w->dims.n_audio_ctx < ENC_CHUNK ? w->dims.n_audio_ctx : ENC_CHUNK;
}

pagoda_status pg_whisper_encode_step(const pg_whisper *w, pg_whisper_ws *ws, int32_t step,
                                     const float *mel, void *state) {
    if (!w || !ws || !state || step < 0 || step >= pg_whisper_encoder_steps(w) ||
        (step == 0 && !mel))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "whisper: encoder step %d of %d (or a NULL model, workspace or array)",
                        (int)step, w ? pg_whisper_encoder_steps(w) : 0);
    pg_pool *pool = pg_pool_default();
    enc_view v = enc_state(w, ws, state);
    if (step == 0) return encode_stem(w, ws, mel, v.x, pool);
    const pg_whisper_dims *d = &w->dims;
    const int32_t C = enc_chunks(d), per = 1 + 2 * C;
    const int32_t l = (step - 1) / per, k = (step - 1) % per;
    const enc_layer *L = &w->enc[l];
    if (k == 0) return encode_qkv(w, ws, L, &v, pool);
    const int32_t c = (k - 1) % C;
    const int64_t r0 = (int64_t)c * ENC_CHUNK, T = d->n_audio_ctx;
    const int64_t n = T - r0 < ENC_CHUNK ? T - r0 : ENC_CHUNK;
    if (k <= C) return encode_attn(w, ws, L, &v, r0, n, pool);
    pagoda_status st = encode_mlp(w, ws, L, &v, r0, n, pool);
    if (st == PAGODA_OK && step == pg_whisper_encoder_steps(w) - 1)
        layernorm_rows(v.x, v.x, w->enc_ln_w, w->enc_ln_b, T, d->d_model, pool);
    return st;
}

pagoda_status pg_whisper_encode(const pg_whisper *w, pg_whisper_ws *ws, const float *mel,
                                float *out) {
    if (!w || !ws || !out) return pg_error(PAGODA_ERR_INVALID_ARG, "whisper: NULL argument");
    pagoda_status st = PAGODA_OK;
    for (int32_t s = 0; s < pg_whisper_encoder_steps(w) && st == PAGODA_OK; s++)
        st = pg_whisper_encode_step(w, ws, s, mel, ws->enc_state);
    if (st == PAGODA_OK)
        memcpy(out, ws->enc_state,
               (size_t)w->dims.n_audio_ctx * (size_t)w->dims.d_model * sizeof(float));
    return st;
}

/* ---- cross-attention K/V ---------------------------------------------------------------- */

static pagoda_status check_cross_cache(const pg_whisper *w, const pg_paged_kv *kv, int l) {
    if (!kv) return pg_error(PAGODA_ERR_INVALID_ARG, "whisper: no cross K/V for layer %d", l);
    pagoda_status st = pg_paged_kv_check(kv);
    if (st) return st;
    if (kv->num_kv_heads != w->dims.dec_heads || kv->head_dim != w->dims.dec_head_dim)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "whisper: layer %d cross K/V cache is %d heads x %d, the model needs %d x "
                        "%d",
                        l, (int)kv->num_kv_heads, (int)kv->head_dim, (int)w->dims.dec_heads,
                        (int)w->dims.dec_head_dim);
    return PAGODA_OK;
}

pagoda_status pg_whisper_cross_kv(const pg_whisper *w, pg_whisper_ws *ws, const float *enc,
                                  const int32_t *block_table, pg_paged_kv *const *kv) {
    if (!w || !ws || !enc || !block_table || !kv)
        return pg_error(PAGODA_ERR_INVALID_ARG, "whisper: cross_kv: NULL argument");
    pg_pool *pool = pg_pool_default();
    const int64_t D = w->dims.d_model, T = w->dims.n_audio_ctx;
    for (int l = 0; l < w->dims.dec_layers; l++) {
        pagoda_status st = check_cross_cache(w, kv[l], l);
        if (st) return st;
        const int32_t bs = kv[l]->block_size;
        for (int64_t t = 0; t < T; t++) {
            const int32_t blk = block_table[t / bs];
            if (blk < 0 || blk >= kv[l]->num_blocks)
                return pg_error(PAGODA_ERR_INVALID_ARG,
                                "whisper: cross block %lld is id %d, outside [0, %d)",
                                (long long)(t / bs), (int)blk, (int)kv[l]->num_blocks);
            ws->slots[t] = blk * bs + (int32_t)(t % bs);
        }
        const dec_layer *L = &w->dec[l];
        if ((st = pg_linear_forward(&L->ckv, enc, T, ws->big, 2 * D, PG_GEMM_STORE, pool,
                                    ws->gemm_scratch)) ||
            (st = store_kv(kv[l], ws->big, ws->big + D, (size_t)(2 * D), ws->slots, ws->iota, T,
                           pool)))
            return st;
    }
    return PAGODA_OK;
}

/* ---- decoder ----------------------------------------------------------------------------- */

static pagoda_status check_batch(const pg_whisper *w, const pg_whisper_ws *ws, const pg_batch *b,
                                 const pg_whisper_cross *cross) {
    if (!b || b->num_tokens < 1 || b->num_tokens > ws->max_tokens || b->num_seqs < 1 ||
        b->num_seqs > ws->max_seqs || b->num_logits < 0 || b->num_logits > ws->max_seqs)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "whisper: step of %d tokens / %d requests / %d logit rows exceeds the "
                        "workspace (%d tokens, %d requests)",
                        b ? b->num_tokens : 0, b ? b->num_seqs : 0, b ? b->num_logits : 0,
                        ws->max_tokens, ws->max_seqs);
    if (!b->layers || !cross)
        return pg_error(PAGODA_ERR_INVALID_ARG, "whisper: step without layer caches");
    for (int32_t i = 0; i < b->num_tokens; i++) {
        if (b->token_ids[i] < 0 || b->token_ids[i] >= w->dims.vocab)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "whisper: token id %d outside the vocab [0, %d)", b->token_ids[i],
                            w->dims.vocab);
        if (b->positions[i] < 0 || b->positions[i] >= w->dims.n_text_ctx)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "whisper: position %d outside the decoder's context [0, %d)",
                            b->positions[i], w->dims.n_text_ctx);
    }
    for (int32_t i = 0; i < b->num_logits; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->num_tokens)
            return pg_error(PAGODA_ERR_INVALID_ARG, "whisper: logit row %d outside the step",
                            b->logit_rows[i]);
    for (int l = 0; l < w->dims.dec_layers; l++) {
        const pg_layer_cache *lc = &b->layers[l];
        if (!lc->kv || !lc->slot_mapping || !lc->block_tables || !cross[l].block_tables)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "whisper: decoder layer %d without its self or cross K/V", l);
        pagoda_status st = check_cross_cache(w, cross[l].kv, l);
        if (st) return st;
    }
    return PAGODA_OK;
}

/* x[t] = embed_tokens[token t] + embed_positions[position t]. */
static void embed(const pg_whisper *w, const pg_batch *b, float *x) {
    const size_t D = (size_t)w->dims.d_model;
    const size_t row = pg_dtype_row_bytes(w->embed->dtype, D);
    for (int32_t t = 0; t < b->num_tokens; t++) {
        float *xr = x + (size_t)t * D;
        pg_dequant_row(w->embed->dtype,
                       (const uint8_t *)w->embed->data + (size_t)b->token_ids[t] * row, xr, D);
        const float *p = w->dec_pos + (size_t)b->positions[t] * D;
        for (size_t i = 0; i < D; i++)
            xr[i] += p[i];
    }
}

static pagoda_status decode_layer(const pg_whisper *w, pg_whisper_ws *ws, const dec_layer *L,
                                  const pg_batch *b, const pg_layer_cache *lc,
                                  const pg_whisper_cross *cr, pg_pool *pool) {
    const int64_t D = w->dims.d_model, T = b->num_tokens, ld = L->qkv.n_out;
    /* self-attention over the paged cache (causal) */
    layernorm_rows(ws->xb, ws->x, L->ln1_w, L->ln1_b, T, D, pool);
    pagoda_status st =
        pg_linear_forward(&L->qkv, ws->xb, T, ws->big, ld, PG_GEMM_STORE, pool, ws->gemm_scratch);
    if (st || (st = pg_rope_kv_store(NULL, (int32_t)T, b->positions, lc->slot_mapping, NULL, 0, 0,
                                     ws->big + D, (size_t)ld, ws->big + 2 * D, (size_t)ld, lc->kv)))
        return st;
    const pg_attn_batch self = {b->num_seqs, b->query_start_loc, b->seq_lens, lc->block_tables};
    if ((st = pg_attention(&w->self_ap, &self, lc->kv, ws->big, (size_t)ld, ws->attn, (size_t)D,
                           ws->attn_scratch, ws->attn_scratch_bytes, pool, NULL)) ||
        (st = pg_linear_forward(&L->o, ws->attn, T, ws->x, D, PG_GEMM_RESIDUAL, pool,
                                ws->gemm_scratch)))
        return st;
    /* cross-attention over the encoder output's K/V (non-causal) */
    layernorm_rows(ws->xb, ws->x, L->lnc_w, L->lnc_b, T, D, pool);
    if ((st = pg_linear_forward(&L->cq, ws->xb, T, ws->big, D, PG_GEMM_STORE, pool,
                                ws->gemm_scratch)))
        return st;
    const pg_attn_batch cross = {b->num_seqs, b->query_start_loc, ws->cross_lens, cr->block_tables};
    if ((st = pg_attention(&w->cross_ap, &cross, cr->kv, ws->big, (size_t)D, ws->attn, (size_t)D,
                           ws->attn_scratch, ws->attn_scratch_bytes, pool, NULL)) ||
        (st = pg_linear_forward(&L->co, ws->attn, T, ws->x, D, PG_GEMM_RESIDUAL, pool,
                                ws->gemm_scratch)))
        return st;
    /* MLP */
    layernorm_rows(ws->xb, ws->x, L->ln2_w, L->ln2_b, T, D, pool);
    if ((st = pg_linear_forward(&L->fc1, ws->xb, T, ws->act, L->fc1.n_out, PG_GEMM_STORE, pool,
                                ws->gemm_scratch)))
        return st;
    gelu_rows(ws->act, NULL, T, L->fc1.n_out, pool);
    return pg_linear_forward(&L->fc2, ws->act, T, ws->x, D, PG_GEMM_RESIDUAL, pool,
                             ws->gemm_scratch);
}

pagoda_status pg_whisper_decode(const pg_whisper *w, pg_whisper_ws *ws, const pg_batch *b,
                                const pg_whisper_cross *cross, float *logits) {
    if (!w || !ws) return pg_error(PAGODA_ERR_INVALID_ARG, "whisper: NULL model or workspace");
    pagoda_status st = check_batch(w, ws, b, cross);
    if (st) return st;
    pg_pool *pool = pg_pool_default();
    const int64_t D = w->dims.d_model;
    embed(w, b, ws->x);
    for (int l = 0; l < w->dims.dec_layers && st == PAGODA_OK; l++)
        st = decode_layer(w, ws, &w->dec[l], b, &b->layers[l], &cross[l], pool);
    if (st || b->num_logits == 0) return st;
    const pg_kernel_table *kt = pg_kernels();
    for (int32_t i = 0; i < b->num_logits; i++)
        kt->layernorm_f32(ws->last + (size_t)i * (size_t)D,
                          ws->x + (size_t)b->logit_rows[i] * (size_t)D, w->dec_ln_w, w->dec_ln_b, 1,
                          (size_t)D, LN_EPS);
    return pg_linear_forward(&w->head, ws->last, b->num_logits, logits, w->dims.vocab,
                             PG_GEMM_STORE, pool, ws->gemm_scratch);
}

/* ---- workspace -------------------------------------------------------------------------- */

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

/* Attention scratch for the worst step of these shapes (as decoder.c's
 * attn_need): every token its own request (most work units, no split-KV),
 * or up to 8 threads' worth of single-token requests over kv_len keys
 * (split-KV partials), or one request of T tokens. A step needing more runs
 * without split-KV, never fails. */
static size_t attn_worst(const pg_attn_params *p, pg_dtype dt, int32_t bs, int32_t T, int32_t S,
                         int32_t kv_len, int nt) {
    const pg_paged_kv kv = {NULL, NULL, dt, 1, p->n_kv_heads, bs, p->head_dim};
    const int32_t n = T > S ? T : S;
    int32_t *cu = malloc((size_t)(n + 1) * sizeof *cu), *lens = malloc((size_t)n * sizeof *lens);
    size_t best = 0;
    if (cu && lens) {
        for (int32_t i = 0; i <= T; i++)
            cu[i] = i;
        for (int32_t i = 0; i < T; i++)
            lens[i] = p->non_causal ? kv_len : 1;
        pg_attn_batch b = {T, cu, lens, NULL};
        best = pg_attention_scratch_bytes(p, &b, &kv, nt);
        for (int32_t s = 1; s <= S && s <= 8 * nt; s++) {
            for (int32_t i = 0; i < s; i++)
                lens[i] = kv_len;
            b = (pg_attn_batch){s, cu, lens, NULL};
            size_t need = pg_attention_scratch_bytes(p, &b, &kv, nt);
            if (need > best) best = need;
        }
        const int32_t one_cu[2] = {0, T}, one_len = p->non_causal ? kv_len : T;
        b = (pg_attn_batch){1, one_cu, &one_len, NULL};
        size_t need = pg_attention_scratch_bytes(p, &b, &kv, nt);
        if (need > best) best = need;
    }
    free(cu);
    free(lens);
    return best;
}

static size_t gemm_need(const pg_linear *l, int64_t M, int nt, size_t have) {
    size_t s = pg_linear_scratch_bytes(l, M, nt);
    return s > have ? s : have;
}

pagoda_status pg_whisper_ws_create(const pg_whisper *w, const pg_step_limits *lim,
                                   pg_whisper_ws **out) {
    *out = NULL;
    if (!w || !lim || lim->max_tokens < 1 || lim->max_seqs < 1 || lim->block_size < 1 ||
        (lim->kv_dtype != PG_F32 && lim->kv_dtype != PG_BF16))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "whisper: bad workspace limits (tokens, requests, block size, KV dtype)");
    const pg_whisper_dims *d = &w->dims;
    pg_whisper_ws *ws = calloc(1, sizeof *ws);
    if (!ws) return pg_error(PAGODA_ERR_NOMEM, "whisper: out of memory");
    ws->max_tokens = lim->max_tokens;
    ws->max_seqs = lim->max_seqs;
    pg_pool *pool = pg_pool_default();
    const int nt = pool ? pg_pool_size(pool) : 1;
    const int64_t D = d->d_model, Tc = d->n_audio_ctx, F = d->n_frames;
    const int64_t T = lim->max_tokens, S = lim->max_seqs, rows = max64(Tc, T);
    /* GEMM scratch: the largest M each weight sees */
    size_t gs = gemm_need(&w->conv1, F, nt, 0);
    gs = gemm_need(&w->conv2, Tc, nt, gs);
    for (int l = 0; l < d->enc_layers; l++) {
        const enc_layer *L = &w->enc[l];
        const pg_linear *ls[4] = {&L->qkv, &L->o, &L->fc1, &L->fc2};
        for (int i = 0; i < 4; i++)
            gs = gemm_need(ls[i], Tc, nt, gs);
    }
    for (int l = 0; l < d->dec_layers; l++) {
        const dec_layer *L = &w->dec[l];
        const pg_linear *ls[6] = {&L->qkv, &L->o, &L->cq, &L->co, &L->fc1, &L->fc2};
        for (int i = 0; i < 6; i++)
            gs = gemm_need(ls[i], T, nt, gs);
        gs = gemm_need(&L->ckv, Tc, nt, gs);
    }
    gs = gemm_need(&w->head, S, nt, gs);
    ws->gemm_scratch_bytes = gs;
    /* attention scratch: the encoder's window, the decoder's self- and cross-attention */
    size_t as = attn_worst(&w->enc_ap, lim->kv_dtype, ENC_BLOCK, (int32_t)Tc, 1, (int32_t)Tc, nt);
    size_t a2 = attn_worst(&w->self_ap, lim->kv_dtype, lim->block_size, (int32_t)T, (int32_t)S,
                           d->n_text_ctx, nt);
    size_t a3 = attn_worst(&w->cross_ap, lim->kv_dtype, lim->block_size, (int32_t)T, (int32_t)S,
                           (int32_t)Tc, nt);
    as = as > a2 ? as : a2;
    as = as > a3 ? as : a3;
    if (!as) {
        free(ws);
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "whisper: the KV layout (block size %d) is rejected by attention",
                        (int)lim->block_size);
    }
    ws->attn_scratch_bytes = as;
    const int32_t n_enc_blocks = enc_blocks(d);
    ws->kv_dtype = lim->kv_dtype;
    const int64_t act =
        max64(max64(Tc * d->enc_ffn, T * d->dec_ffn), max64(F * 3 * d->n_mels, Tc * 3 * D));
    const int64_t n_iota = max64(Tc, T);
    const size_t sizes[] = {(size_t)(T * D) * 4,
                            (size_t)(rows * D) * 4,
                            (size_t)(rows * 3 * D) * 4,
                            (size_t)(rows * D) * 4,
                            (size_t)act * 4,
                            (size_t)(S * D) * 4,
                            gs,
                            as,
                            pg_whisper_encoder_state_bytes(w),
                            (size_t)n_enc_blocks * 4,
                            (size_t)n_iota * 4,
                            (size_t)Tc * 4,
                            (size_t)S * 4};
    void **bufs[] = {(void **)&ws->x,     (void **)&ws->xb,        (void **)&ws->big,
                     (void **)&ws->attn,  (void **)&ws->act,       (void **)&ws->last,
                     &ws->gemm_scratch,   &ws->attn_scratch,       &ws->enc_state,
                     (void **)&ws->enc_table, (void **)&ws->iota,
                     (void **)&ws->slots, (void **)&ws->cross_lens};
    const size_t nbuf = sizeof sizes / sizeof sizes[0];
    size_t total = 0;
    for (size_t i = 0; i < nbuf; i++)
        total += (sizes[i] + PG_ALIGN - 1) / PG_ALIGN * PG_ALIGN + PG_ALIGN;
    pagoda_status st = pg_arena_init(&ws->arena, total);
    if (st) {
        free(ws);
        return st;
    }
    for (size_t i = 0; i < nbuf; i++)
        *bufs[i] = sizes[i] ? pg_arena_alloc(&ws->arena, sizes[i]) : NULL;
    for (int32_t i = 0; i < n_enc_blocks; i++)
        ws->enc_table[i] = i;
    for (int64_t i = 0; i < n_iota; i++)
        ws->iota[i] = (int32_t)i;
    for (int64_t i = 0; i < S; i++)
        ws->cross_lens[i] = (int32_t)Tc;
    *out = ws;
    return PAGODA_OK;
}

void pg_whisper_ws_free(pg_whisper_ws *ws) {
    if (!ws) return;
    pg_arena_free(&ws->arena);
    free(ws);
}

size_t pg_whisper_ws_bytes(const pg_whisper_ws *ws) {
    return ws ? ws->arena.cap : 0;
}

/* ---- load ------------------------------------------------------------------------------- */

void pg_whisper_free(pg_whisper *w) {
    if (!w) return;
    pg_linear_free(&w->conv1);
    pg_linear_free(&w->conv2);
    for (int l = 0; w->enc && l < w->dims.enc_layers; l++) {
        enc_layer *L = &w->enc[l];
        pg_linear *ls[4] = {&L->qkv, &L->o, &L->fc1, &L->fc2};
        for (int i = 0; i < 4; i++)
            pg_linear_free(ls[i]);
    }
    for (int l = 0; w->dec && l < w->dims.dec_layers; l++) {
        dec_layer *L = &w->dec[l];
        pg_linear *ls[7] = {&L->qkv, &L->o, &L->cq, &L->ckv, &L->co, &L->fc1, &L->fc2};
        for (int i = 0; i < 7; i++)
            pg_linear_free(ls[i]);
    }
    free(w->enc);
    free(w->dec);
    pg_linear_free(&w->head);
    pg_weights_release(&w->w);
    free(w);
}

const pg_whisper_dims *pg_whisper_get_dims(const pg_whisper *w) {
    return &w->dims;
}

size_t pg_whisper_decoder_weight_bytes(const pg_whisper *w) {
    const size_t D = (size_t)w->dims.d_model;
    size_t b = 2 * D * sizeof(float) + pg_linear_bytes(&w->head);
    for (int l = 0; l < w->dims.dec_layers; l++) {
        const dec_layer *L = &w->dec[l];
        b += 6 * D * sizeof(float);
        const pg_linear *ls[6] = {&L->qkv, &L->o, &L->cq, &L->co, &L->fc1, &L->fc2};
        for (int i = 0; i < 6; i++)
            b += pg_linear_bytes(ls[i]);
    }
    return b;
}

/* A LayerNorm's weight and bias "<prefix>.weight" / ".bias" [n]. */
static pagoda_status bind_norm(pg_weights *w, int64_t n, const float **wt, const float **b,
                               const char *prefix) {
    pagoda_status st = pg_weights_vector(w, n, false, wt, "%s.weight", prefix);
    return st ? st : pg_weights_vector(w, n, false, b, "%s.bias", prefix);
}

/* q / k / v / out projections of an attention under `pre` ("...self_attn"):
 * q | k | v stacked into one GEMM (k has no bias), out separately. With kv
 * given, q alone in q and k | v in kv (the cross-attention: its k and v read
 * the encoder output). */
static pagoda_status bind_attn(pg_weights *w, const pg_linear_policy *p, int64_t D, const char *pre,
                               pg_linear *q_or_qkv, pg_linear *kv, pg_linear *o) {
    pg_linear_src q, k, v, out;
    pagoda_status st;
    if ((st = pg_weights_linear(w, D, D, true, &q, "%s.q_proj", pre)) ||
        (st = pg_weights_linear(w, D, D, false, &k, "%s.k_proj", pre)) ||
        (st = pg_weights_linear(w, D, D, true, &v, "%s.v_proj", pre)) ||
        (st = pg_weights_linear(w, D, D, true, &out, "%s.out_proj", pre)))
        return st;
    char what[96];
    const pg_linear_src *all[3] = {&q, &k, &v}, *op = &out;
    snprintf(what, sizeof what, "%s q/k/v_proj", pre);
    if ((st = pg_linear_pack(p, all, kv ? 1 : 3, true, what, q_or_qkv))) return st;
    if (kv && (st = pg_linear_pack(p, all + 1, 2, true, what, kv))) return st;
    snprintf(what, sizeof what, "%s.out_proj", pre);
    return pg_linear_pack(p, &op, 1, true, what, o);
}

/* fc1 [ffn, D] and fc2 [D, ffn] of a layer, both with biases. */
static pagoda_status bind_mlp(pg_weights *w, const pg_linear_policy *p, int64_t D, int64_t ffn,
                              const char *pre, pg_linear *fc1, pg_linear *fc2) {
    pg_linear_src a, b;
    pagoda_status st;
    if ((st = pg_weights_linear(w, ffn, D, true, &a, "%s.fc1", pre)) ||
        (st = pg_weights_linear(w, D, ffn, true, &b, "%s.fc2", pre)))
        return st;
    const pg_linear_src *pa = &a, *pb = &b;
    char what[96];
    snprintf(what, sizeof what, "%s.fc1", pre);
    if ((st = pg_linear_pack(p, &pa, 1, true, what, fc1))) return st;
    snprintf(what, sizeof what, "%s.fc2", pre);
    return pg_linear_pack(p, &pb, 1, true, what, fc2);
}

static pagoda_status load_weights(pg_whisper *m, const pg_linear_policy *p) {
    const pg_whisper_dims *d = &m->dims;
    const int64_t D = d->d_model;
    pg_weights *w = &m->w;
    pagoda_status st;
    char pre[96];
    /* encoder: conv stem (kept float), positions, layers, final norm */
    pg_linear_src c1, c2;
    if ((st = pg_weights_linear(w, D, 3 * (int64_t)d->n_mels, true, &c1, "model.encoder.conv1")) ||
        (st = pg_weights_linear(w, D, 3 * D, true, &c2, "model.encoder.conv2")))
        return st;
    const pg_linear_src *pc1 = &c1, *pc2 = &c2;
    if ((st = pg_linear_pack(p, &pc1, 1, false, "encoder conv1", &m->conv1)) ||
        (st = pg_linear_pack(p, &pc2, 1, false, "encoder conv2", &m->conv2)) ||
        (st = pg_weights_matrix(w, d->n_audio_ctx, D, &m->enc_pos,
                                "model.encoder.embed_positions.weight")))
        return st;
    for (int l = 0; l < d->enc_layers; l++) {
        enc_layer *L = &m->enc[l];
        char sub[128];
        snprintf(pre, sizeof pre, "model.encoder.layers.%d", l);
        snprintf(sub, sizeof sub, "%s.self_attn_layer_norm", pre);
        if ((st = bind_norm(w, D, &L->ln1_w, &L->ln1_b, sub))) return st;
        snprintf(sub, sizeof sub, "%s.final_layer_norm", pre);
        if ((st = bind_norm(w, D, &L->ln2_w, &L->ln2_b, sub))) return st;
        snprintf(sub, sizeof sub, "%s.self_attn", pre);
        if ((st = bind_attn(w, p, D, sub, &L->qkv, NULL, &L->o)) ||
            (st = bind_mlp(w, p, D, d->enc_ffn, pre, &L->fc1, &L->fc2)))
            return st;
    }
    if ((st = bind_norm(w, D, &m->enc_ln_w, &m->enc_ln_b, "model.encoder.layer_norm"))) return st;
    /* decoder: embeddings, layers, final norm, logits head */
    if ((st = pg_weights_tensor(w, d->vocab, D, false, &m->embed,
                                "model.decoder.embed_tokens.weight")) ||
        (st = pg_weights_matrix(w, d->n_text_ctx, D, &m->dec_pos,
                                "model.decoder.embed_positions.weight")))
        return st;
    for (int l = 0; l < d->dec_layers; l++) {
        dec_layer *L = &m->dec[l];
        char sub[128];
        snprintf(pre, sizeof pre, "model.decoder.layers.%d", l);
        snprintf(sub, sizeof sub, "%s.self_attn_layer_norm", pre);
        if ((st = bind_norm(w, D, &L->ln1_w, &L->ln1_b, sub))) return st;
        snprintf(sub, sizeof sub, "%s.encoder_attn_layer_norm", pre);
        if ((st = bind_norm(w, D, &L->lnc_w, &L->lnc_b, sub))) return st;
        snprintf(sub, sizeof sub, "%s.final_layer_norm", pre);
        if ((st = bind_norm(w, D, &L->ln2_w, &L->ln2_b, sub))) return st;
        snprintf(sub, sizeof sub, "%s.self_attn", pre);
        if ((st = bind_attn(w, p, D, sub, &L->qkv, NULL, &L->o))) return st;
        snprintf(sub, sizeof sub, "%s.encoder_attn", pre);
        if ((st = bind_attn(w, p, D, sub, &L->cq, &L->ckv, &L->co)) ||
            (st = bind_mlp(w, p, D, d->dec_ffn, pre, &L->fc1, &L->fc2)))
            return st;
    }
    if ((st = bind_norm(w, D, &m->dec_ln_w, &m->dec_ln_b, "model.decoder.layer_norm"))) return st;
    const pg_model_config *c = pg_model_source_config(w->src);
    pg_linear_src head;
    if (!c->tie_word_embeddings)
        st = pg_weights_linear(w, d->vocab, D, false, &head, "proj_out");
    else
        head = (pg_linear_src){
            .w = m->embed->data, .dtype = m->embed->dtype, .n_out = d->vocab, .n_in = D};
    if (st || (st = pg_linear_pack_lm_head(p, &head, &m->head))) return st;
    /* decode prefetch order: each decoder layer's GEMMs, then the head */
    pg_linear **chain = malloc((size_t)(6 * d->dec_layers + 1) * sizeof *chain);
    if (!chain) return pg_error(PAGODA_ERR_NOMEM, "whisper: out of memory");
    int n = 0;
    for (int l = 0; l < d->dec_layers; l++) {
        dec_layer *L = &m->dec[l];
        pg_linear *ls[6] = {&L->qkv, &L->o, &L->cq, &L->co, &L->fc1, &L->fc2};
        for (int i = 0; i < 6; i++)
            chain[n++] = ls[i];
    }
    chain[n++] = &m->head;
    pg_linear_chain(chain, n);
    free(chain);
    return PAGODA_OK;
}

pagoda_status pg_whisper_load(const pg_model_source *src, const pg_model_options *o,
                              pg_whisper **out) {
    *out = NULL;
    const pg_model_config *c = pg_model_source_config(src);
    if (!c->arch || strcmp(c->arch->name, "whisper") != 0)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: '%s' is not a Whisper model",
                        pg_model_source_path(src), c->architecture);
    pg_model_options def;
    if (!o) {
        pg_model_options_default(&def);
        o = &def;
    }
    pg_linear_policy p;
    pagoda_status st = pg_linear_policy_init(&p, o->compute, o->quant_bits, o->quant_group,
                                             o->quant_act_group, pg_model_source_ct(src));
    if (st) return st;
    pg_whisper *m = calloc(1, sizeof *m);
    if (!m) return pg_error(PAGODA_ERR_NOMEM, "whisper: out of memory");
    pg_whisper_dims *d = &m->dims;
    *d = (pg_whisper_dims){.n_mels = c->num_mel_bins,
                           .n_frames = 2 * c->max_source_positions,
                           .n_audio_ctx = c->max_source_positions,
                           .d_model = c->hidden_size,
                           .enc_layers = c->encoder_layers,
                           .enc_heads = c->encoder_attention_heads,
                           .enc_ffn = c->encoder_ffn_dim,
                           .dec_layers = c->num_hidden_layers,
                           .dec_heads = c->num_attention_heads,
                           .dec_ffn = c->intermediate_size,
                           .enc_head_dim = c->hidden_size / c->encoder_attention_heads,
                           .dec_head_dim = c->head_dim,
                           .n_text_ctx = c->max_position_embeddings,
                           .vocab = c->vocab_size};
    const float enc_scale = (float)(1.0 / sqrt((double)d->enc_head_dim)),
                dec_scale = (float)(1.0 / sqrt((double)d->dec_head_dim));
    m->enc_ap = (pg_attn_params){.n_heads = d->enc_heads,
                                 .n_kv_heads = d->enc_heads,
                                 .head_dim = d->enc_head_dim,
                                 .scale = enc_scale,
                                 .non_causal = true};
    m->self_ap = (pg_attn_params){.n_heads = d->dec_heads,
                                  .n_kv_heads = d->dec_heads,
                                  .head_dim = d->dec_head_dim,
                                  .scale = dec_scale};
    m->cross_ap = m->self_ap;
    m->cross_ap.non_causal = true;
    pg_weights_init(&m->w, src);
    m->enc = calloc((size_t)d->enc_layers, sizeof *m->enc);
    m->dec = calloc((size_t)d->dec_layers, sizeof *m->dec);
    if (!m->enc || !m->dec) st = pg_error(PAGODA_ERR_NOMEM, "whisper: out of memory");
    if (!st) st = load_weights(m, &p);
    if (st) {
        pg_whisper_free(m);
        return st;
    }
    PG_DEBUG("whisper: d_model %d, encoder %d layers x %d heads, decoder %d layers x %d heads, "
             "%d mels, weights %s",
             d->d_model, d->enc_layers, d->enc_heads, d->dec_layers, d->dec_heads, d->n_mels,
             pg_dtype_name(c->torch_dtype));
    *out = m;
    return PAGODA_OK;
}

/* ---- the architecture entry ----------------------------------------------------------- */

/* pg_model_load: Whisper as the engine runs it. Layers [0, L) are the
 * decoder's self-attention (FULL caches), layers [L, 2L) its
 * cross-attention (CROSS caches over n_audio_ctx encoder positions), L =
 * decoder layers; the encoder runs through the encoder ops. */
typedef struct whisper_model {
    pg_model base;
    pg_whisper *w;
} whisper_model;

typedef struct whisper_mws {
    pg_whisper_ws *ws;
    pg_whisper_cross *cross; /* [dec_layers] per step */
} whisper_mws;

static const pg_whisper *wm(const pg_model *m) {
    return ((const whisper_model *)m)->w;
}

static void wm_free(pg_model *m) {
    whisper_model *x = (whisper_model *)m;
    pg_whisper_free(x->w);
    pg_model_base_release(&x->base);
    free(x);
}

static size_t wm_weight_bytes(const pg_model *m) {
    return pg_whisper_decoder_weight_bytes(wm(m));
}

static pagoda_status wm_ws_create(const pg_model *m, const pg_step_limits *lim, void **out) {
    whisper_mws *x = calloc(1, sizeof *x);
    if (!x) return pg_error(PAGODA_ERR_NOMEM, "whisper: out of memory");
    x->cross = calloc((size_t)wm(m)->dims.dec_layers, sizeof *x->cross);
    pagoda_status st = x->cross ? pg_whisper_ws_create(wm(m), lim, &x->ws)
                                : pg_error(PAGODA_ERR_NOMEM, "whisper: out of memory");
    if (st) {
        free(x->cross);
        free(x);
        return st;
    }
    *out = x;
    return PAGODA_OK;
}

static void wm_ws_free(void *ws) {
    whisper_mws *x = ws;
    if (!x) return;
    pg_whisper_ws_free(x->ws);
    free(x->cross);
    free(x);
}

static size_t wm_ws_bytes(const void *ws) {
    const whisper_mws *x = ws;
    return pg_whisper_ws_bytes(x->ws);
}

static pagoda_status wm_forward(const pg_model *m, void *ws, const pg_batch *b, float *logits) {
    whisper_mws *x = ws;
    const int32_t L = wm(m)->dims.dec_layers;
    for (int32_t l = 0; l < L; l++)
        x->cross[l] = (pg_whisper_cross){b->layers[L + l].kv, b->layers[L + l].block_tables};
    return pg_whisper_decode(wm(m), x->ws, b, x->cross, logits);
}

static int32_t wm_encoder_steps(const pg_model *m) {
    return pg_whisper_encoder_steps(wm(m));
}

static bool wm_input_shape(const pg_model *m, int32_t *rows, int32_t *cols) {
    *rows = wm(m)->dims.n_mels;
    *cols = wm(m)->dims.n_frames;
    return true;
}

static size_t wm_state_bytes(const pg_model *m) {
    return pg_whisper_encoder_state_bytes(wm(m));
}

static int32_t wm_step_tokens(const pg_model *m) {
    return pg_whisper_encoder_step_rows(wm(m));
}

static pagoda_status wm_encode_step(const pg_model *m, void *ws, int32_t step, const float *input,
                                    void *state) {
    return pg_whisper_encode_step(wm(m), ((whisper_mws *)ws)->ws, step, input, state);
}

static pagoda_status wm_encoder_kv(const pg_model *m, void *ws, const void *state,
                                   const int32_t *block_table, pg_paged_kv *const *kv) {
    return pg_whisper_cross_kv(wm(m), ((whisper_mws *)ws)->ws, state, block_table, kv);
}

static const pg_model_ops WHISPER_OPS = {
    .free = wm_free,
    .weight_bytes_per_step = wm_weight_bytes,
    .workspace_create = wm_ws_create,
    .workspace_free = wm_ws_free,
    .workspace_bytes = wm_ws_bytes,
    .forward = wm_forward,
    .encoder_steps = wm_encoder_steps,
    .encoder_input_shape = wm_input_shape,
    .encoder_state_bytes = wm_state_bytes,
    .encoder_step_tokens = wm_step_tokens,
    .encode_step = wm_encode_step,
    .encoder_kv = wm_encoder_kv,
};

static pagoda_status create(const pg_model_source *src, const pg_model_options *o, pg_model **out) {
    *out = NULL;
    whisper_model *x = calloc(1, sizeof *x);
    if (!x) return pg_error(PAGODA_ERR_NOMEM, "whisper: out of memory");
    const pg_model_config *c = pg_model_source_config(src);
    const int32_t L = c->num_hidden_layers;
    pagoda_status st = pg_model_base_init(&x->base, &WHISPER_OPS, src, o, 2 * L);
    if (!st) st = pg_whisper_load(src, o, &x->w);
    if (st) {
        pg_whisper_free(x->w);
        pg_model_base_release(&x->base);
        free(x);
        return st;
    }
    const pg_whisper_dims *d = &x->w->dims;
    for (int32_t l = 0; l < 2 * L; l++)
        x->base.cache[l] = (pg_layer_cache_spec){
            .kind = l < L ? PG_LAYER_CACHE_FULL : PG_LAYER_CACHE_CROSS,
            .num_kv_heads = d->dec_heads,
            .head_dim = d->dec_head_dim,
            .encoder_len = l < L ? 0 : d->n_audio_ctx,
        };
    *out = &x->base;
    return PAGODA_OK;
}

/* WhisperConfig fields beyond the common ones (which hf_attribute_map points
 * at the decoder's: d_model, decoder_layers, decoder_attention_heads,
 * decoder_ffn_dim, max_target_positions). */
static pagoda_status parse_hf(const cJSON *root, const char *path, pg_model_config *c) {
    const long long BIG = 1 << 30;
    pagoda_status s =
        pg_hf_get_int(root, "encoder_layers", path, 1, 1 << 16, true, 0, &c->encoder_layers);
    if (!s)
        s = pg_hf_get_int(root, "encoder_attention_heads", path, 1, 1 << 16, true, 0,
                          &c->encoder_attention_heads);
    if (!s)
        s = pg_hf_get_int(root, "encoder_ffn_dim", path, 1, 1 << 22, true, 0, &c->encoder_ffn_dim);
    if (!s) s = pg_hf_get_int(root, "num_mel_bins", path, 1, 256, false, 80, &c->num_mel_bins);
    if (!s)
        s = pg_hf_get_int(root, "max_source_positions", path, 1, 1 << 20, false, 1500,
                          &c->max_source_positions);
    if (!s) /* WhisperConfig's default when the file omits it (the common default is 2048) */
        s = pg_hf_get_int(root, "max_target_positions", path, 1, BIG, false, 448,
                          &c->max_position_embeddings);
    if (!s)
        s = pg_hf_get_int(root, "decoder_start_token_id", path, 0, BIG, false, -1,
                          &c->decoder_start_token_id);
    /* proj_out is tied to embed_tokens unless the config says otherwise
     * (PretrainedConfig's default is true) */
    if (!s) s = pg_hf_get_bool(root, "tie_word_embeddings", path, true, &c->tie_word_embeddings);
    bool scale_embedding = false;
    if (!s) s = pg_hf_get_bool(root, "scale_embedding", path, false, &scale_embedding);
    if (!s && scale_embedding)
        s = pg_error(PAGODA_ERR_UNSUPPORTED, "%s: scale_embedding true is not supported", path);
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "activation_function");
    if (!s && act && !cJSON_IsNull(act) &&
        (!cJSON_IsString(act) || strcmp(act->valuestring, "gelu") != 0))
        s = pg_error(PAGODA_ERR_UNSUPPORTED,
                     "%s: activation_function must be \"gelu\" (exact erf GELU) for whisper", path);
    if (!s) snprintf(c->hidden_act, sizeof c->hidden_act, "gelu");
    if (!s && c->hidden_size % c->encoder_attention_heads)
        s = pg_error(PAGODA_ERR_FORMAT,
                     "%s: d_model %d is not a multiple of encoder_attention_heads %d", path,
                     c->hidden_size, c->encoder_attention_heads);
    if (!s && ((c->hidden_size / c->encoder_attention_heads) % 2 ||
               c->hidden_size / c->encoder_attention_heads > PG_KV_MAX_HEAD_DIM ||
               c->head_dim > PG_KV_MAX_HEAD_DIM))
        s = pg_error(PAGODA_ERR_UNSUPPORTED, "%s: attention head size must be even and <= %d", path,
                     PG_KV_MAX_HEAD_DIM);
    if (!s && c->num_key_value_heads != c->num_attention_heads)
        s = pg_error(PAGODA_ERR_FORMAT, "%s: whisper has no grouped-query attention", path);
    return s;
}

/* Canonical conv weights: HF's Conv1d weight [out, in, 3] becomes [out, 3 *
 * in] k-major (element [o][k * in + c] = W[o][c][k]), so a convolution is a
 * linear layer over three consecutive input frames laid side by side. */
static bool hf_rewrite(const pg_model_config *cfg, const char *path, const pg_tensor *t,
                       pg_tensor_sink *sink, pagoda_status *st) {
    (void)cfg;
    if (strcmp(t->name, "model.encoder.conv1.weight") != 0 &&
        strcmp(t->name, "model.encoder.conv2.weight") != 0)
        return false;
    if (t->ndim != 3 || t->shape[2] != 3) return false; /* validation names the shape */
    const size_t es = t->dtype == PG_F32 ? 4 : t->dtype == PG_F16 || t->dtype == PG_BF16 ? 2 : 0;
    if (!es) {
        *st = pg_error(PAGODA_ERR_UNSUPPORTED, "%s: tensor '%s' is %s (need F32, F16 or BF16)",
                       path, t->name, pg_dtype_name(t->dtype));
        return true;
    }
    const int64_t O = t->shape[0], C = t->shape[1];
    uint8_t *dst = pg_tensor_sink_alloc(sink, (size_t)(O * C * 3) * es);
    if (!dst) {
        *st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
        return true;
    }
    const uint8_t *src = t->data;
    for (int64_t o = 0; o < O; o++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t k = 0; k < 3; k++)
                memcpy(dst + (size_t)((o * 3 + k) * C + c) * es,
                       src + (size_t)((o * C + c) * 3 + k) * es, es);
    pg_tensor v = *t;
    v.data = dst;
    v.ndim = 2;
    v.shape[1] = 3 * C;
    v.shape[2] = 0;
    *st = pg_tensor_sink_add(sink, &v, t->name);
    return true;
}

#define G(hf, d0, d1, req)                                                                         \
    { hf, NULL, d0, d1, req, 0, false, false }
#define ENC(hf, d0, d1, lin)                                                                       \
    { hf, NULL, d0, d1, PG_REQ_ALWAYS, PG_TENSOR_ENCODER_LAYER, lin, false }
#define DEC(hf, d0, d1, lin)                                                                       \
    { hf, NULL, d0, d1, PG_REQ_ALWAYS, PG_TENSOR_DECODER_LAYER, lin, false }
#define ATTN(S, a)                                                                                 \
    S(a ".q_proj.weight", PG_DIM_HIDDEN, PG_DIM_HIDDEN, true),                                     \
        S(a ".q_proj.bias", PG_DIM_HIDDEN, PG_DIM_NONE, false),                                    \
        S(a ".k_proj.weight", PG_DIM_HIDDEN, PG_DIM_HIDDEN, true),                                 \
        S(a ".v_proj.weight", PG_DIM_HIDDEN, PG_DIM_HIDDEN, true),                                 \
        S(a ".v_proj.bias", PG_DIM_HIDDEN, PG_DIM_NONE, false),                                    \
        S(a ".out_proj.weight", PG_DIM_HIDDEN, PG_DIM_HIDDEN, true),                               \
        S(a ".out_proj.bias", PG_DIM_HIDDEN, PG_DIM_NONE, false)
#define NORM(S, n)                                                                                 \
    S(n ".weight", PG_DIM_HIDDEN, PG_DIM_NONE, false),                                             \
        S(n ".bias", PG_DIM_HIDDEN, PG_DIM_NONE, false)

/* transformers' WhisperForConditionalGeneration names (the conv weights in
 * the canonical layout above). */
static const pg_arch_tensor TENSORS[] = {
    G("model.encoder.conv1.weight", PG_DIM_HIDDEN, PG_DIM_MELS_K3, PG_REQ_ALWAYS),
    G("model.encoder.conv1.bias", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_ALWAYS),
    G("model.encoder.conv2.weight", PG_DIM_HIDDEN, PG_DIM_HIDDEN_K3, PG_REQ_ALWAYS),
    G("model.encoder.conv2.bias", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_ALWAYS),
    G("model.encoder.embed_positions.weight", PG_DIM_SOURCE_POS, PG_DIM_HIDDEN, PG_REQ_ALWAYS),
    G("model.encoder.layer_norm.weight", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_ALWAYS),
    G("model.encoder.layer_norm.bias", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_ALWAYS),
    G("model.decoder.embed_tokens.weight", PG_DIM_VOCAB, PG_DIM_HIDDEN, PG_REQ_ALWAYS),
    G("model.decoder.embed_positions.weight", PG_DIM_POSITIONS, PG_DIM_HIDDEN, PG_REQ_ALWAYS),
    G("model.decoder.layer_norm.weight", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_ALWAYS),
    G("model.decoder.layer_norm.bias", PG_DIM_HIDDEN, PG_DIM_NONE, PG_REQ_ALWAYS),
    G("proj_out.weight", PG_DIM_VOCAB, PG_DIM_HIDDEN, PG_REQ_UNLESS_TIED),
    ATTN(ENC, "self_attn"),
    NORM(ENC, "self_attn_layer_norm"),
    NORM(ENC, "final_layer_norm"),
    ENC("fc1.weight", PG_DIM_ENC_FFN, PG_DIM_HIDDEN, true),
    ENC("fc1.bias", PG_DIM_ENC_FFN, PG_DIM_NONE, false),
    ENC("fc2.weight", PG_DIM_HIDDEN, PG_DIM_ENC_FFN, true),
    ENC("fc2.bias", PG_DIM_HIDDEN, PG_DIM_NONE, false),
    ATTN(DEC, "self_attn"),
    NORM(DEC, "self_attn_layer_norm"),
    ATTN(DEC, "encoder_attn"),
    NORM(DEC, "encoder_attn_layer_norm"),
    NORM(DEC, "final_layer_norm"),
    DEC("fc1.weight", PG_DIM_FFN, PG_DIM_HIDDEN, true),
    DEC("fc1.bias", PG_DIM_FFN, PG_DIM_NONE, false),
    DEC("fc2.weight", PG_DIM_HIDDEN, PG_DIM_FFN, true),
    DEC("fc2.bias", PG_DIM_HIDDEN, PG_DIM_NONE, false),
    {0},
};

static const char *const WHISPER_HF[] = {"WhisperForConditionalGeneration", NULL};
static const char *const WHISPER_TYPES[] = {"whisper", NULL};
/* the common fields read the decoder's (the text model, as text_config for
 * multimodal checkpoints); transformers maps hidden_size and
 * num_attention_heads to the encoder's, which have the same width */
static const char *const WHISPER_ATTRS[][2] = {
    {"hidden_size", "d_model"},
    {"num_hidden_layers", "decoder_layers"},
    {"num_attention_heads", "decoder_attention_heads"},
    {"intermediate_size", "decoder_ffn_dim"},
    {"max_position_embeddings", "max_target_positions"},
    {NULL, NULL},
};

const pg_arch pg_arch_whisper = {
    .name = "whisper",
    .hf_architectures = WHISPER_HF,
    .hf_model_types = WHISPER_TYPES,
    .gguf_name = NULL,
    .tensors = TENSORS,
    .hf_attribute_map = WHISPER_ATTRS,
    .parse_hf = parse_hf,
    .hf_rewrite = hf_rewrite,
    .create = create,
};
