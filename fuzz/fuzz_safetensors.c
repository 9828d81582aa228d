/* libFuzzer target: a safetensors file (u64 header length, JSON header
 * with __metadata__ and the tensor table, data buffer). The input is written
 * to a file and opened with pg_safetensors_open; every tensor is looked up
 * by name and its first and last byte read. Seeds: the asset models'
 * model.safetensors headers (scripts/fuzz.sh).
 * Dictionary: fuzz/json.dict
 */
#include <stdlib.h>

#include "fz_util.h"
#include "model/safetensors.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

static volatile uint64_t g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *path = fz_write("model.safetensors", data, size);
    pg_safetensors *st = NULL;
    if (pg_safetensors_open(path, &st) == PAGODA_OK) {
        for (size_t i = 0; i < pg_safetensors_n_tensors(st); i++) {
            const pg_tensor *t = pg_safetensors_tensor_at(st, i);
            g_sink += (uint64_t)(pg_safetensors_find(st, t->name) == t);
            if (t->nbytes) {
                const uint8_t *d = t->data;
                g_sink += d[0] + d[t->nbytes - 1];
            }
            g_sink += (uint64_t)(pg_safetensors_dtype_name(t->dtype) != NULL);
        }
        pg_safetensors_close(st);
    }
    free(path);
    return 0;
}
