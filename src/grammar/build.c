/* pg_gram_from_ebnf / _regex / _choice (gram.h). */
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

pagoda_status pg_gram_from_ebnf(const char *text, size_t len, pg_gram **out) {
    *out = NULL;
    gx_builder b;
    gx_init(&b);
    pagoda_status st = gx_parse_ebnf(&b, text, len);
    if (st == PAGODA_OK) st = g_compile(&b, "root", out);
    gx_free(&b);
    return st;
}

pagoda_status pg_gram_from_regex(const char *re, size_t len, pg_gram **out) {
    *out = NULL;
    gx_builder b;
    gx_init(&b);
    int32_t x;
    pagoda_status st = gx_parse_regex(&b, re, len, false, &x);
    if (st == PAGODA_OK) st = gx_define(&b, "root", 4, x);
    if (st == PAGODA_OK) st = g_compile(&b, "root", out);
    gx_free(&b);
    return st;
}

pagoda_status pg_gram_from_choice(const char *const *items, const size_t *lens, size_t n,
                                  pg_gram **out) {
    *out = NULL;
    if (n == 0) return pg_error(PAGODA_ERR_INVALID_ARG, "choice: the list is empty");
    gx_builder b;
    gx_init(&b);
    int32_t *alts = malloc(n * sizeof *alts);
    pagoda_status st = PAGODA_OK;
    if (!alts) {
        gx_free(&b);
        return pg_error(PAGODA_ERR_NOMEM, "choice: out of memory");
    }
    for (size_t i = 0; i < n; i++)
        alts[i] = gx_literal(&b, items[i], lens ? lens[i] : strlen(items[i]));
    int32_t x = gx_alt(&b, alts, (int32_t)n);
    free(alts);
    if (x < 0) st = pg_error(PAGODA_ERR_NOMEM, "choice: out of memory");
    if (st == PAGODA_OK) st = gx_define(&b, "root", 4, x);
    if (st == PAGODA_OK) st = g_compile(&b, "root", out);
    gx_free(&b);
    return st;
}
