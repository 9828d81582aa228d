/* Tokenizer from a GGUF file's tokenizer.ggml.* metadata (keys as written
 * by llama.cpp's convert_hf_to_gguf.py / gguf-py constants). The metadata
 * is read with the GGUF reader (model/gguf.h); vocab.c builds the model. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "model/gguf.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/vocab.h"

/* A special-token id key: -1 when absent. A value of the wrong type is an
 * error (llama.cpp's get_key refuses the file: "key has wrong type"); an id
 * outside the vocabulary is ignored with a warning, as llama.cpp does ("bad
 * special token ... using default id"). */
static pagoda_status opt_id(const pg_gguf *g, const char *path, const char *key, int32_t n_tokens,
                            int32_t *out) {
    *out = -1;
    int64_t at = pg_gguf_find_key(g, key);
    if (at < 0) return PAGODA_OK;
    int64_t v;
    if (pg_gguf_get_int(g, key, &v))
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: %s is a %s, but a token id must be an integer (u32, as "
                        "convert_hf_to_gguf.py writes it; llama.cpp refuses this file too); fix: "
                        "rewrite the key as u32, e.g. with gguf-py's gguf_new_metadata.py",
                        path, key, pg_gguf_type_name(pg_gguf_kv_type(g, (size_t)at)));
    if (v == -1 || v == UINT32_MAX) return PAGODA_OK; /* llama.cpp's LLAMA_TOKEN_NULL: none */
    if (v < 0 || v >= n_tokens) {
        PG_WARN("%s: %s = %lld is outside the vocabulary (%d tokens, ids 0..%d); pagoda ignores "
                "it (no such special token; llama.cpp also warns and falls back). Fix: set it to "
                "the token's id, e.g. with gguf-py's gguf_set_metadata.py",
                path, key, (long long)v, n_tokens, n_tokens - 1);
        return PAGODA_OK;
    }
    *out = (int32_t)v;
    return PAGODA_OK;
}

static pagoda_status opt_flag(const pg_gguf *g, const char *path, const char *key, int *out) {
    *out = -1;
    int64_t at = pg_gguf_find_key(g, key);
    if (at < 0) return PAGODA_OK;
    if (pg_gguf_kv_type(g, (size_t)at) != PG_GGUF_BOOL)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: %s is a %s, but it must be a bool (llama.cpp refuses this file "
                        "too); fix: rewrite the key as a bool, e.g. with gguf-py's "
                        "gguf_new_metadata.py",
                        path, key, pg_gguf_type_name(pg_gguf_kv_type(g, (size_t)at)));
    bool b = false;
    if (pg_gguf_get_bool(g, key, &b)) return PAGODA_ERR_FORMAT;
    *out = b ? 1 : 0;
    return PAGODA_OK;
}

/* tokenizer.ggml.scores / token_type must have the element type llama.cpp
 * reads them as (it takes the array's bytes as float32 / int32 whatever the
 * declared type, so another type is garbage there); pagoda refuses them. */
static pagoda_status want_elem(const char *path, const char *key, const pg_gguf_array *a,
                               pg_gguf_type want) {
    if (a->type == want) return PAGODA_OK;
    return pg_error(PAGODA_ERR_FORMAT,
                    "%s: %s is an array of %s, but it must hold %s (llama.cpp reads its bytes as "
                    "%s, so this file is broken there too); fix: re-convert the model with "
                    "llama.cpp's convert_hf_to_gguf.py",
                    path, key, pg_gguf_type_name(a->type), pg_gguf_type_name(want),
                    pg_gguf_type_name(want));
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
        st = pg_error(PAGODA_ERR_FORMAT,
                      "%s: tokenizer.ggml.tokens is not a non-empty string array", path);
        goto done;
    }
    s.n_tokens = (int32_t)ta.n;
    tokens = calloc(ta.n, sizeof *tokens);
    tlens = calloc(ta.n, sizeof *tlens);
    if (!tokens || !tlens) goto oom;
    for (uint64_t i = 0; i < ta.n; i++)
        tokens[i] = pg_gguf_array_str(&ta, i, &tlens[i]);
    s.tokens = tokens;
    s.token_lens = tlens;
    if (pg_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) {
        if ((st = pg_gguf_get_array(g, "tokenizer.ggml.scores", &sa))) goto done;
        if ((st = want_elem(path, "tokenizer.ggml.scores", &sa, PG_GGUF_F32))) goto done;
        if (sa.n != ta.n) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: %llu scores for %llu tokens", path,
                          (unsigned long long)sa.n, (unsigned long long)ta.n);
            goto done;
        }
        if (!(scores = malloc(sa.n * sizeof *scores))) goto oom;
        for (uint64_t i = 0; i < sa.n; i++)
            scores[i] = (float)pg_gguf_array_float(&sa, i);
        s.scores = scores;
    }
    if (pg_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        if ((st = pg_gguf_get_array(g, "tokenizer.ggml.token_type", &ya))) goto done;
        if ((st = want_elem(path, "tokenizer.ggml.token_type", &ya, PG_GGUF_I32))) goto done;
        if (ya.n != ta.n) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: %llu token types for %llu tokens", path,
                          (unsigned long long)ya.n, (unsigned long long)ta.n);
            goto done;
        }
        if (!(types = malloc(ya.n * sizeof *types))) goto oom;
        for (uint64_t i = 0; i < ya.n; i++)
            types[i] = (int32_t)pg_gguf_array_int(&ya, i);
        s.types = types;
    }
    if (pg_gguf_find_key(g, "tokenizer.ggml.merges") >= 0) {
        if ((st = pg_gguf_get_array(g, "tokenizer.ggml.merges", &ma))) goto done;
        if (ma.type != PG_GGUF_STRING || ma.n > INT32_MAX) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: tokenizer.ggml.merges is not a string array",
                          path);
            goto done;
        }
        merges = calloc(ma.n ? ma.n : 1, sizeof *merges);
        mlens = calloc(ma.n ? ma.n : 1, sizeof *mlens);
        if (!merges || !mlens) goto oom;
        for (uint64_t i = 0; i < ma.n; i++)
            merges[i] = pg_gguf_array_str(&ma, i, &mlens[i]);
        s.n_merges = (int32_t)ma.n;
        s.merges = merges;
        s.merge_lens = mlens;
    } else if (!strcmp(s.model, "gpt2")) {
        st = pg_error(PAGODA_ERR_FORMAT, "%s: gpt2 tokenizer without tokenizer.ggml.merges", path);
        goto done;
    }
    if ((st = opt_id(g, path, "tokenizer.ggml.bos_token_id", s.n_tokens, &s.bos_id)) ||
        (st = opt_id(g, path, "tokenizer.ggml.eos_token_id", s.n_tokens, &s.eos_id)) ||
        (st = opt_id(g, path, "tokenizer.ggml.unknown_token_id", s.n_tokens, &s.unk_id)) ||
        (st = opt_id(g, path, "tokenizer.ggml.padding_token_id", s.n_tokens, &s.pad_id)) ||
        (st = opt_flag(g, path, "tokenizer.ggml.add_bos_token", &s.add_bos)) ||
        (st = opt_flag(g, path, "tokenizer.ggml.add_eos_token", &s.add_eos)) ||
        (st = opt_flag(g, path, "tokenizer.ggml.add_space_prefix", &s.add_space_prefix)))
        goto done;
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
