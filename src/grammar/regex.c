/* Regex -> grammar expression (ECMAScript syntax, the dialect JSON Schema's
 * `pattern` uses: json-schema.org "Regular Expressions", ECMA-262 22.2).
 * Supported: literals, escapes (\d \D \w \W \s \S \t \n \r \f \v \0 \xHH
 * \uHHHH \u{H..} and escaped punctuation), `.`, classes with ranges and
 * negation, groups (capturing, (?:...), (?<name>...)), `|`, quantifiers * +
 * ? {n} {n,} {n,m} (lazy forms: the same language), ^ at the start and $ at
 * the end. Anything else (backreferences, lookaround, \b, anchors inside,
 * flags) is an UNSUPPORTED error naming it. The automaton is ours: this
 * file builds grammar IR; no regex engine is used to match. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_ir.h"

#define MAX_REPEAT 10000

typedef struct rp {
    gx_builder *b;
    const char *s;
    size_t n, i;
    bool json;
    pagoda_status st;
    int depth;
} rp;

static int32_t rfail(rp *p, pagoda_status code, const char *what) {
    if (p->st == PAGODA_OK)
        p->st = pg_error(code, "regex '%.*s': %s at offset %zu", (int)(p->n > 80 ? 80 : p->n), p->s,
                         what, p->i);
    return -1;
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void add_d(gx_cpset *s) {
    gx_cpset_add(s, '0', '9');
}
static void add_w(gx_cpset *s) {
    gx_cpset_add(s, 'a', 'z');
    gx_cpset_add(s, 'A', 'Z');
    gx_cpset_add(s, '0', '9');
    gx_cpset_add(s, '_', '_');
}
static void add_s(gx_cpset *s) { /* ECMA-262 WhiteSpace + LineTerminator */
    gx_cpset_add(s, '\t', '\r');
    gx_cpset_add(s, ' ', ' ');
    gx_cpset_add(s, 0xA0, 0xA0);
    gx_cpset_add(s, 0x1680, 0x1680);
    gx_cpset_add(s, 0x2000, 0x200A);
    gx_cpset_add(s, 0x2028, 0x2029);
    gx_cpset_add(s, 0x202F, 0x202F);
    gx_cpset_add(s, 0x205F, 0x205F);
    gx_cpset_add(s, 0x3000, 0x3000);
    gx_cpset_add(s, 0xFEFF, 0xFEFF);
}

/* The expression for one code point set: raw UTF-8, or in JSON-string mode
 * the JSON text of each member (", \ and controls escaped). */
static int32_t cpset_expr(rp *p, gx_cpset *set) {
    gx_cpset_norm(set);
    if (!p->json) {
        int32_t x = gx_codepoints(p->b, set);
        return x < 0 ? rfail(p, PAGODA_ERR_INVALID_ARG, "empty character class") : x;
    }
    gx_cpset safe = {0};
    int32_t alts[40], na = 0;
    for (int32_t i = 0; i < set->n; i++) {
        uint32_t lo = set->r[i][0], hi = set->r[i][1];
        for (uint32_t c = lo; c <= hi && c < 0x20; c++) {
            static const char *const short_esc[32] = {
                ['\b'] = "\\b", ['\f'] = "\\f", ['\n'] = "\\n", ['\r'] = "\\r", ['\t'] = "\\t"};
            char e[8];
            if (short_esc[c])
                snprintf(e, sizeof e, "%s", short_esc[c]);
            else
                snprintf(e, sizeof e, "\\u%04x", c);
            alts[na++] = gx_literal(p->b, e, strlen(e));
        }
        if (lo <= '"' && hi >= '"') alts[na++] = gx_literal(p->b, "\\\"", 2);
        if (lo <= '\\' && hi >= '\\') alts[na++] = gx_literal(p->b, "\\\\", 2);
        uint32_t a = lo < 0x20 ? 0x20 : lo;
        /* split around " and \ */
        for (uint32_t c = a; c <= hi;) {
            uint32_t end = hi;
            if (c <= '"' && end >= '"') end = c == '"' ? c : '"' - 1;
            if (c <= '\\' && end >= '\\') end = c == '\\' ? c : '\\' - 1;
            if (c != '"' && c != '\\') gx_cpset_add(&safe, c, end);
            if (end == 0x10FFFF) break;
            c = end + 1;
        }
    }
    if (safe.n) alts[na++] = gx_codepoints(p->b, &safe);
    gx_cpset_free(&safe);
    if (!na) return rfail(p, PAGODA_ERR_INVALID_ARG, "empty character class");
    return gx_alt(p->b, alts, na);
}

/* An escape after '\' (p->i at the char after it) into set; false + error
 * for unsupported ones. in_class: \b is backspace there. */
static bool escape_into(rp *p, gx_cpset *set, bool in_class) {
    if (p->i >= p->n) return rfail(p, PAGODA_ERR_INVALID_ARG, "pattern ends with '\\'"), false;
    char c = p->s[p->i++];
    gx_cpset tmp = {0};
    switch (c) {
    case 'd':
        add_d(set);
        return true;
    case 'w':
        add_w(set);
        return true;
    case 's':
        add_s(set);
        return true;
    case 'D':
    case 'W':
    case 'S':
        if (c == 'D') add_d(&tmp);
        if (c == 'W') add_w(&tmp);
        if (c == 'S') add_s(&tmp);
        gx_cpset_negate(&tmp);
        for (int32_t k = 0; k < tmp.n; k++)
            gx_cpset_add(set, tmp.r[k][0], tmp.r[k][1]);
        gx_cpset_free(&tmp);
        return true;
    case 't':
        gx_cpset_add(set, '\t', '\t');
        return true;
    case 'n':
        gx_cpset_add(set, '\n', '\n');
        return true;
    case 'r':
        gx_cpset_add(set, '\r', '\r');
        return true;
    case 'f':
        gx_cpset_add(set, '\f', '\f');
        return true;
    case 'v':
        gx_cpset_add(set, '\v', '\v');
        return true;
    case '0':
        gx_cpset_add(set, 0, 0);
        return true;
    case 'b':
        if (in_class) {
            gx_cpset_add(set, '\b', '\b');
            return true;
        }
        rfail(p, PAGODA_ERR_UNSUPPORTED, "word boundary \\b is not supported");
        return false;
    case 'x':
    case 'u': {
        uint32_t v = 0;
        int digits = c == 'x' ? 2 : 4;
        if (c == 'u' && p->i < p->n && p->s[p->i] == '{') {
            p->i++;
            int k = 0;
            while (p->i < p->n && p->s[p->i] != '}' && k < 7) {
                int h = hexv(p->s[p->i++]);
                if (h < 0) break;
                v = v * 16 + (uint32_t)h;
                k++;
            }
            if (p->i >= p->n || p->s[p->i] != '}' || !k || v > 0x10FFFF)
                return rfail(p, PAGODA_ERR_INVALID_ARG, "bad \\u{...} escape"), false;
            p->i++;
        } else {
            for (int k = 0; k < digits; k++) {
                int h = p->i < p->n ? hexv(p->s[p->i]) : -1;
                if (h < 0) return rfail(p, PAGODA_ERR_INVALID_ARG, "bad hex escape"), false;
                v = v * 16 + (uint32_t)h;
                p->i++;
            }
        }
        gx_cpset_add(set, v, v);
        return true;
    }
    default:
        if (c >= '1' && c <= '9') {
            rfail(p, PAGODA_ERR_UNSUPPORTED, "backreferences are not supported");
            return false;
        }
        if (c == 'B' || c == 'c' || c == 'p' || c == 'P' || c == 'k') {
            char m[64];
            snprintf(m, sizeof m, "escape \\%c is not supported", c);
            rfail(p, PAGODA_ERR_UNSUPPORTED, m);
            return false;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            char m[64];
            snprintf(m, sizeof m, "unknown escape \\%c", c);
            rfail(p, PAGODA_ERR_INVALID_ARG, m);
            return false;
        }
        gx_cpset_add(set, (unsigned char)c, (unsigned char)c);
        return true;
    }
}

/* Next literal code point of the pattern (UTF-8). */
static int32_t next_cp(rp *p) {
    const unsigned char *u = (const unsigned char *)p->s + p->i;
    if (u[0] < 0x80) {
        p->i++;
        return u[0];
    }
    int len = u[0] >= 0xF0 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC0 ? 2 : 0;
    if (!len || p->i + (size_t)len > p->n)
        return rfail(p, PAGODA_ERR_INVALID_ARG, "malformed UTF-8");
    int32_t cp = u[0] & (0x3F >> (len - 1));
    for (int k = 1; k < len; k++)
        cp = cp << 6 | (u[k] & 0x3F);
    p->i += (size_t)len;
    return cp;
}

static int32_t parse_class(rp *p) {
    p->i++; /* [ */
    bool neg = p->i < p->n && p->s[p->i] == '^';
    if (neg) p->i++;
    gx_cpset set = {0};
    while (p->i < p->n && p->s[p->i] != ']') {
        gx_cpset one = {0};
        int32_t lo;
        if (p->s[p->i] == '\\') {
            p->i++;
            if (!escape_into(p, &one, true)) goto bad;
        } else {
            if ((lo = next_cp(p)) < 0) goto bad;
            gx_cpset_add(&one, (uint32_t)lo, (uint32_t)lo);
        }
        /* a range needs single code points on both sides */
        if (one.n == 1 && one.r[0][0] == one.r[0][1] && p->i + 1 < p->n && p->s[p->i] == '-' &&
            p->s[p->i + 1] != ']') {
            p->i++;
            gx_cpset two = {0};
            if (p->s[p->i] == '\\') {
                p->i++;
                if (!escape_into(p, &two, true)) {
                    gx_cpset_free(&one);
                    goto bad;
                }
            } else {
                int32_t hi = next_cp(p);
                if (hi < 0) {
                    gx_cpset_free(&one);
                    goto bad;
                }
                gx_cpset_add(&two, (uint32_t)hi, (uint32_t)hi);
            }
            if (two.n != 1 || two.r[0][0] != two.r[0][1] || two.r[0][0] < one.r[0][0]) {
                gx_cpset_free(&one);
                gx_cpset_free(&two);
                rfail(p, PAGODA_ERR_INVALID_ARG, "bad class range");
                goto bad;
            }
            gx_cpset_add(&set, one.r[0][0], two.r[0][0]);
            gx_cpset_free(&two);
        } else {
            for (int32_t k = 0; k < one.n; k++)
                gx_cpset_add(&set, one.r[k][0], one.r[k][1]);
        }
        gx_cpset_free(&one);
    }
    if (p->i >= p->n) {
        rfail(p, PAGODA_ERR_INVALID_ARG, "unterminated character class");
        goto bad;
    }
    p->i++;
    if (neg) gx_cpset_negate(&set);
    int32_t x = cpset_expr(p, &set);
    gx_cpset_free(&set);
    return x;
bad:
    gx_cpset_free(&set);
    return -1;
}

static int32_t parse_alt(rp *p);

/* 1: a bound read into *v; 0: no digit at p->i; -1: a bound above MAX_REPEAT
 * (the error is set). */
static int read_int(rp *p, int32_t *v) {
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return 0;
    long x = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        x = x * 10 + (p->s[p->i++] - '0');
        if (x > MAX_REPEAT) {
            rfail(p, PAGODA_ERR_LIMIT, "repetition bound above 10000");
            return -1;
        }
    }
    *v = (int32_t)x;
    return 1;
}

/* Whether the '{' at p->i starts a quantifier ({n}, {n,}, {n,m}); any other
 * '{' is a literal (ECMAScript's Annex B, Python's re). */
static bool at_quantifier(const rp *p) {
    size_t i = p->i + 1;
    if (i >= p->n || p->s[i] < '0' || p->s[i] > '9') return false;
    while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9')
        i++;
    if (i < p->n && p->s[i] == ',') {
        i++;
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9')
            i++;
    }
    return i < p->n && p->s[i] == '}';
}

static int32_t parse_atom(rp *p) {
    char c = p->s[p->i];
    int32_t x;
    gx_cpset set = {0};
    if (c == '(') {
        p->i++;
        if (p->i < p->n && p->s[p->i] == '?') {
            if (p->i + 1 < p->n && p->s[p->i + 1] == ':') {
                p->i += 2;
            } else if (p->i + 2 < p->n && p->s[p->i + 1] == '<' && p->s[p->i + 2] != '=' &&
                       p->s[p->i + 2] != '!') {
                while (p->i < p->n && p->s[p->i] != '>')
                    p->i++;
                if (p->i >= p->n) return rfail(p, PAGODA_ERR_INVALID_ARG, "bad group name");
                p->i++;
            } else {
                return rfail(
                    p, PAGODA_ERR_UNSUPPORTED,
                    "lookaround and inline flags ((?=, (?!, (?<=, (?<!, (?i) are not supported");
            }
        }
        if (++p->depth > 200) return rfail(p, PAGODA_ERR_LIMIT, "groups nested too deeply");
        x = parse_alt(p);
        p->depth--;
        if (x < 0) return -1;
        if (p->i >= p->n || p->s[p->i] != ')')
            return rfail(p, PAGODA_ERR_INVALID_ARG, "expected ')'");
        p->i++;
        return x;
    }
    if (c == '[') return parse_class(p);
    if (c == '.') {
        p->i++;
        gx_cpset_add(&set, '\n', '\n');
        gx_cpset_add(&set, '\r', '\r');
        gx_cpset_add(&set, 0x2028, 0x2029);
        gx_cpset_negate(&set);
    } else if (c == '\\') {
        p->i++;
        if (!escape_into(p, &set, false)) {
            gx_cpset_free(&set);
            return -1;
        }
    } else if (c == '^' || c == '$') {
        return rfail(p, PAGODA_ERR_UNSUPPORTED,
                     "anchors (^, $) are only supported at the start and end of the pattern");
    } else if (c == '*' || c == '+' || c == '?' || (c == '{' && at_quantifier(p))) {
        return rfail(p, PAGODA_ERR_INVALID_ARG, "nothing to repeat");
    } else {
        int32_t cp = next_cp(p);
        if (cp < 0) return -1;
        gx_cpset_add(&set, (uint32_t)cp, (uint32_t)cp);
    }
    x = cpset_expr(p, &set);
    gx_cpset_free(&set);
    return x;
}

static int32_t parse_quant(rp *p, int32_t x) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        int32_t lo, hi;
        if (c == '*') {
            lo = 0;
            hi = -1;
            p->i++;
        } else if (c == '+') {
            lo = 1;
            hi = -1;
            p->i++;
        } else if (c == '?') {
            lo = 0;
            hi = 1;
            p->i++;
        } else if (c == '{') {
            if (!at_quantifier(p)) return x; /* a literal '{' in ECMAScript's Annex B */
            p->i++;
            if (read_int(p, &lo) < 0) return -1;
            hi = lo;
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                hi = -1;
                if (read_int(p, &hi) < 0) return -1;
            }
            if (p->i >= p->n || p->s[p->i] != '}')
                return rfail(p, PAGODA_ERR_INVALID_ARG, "expected '}'");
            p->i++;
            if (hi >= 0 && hi < lo) return rfail(p, PAGODA_ERR_INVALID_ARG, "{m,n} with n < m");
        } else {
            return x;
        }
        if (p->i < p->n && p->s[p->i] == '?')
            p->i++; /* lazy: same language */
        else if (p->i < p->n && p->s[p->i] == '+')
            return rfail(p, PAGODA_ERR_UNSUPPORTED, "possessive quantifiers are not supported");
        x = gx_rep(p->b, x, lo, hi);
        if (x < 0) return rfail(p, PAGODA_ERR_NOMEM, "out of memory");
    }
    return x;
}

static int32_t parse_seq(rp *p) {
    int32_t buf[32], *items = buf, cap = 32, n = 0;
    while (p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')') {
        /* $ at the very end is handled by the caller */
        if (p->s[p->i] == '$' && p->i + 1 == p->n && p->depth == 0) break;
        int32_t x = parse_atom(p);
        if (x >= 0) x = parse_quant(p, x);
        if (x < 0) {
            if (items != buf) free(items);
            return -1;
        }
        if (n == cap) {
            int32_t *q = malloc((size_t)cap * 2 * sizeof *q);
            if (!q) {
                if (items != buf) free(items);
                return rfail(p, PAGODA_ERR_NOMEM, "out of memory");
            }
            memcpy(q, items, (size_t)n * sizeof *q);
            if (items != buf) free(items);
            items = q;
            cap *= 2;
        }
        items[n++] = x;
    }
    int32_t r = gx_seq(p->b, items, n);
    if (items != buf) free(items);
    return r;
}

static int32_t parse_alt(rp *p) {
    int32_t buf[16], *alts = buf, cap = 16, n = 0;
    for (;;) {
        int32_t x = parse_seq(p);
        if (x < 0) {
            if (alts != buf) free(alts);
            return -1;
        }
        if (n == cap) {
            int32_t *q = malloc((size_t)cap * 2 * sizeof *q);
            if (!q) {
                if (alts != buf) free(alts);
                return rfail(p, PAGODA_ERR_NOMEM, "out of memory");
            }
            memcpy(q, alts, (size_t)n * sizeof *q);
            if (alts != buf) free(alts);
            alts = q;
            cap *= 2;
        }
        alts[n++] = x;
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        break;
    }
    int32_t r = gx_alt(p->b, alts, n);
    if (alts != buf) free(alts);
    return r;
}

pagoda_status gx_parse_regex(gx_builder *b, const char *re, size_t len, bool json_string,
                             int32_t *expr_out) {
    rp p = {.b = b, .s = re, .n = len, .json = json_string};
    bool anchored_start = len && re[0] == '^';
    if (anchored_start) p.i = 1;
    int32_t x = parse_alt(&p);
    if (x < 0) return p.st ? p.st : pg_error(PAGODA_ERR_NOMEM, "regex: out of memory");
    bool anchored_end = false;
    if (p.i < p.n && p.s[p.i] == '$' && p.i + 1 == p.n) {
        anchored_end = true;
        p.i++;
    }
    if (p.i < p.n) {
        rfail(&p, PAGODA_ERR_INVALID_ARG,
              p.s[p.i] == ')' ? "unbalanced ')'" : "unexpected character");
        return p.st;
    }
    /* a top-level alternation with anchors only on some branches would need
     * per-branch anchoring: refuse rather than guess */
    if (json_string && (anchored_start != anchored_end) && memchr(re, '|', len)) {
        bool top_alt = false;
        int d = 0;
        for (size_t k = 0; k < len; k++) {
            if (re[k] == '\\') {
                k++;
                continue;
            }
            if (re[k] == '(') d++;
            if (re[k] == ')') d--;
            if (re[k] == '|' && d == 0) top_alt = true;
        }
        if (top_alt)
            return pg_error(PAGODA_ERR_UNSUPPORTED,
                            "regex '%.*s': a top-level '|' with an anchor on one side only is not "
                            "supported",
                            (int)(len > 80 ? 80 : len), re);
    }
    if (json_string && (!anchored_start || !anchored_end)) {
        /* JSON Schema patterns search: any characters before/after */
        gx_cpset all = {0};
        gx_cpset_add(&all, 0, 0x10FFFF);
        int32_t any = cpset_expr(&p, &all);
        gx_cpset_free(&all);
        int32_t star = gx_rep(b, any, 0, -1);
        int32_t parts[3], np = 0;
        if (!anchored_start) parts[np++] = star;
        parts[np++] = x;
        if (!anchored_end) parts[np++] = star;
        x = gx_seq(b, parts, np);
    }
    if (x < 0 || b->oom) return pg_error(PAGODA_ERR_NOMEM, "regex: out of memory");
    *expr_out = x;
    return PAGODA_OK;
}
