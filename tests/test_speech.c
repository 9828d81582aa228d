/* Speech to text (src/speech/, the tiktoken tokenizer) against openai/whisper:
 *   - tiktoken files: multilingual.tiktoken encodes the jfk text to the
 *     oracle's ids, the special tokens sit where expected.json /
 *     generation_config.json put them, decode round trips; gpt2.tiktoken
 *     (English-only layout) equals HF GPT-2 on llama.cpp's gpt-2 vocab suite;
 *     100 languages for large-v3's vocabulary; malformed files; a Hugging
 *     Face style tokenizer.json of the same vocabulary gives the same special
 *     tokens and ids (found by their strings);
 *   - the token lists: suppress_tokens "-1" = generation_config's 88 ids,
 *     SuppressBlank's [220, eot], SOT sequences;
 *   - each logit filter of decoding.py on hand-built logits, a case where it
 *     must fire and one where it must not;
 *   - compression ratio (Python zlib values), format_timestamp, every
 *     response format against golden strings;
 *   - through the engine (F32, the whisper-tiny-random oracle): one window of
 *     expected_mel.npy decoded with openai's DecodingOptions gives exactly
 *     greedy_suppressed's and greedy_plain's 24 ids; language detection;
 *     pg_transcribe of jfk.wav with timestamps is well formed;
 *   - the CLI on jfk.wav in every response format. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

#include "audio/audio.h"
#include "pagoda.h"
#include "speech/filters.h"
#include "speech/transcribe.h"
#include "speech/whisper_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/whisper_lang.h"

#define ORACLE "oracles/whisper-tiny-random/"

static cJSON *g_expected;

static int setup(void **state) {
    (void)state;
    size_t n;
    char *s = pg_test_read_file(pg_test_asset(ORACLE "expected.json"), &n);
    g_expected = cJSON_Parse(s);
    free(s);
    return g_expected ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    cJSON_Delete(g_expected);
    return 0;
}

static const cJSON *jpath(const char *a, const char *b) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(g_expected, a);
    if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
    if (!x) fail_msg("expected.json has no %s.%s", a, b ? b : "");
    return x;
}

static int jint(const char *a, const char *b) {
    return jpath(a, b)->valueint;
}

/* a JSON int array -> malloc'ed ids */
static int32_t *jids(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *v = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *v);
    for (int i = 0; i < *n; i++) v[i] = cJSON_GetArrayItem(arr, i)->valueint;
    return v;
}

static pg_tokenizer *load_tok(const char *rel) {
    pg_tokenizer *t;
    if (pg_tokenizer_load(pg_test_asset(rel), &t) != PAGODA_OK) fail_msg("%s: %s", rel, pagoda_last_error());
    return t;
}

static void encode(const pg_tokenizer *t, const char *text, int32_t *ids, size_t cap, size_t *n) {
    assert_int_equal(pg_tokenizer_encode(t, text, strlen(text), false, ids, cap, n), PAGODA_OK);
    assert_true(*n <= cap);
}

static char *decode(const pg_tokenizer *t, const int32_t *ids, size_t n) {
    size_t len = 0;
    assert_int_equal(pg_tokenizer_decode(t, ids, n, false, NULL, 0, &len), PAGODA_OK);
    char *s = malloc(len + 1);
    assert_int_equal(pg_tokenizer_decode(t, ids, n, false, s, len + 1, &len), PAGODA_OK);
    return s;
}

/* ---- tiktoken ---------------------------------------------------------------------- */

static void test_tiktoken_multilingual(void **state) {
    (void)state;
    pg_tokenizer *t = load_tok("whisper/multilingual.tiktoken");
    assert_int_equal(pg_tokenizer_vocab_size(t), 51865);
    /* the jfk text */
    const char *text = jpath("tokens", "jfk_text")->valuestring;
    int n_want;
    int32_t *want = jids(jpath("tokens", "jfk_text_ids"), &n_want);
    int32_t ids[256];
    size_t n;
    encode(t, text, ids, 256, &n);
    assert_int_equal((int)n, n_want);
    for (int i = 0; i < n_want; i++) assert_int_equal(ids[i], want[i]);
    char *back = decode(t, ids, n);
    assert_string_equal(back, text);
    free(back);
    free(want);
    /* special tokens where expected.json puts them */
    static const struct {
        const char *key, *text;
    } SPECIAL[] = {{"sot", "<|startoftranscript|>"}, {"en", "<|en|>"},          {"transcribe", "<|transcribe|>"},
                   {"translate", "<|translate|>"},   {"notimestamps", "<|notimestamps|>"},
                   {"eot", "<|endoftext|>"},         {"no_speech", "<|nospeech|>"},
                   {"sot_prev", "<|startofprev|>"},  {"sot_lm", "<|startoflm|>"},
                   {"timestamp_begin", "<|0.00|>"}};
    for (size_t i = 0; i < sizeof SPECIAL / sizeof SPECIAL[0]; i++) {
        int id = jint("tokens", SPECIAL[i].key);
        assert_int_equal(pg_tokenizer_token_to_id(t, SPECIAL[i].text, strlen(SPECIAL[i].text)), id);
        assert_true(pg_tokenizer_is_special(t, id));
    }
    assert_int_equal(pg_tokenizer_eos(t), jint("tokens", "eot"));
    assert_int_equal(pg_tokenizer_token_to_id(t, "<|30.00|>", 9), 51864);
    assert_int_equal(pg_tokenizer_token_to_id(t, "<|0.02|>", 8), 50365);
    assert_int_equal(pg_tokenizer_token_to_id(t, "<|yue|>", 7), -1);
    /* generation_config.json's lang_to_id: all 99 languages */
    size_t gl;
    char *gtxt = pg_test_read_file(pg_test_asset(ORACLE "hf/generation_config.json"), &gl);
    cJSON *g = cJSON_Parse(gtxt);
    free(gtxt);
    const cJSON *langs = cJSON_GetObjectItemCaseSensitive(g, "lang_to_id"), *it;
    assert_int_equal(cJSON_GetArraySize(langs), 99);
    cJSON_ArrayForEach(it, langs) {
        assert_int_equal(pg_tokenizer_token_to_id(t, it->string, strlen(it->string)), it->valueint);
    }
    cJSON_Delete(g);
    /* special-token text is plain text without add_special, one token with it */
    encode(t, "<|en|>", ids, 256, &n);
    assert_true(n > 1);
    assert_int_equal(pg_tokenizer_encode(t, "<|en|>", 6, true, ids, 256, &n), PAGODA_OK);
    assert_int_equal((int)n, 1);
    assert_int_equal(ids[0], jint("tokens", "en"));
    /* round trips: multi-byte text, spaces, newlines, digits */
    static const char *const TEXTS[] = {"Hello world!", "  leading and trailing  ", "line\nbreak\n\n",
                                        "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e 1234567",
                                        "\xe2\x99\xaa music \xe2\x99\xab", "it's 'quoted' -- dash"};
    for (size_t i = 0; i < sizeof TEXTS / sizeof TEXTS[0]; i++) {
        encode(t, TEXTS[i], ids, 256, &n);
        char *s = decode(t, ids, n);
        assert_string_equal(s, TEXTS[i]);
        free(s);
    }
    pg_tokenizer_free(t);
}

/* the llama.cpp gpt-2 vocab suite (HF GPT-2 tokenizations): gpt2.tiktoken
 * holds the same 50256 merges-ranked tokens */
static void test_tiktoken_gpt2_suite(void **state) {
    (void)state;
    pg_tokenizer *t = load_tok("whisper/gpt2.tiktoken");
    /* English-only layout: 50256 ranks, <|endoftext|> 50256, no <|yue|> */
    assert_int_equal(pg_tokenizer_vocab_size(t), 51864);
    assert_int_equal(pg_tokenizer_token_to_id(t, "<|endoftext|>", 13), 50256);
    assert_int_equal(pg_tokenizer_token_to_id(t, "<|startoftranscript|>", 21), 50257);
    assert_int_equal(pg_tokenizer_token_to_id(t, "<|notimestamps|>", 16), 50362);
    assert_int_equal(pg_tokenizer_token_to_id(t, "<|0.00|>", 8), 50363);
    size_t ni, no;
    char *inp = pg_test_read_file(pg_test_asset("llama.cpp-vocab/ggml-vocab-gpt-2.gguf.inp"), &ni);
    char *out = pg_test_read_file(pg_test_asset("llama.cpp-vocab/ggml-vocab-gpt-2.gguf.out"), &no);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *p = inp, *q, *o = out;
    int cases = 0;
    int32_t *ids = malloc(65536 * sizeof *ids);
    while ((q = strstr(p, sep))) {
        *q = 0;
        char *eol = strchr(o, '\n');
        if (eol) *eol = 0;
        size_t n;
        encode(t, p, ids, 65536, &n);
        char line[65536];
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += (size_t)snprintf(line + k, sizeof line - k, i ? " %d" : "%d", ids[i]);
        line[k] = 0;
        /* .out lines carry a leading space before each id */
        const char *want = o;
        while (*want == ' ') want++;
        if (strcmp(line, want)) fail_msg("case %d '%s': got '%s' want '%s'", cases, p, line, want);
        cases++;
        p = q + strlen(sep);
        o = eol ? eol + 1 : o + strlen(o);
    }
    assert_true(cases >= 40);
    free(ids);
    free(inp);
    free(out);
    pg_tokenizer_free(t);
}

static void test_tiktoken_languages_and_errors(void **state) {
    (void)state;
    const char *path = pg_test_asset("whisper/multilingual.tiktoken");
    char ml[4096];
    snprintf(ml, sizeof ml, "%s", path);
    pg_tokenizer *t;
    /* large-v3: 100 languages, <|yue|> right after <|su|>, the rest shifted by one */
    assert_int_equal(pg_tokenizer_load_for_vocab(ml, 51866, &t), PAGODA_OK);
    assert_int_equal(pg_tokenizer_vocab_size(t), 51866);
    assert_int_equal(pg_tokenizer_token_to_id(t, "<|yue|>", 7), 50358);
    assert_int_equal(pg_tokenizer_token_to_id(t, "<|translate|>", 13), 50359);
    assert_int_equal(pg_tokenizer_token_to_id(t, "<|0.00|>", 8), 50365);
    pg_tokenizer_free(t);
    assert_int_equal(pg_tokenizer_load_for_vocab(ml, 51865, &t), PAGODA_OK);
    assert_int_equal(pg_tokenizer_vocab_size(t), 51865);
    pg_tokenizer_free(t);
    assert_int_equal(pg_whisper_num_languages(51866), 100);
    assert_int_equal(pg_whisper_num_languages(51865), 99);
    assert_int_equal(pg_whisper_num_languages(51864), 99);
    assert_int_equal(pg_tokenizer_load_tiktoken(ml, 101, &t), PAGODA_ERR_INVALID_ARG);

    /* malformed files */
    const char *dir = pg_test_tmpdir();
    static const struct {
        const char *body;
        pagoda_status want;
        const char *msg;
    } BAD[] = {
        {"QQ== 0\nQg== 2\n", PAGODA_ERR_FORMAT, "ranks are not"},
        {"QQ== 0\nQQ== 0\n", PAGODA_ERR_FORMAT, "appears twice"},
        {"QQ==0\n", PAGODA_ERR_FORMAT, "expected"},
        {"Q!== 0\n", PAGODA_ERR_FORMAT, "base64"},
        {"QQ== x\n", PAGODA_ERR_FORMAT, "bad rank"},
        {"", PAGODA_ERR_FORMAT, "no tokens"},
        {"QQ== 0\nQg== 1\n", PAGODA_ERR_FORMAT, "has no rank of its own"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/bad%zu.tiktoken", dir, i);
        pg_test_write_file(p, BAD[i].body, strlen(BAD[i].body));
        assert_int_equal(pg_tokenizer_load(p, &t), BAD[i].want);
        if (!strstr(pagoda_last_error(), BAD[i].msg))
            fail_msg("case %zu: '%s' lacks '%s'", i, pagoda_last_error(), BAD[i].msg);
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/missing.tiktoken", dir);
    assert_int_not_equal(pg_tokenizer_load(p, &t), PAGODA_OK);
}

/* A Hugging Face style tokenizer.json of the same vocabulary (byte-level
 * BPE, merges in rank order, the specials as added tokens, the way
 * transformers converts Whisper's tiktoken files): the existing loader reads
 * it and the speech module finds the same special tokens by their strings. */
static int cmp_split(const void *a, const void *b) {
    const int32_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

static void test_hf_tokenizer_json(void **state) {
    (void)state;
    pg_tokenizer *tk = load_tok("whisper/multilingual.tiktoken");
    int32_t nv = pg_tokenizer_vocab_size(tk), n_ranks = 50257;
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *merges = cJSON_AddArrayToObject(model, "merges");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    int32_t splits[256][2];
    int n_splits = 0;
    for (int32_t id = 0; id < nv; id++) {
        size_t len;
        const char *txt = pg_tokenizer_token_text(tk, id, &len);
        if (!len) continue; /* rank 50256 of multilingual.tiktoken is empty */
        if (id < n_ranks) {
            cJSON_AddNumberToObject(vocab, txt, id);
            /* every split into two ranked pieces, in (left, right) rank order, as
             * transformers' TikTokenConverter lists them */
            for (size_t k = 1; k < len; k++) {
                if (((unsigned char)txt[k] & 0xC0) == 0x80) continue;
                int32_t l = pg_tokenizer_token_to_id(tk, txt, k), r = pg_tokenizer_token_to_id(tk, txt + k, len - k);
                if (l < 0 || r < 0 || l >= n_ranks || r >= n_ranks) continue;
                splits[n_splits][0] = l, splits[n_splits][1] = r, n_splits++;
            }
            qsort(splits, (size_t)n_splits, sizeof splits[0], cmp_split);
            for (int s = 0; s < n_splits; s++) {
                size_t ll, rl;
                const char *a = pg_tokenizer_token_text(tk, splits[s][0], &ll);
                const char *b = pg_tokenizer_token_text(tk, splits[s][1], &rl);
                char *m = malloc(ll + rl + 2);
                memcpy(m, a, ll);
                m[ll] = ' ';
                memcpy(m + ll + 1, b, rl);
                m[ll + rl + 1] = 0;
                cJSON_AddItemToArray(merges, cJSON_CreateString(m));
                free(m);
            }
            n_splits = 0;
        } else {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", id);
            cJSON_AddStringToObject(a, "content", txt);
            cJSON_AddBoolToObject(a, "special", true);
            cJSON_AddItemToArray(added, a);
        }
    }
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddBoolToObject(pre, "add_prefix_space", false);
    cJSON_AddBoolToObject(pre, "trim_offsets", true);
    cJSON_AddBoolToObject(pre, "use_regex", true);
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    char *js = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    const char *dir = pg_test_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    pg_test_write_file(path, js, strlen(js));
    free(js);
    pg_tokenizer *hf;
    if (pg_tokenizer_load(dir, &hf) != PAGODA_OK) fail_msg("tokenizer.json: %s", pagoda_last_error());
    /* the jfk text */
    int n_want;
    int32_t *want = jids(jpath("tokens", "jfk_text_ids"), &n_want);
    int32_t ids[256];
    size_t n;
    encode(hf, jpath("tokens", "jfk_text")->valuestring, ids, 256, &n);
    assert_int_equal((int)n, n_want);
    for (int i = 0; i < n_want; i++) assert_int_equal(ids[i], want[i]);
    free(want);
    /* the speech module's view of both */
    pg_speech_tok a = pg_speech_tok_tokenizer(tk, 51865), b = pg_speech_tok_tokenizer(hf, 51865);
    pg_whisper_tokens ta, tb;
    assert_int_equal(pg_whisper_tokens_init(&ta, &a), PAGODA_OK);
    assert_int_equal(pg_whisper_tokens_init(&tb, &b), PAGODA_OK);
    assert_int_equal(tb.sot, jint("tokens", "sot"));
    assert_int_equal(tb.eot, ta.eot);
    assert_int_equal(tb.no_speech, ta.no_speech);
    assert_int_equal(tb.timestamp_begin, ta.timestamp_begin);
    assert_memory_equal(tb.lang, ta.lang, sizeof ta.lang);
    assert_int_equal(tb.n_non_speech, ta.n_non_speech);
    assert_memory_equal(tb.non_speech, ta.non_speech, (size_t)ta.n_non_speech * sizeof(int32_t));
    pg_whisper_tokens_free(&ta);
    pg_whisper_tokens_free(&tb);
    pg_tokenizer_free(hf);
    pg_tokenizer_free(tk);
}

/* ---- token lists ------------------------------------------------------------------- */

static void test_whisper_tokens(void **state) {
    (void)state;
    pg_tokenizer *tk = load_tok("whisper/multilingual.tiktoken");
    pg_speech_tok st = pg_speech_tok_tokenizer(tk, 51865);
    pg_whisper_tokens t;
    assert_int_equal(pg_whisper_tokens_init(&t, &st), PAGODA_OK);
    assert_true(t.multilingual);
    assert_int_equal(t.n_languages, 99);
    assert_int_equal(t.sot, jint("tokens", "sot"));
    assert_int_equal(t.eot, jint("tokens", "eot"));
    assert_int_equal(t.transcribe, jint("tokens", "transcribe"));
    assert_int_equal(t.translate, jint("tokens", "translate"));
    assert_int_equal(t.no_timestamps, jint("tokens", "notimestamps"));
    assert_int_equal(t.no_speech, jint("tokens", "no_speech"));
    assert_int_equal(t.sot_prev, jint("tokens", "sot_prev"));
    assert_int_equal(t.sot_lm, jint("tokens", "sot_lm"));
    assert_int_equal(t.timestamp_begin, jint("tokens", "timestamp_begin"));
    assert_int_equal(pg_whisper_language_token(&t, 0), jint("tokens", "en"));
    assert_int_equal(pg_whisper_language_token(&t, 99), -1); /* yue: not in this model */
    /* SuppressBlank: encode(" ") + [eot] */
    int nb;
    int32_t *blank = jids(jpath("greedy_suppressed", "begin_suppress_tokens"), &nb);
    assert_int_equal(t.n_blank, nb);
    assert_memory_equal(t.blank, blank, (size_t)nb * sizeof *blank);
    free(blank);
    /* suppress_tokens "-1" = the 88 ids OpenAI applied */
    int ns;
    int32_t *want = jids(jpath("greedy_suppressed", "suppress_tokens"), &ns);
    int32_t *sup;
    int32_t n;
    assert_int_equal(pg_whisper_suppress_tokens(&t, "-1", &sup, &n), PAGODA_OK);
    assert_int_equal(n, ns);
    assert_memory_equal(sup, want, (size_t)ns * sizeof *want);
    free(sup);
    free(want);
    /* explicit ids + the specials, no non-speech tokens */
    assert_int_equal(pg_whisper_suppress_tokens(&t, "7, 1,7", &sup, &n), PAGODA_OK);
    int32_t expect[] = {1, 7, t.sot, t.translate, t.transcribe, t.sot_lm, t.sot_prev, t.no_speech};
    assert_int_equal(n, 8);
    assert_memory_equal(sup, expect, sizeof expect);
    free(sup);
    assert_int_equal(pg_whisper_suppress_tokens(&t, "", &sup, &n), PAGODA_OK);
    assert_null(sup);
    assert_int_equal(n, 0);
    assert_int_equal(pg_whisper_suppress_tokens(&t, "1,x", &sup, &n), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_whisper_suppress_tokens(&t, "99999", &sup, &n), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_whisper_suppress_tokens(&t, "-2", &sup, &n), PAGODA_ERR_INVALID_ARG);
    /* SOT sequences */
    int32_t seq[4];
    int np;
    int32_t *prompt = jids(jpath("tokens", "prompt"), &np);
    assert_int_equal(pg_whisper_sot_sequence(&t, 0, false, true, seq), np);
    assert_memory_equal(seq, prompt, (size_t)np * sizeof *prompt);
    free(prompt);
    assert_int_equal(pg_whisper_sot_sequence(&t, 2, true, false, seq), 3);
    assert_int_equal(seq[1], t.sot + 3);
    assert_int_equal(seq[2], t.translate);
    pg_whisper_tokens_free(&t);
    pg_tokenizer_free(tk);

    /* English-only: [sot] only */
    tk = load_tok("whisper/gpt2.tiktoken");
    st = pg_speech_tok_tokenizer(tk, 51864);
    assert_int_equal(pg_whisper_tokens_init(&t, &st), PAGODA_OK);
    assert_false(t.multilingual);
    assert_int_equal(t.sot, 50257);
    assert_int_equal(t.timestamp_begin, 50363);
    assert_int_equal(pg_whisper_sot_sequence(&t, 0, false, false, seq), 1);
    assert_int_equal(pg_whisper_sot_sequence(&t, 0, false, true, seq), 2);
    assert_int_equal(seq[1], 50362);
    pg_whisper_tokens_free(&t);
    pg_tokenizer_free(tk);

    /* a tokenizer that is not Whisper's */
    tk = load_tok("llm/stories260K-hf");
    st = pg_speech_tok_tokenizer(tk, 0);
    assert_int_equal(pg_whisper_tokens_init(&t, &st), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "not a Whisper tokenizer"));
    pg_whisper_tokens_free(&t);
    pg_tokenizer_free(tk);

    /* language names and aliases */
    assert_int_equal(pg_whisper_language_index("en"), 0);
    assert_int_equal(pg_whisper_language_index("English"), 0);
    assert_int_equal(pg_whisper_language_index("castilian"), 3);
    assert_int_equal(pg_whisper_language_index("yue"), 99);
    assert_int_equal(pg_whisper_language_index("klingon"), -1);
}

/* ---- filters on hand-built logits -------------------------------------------------- */

/* A toy vocabulary: text 0..19, eot 20, sot 21, languages 22..23, translate
 * 24, transcribe 25, sot_lm 26, sot_prev 27, nospeech 28, notimestamps 29,
 * timestamps 30..39. */
#define TV 40
#define TB 30
static pg_whisper_tokens toy(void) {
    pg_whisper_tokens t;
    memset(&t, 0, sizeof t);
    t.n_vocab = TV;
    t.eot = 20, t.sot = 21, t.translate = 24, t.transcribe = 25, t.sot_lm = 26, t.sot_prev = 27;
    t.no_speech = 28, t.no_timestamps = 29, t.timestamp_begin = TB;
    t.n_languages = 2, t.lang[0] = 22, t.lang[1] = 23;
    t.blank[0] = 3, t.blank[1] = 20, t.n_blank = 2;
    return t;
}

static void fill(float *l, float v) {
    for (int i = 0; i < TV; i++) l[i] = v;
}

static bool banned(const float *l, int i) {
    return l[i] == -INFINITY;
}

static void test_filter_suppress_blank(void **state) {
    (void)state;
    pg_whisper_tokens t = toy();
    int32_t ctx[6] = {21, 22, 25, 29, 5, 6};
    float l[TV];
    fill(l, 0.5f);
    pg_whisper_suppress_blank(&t, 4, ctx, 4, l, TV); /* first sampled step: fires */
    assert_true(banned(l, 3) && banned(l, 20));
    assert_false(banned(l, 4) || banned(l, 2));
    fill(l, 0.5f);
    pg_whisper_suppress_blank(&t, 4, ctx, 5, l, TV); /* later: does not */
    for (int i = 0; i < TV; i++) assert_false(banned(l, i));
}

static void test_filter_suppress_tokens(void **state) {
    (void)state;
    float l[TV];
    fill(l, 1.0f);
    int32_t ids[] = {0, 7, 39, 55 /* outside the row: ignored */};
    pg_whisper_suppress_ids(ids, 4, l, TV);
    assert_true(banned(l, 0) && banned(l, 7) && banned(l, 39));
    int n = 0;
    for (int i = 0; i < TV; i++) n += banned(l, i);
    assert_int_equal(n, 3);
    fill(l, 1.0f);
    pg_whisper_suppress_ids(ids, 0, l, TV); /* nothing given: nothing banned */
    for (int i = 0; i < TV; i++) assert_false(banned(l, i));
}

static void test_filter_timestamp_rules(void **state) {
    (void)state;
    pg_whisper_tokens t = toy();
    float l[TV];
    const int sb = 3; /* initial tokens: sot, lang, task */
    /* first sampled step: only timestamps up to the max initial one */
    int32_t c0[3] = {21, 22, 25};
    fill(l, 0.0f);
    pg_whisper_timestamp_rules(&t, sb, 2, c0, 3, l, TV);
    for (int i = 0; i < TB; i++) assert_true(banned(l, i));
    assert_false(banned(l, TB) || banned(l, TB + 1) || banned(l, TB + 2));
    for (int i = TB + 3; i < TV; i++) assert_true(banned(l, i));
    /* without max_initial_timestamp every timestamp stays */
    fill(l, 0.0f);
    pg_whisper_timestamp_rules(&t, sb, -1, c0, 3, l, TV);
    for (int i = TB; i < TV; i++) assert_false(banned(l, i));

    /* <|notimestamps|> is always banned; text after text with the text likely: untouched */
    int32_t c1[5] = {21, 22, 25, TB, 5};
    fill(l, 0.0f);
    l[6] = 10.0f; /* a text token far likelier than all timestamps together */
    pg_whisper_timestamp_rules(&t, sb, 2, c1, 5, l, TV);
    assert_true(banned(l, 29));
    for (int i = 0; i < 29; i++) assert_false(banned(l, i));
    /* timestamps never decrease: below the last + 1 banned (it followed text
     * two tokens back, then text again) */
    for (int i = TB; i <= TB; i++) assert_true(banned(l, i));
    for (int i = TB + 1; i < TV; i++) assert_false(banned(l, i));

    /* a timestamp after text: the pair must close -> text (< eot) banned,
     * EOT allowed, the same timestamp allowed, earlier ones banned */
    int32_t c2[7] = {21, 22, 25, TB + 1, 5, 6, TB + 4};
    fill(l, 0.0f);
    l[t.eot] = 5.0f; /* EOT likelier than the timestamps together: the mass rule keeps it */
    pg_whisper_timestamp_rules(&t, sb, 2, c2, 7, l, TV);
    for (int i = 0; i < t.eot; i++) assert_true(banned(l, i));
    assert_false(banned(l, t.eot));
    for (int i = TB; i < TB + 4; i++) assert_true(banned(l, i));
    for (int i = TB + 4; i < TV; i++) assert_false(banned(l, i));

    /* two timestamps in a row: the next is text (timestamps banned) */
    int32_t c3[8] = {21, 22, 25, TB + 1, 5, 6, TB + 4, TB + 4};
    fill(l, 0.0f);
    l[5] = 3.0f;
    pg_whisper_timestamp_rules(&t, sb, 2, c3, 8, l, TV);
    for (int i = TB; i < TV; i++) assert_true(banned(l, i));
    for (int i = 0; i < t.eot; i++) assert_false(banned(l, i));
    /* a single sampled timestamp counts as a pair (openai: fewer than 2
     * sampled -> penultimate "was a timestamp") */
    int32_t c4[4] = {21, 22, 25, TB};
    fill(l, 0.0f);
    l[5] = 3.0f;
    pg_whisper_timestamp_rules(&t, sb, 2, c4, 4, l, TV);
    for (int i = TB; i < TV; i++) assert_true(banned(l, i));
    assert_false(banned(l, 5));

    /* probability mass: 9 timestamps at 0 (TB is below the last + 1; log 9 = 2.197) beat a
     * best text token at 2.0 -> text banned; at 2.5 they do not */
    int32_t c5[5] = {21, 22, 25, TB, 5};
    fill(l, -5.0f);
    for (int i = TB; i < TV; i++) l[i] = 0.0f;
    l[7] = 2.0f;
    pg_whisper_timestamp_rules(&t, sb, -1, c5, 5, l, TV);
    for (int i = 0; i < TB; i++) assert_true(banned(l, i));
    fill(l, -5.0f);
    for (int i = TB; i < TV; i++) l[i] = 0.0f;
    l[7] = 2.5f;
    pg_whisper_timestamp_rules(&t, sb, -1, c5, 5, l, TV);
    assert_false(banned(l, 7));
    assert_true(banned(l, TB)); /* below last + 1 */
    assert_false(banned(l, TB + 1));
}

static void test_filter_apply_and_math(void **state) {
    (void)state;
    pg_whisper_tokens t = toy();
    int32_t sup[] = {8, 9};
    pg_whisper_filter f = {.t = &t, .sample_begin = 3, .suppress_blank = true, .suppress = sup,
                           .n_suppress = 2, .timestamps = false, .max_initial_timestamp_index = -1};
    int32_t c0[3] = {21, 22, 25};
    float l[TV];
    fill(l, 0.0f);
    pg_whisper_filter_apply(&f, c0, 3, l, TV);
    assert_true(banned(l, 3) && banned(l, 20) && banned(l, 8) && banned(l, 9));
    assert_false(banned(l, TB) || banned(l, 29)); /* no timestamp rules */
    f.timestamps = true;
    fill(l, 0.0f);
    pg_whisper_filter_apply(&f, c0, 3, l, TV);
    assert_true(banned(l, 29) && banned(l, 5));
    /* logsumexp / prob */
    float v[3] = {0.0f, logf(3.0f), -INFINITY};
    assert_true(fabs(pg_whisper_logsumexp(v, 3) - log(4.0)) < 1e-6);
    assert_true(fabs(pg_whisper_prob(v, 3, 1) - 0.75) < 1e-6);
    assert_true(pg_whisper_prob(v, 3, 2) == 0.0);
    float all[2] = {-INFINITY, -INFINITY};
    assert_true(pg_whisper_logsumexp(all, 2) == -INFINITY);
}

/* ---- measures and formats ---------------------------------------------------------- */

static void test_compression_and_timestamps(void **state) {
    (void)state;
    /* values of Python's len(s) / len(zlib.compress(s)) */
    assert_true(pg_whisper_compression_ratio("", 0) == 0.0);
    assert_true(fabs(pg_whisper_compression_ratio("hello world", 11) - 11.0 / 19.0) < 1e-12);
    const char *jfk = jpath("tokens", "jfk_text")->valuestring;
    assert_true(fabs(pg_whisper_compression_ratio(jfk, strlen(jfk)) - 108.0 / 79.0) < 1e-12);
    char ab[201];
    for (int i = 0; i < 200; i++) ab[i] = i % 2 ? 'b' : 'a';
    assert_true(fabs(pg_whisper_compression_ratio(ab, 200) - 200.0 / 13.0) < 1e-12); /* > 2.4: repetitive */
    char b[32];
    pg_whisper_format_timestamp(0.0, false, '.', b);
    assert_string_equal(b, "00:00.000");
    pg_whisper_format_timestamp(0.0, true, ',', b);
    assert_string_equal(b, "00:00:00,000");
    pg_whisper_format_timestamp(3661.5, false, '.', b);
    assert_string_equal(b, "01:01:01.500");
    pg_whisper_format_timestamp(2.5, true, ',', b);
    assert_string_equal(b, "00:00:02,500");
    pg_whisper_format_timestamp(0.0625, false, '.', b); /* 62.5 ms: half to even */
    assert_string_equal(b, "00:00.062");
    pg_whisper_format_timestamp(0.1875, false, '.', b); /* 187.5 ms */
    assert_string_equal(b, "00:00.188");
    pg_whisper_format_timestamp(59.9996, false, '.', b);
    assert_string_equal(b, "01:00.000");
}

static pg_transcript *toy_transcript(void) {
    pg_transcript *t = calloc(1, sizeof *t);
    t->text = strdup(" Hello there. Arrows --> here");
    snprintf(t->language, sizeof t->language, "en");
    t->duration = 11.0;
    t->n_segments = 2;
    t->segments = calloc(2, sizeof *t->segments);
    pg_speech_segment *s = t->segments;
    s[0] = (pg_speech_segment){.id = 0, .seek = 0, .start = 0.0, .end = 2.5, .temperature = 0.0f,
                               .avg_logprob = -0.25f, .compression_ratio = 1.5f, .no_speech_prob = 0.125f};
    s[0].text = strdup(" Hello there.");
    s[0].n_tokens = 3;
    s[0].tokens = malloc(3 * sizeof(int32_t));
    s[0].tokens[0] = 50364, s[0].tokens[1] = 2425, s[0].tokens[2] = 50489;
    s[1] = (pg_speech_segment){.id = 1, .seek = 250, .start = 3662.04, .end = 3663.0, .temperature = 0.2f,
                               .avg_logprob = -0.5f, .compression_ratio = 0.75f, .no_speech_prob = 0.0f};
    s[1].text = strdup(" Arrows --> here");
    return t;
}

static char *render(const pg_transcript *t, const char *fmt, pg_speech_task task) {
    pg_transcript_format f;
    assert_int_equal(pg_transcript_format_parse(fmt, &f), PAGODA_OK);
    char *out;
    size_t len;
    assert_int_equal(pg_transcript_render(t, f, task, &out, &len), PAGODA_OK);
    assert_int_equal(len, strlen(out));
    return out;
}

static void test_formats(void **state) {
    (void)state;
    pg_transcript *t = toy_transcript();
    char *s = render(t, "json", PG_SPEECH_TRANSCRIBE);
    assert_string_equal(s, "{\"text\":\"Hello there. Arrows --> here\"}");
    free(s);
    s = render(t, "text", PG_SPEECH_TRANSCRIBE);
    assert_string_equal(s, "Hello there. Arrows --> here\n");
    free(s);
    s = render(t, "srt", PG_SPEECH_TRANSCRIBE);
    assert_string_equal(s, "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n"
                           "2\n01:01:02,040 --> 01:01:03,000\nArrows -> here\n\n");
    free(s);
    s = render(t, "vtt", PG_SPEECH_TRANSCRIBE);
    assert_string_equal(s, "WEBVTT\n\n00:00.000 --> 00:02.500\nHello there.\n\n"
                           "01:01:02.040 --> 01:01:03.000\nArrows -> here\n\n");
    free(s);
    s = render(t, "verbose_json", PG_SPEECH_TRANSLATE);
    assert_string_equal(
        s, "{\"task\":\"translate\",\"language\":\"english\",\"duration\":11,\"text\":\"Hello there. Arrows --> "
           "here\",\"segments\":[{\"id\":0,\"seek\":0,\"start\":0,\"end\":2.5,\"text\":\" Hello there.\","
           "\"tokens\":[50364,2425,50489],\"temperature\":0,\"avg_logprob\":-0.25,\"compression_ratio\":1.5,"
           "\"no_speech_prob\":0.125},{\"id\":1,\"seek\":250,\"start\":3662.04,\"end\":3663,\"text\":\" Arrows "
           "--> here\",\"tokens\":[],\"temperature\":0.2,\"avg_logprob\":-0.5,\"compression_ratio\":0.75,"
           "\"no_speech_prob\":0}]}");
    free(s);
    assert_string_equal(pg_transcript_format_mime(PG_TFMT_JSON), "application/json");
    assert_string_equal(pg_transcript_format_mime(PG_TFMT_VTT), "text/vtt; charset=utf-8");
    pg_transcript_format f;
    assert_int_equal(pg_transcript_format_parse("xml", &f), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "'xml'"));
    /* no segments: subtitle files with no cues */
    for (int32_t i = 0; i < t->n_segments; i++) {
        free(t->segments[i].text);
        free(t->segments[i].tokens);
    }
    t->n_segments = 0;
    s = render(t, "srt", PG_SPEECH_TRANSCRIBE);
    assert_string_equal(s, "");
    free(s);
    s = render(t, "vtt", PG_SPEECH_TRANSCRIBE);
    assert_string_equal(s, "WEBVTT\n\n");
    free(s);
    pg_transcript_free(t);
}

/* ---- through the engine ------------------------------------------------------------ */

static pagoda_engine *oracle_engine(void) {
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.dtype = PAGODA_DTYPE_F32; /* the oracle ran openai/whisper in f32 */
    o.tokenizer = strdup(pg_test_asset("whisper/multilingual.tiktoken"));
    o.kv_cache_memory = 64ull << 20;
    pagoda_engine *e = NULL;
    if (pagoda_engine_create(pg_test_asset(ORACLE "hf"), &o, &e) != PAGODA_OK)
        fail_msg("engine: %s", pagoda_last_error());
    free((void *)o.tokenizer);
    return e;
}

static void expect_ids(const pg_speech_decode_result *r, const char *run) {
    int n;
    int32_t *want = jids(jpath(run, "tokens"), &n);
    if (r->n_tokens != n) fail_msg("%s: %d tokens, want %d", run, (int)r->n_tokens, n);
    for (int i = 0; i < n; i++)
        if (r->tokens[i] != want[i]) fail_msg("%s: token %d is %d, want %d", run, i, r->tokens[i], want[i]);
    free(want);
}

/* decoding.py on one window of expected_mel.npy with the oracle's
 * DecodingOptions: exactly its greedy ids, with and without the filters. */
static void test_engine_oracle_decode(void **state) {
    (void)state;
    pg_npy mel;
    pg_test_npy_load(pg_test_asset(ORACLE "expected_mel.npy"), &mel);
    assert_int_equal((int)mel.shape[0], 80);
    assert_int_equal((int)mel.shape[1], 3000);
    pagoda_engine *e = oracle_engine();
    pg_speech_backend be = pg_speech_backend_direct(e);
    pg_transcribe_options o;
    pg_transcribe_options_default(&o);
    /* DecodingOptions(language='en', task='transcribe', without_timestamps=True,
     * temperature=0, sample_len=24, suppress_tokens='-1', suppress_blank=True) */
    o.language = "en";
    o.without_timestamps = true;
    o.temperature = 0;
    o.max_tokens_per_window = 24;
    pg_speech_decode_result r;
    if (pg_speech_decode(e, &be, mel.data, 80, &o, NULL, 0, &r) != PAGODA_OK)
        fail_msg("decode: %s", pagoda_last_error());
    expect_ids(&r, "greedy_suppressed");
    assert_string_equal(r.language, "en");
    assert_true(r.temperature == 0.0f);
    assert_true(r.avg_logprob < 0 && isfinite(r.avg_logprob));
    assert_true(r.no_speech_prob > 0 && r.no_speech_prob < 1);
    assert_true(r.compression_ratio > 0);
    assert_true(strlen(r.text) > 0);
    float suppressed_nsp = r.no_speech_prob;
    pg_speech_decode_result_free(&r);
    /* ... suppress_tokens=None, suppress_blank=False */
    o.suppress_tokens = NULL;
    o.suppress_blank = false;
    assert_int_equal(pg_speech_decode(e, &be, mel.data, 80, &o, NULL, 0, &r), PAGODA_OK);
    expect_ids(&r, "greedy_plain");
    /* the SOT row does not depend on the filters */
    assert_true(r.no_speech_prob == suppressed_nsp);
    /* without filters sum_logprob is the engine's own logprobs of the 24
     * tokens: avg = sum / (24 + 1) (decoding.py, no EOT reached) */
    {
        pagoda_request q;
        pagoda_request_defaults(e, &q);
        int np;
        int32_t *prompt = jids(jpath("tokens", "prompt"), &np);
        q.prompt_token_ids = prompt;
        q.n_prompt_token_ids = (size_t)np;
        q.sampling.temperature = 0;
        q.sampling.max_tokens = 24;
        q.sampling.ignore_eos = true;
        q.sampling.logprobs = 0;
        q.encoder_features = mel.data;
        q.encoder_n_mels = 80;
        q.encoder_n_frames = 3000;
        uint64_t id;
        assert_int_equal(pagoda_engine_add_request(e, &q, &id, NULL), PAGODA_OK);
        double sum = 0;
        int got = 0;
        bool done = false;
        while (!done) {
            size_t n;
            assert_int_equal(pagoda_engine_step(e, &n), PAGODA_OK);
            const pagoda_output *outs = pagoda_engine_outputs(e, &n);
            for (size_t i = 0; i < n; i++) {
                if (outs[i].id != id) continue;
                for (size_t k = 0; k < outs[i].n_new_tokens; k++, got++) {
                    assert_int_equal(outs[i].logprobs[k].token, r.tokens[got]);
                    sum += outs[i].logprobs[k].logprob;
                }
                done = outs[i].finish_reason != PAGODA_FINISH_NONE;
            }
        }
        assert_int_equal(got, 24);
        if (fabs(sum / 25.0 - r.avg_logprob) > 1e-4)
            fail_msg("avg_logprob %.6f, engine logprobs give %.6f", r.avg_logprob, sum / 25.0);
        free(prompt);
    }
    pg_speech_decode_result_free(&r);

    /* detect_language on the same window */
    int li = -1;
    float probs[PG_WHISPER_MAX_LANGUAGES];
    assert_int_equal(pg_speech_detect_language(e, &be, mel.data, 80, &li, probs), PAGODA_OK);
    assert_true(li >= 0 && li < 99);
    double sum = 0;
    for (int i = 0; i < PG_WHISPER_MAX_LANGUAGES; i++) {
        assert_true(probs[i] >= 0 && probs[i] <= probs[li]);
        sum += probs[i];
    }
    assert_true(fabs(sum - 1.0) < 1e-4);
    assert_true(probs[99] == 0.0f);
    /* language NULL: the decode detects it the same way */
    pg_transcribe_options_default(&o);
    o.language = NULL;
    o.without_timestamps = true;
    o.max_tokens_per_window = 2;
    assert_int_equal(pg_speech_decode(e, &be, mel.data, 80, &o, NULL, 0, &r), PAGODA_OK);
    assert_string_equal(r.language, PG_WHISPER_LANGUAGES[li].code);
    pg_speech_decode_result_free(&r);

    /* errors */
    o.language = "klingon";
    assert_int_equal(pg_speech_decode(e, &be, mel.data, 80, &o, NULL, 0, &r), PAGODA_ERR_INVALID_ARG);
    o.language = "yue"; /* a large-v3 language */
    assert_int_equal(pg_speech_decode(e, &be, mel.data, 80, &o, NULL, 0, &r), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "no language 'yue'"));
    o.language = "en";
    assert_int_equal(pg_speech_decode(e, &be, mel.data, 128, &o, NULL, 0, &r), PAGODA_ERR_INVALID_ARG);
    assert_false(pagoda_engine_has_unfinished(e));
    pagoda_engine_free(e);
    pg_test_npy_free(&mel);
}

typedef struct seg_log {
    int n;
    double last_start;
} seg_log;

static void on_segment(void *ctx, const pg_speech_segment *s) {
    seg_log *l = ctx;
    assert_int_equal(s->id, l->n);
    l->n++;
}

/* transcribe() on jfk.wav with timestamps: well formed whatever the
 * (random) weights say */
static void test_engine_transcribe(void **state) {
    (void)state;
    int64_t frames;
    int rate, ch;
    float *pcm = pg_test_wav_load_s16(pg_test_asset("whisper/jfk.wav"), &frames, &rate, &ch);
    assert_int_equal(rate, 16000);
    assert_int_equal(ch, 1);
    pagoda_engine *e = oracle_engine();
    pg_speech_backend be = pg_speech_backend_direct(e);
    pg_transcribe_options o;
    pg_transcribe_options_default(&o);
    o.language = "en";
    o.max_tokens_per_window = 48;
    o.temperature = 0.5f; /* one sampled try per window */
    o.seed = 1234;
    seg_log log = {0};
    pg_transcript *t = NULL;
    if (pg_transcribe(e, &be, pcm, (size_t)frames, &o, on_segment, &log, &t) != PAGODA_OK)
        fail_msg("transcribe: %s", pagoda_last_error());
    assert_string_equal(t->language, "en");
    assert_true(fabs(t->duration - 11.0) < 1e-9);
    assert_int_equal(log.n, t->n_segments);
    const int32_t tb = 50364;
    double prev_start = 0;
    int32_t prev_seek = 0;
    for (int32_t i = 0; i < t->n_segments; i++) {
        const pg_speech_segment *s = &t->segments[i];
        double window_start = s->seek * 0.01;
        assert_int_equal(s->id, i);
        assert_true(s->seek >= prev_seek && s->seek < 1100);
        assert_true(s->start >= window_start - 1e-9 && s->start <= s->end && s->end <= window_start + 30.0 + 1e-9);
        assert_true(s->start >= prev_start - 1e-9);
        assert_true(s->temperature == 0.5f);
        assert_true(isfinite(s->avg_logprob) && s->no_speech_prob >= 0 && s->no_speech_prob <= 1);
        if (s->n_tokens) { /* a kept segment has text between its timestamps */
            assert_true(strlen(s->text) > 0);
            for (int32_t k = 0; k < s->n_tokens; k++) assert_true(s->tokens[k] != 50257);
            if (s->tokens[s->n_tokens - 1] >= tb && s->tokens[s->n_tokens - 1] != tb)
                assert_true(s->end <= window_start + (s->tokens[s->n_tokens - 1] - tb) * 0.02 + 1e-6);
        }
        prev_start = s->start;
        prev_seek = s->seek;
    }
    /* same seed, same transcript; the renders are consistent */
    pg_transcript *t2 = NULL;
    assert_int_equal(pg_transcribe(e, &be, pcm, (size_t)frames, &o, NULL, NULL, &t2), PAGODA_OK);
    assert_string_equal(t->text, t2->text);
    assert_int_equal(t->n_segments, t2->n_segments);
    pg_transcript_free(t2);
    char *js = render(t, "verbose_json", PG_SPEECH_TRANSCRIBE);
    cJSON *root = cJSON_Parse(js);
    assert_non_null(root);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(root, "segments")), t->n_segments);
    assert_string_equal(cJSON_GetObjectItem(root, "language")->valuestring, "english");
    cJSON_Delete(root);
    free(js);
    pg_transcript_free(t);

    /* greedy with openai's fallback schedule and thresholds: still well formed */
    pg_transcribe_options_default(&o);
    o.max_tokens_per_window = 16;
    o.prompt = "  President Kennedy.  ";
    assert_int_equal(pg_transcribe(e, &be, pcm, (size_t)frames, &o, NULL, NULL, &t), PAGODA_OK);
    assert_true(t->n_segments >= 0 && strlen(t->language) >= 2);
    for (int32_t i = 0; i < t->n_segments; i++) {
        float temp = t->segments[i].temperature;
        assert_true(temp >= 0 && temp <= 1.0f + 1e-6f);
    }
    pg_transcript_free(t);

    /* errors */
    pg_transcribe_options_default(&o);
    assert_int_equal(pg_transcribe(e, &be, pcm, 0, &o, NULL, NULL, &t), PAGODA_ERR_INVALID_ARG);
    o.language = "xx";
    assert_int_equal(pg_transcribe(e, &be, pcm, (size_t)frames, &o, NULL, NULL, &t), PAGODA_ERR_INVALID_ARG);
    assert_null(t);
    assert_false(pagoda_engine_has_unfinished(e));
    pagoda_engine_free(e);
    free(pcm);
}

/* a text-only model is refused with a clear message */
static void test_engine_not_whisper(void **state) {
    (void)state;
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.kv_cache_memory = 16ull << 20;
    pagoda_engine *e = NULL;
    if (pagoda_engine_create(pg_test_asset("llm/stories260K-hf"), &o, &e) != PAGODA_OK)
        fail_msg("engine: %s", pagoda_last_error());
    pg_speech_backend be = pg_speech_backend_direct(e);
    float pcm[1600] = {0};
    pg_transcript *t = NULL;
    assert_int_equal(pg_transcribe(e, &be, pcm, 1600, NULL, NULL, NULL, &t), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "not a Whisper"));
    pagoda_engine_free(e);
}

/* ---- the CLI ----------------------------------------------------------------------- */

/* pg_test_asset returns a static buffer: copy before the next call */
static char *asset(const char *rel) {
    return strdup(pg_test_asset(rel));
}

static char *run_cli(const char *args, int *rc) {
    char cmd[8192];
    char *model = asset(ORACLE "hf"), *wav = asset("whisper/jfk.wav"), *tok = asset("whisper/multilingual.tiktoken");
    snprintf(cmd, sizeof cmd, "%s %s transcribe %s %s --tokenizer %s --dtype float32 --kv-cache-memory 64MiB %s",
             pg_test_exec_wrapper(), pg_test_pagoda_bin(), model, wav, tok, args);
    free(model);
    free(wav);
    free(tok);
    char *out = NULL;
    *rc = pg_test_run_command(cmd, &out);
    return out;
}

static void test_cli(void **state) {
    (void)state;
#ifndef PAGODA_HAVE_AUDIO_DECODE
    skip(); /* built without the audio decoding libraries */
#endif
    static const char *const COMMON = "--language en --temperature 0.4 --seed 7";
    char args[512];
    int rc;
    /* json */
    snprintf(args, sizeof args, "%s --response-format json", COMMON);
    char *out = run_cli(args, &rc);
    assert_int_equal(rc, 0);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("not JSON: %s", out);
    const cJSON *text = cJSON_GetObjectItem(j, "text");
    assert_true(cJSON_IsString(text));
    char *json_text = strdup(text->valuestring);
    cJSON_Delete(j);
    free(out);
    /* text: the same text and a newline */
    snprintf(args, sizeof args, "%s --response-format text", COMMON);
    out = run_cli(args, &rc);
    assert_int_equal(rc, 0);
    size_t n = strlen(out);
    assert_true(n >= 1 && out[n - 1] == '\n');
    out[n - 1] = 0;
    assert_string_equal(out, json_text);
    free(out);
    /* verbose_json: segments */
    snprintf(args, sizeof args, "%s --response-format verbose_json", COMMON);
    out = run_cli(args, &rc);
    assert_int_equal(rc, 0);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "task")->valuestring, "transcribe");
    assert_string_equal(cJSON_GetObjectItem(j, "language")->valuestring, "english");
    assert_true(fabs(cJSON_GetObjectItem(j, "duration")->valuedouble - 11.0) < 1e-9);
    assert_string_equal(cJSON_GetObjectItem(j, "text")->valuestring, json_text);
    int n_seg = cJSON_GetArraySize(cJSON_GetObjectItem(j, "segments"));
    cJSON_Delete(j);
    free(out);
    /* srt and vtt: one cue per segment */
    snprintf(args, sizeof args, "%s --response-format srt", COMMON);
    out = run_cli(args, &rc);
    assert_int_equal(rc, 0);
    int cues = 0;
    for (const char *p = out; (p = strstr(p, " --> ")); p += 5) cues++;
    assert_int_equal(cues, n_seg);
    if (n_seg) assert_true(!strncmp(out, "1\n00:00:", 8));
    free(out);
    snprintf(args, sizeof args, "%s --response-format vtt", COMMON);
    out = run_cli(args, &rc);
    assert_int_equal(rc, 0);
    assert_true(!strncmp(out, "WEBVTT\n\n", 8));
    cues = 0;
    for (const char *p = out; (p = strstr(p, " --> ")); p += 5) cues++;
    assert_int_equal(cues, n_seg);
    free(out);
    free(json_text);
    /* errors: usage (2) and runtime (1), messages on stderr */
    out = run_cli("--response-format xml 2>&1", &rc);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "pagoda transcribe: bad value 'xml' for --response-format"));
    free(out);
    out = run_cli("--language klingon 2>&1", &rc);
    assert_int_equal(rc, 2);
    free(out);
    out = run_cli("--task translate --bogus 2>&1", &rc);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "unknown option '--bogus'"));
    free(out);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s transcribe %s /nonexistent.wav 2>&1", pg_test_exec_wrapper(), pg_test_pagoda_bin(),
             pg_test_asset(ORACLE "hf"));
    rc = pg_test_run_command(cmd, &out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "cannot open /nonexistent.wav"));
    free(out);
    char *llm = asset("llm/stories260K-hf"), *wav = asset("whisper/jfk.wav");
    snprintf(cmd, sizeof cmd, "%s %s transcribe %s %s 2>&1", pg_test_exec_wrapper(), pg_test_pagoda_bin(), llm,
             wav);
    free(llm);
    free(wav);
    rc = pg_test_run_command(cmd, &out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "not a Whisper"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiktoken_multilingual),
        cmocka_unit_test(test_tiktoken_gpt2_suite),
        cmocka_unit_test(test_tiktoken_languages_and_errors),
        cmocka_unit_test(test_hf_tokenizer_json),
        cmocka_unit_test(test_whisper_tokens),
        cmocka_unit_test(test_filter_suppress_blank),
        cmocka_unit_test(test_filter_suppress_tokens),
        cmocka_unit_test(test_filter_timestamp_rules),
        cmocka_unit_test(test_filter_apply_and_math),
        cmocka_unit_test(test_compression_and_timestamps),
        cmocka_unit_test(test_formats),
        cmocka_unit_test(test_engine_oracle_decode),
        cmocka_unit_test(test_engine_transcribe),
        cmocka_unit_test(test_engine_not_whisper),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
