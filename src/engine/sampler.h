/* Token sampling: logit bias, repetition / presence / frequency penalties,
 * greedy, temperature, min-p, top-k, top-p, a seeded draw, and logprobs.
 *
 * Semantics follow vLLM v1 (vllm/v1/sample/sampler.py, ops/penalties.py,
 * ops/topk_topp_sampler.py); per call, in this order:
 *   1. NaN logits become -inf (never sampled), +inf become FLT_MAX (so a
 *      +inf token wins greedy and several +inf tokens share the mass).
 *   2. Logprobs, if asked for: log-softmax of these raw logits (vLLM's
 *      default logprobs_mode "raw_logprobs": before bias, penalties and
 *      temperature).
 *   3. logit_bias: logit[id] += bias (bias -inf bans the token).
 *   4. Repetition penalty (Keskar et al. 2019, CTRL; HF/vLLM form) over every
 *      token that occurs in the prompt OR the output: a positive logit is
 *      divided by it, a non-positive one multiplied.
 *   5. Frequency and presence penalties (OpenAI definitions) over the output
 *      tokens only: logit[id] -= frequency * count(id) + presence * (count > 0).
 *   6. temperature < PG_SAMPLER_GREEDY_EPS: greedy = argmax, ties -> lowest
 *      id; no randomness used and top-k/top-p/min-p are ignored (as vLLM).
 *   7. Otherwise p = softmax(logits / temperature); min-p drops tokens with
 *      p < min_p * max(p); top-k keeps the k largest (exactly k: ties at the
 *      boundary go to the lower id, so top_k = 1 is greedy; vLLM keeps all
 *      tied tokens); top-p keeps, of what is left and renormalised, the
 *      smallest prefix in descending probability (ties: lower id first)
 *      whose mass is >= top_p (at least one token). min-p and top-k both
 *      keep "the largest tokens", so their order does not matter; top-p is
 *      applied last, on the min-p and top-k survivors (vLLM's order).
 *   8. One uniform u = pg_rng_uniform(rng, n_output, PG_RNG_STREAM_SAMPLE)
 *      picks the token by inverse CDF over the kept tokens, renormalised,
 *      walked in ascending id order. The result is a pure function of
 *      (logits, params, history, seed, output position): the same on every
 *      run, every thread count, and whatever else is in the batch. Greedy
 *      draws nothing, so it cannot shift later draws; a request that is
 *      preempted and recomputed redraws the same numbers.
 *   Probabilities are exp in float (the dispatch table's vector exp, within
 *   2 ulp of expf; the same on every run of one machine, though not
 *   bitwise across ISA levels), their sums are in double.
 *
 * Cost: a few O(V) scans plus O(history); no full-vocabulary sort. top-k
 * uses a size-k heap (O(V + k log k)). top-p without top-k buckets tokens by
 * log-probability (bins of 1/4 nat) and sorts only the bin where the
 * cumulative mass crosses top_p. min-p zeroes tokens surely below it. No
 * allocation after pg_sampler_create. The full-vocabulary paths (no top-k,
 * and logprobs) run one vector exp pass over the vocabulary
 * (pg_kernels()->vexp_f32).
 *
 * One pg_sampler per thread (it owns scratch); the params and pg_rng are per
 * request. A batch is sampled row by row with each request's own params,
 * history and rng; rows never share random numbers. */
#ifndef PAGODA_ENGINE_SAMPLER_H
#define PAGODA_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/rng.h"

/* Temperatures below this are greedy (vLLM's _SAMPLING_EPS). */
#define PG_SAMPLER_GREEDY_EPS 1e-5f

typedef struct pg_logit_bias {
    int32_t token; /* 0 <= token < vocab_size */
    float bias;    /* added to the raw logit; finite or -INFINITY (ban); not NaN/+inf */
} pg_logit_bias;

typedef struct pg_sampling_params {
    float temperature;        /* >= 0; < PG_SAMPLER_GREEDY_EPS => greedy. Default 1 */
    int32_t top_k;            /* 0 or -1 = off; >= 1 keeps the k most likely. Default 0 */
    float top_p;              /* (0, 1]; 1 = off. Default 1 */
    float min_p;              /* [0, 1]; 0 = off. Default 0 */
    float repetition_penalty; /* > 0; 1 = off. Default 1 */
    float presence_penalty;   /* [-2, 2] (OpenAI range); 0 = off */
    float frequency_penalty;  /* [-2, 2] (OpenAI range); 0 = off */
    const pg_logit_bias
        *logit_bias; /* n_logit_bias entries (not owned); a token may repeat: biases add */
    size_t n_logit_bias;
    int64_t seed;       /* -1 = random (the engine calls pg_rng_from_seed once per request) */
    int32_t n_logprobs; /* top-N logprobs to return, 0..vocab_size; 0 = only the sampled token's */
} pg_sampling_params;

/* The defaults above: temperature 1, every filter and penalty off, seed -1. */
pg_sampling_params pg_sampling_params_default(void);

/* Check every field (ranges above; NaN rejected; logit_bias ids in
 * [0, vocab_size), n_logprobs <= vocab_size). Errors: PAGODA_ERR_INVALID_ARG
 * with a one-line message naming the field and the bad value, e.g.
 * "sampling params: top_p must be in (0, 1], got 0". */
pagoda_status pg_sampling_params_validate(const pg_sampling_params *p, int32_t vocab_size);

/* Logprobs of one sampled position; the caller owns the arrays. */
typedef struct pg_logprob_out {
    int32_t
        *top_ids; /* [cap]: ids of the n_top largest raw logprobs, descending (ties: lower id) */
    float *top_logprobs;   /* [cap]: their log-softmax values (natural log) */
    int32_t cap;           /* capacity of both arrays; must be >= params n_logprobs */
    int32_t n_top;         /* out: min(n_logprobs, vocab_size) */
    float sampled_logprob; /* out: raw logprob of the sampled token */
    int32_t sampled_rank;  /* out: #tokens whose raw logprob >= the sampled one's (1 = top; vLLM's
                              rank) */
} pg_logprob_out;

typedef struct pg_sampler pg_sampler;

/* A sampler for logits of `vocab_size` floats. Allocates its scratch once
 * (about 20 bytes per vocab entry: 4 MB at V = 200k). Not thread-safe: one
 * per thread. Errors: PAGODA_ERR_INVALID_ARG (vocab_size <= 0),
 * PAGODA_ERR_NOMEM. */
pagoda_status pg_sampler_create(int32_t vocab_size, pg_sampler **out);
void pg_sampler_free(pg_sampler *s);
int32_t pg_sampler_vocab_size(const pg_sampler *s);

/* Sample one token for one request.
 *   logits      [vocab_size] f32, the model's raw logits; modified in place:
 *               on success they hold the processed logits of steps 1 and
 *               3-5 (sanitised, biased, penalised; temperature not applied).
 *   prompt_ids  [n_prompt] the request's prompt token ids (repetition penalty).
 *   output_ids  [n_output] the tokens generated so far (all penalties).
 *               n_output is also the draw index: the token being sampled is
 *               output position n_output. The id arrays are only read when a
 *               penalty is on (NULL allowed otherwise).
 *   rng         the request's generator (pg_rng_from_seed(params->seed)).
 *   lp          optional (NULL = no logprobs work at all).
 * *token_out gets the sampled id. Errors (nothing written to *token_out):
 * PAGODA_ERR_INVALID_ARG for invalid params (see validate), a history id
 * outside [0, vocab_size), lp->cap < n_logprobs, or when every logit is -inf
 * or NaN after bias (no token can be sampled). */
pagoda_status pg_sampler_sample(pg_sampler *s, const pg_sampling_params *p, const pg_rng *rng,
                                float *logits, const int32_t *prompt_ids, size_t n_prompt,
                                const int32_t *output_ids, size_t n_output, pg_logprob_out *lp,
                                int32_t *token_out);

/* Verify one draft token (speculative decoding) at output position
 * n_output: as pg_sampler_sample, whose call this is with draft = -1, but
 * when draft >= 0 the token comes from exact rejection sampling (Leviathan,
 * Kalman, Matias 2023, "Fast inference from transformers via speculative
 * decoding", Algorithm 1; vLLM's rejection_sampler.py) against a one-hot
 * draft distribution q = [draft] (the n-gram proposer's): with p the
 * target distribution after steps 1-7 (penalties, temperature, min-p,
 * top-k, top-p; renormalised), the draft is accepted (*token_out = draft)
 * when ua < p(draft) / q(draft) = p(draft), ua =
 * pg_rng_uniform(rng, n_output, PG_RNG_STREAM_SPEC); otherwise the token is
 * drawn as in step 8 (same uniform) from the residual norm(max(p - q, 0)) =
 * p without the draft. So P(token = x) = p(x) for every x, and the result
 * is a pure function of (logits, params, history, seed, position, draft).
 * Greedy requests draw nothing: the argmax, which the caller compares with
 * the draft. Errors: those of pg_sampler_sample; draft >= vocab_size. */
pagoda_status pg_sampler_verify(pg_sampler *s, const pg_sampling_params *p, const pg_rng *rng,
                                float *logits, const int32_t *prompt_ids, size_t n_prompt,
                                const int32_t *output_ids, size_t n_output, int32_t draft,
                                pg_logprob_out *lp, int32_t *token_out);

#endif
