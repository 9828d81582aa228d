/* The `random` dataset of `pagoda bench serve`, as vLLM defines it
 * (vllm/benchmarks/datasets.py, RandomDataset; /work/shared/BENCHMARKS.md):
 * - input and output lengths uniform integers in
 *   [floor(L * (1 - r)), ceil(L * (1 + r))] (output at least 1);
 * - prompt i is `prefix + ids`, ids[j] = allowed[(offset_i + i + j) % n_allowed]
 *   where `allowed` is the vocabulary without special tokens, offset_i a
 *   random id, and `prefix` is --random-prefix-len random allowed ids shared
 *   by every prompt;
 * - with a tokenizer the sampled length leaves room for the special tokens
 *   the server adds when it encodes the text (vLLM: input_len minus
 *   tokenizer.num_special_tokens_to_add(), e.g. one BOS for Llama/SPM), so
 *   the server prefills --random-input-len tokens; prefix + sampled length
 *   must be at least 1;
 * - with a tokenizer the ids are decoded to text and re-encoded (no special
 *   tokens added), then padded with random allowed ids or truncated and
 *   retried (up to 10 times, vLLM's gen_prompt_decode_to_target_len) until
 *   the text encodes to exactly the intended length. The decoded text is
 *   made valid UTF-8 first (HF's decode returns a valid string too): bytes
 *   of invalid or unfinished sequences (byte-fallback tokens) and NULs are
 *   dropped, so the text sent in JSON is exactly the text measured. (U+FFFD
 *   in their place would re-encode to 3 byte tokens and rarely converge on
 *   small vocabularies.) A prompt that still misses its length after the
 *   retries is kept and a warning logged, as vLLM; an empty one is retried
 *   further (servers reject empty prompts).
 * Without a tokenizer (token-id prompts) the ids are sent as they are. */
#ifndef PAGODA_SERVER_BENCH_DATASET_H
#define PAGODA_SERVER_BENCH_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "bench/bench_schedule.h"

/* The tokenizer operations the benchmark needs (an adapter over
 * src/tokenizer/tokenizer.h, or a toy one in tests). encode/decode return
 * malloc'ed buffers the caller frees; text is NUL-terminated. encode adds no
 * special tokens; decode keeps every id's text. num_special_to_add is how
 * many ids encoding with special tokens adds (HF num_special_tokens_to_add:
 * 1 for a BOS-adding Llama tokenizer, 0 for Qwen); the random dataset
 * leaves room for them. */
typedef struct pg_bench_tokenizer {
    void *ctx;
    int32_t vocab_size;
    bool (*is_special)(void *ctx, int32_t id);
    pagoda_status (*encode)(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n);
    pagoda_status (*decode)(void *ctx, const int32_t *ids, size_t n, char **text, size_t *len);
    int32_t num_special_to_add;
} pg_bench_tokenizer;

/* One benchmark request. prompt is NULL when there is no tokenizer. */
typedef struct pg_bench_request {
    char *prompt;        /* UTF-8 text, NUL-terminated */
    int32_t *prompt_ids; /* prompt_len ids (the text's encoding when prompt != NULL) */
    int32_t prompt_len;  /* input tokens (the text's encoding without special tokens) */
    int32_t output_len;  /* max_tokens */
} pg_bench_request;

typedef struct pg_bench_random_cfg {
    int32_t input_len;  /* default 1024 */
    int32_t output_len; /* default 128 */
    double range_ratio; /* [0, 1), default 0 */
    int32_t prefix_len; /* default 0 */
    int32_t vocab_size; /* used only without a tokenizer */
} pg_bench_random_cfg;

/* Build `n` requests into a calloc'ed array *out (free with
 * pg_bench_requests_free). tok may be NULL (then cfg->vocab_size > 0 and
 * every id in [0, vocab_size) is allowed). The random draws come from `rng`
 * (seeded by the caller), so a seed gives the same prompts every run.
 * Errors: PAGODA_ERR_INVALID_ARG (lengths, ratio, a minimum total input
 * below 1 token, vocabulary without a normal token), PAGODA_ERR_NOMEM,
 * tokenizer errors. */
pagoda_status pg_bench_random_dataset(const pg_bench_random_cfg *cfg, const pg_bench_tokenizer *tok,
                                      size_t n, pg_bench_rng *rng, pg_bench_request **out);
void pg_bench_requests_free(pg_bench_request *r, size_t n);

/* The "copy" dataset ("repeat this passage", the workload of n-gram
 * speculative decoding), made in place from id prompts (prompt == NULL):
 * each prompt of L ids keeps its first P ids (the passage) and the rest
 * becomes the passage again from its start, ids[k] = ids[k - P] for
 * k >= P (periodic with period P when the repeat is longer than the
 * passage). repeat_len R gives P = L - min(R, L - 1) (at least one passage
 * token); R = 0 gives P = ceil(L / 2), the whole passage repeated once.
 * A model that copies then continues the passage after its first R tokens,
 * inside the prompt's text, so prompt lookup finds its continuation.
 * Errors: PAGODA_ERR_INVALID_ARG (repeat_len < 0, a text prompt). */
pagoda_status pg_bench_copy_prompts(pg_bench_request *r, size_t n, int32_t repeat_len);

#endif
