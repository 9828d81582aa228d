/* The grammar-compiler targets' driver (fz_grammar.h). */
#include "fz_grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammars.h"
#include "fz_util.h"
#include "grammar/gram.h"
#include "grammar/token_mask.h"

static pg_vocab_trie *g_trie;
#define N_BYTES 256

static const char *const k_words[] = {
    "{\"", "\":", "\",", "\"}",   "true",     "false",        "null", "  ", "\n",    "ab",
    "abc", "12",  "-1",  "0.5e3", "\xc3\xa9", "\xe4\xbd\xa0", "[]",   "{}", "\\u00", "aaaa"};

static const pg_vocab_trie *trie(void) {
    if (g_trie) return g_trie;
    enum { N = N_BYTES + sizeof k_words / sizeof *k_words };
    static char bytes[N_BYTES];
    const char *tok[N];
    size_t lens[N];
    for (int i = 0; i < N_BYTES; i++) {
        bytes[i] = (char)i;
        tok[i] = &bytes[i];
        lens[i] = 1;
    }
    for (size_t i = 0; i < sizeof k_words / sizeof *k_words; i++) {
        tok[N_BYTES + i] = k_words[i];
        lens[N_BYTES + i] = strlen(k_words[i]);
    }
    if (pg_vocab_trie_create(tok, lens, N, &g_trie) != PAGODA_OK) abort();
    return g_trie;
}

static void check(bool cond, const char *what, size_t step, int byte) {
    if (cond) return;
    fprintf(stderr, "grammar: %s at sample byte %zu (0x%02x)\n", what, step, byte);
    abort();
}

void fz_grammar(pagoda_grammar_kind kind, const uint8_t *data, size_t size) {
    const uint8_t *sample;
    size_t sample_len, spec_len;
    fz_split(data, size, &sample, &sample_len, &spec_len);
    pg_gram *g = NULL;
    if (pg_grammar_build(kind, (const char *)data, spec_len, &g) != PAGODA_OK) return;
    pg_gstate *gs = NULL;
    if (pg_gstate_create(g, &gs) != PAGODA_OK) {
        pg_gram_free(g);
        return;
    }
    pg_tgram *tg = NULL;
    if (pg_tgram_create(g, trie(), &tg) != PAGODA_OK) { /* frees g */
        pg_gstate_free(gs);
        return;
    }
    pg_tmatch *tm = NULL;
    const int32_t stop = N_BYTES; /* `{"` doubles as the stop token */
    if (pg_tmatch_create(tg, &stop, 1, &tm) == PAGODA_OK) {
        uint64_t bits[(N_BYTES + 64 + 63) / 64];
        /* a matcher past its work budget (LIMIT, an ambiguous grammar) stops
         * the comparison: the two matchers count their steps differently */
        bool limited = false;
        for (size_t i = 0; i < sample_len && i < 64; i++) {
            uint64_t allowed[4];
            pg_clear_error();
            pg_gstate_allowed(gs, allowed);
            memset(bits, 0, sizeof bits);
            limited = pg_last_error()[0] != 0;
            pg_tmatch_fill_mask(tm, bits);
            if (limited || pg_tmatch_status(tm) != PAGODA_OK) {
                limited = true;
                break;
            }
            for (int c = 0; c < N_BYTES; c++) {
                bool a = (allowed[c / 64] >> (c % 64)) & 1, m = (bits[c / 64] >> (c % 64)) & 1;
                check(a == m, "token mask and byte matcher disagree", i, c);
            }
            int c = sample[i];
            bool a = (allowed[c / 64] >> (c % 64)) & 1;
            bool fed = pg_gstate_feed(gs, &sample[i], 1);
            bool acc = pg_tmatch_accept(tm, c);
            if (pg_last_error()[0] || pg_tmatch_status(tm) != PAGODA_OK) {
                limited = true;
                break;
            }
            check(fed == a, "feeding a byte disagrees with the allowed set", i, c);
            check(acc == a, "accepting a byte token disagrees with the allowed set", i, c);
            if (!a) break;
        }
        pg_tmatch_complete(tm);
        check(limited || pg_tmatch_complete(tm) == pg_gstate_accepting(gs),
              "token matcher and byte matcher disagree on completion", sample_len, 0);
        pg_gstate_finished(gs);
        pg_tmatch_free(tm);
    }
    pg_tgram_release(tg);
    pg_gstate_free(gs);
}
