/* libFuzzer target: config.json and generation_config.json (and the
 * compressed-tensors quantization_config and tokenizer_config.json's
 * chat_template, read from the same documents). The input is the
 * config.json text, optionally followed by a NUL byte and the
 * generation_config.json text, parsed in memory exactly as
 * pg_model_source_open parses them. Seeds: every config.json and
 * generation_config.json under ../shared/assets (scripts/fuzz.sh).
 * Dictionary: fuzz/json.dict
 */
#include <stdlib.h>

#include "fz_util.h"
#include "model/compressed_tensors.h"
#include "model/hf_config.h"
#include "model/source.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *gen;
    size_t gen_len, cfg_len;
    fz_split(data, size, &gen, &gen_len, &cfg_len);
    const char *cfg_text = (const char *)data;
    pg_model_config cfg;
    pg_model_config_init(&cfg);
    if (pg_hf_config_parse(cfg_text, cfg_len, "config.json", &cfg) == PAGODA_OK) {
        pg_ct_config ct;
        if (pg_ct_config_parse(cfg_text, cfg_len, "config.json", &ct) == PAGODA_OK) {
            static const char *const names[] = {"lm_head", "model.layers.0.self_attn.q_proj",
                                                "model.layers.1.mlp.down_proj", ""};
            for (size_t i = 0; i < sizeof names / sizeof *names; i++)
                pg_ct_ignored(&ct, names[i]), pg_ct_quantized(&ct, names[i]);
            pg_ct_config_free(&ct);
        }
    }
    pg_generation_defaults g;
    pg_generation_defaults_init(&g);
    if (gen) pg_hf_generation_parse((const char *)gen, gen_len, "generation_config.json", &g, &cfg);
    /* the same text as a tokenizer_config.json */
    char *tmpl = NULL;
    if (pg_hf_chat_template_parse(cfg_text, cfg_len, "tokenizer_config.json", &tmpl) == PAGODA_OK)
        free(tmpl);
    return 0;
}
