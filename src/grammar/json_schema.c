/* JSON Schema -> grammar (EBNF text + regex rules, then compiled), the
 * approach of llama.cpp's json-schema-to-grammar and xgrammar's
 * JSONSchemaConverter, written from the JSON Schema 2020-12 core and
 * validation specs. Supported keywords:
 *   type (string or list), enum, const, anyOf, oneOf (as anyOf: see below),
 *   allOf with one item, $ref to "#", "#/$defs/..", "#/definitions/.." (recursion
 *   allowed), $defs/definitions;
 *   object: properties (emitted in schema order, optional ones may be
 *   left out), required, additionalProperties (false when absent, as
 *   xgrammar's strict mode that vLLM uses; true or a schema allows more keys
 *   after the declared ones);
 *   array: items, prefixItems, minItems, maxItems;
 *   string: pattern (ECMAScript regex, regex.c), format (date, time,
 *   date-time, uuid, email, ipv4), minLength, maxLength;
 *   integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum;
 *   number: the same with integral bounds;
 *   annotations (title, description, default, examples, $schema, $id,
 *   $comment, readOnly, writeOnly, deprecated, $anchor) are ignored.
 * Anything else that constrains (not, if/then/else, patternProperties,
 * uniqueItems, contains, multipleOf, minProperties, ...) is an UNSUPPORTED
 * error naming it.
 * Whitespace between tokens is ( " " | "\n" [ \t]{0,20} )? as llama.cpp's
 * `space` rule: bounded, so a model cannot pad forever; numbers have at
 * most 16 integer and 16 fraction digits. oneOf is generated as anyOf: the
 * output matches at least one branch; schemas whose branches overlap may
 * produce a value matching several. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

#define WS "( \" \" | \"\\n\" [ \\t]{0,20} )?"
/* One JSON string character, inlined wherever strings are (a rule of its
 * own would make every multi-character token context-dependent) */
#define JCHAR "( [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )"

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 4096;
        while (c < b->n + n + 1)
            c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_put(b, big, (size_t)n);
    free(big);
}

/* An EBNF string literal for raw bytes s[0..n). */
static void sb_lit(sbuf *b, const char *s, size_t n) {
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20 || c == 0x7F) {
            sb_printf(b, "\\x%02X", c);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

typedef struct pending_regex {
    char *rule;
    char *pattern;
} pending_regex;

typedef struct conv {
    cJSON *root;
    sbuf out;   /* the body of the rule being written */
    sbuf rules; /* finished rules, one per line */
    int n_rules;
    /* $ref targets already given a rule: pointer -> rule name */
    const cJSON **ref_nodes;
    char **ref_names;
    int n_refs, cap_refs;
    pending_regex *rx;
    int n_rx, cap_rx;
    pagoda_status st;
    int depth;
} conv;

static void cfail(conv *c, pagoda_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cfail(conv *c, pagoda_status code, const char *fmt, ...) {
    if (c->st != PAGODA_OK) return;
    char m[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    c->st = pg_error(code, "json_schema: %s", m);
}

/* A fresh rule name into name[32]. */
static void new_rule(conv *c, char name[32], const char *hint) {
    snprintf(name, 32, "%s-%d", hint, c->n_rules++);
}

static void gen(conv *c, const cJSON *s, char name[32]);

static const char *const ignored_keys[] = {
    "title",       "description",      "default",         "examples",      "$schema",  "$id",
    "$comment",    "readOnly",         "writeOnly",       "deprecated",    "$anchor",  "$defs",
    "definitions", "contentMediaType", "contentEncoding", "discriminator", "nullable", NULL};

static const char *const handled_keys[] = {"type",
                                           "enum",
                                           "const",
                                           "anyOf",
                                           "oneOf",
                                           "allOf",
                                           "$ref",
                                           "properties",
                                           "required",
                                           "additionalProperties",
                                           "items",
                                           "prefixItems",
                                           "minItems",
                                           "maxItems",
                                           "pattern",
                                           "format",
                                           "minLength",
                                           "maxLength",
                                           "minimum",
                                           "maximum",
                                           "exclusiveMinimum",
                                           "exclusiveMaximum",
                                           NULL};

static bool in_list(const char *k, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (strcmp(k, list[i]) == 0) return true;
    return false;
}

static void check_keys(conv *c, const cJSON *s) {
    for (const cJSON *k = s->child; k; k = k->next) {
        if (in_list(k->string, ignored_keys) || in_list(k->string, handled_keys)) continue;
        cfail(c, PAGODA_ERR_UNSUPPORTED, "keyword '%s' is not supported", k->string);
        return;
    }
}

static const char *const VALUE_RULES =
    "json-value ::= json-object | json-array | json-string | json-number | \"true\" | \"false\" | "
    "\"null\"\n"
    "json-object ::= \"{\" " WS " ( json-string " WS " \":\" " WS " json-value " WS " ( \",\" " WS
    " json-string " WS " \":\" " WS " json-value " WS " )* )? \"}\"\n"
    "json-array ::= \"[\" " WS " ( json-value " WS " ( \",\" " WS " json-value " WS " )* )? \"]\"\n"
    "json-string ::= \"\\\"\" " JCHAR "* \"\\\"\"\n"
    "json-number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? "
    "[0-9]{1,3} )?\n"
    "json-integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "json-boolean ::= \"true\" | \"false\"\n"
    "json-null ::= \"null\"\n"
    "json-date ::= json-year \"-\" ( ( \"01\" | \"03\" | \"05\" | \"07\" | \"08\" | \"10\" | "
    "\"12\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | ( \"04\" | \"06\" | \"09\" | "
    "\"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | "
    "\"2\" [0-8] ) ) | json-leap-year \"-02-29\"\n"
    "json-year ::= [0-9]{4}\n"
    "json-leap-year ::= [0-9] [0-9] ( [02468] [48] | [13579] [26] | [2468] \"0\" ) | ( [02468] "
    "[048] | [13579] [26] ) \"00\"\n"
    "json-time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" "
    "[0-9]{1,6} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "json-date-time ::= json-date \"T\" json-time\n"
    "json-uuid ::= [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
    "[0-9a-f]{12}\n"
    "json-email ::= [a-zA-Z0-9_+-]{1,32} ( \".\" [a-zA-Z0-9_+-]{1,32} ){0,3} \"@\" json-label ( "
    "\".\" json-label ){0,3} \".\" [a-zA-Z]{2,8}\n"
    "json-label ::= [a-zA-Z0-9] ( [a-zA-Z0-9-]{0,20} [a-zA-Z0-9] )?\n"
    "json-ipv4 ::= json-octet \".\" json-octet \".\" json-octet \".\" json-octet\n"
    "json-octet ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9]\n";

/* The literal JSON text of a value (enum/const): compact, as JSON.stringify. */
static void gen_literal_value(conv *c, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) {
        cfail(c, PAGODA_ERR_NOMEM, "out of memory");
        return;
    }
    sb_lit(&c->out, t, strlen(t));
    free(t);
}

/* ---- integer ranges as digit patterns ("range to regex") */

static void digits_of(uint64_t v, char *d, int *len) {
    char t[24];
    int n = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    memcpy(d, t, (size_t)n + 1);
    *len = n;
}

/* Same-length decimal strings x <= y: their range as a sequence. */
static void same_len_range(sbuf *b, const char *x, const char *y, int n) {
    if (n == 0) {
        sb_put(b, "\"\"", 2);
        return;
    }
    bool all0 = true, all9 = true;
    for (int i = 1; i < n; i++) {
        all0 &= x[i] == '0';
        all9 &= y[i] == '9';
    }
    if (x[0] == y[0]) {
        sb_printf(b, "\"%c\" ( ", x[0]);
        same_len_range(b, x + 1, y + 1, n - 1);
        sb_put(b, " )", 2);
        return;
    }
    if (all0 && all9) {
        sb_printf(b, "[%c-%c]", x[0], y[0]);
        if (n > 1) sb_printf(b, " [0-9]{%d}", n - 1);
        return;
    }
    char lo_hi[24], hi_lo[24];
    memset(lo_hi, '9', (size_t)n);
    memset(hi_lo, '0', (size_t)n);
    sb_put(b, "( ", 2);
    /* x[0] followed by x[1..] .. 9..9 */
    sb_printf(b, "\"%c\" ( ", x[0]);
    same_len_range(b, x + 1, lo_hi, n - 1);
    sb_put(b, " )", 2);
    if (y[0] - x[0] > 1) {
        sb_printf(b, " | [%c-%c]", x[0] + 1, y[0] - 1);
        if (n > 1) sb_printf(b, " [0-9]{%d}", n - 1);
    }
    sb_printf(b, " | \"%c\" ( ", y[0]);
    same_len_range(b, hi_lo, y + 1, n - 1);
    sb_put(b, " ) )", 4);
}

#define MAX_DIGITS 16
static const uint64_t MAX_MAG = 9999999999999999ull; /* 16 digits */

/* Non-negative integers in [a, b] (b <= MAX_MAG) without leading zeros. */
static void pos_range(sbuf *b, uint64_t a, uint64_t z) {
    char x[24], y[24];
    int lx, ly;
    digits_of(a, x, &lx);
    digits_of(z, y, &ly);
    bool first = true;
    sb_put(b, "( ", 2);
    for (int len = lx; len <= ly; len++) {
        char lo[24], hi[24];
        if (len == lx) {
            memcpy(lo, x, (size_t)lx + 1);
        } else {
            lo[0] = '1';
            memset(lo + 1, '0', (size_t)len - 1);
            lo[len] = 0;
        }
        if (len == ly) {
            memcpy(hi, y, (size_t)ly + 1);
        } else {
            memset(hi, '9', (size_t)len);
            hi[len] = 0;
        }
        if (!first) sb_put(b, " | ", 3);
        first = false;
        same_len_range(b, lo, hi, len);
    }
    sb_put(b, " )", 2);
}

/* Integers in [lo, hi] (int64; absent bounds are +-MAX_MAG). */
static void int_range(conv *c, int64_t lo, int64_t hi) {
    sbuf *b = &c->out;
    if (lo > hi) {
        cfail(c, PAGODA_ERR_INVALID_ARG, "integer range [%lld, %lld] is empty", (long long)lo,
              (long long)hi);
        return;
    }
    bool any = false;
    sb_put(b, "( ", 2);
    if (lo < 0) { /* negatives: -[max(1, -hi) .. -lo] */
        uint64_t a = hi < 0 ? (uint64_t)(-(hi + 1)) + 1 : 1, z = (uint64_t)(-(lo + 1)) + 1;
        sb_put(b, "\"-\" ", 4);
        pos_range(b, a, z);
        any = true;
    }
    if (hi >= 0) {
        if (any) sb_put(b, " | ", 3);
        pos_range(b, lo > 0 ? (uint64_t)lo : 0, (uint64_t)hi);
    }
    sb_put(b, " )", 2);
}

/* A bound keyword's value: number, integral for integers. */
static bool get_bound(conv *c, const cJSON *s, const char *key, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!x) return false;
    if (!cJSON_IsNumber(x)) {
        cfail(c, PAGODA_ERR_INVALID_ARG, "'%s' must be a number", key);
        return false;
    }
    *v = x->valuedouble;
    return true;
}

static void gen_number(conv *c, const cJSON *s, bool integer) {
    double v;
    bool has_lo = false, has_hi = false, ex_lo = false, ex_hi = false;
    double lo = 0, hi = 0;
    if (get_bound(c, s, "minimum", &v)) has_lo = true, lo = v;
    if (get_bound(c, s, "exclusiveMinimum", &v) && (!has_lo || v >= lo))
        has_lo = true, lo = v, ex_lo = true;
    if (get_bound(c, s, "maximum", &v)) has_hi = true, hi = v;
    if (get_bound(c, s, "exclusiveMaximum", &v) && (!has_hi || v <= hi))
        has_hi = true, hi = v, ex_hi = true;
    if (c->st) return;
    if (!has_lo && !has_hi) {
        sb_put(&c->out, integer ? "json-integer" : "json-number", integer ? 12 : 11);
        return;
    }
    const double lim = (double)MAX_MAG;
    if ((has_lo && fabs(lo) > lim) || (has_hi && fabs(hi) > lim)) {
        cfail(c, PAGODA_ERR_UNSUPPORTED, "number bounds beyond +-%llu are not supported",
              (unsigned long long)MAX_MAG);
        return;
    }
    if (integer) {
        int64_t a = has_lo ? (int64_t)(ex_lo ? floor(lo) + 1 : ceil(lo)) : -(int64_t)MAX_MAG;
        int64_t z = has_hi ? (int64_t)(ex_hi ? ceil(hi) - 1 : floor(hi)) : (int64_t)MAX_MAG;
        int_range(c, a, z);
        return;
    }
    /* number: integral bounds only. x = [-] ip [. frac]: with f the
     * fraction, lo <= x <= hi splits into integer-part ranges (see
     * docs/ARCHITECTURE.md "Grammar engine") */
    if ((has_lo && lo != floor(lo)) || (has_hi && hi != floor(hi))) {
        cfail(c, PAGODA_ERR_UNSUPPORTED,
              "'%s' with a non-integral value on a number is not supported",
              has_lo && lo != floor(lo) ? (ex_lo ? "exclusiveMinimum" : "minimum")
                                        : (ex_hi ? "exclusiveMaximum" : "maximum"));
        return;
    }
    int64_t L = has_lo ? (int64_t)lo : -(int64_t)MAX_MAG,
            H = has_hi ? (int64_t)hi : (int64_t)MAX_MAG;
    if (L > H || (L == H && (ex_lo || ex_hi))) {
        cfail(c, PAGODA_ERR_INVALID_ARG, "number range is empty");
        return;
    }
    const char *frac = "( \".\" [0-9]{1,16} )?";
    const char *zero_frac = "( \".\" \"0\"{1,16} )?";
    const char *nz_frac = "\".\" [0-9]{0,15} [1-9]"; /* f > 0 (trailing digit nonzero) */
    sbuf *b = &c->out;
    sb_put(b, "( ", 2);
    bool first = true;
#define ALT()                                                                                      \
    do {                                                                                           \
        if (!first) sb_put(b, " | ", 3);                                                           \
        first = false;                                                                             \
    } while (0)
    /* non-negative part: ip in [max(L,0), H] */
    if (H >= 0) {
        int64_t a = L > 0 ? L : 0;
        /* ip in [a', H-1] with any fraction, where a' = a (x >= L holds for
         * ip >= L; ip = L with f > 0 also holds; exclusive L needs f > 0 at ip = L) */
        int64_t a_any = (ex_lo && a == L) ? a + 1 : a;
        if (a_any <= H - 1) {
            ALT();
            int_range(c, a_any, H - 1);
            sb_printf(b, " %s", frac);
        }
        if (ex_lo && a == L && L <= H - 1) { /* ip = L, f > 0 */
            ALT();
            int_range(c, L, L);
            sb_printf(b, " %s", nz_frac);
        }
        if (!ex_hi && H >= a_any && !(ex_lo && H == L)) { /* x = H exactly */
            ALT();
            int_range(c, H, H);
            sb_printf(b, " %s", zero_frac);
        }
    }
    /* negative part: x = -(ip + f) with ip + f > 0; -H' <= ... mirrored */
    if (L < 0) {
        int64_t hmag = H < 0 ? -H : 0; /* ip + f >= hmag (x <= H) */
        int64_t lmag = -L;             /* ip + f <= lmag (x >= L) */
        /* ip in [hmag', lmag-1] any f>=0 (ip+f>0); ip = lmag with f = 0 */
        int64_t a = hmag;
        bool ex_a = ex_hi && H < 0; /* ip + f > hmag */
        int64_t a_any = ex_a ? a + 1 : a;
        if (a_any <= lmag - 1) {
            ALT();
            sb_put(b, "\"-\" ", 4);
            if (a_any == 0) { /* ip = 0 needs f > 0 */
                sb_printf(b, "( \"0\" %s", nz_frac);
                if (lmag - 1 >= 1) {
                    sb_put(b, " | ", 3);
                    int_range(c, 1, lmag - 1);
                    sb_printf(b, " %s", frac);
                }
                sb_put(b, " )", 2);
            } else {
                int_range(c, a_any, lmag - 1);
                sb_printf(b, " %s", frac);
            }
        }
        if (ex_a && a <= lmag - 1 && a > 0) { /* ip = hmag, f > 0 */
            ALT();
            sb_put(b, "\"-\" ", 4);
            int_range(c, a, a);
            sb_printf(b, " %s", nz_frac);
        }
        if (!ex_lo && lmag >= a_any && lmag > 0) { /* x = L exactly */
            ALT();
            sb_put(b, "\"-\" ", 4);
            int_range(c, lmag, lmag);
            sb_printf(b, " %s", zero_frac);
        }
    }
#undef ALT
    if (first) cfail(c, PAGODA_ERR_INVALID_ARG, "number range is empty");
    sb_put(b, " )", 2);
}

static bool get_count(conv *c, const cJSON *s, const char *key, int32_t *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!x) return false;
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble != floor(x->valuedouble)) {
        cfail(c, PAGODA_ERR_INVALID_ARG, "'%s' must be a non-negative integer", key);
        return false;
    }
    if (x->valuedouble > 10000) {
        cfail(c, PAGODA_ERR_UNSUPPORTED, "'%s' above 10000 is not supported", key);
        return false;
    }
    *v = (int32_t)x->valuedouble;
    return true;
}

static void gen_string(conv *c, const cJSON *s) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    int32_t mn = 0, mx = -1;
    bool has_len = get_count(c, s, "minLength", &mn);
    has_len |= get_count(c, s, "maxLength", &mx);
    if (c->st) return;
    if (mx >= 0 && mx < mn) {
        cfail(c, PAGODA_ERR_INVALID_ARG, "maxLength < minLength");
        return;
    }
    if ((pat != NULL) + (fmt != NULL) + has_len > 1) {
        cfail(c, PAGODA_ERR_UNSUPPORTED,
              "combining 'pattern', 'format' and 'minLength'/'maxLength' on one string is not "
              "supported");
        return;
    }
    if (pat) {
        if (!cJSON_IsString(pat)) {
            cfail(c, PAGODA_ERR_INVALID_ARG, "'pattern' must be a string");
            return;
        }
        if (c->n_rx == c->cap_rx) {
            int cap = c->cap_rx ? c->cap_rx * 2 : 8;
            void *q = realloc(c->rx, (size_t)cap * sizeof *c->rx);
            if (!q) {
                cfail(c, PAGODA_ERR_NOMEM, "out of memory");
                return;
            }
            c->rx = q;
            c->cap_rx = cap;
        }
        char name[32];
        new_rule(c, name, "pattern");
        c->rx[c->n_rx].rule = strdup(name);
        c->rx[c->n_rx].pattern = strdup(pat->valuestring);
        c->n_rx++;
        sb_printf(&c->out, "\"\\\"\" %s \"\\\"\"", name);
        return;
    }
    if (fmt) {
        static const char *const fmts[] = {"date",  "time", "date-time", "uuid",
                                           "email", "ipv4", NULL};
        if (!cJSON_IsString(fmt)) {
            cfail(c, PAGODA_ERR_INVALID_ARG, "'format' must be a string");
            return;
        }
        if (!in_list(fmt->valuestring, fmts)) {
            cfail(c, PAGODA_ERR_UNSUPPORTED,
                  "format '%s' is not supported (supported: date, time, date-time, uuid, email, "
                  "ipv4)",
                  fmt->valuestring);
            return;
        }
        sb_printf(&c->out, "\"\\\"\" json-%s \"\\\"\"", fmt->valuestring);
        return;
    }
    if (has_len) {
        if (mx >= 0)
            sb_printf(&c->out, "\"\\\"\" " JCHAR "{%d,%d} \"\\\"\"", mn, mx);
        else
            sb_printf(&c->out, "\"\\\"\" " JCHAR "{%d,} \"\\\"\"", mn);
        return;
    }
    sb_put(&c->out, "json-string", 11);
}

static void gen_array(conv *c, const cJSON *s) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    int32_t mn = 0, mx = -1;
    get_count(c, s, "minItems", &mn);
    get_count(c, s, "maxItems", &mx);
    if (c->st) return;
    if (mx >= 0 && mx < mn) {
        cfail(c, PAGODA_ERR_INVALID_ARG, "maxItems < minItems");
        return;
    }
    char item[32] = "json-value";
    bool no_more = false;
    if (items && cJSON_IsFalse(items))
        no_more = true;
    else if (items && !cJSON_IsTrue(items))
        gen(c, items, item);
    int np = 0;
    char(*pn)[32] = NULL;
    if (prefix) {
        if (!cJSON_IsArray(prefix)) {
            cfail(c, PAGODA_ERR_INVALID_ARG, "'prefixItems' must be an array");
            return;
        }
        np = cJSON_GetArraySize(prefix);
        pn = calloc((size_t)(np ? np : 1), sizeof *pn);
        if (!pn) {
            cfail(c, PAGODA_ERR_NOMEM, "out of memory");
            return;
        }
        int i = 0;
        for (const cJSON *p = prefix->child; p; p = p->next)
            gen(c, p, pn[i++]);
    }
    if (c->st) {
        free(pn);
        return;
    }
    sbuf *b = &c->out;
    /* tuple part: element i present only if elements < i are; the counts
     * of the tuple and the rest meet min/max */
    if (np) {
        if (mn > np && no_more) {
            cfail(c, PAGODA_ERR_INVALID_ARG, "minItems larger than prefixItems with items: false");
            free(pn);
            return;
        }
        /* [ p0 (, p1 (, p2 ... (, rest)?)?)? ] with the first mn required */
        sb_put(b, "\"[\" " WS " ", strlen("\"[\" " WS " "));
        int lim = mx >= 0 && mx < np ? mx : np;
        int opened = 0;
        for (int i = 0; i < lim; i++) {
            bool req = i < mn;
            if (!req) {
                sb_put(b, "( ", 2);
                opened++;
            }
            if (i) sb_put(b, "\",\" " WS " ", strlen("\",\" " WS " "));
            sb_printf(b, "%s " WS " ", pn[i]);
        }
        if (!no_more && (mx < 0 || mx > np)) {
            int rmin = mn > np ? mn - np : 0, rmax = mx < 0 ? -1 : mx - np;
            if (rmax < 0)
                sb_printf(b, "( \",\" " WS " %s " WS " ){%d,} ", item, rmin);
            else
                sb_printf(b, "( \",\" " WS " %s " WS " ){%d,%d} ", item, rmin, rmax);
        }
        for (int i = 0; i < opened; i++)
            sb_put(b, ")? ", 3);
        sb_put(b, "\"]\"", 3);
        free(pn);
        return;
    }
    if (no_more || mx == 0) {
        if (mn > 0) cfail(c, PAGODA_ERR_INVALID_ARG, "minItems > 0 with no items allowed");
        sb_put(b, "\"[\" " WS " \"]\"", strlen("\"[\" " WS " \"]\""));
        return;
    }
    sb_put(b, "\"[\" " WS " ", strlen("\"[\" " WS " "));
    if (mn == 0) sb_put(b, "( ", 2);
    sb_printf(b, "%s " WS " ", item);
    int rmin = mn > 0 ? mn - 1 : 0;
    if (mx < 0)
        sb_printf(b, "( \",\" " WS " %s " WS " ){%d,} ", item, rmin);
    else
        sb_printf(b, "( \",\" " WS " %s " WS " ){%d,%d} ", item, rmin, mx - 1);
    if (mn == 0) sb_put(b, ")? ", 3);
    sb_put(b, "\"]\"", 3);
}

/* ---- keys of additional properties: any JSON string except the declared
 * names. Keys are generated in a canonical form (raw characters, the short
 * escapes \" \\ \b \f \n \r \t; no \u or \/), so a key decodes to a declared
 * name exactly when its bytes are that name's canonical text, and a trie
 * over the names' units excludes them. */
typedef struct knode {
    char unit[8]; /* the unit leading here (a character or a 2-byte escape) */
    int parent, first_child, next_sibling;
    bool terminal;
} knode;

static int unit_len(const char *p) {
    unsigned char c = (unsigned char)*p;
    if (c == '\\') return 2;
    return c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
}

/* The EBNF rules of the key grammar into c->rules; its name in name[32].
 * names: the declared property names. */
static void gen_other_key(conv *c, const cJSON *props, char name[32]) {
    new_rule(c, name, "akey");
    knode nodes[512];
    int nn = 1;
    memset(&nodes[0], 0, sizeof nodes[0]);
    nodes[0].first_child = nodes[0].next_sibling = -1;
    nodes[0].parent = -1;
    for (const cJSON *p = props->child; p; p = p->next) {
        cJSON *ks = cJSON_CreateString(p->string);
        char *kt = ks ? cJSON_PrintUnformatted(ks) : NULL;
        cJSON_Delete(ks);
        if (!kt) {
            cfail(c, PAGODA_ERR_NOMEM, "out of memory");
            return;
        }
        size_t L = strlen(kt);
        bool canonical = !strstr(kt, "\\u"); /* other controls: no key can equal it */
        int at = 0;
        for (size_t i = 1; canonical && i + 1 < L;) {
            int ul = unit_len(kt + i);
            char u[8] = {0};
            memcpy(u, kt + i, (size_t)ul);
            int ch = nodes[at].first_child;
            while (ch >= 0 && strcmp(nodes[ch].unit, u) != 0)
                ch = nodes[ch].next_sibling;
            if (ch < 0) {
                if (nn == 512) {
                    free(kt);
                    cfail(
                        c, PAGODA_ERR_UNSUPPORTED,
                        "'additionalProperties' next to more than 512 characters of property names "
                        "is not supported");
                    return;
                }
                ch = nn++;
                memset(&nodes[ch], 0, sizeof nodes[ch]);
                memcpy(nodes[ch].unit, u, sizeof u);
                nodes[ch].parent = at;
                nodes[ch].first_child = -1;
                nodes[ch].next_sibling = nodes[at].first_child;
                nodes[at].first_child = ch;
            }
            at = ch;
            i += (size_t)ul;
        }
        if (canonical) nodes[at].terminal = true;
        free(kt);
    }
    sbuf *b = &c->rules;
    sb_printf(b, "%s-free ::= ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\bfnrt] )* \"\\\"\"\n", name);
    sb_printf(b, "%s ::= \"\\\"\" %s-n0\n", name, name);
    for (int t = 0; t < nn; t++) {
        sb_printf(b, "%s-n%d ::= ", name, t);
        bool first = true;
        char esc_left[8] = "\"\\bfnrt";
        sbuf cls = {0};
        for (int ch = nodes[t].first_child; ch >= 0; ch = nodes[ch].next_sibling) {
            if (!first) sb_put(b, " | ", 3);
            first = false;
            sb_lit(b, nodes[ch].unit, strlen(nodes[ch].unit));
            sb_printf(b, " %s-n%d", name, ch);
            if (nodes[ch].unit[0] == '\\') {
                char *e = strchr(esc_left, nodes[ch].unit[1]);
                if (e) memmove(e, e + 1, strlen(e));
            } else {
                unsigned char u0 = (unsigned char)nodes[ch].unit[0];
                if (u0 == ']' || u0 == '-' || u0 == '^' || u0 == '\\') sb_put(&cls, "\\", 1);
                sb_put(&cls, nodes[ch].unit, strlen(nodes[ch].unit));
            }
        }
        if (!first) sb_put(b, " | ", 3);
        sb_printf(b, "( [^\"\\\\\\x00-\\x1F%s]", cls.p ? cls.p : "");
        free(cls.p);
        if (esc_left[0]) {
            sb_put(b, " | \"\\\\\" [", 9);
            for (const char *e = esc_left; *e; e++) {
                if (*e == '"' || *e == '\\') sb_put(b, "\\", 1);
                sb_put(b, e, 1);
            }
            sb_put(b, "]", 1);
        }
        sb_printf(b, " ) %s-free", name);
        if (!nodes[t].terminal) sb_put(b, " | \"\\\"\"", 7);
        sb_put(b, "\n", 1);
    }
}

static void gen_object(conv *c, const cJSON *s) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) {
        cfail(c, PAGODA_ERR_INVALID_ARG, "'properties' must be an object");
        return;
    }
    if (req && !cJSON_IsArray(req)) {
        cfail(c, PAGODA_ERR_INVALID_ARG, "'required' must be an array");
        return;
    }
    int n = props ? cJSON_GetArraySize(props) : 0;
    /* every required name must be a declared property (else it could only be
     * an additional one: refuse rather than guess) */
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) {
            cfail(c, PAGODA_ERR_INVALID_ARG, "'required' items must be strings");
            return;
        }
        if (!props || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) {
            cfail(c, PAGODA_ERR_UNSUPPORTED,
                  "required property '%s' is not in 'properties' (not supported)", r->valuestring);
            return;
        }
    }
    char addl_val[32] = "";
    if (addl && !cJSON_IsFalse(addl)) {
        if (cJSON_IsTrue(addl))
            snprintf(addl_val, sizeof addl_val, "json-value");
        else
            gen(c, addl, addl_val);
    } else if (!addl && n == 0) {
        snprintf(addl_val, sizeof addl_val, "json-value"); /* {"type":"object"}: any object */
    }
    char(*kv)[32] = calloc((size_t)(n ? n : 1), sizeof *kv);
    bool *isreq = calloc((size_t)(n ? n : 1), 1);
    if (!kv || !isreq) {
        free(kv);
        free(isreq);
        cfail(c, PAGODA_ERR_NOMEM, "out of memory");
        return;
    }
    int i = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next, i++) {
        char val[32];
        gen(c, p, val);
        if (c->st) break;
        new_rule(c, kv[i], "kv");
        /* key literal: the JSON text of the name */
        cJSON *ks = cJSON_CreateString(p->string);
        char *kt = ks ? cJSON_PrintUnformatted(ks) : NULL;
        cJSON_Delete(ks);
        if (!kt) {
            cfail(c, PAGODA_ERR_NOMEM, "out of memory");
            break;
        }
        sb_printf(&c->rules, "%s ::= ", kv[i]);
        sb_lit(&c->rules, kt, strlen(kt));
        free(kt);
        sb_printf(&c->rules, " " WS " \":\" " WS " %s\n", val);
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (strcmp(r->valuestring, p->string) == 0) isreq[i] = true;
    }
    if (c->st) {
        free(kv);
        free(isreq);
        return;
    }
    /* rest_i (something before: comma first) and first_i, from the end */
    char base[32];
    new_rule(c, base, "obj");
    sbuf *b = &c->rules;
    if (addl_val[0]) {
        char key[32] = "json-string";
        if (n) gen_other_key(c, props, key); /* never a declared name again */
        sb_printf(b, "%s-rest%d ::= ( \",\" " WS " %s " WS " \":\" " WS " %s " WS " )*\n", base, n,
                  key, addl_val);
        sb_printf(b, "%s-first%d ::= ( %s " WS " \":\" " WS " %s " WS " %s-rest%d )?\n", base, n,
                  key, addl_val, base, n);
    } else {
        sb_printf(b, "%s-rest%d ::= \"\"\n%s-first%d ::= \"\"\n", base, n, base, n);
    }
    for (i = n - 1; i >= 0; i--) {
        sb_printf(b, "%s-rest%d ::= \",\" " WS " %s " WS " %s-rest%d", base, i, kv[i], base, i + 1);
        if (!isreq[i]) sb_printf(b, " | %s-rest%d", base, i + 1);
        sb_printf(b, "\n%s-first%d ::= %s " WS " %s-rest%d", base, i, kv[i], base, i + 1);
        if (!isreq[i]) sb_printf(b, " | %s-first%d", base, i + 1);
        sb_put(b, "\n", 1);
    }
    free(kv);
    free(isreq);
    sb_printf(b, "%s ::= \"{\" " WS " %s-first0 \"}\"\n", base, base);
    sb_printf(&c->out, "%s", base);
}

/* Resolve a local $ref ("#", "#/$defs/x", "#/definitions/x", JSON pointer
 * with ~0 ~1 escapes). */
static const cJSON *resolve_ref(conv *c, const char *ref) {
    if (ref[0] != '#') {
        cfail(c, PAGODA_ERR_UNSUPPORTED, "$ref '%s': only local references (#...) are supported",
              ref);
        return NULL;
    }
    const cJSON *cur = c->root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char seg[256];
        size_t k = 0;
        while (*p && *p != '/' && k < sizeof seg - 1) {
            if (p[0] == '~' && p[1] == '0') {
                seg[k++] = '~';
                p += 2;
            } else if (p[0] == '~' && p[1] == '1') {
                seg[k++] = '/';
                p += 2;
            } else {
                seg[k++] = *p++;
            }
        }
        seg[k] = 0;
        if (cJSON_IsArray(cur)) {
            char *end;
            long idx = strtol(seg, &end, 10);
            cur = *end ? NULL : cJSON_GetArrayItem(cur, (int)idx);
        } else {
            cur = cJSON_GetObjectItemCaseSensitive(cur, seg);
        }
        if (!cur) {
            cfail(c, PAGODA_ERR_INVALID_ARG, "$ref '%s' does not resolve", ref);
            return NULL;
        }
    }
    if (*p) {
        cfail(c, PAGODA_ERR_UNSUPPORTED, "$ref '%s': only JSON-pointer references are supported",
              ref);
        return NULL;
    }
    return cur;
}

/* Body text of schema s; appended to c->out (the caller wrote "name ::= "). */
static void body(conv *c, const cJSON *s);

/* Write a rule for schema s and put its name in name[32]. */
static void gen(conv *c, const cJSON *s, char name[32]) {
    snprintf(name, 32, "json-value");
    if (c->st) return;
    if (++c->depth > 64) {
        cfail(c, PAGODA_ERR_LIMIT, "schema nested deeper than 64 levels");
        return;
    }
    /* $ref: one rule per target (recursion ends here) */
    const cJSON *ref = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "$ref") : NULL;
    if (ref && cJSON_IsString(ref)) {
        const cJSON *t = resolve_ref(c, ref->valuestring);
        if (!t) {
            c->depth--;
            return;
        }
        for (const cJSON *k = s->child; k; k = k->next)
            if (strcmp(k->string, "$ref") != 0 && !in_list(k->string, ignored_keys)) {
                cfail(c, PAGODA_ERR_UNSUPPORTED, "keywords next to '$ref' ('%s') are not supported",
                      k->string);
                c->depth--;
                return;
            }
        for (int i = 0; i < c->n_refs; i++)
            if (c->ref_nodes[i] == t) {
                snprintf(name, 32, "%s", c->ref_names[i]);
                c->depth--;
                return;
            }
        if (c->n_refs == c->cap_refs) {
            int cap = c->cap_refs ? c->cap_refs * 2 : 8;
            const cJSON **a = realloc(c->ref_nodes, (size_t)cap * sizeof *a);
            if (a) c->ref_nodes = a;
            char **b = realloc(c->ref_names, (size_t)cap * sizeof *b);
            if (b) c->ref_names = b;
            if (!a || !b) {
                cfail(c, PAGODA_ERR_NOMEM, "out of memory");
                return;
            }
            c->cap_refs = cap;
        }
        new_rule(c, name, "ref");
        c->ref_nodes[c->n_refs] = t;
        c->ref_names[c->n_refs++] = strdup(name);
        /* the body goes into its own buffer section: rules are separate lines */
        sbuf saved = c->out;
        c->out = (sbuf){0};
        sb_printf(&c->out, "%s ::= ", name);
        body(c, t);
        sb_put(&c->out, "\n", 1);
        sbuf mine = c->out;
        c->out = saved;
        if (mine.p) sb_put(&c->rules, mine.p, mine.n);
        if (mine.oom) c->rules.oom = true;
        free(mine.p);
        c->depth--;
        return;
    }
    new_rule(c, name, "s");
    sbuf saved = c->out;
    c->out = (sbuf){0};
    sb_printf(&c->out, "%s ::= ", name);
    body(c, s);
    sb_put(&c->out, "\n", 1);
    sbuf mine = c->out;
    c->out = saved;
    if (mine.p) sb_put(&c->rules, mine.p, mine.n);
    if (mine.oom) c->rules.oom = true;
    free(mine.p);
    c->depth--;
}

static void alt_list(conv *c, const cJSON *list, const char *kw) {
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0) {
        cfail(c, PAGODA_ERR_INVALID_ARG, "'%s' must be a non-empty array", kw);
        return;
    }
    bool first = true;
    sb_put(&c->out, "( ", 2);
    for (const cJSON *x = list->child; x && !c->st; x = x->next) {
        char nm[32];
        gen(c, x, nm);
        if (!first) sb_put(&c->out, " | ", 3);
        first = false;
        sb_printf(&c->out, "%s", nm);
    }
    sb_put(&c->out, " )", 2);
}

static void type_body(conv *c, const cJSON *s, const char *t) {
    if (strcmp(t, "string") == 0)
        gen_string(c, s);
    else if (strcmp(t, "integer") == 0)
        gen_number(c, s, true);
    else if (strcmp(t, "number") == 0)
        gen_number(c, s, false);
    else if (strcmp(t, "boolean") == 0)
        sb_put(&c->out, "json-boolean", 12);
    else if (strcmp(t, "null") == 0)
        sb_put(&c->out, "json-null", 9);
    else if (strcmp(t, "object") == 0)
        gen_object(c, s);
    else if (strcmp(t, "array") == 0)
        gen_array(c, s);
    else
        cfail(c, PAGODA_ERR_INVALID_ARG, "unknown type '%s'", t);
}

/* Keywords of one type family present in s (to refuse e.g. `pattern` on an
 * integer, which would otherwise be ignored). */
static bool has_any(const cJSON *s, const char *const *keys) {
    for (int i = 0; keys[i]; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, keys[i])) return true;
    return false;
}

/* v is of JSON Schema type t (a name, or an array of names; NULL: any). */
static bool value_has_type(const cJSON *v, const cJSON *t) {
    if (!t) return true;
    if (cJSON_IsArray(t)) {
        for (const cJSON *x = t->child; x; x = x->next)
            if (value_has_type(v, x)) return true;
        return false;
    }
    if (!cJSON_IsString(t)) return false;
    const char *n = t->valuestring;
    if (!strcmp(n, "string")) return cJSON_IsString(v);
    if (!strcmp(n, "number")) return cJSON_IsNumber(v);
    if (!strcmp(n, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    if (!strcmp(n, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(n, "null")) return cJSON_IsNull(v);
    if (!strcmp(n, "object")) return cJSON_IsObject(v);
    if (!strcmp(n, "array")) return cJSON_IsArray(v);
    return false;
}

static void body(conv *c, const cJSON *s) {
    if (cJSON_IsTrue(s)) {
        sb_put(&c->out, "json-value", 10);
        return;
    }
    if (cJSON_IsFalse(s)) {
        cfail(c, PAGODA_ERR_UNSUPPORTED, "the schema 'false' (nothing is valid) is not supported");
        return;
    }
    if (!cJSON_IsObject(s)) {
        cfail(c, PAGODA_ERR_INVALID_ARG, "a schema must be an object or a boolean");
        return;
    }
    check_keys(c, s);
    if (c->st) return;
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cn || en) {
        /* the values themselves; other keywords must not narrow them, but a
         * `type` next to them keeps the values of that type (tool schemas
         * write {"type": "string", "enum": [...]}) */
        if (any || one || all) {
            cfail(c, PAGODA_ERR_UNSUPPORTED,
                  "'%s' combined with anyOf/oneOf/allOf is not supported", cn ? "const" : "enum");
            return;
        }
        if (type && !cJSON_IsString(type) && !cJSON_IsArray(type)) {
            cfail(c, PAGODA_ERR_INVALID_ARG, "'type' must be a string or an array of strings");
            return;
        }
        if (en && (!cJSON_IsArray(en) || cJSON_GetArraySize(en) == 0)) {
            cfail(c, PAGODA_ERR_INVALID_ARG, "'enum' must be a non-empty array");
            return;
        }
        int kept = 0;
        for (const cJSON *x = cn ? cn : en->child; x; x = cn ? NULL : x->next) {
            if (!value_has_type(x, type)) continue;
            sb_put(&c->out, kept ? " | " : "( ", kept ? 3 : 2);
            kept++;
            gen_literal_value(c, x);
        }
        if (!kept) {
            cfail(c, PAGODA_ERR_UNSUPPORTED, "no value of '%s' has the schema's 'type'",
                  cn ? "const" : "enum");
            return;
        }
        sb_put(&c->out, " )", 2);
        return;
    }
    int n_comb = (any != NULL) + (one != NULL) + (all != NULL);
    if (n_comb) {
        if (n_comb > 1 || type) {
            cfail(c, PAGODA_ERR_UNSUPPORTED,
                  "combining anyOf/oneOf/allOf with each other or with 'type' is not supported");
            return;
        }
        if (all) {
            if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) != 1) {
                cfail(c, PAGODA_ERR_UNSUPPORTED,
                      "'allOf' with more than one schema is not supported");
                return;
            }
            char nm[32];
            gen(c, all->child, nm);
            sb_printf(&c->out, "%s", nm);
            return;
        }
        alt_list(c, any ? any : one, any ? "anyOf" : "oneOf");
        return;
    }
    static const char *const str_keys[] = {"pattern", "format", "minLength", "maxLength", NULL};
    static const char *const num_keys[] = {"minimum", "maximum", "exclusiveMinimum",
                                           "exclusiveMaximum", NULL};
    static const char *const obj_keys[] = {"properties", "required", "additionalProperties", NULL};
    static const char *const arr_keys[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
    if (!type) {
        /* infer the type from its keywords (as llama.cpp does); none: any value */
        const char *t = has_any(s, obj_keys)   ? "object"
                        : has_any(s, arr_keys) ? "array"
                        : has_any(s, str_keys) ? "string"
                        : has_any(s, num_keys) ? "number"
                                               : NULL;
        if (!t) {
            sb_put(&c->out, "json-value", 10);
            return;
        }
        type_body(c, s, t);
        return;
    }
    const cJSON *tl[8];
    int nt = 0;
    if (cJSON_IsString(type)) {
        tl[nt++] = type;
    } else if (cJSON_IsArray(type) && cJSON_GetArraySize(type) > 0 &&
               cJSON_GetArraySize(type) <= 7) {
        for (const cJSON *x = type->child; x; x = x->next) {
            if (!cJSON_IsString(x)) break;
            tl[nt++] = x;
        }
    }
    if (nt == 0 || (cJSON_IsArray(type) && nt != cJSON_GetArraySize(type))) {
        cfail(c, PAGODA_ERR_INVALID_ARG, "'type' must be a string or a list of strings");
        return;
    }
    /* keywords for a type that is not allowed here would be ignored: refuse */
    bool want[4] = {0}; /* string, number, object, array */
    for (int i = 0; i < nt; i++) {
        const char *t = tl[i]->valuestring;
        want[0] |= strcmp(t, "string") == 0;
        want[1] |= strcmp(t, "number") == 0 || strcmp(t, "integer") == 0;
        want[2] |= strcmp(t, "object") == 0;
        want[3] |= strcmp(t, "array") == 0;
    }
    const char *const *fam[4] = {str_keys, num_keys, obj_keys, arr_keys};
    for (int f = 0; f < 4; f++)
        if (!want[f])
            for (int k = 0; fam[f][k]; k++)
                if (cJSON_GetObjectItemCaseSensitive(s, fam[f][k])) {
                    cfail(c, PAGODA_ERR_UNSUPPORTED,
                          "keyword '%s' does not apply to type %s (not supported)", fam[f][k],
                          cJSON_IsString(type) ? type->valuestring : "list");
                    return;
                }
    if (nt > 1) sb_put(&c->out, "( ", 2);
    for (int i = 0; i < nt && !c->st; i++) {
        if (i) sb_put(&c->out, " | ", 3);
        type_body(c, s, tl[i]->valuestring);
    }
    if (nt > 1) sb_put(&c->out, " )", 2);
}

/* The generated rules into the builder, after `heads` (lines naming the
 * schemas' values: "root ::= s-0\n" for a whole-output schema). */
static pagoda_status finish_ir(conv *c, const char *heads, gx_builder *bp) {
    gx_builder b = *bp;
    sbuf text = {0};
    sb_put(&text, heads, strlen(heads));
    sb_put(&text, VALUE_RULES, strlen(VALUE_RULES));
    if (c->rules.p) sb_put(&text, c->rules.p, c->rules.n);
    if (text.oom || c->rules.oom) {
        free(text.p);
        return pg_error(PAGODA_ERR_NOMEM, "json_schema: out of memory");
    }
    char *fixed = text.p;
    pagoda_status st = gx_parse_ebnf(&b, fixed, strlen(fixed));
    if (st != PAGODA_OK) { /* a bug in the generated text */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", pg_last_error());
        st = pg_error(PAGODA_ERR_INTERNAL, "json_schema: generated grammar rejected: %s", msg);
    }
    for (int i = 0; i < c->n_rx && st == PAGODA_OK; i++) {
        int32_t x;
        st = gx_parse_regex(&b, c->rx[i].pattern, strlen(c->rx[i].pattern), true, &x);
        if (st == PAGODA_OK)
            st = gx_define(&b, c->rx[i].rule, strlen(c->rx[i].rule), x);
        else {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", pg_last_error());
            st = pg_error(st, "json_schema: pattern: %s", msg);
        }
    }
    if (st != PAGODA_OK && getenv("PAGODA_GRAMMAR_DEBUG")) fprintf(stderr, "%s\n", fixed);
    free(fixed);
    *bp = b;
    return st;
}

static pagoda_status finish(conv *c, const char *root_body_rule, pg_gram **out) {
    gx_builder b;
    gx_init(&b);
    char head[64];
    snprintf(head, sizeof head, "root ::= %s\n", root_body_rule);
    pagoda_status st = finish_ir(c, head, &b);
    if (st == PAGODA_OK) st = g_compile(&b, "root", out);
    gx_free(&b);
    return st;
}

static void conv_free(conv *c) {
    free(c->out.p);
    free(c->rules.p);
    for (int i = 0; i < c->n_refs; i++)
        free(c->ref_names[i]);
    free(c->ref_nodes);
    free(c->ref_names);
    for (int i = 0; i < c->n_rx; i++) {
        free(c->rx[i].rule);
        free(c->rx[i].pattern);
    }
    free(c->rx);
}

pagoda_status pg_gram_from_json_schema(const char *json, size_t len, pg_gram **out) {
    *out = NULL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return pg_error(PAGODA_ERR_INVALID_ARG, "json_schema: not valid JSON");
    conv c = {.root = root};
    char name[32];
    gen(&c, root, name);
    pagoda_status st = c.st;
    if (st == PAGODA_OK && (c.out.oom || c.rules.oom))
        st = pg_error(PAGODA_ERR_NOMEM, "json_schema: out of memory");
    if (st == PAGODA_OK) st = finish(&c, name, out);
    conv_free(&c);
    cJSON_Delete(root);
    return st;
}

pagoda_status gx_json_schema(gx_builder *b, const char *json, size_t len) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return pg_error(PAGODA_ERR_INVALID_ARG, "json_schema: not valid JSON");
    conv c = {.root = root};
    char name[32];
    gen(&c, root, name);
    pagoda_status st = c.st;
    char head[64];
    snprintf(head, sizeof head, "root ::= %s\n", name);
    if (st == PAGODA_OK) st = finish_ir(&c, head, b);
    conv_free(&c);
    cJSON_Delete(root);
    return st;
}

pagoda_status gx_json_object(gx_builder *b) {
    conv c = {0};
    pagoda_status st = finish_ir(&c, "root ::= json-object\n", b);
    conv_free(&c);
    return st;
}

pagoda_status pg_gram_json_object(pg_gram **out) {
    conv c = {0};
    pagoda_status st = finish(&c, "json-object", out);
    conv_free(&c);
    return st;
}

pagoda_status pg_gram_from_ebnf_schemas(const char *ebnf, size_t elen, const char *schemas,
                                        size_t slen, pg_gram **out) {
    *out = NULL;
    cJSON *list = cJSON_ParseWithLength(schemas, slen);
    if (!cJSON_IsArray(list)) {
        cJSON_Delete(list);
        return pg_error(PAGODA_ERR_INVALID_ARG, "json_schema: expected a list of schemas");
    }
    conv c = {0};
    sbuf heads = {0};
    int i = 0;
    for (cJSON *s = list->child; s && c.st == PAGODA_OK; s = s->next, i++) {
        char name[32];
        c.root = s; /* $ref targets resolve within their own schema */
        gen(&c, s, name);
        sb_printf(&heads, "schema-%d ::= %s\n", i, name);
    }
    pagoda_status st = c.st;
    if (st == PAGODA_OK && (c.out.oom || c.rules.oom || heads.oom))
        st = pg_error(PAGODA_ERR_NOMEM, "json_schema: out of memory");
    gx_builder b;
    gx_init(&b);
    if (st == PAGODA_OK) st = finish_ir(&c, heads.p ? heads.p : "", &b);
    if (st == PAGODA_OK) st = gx_parse_ebnf(&b, ebnf, elen);
    if (st == PAGODA_OK) st = g_compile(&b, "root", out);
    gx_free(&b);
    free(heads.p);
    conv_free(&c);
    cJSON_Delete(list);
    return st;
}
