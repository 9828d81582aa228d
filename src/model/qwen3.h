/* Qwen3 pieces the Qwen3 family's architectures share (qwen3.c,
 * qwen3_moe.c). */
#ifndef PAGODA_MODEL_QWEN3_H
#define PAGODA_MODEL_QWEN3_H

#include "model/arch.h"

/* config.json fields of Qwen3 (use_sliding_window, head_dim default 128). */
pagoda_status pg_qwen3_parse_hf(const struct cJSON *root, const char *path, pg_model_config *cfg);

/* The per-head q/k norm tensors [head_dim]. */
extern const pg_arch_tensor pg_qwen3_qk_norm_tensors[];

#endif
