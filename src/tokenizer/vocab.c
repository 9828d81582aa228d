/* Tokenizer from GGUF-style vocab arrays (see vocab.h). The pre-tokenizer
 * regexes per tokenizer.ggml.pre are those llama.cpp uses
 * (llm_tokenizer_bpe in llama-vocab.cpp), which equal the Split regexes of
 * the models' Hugging Face tokenizer.json files. */
#include "tokenizer/vocab.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static const char RX_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
static const char RX_LLAMA3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX_QWEN2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char RX_GPT4O[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX_QWEN35[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* DeepSeek LLM: the letter class is an explicit list of ranges. */
static const char *const RX_DEEPSEEK_LLM[] = {
    "[\\r\\n]",
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-"
    "\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-"
    "\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"
    "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-"
    "\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"
    "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-"
    "\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}+",
    NULL,
};
static const char *const RX_LIST_GPT2[] = {RX_GPT2, NULL};
static const char *const RX_LIST_LLAMA3[] = {RX_LLAMA3, NULL};
static const char *const RX_LIST_QWEN2[] = {RX_QWEN2, NULL};
static const char *const RX_LIST_GPT4O[] = {RX_GPT4O, NULL};
static const char *const RX_LIST_QWEN35[] = {RX_QWEN35, NULL};
static const char *const RX_LIST_REFACT[] = {"\\p{N}", RX_GPT2, NULL};
/* llama.cpp's fallback for BPE vocabs without a known pre type */
static const char *const RX_LIST_DEFAULT[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL};

typedef struct {
    const char *name;
    const char *const *regexes;
    bool llama3; /* llama.cpp: ignore_merges and add_bos default on */
} pre_def;

static const pre_def PRE_TYPES[] = {
    {"default", RX_LIST_DEFAULT, false},
    {"gpt-2", RX_LIST_GPT2, false},
    {"mpt", RX_LIST_GPT2, false},
    {"olmo", RX_LIST_GPT2, false},
    {"jais", RX_LIST_GPT2, false},
    {"refact", RX_LIST_REFACT, false},
    {"command-r", RX_LIST_REFACT, false},
    {"smollm", RX_LIST_REFACT, false},
    {"codeshell", RX_LIST_REFACT, false},
    {"deepseek-llm", RX_DEEPSEEK_LLM, false},
    {"llama3", RX_LIST_LLAMA3, true},
    {"llama-bpe", RX_LIST_LLAMA3, true},
    {"llama-v3", RX_LIST_LLAMA3, true},
    {"smaug-bpe", RX_LIST_LLAMA3, false},
    {"qwen2", RX_LIST_QWEN2, false},
    {"stablelm2", RX_LIST_QWEN2, false},
    {"qwen35", RX_LIST_QWEN35, false},
    {"gpt-4o", RX_LIST_GPT4O, false},
    {"o200k", RX_LIST_GPT4O, false},
};

static size_t tlen(const pg_vocab_spec *s, int32_t i) {
    return s->token_lens ? s->token_lens[i] : strlen(s->tokens[i]);
}

typedef struct {
    float score;
    int32_t id;
} scored;

static int cmp_scored(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->id - y->id;
}

/* SentencePiece BPE as llama.cpp runs it: merge the adjacent pair whose
 * concatenation is a vocab piece with the highest score (leftmost on ties).
 * Expressed as a merge table: pair (left, right) -> (rank of the piece's
 * score, piece id), ranks dense so equal scores tie. */
static pagoda_status build_spm_merges(pg_tokenizer *t, const pg_vocab_spec *s) {
    int32_t n = t->n_vocab;
    scored *sc = malloc((size_t)n * sizeof *sc);
    uint32_t *rank = malloc((size_t)n * sizeof *rank);
    if (!sc || !rank) {
        free(sc);
        free(rank);
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", s->what);
    }
    for (int32_t i = 0; i < n; i++) {
        sc[i].score = s->scores ? s->scores[i] : 0.0f;
        sc[i].id = i;
    }
    qsort(sc, (size_t)n, sizeof *sc, cmp_scored);
    uint32_t r = 0;
    for (int32_t i = 0; i < n; i++) {
        if (i > 0 && sc[i].score != sc[i - 1].score) r++;
        rank[sc[i].id] = r;
    }
    free(sc);
    size_t max_len;
    uint8_t *lens = pg_tok_length_set(t, n, &max_len);
    if (!lens) {
        free(rank);
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", s->what);
    }
    pagoda_status st = pg_pairmap_init(&t->merges, (size_t)n * 2);
    for (int32_t i = 0; i < n && !st; i++) {
        if (s->types && s->types[i] == PG_TOKTYPE_BYTE) continue;
        const char *txt = t->tokens[i];
        size_t len = t->token_lens[i];
        for (size_t k = 1; k < len && !st; k++) {
            if (!lens[k] || !lens[len - k]) continue; /* no token that long */
            if (((uint8_t)txt[k] & 0xC0) == 0x80) continue; /* not a char boundary */
            int32_t l = pg_strmap_get(&t->vocab, txt, k), rr = pg_strmap_get(&t->vocab, txt + k, len - k);
            if (l < 0 || rr < 0) continue;
            st = pg_pairmap_put(&t->merges, l, rr, rank[i], i);
        }
    }
    free(lens);
    free(rank);
    return st;
}

static pagoda_status build_bpe_merges(pg_tokenizer *t, const pg_vocab_spec *s) {
    pagoda_status st = pg_pairmap_init(&t->merges, (size_t)s->n_merges);
    if (st) return st;
    char *tmp = NULL;
    size_t cap = 0;
    for (int32_t r = 0; r < s->n_merges; r++) {
        const char *m = s->merges[r];
        size_t ml = s->merge_lens ? s->merge_lens[r] : strlen(m);
        const char *sp = ml > 1 ? memchr(m + 1, ' ', ml - 1) : NULL;
        if (!sp) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: merge %d is not \"a b\"", s->what, (int)r);
            break;
        }
        size_t al = (size_t)(sp - m), bl = ml - al - 1;
        if (al + bl > cap) {
            cap = 2 * (al + bl) + 16;
            char *nt = realloc(tmp, cap);
            if (!nt) {
                st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", s->what);
                break;
            }
            tmp = nt;
        }
        memcpy(tmp, m, al);
        memcpy(tmp + al, sp + 1, bl);
        int32_t a = pg_strmap_get(&t->vocab, m, al), b = pg_strmap_get(&t->vocab, sp + 1, bl);
        int32_t c = pg_strmap_get(&t->vocab, tmp, al + bl);
        if (a < 0 || b < 0 || c < 0) continue; /* llama.cpp ignores such merges too */
        if ((st = pg_pairmap_put(&t->merges, a, b, (uint32_t)r, c))) break;
    }
    free(tmp);
    return st;
}

static void add_dec(pg_tokenizer *t, tok_dec_kind k, const char *a, const char *b, int start) {
    tok_dec *d = &t->decs[t->n_decs++];
    memset(d, 0, sizeof *d);
    d->kind = k;
    d->a = (char *)a;
    d->alen = a ? strlen(a) : 0;
    d->b = (char *)b;
    d->blen = b ? strlen(b) : 0;
    d->start = start;
}

pagoda_status pg_tokenizer_from_vocab(const pg_vocab_spec *s, pg_tokenizer **out) {
    *out = NULL;
    if (!s->model) return pg_error(PAGODA_ERR_FORMAT, "%s: no tokenizer.ggml.model", s->what);
    bool spm = !strcmp(s->model, "llama"), bpe = !strcmp(s->model, "gpt2");
    if (!spm && !bpe)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: tokenizer model '%s' not supported (llama, gpt2)",
                        s->what, s->model);
    if (s->n_tokens <= 0 || !s->tokens) return pg_error(PAGODA_ERR_FORMAT, "%s: empty token list", s->what);
    const pre_def *pre = NULL;
    if (bpe) {
        const char *name = s->pre ? s->pre : "default";
        for (size_t i = 0; i < sizeof PRE_TYPES / sizeof PRE_TYPES[0]; i++)
            if (!strcmp(PRE_TYPES[i].name, name)) pre = &PRE_TYPES[i];
        if (!pre)
            return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: pre-tokenizer type '%s' not supported", s->what, name);
    }
    pg_tokenizer *t = pg_tok_new();
    if (!t) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", s->what);
    pagoda_status st = pg_tok_alloc_vocab(t, s->n_tokens);
    if (st) goto fail;
    t->added = calloc((size_t)s->n_tokens, sizeof *t->added);
    if (!t->added) {
        st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", s->what);
        goto fail;
    }
    for (int32_t i = 0; i < s->n_tokens; i++) {
        if (!s->tokens[i]) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: token %d has no text", s->what, (int)i);
            goto fail;
        }
        t->tokens[i] = pg_tok_strdup(t, s->tokens[i], tlen(s, i));
        if (!t->tokens[i]) {
            st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", s->what);
            goto fail;
        }
        int type = s->types ? s->types[i] : PG_TOKTYPE_NORMAL;
        if (type == PG_TOKTYPE_CONTROL || type == PG_TOKTYPE_UNKNOWN || type == PG_TOKTYPE_USER_DEFINED) {
            tok_added *a = &t->added[t->n_added++];
            a->content = t->tokens[i];
            a->len = tlen(s, i);
            a->id = i;
            a->special = type != PG_TOKTYPE_USER_DEFINED;
            t->raw_decode[i] = 1; /* llama.cpp token_to_piece copies these verbatim */
            a->normalized = !a->special;
        } else if (type == PG_TOKTYPE_UNUSED) {
            t->raw_decode[i] = 2; /* llama.cpp token_to_piece gives them no text */
        }
    }
    t->unk_id = s->unk_id >= 0 && s->unk_id < s->n_tokens ? s->unk_id : -1;
    t->bos_id = s->bos_id >= 0 && s->bos_id < s->n_tokens ? s->bos_id : -1;
    t->eos_id = s->eos_id >= 0 && s->eos_id < s->n_tokens ? s->eos_id : -1;
    t->pad_id = s->pad_id >= 0 && s->pad_id < s->n_tokens ? s->pad_id : -1;

    static const char SPACE_MARK[] = "\xe2\x96\x81"; /* U+2581 '▁' */
    if (spm) {
        t->byte_fallback = true;
        bool prefix = s->add_space_prefix != 0; /* llama.cpp default: true */
        if (prefix) {
            tok_norm *nm = &t->norms[t->n_norms++];
            memset(nm, 0, sizeof *nm);
            nm->kind = NORM_PREPEND;
            nm->a = (char *)SPACE_MARK;
            nm->alen = 3;
        }
        tok_norm *nm = &t->norms[t->n_norms++];
        memset(nm, 0, sizeof *nm);
        nm->kind = NORM_REPLACE;
        nm->a = " ";
        nm->alen = 1;
        nm->b = (char *)SPACE_MARK;
        nm->blen = 3;
        add_dec(t, DEC_REPLACE, SPACE_MARK, " ", 0);
        add_dec(t, DEC_BYTEFALLBACK, NULL, NULL, 0);
        add_dec(t, DEC_FUSE, NULL, NULL, 0);
        if (prefix) add_dec(t, DEC_STRIP, " ", NULL, 1);
    } else {
        t->byte_level = true;
        for (const char *const *rx = pre->regexes; *rx; rx++) {
            tok_pre *p = &t->pres[t->n_pres];
            memset(p, 0, sizeof *p);
            p->kind = PRE_SPLIT;
            p->behavior = SPLIT_ISOLATED;
            if ((st = pg_tok_compile(*rx, strlen(*rx), false, &p->re, s->what))) goto fail;
            t->n_pres++;
        }
        tok_pre *p = &t->pres[t->n_pres++];
        memset(p, 0, sizeof *p);
        p->kind = PRE_BYTELEVEL;
        add_dec(t, DEC_BYTELEVEL, NULL, NULL, 0);
        t->ignore_merges = pre->llama3;
    }
    if ((st = pg_tok_finish(t, s->what))) goto fail;
    st = spm ? build_spm_merges(t, s) : build_bpe_merges(t, s);
    if (st) goto fail;

    bool add_bos = s->add_bos >= 0 ? s->add_bos != 0 : (spm || (pre && pre->llama3));
    bool add_eos = s->add_eos >= 0 ? s->add_eos != 0 : false;
    if (add_bos && t->bos_id >= 0) t->prefix_ids[t->n_prefix++] = t->bos_id;
    if (add_eos && t->eos_id >= 0) t->suffix_ids[t->n_suffix++] = t->eos_id;
    if (s->chat_template && !(t->chat_template = pg_tok_strdup(t, s->chat_template, strlen(s->chat_template)))) {
        st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", s->what);
        goto fail;
    }
    *out = t;
    return PAGODA_OK;
fail:
    pg_tokenizer_free(t);
    return st;
}
