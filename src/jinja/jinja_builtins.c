/* Jinja builtins: filters, tests, str/list/dict methods and globals
 * (range, namespace, dict, raise_exception, strftime_now), following jinja2
 * 3.1's filters.py / tests.py / sandbox (range capped at 100000 items) and
 * Python's str methods. Unicode case mapping uses utf8proc. */
#define _GNU_SOURCE /* memmem */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "jinja/jinja_internal.h"

#define MAX_RANGE 100000

static const jv *arg(const jv *args, size_t nargs, const char **kwn, const jv *kwv, size_t nkw,
                     size_t idx, const char *name) {
    if (idx < nargs) return &args[idx];
    for (size_t k = 0; k < nkw; k++)
        if (name && strcmp(kwn[k], name) == 0) return &kwv[k];
    return NULL;
}
#define ARG(i, name) arg(args, nargs, kwn, kwv, nkw, (i), (name))

static bool arg_bool(const jv *a, bool def) { return a ? jv_truthy(*a) : def; }

static int64_t arg_int(jj_ctx *c, const jv *a, int64_t def, const char *what) {
    if (!a || a->t == JV_NONE || a->t == JV_UNDEF) return def;
    if (a->t == JV_INT) return a->u.i;
    if (a->t == JV_BOOL) return a->u.b;
    if (a->t == JV_FLOAT) return (int64_t)a->u.f;
    jj_fail(c, "%s: expected an integer, got '%s'", what, jv_type_name(*a));
}

static jv need_str(jj_ctx *c, jv v, const char *what) {
    if (v.t != JV_STR) jj_fail(c, "%s: expected a string, got '%s'", what, jv_type_name(v));
    return v;
}

static jv new_buf_str(jj_ctx *c, jj_buf *b) {
    (void)c;
    return jj_buf_value(b);
}

/* ---- unicode helpers ------------------------------------------------------ */
static bool is_space_cp(int32_t cp) {
    return cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f) || cp == 0x85 ||
           cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

static void put_cp(jj_buf *b, int32_t cp) {
    utf8proc_uint8_t tmp[4];
    utf8proc_ssize_t n = utf8proc_encode_char(cp, tmp);
    if (n <= 0) {
        char ch = (char)cp;
        jj_buf_put(b, &ch, 1);
        return;
    }
    jj_buf_put(b, (const char *)tmp, (size_t)n);
}

static bool is_cased(int32_t cp) {
    if (cp < 0 || cp > 0x10FFFF) return false;
    utf8proc_category_t k = utf8proc_category(cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           utf8proc_tolower(cp) != cp || utf8proc_toupper(cp) != cp;
}
static bool is_alnum_cp(int32_t cp) {
    if (cp < 0 || cp > 0x10FFFF) return false;
    utf8proc_category_t k = utf8proc_category(cp);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}
static int32_t to_lower(int32_t cp) { return cp < 0 || cp > 0x10FFFF ? cp : utf8proc_tolower(cp); }
static int32_t to_upper(int32_t cp) { return cp < 0 || cp > 0x10FFFF ? cp : utf8proc_toupper(cp); }
static int32_t to_title(int32_t cp) { return cp < 0 || cp > 0x10FFFF ? cp : utf8proc_totitle(cp); }

enum { CASE_LOWER, CASE_UPPER, CASE_CAPITALIZE, CASE_TITLE_PY, CASE_TITLE_JINJA, CASE_SWAP };

/* Python's full case mappings that expand one character to several
 * (SpecialCasing.txt, unconditional part used by str.upper/title/lower). */
static const char *special_case(int32_t cp, int kind /* 0 lower, 1 upper, 2 title */) {
    static const struct {
        int32_t cp;
        const char *lower, *upper, *title;
    } T[] = {
        {0x00DF, NULL, "SS", "Ss"},
        {0x0130, "i\xcc\x87", NULL, NULL},
        {0x0149, NULL, "\xca\xbcN", "\xca\xbcN"},
        {0xFB00, NULL, "FF", "Ff"},
        {0xFB01, NULL, "FI", "Fi"},
        {0xFB02, NULL, "FL", "Fl"},
        {0xFB03, NULL, "FFI", "Ffi"},
        {0xFB04, NULL, "FFL", "Ffl"},
        {0xFB05, NULL, "ST", "St"},
        {0xFB06, NULL, "ST", "St"},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (T[i].cp == cp) return kind == 0 ? T[i].lower : kind == 1 ? T[i].upper : T[i].title;
    return NULL;
}

static jv map_case(jj_ctx *c, jv s, int mode) {
    jj_buf b;
    jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
    bool prev_cased = false, first = true, word_start = true;
    int32_t cp;
    for (size_t i = 0; i < s.u.s.n;) {
        i = jj_utf8_next(s.u.s.p, s.u.s.n, i, &cp);
        int32_t o = cp;
        int kind = 0; /* which full mapping applies: 0 lower, 1 upper, 2 title, -1 none */
        switch (mode) {
        case CASE_LOWER: o = to_lower(cp); break;
        case CASE_UPPER:
            o = to_upper(cp);
            kind = 1;
            break;
        case CASE_CAPITALIZE:
            o = first ? to_title(cp) : to_lower(cp);
            kind = first ? 2 : 0;
            break;
        case CASE_TITLE_PY:
            o = prev_cased ? to_lower(cp) : to_title(cp);
            kind = prev_cased ? 0 : 2;
            prev_cased = is_cased(cp);
            break;
        case CASE_TITLE_JINJA: {
            /* words split at runs of [-\s({[<] */
            bool sep = cp == '-' || is_space_cp(cp) || cp == '(' || cp == '{' || cp == '[' ||
                       cp == '<';
            if (sep) {
                word_start = true;
                kind = -1;
            } else {
                o = word_start ? to_upper(cp) : to_lower(cp);
                kind = word_start ? 1 : 0;
                word_start = false;
            }
            break;
        }
        case CASE_SWAP:
            kind = to_upper(cp) != cp ? 1 : 0;
            o = kind ? to_upper(cp) : to_lower(cp);
            break;
        default: break;
        }
        first = false;
        const char *full = kind >= 0 ? special_case(cp, kind) : NULL;
        if (full) jj_buf_puts(&b, full);
        else put_cp(&b, o);
    }
    return new_buf_str(c, &b);
}

/* strip: which = 1 left, 2 right, 3 both; chars NULL = whitespace */
static jv strip(jv s, const jv *chars, int which) {
    const char *p = s.u.s.p;
    size_t lo = 0, hi = s.u.s.n;
    bool use_ws = !chars || chars->t == JV_NONE || chars->t == JV_UNDEF;
    if (which & 1) {
        while (lo < hi) {
            int32_t cp;
            size_t j = jj_utf8_next(p, hi, lo, &cp);
            bool drop = false;
            if (use_ws) {
                drop = is_space_cp(cp);
            } else if (chars->t == JV_STR) {
                int32_t cc;
                for (size_t k = 0; k < chars->u.s.n && !drop;) {
                    k = jj_utf8_next(chars->u.s.p, chars->u.s.n, k, &cc);
                    drop = cc == cp;
                }
            }
            if (!drop) break;
            lo = j;
        }
    }
    if (which & 2) {
        while (hi > lo) {
            size_t k = hi - 1;
            while (k > lo && ((unsigned char)p[k] & 0xC0) == 0x80) k--;
            int32_t cp;
            jj_utf8_next(p, hi, k, &cp);
            bool drop = false;
            if (use_ws) {
                drop = is_space_cp(cp);
            } else if (chars->t == JV_STR) {
                int32_t cc;
                for (size_t m = 0; m < chars->u.s.n && !drop;) {
                    m = jj_utf8_next(chars->u.s.p, chars->u.s.n, m, &cc);
                    drop = cc == cp;
                }
            }
            if (!drop) break;
            hi = k;
        }
    }
    return jv_str(p + lo, hi - lo);
}

static jv str_replace(jj_ctx *c, jv s, jv old, jv neu, int64_t count) {
    jj_buf b;
    jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
    if (old.u.s.n == 0) {
        /* Python inserts `new` between characters */
        int32_t cp;
        int64_t done = 0;
        size_t i = 0;
        if (count != 0) {
            jj_buf_put(&b, neu.u.s.p, neu.u.s.n);
            done++;
        }
        while (i < s.u.s.n) {
            size_t j = jj_utf8_next(s.u.s.p, s.u.s.n, i, &cp);
            jj_buf_put(&b, s.u.s.p + i, j - i);
            i = j;
            if (count < 0 || done < count) {
                jj_buf_put(&b, neu.u.s.p, neu.u.s.n);
                done++;
            }
        }
        return new_buf_str(c, &b);
    }
    size_t i = 0;
    int64_t done = 0;
    while (i < s.u.s.n) {
        const char *hit = (count < 0 || done < count)
                              ? memmem(s.u.s.p + i, s.u.s.n - i, old.u.s.p, old.u.s.n)
                              : NULL;
        if (!hit) break;
        size_t at = (size_t)(hit - s.u.s.p);
        jj_buf_put(&b, s.u.s.p + i, at - i);
        jj_buf_put(&b, neu.u.s.p, neu.u.s.n);
        i = at + old.u.s.n;
        done++;
    }
    jj_buf_put(&b, s.u.s.p + i, s.u.s.n - i);
    return new_buf_str(c, &b);
}

/* The code point ending at byte j: returns it; moves *pos to its start if
 * `move_if_not_space` is false and it is whitespace, or if it is true and
 * it is not whitespace (the rsplit scanners step over one class). */
static int32_t prev_cp(const char *p, size_t j, size_t *pos, bool move_if_not_space) {
    size_t k = j - 1;
    while (k > 0 && ((unsigned char)p[k] & 0xC0) == 0x80 && j - k < 4) k--;
    int32_t cp;
    size_t e = jj_utf8_next(p, j, k, &cp);
    if (e != j) { /* invalid sequence: treat the last byte alone */
        k = j - 1;
        cp = (unsigned char)p[k];
    }
    if (is_space_cp(cp) != move_if_not_space) *pos = k;
    return cp;
}

/* Python str.split / rsplit */
static jv str_split(jj_ctx *c, jv s, const jv *sep, int64_t maxsplit, bool from_right) {
    jv out = jv_new_list(&c->arena, 4);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n;
    if (!sep || sep->t == JV_NONE || sep->t == JV_UNDEF) {
        /* CPython split_whitespace / rsplit_whitespace: runs of whitespace
         * separate; once maxsplit is reached the rest (minus the whitespace
         * run at the split side) is one item */
        int64_t count = 0;
        if (!from_right) {
            size_t i = 0;
            for (;;) {
                int32_t cp;
                size_t j;
                while (i < n && (j = jj_utf8_next(p, n, i, &cp), is_space_cp(cp))) i = j;
                if (i >= n) break;
                if (maxsplit >= 0 && count == maxsplit) {
                    jv_list_push(&c->arena, out, jv_str(p + i, n - i));
                    break;
                }
                size_t st = i;
                while (i < n && (j = jj_utf8_next(p, n, i, &cp), !is_space_cp(cp))) i = j;
                jv_list_push(&c->arena, out, jv_str(p + st, i - st));
                count++;
            }
            return out;
        }
        jv rev = jv_new_list(&c->arena, 4);
        size_t j = n;
        for (;;) {
            while (j > 0 && is_space_cp(prev_cp(p, j, &j, false))) {
            }
            if (j == 0) break;
            if (maxsplit >= 0 && count == maxsplit) {
                jv_list_push(&c->arena, rev, jv_str(p, j));
                break;
            }
            size_t e = j;
            while (j > 0 && !is_space_cp(prev_cp(p, j, &j, true))) {
            }
            jv_list_push(&c->arena, rev, jv_str(p + j, e - j));
            count++;
        }
        for (size_t k = rev.u.l->n; k-- > 0;) jv_list_push(&c->arena, out, rev.u.l->v[k]);
        return out;
    }
    if (sep->t != JV_STR) jj_fail(c, "split: separator must be a string");
    if (sep->u.s.n == 0) jj_fail(c, "empty separator");
    const char *sp = sep->u.s.p;
    size_t sn = sep->u.s.n;
    if (!from_right) {
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || done < maxsplit) ? memmem(p + i, n - i, sp, sn) : NULL;
            if (!hit) break;
            jv_list_push(&c->arena, out, jv_str(p + i, (size_t)(hit - (p + i))));
            i = (size_t)(hit - p) + sn;
            done++;
        }
        jv_list_push(&c->arena, out, jv_str(p + i, n - i));
        return out;
    }
    /* rsplit: collect from the right, then reverse */
    jv rev = jv_new_list(&c->arena, 4);
    size_t end = n;
    int64_t done = 0;
    while (maxsplit < 0 || done < maxsplit) {
        size_t found = (size_t)-1;
        if (end >= sn)
            for (size_t k = end - sn + 1; k-- > 0;)
                if (memcmp(p + k, sp, sn) == 0) {
                    found = k;
                    break;
                }
        if (found == (size_t)-1) break;
        jv_list_push(&c->arena, rev, jv_str(p + found + sn, end - found - sn));
        end = found;
        done++;
    }
    jv_list_push(&c->arena, rev, jv_str(p, end));
    for (size_t k = rev.u.l->n; k-- > 0;) jv_list_push(&c->arena, out, rev.u.l->v[k]);
    return out;
}

/* ---- sorting -------------------------------------------------------------- */
static jv attr_path(jj_ctx *c, jv item, jv attr) {
    if (attr.t == JV_INT) return jj_getitem(c, item, attr);
    if (attr.t != JV_STR) jj_fail(c, "attribute must be a string");
    const char *p = attr.u.s.p;
    size_t n = attr.u.s.n, i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && p[j] != '.') j++;
        jv key = jv_str(p + i, j - i);
        bool digits = j > i;
        for (size_t k = i; k < j; k++) digits = digits && p[k] >= '0' && p[k] <= '9';
        if (digits) key = jv_int(strtoll(p + i, NULL, 10));
        jv next = jj_getitem(c, item, key);
        if (next.t == JV_UNDEF && key.t == JV_INT) next = jj_getitem(c, item, jv_str(p + i, j - i));
        item = next;
        i = j + 1;
    }
    return item;
}

static jv sort_key(jj_ctx *c, jv v, const jv *attr, bool case_sensitive) {
    if (attr && attr->t != JV_NONE && attr->t != JV_UNDEF) v = attr_path(c, v, *attr);
    if (!case_sensitive && v.t == JV_STR) v = map_case(c, v, CASE_LOWER);
    return v;
}

static void merge_sort(jj_ctx *c, size_t *idx, size_t *tmp, size_t n, const jv *keys, bool rev) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(c, idx, tmp, h, keys, rev);
    merge_sort(c, idx + h, tmp, n - h, keys, rev);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r = jj_compare(c, keys[idx[j]], keys[idx[i]]);
        bool take_right = rev ? r > 0 : r < 0;
        tmp[k++] = take_right ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof(size_t));
}

static jv sorted(jj_ctx *c, jv items, const jv *keys, bool rev) {
    size_t n = items.u.l->n;
    size_t *idx = jj_alloc(&c->arena, (n + 1) * sizeof(size_t));
    size_t *tmp = jj_alloc(&c->arena, (n + 1) * sizeof(size_t));
    for (size_t i = 0; i < n; i++) idx[i] = i;
    merge_sort(c, idx, tmp, n, keys, rev);
    jv out = jv_new_list(&c->arena, n);
    for (size_t i = 0; i < n; i++) out.u.l->v[i] = items.u.l->v[idx[i]];
    out.u.l->n = n;
    return out;
}

static jv gen_of(jv l) {
    l.gen = true;
    l.tuple = false;
    return l;
}

jv jj_escape(jj_ctx *c, jv v) {
    if (v.t == JV_STR && v.safe) return v;
    jv s = jj_to_str(c, v);
    jj_buf b;
    jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
    size_t run = 0;
    for (size_t i = 0; i < s.u.s.n; i++) {
        const char *e;
        switch (s.u.s.p[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&#34;"; break;
        case '\'': e = "&#39;"; break;
        default: continue;
        }
        jj_buf_put(&b, s.u.s.p + run, i - run);
        jj_buf_puts(&b, e);
        run = i + 1;
    }
    jj_buf_put(&b, s.u.s.p + run, s.u.s.n - run);
    jv r = jj_buf_value(&b);
    r.safe = true;
    return r;
}

/* ---- JSON <-> values ------------------------------------------------------- */
static jv from_cjson(jj_ctx *c, const cJSON *j, int depth) {
    if (depth > 2 * JJ_MAX_DEPTH) return jv_none(); /* cJSON itself stops at 1000 */
    if (cJSON_IsNull(j)) return jv_none();
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsString(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        return jv_str(jj_strdup(&c->arena, s, strlen(s)), strlen(s));
    }
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9e15) return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsArray(j)) {
        jv l = jv_new_list(&c->arena, 0);
        for (const cJSON *e = j->child; e; e = e->next)
            jv_list_push(&c->arena, l, from_cjson(c, e, depth + 1));
        return l;
    }
    if (cJSON_IsObject(j)) {
        jv d = jv_new_dict(&c->arena, 0);
        for (const cJSON *e = j->child; e; e = e->next) {
            const char *k = e->string ? e->string : "";
            jv_dict_set(&c->arena, d, jv_str(jj_strdup(&c->arena, k, strlen(k)), strlen(k)),
                        from_cjson(c, e, depth + 1));
        }
        return d;
    }
    return jv_none();
}

static jv to_json(jj_ctx *c, jv v, const jv *indent, const jv *seps, bool sort_keys, bool ascii) {
    int ind = -1;
    const char *isep = ", ", *ksep = ": ";
    if (indent && indent->t != JV_NONE && indent->t != JV_UNDEF) {
        ind = (int)arg_int(c, indent, 0, "tojson indent");
        if (ind < 0) ind = 0;
        if (ind > 64) ind = 64;
        isep = ",";
    }
    if (seps && seps->t == JV_LIST && seps->u.l->n == 2 && seps->u.l->v[0].t == JV_STR &&
        seps->u.l->v[1].t == JV_STR) {
        isep = jj_strdup(&c->arena, seps->u.l->v[0].u.s.p, seps->u.l->v[0].u.s.n);
        ksep = jj_strdup(&c->arena, seps->u.l->v[1].u.s.p, seps->u.l->v[1].u.s.n);
    }
    jj_buf b;
    jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
    if (!jv_write_json(&b, v, ind, isep, ksep, sort_keys, ascii, 0))
        jj_fail(c, "tojson: object of type '%s' is not JSON serializable", jv_type_name(v));
    return new_buf_str(c, &b);
}

/* Convert with a private unwind point so the caller can free `j` first. */
static jv jj_from_cjson_guarded(jj_ctx *c, const cJSON *j) {
    jmp_buf saved;
    memcpy(&saved, &c->jmp, sizeof saved);
    c->st = PAGODA_OK;
    jv r = jv_none();
    if (setjmp(c->jmp) == 0) r = from_cjson(c, j, 0);
    memcpy(&c->jmp, &saved, sizeof saved);
    return r;
}

pagoda_status jj_ctx_set_json(jj_ctx *c, const char *name, const cJSON *j) {
    if (setjmp(c->jmp)) return c->st;
    jv v = j ? from_cjson(c, j, 0) : jv_none();
    jv_dict_set(&c->arena, c->globals->vars, jv_cstr(jj_strdup(&c->arena, name, strlen(name))), v);
    return PAGODA_OK;
}

/* ---- filters -------------------------------------------------------------- */
static jv list_of(jj_ctx *c, jv v) {
    jv it = jj_iterate(c, v);
    jv l = jv_new_list(&c->arena, it.u.l->n);
    if (it.u.l->n) memcpy(l.u.l->v, it.u.l->v, it.u.l->n * sizeof(jv));
    l.u.l->n = it.u.l->n;
    return l;
}

static jv str_of(jj_ctx *c, jv v) { return jj_to_str(c, v); }

static jv f_select(jj_ctx *c, jv in, const jv *args, size_t nargs, bool attr_mode, bool keep) {
    if (!jv_truthy(in)) return gen_of(jv_new_list(&c->arena, 0)); /* jinja2: `if value:` */
    jv items = jj_iterate(c, in);
    jv out = gen_of(jv_new_list(&c->arena, 0));
    size_t off = attr_mode ? 1 : 0;
    if (attr_mode && nargs < 1) jj_fail(c, "selectattr/rejectattr need an attribute name");
    for (size_t i = 0; i < items.u.l->n; i++) {
        jv v = items.u.l->v[i];
        jv probe = attr_mode ? attr_path(c, v, args[0]) : v;
        bool r;
        if (nargs > off) {
            if (args[off].t != JV_STR) jj_fail(c, "test name must be a string");
            char *tn = jj_strdup(&c->arena, args[off].u.s.p, args[off].u.s.n);
            r = jj_test(c, tn, probe, args + off + 1, nargs - off - 1);
        } else {
            r = jv_truthy(probe);
        }
        if (r == keep) jv_list_push(&c->arena, out, v);
    }
    return out;
}

jv jj_filter(jj_ctx *c, const char *name, jv in, const jv *args, size_t nargs, const char **kwn,
             const jv *kwv, size_t nkw) {
#define IS(s) (strcmp(name, s) == 0)
    if (IS("default") || IS("d")) {
        const jv *dv = ARG(0, "default_value");
        bool boolean = arg_bool(ARG(1, "boolean"), false);
        if (in.t == JV_UNDEF || (boolean && !jv_truthy(in))) return dv ? *dv : jv_str("", 0);
        return in;
    }
    if (IS("length") || IS("count")) {
        switch (in.t) {
        case JV_UNDEF: return jv_int(0);
        case JV_STR:
            jj_charge(c, in.u.s.n / 64);
            return jv_int((int64_t)jj_utf8_len(in.u.s.p, in.u.s.n));
        case JV_LIST:
            if (in.gen) jj_fail(c, "object of type 'generator' has no len()");
            return jv_int((int64_t)in.u.l->n);
        case JV_DICT:
        case JV_NS: return jv_int((int64_t)in.u.d->n);
        default: jj_fail(c, "object of type '%s' has no len()", jv_type_name(in));
        }
    }
    if (IS("safe")) {
        jv s = str_of(c, in);
        s.safe = true;
        return s;
    }
    if (IS("string")) return str_of(c, in); /* soft_str keeps Markup */
    if (IS("tojson")) {
        if (in.t == JV_UNDEF) jj_fail(c, "tojson: object of type 'Undefined' is not JSON serializable");
        return to_json(c, in, ARG(0, "indent"), ARG(99, "separators"),
                       arg_bool(ARG(99, "sort_keys"), false),
                       arg_bool(ARG(99, "ensure_ascii"), false));
    }
    if (IS("from_json")) {
        jv s = need_str(c, in, "from_json");
        char *z = jj_strdup(&c->arena, s.u.s.p, s.u.s.n);
        cJSON *j = cJSON_ParseWithLength(z, s.u.s.n);
        if (!j) jj_fail(c, "from_json: invalid JSON");
        /* convert, then free: from_cjson may unwind, so copy first into values */
        jv r = jj_from_cjson_guarded(c, j);
        cJSON_Delete(j);
        if (c->st != PAGODA_OK) longjmp(c->jmp, 1);
        return r;
    }
    if (IS("trim")) {
        jv s = str_of(c, in);
        jv r = strip(s, ARG(0, "chars"), 3);
        r.safe = s.safe;
        return r;
    }
    if (IS("lower") || IS("upper") || IS("capitalize") || IS("title")) {
        jv s = str_of(c, in);
        jv r = map_case(c, s, IS("lower") ? CASE_LOWER : IS("upper") ? CASE_UPPER
                              : IS("capitalize") ? CASE_CAPITALIZE : CASE_TITLE_JINJA);
        r.safe = s.safe;
        return r;
    }
    if (IS("replace")) {
        jv s = str_of(c, in);
        const jv *o = ARG(0, "old"), *nw = ARG(1, "new");
        if (!o || !nw) jj_fail(c, "replace needs two arguments");
        return str_replace(c, s, str_of(c, *o), str_of(c, *nw), arg_int(c, ARG(2, "count"), -1, "replace"));
    }
    if (IS("join")) {
        const jv *sep = ARG(0, "d");
        const jv *attr = ARG(1, "attribute");
        jv items = jj_iterate(c, in);
        jj_buf b;
        jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
        for (size_t i = 0; i < items.u.l->n; i++) {
            if (i && sep) jv_write_str(&b, *sep);
            jv v = items.u.l->v[i];
            if (attr) v = attr_path(c, v, *attr);
            jv_write_str(&b, v);
        }
        return new_buf_str(c, &b);
    }
    if (IS("items")) {
        if (in.t == JV_UNDEF) return jv_new_list(&c->arena, 0);
        if (in.t != JV_DICT && in.t != JV_NS) jj_fail(c, "Can only get item pairs from a mapping.");
        jv l = jv_new_list(&c->arena, in.u.d->n);
        for (size_t i = 0; i < in.u.d->n; i++) {
            jv t = jv_new_list(&c->arena, 2);
            t.tuple = true;
            t.u.l->v[0] = in.u.d->k[i];
            t.u.l->v[1] = in.u.d->v[i];
            t.u.l->n = 2;
            l.u.l->v[l.u.l->n++] = t;
        }
        return gen_of(l); /* do_items is a generator */
    }
    if (IS("dictsort")) {
        if (in.t != JV_DICT && in.t != JV_NS) jj_fail(c, "dictsort: expected a mapping");
        bool cs = arg_bool(ARG(0, "case_sensitive"), false);
        const jv *by = ARG(1, "by");
        bool by_value = by && jv_is_str(*by, "value");
        bool rev = arg_bool(ARG(2, "reverse"), false);
        jv pairs = jj_filter(c, "items", in, NULL, 0, NULL, NULL, 0);
        jv *keys = jj_alloc(&c->arena, (pairs.u.l->n + 1) * sizeof(jv));
        for (size_t i = 0; i < pairs.u.l->n; i++)
            keys[i] = sort_key(c, pairs.u.l->v[i].u.l->v[by_value ? 1 : 0], NULL, cs);
        return sorted(c, pairs, keys, rev);
    }
    if (IS("list")) return list_of(c, in);
    if (IS("first") || IS("last")) {
        jv items = jj_iterate(c, in);
        if (items.u.l->n == 0) return jv_undef(NULL);
        return items.u.l->v[IS("first") ? 0 : items.u.l->n - 1];
    }
    if (IS("reverse")) {
        if (in.t == JV_STR) {
            jv chars = jj_iterate(c, in);
            jj_buf b;
            jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
            for (size_t i = chars.u.l->n; i-- > 0;)
                jj_buf_put(&b, chars.u.l->v[i].u.s.p, chars.u.l->v[i].u.s.n);
            return new_buf_str(c, &b);
        }
        jv items = jj_iterate(c, in);
        jv l = gen_of(jv_new_list(&c->arena, items.u.l->n)); /* reversed() iterator */
        for (size_t i = items.u.l->n; i-- > 0;) l.u.l->v[l.u.l->n++] = items.u.l->v[i];
        return l;
    }
    if ((IS("int") || IS("float") || IS("round") || IS("abs")) && in.t == JV_UNDEF)
        jj_fail_undef(c, in); /* Undefined.__int__ / __float__ fail */
    if (IS("int")) {
        int64_t def = arg_int(c, ARG(0, "default"), 0, "int");
        int64_t base = arg_int(c, ARG(1, "base"), 10, "int");
        if (in.t == JV_INT) return in;
        if (in.t == JV_BOOL) return jv_int(in.u.b);
        if (in.t == JV_FLOAT) {
            if (!isfinite(in.u.f) || fabs(in.u.f) > 9.2e18) return jv_int(def);
            return jv_int((int64_t)in.u.f);
        }
        if (in.t == JV_STR) {
            jv s = strip(in, NULL, 3);
            char *z = jj_strdup(&c->arena, s.u.s.p, s.u.s.n);
            char *end;
            if (base < 2 || base > 36) base = 10;
            long long v = strtoll(z, &end, (int)base);
            if (*z && *end == 0) return jv_int(v);
            double d = strtod(z, &end);
            if (*z && *end == 0 && isfinite(d) && fabs(d) < 9.2e18) return jv_int((int64_t)d);
        }
        return jv_int(def);
    }
    if (IS("float")) {
        const jv *dv = ARG(0, "default");
        double def = dv && (dv->t == JV_FLOAT || dv->t == JV_INT) ? (dv->t == JV_FLOAT ? dv->u.f : (double)dv->u.i) : 0.0;
        if (in.t == JV_FLOAT) return in;
        if (in.t == JV_INT) return jv_float((double)in.u.i);
        if (in.t == JV_BOOL) return jv_float(in.u.b);
        if (in.t == JV_STR) {
            jv s = strip(in, NULL, 3);
            char *z = jj_strdup(&c->arena, s.u.s.p, s.u.s.n);
            char *end;
            double d = strtod(z, &end);
            if (*z && *end == 0) return jv_float(d);
        }
        return jv_float(def);
    }
    if (IS("abs")) {
        if (in.t == JV_INT) {
            if (in.u.i == INT64_MIN) jj_fail(c, "integer overflow");
            return jv_int(in.u.i < 0 ? -in.u.i : in.u.i);
        }
        if (in.t == JV_BOOL) return jv_int(in.u.b);
        if (in.t == JV_FLOAT) return jv_float(fabs(in.u.f));
        jj_fail(c, "bad operand type for abs(): '%s'", jv_type_name(in));
    }
    if (IS("round")) {
        int64_t prec = arg_int(c, ARG(0, "precision"), 0, "round");
        const jv *method = ARG(1, "method");
        double x = in.t == JV_FLOAT ? in.u.f : in.t == JV_INT ? (double)in.u.i
                 : in.t == JV_BOOL ? in.u.b : NAN;
        if (isnan(x) && in.t != JV_FLOAT) jj_fail(c, "round: expected a number");
        bool common = !method || (!jv_is_str(*method, "floor") && !jv_is_str(*method, "ceil"));
        if (common && in.t != JV_FLOAT && prec >= 0) return jv_int(in.t == JV_INT ? in.u.i : in.u.b);
        if (prec < -20) prec = -20;
        if (prec > 20) prec = 20;
        double m = pow(10.0, (double)prec);
        double y = x * m;
        if (method && jv_is_str(*method, "floor")) y = floor(y);
        else if (method && jv_is_str(*method, "ceil")) y = ceil(y);
        else if (fabs(y) < 4503599627370496.0) y = nearbyint(y); /* half to even, like round() */
        else return jv_float(x); /* already integral at this precision */
        return jv_float(y / m);
    }
    if (IS("map")) {
        if (!jv_truthy(in)) return gen_of(jv_new_list(&c->arena, 0)); /* jinja2: `if value:` */
        jv items = jj_iterate(c, in);
        jv out = gen_of(jv_new_list(&c->arena, items.u.l->n));
        const jv *attr = ARG(99, "attribute");
        if (attr) {
            const jv *dv = ARG(99, "default");
            for (size_t i = 0; i < items.u.l->n; i++) {
                jv v = attr_path(c, items.u.l->v[i], *attr);
                if (v.t == JV_UNDEF && dv) v = *dv;
                out.u.l->v[out.u.l->n++] = v;
            }
            return out;
        }
        if (nargs < 1 || args[0].t != JV_STR) jj_fail(c, "map: expected a filter name or attribute=");
        char *fname = jj_strdup(&c->arena, args[0].u.s.p, args[0].u.s.n);
        for (size_t i = 0; i < items.u.l->n; i++)
            out.u.l->v[out.u.l->n++] =
                jj_filter(c, fname, items.u.l->v[i], args + 1, nargs - 1, kwn, kwv, nkw);
        return out;
    }
    if (IS("select")) return f_select(c, in, args, nargs, false, true);
    if (IS("reject")) return f_select(c, in, args, nargs, false, false);
    if (IS("selectattr")) return f_select(c, in, args, nargs, true, true);
    if (IS("rejectattr")) return f_select(c, in, args, nargs, true, false);
    if (IS("sort")) {
        bool rev = arg_bool(ARG(0, "reverse"), false);
        bool cs = arg_bool(ARG(1, "case_sensitive"), false);
        const jv *attr = ARG(2, "attribute");
        jv items = jj_iterate(c, in);
        jv *keys = jj_alloc(&c->arena, (items.u.l->n + 1) * sizeof(jv));
        for (size_t i = 0; i < items.u.l->n; i++) keys[i] = sort_key(c, items.u.l->v[i], attr, cs);
        return sorted(c, items, keys, rev);
    }
    if (IS("unique")) {
        bool cs = arg_bool(ARG(0, "case_sensitive"), false);
        const jv *attr = ARG(1, "attribute");
        jv items = jj_iterate(c, in);
        jv out = gen_of(jv_new_list(&c->arena, 0));
        jv seen = jv_new_list(&c->arena, 0);
        for (size_t i = 0; i < items.u.l->n; i++) {
            jv k = sort_key(c, items.u.l->v[i], attr, cs);
            jj_charge(c, seen.u.l->n);
            bool dup = false;
            for (size_t j = 0; j < seen.u.l->n && !dup; j++) dup = jv_equal(seen.u.l->v[j], k);
            if (dup) continue;
            jv_list_push(&c->arena, seen, k);
            jv_list_push(&c->arena, out, items.u.l->v[i]);
        }
        return out;
    }
    if (IS("min") || IS("max")) {
        bool cs = arg_bool(ARG(0, "case_sensitive"), false);
        const jv *attr = ARG(1, "attribute");
        jv items = jj_iterate(c, in);
        if (items.u.l->n == 0) return jv_undef(NULL);
        size_t best = 0;
        jv bk = sort_key(c, items.u.l->v[0], attr, cs);
        for (size_t i = 1; i < items.u.l->n; i++) {
            jv k = sort_key(c, items.u.l->v[i], attr, cs);
            int r = jj_compare(c, k, bk);
            if (IS("min") ? r < 0 : r > 0) {
                best = i;
                bk = k;
            }
        }
        return items.u.l->v[best];
    }
    if (IS("sum")) {
        const jv *attr = ARG(0, "attribute");
        const jv *start = ARG(1, "start");
        jv items = jj_iterate(c, in);
        jv acc = start ? *start : jv_int(0);
        for (size_t i = 0; i < items.u.l->n; i++) {
            jv v = items.u.l->v[i];
            if (attr) v = attr_path(c, v, *attr);
            jv pair[2] = {acc, v};
            (void)pair;
            if ((acc.t == JV_INT || acc.t == JV_BOOL) && (v.t == JV_INT || v.t == JV_BOOL)) {
                int64_t r;
                if (__builtin_add_overflow(acc.t == JV_INT ? acc.u.i : acc.u.b,
                                           v.t == JV_INT ? v.u.i : v.u.b, &r))
                    jj_fail(c, "integer overflow");
                acc = jv_int(r);
            } else if ((acc.t == JV_INT || acc.t == JV_FLOAT || acc.t == JV_BOOL) &&
                       (v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL)) {
                double x = acc.t == JV_FLOAT ? acc.u.f : acc.t == JV_INT ? (double)acc.u.i : acc.u.b;
                double y = v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b;
                acc = jv_float(x + y);
            } else {
                jj_fail(c, "sum: unsupported operand types '%s' and '%s'", jv_type_name(acc),
                        jv_type_name(v));
            }
        }
        return acc;
    }
    if (IS("batch")) {
        int64_t k = arg_int(c, ARG(0, "linecount"), 1, "batch");
        const jv *fill = ARG(1, "fill_with");
        if (k <= 0) jj_fail(c, "batch: count must be positive");
        jv items = jj_iterate(c, in);
        jv out = gen_of(jv_new_list(&c->arena, 0));
        jv cur = jv_new_list(&c->arena, 0);
        for (size_t i = 0; i < items.u.l->n; i++) {
            jv_list_push(&c->arena, cur, items.u.l->v[i]);
            if ((int64_t)cur.u.l->n == k) {
                jv_list_push(&c->arena, out, cur);
                cur = jv_new_list(&c->arena, 0);
            }
        }
        if (cur.u.l->n) {
            if (fill)
                while ((int64_t)cur.u.l->n < k) jv_list_push(&c->arena, cur, *fill);
            jv_list_push(&c->arena, out, cur);
        }
        return out;
    }
    if (IS("indent")) {
        if (in.t != JV_STR)
            jj_fail(c, "unsupported operand type(s) for +=: '%s' and 'str'", jv_type_name(in));
        jv s = in;
        const jv *w = ARG(0, "width");
        bool first = arg_bool(ARG(1, "first"), false);
        bool blank = arg_bool(ARG(2, "blank"), false);
        jv ind;
        if (w && w->t == JV_STR) {
            ind = *w;
        } else {
            int64_t n = arg_int(c, w, 4, "indent");
            if (n < 0) n = 0;
            if (n > 1024) n = 1024;
            char *sp = jj_alloc(&c->arena, (size_t)n + 1);
            memset(sp, ' ', (size_t)n);
            ind = jv_str(sp, (size_t)n);
        }
        /* jinja2: lines = (s + "\n").splitlines(); first line as is, later
         * lines indented unless empty (blank=False) */
        jj_buf b;
        jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
        if (first) jj_buf_put(&b, ind.u.s.p, ind.u.s.n);
        const char *p = s.u.s.p;
        size_t n = s.u.s.n, i = 0;
        bool first_line = true;
        for (;;) {
            size_t j = i;
            while (j < n && p[j] != '\n' && p[j] != '\r') j++;
            /* piece p[i..j) ends at a line break, or at the end (the added "\n") */
            if (!first_line) {
                jj_buf_put(&b, "\n", 1);
                if (blank || j > i) jj_buf_put(&b, ind.u.s.p, ind.u.s.n);
            }
            jj_buf_put(&b, p + i, j - i);
            first_line = false;
            if (j >= n) break;
            if (p[j] == '\r' && j + 1 < n && p[j + 1] == '\n') j++;
            i = j + 1;
        }
        return new_buf_str(c, &b);
    }
    if (IS("center")) {
        jv s = str_of(c, in);
        int64_t w = arg_int(c, ARG(0, "width"), 80, "center");
        int64_t len = (int64_t)jj_utf8_len(s.u.s.p, s.u.s.n);
        if (w > 100000) w = 100000;
        if (w <= len) return s;
        int64_t pad = w - len, left = pad / 2 + (pad & w & 1), right = pad - left;
        jj_buf b;
        jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
        for (int64_t i = 0; i < left; i++) jj_buf_put(&b, " ", 1);
        jj_buf_put(&b, s.u.s.p, s.u.s.n);
        for (int64_t i = 0; i < right; i++) jj_buf_put(&b, " ", 1);
        return new_buf_str(c, &b);
    }
    if (IS("wordcount")) {
        jv s = str_of(c, in);
        int64_t n = 0;
        bool in_word = false;
        int32_t cp;
        for (size_t i = 0; i < s.u.s.n;) {
            i = jj_utf8_next(s.u.s.p, s.u.s.n, i, &cp);
            bool w = is_alnum_cp(cp) || cp == '_';
            if (w && !in_word) n++;
            in_word = w;
        }
        return jv_int(n);
    }
    if (IS("escape") || IS("e") || IS("forceescape")) {
        if (!IS("forceescape")) return jj_escape(c, in);
        in.safe = false;
        return jj_escape(c, in);
    }
    if (IS("pprint")) {
        jj_buf b;
        jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
        jv_write_repr(&b, in);
        return new_buf_str(c, &b);
    }
    if (IS("format")) {
        jv s = need_str(c, in, "format");
        jv tup = jv_new_list(&c->arena, nargs);
        tup.tuple = true;
        for (size_t i = 0; i < nargs; i++) tup.u.l->v[i] = args[i];
        tup.u.l->n = nargs;
        return jj_percent_format(c, s, tup);
    }
    if (IS("attr")) {
        const jv *a = ARG(0, "name");
        if (!a || a->t != JV_STR) jj_fail(c, "attr: expected a name");
        char *nm = jj_strdup(&c->arena, a->u.s.p, a->u.s.n);
        return jj_getattr(c, in, nm, a->u.s.n);
    }
    if (IS("truncate")) {
        if (in.t != JV_STR) {
            /* jinja2 returns any value whose len() fits unchanged */
            int64_t lim = arg_int(c, ARG(0, "length"), 255, "truncate") + arg_int(c, ARG(3, "leeway"), 5, "truncate");
            bool sized = (in.t == JV_LIST && !in.gen) || in.t == JV_DICT;
            size_t n = in.t == JV_LIST ? in.u.l->n : in.t == JV_DICT ? in.u.d->n : 0;
            if (sized && (int64_t)n <= lim) return in;
            jj_fail(c, "truncate: expected a string, got '%s'", jv_type_name(in));
        }
        jv s = in;
        int64_t len = arg_int(c, ARG(0, "length"), 255, "truncate");
        bool killwords = arg_bool(ARG(1, "killwords"), false);
        const jv *endv = ARG(2, "end");
        jv end = endv ? str_of(c, *endv) : jv_cstr("...");
        int64_t leeway = arg_int(c, ARG(3, "leeway"), 5, "truncate");
        jv chars = jj_iterate(c, s);
        int64_t n = (int64_t)chars.u.l->n;
        if (n <= len + leeway) return s;
        int64_t keep = len - (int64_t)jj_utf8_len(end.u.s.p, end.u.s.n);
        if (keep < 0) keep = 0;
        jj_buf b;
        jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
        size_t bytes = 0;
        for (int64_t i = 0; i < keep; i++) bytes += chars.u.l->v[i].u.s.n;
        size_t cut = bytes;
        if (!killwords) {
            size_t k = cut;
            while (k > 0 && s.u.s.p[k - 1] != ' ') k--;
            if (k > 0) cut = k - 1;
        }
        jj_buf_put(&b, s.u.s.p, cut);
        jj_buf_put(&b, end.u.s.p, end.u.s.n);
        return new_buf_str(c, &b);
    }
    jj_fail(c, "unknown filter '%s'", name);
#undef IS
}

/* ---- tests ---------------------------------------------------------------- */
bool jj_test(jj_ctx *c, const char *name, jv v, const jv *args, size_t nargs) {
#define IS(s) (strcmp(name, s) == 0)
    if (nargs) jj_charge(c, (v.t == JV_STR ? v.u.s.n / 64 : 0) + (args[0].t == JV_LIST ? args[0].u.l->n : 0));
    if (IS("defined")) return v.t != JV_UNDEF;
    if (IS("undefined")) return v.t == JV_UNDEF;
    if (IS("none")) return v.t == JV_NONE;
    if (IS("string")) return v.t == JV_STR;
    if (IS("mapping")) return v.t == JV_DICT;
    if (IS("iterable"))
        return v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
    if (IS("sequence"))
        return (v.t == JV_LIST && !v.gen) || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
    if (IS("number")) return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
    if (IS("integer")) return v.t == JV_INT;
    if (IS("float")) return v.t == JV_FLOAT;
    if (IS("boolean")) return v.t == JV_BOOL;
    if (IS("true")) return v.t == JV_BOOL && v.u.b;
    if (IS("false")) return v.t == JV_BOOL && !v.u.b;
    if (IS("callable")) return v.t == JV_FUNC;
    if (IS("escaped")) return false;
    if (IS("lower") || IS("upper")) { /* str(value).islower() / isupper() */
        jv s = jj_to_str(c, v);
        bool any_cased = false, ok = true;
        int32_t cp;
        for (size_t i = 0; i < s.u.s.n && ok;) {
            i = jj_utf8_next(s.u.s.p, s.u.s.n, i, &cp);
            if (!is_cased(cp)) continue;
            any_cased = true;
            ok = IS("lower") ? to_lower(cp) == cp : to_upper(cp) == cp;
        }
        return ok && any_cased;
    }
    if ((IS("odd") || IS("even") || IS("divisibleby")) && v.t == JV_UNDEF) jj_fail_undef(c, v);
    if (IS("odd") || IS("even")) {
        if (v.t == JV_FLOAT) {
            double r = fmod(v.u.f, 2.0);
            return IS("odd") ? fabs(r) == 1.0 : r == 0.0;
        }
        if (v.t != JV_INT && v.t != JV_BOOL) jj_fail(c, "test '%s' needs a number", name);
        int64_t i = v.t == JV_INT ? v.u.i : v.u.b;
        return IS("odd") ? (i % 2 != 0) : (i % 2 == 0);
    }
    if (IS("divisibleby")) {
        if (nargs < 1) jj_fail(c, "divisibleby needs an argument");
        if (v.t == JV_FLOAT || args[0].t == JV_FLOAT) {
            double x = v.t == JV_FLOAT ? v.u.f : (double)arg_int(c, &v, 0, "divisibleby");
            double y = args[0].t == JV_FLOAT ? args[0].u.f : (double)arg_int(c, &args[0], 1, "divisibleby");
            if (y == 0.0) jj_fail(c, "float modulo");
            return fmod(x, y) == 0.0;
        }
        int64_t d = arg_int(c, &args[0], 1, "divisibleby");
        if (d == 0) jj_fail(c, "integer division or modulo by zero");
        int64_t i = arg_int(c, &v, 0, "divisibleby");
        return d == -1 || i % d == 0;
    }
    if (nargs < 1 && (IS("eq") || IS("equalto") || IS("==") || IS("ne") || IS("!=") || IS("in") ||
                      IS("lt") || IS("le") || IS("gt") || IS("ge") || IS("sameas") ||
                      IS("lessthan") || IS("greaterthan")))
        jj_fail(c, "test '%s' needs an argument", name);
    if (IS("eq") || IS("equalto") || IS("==")) return jv_equal(v, args[0]);
    if (IS("ne") || IS("!=")) return !jv_equal(v, args[0]);
    if (IS("sameas")) {
        if (v.t != args[0].t) return false;
        if (v.t == JV_NONE || v.t == JV_BOOL) return jv_equal(v, args[0]);
        if (v.t == JV_LIST) return v.u.l == args[0].u.l;
        if (v.t == JV_DICT || v.t == JV_NS) return v.u.d == args[0].u.d;
        return jv_equal(v, args[0]);
    }
    if (IS("lt") || IS("lessthan")) return jj_compare(c, v, args[0]) < 0;
    if (IS("le")) return jj_compare(c, v, args[0]) <= 0;
    if (IS("gt") || IS("greaterthan")) return jj_compare(c, v, args[0]) > 0;
    if (IS("ge")) return jj_compare(c, v, args[0]) >= 0;
    if (IS("in")) {
        jv seq = args[0];
        if (seq.t == JV_STR) {
            if (v.t != JV_STR) jj_fail(c, "'in <string>' requires string as left operand");
            return v.u.s.n == 0 || memmem(seq.u.s.p, seq.u.s.n, v.u.s.p, v.u.s.n) != NULL;
        }
        if (seq.t == JV_DICT || seq.t == JV_NS) return jv_dict_get(seq, v) != NULL;
        jv items = jj_iterate(c, seq);
        for (size_t i = 0; i < items.u.l->n; i++)
            if (jv_equal(v, items.u.l->v[i])) return true;
        return false;
    }
    jj_fail(c, "unknown test '%s'", name);
#undef IS
}

/* ---- methods -------------------------------------------------------------- */
static bool str_prefix_test(jj_ctx *c, jv s, jv pre, bool suffix) {
    if (pre.t == JV_LIST && pre.tuple) {
        for (size_t i = 0; i < pre.u.l->n; i++)
            if (str_prefix_test(c, s, pre.u.l->v[i], suffix)) return true;
        return false;
    }
    if (pre.t != JV_STR)
        jj_fail(c, "%s arg must be str or a tuple of str, not %s", suffix ? "endswith" : "startswith",
                jv_type_name(pre));
    if (pre.u.s.n > s.u.s.n) return false;
    const char *at = suffix ? s.u.s.p + s.u.s.n - pre.u.s.n : s.u.s.p;
    return memcmp(at, pre.u.s.p, pre.u.s.n) == 0;
}

/* code point index of a byte offset */
static int64_t cp_index(jv s, size_t byte_off) { return (int64_t)jj_utf8_len(s.u.s.p, byte_off); }

static bool str_method(jj_ctx *c, jv s, const char *name, const jv *args, size_t nargs,
                       const char **kwn, const jv *kwv, size_t nkw, jv *out) {
#define IS(x) (strcmp(name, x) == 0)
    jj_charge(c, s.u.s.n / 64);
    if (IS("startswith") || IS("endswith")) {
        const jv *p = ARG(0, NULL);
        if (!p) jj_fail(c, "%s needs an argument", name);
        *out = jv_bool(str_prefix_test(c, s, *p, IS("endswith")));
        return true;
    }
    if (IS("strip") || IS("lstrip") || IS("rstrip")) {
        *out = strip(s, ARG(0, "chars"), IS("strip") ? 3 : IS("lstrip") ? 1 : 2);
        return true;
    }
    if (IS("split") || IS("rsplit")) {
        *out = str_split(c, s, ARG(0, "sep"), arg_int(c, ARG(1, "maxsplit"), -1, name),
                         IS("rsplit"));
        return true;
    }
    if (IS("splitlines")) {
        jv l = jv_new_list(&c->arena, 0);
        size_t i = 0, n = s.u.s.n;
        const char *p = s.u.s.p;
        while (i < n) {
            size_t j = i;
            while (j < n && p[j] != '\n' && p[j] != '\r') j++;
            jv_list_push(&c->arena, l, jv_str(p + i, j - i));
            if (j < n && p[j] == '\r' && j + 1 < n && p[j + 1] == '\n') j++;
            i = j + 1;
        }
        *out = l;
        return true;
    }
    if (IS("replace")) {
        const jv *o = ARG(0, "old"), *nw = ARG(1, "new");
        if (!o || !nw || o->t != JV_STR || nw->t != JV_STR)
            jj_fail(c, "replace needs two string arguments");
        *out = str_replace(c, s, *o, *nw, arg_int(c, ARG(2, "count"), -1, "replace"));
        return true;
    }
    if (IS("upper") || IS("lower") || IS("title") || IS("capitalize") || IS("swapcase")) {
        *out = map_case(c, jv_str(s.u.s.p, s.u.s.n), IS("upper") ? CASE_UPPER : IS("lower") ? CASE_LOWER
                              : IS("title") ? CASE_TITLE_PY : IS("capitalize") ? CASE_CAPITALIZE
                              : CASE_SWAP);
        return true;
    }
    if (IS("find") || IS("rfind") || IS("index") || IS("rindex") || IS("count")) {
        const jv *sub = ARG(0, NULL);
        if (!sub || sub->t != JV_STR) jj_fail(c, "%s needs a string argument", name);
        if (IS("count")) {
            int64_t k = 0;
            if (sub->u.s.n == 0) {
                k = (int64_t)jj_utf8_len(s.u.s.p, s.u.s.n) + 1;
            } else {
                size_t i = 0;
                const char *h;
                while (i <= s.u.s.n && (h = memmem(s.u.s.p + i, s.u.s.n - i, sub->u.s.p, sub->u.s.n))) {
                    k++;
                    i = (size_t)(h - s.u.s.p) + sub->u.s.n;
                }
            }
            *out = jv_int(k);
            return true;
        }
        bool rev = name[0] == 'r';
        int64_t r = -1;
        if (!rev) {
            const char *h = memmem(s.u.s.p, s.u.s.n, sub->u.s.p, sub->u.s.n);
            if (sub->u.s.n == 0) h = s.u.s.p;
            if (h) r = cp_index(s, (size_t)(h - s.u.s.p));
        } else if (sub->u.s.n <= s.u.s.n) {
            for (size_t k = s.u.s.n - sub->u.s.n + 1; k-- > 0;)
                if (memcmp(s.u.s.p + k, sub->u.s.p, sub->u.s.n) == 0) {
                    r = cp_index(s, k);
                    break;
                }
        }
        if (r < 0 && (IS("index") || IS("rindex"))) jj_fail(c, "substring not found");
        *out = jv_int(r);
        return true;
    }
    if (IS("join")) {
        const jv *it = ARG(0, NULL);
        if (!it) jj_fail(c, "join needs an argument");
        jv items = jj_iterate(c, *it);
        jj_buf b;
        jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
        for (size_t i = 0; i < items.u.l->n; i++) {
            if (items.u.l->v[i].t != JV_STR)
                jj_fail(c, "sequence item %zu: expected str instance, %s found", i,
                        jv_type_name(items.u.l->v[i]));
            if (i) jj_buf_put(&b, s.u.s.p, s.u.s.n);
            jj_buf_put(&b, items.u.l->v[i].u.s.p, items.u.l->v[i].u.s.n);
        }
        *out = jj_buf_value(&b);
        return true;
    }
    if (IS("isdigit") || IS("isalpha") || IS("isalnum") || IS("isspace") || IS("isupper") ||
        IS("islower")) {
        bool all = s.u.s.n > 0, any_cased = false;
        int32_t cp;
        for (size_t i = 0; i < s.u.s.n && all;) {
            i = jj_utf8_next(s.u.s.p, s.u.s.n, i, &cp);
            if (IS("isdigit")) all = cp >= '0' && cp <= '9';
            else if (IS("isspace")) all = is_space_cp(cp);
            else if (IS("isalpha") || IS("isalnum")) {
                bool alpha = cp <= 0x10FFFF && utf8proc_category(cp) >= UTF8PROC_CATEGORY_LU &&
                             utf8proc_category(cp) <= UTF8PROC_CATEGORY_LO;
                all = IS("isalpha") ? alpha : is_alnum_cp(cp);
            } else {
                if (is_cased(cp)) {
                    any_cased = true;
                    if (IS("isupper")) all = to_upper(cp) == cp;
                    else all = to_lower(cp) == cp;
                }
            }
        }
        if (IS("isupper") || IS("islower")) all = all && any_cased;
        *out = jv_bool(all);
        return true;
    }
    if (IS("format")) {
        /* "{}" / "{0}" / "{name}" replacement fields with str() of the argument */
        jj_buf b;
        jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
        size_t auto_i = 0;
        const char *p = s.u.s.p;
        size_t n = s.u.s.n;
        for (size_t i = 0; i < n; i++) {
            if (p[i] == '{' && i + 1 < n && p[i + 1] == '{') {
                jj_buf_put(&b, "{", 1);
                i++;
                continue;
            }
            if (p[i] == '}' && i + 1 < n && p[i + 1] == '}') {
                jj_buf_put(&b, "}", 1);
                i++;
                continue;
            }
            if (p[i] != '{') {
                jj_buf_put(&b, p + i, 1);
                continue;
            }
            size_t j = i + 1;
            while (j < n && p[j] != '}') j++;
            if (j >= n) jj_fail(c, "format: single '{' encountered");
            const jv *a = NULL;
            if (j == i + 1) {
                a = auto_i < nargs ? &args[auto_i] : NULL;
                auto_i++;
            } else if (p[i + 1] >= '0' && p[i + 1] <= '9') {
                size_t k = (size_t)strtoul(p + i + 1, NULL, 10);
                a = k < nargs ? &args[k] : NULL;
            } else {
                for (size_t k = 0; k < nkw && !a; k++)
                    if (strlen(kwn[k]) == j - i - 1 && memcmp(kwn[k], p + i + 1, j - i - 1) == 0)
                        a = &kwv[k];
            }
            if (!a) jj_fail(c, "format: missing argument for replacement field");
            jv_write_str(&b, *a);
            i = j;
        }
        *out = jj_buf_value(&b);
        return true;
    }
    return false;
#undef IS
}

static bool list_method(jj_ctx *c, jv l, const char *name, const jv *args, size_t nargs,
                        const char **kwn, const jv *kwv, size_t nkw, jv *out) {
#define IS(x) (strcmp(name, x) == 0)
    jj_list *L = l.u.l;
    if (l.gen) return false;
    bool mut = IS("append") || IS("extend") || IS("insert") || IS("pop") || IS("remove") ||
               IS("clear") || IS("reverse") || IS("sort");
    if (mut && l.tuple) return false;
    if (IS("append")) {
        if (nargs != 1) jj_fail(c, "append takes exactly one argument");
        if (L->n >= JJ_MAX_LIST) jj_fail_st(c, PAGODA_ERR_LIMIT, "list too long");
        jv_list_push(&c->arena, l, args[0]);
        *out = jv_none();
        return true;
    }
    if (IS("extend")) {
        if (nargs != 1) jj_fail(c, "extend takes exactly one argument");
        jv items = list_of(c, args[0]);
        if (L->n + items.u.l->n >= JJ_MAX_LIST) jj_fail_st(c, PAGODA_ERR_LIMIT, "list too long");
        for (size_t i = 0; i < items.u.l->n; i++) jv_list_push(&c->arena, l, items.u.l->v[i]);
        *out = jv_none();
        return true;
    }
    if (IS("pop")) {
        if (L->n == 0) jj_fail(c, "pop from empty list");
        int64_t i = arg_int(c, ARG(0, NULL), -1, "pop");
        if (i < 0) i += (int64_t)L->n;
        if (i < 0 || i >= (int64_t)L->n) jj_fail(c, "pop index out of range");
        *out = L->v[i];
        memmove(L->v + i, L->v + i + 1, (L->n - (size_t)i - 1) * sizeof(jv));
        L->n--;
        return true;
    }
    if (IS("insert")) {
        if (nargs != 2) jj_fail(c, "insert takes exactly two arguments");
        int64_t i = arg_int(c, &args[0], 0, "insert");
        if (i < 0) i += (int64_t)L->n;
        if (i < 0) i = 0;
        if (i > (int64_t)L->n) i = (int64_t)L->n;
        jv_list_push(&c->arena, l, jv_none());
        memmove(L->v + i + 1, L->v + i, (L->n - (size_t)i - 1) * sizeof(jv));
        L->v[i] = args[1];
        *out = jv_none();
        return true;
    }
    if (IS("remove") || IS("index") || IS("count")) {
        if (nargs != 1) jj_fail(c, "%s takes exactly one argument", name);
        jj_charge(c, L->n);
        int64_t k = 0, first = -1;
        for (size_t i = 0; i < L->n; i++)
            if (jv_equal(L->v[i], args[0])) {
                if (first < 0) first = (int64_t)i;
                k++;
            }
        if (IS("count")) {
            *out = jv_int(k);
            return true;
        }
        if (first < 0) jj_fail(c, "list.%s(x): x not in list", name);
        if (IS("index")) {
            *out = jv_int(first);
            return true;
        }
        memmove(L->v + first, L->v + first + 1, (L->n - (size_t)first - 1) * sizeof(jv));
        L->n--;
        *out = jv_none();
        return true;
    }
    if (IS("clear")) {
        L->n = 0;
        *out = jv_none();
        return true;
    }
    if (IS("reverse")) {
        for (size_t i = 0; i < L->n / 2; i++) {
            jv t = L->v[i];
            L->v[i] = L->v[L->n - 1 - i];
            L->v[L->n - 1 - i] = t;
        }
        *out = jv_none();
        return true;
    }
    if (IS("copy")) {
        *out = list_of(c, l);
        return true;
    }
    return false;
#undef IS
}

static bool dict_method(jj_ctx *c, jv d, const char *name, const jv *args, size_t nargs,
                        const char **kwn, const jv *kwv, size_t nkw, jv *out) {
#define IS(x) (strcmp(name, x) == 0)
    jj_dict *D = d.u.d;
    if (IS("get")) {
        const jv *k = ARG(0, NULL);
        if (!k) jj_fail(c, "get expected at least 1 argument");
        jv *v = jv_dict_get(d, *k);
        const jv *def = ARG(1, NULL);
        *out = v ? *v : def ? *def : jv_none();
        return true;
    }
    if (IS("items")) { /* a dict_items view: has a length, unlike the filter's generator */
        *out = jj_filter(c, "items", d, NULL, 0, NULL, NULL, 0);
        out->gen = false;
        return true;
    }
    if (IS("keys") || IS("values")) {
        jv l = jv_new_list(&c->arena, D->n);
        for (size_t i = 0; i < D->n; i++) l.u.l->v[i] = IS("keys") ? D->k[i] : D->v[i];
        l.u.l->n = D->n;
        *out = l;
        return true;
    }
    if (IS("pop")) {
        const jv *k = ARG(0, NULL);
        if (!k) jj_fail(c, "pop expected at least 1 argument");
        for (size_t i = 0; i < D->n; i++)
            if (jv_equal(D->k[i], *k)) {
                *out = D->v[i];
                memmove(D->k + i, D->k + i + 1, (D->n - i - 1) * sizeof(jv));
                memmove(D->v + i, D->v + i + 1, (D->n - i - 1) * sizeof(jv));
                D->n--;
                return true;
            }
        const jv *def = ARG(1, NULL);
        if (!def) jj_fail(c, "KeyError in dict.pop");
        *out = *def;
        return true;
    }
    if (IS("setdefault")) {
        const jv *k = ARG(0, NULL);
        if (!k) jj_fail(c, "setdefault expected at least 1 argument");
        jv *v = jv_dict_get(d, *k);
        if (!v) {
            const jv *def = ARG(1, NULL);
            jv_dict_set(&c->arena, d, *k, def ? *def : jv_none());
            v = jv_dict_get(d, *k);
        }
        *out = *v;
        return true;
    }
    if (IS("update")) {
        if (nargs >= 1) {
            if (args[0].t != JV_DICT) jj_fail(c, "update expects a mapping");
            for (size_t i = 0; i < args[0].u.d->n; i++)
                jv_dict_set(&c->arena, d, args[0].u.d->k[i], args[0].u.d->v[i]);
        }
        for (size_t k = 0; k < nkw; k++) jv_dict_set(&c->arena, d, jv_cstr(kwn[k]), kwv[k]);
        *out = jv_none();
        return true;
    }
    if (IS("copy")) {
        jv n = jv_new_dict(&c->arena, D->n);
        for (size_t i = 0; i < D->n; i++) jv_dict_set(&c->arena, n, D->k[i], D->v[i]);
        *out = n;
        return true;
    }
    return false;
#undef IS
}

/* markupsafe wraps str methods: string arguments are escaped and string
 * results (and list items of split) are Markup again */
static bool markup_method(jj_ctx *c, jv obj, const char *name, const jv *args, size_t nargs,
                          const char **kwn, const jv *kwv, size_t nkw, jv *out) {
    jv *ea = jj_alloc(&c->arena, (nargs + 1) * sizeof(jv));
    jv *ek = jj_alloc(&c->arena, (nkw + 1) * sizeof(jv));
    bool esc = !strcmp(name, "replace") || !strcmp(name, "format") || !strcmp(name, "strip") ||
               !strcmp(name, "lstrip") || !strcmp(name, "rstrip");
    for (size_t i = 0; i < nargs; i++) ea[i] = esc && args[i].t == JV_STR ? jj_escape(c, args[i]) : args[i];
    for (size_t i = 0; i < nkw; i++) ek[i] = esc && kwv[i].t == JV_STR ? jj_escape(c, kwv[i]) : kwv[i];
    if (!strcmp(name, "join") && nargs == 1) { /* Markup.join escapes the items */
        jv items = list_of(c, args[0]);
        for (size_t i = 0; i < items.u.l->n; i++)
            if (items.u.l->v[i].t == JV_STR) items.u.l->v[i] = jj_escape(c, items.u.l->v[i]);
        ea[0] = items;
    }
    if (!str_method(c, obj, name, ea, nargs, kwn, ek, nkw, out)) return false;
    if (out->t == JV_STR) out->safe = true;
    if (out->t == JV_LIST)
        for (size_t i = 0; i < out->u.l->n; i++)
            if (out->u.l->v[i].t == JV_STR) out->u.l->v[i].safe = true;
    return true;
}

bool jj_method(jj_ctx *c, jv obj, const char *name, const jv *args, size_t nargs,
               const char **kwn, const jv *kwv, size_t nkw, jv *out) {
    switch (obj.t) {
    case JV_STR:
        if (obj.safe) return markup_method(c, obj, name, args, nargs, kwn, kwv, nkw, out);
        return str_method(c, obj, name, args, nargs, kwn, kwv, nkw, out);
    case JV_LIST: return list_method(c, obj, name, args, nargs, kwn, kwv, nkw, out);
    case JV_DICT: return dict_method(c, obj, name, args, nargs, kwn, kwv, nkw, out);
    default: return false;
    }
}

/* ---- globals -------------------------------------------------------------- */
static jv g_range(jj_ctx *c, jv self, const jv *args, size_t nargs, const char **kwn,
                  const jv *kwv, size_t nkw) {
    (void)self, (void)kwn, (void)kwv, (void)nkw;
    int64_t start = 0, stop, st = 1;
    if (nargs == 1) {
        stop = arg_int(c, &args[0], 0, "range");
    } else if (nargs == 2 || nargs == 3) {
        start = arg_int(c, &args[0], 0, "range");
        stop = arg_int(c, &args[1], 0, "range");
        if (nargs == 3) st = arg_int(c, &args[2], 1, "range");
    } else {
        jj_fail(c, "range expected 1 to 3 arguments, got %zu", nargs);
    }
    if (st == 0) jj_fail(c, "range() arg 3 must not be zero");
    double count = st > 0 ? ceil(((double)stop - (double)start) / (double)st)
                          : ceil(((double)start - (double)stop) / (double)-st);
    if (count < 0) count = 0;
    if (count > MAX_RANGE)
        jj_fail_st(c, PAGODA_ERR_LIMIT, "range too big (%.0f items; the limit is %d)", count, MAX_RANGE);
    jv l = jv_new_list(&c->arena, (size_t)count);
    for (int64_t i = 0; i < (int64_t)count; i++) l.u.l->v[i] = jv_int(start + i * st);
    l.u.l->n = (size_t)count;
    return l;
}

static jv g_namespace(jj_ctx *c, jv self, const jv *args, size_t nargs, const char **kwn,
                      const jv *kwv, size_t nkw) {
    (void)self;
    jv ns = jv_new_dict(&c->arena, nkw);
    ns.t = JV_NS;
    for (size_t i = 0; i < nargs; i++) {
        if (args[i].t != JV_DICT && args[i].t != JV_NS)
            jj_fail(c, "namespace() positional arguments must be mappings");
        for (size_t k = 0; k < args[i].u.d->n; k++)
            jv_dict_set(&c->arena, ns, args[i].u.d->k[k], args[i].u.d->v[k]);
    }
    for (size_t k = 0; k < nkw; k++) jv_dict_set(&c->arena, ns, jv_cstr(kwn[k]), kwv[k]);
    return ns;
}

static jv g_dict(jj_ctx *c, jv self, const jv *args, size_t nargs, const char **kwn,
                 const jv *kwv, size_t nkw) {
    jv d = g_namespace(c, self, args, nargs, kwn, kwv, nkw);
    d.t = JV_DICT;
    return d;
}

static jv g_raise(jj_ctx *c, jv self, const jv *args, size_t nargs, const char **kwn,
                  const jv *kwv, size_t nkw) {
    (void)self, (void)kwn, (void)kwv, (void)nkw;
    if (nargs < 1) jj_fail(c, "raise_exception called");
    jv m = jj_to_str(c, args[0]);
    jj_fail(c, "%.*s", (int)(m.u.s.n > 600 ? 600 : m.u.s.n), m.u.s.p);
}

static jv g_strftime(jj_ctx *c, jv self, const jv *args, size_t nargs, const char **kwn,
                     const jv *kwv, size_t nkw) {
    (void)self, (void)kwn, (void)kwv, (void)nkw;
    if (nargs < 1 || args[0].t != JV_STR) jj_fail(c, "strftime_now expects a format string");
    struct tm tm = {0};
    tm.tm_year = c->opts.year - 1900;
    tm.tm_mon = c->opts.month - 1;
    tm.tm_mday = c->opts.day;
    tm.tm_hour = c->opts.hour;
    tm.tm_min = c->opts.min;
    tm.tm_sec = c->opts.sec;
    tm.tm_wday = c->opts.wday;
    tm.tm_yday = c->opts.yday;
    char *fmt = jj_strdup(&c->arena, args[0].u.s.p, args[0].u.s.n > 256 ? 256 : args[0].u.s.n);
    char out[1024];
    size_t n = strftime(out, sizeof out, fmt, &tm);
    return jv_str(jj_strdup(&c->arena, out, n), n);
}

static jv g_joiner_call(jj_ctx *c, jv self, const jv *args, size_t nargs, const char **kwn,
                        const jv *kwv, size_t nkw) {
    (void)c, (void)args, (void)nargs, (void)kwn, (void)kwv, (void)nkw;
    jv *used = jv_dict_gets(self, "used");
    jv *sep = jv_dict_gets(self, "sep");
    if (!used->u.b) {
        used->u.b = true;
        return jv_str("", 0);
    }
    return *sep;
}

static jv g_joiner(jj_ctx *c, jv self, const jv *args, size_t nargs, const char **kwn,
                   const jv *kwv, size_t nkw) {
    (void)self;
    const jv *sep = ARG(0, "sep");
    jv st = jv_new_dict(&c->arena, 2);
    jv_dict_set(&c->arena, st, jv_cstr("used"), jv_bool(false));
    jv_dict_set(&c->arena, st, jv_cstr("sep"), sep ? *sep : jv_cstr(", "));
    return jj_make_builtin(c, "joiner", g_joiner_call, st);
}

void jj_install_globals(jj_ctx *c, jj_frame *f) {
    jv_dict_set(&c->arena, f->vars, jv_cstr("range"), jj_make_builtin(c, "range", g_range, jv_none()));
    jv_dict_set(&c->arena, f->vars, jv_cstr("namespace"),
                jj_make_builtin(c, "namespace", g_namespace, jv_none()));
    jv_dict_set(&c->arena, f->vars, jv_cstr("dict"), jj_make_builtin(c, "dict", g_dict, jv_none()));
    jv_dict_set(&c->arena, f->vars, jv_cstr("raise_exception"),
                jj_make_builtin(c, "raise_exception", g_raise, jv_none()));
    jv_dict_set(&c->arena, f->vars, jv_cstr("strftime_now"),
                jj_make_builtin(c, "strftime_now", g_strftime, jv_none()));
    jv_dict_set(&c->arena, f->vars, jv_cstr("joiner"),
                jj_make_builtin(c, "joiner", g_joiner, jv_none()));
}
