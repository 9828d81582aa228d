/* The batches a proposer model runs on its own KV cache manager and runner
 * (the draft model, draft.h; the MTP head, mtp.h): the per-row and
 * per-token arrays of a pg_sched_output, filled a request at a time. Each
 * proposer keeps its own per-request states (a pg_request shadow each),
 * chooses the rows and their tokens, and reads the logits back. Engine
 * thread only. */
#ifndef PAGODA_ENGINE_SPEC_BATCH_H
#define PAGODA_ENGINE_SPEC_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/scheduler.h"

/* A proposer's own KV cache manager (prefix caching off) over plan's groups
 * and runner for model: num_blocks blocks of block_size, S sequences of up
 * to max_model_len positions, T tokens a forward. *kvm is set before the
 * runner is made (the caller frees both). */
pagoda_status pg_spec_kv_start(pg_model *model, const pg_kv_plan *plan, pg_dtype kv_dtype,
                               int32_t block_size, int32_t num_blocks, int32_t S,
                               int32_t max_model_len, int32_t T, pg_kvm **kvm, pg_runner **runner);

typedef struct pg_spec_batch {
    int32_t S, T, G, block_size; /* rows, tokens, KV cache groups */
    pg_kvm *kvm;
    uint64_t *ids;
    int32_t *nsched, *ncomp, *qsl, *seq, *slots_kv, *row, *tok, *pos, *slot, *nblk, *nnew;
    uint8_t *is_new, *samp;
    const int32_t **tab;
} pg_spec_batch;

/* Arrays for up to S rows and T tokens in G groups of kvm. Errors:
 * PAGODA_ERR_NOMEM ("WHO: out of memory"); free with pg_spec_batch_free
 * either way. */
pagoda_status pg_spec_batch_init(pg_spec_batch *b, pg_kvm *kvm, int32_t S, int32_t T, int32_t G,
                                 int32_t block_size, const char *who);
void pg_spec_batch_free(pg_spec_batch *b);

/* Reserve KV for q more positions of rq; prev[g] gets each group's block
 * table length before. false: the pool is full (the caller drops rq). */
bool pg_spec_batch_reserve(pg_spec_batch *b, pg_request *rq, int32_t q, int32_t *prev);

/* Add rq's next q positions (after its num_computed_tokens) as row *nr,
 * tokens [*nt, *nt + q), at positions pos0 + computed + t (RoPE); the
 * tokens themselves (tok) are the caller's. sample: the row's last token
 * gives logits. prev: from pg_spec_batch_reserve. */
void pg_spec_batch_add(pg_spec_batch *b, const pg_request *rq, int32_t q, bool sample,
                       const int32_t *prev, int32_t pos0, int32_t *nr, int32_t *nt);

/* The scheduler output of rows [0, nr) and tokens [0, nt). */
pg_sched_output pg_spec_batch_output(const pg_spec_batch *b, int32_t nr, int32_t nt);

/* Index of the largest of x[0..n) (the first on ties, NaNs skipped: the
 * dispatch table's argmax_f32, pg_ref_argmax_f32): a greedy draft. n >= 1. */
int32_t pg_spec_argmax(const float *x, int32_t n);

#endif
