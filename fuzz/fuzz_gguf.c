/* libFuzzer target: a GGUF file (header, metadata, tensor table, data).
 * The input is written to a file and opened as every loader opens a GGUF:
 * the reader (pg_gguf_open, then every key, value and array element and
 * every tensor's first and last byte), the model source (config from the
 * `<arch>.*` keys, tensor renaming and checks), the tokenizer from the
 * `tokenizer.ggml.*` keys (then one encode/decode) and the chat template
 * from `tokenizer.chat_template`. Seeds: scripts/fuzz.sh (gen_model's tiny
 * GGUFs and the asset GGUFs' metadata).
 * Dictionary: fuzz/gguf.dict
 */
#include <stdlib.h>
#include <string.h>

#include "fz_util.h"
#include "model/gguf.h"
#include "model/source.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

static volatile uint64_t g_sink;

static void walk(const pg_gguf *g) {
    uint64_t acc = pg_gguf_version(g) + pg_gguf_alignment(g) + pg_gguf_data_offset(g);
    for (size_t i = 0; i < pg_gguf_n_kv(g); i++) {
        const char *key = pg_gguf_key_at(g, i);
        acc += strlen(key) + (uint64_t)pg_gguf_find_key(g, key);
        size_t raw_len = 0;
        const uint8_t *raw = pg_gguf_kv_raw(g, i, &raw_len);
        if (raw && raw_len) acc += raw[0] + raw[raw_len - 1];
        int64_t iv;
        double fv;
        bool bv;
        const char *sv;
        size_t sl;
        if (!pg_gguf_get_int(g, key, &iv)) acc += (uint64_t)iv;
        if (!pg_gguf_get_float(g, key, &fv)) acc += (uint64_t)(fv == fv);
        if (!pg_gguf_get_bool(g, key, &bv)) acc += bv;
        if (!pg_gguf_get_str(g, key, &sv, &sl) && sl) acc += (uint8_t)sv[sl - 1];
        pg_gguf_array a;
        if (pg_gguf_kv_type(g, i) == PG_GGUF_ARRAY && !pg_gguf_get_array(g, key, &a)) {
            uint64_t n = a.n < 4096 ? a.n : 4096;
            for (uint64_t k = 0; k <= n; k++) { /* k == n: one past the end */
                if (a.type == PG_GGUF_STRING) {
                    const char *s = pg_gguf_array_str(&a, k, &sl);
                    if (s && sl) acc += (uint8_t)s[0] + (uint8_t)s[sl - 1];
                } else {
                    acc += (uint64_t)pg_gguf_array_int(&a, k);
                    acc += (uint64_t)(pg_gguf_array_float(&a, k) > 0);
                }
            }
        }
    }
    for (size_t i = 0; i < pg_gguf_n_tensors(g); i++) {
        const pg_gguf_tensor *t = pg_gguf_tensor_at(g, i);
        acc += (uint64_t)(pg_gguf_find_tensor(g, t->name) == t);
        acc += (uint64_t)(pg_ggml_type_name(t->ggml_type) != NULL);
        if (t->nbytes) {
            const uint8_t *d = t->data;
            acc += d[0] + d[t->nbytes - 1];
        }
    }
    g_sink += acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *path = fz_write("model.gguf", data, size);
    pg_gguf *g = NULL;
    if (pg_gguf_open(path, &g) == PAGODA_OK) {
        walk(g);
        pg_gguf_close(g);

        pg_model_source *src = NULL;
        if (pg_model_source_open(path, &src) == PAGODA_OK) {
            for (size_t i = 0; i < pg_model_source_n_tensors(src); i++) {
                const pg_tensor *t = pg_model_source_tensor_at(src, i);
                g_sink += (uint64_t)(pg_model_source_tensor(src, t->name) != NULL);
            }
            pg_model_source_free(src);
        }
        pg_tokenizer *tok = NULL;
        if (pg_tokenizer_load(path, &tok) == PAGODA_OK) {
            fz_use_tokenizer(tok, NULL, 0);
            pg_tokenizer_free(tok);
        }
        pg_chat_config cc;
        memset(&cc, 0, sizeof cc);
        if (pg_chat_config_load(path, NULL, &cc) == PAGODA_OK) pg_chat_config_free(&cc);
    }
    free(path);
    return 0;
}
