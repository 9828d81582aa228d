/* Inconsistent model metadata fails with one line naming the file, the key
 * and the fix, or, where the reference loaders (llama.cpp, transformers,
 * vLLM, the safetensors library) accept the file, loads with a warning that
 * says what pagoda assumed. One test per class; every corrupt file is
 * written here (tools/gen's model writer, model/gguf.h's GGUF writer, raw
 * safetensors bytes):
 *   - special-token ids outside the vocabulary: GGUF tokenizer.ggml.*_token_id
 *     (model config and tokenizer), config.json / generation_config.json
 *     bos/eos, tokenizer_config.json tokens that are not in tokenizer.json;
 *     special-token keys of the wrong type;
 *   - GGUF metadata arrays of the wrong element type (scores, token_type,
 *     Qwen3.5's per-layer recurrent_layers);
 *   - safetensors __metadata__ that is not string-to-string;
 *   - the vocabulary against the embedding (GGUF token list vs token_embd
 *     rows; a tokenizer larger, or much smaller, than the model's vocab). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "gen/gen_model.h"
#include "model/gguf.h"
#include "model/safetensors.h"
#include "model/source.h"
#include "pagoda.h"
#include "tokenizer/tokenizer.h"

/* ---- captured warnings ---- */

static char g_log[16384];
static size_t g_log_len;

static void sink(void *ctx, pg_log_level level, const char *msg) {
    (void)ctx;
    if (level < PG_LOG_WARN) return;
    int n = snprintf(g_log + g_log_len, sizeof g_log - g_log_len, "%s\n", msg);
    if (n > 0 && g_log_len + (size_t)n < sizeof g_log) g_log_len += (size_t)n;
}

static void log_reset(void) {
    g_log_len = 0;
    g_log[0] = 0;
}

/* Every needle occurs in one warning line (the line that holds the first). */
static void expect_warning(const char *const *needles, size_t n) {
    const char *line = strstr(g_log, needles[0]);
    if (!line) fail_msg("no warning with '%s'; got:\n%s", needles[0], g_log);
    while (line > g_log && line[-1] != '\n')
        line--;
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    for (size_t i = 1; i < n; i++) {
        const char *p = strstr(line, needles[i]);
        if (!p || p >= line + len)
            fail_msg("warning '%.*s' lacks '%s'", (int)len, line, needles[i]);
    }
}

#define EXPECT_WARNING(...)                                                                        \
    do {                                                                                           \
        const char *const nd_[] = {__VA_ARGS__};                                                   \
        expect_warning(nd_, sizeof nd_ / sizeof nd_[0]);                                           \
    } while (0)

static void expect_error(pagoda_status st, pagoda_status want, const char *const *needles,
                         size_t n) {
    if (st != want) fail_msg("status %d, want %d (%s)", (int)st, (int)want, pg_last_error());
    const char *msg = pg_last_error();
    for (size_t i = 0; i < n; i++)
        if (!strstr(msg, needles[i])) fail_msg("error '%s' lacks '%s'", msg, needles[i]);
}

#define EXPECT_ERROR(st, want, ...)                                                                \
    do {                                                                                           \
        const char *const nd_[] = {__VA_ARGS__};                                                   \
        expect_error((st), (want), nd_, sizeof nd_ / sizeof nd_[0]);                               \
    } while (0)

static int setup(void **state) {
    (void)state;
    pg_log_set_sink(sink, NULL);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    pg_log_set_sink(NULL, NULL);
    return 0;
}

static char *tmp_path(const char *name) {
    static char buf[8][4200];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, sizeof buf[0], "%s/%s", pg_test_tmpdir(), name);
    return p;
}

/* A tiny random Llama (vocab 512, synthetic SentencePiece vocab in the GGUF)
 * with the given special ids, as a GGUF and/or a HF directory. */
static void gen(const char *gguf, const char *hf, int bos, int eos, int vocab, const char *tokdir) {
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    o.layers = 1;
    o.bos_token_id = bos;
    o.eos_token_id = eos;
    if (vocab) o.vocab = vocab;
    o.gguf_path = gguf;
    o.hf_dir = hf;
    o.tokenizer_dir = tokdir;
    if (pg_gen_model_write(&o) != PAGODA_OK) fail_msg("gen_model: %s", pg_last_error());
}

/* Copy GGUF `from` to `to` without the keys in drop[] (NULL-terminated),
 * then add(w) appends replacements; tensors are copied as they are. */
static void gguf_rewrite(const char *from, const char *to, const char *const *drop,
                         void (*add)(pg_gguf_writer *w)) {
    pg_gguf *g;
    assert_int_equal(pg_gguf_open(from, &g), PAGODA_OK);
    pg_gguf_writer *w;
    assert_int_equal(pg_gguf_writer_create(&w), PAGODA_OK);
    for (size_t i = 0; i < pg_gguf_n_kv(g); i++) {
        bool skip = false;
        for (size_t d = 0; drop && drop[d]; d++)
            skip |= !strcmp(pg_gguf_key_at(g, i), drop[d]);
        if (skip) continue;
        size_t len;
        const uint8_t *raw = pg_gguf_kv_raw(g, i, &len);
        pg_gguf_writer_add_raw_kv(w, raw, len);
    }
    if (add) add(w);
    for (size_t i = 0; i < pg_gguf_n_tensors(g); i++) {
        const pg_gguf_tensor *t = pg_gguf_tensor_at(g, i);
        assert_int_equal(pg_gguf_writer_add_tensor(w, t->name, t->ggml_type, t->n_dims, t->ne),
                         PAGODA_OK);
    }
    assert_int_equal(pg_gguf_writer_begin(w, to), PAGODA_OK);
    for (size_t i = 0; i < pg_gguf_n_tensors(g); i++) {
        const pg_gguf_tensor *t = pg_gguf_tensor_at(g, i);
        assert_int_equal(pg_gguf_writer_write(w, t->data, t->nbytes), PAGODA_OK);
    }
    assert_int_equal(pg_gguf_writer_finish(w), PAGODA_OK);
    pg_gguf_writer_free(w);
    pg_gguf_close(g);
}

static pagoda_status open_source(const char *path, pg_model_source **src) {
    *src = NULL;
    return pg_model_source_open(path, src);
}

static bool has_eos(const pg_model_config *c, int id) {
    for (int i = 0; i < 8 && c->eos_token_ids[i] >= 0; i++)
        if (c->eos_token_ids[i] == id) return true;
    return false;
}

/* ---- class 1: GGUF special-token ids ---- */

static void add_bos_as_string(pg_gguf_writer *w) {
    pg_gguf_writer_set_str(w, "tokenizer.ggml.bos_token_id", "1");
}

static void add_add_bos_as_int(pg_gguf_writer *w) {
    pg_gguf_writer_set_u32(w, "tokenizer.ggml.add_bos_token", 1);
}

static void add_eot_outside(pg_gguf_writer *w) {
    pg_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", 100000);
    pg_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 512);
    pg_gguf_writer_set_i32(w, "tokenizer.ggml.unknown_token_id", -1); /* LLAMA_TOKEN_NULL */
}

/* An id >= the vocabulary: llama.cpp warns "bad special token" and ignores
 * it; pagoda too, in the model config (the engine's stop ids) and in the
 * tokenizer. The wrong value type is an error (llama.cpp: "wrong type"). */
static void test_gguf_special_ids(void **state) {
    (void)state;
    const char *good = tmp_path("ids.gguf"), *bad = tmp_path("ids-bad.gguf");
    gen(good, NULL, 1, 600, 0, NULL); /* eos 600 of 512 tokens */
    log_reset();
    pg_model_source *src;
    assert_int_equal(open_source(good, &src), PAGODA_OK);
    EXPECT_WARNING(good, "tokenizer.ggml.eos_token_id = 600 is outside the vocabulary (512",
                   "ignores it", "Fix:");
    const pg_model_config *c = pg_model_source_config(src);
    assert_false(has_eos(c, 600));
    assert_int_equal(c->bos_token_id, 1);
    pg_model_source_free(src);
    log_reset();
    pg_tokenizer *tok;
    assert_int_equal(pg_tokenizer_load(good, &tok), PAGODA_OK);
    EXPECT_WARNING("tokenizer.ggml.eos_token_id = 600 is outside the vocabulary");
    assert_int_equal(pg_tokenizer_eos(tok), -1);
    assert_int_equal(pg_tokenizer_bos(tok), 1);
    pg_tokenizer_free(tok);

    /* EOT / padding outside, unknown = -1 (none: no warning) */
    const char *const drop1[] = {"tokenizer.ggml.unknown_token_id", NULL};
    gguf_rewrite(good, bad, drop1, add_eot_outside);
    log_reset();
    assert_int_equal(open_source(bad, &src), PAGODA_OK);
    EXPECT_WARNING("tokenizer.ggml.eot_token_id = 100000 is outside the vocabulary");
    assert_false(has_eos(pg_model_source_config(src), 100000));
    pg_model_source_free(src);
    assert_int_equal(pg_tokenizer_load(bad, &tok), PAGODA_OK);
    EXPECT_WARNING("tokenizer.ggml.padding_token_id = 512 is outside");
    assert_null(strstr(g_log, "unknown_token_id"));
    pg_tokenizer_free(tok);

    /* wrong types */
    const char *const drop2[] = {"tokenizer.ggml.bos_token_id", NULL};
    gguf_rewrite(good, bad, drop2, add_bos_as_string);
    EXPECT_ERROR(open_source(bad, &src), PAGODA_ERR_FORMAT, bad,
                 "tokenizer.ggml.bos_token_id is a string", "must be an integer", "fix:");
    assert_null(src);
    EXPECT_ERROR(pg_tokenizer_load(bad, &tok), PAGODA_ERR_FORMAT,
                 "tokenizer.ggml.bos_token_id is a string");
    const char *const drop3[] = {"tokenizer.ggml.add_bos_token", NULL};
    gguf_rewrite(good, bad, drop3, add_add_bos_as_int);
    EXPECT_ERROR(pg_tokenizer_load(bad, &tok), PAGODA_ERR_FORMAT,
                 "tokenizer.ggml.add_bos_token is a u32", "must be a bool");
}

/* ---- class 2: config.json / generation_config.json special ids ---- */

static void replace_in_file(const char *path, const char *from, const char *to) {
    size_t len;
    char *s = pg_test_read_file(path, &len);
    assert_non_null(s);
    char *at = strstr(s, from);
    if (!at) fail_msg("%s has no '%s'", path, from);
    size_t fl = strlen(from), tl = strlen(to);
    char *out = malloc(len - fl + tl + 1);
    assert_non_null(out);
    memcpy(out, s, (size_t)(at - s));
    memcpy(out + (at - s), to, tl);
    memcpy(out + (at - s) + tl, at + fl, len - (size_t)(at - s) - fl);
    pg_test_write_file(path, out, len - fl + tl);
    free(out);
    free(s);
}

/* transformers and vLLM accept ids past vocab_size (they are never
 * generated): pagoda warns and drops them, so nothing indexes the logits
 * with them (the engine masks EOS before min_tokens: that write would be
 * out of bounds). A non-integer id is an error. */
static void test_hf_config_special_ids(void **state) {
    (void)state;
    const char *dir = tmp_path("hf-ids");
    char tokdir[4200];
    snprintf(tokdir, sizeof tokdir, "%s", pg_test_asset("llm/stories260K-hf"));
    gen(NULL, dir, 700, 600, 0, tokdir); /* bos 700, eos 600 of 512 */
    log_reset();
    pg_model_source *src;
    assert_int_equal(open_source(dir, &src), PAGODA_OK);
    EXPECT_WARNING("config.json: bos_token_id 700 is outside the vocabulary (vocab_size 512",
                   "ignores it");
    EXPECT_WARNING("generation_config.json: eos_token_id 600 is outside the vocabulary");
    const pg_model_config *c = pg_model_source_config(src);
    assert_int_equal(c->bos_token_id, -1);
    assert_false(has_eos(c, 600));
    pg_model_source_free(src);

    /* the engine runs it: greedy with min_tokens (EOS masking) */
    pagoda_engine_options eo;
    pagoda_engine_options_default(&eo);
    eo.kv_cache_memory = 4u << 20;
    eo.num_threads = 1;
    pagoda_engine *e;
    assert_int_equal(pagoda_engine_create(dir, &eo, &e), PAGODA_OK);
    pagoda_request r;
    pagoda_request_defaults(e, &r);
    r.prompt = "Once upon a time";
    r.sampling.temperature = 0;
    r.sampling.max_tokens = 4;
    r.sampling.min_tokens = 2;
    uint64_t id;
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
    int guard = 0;
    while (pagoda_engine_has_unfinished(e)) {
        size_t n;
        assert_int_equal(pagoda_engine_step(e, &n), PAGODA_OK);
        assert_true(++guard < 100);
    }
    pagoda_engine_free(e);

    char cfg[4300];
    snprintf(cfg, sizeof cfg, "%s/generation_config.json", dir);
    replace_in_file(cfg, "\"eos_token_id\": 600", "\"eos_token_id\": 2.5");
    EXPECT_ERROR(open_source(dir, &src), PAGODA_ERR_FORMAT, "generation_config.json",
                 "'eos_token_id' 2.5 is not an integer token id", "fix:");
}

/* ---- class 3: tokenizer_config.json special tokens ---- */

/* A bos/eos/pad/unk token that tokenizer.json does not have: transformers
 * would append it as a new token past the model's vocabulary; pagoda keeps
 * the tokenizer's own and warns. */
static void test_tokenizer_config_tokens(void **state) {
    (void)state;
    const char *dir = tmp_path("tok-cfg");
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/tokenizer.json' '%s/'", dir,
             pg_test_asset("llm/stories260K-hf"), dir);
    assert_int_equal(system(cmd), 0);
    const char *cfg = "{\"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"<|none|>\", "
                      "\"pad_token\": null, \"unk_token\": \"<unk>\"}";
    char path[4300];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    pg_test_write_file(path, cfg, strlen(cfg));
    log_reset();
    pg_tokenizer *tok;
    assert_int_equal(pg_tokenizer_load(dir, &tok), PAGODA_OK);
    EXPECT_WARNING("tokenizer_config.json: eos_token '<|none|>' is not a token of",
                   "tokenizer.json", "ignores it", "Fix:");
    assert_null(strstr(g_log, "bos_token")); /* <s> is a token */
    assert_null(strstr(g_log, "unk_token")); /* and <unk> */
    assert_int_equal(pg_tokenizer_bos(tok), 1);
    assert_int_equal(pg_tokenizer_eos(tok), -1); /* tokenizer.json names none: still none */
    pg_tokenizer_free(tok);
}

/* ---- class 4: GGUF metadata arrays of the wrong element type ---- */

static int32_t g_n_tok;

static void add_scores_as_ints(pg_gguf_writer *w) {
    int32_t *v = calloc((size_t)g_n_tok, sizeof *v);
    assert_non_null(v);
    pg_gguf_writer_set_array(w, "tokenizer.ggml.scores", PG_GGUF_I32, v, (uint64_t)g_n_tok);
    free(v);
}

static void add_types_as_floats(pg_gguf_writer *w) {
    float *v = calloc((size_t)g_n_tok, sizeof *v);
    assert_non_null(v);
    for (int32_t i = 0; i < g_n_tok; i++)
        v[i] = 1.0f;
    pg_gguf_writer_set_array(w, "tokenizer.ggml.token_type", PG_GGUF_F32, v, (uint64_t)g_n_tok);
    free(v);
}

static void add_nextn_3(pg_gguf_writer *w) {
    pg_gguf_writer_set_u32(w, "qwen35.nextn_predict_layers", 3);
}

static void add_recurrent_as_floats(pg_gguf_writer *w) {
    float v[4] = {1, 1, 1, 0};
    pg_gguf_writer_set_array(w, "qwen35.attention.recurrent_layers", PG_GGUF_F32, v, 4);
}

/* llama.cpp takes scores' bytes as float32 and token_type's as int32 whatever
 * the declared element type: another type is garbage there, an error here.
 * Per-layer flag arrays (Qwen3.5's recurrent_layers) must hold bools. */
static void test_gguf_array_types(void **state) {
    (void)state;
    const char *good = tmp_path("arr.gguf"), *bad = tmp_path("arr-bad.gguf");
    gen(good, NULL, 1, 2, 0, NULL);
    g_n_tok = 512;
    pg_tokenizer *tok;
    assert_int_equal(pg_tokenizer_load(good, &tok), PAGODA_OK);
    pg_tokenizer_free(tok);
    const char *const drop_s[] = {"tokenizer.ggml.scores", NULL};
    gguf_rewrite(good, bad, drop_s, add_scores_as_ints);
    EXPECT_ERROR(pg_tokenizer_load(bad, &tok), PAGODA_ERR_FORMAT, bad,
                 "tokenizer.ggml.scores is an array of i32, but it must hold f32",
                 "convert_hf_to_gguf.py");
    const char *const drop_t[] = {"tokenizer.ggml.token_type", NULL};
    gguf_rewrite(good, bad, drop_t, add_types_as_floats);
    EXPECT_ERROR(pg_tokenizer_load(bad, &tok), PAGODA_ERR_FORMAT,
                 "tokenizer.ggml.token_type is an array of f32, but it must hold i32");

    const char *q = tmp_path("q35.gguf"), *qbad = tmp_path("q35-bad.gguf");
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    assert_int_equal(pg_gen_model_set_arch(&o, "qwen3_5"), PAGODA_OK);
    o.layers = 4;
    o.gguf_path = q;
    if (pg_gen_model_write(&o) != PAGODA_OK) fail_msg("gen_model: %s", pg_last_error());
    pg_model_source *src;
    assert_int_equal(pg_model_source_open(q, &src), PAGODA_OK);
    pg_model_source_free(src);
    const char *const drop_r[] = {"qwen35.attention.recurrent_layers", NULL};
    gguf_rewrite(q, qbad, drop_r, add_recurrent_as_floats);
    EXPECT_ERROR(pg_model_source_open(qbad, &src), PAGODA_ERR_FORMAT, qbad,
                 "qwen35.attention.recurrent_layers is an array of f32, but it must hold bool");
    /* more nextn blocks than the file has (4 layers + 1 MTP block): layers
     * 2 and 3 became MTP blocks, the model ran 2 layers, garbage, no word */
    const char *const drop_n[] = {"qwen35.nextn_predict_layers", NULL};
    gguf_rewrite(q, qbad, drop_n, add_nextn_3);
    EXPECT_ERROR(pg_model_source_open(qbad, &src), PAGODA_ERR_FORMAT, qbad,
                 "qwen35.nextn_predict_layers = 3 makes blk.2 an MTP (nextn) block",
                 "blk.2.nextn.eh_proj.weight", "fix:");
}

/* ---- class 5: safetensors __metadata__ ---- */

/* One F32 tensor "w" [2] with `meta` as __metadata__ (NULL: none). */
static void write_st(const char *path, const char *meta) {
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr,
                     "{%s%s%s\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                     meta ? "\"__metadata__\":" : "", meta ? meta : "", meta ? "," : "");
    uint8_t buf[600];
    uint64_t hl = (uint64_t)n;
    memcpy(buf, &hl, 8);
    memcpy(buf + 8, hdr, (size_t)n);
    memset(buf + 8 + n, 0, 8);
    pg_test_write_file(path, buf, 8 + (size_t)n + 8);
}

/* The safetensors library (safe_open, transformers) reads __metadata__ as a
 * map of strings to strings and refuses anything else: so does pagoda. */
static void test_safetensors_metadata(void **state) {
    (void)state;
    const char *p = tmp_path("meta.safetensors");
    pg_safetensors *st;
    write_st(p, "{\"format\":\"pt\",\"note\":\"x\"}");
    assert_int_equal(pg_safetensors_open(p, &st), PAGODA_OK);
    pg_safetensors_close(st);
    write_st(p, NULL);
    assert_int_equal(pg_safetensors_open(p, &st), PAGODA_OK);
    pg_safetensors_close(st);
    static const struct {
        const char *meta, *says;
    } bad[] = {
        {"{\"format\":\"pt\",\"step\":1000}", "__metadata__['step'] is a number"},
        {"{\"format\":null}", "__metadata__['format'] is null"},
        {"{\"a\":{\"b\":\"c\"}}", "__metadata__['a'] is an object"},
        {"[\"pt\"]", "__metadata__ is a list"},
        {"\"pt\"", "__metadata__ is a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_st(p, bad[i].meta);
        EXPECT_ERROR(pg_safetensors_open(p, &st), PAGODA_ERR_FORMAT, p, bad[i].says,
                     "must map strings to strings", "fix:");
    }
}

/* ---- class 6: the vocabulary against the embedding ---- */

static void add_short_vocab(pg_gguf_writer *w) {
    enum { N = 500 };
    static char names[N][16];
    const char *tok[N];
    float score[N];
    int32_t type[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i);
        tok[i] = names[i];
        score[i] = -(float)i;
        type[i] = 1;
    }
    pg_gguf_writer_set_str_array(w, "tokenizer.ggml.tokens", tok, N);
    pg_gguf_writer_set_array(w, "tokenizer.ggml.scores", PG_GGUF_F32, score, N);
    pg_gguf_writer_set_array(w, "tokenizer.ggml.token_type", PG_GGUF_I32, type, N);
}

static pagoda_engine *engine_with(const char *model, const char *tokenizer) {
    pagoda_engine_options eo;
    pagoda_engine_options_default(&eo);
    eo.kv_cache_memory = 4u << 20;
    eo.num_threads = 1;
    eo.tokenizer = tokenizer;
    pagoda_engine *e = NULL;
    if (pagoda_engine_create(model, &eo, &e) != PAGODA_OK) fail_msg("%s", pagoda_last_error());
    return e;
}

/* GGUF: a token list whose length is not token_embd's rows is refused (as
 * llama.cpp's shape check does). HF: a tokenizer with more tokens than the
 * embedding loads with a warning (transformers and vLLM load it; prompts
 * with the extra ids are refused), and one that covers much less of the
 * vocabulary than usual padding warns that the rest are taken as padding. */
static void test_vocab_vs_embedding(void **state) {
    (void)state;
    const char *good = tmp_path("voc.gguf"), *bad = tmp_path("voc-bad.gguf");
    gen(good, NULL, 1, 2, 0, NULL);
    const char *const drop[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                                "tokenizer.ggml.token_type", NULL};
    gguf_rewrite(good, bad, drop, add_short_vocab);
    pg_model_source *src;
    EXPECT_ERROR(open_source(bad, &src), PAGODA_ERR_FORMAT, bad,
                 "tokenizer.ggml.tokens has 500 entries but token_embd.weight has 512 rows",
                 "fix:", "[PAD<id>]");

    char tokdir[4200];
    snprintf(tokdir, sizeof tokdir, "%s", pg_test_asset("llm/stories260K-hf"));
    const char *small = tmp_path("voc-400"), *big = tmp_path("voc-4096");
    gen(NULL, small, 1, 2, 400, tokdir); /* 512-token tokenizer, 400 embedding rows */
    gen(NULL, big, 1, 2, 4096, tokdir);  /* 512 of 4096 */
    log_reset();
    pagoda_engine *e = engine_with(small, NULL);
    EXPECT_WARNING("the tokenizer", "has 512 tokens but the model's vocab_size is 400",
                   "ids 400..511", "refused", "Fix:");
    pagoda_request r;
    pagoda_request_defaults(e, &r);
    const int32_t ids[3] = {1, 450, 7};
    r.prompt_token_ids = ids;
    r.n_prompt_token_ids = 3;
    uint64_t id;
    EXPECT_ERROR(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_INVALID_ARG,
                 "outside the vocab");
    pagoda_engine_free(e);
    log_reset();
    e = engine_with(big, NULL);
    EXPECT_WARNING("has 512 tokens but the model's vocab_size is 4096",
                   "assumes ids 512..4095 are padding", "--tokenizer");
    pagoda_engine_free(e);
    log_reset();
    e = engine_with(big, tokdir); /* the same through --tokenizer */
    EXPECT_WARNING("has 512 tokens but the model's vocab_size is 4096");
    pagoda_engine_free(e);
}

/* ---- class 6: GGUF RoPE and head-size keys ---- */

static void add_freq_base_negative(pg_gguf_writer *w) {
    pg_gguf_writer_set_f32(w, "llama.rope.freq_base", -1.0f);
}

static void add_scaling_factor_zero(pg_gguf_writer *w) {
    pg_gguf_writer_set_str(w, "llama.rope.scaling.type", "linear");
    pg_gguf_writer_set_f32(w, "llama.rope.scaling.factor", 0.0f);
}

static void add_yarn_beta_negative(pg_gguf_writer *w) {
    pg_gguf_writer_set_str(w, "llama.rope.scaling.type", "yarn");
    pg_gguf_writer_set_f32(w, "llama.rope.scaling.factor", 4.0f);
    pg_gguf_writer_set_f32(w, "llama.rope.scaling.yarn_beta_fast", -1.0f);
}

static void add_value_length_3(pg_gguf_writer *w) {
    pg_gguf_writer_set_u32(w, "llama.attention.value_length", 3);
}

/* A RoPE base or scaling factor <= 0 was caught only when the RoPE table was
 * built ("rope: theta -1 must be > 0", no file or key, exit code 2 as for a
 * usage error), a YaRN beta <= 0 was replaced by its default; and
 * attention.value_length was never read, any value loaded. */
static void test_gguf_rope_and_value_length(void **state) {
    (void)state;
    const char *good = tmp_path("rope.gguf"), *bad = tmp_path("rope-bad.gguf");
    gen(good, NULL, 1, 2, 0, NULL);
    pg_model_source *src;
    const char *const drop_base[] = {"llama.rope.freq_base", NULL};
    gguf_rewrite(good, bad, drop_base, add_freq_base_negative);
    EXPECT_ERROR(open_source(bad, &src), PAGODA_ERR_FORMAT, bad, "llama.rope.freq_base = -1",
                 "must be > 0", "fix:");
    const char *const drop_scaling[] = {"llama.rope.scaling.type", "llama.rope.scaling.factor",
                                        NULL};
    gguf_rewrite(good, bad, drop_scaling, add_scaling_factor_zero);
    EXPECT_ERROR(open_source(bad, &src), PAGODA_ERR_FORMAT, bad, "llama.rope.scaling.factor = 0",
                 "must be > 0", "fix:");
    /* a yarn beta <= 0 was replaced by its default, silently */
    gguf_rewrite(good, bad, drop_scaling, add_yarn_beta_negative);
    EXPECT_ERROR(open_source(bad, &src), PAGODA_ERR_FORMAT, bad,
                 "llama.rope.scaling.yarn_beta_fast -1 and yarn_beta_slow 1 must be > 0", "fix:");
    const char *const drop_v[] = {"llama.attention.value_length", NULL};
    gguf_rewrite(good, bad, drop_v, add_value_length_3);
    EXPECT_ERROR(open_source(bad, &src), PAGODA_ERR_UNSUPPORTED, bad,
                 "llama.attention.value_length = 3 differs from attention.key_length", "fix:");
    assert_int_equal(open_source(good, &src), PAGODA_OK);
    pg_model_source_free(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_special_ids),
        cmocka_unit_test(test_hf_config_special_ids),
        cmocka_unit_test(test_tokenizer_config_tokens),
        cmocka_unit_test(test_gguf_array_types),
        cmocka_unit_test(test_safetensors_metadata),
        cmocka_unit_test(test_vocab_vs_embedding),
        cmocka_unit_test(test_gguf_rope_and_value_length),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
