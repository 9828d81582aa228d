/* Test helpers over the batched Llama forward (llama_logits.h). */
#include "llama_logits.h"

#include <math.h>
#include <stdlib.h>

#include "testutil.h"

#include "base/alloc.h"
#include "kernels/attention.h"

void pg_test_prefill_logits(const pg_llama *m, const int32_t *tokens, int32_t T, float *logits) {
    const pg_model_config *c = pg_llama_config(m);
    enum { BS = 16 };
    const int32_t nb = (T + BS - 1) / BS + 1;
    size_t half = pg_paged_kv_bytes(PG_F32, nb, c->num_key_value_heads, BS, c->head_dim);
    void *mem = pg_malloc_aligned(half * 2 * (size_t)c->num_hidden_layers);
    pg_paged_kv *kv = calloc((size_t)c->num_hidden_layers, sizeof *kv);
    int32_t *pos = malloc((size_t)T * 4), *slot = malloc((size_t)T * 4),
            *rows = malloc((size_t)T * 4);
    int32_t *table = malloc((size_t)nb * 4);
    assert_true(mem && kv && pos && slot && rows && table);
    for (int l = 0; l < c->num_hidden_layers; l++)
        kv[l] = (pg_paged_kv){.k = (char *)mem + (size_t)l * 2 * half,
                              .v = (char *)mem + (size_t)l * 2 * half + half,
                              .dtype = PG_F32,
                              .num_blocks = nb,
                              .num_kv_heads = c->num_key_value_heads,
                              .block_size = BS,
                              .head_dim = c->head_dim};
    for (int32_t i = 0; i < nb; i++)
        table[i] = i + 1 < nb ? i + 1 : 0; /* block 0 unused, as the engine's null block */
    for (int32_t i = 0; i < T; i++) {
        pos[i] = i;
        slot[i] = table[i / BS] * BS + i % BS;
        rows[i] = i;
    }
    pg_llama_workspace *ws;
    assert_int_equal(pg_llama_workspace_create(m, T, T, T, &kv[0], &ws), PAGODA_OK);
    int32_t qsl[2] = {0, T}, lens[1] = {T};
    const int32_t *tables[1] = {table};
    pg_llama_batch b = {.num_tokens = T,
                        .num_seqs = 1,
                        .token_ids = tokens,
                        .positions = pos,
                        .slot_mapping = slot,
                        .query_start_loc = qsl,
                        .seq_lens = lens,
                        .block_tables = tables,
                        .logit_rows = rows,
                        .num_logits = T};
    if (pg_llama_forward_batch(m, ws, kv, &b, logits) != PAGODA_OK) fail_msg("%s", pg_last_error());
    pg_llama_workspace_free(ws);
    free(pos);
    free(slot);
    free(rows);
    free(table);
    free(kv);
    pg_free(mem);
}

double pg_test_mean_kl(const float *ref, const float *got, int32_t T, int32_t V,
                       double *same_top1) {
    double kl = 0;
    int same = 0;
    for (int32_t t = 0; t < T; t++) {
        const float *a = ref + (size_t)t * V, *b = got + (size_t)t * V;
        double ma = a[0], mb = b[0];
        int ia = 0, ib = 0;
        for (int32_t v = 1; v < V; v++) {
            if (a[v] > ma) ma = a[v], ia = v;
            if (b[v] > mb) mb = b[v], ib = v;
        }
        double za = 0, zb = 0;
        for (int32_t v = 0; v < V; v++) {
            za += exp(a[v] - ma);
            zb += exp(b[v] - mb);
        }
        const double la0 = ma + log(za), lb0 = mb + log(zb);
        for (int32_t v = 0; v < V; v++) {
            double la = a[v] - la0, lb = b[v] - lb0;
            kl += exp(la) * (la - lb);
        }
        same += ia == ib;
    }
    if (same_top1) *same_top1 = 100.0 * same / T;
    return kl / T;
}
