/* Tokenizer core: shared tables, encode (added tokens -> normalizer ->
 * pre-tokenizer -> BPE -> post-processor) and decode (decoder chain).
 * Reference behaviour: Hugging Face tokenizers (tokenizer/mod.rs,
 * added_vocabulary.rs, models/bpe/word.rs) and llama.cpp llama-vocab.cpp. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

const char PG_TOK_GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------------ */
/* small growable vectors                                              */

typedef struct {
    char *p;
    size_t n, cap;
} bytebuf;

typedef struct {
    int32_t *p;
    size_t n, cap;
} idvec;

typedef struct {
    size_t off, len;
    bool raw; /* decode: token text passes the per-token decoders unchanged */
} piece;

typedef struct {
    piece *p;
    size_t n, cap;
} piecevec;

static bool bb_reserve(bytebuf *b, size_t extra) {
    if (b->n + extra <= b->cap) return true;
    size_t nc = b->cap ? b->cap * 2 : 256;
    while (nc < b->n + extra) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) return false;
    b->p = np;
    b->cap = nc;
    return true;
}

static bool bb_append(bytebuf *b, const void *s, size_t n) {
    if (!n) return true;
    if (!bb_reserve(b, n)) return false;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return true;
}

static bool iv_push(idvec *v, int32_t id) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 64;
        int32_t *np = realloc(v->p, nc * sizeof *np);
        if (!np) return false;
        v->p = np;
        v->cap = nc;
    }
    v->p[v->n++] = id;
    return true;
}

static bool pv_push(piecevec *v, size_t off, size_t len) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 64;
        piece *np = realloc(v->p, nc * sizeof *np);
        if (!np) return false;
        v->p = np;
        v->cap = nc;
    }
    v->p[v->n].off = off;
    v->p[v->n].len = len;
    v->p[v->n].raw = false;
    v->n++;
    return true;
}

/* ------------------------------------------------------------------ */
/* UTF-8 and the GPT-2 byte mapping                                    */

static size_t utf8_len(uint8_t c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;
}

static size_t utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decode one code point at s[0..n); returns its length (1 for invalid). */
static size_t utf8_decode(const char *s, size_t n, uint32_t *cp) {
    uint8_t c = (uint8_t)s[0];
    size_t l = utf8_len(c);
    if (l == 1 || l > n) {
        *cp = c;
        return 1;
    }
    uint32_t v = c & (0xFF >> (l + 1));
    for (size_t i = 1; i < l; i++) {
        uint8_t d = (uint8_t)s[i];
        if ((d & 0xC0) != 0x80) {
            *cp = c;
            return 1;
        }
        v = (v << 6) | (d & 0x3F);
    }
    *cp = v;
    return l;
}

/* bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68
 * bytes to 256, 257, ... in byte order (OpenAI GPT-2 encoder.py). */
static bool byte_is_direct(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t pg_tok_byte_to_cp(uint8_t b) {
    if (byte_is_direct(b)) return b;
    uint32_t n = 0;
    for (int i = 0; i < b; i++)
        if (!byte_is_direct(i)) n++;
    return 256 + n;
}

int pg_tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_direct((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t n = 0;
    for (int i = 0; i < 256; i++) {
        if (byte_is_direct(i)) continue;
        if (256 + n == cp) return i;
        n++;
    }
    return -1;
}

/* ------------------------------------------------------------------ */
/* construction helpers                                                */

pg_tokenizer *pg_tok_new(void) {
    pg_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->unk_id = -1;
    t->bos_id = t->eos_id = t->pad_id = -1;
    for (int i = 0; i < 256; i++) t->byte_char_id[i] = t->byte_tok_id[i] = -1;
    return t;
}

char *pg_tok_strdup(pg_tokenizer *t, const char *s, size_t len) {
    if (t->n_owned == t->owned_cap) {
        size_t nc = t->owned_cap ? t->owned_cap * 2 : 64;
        char **np = realloc(t->owned, nc * sizeof *np);
        if (!np) return NULL;
        t->owned = np;
        t->owned_cap = nc;
    }
    char *d = malloc(len + 1);
    if (!d) return NULL;
    memcpy(d, s, len);
    d[len] = 0;
    t->owned[t->n_owned++] = d;
    return d;
}

uint8_t *pg_tok_length_set(const pg_tokenizer *t, int32_t n, size_t *max_len) {
    size_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (t->token_lens[i] > m) m = t->token_lens[i];
    uint8_t *set = calloc(m + 1, 1);
    if (!set) return NULL;
    for (int32_t i = 0; i < n; i++)
        set[t->token_lens[i]] = 1;
    *max_len = m;
    return set;
}

pagoda_status pg_tok_alloc_vocab(pg_tokenizer *t, int32_t n) {
    t->n_vocab = n;
    t->tokens = calloc((size_t)n, sizeof *t->tokens);
    t->token_lens = calloc((size_t)n, sizeof *t->token_lens);
    t->is_special = calloc((size_t)n, 1);
    t->raw_decode = calloc((size_t)n, 1);
    t->bytes = calloc((size_t)n, sizeof *t->bytes);
    t->bytes_lens = calloc((size_t)n, sizeof *t->bytes_lens);
    if (!t->tokens || !t->token_lens || !t->is_special || !t->raw_decode || !t->bytes || !t->bytes_lens)
        return pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory (%d tokens)", (int)n);
    return PAGODA_OK;
}

pagoda_status pg_tok_compile(const char *pattern, size_t len, bool literal, pcre2_code **out,
                             const char *what) {
    int err;
    PCRE2_SIZE off;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
    if (literal) opts = PCRE2_LITERAL | PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return pg_error(PAGODA_ERR_FORMAT, "%s: bad regex at offset %zu: %s", what, (size_t)off,
                        (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* interpreter if JIT is missing */
    *out = re;
    return PAGODA_OK;
}

static int cmp_added(const void *a, const void *b) {
    const tok_added *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id - y->id;
}

/* Run the per-token decoders (all but Fuse/Strip and first-token rules) on
 * one token: the bytes it contributes in the middle of a text. */
static bool token_decoded_bytes(const pg_tokenizer *t, const char *s, size_t n, bytebuf *out);

pagoda_status pg_tok_finish(pg_tokenizer *t, const char *what) {
    pagoda_status st = pg_strmap_init(&t->vocab, (size_t)t->n_vocab);
    if (st) return st;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (!t->tokens[i]) {
            t->tokens[i] = "";
            t->token_lens[i] = 0;
            continue;
        }
        t->token_lens[i] = (uint32_t)strlen(t->tokens[i]);
    }
    /* Later ids win for duplicate text only if the earlier is empty:
     * insert in reverse so the lowest id wins (as HF's vocab map). */
    for (int32_t i = t->n_vocab - 1; i >= 0; i--) {
        if (!t->token_lens[i]) continue;
        if ((st = pg_strmap_put(&t->vocab, t->tokens[i], t->token_lens[i], i))) return st;
    }
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t l = utf8_encode(pg_tok_byte_to_cp((uint8_t)b), u);
        memcpy(t->byte_char[b], u, 2);
        t->byte_char_len[b] = (uint8_t)l;
        if (t->byte_level) t->byte_char_id[b] = pg_strmap_get(&t->vocab, u, l);
    }
    /* can the text be cut before each "▁" that follows another char? */
    if (!t->byte_level && t->n_pres == 0) {
        bool any_mark = false, crossing = false;
        for (int32_t i = 0; i < t->n_vocab && !crossing; i++) {
            const char *s = t->tokens[i];
            uint32_t n = t->token_lens[i];
            for (uint32_t k = 0; k + 3 <= n; k++) {
                if (memcmp(s + k, "\xe2\x96\x81", 3)) continue;
                any_mark = true;
                if (k > 0 && !(k >= 3 && !memcmp(s + k - 3, "\xe2\x96\x81", 3))) {
                    crossing = true;
                    break;
                }
            }
        }
        t->split_at_mark = any_mark && !crossing;
    }
    for (int b = 0; b < 128; b++) {
        char ch = (char)b;
        t->ascii_id[b] = pg_strmap_get(&t->vocab, &ch, 1);
    }
    for (int b = 0; b < 256; b++) {
        char nm[8];
        snprintf(nm, sizeof nm, "<0x%02X>", b);
        t->byte_tok_id[b] = pg_strmap_get(&t->vocab, nm, 6);
    }
    if (t->n_added) qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_added);
    for (int i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        if (a->len) t->added_first_byte[(uint8_t)a->content[0]] = 1;
        if (a->special && a->id >= 0 && a->id < t->n_vocab) t->is_special[a->id] = 1;
    }
    bytebuf bb = {0};
    for (int32_t i = 0; i < t->n_vocab; i++) {
        bb.n = 0;
        if (t->raw_decode[i] == 2) {
            /* no text */
        } else if (t->is_special[i] || t->raw_decode[i]) {
            if (!bb_append(&bb, t->tokens[i], t->token_lens[i])) goto oom;
        } else if (!token_decoded_bytes(t, t->tokens[i], t->token_lens[i], &bb)) {
            goto oom;
        }
        char *d = pg_tok_strdup(t, bb.p ? bb.p : "", bb.n);
        if (!d) goto oom;
        t->bytes[i] = d;
        t->bytes_lens[i] = (uint32_t)bb.n;
    }
    free(bb.p);
    (void)what;
    return PAGODA_OK;
oom:
    free(bb.p);
    return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", what);
}

void pg_tokenizer_free(pg_tokenizer *t) {
    if (!t) return;
    pg_strmap_free(&t->vocab);
    pg_pairmap_free(&t->merges);
    for (int i = 0; i < t->n_pres; i++)
        if (t->pres[i].re) pcre2_code_free(t->pres[i].re);
    for (int i = 0; i < t->n_norms; i++)
        if (t->norms[i].re) pcre2_code_free(t->norms[i].re);
    for (size_t i = 0; i < t->n_owned; i++) free(t->owned[i]);
    free(t->owned);
    free(t->tokens);
    free(t->token_lens);
    free(t->is_special);
    free(t->raw_decode);
    free(t->bytes);
    free(t->bytes_lens);
    free(t->added);
    free(t);
}

pagoda_status pg_tokenizer_load(const char *path, pg_tokenizer **out) {
    *out = NULL;
    if (!path || !*path) return pg_error(PAGODA_ERR_INVALID_ARG, "tokenizer: empty path");
    struct stat sb;
    if (stat(path, &sb) != 0) return pg_error(PAGODA_ERR_NOT_FOUND, "%s: no such file or directory", path);
    if (S_ISDIR(sb.st_mode)) return pg_tok_load_json(path, out);
    size_t n = strlen(path);
    if (n >= 5 && !strcmp(path + n - 5, ".gguf")) return pg_tok_load_gguf(path, out);
    if (pg_tokenizer_is_tiktoken_path(path)) return pg_tokenizer_load_tiktoken(path, 99, out);
    if (n >= 14 && !strcmp(path + n - 14, "tokenizer.json")) {
        /* a tokenizer.json file: load its directory */
        char dir[4096];
        if (n - 14 >= sizeof dir) return pg_error(PAGODA_ERR_INVALID_ARG, "%s: path too long", path);
        memcpy(dir, path, n - 14);
        dir[n - 14] = 0;
        if (!dir[0]) strcpy(dir, ".");
        return pg_tok_load_json(dir, out);
    }
    /* sniff the GGUF magic */
    FILE *f = fopen(path, "rb");
    if (!f) return pg_error(PAGODA_ERR_IO, "%s: cannot open", path);
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got == 4 && !memcmp(magic, "GGUF", 4)) return pg_tok_load_gguf(path, out);
    return pg_error(PAGODA_ERR_UNSUPPORTED,
                    "%s: not a tokenizer (expected a directory with tokenizer.json, a .gguf or a "
                    ".tiktoken file)",
                    path);
}

/* ------------------------------------------------------------------ */
/* normalizers                                                         */

static bool is_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((uint8_t)s[i] >= 0x80) return false;
    return true;
}

/* Replace every match of nm->re in `in` by the literal nm->b, into out. */
static bool replace_regex(const tok_norm *nm, const bytebuf *in, bytebuf *out) {
    pcre2_match_data *md = pcre2_match_data_create(16, NULL);
    if (!md) return false;
    out->n = 0;
    size_t pos = 0, last = 0, n = in->n;
    bool ok = true;
    while (ok && pos <= n) {
        int rc = pcre2_match(nm->re, (PCRE2_SPTR)(in->p ? in->p : ""), n, pos, 0, md, NULL);
        if (rc < 0) break; /* no match (errors leave the rest unchanged) */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        ok = bb_append(out, in->p + last, ms - last) && bb_append(out, nm->b, nm->blen);
        last = me;
        pos = me > ms ? me : me + (me < n ? utf8_len((uint8_t)in->p[me]) : 1);
        if (me == ms && me < n && ok) { /* empty match: keep the next char */
            ok = bb_append(out, in->p + me, pos - me);
            last = pos;
        }
    }
    if (ok && last < n) ok = bb_append(out, in->p + last, n - last);
    pcre2_match_data_free(md);
    return ok;
}

/* Apply the normalizer chain to s[0..n) into out (replacing its content). */
static bool normalize(const pg_tokenizer *t, const char *s, size_t n, bytebuf *out, bytebuf *tmp) {
    out->n = 0;
    if (!bb_append(out, s, n)) return false;
    for (int k = 0; k < t->n_norms; k++) {
        const tok_norm *nm = &t->norms[k];
        switch (nm->kind) {
        case NORM_NFC:
        case NORM_NFD:
        case NORM_NFKC:
        case NORM_NFKD: {
            if (nm->kind != NORM_NFD && nm->kind != NORM_NFKD && is_ascii(out->p, out->n)) break;
            int opt = UTF8PROC_STABLE;
            if (nm->kind == NORM_NFC) opt |= UTF8PROC_COMPOSE;
            if (nm->kind == NORM_NFD) opt |= UTF8PROC_DECOMPOSE;
            if (nm->kind == NORM_NFKC) opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
            if (nm->kind == NORM_NFKD) opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
            /* ASCII is invariant under every normalization form and every
             * ASCII char is a starter, so only runs of non-ASCII bytes (with
             * the starter before them) go through utf8proc. */
            tmp->n = 0;
            size_t i = 0, tn = out->n;
            const char *src = out->p;
            while (i < tn) {
                size_t a = i;
                while (a < tn && (uint8_t)src[a] < 0x80) a++;
                size_t b = a;
                while (b < tn && (uint8_t)src[b] >= 0x80) b++;
                if (a == tn) {
                    if (!bb_append(tmp, src + i, tn - i)) return false;
                    break;
                }
                size_t seg = a > i ? a - 1 : a; /* include the preceding starter */
                if (!bb_append(tmp, src + i, seg - i)) return false;
                utf8proc_uint8_t *dst = NULL;
                utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)src + seg,
                                                  (utf8proc_ssize_t)(b - seg), &dst, (utf8proc_option_t)opt);
                bool ok = r >= 0 ? bb_append(tmp, dst, (size_t)r) : bb_append(tmp, src + seg, b - seg);
                free(dst);
                if (!ok) return false;
                i = b;
            }
            bytebuf sw = *out;
            *out = *tmp;
            *tmp = sw;
            break;
        }
        case NORM_LOWERCASE: {
            tmp->n = 0;
            for (size_t i = 0; i < out->n;) {
                uint32_t cp;
                size_t l = utf8_decode(out->p + i, out->n - i, &cp);
                char u[4];
                if (l == 1 && cp >= 0x80) {
                    if (!bb_append(tmp, out->p + i, 1)) return false;
                } else {
                    size_t ul = utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), u);
                    if (!bb_append(tmp, u, ul)) return false;
                }
                i += l;
            }
            bytebuf sw = *out;
            *out = *tmp;
            *tmp = sw;
            break;
        }
        case NORM_PREPEND:
            if (out->n == 0) break; /* HF: nothing to prepend to an empty string */
            tmp->n = 0;
            if (!bb_append(tmp, nm->a, nm->alen) || !bb_append(tmp, out->p, out->n)) return false;
            {
                bytebuf sw = *out;
                *out = *tmp;
                *tmp = sw;
            }
            break;
        case NORM_REPLACE: {
            if (nm->re) {
                if (!replace_regex(nm, out, tmp)) return false;
                bytebuf sw = *out;
                *out = *tmp;
                *tmp = sw;
                break;
            }
            if (!nm->alen) break;
            tmp->n = 0;
            size_t i = 0;
            while (i < out->n) {
                if (out->n - i >= nm->alen && !memcmp(out->p + i, nm->a, nm->alen)) {
                    if (!bb_append(tmp, nm->b, nm->blen)) return false;
                    i += nm->alen;
                } else {
                    if (!bb_append(tmp, out->p + i, 1)) return false;
                    i++;
                }
            }
            bytebuf sw = *out;
            *out = *tmp;
            *tmp = sw;
            break;
        }
        case NORM_STRIP: {
            size_t a = 0, b = out->n;
            if (nm->left)
                while (a < b && isspace((unsigned char)out->p[a])) a++;
            if (nm->right)
                while (b > a && isspace((unsigned char)out->p[b - 1])) b--;
            memmove(out->p, out->p + a, b - a);
            out->n = b - a;
            break;
        }
        }
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* pre-tokenizers                                                      */

typedef struct {
    size_t off, len;
    bool match;
} seg;

typedef struct enc_ctx {
    bytebuf buf;      /* text of all pieces */
    bytebuf norm, tmp;
    piecevec pa, pb;  /* pieces, double-buffered */
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    /* BPE scratch */
    int32_t *sym_id, *sym_prev, *sym_next;
    uint64_t *heap;
    size_t sym_cap, heap_cap;
    bytebuf word;
    seg *segs;
    size_t segcap;
    pagoda_status err; /* set with its message when a stage fails for a reason other than OOM */
} enc_ctx;

static bool ctx_syms(enc_ctx *c, size_t n) {
    if (n <= c->sym_cap) return true;
    size_t nc = c->sym_cap ? c->sym_cap : 64;
    while (nc < n) nc *= 2;
    int32_t *a = realloc(c->sym_id, nc * sizeof *a);
    if (!a) return false;
    c->sym_id = a;
    a = realloc(c->sym_prev, nc * sizeof *a);
    if (!a) return false;
    c->sym_prev = a;
    a = realloc(c->sym_next, nc * sizeof *a);
    if (!a) return false;
    c->sym_next = a;
    uint64_t *h = realloc(c->heap, 2 * nc * sizeof *h);
    if (!h) return false;
    c->heap = h;
    c->heap_cap = 2 * nc;
    c->sym_cap = nc;
    return true;
}

static void ctx_free(enc_ctx *c) {
    free(c->buf.p);
    free(c->norm.p);
    free(c->tmp.p);
    free(c->pa.p);
    free(c->pb.p);
    free(c->word.p);
    free(c->segs);
    free(c->sym_id);
    free(c->sym_prev);
    free(c->sym_next);
    free(c->heap);
    if (c->md) pcre2_match_data_free(c->md);
    if (c->mctx) pcre2_match_context_free(c->mctx);
    if (c->jstack) pcre2_jit_stack_free(c->jstack);
}

static bool seg_push(enc_ctx *c, size_t *nseg, size_t off, size_t len, bool match) {
    if (*nseg == c->segcap) {
        size_t nc = c->segcap ? c->segcap * 2 : 64;
        seg *np = realloc(c->segs, nc * sizeof *np);
        if (!np) return false;
        c->segs = np;
        c->segcap = nc;
    }
    c->segs[*nseg].off = off;
    c->segs[*nseg].len = len;
    c->segs[*nseg].match = match;
    (*nseg)++;
    return true;
}

/* One match at or after `pos`. Uses the JIT's default 32 KiB stack first and
 * retries with a 4 MiB JIT stack (made once per encode call) if a pattern
 * needs more. Returns pcre2_match's code. */
static int match_at(enc_ctx *c, const pcre2_code *re, const char *s, size_t n, size_t pos) {
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, 0, c->md, c->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !c->jstack) {
        c->mctx = pcre2_match_context_create(NULL);
        c->jstack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
        if (!c->mctx || !c->jstack) return PCRE2_ERROR_NOMEMORY;
        pcre2_jit_stack_assign(c->mctx, NULL, c->jstack);
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, 0, c->md, c->mctx);
    }
    return rc;
}

/* Matches of `re` in s[0..n): every match and every gap between matches,
 * in order in c->segs (empty matches are skipped, as HF does).
 * Returns false (message set) on a regex failure or OOM. */
static bool regex_segments(enc_ctx *c, const pcre2_code *re, const char *s, size_t n, size_t *nseg) {
    *nseg = 0;
    size_t pos = 0, last = 0;
    if (!c->md && !(c->md = pcre2_match_data_create(32, NULL))) {
        pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory (regex)");
        return false;
    }
    while (pos <= n) {
        int rc = match_at(c, re, s, n, pos);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            c->err = pg_error(PAGODA_ERR_LIMIT, "tokenizer: pre-tokenizer regex failed: %s", (const char *)msg);
            return false;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: step one character */
            pos = ms + (ms < n ? utf8_len((uint8_t)s[ms]) : 1);
            continue;
        }
        if ((ms > last && !seg_push(c, nseg, last, ms - last, false)) || !seg_push(c, nseg, ms, me - ms, true))
            goto oom;
        last = pos = me;
    }
    if (last < n && !seg_push(c, nseg, last, n - last, false)) goto oom;
    return true;
oom:
    pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory (regex)");
    return false;
}

static bool apply_split(enc_ctx *c, const tok_pre *p, piecevec *in, piecevec *out) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        size_t base = in->p[i].off, n = in->p[i].len;
        size_t nseg;
        if (!regex_segments(c, p->re, c->buf.p + base, n, &nseg)) return false;
        seg *segs = c->segs;
        if (p->invert)
            for (size_t k = 0; k < nseg; k++) segs[k].match = !segs[k].match;
        size_t pend_off = 0, pend_len = 0; /* MergedWithNext: pending prefix */
        bool have_pend = false;
        for (size_t k = 0; k < nseg; k++) {
            size_t o = base + segs[k].off, l = segs[k].len;
            bool m = segs[k].match;
            switch (p->behavior) {
            case SPLIT_ISOLATED:
                if (!pv_push(out, o, l)) return false;
                break;
            case SPLIT_REMOVED:
                if (!m && !pv_push(out, o, l)) return false;
                break;
            case SPLIT_MERGED_PREV: /* HF: a match joins the previous piece unless that was a match */
                if (m && out->n > 0 && k > 0 && !segs[k - 1].match)
                    out->p[out->n - 1].len += l;
                else if (!pv_push(out, o, l))
                    return false;
                break;
            case SPLIT_MERGED_NEXT:
                if (m) {
                    if (have_pend) {
                        if (!pv_push(out, pend_off, pend_len)) return false;
                    }
                    pend_off = o;
                    pend_len = l;
                    have_pend = true;
                } else if (have_pend) {
                    if (!pv_push(out, pend_off, pend_len + l)) return false;
                    have_pend = false;
                } else if (!pv_push(out, o, l)) {
                    return false;
                }
                break;
            case SPLIT_CONTIGUOUS:
                if (m && k > 0 && segs[k - 1].match && out->n > 0)
                    out->p[out->n - 1].len += l;
                else if (!pv_push(out, o, l))
                    return false;
                break;
            }
        }
        if (have_pend && !pv_push(out, pend_off, pend_len)) return false;
    }
    return true;
}

/* Metaspace: ' ' -> replacement, optional prepend, optional split (each
 * replacement starts a new piece). Rewrites pieces into new buffer text. */
static bool apply_metaspace(enc_ctx *c, const tok_pre *p, piecevec *in, piecevec *out, bool first_chunk) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        size_t off = in->p[i].off, n = in->p[i].len;
        if (!bb_reserve(&c->buf, n * p->repl_len + p->repl_len)) return false;
        size_t start = c->buf.n;
        bool prepend = p->prepend == PREPEND_ALWAYS || (p->prepend == PREPEND_FIRST && first_chunk && i == 0);
        if (prepend && !(n >= p->repl_len && !memcmp(c->buf.p + off, p->repl, p->repl_len)) && n > 0) {
            memcpy(c->buf.p + c->buf.n, p->repl, p->repl_len);
            c->buf.n += p->repl_len;
        }
        for (size_t k = 0; k < n; k++) {
            char ch = c->buf.p[off + k];
            if (ch == ' ') {
                memcpy(c->buf.p + c->buf.n, p->repl, p->repl_len);
                c->buf.n += p->repl_len;
            } else {
                c->buf.p[c->buf.n++] = ch;
            }
        }
        size_t end = c->buf.n;
        if (!p->split) {
            if (!pv_push(out, start, end - start)) return false;
            continue;
        }
        size_t ps = start;
        for (size_t k = start; k < end;) {
            if (k > ps && end - k >= p->repl_len && !memcmp(c->buf.p + k, p->repl, p->repl_len)) {
                if (!pv_push(out, ps, k - ps)) return false;
                ps = k;
            }
            k += (k < end && end - k >= p->repl_len && !memcmp(c->buf.p + k, p->repl, p->repl_len))
                     ? p->repl_len
                     : 1;
        }
        if (end > ps && !pv_push(out, ps, end - ps)) return false;
    }
    return true;
}

static bool apply_prefix_space(enc_ctx *c, piecevec *in, piecevec *out) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        size_t off = in->p[i].off, n = in->p[i].len;
        if (n > 0 && c->buf.p[off] != ' ') {
            if (!bb_reserve(&c->buf, n + 1)) return false;
            size_t start = c->buf.n;
            c->buf.p[c->buf.n++] = ' ';
            memcpy(c->buf.p + c->buf.n, c->buf.p + off, n);
            c->buf.n += n;
            if (!pv_push(out, start, n + 1)) return false;
        } else if (!pv_push(out, off, n)) {
            return false;
        }
    }
    return true;
}

static bool digits_split(enc_ctx *c, const tok_pre *p, piecevec *in, piecevec *out) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        size_t off = in->p[i].off, n = in->p[i].len, ps = 0;
        int prev = -1; /* 1 digit, 0 other */
        for (size_t k = 0; k < n;) {
            uint32_t cp;
            size_t l = utf8_decode(c->buf.p + off + k, n - k, &cp);
            utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
            int d = (cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL ||
                     cat == UTF8PROC_CATEGORY_NO);
            if (k > 0 && (d != prev || (d && p->individual_digits))) {
                if (!pv_push(out, off + ps, k - ps)) return false;
                ps = k;
            }
            prev = d;
            k += l;
        }
        if (n > ps && !pv_push(out, off + ps, n - ps)) return false;
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* BPE                                                                 */

static inline void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static inline uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m) break;
        size_t r = l + 1, s = (r < m && h[r] < h[l]) ? r : l;
        if (h[s] >= v) break;
        h[i] = h[s];
        i = s;
    }
    h[i] = v;
    return top;
}

/* Encode one pre-token with BPE; appends ids. Returns false on OOM. */
static bool bpe_word(const pg_tokenizer *t, enc_ctx *c, const char *w, size_t n, idvec *out) {
    if (!n) return true;
    if (t->ignore_merges) {
        int32_t id;
        if (t->byte_level) {
            c->word.n = 0;
            if (!bb_reserve(&c->word, 2 * n)) return false;
            for (size_t i = 0; i < n; i++) {
                uint8_t b = (uint8_t)w[i];
                memcpy(c->word.p + c->word.n, t->byte_char[b], 2);
                c->word.n += t->byte_char_len[b];
            }
            id = pg_strmap_get(&t->vocab, c->word.p, c->word.n);
        } else {
            id = pg_strmap_get(&t->vocab, w, n);
        }
        if (id >= 0) return iv_push(out, id);
    }
    if (!ctx_syms(c, 4 * n + 4)) return false;
    int32_t *sid = c->sym_id;
    size_t ns = 0;
    if (t->byte_level) {
        for (size_t i = 0; i < n; i++) {
            int32_t id = t->byte_char_id[(uint8_t)w[i]];
            if (id < 0) id = t->unk_id;
            if (id < 0) continue;
            sid[ns++] = id;
        }
    } else {
        for (size_t i = 0; i < n;) {
            uint8_t c0 = (uint8_t)w[i];
            if (c0 < 0x80 && t->ascii_id[c0] >= 0) {
                sid[ns++] = t->ascii_id[c0];
                i++;
                continue;
            }
            size_t l = utf8_len(c0);
            if (l > n - i) l = n - i;
            int32_t id = pg_strmap_get(&t->vocab, w + i, l);
            if (id >= 0) {
                sid[ns++] = id;
            } else {
                bool done = false;
                if (t->byte_fallback) {
                    done = true;
                    for (size_t k = 0; k < l; k++)
                        if (t->byte_tok_id[(uint8_t)w[i + k]] < 0) done = false;
                    if (done)
                        for (size_t k = 0; k < l; k++) sid[ns++] = t->byte_tok_id[(uint8_t)w[i + k]];
                }
                if (!done && t->unk_id >= 0) {
                    if (!(t->fuse_unk && ns > 0 && sid[ns - 1] == t->unk_id)) sid[ns++] = t->unk_id;
                }
            }
            i += l;
        }
    }
    if (ns == 0) return true;
    if (ns == 1) return iv_push(out, sid[0]);
    int32_t *prev = c->sym_prev, *next = c->sym_next;
    uint64_t *heap = c->heap;
    size_t hn = 0;
    for (size_t i = 0; i < ns; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < ns ? (int32_t)i + 1 : -1;
    }
    uint32_t rank;
    int32_t merged;
    for (size_t i = 0; i + 1 < ns; i++)
        if (pg_pairmap_get(&t->merges, sid[i], sid[i + 1], &rank, &merged))
            heap_push(heap, &hn, ((uint64_t)rank << 32) | i);
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        int32_t i = (int32_t)(uint32_t)top, j;
        uint32_t want = (uint32_t)(top >> 32);
        if (sid[i] < 0 || (j = next[i]) < 0) continue;
        if (!pg_pairmap_get(&t->merges, sid[i], sid[j], &rank, &merged) || rank != want) continue;
        sid[i] = merged;
        sid[j] = -1;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = i;
        if (hn + 2 > c->heap_cap) continue; /* cannot happen: at most ns-1 live pairs + stale */
        int32_t p = prev[i];
        if (p >= 0 && pg_pairmap_get(&t->merges, sid[p], sid[i], &rank, &merged))
            heap_push(heap, &hn, ((uint64_t)rank << 32) | (uint32_t)p);
        if (next[i] >= 0 && pg_pairmap_get(&t->merges, sid[i], sid[next[i]], &rank, &merged))
            heap_push(heap, &hn, ((uint64_t)rank << 32) | (uint32_t)i);
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        if (!iv_push(out, sid[i])) return false;
    return true;
}

/* Normalize, pre-tokenize and BPE-encode one run of plain text. */
static bool encode_chunk(const pg_tokenizer *t, enc_ctx *c, const char *s, size_t n, bool first,
                         idvec *out) {
    if (!normalize(t, s, n, &c->norm, &c->tmp)) return false;
    c->buf.n = 0;
    if (!bb_append(&c->buf, c->norm.p, c->norm.n)) return false;
    piecevec *in = &c->pa, *o = &c->pb;
    in->n = 0;
    if (!pv_push(in, 0, c->buf.n)) return false;
    for (int k = 0; k < t->n_pres; k++) {
        const tok_pre *p = &t->pres[k];
        bool ok = true, swapped = true;
        switch (p->kind) {
        case PRE_SPLIT:
            ok = apply_split(c, p, in, o);
            break;
        case PRE_METASPACE:
            ok = apply_metaspace(c, p, in, o, first);
            break;
        case PRE_DIGITS:
            ok = digits_split(c, p, in, o);
            break;
        case PRE_BYTELEVEL:
            swapped = false;
            if (p->add_prefix_space) {
                ok = apply_prefix_space(c, in, o);
                piecevec *x = in;
                in = o;
                o = x;
            }
            if (ok && p->re) {
                tok_pre sp = *p;
                sp.behavior = SPLIT_ISOLATED;
                sp.invert = false;
                ok = apply_split(c, &sp, in, o);
                swapped = true;
            }
            break;
        }
        if (!ok) return false;
        if (swapped) {
            piecevec *x = in;
            in = o;
            o = x;
        }
    }
    if (t->split_at_mark) {
        /* cut before every "▁" that follows a non-"▁" character */
        const char *b = c->buf.p;
        for (size_t i = 0; i < in->n; i++) {
            size_t s0 = in->p[i].off, e = s0 + in->p[i].len, ws = s0;
            bool prev_mark = true;
            for (size_t k = s0; k < e;) {
                bool mark = e - k >= 3 && !memcmp(b + k, "\xe2\x96\x81", 3);
                if (mark && !prev_mark) {
                    if (!bpe_word(t, c, b + ws, k - ws, out)) return false;
                    ws = k;
                }
                prev_mark = mark;
                k += mark ? 3 : 1;
            }
            if (!bpe_word(t, c, b + ws, e - ws, out)) return false;
        }
        return true;
    }
    for (size_t i = 0; i < in->n; i++)
        if (!bpe_word(t, c, c->buf.p + in->p[i].off, in->p[i].len, out)) return false;
    return true;
}

static bool is_word_char(uint8_t ch) { return ch == '_' || isalnum(ch) || ch >= 0x80; }

pagoda_status pg_tokenizer_encode(const pg_tokenizer *t, const char *text, size_t len,
                                  bool add_special, int32_t *ids, size_t cap, size_t *n_out) {
    return pg_tokenizer_encode_flags(
        t, text, len, add_special ? PG_ENCODE_ADD_SPECIAL | PG_ENCODE_PARSE_SPECIAL : 0, ids, cap,
        n_out);
}

pagoda_status pg_tokenizer_encode_flags(const pg_tokenizer *t, const char *text, size_t len,
                                        unsigned flags, int32_t *ids, size_t cap, size_t *n_out) {
    const bool add_special = flags & PG_ENCODE_ADD_SPECIAL;
    const bool parse_special = flags & PG_ENCODE_PARSE_SPECIAL;
    if (!t || (!text && len) || !n_out || (!ids && cap))
        return pg_error(PAGODA_ERR_INVALID_ARG, "tokenizer: encode: NULL argument");
    *n_out = 0;
    idvec out = {0};
    enc_ctx c;
    memset(&c, 0, sizeof c);
    bool ok = true;
    if (add_special)
        for (int i = 0; i < t->n_prefix && ok; i++) ok = iv_push(&out, t->prefix_ids[i]);
    size_t seg_start = 0, i = 0;
    while (ok && i < len) {
        if (!t->added_first_byte[(uint8_t)text[i]]) {
            i++;
            continue;
        }
        const tok_added *hit = NULL;
        for (int k = 0; k < t->n_added; k++) {
            const tok_added *a = &t->added[k];
            if (!a->len || (a->special && !parse_special)) continue;
            if (a->len > len - i || memcmp(text + i, a->content, a->len)) continue;
            if (a->single_word && ((i > 0 && is_word_char((uint8_t)text[i - 1])) ||
                                   (i + a->len < len && is_word_char((uint8_t)text[i + a->len]))))
                continue;
            hit = a;
            break;
        }
        if (!hit) {
            i++;
            continue;
        }
        size_t seg_end = i, next = i + hit->len;
        if (hit->lstrip)
            while (seg_end > seg_start && isspace((unsigned char)text[seg_end - 1])) seg_end--;
        if (hit->rstrip)
            while (next < len && isspace((unsigned char)text[next])) next++;
        if (seg_end > seg_start)
            ok = encode_chunk(t, &c, text + seg_start, seg_end - seg_start, seg_start == 0, &out);
        if (ok) ok = iv_push(&out, hit->id);
        seg_start = i = next;
    }
    if (ok && seg_start < len) ok = encode_chunk(t, &c, text + seg_start, len - seg_start, seg_start == 0, &out);
    if (add_special)
        for (int k = 0; k < t->n_suffix && ok; k++) ok = iv_push(&out, t->suffix_ids[k]);
    ctx_free(&c);
    if (!ok) {
        free(out.p);
        if (c.err) return c.err;
        return pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory while encoding %zu bytes", len);
    }
    if (out.n && cap) memcpy(ids, out.p, (out.n < cap ? out.n : cap) * sizeof *ids);
    *n_out = out.n;
    free(out.p);
    return PAGODA_OK;
}

/* ------------------------------------------------------------------ */
/* decoding                                                            */

static bool parse_byte_token(const char *s, size_t n, uint8_t *b) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return false;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char ch = s[i];
        int d = (ch >= '0' && ch <= '9') ? ch - '0' : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10
                : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10 : -1;
        if (d < 0) return false;
        v = v * 16 + d;
    }
    *b = (uint8_t)v;
    return true;
}

static bool replace_into(bytebuf *o, const char *s, size_t n, const char *a, size_t al, const char *b,
                         size_t bl) {
    for (size_t i = 0; i < n;) {
        if (al && n - i >= al && !memcmp(s + i, a, al)) {
            if (!bb_append(o, b, bl)) return false;
            i += al;
        } else {
            if (!bb_append(o, s + i, 1)) return false;
            i++;
        }
    }
    return true;
}

static bool bytelevel_into(bytebuf *o, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = utf8_decode(s + i, n - i, &cp);
        int b = l > 1 || cp < 0x80 ? pg_tok_cp_to_byte(cp) : -1;
        if (b >= 0) {
            char ch = (char)b;
            if (!bb_append(o, &ch, 1)) return false;
        } else if (!bb_append(o, s + i, l)) {
            return false;
        }
        i += l;
    }
    return true;
}

/* A list of token strings being decoded: offsets into one buffer. */
typedef struct {
    bytebuf buf;
    piecevec toks;
} strlist;

static bool token_decoded_bytes(const pg_tokenizer *t, const char *s, size_t n, bytebuf *out) {
    bytebuf a = {0}, b = {0};
    if (!bb_append(&a, s, n)) return false;
    bool ok = true;
    for (int k = 0; k < t->n_decs && ok; k++) {
        const tok_dec *d = &t->decs[k];
        b.n = 0;
        switch (d->kind) {
        case DEC_BYTELEVEL:
            ok = bytelevel_into(&b, a.p, a.n);
            break;
        case DEC_REPLACE:
            ok = replace_into(&b, a.p, a.n, d->a, d->alen, d->b, d->blen);
            break;
        case DEC_METASPACE:
            ok = replace_into(&b, a.p, a.n, d->a, d->alen, " ", 1);
            break;
        case DEC_BYTEFALLBACK: {
            uint8_t by;
            if (parse_byte_token(a.p, a.n, &by))
                ok = bb_append(&b, &by, 1);
            else
                ok = bb_append(&b, a.p, a.n);
            break;
        }
        case DEC_FUSE:
        case DEC_STRIP:
            ok = bb_append(&b, a.p, a.n);
            break;
        }
        bytebuf x = a;
        a = b;
        b = x;
    }
    if (ok) ok = bb_append(out, a.p ? a.p : "", a.n);
    free(a.p);
    free(b.p);
    return ok;
}

/* Scratch slot i as an empty strlist keeping its buffers, and back. */
static strlist scratch_take(const pg_decode_scratch *s, int i) {
    strlist l = {{s->bytes[i], 0, s->cap_bytes[i]}, {s->pieces[i], 0, s->cap_pieces[i]}};
    return l;
}

static void scratch_keep(pg_decode_scratch *s, int i, const strlist *l) {
    s->bytes[i] = l->buf.p;
    s->cap_bytes[i] = l->buf.cap;
    s->pieces[i] = l->toks.p;
    s->cap_pieces[i] = l->toks.cap;
}

void pg_decode_scratch_free(pg_decode_scratch *s) {
    for (int i = 0; i < 2; i++) {
        free(s->bytes[i]);
        free(s->pieces[i]);
    }
    memset(s, 0, sizeof *s);
}

pagoda_status pg_tokenizer_decode(const pg_tokenizer *t, const int32_t *ids, size_t n,
                                  bool skip_special, char *out, size_t cap, size_t *len_out) {
    pg_decode_scratch s = {0};
    pagoda_status st = pg_tokenizer_decode_with(t, ids, n, skip_special, out, cap, len_out, &s);
    pg_decode_scratch_free(&s);
    return st;
}

pagoda_status pg_tokenizer_decode_with(const pg_tokenizer *t, const int32_t *ids, size_t n,
                                       bool skip_special, char *out, size_t cap, size_t *len_out,
                                       pg_decode_scratch *scratch) {
    if (!t || (!ids && n) || (!out && cap) || !scratch)
        return pg_error(PAGODA_ERR_INVALID_ARG, "tokenizer: decode: NULL argument");
    strlist A = scratch_take(scratch, 0), B = scratch_take(scratch, 1);
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab) {
            scratch_keep(scratch, 0, &A);
            scratch_keep(scratch, 1, &B);
            return pg_error(PAGODA_ERR_INVALID_ARG, "tokenizer: token id %d out of range [0, %d)",
                            (int)id, (int)t->n_vocab);
        }
        if ((skip_special && t->is_special[id]) || t->raw_decode[id] == 2) continue;
        size_t off = A.buf.n;
        ok = bb_append(&A.buf, t->tokens[id], t->token_lens[id]) && pv_push(&A.toks, off, t->token_lens[id]);
        if (ok) A.toks.p[A.toks.n - 1].raw = t->raw_decode[id];
    }
    for (int k = 0; k < t->n_decs && ok; k++) {
        const tok_dec *d = &t->decs[k];
        B.buf.n = 0;
        B.toks.n = 0;
        if (d->kind == DEC_FUSE) {
            for (size_t i = 0; i < A.toks.n && ok; i++)
                ok = bb_append(&B.buf, A.buf.p + A.toks.p[i].off, A.toks.p[i].len);
            if (ok && A.toks.n) ok = pv_push(&B.toks, 0, B.buf.n);
        } else {
            for (size_t i = 0; i < A.toks.n && ok; i++) {
                const char *s = A.buf.p + A.toks.p[i].off;
                size_t l = A.toks.p[i].len, off = B.buf.n;
                if (A.toks.p[i].raw) {
                    ok = bb_append(&B.buf, s, l) && pv_push(&B.toks, off, l);
                    if (ok) B.toks.p[B.toks.n - 1].raw = true;
                    continue;
                }
                switch (d->kind) {
                case DEC_BYTELEVEL:
                    ok = bytelevel_into(&B.buf, s, l);
                    break;
                case DEC_REPLACE:
                    ok = replace_into(&B.buf, s, l, d->a, d->alen, d->b, d->blen);
                    break;
                case DEC_METASPACE:
                    ok = replace_into(&B.buf, s, l, d->a, d->alen, " ", 1);
                    if (ok && i == 0 && d->prepend != PREPEND_NEVER && B.buf.n > off &&
                        B.buf.p[off] == ' ') {
                        memmove(B.buf.p + off, B.buf.p + off + 1, B.buf.n - off - 1);
                        B.buf.n--;
                    }
                    break;
                case DEC_BYTEFALLBACK: {
                    uint8_t by;
                    if (parse_byte_token(s, l, &by))
                        ok = bb_append(&B.buf, &by, 1);
                    else
                        ok = bb_append(&B.buf, s, l);
                    break;
                }
                case DEC_STRIP: {
                    size_t a = 0, e = l;
                    for (int r = 0; r < d->start && a + d->alen <= e && !memcmp(s + a, d->a, d->alen); r++)
                        a += d->alen;
                    for (int r = 0; r < d->stop && e >= a + d->alen && !memcmp(s + e - d->alen, d->a, d->alen); r++)
                        e -= d->alen;
                    ok = bb_append(&B.buf, s + a, e - a);
                    break;
                }
                case DEC_FUSE:
                    break;
                }
                if (ok) ok = pv_push(&B.toks, off, B.buf.n - off);
            }
        }
        strlist x = A;
        A = B;
        B = x;
    }
    size_t total = 0;
    for (size_t i = 0; i < A.toks.n; i++) total += A.toks.p[i].len;
    if (ok && len_out) *len_out = total;
    if (ok && cap) {
        size_t w = 0;
        for (size_t i = 0; i < A.toks.n && w + 1 < cap; i++) {
            size_t l = A.toks.p[i].len;
            if (l > cap - 1 - w) l = cap - 1 - w;
            memcpy(out + w, A.buf.p + A.toks.p[i].off, l);
            w += l;
        }
        out[w] = 0;
    }
    scratch_keep(scratch, 0, &A);
    scratch_keep(scratch, 1, &B);
    if (!ok) return pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory while decoding");
    return PAGODA_OK;
}

const char *pg_tokenizer_token_bytes(const pg_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->bytes_lens[id];
    return t->bytes[id];
}

const char *pg_tokenizer_token_text(const pg_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n_vocab || !t->tokens[id]) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->token_lens[id];
    return t->tokens[id];
}

int32_t pg_tokenizer_vocab_size(const pg_tokenizer *t) { return t->n_vocab; }
int32_t pg_tokenizer_bos(const pg_tokenizer *t) { return t->bos_id; }
int32_t pg_tokenizer_eos(const pg_tokenizer *t) { return t->eos_id; }
bool pg_tokenizer_is_special(const pg_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->is_special[id];
}
const char *pg_tokenizer_chat_template(const pg_tokenizer *t) { return t->chat_template; }

int32_t pg_tokenizer_token_to_id(const pg_tokenizer *t, const char *text, size_t len) {
    return pg_strmap_get(&t->vocab, text, len);
}
