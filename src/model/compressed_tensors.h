/* Pre-quantized Hugging Face checkpoints in the compressed-tensors format
 * (neuralmagic/compressed-tensors, as written by llm-compressor and read by
 * vLLM's CompressedTensorsConfig): config.json carries
 *   "quantization_config": {"quant_method": "compressed-tensors",
 *     "format": "int-quantized" | "pack-quantized",
 *     "config_groups": {"group_0": {"targets": ["Linear"],
 *        "weights": {"num_bits": 8|4, "type": "int", "symmetric": true,
 *                    "strategy": "channel"|"group", "group_size": G},
 *        "input_activations": {"num_bits": 8, "type": "int", "symmetric": true,
 *                              "strategy": "token", "dynamic": true} | null}},
 *     "ignore": ["lm_head", "re:<regex>"]}
 * and each quantized linear layer X has instead of X.weight:
 *   int-quantized:  X.weight        int8 [N, K] (also "naive-quantized", its
 *                   alias; int4 schemes then hold values in [-8, 7])
 *   pack-quantized: X.weight_packed int32 [N, ceil(K / 8)]: value k of a row
 *                   is bits 4*(k%8)..4*(k%8)+3 of word k/8 (little end
 *                   first), stored offset by +8 (code = q + 8, q in [-8, 7]);
 *                   X.weight_shape int64 [2] = {N, K}
 *                   (int32 in compressed-tensors' compression_param_info,
 *                   int64 as torch.tensor(weight.shape) writes it: both read)
 *   both:           X.weight_scale  f32/f16/bf16 [N, 1] (channel; [N] also
 *                   read) or [N, ceil(K / G)] (group);  W = scale * q
 *                   (symmetric: no zero point).
 * compressed-tensors' own quantizer (calculate_qparams) sets a symmetric
 * scale to max|w| / ((q_max - q_min) / 2) = max|w| / 127.5 (int8) or / 7.5
 * (int4) and clamps rint(w / scale) to [q_min, q_max] = [-128, 127] /
 * [-8, 7]; any q in that range is read. Not supported, with a one-line
 * error naming the field or tensor: asymmetric weights (X.weight_zero_point),
 * activation-order group indices (actorder "group", X.weight_g_idx), float
 * (FP8/FP4) types, bits other than 4/8, tensor/block strategies, static
 * activation scales, several config groups.
 * pagoda runs them on its W8A8 / W4A8 kernels (kernels/qgemm.h) with
 * dynamic per-token int8 activations; weight-only schemes (no
 * input_activations, e.g. W4A16) are accepted and also run with int8
 * activations. */
#ifndef PAGODA_MODEL_COMPRESSED_TENSORS_H
#define PAGODA_MODEL_COMPRESSED_TENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/qgemm.h"
#include "model/source.h"

typedef enum pg_ct_format {
    PG_CT_NONE = 0,      /* no (or another) quantization_config */
    PG_CT_INT_QUANTIZED, /* weights as int8 (int-quantized / naive-quantized) */
    PG_CT_PACK_QUANTIZED /* int4 (or int8) packed into int32 words */
} pg_ct_format;

typedef struct pg_ct_config {
    pg_ct_format format;
    int bits;         /* 8 or 4 */
    int64_t group;    /* 0: per channel */
    bool act_dynamic; /* input_activations: dynamic per-token int8 */
    int n_ignore;
    char **ignore; /* layer names, or "re:<POSIX ERE>" matched from the start */
    int n_targets;
    char **targets; /* "Linear" (every linear layer), layer names or "re:" */
} pg_ct_config;

/* Parse config.json text (path only for messages). A config without
 * quantization_config, or with another quant_method, gives format
 * PG_CT_NONE and PAGODA_OK. Errors: PAGODA_ERR_FORMAT (bad JSON or field
 * types), PAGODA_ERR_UNSUPPORTED (asymmetric, float, not 4/8 bits,
 * strategy other than channel/group, group size not a multiple of 32,
 * static or non-token activation scales, several config groups), with one
 * line naming the field. Free with pg_ct_config_free. */
pagoda_status pg_ct_config_parse(const char *json, size_t len, const char *path, pg_ct_config *out);
void pg_ct_config_free(pg_ct_config *c);

/* True if layer `name` (e.g. "lm_head", "model.layers.0.mlp.down_proj") is
 * in the ignore list (exact name, or a "re:" regex matching from the start). */
bool pg_ct_ignored(const pg_ct_config *c, const char *name);

/* True if linear layer `name` (e.g. "model.layers.0.mlp.down_proj",
 * "lm_head") is stored quantized: it matches a target ("Linear", its name or
 * a "re:" pattern; no targets = "Linear") and is not ignored. */
bool pg_ct_quantized(const pg_ct_config *c, const char *name);

/* The tensors of one quantized layer in a model source. */
typedef struct pg_ct_layer {
    const pg_tensor *weight; /* X.weight (I8) or X.weight_packed (I32) */
    const pg_tensor *shape;  /* X.weight_shape (pack-quantized), else NULL */
    const pg_tensor *scale;  /* X.weight_scale */
    int64_t N, K;
} pg_ct_layer;

/* Find and check the tensors of quantized layer `layer` (no ".weight"
 * suffix) whose dense weight would be [N, K]: present, dtypes and shapes as
 * above, weight_shape == {N, K}, no X.weight_zero_point / X.weight_g_idx.
 * Errors (one line naming the tensor): PAGODA_ERR_FORMAT (missing,
 * wrong dtype or shape), PAGODA_ERR_UNSUPPORTED (zero points, g_idx). */
pagoda_status pg_ct_find_layer(const pg_ct_config *c, const pg_model_source *src, const char *layer,
                               int64_t N, int64_t K, pg_ct_layer *out);

/* Unpack one layer: `weight` is X.weight (int-quantized, I8 [N, K]) or
 * X.weight_packed (I32 [N, ceil(K/8)]), `shape` X.weight_shape (I64 [2];
 * NULL for int-quantized), `scale` X.weight_scale. Writes q [N*K] and
 * s [N * ngroups] (caller's buffers, sized from pg_ct_layer_shape) and fills
 * *out. Errors: PAGODA_ERR_FORMAT (dtypes or shapes inconsistent with the
 * config, naming the tensor). */
pagoda_status pg_ct_unpack(const pg_ct_config *c, const pg_tensor *weight, const pg_tensor *shape,
                           const pg_tensor *scale, int8_t *q, float *s, pg_qweight *out);

/* N and K of a layer from its tensors (weight_shape for pack-quantized).
 * Errors: PAGODA_ERR_FORMAT. */
pagoda_status pg_ct_layer_shape(const pg_ct_config *c, const pg_tensor *weight,
                                const pg_tensor *shape, int64_t *N, int64_t *K);

#endif
