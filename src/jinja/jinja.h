/* Jinja subset interpreter used for chat templates (internal to the
 * tokenizer layer; the public entry point is chat_template.h).
 *
 * Reference semantics: Python jinja2 3.1 with trim_blocks, lstrip_blocks and
 * the loopcontrols extension, as Hugging Face transformers configures it for
 * apply_chat_template (ImmutableSandboxedEnvironment, tojson =
 * json.dumps(ensure_ascii=False)). Values follow Python's rules (truthiness,
 * int/float arithmetic, str()/repr() of values, insertion-ordered dicts).
 *
 * Memory: a compiled template owns an arena holding its AST. A render owns a
 * second arena holding every value it creates; it is dropped in one piece
 * when the render ends. Errors inside the lexer, parser and evaluator unwind
 * with longjmp to the entry point, which turns them into pagoda_status plus a
 * one-line message "line N: problem". Nothing outside the arenas is held
 * across a possible unwind except the arena itself. */
#ifndef PAGODA_TOKENIZER_JINJA_H
#define PAGODA_TOKENIZER_JINJA_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* ---- limits (hostile templates must end with an error, not hang or crash) */
#define JJ_MAX_DEPTH 200                  /* parser nesting and macro recursion */
#define JJ_MAX_OUTPUT ((size_t)16 << 20)  /* bytes of rendered text */
#define JJ_MAX_ARENA ((size_t)256 << 20)  /* bytes of values per render */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
/* `make fuzz` (docs/FUZZING.md): a tenth of the steps, so that an input
 * that reaches the limit takes a fraction of a second under ASan instead
 * of seconds (tests/test_jinja.c checks the real limit) */
#define JJ_MAX_STEPS 500000ull
#else
#define JJ_MAX_STEPS 5000000ull /* evaluation steps per render */
#endif

/* Stack bytes the interpreter may use below its entry point: at most 1 MiB
 * and at most half of what the calling thread's stack has left (measured
 * once per thread), so deep but legal nesting ends with a LIMIT error on any
 * thread instead of a stack overflow. */
size_t jj_stack_budget(void);

/* ---- arena ---------------------------------------------------------------- */
typedef struct jj_chunk jj_chunk;
typedef struct jj_arena {
    jj_chunk *head;
    size_t used, limit;
    jmp_buf *jmp; /* where to unwind on exhaustion */
    pagoda_status *st;
    const int *line; /* current template line for messages (may be NULL) */
} jj_arena;

/* Never NULL: exhaustion unwinds to the arena's jmp_buf. */
void *jj_alloc(jj_arena *a, size_t n) __attribute__((returns_nonnull, malloc));
char *jj_strdup(jj_arena *a, const char *s, size_t n) __attribute__((returns_nonnull));
void jj_arena_free(jj_arena *a);

/* ---- values --------------------------------------------------------------- */
typedef enum jj_type {
    JV_UNDEF = 0,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* also tuples (flag) */
    JV_DICT,
    JV_NS, /* namespace(): a dict whose attributes may be assigned */
    JV_FUNC,
} jj_type;

typedef struct jj_list jj_list;
typedef struct jj_dict jj_dict;
typedef struct jj_func jj_func;

typedef struct jv {
    uint8_t t;
    bool tuple; /* JV_LIST printed as (a, b) */
    bool safe;  /* JV_STR that is a markupsafe.Markup (|safe, |escape): adding a
                   plain string to it HTML-escapes that string */
    bool gen;   /* JV_LIST standing for a Python generator (map, select, ...):
                   always true, no len(), not JSON serializable */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s; /* JV_STR; JV_UNDEF keeps the missing name here (may be NULL) */
        jj_list *l;
        jj_dict *d;
        jj_func *fn;
    } u;
} jv;

struct jj_list {
    jv *v;
    size_t n, cap;
};
struct jj_dict {
    jv *k, *v;
    size_t n, cap;
};

/* ---- AST ------------------------------------------------------------------ */
typedef enum jj_kind {
    /* expressions */
    E_LIT,
    E_NAME,
    E_LIST,
    E_TUPLE,
    E_DICT, /* items: k0, v0, k1, v1, ... */
    E_ATTR,
    E_ITEM,
    E_SLICE, /* a[b:c:d] (b/c/d nullable) */
    E_CALL,
    E_FILTER, /* a | name(args) ; a NULL inside a filter block head */
    E_TEST,   /* a is [not] name(args) */
    E_UNARY,
    E_BIN,
    E_AND,
    E_OR,
    E_COND, /* a if b else c */
    /* statements */
    S_TEXT,
    S_OUT,
    S_IF,  /* if a: items else body2 */
    S_FOR, /* for names in a [if b]: items else body2 */
    S_SET, /* names / a (ns.attr target) = b */
    S_SETBLOCK,
    S_MACRO,
    S_CALLBLOCK,
    S_FILTERBLOCK,
    S_BREAK,
    S_CONTINUE,
    S_DO,
    S_WITH, /* with kwn[i] = kwv[i], ...: items in a new frame */
} jj_kind;

typedef enum jj_op {
    OP_NONE = 0,
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
    OP_NOT, OP_NEG, OP_POS,
} jj_op;

typedef struct jj_node jj_node;
struct jj_node {
    uint8_t kind, op;
    bool neg;  /* E_TEST "is not" */
    int line;
    jj_node *a, *b, *c, *d;
    jj_node **items; /* args, list items, body */
    size_t n;
    const char **kwn; /* kwarg names / macro param names / for targets */
    jj_node **kwv;    /* kwarg values / macro param defaults (NULL = none) */
    size_t nkw;
    jj_node **body2; /* else body */
    size_t n2;
    const char *s; /* name / text */
    size_t sn;
    jv lit;
};

typedef struct jj_template {
    jj_arena arena;
    jj_node **body;
    size_t n;
} jj_template;

/* Compile `src` (NUL-terminated). On error returns a status with the message
 * "line N: ..." set through pg_error. */
pagoda_status jj_compile(const char *src, jj_template **out);
void jj_template_free(jj_template *t);

/* ---- rendering ------------------------------------------------------------ */
typedef struct jj_ctx jj_ctx;

/* A render context: variables are added with jj_ctx_set before jj_render. */
typedef struct jj_render_opts {
    int year, month, day, hour, min, sec; /* strftime_now's clock (local time) */
    int wday, yday;
} jj_render_opts;

jj_ctx *jj_ctx_new(const jj_render_opts *opts);
void jj_ctx_free(jj_ctx *c);
jj_arena *jj_ctx_arena(jj_ctx *c);
/* Bind a top-level variable (a later binding of the same name wins).
 * Errors: NOMEM / LIMIT. */
pagoda_status jj_ctx_set(jj_ctx *c, const char *name, jv v);
/* Bind a top-level variable to a JSON value (NULL binds none): objects
 * become insertion-ordered dicts, integral numbers ints. */
struct cJSON;
pagoda_status jj_ctx_set_json(jj_ctx *c, const char *name, const struct cJSON *j);
/* Render into a malloc'ed NUL-terminated string. Errors: FORMAT (template
 * error / raise_exception, message "line N: ..."), LIMIT (size, depth, step
 * limits), NOMEM. */
pagoda_status jj_render(jj_ctx *c, const jj_template *t, char **out, size_t *out_len);

/* ---- value helpers (jinja_value.c) --------------------------------------- */
jv jv_none(void);
jv jv_undef(const char *name);
jv jv_bool(bool b);
jv jv_int(int64_t i);
jv jv_float(double f);
jv jv_str(const char *p, size_t n); /* no copy */
jv jv_cstr(const char *p);          /* no copy */
jv jv_new_list(jj_arena *a, size_t cap);
jv jv_new_dict(jj_arena *a, size_t cap);
void jv_list_push(jj_arena *a, jv list, jv item);
void jv_dict_set(jj_arena *a, jv dict, jv key, jv val);
/* NULL if missing */
jv *jv_dict_get(jv dict, jv key);
jv *jv_dict_gets(jv dict, const char *key);
bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);
bool jv_is_str(jv v, const char *s);

/* growable byte buffer in an arena */
typedef struct jj_buf {
    jj_arena *a;
    char *p;
    size_t n, cap, limit;
} jj_buf;
void jj_buf_init(jj_buf *b, jj_arena *a, size_t limit);
void jj_buf_put(jj_buf *b, const char *s, size_t n);
void jj_buf_puts(jj_buf *b, const char *s);
void jj_buf_printf(jj_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
jv jj_buf_value(jj_buf *b);

/* Python str(v) / repr(v) appended to b. */
void jv_write_str(jj_buf *b, jv v);
void jv_write_repr(jj_buf *b, jv v);
/* json.dumps(v, ensure_ascii, indent (<0: none), separators, sort_keys).
 * Returns false (nothing usable written) if v holds a non-JSON value. */
bool jv_write_json(jj_buf *b, jv v, int indent, const char *item_sep, const char *key_sep,
                   bool sort_keys, bool ensure_ascii, int depth);
void jv_write_float(jj_buf *b, double f); /* Python repr(float) */
const char *jv_type_name(jv v);           /* Python type name for messages */

/* UTF-8 code point helpers */
size_t jj_utf8_len(const char *p, size_t n);                    /* code points */
size_t jj_utf8_next(const char *p, size_t n, size_t i, int32_t *cp); /* returns new i */

#endif
