/* pg_tokenizer behind the benchmark's tokenizer interface: see bench_tokenizer.h. */
#include "bench/bench_tokenizer.h"

#include <stdlib.h>

static bool tok_is_special(void *ctx, int32_t id) {
    return pg_tokenizer_is_special(ctx, id);
}

static pagoda_status tok_encode(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n) {
    size_t cap = len + 16;
    for (;;) {
        int32_t *buf = malloc(cap * sizeof *buf);
        if (!buf) return pg_error(PAGODA_ERR_NOMEM, "bench: no memory to encode %zu bytes", len);
        size_t got = 0;
        pagoda_status st = pg_tokenizer_encode(ctx, text, len, false, buf, cap, &got);
        if (st != PAGODA_OK) {
            free(buf);
            return st;
        }
        if (got <= cap) {
            *ids = buf;
            *n = got;
            return PAGODA_OK;
        }
        free(buf);
        cap = got;
    }
}

static pagoda_status tok_decode(void *ctx, const int32_t *ids, size_t n, char **text, size_t *len) {
    size_t cap = n * 8 + 16;
    for (;;) {
        char *buf = malloc(cap);
        if (!buf) return pg_error(PAGODA_ERR_NOMEM, "bench: no memory to decode %zu ids", n);
        size_t got = 0;
        pagoda_status st = pg_tokenizer_decode(ctx, ids, n, false, buf, cap, &got);
        if (st != PAGODA_OK) {
            free(buf);
            return st;
        }
        if (got < cap) {
            *text = buf;
            *len = got;
            return PAGODA_OK;
        }
        free(buf);
        cap = got + 1;
    }
}

/* HF num_special_tokens_to_add(): the ids encoding "" with special tokens gives. */
static int32_t num_special_to_add(const pg_tokenizer *tok) {
    int32_t ids[8];
    size_t n = 0;
    if (pg_tokenizer_encode(tok, "", 0, true, ids, 8, &n) != PAGODA_OK) {
        pg_clear_error();
        return 0;
    }
    return (int32_t)n;
}

pg_bench_tokenizer pg_bench_tokenizer_wrap(pg_tokenizer *tok) {
    return (pg_bench_tokenizer){.ctx = tok,
                                .vocab_size = pg_tokenizer_vocab_size(tok),
                                .is_special = tok_is_special,
                                .encode = tok_encode,
                                .decode = tok_decode,
                                .num_special_to_add = num_special_to_add(tok)};
}
