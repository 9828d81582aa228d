/* Load a Hugging Face tokenizer.json (+ tokenizer_config.json).
 * Format reference: huggingface/tokenizers serialization of normalizers,
 * pre_tokenizers, models/bpe, processors and decoders. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "tokenizer/tok_internal.h"

static char *read_file(const char *path, size_t *len, pagoda_status *st) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        *st = pg_error(PAGODA_ERR_NOT_FOUND, "%s: cannot open", path);
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0) goto io;
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) goto io;
    char *b = malloc((size_t)n + 1);
    if (!b) {
        fclose(f);
        *st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory (%ld bytes)", path, n);
        return NULL;
    }
    if (fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        goto io;
    }
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    *st = PAGODA_OK;
    return b;
io:
    fclose(f);
    *st = pg_error(PAGODA_ERR_IO, "%s: read failed", path);
    return NULL;
}

static cJSON *parse_json_file(const char *path, pagoda_status *st) {
    size_t n;
    char *b = read_file(path, &n, st);
    if (!b) return NULL;
    cJSON *j = cJSON_ParseWithLength(b, n);
    if (!j) {
        const char *e = cJSON_GetErrorPtr();
        size_t at = (e && e >= b && e <= b + n) ? (size_t)(e - b) : 0;
        *st = pg_error(PAGODA_ERR_FORMAT, "%s: malformed JSON near byte %zu", path, at);
    }
    free(b);
    return j;
}

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool jbool(const cJSON *o, const char *key, bool def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    return def;
}

/* "pattern": {"String": "..."} or {"Regex": "..."} */
static const char *jpattern(const cJSON *o, bool *is_regex) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    if (cJSON_IsString(p)) {
        *is_regex = false;
        return p->valuestring;
    }
    const char *s = jstr(p, "String");
    if (s) {
        *is_regex = false;
        return s;
    }
    s = jstr(p, "Regex");
    *is_regex = s != NULL;
    return s;
}

typedef struct {
    const char *path;
} lctx;

static pagoda_status add_norm(pg_tokenizer *t, const lctx *L, const cJSON *n) {
    if (!n || cJSON_IsNull(n)) return PAGODA_OK;
    const char *type = jstr(n, "type");
    if (!type) return pg_error(PAGODA_ERR_FORMAT, "%s: normalizer without \"type\"", L->path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *e;
        cJSON_ArrayForEach(e, arr) {
            pagoda_status st = add_norm(t, L, e);
            if (st) return st;
        }
        return PAGODA_OK;
    }
    if (t->n_norms >= TOK_MAX_STAGES)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: too many normalizers", L->path);
    tok_norm *nm = &t->norms[t->n_norms];
    memset(nm, 0, sizeof *nm);
    if (!strcmp(type, "NFC")) nm->kind = NORM_NFC;
    else if (!strcmp(type, "NFD")) nm->kind = NORM_NFD;
    else if (!strcmp(type, "NFKC")) nm->kind = NORM_NFKC;
    else if (!strcmp(type, "NFKD")) nm->kind = NORM_NFKD;
    else if (!strcmp(type, "Lowercase")) nm->kind = NORM_LOWERCASE;
    else if (!strcmp(type, "Prepend")) {
        const char *p = jstr(n, "prepend");
        if (!p) return pg_error(PAGODA_ERR_FORMAT, "%s: Prepend normalizer without \"prepend\"", L->path);
        nm->kind = NORM_PREPEND;
        nm->a = pg_tok_strdup(t, p, strlen(p));
        nm->alen = strlen(p);
    } else if (!strcmp(type, "Replace")) {
        bool rx;
        const char *p = jpattern(n, &rx), *c = jstr(n, "content");
        if (!p || !c) return pg_error(PAGODA_ERR_FORMAT, "%s: Replace normalizer without pattern/content", L->path);
        nm->kind = NORM_REPLACE;
        if (rx) {
            pagoda_status st = pg_tok_compile(p, strlen(p), false, &nm->re, L->path);
            if (st) return st;
        }
        nm->a = pg_tok_strdup(t, p, strlen(p));
        nm->alen = strlen(p);
        nm->b = pg_tok_strdup(t, c, strlen(c));
        nm->blen = strlen(c);
    } else if (!strcmp(type, "Strip")) {
        nm->kind = NORM_STRIP;
        nm->left = jbool(n, "left", true);
        nm->right = jbool(n, "right", true);
    } else {
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: normalizer type '%s' not supported", L->path, type);
    }
    if ((nm->alen && !nm->a) || (nm->blen && !nm->b)) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", L->path);
    t->n_norms++;
    return PAGODA_OK;
}

static tok_prepend_scheme parse_prepend(const cJSON *n) {
    const char *s = jstr(n, "prepend_scheme");
    if (s) {
        if (!strcmp(s, "never")) return PREPEND_NEVER;
        if (!strcmp(s, "first")) return PREPEND_FIRST;
        return PREPEND_ALWAYS;
    }
    return jbool(n, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
}

static pagoda_status add_pre(pg_tokenizer *t, const lctx *L, const cJSON *n) {
    if (!n || cJSON_IsNull(n)) return PAGODA_OK;
    const char *type = jstr(n, "type");
    if (!type) return pg_error(PAGODA_ERR_FORMAT, "%s: pre_tokenizer without \"type\"", L->path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(n, "pretokenizers"), *e;
        cJSON_ArrayForEach(e, arr) {
            pagoda_status st = add_pre(t, L, e);
            if (st) return st;
        }
        return PAGODA_OK;
    }
    if (t->n_pres >= TOK_MAX_STAGES)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: too many pre-tokenizers", L->path);
    tok_pre *p = &t->pres[t->n_pres];
    memset(p, 0, sizeof *p);
    pagoda_status st = PAGODA_OK;
    if (!strcmp(type, "Split")) {
        bool rx;
        const char *pat = jpattern(n, &rx);
        if (!pat) return pg_error(PAGODA_ERR_FORMAT, "%s: Split pre-tokenizer without pattern", L->path);
        p->kind = PRE_SPLIT;
        const char *b = jstr(n, "behavior");
        if (!b || !strcmp(b, "Isolated")) p->behavior = SPLIT_ISOLATED;
        else if (!strcmp(b, "Removed")) p->behavior = SPLIT_REMOVED;
        else if (!strcmp(b, "MergedWithPrevious")) p->behavior = SPLIT_MERGED_PREV;
        else if (!strcmp(b, "MergedWithNext")) p->behavior = SPLIT_MERGED_NEXT;
        else if (!strcmp(b, "Contiguous")) p->behavior = SPLIT_CONTIGUOUS;
        else return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: Split behavior '%s' not supported", L->path, b);
        p->invert = jbool(n, "invert", false);
        st = pg_tok_compile(pat, strlen(pat), !rx, &p->re, L->path);
    } else if (!strcmp(type, "ByteLevel")) {
        p->kind = PRE_BYTELEVEL;
        p->add_prefix_space = jbool(n, "add_prefix_space", true);
        if (jbool(n, "use_regex", true))
            st = pg_tok_compile(PG_TOK_GPT2_REGEX, strlen(PG_TOK_GPT2_REGEX), false, &p->re, L->path);
        t->byte_level = true;
    } else if (!strcmp(type, "Metaspace")) {
        p->kind = PRE_METASPACE;
        const char *r = jstr(n, "replacement");
        if (!r) r = "\xe2\x96\x81";
        p->repl_len = strlen(r);
        if (p->repl_len == 0 || p->repl_len > 4)
            return pg_error(PAGODA_ERR_FORMAT, "%s: Metaspace replacement must be one character", L->path);
        memcpy(p->repl, r, p->repl_len);
        p->prepend = parse_prepend(n);
        p->split = jbool(n, "split", true);
    } else if (!strcmp(type, "Digits")) {
        p->kind = PRE_DIGITS;
        p->individual_digits = jbool(n, "individual_digits", false);
    } else {
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: pre_tokenizer type '%s' not supported", L->path, type);
    }
    if (st) return st;
    t->n_pres++;
    return PAGODA_OK;
}

static pagoda_status add_dec(pg_tokenizer *t, const lctx *L, const cJSON *n) {
    if (!n || cJSON_IsNull(n)) return PAGODA_OK;
    const char *type = jstr(n, "type");
    if (!type) return pg_error(PAGODA_ERR_FORMAT, "%s: decoder without \"type\"", L->path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(n, "decoders"), *e;
        cJSON_ArrayForEach(e, arr) {
            pagoda_status st = add_dec(t, L, e);
            if (st) return st;
        }
        return PAGODA_OK;
    }
    if (t->n_decs >= TOK_MAX_STAGES) return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: too many decoders", L->path);
    tok_dec *d = &t->decs[t->n_decs];
    memset(d, 0, sizeof *d);
    if (!strcmp(type, "ByteLevel")) d->kind = DEC_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback")) d->kind = DEC_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse")) d->kind = DEC_FUSE;
    else if (!strcmp(type, "Metaspace")) {
        d->kind = DEC_METASPACE;
        const char *r = jstr(n, "replacement");
        if (!r) r = "\xe2\x96\x81";
        d->a = pg_tok_strdup(t, r, strlen(r));
        d->alen = strlen(r);
        d->prepend = parse_prepend(n);
    } else if (!strcmp(type, "Strip")) {
        d->kind = DEC_STRIP;
        const char *c = jstr(n, "content");
        if (!c) c = " ";
        d->a = pg_tok_strdup(t, c, strlen(c));
        d->alen = strlen(c);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(n, "start"), *e = cJSON_GetObjectItemCaseSensitive(n, "stop");
        d->start = cJSON_IsNumber(s) ? s->valueint : 0;
        d->stop = cJSON_IsNumber(e) ? e->valueint : 0;
    } else if (!strcmp(type, "Replace")) {
        bool rx;
        const char *p = jpattern(n, &rx), *c = jstr(n, "content");
        if (!p || !c || rx)
            return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: Replace decoder needs a string pattern and content", L->path);
        d->kind = DEC_REPLACE;
        d->a = pg_tok_strdup(t, p, strlen(p));
        d->alen = strlen(p);
        d->b = pg_tok_strdup(t, c, strlen(c));
        d->blen = strlen(c);
    } else {
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: decoder type '%s' not supported", L->path, type);
    }
    if ((d->alen && !d->a) || (d->blen && !d->b)) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", L->path);
    t->n_decs++;
    return PAGODA_OK;
}

static int32_t lookup_token(const pg_tokenizer *t, const char *s) {
    return s ? pg_strmap_get(&t->vocab, s, strlen(s)) : -1;
}

/* Post-processor -> prefix/suffix ids for add_special. */
static pagoda_status add_post(pg_tokenizer *t, const lctx *L, const cJSON *n) {
    if (!n || cJSON_IsNull(n)) return PAGODA_OK;
    const char *type = jstr(n, "type");
    if (!type) return pg_error(PAGODA_ERR_FORMAT, "%s: post_processor without \"type\"", L->path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(n, "processors"), *e;
        cJSON_ArrayForEach(e, arr) {
            pagoda_status st = add_post(t, L, e);
            if (st) return st;
        }
        return PAGODA_OK;
    }
    if (!strcmp(type, "ByteLevel")) return PAGODA_OK;
    if (!strcmp(type, "TemplateProcessing")) {
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(n, "single"), *e;
        const cJSON *specials = cJSON_GetObjectItemCaseSensitive(n, "special_tokens");
        bool after = false;
        t->n_prefix = t->n_suffix = 0;
        cJSON_ArrayForEach(e, single) {
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
            if (!sp) {
                after = true;
                continue;
            }
            const char *name = jstr(sp, "id");
            const cJSON *def = name ? cJSON_GetObjectItemCaseSensitive(specials, name) : NULL;
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(def, "ids"), *id;
            if (!cJSON_IsArray(ids))
                return pg_error(PAGODA_ERR_FORMAT, "%s: TemplateProcessing special token '%s' undefined",
                                L->path, name ? name : "?");
            cJSON_ArrayForEach(id, ids) {
                if (!cJSON_IsNumber(id)) continue;
                if (after ? t->n_suffix >= 4 : t->n_prefix >= 4)
                    return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: template adds too many tokens", L->path);
                if (after) t->suffix_ids[t->n_suffix++] = id->valueint;
                else t->prefix_ids[t->n_prefix++] = id->valueint;
            }
        }
        return PAGODA_OK;
    }
    if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(n, "cls"), *sep = cJSON_GetObjectItemCaseSensitive(n, "sep");
        const cJSON *ci = cJSON_GetArrayItem(cls, 1), *si = cJSON_GetArrayItem(sep, 1);
        if (!cJSON_IsNumber(ci) || !cJSON_IsNumber(si))
            return pg_error(PAGODA_ERR_FORMAT, "%s: %s without cls/sep", L->path, type);
        t->prefix_ids[0] = ci->valueint;
        t->n_prefix = 1;
        t->suffix_ids[0] = si->valueint;
        t->n_suffix = 1;
        return PAGODA_OK;
    }
    return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: post_processor type '%s' not supported", L->path, type);
}

/* bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}. */
static const char *config_token(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) return jstr(v, "content");
    return NULL;
}

/* The id of tokenizer_config.json's special token `key`, or -1 (absent /
 * null). A token that tokenizer.json does not have is ignored with a
 * warning: transformers would append it as a new token whose id is past the
 * model's vocabulary, so the special token means nothing to the model. */
static int32_t config_special(const pg_tokenizer *t, const char *cpath, const char *tpath,
                              const cJSON *cfg, const char *key) {
    const char *text = config_token(cfg, key);
    if (!text) return -1;
    int32_t id = lookup_token(t, text);
    if (id < 0)
        PG_WARN("%s: %s '%.64s' is not a token of %s; pagoda ignores it (the tokenizer keeps its "
                "own %s, if any; transformers would add it as a new token past the model's "
                "vocabulary). Fix: name a token of the vocabulary, e.g. its added_tokens' content",
                cpath, key, text, tpath, key);
    return id;
}

static pagoda_status load_model(pg_tokenizer *t, const lctx *L, const cJSON *model, const cJSON *added) {
    const char *type = jstr(model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!type && cJSON_IsObject(vocab) && cJSON_GetObjectItemCaseSensitive(model, "merges")) type = "BPE";
    if (!type) return pg_error(PAGODA_ERR_FORMAT, "%s: model without \"type\"", L->path);
    if (strcmp(type, "BPE") != 0)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: model type '%s' not supported (only BPE)", L->path, type);
    if (!cJSON_IsObject(vocab)) return pg_error(PAGODA_ERR_FORMAT, "%s: model.vocab is not an object", L->path);
    const char *csp = jstr(model, "continuing_subword_prefix"), *eow = jstr(model, "end_of_word_suffix");
    if ((csp && *csp) || (eow && *eow))
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: BPE continuing_subword_prefix/end_of_word_suffix not supported", L->path);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: BPE dropout not supported", L->path);

    int32_t n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e8)
            return pg_error(PAGODA_ERR_FORMAT, "%s: vocab entry '%s' has a bad id", L->path, e->string);
        if (e->valueint + 1 > n) n = e->valueint + 1;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 1e8 || !jstr(e, "content"))
            return pg_error(PAGODA_ERR_FORMAT, "%s: added_tokens entry without id/content", L->path);
        if (id->valueint + 1 > n) n = id->valueint + 1;
    }
    if (n == 0) return pg_error(PAGODA_ERR_FORMAT, "%s: empty vocab", L->path);
    /* Ids index dense per-token arrays (~70 bytes per id), so a few entries
     * with a huge id would cost gigabytes: real vocabularies number their
     * tokens 0..n-1, with at most a few unused ids between the model's
     * vocab and its added tokens. Refuse ids far sparser than that. */
    int64_t n_entries = (int64_t)cJSON_GetArraySize(vocab) + cJSON_GetArraySize(added);
    if ((int64_t)n > 2 * n_entries + 65536)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: token ids are sparse: the largest id is %d but the file has only %lld "
                        "tokens (ids should number the tokens 0..n-1)",
                        L->path, n - 1, (long long)n_entries);
    pagoda_status st = pg_tok_alloc_vocab(t, n);
    if (st) return st;
    cJSON_ArrayForEach(e, vocab) {
        t->tokens[e->valueint] = e->string; /* borrowed until copied below */
    }
    int na = cJSON_GetArraySize(added);
    t->added = calloc((size_t)(na ? na : 1), sizeof *t->added);
    if (!t->added) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", L->path);
    cJSON_ArrayForEach(e, added) {
        int id = cJSON_GetObjectItemCaseSensitive(e, "id")->valueint;
        const char *c = jstr(e, "content");
        if (!t->tokens[id]) t->tokens[id] = (char *)c;
        tok_added *a = &t->added[t->n_added++];
        a->content = c;
        a->len = strlen(c);
        a->id = id;
        a->special = jbool(e, "special", false);
        a->lstrip = jbool(e, "lstrip", false);
        a->rstrip = jbool(e, "rstrip", false);
        a->normalized = jbool(e, "normalized", !a->special);
        a->single_word = jbool(e, "single_word", false);
        /* added-token content is raw text (matched in the input as is), so
         * it decodes as is: the ByteLevel decoder would mangle "ø" etc. */
        t->raw_decode[id] = 1;
    }
    /* copy strings into tokenizer-owned storage (the cJSON tree is freed) */
    for (int32_t i = 0; i < n; i++) {
        if (!t->tokens[i]) continue;
        char *d = pg_tok_strdup(t, t->tokens[i], strlen(t->tokens[i]));
        if (!d) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", L->path);
        t->tokens[i] = d;
    }
    /* each added token keeps its own content: its id may also be a vocab
     * entry (or another added token's) with other text, and a->len is this
     * content's length (sharing tokens[id] read past a shorter string:
     * found by fuzz_tokenizer_json) */
    for (int i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        a->content = pg_tok_strdup(t, a->content, a->len);
        if (!a->content) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", L->path);
    }

    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->ignore_merges = jbool(model, "ignore_merges", false);
    t->fuse_unk = jbool(model, "fuse_unk", false);
    return PAGODA_OK;
}

static pagoda_status load_merges(pg_tokenizer *t, const lctx *L, const cJSON *model) {
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges"), *e;
    int nm = cJSON_GetArraySize(merges);
    pagoda_status st = pg_pairmap_init(&t->merges, (size_t)nm);
    if (st) return st;
    char *tmp = NULL;
    size_t tmpcap = 0;
    uint32_t rank = 0;
    cJSON_ArrayForEach(e, merges) {
        const char *a, *b;
        size_t al, bl;
        if (cJSON_IsString(e)) {
            const char *s = e->valuestring, *sp = strchr(s, ' ');
            if (!sp) {
                free(tmp);
                return pg_error(PAGODA_ERR_FORMAT, "%s: merge %u '%s' is not \"a b\"", L->path, rank, s);
            }
            a = s;
            al = (size_t)(sp - s);
            b = sp + 1;
            bl = strlen(b);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            a = e->child->valuestring;
            al = strlen(a);
            b = e->child->next->valuestring;
            bl = strlen(b);
        } else {
            free(tmp);
            return pg_error(PAGODA_ERR_FORMAT, "%s: merge %u is neither \"a b\" nor [a, b]", L->path, rank);
        }
        if (al + bl + 1 > tmpcap) {
            tmpcap = (al + bl + 1) * 2;
            char *nt = realloc(tmp, tmpcap);
            if (!nt) {
                free(tmp);
                return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", L->path);
            }
            tmp = nt;
        }
        memcpy(tmp, a, al);
        memcpy(tmp + al, b, bl);
        int32_t li = pg_strmap_get(&t->vocab, a, al), ri = pg_strmap_get(&t->vocab, b, bl);
        int32_t mi = pg_strmap_get(&t->vocab, tmp, al + bl);
        if (li < 0 || ri < 0 || mi < 0) {
            free(tmp);
            return pg_error(PAGODA_ERR_FORMAT, "%s: merge %u refers to a token missing from the vocab", L->path, rank);
        }
        if ((st = pg_pairmap_put(&t->merges, li, ri, rank, mi))) {
            free(tmp);
            return st;
        }
        rank++;
    }
    free(tmp);
    return PAGODA_OK;
}

static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

pagoda_status pg_tok_load_json(const char *dir, pg_tokenizer **out) {
    *out = NULL;
    char *path = path_join(dir, "tokenizer.json"), *cpath = path_join(dir, "tokenizer_config.json");
    if (!path || !cpath) {
        free(path);
        free(cpath);
        return pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory");
    }
    pagoda_status st;
    cJSON *root = parse_json_file(path, &st), *cfg = NULL;
    pg_tokenizer *t = NULL;
    if (!root) goto done;
    {
        FILE *f = fopen(cpath, "rb");
        if (f) {
            fclose(f);
            cfg = parse_json_file(cpath, &st);
            if (!cfg) goto done;
        }
    }
    t = pg_tok_new();
    if (!t) {
        st = pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    lctx L = {path};
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) {
        st = pg_error(PAGODA_ERR_FORMAT, "%s: no \"model\" object", path);
        goto done;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if ((st = load_model(t, &L, model, added))) goto done;
    if ((st = add_norm(t, &L, cJSON_GetObjectItemCaseSensitive(root, "normalizer")))) goto done;
    if ((st = add_pre(t, &L, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer")))) goto done;
    if ((st = add_dec(t, &L, cJSON_GetObjectItemCaseSensitive(root, "decoder")))) goto done;
    if ((st = pg_tok_finish(t, path))) goto done;
    if ((st = load_merges(t, &L, model))) goto done;
    t->unk_id = lookup_token(t, jstr(model, "unk_token"));
    if ((st = add_post(t, &L, cJSON_GetObjectItemCaseSensitive(root, "post_processor")))) goto done;
    for (int i = 0; i < t->n_prefix; i++)
        if (t->prefix_ids[i] < 0 || t->prefix_ids[i] >= t->n_vocab) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: post_processor id out of range", path);
            goto done;
        }
    for (int i = 0; i < t->n_suffix; i++)
        if (t->suffix_ids[i] < 0 || t->suffix_ids[i] >= t->n_vocab) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: post_processor id out of range", path);
            goto done;
        }
    if (t->n_prefix == 1) t->bos_id = t->prefix_ids[0];
    if (cfg) {
        int32_t b = config_special(t, cpath, path, cfg, "bos_token");
        int32_t e = config_special(t, cpath, path, cfg, "eos_token");
        int32_t p = config_special(t, cpath, path, cfg, "pad_token");
        (void)config_special(t, cpath, path, cfg, "unk_token");
        if (b >= 0) t->bos_id = b;
        if (e >= 0) t->eos_id = e;
        if (p >= 0) t->pad_id = p;
        const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
        const cJSON *ae = cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token");
        if (cJSON_IsBool(ab) || cJSON_IsBool(ae)) {
            /* transformers' update_post_processor: "[bos] $A [eos]" from the flags */
            t->n_prefix = t->n_suffix = 0;
            if (cJSON_IsTrue(ab) && t->bos_id >= 0) t->prefix_ids[t->n_prefix++] = t->bos_id;
            if (cJSON_IsTrue(ae) && t->eos_id >= 0) t->suffix_ids[t->n_suffix++] = t->eos_id;
        }
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
        const char *tmpl = NULL;
        if (cJSON_IsString(ct)) {
            tmpl = ct->valuestring;
        } else if (cJSON_IsArray(ct)) { /* [{"name": "default", "template": ...}, ...] */
            const cJSON *e2;
            cJSON_ArrayForEach(e2, ct) {
                const char *nm = jstr(e2, "name");
                if (!tmpl || (nm && !strcmp(nm, "default"))) tmpl = jstr(e2, "template");
            }
        }
        if (tmpl && !(t->chat_template = pg_tok_strdup(t, tmpl, strlen(tmpl)))) {
            st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", cpath);
            goto done;
        }
    }
    *out = t;
    t = NULL;
done:
    pg_tokenizer_free(t);
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    free(path);
    free(cpath);
    return st;
}
