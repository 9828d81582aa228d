/* Draft-model proposer (see draft.h). */
#include "engine/draft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "engine/kv_cache_manager.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "engine/spec_batch.h"
#include "model/source.h"

/* One target request's draft state: a shadow request in the draft's KV
 * cache manager and the tokens its KV holds. */
typedef struct dstate {
    bool used;
    pg_request rq; /* id, kv_slot, num_computed_tokens (KV held), num_tokens (for the kvm) */
    int32_t *toks; /* [max_model_len]: the tokens whose KV is computed, then queued ones */
    int32_t len;   /* target length the drafts follow (the request's num_tokens) */
    int32_t want;  /* drafts wanted this step */
    int32_t got;   /* drafts made for `len` */
    int32_t drafts[PG_MAX_SPEC_TOKENS];
    int64_t stamp; /* last prepare that used it (eviction: the oldest goes) */
} dstate;

struct pg_draft {
    pg_model_source *src;
    pg_model *model;
    pg_kv_plan plan;
    pg_dtype kv_dtype;
    int32_t block_size, vocab, model_len;
    /* after start */
    pg_kvm *kvm;
    pg_runner *runner;
    int32_t S, T, k, G; /* max seqs, max tokens per forward, drafts, groups */
    dstate *st;
    int64_t stamp;
    /* one forward's batch */
    dstate **act; /* [S] states drafting this step */
    dstate **bat; /* [S] states in the current forward */
    pg_spec_batch b;
    /* where the draft's time goes (logged at debug level by pg_draft_free):
     * [0] catch-up forwards, [1] further draft positions */
    int64_t n_prepare, n_fwd[2], n_tok[2];
    int64_t ns_prepare, ns_fwd[2], cpu_fwd[2], ns_argmax;
};

static int64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- load ---- */

static pagoda_status check_vocab(const char *path, const pg_model *m, const pg_tokenizer *ttok,
                                 int32_t target_vocab) {
    const int32_t dv = pg_model_get_config(m)->vocab_size;
    if (dv != target_vocab)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "speculative config: the draft model %s has vocab_size %d, the target %d: "
                        "a draft must share the target's vocabulary",
                        path, dv, target_vocab);
    pg_tokenizer *dtok = NULL;
    pagoda_status st = pg_tokenizer_load_for_vocab(path, dv, &dtok);
    if (st) return st;
    const int32_t nd = pg_tokenizer_vocab_size(dtok), nt = pg_tokenizer_vocab_size(ttok);
    if (nd != nt) {
        pg_tokenizer_free(dtok);
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "speculative config: the draft model's tokenizer (%s) has %d tokens, the "
                        "target's %d: a draft must share the target's tokenizer",
                        path, nd, nt);
    }
    for (int32_t i = 0; i < nt; i++) {
        size_t la = 0, lb = 0;
        const char *a = pg_tokenizer_token_text(ttok, i, &la);
        const char *b = pg_tokenizer_token_text(dtok, i, &lb);
        if (!a != !b || la != lb || (a && memcmp(a, b, la))) {
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          "speculative config: the draft model's tokenizer (%s) differs from the "
                          "target's at id %d ('%.*s' vs '%.*s'): a draft must share the target's "
                          "tokenizer",
                          path, i, (int)(lb > 40 ? 40 : lb), b ? b : "", (int)(la > 40 ? 40 : la),
                          a ? a : "");
            break;
        }
    }
    pg_tokenizer_free(dtok);
    return st;
}

pagoda_status pg_draft_load(const char *path, const pg_model_options *mo,
                            const pg_tokenizer *target_tok, int32_t target_vocab, pg_dtype kv_dtype,
                            int32_t block_size, pg_draft **out) {
    *out = NULL;
    pg_draft *d = calloc(1, sizeof *d);
    if (!d) return pg_error(PAGODA_ERR_NOMEM, "speculative config: out of memory");
    /* the draft is never sharded: under tensor parallelism it runs whole on
     * rank 0, between the target's steps (the other ranks only follow the
     * target's forward, so a sharded draft's all-reduces had no partner) */
    pg_model_options dmo = *mo;
    dmo.tp_rank = 0;
    dmo.tp_size = 1;
    dmo.comm = NULL;
    pagoda_status st = pg_model_source_open(path, &d->src);
    if (!st) st = pg_model_load(d->src, &dmo, &d->model);
    if (!st) st = check_vocab(path, d->model, target_tok, target_vocab);
    if (!st) st = pg_runner_plan_kv(d->model, kv_dtype, block_size, &d->plan);
    if (!st)
        for (int32_t g = 0; g < d->plan.num_groups && !st; g++)
            if (d->plan.groups[g].kind == PG_KV_MAMBA ||
                d->plan.groups[g].kind == PG_KV_CROSS_ATTENTION || pg_model_encoder_steps(d->model))
                st = pg_error(PAGODA_ERR_UNSUPPORTED,
                              "speculative config: the draft model %s (%s) has a %s KV cache "
                              "group, which cannot be rolled back past rejected drafts",
                              path, pg_model_arch_name(d->model),
                              pg_kv_cache_kind_name(d->plan.groups[g].kind));
    if (st) {
        pg_draft_free(d);
        return st;
    }
    d->kv_dtype = kv_dtype;
    d->block_size = block_size;
    d->vocab = target_vocab;
    d->model_len = pg_model_max_context(d->model);
    *out = d;
    return PAGODA_OK;
}

uint64_t pg_draft_kv_bytes_per_token(const pg_draft *d) {
    return d->plan.kv_bytes_per_token;
}

const char *pg_draft_arch_name(const pg_draft *d) {
    return pg_model_arch_name(d->model);
}

pagoda_status pg_draft_start(pg_draft *d, int32_t num_blocks, int32_t max_num_seqs,
                             int32_t max_model_len, int32_t max_num_batched_tokens, int32_t k) {
    if (d->kvm || num_blocks < 2 || max_num_seqs < 1 || max_model_len < 2 ||
        max_num_batched_tokens < max_num_seqs || k < 1 || k > PG_MAX_SPEC_TOKENS)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "draft: start: %d blocks, %d seqs, max_model_len %d, %d tokens, k %d",
                        num_blocks, max_num_seqs, max_model_len, max_num_batched_tokens, k);
    if (max_model_len > d->model_len) max_model_len = d->model_len;
    const int32_t S = max_num_seqs, T = max_num_batched_tokens, G = d->plan.num_groups;
    pagoda_status st = pg_spec_kv_start(d->model, &d->plan, d->kv_dtype, d->block_size, num_blocks,
                                        S, max_model_len, T, &d->kvm, &d->runner);
    if (st) return st;
    d->S = S;
    d->T = T;
    d->k = k;
    d->G = G;
    d->model_len = max_model_len;
    d->st = calloc((size_t)S, sizeof *d->st);
    d->act = calloc((size_t)S, sizeof *d->act);
    d->bat = calloc((size_t)S, sizeof *d->bat);
    if (!d->st || !d->act || !d->bat) return pg_error(PAGODA_ERR_NOMEM, "draft: out of memory");
    if ((st = pg_spec_batch_init(&d->b, d->kvm, S, T, G, d->block_size, "draft"))) return st;
    for (int32_t i = 0; i < S; i++) {
        d->st[i].toks = malloc((size_t)max_model_len * sizeof(int32_t));
        if (!d->st[i].toks) return pg_error(PAGODA_ERR_NOMEM, "draft: out of memory");
        d->st[i].rq.kv_slot = -1;
    }
    return PAGODA_OK;
}

void pg_draft_free(pg_draft *d) {
    if (!d) return;
    if (d->n_prepare > 0) {
        const int64_t nf = d->n_fwd[0] + d->n_fwd[1];
        PG_DEBUG("draft: profile: %lld prepares %.3f ms each; catch-up %lld forwards (%lld "
                 "tokens) %.3f ms each (process CPU %.3f ms); drafts %lld forwards %.3f ms each "
                 "(process CPU %.3f ms); argmax %.3f ms a forward",
                 (long long)d->n_prepare, (double)d->ns_prepare / 1e6 / (double)d->n_prepare,
                 (long long)d->n_fwd[0], (long long)d->n_tok[0],
                 d->n_fwd[0] ? (double)d->ns_fwd[0] / 1e6 / (double)d->n_fwd[0] : 0.0,
                 d->n_fwd[0] ? (double)d->cpu_fwd[0] / 1e6 / (double)d->n_fwd[0] : 0.0,
                 (long long)d->n_fwd[1],
                 d->n_fwd[1] ? (double)d->ns_fwd[1] / 1e6 / (double)d->n_fwd[1] : 0.0,
                 d->n_fwd[1] ? (double)d->cpu_fwd[1] / 1e6 / (double)d->n_fwd[1] : 0.0,
                 nf ? (double)d->ns_argmax / 1e6 / (double)nf : 0.0);
    }
    for (int32_t i = 0; d->st && i < d->S; i++)
        free(d->st[i].toks);
    free(d->st);
    free(d->act);
    free(d->bat);
    pg_spec_batch_free(&d->b);
    pg_runner_free(d->runner);
    pg_kvm_destroy(d->kvm);
    pg_model_free(d->model);
    pg_model_source_free(d->src);
    free(d);
}

size_t pg_draft_kv_bytes(const pg_draft *d) {
    return d->runner ? pg_runner_kv_bytes(d->runner) : 0;
}
size_t pg_draft_workspace_bytes(const pg_draft *d) {
    return d->runner ? pg_runner_workspace_bytes(d->runner) : 0;
}
int32_t pg_draft_num_blocks(const pg_draft *d) {
    return d->kvm ? pg_kvm_num_usable_blocks(d->kvm) : 0;
}

/* ---- per-request state ---- */

static dstate *find(const pg_draft *d, uint64_t id) {
    for (int32_t i = 0; i < d->S; i++)
        if (d->st[i].used && d->st[i].rq.id == id) return &d->st[i];
    return NULL;
}

static void drop(pg_draft *d, dstate *s) {
    pg_kvm_free(d->kvm, &s->rq);
    int32_t *toks = s->toks;
    memset(s, 0, sizeof *s);
    s->toks = toks;
    s->rq.kv_slot = -1;
    s->rq.state_restore = -1;
}

/* A state for id: its own, else a free one, else the least recently used
 * one not used in this prepare (there is one: at most S requests a step). */
static dstate *acquire(pg_draft *d, uint64_t id) {
    dstate *s = find(d, id), *lru = NULL;
    if (s) return s;
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
    return s;
}

void pg_draft_release(pg_draft *d, const uint64_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        dstate *s = find(d, ids[i]);
        if (s) drop(d, s);
    }
}

int32_t pg_draft_num_computed(const pg_draft *d, uint64_t id) {
    const dstate *s = find(d, id);
    return s ? s->rq.num_computed_tokens : -1;
}

pagoda_status pg_draft_check(const pg_draft *d) {
    return pg_kvm_check(d->kvm);
}

/* ---- forwards ---- */

/* Reserve KV for q more tokens of s (s->toks already holds them). false:
 * the pool is full (s is dropped). */
static bool reserve(pg_draft *d, dstate *s, int32_t q, int32_t *prev) {
    if (pg_spec_batch_reserve(&d->b, &s->rq, q, prev)) return true;
    drop(d, s);
    return false;
}

/* Add s with q query tokens (s->toks[computed .. computed + q)) to the batch
 * being built (*nr requests, *nt tokens so far). */
static void add(pg_draft *d, dstate *s, int32_t q, bool sample, const int32_t *prev, int32_t *nr,
                int32_t *nt) {
    d->bat[*nr] = s;
    memcpy(d->b.tok + *nt, s->toks + s->rq.num_computed_tokens, (size_t)q * sizeof(int32_t));
    pg_spec_batch_add(&d->b, &s->rq, q, sample, prev, 0, nr, nt);
}

/* Run the batch of nr requests / nt tokens; each sampling request's argmax
 * becomes its next draft. */
static pagoda_status run(pg_draft *d, int32_t nr, int32_t nt, int kind) {
    if (nr == 0) return PAGODA_OK;
    const pg_sched_output so = pg_spec_batch_output(&d->b, nr, nt);
    float *logits = NULL;
    const int64_t t0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    pagoda_status st = pg_runner_execute(d->runner, &so, NULL, &logits, d->b.row, NULL);
    const int64_t t1 = clock_ns(CLOCK_MONOTONIC);
    d->ns_fwd[kind] += t1 - t0;
    d->cpu_fwd[kind] += clock_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
    d->n_fwd[kind]++;
    d->n_tok[kind] += nt;
    if (st) return st;
    for (int32_t i = 0; i < nr; i++) {
        dstate *s = d->bat[i];
        s->rq.num_computed_tokens += d->b.nsched[i];
        if (!d->b.samp[i]) continue;
        const int32_t t = pg_spec_argmax(logits + (size_t)d->b.row[i] * (size_t)d->vocab, d->vocab);
        s->drafts[s->got++] = t;
        /* the next forward's query is this draft */
        if (s->got < s->want) s->toks[s->rq.num_computed_tokens] = t;
    }
    d->ns_argmax += clock_ns(CLOCK_MONOTONIC) - t1;
    return PAGODA_OK;
}

static pagoda_status prepare(pg_draft *d, pg_request *const *reqs, const int32_t *max_drafts,
                             int32_t n);

pagoda_status pg_draft_prepare(void *ctx, pg_request *const *reqs, const int32_t *max_drafts,
                               int32_t n) {
    pg_draft *d = ctx;
    const int64_t t0 = clock_ns(CLOCK_MONOTONIC);
    pagoda_status st = prepare(d, reqs, max_drafts, n);
    d->n_prepare++;
    d->ns_prepare += clock_ns(CLOCK_MONOTONIC) - t0;
    return st;
}

static pagoda_status prepare(pg_draft *d, pg_request *const *reqs, const int32_t *max_drafts,
                             int32_t n) {
    d->stamp++;
    int32_t na = 0;
    /* 1. roll back to the prefix each request still has; queue the rest */
    for (int32_t i = 0; i < n && i < d->S; i++) {
        const pg_request *r = reqs[i];
        int32_t want = max_drafts[i];
        /* the draft's positions end at its max_model_len */
        if (want > d->model_len - r->num_tokens) want = d->model_len - r->num_tokens;
        dstate *s = want > 0 ? acquire(d, r->id) : find(d, r->id);
        if (!s) continue;
        s->stamp = d->stamp;
        s->got = 0;
        s->want = want > 0 ? want : 0;
        s->len = r->num_tokens;
        if (s->want == 0) continue;
        int32_t keep = s->rq.num_computed_tokens;
        if (keep > r->num_tokens - 1) keep = r->num_tokens - 1;
        int32_t L = 0;
        while (L < keep && s->toks[L] == r->tokens[L])
            L++;
        if (L < s->rq.num_computed_tokens) {
            pg_kvm_truncate(d->kvm, &s->rq, L);
            s->rq.num_computed_tokens = L;
        }
        memcpy(s->toks + L, r->tokens + L, (size_t)(r->num_tokens - L) * sizeof(int32_t));
        d->act[na++] = s;
    }
    /* 2. catch up: every request's unseen tokens, the last one sampling */
    for (;;) {
        int32_t nr = 0, nt = 0, prev[PG_KV_MAX_GROUPS];
        for (int32_t i = 0; i < na && nt < d->T; i++) {
            dstate *s = d->act[i];
            if (!s->used || s->got > 0) continue;
            int32_t pending = s->len - s->rq.num_computed_tokens, q = pending;
            if (q > d->T - nt) q = d->T - nt;
            if (q <= 0 || !reserve(d, s, q, prev)) continue;
            add(d, s, q, q == pending, prev, &nr, &nt);
        }
        if (nr == 0) break;
        pagoda_status st = run(d, nr, nt, 0);
        if (st) return st;
    }
    /* 3. one forward per further draft position */
    for (int32_t j = 1; j < d->k; j++) {
        int32_t nr = 0, nt = 0, prev[PG_KV_MAX_GROUPS];
        for (int32_t i = 0; i < na; i++) {
            dstate *s = d->act[i];
            if (!s->used || s->got != j || s->got >= s->want) continue;
            if (!reserve(d, s, 1, prev)) continue;
            add(d, s, 1, true, prev, &nr, &nt);
        }
        if (nr == 0) break;
        pagoda_status st = run(d, nr, nt, 1);
        if (st) return st;
    }
    return PAGODA_OK;
}

int32_t pg_draft_propose(void *ctx, const pg_request *r, int32_t max_drafts, int32_t *out) {
    pg_draft *d = ctx;
    const dstate *s = find(d, r->id);
    if (!s || s->len != r->num_tokens || s->stamp != d->stamp) return 0;
    int32_t m = s->got < max_drafts ? s->got : max_drafts;
    if (m > 0) memcpy(out, s->drafts, (size_t)m * sizeof(int32_t));
    return m;
}
