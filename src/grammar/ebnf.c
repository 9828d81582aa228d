/* GBNF-style EBNF parser (syntax of llama.cpp's grammars/README.md, also
 * accepted by xgrammar): rules `name ::= alternatives`; "literal" or
 * 'literal' (escapes \n \r \t \\ \" \' \xHH \uHHHH \UHHHHHHHH); [classes]
 * with ranges, ^ negation and the same escapes (over code points); `.` any
 * code point; ( groups ); postfix * + ? {m} {m,} {m,n}; `|`; # comments.
 * A rule ends where the next `name ::=` begins. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_ir.h"

#define MAX_REPEAT 10000

typedef struct ps {
    gx_builder *b;
    const char *s;
    size_t n, i;
    pagoda_status st;
    int depth;
} ps;

static int32_t fail(ps *p, const char *what) {
    if (p->st == PAGODA_OK) {
        /* line and column of p->i */
        size_t line = 1, col = 1;
        for (size_t k = 0; k < p->i && k < p->n; k++) {
            if (p->s[k] == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        p->st =
            pg_error(PAGODA_ERR_INVALID_ARG, "grammar: %s at line %zu column %zu", what, line, col);
    }
    return -1;
}

static void skip_ws(ps *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n')
                p->i++;
        } else if (isspace((unsigned char)c)) {
            p->i++;
        } else {
            break;
        }
    }
}

static bool is_name_char(char c) {
    return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.';
}

static size_t name_len(const ps *p, size_t at) {
    size_t k = at;
    if (k < p->n && (isalpha((unsigned char)p->s[k]) || p->s[k] == '_'))
        while (k < p->n && is_name_char(p->s[k]))
            k++;
    return k - at;
}

/* At `name ::=`? */
static bool at_rule_start(ps *p) {
    size_t l = name_len(p, p->i);
    if (!l) return false;
    size_t k = p->i + l;
    while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t'))
        k++;
    return k + 3 <= p->n && memcmp(p->s + k, "::=", 3) == 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode one UTF-8 code point at p->i (raw text); -1 if malformed. */
static int32_t utf8_at(ps *p) {
    const unsigned char *u = (const unsigned char *)p->s + p->i;
    size_t left = p->n - p->i;
    if (u[0] < 0x80) {
        p->i++;
        return u[0];
    }
    int len = u[0] >= 0xF0 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC0 ? 2 : 0;
    if (!len || (size_t)len > left) return -1;
    int32_t cp = u[0] & (0x3F >> (len - 1));
    for (int k = 1; k < len; k++) {
        if ((u[k] & 0xC0) != 0x80) return -1;
        cp = cp << 6 | (u[k] & 0x3F);
    }
    p->i += (size_t)len;
    return cp;
}

/* One character of a literal or class (escape or UTF-8); -1 on error.
 * *raw_byte: a \xHH escape (one byte, not a code point). */
static int32_t char_at(ps *p, bool *raw_byte) {
    *raw_byte = false;
    if (p->i >= p->n) return fail(p, "unexpected end of input");
    if (p->s[p->i] != '\\') {
        int32_t cp = utf8_at(p);
        return cp < 0 ? fail(p, "malformed UTF-8") : cp;
    }
    p->i++;
    if (p->i >= p->n) return fail(p, "unexpected end after '\\'");
    char c = p->s[p->i++];
    int digits = 0;
    switch (c) {
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case 'f':
        return '\f';
    case 'v':
        return '\v';
    case '0':
        return 0;
    case 'x':
        digits = 2;
        *raw_byte = true;
        break;
    case 'u':
        digits = 4;
        break;
    case 'U':
        digits = 8;
        break;
    default:
        return (unsigned char)c; /* \\ \" \' \] \[ \- \^ ... */
    }
    int32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
        if (h < 0) return fail(p, "bad hex escape");
        if (v > 0x10FFFF) return fail(p, "code point above U+10FFFF"); /* before it overflows */
        v = v * 16 + h;
        p->i++;
    }
    if (v > 0x10FFFF) return fail(p, "code point above U+10FFFF");
    return v;
}

static int32_t parse_alt(ps *p);

static int32_t parse_literal(ps *p) {
    char q = p->s[p->i++];
    char *buf = malloc(p->n * 4 + 4);
    size_t len = 0;
    if (!buf) return fail(p, "out of memory");
    while (p->i < p->n && p->s[p->i] != q) {
        bool raw;
        int32_t cp = char_at(p, &raw);
        if (cp < 0) {
            free(buf);
            return -1;
        }
        if (raw)
            buf[len++] = (char)cp;
        else
            len += (size_t)gx_utf8_encode((uint32_t)cp, (uint8_t *)buf + len);
    }
    if (p->i >= p->n) {
        free(buf);
        return fail(p, "unterminated string literal");
    }
    p->i++;
    int32_t r = gx_literal(p->b, buf, len);
    free(buf);
    return r;
}

static int32_t parse_class(ps *p) {
    p->i++; /* [ */
    bool neg = p->i < p->n && p->s[p->i] == '^';
    if (neg) p->i++;
    gx_cpset set = {0};
    uint64_t bytes[4] = {0}; /* \xHH members above 0x7F: raw bytes */
    bool any_bytes = false;
    while (p->i < p->n && p->s[p->i] != ']') {
        bool raw;
        int32_t lo = char_at(p, &raw), hi = lo;
        if (lo < 0) goto bad;
        bool raw_hi = raw;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            hi = char_at(p, &raw_hi);
            if (hi < 0) goto bad;
            if (hi < lo) {
                fail(p, "class range out of order");
                goto bad;
            }
        }
        if (raw && raw_hi && hi >= 0x80) { /* byte range */
            if (neg) {
                fail(p, "negated class with raw bytes above \\x7F");
                goto bad;
            }
            for (int32_t c = lo; c <= hi; c++)
                bytes[c >> 6] |= 1ull << (c & 63);
            any_bytes = true;
        } else {
            gx_cpset_add(&set, (uint32_t)lo, (uint32_t)hi);
        }
    }
    if (p->i >= p->n) {
        fail(p, "unterminated character class");
        goto bad;
    }
    p->i++;
    gx_cpset_norm(&set);
    if (neg) gx_cpset_negate(&set);
    int32_t alts[2], na = 0;
    if (set.n) alts[na++] = gx_codepoints(p->b, &set);
    if (any_bytes) alts[na++] = gx_byte_set(p->b, bytes);
    gx_cpset_free(&set);
    if (!na) return fail(p, "empty character class");
    return gx_alt(p->b, alts, na);
bad:
    gx_cpset_free(&set);
    return -1;
}

static bool parse_int(ps *p, int32_t *v) {
    if (p->i >= p->n || !isdigit((unsigned char)p->s[p->i])) return false;
    long x = 0;
    while (p->i < p->n && isdigit((unsigned char)p->s[p->i])) {
        x = x * 10 + (p->s[p->i++] - '0');
        if (x > MAX_REPEAT) return false;
    }
    *v = (int32_t)x;
    return true;
}

static int32_t parse_atom(ps *p) {
    skip_ws(p);
    if (p->i >= p->n) return fail(p, "expected an expression");
    char c = p->s[p->i];
    int32_t x;
    if (c == '"' || c == '\'') {
        x = parse_literal(p);
    } else if (c == '[') {
        x = parse_class(p);
    } else if (c == '.') {
        p->i++;
        gx_cpset all = {0};
        gx_cpset_add(&all, 0, 0x10FFFF);
        x = gx_codepoints(p->b, &all);
        gx_cpset_free(&all);
    } else if (c == '(') {
        p->i++;
        if (++p->depth > 200) return fail(p, "groups nested too deeply");
        x = parse_alt(p);
        p->depth--;
        if (x < 0) return -1;
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != ')') return fail(p, "expected ')'");
        p->i++;
    } else if (name_len(p, p->i)) {
        size_t l = name_len(p, p->i);
        x = gx_ref(p->b, p->s + p->i, l, (int32_t)p->i);
        p->i += l;
    } else {
        return fail(p, "unexpected character");
    }
    if (x < 0) return p->st ? -1 : fail(p, "out of memory");
    /* postfix operators */
    for (;;) {
        size_t save = p->i;
        while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t'))
            p->i++;
        if (p->i >= p->n) break;
        char o = p->s[p->i];
        if (o == '*') {
            x = gx_rep(p->b, x, 0, -1);
        } else if (o == '+') {
            x = gx_rep(p->b, x, 1, -1);
        } else if (o == '?') {
            x = gx_rep(p->b, x, 0, 1);
        } else if (o == '{') {
            p->i++;
            int32_t lo, hi;
            skip_ws(p);
            if (!parse_int(p, &lo)) return fail(p, "bad repetition count (0..10000)");
            skip_ws(p);
            hi = lo;
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                skip_ws(p);
                hi = -1;
                if (p->i < p->n && p->s[p->i] != '}' && !parse_int(p, &hi))
                    return fail(p, "bad repetition count (0..10000)");
                skip_ws(p);
            }
            if (p->i >= p->n || p->s[p->i] != '}') return fail(p, "expected '}'");
            if (hi >= 0 && hi < lo) return fail(p, "repetition {m,n} with n < m");
            x = gx_rep(p->b, x, lo, hi);
        } else {
            p->i = save;
            break;
        }
        p->i++;
    }
    return x;
}

static int32_t parse_seq(ps *p) {
    int32_t buf[32], *items = buf, cap = 32, n = 0;
    for (;;) {
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] == '|' || p->s[p->i] == ')' || at_rule_start(p)) break;
        int32_t x = parse_atom(p);
        if (x < 0) {
            if (items != buf) free(items);
            return -1;
        }
        if (n == cap) {
            int32_t *q = malloc((size_t)cap * 2 * sizeof *q);
            if (!q) {
                if (items != buf) free(items);
                return fail(p, "out of memory");
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

static int32_t parse_alt(ps *p) {
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
                return fail(p, "out of memory");
            }
            memcpy(q, alts, (size_t)n * sizeof *q);
            if (alts != buf) free(alts);
            alts = q;
            cap *= 2;
        }
        alts[n++] = x;
        skip_ws(p);
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

pagoda_status gx_parse_ebnf(gx_builder *b, const char *text, size_t len) {
    ps p = {.b = b, .s = text, .n = len};
    skip_ws(&p);
    if (p.i >= p.n) return pg_error(PAGODA_ERR_INVALID_ARG, "grammar: empty grammar");
    while (p.i < p.n) {
        size_t l = name_len(&p, p.i);
        if (!l || !at_rule_start(&p)) {
            fail(&p, "expected 'name ::='");
            return p.st;
        }
        const char *name = text + p.i;
        p.i += l;
        skip_ws(&p);
        p.i += 3; /* ::= */
        int32_t x = parse_alt(&p);
        if (x < 0) return p.st ? p.st : pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
        skip_ws(&p);
        if (p.i < p.n && p.s[p.i] == ')') {
            fail(&p, "unbalanced ')'");
            return p.st;
        }
        pagoda_status st = gx_define(b, name, l, x);
        if (st != PAGODA_OK) return st;
    }
    return PAGODA_OK;
}
