/* Grammar IR builder and the code point -> UTF-8 byte range conversion
 * (see gram_ir.h). */
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_ir.h"

void gx_init(gx_builder *b) {
    memset(b, 0, sizeof *b);
}

void gx_free(gx_builder *b) {
    for (int32_t i = 0; i < b->n_rules; i++)
        free(b->rules[i].name);
    free(b->rules);
    free(b->nodes);
    free(b->kids);
    free(b->cls);
    memset(b, 0, sizeof *b);
}

static bool grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int32_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static int32_t new_node(gx_builder *b, gx_node n) {
    if (b->oom || !grow((void **)&b->nodes, &b->cap_nodes, b->n_nodes + 1, sizeof *b->nodes)) {
        b->oom = true;
        return -1;
    }
    b->nodes[b->n_nodes] = n;
    return b->n_nodes++;
}

int32_t gx_empty(gx_builder *b) {
    return new_node(b, (gx_node){.kind = GX_EMPTY});
}

int32_t gx_byte_set(gx_builder *b, const uint64_t set[4]) {
    if (b->oom || !grow((void **)&b->cls, &b->cap_cls, b->n_cls + 1, sizeof *b->cls)) {
        b->oom = true;
        return -1;
    }
    memcpy(b->cls[b->n_cls], set, 4 * sizeof(uint64_t));
    return new_node(b, (gx_node){.kind = GX_CLASS, .a = b->n_cls++});
}

int32_t gx_byte_range(gx_builder *b, uint8_t lo, uint8_t hi) {
    uint64_t s[4] = {0};
    for (unsigned c = lo; c <= hi; c++)
        s[c >> 6] |= 1ull << (c & 63);
    return gx_byte_set(b, s);
}

static int32_t list(gx_builder *b, gx_kind k, const int32_t *kids, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (kids[i] < 0) return -1;
    if (n == 1) return kids[0];
    if (n == 0) return k == GX_SEQ ? gx_empty(b) : -1;
    if (b->oom || !grow((void **)&b->kids, &b->cap_kids, b->n_kids + n, sizeof *b->kids)) {
        b->oom = true;
        return -1;
    }
    int32_t at = b->n_kids;
    memcpy(b->kids + at, kids, (size_t)n * sizeof *kids);
    b->n_kids += n;
    return new_node(b, (gx_node){.kind = (uint8_t)k, .a = at, .n = n});
}

int32_t gx_seq(gx_builder *b, const int32_t *kids, int32_t n) {
    return list(b, GX_SEQ, kids, n);
}

int32_t gx_alt(gx_builder *b, const int32_t *kids, int32_t n) {
    return list(b, GX_ALT, kids, n);
}

int32_t gx_rep(gx_builder *b, int32_t kid, int32_t min, int32_t max) {
    if (kid < 0) return -1;
    if (min == 1 && max == 1) return kid;
    return new_node(b, (gx_node){.kind = GX_REP, .a = kid, .n = min, .max = max});
}

int32_t gx_literal(gx_builder *b, const char *s, size_t len) {
    if (len == 0) return gx_empty(b);
    int32_t stackbuf[64], *k = len <= 64 ? stackbuf : malloc(len * sizeof *k);
    if (!k) {
        b->oom = true;
        return -1;
    }
    for (size_t i = 0; i < len; i++)
        k[i] = gx_byte_range(b, (uint8_t)s[i], (uint8_t)s[i]);
    int32_t r = gx_seq(b, k, (int32_t)len);
    if (k != stackbuf) free(k);
    return r;
}

int32_t gx_rule_id(gx_builder *b, const char *name, size_t len, int32_t at) {
    for (int32_t i = 0; i < b->n_rules; i++)
        if (strlen(b->rules[i].name) == len && memcmp(b->rules[i].name, name, len) == 0) return i;
    if (b->oom || !grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules)) {
        b->oom = true;
        return -1;
    }
    char *nm = malloc(len + 1);
    if (!nm) {
        b->oom = true;
        return -1;
    }
    memcpy(nm, name, len);
    nm[len] = 0;
    b->rules[b->n_rules] = (gx_rule){.name = nm, .expr = -1, .first_use = at};
    return b->n_rules++;
}

int32_t gx_ref(gx_builder *b, const char *name, size_t len, int32_t at) {
    int32_t r = gx_rule_id(b, name, len, at);
    if (r < 0) return -1;
    return new_node(b, (gx_node){.kind = GX_REF, .a = r});
}

pagoda_status gx_define(gx_builder *b, const char *name, size_t len, int32_t expr) {
    int32_t r = gx_rule_id(b, name, len, -1);
    if (r < 0 || expr < 0 || b->oom) return pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
    if (b->rules[r].expr >= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "grammar: rule '%.*s' is defined twice", (int)len,
                        name);
    b->rules[r].expr = expr;
    return PAGODA_OK;
}

/* ------------------------------------------------------------ code points */

void gx_cpset_add(gx_cpset *s, uint32_t lo, uint32_t hi) {
    if (lo > hi) return;
    if (s->n == s->cap) {
        int32_t c = s->cap ? s->cap * 2 : 16;
        void *q = realloc(s->r, (size_t)c * sizeof *s->r);
        if (!q) return; /* dropped range: callers check gx_codepoints' result size */
        s->r = q;
        s->cap = c;
    }
    s->r[s->n][0] = lo;
    s->r[s->n][1] = hi;
    s->n++;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

void gx_cpset_norm(gx_cpset *s) {
    if (s->n < 2) return;
    qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
    int32_t w = 0;
    for (int32_t i = 1; i < s->n; i++) {
        if (s->r[i][0] <= s->r[w][1] + 1) {
            if (s->r[i][1] > s->r[w][1]) s->r[w][1] = s->r[i][1];
        } else {
            w++;
            s->r[w][0] = s->r[i][0];
            s->r[w][1] = s->r[i][1];
        }
    }
    s->n = w + 1;
}

void gx_cpset_negate(gx_cpset *s) {
    gx_cpset_norm(s);
    gx_cpset out = {0};
    uint32_t next = 0;
    for (int32_t i = 0; i < s->n; i++) {
        if (s->r[i][0] > next) gx_cpset_add(&out, next, s->r[i][0] - 1);
        next = s->r[i][1] + 1;
    }
    if (next <= 0x10FFFF) gx_cpset_add(&out, next, 0x10FFFF);
    gx_cpset_free(s);
    *s = out;
}

void gx_cpset_free(gx_cpset *s) {
    free(s->r);
    memset(s, 0, sizeof *s);
}

int gx_utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Sequences of byte ranges: the utf8-ranges split. A range [lo, hi] of one
 * encoded length n is split until, for each byte position, the range is
 * either a single prefix byte or the full continuation range, so that the
 * cross product of the per-byte ranges is exactly [lo, hi]. */
typedef struct seqs {
    int32_t *alts;
    int32_t n, cap;
    gx_builder *b;
    bool bad;
} seqs;

static void push_alt(seqs *q, int32_t e) {
    if (e < 0 || q->bad) {
        q->bad = true;
        return;
    }
    if (q->n == q->cap) {
        int32_t c = q->cap ? q->cap * 2 : 16;
        void *p = realloc(q->alts, (size_t)c * sizeof *q->alts);
        if (!p) {
            q->bad = true;
            return;
        }
        q->alts = p;
        q->cap = c;
    }
    q->alts[q->n++] = e;
}

static const uint32_t max_of_len[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

static void split(seqs *q, uint32_t lo, uint32_t hi) {
    if (lo > hi) return;
    /* surrogates are not encodable */
    if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800) split(q, lo, 0xD7FF);
        if (hi > 0xDFFF) split(q, 0xE000, hi);
        return;
    }
    /* same encoded length */
    for (int i = 0; i < 3; i++)
        if (lo <= max_of_len[i] && hi > max_of_len[i]) {
            split(q, lo, max_of_len[i]);
            split(q, max_of_len[i] + 1, hi);
            return;
        }
    if (hi < 0x80) {
        push_alt(q, gx_byte_range(q->b, (uint8_t)lo, (uint8_t)hi));
        return;
    }
    /* split where the low k*6 bits are not the full range */
    for (int k = 1; k < 4; k++) {
        uint32_t m = (1u << (6 * k)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                split(q, lo, lo | m);
                split(q, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                split(q, lo, (hi & ~m) - 1);
                split(q, hi & ~m, hi);
                return;
            }
        }
    }
    uint8_t a[4], z[4];
    int n = gx_utf8_encode(lo, a);
    gx_utf8_encode(hi, z);
    int32_t parts[4];
    for (int i = 0; i < n; i++)
        parts[i] = gx_byte_range(q->b, a[i], z[i]);
    push_alt(q, gx_seq(q->b, parts, n));
}

int32_t gx_codepoints(gx_builder *b, const gx_cpset *s) {
    seqs q = {.b = b};
    /* single-byte members as one class */
    uint64_t ascii[4] = {0};
    bool any_ascii = false;
    for (int32_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i][0], hi = s->r[i][1];
        for (uint32_t c = lo; c <= hi && c < 0x80; c++) {
            ascii[c >> 6] |= 1ull << (c & 63);
            any_ascii = true;
        }
        if (hi >= 0x80) split(&q, lo < 0x80 ? 0x80 : lo, hi);
    }
    if (any_ascii) push_alt(&q, gx_byte_set(b, ascii));
    int32_t r = q.bad ? -1 : gx_alt(b, q.alts, q.n);
    free(q.alts);
    return r;
}
