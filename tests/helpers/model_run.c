/* Test helpers over a model's batched forward (model_run.h). */
#include "model_run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "base/alloc.h"
#include "kernels/attention.h"

pg_model *pg_test_load(const char *path, const pg_model_options *o, pg_model_source **src) {
    if (pg_model_source_open(path, src) != PAGODA_OK) fail_msg("%s", pg_last_error());
    pg_model *m;
    if (pg_model_load(*src, o, &m) != PAGODA_OK) fail_msg("%s", pg_last_error());
    return m;
}

enum { BS = 16 };

struct pg_test_seq {
    const pg_model *m;
    int32_t max_len, max_step, len, nb;
    pg_model_workspace *ws;
    void *mem;
    pg_paged_kv *kv;    /* [layers] */
    void **states;      /* [layers] state of a STATE layer */
    pg_layer_cache *lc; /* [layers] */
    int32_t *table, *pos, *slot;
    pg_dtype kv_dtype;
    bool rows_ws; /* the workspace has max_step logits rows (pg_test_seq_step) */
};

pg_test_seq *pg_test_seq_create(const pg_model *m, int32_t max_len, int32_t max_step,
                                pg_dtype kv_dtype) {
    pg_test_seq *s = calloc(1, sizeof *s);
    assert_non_null(s);
    const int32_t L = pg_model_num_layers(m);
    s->m = m;
    s->max_len = max_len;
    s->max_step = max_step;
    s->kv_dtype = kv_dtype;
    s->nb = (max_len + BS - 1) / BS + 1;
    s->kv = calloc((size_t)L, sizeof *s->kv);
    s->states = calloc((size_t)L, sizeof *s->states);
    s->lc = calloc((size_t)L, sizeof *s->lc);
    s->table = malloc((size_t)s->nb * 4);
    s->pos = malloc((size_t)max_step * 4);
    s->slot = malloc((size_t)max_step * 4);
    assert_true(s->kv && s->states && s->lc && s->table && s->pos && s->slot);
    for (int32_t i = 0; i < s->nb; i++)
        s->table[i] = i + 1 < s->nb ? i + 1 : 0; /* block 0 unused, as the engine's null block */
    size_t total = 0;
    for (int32_t l = 0; l < L; l++) {
        const pg_layer_cache_spec *c = pg_model_layer_cache(m, l);
        if (c->kind == PG_LAYER_CACHE_FULL || c->kind == PG_LAYER_CACHE_SLIDING)
            total += 2 * pg_paged_kv_bytes(kv_dtype, s->nb, c->num_kv_heads, BS, c->head_dim);
        else if (c->kind == PG_LAYER_CACHE_STATE)
            total += ((size_t)c->state_bytes + 63) / 64 * 64;
    }
    /* Recurrent states start at zero; the K/V halves are filled with NaN
     * (all-ones bits) below: attention must never read a slot it has not
     * written (a zero weight times a NaN poisons the sum), whatever the
     * memory held before. */
    s->mem = pg_calloc_aligned(1, total ? total : 64);
    assert_non_null(s->mem);
    size_t off = 0;
    for (int32_t l = 0; l < L; l++) {
        const pg_layer_cache_spec *c = pg_model_layer_cache(m, l);
        if (c->kind == PG_LAYER_CACHE_FULL || c->kind == PG_LAYER_CACHE_SLIDING) {
            size_t half = pg_paged_kv_bytes(kv_dtype, s->nb, c->num_kv_heads, BS, c->head_dim);
            s->kv[l] = (pg_paged_kv){.k = (char *)s->mem + off,
                                     .v = (char *)s->mem + off + half,
                                     .dtype = kv_dtype,
                                     .num_blocks = s->nb,
                                     .num_kv_heads = c->num_kv_heads,
                                     .block_size = BS,
                                     .head_dim = c->head_dim};
            memset((char *)s->mem + off, 0xff, 2 * half);
            off += 2 * half;
            s->lc[l].kv = &s->kv[l];
            s->lc[l].slot_mapping = s->slot;
            s->lc[l].block_tables = (const int32_t *const *)&s->table;
        } else if (c->kind == PG_LAYER_CACHE_STATE) {
            s->states[l] = (char *)s->mem + off;
            off += ((size_t)c->state_bytes + 63) / 64 * 64;
            s->lc[l].states = &s->states[l];
        }
    }
    pg_step_limits lim = {.max_tokens = max_step,
                          .max_seqs = 1,
                          .max_model_len = max_len,
                          .kv_dtype = kv_dtype,
                          .block_size = BS};
    if (pg_model_workspace_create(m, &lim, &s->ws) != PAGODA_OK) fail_msg("%s", pg_last_error());
    pg_test_seq_reset(s);
    return s;
}

void pg_test_seq_free(pg_test_seq *s) {
    if (!s) return;
    pg_model_workspace_free(s->ws);
    pg_free(s->mem);
    free(s->kv);
    free(s->states);
    free(s->lc);
    free(s->table);
    free(s->pos);
    free(s->slot);
    free(s);
}

void pg_test_seq_reset(pg_test_seq *s) {
    s->len = 0;
    for (int32_t l = 0; l < pg_model_num_layers(s->m); l++)
        if (s->states[l])
            memset(s->states[l], 0, (size_t)pg_model_layer_cache(s->m, l)->state_bytes);
}

pagoda_status pg_test_seq_forward(pg_test_seq *s, const int32_t *tokens, int32_t n, float *logits) {
    if (n < 1 || s->len + n > s->max_len)
        return pg_error(PAGODA_ERR_LIMIT, "test seq: %d tokens at %d exceed %d", n, s->len,
                        s->max_len);
    for (int32_t done = 0; done < n;) {
        int32_t k = n - done < s->max_step ? n - done : s->max_step;
        for (int32_t i = 0; i < k; i++) {
            int32_t p = s->len + i;
            s->pos[i] = p;
            s->slot[i] = s->table[p / BS] * BS + p % BS;
        }
        int32_t qsl[2] = {0, k}, lens[1] = {s->len + k}, row[1] = {k - 1};
        bool last = done + k == n;
        pg_batch b = {.num_tokens = k,
                      .num_seqs = 1,
                      .token_ids = tokens + done,
                      .positions = s->pos,
                      .query_start_loc = qsl,
                      .seq_lens = lens,
                      .logit_rows = row,
                      .num_logits = last && logits ? 1 : 0,
                      .layers = s->lc};
        pagoda_status st = pg_model_forward(s->m, s->ws, &b, logits);
        if (st != PAGODA_OK) return st;
        s->len += k;
        done += k;
    }
    return PAGODA_OK;
}

pagoda_status pg_test_seq_step(pg_test_seq *s, const int32_t *tokens, int32_t n,
                               const float *hidden_in, float *hidden_out, float *logits) {
    if (n < 1 || n > s->max_step || s->len + n > s->max_len)
        return pg_error(PAGODA_ERR_LIMIT, "test seq: %d tokens at %d exceed %d / step %d", n,
                        s->len, s->max_len, s->max_step);
    if (!s->rows_ws) { /* logits of every row: a workspace with max_step rows of them */
        pg_model_workspace_free(s->ws);
        s->ws = NULL;
        pg_step_limits lim = {.max_tokens = s->max_step,
                              .max_seqs = s->max_step,
                              .max_model_len = s->max_len,
                              .kv_dtype = s->kv_dtype,
                              .block_size = BS};
        pagoda_status st = pg_model_workspace_create(s->m, &lim, &s->ws);
        if (st != PAGODA_OK) return st;
        s->rows_ws = true;
    }
    int32_t *rows = malloc((size_t)n * sizeof *rows);
    if (!rows) return pg_error(PAGODA_ERR_NOMEM, "test seq: out of memory");
    for (int32_t i = 0; i < n; i++) {
        int32_t p = s->len + i;
        rows[i] = i;
        s->pos[i] = p;
        s->slot[i] = s->table[p / BS] * BS + p % BS;
    }
    int32_t qsl[2] = {0, n}, lens[1] = {s->len + n};
    pg_batch b = {.num_tokens = n,
                  .num_seqs = 1,
                  .token_ids = tokens,
                  .positions = s->pos,
                  .query_start_loc = qsl,
                  .seq_lens = lens,
                  .logit_rows = rows,
                  .num_logits = logits ? n : 0,
                  .layers = s->lc,
                  .hidden_in = hidden_in,
                  .hidden_out = hidden_out};
    pagoda_status st = pg_model_forward(s->m, s->ws, &b, logits);
    free(rows);
    if (st == PAGODA_OK) s->len += n;
    return st;
}

void pg_test_prefill_logits(const pg_model *m, const int32_t *tokens, int32_t T, float *logits) {
    pg_test_seq *s = pg_test_seq_create(m, T, T, PG_F32);
    int32_t *rows = malloc((size_t)T * 4), qsl[2] = {0, T}, lens[1] = {T};
    assert_non_null(rows);
    for (int32_t i = 0; i < T; i++) {
        rows[i] = i;
        s->pos[i] = i;
        s->slot[i] = s->table[i / BS] * BS + i % BS;
    }
    pg_model_workspace_free(s->ws);
    pg_step_limits lim = {
        .max_tokens = T, .max_seqs = T, .max_model_len = T, .kv_dtype = PG_F32, .block_size = BS};
    if (pg_model_workspace_create(m, &lim, &s->ws) != PAGODA_OK) fail_msg("%s", pg_last_error());
    pg_batch b = {.num_tokens = T,
                  .num_seqs = 1,
                  .token_ids = tokens,
                  .positions = s->pos,
                  .query_start_loc = qsl,
                  .seq_lens = lens,
                  .logit_rows = rows,
                  .num_logits = T,
                  .layers = s->lc};
    if (pg_model_forward(m, s->ws, &b, logits) != PAGODA_OK) fail_msg("%s", pg_last_error());
    free(rows);
    pg_test_seq_free(s);
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

void pg_test_dequant_rows(pg_dtype t, const void *data, int64_t rows, int64_t cols, float *out) {
    const size_t rb = pg_dtype_row_bytes(t, (size_t)cols);
    for (int64_t r = 0; r < rows; r++)
        pg_dequant_row(t, (const uint8_t *)data + (size_t)r * rb, out + r * cols, (size_t)cols);
}

void pg_test_tensor_row(const pg_tensor *t, int64_t r, float *out) {
    const int64_t cols = t->ndim == 1 ? t->shape[0] : t->shape[1];
    const size_t rb = pg_dtype_row_bytes(t->dtype, (size_t)cols);
    pg_dequant_row(t->dtype, (const uint8_t *)t->data + (size_t)r * rb, out, (size_t)cols);
}
