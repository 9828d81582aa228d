/* Incremental detokenizer and stop strings (see detokenizer.h). */
#include "engine/detokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

/* vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET: prompt tokens in the
 * first decode window. */
#define DETOK_WINDOW 5

size_t pg_utf8_complete_prefix(const char *s, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0) return n;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > 1 && back + 1 < need && lead < 0xF8) return i - 1; /* lead + too few tails */
    return n;
}

static pagoda_status grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return PAGODA_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    char *g = realloc(*buf, c);
    if (!g) return pg_error(PAGODA_ERR_NOMEM, "detokenizer: out of memory");
    *buf = g;
    *cap = c;
    return PAGODA_OK;
}

/* Append src[0..n) to the output text with each byte that starts no
 * well-formed UTF-8 sequence replaced by U+FFFD (as HF tokenizers' ByteFallback
 * decoder does for byte tokens that form no character), so the text is
 * always valid UTF-8. */
static pagoda_status append_text(pg_detok *d, const char *src, size_t n) {
    pagoda_status st = grow(&d->text, &d->cap, d->len + 3 * n + 1);
    if (st != PAGODA_OK) return st;
    const unsigned char *u = (const unsigned char *)src;
    for (size_t i = 0; i < n;) {
        size_t k = pg_utf8_seq_len(u + i, n - i);
        if (k) {
            memcpy(d->text + d->len, u + i, k);
            d->len += k;
            i += k;
        } else {
            memcpy(d->text + d->len, "\xEF\xBF\xBD", 3);
            d->len += 3;
            i++;
        }
    }
    return PAGODA_OK;
}

/* decode(ids[a..b)) into *buf. */
static pagoda_status decode(pg_detok *d, size_t a, size_t b, char **buf, size_t *cap, size_t *len) {
    pagoda_status st;
    if ((st = grow(buf, cap, 64)) != PAGODA_OK) return st;
    for (;;) {
        st = pg_tokenizer_decode_with(d->tok, d->ids + a, b - a, d->skip_special, *buf, *cap, len,
                                      &d->scratch);
        if (st != PAGODA_OK) return st;
        if (*len < *cap) return PAGODA_OK;
        if ((st = grow(buf, cap, *len + 1)) != PAGODA_OK) return st;
    }
}

pagoda_status pg_detok_init(pg_detok *d, const pg_tokenizer *tok, const int32_t *prompt,
                            size_t n_prompt, bool skip_special, const char *const *stop,
                            size_t n_stop, bool include_stop) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->skip_special = skip_special;
    d->include_stop = include_stop;
    d->stop_index = -1;
    d->cap_ids = n_prompt + 16;
    d->ids = malloc(d->cap_ids * sizeof *d->ids);
    d->stop = n_stop ? calloc(n_stop, sizeof *d->stop) : NULL;
    d->stop_len = n_stop ? calloc(n_stop, sizeof *d->stop_len) : NULL;
    if (!d->ids || (n_stop && (!d->stop || !d->stop_len))) {
        pg_detok_free(d);
        return pg_error(PAGODA_ERR_NOMEM, "detokenizer: out of memory");
    }
    /* ids the model has but the tokenizer lacks (a vocabulary padded to a
     * multiple of 64) decode to nothing, as HF tokenizers skip unknown ids */
    for (size_t i = 0; i < n_prompt; i++) /* (ids are in the model's vocabulary: checked) */
        if (!pg_tokenizer_is_padding(tok, prompt[i], INT32_MAX)) d->ids[d->n_ids++] = prompt[i];
    n_prompt = d->n_ids;
    d->read_off = n_prompt;
    d->prefix_off = n_prompt > DETOK_WINDOW ? n_prompt - DETOK_WINDOW : 0;
    for (size_t i = 0; i < n_stop; i++) {
        size_t n = stop[i] ? strlen(stop[i]) : 0;
        if (!n) continue;
        d->stop[d->n_stop] = strdup(stop[i]);
        if (!d->stop[d->n_stop]) {
            pg_detok_free(d);
            return pg_error(PAGODA_ERR_NOMEM, "detokenizer: out of memory");
        }
        d->stop_len[d->n_stop++] = n;
        if (n > d->max_stop_len) d->max_stop_len = n;
    }
    return PAGODA_OK;
}

void pg_detok_free(pg_detok *d) {
    for (size_t i = 0; i < d->n_stop; i++)
        free(d->stop[i]);
    free(d->stop);
    free(d->stop_len);
    free(d->ids);
    free(d->text);
    free(d->buf_a);
    free(d->buf_b);
    pg_decode_scratch_free(&d->scratch);
    memset(d, 0, sizeof *d);
}

/* Search the stop strings in text from `from` (bytes before it were already
 * searched); earliest match wins. */
static void find_stop(pg_detok *d, size_t from) {
    size_t best = (size_t)-1;
    int which = -1;
    for (size_t i = 0; i < d->n_stop; i++) {
        size_t sl = d->stop_len[i];
        if (sl > d->len) continue;
        size_t start = from + 1 > sl ? from + 1 - sl : 0;
        for (size_t p = start; p + sl <= d->len && p < best; p++)
            if (d->text[p] == d->stop[i][0] && !memcmp(d->text + p, d->stop[i], sl)) {
                best = p;
                which = (int)i;
                break;
            }
    }
    if (which < 0) return;
    d->stopped = true;
    d->stop_index = which;
    d->len = best + (d->include_stop ? d->stop_len[which] : 0);
    if (d->emitted > d->len) d->emitted = d->len;
}

pagoda_status pg_detok_add(pg_detok *d, int32_t id, bool check_stop) {
    pagoda_status st;
    if (d->stopped) return PAGODA_OK;
    if (pg_tokenizer_is_padding(d->tok, id, INT32_MAX)) return PAGODA_OK; /* no text */
    if (d->n_ids == d->cap_ids) {
        size_t c = d->cap_ids * 2;
        int32_t *g = realloc(d->ids, c * sizeof *g);
        if (!g) return pg_error(PAGODA_ERR_NOMEM, "detokenizer: out of memory");
        d->ids = g;
        d->cap_ids = c;
    }
    d->ids[d->n_ids++] = id;
    size_t la, lb;
    if ((st = decode(d, d->prefix_off, d->read_off, &d->buf_a, &d->cap_a, &la)) != PAGODA_OK ||
        (st = decode(d, d->prefix_off, d->n_ids, &d->buf_b, &d->cap_b, &lb)) != PAGODA_OK)
        return st;
    if (lb <= la || pg_utf8_complete_prefix(d->buf_b, lb) < lb) return PAGODA_OK; /* wait */
    size_t old = d->len;
    if ((st = append_text(d, d->buf_b + la, lb - la)) != PAGODA_OK) return st;
    d->prefix_off = d->read_off;
    d->read_off = d->n_ids;
    if (check_stop && d->n_stop) find_stop(d, old);
    return PAGODA_OK;
}

pagoda_status pg_detok_add_run(pg_detok *d, const int32_t *ids, size_t n, bool skip_last,
                               int64_t n_out_before, int32_t min_tokens, size_t *n_used) {
    size_t j = 0;
    for (; j < n && !d->stopped; j++) {
        if (skip_last && j == n - 1) continue; /* the stop token is not text */
        pagoda_status st = pg_detok_add(d, ids[j], n_out_before + (int64_t)j + 1 > min_tokens);
        if (st != PAGODA_OK) {
            *n_used = j;
            return st;
        }
    }
    *n_used = j;
    return PAGODA_OK;
}

/* Longest suffix of text that is a proper prefix of a stop string. */
static size_t holdback(const pg_detok *d) {
    size_t best = 0;
    for (size_t i = 0; i < d->n_stop; i++)
        /* from min(stop_len - 1, len): a huge stop string must not cost its length per token */
        for (size_t k = d->stop_len[i] - 1 < d->len ? d->stop_len[i] - 1 : d->len; k > best; k--)
            if (!memcmp(d->text + d->len - k, d->stop[i], k)) {
                best = k;
                break;
            }
    return best;
}

pagoda_status pg_detok_take(pg_detok *d, bool final, const char **delta, size_t *len) {
    pagoda_status st;
    if (final && !d->stopped && d->read_off < d->n_ids) {
        /* an unfinished character at the end: flush it, invalid bytes as U+FFFD */
        size_t la, lb;
        if ((st = decode(d, d->prefix_off, d->read_off, &d->buf_a, &d->cap_a, &la)) != PAGODA_OK ||
            (st = decode(d, d->prefix_off, d->n_ids, &d->buf_b, &d->cap_b, &lb)) != PAGODA_OK)
            return st;
        if (lb > la && (st = append_text(d, d->buf_b + la, lb - la)) != PAGODA_OK) return st;
        d->read_off = d->n_ids;
    }
    size_t end = d->len;
    if (!final && !d->stopped && !d->include_stop) end -= holdback(d);
    *delta = d->text ? d->text + d->emitted : "";
    *len = end > d->emitted ? end - d->emitted : 0;
    if (end > d->emitted) d->emitted = end;
    return PAGODA_OK;
}
