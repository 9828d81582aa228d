/* Running requests through a pagoda_engine in tests: open an engine, build
 * greedy requests, step until every request finished and collect each
 * one's tokens, logprobs and text. Shared by the engine-level tests (the
 * loops of tests/test_engine.c in a reusable form). */
#ifndef PAGODA_TESTS_ENGINE_RUN_H
#define PAGODA_TESTS_ENGINE_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagoda.h"

#define PG_ER_MAX_TOKENS 600

/* What one request produced. */
typedef struct pg_er_result {
    int32_t ids[PG_ER_MAX_TOKENS];
    float lp[PG_ER_MAX_TOKENS]; /* logprob of each token (when asked) */
    int n;
    char text[8192];
    size_t text_len;
    pagoda_finish_reason finish;
    int32_t stop_token;
} pg_er_result;

/* pagoda_engine_create(model, o) (NULL: defaults) with kv_cache_memory 8
 * MiB when o leaves it 0; fails the test with pagoda_last_error(). */
pagoda_engine *pg_er_open(const char *model, pagoda_engine_options *o);

/* A greedy request for prompt ids[0..n): max_tokens, ignore_eos, logprobs
 * of the chosen token. The ids must outlive the add_request call. */
pagoda_request pg_er_greedy(const pagoda_engine *e, const int32_t *ids, size_t n,
                            int32_t max_tokens);

/* Step e until it has nothing unfinished; res[i] collects request ids[i]. */
void pg_er_run(pagoda_engine *e, const uint64_t *ids, pg_er_result *res, size_t n);

/* Add reqs[0..n) to e (ids out) and run them all together. */
void pg_er_run_requests(pagoda_engine *e, const pagoda_request *reqs, size_t n, uint64_t *ids,
                        pg_er_result *res);

/* Deterministic prompt i of len tokens: BOS (1), then ids in [3, 503). */
void pg_er_prompt(int i, int len, int32_t *out);

/* Fail unless a and b hold the same tokens, finish and text, and (logprobs)
 * bitwise the same logprobs. */
void pg_er_assert_same(const pg_er_result *a, const pg_er_result *b, bool logprobs);

#endif
