/* Random-weight Whisper checkpoints of any shape, written as a Hugging Face
 * WhisperForConditionalGeneration directory (config.json and
 * model.safetensors with transformers' tensor names: conv weights [d, in, 3],
 * k_proj without bias, proj_out tied unless asked otherwise), for tests and
 * speed runs at the shapes of the published models (presets).
 *
 * Weights follow the whisper-tiny-random oracle's recipe: uniform values of
 * these standard deviations: LayerNorm weights 1 + 0.1, LayerNorm and other
 * biases 0.05, token embedding 0.1, decoder positions 0.3, other weights
 * 0.08; the encoder positions are openai/whisper's sinusoids(1500, d).
 * Deterministic in (seed, tensor name). Test and tool code (pagoda_gen). */
#ifndef PAGODA_TOOLS_GEN_WHISPER_H
#define PAGODA_TOOLS_GEN_WHISPER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"

typedef struct pg_gen_whisper_opts {
    int n_mels, d_model, enc_layers, dec_layers, enc_heads, dec_heads;
    int enc_ffn, dec_ffn; /* 0: 4 * d_model */
    int vocab;            /* 0: 51865 */
    int n_audio_ctx;      /* 0: 1500 */
    int n_text_ctx;       /* 0: 448 */
    pg_dtype dtype;       /* PG_F32, PG_F16; anything else writes PG_BF16 */
    bool untied;          /* write proj_out.weight and tie_word_embeddings false */
    uint64_t seed;
} pg_gen_whisper_opts;

/* The shapes of openai/whisper's models: "tiny", "base", "small", "medium",
 * "large-v3", "large-v3-turbo" (vocab 51865, or 51866 for large-v3*).
 * Errors: PAGODA_ERR_INVALID_ARG (unknown name). */
pagoda_status pg_gen_whisper_preset(const char *name, pg_gen_whisper_opts *o);

/* Write config.json + model.safetensors into the existing directory dir.
 * Errors: PAGODA_ERR_INVALID_ARG (shapes), PAGODA_ERR_IO, PAGODA_ERR_NOMEM. */
pagoda_status pg_gen_whisper(const pg_gen_whisper_opts *o, const char *dir);

#endif
