/* Whisper (Radford et al. 2022, "Robust Speech Recognition via Large-Scale
 * Weak Supervision"): the encoder-decoder speech model, as building blocks
 * the engine calls: the encoder over one 30-second log-mel window, the
 * cross-attention K/V of every decoder layer computed once from the encoder
 * output, and batched decoder steps over a paged self-attention KV cache and
 * the paged cross-attention K/V.
 *
 * References: openai/whisper whisper/model.py (AudioEncoder, TextDecoder,
 * ResidualAttentionBlock, MultiHeadAttention) and transformers'
 * modeling_whisper.py (WhisperForConditionalGeneration: the tensor names
 * read here). The math, in order:
 *   encoder(mel [n_mels][3000]):
 *     h = GELU(conv1(mel)), conv1: kernel 3, padding 1   -> [3000][d]
 *     h = GELU(conv2(h)),   conv2: kernel 3, stride 2, padding 1 -> [1500][d]
 *     x = h + embed_positions (the file's table: sinusoids rounded as stored)
 *     per layer: x += out(attn(LN1(x))) (non-causal, all 1500 positions);
 *                x += fc2(GELU(fc1(LN2(x))))
 *     out = LN(x)
 *   decoder(tokens, positions):
 *     x = embed_tokens[token] + embed_positions[position]
 *     per layer: x += out(self_attn(LN1(x)))      (causal, paged KV cache)
 *                x += out_c(cross_attn(LNc(x)))   (over the encoder output)
 *                x += fc2(GELU(fc1(LN2(x))))
 *     logits = LN(x) embed_tokens^T (proj_out tied; its own weight when not)
 *   attention: q, v and out have biases, k has none; scores q.k / sqrt(head_dim)
 *   (transformers scales q by head_dim^-0.5, openai q and k by head_dim^-0.25:
 *   the same); LayerNorm eps 1e-5 in f32 with weight and bias; GELU exact (erf).
 * Every matmul is a packed GEMM (model/linear.h: BF16 / F32 / quantized per
 * the options); the convolutions are GEMMs over three consecutive frames
 * (the source stores conv weights k-major, [d, 3 * in], see whisper.c), and
 * attention is the paged kernel (kernels/attention.h) in its causal mode for
 * the decoder's self-attention and its non-causal mode for the encoder and
 * the cross-attention.
 *
 * The cross-attention K/V layout: per decoder layer a pg_paged_kv of the
 * decoder's heads x head_dim, the same page shape as the self-attention
 * cache, so it can live in the engine's paged KV pool: a request owns
 * ceil(n_audio_ctx / block_size) blocks (one block table shared by all
 * decoder layers, like a KV cache group) and position j of the encoder output
 * sits in block table[j / block_size] at offset j % block_size. The decoder
 * reads them with non-causal attention (seq_len n_audio_ctx).
 *
 * pg_model_load of a Whisper checkpoint gives the engine's view of it (the
 * architecture's create in whisper.c): decoder self-attention layers (FULL
 * caches) then cross-attention layers (CROSS caches), pg_model_forward =
 * pg_whisper_decode, and the encoder through the model's encoder ops
 * (model/model.h "encoder-decoder models"). */
#ifndef PAGODA_MODEL_WHISPER_H
#define PAGODA_MODEL_WHISPER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/attention.h"
#include "model/model.h"
#include "model/source.h"

typedef struct pg_whisper pg_whisper;
typedef struct pg_whisper_ws pg_whisper_ws;

/* The model's shapes (openai/whisper ModelDimensions). */
typedef struct pg_whisper_dims {
    int32_t n_mels;      /* num_mel_bins: 80, or 128 (large-v3) */
    int32_t n_frames;    /* mel frames of one window: 2 * n_audio_ctx (3000) */
    int32_t n_audio_ctx; /* max_source_positions: encoder output rows (1500) */
    int32_t d_model;
    int32_t enc_layers, enc_heads, enc_ffn;
    int32_t dec_layers, dec_heads, dec_ffn;
    int32_t enc_head_dim, dec_head_dim; /* d_model / heads */
    int32_t n_text_ctx;                 /* max_target_positions (448) */
    int32_t vocab;
} pg_whisper_dims;

/* Load a WhisperForConditionalGeneration checkpoint from `src` (the source
 * has validated every tensor against the config): bind, check and pack the
 * weights under `o` (NULL = defaults: F32 weights on the F32 GEMM, F16/BF16
 * on the BF16 GEMM; compute F32 for exact f32 math; quant_bits 8/4 quantize
 * the linear layers, the conv stem stays float). `src` must outlive *out.
 * Errors: PAGODA_ERR_UNSUPPORTED (not a Whisper source, dtype, options),
 * PAGODA_ERR_FORMAT (shapes), PAGODA_ERR_INVALID_ARG, PAGODA_ERR_NOMEM. */
pagoda_status pg_whisper_load(const pg_model_source *src, const pg_model_options *o,
                              pg_whisper **out);
void pg_whisper_free(pg_whisper *w);
const pg_whisper_dims *pg_whisper_get_dims(const pg_whisper *w);
/* Weight bytes one decoder step streams (decoder layers and the logits
 * head; not the encoder, the cross K/V projections or the embedding rows). */
size_t pg_whisper_decoder_weight_bytes(const pg_whisper *w);

/* Activations and scratch for the encoder (one window at a time) and for
 * decoder steps within lim (max_tokens, max_seqs: logit rows too,
 * block_size and kv_dtype of the caches the decoder is given; the encoder's
 * own attention K/V scratch uses kv_dtype too). Allocated once; no call
 * below allocates. One workspace serves one call at a time. Errors:
 * PAGODA_ERR_INVALID_ARG, PAGODA_ERR_NOMEM. */
pagoda_status pg_whisper_ws_create(const pg_whisper *w, const pg_step_limits *lim,
                                   pg_whisper_ws **out);
void pg_whisper_ws_free(pg_whisper_ws *ws);
size_t pg_whisper_ws_bytes(const pg_whisper_ws *ws);

/* ---- encoder --------------------------------------------------------------------- */

/* The encoder runs as pg_whisper_encoder_steps(w) pieces so that an engine
 * can interleave them with other work and bound how long one runs: step 0
 * is the conv stem + positions (reads mel, writes x); then per layer 1 +
 * 2C pieces, C = ceil(n_audio_ctx / 512) row chunks: LN1 and the q | k | v
 * GEMM of every row (K/V and q kept in the state), C attention pieces
 * (queries of one chunk over all keys, out GEMM into x's rows), C MLP
 * pieces (LN2, fc1, GELU, fc2 of one chunk's rows into x); the last step
 * also applies the final LayerNorm. Every kernel is row-independent, so the
 * split changes no bit. The state between steps is the caller's (per
 * window, pg_whisper_encoder_state_bytes: x [n_audio_ctx][d_model] f32
 * first, then q and the layer's K/V): steps of different windows may
 * interleave on one workspace; after the last step the state starts with
 * the encoder output.
 *   mel [n_mels][n_frames] f32 (pg_log_mel's layout, one 3000-frame window),
 *       read by step 0 only (may be NULL otherwise).
 * pg_whisper_encoder_step_rows: the rows a piece computes (512, or
 * n_audio_ctx if smaller): its cost in an engine's token budget.
 * Errors: PAGODA_ERR_INVALID_ARG (step out of range, NULL arrays), errors
 * of the kernels. */
int32_t pg_whisper_encoder_steps(const pg_whisper *w);
int32_t pg_whisper_encoder_step_rows(const pg_whisper *w);
size_t pg_whisper_encoder_state_bytes(const pg_whisper *w);
pagoda_status pg_whisper_encode_step(const pg_whisper *w, pg_whisper_ws *ws, int32_t step,
                                     const float *mel, void *state);
/* All steps: out [n_audio_ctx][d_model] = encoder(mel). */
pagoda_status pg_whisper_encode(const pg_whisper *w, pg_whisper_ws *ws, const float *mel,
                                float *out);

/* ---- cross-attention K/V ------------------------------------------------------------ */

/* K = enc W_k^T, V = enc W_v^T + b_v of every decoder layer for one request
 * (enc may be a finished encoder state: its output comes first),
 * written into its cross-attention blocks: layer l's K/V of encoder position
 * j go to kv[l], block block_table[j / bs] at offset j % bs (bs =
 * kv[l]->block_size; converted to BF16 for a BF16 cache).
 *   enc [n_audio_ctx][d_model] f32: the encoder output;
 *   block_table: ceil(n_audio_ctx / bs) block ids;
 *   kv [dec_layers]: each num_kv_heads = dec_heads, head_dim = dec_head_dim.
 * Errors: PAGODA_ERR_INVALID_ARG (cache shapes, a block id out of range). */
pagoda_status pg_whisper_cross_kv(const pg_whisper *w, pg_whisper_ws *ws, const float *enc,
                                  const int32_t *block_table, pg_paged_kv *const *kv);

/* ---- decoder ------------------------------------------------------------------------ */

/* One decoder layer's cross-attention K/V in a step: the layer's paged K/V
 * and, per request of the batch, its cross block table (pg_whisper_cross_kv
 * filled them). */
typedef struct pg_whisper_cross {
    const pg_paged_kv *kv;
    const int32_t *const *block_tables; /* [num_seqs] */
} pg_whisper_cross;

/* One decoder step over a flattened batch (model/model.h pg_batch: token
 * ids, positions < n_text_ctx, query_start_loc, seq_lens, logit rows, and
 * per decoder layer b->layers[l] its self-attention paged KV cache, block
 * tables and slot mapping, written here for the step's tokens); cross
 * [dec_layers] the cross-attention K/V of the same requests.
 * logits [num_logits][vocab] f32. A row's logits do not depend on the other
 * rows of the step (batch invariant kernels). Errors: PAGODA_ERR_INVALID_ARG
 * (batch beyond the workspace, token or position out of range, a cache
 * missing), errors of the kernels. */
pagoda_status pg_whisper_decode(const pg_whisper *w, pg_whisper_ws *ws, const pg_batch *b,
                                const pg_whisper_cross *cross, float *logits);

#endif
