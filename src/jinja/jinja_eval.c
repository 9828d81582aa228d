/* Jinja evaluator: walks the AST of jinja_parse.c over the values of
 * jinja_value.c. Scoping follows jinja2: a for loop and a macro call open a
 * frame (assignments inside do not leak out, hence namespace()), if blocks
 * do not; a macro sees the frame it was defined in. Arithmetic follows
 * Python (int64 with overflow checks instead of big integers). */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

void jj_fail(jj_ctx *c, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = pg_error(PAGODA_ERR_FORMAT, "line %d: %s", c->line, msg);
    longjmp(c->jmp, 1);
}

void jj_fail_st(jj_ctx *c, pagoda_status st, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = pg_error(st, "line %d: %s", c->line, msg);
    longjmp(c->jmp, 1);
}

void jj_fail_undef(jj_ctx *c, jv u) {
    if (u.u.s.p) jj_fail(c, "'%.*s' is undefined", (int)(u.u.s.n > 80 ? 80 : u.u.s.n), u.u.s.p);
    jj_fail(c, "undefined value used");
}

jv jj_make_builtin(jj_ctx *c, const char *name, jj_builtin_fn fn, jv self) {
    jj_func *f = jj_alloc(&c->arena, sizeof *f);
    memset(f, 0, sizeof *f);
    f->name = name;
    f->fn = fn;
    f->self = self;
    return (jv){.t = JV_FUNC, .u.fn = f};
}

/* ---- context -------------------------------------------------------------- */
static jj_frame *new_frame(jj_ctx *c, jj_frame *parent) {
    jj_frame *f = jj_alloc(&c->arena, sizeof *f);
    f->parent = parent;
    f->vars = jv_new_dict(&c->arena, 4);
    return f;
}

jj_ctx *jj_ctx_new(const jj_render_opts *opts) {
    jj_ctx *volatile c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->arena.limit = JJ_MAX_ARENA;
    c->arena.jmp = &c->jmp;
    c->arena.st = &c->st;
    c->arena.line = &c->line;
    if (opts) c->opts = *opts;
    if (setjmp(c->jmp)) {
        jj_arena_free(&c->arena);
        free(c);
        return NULL;
    }
    jj_frame *builtins = new_frame(c, NULL);
    jj_install_globals(c, builtins);
    c->globals = new_frame(c, builtins);
    return c;
}

void jj_ctx_free(jj_ctx *c) {
    if (!c) return;
    jj_arena_free(&c->arena);
    free(c);
}

jj_arena *jj_ctx_arena(jj_ctx *c) { return &c->arena; }

pagoda_status jj_ctx_set(jj_ctx *c, const char *name, jv v) {
    if (setjmp(c->jmp)) return c->st;
    jv_dict_set(&c->arena, c->globals->vars, jv_cstr(jj_strdup(&c->arena, name, strlen(name))), v);
    return PAGODA_OK;
}

static jv *lookup(jj_frame *f, const char *name) {
    for (; f; f = f->parent) {
        jv *v = jv_dict_gets(f->vars, name);
        if (v) return v;
    }
    return NULL;
}

static void set_var(jj_ctx *c, jj_frame *f, const char *name, jv v) {
    jv *e = jv_dict_gets(f->vars, name);
    if (e) *e = v;
    else jv_dict_set(&c->arena, f->vars, jv_cstr(name), v);
}

/* ---- helpers -------------------------------------------------------------- */
void jj_charge(jj_ctx *c, size_t units) {
    c->steps += units;
    if (c->steps > JJ_MAX_STEPS)
        jj_fail_st(c, PAGODA_ERR_LIMIT, "template evaluation step limit (%llu) exceeded",
                   (unsigned long long)JJ_MAX_STEPS);
}

static size_t size_of(jv v) {
    switch (v.t) {
    case JV_STR: return v.u.s.n / 64;
    case JV_LIST: return v.u.l->n;
    case JV_DICT:
    case JV_NS: return v.u.d->n;
    default: return 0;
    }
}


jv jj_repr(jj_ctx *c, jv v) {
    jj_buf b;
    jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
    jv_write_repr(&b, v);
    return jj_buf_value(&b);
}

jv jj_to_str(jj_ctx *c, jv v) {
    if (v.t == JV_STR) return v;
    jj_buf b;
    jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
    jv_write_str(&b, v);
    return jj_buf_value(&b);
}

jv jj_iterate(jj_ctx *c, jv v) {
    jj_charge(c, size_of(v) / 4);
    switch (v.t) {
    case JV_LIST: return v;
    case JV_UNDEF: return jv_new_list(&c->arena, 0);
    case JV_DICT: {
        jv l = jv_new_list(&c->arena, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) l.u.l->v[i] = v.u.d->k[i];
        l.u.l->n = v.u.d->n;
        return l;
    }
    case JV_STR: {
        jv l = jv_new_list(&c->arena, v.u.s.n);
        int32_t cp;
        for (size_t i = 0; i < v.u.s.n;) {
            size_t j = jj_utf8_next(v.u.s.p, v.u.s.n, i, &cp);
            l.u.l->v[l.u.l->n++] = jv_str(v.u.s.p + i, j - i);
            i = j;
        }
        return l;
    }
    default: jj_fail(c, "'%s' object is not iterable", jv_type_name(v));
    }
}

static bool is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num_f(jv v) {
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t num_i(jv v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }

static int compare_depth(jj_ctx *c, jv a, jv b, int depth);
int jj_compare(jj_ctx *c, jv a, jv b) { return compare_depth(c, a, b, 0); }

static int compare_depth(jj_ctx *c, jv a, jv b, int depth) {
    if (depth > JJ_MAX_DEPTH) jj_fail(c, "maximum recursion depth exceeded in comparison");
    if (a.t == JV_UNDEF) jj_fail_undef(c, a);
    if (b.t == JV_UNDEF) jj_fail_undef(c, b);
    if (is_num(a) && is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = num_i(a), y = num_i(b);
            return (x > y) - (x < y);
        }
        double x = num_f(a), y = num_f(b);
        return (x > y) - (x < y);
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int r = memcmp(a.u.s.p, b.u.s.p, m);
        if (r) return r < 0 ? -1 : 1;
        return (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
    }
    if (a.t == JV_LIST && b.t == JV_LIST) {
        size_t m = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        jj_charge(c, m);
        for (size_t i = 0; i < m; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return compare_depth(c, a.u.l->v[i], b.u.l->v[i], depth + 1);
        }
        return (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
    }
    jj_fail(c, "comparison not supported between instances of '%s' and '%s'", jv_type_name(a),
            jv_type_name(b));
}

jv jj_getattr(jj_ctx *c, jv obj, const char *name, size_t n) {
    (void)n;
    switch (obj.t) {
    case JV_UNDEF: jj_fail_undef(c, obj);
    case JV_DICT:
    case JV_NS: {
        jv *v = jv_dict_gets(obj, name);
        if (v) return *v;
        break;
    }
    default: break;
    }
    return jv_undef(name);
}

jv jj_getitem(jj_ctx *c, jv obj, jv key) {
    switch (obj.t) {
    case JV_UNDEF: jj_fail_undef(c, obj);
    case JV_DICT:
    case JV_NS: {
        jv *v = jv_dict_get(obj, key);
        if (v) return *v;
        break;
    }
    case JV_LIST:
        if (obj.gen) break;
        if (key.t == JV_INT || key.t == JV_BOOL) {
            int64_t i = num_i(key), n = (int64_t)obj.u.l->n;
            if (i < 0) i += n;
            if (i >= 0 && i < n) return obj.u.l->v[i];
        }
        break;
    case JV_STR:
        if (key.t == JV_INT || key.t == JV_BOOL) {
            jj_charge(c, obj.u.s.n / 64);
            int64_t i = num_i(key);
            int64_t n = (int64_t)jj_utf8_len(obj.u.s.p, obj.u.s.n);
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                size_t pos = 0;
                int32_t cp;
                for (int64_t k = 0; k < i; k++) pos = jj_utf8_next(obj.u.s.p, obj.u.s.n, pos, &cp);
                size_t e = jj_utf8_next(obj.u.s.p, obj.u.s.n, pos, &cp);
                jv r = jv_str(obj.u.s.p + pos, e - pos);
                r.safe = obj.safe;
                return r;
            }
        }
        break;
    default: break;
    }
    if (key.t == JV_STR) return jv_undef(jj_strdup(&c->arena, key.u.s.p, key.u.s.n));
    return jv_undef(NULL);
}

/* ---- evaluation ----------------------------------------------------------- */
static jv eval(jj_ctx *c, jj_frame *f, const jj_node *n);
static void exec_body(jj_ctx *c, jj_frame *f, jj_node *const *body, size_t n);

static void step(jj_ctx *c, const jj_node *n) {
    c->line = n->line;
    if (++c->steps > JJ_MAX_STEPS)
        jj_fail_st(c, PAGODA_ERR_LIMIT, "template evaluation step limit (%llu) exceeded",
                   (unsigned long long)JJ_MAX_STEPS);
}

static void need_def(jj_ctx *c, jv v) {
    if (v.t == JV_UNDEF) jj_fail_undef(c, v);
}

static __attribute__((noreturn)) void bad_operands(jj_ctx *c, const char *op, jv a, jv b) {
    jj_fail(c, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a),
            jv_type_name(b));
}

static jv repeat_seq(jj_ctx *c, jv s, int64_t k) {
    if (k < 0) k = 0;
    if (s.t == JV_STR) {
        if (s.u.s.n && (uint64_t)k > JJ_MAX_OUTPUT / s.u.s.n)
            jj_fail_st(c, PAGODA_ERR_LIMIT, "string repetition too large");
        jj_buf b;
        jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
        for (int64_t i = 0; i < k; i++) jj_buf_put(&b, s.u.s.p, s.u.s.n);
        jv r = jj_buf_value(&b);
        r.safe = s.safe;
        return r;
    }
    size_t n = s.u.l->n;
    if (n && (uint64_t)k > JJ_MAX_LIST / n)
        jj_fail_st(c, PAGODA_ERR_LIMIT, "list repetition too large (limit %d items)", JJ_MAX_LIST);
    jv l = jv_new_list(&c->arena, n * (size_t)k);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < n; j++) l.u.l->v[l.u.l->n++] = s.u.l->v[j];
    l.tuple = s.tuple;
    return l;
}

/* Python's str % args for %s %r %d %i %f %% (enough for templates) */
/* Python's printf-style `fmt % args`: %[(key)][flags][width][.prec]conv with
 * conv in s r a d i u f F e E g G x X o c %. Widths and precisions are
 * bounded (<= 1000). */
jv jj_percent_format(jj_ctx *c, jv fmt, jv args) {
    jj_buf b;
    jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
    size_t ai = 0;
    bool tuple = args.t == JV_LIST && args.tuple;
    const jv *av = tuple ? args.u.l->v : &args;
    size_t an = tuple ? args.u.l->n : 1;
    bool used_key = false;
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') {
            size_t j = i;
            while (j < n && p[j] != '%') j++;
            jj_buf_put(&b, p + i, j - i);
            i = j - 1;
            continue;
        }
        if (++i >= n) jj_fail(c, "incomplete format");
        jv a = jv_undef(NULL);
        bool have_arg = false;
        if (p[i] == '(') { /* %(key)s */
            size_t j = i + 1;
            int depth = 1;
            while (j < n && depth) {
                if (p[j] == '(') depth++;
                if (p[j] == ')') depth--;
                j++;
            }
            if (depth) jj_fail(c, "incomplete format key");
            if (args.t != JV_DICT) jj_fail(c, "format requires a mapping");
            jv *v = jv_dict_get(args, jv_str(p + i + 1, j - i - 2));
            if (!v) jj_fail(c, "format key '%.*s' not found", (int)(j - i - 2), p + i + 1);
            a = *v;
            have_arg = used_key = true;
            i = j;
            if (i >= n) jj_fail(c, "incomplete format");
        }
        char flags[8];
        int nf = 0;
        while (i < n && strchr("-+ #0", p[i]) && nf < 6) flags[nf++] = p[i++];
        flags[nf] = 0;
        int width = -1, prec = -1;
        if (i < n && p[i] == '*') jj_fail(c, "'*' width is not supported");
        if (i < n && p[i] >= '0' && p[i] <= '9') {
            width = 0;
            while (i < n && p[i] >= '0' && p[i] <= '9' && width <= 1000) width = width * 10 + (p[i++] - '0');
        }
        if (i < n && p[i] == '.') {
            i++;
            prec = 0;
            while (i < n && p[i] >= '0' && p[i] <= '9' && prec <= 1000) prec = prec * 10 + (p[i++] - '0');
        }
        if (width > 1000 || prec > 1000) jj_fail(c, "format width or precision too large");
        while (i < n && (p[i] == 'l' || p[i] == 'h' || p[i] == 'L')) i++;
        if (i >= n) jj_fail(c, "incomplete format");
        char t = p[i];
        if (t == '%') {
            jj_buf_put(&b, "%", 1);
            continue;
        }
        if (!have_arg) {
            if (ai >= an) jj_fail(c, "not enough arguments for format string");
            a = av[ai++];
        }
        char spec[48];
        switch (t) {
        case 's':
        case 'r':
        case 'a': {
            jv sv = t == 's' ? jj_to_str(c, a) : jj_repr(c, a);
            if (fmt.safe) sv = jj_escape(c, sv);
            size_t len = sv.u.s.n;
            if (prec >= 0) { /* precision counts code points */
                size_t k = 0, pos = 0;
                int32_t cp;
                while (pos < len && k < (size_t)prec) {
                    pos = jj_utf8_next(sv.u.s.p, len, pos, &cp);
                    k++;
                }
                len = pos;
            }
            size_t cps = jj_utf8_len(sv.u.s.p, len);
            bool left = strchr(flags, '-') != NULL;
            if (!left)
                for (size_t k = cps; (int)k < width; k++) jj_buf_put(&b, " ", 1);
            jj_buf_put(&b, sv.u.s.p, len);
            if (left)
                for (size_t k = cps; (int)k < width; k++) jj_buf_put(&b, " ", 1);
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o':
        case 'c': {
            if (t == 'c' && a.t == JV_STR && jj_utf8_len(a.u.s.p, a.u.s.n) == 1) {
                jj_buf_put(&b, a.u.s.p, a.u.s.n);
                break;
            }
            if (!is_num(a)) jj_fail(c, "%%%c format: a number is required, not %s", t, jv_type_name(a));
            if (a.t == JV_FLOAT && (t == 'x' || t == 'X' || t == 'o' || t == 'c'))
                jj_fail(c, "%%%c format: an integer is required, not float", t);
            long long v = a.t == JV_FLOAT ? (long long)a.u.f : (long long)num_i(a);
            if (t == 'c') {
                if (v < 0 || v > 0x10FFFF) jj_fail(c, "%%c arg not in range(0x110000)");
                char u[5];
                size_t un = 0;
                uint32_t cp = (uint32_t)v;
                if (cp < 0x80) u[un++] = (char)cp;
                else if (cp < 0x800) { u[un++] = (char)(0xC0 | (cp >> 6)); u[un++] = (char)(0x80 | (cp & 0x3F)); }
                else if (cp < 0x10000) { u[un++] = (char)(0xE0 | (cp >> 12)); u[un++] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[un++] = (char)(0x80 | (cp & 0x3F)); }
                else { u[un++] = (char)(0xF0 | (cp >> 18)); u[un++] = (char)(0x80 | ((cp >> 12) & 0x3F)); u[un++] = (char)(0x80 | ((cp >> 6) & 0x3F)); u[un++] = (char)(0x80 | (cp & 0x3F)); }
                jj_buf_put(&b, u, un);
                break;
            }
            char conv = t == 'i' || t == 'u' ? 'd' : t;
            /* Python's %#o prints 0o; C prints 0 */
            bool alt_o = conv == 'o' && strchr(flags, '#');
            char fl2[8];
            int k2 = 0;
            for (int k = 0; flags[k]; k++)
                if (!(alt_o && flags[k] == '#')) fl2[k2++] = flags[k];
            fl2[k2] = 0;
            if (alt_o) jj_buf_puts(&b, v < 0 ? "-0o" : "0o");
            if (alt_o && v < 0) v = -v;
            if (prec >= 0 && width >= 0) snprintf(spec, sizeof spec, "%%%s%d.%dll%c", fl2, width, prec, conv);
            else if (prec >= 0) snprintf(spec, sizeof spec, "%%%s.%dll%c", fl2, prec, conv);
            else if (width >= 0) snprintf(spec, sizeof spec, "%%%s%dll%c", fl2, width, conv);
            else snprintf(spec, sizeof spec, "%%%sll%c", fl2, conv);
            char out[2100];
            int m = snprintf(out, sizeof out, spec, v);
            if (m > 0) jj_buf_put(&b, out, (size_t)m < sizeof out ? (size_t)m : sizeof out - 1);
            break;
        }
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G': {
            if (!is_num(a)) jj_fail(c, "%%%c format: a real number is required, not %s", t, jv_type_name(a));
            if (prec >= 0 && width >= 0) snprintf(spec, sizeof spec, "%%%s%d.%d%c", flags, width, prec, t);
            else if (prec >= 0) snprintf(spec, sizeof spec, "%%%s.%d%c", flags, prec, t);
            else if (width >= 0) snprintf(spec, sizeof spec, "%%%s%d%c", flags, width, t);
            else snprintf(spec, sizeof spec, "%%%s%c", flags, t);
            char out[2100];
            int m = snprintf(out, sizeof out, spec, num_f(a));
            if (m > 0) jj_buf_put(&b, out, (size_t)m < sizeof out ? (size_t)m : sizeof out - 1);
            break;
        }
        default: jj_fail(c, "unsupported format character '%c'", t);
        }
    }
    /* CPython skips this check when args is a mapping-like (dict, list) */
    if (ai < an && !used_key && args.t != JV_DICT && !(args.t == JV_LIST && !args.tuple))
        jj_fail(c, "not all arguments converted during string formatting");
    jv r = jj_buf_value(&b);
    r.safe = fmt.safe;
    return r;
}

static jv binop(jj_ctx *c, jj_op op, jv a, jv b) {
    switch (op) {
    case OP_ADD:
        need_def(c, a);
        need_def(c, b);
        if (is_num(a) && is_num(b)) {
            if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
                int64_t r;
                if (__builtin_add_overflow(num_i(a), num_i(b), &r))
                    jj_fail(c, "integer overflow");
                return jv_int(r);
            }
            return jv_float(num_f(a) + num_f(b));
        }
        if (a.t == JV_STR && b.t == JV_STR) {
            /* Markup + str and str + Markup escape the plain side (markupsafe) */
            bool safe = a.safe || b.safe;
            if (safe) {
                a = jj_escape(c, a);
                b = jj_escape(c, b);
            }
            jj_buf s;
            jj_buf_init(&s, &c->arena, JJ_MAX_OUTPUT);
            jj_buf_put(&s, a.u.s.p, a.u.s.n);
            jj_buf_put(&s, b.u.s.p, b.u.s.n);
            jv r = jj_buf_value(&s);
            r.safe = safe;
            return r;
        }
        if (a.t == JV_LIST && b.t == JV_LIST && a.tuple == b.tuple && !a.gen && !b.gen) {
            if (a.u.l->n + b.u.l->n > JJ_MAX_LIST)
                jj_fail_st(c, PAGODA_ERR_LIMIT, "list too long (limit %d items)", JJ_MAX_LIST);
            jv l = jv_new_list(&c->arena, a.u.l->n + b.u.l->n);
            if (a.u.l->n) memcpy(l.u.l->v, a.u.l->v, a.u.l->n * sizeof(jv));
            if (b.u.l->n) memcpy(l.u.l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(jv));
            l.u.l->n = a.u.l->n + b.u.l->n;
            l.tuple = a.tuple;
            return l;
        }
        bad_operands(c, "+", a, b);
    case OP_SUB:
    case OP_MUL:
        need_def(c, a);
        need_def(c, b);
        if (is_num(a) && is_num(b)) {
            if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
                int64_t r;
                bool ovf = op == OP_SUB ? __builtin_sub_overflow(num_i(a), num_i(b), &r)
                                        : __builtin_mul_overflow(num_i(a), num_i(b), &r);
                if (ovf) jj_fail(c, "integer overflow");
                return jv_int(r);
            }
            return jv_float(op == OP_SUB ? num_f(a) - num_f(b) : num_f(a) * num_f(b));
        }
        if (op == OP_MUL) {
            if ((a.t == JV_STR || (a.t == JV_LIST && !a.gen)) && (b.t == JV_INT || b.t == JV_BOOL))
                return repeat_seq(c, a, num_i(b));
            if ((b.t == JV_STR || (b.t == JV_LIST && !b.gen)) && (a.t == JV_INT || a.t == JV_BOOL))
                return repeat_seq(c, b, num_i(a));
        }
        bad_operands(c, op == OP_SUB ? "-" : "*", a, b);
    case OP_DIV:
        need_def(c, a);
        need_def(c, b);
        if (!is_num(a) || !is_num(b)) bad_operands(c, "/", a, b);
        if (num_f(b) == 0.0) jj_fail(c, "division by zero");
        return jv_float(num_f(a) / num_f(b));
    case OP_FLOORDIV:
    case OP_MOD:
        need_def(c, a);
        need_def(c, b);
        if (op == OP_MOD && a.t == JV_STR) return jj_percent_format(c, a, b);
        if (!is_num(a) || !is_num(b)) bad_operands(c, op == OP_MOD ? "%" : "//", a, b);
        if (num_f(b) == 0.0) jj_fail(c, op == OP_MOD ? "modulo by zero" : "division by zero");
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
            int64_t x = num_i(a), y = num_i(b);
            if (x == INT64_MIN && y == -1) jj_fail(c, "integer overflow");
            int64_t q = x / y, r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) {
                q--;
                r += y;
            }
            return jv_int(op == OP_MOD ? r : q);
        }
        {
            double x = num_f(a), y = num_f(b);
            double r = fmod(x, y);
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
            return jv_float(op == OP_MOD ? r : floor(x / y));
        }
    case OP_POW:
        need_def(c, a);
        need_def(c, b);
        if (!is_num(a) || !is_num(b)) bad_operands(c, "**", a, b);
        if (a.t != JV_FLOAT && b.t != JV_FLOAT && num_i(b) >= 0) {
            int64_t base = num_i(a), e = num_i(b), r = 1;
            while (e > 0) {
                if (e & 1)
                    if (__builtin_mul_overflow(r, base, &r)) jj_fail(c, "integer overflow");
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base)) jj_fail(c, "integer overflow");
            }
            return jv_int(r);
        }
        if (num_f(a) == 0.0 && num_f(b) < 0) jj_fail(c, "zero to a negative power");
        return jv_float(pow(num_f(a), num_f(b)));
    case OP_CONCAT: {
        jj_buf s;
        jj_buf_init(&s, &c->arena, JJ_MAX_OUTPUT);
        jv_write_str(&s, a);
        jv_write_str(&s, b);
        return jj_buf_value(&s);
    }
    case OP_EQ:
    case OP_NE:
        jj_charge(c, size_of(a));
        return jv_bool(jv_equal(a, b) == (op == OP_EQ));
    case OP_LT: return jv_bool(jj_compare(c, a, b) < 0);
    case OP_LE: return jv_bool(jj_compare(c, a, b) <= 0);
    case OP_GT: return jv_bool(jj_compare(c, a, b) > 0);
    case OP_GE: return jv_bool(jj_compare(c, a, b) >= 0);
    case OP_IN:
    case OP_NOTIN: {
        bool r = false;
        jj_charge(c, size_of(b));
        if (b.t == JV_STR) {
            if (a.t != JV_STR)
                jj_fail(c, "'in <string>' requires string as left operand, not %s",
                        jv_type_name(a));
            if (a.u.s.n == 0) r = true;
            else if (a.u.s.n <= b.u.s.n)
                r = memmem(b.u.s.p, b.u.s.n, a.u.s.p, a.u.s.n) != NULL;
        } else if (b.t == JV_LIST) {
            for (size_t i = 0; i < b.u.l->n && !r; i++) r = jv_equal(a, b.u.l->v[i]);
        } else if (b.t == JV_DICT || b.t == JV_NS) {
            r = jv_dict_get(b, a) != NULL;
        } else if (b.t == JV_UNDEF) {
            r = false;
        } else {
            jj_fail(c, "argument of type '%s' is not iterable", jv_type_name(b));
        }
        return jv_bool(op == OP_IN ? r : !r);
    }
    default: jj_fail(c, "internal: bad operator");
    }
}

/* evaluate call arguments */
typedef struct argv_ {
    jv *pos;
    size_t npos;
    const char **kwn;
    jv *kwv;
    size_t nkw;
} argv_;

static argv_ eval_args(jj_ctx *c, jj_frame *f, const jj_node *n) {
    argv_ a = {0};
    a.pos = jj_alloc(&c->arena, (n->n + 1) * sizeof(jv));
    for (size_t i = 0; i < n->n; i++) a.pos[i] = eval(c, f, n->items[i]);
    a.npos = n->n;
    a.kwv = jj_alloc(&c->arena, (n->nkw + 1) * sizeof(jv));
    for (size_t i = 0; i < n->nkw; i++) a.kwv[i] = eval(c, f, n->kwv[i]);
    a.kwn = n->kwn;
    a.nkw = n->nkw;
    return a;
}

static jv call_macro(jj_ctx *c, jj_func *fn, const jv *args, size_t nargs, const char **kwn,
                     const jv *kwv, size_t nkw, jv caller) {
    const jj_node *m = fn->mac;
    if (++c->macro_depth > JJ_MAX_MACRO_DEPTH)
        jj_fail_st(c, PAGODA_ERR_LIMIT, "macro recursion deeper than %d", JJ_MAX_MACRO_DEPTH);
    int saved_line = c->line;
    jj_frame *f = new_frame(c, fn->closure);
    jv varargs = jv_new_list(&c->arena, 0);
    jv kwargs = jv_new_dict(&c->arena, 0);
    for (size_t i = 0; i < nargs; i++) {
        if (i < m->nkw) set_var(c, f, m->kwn[i], args[i]);
        else jv_list_push(&c->arena, varargs, args[i]);
    }
    for (size_t k = 0; k < nkw; k++) {
        size_t i = 0;
        while (i < m->nkw && strcmp(m->kwn[i], kwn[k]) != 0) i++;
        if (i < m->nkw) {
            if (i < nargs) jj_fail(c, "macro '%s' got multiple values for argument '%s'",
                                   fn->name ? fn->name : "caller", kwn[k]);
            set_var(c, f, m->kwn[i], kwv[k]);
        } else if (strcmp(kwn[k], "caller") == 0 && kwv[k].t == JV_FUNC) {
            caller = kwv[k];
        } else {
            jv_dict_set(&c->arena, kwargs, jv_cstr(kwn[k]), kwv[k]);
        }
    }
    for (size_t i = nargs; i < m->nkw; i++) {
        if (jv_dict_gets(f->vars, m->kwn[i])) continue;
        jv d = m->kwv[i] ? eval(c, f, m->kwv[i]) : jv_undef(m->kwn[i]);
        set_var(c, f, m->kwn[i], d);
    }
    set_var(c, f, "varargs", varargs);
    set_var(c, f, "kwargs", kwargs);
    if (caller.t == JV_FUNC) set_var(c, f, "caller", caller);
    jj_buf b;
    jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
    jj_buf *saved = c->out;
    int saved_ctl = c->loopctl;
    c->out = &b;
    exec_body(c, f, m->items, m->n);
    c->out = saved;
    c->loopctl = saved_ctl;
    c->macro_depth--;
    c->line = saved_line;
    return jj_buf_value(&b);
}

jv jj_call(jj_ctx *c, jv fn, const jv *args, size_t nargs, const char **kwn, const jv *kwv,
           size_t nkw) {
    if (fn.t == JV_UNDEF) jj_fail_undef(c, fn);
    if (fn.t != JV_FUNC) jj_fail(c, "'%s' object is not callable", jv_type_name(fn));
    jj_func *f = fn.u.fn;
    if (f->fn) return f->fn(c, f->self, args, nargs, kwn, kwv, nkw);
    jv caller = c->pending_caller;
    c->pending_caller = jv_undef(NULL);
    return call_macro(c, f, args, nargs, kwn, kwv, nkw, caller);
}

static jv slice(jj_ctx *c, jv obj, jv start, jv stop, jv stepv) {
    need_def(c, obj);
    int64_t st = 1;
    if (stepv.t != JV_NONE && stepv.t != JV_UNDEF) {
        if (stepv.t != JV_INT) jj_fail(c, "slice indices must be integers");
        st = stepv.u.i;
        if (st == 0) jj_fail(c, "slice step cannot be zero");
    }
    jv items;
    bool is_str = obj.t == JV_STR;
    if (is_str) items = jj_iterate(c, obj);
    else if (obj.t == JV_LIST && !obj.gen) items = obj;
    else jj_fail(c, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t n = (int64_t)items.u.l->n;
    int64_t lo, hi;
    jv bounds[2] = {start, stop};
    int64_t vals[2];
    for (int k = 0; k < 2; k++) {
        jv b = bounds[k];
        if (b.t == JV_NONE || b.t == JV_UNDEF) {
            vals[k] = st > 0 ? (k == 0 ? 0 : n) : (k == 0 ? n - 1 : -1);
            continue;
        }
        if (b.t != JV_INT) jj_fail(c, "slice indices must be integers");
        int64_t v = b.u.i;
        if (v < 0) {
            v += n;
            if (v < 0) v = st > 0 ? 0 : -1;
        } else if (v >= n) {
            v = st > 0 ? n : n - 1;
        }
        vals[k] = v;
    }
    lo = vals[0];
    hi = vals[1];
    jv out = jv_new_list(&c->arena, 0);
    if (st > 0)
        for (int64_t i = lo; i < hi; i += st) jv_list_push(&c->arena, out, items.u.l->v[i]);
    else
        for (int64_t i = lo; i > hi; i += st) jv_list_push(&c->arena, out, items.u.l->v[i]);
    if (is_str) {
        jj_buf b;
        jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
        for (size_t i = 0; i < out.u.l->n; i++) jj_buf_put(&b, out.u.l->v[i].u.s.p, out.u.l->v[i].u.s.n);
        jv r = jj_buf_value(&b);
        r.safe = obj.safe;
        return r;
    }
    out.tuple = obj.tuple;
    return out;
}

static jv eval_filter(jj_ctx *c, jj_frame *f, const jj_node *n, jv in) {
    argv_ a = eval_args(c, f, n);
    c->line = n->line;
    return jj_filter(c, n->s, in, a.pos, a.npos, a.kwn, a.kwv, a.nkw);
}

static jv eval_inner(jj_ctx *c, jj_frame *f, const jj_node *n) {
    switch ((jj_kind)n->kind) {
    case E_LIT: return n->lit;
    case E_NAME: {
        jv *v = lookup(f, n->s);
        return v ? *v : jv_undef(n->s);
    }
    case E_LIST:
    case E_TUPLE: {
        jv l = jv_new_list(&c->arena, n->n);
        for (size_t i = 0; i < n->n; i++) l.u.l->v[i] = eval(c, f, n->items[i]);
        l.u.l->n = n->n;
        l.tuple = n->kind == E_TUPLE;
        return l;
    }
    case E_DICT: {
        jv d = jv_new_dict(&c->arena, n->n / 2);
        for (size_t i = 0; i + 1 < n->n; i += 2) {
            jv k = eval(c, f, n->items[i]);
            jv v = eval(c, f, n->items[i + 1]);
            if (k.t == JV_LIST && !k.tuple) jj_fail(c, "unhashable type: 'list'");
            if (k.t == JV_DICT) jj_fail(c, "unhashable type: 'dict'");
            jv_dict_set(&c->arena, d, k, v);
        }
        return d;
    }
    case E_ATTR: {
        jv o = eval(c, f, n->a);
        c->line = n->line;
        return jj_getattr(c, o, n->s, n->sn);
    }
    case E_ITEM: {
        jv o = eval(c, f, n->a);
        jv k = eval(c, f, n->b);
        c->line = n->line;
        return jj_getitem(c, o, k);
    }
    case E_SLICE: {
        jv o = eval(c, f, n->a);
        jv none = jv_none();
        jv s0 = n->b ? eval(c, f, n->b) : none;
        jv s1 = n->c ? eval(c, f, n->c) : none;
        jv s2 = n->d ? eval(c, f, n->d) : none;
        c->line = n->line;
        return slice(c, o, s0, s1, s2);
    }
    case E_CALL: {
        if (n->a->kind == E_ATTR) {
            jv obj = eval(c, f, n->a->a);
            argv_ a = eval_args(c, f, n);
            c->line = n->line;
            if (obj.t == JV_UNDEF) jj_fail_undef(c, obj);
            jv out;
            /* a dict key holding a callable (loop.cycle, ns.fn) wins over methods */
            if (obj.t == JV_DICT || obj.t == JV_NS) {
                jv *v = jv_dict_gets(obj, n->a->s);
                if (v && v->t == JV_FUNC) return jj_call(c, *v, a.pos, a.npos, a.kwn, a.kwv, a.nkw);
            }
            if (obj.t != JV_NS && jj_method(c, obj, n->a->s, a.pos, a.npos, a.kwn, a.kwv, a.nkw, &out))
                return out;
            jv fnv = jj_getattr(c, obj, n->a->s, n->a->sn);
            if (fnv.t == JV_UNDEF)
                jj_fail(c, "'%s' object has no attribute '%s'", jv_type_name(obj), n->a->s);
            return jj_call(c, fnv, a.pos, a.npos, a.kwn, a.kwv, a.nkw);
        }
        jv fnv = eval(c, f, n->a);
        argv_ a = eval_args(c, f, n);
        c->line = n->line;
        return jj_call(c, fnv, a.pos, a.npos, a.kwn, a.kwv, a.nkw);
    }
    case E_FILTER: {
        jv in = eval(c, f, n->a);
        return eval_filter(c, f, n, in);
    }
    case E_TEST: {
        jv v = eval(c, f, n->a);
        argv_ a = eval_args(c, f, n);
        c->line = n->line;
        bool r = jj_test(c, n->s, v, a.pos, a.npos);
        return jv_bool(n->neg ? !r : r);
    }
    case E_UNARY: {
        jv v = eval(c, f, n->a);
        c->line = n->line;
        if (n->op == OP_NOT) return jv_bool(!jv_truthy(v));
        need_def(c, v);
        if (v.t == JV_INT || v.t == JV_BOOL) {
            int64_t i = num_i(v);
            if (n->op == OP_POS) return jv_int(i);
            if (i == INT64_MIN) jj_fail(c, "integer overflow");
            return jv_int(-i);
        }
        if (v.t == JV_FLOAT) return jv_float(n->op == OP_NEG ? -v.u.f : v.u.f);
        jj_fail(c, "bad operand type for unary %s: '%s'", n->op == OP_NEG ? "-" : "+",
                jv_type_name(v));
    }
    case E_BIN: {
        jv a = eval(c, f, n->a);
        jv b = eval(c, f, n->b);
        c->line = n->line;
        return binop(c, (jj_op)n->op, a, b);
    }
    case E_AND: {
        jv a = eval(c, f, n->a);
        return jv_truthy(a) ? eval(c, f, n->b) : a;
    }
    case E_OR: {
        jv a = eval(c, f, n->a);
        return jv_truthy(a) ? a : eval(c, f, n->b);
    }
    case E_COND:
        if (jv_truthy(eval(c, f, n->b))) return eval(c, f, n->a);
        return n->c ? eval(c, f, n->c) : jv_undef(NULL);
    default: jj_fail(c, "internal: statement used as expression");
    }
}

static void check_stack(jj_ctx *c) {
    if ((size_t)(c->stack_base - (char *)__builtin_frame_address(0)) > c->stack_budget)
        jj_fail_st(c, PAGODA_ERR_LIMIT, "template evaluation nested too deeply (%zu KiB of stack)",
                   c->stack_budget >> 10);
}

static jv eval(jj_ctx *c, jj_frame *f, const jj_node *n) {
    step(c, n);
    check_stack(c);
    if (++c->depth > JJ_MAX_EVAL_DEPTH)
        jj_fail_st(c, PAGODA_ERR_LIMIT, "template evaluation nested deeper than %d",
                   JJ_MAX_EVAL_DEPTH);
    jv v = eval_inner(c, f, n);
    c->depth--;
    return v;
}

/* ---- statements ----------------------------------------------------------- */
static void assign(jj_ctx *c, jj_frame *f, const char *const *names, size_t nn, jv v) {
    if (nn == 1) {
        set_var(c, f, names[0], v);
        return;
    }
    jv items = jj_iterate(c, v);
    if (items.u.l->n != nn)
        jj_fail(c, "cannot unpack %zu values into %zu names", items.u.l->n, nn);
    for (size_t i = 0; i < nn; i++) set_var(c, f, names[i], items.u.l->v[i]);
}

static jv loop_cycle(jj_ctx *c, jv self, const jv *args, size_t nargs, const char **kwn,
                     const jv *kwv, size_t nkw) {
    (void)kwn, (void)kwv, (void)nkw;
    if (nargs == 0) jj_fail(c, "no items for cycling given");
    jv *idx = jv_dict_gets(self, "index0");
    return args[(size_t)(idx ? idx->u.i : 0) % nargs];
}

/* loop.changed(*values): true when the values differ from the previous call */
static jv loop_changed(jj_ctx *c, jv self, const jv *args, size_t nargs, const char **kwn,
                       const jv *kwv, size_t nkw) {
    (void)kwn, (void)kwv, (void)nkw;
    jv now = jv_new_list(&c->arena, nargs);
    for (size_t i = 0; i < nargs; i++) now.u.l->v[i] = args[i];
    now.u.l->n = nargs;
    jv *last = jv_dict_gets(self, "last");
    if (last && jv_equal(*last, now)) return jv_bool(false);
    jv_dict_set(&c->arena, self, jv_cstr("last"), now);
    return jv_bool(true);
}

static void exec_for(jj_ctx *c, jj_frame *f, const jj_node *n) {
    jv seq = eval(c, f, n->a);
    c->line = n->line;
    jv items = jj_iterate(c, seq);
    jj_frame *lf = new_frame(c, f);
    if (n->b) { /* for x in y if cond: filter before counting */
        jv kept = jv_new_list(&c->arena, items.u.l->n);
        for (size_t i = 0; i < items.u.l->n; i++) {
            assign(c, lf, n->kwn, n->nkw, items.u.l->v[i]);
            if (jv_truthy(eval(c, lf, n->b))) kept.u.l->v[kept.u.l->n++] = items.u.l->v[i];
        }
        items = kept;
    } else if (items.u.l == seq.u.l && seq.t == JV_LIST) {
        /* iterate over a snapshot: the body may append to the list */
        jv copy = jv_new_list(&c->arena, items.u.l->n);
        if (items.u.l->n) memcpy(copy.u.l->v, items.u.l->v, items.u.l->n * sizeof(jv));
        copy.u.l->n = items.u.l->n;
        items = copy;
    }
    size_t len = items.u.l->n;
    if (len == 0) {
        if (n->n2) exec_body(c, f, n->body2, n->n2);
        return;
    }
    jv loop = jv_new_dict(&c->arena, 12);
    jv_dict_set(&c->arena, loop, jv_cstr("cycle"), jj_make_builtin(c, "cycle", loop_cycle, loop));
    jv_dict_set(&c->arena, loop, jv_cstr("changed"),
                jj_make_builtin(c, "changed", loop_changed, jv_new_dict(&c->arena, 1)));
    jv_dict_set(&c->arena, loop, jv_cstr("length"), jv_int((int64_t)len));
    jv_dict_set(&c->arena, loop, jv_cstr("depth"), jv_int(1));
    jv_dict_set(&c->arena, loop, jv_cstr("depth0"), jv_int(0));
    static const char *const keys[] = {"index", "index0", "revindex", "revindex0",
                                       "first", "last",   "previtem", "nextitem"};
    size_t first_key = loop.u.d->n;
    for (size_t k = 0; k < 8; k++) jv_dict_set(&c->arena, loop, jv_cstr(keys[k]), jv_none());
    /* the layout the fast path writes into; the body may change it (loop.pop) */
    const jj_dict layout = *loop.u.d;
    for (size_t i = 0; i < len; i++) {
        step(c, n);
        jv lv[8] = {jv_int((int64_t)i + 1),
                    jv_int((int64_t)i),
                    jv_int((int64_t)(len - i)),
                    jv_int((int64_t)(len - i - 1)),
                    jv_bool(i == 0),
                    jv_bool(i + 1 == len),
                    i ? items.u.l->v[i - 1] : jv_undef("previtem"),
                    i + 1 < len ? items.u.l->v[i + 1] : jv_undef("nextitem")};
        jj_dict *d = loop.u.d;
        if (d->n == layout.n && d->k == layout.k && d->v == layout.v)
            memcpy(d->v + first_key, lv, sizeof lv);
        else /* changed by the body: by key */
            for (size_t k = 0; k < 8; k++) jv_dict_set(&c->arena, loop, jv_cstr(keys[k]), lv[k]);
        set_var(c, lf, "loop", loop);
        assign(c, lf, n->kwn, n->nkw, items.u.l->v[i]);
        exec_body(c, lf, n->items, n->n);
        if (c->loopctl == 1) {
            c->loopctl = 0;
            break;
        }
        c->loopctl = 0;
    }
}

static jv apply_filter_chain(jj_ctx *c, jj_frame *f, const jj_node *chain, jv in) {
    if (!chain) return in;
    in = apply_filter_chain(c, f, chain->a, in);
    return eval_filter(c, f, chain, in);
}

static jv capture(jj_ctx *c, jj_frame *f, jj_node *const *body, size_t n) {
    jj_buf b;
    jj_buf_init(&b, &c->arena, JJ_MAX_OUTPUT);
    jj_buf *saved = c->out;
    c->out = &b;
    exec_body(c, f, body, n);
    c->out = saved;
    return jj_buf_value(&b);
}

static void exec_stmt(jj_ctx *c, jj_frame *f, const jj_node *n) {
    step(c, n);
    switch ((jj_kind)n->kind) {
    case S_TEXT: jj_buf_put(c->out, n->s, n->sn); break;
    case S_OUT: {
        jv v = eval(c, f, n->a);
        jv_write_str(c->out, v);
        break;
    }
    case S_IF:
        if (jv_truthy(eval(c, f, n->a))) exec_body(c, f, n->items, n->n);
        else exec_body(c, f, n->body2, n->n2);
        break;
    case S_FOR: exec_for(c, f, n); break;
    case S_SET: {
        jv v = eval(c, f, n->b);
        c->line = n->line;
        if (n->a) {
            jv ns = eval(c, f, n->a);
            if (ns.t != JV_NS)
                jj_fail(c, "can only assign attributes of a namespace, not of '%s'",
                        jv_type_name(ns));
            jv_dict_set(&c->arena, ns, jv_cstr(n->kwn[0]), v);
        } else {
            assign(c, f, n->kwn, n->nkw, v);
        }
        break;
    }
    case S_SETBLOCK: {
        jv v = capture(c, f, n->items, n->n);
        v = apply_filter_chain(c, f, n->a, v);
        set_var(c, f, n->kwn[0], v);
        break;
    }
    case S_MACRO: {
        jj_func *fn = jj_alloc(&c->arena, sizeof *fn);
        memset(fn, 0, sizeof *fn);
        fn->name = n->s;
        fn->mac = n;
        fn->closure = f;
        set_var(c, f, n->s, (jv){.t = JV_FUNC, .u.fn = fn});
        break;
    }
    case S_CALLBLOCK: {
        jj_func *fn = jj_alloc(&c->arena, sizeof *fn);
        memset(fn, 0, sizeof *fn);
        fn->name = "caller";
        fn->mac = n;
        fn->closure = f;
        const jj_node *call = n->a;
        jv fnv = eval(c, f, call->a);
        argv_ a = eval_args(c, f, call);
        c->line = n->line;
        c->pending_caller = (jv){.t = JV_FUNC, .u.fn = fn};
        jv r = jj_call(c, fnv, a.pos, a.npos, a.kwn, a.kwv, a.nkw);
        c->pending_caller = jv_undef(NULL);
        jv_write_str(c->out, r);
        break;
    }
    case S_FILTERBLOCK: {
        jv v = capture(c, f, n->items, n->n);
        v = apply_filter_chain(c, f, n->a, v);
        jv_write_str(c->out, v);
        break;
    }
    case S_BREAK: c->loopctl = 1; break;
    case S_CONTINUE: c->loopctl = 2; break;
    case S_DO: (void)eval(c, f, n->a); break;
    case S_WITH: {
        /* values are evaluated in the outer frame, as jinja2 does */
        jv *vals = jj_alloc(&c->arena, (n->nkw + 1) * sizeof(jv));
        for (size_t i = 0; i < n->nkw; i++) vals[i] = eval(c, f, n->kwv[i]);
        jj_frame *wf = new_frame(c, f);
        for (size_t i = 0; i < n->nkw; i++) set_var(c, wf, n->kwn[i], vals[i]);
        exec_body(c, wf, n->items, n->n);
        break;
    }
    default: jj_fail(c, "internal: expression used as statement");
    }
}

static void exec_body(jj_ctx *c, jj_frame *f, jj_node *const *body, size_t n) {
    check_stack(c);
    if (++c->depth > JJ_MAX_EVAL_DEPTH)
        jj_fail_st(c, PAGODA_ERR_LIMIT, "template evaluation nested deeper than %d",
                   JJ_MAX_EVAL_DEPTH);
    for (size_t i = 0; i < n && !c->loopctl; i++) exec_stmt(c, f, body[i]);
    c->depth--;
}

pagoda_status jj_render(jj_ctx *c, const jj_template *t, char **out, size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    jj_buf_init(&c->root_out, &c->arena, JJ_MAX_OUTPUT);
    c->out = &c->root_out;
    c->depth = c->macro_depth = 0;
    c->stack_base = (char *)__builtin_frame_address(0);
    c->stack_budget = jj_stack_budget();
    c->loopctl = 0;
    c->steps = 0;
    c->line = 1;
    c->pending_caller = jv_undef(NULL);
    if (setjmp(c->jmp)) return c->st;
    exec_body(c, c->globals, t->body, t->n);
    jj_buf *b = &c->root_out;
    char *s = malloc(b->n + 1);
    if (!s) return pg_error(PAGODA_ERR_NOMEM, "chat template: out of memory");
    if (b->n) memcpy(s, b->p, b->n);
    s[b->n] = 0;
    *out = s;
    if (out_len) *out_len = b->n;
    return PAGODA_OK;
}
