/* Internals shared by compile.c, stack.c, gstate.c and token_mask.c. */
#ifndef PAGODA_GRAMMAR_GRAM_INTERNAL_H
#define PAGODA_GRAMMAR_GRAM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar/gram.h"
#include "grammar/gram_ir.h"

typedef struct g_ref {
    int32_t rule; /* rule to push */
    int32_t ret;  /* node to continue at when it completes */
} g_ref;

/* The automaton: DFA nodes of all rules. */
struct pg_gram {
    int32_t n_nodes, n_rules, root;
    int32_t *next;      /* [n_nodes][256]: byte transition or -1 */
    uint8_t *final;     /* [n_nodes]: the rule may end here */
    uint8_t *has_bytes; /* [n_nodes]: at least one byte transition */
    uint8_t *tail;      /* [n_nodes]: final, no byte edge, no ref: returning is all it can do */
    int32_t *ref_off;   /* [n_nodes + 1] into refs */
    g_ref *refs;
    int32_t *rule_start; /* [n_rules] */
    int32_t *node_rule;  /* [n_nodes] */
    char **rule_names;   /* [n_rules] */
};

/* Build the automaton from a builder whose root rule is `root` (by name). */
pagoda_status g_compile(gx_builder *b, const char *root, pg_gram **out);

/* ---- hash-consed stacks: a stack is (node, parent stack id); parent -1 is
 * the bottom of the real stack; G_SENTINEL marks "unknown context" (used to
 * classify tokens independently of what lies below a node). */
#define G_ROOT (-1)
#define G_SENTINEL (-2)

typedef struct g_stacks {
    int32_t *node, *parent; /* [n] */
    uint32_t *mark;         /* [n] epoch of the last visit */
    int32_t n, cap;
    int32_t *ht; /* open addressing over ids, -1 empty */
    uint32_t ht_mask;
    uint32_t epoch;
    /* the work budget of one matcher operation (a byte fed, a token
     * accepted, a mask filled, a token cache computed): steps = stacks
     * advanced + stacks expanded + rule references followed. Past `budget`
     * (0: none) the operation stops, `over` is set and the result sets get
     * `oom`; the caller reports LIMIT. Ambiguous grammars can otherwise
     * double the live stacks with every byte (x ::= "a" y | "a" z | "",
     * y ::= x "b", z ::= x "c": 2^n stacks after n a's). */
    uint64_t work, budget;
    bool over;
} g_stacks;

/* Steps allowed per operation: ~15x the largest real use measured, 533534
 * steps for a token cache over llama3's 128256 tokens (tests/test_grammar.c
 * and `pagoda bench grammar`; a mask took at most 158019 steps, a token
 * accepted 133, a byte fed 17). A sixteenth in fuzzing builds (small
 * vocabularies; inputs reaching it stay fast under ASan). */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define G_WORK_BUDGET (1ull << 19)
#else
#define G_WORK_BUDGET (1ull << 23)
#endif

static inline void g_budget_start(g_stacks *s, uint64_t budget) {
    s->work = 0;
    s->budget = budget;
    s->over = false;
}

bool g_stacks_init(g_stacks *s);
void g_stacks_free(g_stacks *s);
void g_stacks_clear(g_stacks *s);
int32_t g_stacks_intern(g_stacks *s, int32_t node, int32_t parent); /* -1: out of memory */

/* A state: the stacks whose top node has byte edges, plus flags. */
typedef struct g_set {
    int32_t *ids;
    int32_t n, cap;
    bool accept; /* a stack completed the root rule */
    bool popped; /* a stack returned into G_SENTINEL */
    bool oom;
} g_set;

void g_set_free(g_set *s);
/* out = the closure of pushing stack id `s` (pushes into rules, returns
 * from completed rules; stacks whose top has byte edges are kept). Uses
 * the stacks' marks (call g_begin first). */
void g_expand(const pg_gram *g, g_stacks *st, int32_t s, g_set *out);
/* Start a new closure (new mark epoch) and clear out. */
void g_begin(g_stacks *st, g_set *out);
/* out = the state after byte c from in (out cleared first). */
void g_advance(const pg_gram *g, g_stacks *st, const g_set *in, uint8_t c, g_set *out);
/* The start state of the grammar. */
void g_start(const pg_gram *g, g_stacks *st, g_set *out);

#endif
