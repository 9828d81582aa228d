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
#define PG_ER_TOP 4 /* top logprobs kept per token */

/* What one request produced. */
typedef struct pg_er_result {
    int32_t ids[PG_ER_MAX_TOKENS];
    float lp[PG_ER_MAX_TOKENS]; /* logprob of each token (when asked) */
    int32_t top[PG_ER_MAX_TOKENS][PG_ER_TOP];  /* the first PG_ER_TOP top logprobs (asked), */
    float top_lp[PG_ER_MAX_TOKENS][PG_ER_TOP]; /* 0 where fewer came */
    int n;
    char text[8192];
    size_t text_len;
    pagoda_finish_reason finish;
    char stop_reason[64]; /* the stop string that ended it, else "" */
    int32_t stop_token;   /* the stop token id that ended it, else -1 */
    bool utf8_ok;         /* every text delta was strict UTF-8 on its own */
    bool held_ok;         /* pg_er_run_watch's held-back check held */
} pg_er_result;

/* pagoda_engine_create(model, o) (NULL: defaults) with kv_cache_memory 8
 * MiB when o leaves it 0; fails the test with pagoda_last_error(). */
pagoda_engine *pg_er_open(const char *model, pagoda_engine_options *o);

/* On aarch64 builds (run under qemu, where a fork-join of the thread pool
 * costs more than these tests' tiny engine steps) configure the default
 * pool to one thread, which keeps the binaries within their time budget
 * (thread-count invariance is covered by the native runs and the kernel
 * tests); elsewhere nothing. For a group setup: 0, or -1 when the pool
 * cannot be configured. */
int pg_er_one_thread_under_qemu(void);

/* A greedy request for prompt ids[0..n): max_tokens, ignore_eos, logprobs
 * of the chosen token. The ids must outlive the add_request call. */
pagoda_request pg_er_greedy(const pagoda_engine *e, const int32_t *ids, size_t n,
                            int32_t max_tokens);

/* Step e until it has nothing unfinished; res[i] collects request ids[i]
 * (outputs of other requests are dropped). Fails the test on a step error,
 * after 100000 steps, or past PG_ER_MAX_TOKENS tokens / 8 KiB of text. */
void pg_er_run(pagoda_engine *e, const uint64_t *ids, pg_er_result *res, size_t n);

/* pg_er_run that also watches the stream. held (NULL: none) is a stop
 * string: res[i].held_ok turns false when a delta before the last leaves a
 * proper prefix of it at the end of the text (the engine must hold such
 * text back). *max_used_blocks (NULL: not wanted) gets the most KV blocks
 * in use after any step but the first (a prompt's prefill holds all its
 * KV). */
void pg_er_run_watch(pagoda_engine *e, const uint64_t *ids, pg_er_result *res, size_t n,
                     const char *held, int32_t *max_used_blocks);

/* Add reqs[0..n) to e (ids out) and run them all together. */
void pg_er_run_requests(pagoda_engine *e, const pagoda_request *reqs, size_t n, uint64_t *ids,
                        pg_er_result *res);

/* Whether str[0..n) is strict UTF-8 (RFC 3629): complete, no stray
 * continuation bytes, no overlongs, surrogates or code points above
 * U+10FFFF. */
bool pg_er_utf8_valid(const char *str, size_t n);

/* Deterministic prompt i of len tokens: BOS (1), then ids in [3, 503). */
void pg_er_prompt(int i, int len, int32_t *out);

/* Fail unless a and b hold the same tokens and, (logprobs) bitwise, the
 * same logprobs and top logprobs. */
void pg_er_assert_same_tokens(const pg_er_result *a, const pg_er_result *b, bool logprobs);

/* pg_er_assert_same_tokens, and the same finish reason, stop string, stop
 * token and text. */
void pg_er_assert_same(const pg_er_result *a, const pg_er_result *b, bool logprobs);

#endif
