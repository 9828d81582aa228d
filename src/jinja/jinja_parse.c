/* Jinja lexer and parser: template text -> AST (jinja.h).
 *
 * Whitespace rules follow jinja2 3.1's lexer with trim_blocks=True and
 * lstrip_blocks=True: newlines are normalised to "\n" and one trailing
 * newline of the template is dropped (keep_trailing_newline=False); "-" on a
 * tag side strips all whitespace on that side; a block or comment tag eats
 * the first "\n" after it (trim_blocks) and the spaces/tabs between the line
 * start and itself (lstrip_blocks) unless marked "+". Expression grammar and
 * precedence follow jinja2's parser.py (or < and < not < compare < +,- < ~ <
 * *,/,//,% < ** < unary -,+ < postfix . [] () | is). */
#define _GNU_SOURCE /* pthread_getattr_np */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja.h"

size_t jj_stack_budget(void) {
    static _Thread_local size_t cached;
    if (cached) return cached;
    size_t budget = (size_t)1 << 20;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void *lo;
        size_t size;
        if (pthread_attr_getstack(&attr, &lo, &size) == 0) {
            char here;
            size_t left = (size_t)(&here - (char *)lo);
            if (left / 2 < budget) budget = left / 2;
        }
        pthread_attr_destroy(&attr);
    }
    if (budget < 16384) budget = 16384;
    cached = budget;
    return budget;
}

/* ---- arena ---------------------------------------------------------------- */
struct jj_chunk {
    jj_chunk *next;
    size_t cap, used;
    max_align_t data[];
};

void *jj_alloc(jj_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->head && a->head->cap - a->head->used >= n) {
        void *p = (char *)a->head->data + a->head->used;
        a->head->used += n;
        return p;
    }
    size_t cap = n > 65536 ? n : 65536;
    if (a->used + cap > a->limit) {
        if (a->line)
            *a->st = pg_error(PAGODA_ERR_LIMIT, "line %d: template memory limit (%zu MiB) exceeded",
                              *a->line, a->limit >> 20);
        else
            *a->st = pg_error(PAGODA_ERR_LIMIT, "template memory limit (%zu MiB) exceeded",
                              a->limit >> 20);
        longjmp(*a->jmp, 1);
    }
    jj_chunk *c = malloc(sizeof(jj_chunk) + cap);
    if (!c) {
        *a->st = pg_error(PAGODA_ERR_NOMEM, "out of memory");
        longjmp(*a->jmp, 1);
    }
    a->used += cap;
    c->cap = cap;
    c->used = n;
    /* keep the fuller chunk second so small allocations continue in the head */
    if (a->head && n > 65536 / 2 && a->head->cap - a->head->used > 4096) {
        c->next = a->head->next;
        a->head->next = c;
    } else {
        c->next = a->head;
        a->head = c;
    }
    return c->data;
}

char *jj_strdup(jj_arena *a, const char *s, size_t n) {
    char *p = jj_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void jj_arena_free(jj_arena *a) {
    jj_chunk *c = a->head;
    while (c) {
        jj_chunk *nx = c->next;
        free(c);
        c = nx;
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- tokens --------------------------------------------------------------- */
typedef enum {
    T_EOF,
    T_TEXT,
    T_BB, /* {% */
    T_BE, /* %} */
    T_VB, /* {{ */
    T_VE, /* }} */
    T_NAME,
    T_STR,
    T_INT,
    T_FLOAT,
    T_OP,
} tkind;

typedef struct tok {
    tkind k;
    int line;
    const char *s;
    size_t n;
    int64_t i;
    double f;
} tok;

typedef struct parser {
    jj_arena *a;
    jmp_buf jmp;
    pagoda_status st;
    tok *t;
    size_t nt, cap, pos;
    int depth;
    char *stack_base;
    size_t stack_budget;
} parser;

__attribute__((noreturn, format(printf, 3, 4))) static void perr(parser *p, int line,
                                                                const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->st = pg_error(PAGODA_ERR_FORMAT, "line %d: %s", line, msg);
    longjmp(p->jmp, 1);
}

static void push_tok(parser *p, tok t) {
    if (p->nt == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 256;
        tok *n = jj_alloc(p->a, nc * sizeof(tok));
        if (p->nt) memcpy(n, p->t, p->nt * sizeof(tok));
        p->t = n;
        p->cap = nc;
    }
    p->t[p->nt++] = t;
}

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
static bool is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static int count_nl(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

static void emit_text(parser *p, const char *s, size_t n, int line) {
    if (n == 0) return;
    tok t = {.k = T_TEXT, .line = line, .s = s, .n = n};
    push_tok(p, t);
}

static void put_utf8(char *out, size_t *o, uint32_t cp) {
    if (cp < 0x80) {
        out[(*o)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*o)++] = (char)(0xC0 | (cp >> 6));
        out[(*o)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*o)++] = (char)(0xE0 | (cp >> 12));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*o)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*o)++] = (char)(0xF0 | (cp >> 18));
        out[(*o)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*o)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Lex a string literal starting at src[i] (the quote); returns index after it. */
static size_t lex_string(parser *p, const char *src, size_t len, size_t i, int line) {
    char q = src[i++];
    size_t start = i;
    while (i < len && src[i] != q) {
        if (src[i] == '\\' && i + 1 < len) i++;
        i++;
    }
    if (i >= len) perr(p, line, "unterminated string literal");
    size_t n = i - start;
    char *out = jj_alloc(p->a, n * 2 + 1); /* \uXXXX (6) -> <= 3 bytes, \xHH (4) -> 2 */
    size_t o = 0;
    for (size_t j = start; j < i; j++) {
        char c = src[j];
        if (c != '\\') {
            out[o++] = c;
            continue;
        }
        char e = src[++j];
        switch (e) {
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'v': out[o++] = '\v'; break;
        case 'a': out[o++] = '\a'; break;
        case '\\': out[o++] = '\\'; break;
        case '\'': out[o++] = '\''; break;
        case '"': out[o++] = '"'; break;
        case '\n': break; /* line continuation */
        case 'x':
        case 'u':
        case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            int k;
            for (k = 0; k < nd && j + 1 + (size_t)k < i; k++) {
                int h = hexval(src[j + 1 + k]);
                if (h < 0) break;
                cp = cp * 16 + (uint32_t)h;
            }
            if (k != nd) perr(p, line, "bad \\%c escape in string literal", e);
            if (cp > 0x10FFFF) perr(p, line, "bad \\%c escape in string literal", e);
            j += (size_t)nd;
            put_utf8(out, &o, cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = 0;
                int k = 0;
                while (k < 3 && j < i && src[j] >= '0' && src[j] <= '7') {
                    cp = cp * 8 + (uint32_t)(src[j] - '0');
                    j++;
                    k++;
                }
                j--;
                put_utf8(out, &o, cp);
            } else {
                out[o++] = '\\';
                out[o++] = e;
            }
        }
    }
    out[o] = 0;
    tok t = {.k = T_STR, .line = line, .s = out, .n = o};
    /* adjacent literals concatenate ("a" "b") */
    if (p->nt && p->t[p->nt - 1].k == T_STR) {
        tok *pr = &p->t[p->nt - 1];
        char *cat = jj_alloc(p->a, pr->n + o + 1);
        memcpy(cat, pr->s, pr->n);
        memcpy(cat + pr->n, out, o + 1);
        pr->s = cat;
        pr->n += o;
    } else {
        push_tok(p, t);
    }
    return i + 1;
}

static const char *const OPS2[] = {"**", "//", "==", "!=", "<=", ">="};
static const char OPS1[] = "+-*/%~<>=()[]{}.,:|";

/* Tokens inside a tag from src[i]; returns index just past the closing
 * delimiter and sets *strip_after ('-' or '+' or 0). */
static size_t lex_tag(parser *p, const char *src, size_t len, size_t i, bool block, int *line,
                      int *strip_after) {
    int bal = 0;
    int open_line = *line;
    for (;;) {
        while (i < len && is_ws(src[i])) {
            if (src[i] == '\n') (*line)++;
            i++;
        }
        if (i >= len) perr(p, open_line, "unclosed %s tag", block ? "{%" : "{{");
        char c = src[i];
        if (bal == 0) {
            char e1 = block ? '%' : '}';
            if ((c == '-' || c == '+') && i + 2 < len + 0 && src[i + 1] == e1 && src[i + 2] == '}') {
                *strip_after = (unsigned char)c;
                push_tok(p, (tok){.k = block ? T_BE : T_VE, .line = *line});
                return i + 3;
            }
            if (c == e1 && i + 1 < len && src[i + 1] == '}') {
                *strip_after = 0;
                push_tok(p, (tok){.k = block ? T_BE : T_VE, .line = *line});
                return i + 2;
            }
        }
        if (c == '\'' || c == '"') {
            int l0 = *line;
            size_t j = lex_string(p, src, len, i, l0);
            *line += count_nl(src + i, j - i);
            i = j;
            continue;
        }
        if (is_alpha(c)) {
            size_t j = i;
            while (j < len && (is_alpha(src[j]) || is_digit(src[j]))) j++;
            push_tok(p, (tok){.k = T_NAME, .line = *line, .s = src + i, .n = j - i});
            i = j;
            continue;
        }
        if (is_digit(c)) {
            char buf[64];
            size_t bn = 0, j = i;
            bool isf = false;
            while (j < len && (is_digit(src[j]) || src[j] == '_')) {
                if (src[j] != '_' && bn < 60) buf[bn++] = src[j];
                j++;
            }
            bool after_dot = p->nt && p->t[p->nt - 1].k == T_OP && p->t[p->nt - 1].s[0] == '.';
            if (!after_dot && j + 1 < len && src[j] == '.' && is_digit(src[j + 1])) {
                isf = true;
                buf[bn++] = src[j++];
                while (j < len && (is_digit(src[j]) || src[j] == '_')) {
                    if (src[j] != '_' && bn < 60) buf[bn++] = src[j];
                    j++;
                }
            }
            if (!after_dot && j < len && (src[j] == 'e' || src[j] == 'E')) {
                size_t k = j + 1;
                if (k < len && (src[k] == '+' || src[k] == '-')) k++;
                if (k < len && is_digit(src[k])) {
                    isf = true;
                    buf[bn++] = 'e';
                    if (src[j + 1] == '-' || src[j + 1] == '+') buf[bn++] = src[j + 1];
                    j = k;
                    while (j < len && (is_digit(src[j]) || src[j] == '_')) {
                        if (src[j] != '_' && bn < 62) buf[bn++] = src[j];
                        j++;
                    }
                }
            }
            buf[bn] = 0;
            tok t = {.line = *line};
            if (isf) {
                t.k = T_FLOAT;
                t.f = strtod(buf, NULL);
            } else {
                t.k = T_INT;
                char *end;
                unsigned long long v = strtoull(buf, &end, 10);
                if (bn > 18 && (bn > 19 || v > (unsigned long long)INT64_MAX))
                    perr(p, *line, "integer literal too large");
                t.i = (int64_t)v;
            }
            push_tok(p, t);
            i = j;
            continue;
        }
        bool found = false;
        for (size_t k = 0; k < sizeof OPS2 / sizeof OPS2[0]; k++) {
            if (i + 1 < len && src[i] == OPS2[k][0] && src[i + 1] == OPS2[k][1]) {
                push_tok(p, (tok){.k = T_OP, .line = *line, .s = OPS2[k], .n = 2});
                i += 2;
                found = true;
                break;
            }
        }
        if (found) continue;
        const char *o = strchr(OPS1, c);
        if (o && c) {
            if (c == '(' || c == '[' || c == '{') bal++;
            if (c == ')' || c == ']' || c == '}') {
                if (bal == 0) perr(p, *line, "unexpected '%c'", c);
                bal--;
            }
            push_tok(p, (tok){.k = T_OP, .line = *line, .s = o, .n = 1});
            i++;
            continue;
        }
        if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f)
            perr(p, *line, "unexpected character '%c'", c);
        perr(p, *line, "unexpected byte 0x%02x", (unsigned char)c);
    }
}

/* does src[i..] start "{%[-+]? raw [-+]?%}" ? returns the index after it */
static size_t match_named_tag(const char *src, size_t len, size_t i, const char *name,
                              int *sign_before, int *sign_after) {
    if (i + 2 > len || src[i] != '{' || src[i + 1] != '%') return 0;
    size_t j = i + 2;
    *sign_before = 0;
    if (j < len && (src[j] == '-' || src[j] == '+')) *sign_before = (unsigned char)src[j++];
    while (j < len && is_ws(src[j])) j++;
    size_t nl = strlen(name);
    if (j + nl > len || memcmp(src + j, name, nl) != 0) return 0;
    j += nl;
    if (j < len && (is_alpha(src[j]) || is_digit(src[j]))) return 0;
    while (j < len && is_ws(src[j])) j++;
    *sign_after = 0;
    if (j < len && (src[j] == '-' || src[j] == '+')) *sign_after = (unsigned char)src[j++];
    if (j + 2 > len || src[j] != '%' || src[j + 1] != '}') return 0;
    return j + 2;
}

static void lex(parser *p, const char *src0) {
    /* normalise newlines, drop one trailing newline */
    size_t len0 = strlen(src0);
    char *src = jj_alloc(p->a, len0 + 1);
    size_t len = 0;
    for (size_t i = 0; i < len0; i++) {
        if (src0[i] == '\r') {
            src[len++] = '\n';
            if (i + 1 < len0 && src0[i + 1] == '\n') i++;
        } else {
            src[len++] = src0[i];
        }
    }
    if (len && src[len - 1] == '\n') len--;
    src[len] = 0;

    size_t pos = 0;
    int line = 1;
    bool line_starting = true;
    while (pos < len) {
        /* next tag start */
        size_t q = pos;
        while (q + 1 < len && !(src[q] == '{' && (src[q + 1] == '{' || src[q + 1] == '%' ||
                                                   src[q + 1] == '#')))
            q++;
        if (q + 1 >= len) {
            emit_text(p, src + pos, len - pos, line);
            line += count_nl(src + pos, len - pos);
            break;
        }
        char ty = src[q + 1];
        int sign = (q + 2 < len && (src[q + 2] == '-' || src[q + 2] == '+')) ? src[q + 2] : 0;
        size_t tl = q - pos; /* text length kept */
        if (sign == '-') {
            while (tl > 0 && is_ws(src[pos + tl - 1])) tl--;
        } else if (sign != '+' && ty != '{') {
            size_t lp = tl;
            while (lp > 0 && src[pos + lp - 1] != '\n') lp--;
            if (lp > 0 || line_starting) {
                bool only = true;
                for (size_t k = lp; k < tl; k++)
                    if (src[pos + k] != ' ' && src[pos + k] != '\t') only = false;
                if (only) tl = lp;
            }
        }
        emit_text(p, src + pos, tl, line);
        line += count_nl(src + pos, q - pos);
        int sb, sa;
        size_t after;
        if (ty == '#') {
            size_t j = q + 2;
            while (j + 1 < len && !(src[j] == '#' && src[j + 1] == '}')) j++;
            if (j + 1 >= len) perr(p, line, "unclosed comment");
            int s_after = (j > q + 2 && (src[j - 1] == '-' || src[j - 1] == '+')) ? src[j - 1] : 0;
            line += count_nl(src + q, j + 2 - q);
            after = j + 2;
            if (s_after == '-') {
                while (after < len && is_ws(src[after])) line += src[after++] == '\n';
            } else if (s_after != '+' && after < len && src[after] == '\n') {
                after++;
                line++;
            }
        } else if (ty == '%' && (after = match_named_tag(src, len, q, "raw", &sb, &sa)) != 0) {
            if (sa == '-')
                while (after < len && is_ws(src[after])) line += src[after++] == '\n';
            size_t j = after, end = 0;
            int eb = 0, ea = 0;
            for (; j + 1 < len; j++)
                if (src[j] == '{' && src[j + 1] == '%' &&
                    (end = match_named_tag(src, len, j, "endraw", &eb, &ea)) != 0)
                    break;
            if (!end) perr(p, line, "unclosed raw block");
            size_t cl = j - after;
            if (eb == '-') {
                while (cl > 0 && is_ws(src[after + cl - 1])) cl--;
            } else if (eb != '+') { /* lstrip_blocks applies to endraw too */
                size_t lp = cl;
                while (lp > 0 && src[after + lp - 1] != '\n') lp--;
                bool only = lp > 0 || (after > 0 && src[after - 1] == '\n');
                for (size_t k = lp; k < cl && only; k++)
                    only = src[after + k] == ' ' || src[after + k] == '\t';
                if (only) cl = lp;
            }
            emit_text(p, src + after, cl, line);
            line += count_nl(src + q, end - q);
            after = end;
            if (ea == '-') {
                while (after < len && is_ws(src[after])) line += src[after++] == '\n';
            } else if (ea != '+' && after < len && src[after] == '\n') {
                after++;
                line++;
            }
        } else {
            bool block = ty == '%';
            push_tok(p, (tok){.k = block ? T_BB : T_VB, .line = line});
            int s_after = 0;
            after = lex_tag(p, src, len, q + 2 + (sign ? 1 : 0), block, &line, &s_after);
            if (s_after == '-') {
                while (after < len && is_ws(src[after])) line += src[after++] == '\n';
            } else if (block && s_after != '+' && after < len && src[after] == '\n') {
                after++;
                line++;
            }
        }
        line_starting = after > 0 && src[after - 1] == '\n';
        pos = after;
    }
    push_tok(p, (tok){.k = T_EOF, .line = line});
}

/* ---- parser --------------------------------------------------------------- */
static tok *peek(parser *p) { return &p->t[p->pos]; }
static tok *peek2(parser *p) { return &p->t[p->pos + (p->t[p->pos].k == T_EOF ? 0 : 1)]; }
static tok *next(parser *p) {
    tok *t = &p->t[p->pos];
    if (t->k != T_EOF) p->pos++;
    return t;
}
static bool is_op(tok *t, const char *op) {
    return t->k == T_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}
static bool is_name(tok *t, const char *nm) {
    return t->k == T_NAME && t->n == strlen(nm) && memcmp(t->s, nm, t->n) == 0;
}
static const char *tok_desc(tok *t, char *buf, size_t cap) {
    switch (t->k) {
    case T_EOF: return "end of template";
    case T_TEXT: return "text";
    case T_BB: return "'{%'";
    case T_BE: return "'%}'";
    case T_VB: return "'{{'";
    case T_VE: return "'}}'";
    case T_STR: return "string literal";
    case T_INT:
    case T_FLOAT: return "number";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    }
}
static void expect_op(parser *p, const char *op) {
    tok *t = next(p);
    if (!is_op(t, op)) {
        char b[64];
        perr(p, t->line, "expected '%s', got %s", op, tok_desc(t, b, sizeof b));
    }
}
static const char *expect_name(parser *p) {
    tok *t = next(p);
    if (t->k != T_NAME) {
        char b[64];
        perr(p, t->line, "expected a name, got %s", tok_desc(t, b, sizeof b));
    }
    return jj_strdup(p->a, t->s, t->n);
}
static void expect_k(parser *p, tkind k, const char *what) {
    tok *t = next(p);
    if (t->k != k) {
        char b[64];
        perr(p, t->line, "expected %s, got %s", what, tok_desc(t, b, sizeof b));
    }
}

static jj_node *mk(parser *p, jj_kind k, int line) {
    jj_node *n = jj_alloc(p->a, sizeof *n);
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)k;
    n->line = line;
    return n;
}

/* growable node vector in the arena */
typedef struct nvec {
    jj_node **v;
    size_t n, cap;
} nvec;
static void nv_push(parser *p, nvec *v, jj_node *x) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 8;
        jj_node **nn = jj_alloc(p->a, nc * sizeof *nn);
        if (v->n) memcpy(nn, v->v, v->n * sizeof *nn);
        v->v = nn;
        v->cap = nc;
    }
    v->v[v->n++] = x;
}
typedef struct svec {
    const char **v;
    size_t n, cap;
} svec;
static void sv_push(parser *p, svec *v, const char *x) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 8;
        const char **nn = jj_alloc(p->a, nc * sizeof *nn);
        if (v->n) memcpy(nn, v->v, v->n * sizeof *nn);
        v->v = nn;
        v->cap = nc;
    }
    v->v[v->n++] = x;
}

static jj_node *parse_expr(parser *p);
static jj_node *parse_or(parser *p);
static jj_node *parse_unary(parser *p, bool with_filter);
static jj_node *parse_primary(parser *p);

static void enter(parser *p, int line) {
    if (++p->depth > JJ_MAX_DEPTH ||
        (size_t)(p->stack_base - (char *)__builtin_frame_address(0)) > p->stack_budget)
        perr(p, line, "template nested too deeply");
}
static void leave(parser *p) { p->depth--; }

/* call arguments after '(' : positional then name=value */
static void parse_args(parser *p, jj_node *n) {
    nvec pos = {0};
    nvec kv = {0};
    svec kn = {0};
    while (!is_op(peek(p), ")")) {
        if (pos.n + kv.n) expect_op(p, ",");
        if (is_op(peek(p), ")")) break; /* trailing comma */
        if (peek(p)->k == T_NAME && is_op(peek2(p), "=")) {
            const char *nm = expect_name(p);
            next(p);
            sv_push(p, &kn, nm);
            nv_push(p, &kv, parse_expr(p));
        } else {
            if (kv.n) perr(p, peek(p)->line, "positional argument after keyword argument");
            nv_push(p, &pos, parse_expr(p));
        }
    }
    expect_op(p, ")");
    n->items = pos.v;
    n->n = pos.n;
    n->kwn = kn.v;
    n->kwv = kv.v;
    n->nkw = kv.n;
}

static jj_node *parse_subscript(parser *p, jj_node *base, int line) {
    /* after '[' */
    jj_node *parts[3] = {0};
    int np = 0;
    bool slice = false;
    for (;;) {
        if (is_op(peek(p), ":")) {
            slice = true;
            next(p);
            if (np >= 2) perr(p, line, "too many ':' in subscript");
            np++;
            continue;
        }
        if (is_op(peek(p), "]")) break;
        if (parts[np]) perr(p, line, "bad subscript");
        parts[np] = parse_expr(p);
        if (is_op(peek(p), ",") && !slice) {
            /* a[1, 2] -> tuple key */
            jj_node *t = mk(p, E_TUPLE, line);
            nvec v = {0};
            nv_push(p, &v, parts[0]);
            while (is_op(peek(p), ",")) {
                next(p);
                if (is_op(peek(p), "]")) break;
                nv_push(p, &v, parse_expr(p));
            }
            t->items = v.v;
            t->n = v.n;
            parts[0] = t;
        }
    }
    expect_op(p, "]");
    jj_node *n = mk(p, slice ? E_SLICE : E_ITEM, line);
    n->a = base;
    if (slice) {
        n->b = parts[0];
        n->c = parts[1];
        n->d = parts[2];
    } else {
        if (!parts[0]) perr(p, line, "empty subscript");
        n->b = parts[0];
    }
    return n;
}

static jj_node *parse_postfix(parser *p, jj_node *n) {
    for (;;) {
        tok *t = peek(p);
        if (is_op(t, ".")) {
            next(p);
            tok *a = next(p);
            jj_node *x = mk(p, E_ATTR, t->line);
            x->a = n;
            if (a->k == T_NAME) {
                x->s = jj_strdup(p->a, a->s, a->n);
                x->sn = a->n;
            } else if (a->k == T_INT) {
                x->kind = E_ITEM;
                x->b = mk(p, E_LIT, t->line);
                x->b->lit = jv_int(a->i);
            } else {
                char b[64];
                perr(p, a->line, "expected an attribute name after '.', got %s",
                     tok_desc(a, b, sizeof b));
            }
            n = x;
        } else if (is_op(t, "[")) {
            next(p);
            n = parse_subscript(p, n, t->line);
        } else if (is_op(t, "(")) {
            next(p);
            jj_node *x = mk(p, E_CALL, t->line);
            x->a = n;
            parse_args(p, x);
            n = x;
        } else {
            return n;
        }
    }
}

static jj_node *parse_filter_call(parser *p, jj_node *input) {
    /* after '|' */
    int line = peek(p)->line;
    const char *nm = expect_name(p);
    while (is_op(peek(p), ".")) { /* dotted filter names */
        next(p);
        const char *part = expect_name(p);
        size_t l1 = strlen(nm), l2 = strlen(part);
        char *j = jj_alloc(p->a, l1 + l2 + 2);
        memcpy(j, nm, l1);
        j[l1] = '.';
        memcpy(j + l1 + 1, part, l2 + 1);
        nm = j;
    }
    jj_node *f = mk(p, E_FILTER, line);
    f->a = input;
    f->s = nm;
    f->sn = strlen(nm);
    if (is_op(peek(p), "(")) {
        next(p);
        parse_args(p, f);
    }
    return f;
}

static bool starts_test_arg(tok *t) {
    if (t->k == T_STR || t->k == T_INT || t->k == T_FLOAT) return true;
    if (t->k == T_NAME)
        return !(is_name(t, "else") || is_name(t, "or") || is_name(t, "and") ||
                 is_name(t, "if") || is_name(t, "in") || is_name(t, "is") || is_name(t, "not"));
    return is_op(t, "[") || is_op(t, "{") || is_op(t, "-");
}

static jj_node *parse_filter_expr(parser *p, jj_node *n) {
    for (;;) {
        tok *t = peek(p);
        if (is_op(t, "|")) {
            next(p);
            n = parse_filter_call(p, n);
        } else if (is_name(t, "is")) {
            next(p);
            jj_node *x = mk(p, E_TEST, t->line);
            x->a = n;
            if (is_name(peek(p), "not")) {
                next(p);
                x->neg = true;
            }
            tok *nt = next(p);
            if (nt->k != T_NAME) {
                char b[64];
                perr(p, nt->line, "expected a test name after 'is', got %s",
                     tok_desc(nt, b, sizeof b));
            }
            x->s = jj_strdup(p->a, nt->s, nt->n);
            x->sn = nt->n;
            if (is_op(peek(p), "(")) {
                next(p);
                parse_args(p, x);
            } else if (starts_test_arg(peek(p))) {
                jj_node *arg = parse_primary(p);
                arg = parse_postfix(p, arg);
                x->items = jj_alloc(p->a, sizeof(jj_node *));
                x->items[0] = arg;
                x->n = 1;
            }
            n = x;
        } else if (is_op(t, "(")) {
            next(p);
            jj_node *x = mk(p, E_CALL, t->line);
            x->a = n;
            parse_args(p, x);
            n = x;
        } else {
            return n;
        }
    }
}

static jj_node *parse_primary(parser *p) {
    tok *t = next(p);
    jj_node *n;
    enter(p, t->line);
    switch (t->k) {
    case T_NAME:
        n = mk(p, E_LIT, t->line);
        if (is_name(t, "true") || is_name(t, "True")) {
            n->lit = jv_bool(true);
        } else if (is_name(t, "false") || is_name(t, "False")) {
            n->lit = jv_bool(false);
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n->lit = jv_none();
        } else {
            n->kind = E_NAME;
            n->s = jj_strdup(p->a, t->s, t->n);
            n->sn = t->n;
        }
        break;
    case T_STR:
        n = mk(p, E_LIT, t->line);
        n->lit = jv_str(t->s, t->n);
        break;
    case T_INT:
        n = mk(p, E_LIT, t->line);
        n->lit = jv_int(t->i);
        break;
    case T_FLOAT:
        n = mk(p, E_LIT, t->line);
        n->lit = jv_float(t->f);
        break;
    case T_OP:
        if (is_op(t, "(")) {
            if (is_op(peek(p), ")")) {
                next(p);
                n = mk(p, E_TUPLE, t->line);
                break;
            }
            jj_node *e = parse_expr(p);
            if (is_op(peek(p), ",")) {
                nvec v = {0};
                nv_push(p, &v, e);
                while (is_op(peek(p), ",")) {
                    next(p);
                    if (is_op(peek(p), ")")) break;
                    nv_push(p, &v, parse_expr(p));
                }
                n = mk(p, E_TUPLE, t->line);
                n->items = v.v;
                n->n = v.n;
            } else {
                n = e;
            }
            expect_op(p, ")");
            break;
        }
        if (is_op(t, "[")) {
            nvec v = {0};
            while (!is_op(peek(p), "]")) {
                if (v.n) expect_op(p, ",");
                if (is_op(peek(p), "]")) break;
                nv_push(p, &v, parse_expr(p));
            }
            next(p);
            n = mk(p, E_LIST, t->line);
            n->items = v.v;
            n->n = v.n;
            break;
        }
        if (is_op(t, "{")) {
            nvec v = {0};
            while (!is_op(peek(p), "}")) {
                if (v.n) expect_op(p, ",");
                if (is_op(peek(p), "}")) break;
                nv_push(p, &v, parse_expr(p));
                expect_op(p, ":");
                nv_push(p, &v, parse_expr(p));
            }
            next(p);
            n = mk(p, E_DICT, t->line);
            n->items = v.v;
            n->n = v.n;
            break;
        }
        /* fallthrough */
    default: {
        char b[64];
        perr(p, t->line, "unexpected %s", tok_desc(t, b, sizeof b));
    }
    }
    leave(p);
    return n;
}

static jj_node *parse_unary(parser *p, bool with_filter) {
    tok *t = peek(p);
    jj_node *n;
    enter(p, t->line);
    if (is_op(t, "-") || is_op(t, "+")) {
        next(p);
        n = mk(p, E_UNARY, t->line);
        n->op = is_op(t, "-") ? OP_NEG : OP_POS;
        n->a = parse_unary(p, false);
    } else {
        n = parse_postfix(p, parse_primary(p));
    }
    if (with_filter) n = parse_filter_expr(p, n);
    leave(p);
    return n;
}

static jj_node *bin(parser *p, jj_op op, jj_node *a, jj_node *b, int line) {
    jj_node *n = mk(p, E_BIN, line);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jj_node *parse_pow(parser *p) {
    jj_node *n = parse_unary(p, true);
    while (is_op(peek(p), "**")) {
        int line = next(p)->line;
        n = bin(p, OP_POW, n, parse_unary(p, true), line);
    }
    return n;
}
static jj_node *parse_math2(parser *p) {
    jj_node *n = parse_pow(p);
    for (;;) {
        tok *t = peek(p);
        jj_op op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV
                 : is_op(t, "%") ? OP_MOD : OP_NONE;
        if (!op) return n;
        next(p);
        n = bin(p, op, n, parse_pow(p), t->line);
    }
}
static jj_node *parse_concat(parser *p) {
    jj_node *n = parse_math2(p);
    while (is_op(peek(p), "~")) {
        int line = next(p)->line;
        n = bin(p, OP_CONCAT, n, parse_math2(p), line);
    }
    return n;
}
static jj_node *parse_math1(parser *p) {
    jj_node *n = parse_concat(p);
    for (;;) {
        tok *t = peek(p);
        jj_op op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : OP_NONE;
        if (!op) return n;
        next(p);
        n = bin(p, op, n, parse_concat(p), t->line);
    }
}
static jj_node *parse_compare(parser *p) {
    jj_node *n = parse_math1(p);
    jj_node *prev_rhs = NULL;
    for (;;) {
        tok *t = peek(p);
        jj_op op = OP_NONE;
        if (is_op(t, "==")) op = OP_EQ;
        else if (is_op(t, "!=")) op = OP_NE;
        else if (is_op(t, "<")) op = OP_LT;
        else if (is_op(t, "<=")) op = OP_LE;
        else if (is_op(t, ">")) op = OP_GT;
        else if (is_op(t, ">=")) op = OP_GE;
        else if (is_name(t, "in")) op = OP_IN;
        else if (is_name(t, "not") && is_name(peek2(p), "in")) op = OP_NOTIN;
        if (!op) return n;
        next(p);
        if (op == OP_NOTIN) next(p);
        jj_node *rhs = parse_math1(p);
        if (prev_rhs) {
            /* chained a < b < c -> (a < b) and (b < c) */
            jj_node *c = bin(p, op, prev_rhs, rhs, t->line);
            jj_node *x = mk(p, E_AND, t->line);
            x->a = n;
            x->b = c;
            n = x;
        } else {
            n = bin(p, op, n, rhs, t->line);
        }
        prev_rhs = rhs;
    }
}
static jj_node *parse_not(parser *p) {
    if (is_name(peek(p), "not")) {
        tok *t = next(p);
        enter(p, t->line);
        jj_node *n = mk(p, E_UNARY, t->line);
        n->op = OP_NOT;
        n->a = parse_not(p);
        leave(p);
        return n;
    }
    return parse_compare(p);
}
static jj_node *parse_and(parser *p) {
    jj_node *n = parse_not(p);
    while (is_name(peek(p), "and")) {
        int line = next(p)->line;
        jj_node *x = mk(p, E_AND, line);
        x->a = n;
        x->b = parse_not(p);
        n = x;
    }
    return n;
}
static jj_node *parse_or(parser *p) {
    jj_node *n = parse_and(p);
    while (is_name(peek(p), "or")) {
        int line = next(p)->line;
        jj_node *x = mk(p, E_OR, line);
        x->a = n;
        x->b = parse_and(p);
        n = x;
    }
    return n;
}
static jj_node *parse_expr(parser *p) {
    enter(p, peek(p)->line);
    jj_node *n = parse_or(p);
    while (is_name(peek(p), "if")) {
        int line = next(p)->line;
        jj_node *x = mk(p, E_COND, line);
        x->a = n;
        x->b = parse_or(p);
        if (is_name(peek(p), "else")) {
            next(p);
            x->c = parse_expr(p);
        }
        n = x;
    }
    leave(p);
    return n;
}
/* expression or bare tuple "a, b" (set / for / output) */
static jj_node *parse_tuple_expr(parser *p, bool condexpr) {
    int line = peek(p)->line;
    jj_node *e = condexpr ? parse_expr(p) : parse_or(p);
    if (!is_op(peek(p), ",")) return e;
    nvec v = {0};
    nv_push(p, &v, e);
    while (is_op(peek(p), ",")) {
        next(p);
        tok *t = peek(p);
        if (t->k == T_BE || t->k == T_VE || is_name(t, "if") || is_op(t, ")")) break;
        nv_push(p, &v, condexpr ? parse_expr(p) : parse_or(p));
    }
    jj_node *n = mk(p, E_TUPLE, line);
    n->items = v.v;
    n->n = v.n;
    return n;
}

/* ---- statements ----------------------------------------------------------- */
static void parse_body(parser *p, nvec *out, const char *const *ends);

static bool at_block_named(parser *p, const char *const *names) {
    if (peek(p)->k != T_BB) return false;
    tok *t = peek2(p);
    for (; *names; names++)
        if (is_name(t, *names)) return true;
    return false;
}

static void end_tag(parser *p) { expect_k(p, T_BE, "'%}'"); }

/* target names: a  |  a, b  |  (a, b) */
static void parse_targets(parser *p, svec *names) {
    bool paren = is_op(peek(p), "(");
    if (paren) next(p);
    sv_push(p, names, expect_name(p));
    while (is_op(peek(p), ",")) {
        next(p);
        if (paren && is_op(peek(p), ")")) break;
        sv_push(p, names, expect_name(p));
    }
    if (paren) expect_op(p, ")");
}

static jj_node *parse_if(parser *p, int line) {
    jj_node *n = mk(p, S_IF, line);
    n->a = parse_expr(p);
    end_tag(p);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    nvec body = {0};
    parse_body(p, &body, ends);
    n->items = body.v;
    n->n = body.n;
    next(p); /* {% */
    tok *t = next(p);
    if (is_name(t, "elif")) {
        jj_node *e = parse_if(p, t->line);
        n->body2 = jj_alloc(p->a, sizeof(jj_node *));
        n->body2[0] = e;
        n->n2 = 1;
        return n; /* the nested if consumed endif */
    }
    if (is_name(t, "else")) {
        end_tag(p);
        static const char *const ends2[] = {"endif", NULL};
        nvec eb = {0};
        parse_body(p, &eb, ends2);
        n->body2 = eb.v;
        n->n2 = eb.n;
        next(p);
        next(p);
    }
    end_tag(p);
    return n;
}

static jj_node *parse_stmt(parser *p) {
    tok *bb = next(p); /* {% */
    tok *t = next(p);
    int line = bb->line;
    if (t->k != T_NAME) {
        char b[64];
        perr(p, t->line, "expected a statement name, got %s", tok_desc(t, b, sizeof b));
    }
    enter(p, line);
    jj_node *n = NULL;
    if (is_name(t, "if")) {
        n = parse_if(p, line);
    } else if (is_name(t, "for")) {
        n = mk(p, S_FOR, line);
        svec names = {0};
        parse_targets(p, &names);
        n->kwn = names.v;
        n->nkw = names.n;
        if (!is_name(next(p), "in")) perr(p, line, "expected 'in' in for loop");
        n->a = parse_tuple_expr(p, false);
        if (is_name(peek(p), "if")) {
            next(p);
            n->b = parse_expr(p);
        }
        if (is_name(peek(p), "recursive"))
            perr(p, line, "recursive for loops are not supported");
        end_tag(p);
        static const char *const ends[] = {"else", "endfor", NULL};
        nvec body = {0};
        parse_body(p, &body, ends);
        n->items = body.v;
        n->n = body.n;
        next(p);
        if (is_name(next(p), "else")) {
            end_tag(p);
            static const char *const ends2[] = {"endfor", NULL};
            nvec eb = {0};
            parse_body(p, &eb, ends2);
            n->body2 = eb.v;
            n->n2 = eb.n;
            next(p);
            next(p);
        }
        end_tag(p);
    } else if (is_name(t, "set")) {
        /* set a = e | set a, b = e | set ns.x = e | set a %}...{% endset %} */
        svec names = {0};
        jj_node *attr_obj = NULL;
        const char *first = expect_name(p);
        if (is_op(peek(p), ".")) {
            next(p);
            attr_obj = mk(p, E_NAME, line);
            attr_obj->s = first;
            attr_obj->sn = strlen(first);
            sv_push(p, &names, expect_name(p));
        } else {
            sv_push(p, &names, first);
            while (is_op(peek(p), ",")) {
                next(p);
                sv_push(p, &names, expect_name(p));
            }
        }
        if (is_op(peek(p), "=")) {
            next(p);
            n = mk(p, S_SET, line);
            n->a = attr_obj;
            n->b = parse_tuple_expr(p, true);
            n->kwn = names.v;
            n->nkw = names.n;
            end_tag(p);
        } else {
            if (attr_obj || names.n != 1) perr(p, line, "block set needs a single name");
            n = mk(p, S_SETBLOCK, line);
            n->kwn = names.v;
            n->nkw = 1;
            /* optional filters: {% set x | trim %} */
            jj_node *f = NULL;
            while (is_op(peek(p), "|")) {
                next(p);
                f = parse_filter_call(p, f);
            }
            n->a = f;
            end_tag(p);
            static const char *const ends[] = {"endset", NULL};
            nvec body = {0};
            parse_body(p, &body, ends);
            n->items = body.v;
            n->n = body.n;
            next(p);
            next(p);
            end_tag(p);
        }
    } else if (is_name(t, "macro") || is_name(t, "call")) {
        bool is_call = is_name(t, "call");
        n = mk(p, is_call ? S_CALLBLOCK : S_MACRO, line);
        svec pn = {0};
        nvec pd = {0};
        if (is_call && is_op(peek(p), "(")) {
            /* caller parameters */
            next(p);
            while (!is_op(peek(p), ")")) {
                if (pn.n) expect_op(p, ",");
                sv_push(p, &pn, expect_name(p));
                jj_node *def = NULL;
                if (is_op(peek(p), "=")) {
                    next(p);
                    def = parse_expr(p);
                }
                nv_push(p, &pd, def);
            }
            next(p);
        }
        if (is_call) {
            n->a = parse_expr(p);
            if (n->a->kind != E_CALL) perr(p, line, "call block needs a macro call");
        } else {
            n->s = expect_name(p);
            n->sn = strlen(n->s);
            expect_op(p, "(");
            while (!is_op(peek(p), ")")) {
                if (pn.n) expect_op(p, ",");
                if (is_op(peek(p), ")")) break;
                sv_push(p, &pn, expect_name(p));
                jj_node *def = NULL;
                if (is_op(peek(p), "=")) {
                    next(p);
                    def = parse_expr(p);
                }
                nv_push(p, &pd, def);
            }
            next(p);
        }
        n->kwn = pn.v;
        n->kwv = pd.v;
        n->nkw = pn.n;
        end_tag(p);
        static const char *const mends[] = {"endmacro", NULL};
        static const char *const cends[] = {"endcall", NULL};
        nvec body = {0};
        parse_body(p, &body, is_call ? cends : mends);
        n->items = body.v;
        n->n = body.n;
        next(p);
        next(p);
        if (!is_call && peek(p)->k == T_NAME) next(p); /* {% endmacro name %} */
        end_tag(p);
    } else if (is_name(t, "filter")) {
        n = mk(p, S_FILTERBLOCK, line);
        jj_node *f = parse_filter_call(p, NULL);
        while (is_op(peek(p), "|")) {
            next(p);
            f = parse_filter_call(p, f);
        }
        n->a = f;
        end_tag(p);
        static const char *const ends[] = {"endfilter", NULL};
        nvec body = {0};
        parse_body(p, &body, ends);
        n->items = body.v;
        n->n = body.n;
        next(p);
        next(p);
        end_tag(p);
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        n = mk(p, is_name(t, "break") ? S_BREAK : S_CONTINUE, line);
        end_tag(p);
    } else if (is_name(t, "with")) {
        n = mk(p, S_WITH, line);
        svec names = {0};
        nvec vals = {0};
        while (peek(p)->k != T_BE) {
            if (names.n) expect_op(p, ",");
            sv_push(p, &names, expect_name(p));
            expect_op(p, "=");
            nv_push(p, &vals, parse_expr(p));
        }
        n->kwn = names.v;
        n->kwv = vals.v;
        n->nkw = names.n;
        end_tag(p);
        static const char *const ends[] = {"endwith", NULL};
        nvec body = {0};
        parse_body(p, &body, ends);
        n->items = body.v;
        n->n = body.n;
        next(p);
        next(p);
        end_tag(p);
    } else if (is_name(t, "do")) {
        n = mk(p, S_DO, line);
        n->a = parse_tuple_expr(p, true);
        end_tag(p);
    } else if (is_name(t, "generation")) {
        /* transformers' AssistantTracker: {% generation %}...{% endgeneration %}
         * only marks spans; render the body as is */
        end_tag(p);
        static const char *const ends[] = {"endgeneration", NULL};
        nvec body = {0};
        parse_body(p, &body, ends);
        n = mk(p, S_IF, line);
        n->a = mk(p, E_LIT, line);
        n->a->lit = jv_bool(true);
        n->items = body.v;
        n->n = body.n;
        next(p);
        next(p);
        end_tag(p);
    } else {
        perr(p, line, "unknown or unsupported statement '%.*s'", (int)(t->n > 40 ? 40 : t->n),
             t->s);
    }
    leave(p);
    return n;
}

static void parse_body(parser *p, nvec *out, const char *const *ends) {
    for (;;) {
        tok *t = peek(p);
        if (t->k == T_EOF) {
            if (ends) {
                const char *const *e = ends;
                while (e[1]) e++;
                perr(p, t->line, "unexpected end of template, expected '%s'", *e);
            }
            return;
        }
        if (t->k == T_TEXT) {
            next(p);
            jj_node *n = mk(p, S_TEXT, t->line);
            n->s = t->s;
            n->sn = t->n;
            nv_push(p, out, n);
        } else if (t->k == T_VB) {
            next(p);
            jj_node *n = mk(p, S_OUT, t->line);
            n->a = parse_tuple_expr(p, true);
            expect_k(p, T_VE, "'}}'");
            nv_push(p, out, n);
        } else if (t->k == T_BB) {
            if (ends && at_block_named(p, ends)) return;
            tok *nt = peek2(p);
            static const char *const stray[] = {"endif", "endfor", "else", "elif", "endset",
                                                "endmacro", "endcall", "endfilter",
                                                "endgeneration", "endwith", NULL};
            if (at_block_named(p, stray))
                perr(p, nt->line, "unexpected '%.*s'", (int)nt->n, nt->s);
            nv_push(p, out, parse_stmt(p));
        } else {
            char b[64];
            perr(p, t->line, "unexpected %s", tok_desc(t, b, sizeof b));
        }
    }
}

pagoda_status jj_compile(const char *src, jj_template **out) {
    *out = NULL;
    jj_template *t = calloc(1, sizeof *t);
    if (!t) return pg_error(PAGODA_ERR_NOMEM, "chat template: out of memory");
    parser *p = calloc(1, sizeof *p);
    if (!p) {
        free(t);
        return pg_error(PAGODA_ERR_NOMEM, "chat template: out of memory");
    }
    t->arena.limit = JJ_MAX_ARENA;
    t->arena.jmp = &p->jmp;
    t->arena.st = &p->st;
    p->a = &t->arena;
    p->stack_base = (char *)__builtin_frame_address(0);
    p->stack_budget = jj_stack_budget();
    if (setjmp(p->jmp)) {
        pagoda_status st = p->st;
        jj_arena_free(&t->arena);
        free(t);
        free(p);
        return st;
    }
    lex(p, src);
    nvec body = {0};
    parse_body(p, &body, NULL);
    t->body = body.v;
    t->n = body.n;
    t->arena.jmp = NULL;
    t->arena.st = NULL;
    free(p);
    *out = t;
    return PAGODA_OK;
}

void jj_template_free(jj_template *t) {
    if (!t) return;
    jj_arena_free(&t->arena);
    free(t);
}
