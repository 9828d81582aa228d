/* Proposer batches (see spec_batch.h). */
#include "engine/spec_batch.h"

#include "kernels/dispatch.h"

#include <stdlib.h>
#include <string.h>

pagoda_status pg_spec_kv_start(pg_model *model, const pg_kv_plan *plan, pg_dtype kv_dtype,
                               int32_t block_size, int32_t num_blocks, int32_t S,
                               int32_t max_model_len, int32_t T, pg_kvm **kvm, pg_runner **runner) {
    pg_kvm_config kc = {.num_blocks = num_blocks,
                        .block_size = block_size,
                        .max_model_len = max_model_len,
                        .max_num_seqs = S,
                        .enable_prefix_caching = false,
                        .num_groups = plan->num_groups};
    memcpy(kc.groups, plan->groups, sizeof kc.groups);
    pagoda_status st = pg_kvm_create(&kc, kvm);
    if (st) return st;
    pg_runner_config rc = {.num_blocks = num_blocks,
                           .block_size = block_size,
                           .kv_dtype = kv_dtype,
                           .max_num_batched_tokens = T,
                           .max_num_seqs = S,
                           .max_model_len = max_model_len};
    return pg_runner_create(model, &rc, runner);
}

pagoda_status pg_spec_batch_init(pg_spec_batch *b, pg_kvm *kvm, int32_t S, int32_t T, int32_t G,
                                 int32_t block_size, const char *who) {
    memset(b, 0, sizeof *b);
    b->S = S;
    b->T = T;
    b->G = G;
    b->block_size = block_size;
    b->kvm = kvm;
    b->ids = calloc((size_t)S, sizeof *b->ids);
    b->nsched = calloc((size_t)S, sizeof(int32_t));
    b->ncomp = calloc((size_t)S, sizeof(int32_t));
    b->qsl = calloc((size_t)S + 1, sizeof(int32_t));
    b->seq = calloc((size_t)S, sizeof(int32_t));
    b->slots_kv = calloc((size_t)S, sizeof(int32_t));
    b->row = calloc((size_t)S, sizeof(int32_t));
    b->is_new = calloc((size_t)S, 1);
    b->samp = calloc((size_t)S, 1);
    b->tok = calloc((size_t)T, sizeof(int32_t));
    b->pos = calloc((size_t)T, sizeof(int32_t));
    b->slot = calloc((size_t)G * (size_t)T, sizeof(int32_t));
    b->nblk = calloc((size_t)G * (size_t)S, sizeof(int32_t));
    b->nnew = calloc((size_t)G * (size_t)S, sizeof(int32_t));
    b->tab = calloc((size_t)G * (size_t)S, sizeof *b->tab);
    if (!b->ids || !b->nsched || !b->ncomp || !b->qsl || !b->seq || !b->slots_kv || !b->row ||
        !b->is_new || !b->samp || !b->tok || !b->pos || !b->slot || !b->nblk || !b->nnew || !b->tab)
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", who);
    return PAGODA_OK;
}

void pg_spec_batch_free(pg_spec_batch *b) {
    free(b->ids);
    free(b->nsched);
    free(b->ncomp);
    free(b->qsl);
    free(b->seq);
    free(b->slots_kv);
    free(b->row);
    free(b->is_new);
    free(b->samp);
    free(b->tok);
    free(b->pos);
    free(b->slot);
    free(b->nblk);
    free(b->nnew);
    free(b->tab);
    memset(b, 0, sizeof *b);
}

bool pg_spec_batch_reserve(pg_spec_batch *b, pg_request *rq, int32_t q, int32_t *prev) {
    for (int32_t g = 0; g < b->G; g++)
        pg_kvm_block_table(b->kvm, g, rq, &prev[g]);
    rq->num_tokens = rq->num_computed_tokens + q;
    rq->num_spec_tokens = 0;
    return pg_kvm_allocate_slots(b->kvm, rq, q, 0) == PAGODA_OK;
}

void pg_spec_batch_add(pg_spec_batch *b, const pg_request *rq, int32_t q, bool sample,
                       const int32_t *prev, int32_t pos0, int32_t *nr, int32_t *nt) {
    const int32_t i = (*nr)++, off = *nt, c = rq->num_computed_tokens, bs = b->block_size;
    b->ids[i] = rq->id;
    b->nsched[i] = q;
    b->ncomp[i] = c;
    b->qsl[i + 1] = off + q;
    b->seq[i] = c + q;
    b->slots_kv[i] = rq->kv_slot;
    b->is_new[i] = c == 0;
    b->samp[i] = sample;
    for (int32_t t = 0; t < q; t++)
        b->pos[off + t] = pos0 + c + t;
    for (int32_t g = 0; g < b->G; g++) {
        int32_t nb;
        const int32_t *table = pg_kvm_block_table(b->kvm, g, rq, &nb);
        const size_t gi = (size_t)g * (size_t)b->S + (size_t)i;
        b->tab[gi] = table;
        b->nblk[gi] = nb;
        b->nnew[gi] = nb - prev[g];
        int32_t *slots = b->slot + (size_t)g * (size_t)b->T + off;
        for (int32_t t = 0; t < q; t++)
            slots[t] = table[(c + t) / bs] * bs + (c + t) % bs;
    }
    *nt += q;
}

pg_sched_output pg_spec_batch_output(const pg_spec_batch *b, int32_t nr, int32_t nt) {
    pg_sched_output so = {.num_reqs = nr,
                          .num_tokens = nt,
                          .num_groups = b->G,
                          .block_size = b->block_size,
                          .req_stride = b->S,
                          .token_stride = b->T,
                          .req_ids = b->ids,
                          .num_scheduled_tokens = b->nsched,
                          .num_computed_tokens = b->ncomp,
                          .query_start_loc = b->qsl,
                          .seq_lens = b->seq,
                          .kv_slots = b->slots_kv,
                          .is_new = b->is_new,
                          .samples = b->samp,
                          .block_tables = b->tab,
                          .num_blocks = b->nblk,
                          .num_new_blocks = b->nnew,
                          .token_ids = b->tok,
                          .positions = b->pos,
                          .slot_mapping = b->slot,
                          .enc_cross_group = -1};
    return so;
}

int32_t pg_spec_argmax(const float *x, int32_t n) {
    /* the dispatch table's vector argmax: a scalar loop over a 128k
     * vocabulary took about as long as a small draft's forward
     * (docs/PERFORMANCE.md, speculative decoding) */
    return (int32_t)pg_kernels()->argmax_f32(x, (size_t)n);
}
