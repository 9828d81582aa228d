/* MTP proposer (see mtp.h). */
#include "engine/mtp.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "engine/kv_cache_manager.h"
#include "engine/runner.h"
#include "kernels/dispatch.h"

/* One target request's head state. */
typedef struct mstate {
    bool used;
    pg_request rq; /* id, kv_slot, num_computed_tokens = KV positions held (index = pos - base) */
    int32_t base;  /* absolute position of KV index 0 */
    int32_t exact; /* positions [base, exact) hold the target's hidden states */
    int32_t len;   /* the request's num_tokens the drafts follow */
    int32_t want, got;
    int32_t drafts[PG_MAX_SPEC_TOKENS];
    float *h;      /* [hidden]: the head's hidden state of the last draft */
    int64_t stamp; /* last observe / prepare that used it */
} mstate;

struct pg_mtp {
    pg_model *model;
    pg_kv_plan plan;
    pg_dtype kv_dtype;
    int32_t block_size, vocab, H;
    /* after start */
    pg_kvm *kvm;
    pg_runner *runner;
    int32_t S, T, k, G, model_len;
    mstate *st;
    float *h_mem;             /* [S][H] the states' h */
    float *target_hidden;     /* [T][H] the target's runner writes here */
    float *hin, *hout;        /* [T][H] the head's forward */
    int64_t stamp;
    mstate **bat;             /* [S] */
    mstate **act;             /* [S] states drafting in this prepare */
    uint64_t *o_ids;
    int32_t *o_nsched, *o_ncomp, *o_qsl, *o_seq, *o_slots_kv, *o_row, *o_tok, *o_pos, *o_slot;
    int32_t *o_nblk, *o_nnew;
    uint8_t *o_new, *o_samp;
    const int32_t **o_tab;
};

pagoda_status pg_mtp_create(const pg_model *target, const pg_model_source *src,
                            const pg_model_options *mo, pg_dtype kv_dtype, int32_t block_size,
                            pg_mtp **out) {
    *out = NULL;
    pg_mtp *d = calloc(1, sizeof *d);
    if (!d) return pg_error(PAGODA_ERR_NOMEM, "mtp: out of memory");
    pagoda_status st = pg_model_mtp_create(target, src, mo, &d->model);
    if (!st) st = pg_runner_plan_kv(d->model, kv_dtype, block_size, &d->plan);
    if (!st && !pg_model_has_hidden_out(target))
        st = pg_error(PAGODA_ERR_UNSUPPORTED, "mtp: the target model gives no hidden states");
    if (st) {
        pg_mtp_free(d);
        return st;
    }
    d->kv_dtype = kv_dtype;
    d->block_size = block_size;
    d->vocab = pg_model_get_config(target)->vocab_size;
    d->H = pg_model_get_config(target)->hidden_size;
    d->model_len = pg_model_max_context(target);
    *out = d;
    return PAGODA_OK;
}

uint64_t pg_mtp_kv_bytes_per_token(const pg_mtp *d) {
    return d->plan.kv_bytes_per_token;
}

pagoda_status pg_mtp_start(pg_mtp *d, int32_t num_blocks, int32_t max_num_seqs,
                           int32_t max_model_len, int32_t max_num_batched_tokens, int32_t k) {
    if (d->kvm || num_blocks < 2 || max_num_seqs < 1 || max_model_len < 2 ||
        max_num_batched_tokens < max_num_seqs || k < 1 || k > PG_MAX_SPEC_TOKENS)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "mtp: start: %d blocks, %d seqs, max_model_len %d, %d tokens, k %d",
                        num_blocks, max_num_seqs, max_model_len, max_num_batched_tokens, k);
    if (max_model_len > d->model_len) max_model_len = d->model_len;
    const int32_t S = max_num_seqs, T = max_num_batched_tokens, G = d->plan.num_groups;
    pg_kvm_config kc = {.num_blocks = num_blocks,
                        .block_size = d->block_size,
                        .max_model_len = max_model_len,
                        .max_num_seqs = S,
                        .enable_prefix_caching = false,
                        .num_groups = G};
    memcpy(kc.groups, d->plan.groups, sizeof kc.groups);
    pagoda_status st = pg_kvm_create(&kc, &d->kvm);
    if (st) return st;
    pg_runner_config rc = {.num_blocks = num_blocks,
                           .block_size = d->block_size,
                           .kv_dtype = d->kv_dtype,
                           .max_num_batched_tokens = T,
                           .max_num_seqs = S,
                           .max_model_len = max_model_len};
    if ((st = pg_runner_create(d->model, &rc, &d->runner))) return st;
    d->S = S;
    d->T = T;
    d->k = k;
    d->G = G;
    d->model_len = max_model_len;
    const size_t H = (size_t)d->H;
    d->st = calloc((size_t)S, sizeof *d->st);
    d->h_mem = pg_malloc_aligned((size_t)S * H * sizeof(float));
    d->target_hidden = pg_malloc_aligned((size_t)T * H * sizeof(float));
    d->hin = pg_malloc_aligned((size_t)T * H * sizeof(float));
    d->hout = pg_malloc_aligned((size_t)T * H * sizeof(float));
    d->bat = calloc((size_t)S, sizeof *d->bat);
    d->act = calloc((size_t)S, sizeof *d->act);
    d->o_ids = calloc((size_t)S, sizeof *d->o_ids);
    d->o_nsched = calloc((size_t)S, sizeof(int32_t));
    d->o_ncomp = calloc((size_t)S, sizeof(int32_t));
    d->o_qsl = calloc((size_t)S + 1, sizeof(int32_t));
    d->o_seq = calloc((size_t)S, sizeof(int32_t));
    d->o_slots_kv = calloc((size_t)S, sizeof(int32_t));
    d->o_row = calloc((size_t)S, sizeof(int32_t));
    d->o_new = calloc((size_t)S, 1);
    d->o_samp = calloc((size_t)S, 1);
    d->o_tok = calloc((size_t)T, sizeof(int32_t));
    d->o_pos = calloc((size_t)T, sizeof(int32_t));
    d->o_slot = calloc((size_t)G * (size_t)T, sizeof(int32_t));
    d->o_nblk = calloc((size_t)G * (size_t)S, sizeof(int32_t));
    d->o_nnew = calloc((size_t)G * (size_t)S, sizeof(int32_t));
    d->o_tab = calloc((size_t)G * (size_t)S, sizeof *d->o_tab);
    if (!d->st || !d->h_mem || !d->target_hidden || !d->hin || !d->hout || !d->bat || !d->act ||
        !d->o_ids ||
        !d->o_nsched || !d->o_ncomp || !d->o_qsl || !d->o_seq || !d->o_slots_kv || !d->o_row ||
        !d->o_new || !d->o_samp || !d->o_tok || !d->o_pos || !d->o_slot || !d->o_nblk ||
        !d->o_nnew || !d->o_tab)
        return pg_error(PAGODA_ERR_NOMEM, "mtp: out of memory");
    for (int32_t i = 0; i < S; i++) {
        d->st[i].rq.kv_slot = -1;
        d->st[i].h = d->h_mem + (size_t)i * H;
    }
    pg_runner_set_hidden(d->runner, d->hin, d->hout);
    return PAGODA_OK;
}

void pg_mtp_free(pg_mtp *d) {
    if (!d) return;
    free(d->st);
    pg_free(d->h_mem);
    pg_free(d->target_hidden);
    pg_free(d->hin);
    pg_free(d->hout);
    free(d->bat);
    free(d->act);
    free(d->o_ids);
    free(d->o_nsched);
    free(d->o_ncomp);
    free(d->o_qsl);
    free(d->o_seq);
    free(d->o_slots_kv);
    free(d->o_row);
    free(d->o_new);
    free(d->o_samp);
    free(d->o_tok);
    free(d->o_pos);
    free(d->o_slot);
    free(d->o_nblk);
    free(d->o_nnew);
    free(d->o_tab);
    pg_runner_free(d->runner);
    pg_kvm_destroy(d->kvm);
    pg_model_free(d->model);
    free(d);
}

float *pg_mtp_hidden(pg_mtp *d) {
    return d->target_hidden;
}
size_t pg_mtp_kv_bytes(const pg_mtp *d) {
    return d->runner ? pg_runner_kv_bytes(d->runner) : 0;
}
size_t pg_mtp_workspace_bytes(const pg_mtp *d) {
    return d->runner ? pg_runner_workspace_bytes(d->runner) : 0;
}
int32_t pg_mtp_num_blocks(const pg_mtp *d) {
    return d->kvm ? pg_kvm_num_usable_blocks(d->kvm) : 0;
}

/* ---- per-request state ---- */

static mstate *find(const pg_mtp *d, uint64_t id) {
    for (int32_t i = 0; i < d->S; i++)
        if (d->st[i].used && d->st[i].rq.id == id) return &d->st[i];
    return NULL;
}

static void drop(pg_mtp *d, mstate *s) {
    pg_kvm_free(d->kvm, &s->rq);
    float *h = s->h;
    memset(s, 0, sizeof *s);
    s->h = h;
    s->rq.kv_slot = -1;
    s->rq.state_restore = -1;
}

/* A fresh state for id starting at absolute position base: a free one,
 * else the least recently used one not used in this pass. */
static mstate *acquire(pg_mtp *d, uint64_t id, int32_t base) {
    mstate *s = NULL, *lru = NULL;
    for (int32_t i = 0; i < d->S && !s; i++)
        if (!d->st[i].used) s = &d->st[i];
    for (int32_t i = 0; i < d->S && !s; i++)
        if (d->st[i].stamp != d->stamp && (!lru || d->st[i].stamp < lru->stamp)) lru = &d->st[i];
    if (!s && lru) {
        drop(d, lru);
        s = lru;
    }
    if (!s) return NULL;
    s->used = true;
    s->rq.id = id;
    s->rq.kv_slot = -1;
    s->rq.state_restore = -1;
    s->rq.block_size = d->block_size;
    s->base = s->exact = base;
    return s;
}

void pg_mtp_release(pg_mtp *d, const uint64_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        mstate *s = find(d, ids[i]);
        if (s) drop(d, s);
    }
}

int32_t pg_mtp_exact(const pg_mtp *d, uint64_t id) {
    const mstate *s = find(d, id);
    return s ? s->exact : -1;
}

pagoda_status pg_mtp_check(const pg_mtp *d) {
    return pg_kvm_check(d->kvm);
}

/* ---- forwards ---- */

/* Roll s's KV back to the positions computed from the target, [base, exact). */
static void rollback(pg_mtp *d, mstate *s) {
    const int32_t keep = s->exact - s->base;
    if (s->rq.num_computed_tokens > keep) {
        pg_kvm_truncate(d->kvm, &s->rq, keep);
        s->rq.num_computed_tokens = keep;
    }
}

/* Reserve KV for q more positions of s; false: the pool is full (s dropped). */
static bool reserve(pg_mtp *d, mstate *s, int32_t q, int32_t *prev) {
    for (int32_t g = 0; g < d->G; g++)
        pg_kvm_block_table(d->kvm, g, &s->rq, &prev[g]);
    s->rq.num_tokens = s->rq.num_computed_tokens + q;
    s->rq.num_spec_tokens = 0;
    if (pg_kvm_allocate_slots(d->kvm, &s->rq, q, 0) == PAGODA_OK) return true;
    drop(d, s);
    return false;
}

/* Add s's next q positions (tokens / hidden rows already at o_tok / hin
 * from *nt on) to the batch. */
static void add(pg_mtp *d, mstate *s, int32_t q, bool sample, const int32_t *prev, int32_t *nr,
                int32_t *nt) {
    const int32_t i = (*nr)++, off = *nt, c = s->rq.num_computed_tokens, bs = d->block_size;
    d->bat[i] = s;
    d->o_ids[i] = s->rq.id;
    d->o_nsched[i] = q;
    d->o_ncomp[i] = c;
    d->o_qsl[i + 1] = off + q;
    d->o_seq[i] = c + q;
    d->o_slots_kv[i] = s->rq.kv_slot;
    d->o_new[i] = c == 0;
    d->o_samp[i] = sample;
    for (int32_t t = 0; t < q; t++)
        d->o_pos[off + t] = s->base + c + t; /* RoPE: the absolute position */
    for (int32_t g = 0; g < d->G; g++) {
        int32_t nb;
        const int32_t *table = pg_kvm_block_table(d->kvm, g, &s->rq, &nb);
        const size_t gi = (size_t)g * (size_t)d->S + (size_t)i;
        d->o_tab[gi] = table;
        d->o_nblk[gi] = nb;
        d->o_nnew[gi] = nb - prev[g];
        int32_t *slots = d->o_slot + (size_t)g * (size_t)d->T + off;
        for (int32_t t = 0; t < q; t++)
            slots[t] = table[(c + t) / bs] * bs + (c + t) % bs;
    }
    *nt += q;
}

/* The first index of the largest logit (NaNs skipped): the dispatch
 * table's vector argmax (a scalar loop over a 128k vocabulary took about as
 * long as a small draft's forward, docs/PERFORMANCE.md). */
static int32_t argmax(const float *x, int32_t n) {
    return (int32_t)pg_kernels()->argmax_f32(x, (size_t)n);
}

/* Run the batch; each sampling state's argmax becomes its next draft and
 * its last row's hidden state its h. */
static pagoda_status run(pg_mtp *d, int32_t nr, int32_t nt) {
    if (nr == 0) return PAGODA_OK;
    pg_sched_output so = {.num_reqs = nr,
                          .num_tokens = nt,
                          .num_groups = d->G,
                          .block_size = d->block_size,
                          .req_stride = d->S,
                          .token_stride = d->T,
                          .req_ids = d->o_ids,
                          .num_scheduled_tokens = d->o_nsched,
                          .num_computed_tokens = d->o_ncomp,
                          .query_start_loc = d->o_qsl,
                          .seq_lens = d->o_seq,
                          .kv_slots = d->o_slots_kv,
                          .is_new = d->o_new,
                          .samples = d->o_samp,
                          .block_tables = d->o_tab,
                          .num_blocks = d->o_nblk,
                          .num_new_blocks = d->o_nnew,
                          .token_ids = d->o_tok,
                          .positions = d->o_pos,
                          .slot_mapping = d->o_slot,
                          .enc_cross_group = -1};
    float *logits = NULL;
    pagoda_status st = pg_runner_execute(d->runner, &so, NULL, &logits, d->o_row, NULL);
    if (st) return st;
    const size_t H = (size_t)d->H;
    for (int32_t i = 0; i < nr; i++) {
        mstate *s = d->bat[i];
        s->rq.num_computed_tokens += d->o_nsched[i];
        if (!d->o_samp[i]) continue;
        s->drafts[s->got++] = argmax(logits + (size_t)d->o_row[i] * (size_t)d->vocab, d->vocab);
        memcpy(s->h, d->hout + (size_t)(d->o_qsl[i + 1] - 1) * H, H * sizeof(float));
    }
    return PAGODA_OK;
}

pagoda_status pg_mtp_observe(pg_mtp *d, const pg_sched_output *so, const pg_request *const *reqs) {
    d->stamp++;
    const size_t H = (size_t)d->H;
    int32_t nr = 0, nt = 0, prev[PG_KV_MAX_GROUPS];
    d->o_qsl[0] = 0;
    for (int32_t i = 0; i < so->num_reqs; i++) {
        const pg_request *r = reqs[i];
        if (!r) continue;
        const int32_t c = so->num_computed_tokens[i];
        int32_t end = c + so->num_scheduled_tokens[i];
        if (end > r->num_tokens - 1) end = r->num_tokens - 1; /* rejected drafts' rows */
        if (end > d->model_len) end = d->model_len;
        if (end <= c) continue;
        mstate *s = find(d, r->id);
        if (s && s->exact != c) { /* preempted and recomputed, or it fell behind */
            drop(d, s);
            s = NULL;
        }
        if (!s && !(s = acquire(d, r->id, c))) continue;
        s->stamp = d->stamp;
        s->got = 0;
        s->len = -1;
        rollback(d, s);
        const int32_t q = end - c;
        if (!reserve(d, s, q, prev)) continue;
        for (int32_t t = 0; t < q; t++) { /* (h_p, token p + 1) at position p */
            d->o_tok[nt + t] = r->tokens[c + t + 1];
            memcpy(d->hin + (size_t)(nt + t) * H,
                   d->target_hidden + (size_t)(so->query_start_loc[i] + t) * H, H * sizeof(float));
        }
        const bool frontier = end == r->num_tokens - 1;
        add(d, s, q, frontier, prev, &nr, &nt);
        s->exact = end;
        if (frontier) s->len = r->num_tokens;
    }
    return run(d, nr, nt);
}

pagoda_status pg_mtp_prepare(void *ctx, pg_request *const *reqs, const int32_t *max_drafts,
                             int32_t n) {
    pg_mtp *d = ctx;
    d->stamp++;
    int32_t na = 0;
    for (int32_t i = 0; i < n && i < d->S; i++) {
        mstate *s = find(d, reqs[i]->id);
        if (!s) continue;
        s->stamp = d->stamp;
        if (s->len != reqs[i]->num_tokens || s->got < 1) {
            s->want = 0;
            continue;
        }
        int32_t want = max_drafts[i] < d->k ? max_drafts[i] : d->k;
        if (want > d->model_len - reqs[i]->num_tokens) want = d->model_len - reqs[i]->num_tokens;
        s->want = want;
        s->got = 1; /* draft 1 came from observe; later ones are made again */
        rollback(d, s);
        d->act[na++] = s;
    }
    mstate **act = d->act;
    const size_t H = (size_t)d->H;
    pagoda_status st = PAGODA_OK;
    for (int32_t j = 1; j < d->k && !st; j++) {
        int32_t nr = 0, nt = 0, prev[PG_KV_MAX_GROUPS];
        d->o_qsl[0] = 0;
        for (int32_t i = 0; i < na; i++) {
            mstate *s = act[i];
            if (!s->used || s->got != j || s->got >= s->want) continue;
            if (!reserve(d, s, 1, prev)) continue;
            d->o_tok[nt] = s->drafts[j - 1];
            memcpy(d->hin + (size_t)nt * H, s->h, H * sizeof(float));
            add(d, s, 1, true, prev, &nr, &nt);
        }
        if (nr == 0) break;
        st = run(d, nr, nt);
    }
    return st;
}

int32_t pg_mtp_propose(void *ctx, const pg_request *r, int32_t max_drafts, int32_t *out) {
    pg_mtp *d = ctx;
    const mstate *s = find(d, r->id);
    if (!s || s->len != r->num_tokens || s->stamp != d->stamp) return 0;
    int32_t m = s->got < max_drafts ? s->got : max_drafts;
    if (m > s->want) m = s->want;
    if (m > 0) memcpy(out, s->drafts, (size_t)m * sizeof(int32_t));
    return m;
}
