/* tiktoken BPE files (`*.tiktoken`: one "base64(token bytes) rank" per line)
 * as openai/whisper loads them (whisper/tokenizer.py get_encoding, c0d2f62):
 * byte-level BPE whose merge priority is the rank of the merged token
 * (tiktoken's _byte_pair_merge: repeatedly merge the adjacent pair whose
 * concatenation has the lowest rank, leftmost first), a piece found whole in
 * the ranks taken as is (tiktoken encode_native), the pre-tokenizer regex
 * `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
 * and Whisper's special tokens appended after the ranks
 * (tokenizer/whisper_lang.h).
 *
 * The tokens are stored in the byte-level text form Hugging Face's Whisper
 * tokenizer.json uses ("Ġthe"), so everything downstream (token_text,
 * token_to_id, decode) sees the same tokenizer either way. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/whisper_lang.h"

static int b64_val(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 (RFC 4648, '=' padding) of s[0..n) into out; returns the
 * decoded length (0 for padding only) or -1 if malformed. out needs
 * n * 3 / 4 bytes. */
static long b64_decode(const char *s, size_t n, unsigned char *out) {
    if (strspn(s, "=") >= n) return 0; /* "=": an empty token (multilingual.tiktoken rank 50256),
                                          as Python's lenient b64decode reads it */
    if (n % 4) return -1;
    long o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else {
                if (pad) return -1; /* data after '=' */
                v[k] = b64_val(c);
                if (v[k] < 0) return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (unsigned char)(w >> 16);
        if (pad < 2) out[o++] = (unsigned char)(w >> 8);
        if (pad < 1) out[o++] = (unsigned char)w;
    }
    return o;
}

/* UTF-8 of the GPT-2 byte-level chars of bytes b[0..n) into out (2n + 1). */
static size_t to_byte_level(const unsigned char *b, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = pg_tok_byte_to_cp(b[i]);
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else { /* all mapped code points are < 0x800 */
            out[o++] = (char)(0xC0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[o] = 0;
    return o;
}

typedef struct {
    char *text; /* byte-level form, malloc'ed */
    size_t len;
} rank_entry;

static void free_entries(rank_entry *e, int32_t n) {
    if (!e) return;
    for (int32_t i = 0; i < n; i++) free(e[i].text);
    free(e);
}

/* Read the ranks: entries[rank] = byte-level text; ranks must be 0..n-1,
 * each once (tiktoken requires dense ranks; get_encoding numbers the special
 * tokens from len(ranks)). */
static pagoda_status read_ranks(const char *path, rank_entry **out, int32_t *n_out) {
    *out = NULL;
    *n_out = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return pg_error(PAGODA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    pagoda_status st = PAGODA_OK;
    rank_entry *e = NULL;
    size_t cap = 0;
    int32_t count = 0, max_rank = -1;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    unsigned char *bytes = NULL;
    size_t bcap = 0;
    long lineno = 0;
    while ((got = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)got;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (!len) continue; /* get_encoding skips empty lines */
        char *sp = memchr(line, ' ', len);
        if (!sp || sp == line) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s:%ld: expected \"<base64> <rank>\"", path, lineno);
            break;
        }
        size_t b64n = (size_t)(sp - line);
        char *end;
        errno = 0;
        long rank = strtol(sp + 1, &end, 10);
        if (errno || end == sp + 1 || end != line + len || rank < 0 || rank >= (1L << 24)) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s:%ld: bad rank", path, lineno);
            break;
        }
        if (b64n * 3 / 4 + 1 > bcap) {
            bcap = b64n * 3 / 4 + 64;
            unsigned char *nb = realloc(bytes, bcap);
            if (!nb) {
                st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            bytes = nb;
        }
        long nbytes = b64_decode(line, b64n, bytes);
        if (nbytes < 0) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s:%ld: bad base64 token", path, lineno);
            break;
        }
        if ((size_t)rank >= cap) {
            size_t nc = cap ? cap : 65536;
            while (nc <= (size_t)rank) nc *= 2;
            rank_entry *ne = realloc(e, nc * sizeof *ne);
            if (!ne) {
                st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            memset(ne + cap, 0, (nc - cap) * sizeof *ne);
            e = ne;
            cap = nc;
        }
        if (e[rank].text) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s:%ld: rank %ld appears twice", path, lineno, rank);
            break;
        }
        e[rank].text = malloc(2 * (size_t)nbytes + 1); /* empty tokens: "" (never produced) */
        if (!e[rank].text) {
            st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        e[rank].len = to_byte_level(bytes, (size_t)nbytes, e[rank].text);
        count++;
        if (rank > max_rank) max_rank = (int32_t)rank;
    }
    free(line);
    free(bytes);
    if (!st && ferror(f)) st = pg_error(PAGODA_ERR_IO, "%s: read error", path);
    fclose(f);
    if (!st && count == 0) st = pg_error(PAGODA_ERR_FORMAT, "%s: no tokens", path);
    if (!st && max_rank + 1 != count)
        st = pg_error(PAGODA_ERR_FORMAT, "%s: ranks are not 0..%d (rank %d missing)", path,
                      (int)count - 1, (int)max_rank);
    if (st) {
        free_entries(e, (int32_t)cap);
        return st;
    }
    *out = e;
    *n_out = count;
    return PAGODA_OK;
}

/* tiktoken's merge rule as a pair table: (left, right) -> (rank of the
 * concatenation, its id) for every split of every ranked token into two
 * ranked tokens. The BPE loop merges the lowest rank first, leftmost on ties
 * (tokenizer.c), which is _byte_pair_merge. */
static pagoda_status build_rank_merges(pg_tokenizer *t, int32_t n_ranks) {
    size_t max_len;
    uint8_t *lens = pg_tok_length_set(t, t->n_vocab, &max_len);
    if (!lens) return pg_error(PAGODA_ERR_NOMEM, "tokenizer: out of memory");
    pagoda_status st = pg_pairmap_init(&t->merges, (size_t)n_ranks * 4);
    for (int32_t i = 0; i < n_ranks && !st; i++) {
        const char *txt = t->tokens[i];
        size_t len = t->token_lens[i];
        for (size_t k = 1; k < len && !st; k++) {
            if (!lens[k] || !lens[len - k]) continue; /* no token that long */
            if (((uint8_t)txt[k] & 0xC0) == 0x80) continue; /* inside a byte-level char */
            int32_t l = pg_strmap_get(&t->vocab, txt, k), r = pg_strmap_get(&t->vocab, txt + k, len - k);
            if (l < 0 || r < 0 || l >= n_ranks || r >= n_ranks) continue;
            st = pg_pairmap_put(&t->merges, l, r, (uint32_t)i, i);
        }
    }
    free(lens);
    return st;
}

pagoda_status pg_tokenizer_load_tiktoken(const char *path, int num_languages, pg_tokenizer **out) {
    *out = NULL;
    if (!path || !*path) return pg_error(PAGODA_ERR_INVALID_ARG, "tokenizer: empty path");
    if (num_languages < 0 || num_languages > PG_WHISPER_MAX_LANGUAGES)
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: %d languages (Whisper has at most %d)", path,
                        num_languages, PG_WHISPER_MAX_LANGUAGES);
    rank_entry *e;
    int32_t n_ranks;
    pagoda_status st = read_ranks(path, &e, &n_ranks);
    if (st) return st;
    int32_t n_special = pg_whisper_n_specials(num_languages);
    pg_tokenizer *t = pg_tok_new();
    if (!t) {
        free_entries(e, n_ranks);
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    }
    if ((st = pg_tok_alloc_vocab(t, n_ranks + n_special))) goto fail;
    t->added = calloc((size_t)n_special, sizeof *t->added);
    if (!t->added) {
        st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    for (int32_t i = 0; i < n_ranks; i++) {
        if (!(t->tokens[i] = pg_tok_strdup(t, e[i].text, e[i].len))) {
            st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
            goto fail;
        }
    }
    for (int32_t k = 0; k < n_special; k++) {
        char buf[32];
        int len = pg_whisper_special_text(num_languages, k, buf);
        int32_t id = n_ranks + k;
        if (len <= 0 || !(t->tokens[id] = pg_tok_strdup(t, buf, (size_t)len))) {
            st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
            goto fail;
        }
        tok_added *a = &t->added[t->n_added++];
        a->content = t->tokens[id];
        a->len = (size_t)len;
        a->id = id;
        a->special = true;
        t->raw_decode[id] = 1; /* tiktoken decodes a special token to its text */
    }
    /* pre-tokenizer: the regex, then the byte-level mapping (no regex of its own) */
    tok_pre *p = &t->pres[t->n_pres];
    memset(p, 0, sizeof *p);
    p->kind = PRE_SPLIT;
    p->behavior = SPLIT_ISOLATED;
    if ((st = pg_tok_compile(PG_TOK_GPT2_REGEX, strlen(PG_TOK_GPT2_REGEX), false, &p->re, path)))
        goto fail;
    t->n_pres++;
    p = &t->pres[t->n_pres++];
    memset(p, 0, sizeof *p);
    p->kind = PRE_BYTELEVEL;
    tok_dec *d = &t->decs[t->n_decs++];
    memset(d, 0, sizeof *d);
    d->kind = DEC_BYTELEVEL;
    t->byte_level = true;
    t->ignore_merges = true; /* tiktoken: a piece that is a token is that token */
    t->eos_id = t->bos_id = t->pad_id = n_ranks; /* <|endoftext|> (HF's Whisper config too) */
    if ((st = pg_tok_finish(t, path))) goto fail;
    for (int b = 0; b < 256; b++)
        if (t->byte_char_id[b] < 0 || t->byte_char_id[b] >= n_ranks) {
            st = pg_error(PAGODA_ERR_FORMAT, "%s: byte 0x%02x has no rank of its own", path, b);
            goto fail;
        }
    if ((st = build_rank_merges(t, n_ranks))) goto fail;
    free_entries(e, n_ranks);
    *out = t;
    return PAGODA_OK;
fail:
    free_entries(e, n_ranks);
    pg_tokenizer_free(t);
    return st;
}

pagoda_status pg_tokenizer_load_for_vocab(const char *path, int32_t model_vocab, pg_tokenizer **out) {
    if (pg_tokenizer_is_tiktoken_path(path))
        return pg_tokenizer_load_tiktoken(path, model_vocab > 0 ? pg_whisper_num_languages(model_vocab) : 99,
                                          out);
    return pg_tokenizer_load(path, out);
}

bool pg_tokenizer_is_tiktoken_path(const char *path) {
    size_t n = path ? strlen(path) : 0;
    return n >= 9 && !strcmp(path + n - 9, ".tiktoken");
}
