/* Hugging Face model directory metadata: config.json, generation_config.json
 * and tokenizer_config.json (chat template). Field meanings follow
 * transformers' LlamaConfig / MistralConfig / Qwen3Config and GenerationConfig. */
#ifndef PAGODA_MODEL_HF_CONFIG_H
#define PAGODA_MODEL_HF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "model/source.h"

/* Reset to "unknown": zeros, bos -1, eos list empty, rope_theta 10000,
 * rms_norm_eps 1e-6, torch_dtype PG_DTYPE_COUNT (= not given). */
void pg_model_config_init(pg_model_config *cfg);
/* All -1 / NaN. */
void pg_generation_defaults_init(pg_generation_defaults *gen);
/* Add an eos id to cfg->eos_token_ids unless present (up to 7, -1 terminated). */
void pg_model_config_add_eos(pg_model_config *cfg, int id);

/* Parse config.json text (`path` is only for messages). The architecture
 * (architectures[0], or a model_type) must be in the registry
 * (model/arch.h), which sets cfg->arch and may parse more fields
 * (pg_arch.parse_hf); head_dim defaults to hidden/heads, num_key_value_heads
 * to heads; rope_scaling null/"default"/"llama3"/"linear"/"yarn" (key
 * rope_type or type); eos_token_id an int or a list; sliding_window int or
 * null; torch_dtype (or dtype) float32/float16/bfloat16; transformers 5's
 * "rope_parameters" (rope_type, rope_theta, factors) in place of
 * rope_scaling / rope_theta.
 * Errors: PAGODA_ERR_FORMAT (bad JSON, missing or ill-typed field, heads not
 * a multiple of kv heads), PAGODA_ERR_UNSUPPORTED (architecture, rope
 * scaling type). */
pagoda_status pg_hf_config_parse(const char *json, size_t len, const char *path,
                                 pg_model_config *cfg);

/* Fields of a config.json object for architectures' parse_hf hooks: an
 * absent or null key gives def (or PAGODA_ERR_FORMAT "missing 'key'" when
 * required); a value of the wrong type or out of [lo, hi] is
 * PAGODA_ERR_FORMAT naming `path` and the key. */
struct cJSON;
pagoda_status pg_hf_get_int(const struct cJSON *o, const char *key, const char *path, long long lo,
                            long long hi, bool required, int def, int *out);
pagoda_status pg_hf_get_float(const struct cJSON *o, const char *key, const char *path,
                              bool required, float def, float *out);
/* "layer_types": a list of num_layers (<= 256) strings, each `marked` (its
 * bit l is set in bits[4]) or `other`. Absent / null: *present false, bits
 * untouched. Errors: PAGODA_ERR_FORMAT naming the entry,
 * PAGODA_ERR_UNSUPPORTED (more than 256 layers). */
pagoda_status pg_hf_get_layer_types(const struct cJSON *o, const char *path, int num_layers,
                                    const char *marked, const char *other, uint64_t bits[4],
                                    bool *present);
/* A mixture of experts' fields: num_experts, num_experts_per_tok (<=
 * num_experts), moe_intermediate_size (required) and norm_topk_prob (default
 * norm_topk_default). Errors: PAGODA_ERR_FORMAT naming the field. */
pagoda_status pg_hf_get_moe(const struct cJSON *o, const char *path, bool norm_topk_default,
                            pg_model_config *cfg);
pagoda_status pg_hf_get_bool(const struct cJSON *o, const char *key, const char *path, bool def,
                             bool *out);

/* Parse generation_config.json: temperature, top_p, top_k, min_p,
 * repetition_penalty, max_new_tokens into gen; eos_token_id (int or list)
 * and bos_token_id are merged into cfg. Errors: PAGODA_ERR_FORMAT. */
pagoda_status pg_hf_generation_parse(const char *json, size_t len, const char *path,
                                     pg_generation_defaults *gen, pg_model_config *cfg);

/* chat_template of tokenizer_config.json: a string, or a list of
 * {name, template} from which "default" is taken (else the first). *out is
 * malloc'ed, or NULL when there is none. Errors: PAGODA_ERR_FORMAT. */
pagoda_status pg_hf_chat_template_parse(const char *json, size_t len, const char *path, char **out);

#endif
