/* Jinja values: constructors, containers, Python str()/repr(), json.dumps. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja.h"

jv jv_none(void) { return (jv){.t = JV_NONE}; }
jv jv_undef(const char *name) {
    jv v = {.t = JV_UNDEF};
    v.u.s.p = name;
    v.u.s.n = name ? strlen(name) : 0;
    return v;
}
jv jv_bool(bool b) { return (jv){.t = JV_BOOL, .u.b = b}; }
jv jv_int(int64_t i) { return (jv){.t = JV_INT, .u.i = i}; }
jv jv_float(double f) { return (jv){.t = JV_FLOAT, .u.f = f}; }
jv jv_str(const char *p, size_t n) {
    jv v = {.t = JV_STR};
    v.u.s.p = p ? p : "";
    v.u.s.n = n;
    return v;
}
jv jv_cstr(const char *p) { return jv_str(p, strlen(p)); }

jv jv_new_list(jj_arena *a, size_t cap) {
    jj_list *l = jj_alloc(a, sizeof *l);
    l->n = 0;
    l->cap = cap;
    l->v = cap ? jj_alloc(a, cap * sizeof(jv)) : NULL;
    return (jv){.t = JV_LIST, .u.l = l};
}
jv jv_new_dict(jj_arena *a, size_t cap) {
    jj_dict *d = jj_alloc(a, sizeof *d);
    d->n = 0;
    d->cap = cap;
    d->k = cap ? jj_alloc(a, cap * sizeof(jv)) : NULL;
    d->v = cap ? jj_alloc(a, cap * sizeof(jv)) : NULL;
    return (jv){.t = JV_DICT, .u.d = d};
}

void jv_list_push(jj_arena *a, jv list, jv item) {
    jj_list *l = list.u.l;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        jv *nv = jj_alloc(a, nc * sizeof(jv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = item;
}

jv *jv_dict_get(jv dict, jv key) {
    jj_dict *d = dict.u.d;
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], key)) return &d->v[i];
    return NULL;
}

jv *jv_dict_gets(jv dict, const char *key) {
    jj_dict *d = dict.u.d;
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s.n == n && memcmp(d->k[i].u.s.p, key, n) == 0)
            return &d->v[i];
    return NULL;
}

void jv_dict_set(jj_arena *a, jv dict, jv key, jv val) {
    jv *e = jv_dict_get(dict, key);
    if (e) {
        *e = val;
        return;
    }
    jj_dict *d = dict.u.d;
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        jv *nk = jj_alloc(a, nc * sizeof(jv));
        jv *nv = jj_alloc(a, nc * sizeof(jv));
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jv));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
}

bool jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s.n > 0;
    case JV_LIST: return v.gen || v.u.l->n > 0;
    case JV_DICT: return v.u.d->n > 0;
    default: return true;
    }
}

static bool is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num_f(jv v) {
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b;
}

static bool equal_depth(jv a, jv b, int depth);

/* Python ==; containers compared element-wise. Self-containing values
 * (l.append(l)) stop at JJ_MAX_DEPTH and compare unequal. */
bool jv_equal(jv a, jv b) { return equal_depth(a, b, 0); }

static bool equal_depth(jv a, jv b, int depth) {
    if (depth > JJ_MAX_DEPTH) return false;
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = a.t == JV_INT ? a.u.i : a.u.b, y = b.t == JV_INT ? b.u.i : b.u.b;
            return x == y;
        }
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t) return false;
    if (a.t == JV_LIST && (a.gen || b.gen)) return a.u.l == b.u.l;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case JV_LIST:
        if (a.tuple != b.tuple || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_depth(a.u.l->v[i], b.u.l->v[i], depth + 1)) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = jv_dict_get(b, a.u.d->k[i]);
            if (!o || !equal_depth(a.u.d->v[i], *o, depth + 1)) return false;
        }
        return true;
    case JV_NS: return a.u.d == b.u.d;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

bool jv_is_str(jv v, const char *s) {
    return v.t == JV_STR && v.u.s.n == strlen(s) && memcmp(v.u.s.p, s, v.u.s.n) == 0;
}

const char *jv_type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.gen ? "generator" : v.tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    default: return "function";
    }
}

/* ---- buffers -------------------------------------------------------------- */
void jj_buf_init(jj_buf *b, jj_arena *a, size_t limit) {
    b->a = a;
    b->p = NULL;
    b->n = b->cap = 0;
    b->limit = limit;
}

void jj_buf_put(jj_buf *b, const char *s, size_t n) {
    if (n == 0) return;
    if (b->n + n > b->limit) {
        if (b->a->line)
            *b->a->st = pg_error(PAGODA_ERR_LIMIT, "line %d: template output exceeds %zu bytes",
                                 *b->a->line, b->limit);
        else
            *b->a->st = pg_error(PAGODA_ERR_LIMIT, "template output exceeds %zu bytes", b->limit);
        longjmp(*b->a->jmp, 1);
    }
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = jj_alloc(b->a, nc);
        if (b->n) memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jj_buf_puts(jj_buf *b, const char *s) { jj_buf_put(b, s, strlen(s)); }

void jj_buf_printf(jj_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    jj_buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

jv jj_buf_value(jj_buf *b) { return jv_str(b->p ? b->p : "", b->n); }

/* ---- UTF-8 ---------------------------------------------------------------- */
size_t jj_utf8_next(const char *p, size_t n, size_t i, int32_t *cp) {
    const unsigned char *s = (const unsigned char *)p;
    unsigned char c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + (size_t)len > n) {
        *cp = c;
        return i + 1;
    }
    int32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; k++) {
        if ((s[i + (size_t)k] & 0xC0) != 0x80) {
            *cp = c;
            return i + 1;
        }
        v = (v << 6) | (s[i + (size_t)k] & 0x3F);
    }
    *cp = v;
    return i + (size_t)len;
}

size_t jj_utf8_len(const char *p, size_t n) {
    size_t k = 0;
    int32_t cp;
    for (size_t i = 0; i < n; k++) i = jj_utf8_next(p, n, i, &cp);
    return k;
}

/* ---- str / repr ------------------------------------------------------------ */
void jv_write_float(jj_buf *b, double f) {
    if (isnan(f)) {
        jj_buf_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        jj_buf_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX */
    char digits[32] = {'0'};
    int nd = 0;
    const char *s = tmp;
    bool neg = *s == '-';
    if (neg) s++;
    for (; *s && *s != 'e'; s++)
        if (*s != '.' && nd < 30) digits[nd++] = *s;
    int exp = *s ? atoi(s + 1) : 0;
    if (nd == 0) nd = 1;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[80];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) out[o++] = digits[i];
            else
                out[o++] = '0';
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        }
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", exp < 0 ? '-' : '+',
                              exp < 0 ? -exp : exp);
    }
    jj_buf_put(b, out, o);
}

static void write_str_repr(jj_buf *b, const char *p, size_t n) {
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    jj_buf_put(b, &q, 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        char hex[8];
        if (c == '\\') esc = "\\\\";
        else if (c == (unsigned char)q) esc = q == '\'' ? "\\'" : "\\\"";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c < 0x20 || c == 0x7f) {
            snprintf(hex, sizeof hex, "\\x%02x", c);
            esc = hex;
        }
        if (esc) {
            jj_buf_put(b, p + run, i - run);
            jj_buf_puts(b, esc);
            run = i + 1;
        }
    }
    jj_buf_put(b, p + run, n - run);
    jj_buf_put(b, &q, 1);
}

static void write_repr_depth(jj_buf *b, jv v, int depth);

static void write_str_depth(jj_buf *b, jv v, int depth) {
    switch (v.t) {
    case JV_UNDEF: break;
    case JV_STR: jj_buf_put(b, v.u.s.p, v.u.s.n); break;
    default: write_repr_depth(b, v, depth);
    }
}

static void write_repr_depth(jj_buf *b, jv v, int depth) {
    if (depth > JJ_MAX_DEPTH) {
        jj_buf_puts(b, "...");
        return;
    }
    switch (v.t) {
    case JV_UNDEF: jj_buf_puts(b, "Undefined"); break;
    case JV_NONE: jj_buf_puts(b, "None"); break;
    case JV_BOOL: jj_buf_puts(b, v.u.b ? "True" : "False"); break;
    case JV_INT: jj_buf_printf(b, "%lld", (long long)v.u.i); break;
    case JV_FLOAT: jv_write_float(b, v.u.f); break;
    case JV_STR: write_str_repr(b, v.u.s.p, v.u.s.n); break;
    case JV_LIST:
        if (v.gen) {
            jj_buf_puts(b, "<generator object>");
            break;
        }
        jj_buf_puts(b, v.tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jj_buf_puts(b, ", ");
            write_repr_depth(b, v.u.l->v[i], depth + 1);
        }
        if (v.tuple && v.u.l->n == 1) jj_buf_puts(b, ",");
        jj_buf_puts(b, v.tuple ? ")" : "]");
        break;
    case JV_DICT:
    case JV_NS:
        jj_buf_puts(b, v.t == JV_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jj_buf_puts(b, ", ");
            write_repr_depth(b, v.u.d->k[i], depth + 1);
            jj_buf_puts(b, ": ");
            write_repr_depth(b, v.u.d->v[i], depth + 1);
        }
        jj_buf_puts(b, v.t == JV_NS ? "}>" : "}");
        break;
    default: jj_buf_puts(b, "<function>"); break;
    }
}

void jv_write_str(jj_buf *b, jv v) { write_str_depth(b, v, 0); }
void jv_write_repr(jj_buf *b, jv v) { write_repr_depth(b, v, 0); }

/* ---- JSON ------------------------------------------------------------------ */
static void write_json_str(jj_buf *b, const char *p, size_t n, bool ensure_ascii) {
    jj_buf_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)p[i];
        char esc[16];
        const char *e = NULL;
        size_t next = i + 1;
        if (c == '"') e = "\\\"";
        else if (c == '\\') e = "\\\\";
        else if (c == '\n') e = "\\n";
        else if (c == '\r') e = "\\r";
        else if (c == '\t') e = "\\t";
        else if (c == '\b') e = "\\b";
        else if (c == '\f') e = "\\f";
        else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            e = esc;
        } else if (c >= 0x80 && ensure_ascii) {
            int32_t cp;
            next = jj_utf8_next(p, n, i, &cp);
            if (cp >= 0x10000) {
                int32_t v = cp - 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                         0xDC00 + (v & 0x3FF));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
            e = esc;
        }
        if (e) {
            jj_buf_put(b, p + run, i - run);
            jj_buf_puts(b, e);
            run = next;
        }
        i = next;
    }
    jj_buf_put(b, p + run, n - run);
    jj_buf_put(b, "\"", 1);
}

static void json_nl(jj_buf *b, int indent, int level) {
    jj_buf_put(b, "\n", 1);
    for (int i = 0; i < indent * level; i++) jj_buf_put(b, " ", 1);
}

static int cmp_keys(const void *x, const void *y) {
    const jv *a = *(const jv *const *)x, *c = *(const jv *const *)y;
    if (a->t == JV_STR && c->t == JV_STR) {
        size_t m = a->u.s.n < c->u.s.n ? a->u.s.n : c->u.s.n;
        int r = memcmp(a->u.s.p, c->u.s.p, m);
        if (r) return r;
        return (a->u.s.n > c->u.s.n) - (a->u.s.n < c->u.s.n);
    }
    return 0;
}

bool jv_write_json(jj_buf *b, jv v, int indent, const char *item_sep, const char *key_sep,
                   bool sort_keys, bool ensure_ascii, int depth) {
    if (depth > JJ_MAX_DEPTH) return false;
    switch (v.t) {
    case JV_NONE: jj_buf_puts(b, "null"); return true;
    case JV_BOOL: jj_buf_puts(b, v.u.b ? "true" : "false"); return true;
    case JV_INT: jj_buf_printf(b, "%lld", (long long)v.u.i); return true;
    case JV_FLOAT:
        if (isnan(v.u.f)) jj_buf_puts(b, "NaN");
        else if (isinf(v.u.f)) jj_buf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else jv_write_float(b, v.u.f);
        return true;
    case JV_STR: write_json_str(b, v.u.s.p, v.u.s.n, ensure_ascii); return true;
    case JV_LIST:
        if (v.gen) return false;
        if (v.u.l->n == 0) {
            jj_buf_puts(b, "[]");
            return true;
        }
        jj_buf_puts(b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jj_buf_puts(b, item_sep);
            if (indent >= 0) json_nl(b, indent, depth + 1);
            if (!jv_write_json(b, v.u.l->v[i], indent, item_sep, key_sep, sort_keys,
                               ensure_ascii, depth + 1))
                return false;
        }
        if (indent >= 0) json_nl(b, indent, depth);
        jj_buf_puts(b, "]");
        return true;
    case JV_DICT:
    case JV_NS: {
        jj_dict *d = v.u.d;
        if (d->n == 0) {
            jj_buf_puts(b, "{}");
            return true;
        }
        size_t *order = jj_alloc(b->a, d->n * sizeof(size_t));
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (sort_keys) {
            const jv **ks = jj_alloc(b->a, d->n * sizeof(jv *));
            for (size_t i = 0; i < d->n; i++) ks[i] = &d->k[i];
            qsort(ks, d->n, sizeof(jv *), cmp_keys);
            for (size_t i = 0; i < d->n; i++) order[i] = (size_t)(ks[i] - d->k);
        }
        jj_buf_puts(b, "{");
        for (size_t j = 0; j < d->n; j++) {
            size_t i = order[j];
            if (j) jj_buf_puts(b, item_sep);
            if (indent >= 0) json_nl(b, indent, depth + 1);
            jv k = d->k[i];
            if (k.t == JV_STR) {
                write_json_str(b, k.u.s.p, k.u.s.n, ensure_ascii);
            } else if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
                jj_buf_puts(b, "\"");
                if (k.t == JV_NONE) jj_buf_puts(b, "null");
                else if (k.t == JV_BOOL) jj_buf_puts(b, k.u.b ? "true" : "false");
                else jv_write_str(b, k);
                jj_buf_puts(b, "\"");
            } else {
                return false;
            }
            jj_buf_puts(b, key_sep);
            if (!jv_write_json(b, d->v[i], indent, item_sep, key_sep, sort_keys, ensure_ascii,
                               depth + 1))
                return false;
        }
        if (indent >= 0) json_nl(b, indent, depth);
        jj_buf_puts(b, "}");
        return true;
    }
    default: return false;
    }
}
