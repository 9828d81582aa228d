/* Shared between the Jinja evaluator (jinja_eval.c) and its builtins
 * (jinja_builtins.c): the render context, callables and error unwinding. */
#ifndef PAGODA_TOKENIZER_JINJA_INTERNAL_H
#define PAGODA_TOKENIZER_JINJA_INTERNAL_H

#include "jinja/jinja.h"

#define JJ_MAX_MACRO_DEPTH 100 /* nested macro calls */
#define JJ_MAX_EVAL_DEPTH 1000 /* nested expression/statement evaluation */
#define JJ_MAX_LIST (1 << 20)  /* items in one list built by +, *, append */

typedef jv (*jj_builtin_fn)(jj_ctx *c, jv self, const jv *args, size_t nargs, const char **kwn,
                            const jv *kwv, size_t nkw);

typedef struct jj_frame {
    struct jj_frame *parent;
    jv vars; /* JV_DICT name -> value */
} jj_frame;

struct jj_func {
    const char *name;
    jj_builtin_fn fn;   /* builtin, or NULL for a macro */
    jv self;            /* bound receiver (builtins) */
    const jj_node *mac; /* S_MACRO or S_CALLBLOCK (caller) node */
    jj_frame *closure;
};

struct jj_ctx {
    jj_arena arena;
    jmp_buf jmp;
    pagoda_status st;
    jj_frame *globals;
    jj_buf *out;
    jj_buf root_out; /* the render's output */
    int line;
    int depth, macro_depth;
    char *stack_base; /* frame address at jj_render entry */
    size_t stack_budget;
    unsigned long long steps;
    int loopctl; /* 0, 1 = break, 2 = continue */
    jv pending_caller;
    jj_render_opts opts;
};

/* Record "line N: <msg>" (status FORMAT) and unwind to jj_render. */
__attribute__((noreturn, format(printf, 2, 3))) void jj_fail(jj_ctx *c, const char *fmt, ...);
/* Same with another status (LIMIT, ...). */
__attribute__((noreturn, format(printf, 3, 4))) void jj_fail_st(jj_ctx *c, pagoda_status st,
                                                               const char *fmt, ...);
/* Raise the error an Undefined value gives when used (e.g. "'x' is undefined"). */
__attribute__((noreturn)) void jj_fail_undef(jj_ctx *c, jv u);

/* Count `units` evaluation steps of work done by one operation (list
 * scans, substring searches) against the step limit. */
void jj_charge(jj_ctx *c, size_t units);

/* Python repr(v) as a value. */
jv jj_repr(jj_ctx *c, jv v);
/* Python str(v) as a value (strings returned as is). */
jv jj_to_str(jj_ctx *c, jv v);
/* The items of an iterable (list, tuple, dict keys, string characters,
 * undefined -> empty); errors for others. */
jv jj_iterate(jj_ctx *c, jv v);
/* Python ordering for sort/min/max and < > (errors on mixed types). */
int jj_compare(jj_ctx *c, jv a, jv b);
/* Attribute / item access with Jinja's fallbacks. */
jv jj_getattr(jj_ctx *c, jv obj, const char *name, size_t n);
jv jj_getitem(jj_ctx *c, jv obj, jv key);
/* Call any callable value. */
jv jj_call(jj_ctx *c, jv fn, const jv *args, size_t nargs, const char **kwn, const jv *kwv,
           size_t nkw);
jv jj_make_builtin(jj_ctx *c, const char *name, jj_builtin_fn fn, jv self);

/* markupsafe.escape: Markup values unchanged, others str() and escaped
 * (& < > " '); the result is Markup. */
jv jj_escape(jj_ctx *c, jv v);

/* Python's `str % args` (%s %r %d %i %f %%). */
jv jj_percent_format(jj_ctx *c, jv fmt, jv args);

/* builtins (jinja_builtins.c) */
jv jj_filter(jj_ctx *c, const char *name, jv in, const jv *args, size_t nargs, const char **kwn,
             const jv *kwv, size_t nkw);
bool jj_test(jj_ctx *c, const char *name, jv v, const jv *args, size_t nargs);
/* Method call obj.name(...) for str / list / dict receivers; false if none. */
bool jj_method(jj_ctx *c, jv obj, const char *name, const jv *args, size_t nargs,
               const char **kwn, const jv *kwv, size_t nkw, jv *out);
/* Install range, namespace, raise_exception, strftime_now, dict ... */
void jj_install_globals(jj_ctx *c, jj_frame *f);

#endif
