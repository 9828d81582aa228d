/* Test helpers over a model's batched forward (model/model.h): one sequence
 * run step by step over a paged KV cache of its own (the stand-in for a
 * batch-of-one forward), the logits of every position of one prefilled
 * request, and the KL divergence measures of tools/quant_kl /
 * llama-perplexity --kl-divergence; and a model source's weights read back
 * as F32. */
#ifndef PAGODA_TESTS_MODEL_RUN_H
#define PAGODA_TESTS_MODEL_RUN_H

#include <stdint.h>

#include "model/model.h"
#include "model/source.h"

/* Load MODEL (path) with options (NULL = defaults); fails the test on an
 * error. *src receives the source (free it after the model). */
pg_model *pg_test_load(const char *path, const pg_model_options *o, pg_model_source **src);

typedef struct pg_test_seq pg_test_seq;

/* One sequence of up to max_len positions, steps of up to max_step tokens,
 * a KV cache of kv_dtype (PG_F32 / PG_BF16) in blocks of 16. Fails the
 * test on an error. */
pg_test_seq *pg_test_seq_create(const pg_model *m, int32_t max_len, int32_t max_step,
                                pg_dtype kv_dtype);
void pg_test_seq_free(pg_test_seq *s);
/* Start over at position 0. */
void pg_test_seq_reset(pg_test_seq *s);
/* Run tokens[0..n) at the next n positions (steps of max_step tokens;
 * the result does not depend on the split) and write the vocab_size logits
 * of the last one to logits (may be NULL). Errors: PAGODA_ERR_LIMIT (past
 * max_len; nothing is run), those of pg_model_forward. */
pagoda_status pg_test_seq_forward(pg_test_seq *s, const int32_t *tokens, int32_t n, float *logits);

/* One step of tokens[0..n) (n <= max_step) at the next n positions with
 * pg_batch's hidden-state views hidden_in / hidden_out ([n][hidden_size]
 * f32, may be NULL) and the logits of every row into logits [n][vocab] (may
 * be NULL). Errors: PAGODA_ERR_LIMIT (nothing is run), those of
 * pg_model_forward. */
pagoda_status pg_test_seq_step(pg_test_seq *s, const int32_t *tokens, int32_t n,
                               const float *hidden_in, float *hidden_out, float *logits);

/* logits [T, vocab] of tokens[0..T) as one request prefilled in one step
 * (F32 paged KV cache, blocks of 16); fails the test on an error. */
void pg_test_prefill_logits(const pg_model *m, const int32_t *tokens, int32_t T, float *logits);

/* Mean over T rows of KL(softmax(ref) || softmax(got)) (natural log), and
 * in *same_top1 (may be NULL) the percentage of rows whose argmax agree. */
double pg_test_mean_kl(const float *ref, const float *got, int32_t T, int32_t V, double *same_top1);

/* rows x cols weights of type t at data (GGUF / safetensors rows) as F32
 * into out. */
void pg_test_dequant_rows(pg_dtype t, const void *data, int64_t rows, int64_t cols, float *out);

/* Row r of tensor t as F32 into out: shape[1] values of a 2-D tensor, or the
 * whole of a 1-D one (r 0). */
void pg_test_tensor_row(const pg_tensor *t, int64_t r, float *out);

#endif
