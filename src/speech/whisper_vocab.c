/* Whisper special tokens and token lists (see whisper_vocab.h). */
#include "speech/whisper_vocab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* ---- adapters ---------------------------------------------------------------------- */

static const char *eng_piece(void *ctx, int32_t id, size_t *len) {
    return pagoda_token_piece((const pagoda_engine *)ctx, id, len);
}

static pagoda_status eng_encode(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n) {
    return pagoda_tokenize((const pagoda_engine *)ctx, text, len, false, ids, n);
}

static pagoda_status eng_decode(void *ctx, const int32_t *ids, size_t n, char **text, size_t *len) {
    return pagoda_detokenize((const pagoda_engine *)ctx, ids, n, false, text, len);
}

pg_speech_tok pg_speech_tok_engine(const pagoda_engine *e) {
    return (pg_speech_tok){.ctx = (void *)e,
                           .n_vocab = pagoda_engine_vocab_size(e),
                           .piece = eng_piece,
                           .encode = eng_encode,
                           .decode = eng_decode};
}

static const char *tok_piece(void *ctx, int32_t id, size_t *len) {
    return pg_tokenizer_token_text((const pg_tokenizer *)ctx, id, len);
}

static pagoda_status tok_encode(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n) {
    const pg_tokenizer *tok = ctx;
    size_t cap = len + 16, got = 0;
    for (;;) {
        int32_t *buf = malloc(cap * sizeof *buf);
        if (!buf) return pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory");
        pagoda_status st = pg_tokenizer_encode(tok, text, len, false, buf, cap, &got);
        if (st) {
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
    const pg_tokenizer *tok = ctx;
    size_t need = 0;
    pagoda_status st = pg_tokenizer_decode(tok, ids, n, false, NULL, 0, &need);
    if (st) return st;
    char *buf = malloc(need + 1);
    if (!buf) return pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory");
    if ((st = pg_tokenizer_decode(tok, ids, n, false, buf, need + 1, len))) {
        free(buf);
        return st;
    }
    *text = buf;
    return PAGODA_OK;
}

pg_speech_tok pg_speech_tok_tokenizer(const pg_tokenizer *tok, int32_t model_vocab) {
    return (pg_speech_tok){.ctx = (void *)tok,
                           .n_vocab = model_vocab > 0 ? model_vocab : pg_tokenizer_vocab_size(tok),
                           .piece = tok_piece,
                           .encode = tok_encode,
                           .decode = tok_decode};
}

/* ---- special tokens ---------------------------------------------------------------- */

static bool piece_is(const char *p, size_t len, const char *s) {
    return p && len == strlen(s) && !memcmp(p, s, len);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Sort and drop duplicates; returns the new count. */
static int32_t sort_unique(int32_t *v, int32_t n) {
    if (n <= 1) return n;
    qsort(v, (size_t)n, sizeof *v, cmp_i32);
    int32_t k = 1;
    for (int32_t i = 1; i < n; i++)
        if (v[i] != v[k - 1]) v[k++] = v[i];
    return k;
}

typedef struct {
    int32_t *v;
    int32_t n, cap;
} idvec;

static bool idvec_push(idvec *a, int32_t x) {
    if (a->n == a->cap) {
        int32_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *nv = realloc(a->v, (size_t)nc * sizeof *nv);
        if (!nv) return false;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return true;
}

/* tokenizer.py non_speech_tokens */
static pagoda_status compute_non_speech(pg_whisper_tokens *t, const pg_speech_tok *tok) {
    static const char *const SYMBOLS[] = {
        "\"", "#", "(", ")", "*", "+", "/", ":", ";", "<", "=", ">", "@", "[", "\\", "]", "^",
        "_", "`", "{", "|", "}", "~", "\xe3\x80\x8c" /* 「 */, "\xe3\x80\x8d" /* 」 */,
        "\xe3\x80\x8e" /* 『 */, "\xe3\x80\x8f" /* 』 */, "<<", ">>", "<<<", ">>>", "--", "---", "-(",
        "-[", "('", "(\"", "((", "))", "(((", ")))", "[[", "]]", "{{", "}}",
        "\xe2\x99\xaa\xe2\x99\xaa" /* ♪♪ */, "\xe2\x99\xaa\xe2\x99\xaa\xe2\x99\xaa" /* ♪♪♪ */};
    /* ♩♪♫♬♭♮♯ (U+2669..U+266F): their first token is suppressed whatever the split */
    static const char *const MISC[] = {"\xe2\x99\xa9", "\xe2\x99\xaa", "\xe2\x99\xab", "\xe2\x99\xac",
                                       "\xe2\x99\xad", "\xe2\x99\xae", "\xe2\x99\xaf"};
    idvec out = {0};
    pagoda_status st = PAGODA_OK;
    int32_t *ids = NULL;
    size_t n = 0;
    static const char *const LEADING[] = {" -", " '"};
    for (size_t k = 0; k < 2 && !st; k++) {
        if ((st = tok->encode(tok->ctx, LEADING[k], 2, &ids, &n))) break;
        if (n && !idvec_push(&out, ids[0])) st = pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
        free(ids);
        ids = NULL;
    }
    size_t n_sym = sizeof SYMBOLS / sizeof SYMBOLS[0], n_misc = sizeof MISC / sizeof MISC[0];
    for (size_t s = 0; s < n_sym + n_misc && !st; s++) {
        bool misc = s >= n_sym;
        const char *sym = misc ? MISC[s - n_sym] : SYMBOLS[s];
        char buf[32];
        size_t sl = strlen(sym);
        buf[0] = ' ';
        memcpy(buf + 1, sym, sl);
        for (int sp = 0; sp < 2 && !st; sp++) {
            const char *txt = sp ? buf : sym;
            if ((st = tok->encode(tok->ctx, txt, sl + (size_t)sp, &ids, &n))) break;
            if ((n == 1 || (misc && n >= 1)) && !idvec_push(&out, ids[0]))
                st = pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
            free(ids);
            ids = NULL;
        }
    }
    if (st) {
        free(out.v);
        return st;
    }
    t->non_speech = out.v;
    t->n_non_speech = sort_unique(out.v, out.n);
    return PAGODA_OK;
}

pagoda_status pg_whisper_tokens_init(pg_whisper_tokens *t, const pg_speech_tok *tok) {
    memset(t, 0, sizeof *t);
    t->n_vocab = tok->n_vocab;
    t->multilingual = tok->n_vocab >= 51865;
    t->eot = t->sot = t->translate = t->transcribe = t->sot_lm = t->sot_prev = t->no_speech =
        t->no_timestamps = t->timestamp_begin = -1;
    for (int i = 0; i < PG_WHISPER_MAX_LANGUAGES; i++) t->lang[i] = -1;
    struct {
        const char *text;
        int32_t *id;
    } named[] = {{"<|endoftext|>", &t->eot},        {"<|startoftranscript|>", &t->sot},
                 {"<|translate|>", &t->translate},  {"<|transcribe|>", &t->transcribe},
                 {"<|startoflm|>", &t->sot_lm},     {"<|startofprev|>", &t->sot_prev},
                 {"<|nospeech|>", &t->no_speech},   {"<|notimestamps|>", &t->no_timestamps},
                 {"<|0.00|>", &t->timestamp_begin}};
    const size_t n_named = sizeof named / sizeof named[0];
    /* one pass over the vocabulary: every "<|...|>" piece (lowest id wins) */
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        size_t len = 0;
        const char *p = tok->piece(tok->ctx, id, &len);
        if (!p || len < 5 || len > 30 || p[0] != '<' || p[1] != '|' || p[len - 2] != '|' || p[len - 1] != '>')
            continue;
        bool done = false;
        for (size_t k = 0; k < n_named && !done; k++)
            if (piece_is(p, len, named[k].text)) {
                if (*named[k].id < 0) *named[k].id = id;
                done = true;
            }
        if (done) continue;
        char code[32];
        memcpy(code, p + 2, len - 4);
        code[len - 4] = 0;
        for (int i = 0; i < PG_WHISPER_MAX_LANGUAGES; i++)
            if (!strcmp(code, PG_WHISPER_LANGUAGES[i].code)) {
                if (t->lang[i] < 0) t->lang[i] = id;
                break;
            }
    }
    for (size_t k = 0; k + 1 < n_named; k++) /* all but <|0.00|> are required */
        if (*named[k].id < 0)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "not a Whisper tokenizer: no %s token in its %d-token vocabulary",
                            named[k].text, (int)tok->n_vocab);
    /* tokenizers without timestamp tokens (older HF Whisper tokenizer.json):
     * the model's timestamp logits follow <|notimestamps|> */
    if (t->timestamp_begin < 0) t->timestamp_begin = t->no_timestamps + 1;
    if (t->timestamp_begin >= tok->n_vocab)
        return pg_error(PAGODA_ERR_INVALID_ARG, "Whisper vocabulary of %d tokens has no timestamp tokens",
                        (int)tok->n_vocab);
    t->n_languages = pg_whisper_num_languages(tok->n_vocab);
    /* encode(" ") + [eot] */
    int32_t *ids = NULL;
    size_t n = 0;
    pagoda_status st = tok->encode(tok->ctx, " ", 1, &ids, &n);
    if (st) return st;
    for (size_t i = 0; i < n && t->n_blank < 7; i++) t->blank[t->n_blank++] = ids[i];
    free(ids);
    t->blank[t->n_blank++] = t->eot;
    return compute_non_speech(t, tok);
}

void pg_whisper_tokens_free(pg_whisper_tokens *t) {
    free(t->non_speech);
    t->non_speech = NULL;
    t->n_non_speech = 0;
}

int32_t pg_whisper_language_token(const pg_whisper_tokens *t, int index) {
    if (index < 0 || index >= t->n_languages) return -1;
    return t->lang[index];
}

pagoda_status pg_whisper_suppress_tokens(const pg_whisper_tokens *t, const char *spec, int32_t **out,
                                         int32_t *n_out) {
    *out = NULL;
    *n_out = 0;
    if (!spec || !*spec) return PAGODA_OK; /* openai: a falsy suppress_tokens adds no filter */
    idvec v = {0};
    bool minus_one = false;
    const char *p = spec;
    pagoda_status st = PAGODA_OK;
    while (*p && !st) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || (x < 0 && x != -1) || x >= t->n_vocab) {
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          "suppress_tokens '%s': expected comma-separated token ids below %d or -1",
                          spec, (int)t->n_vocab);
            break;
        }
        if (x == -1)
            minus_one = true;
        else if (!idvec_push(&v, (int32_t)x))
            st = pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') p++;
        else if (*p) st = pg_error(PAGODA_ERR_INVALID_ARG, "suppress_tokens '%s': expected ','", spec);
    }
    if (minus_one)
        for (int32_t i = 0; i < t->n_non_speech && !st; i++)
            if (!idvec_push(&v, t->non_speech[i])) st = pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
    const int32_t always[] = {t->transcribe, t->translate, t->sot, t->sot_prev, t->sot_lm, t->no_speech};
    for (size_t i = 0; i < sizeof always / sizeof always[0] && !st; i++)
        if (always[i] >= 0 && !idvec_push(&v, always[i]))
            st = pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
    if (st) {
        free(v.v);
        return st;
    }
    *out = v.v;
    *n_out = sort_unique(v.v, v.n);
    return PAGODA_OK;
}

int pg_whisper_sot_sequence(const pg_whisper_tokens *t, int lang_index, bool translate,
                            bool without_timestamps, int32_t out[4]) {
    int n = 0;
    out[n++] = t->sot;
    if (t->multilingual) {
        int32_t lt = pg_whisper_language_token(t, lang_index);
        out[n++] = lt >= 0 ? lt : pg_whisper_language_token(t, 0);
        out[n++] = translate ? t->translate : t->transcribe;
    }
    if (without_timestamps) out[n++] = t->no_timestamps;
    return n;
}
