/* libFuzzer target: model.safetensors.index.json, the shard index of a
 * sharded Hugging Face checkpoint. A model directory is made once per
 * process (config.json and two shard names linking to stories260K's
 * model.safetensors in ../shared/assets); each input becomes its index and
 * the directory is opened with pg_model_source_open (weight_map parsing,
 * shard file names, "tensor not in that shard" checks, duplicates across
 * shards). Seeds: scripts/fuzz.sh writes valid indexes for that model.
 * Dictionary: fuzz/json.dict
 */
#include <stdlib.h>

#include "fz_util.h"
#include "model/source.h"

static char *g_dir;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    char *cfg = fz_asset("llm/stories260K-hf/config.json");
    char *st = fz_asset("llm/stories260K-hf/model.safetensors");
    free(fz_link("config.json", cfg));
    free(fz_link("model-00001-of-00002.safetensors", st));
    free(fz_link("model-00002-of-00002.safetensors", st));
    free(cfg);
    free(st);
    g_dir = fz_path("");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    free(fz_write("model.safetensors.index.json", data, size));
    pg_model_source *src = NULL;
    if (pg_model_source_open(g_dir, &src) == PAGODA_OK) pg_model_source_free(src);
    return 0;
}
