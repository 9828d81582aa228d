/* Tokenizer from a GGUF file's tokenizer.ggml.* metadata (keys as written
 * by llama.cpp's convert_hf_to_gguf.py / gguf-py constants). The metadata
 * is read with the GGUF reader (model/gguf.h); vocab.c builds the model. */
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/vocab.h"

static int32_t opt_id(const pg_gguf *g, const char *key) {
    int64_t v;
    if (pg_gguf_get_int_or(g, key, -1, &v)) return -1;
    return (v < 0 || v > INT32_MAX) ? -1 : (int32_t)v;
}

static int opt_flag(const pg_gguf *g, const char *key) {
    if (pg_gguf_find_key(g, key) < 0) return -1;
    bool b = false;
    if (pg_gguf_get_bool(g, key, &b)) return -1;
    return b ? 1 : 0;
}

pagoda_status pg_tok_load_gguf(const char *path, pg_tokenizer **out) {
    *out = NULL;
    pg_gguf *g = NULL;
    pagoda_status st = pg_gguf_open(path, &g);
    if (st) return st;
    pg_vocab_spec s;
    memset(&s, 0, sizeof s);
    s.what = path;
    const char **tokens = NULL, **merges = NULL;
    size_t *tlens = NULL, *mlens = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    pg_gguf_array ta, sa, ya, ma;

    if ((st = pg_gguf_get_str(g, "tokenizer.ggml.model", &s.model, NULL))) {
        st = pg_error(st == PAGODA_ERR_NOT_FOUND ? PAGODA_ERR_NOT_FOUND : st,
                      "%s: no tokenizer in this GGUF (tokenizer.ggml.model missing)", path);
        goto done;
    }
    if (pg_gguf_find_key(g, "tokenizer.ggml.pre") >= 0 &&
        (st = pg_gguf_get_str(g, "tokenizer.ggml.pre", &s.pre, NULL)))
        goto done;
    if ((st = pg_gguf_get_array(g, "tokenizer.ggml.tokens", &ta))) goto done;
    if (ta.type != PG_GGUF_STRING || ta.n == 0 || ta.n > INT32_MAX) {
        st = pg_error(PAGODA_ERR_FORMAT, "%s: tokenizer.ggml.tokens is not a non-empty string array", path);
        goto done;
    }
    s.n_tokens = (int32_t)ta.n;
    tokens = calloc(ta.n, sizeof *tokens);
    tlens = calloc(ta.n, sizeof *tlens);
    if (!tokens || !tlens) goto oom;
    for (uint64_t i = 0; i < ta.n; i++) tokens[i] = pg_gguf_array_str(&ta, i, &tlens[i]);
    s.tokens = tokens;
    s.token_lens = tlens;
    if (pg_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) {
        if ((st = pg_gguf_get_array(g, "tokenizer.ggml.scores", &sa))) goto done;
        if (sa.n != ta.n) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: %llu scores for %llu tokens", path,
                          (unsigned long long)sa.n, (unsigned long long)ta.n);
            goto done;
        }
        if (!(scores = malloc(sa.n * sizeof *scores))) goto oom;
        for (uint64_t i = 0; i < sa.n; i++) scores[i] = (float)pg_gguf_array_float(&sa, i);
        s.scores = scores;
    }
    if (pg_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        if ((st = pg_gguf_get_array(g, "tokenizer.ggml.token_type", &ya))) goto done;
        if (ya.n != ta.n) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: %llu token types for %llu tokens", path,
                          (unsigned long long)ya.n, (unsigned long long)ta.n);
            goto done;
        }
        if (!(types = malloc(ya.n * sizeof *types))) goto oom;
        for (uint64_t i = 0; i < ya.n; i++) types[i] = (int32_t)pg_gguf_array_int(&ya, i);
        s.types = types;
    }
    if (pg_gguf_find_key(g, "tokenizer.ggml.merges") >= 0) {
        if ((st = pg_gguf_get_array(g, "tokenizer.ggml.merges", &ma))) goto done;
        if (ma.type != PG_GGUF_STRING || ma.n > INT32_MAX) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: tokenizer.ggml.merges is not a string array", path);
            goto done;
        }
        merges = calloc(ma.n ? ma.n : 1, sizeof *merges);
        mlens = calloc(ma.n ? ma.n : 1, sizeof *mlens);
        if (!merges || !mlens) goto oom;
        for (uint64_t i = 0; i < ma.n; i++) merges[i] = pg_gguf_array_str(&ma, i, &mlens[i]);
        s.n_merges = (int32_t)ma.n;
        s.merges = merges;
        s.merge_lens = mlens;
    } else if (!strcmp(s.model, "gpt2")) {
        st = pg_error(PAGODA_ERR_FORMAT, "%s: gpt2 tokenizer without tokenizer.ggml.merges", path);
        goto done;
    }
    s.bos_id = opt_id(g, "tokenizer.ggml.bos_token_id");
    s.eos_id = opt_id(g, "tokenizer.ggml.eos_token_id");
    s.unk_id = opt_id(g, "tokenizer.ggml.unknown_token_id");
    s.pad_id = opt_id(g, "tokenizer.ggml.padding_token_id");
    s.add_bos = opt_flag(g, "tokenizer.ggml.add_bos_token");
    s.add_eos = opt_flag(g, "tokenizer.ggml.add_eos_token");
    s.add_space_prefix = opt_flag(g, "tokenizer.ggml.add_space_prefix");
    if (pg_gguf_find_key(g, "tokenizer.chat_template") >= 0)
        (void)pg_gguf_get_str(g, "tokenizer.chat_template", &s.chat_template, NULL);
    pg_clear_error();
    st = pg_tokenizer_from_vocab(&s, out);
    goto done;
oom:
    st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
done:
    free(tokens);
    free(tlens);
    free(merges);
    free(mlens);
    free(scores);
    free(types);
    pg_gguf_close(g);
    return st;
}
