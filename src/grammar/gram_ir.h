/* Grammar IR (internal to src/grammar/): rules as expression trees over
 * byte classes, built by the EBNF parser (ebnf.c), the regex parser
 * (regex.c) and the JSON-schema converter (json_schema.c), compiled by
 * compile.c into one byte-level pushdown automaton (gram.h).
 *
 * Code points are turned into UTF-8 byte sequences here (gx_codepoints),
 * so everything after the parsers works on bytes only; the split of a code
 * point range into byte ranges follows Russ Cox's "utf8 ranges" (RE2's
 * UTF-8 compiler, also Rust regex-syntax's Utf8Sequences). */
#ifndef PAGODA_GRAMMAR_GRAM_IR_H
#define PAGODA_GRAMMAR_GRAM_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef enum gx_kind {
    GX_EMPTY, /* matches "" */
    GX_CLASS, /* one byte from class `cls` */
    GX_SEQ,   /* kids in order */
    GX_ALT,   /* one of kids */
    GX_REP,   /* kid repeated min..max times (max -1 = unbounded) */
    GX_REF,   /* rule `rule` */
} gx_kind;

typedef struct gx_node {
    uint8_t kind;
    int32_t a;   /* CLASS: class index; SEQ/ALT: first kid (in kids[]); REP: kid; REF: rule */
    int32_t n;   /* SEQ/ALT: kid count; REP: min */
    int32_t max; /* REP: max, -1 = unbounded */
} gx_node;

typedef struct gx_rule {
    char *name;
    int32_t expr;      /* -1 until defined */
    int32_t first_use; /* byte offset of the first reference (error messages) */
} gx_rule;

/* The builder: owns nodes, kid lists, byte classes and rules. */
typedef struct gx_builder {
    gx_node *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *kids;
    int32_t n_kids, cap_kids;
    uint64_t (*cls)[4]; /* 256-bit byte sets */
    int32_t n_cls, cap_cls;
    gx_rule *rules;
    int32_t n_rules, cap_rules;
    bool oom;
} gx_builder;

void gx_init(gx_builder *b);
void gx_free(gx_builder *b);

int32_t gx_empty(gx_builder *b);
/* One byte in [lo, hi]. */
int32_t gx_byte_range(gx_builder *b, uint8_t lo, uint8_t hi);
/* One byte from a 256-bit set (copied). */
int32_t gx_byte_set(gx_builder *b, const uint64_t set[4]);
/* SEQ / ALT of kids[0..n) (copied); n == 1 returns kids[0]; n == 0: EMPTY
 * (SEQ) or -1 (ALT of nothing: the caller's error). */
int32_t gx_seq(gx_builder *b, const int32_t *kids, int32_t n);
int32_t gx_alt(gx_builder *b, const int32_t *kids, int32_t n);
int32_t gx_rep(gx_builder *b, int32_t kid, int32_t min, int32_t max);
/* The bytes of s[0..len) in sequence. */
int32_t gx_literal(gx_builder *b, const char *s, size_t len);
/* Rule reference by name (created undefined on first use). */
int32_t gx_ref(gx_builder *b, const char *name, size_t len, int32_t at);
int32_t gx_rule_id(gx_builder *b, const char *name, size_t len, int32_t at);
/* Define rule `name` (error if defined twice). */
pagoda_status gx_define(gx_builder *b, const char *name, size_t len, int32_t expr);

/* A set of code points as sorted, disjoint, non-adjacent ranges. */
typedef struct gx_cpset {
    uint32_t (*r)[2];
    int32_t n, cap;
} gx_cpset;
void gx_cpset_add(gx_cpset *s, uint32_t lo, uint32_t hi); /* any order; normalised by _norm */
void gx_cpset_norm(gx_cpset *s);                          /* sort + merge */
void gx_cpset_negate(gx_cpset *s); /* within [0, 0x10FFFF] minus surrogates */
void gx_cpset_free(gx_cpset *s);
/* The UTF-8 encodings of the code points in s (surrogates D800-DFFF are
 * never produced: they are not valid UTF-8) as an ALT of byte-class
 * sequences; -1 when s is empty. */
int32_t gx_codepoints(gx_builder *b, const gx_cpset *s);
/* Encode one code point as UTF-8 into out[4]; returns its length. */
int gx_utf8_encode(uint32_t cp, uint8_t out[4]);

/* Parsers into a builder. Errors: INVALID_ARG with a one-line message
 * naming the position / feature. */

/* GBNF-style EBNF (llama.cpp grammars/README.md syntax; xgrammar's EBNF):
 * `name ::= alternatives`, "literals", [classes], ., (groups), * + ? {m} {m,}
 * {m,n}, # comments. */
pagoda_status gx_parse_ebnf(gx_builder *b, const char *text, size_t len);

/* Regex (ECMAScript syntax subset, as JSON Schema `pattern` and vLLM's
 * guided_regex use) to an expression. json_string: the expression matches
 * the JSON-escaped text of strings that the regex matches (the inside of a
 * JSON string literal), and an unanchored pattern is a search (JSON Schema
 * semantics: `.*` implied at unanchored ends); otherwise the regex must
 * match the whole output (vLLM guided_regex semantics). */
pagoda_status gx_parse_regex(gx_builder *b, const char *re, size_t len, bool json_string,
                             int32_t *expr_out);

/* The JSON-schema converter's output as IR (root rule "root"): what
 * pg_gram_from_json_schema compiles; tests run a reference matcher on it. */
pagoda_status gx_json_schema(gx_builder *b, const char *json, size_t len);
/* The IR of pg_gram_json_object. */
pagoda_status gx_json_object(gx_builder *b);

#endif
