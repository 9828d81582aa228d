/* Strict RFC 8259 validation of JSON text (see json_check.h). */
#include "server/json_check.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

typedef struct jc {
    const unsigned char *s;
    size_t n, i;
    int depth, max_depth;
    pg_json_check_result *res; /* NULL: scanning text already checked */
    bool failed;
    char member[64]; /* current top-level member name (decoded, truncated) */
} jc;

static bool fail_at(jc *c, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static bool fail_at(jc *c, size_t at, const char *fmt, ...) {
    if (c->failed) return false;
    c->failed = true;
    if (c->res) {
        c->res->offset = at;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->res->message, sizeof c->res->message, fmt, ap);
        va_end(ap);
    }
    return false;
}

static void skip_ws(jc *c) {
    while (c->i < c->n &&
           (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
}

static int hexval(unsigned char h) {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    return -1;
}

/* The 4 hex digits at c->s[at..at+4) or -1. */
static long hex4(const jc *c, size_t at) {
    if (at + 4 > c->n) return -1;
    long v = 0;
    for (size_t k = 0; k < 4; k++) {
        int h = hexval(c->s[at + k]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Append code point cp as UTF-8 to out (when it fits; *olen counts all). */
static void put_cp(char *out, size_t cap, size_t *olen, uint32_t cp) {
    unsigned char b[4];
    size_t k;
    if (cp < 0x80)
        b[0] = (unsigned char)cp, k = 1;
    else if (cp < 0x800)
        b[0] = (unsigned char)(0xC0 | (cp >> 6)), b[1] = (unsigned char)(0x80 | (cp & 0x3F)), k = 2;
    else if (cp < 0x10000)
        b[0] = (unsigned char)(0xE0 | (cp >> 12)),
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
        b[2] = (unsigned char)(0x80 | (cp & 0x3F)), k = 3;
    else
        b[0] = (unsigned char)(0xF0 | (cp >> 18)),
        b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F)),
        b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
        b[3] = (unsigned char)(0x80 | (cp & 0x3F)), k = 4;
    for (size_t j = 0; j < k; j++, (*olen)++)
        if (out && *olen < cap) out[*olen] = (char)b[j];
}

/* A string at c->s[c->i] == '"'. Decodes into out[0..cap) when out is given
 * (*olen = full decoded length). Records the first U+0000. */
static bool scan_string(jc *c, char *out, size_t cap, size_t *olen) {
    size_t start = c->i++;
    size_t ol = 0;
    bool nul = false;
    for (;;) {
        if (c->i >= c->n) return fail_at(c, start, "unterminated string");
        unsigned char b = c->s[c->i];
        if (b == '"') {
            c->i++;
            break;
        }
        if (b < 0x20)
            return fail_at(c, c->i, "raw control character 0x%02x in a string (escape it)", b);
        if (b != '\\') {
            size_t k = pg_utf8_seq_len(c->s + c->i, c->n - c->i);
            if (!k) return fail_at(c, c->i, "invalid UTF-8 byte 0x%02x in a string", b);
            for (size_t j = 0; j < k; j++, ol++)
                if (out && ol < cap) out[ol] = (char)c->s[c->i + j];
            c->i += k;
            continue;
        }
        size_t esc = c->i;
        if (c->i + 1 >= c->n) return fail_at(c, start, "unterminated string");
        unsigned char e = c->s[c->i + 1];
        c->i += 2;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            put_cp(out, cap, &ol, (uint32_t)(unsigned char)map[simple - "\"\\/bfnrt"]);
            continue;
        }
        if (e != 'u') {
            if (e >= 0x20 && e < 0x7F) return fail_at(c, esc, "invalid escape \\%c", e);
            return fail_at(c, esc, "invalid escape (byte 0x%02x after '\\')", e);
        }
        long u = hex4(c, c->i);
        if (u < 0) return fail_at(c, esc, "invalid \\u escape (needs 4 hex digits)");
        c->i += 4;
        uint32_t cp = (uint32_t)u;
        if (u >= 0xDC00 && u <= 0xDFFF) return fail_at(c, esc, "lone low surrogate \\u%04lx", u);
        if (u >= 0xD800 && u <= 0xDBFF) {
            long lo = c->i + 1 < c->n && c->s[c->i] == '\\' && c->s[c->i + 1] == 'u'
                          ? hex4(c, c->i + 2)
                          : -1;
            if (lo < 0xDC00 || lo > 0xDFFF)
                return fail_at(c, esc, "lone high surrogate \\u%04lx (no low surrogate follows)",
                               u);
            c->i += 6;
            cp = 0x10000 + (((uint32_t)u - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
        }
        if (cp == 0) nul = true;
        put_cp(out, cap, &ol, cp);
    }
    if (nul && c->res && !c->res->has_nul) {
        c->res->has_nul = true;
        c->res->nul_offset = start;
        snprintf(c->res->nul_member, sizeof c->res->nul_member, "%s", c->member);
    }
    if (olen) *olen = ol;
    return true;
}

static bool is_digit(unsigned char b) {
    return b >= '0' && b <= '9';
}

static bool scan_number(jc *c) {
    size_t start = c->i;
    if (c->s[c->i] == '-') c->i++;
    if (c->i >= c->n || !is_digit(c->s[c->i]))
        return fail_at(c, start, "a number needs a digit after '-'");
    if (c->s[c->i] == '0') {
        c->i++;
        if (c->i < c->n && is_digit(c->s[c->i]))
            return fail_at(c, start, "a number may not have a leading zero");
    } else {
        while (c->i < c->n && is_digit(c->s[c->i]))
            c->i++;
    }
    if (c->i < c->n && c->s[c->i] == '.') {
        c->i++;
        if (c->i >= c->n || !is_digit(c->s[c->i]))
            return fail_at(c, start, "a number needs digits after '.'");
        while (c->i < c->n && is_digit(c->s[c->i]))
            c->i++;
    }
    if (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
        c->i++;
        if (c->i < c->n && (c->s[c->i] == '+' || c->s[c->i] == '-')) c->i++;
        if (c->i >= c->n || !is_digit(c->s[c->i]))
            return fail_at(c, start, "a number needs digits in its exponent");
        while (c->i < c->n && is_digit(c->s[c->i]))
            c->i++;
    }
    return true;
}

static bool scan_literal(jc *c, const char *word) {
    size_t k = strlen(word);
    if (c->n - c->i < k || memcmp(c->s + c->i, word, k) != 0)
        return fail_at(c, c->i, "invalid literal (expected %s)", word);
    c->i += k;
    return true;
}

static bool scan_value(jc *c);

static bool scan_container(jc *c, bool object) {
    size_t open = c->i++;
    if (++c->depth > c->max_depth)
        return fail_at(c, open, "nesting deeper than %d levels", c->max_depth);
    bool top_object = object && c->depth == 1;
    skip_ws(c);
    char close = object ? '}' : ']';
    if (c->i < c->n && c->s[c->i] == close) {
        c->i++;
        c->depth--;
        return true;
    }
    for (;;) {
        skip_ws(c);
        if (object) {
            if (c->i >= c->n || c->s[c->i] != '"')
                return fail_at(c, c->i, "expected a member name (a string)");
            if (top_object) {
                size_t kl = 0;
                c->member[0] = 0;
                char key[sizeof c->member];
                if (!scan_string(c, key, sizeof key - 1, &kl)) return false;
                key[kl < sizeof key - 1 ? kl : sizeof key - 1] = 0;
                memcpy(c->member, key, sizeof key);
            } else if (!scan_string(c, NULL, 0, NULL)) {
                return false;
            }
            skip_ws(c);
            if (c->i >= c->n || c->s[c->i] != ':')
                return fail_at(c, c->i, "expected ':' after a member name");
            c->i++;
            skip_ws(c);
        }
        if (!scan_value(c)) return false;
        skip_ws(c);
        if (c->i >= c->n) return fail_at(c, open, "unterminated %s", object ? "object" : "array");
        if (c->s[c->i] == ',') {
            c->i++;
            continue;
        }
        if (c->s[c->i] == (unsigned char)close) {
            c->i++;
            break;
        }
        return fail_at(c, c->i, "expected ',' or '%c'", close);
    }
    if (top_object) c->member[0] = 0;
    c->depth--;
    return true;
}

static bool scan_value(jc *c) {
    if (c->i >= c->n) return fail_at(c, c->i, "expected a value, found the end of the text");
    unsigned char b = c->s[c->i];
    switch (b) {
    case '{':
        return scan_container(c, true);
    case '[':
        return scan_container(c, false);
    case '"':
        return scan_string(c, NULL, 0, NULL);
    case 't':
        return scan_literal(c, "true");
    case 'f':
        return scan_literal(c, "false");
    case 'n':
        return scan_literal(c, "null");
    default:
        if (b == '-' || is_digit(b)) return scan_number(c);
        if (b >= 0x20 && b < 0x7F) return fail_at(c, c->i, "unexpected character '%c'", b);
        return fail_at(c, c->i, "unexpected byte 0x%02x", b);
    }
}

pagoda_status pg_json_check(const char *text, size_t len, int max_depth,
                            pg_json_check_result *res) {
    memset(res, 0, sizeof *res);
    jc c = {(const unsigned char *)(text ? text : ""),
            text ? len : 0,
            0,
            0,
            max_depth > 0 ? max_depth : PG_JSON_MAX_DEPTH,
            res,
            false,
            {0}};
    skip_ws(&c);
    if (c.i >= c.n) {
        fail_at(&c, c.i, "empty text (no JSON value)");
    } else if (scan_value(&c)) {
        skip_ws(&c);
        if (c.i < c.n) fail_at(&c, c.i, "unexpected text after the JSON value");
    }
    if (!c.failed) return PAGODA_OK;
    return pg_error(PAGODA_ERR_FORMAT, "json: %s at byte %zu", res->message, res->offset);
}

bool pg_json_member_raw(const char *text, size_t len, const char *name, const char **val,
                        size_t *vlen) {
    jc c = {(const unsigned char *)text, len, 0, 0, 1 << 30, NULL, false, {0}};
    size_t nlen = strlen(name);
    skip_ws(&c);
    if (c.i >= c.n || c.s[c.i] != '{') return false;
    c.i++;
    c.depth = 1;
    for (;;) {
        skip_ws(&c);
        if (c.i >= c.n || c.s[c.i] != '"') return false;
        char key[256];
        size_t kl = 0;
        if (!scan_string(&c, key, sizeof key, &kl)) return false;
        skip_ws(&c);
        if (c.i >= c.n || c.s[c.i] != ':') return false;
        c.i++;
        skip_ws(&c);
        size_t v0 = c.i;
        if (!scan_value(&c)) return false;
        if (kl == nlen && kl <= sizeof key && memcmp(key, name, nlen) == 0) {
            *val = text + v0;
            *vlen = c.i - v0;
            return true;
        }
        skip_ws(&c);
        if (c.i >= c.n || c.s[c.i] != ',') return false;
        c.i++;
    }
}

bool pg_json_parse_int64(const char *raw, size_t len, long long *out) {
    size_t i = 0;
    bool neg = len > 0 && raw[0] == '-';
    if (neg) i++;
    if (i >= len || raw[i] < '0' || raw[i] > '9') return false;
    size_t d0 = i;
    while (i < len && raw[i] >= '0' && raw[i] <= '9')
        i++;
    if (i == len) { /* a plain integer literal: exact */
        if (raw[d0] == '0' && len - d0 > 1) return false;
        unsigned long long mag = 0;
        for (size_t k = d0; k < len; k++) {
            unsigned d = (unsigned)(raw[k] - '0');
            if (mag > (ULLONG_MAX - d) / 10) return false;
            mag = mag * 10 + d;
        }
        if (!neg && mag > (unsigned long long)INT64_MAX) return false;
        if (neg && mag > (unsigned long long)INT64_MAX + 1ull) return false;
        *out = neg ? (mag == (unsigned long long)INT64_MAX + 1ull ? INT64_MIN : -(long long)mag)
                   : (long long)mag;
        return true;
    }
    /* fraction / exponent: only integral values that a double holds exactly */
    if (raw[i] != '.' && raw[i] != 'e' && raw[i] != 'E') return false;
    char buf[64];
    if (len >= sizeof buf) return false;
    memcpy(buf, raw, len);
    buf[len] = 0;
    char *end = NULL;
    double d = strtod(buf, &end);
    if (!end || *end || !isfinite(d) || d != floor(d) || fabs(d) > 9007199254740992.0) return false;
    *out = (long long)d;
    return true;
}
