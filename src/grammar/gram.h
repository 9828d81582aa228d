/* Grammars compiled to a byte-level pushdown automaton, and a matcher over
 * bytes.
 *
 * A grammar is a set of rules; each rule is compiled (Thompson NFA, then
 * subset construction, per rule) to a DFA over bytes whose edges are either
 * bytes or rule references (push the rule, continue at the edge's target
 * when it completes). The automaton's state is a set of stacks of DFA nodes
 * (a graph-structured stack, as in GLR/GLL parsers and llama.cpp's grammar
 * stacks); stacks are hash-consed, so a stack is one int and equal stacks
 * are equal ids. xgrammar (Dong et al., "XGrammar: Flexible and Efficient
 * Structured Generation Engine for LLMs", 2024) and llguidance use the same
 * byte-level pushdown automaton model.
 *
 * Requirements checked at compile time (errors name the rule): every rule
 * used is defined, every rule can complete (is productive), no left
 * recursion, the automaton fits the size limit. */
#ifndef PAGODA_GRAMMAR_GRAM_H
#define PAGODA_GRAMMAR_GRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct pg_gram pg_gram; /* immutable after compile: share between threads */

/* ---- building (each returns INVALID_ARG / UNSUPPORTED with a one-line
 * message naming the offending feature or position; NOMEM) */

/* EBNF text (GBNF syntax: llama.cpp grammars/README.md; root rule "root"). */
pagoda_status pg_gram_from_ebnf(const char *text, size_t len, pg_gram **out);
/* A regex matched against the whole output (vLLM guided_regex). */
pagoda_status pg_gram_from_regex(const char *re, size_t len, pg_gram **out);
/* Exactly one of the n strings (vLLM guided_choice). */
pagoda_status pg_gram_from_choice(const char *const *items, const size_t *lens, size_t n,
                                  pg_gram **out);
/* A JSON Schema (draft 2020-12 subset, see json_schema.c for the supported
 * keywords); json text of the schema. Unsupported keywords are an
 * UNSUPPORTED error naming the keyword (never ignored). */
pagoda_status pg_gram_from_json_schema(const char *json, size_t len, pg_gram **out);
/* EBNF text (root rule "root") whose rules may use `schema-0`,
 * `schema-1`, ...: a JSON value valid against item i of `schemas` (a JSON
 * list of JSON Schemas; each as pg_gram_from_json_schema, same keywords and
 * errors; a $ref resolves within its own schema). The EBNF must not define
 * rules named like the generated ones (`schema-N`, `json-*`, `NAME-N`).
 * Used for tool calls: each function's arguments inside a model family's
 * call syntax. */
pagoda_status pg_gram_from_ebnf_schemas(const char *ebnf, size_t elen, const char *schemas,
                                        size_t slen, pg_gram **out);
/* Any JSON object (OpenAI's response_format json_object). */
pagoda_status pg_gram_json_object(pg_gram **out);
void pg_gram_free(pg_gram *g);

/* Number of DFA nodes (for tests and the benchmark). */
int32_t pg_gram_num_nodes(const pg_gram *g);

/* ---- matching bytes */

typedef struct pg_gstate pg_gstate; /* a matcher: stacks table + current state */

pagoda_status pg_gstate_create(const pg_gram *g, pg_gstate **out);
void pg_gstate_free(pg_gstate *m);
/* Feed bytes: true and the state advanced when s[0..n) keeps the input a
 * valid prefix; false and the state unchanged otherwise. Also false, with
 * pg_last_error set (LIMIT), when one byte needs more than the matcher's
 * work budget (an ambiguous grammar, gram_internal.h G_WORK_BUDGET). */
bool pg_gstate_feed(pg_gstate *m, const uint8_t *s, size_t n);
/* The input so far is a complete sentence of the grammar. */
bool pg_gstate_accepting(const pg_gstate *m);
/* Nothing more can be appended (accepting and no byte continues). */
bool pg_gstate_finished(const pg_gstate *m);
/* The bytes that may come next: bit c of out[c / 64] set when feeding byte
 * c keeps the input a valid prefix (a byte past the work budget is not
 * allowed, and pg_last_error says LIMIT). */
void pg_gstate_allowed(pg_gstate *m, uint64_t out[4]);
/* Back to the start state. */
void pg_gstate_reset(pg_gstate *m);

#endif
