/* Test helpers over the batched Llama forward (model/llama.h): the logits of
 * every position of one prefilled request, and the KL divergence measures
 * of tools/quant_kl / llama-perplexity --kl-divergence. */
#ifndef PAGODA_TESTS_LLAMA_LOGITS_H
#define PAGODA_TESTS_LLAMA_LOGITS_H

#include <stdint.h>

#include "model/llama.h"

/* logits [T, vocab] of tokens[0..T) as one request prefilled in one step
 * (F32 paged KV cache, blocks of 16); fails the test on an error. */
void pg_test_prefill_logits(const pg_llama *m, const int32_t *tokens, int32_t T, float *logits);

/* Mean over T rows of KL(softmax(ref) || softmax(got)) (natural log), and
 * in *same_top1 (may be NULL) the percentage of rows whose argmax agree. */
double pg_test_mean_kl(const float *ref, const float *got, int32_t T, int32_t V, double *same_top1);

#endif
