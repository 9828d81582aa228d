/* Model runner (see runner.h): KV memory per group, workspace, batch assembly. */
#include "engine/runner.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "dist/comm.h"

struct pg_runner {
    const pg_model *model;
    pg_runner_config cfg;
    pg_kv_plan plan;
    int32_t num_layers;
    int32_t *layer_group; /* [num_layers]: group index, -1 for layers without a cache */
    int32_t *layer_slot;  /* [num_layers]: paged tensor index, or state layer index */
    void *kv_mem;         /* the paged tensors */
    size_t kv_mem_bytes;
    pg_paged_kv *tensors; /* [num_tensors] */
    uint8_t *state_mem;   /* [num_state_layers][max_num_seqs][state_bytes of the layer] */
    size_t state_mem_bytes;
    uint8_t **state_base; /* [num_state_layers] start of the layer's slots */
    int64_t *state_bytes; /* [num_state_layers] */
    int32_t num_state_layers;
    void **state_ptrs;  /* [num_state_layers][max_num_seqs] per step */
    /* prefix-cache snapshots of the states (engine/state_cache.h): entry e
     * holds every state layer's state of one request, layer i at
     * snap_off[i]; per step the layers get snap_len / snap_ptrs */
    uint8_t *snap_mem;
    size_t snap_mem_bytes, snap_entry_bytes;
    size_t *snap_off;     /* [num_state_layers] */
    void **snap_ptrs;     /* [num_state_layers][max_num_seqs] */
    int32_t *snap_len;    /* [max_num_seqs] */
    /* speculative decoding's per-row state snapshots: state layer i's
     * region at row_mem + max_num_spec_rows * snap_off[i], one state per
     * draft row of the step; request j of the last step wrote row_n[j]
     * states from row row_off[j] (pg_runner_spec_keep) */
    uint8_t *row_mem;
    size_t row_mem_bytes;
    void **row_ptrs;              /* [num_state_layers][max_num_seqs] */
    int32_t *row_n, *row_off;     /* [max_num_seqs] */
    int32_t *row_slot;            /* [max_num_seqs] the kv_slot of each */
    int32_t row_reqs;             /* requests in the last step */
    const float *hidden_in; /* pg_runner_set_hidden: the steps' pg_batch views */
    float *hidden_out;
    pg_layer_cache *lc; /* [num_layers] per step */
    /* encoder-decoder models: encoder state slots and the CROSS layers' K/V */
    uint8_t *enc_mem;
    size_t enc_state_bytes, enc_mem_bytes;
    pg_paged_kv **cross_kv; /* [num cross layers], layer order */
    pg_model_workspace *ws;
    float *logits;       /* [max_num_seqs][vocab] */
    int32_t *logit_rows; /* [max_num_seqs] */
    /* tensor parallelism (cfg.comm of size > 1) */
    int32_t *tp_buf;           /* a step's description (see tp_send) */
    size_t tp_cap;             /* int32s */
    const int32_t **tp_tables; /* follower: [num_groups][max_num_seqs] into tp_buf */
    bool tp_failed;
};

/* ---- tensor parallelism: the step rank 0 broadcasts ---------------------------------- */

enum { TP_STOP = 0, TP_STEP = 1 };

/* The step header, then its int32 payload: token_ids [T], positions [T],
 * query_start_loc [S + 1], seq_lens [S], logit_rows [NL], then per group g
 * slot_mapping [T] and S block tables of W ids (W = the step's most blocks
 * of a request: ceil(max seq_len / block_size)). */
typedef struct tp_hdr {
    int32_t kind, num_tokens, num_seqs, num_logits, num_groups, width;
} tp_hdr;

static bool tp_on(const pg_runner *r) {
    return r->cfg.comm && pg_comm_size(r->cfg.comm) > 1;
}

static size_t tp_payload(const tp_hdr *h) {
    const size_t T = (size_t)h->num_tokens, S = (size_t)h->num_seqs;
    return 2 * T + 2 * S + 1 + (size_t)h->num_logits +
           (size_t)h->num_groups * (T + S * (size_t)h->width);
}

static pagoda_status tp_reserve(pg_runner *r, size_t n) {
    if (n <= r->tp_cap) return PAGODA_OK;
    int32_t *b = realloc(r->tp_buf, n * sizeof(int32_t));
    if (!b) return pg_error(PAGODA_ERR_NOMEM, "runner: out of memory for a step description");
    r->tp_buf = b;
    r->tp_cap = n;
    return PAGODA_OK;
}

/* buf [bytes] of rank 0 to every rank, in broadcasts of at most the chunk. */
static pagoda_status tp_bcast(pg_comm *c, void *buf, size_t bytes) {
    for (size_t off = 0; off < bytes; off += PG_RUNNER_TP_CHUNK_BYTES) {
        size_t n = bytes - off < PG_RUNNER_TP_CHUNK_BYTES ? bytes - off : PG_RUNNER_TP_CHUNK_BYTES;
        pagoda_status st = pg_comm_broadcast(c, (char *)buf + off, n, 0);
        if (st != PAGODA_OK) return st;
    }
    return PAGODA_OK;
}

/* Rank 0: describe the batch b (tables of so) and broadcast it. */
static pagoda_status tp_send(pg_runner *r, const pg_sched_output *so, const pg_batch *b) {
    const int32_t bs = r->cfg.block_size, G = so->num_groups;
    int32_t W = 1;
    for (int32_t i = 0; i < b->num_seqs; i++) {
        int32_t w = (b->seq_lens[i] + bs - 1) / bs;
        if (w > W) W = w;
    }
    tp_hdr h = {TP_STEP, b->num_tokens, b->num_seqs, b->num_logits, G, W};
    const size_t n = tp_payload(&h), T = (size_t)h.num_tokens, S = (size_t)h.num_seqs;
    pagoda_status st = tp_reserve(r, n);
    if (st != PAGODA_OK) return st;
    int32_t *p = r->tp_buf;
    memcpy(p, b->token_ids, T * 4), p += T;
    memcpy(p, b->positions, T * 4), p += T;
    memcpy(p, b->query_start_loc, (S + 1) * 4), p += S + 1;
    memcpy(p, b->seq_lens, S * 4), p += S;
    memcpy(p, b->logit_rows, (size_t)h.num_logits * 4), p += h.num_logits;
    for (int32_t g = 0; g < G; g++) {
        memcpy(p, so->slot_mapping + (size_t)g * (size_t)so->token_stride, T * 4), p += T;
        const int32_t *const *tab = so->block_tables + (size_t)g * (size_t)so->req_stride;
        for (size_t i = 0; i < S; i++, p += W) {
            const int32_t w = (b->seq_lens[i] + bs - 1) / bs;
            memcpy(p, tab[i], (size_t)w * 4);
            for (int32_t k = w; k < W; k++)
                p[k] = 0; /* the null block: never read */
        }
    }
    if ((st = pg_comm_broadcast(r->cfg.comm, &h, sizeof h, 0)) != PAGODA_OK) return st;
    return tp_bcast(r->cfg.comm, r->tp_buf, n * sizeof(int32_t));
}

bool pg_runner_comm_failed(const pg_runner *r) {
    return r->tp_failed;
}

pagoda_status pg_runner_follow(pg_runner *r) {
    if (!tp_on(r) || pg_comm_rank(r->cfg.comm) == 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "runner: follow on a rank that is not > 0");
    for (int32_t l = 0; l < r->num_layers; l++)
        if (r->layer_group[l] >= 0 &&
            (r->plan.groups[r->layer_group[l]].kind == PG_KV_MAMBA ||
             r->plan.groups[r->layer_group[l]].kind == PG_KV_CROSS_ATTENTION))
            return pg_error(PAGODA_ERR_UNSUPPORTED,
                            "runner: tensor parallelism with recurrent-state or cross-attention "
                            "layers");
    const size_t S = (size_t)r->cfg.max_num_seqs, G = (size_t)r->plan.num_groups;
    r->tp_tables = malloc((G ? G : 1) * S * sizeof *r->tp_tables);
    if (!r->tp_tables) return pg_error(PAGODA_ERR_NOMEM, "runner: out of memory");
    for (;;) {
        tp_hdr h;
        pagoda_status st = pg_comm_broadcast(r->cfg.comm, &h, sizeof h, 0);
        if (st != PAGODA_OK) return st;
        if (h.kind == TP_STOP) return PAGODA_OK;
        if (h.kind != TP_STEP || h.num_tokens < 1 || h.num_tokens > r->cfg.max_num_batched_tokens ||
            h.num_seqs < 1 || (size_t)h.num_seqs > S || h.num_logits < 0 ||
            h.num_groups != (int32_t)G || h.width < 1 || h.width > (1 << 24))
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "runner: malformed tensor-parallel step (%d tokens, %d requests, %d "
                            "groups)",
                            h.num_tokens, h.num_seqs, h.num_groups);
        const size_t n = tp_payload(&h), T = (size_t)h.num_tokens, Sq = (size_t)h.num_seqs;
        if ((st = tp_reserve(r, n)) || (st = tp_bcast(r->cfg.comm, r->tp_buf, n * 4))) return st;
        const int32_t *p = r->tp_buf;
        pg_batch b = {
            .num_tokens = h.num_tokens, .num_seqs = h.num_seqs, .num_logits = h.num_logits};
        b.token_ids = p, p += T;
        b.positions = p, p += T;
        b.query_start_loc = p, p += Sq + 1;
        b.seq_lens = p, p += Sq;
        b.logit_rows = p, p += h.num_logits;
        const int32_t *slots = p;
        for (size_t g = 0; g < G; g++) {
            p += T;
            for (size_t i = 0; i < Sq; i++, p += h.width)
                r->tp_tables[g * S + i] = p;
        }
        for (int32_t l = 0; l < r->num_layers; l++) {
            const int32_t g = r->layer_group[l];
            pg_layer_cache *lc = &r->lc[l];
            memset(lc, 0, sizeof *lc);
            if (g < 0) continue;
            lc->kv = &r->tensors[r->layer_slot[l]];
            lc->slot_mapping = slots + (size_t)g * (T + Sq * (size_t)h.width);
            lc->block_tables = r->tp_tables + (size_t)g * S;
        }
        b.layers = r->lc;
        if ((st = pg_model_forward(r->model, r->ws, &b, r->logits)) != PAGODA_OK) return st;
    }
}

static bool same_group(const pg_layer_cache_spec *a, const pg_kv_cache_spec *g) {
    switch (a->kind) {
    case PG_LAYER_CACHE_FULL:
        return g->kind == PG_KV_FULL_ATTENTION && g->num_kv_heads == a->num_kv_heads &&
               g->head_size == a->head_dim;
    case PG_LAYER_CACHE_SLIDING:
        return g->kind == PG_KV_SLIDING_WINDOW && g->num_kv_heads == a->num_kv_heads &&
               g->head_size == a->head_dim && g->u.sliding.window == a->window;
    case PG_LAYER_CACHE_STATE:
        return g->kind == PG_KV_MAMBA && g->u.mamba.state_bytes == a->state_bytes;
    case PG_LAYER_CACHE_CROSS:
        return g->kind == PG_KV_CROSS_ATTENTION && g->num_kv_heads == a->num_kv_heads &&
               g->head_size == a->head_dim && g->u.cross.max_encoder_len == a->encoder_len;
    default:
        return false;
    }
}

/* Group of every layer (layer_group[l], -1: none) and the plan. */
static pagoda_status plan_groups(const pg_model *m, pg_dtype kv_dtype, int32_t block_size,
                                 pg_kv_plan *p, int32_t *layer_group) {
    memset(p, 0, sizeof *p);
    const int32_t L = pg_model_num_layers(m);
    const int32_t dtype_bytes = kv_dtype == PG_F32 ? 4 : 2;
    for (int32_t l = 0; l < L; l++) {
        const pg_layer_cache_spec *s = pg_model_layer_cache(m, l);
        if (layer_group) layer_group[l] = -1;
        if (s->kind == PG_LAYER_CACHE_NONE) continue;
        int32_t g = 0;
        while (g < p->num_groups && !same_group(s, &p->groups[g]))
            g++;
        if (g == p->num_groups) {
            if (g == PG_KV_MAX_GROUPS)
                return pg_error(PAGODA_ERR_LIMIT, "runner: more than %d KV cache groups",
                                PG_KV_MAX_GROUPS);
            pg_kv_cache_spec *gs = &p->groups[p->num_groups++];
            memset(gs, 0, sizeof *gs);
            gs->block_size = block_size;
            gs->dtype_bytes = dtype_bytes;
            if (s->kind == PG_LAYER_CACHE_STATE) {
                gs->kind = PG_KV_MAMBA;
                gs->num_kv_heads = 1;
                gs->head_size = 1;
                gs->u.mamba.state_bytes = s->state_bytes;
            } else {
                gs->kind = s->kind == PG_LAYER_CACHE_SLIDING ? PG_KV_SLIDING_WINDOW
                           : s->kind == PG_LAYER_CACHE_CROSS ? PG_KV_CROSS_ATTENTION
                                                             : PG_KV_FULL_ATTENTION;
                gs->num_kv_heads = s->num_kv_heads;
                gs->head_size = s->head_dim;
                if (s->kind == PG_LAYER_CACHE_SLIDING) gs->u.sliding.window = s->window;
                if (s->kind == PG_LAYER_CACHE_CROSS) gs->u.cross.max_encoder_len = s->encoder_len;
                if (p->num_kv_heads == 0) {
                    p->num_kv_heads = s->num_kv_heads;
                    p->head_dim = s->head_dim;
                } else if (p->num_kv_heads != s->num_kv_heads || p->head_dim != s->head_dim) {
                    return pg_error(PAGODA_ERR_UNSUPPORTED,
                                    "runner: attention layers with different K/V shapes (%d x %d "
                                    "and %d x %d heads x dims) are not supported",
                                    p->num_kv_heads, p->head_dim, s->num_kv_heads, s->head_dim);
                }
            }
        }
        p->groups[g].num_layers++;
        if (layer_group) layer_group[l] = g;
        if (s->kind == PG_LAYER_CACHE_STATE) {
            p->state_bytes_per_seq += (uint64_t)s->state_bytes;
            if (s->state_align > p->state_align) p->state_align = s->state_align;
        } else if (p->groups[g].num_layers > p->num_tensors) {
            p->num_tensors = p->groups[g].num_layers;
        }
    }
    p->kv_bytes_per_token = 2ULL * (uint64_t)p->num_tensors * (uint64_t)p->num_kv_heads *
                            (uint64_t)p->head_dim * (uint64_t)dtype_bytes;
    return PAGODA_OK;
}

pagoda_status pg_runner_plan_kv(const pg_model *m, pg_dtype kv_dtype, int32_t block_size,
                                pg_kv_plan *plan) {
    return plan_groups(m, kv_dtype, block_size, plan, NULL);
}

pagoda_status pg_runner_create(const pg_model *model, const pg_runner_config *cfg,
                               pg_runner **out) {
    *out = NULL;
    const pg_model_config *c = pg_model_get_config(model);
    pg_runner *r = calloc(1, sizeof *r);
    if (!r) return pg_error(PAGODA_ERR_NOMEM, "runner: out of memory");
    r->model = model;
    r->cfg = *cfg;
    const int32_t L = r->num_layers = pg_model_num_layers(model);
    const size_t S = (size_t)cfg->max_num_seqs;
    pagoda_status st = PAGODA_OK;
    r->layer_group = malloc((size_t)L * sizeof(int32_t));
    r->layer_slot = malloc((size_t)L * sizeof(int32_t));
    r->lc = calloc((size_t)L, sizeof *r->lc);
    if (!r->layer_group || !r->layer_slot || !r->lc) goto nomem;
    if ((st = plan_groups(model, cfg->kv_dtype, cfg->block_size, &r->plan, r->layer_group)))
        goto fail;

    /* paged tensors shared by the attention groups */
    const pg_kv_plan *p = &r->plan;
    if (p->num_tensors > 0) {
        size_t half = pg_paged_kv_bytes(cfg->kv_dtype, cfg->num_blocks, p->num_kv_heads,
                                        cfg->block_size, p->head_dim);
        if (half == 0) {
            st = pg_error(PAGODA_ERR_INVALID_ARG, "runner: bad KV cache shape");
            goto fail;
        }
        r->tensors = calloc((size_t)p->num_tensors, sizeof *r->tensors);
        if (!r->tensors) goto nomem;
        r->kv_mem_bytes = half * 2 * (size_t)p->num_tensors;
        r->kv_mem = pg_alloc_huge(r->kv_mem_bytes);
        if (!r->kv_mem) {
            st = pg_error(PAGODA_ERR_NOMEM, "runner: cannot allocate %zu bytes of KV cache",
                          r->kv_mem_bytes);
            goto fail;
        }
        for (int32_t t = 0; t < p->num_tensors; t++) {
            uint8_t *base = (uint8_t *)r->kv_mem + (size_t)t * 2 * half;
            r->tensors[t] = (pg_paged_kv){.k = base,
                                          .v = base + half,
                                          .dtype = cfg->kv_dtype,
                                          .num_blocks = cfg->num_blocks,
                                          .num_kv_heads = p->num_kv_heads,
                                          .block_size = cfg->block_size,
                                          .head_dim = p->head_dim};
        }
        if ((st = pg_paged_kv_check(&r->tensors[0])) != PAGODA_OK) goto fail;
    }

    /* layer -> tensor / state layer; state slots */
    int32_t per_group[PG_KV_MAX_GROUPS] = {0};
    for (int32_t l = 0; l < L; l++) {
        int32_t g = r->layer_group[l];
        r->layer_slot[l] = -1;
        if (g < 0) continue;
        if (p->groups[g].kind == PG_KV_MAMBA) {
            r->layer_slot[l] = r->num_state_layers++;
            r->state_mem_bytes += S * (size_t)p->groups[g].u.mamba.state_bytes;
        } else {
            r->layer_slot[l] = per_group[g]++;
        }
    }
    if (r->num_state_layers) {
        r->state_mem = pg_alloc_huge(r->state_mem_bytes);
        r->state_base = calloc((size_t)r->num_state_layers, sizeof *r->state_base);
        r->state_bytes = calloc((size_t)r->num_state_layers, sizeof *r->state_bytes);
        r->state_ptrs = calloc((size_t)r->num_state_layers * S, sizeof *r->state_ptrs);
        if (!r->state_mem || !r->state_base || !r->state_bytes || !r->state_ptrs) goto nomem;
        r->snap_off = calloc((size_t)r->num_state_layers, sizeof *r->snap_off);
        if (!r->snap_off) goto nomem;
        size_t off = 0;
        for (int32_t l = 0; l < L; l++) {
            int32_t g = r->layer_group[l];
            if (g < 0 || p->groups[g].kind != PG_KV_MAMBA) continue;
            int32_t i = r->layer_slot[l];
            r->state_base[i] = r->state_mem + off;
            r->state_bytes[i] = p->groups[g].u.mamba.state_bytes;
            off += S * (size_t)r->state_bytes[i];
            r->snap_off[i] = r->snap_entry_bytes;
            r->snap_entry_bytes += (size_t)r->state_bytes[i];
        }
        if (cfg->max_num_spec_rows > 0) {
            r->row_mem_bytes = (size_t)cfg->max_num_spec_rows * r->snap_entry_bytes;
            r->row_mem = pg_alloc_huge(r->row_mem_bytes);
            r->row_ptrs = calloc((size_t)r->num_state_layers * S, sizeof *r->row_ptrs);
            r->row_n = calloc(S, sizeof *r->row_n);
            r->row_off = calloc(S, sizeof *r->row_off);
            r->row_slot = calloc(S, sizeof *r->row_slot);
            if (!r->row_mem || !r->row_ptrs || !r->row_n || !r->row_off || !r->row_slot) {
                st = pg_error(PAGODA_ERR_NOMEM,
                              "runner: cannot allocate %zu bytes of draft-row state snapshots "
                              "(%d x %zu)",
                              r->row_mem_bytes, cfg->max_num_spec_rows, r->snap_entry_bytes);
                goto fail;
            }
        }
        if (cfg->num_state_snapshots > 0) {
            r->snap_mem_bytes = (size_t)cfg->num_state_snapshots * r->snap_entry_bytes;
            r->snap_mem = pg_alloc_huge(r->snap_mem_bytes);
            r->snap_ptrs = calloc((size_t)r->num_state_layers * S, sizeof *r->snap_ptrs);
            r->snap_len = calloc(S, sizeof *r->snap_len);
            if (!r->snap_mem || !r->snap_ptrs || !r->snap_len) {
                st = pg_error(PAGODA_ERR_NOMEM,
                              "runner: cannot allocate %zu bytes of state snapshots (%d x %zu)",
                              r->snap_mem_bytes, cfg->num_state_snapshots, r->snap_entry_bytes);
                goto fail;
            }
        }
    }

    /* encoder state slots; the CROSS layers' tensors in layer order */
    if (pg_model_encoder_steps(model) > 0) {
        int32_t nc = 0;
        for (int32_t l = 0; l < L; l++)
            nc += r->layer_group[l] >= 0 && p->groups[r->layer_group[l]].kind == PG_KV_CROSS_ATTENTION;
        if (nc == 0 || cfg->max_num_encoding < 1) {
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          "runner: an encoder-decoder model needs cross-attention layers (%d) and "
                          "encoder slots (%d)",
                          nc, cfg->max_num_encoding);
            goto fail;
        }
        r->cross_kv = calloc((size_t)nc, sizeof *r->cross_kv);
        if (!r->cross_kv) goto nomem;
        for (int32_t l = 0, ci = 0; l < L; l++)
            if (r->layer_group[l] >= 0 && p->groups[r->layer_group[l]].kind == PG_KV_CROSS_ATTENTION)
                r->cross_kv[ci++] = &r->tensors[r->layer_slot[l]];
        r->enc_state_bytes = (pg_model_encoder_state_bytes(model) + 63) / 64 * 64;
        r->enc_mem_bytes = (size_t)cfg->max_num_encoding * r->enc_state_bytes;
        r->enc_mem = pg_alloc_huge(r->enc_mem_bytes);
        if (!r->enc_mem) {
            st = pg_error(PAGODA_ERR_NOMEM, "runner: cannot allocate %zu bytes of encoder states",
                          r->enc_mem_bytes);
            goto fail;
        }
    }

    const size_t rows =
        S + PG_SCHED_MAX_PROBES + (size_t)(cfg->max_num_spec_rows > 0 ? cfg->max_num_spec_rows : 0);
    pg_step_limits lim = {.max_tokens = cfg->max_num_batched_tokens,
                          .max_seqs = (int32_t)rows, /* logit rows */
                          .max_model_len = cfg->max_model_len,
                          .kv_dtype = cfg->kv_dtype,
                          .block_size = cfg->block_size};
    if ((st = pg_model_workspace_create(model, &lim, &r->ws)) != PAGODA_OK) goto fail;
    r->logits = pg_malloc_aligned(rows * (size_t)c->vocab_size * 4);
    r->logit_rows = malloc(rows * sizeof(int32_t));
    if (!r->logits || !r->logit_rows) goto nomem;
    *out = r;
    return PAGODA_OK;
nomem:
    st = pg_error(PAGODA_ERR_NOMEM, "runner: out of memory");
fail:
    pg_runner_free(r);
    return st;
}

void pg_runner_free(pg_runner *r) {
    if (!r) return;
    if (tp_on(r) && pg_comm_rank(r->cfg.comm) == 0 && !r->tp_failed) {
        tp_hdr h = {.kind = TP_STOP};
        if (pg_comm_broadcast(r->cfg.comm, &h, sizeof h, 0) != PAGODA_OK)
            PG_WARN("runner: stopping the tensor-parallel ranks: %s", pg_last_error());
    }
    free(r->tp_buf);
    free(r->tp_tables);
    if (r->kv_mem) pg_free_huge(r->kv_mem, r->kv_mem_bytes);
    if (r->state_mem) pg_free_huge(r->state_mem, r->state_mem_bytes);
    if (r->snap_mem) pg_free_huge(r->snap_mem, r->snap_mem_bytes);
    if (r->row_mem) pg_free_huge(r->row_mem, r->row_mem_bytes);
    free(r->row_ptrs);
    free(r->row_n);
    free(r->row_off);
    free(r->row_slot);
    if (r->enc_mem) pg_free_huge(r->enc_mem, r->enc_mem_bytes);
    free(r->cross_kv);
    free(r->snap_off);
    free(r->snap_ptrs);
    free(r->snap_len);
    free(r->tensors);
    free(r->state_base);
    free(r->state_bytes);
    free(r->state_ptrs);
    free(r->layer_group);
    free(r->layer_slot);
    free(r->lc);
    pg_model_workspace_free(r->ws);
    pg_free(r->logits);
    free(r->logit_rows);
    free(r);
}

size_t pg_runner_kv_bytes(const pg_runner *r) {
    return r->kv_mem_bytes + r->state_mem_bytes + r->snap_mem_bytes + r->row_mem_bytes +
           r->enc_mem_bytes;
}
size_t pg_runner_workspace_bytes(const pg_runner *r) {
    return pg_model_workspace_bytes(r->ws);
}
const pg_kv_plan *pg_runner_plan(const pg_runner *r) {
    return &r->plan;
}

/* The step's encoder pieces, then each finished encoder's cross K/V. */
static pagoda_status run_encoders(pg_runner *r, const pg_sched_output *so,
                                  const float *const *enc_inputs) {
    for (int32_t j = 0; j < so->num_enc; j++) {
        if (!r->enc_mem || so->enc_slots[j] < 0 || so->enc_slots[j] >= r->cfg.max_num_encoding)
            return pg_error(PAGODA_ERR_INVALID_ARG, "runner: encoder job on slot %d of %d",
                            so->enc_slots[j], r->enc_mem ? r->cfg.max_num_encoding : 0);
        void *state = r->enc_mem + (size_t)so->enc_slots[j] * r->enc_state_bytes;
        const float *in = enc_inputs ? enc_inputs[j] : NULL;
        for (int32_t k = 0; k < so->enc_num_steps[j]; k++) {
            pagoda_status st =
                pg_model_encode_step(r->model, r->ws, so->enc_step_begin[j] + k, in, state);
            if (st) return st;
        }
        if (so->enc_finishes[j]) {
            pagoda_status st =
                pg_model_encoder_kv(r->model, r->ws, state, so->enc_cross_tables[j], r->cross_kv);
            if (st) return st;
        }
    }
    return PAGODA_OK;
}

pagoda_status pg_runner_execute(pg_runner *r, const pg_sched_output *so,
                                const float *const *enc_inputs, float **logits_out,
                                int32_t *row_of, int32_t *probe_of) {
    if (so->num_groups != r->plan.num_groups)
        return pg_error(PAGODA_ERR_INVALID_ARG, "runner: step has %d KV cache groups, plan %d",
                        so->num_groups, r->plan.num_groups);
    *logits_out = r->logits;
    pagoda_status est = run_encoders(r, so, enc_inputs);
    if (est) return est;
    if (so->num_reqs == 0) return PAGODA_OK;
    int32_t n_logits = 0;
    if (so->num_spec_total > (r->cfg.max_num_spec_rows > 0 ? r->cfg.max_num_spec_rows : 0))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "runner: %d draft tokens in a step, room for %d logits rows of drafts",
                        so->num_spec_total, r->cfg.max_num_spec_rows);
    for (int32_t i = 0; i < so->num_reqs; i++) {
        row_of[i] = -1;
        if (so->samples[i]) {
            const int32_t D = so->num_spec_tokens ? so->num_spec_tokens[i] : 0;
            row_of[i] = n_logits;
            for (int32_t j = D; j >= 0; j--)
                r->logit_rows[n_logits++] = so->query_start_loc[i + 1] - 1 - j;
        }
    }
    for (int32_t i = 0, np = 0; i < so->num_reqs; i++) { /* probes after the sampling rows */
        if (probe_of) probe_of[i] = -1;
        if (!so->probe_rows || so->probe_rows[i] < 0) continue;
        if (++np > PG_SCHED_MAX_PROBES)
            return pg_error(PAGODA_ERR_INVALID_ARG, "runner: more than %d probe rows in a step",
                            PG_SCHED_MAX_PROBES);
        if (probe_of) probe_of[i] = n_logits;
        r->logit_rows[n_logits++] = so->probe_rows[i];
    }
    /* state slots of this step's requests; fresh requests start from zero,
     * a prefix hit from its snapshot; snapshots to write */
    bool any_snap = false;
    for (int32_t i = 0; i < so->num_reqs; i++) {
        const int32_t rs = so->state_restore ? so->state_restore[i] : -1;
        const int32_t sn = so->state_snap ? so->state_snap[i] : -1;
        if ((rs >= 0 || sn >= 0) && !r->snap_mem)
            return pg_error(PAGODA_ERR_INVALID_ARG, "runner: state snapshot without snapshot memory");
        if (r->snap_len) r->snap_len[i] = sn >= 0 ? so->state_snap_len[i] : 0;
        any_snap |= sn >= 0;
        for (int32_t s = 0; s < r->num_state_layers; s++) {
            void **ptrs = r->state_ptrs + (size_t)s * (size_t)r->cfg.max_num_seqs;
            ptrs[i] = r->state_base[s] + (size_t)so->kv_slots[i] * (size_t)r->state_bytes[s];
            if (rs >= 0)
                memcpy(ptrs[i], r->snap_mem + (size_t)rs * r->snap_entry_bytes + r->snap_off[s],
                       (size_t)r->state_bytes[s]);
            else if (so->num_computed_tokens[i] == 0)
                memset(ptrs[i], 0, (size_t)r->state_bytes[s]);
            if (r->snap_ptrs)
                r->snap_ptrs[(size_t)s * (size_t)r->cfg.max_num_seqs + (size_t)i] =
                    sn >= 0 ? r->snap_mem + (size_t)sn * r->snap_entry_bytes + r->snap_off[s]
                            : NULL;
        }
    }
    /* draft rows of recurrent-state layers: a state after each (the
     * verification's rollback, pg_runner_spec_keep) */
    r->row_reqs = 0;
    if (r->row_mem) {
        const int32_t S = r->cfg.max_num_seqs;
        int32_t off = 0;
        for (int32_t i = 0; i < so->num_reqs; i++) {
            const int32_t D = so->num_spec_tokens ? so->num_spec_tokens[i] : 0;
            r->row_n[i] = D;
            r->row_off[i] = off;
            r->row_slot[i] = so->kv_slots[i];
            for (int32_t s = 0; s < r->num_state_layers; s++)
                r->row_ptrs[(size_t)s * (size_t)S + (size_t)i] =
                    D > 0 ? r->row_mem + (size_t)r->cfg.max_num_spec_rows * r->snap_off[s] +
                                (size_t)off * (size_t)r->state_bytes[s]
                          : NULL;
            off += D;
        }
        r->row_reqs = so->num_reqs;
    }
    for (int32_t l = 0; l < r->num_layers; l++) {
        int32_t g = r->layer_group[l];
        pg_layer_cache *lc = &r->lc[l];
        memset(lc, 0, sizeof *lc);
        if (g < 0) continue;
        if (r->plan.groups[g].kind == PG_KV_MAMBA) {
            lc->states = r->state_ptrs + (size_t)r->layer_slot[l] * (size_t)r->cfg.max_num_seqs;
            if (r->row_mem) {
                lc->row_snaps = r->row_n;
                lc->row_snap_states =
                    r->row_ptrs + (size_t)r->layer_slot[l] * (size_t)r->cfg.max_num_seqs;
            }
            if (any_snap) {
                lc->snap_len = r->snap_len;
                lc->snap_states =
                    r->snap_ptrs + (size_t)r->layer_slot[l] * (size_t)r->cfg.max_num_seqs;
            }
        } else {
            lc->kv = &r->tensors[r->layer_slot[l]];
            lc->slot_mapping = so->slot_mapping + (size_t)g * (size_t)so->token_stride;
            lc->block_tables = so->block_tables + (size_t)g * (size_t)so->req_stride;
        }
    }
    pg_batch b = {.num_tokens = so->num_tokens,
                  .num_seqs = so->num_reqs,
                  .token_ids = so->token_ids,
                  .positions = so->positions,
                  .query_start_loc = so->query_start_loc,
                  .seq_lens = so->seq_lens,
                  .logit_rows = r->logit_rows,
                  .num_logits = n_logits,
                  .layers = r->lc,
                  .hidden_in = r->hidden_in,
                  .hidden_out = r->hidden_out};
    *logits_out = r->logits;
    if (tp_on(r)) {
        if (r->hidden_in || r->hidden_out)
            return pg_error(PAGODA_ERR_UNSUPPORTED,
                            "runner: tensor parallelism with hidden-state inputs / outputs");
        if (so->num_enc > 0 || r->num_state_layers > 0)
            return pg_error(PAGODA_ERR_UNSUPPORTED,
                            "runner: tensor parallelism with encoder or recurrent-state layers");
        pagoda_status st = tp_send(r, so, &b);
        if (st == PAGODA_OK) st = pg_model_forward(r->model, r->ws, &b, r->logits);
        if (st == PAGODA_ERR_IO) r->tp_failed = true;
        return st;
    }
    return pg_model_forward(r->model, r->ws, &b, r->logits);
}

pagoda_status pg_runner_spec_keep(pg_runner *r, int32_t i, int32_t kept) {
    if (!r->row_mem || i < 0 || i >= r->row_reqs || r->row_n[i] == 0) return PAGODA_OK;
    if (kept < 1 || kept > r->row_n[i] + 1)
        return pg_error(PAGODA_ERR_INVALID_ARG, "runner: request %d keeps %d of %d rows", i, kept,
                        r->row_n[i] + 1);
    if (kept == r->row_n[i] + 1) return PAGODA_OK; /* every draft accepted: the live state */
    for (int32_t s = 0; s < r->num_state_layers; s++) {
        const size_t sb = (size_t)r->state_bytes[s];
        const uint8_t *src = r->row_mem + (size_t)r->cfg.max_num_spec_rows * r->snap_off[s] +
                             (size_t)(r->row_off[i] + kept - 1) * sb;
        memcpy(r->state_base[s] + (size_t)r->row_slot[i] * sb, src, sb);
    }
    return PAGODA_OK;
}

void pg_runner_set_hidden(pg_runner *r, const float *in, float *out) {
    r->hidden_in = in;
    r->hidden_out = out;
}
