/* Scheduler: continuous batching, chunked prefill, preemption by recompute.
 * See scheduler.h for the policy. */
#include "engine/scheduler.h"
#include "engine/ngram.h"
#include "engine/state_cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"

typedef struct id_entry {
    uint64_t id;
    pg_request *req; /* NULL: empty */
} id_entry;

struct pg_scheduler {
    int32_t max_tokens; /* max_num_batched_tokens */
    int32_t max_seqs;
    int32_t max_model_len;
    int32_t block_size;
    pg_block_hash_algo hash_algo;
    bool caching; /* prefix caching: requests get block hashes */
    int32_t num_groups;
    pg_kvm *kvm;

    /* live requests by id: open addressing, linear probing */
    id_entry *ids;
    uint32_t ids_mask;
    int32_t num_live;

    /* waiting queue: ring buffer (FCFS; preempted requests pushed at the front) */
    pg_request **wq;
    int32_t wq_cap, wq_head, wq_len;

    /* running, in admission order */
    pg_request **running;
    int32_t num_running;

    /* step state */
    int64_t step;
    bool in_flight;
    uint64_t num_preemptions;
    pg_request **sched_reqs; /* [max_seqs] requests of the output, in batch order */
    int32_t budget;
    int32_t prefill_align; /* pg_sched_config.prefill_align */
    /* encoder-decoder models */
    int32_t enc_cost;       /* encoder budget tokens per piece */
    int32_t enc_budget_max; /* max_num_encoder_tokens */
    int32_t enc_budget;     /* left in this step */
    int32_t max_encoding;   /* encoder state slots */
    int32_t *enc_free;      /* stack of free encoder slots */
    int32_t num_enc_free;
    int32_t cross_group;   /* -1: none */
    pg_request **enc_reqs; /* [max_encoding] requests of this step's encoder jobs */
    uint64_t *o_enc_ids;
    int32_t *o_enc_slots, *o_enc_begin, *o_enc_num;
    uint8_t *o_enc_fin;
    const int32_t **o_enc_tables;

    /* output buffers */
    pg_sched_output out;
    uint64_t *o_req_ids;
    int32_t *o_num_sched, *o_num_computed, *o_qsl, *o_seq_lens, *o_kv_slots;
    uint8_t *o_is_new, *o_samples;
    int32_t *o_restore, *o_snap, *o_snap_len; /* state snapshots, per scheduled request */
    int32_t *o_probe;                         /* probe row per scheduled request, -1: none */
    int32_t probes_left;                      /* in this step */
    pg_block_hash *snap_hash;                 /* the hash each snapshot is published under */
    uint8_t *snap_decode;                     /* taken at a decode step */
    const int32_t **o_tables;
    int32_t *o_num_blocks, *o_num_new_blocks;
    int32_t *o_tokens, *o_positions, *o_slots;
    uint64_t *o_preempted;
    uint64_t *fin[2]; /* finished ids: one reported in `out`, one accumulating */
    int32_t fin_cur, num_fin;
    pg_step_event *events;
    int32_t *ev_tokens; /* [max_seqs][PG_MAX_SPEC_TOKENS + 1] the events' token lists */

    /* speculative decoding */
    pg_spec_config spec; /* num_speculative_tokens 0: off */
    int32_t spec_left;   /* draft tokens this step may still schedule */
    int32_t *o_num_spec, *o_spec_ids;
    pg_spec_stats spec_stats;
    pg_request **spec_cand; /* [max_seqs]: the prepare hook's requests */
    int32_t *spec_cand_k;   /* [max_seqs]: and their draft caps */
};

/* ---- id map ---- */

static inline uint32_t id_home(uint64_t id, uint32_t mask) {
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdULL;
    id ^= id >> 33;
    return (uint32_t)id & mask;
}

static pg_request *id_find(const pg_scheduler *s, uint64_t id) {
    for (uint32_t i = id_home(id, s->ids_mask);; i = (i + 1) & s->ids_mask) {
        if (!s->ids[i].req) return NULL;
        if (s->ids[i].id == id) return s->ids[i].req;
    }
}

static void id_insert_raw(id_entry *tab, uint32_t mask, uint64_t id, pg_request *r) {
    uint32_t i = id_home(id, mask);
    while (tab[i].req)
        i = (i + 1) & mask;
    tab[i] = (id_entry){id, r};
}

static pagoda_status id_insert(pg_scheduler *s, uint64_t id, pg_request *r) {
    uint32_t cap = s->ids_mask + 1;
    if ((uint32_t)(s->num_live + 1) * 2 > cap) { /* keep load <= 1/2 */
        uint32_t ncap = cap * 2;
        id_entry *nt = calloc(ncap, sizeof *nt);
        if (!nt) return pg_error(PAGODA_ERR_NOMEM, "scheduler: out of memory for the request map");
        for (uint32_t i = 0; i < cap; i++)
            if (s->ids[i].req) id_insert_raw(nt, ncap - 1, s->ids[i].id, s->ids[i].req);
        free(s->ids);
        s->ids = nt;
        s->ids_mask = ncap - 1;
    }
    id_insert_raw(s->ids, s->ids_mask, id, r);
    s->num_live++;
    return PAGODA_OK;
}

static void id_erase(pg_scheduler *s, uint64_t id) {
    uint32_t mask = s->ids_mask, i = id_home(id, mask);
    while (s->ids[i].req && s->ids[i].id != id)
        i = (i + 1) & mask;
    if (!s->ids[i].req) return;
    s->ids[i].req = NULL;
    s->num_live--;
    for (uint32_t j = (i + 1) & mask; s->ids[j].req; j = (j + 1) & mask) {
        uint32_t k = id_home(s->ids[j].id, mask);
        bool k_in = (i <= j) ? (k > i && k <= j) : (k > i || k <= j);
        if (!k_in) {
            s->ids[i] = s->ids[j];
            s->ids[j].req = NULL;
            i = j;
        }
    }
}

/* ---- waiting queue ---- */

static pagoda_status wq_reserve(pg_scheduler *s, int32_t need) {
    if (need <= s->wq_cap) return PAGODA_OK;
    int32_t ncap = s->wq_cap ? s->wq_cap : 16;
    while (ncap < need)
        ncap *= 2;
    pg_request **nq = malloc((size_t)ncap * sizeof *nq);
    if (!nq) return pg_error(PAGODA_ERR_NOMEM, "scheduler: out of memory for the waiting queue");
    for (int32_t i = 0; i < s->wq_len && s->wq_cap > 0; i++)
        nq[i] = s->wq[(s->wq_head + i) % s->wq_cap];
    free(s->wq);
    s->wq = nq;
    s->wq_cap = ncap;
    s->wq_head = 0;
    return PAGODA_OK;
}

static inline pg_request *wq_at(const pg_scheduler *s, int32_t i) {
    return s->wq[(s->wq_head + i) % s->wq_cap];
}

static void wq_push_back(pg_scheduler *s, pg_request *r) {
    s->wq[(s->wq_head + s->wq_len) % s->wq_cap] = r;
    s->wq_len++;
}

static void wq_push_front(pg_scheduler *s, pg_request *r) {
    s->wq_head = (s->wq_head + s->wq_cap - 1) % s->wq_cap;
    s->wq[s->wq_head] = r;
    s->wq_len++;
}

static void wq_pop_front(pg_scheduler *s) {
    s->wq_head = (s->wq_head + 1) % s->wq_cap;
    s->wq_len--;
}

static bool wq_remove(pg_scheduler *s, const pg_request *r) {
    for (int32_t i = 0; i < s->wq_len; i++)
        if (wq_at(s, i) == r) {
            for (int32_t j = i; j + 1 < s->wq_len; j++)
                s->wq[(s->wq_head + j) % s->wq_cap] = wq_at(s, j + 1);
            s->wq_len--;
            return true;
        }
    return false;
}

/* ---- running list ---- */

static void running_remove_at(pg_scheduler *s, int32_t i) {
    memmove(s->running + i, s->running + i + 1,
            (size_t)(s->num_running - i - 1) * sizeof *s->running);
    s->num_running--;
}

static int32_t running_index(const pg_scheduler *s, const pg_request *r) {
    for (int32_t i = 0; i < s->num_running; i++)
        if (s->running[i] == r) return i;
    return -1;
}

/* ---- create / destroy ---- */

void pg_sched_config_default(pg_sched_config *c) {
    memset(c, 0, sizeof *c);
    c->max_num_batched_tokens = 2048;
    c->max_num_seqs = 128;
    c->max_model_len = 4096;
    c->kv.block_size = PG_KV_DEFAULT_BLOCK_SIZE;
    c->kv.enable_prefix_caching = true;
    c->kv.num_groups = 0;
}

pagoda_status pg_scheduler_create(const pg_sched_config *cfg, pg_scheduler **out) {
    *out = NULL;
    if (!cfg) return pg_error(PAGODA_ERR_INVALID_ARG, "scheduler: NULL config");
    if (cfg->max_num_batched_tokens < 1 || cfg->max_num_seqs < 1 || cfg->max_model_len < 2)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "scheduler: max_num_batched_tokens %d, max_num_seqs %d, max_model_len %d "
                        "(need >= 1, >= 1, >= 2)",
                        cfg->max_num_batched_tokens, cfg->max_num_seqs, cfg->max_model_len);
    if (cfg->max_num_batched_tokens < cfg->max_num_seqs)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "scheduler: max_num_batched_tokens %d < max_num_seqs %d (every running "
                        "request needs a decode token per step)",
                        cfg->max_num_batched_tokens, cfg->max_num_seqs);
    const pg_spec_config *sp = &cfg->spec;
    if (sp->num_speculative_tokens < 0 || sp->num_speculative_tokens > PG_MAX_SPEC_TOKENS ||
        (sp->num_speculative_tokens > 0 && !sp->propose &&
         (sp->prompt_lookup_min < 1 || sp->prompt_lookup_max < sp->prompt_lookup_min)) ||
        sp->max_batch_tokens < 0 || sp->disable_by_batch_size < 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "scheduler: speculative decoding: num_speculative_tokens %d (0..%d), "
                        "prompt_lookup_min %d (>= 1), prompt_lookup_max %d (>= min), "
                        "max_batch_tokens %d, disable_by_batch_size %d (>= 0)",
                        sp->num_speculative_tokens, PG_MAX_SPEC_TOKENS, sp->prompt_lookup_min,
                        sp->prompt_lookup_max, sp->max_batch_tokens, sp->disable_by_batch_size);
    pg_scheduler *s = calloc(1, sizeof *s);
    if (!s) return pg_error(PAGODA_ERR_NOMEM, "scheduler: out of memory");
    s->spec = *sp;
    pg_kvm_config kc = cfg->kv;
    kc.max_model_len = cfg->max_model_len;
    kc.max_num_seqs = cfg->max_num_seqs;
    pagoda_status st = pg_kvm_create(&kc, &s->kvm);
    if (st) {
        free(s);
        return st;
    }
    s->max_tokens = cfg->max_num_batched_tokens;
    s->prefill_align = cfg->prefill_align;
    s->max_seqs = cfg->max_num_seqs;
    s->max_model_len = cfg->max_model_len;
    s->block_size = kc.block_size;
    s->hash_algo = kc.hash_algo;
    s->caching = kc.enable_prefix_caching;
    s->num_groups = pg_kvm_num_groups(s->kvm);
    s->cross_group = -1;
    for (int32_t g = 0; g < s->num_groups; g++) {
        const pg_kv_cache_kind kind = pg_kvm_group_spec(s->kvm, g)->kind;
        if (kind == PG_KV_CROSS_ATTENTION) s->cross_group = g;
        if ((kind == PG_KV_CROSS_ATTENTION ||
             (kind == PG_KV_MAMBA && !s->spec.states_roll_back)) &&
            s->spec.num_speculative_tokens > 0) {
            PG_WARN("scheduler: speculative decoding is off: the model has a %s KV cache group, "
                    "whose state cannot be rolled back past rejected draft tokens",
                    kind == PG_KV_MAMBA ? "recurrent-state" : "cross-attention");
            s->spec.num_speculative_tokens = 0;
        }
    }
    s->enc_cost = cfg->encoder_step_tokens > 0 ? cfg->encoder_step_tokens : 1;
    s->enc_budget_max = cfg->max_num_encoder_tokens > 0 ? cfg->max_num_encoder_tokens
                                                        : cfg->max_num_batched_tokens;
    s->max_encoding = s->cross_group >= 0 && cfg->max_num_encoding > 0 ? cfg->max_num_encoding : 0;
    size_t S = (size_t)s->max_seqs, T = (size_t)s->max_tokens, G = (size_t)s->num_groups;
    s->ids = calloc(64, sizeof *s->ids);
    s->ids_mask = 63;
    s->running = malloc(S * sizeof *s->running);
    s->sched_reqs = malloc(S * sizeof *s->sched_reqs);
    s->o_req_ids = malloc(S * sizeof *s->o_req_ids);
    s->o_num_sched = malloc(S * sizeof(int32_t));
    s->o_num_computed = malloc(S * sizeof(int32_t));
    s->o_qsl = malloc((S + 1) * sizeof(int32_t));
    s->o_seq_lens = malloc(S * sizeof(int32_t));
    s->o_kv_slots = malloc(S * sizeof(int32_t));
    s->o_is_new = malloc(S);
    s->o_samples = malloc(S);
    s->o_restore = malloc(S * sizeof(int32_t));
    s->o_snap = malloc(S * sizeof(int32_t));
    s->o_snap_len = malloc(S * sizeof(int32_t));
    s->o_probe = malloc(S * sizeof(int32_t));
    s->snap_hash = malloc(S * sizeof *s->snap_hash);
    s->snap_decode = malloc(S);
    s->o_tables = calloc(G * S, sizeof *s->o_tables);
    s->o_num_blocks = calloc(G * S, sizeof(int32_t));
    s->o_num_new_blocks = calloc(G * S, sizeof(int32_t));
    s->o_tokens = malloc(T * sizeof(int32_t));
    s->o_positions = malloc(T * sizeof(int32_t));
    s->o_slots = malloc(G * T * sizeof(int32_t));
    s->o_preempted = malloc(S * sizeof(uint64_t));
    s->fin[0] = malloc(S * sizeof(uint64_t));
    s->fin[1] = malloc(S * sizeof(uint64_t));
    s->events = malloc(S * sizeof *s->events);
    s->ev_tokens = malloc(S * (PG_MAX_SPEC_TOKENS + 1) * sizeof(int32_t));
    s->o_num_spec = calloc(S, sizeof(int32_t));
    s->o_spec_ids = calloc(S * PG_MAX_SPEC_TOKENS, sizeof(int32_t));
    s->spec_cand = calloc(S, sizeof *s->spec_cand);
    s->spec_cand_k = calloc(S, sizeof(int32_t));
    size_t E = (size_t)(s->max_encoding > 0 ? s->max_encoding : 1);
    s->enc_free = malloc(E * sizeof(int32_t));
    s->enc_reqs = malloc(E * sizeof *s->enc_reqs);
    s->o_enc_ids = malloc(E * sizeof(uint64_t));
    s->o_enc_slots = malloc(E * sizeof(int32_t));
    s->o_enc_begin = malloc(E * sizeof(int32_t));
    s->o_enc_num = malloc(E * sizeof(int32_t));
    s->o_enc_fin = malloc(E);
    s->o_enc_tables = malloc(E * sizeof *s->o_enc_tables);
    if (!s->enc_free || !s->enc_reqs || !s->o_enc_ids || !s->o_enc_slots || !s->o_enc_begin ||
        !s->o_enc_num || !s->o_enc_fin || !s->o_enc_tables) {
        pg_scheduler_destroy(s);
        return pg_error(PAGODA_ERR_NOMEM, "scheduler: out of memory for step buffers");
    }
    for (int32_t i = 0; i < s->max_encoding; i++)
        s->enc_free[i] = s->max_encoding - 1 - i;
    s->num_enc_free = s->max_encoding;
    if (!s->ids || !s->running || !s->sched_reqs || !s->o_req_ids || !s->o_num_sched ||
        !s->o_num_computed || !s->o_qsl || !s->o_seq_lens || !s->o_kv_slots || !s->o_is_new ||
        !s->o_samples || !s->o_restore || !s->o_snap || !s->o_snap_len || !s->o_probe ||
        !s->snap_hash || !s->snap_decode || !s->o_tables || !s->o_num_blocks ||
        !s->o_num_new_blocks || !s->o_tokens || !s->o_positions || !s->o_slots || !s->o_preempted ||
        !s->fin[0] || !s->fin[1] || !s->events || !s->ev_tokens || !s->o_num_spec ||
        !s->o_spec_ids || !s->spec_cand || !s->spec_cand_k || wq_reserve(s, 64) != PAGODA_OK) {
        pg_scheduler_destroy(s);
        return pg_error(PAGODA_ERR_NOMEM, "scheduler: out of memory for step buffers");
    }
    int64_t cap_tokens = (int64_t)pg_kvm_num_usable_blocks(s->kvm) * s->block_size / s->num_groups;
    if (pg_kvm_blocks_for_tokens(s->kvm, s->max_model_len) > pg_kvm_num_usable_blocks(s->kvm))
        PG_WARN("scheduler: max_model_len %d exceeds the KV cache (%d blocks of %d tokens, about "
                "%lld tokens); longer requests will be rejected (max_tokens null is capped to fit)",
                s->max_model_len, pg_kvm_num_usable_blocks(s->kvm), s->block_size,
                (long long)cap_tokens);
    pg_sched_output *o = &s->out;
    o->num_groups = s->num_groups;
    o->block_size = s->block_size;
    o->req_stride = s->max_seqs;
    o->token_stride = s->max_tokens;
    o->req_ids = s->o_req_ids;
    o->num_scheduled_tokens = s->o_num_sched;
    o->num_computed_tokens = s->o_num_computed;
    o->query_start_loc = s->o_qsl;
    o->seq_lens = s->o_seq_lens;
    o->kv_slots = s->o_kv_slots;
    o->is_new = s->o_is_new;
    o->samples = s->o_samples;
    o->num_spec_tokens = s->o_num_spec;
    o->spec_token_ids = s->o_spec_ids;
    o->state_restore = s->o_restore;
    o->state_snap = s->o_snap;
    o->state_snap_len = s->o_snap_len;
    o->probe_rows = s->o_probe;
    o->block_tables = s->o_tables;
    o->num_blocks = s->o_num_blocks;
    o->num_new_blocks = s->o_num_new_blocks;
    o->token_ids = s->o_tokens;
    o->positions = s->o_positions;
    o->slot_mapping = s->o_slots;
    o->preempted_ids = s->o_preempted;
    o->enc_req_ids = s->o_enc_ids;
    o->enc_slots = s->o_enc_slots;
    o->enc_step_begin = s->o_enc_begin;
    o->enc_num_steps = s->o_enc_num;
    o->enc_finishes = s->o_enc_fin;
    o->enc_cross_tables = s->o_enc_tables;
    o->enc_cross_group = s->cross_group;
    o->finished_ids = s->fin[1];
    o->step = -1;
    *out = s;
    return PAGODA_OK;
}

void pg_scheduler_destroy(pg_scheduler *s) {
    if (!s) return;
    pg_kvm_destroy(s->kvm); /* the requests are their creators' */
    free(s->ids);
    free(s->wq);
    free(s->running);
    free(s->sched_reqs);
    free(s->o_req_ids);
    free(s->o_num_sched);
    free(s->o_num_computed);
    free(s->o_qsl);
    free(s->o_seq_lens);
    free(s->o_kv_slots);
    free(s->o_is_new);
    free(s->o_samples);
    free(s->o_restore);
    free(s->o_snap);
    free(s->o_snap_len);
    free(s->o_probe);
    free(s->snap_hash);
    free(s->snap_decode);
    free(s->o_tables);
    free(s->o_num_blocks);
    free(s->o_num_new_blocks);
    free(s->o_tokens);
    free(s->o_positions);
    free(s->o_slots);
    free(s->o_preempted);
    free(s->fin[0]);
    free(s->fin[1]);
    free(s->events);
    free(s->ev_tokens);
    free(s->o_num_spec);
    free(s->o_spec_ids);
    free(s->spec_cand);
    free(s->spec_cand_k);
    free(s->enc_free);
    free(s->enc_reqs);
    free(s->o_enc_ids);
    free(s->o_enc_slots);
    free(s->o_enc_begin);
    free(s->o_enc_num);
    free(s->o_enc_fin);
    free(s->o_enc_tables);
    free(s);
}

/* ---- requests ---- */

pagoda_status pg_scheduler_add_request(pg_scheduler *s, pg_request *r) {
    if (!r) return pg_error(PAGODA_ERR_INVALID_ARG, "scheduler: NULL request");
    unsigned long long id = (unsigned long long)r->id;
    if (id_find(s, r->id))
        return pg_error(PAGODA_ERR_INVALID_ARG, "request %llu: id already in use", id);
    if (r->status != PG_REQ_WAITING || r->num_tokens != r->num_prompt_tokens || r->kv_slot >= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "request %llu: not a new request (status %d, %d outputs)", id,
                        (int)r->status, r->num_tokens - r->num_prompt_tokens);
    pagoda_status st = pg_request_validate(r);
    if (st) return st;
    if (r->encoder_steps > 0 && s->max_encoding == 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "request %llu: %d encoder steps, but the scheduler has no cross-attention "
                        "group or no encoder slots",
                        id, r->encoder_steps);
    if (r->num_prompt_tokens >= s->max_model_len)
        return pg_error(
            PAGODA_ERR_LIMIT,
            "request %llu: prompt of %d tokens does not fit max_model_len %d (at most %d "
            "prompt tokens, leaving room for one output token)",
            id, r->num_prompt_tokens, s->max_model_len, s->max_model_len - 1);
    /* made for a longer context: its storage is larger than it needs */
    if (r->max_total_tokens > s->max_model_len) r->max_total_tokens = s->max_model_len;
    int32_t need = pg_kvm_blocks_for_tokens(s->kvm, r->max_total_tokens);
    int32_t have = pg_kvm_num_usable_blocks(s->kvm);
    if (need > have)
        return pg_error(PAGODA_ERR_LIMIT,
                        "request %llu: %d prompt + %d max output tokens (capped at max_model_len "
                        "%d) = %d tokens need %d KV blocks of %d tokens; the KV cache has only %d "
                        "blocks",
                        id, r->num_prompt_tokens, r->max_tokens, s->max_model_len,
                        r->max_total_tokens, need, s->block_size, have);
    /* block hashes with this scheduler's block size and algorithm, unless
     * the creator computed them so already */
    bool hashed = s->caching ? r->hash_blocks && r->block_size == s->block_size &&
                                   r->hash_algo == s->hash_algo
                             : !r->hash_blocks && r->block_size == s->block_size;
    if (!hashed &&
        (st = pg_request_hash_blocks(r, s->block_size, s->caching ? &s->hash_algo : NULL)))
        return st;
    if ((st = wq_reserve(s, s->num_live + 1)) || (st = id_insert(s, r->id, r))) return st;
    r->encoder_done = 0;
    r->encoder_slot = -1;
    wq_push_back(s, r);
    return PAGODA_OK;
}

static void release_encoder_slot(pg_scheduler *s, pg_request *r) {
    if (r->encoder_slot < 0) return;
    s->enc_free[s->num_enc_free++] = r->encoder_slot;
    r->encoder_slot = -1;
}

/* Remove r for good: out of the queues and the id map, blocks freed (r
 * itself is its creator's). */
static void finish_request(pg_scheduler *s, pg_request *r, pg_finish_reason why) {
    release_encoder_slot(s, r);
    if (r->status == PG_REQ_RUNNING) {
        int32_t i = running_index(s, r);
        if (i >= 0) running_remove_at(s, i);
        s->fin[s->fin_cur][s->num_fin++] = r->id; /* the runner holds state for it */
    } else {
        wq_remove(s, r);
    }
    pg_kvm_free(s->kvm, r);
    r->status = PG_REQ_FINISHED;
    r->finish_reason = why;
    id_erase(s, r->id); /* r is its creator's to free */
}

pagoda_status pg_scheduler_abort(pg_scheduler *s, uint64_t id) {
    pg_request *r = id_find(s, id);
    if (!r)
        return pg_error(PAGODA_ERR_NOT_FOUND, "request %llu: not queued or running",
                        (unsigned long long)id);
    if (s->in_flight && r->scheduled_step == s->step) {
        r->abort_pending = true; /* its step is executing: finish in update_from_output */
        return PAGODA_OK;
    }
    finish_request(s, r, PG_FINISH_ABORT);
    return PAGODA_OK;
}

pagoda_status pg_scheduler_set_proposer(pg_scheduler *s, pg_spec_propose_fn fn, void *ctx) {
    if (s->spec.num_speculative_tokens <= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "scheduler: speculative decoding is off: no proposer to set");
    s->spec.propose = fn;
    s->spec.propose_ctx = ctx;
    return PAGODA_OK;
}

pagoda_status pg_scheduler_set_prepare(pg_scheduler *s, pg_spec_prepare_fn fn) {
    if (s->spec.num_speculative_tokens <= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "scheduler: speculative decoding is off: no prepare hook to set");
    s->spec.prepare = fn;
    return PAGODA_OK;
}

const pg_request *pg_scheduler_get_request(const pg_scheduler *s, uint64_t id) {
    return id_find(s, id);
}
int32_t pg_scheduler_num_unfinished(const pg_scheduler *s) {
    return s->num_live;
}
pg_kvm *pg_scheduler_kvm(pg_scheduler *s) {
    return s->kvm;
}

void pg_scheduler_get_stats(const pg_scheduler *s, pg_sched_stats *out) {
    out->num_running = s->num_running;
    out->num_waiting = s->wq_len;
    out->num_steps = s->step;
    out->num_preemptions = s->num_preemptions;
    out->spec = s->spec_stats;
    pg_kvm_get_stats(s->kvm, &out->kv);
}

/* ---- schedule ---- */

/* Append r with n tokens to the output. prev_blocks[g]: table lengths before
 * this step's allocation. */
static void emit(pg_scheduler *s, pg_request *r, int32_t n, bool is_new,
                 const int32_t *prev_blocks) {
    pg_sched_output *o = &s->out;
    int32_t i = o->num_reqs++, off = o->num_tokens, c = r->num_computed_tokens, bs = s->block_size;
    s->sched_reqs[i] = r;
    r->scheduled_step = s->step;
    s->o_req_ids[i] = r->id;
    s->o_num_sched[i] = n;
    s->o_num_computed[i] = c;
    s->o_qsl[i + 1] = off + n;
    s->o_seq_lens[i] = c + n;
    s->o_kv_slots[i] = r->kv_slot;
    s->o_is_new[i] = is_new;
    const int32_t D = r->num_spec_tokens; /* drafts: the last D query tokens */
    s->o_num_spec[i] = D;
    memcpy(s->o_spec_ids + (size_t)i * PG_MAX_SPEC_TOKENS, r->spec_token_ids,
           (size_t)D * sizeof(int32_t));
    o->num_spec_total += D;
    s->o_samples[i] = (c + n - D == r->num_tokens);
    s->o_probe[i] = -1;
    if (r->probe_len > 0 && r->probe_len - 1 >= c && r->probe_len - 1 < c + n) {
        s->o_probe[i] = off + (r->probe_len - 1 - c);
        s->probes_left--;
    }
    /* recurrent-state snapshot: at the last spacing boundary this step
     * crosses (prefill chunks and decode alike), unless already cached */
    s->o_restore[i] = is_new ? r->state_restore : -1;
    s->o_snap[i] = -1;
    s->o_snap_len[i] = 0;
    pg_state_cache *sc = pg_kvm_state_cache(s->kvm);
    if (sc) {
        const int32_t A = pg_kvm_state_snapshot_align(s->kvm), P = (c + n) / A * A;
        if (P > c && P / bs <= r->num_block_hashes &&
            pg_state_cache_lookup(sc, r->block_hashes[P / bs - 1]) < 0) {
            int32_t e = pg_state_cache_acquire(sc);
            if (e >= 0) {
                s->o_snap[i] = e;
                s->o_snap_len[i] = P - c;
                s->snap_hash[i] = r->block_hashes[P / bs - 1];
                s->snap_decode[i] = c >= r->num_prompt_tokens;
            }
        }
    }
    for (int32_t t = 0; t < n; t++) {
        s->o_tokens[off + t] = t < n - D ? r->tokens[c + t] : r->spec_token_ids[t - (n - D)];
        s->o_positions[off + t] = c + t;
    }
    for (int32_t g = 0; g < s->num_groups; g++) {
        int32_t nb;
        const int32_t *table = pg_kvm_block_table(s->kvm, g, r, &nb);
        size_t gi = (size_t)g * s->max_seqs + i;
        s->o_tables[gi] = table;
        s->o_num_blocks[gi] = nb;
        s->o_num_new_blocks[gi] = nb - prev_blocks[g];
        int32_t *slots = s->o_slots + (size_t)g * s->max_tokens + off;
        const pg_kv_cache_kind kind = pg_kvm_group_spec(s->kvm, g)->kind;
        if (kind == PG_KV_MAMBA || kind == PG_KV_CROSS_ATTENTION) { /* state / encoder: no slots */
            for (int32_t t = 0; t < n; t++)
                slots[t] = -1;
            continue;
        }
        for (int32_t t = 0; t < n; t++) {
            int32_t pos = c + t;
            slots[t] = table[pos / bs] * bs + pos % bs;
        }
    }
    o->num_tokens += n;
    s->budget -= n;
}

static void table_lengths(pg_scheduler *s, const pg_request *r, int32_t *lens) {
    for (int32_t g = 0; g < s->num_groups; g++)
        pg_kvm_block_table(s->kvm, g, r, &lens[g]);
}

static void preempt(pg_scheduler *s, int32_t idx) {
    pg_request *r = s->running[idx];
    running_remove_at(s, idx);
    pg_kvm_free(s->kvm, r);
    release_encoder_slot(s, r);
    r->encoder_done = 0; /* its cross-attention blocks are gone: the encoder runs again */
    r->num_computed_tokens = 0;
    r->status = PG_REQ_PREEMPTED;
    r->num_preemptions++;
    s->num_preemptions++;
    wq_push_front(s, r); /* capacity: add_request keeps wq_cap >= live requests */
    s->o_preempted[s->out.num_preempted++] = r->id;
}

/* Schedule running request r (at index idx). Returns 1 scheduled, 0 r was
 * preempted, <0 error (status negated). */
/* The prefill chunk of r this step may run: n tokens from c (num_computed,
 * or the cached hit at admission), cut back to end at a multiple of
 * prefill_align unless it ends the prompt. 0: wait for a later step (the
 * budget left cannot reach the next multiple). Only a step with nothing
 * else in it runs an unaligned chunk (a budget below prefill_align), which
 * is then not bitwise a one-step prefill. A waiting chunk gets its room
 * once the running prefill chunks ahead of it end (decodes take one token
 * each: a budget of at least prefill_align + max_num_seqs never waits for
 * them). */
static int32_t aligned_chunk(const pg_scheduler *s, const pg_request *r, int32_t c, int32_t n) {
    const int32_t A = s->prefill_align;
    if (A <= 1 || c + n >= r->num_tokens) return n;
    const int32_t end = (c + n) / A * A;
    if (end > c) return end - c;
    return s->out.num_tokens == 0 ? n : 0;
}

/* A chunk [c, c + n) that would hold r's probe when this step has no probe
 * row left ends before it (0: r waits for the next step). */
static int32_t probe_cut(const pg_scheduler *s, const pg_request *r, int32_t c, int32_t n) {
    const int32_t p = r->probe_len - 1;
    if (r->probe_len > 0 && p >= c && p < c + n && s->probes_left <= 0) return p - c;
    return n;
}

/* The drafts r's acceptance history allows (scheduler.h,
 * "Acceptance-adaptive K"), 0..num_speculative_tokens, before the probe. */
static int32_t spec_history_cap(const pg_scheduler *s, const pg_request *r) {
    const int32_t K = s->spec.num_speculative_tokens;
    if (s->spec.min_draft_gain < 0.0f || r->spec_rej == 0.0f) return K;
    const float gain =
        s->spec.min_draft_gain > 0.0f ? s->spec.min_draft_gain : PG_SPEC_DEFAULT_MIN_DRAFT_GAIN;
    const float a = (r->spec_acc + 1.0f) / (r->spec_acc + r->spec_rej + 1.0f);
    int32_t k = 0;
    for (float y = a; k < K && y >= gain; y *= a)
        k++;
    return k;
}

/* The drafts decode r may get in this step: its history's cap, or 1 (a
 * probe) once a cap of 0 has waited out spec_wait decode steps. */
static int32_t spec_cap(const pg_scheduler *s, const pg_request *r) {
    const int32_t k = spec_history_cap(s, r);
    return k == 0 && r->spec_wait == 0 ? 1 : k;
}

/* Fold r's step into its acceptance history: a verifying step (D > 0
 * drafts, A accepted) updates the counts, a decode step without drafts
 * counts down the wait. */
static void spec_account(const pg_scheduler *s, pg_request *r, int32_t D, int32_t A) {
    if (s->spec.num_speculative_tokens <= 0 || s->spec.min_draft_gain < 0.0f) return;
    if (D == 0) {
        if (r->spec_wait > 0) r->spec_wait--;
        return;
    }
    r->spec_acc = r->spec_acc * PG_SPEC_DECAY + (float)A;
    r->spec_rej = r->spec_rej * PG_SPEC_DECAY + (A < D ? 1.0f : 0.0f);
    r->spec_wait = 0;
    if (A > 0) {
        r->spec_backoff = 0;
    } else if (spec_history_cap(s, r) == 0) { /* a miss at a cap of 0: wait, longer each time */
        r->spec_backoff = r->spec_backoff ? r->spec_backoff * 2 : 2;
        if (r->spec_backoff > PG_SPEC_MAX_WAIT) r->spec_backoff = PG_SPEC_MAX_WAIT;
        r->spec_wait = r->spec_backoff;
    }
}

/* Draft tokens for decode r in this step (r->spec_token_ids, count
 * returned): at most its adaptive cap (spec_cap), the step's draft budget, the
 * token budget after r's own token, and what r may still output after its
 * pending token and the one sampled after the drafts (max_tokens and
 * max_model_len). */
static int32_t propose_drafts(pg_scheduler *s, pg_request *r) {
    int32_t k = spec_cap(s, r);
    if (k > s->spec_left) k = s->spec_left;
    if (k > s->budget - 1) k = s->budget - 1;
    if (k > r->max_total_tokens - r->num_tokens - 1) k = r->max_total_tokens - r->num_tokens - 1;
    if (k <= 0 || r->no_spec) return 0;
    int32_t d = s->spec.propose
                    ? s->spec.propose(s->spec.propose_ctx, r, k, r->spec_token_ids)
                    : pg_ngram_propose(r->tokens, r->num_tokens, s->spec.prompt_lookup_min,
                                       s->spec.prompt_lookup_max, k, r->spec_token_ids);
    return d < 0 ? 0 : d > k ? k : d;
}

static int schedule_running(pg_scheduler *s, pg_request *r) {
    int32_t n = r->num_tokens - r->num_computed_tokens;
    if (n > s->budget) n = s->budget;
    if (n <= 0) return 1;
    n = aligned_chunk(s, r, r->num_computed_tokens, n);
    n = probe_cut(s, r, r->num_computed_tokens, n);
    if (n == 0) return 1; /* waits for a step with room to the next boundary */
    r->num_spec_tokens = 0;
    if (n == 1 && s->spec_left > 0) r->num_spec_tokens = propose_drafts(s, r);
    int32_t prev[PG_KV_MAX_GROUPS];
    for (;;) {
        table_lengths(s, r, prev);
        pagoda_status st = pg_kvm_allocate_slots(s->kvm, r, n + r->num_spec_tokens, 0);
        if (st == PAGODA_OK) {
            s->spec_left -= r->num_spec_tokens;
            emit(s, r, n + r->num_spec_tokens, false, prev);
            return 1;
        }
        if (st != PAGODA_ERR_LIMIT) return -(int)st;
        if (r->num_spec_tokens > 0) { /* drafts are the first thing to give up */
            r->num_spec_tokens = 0;
            continue;
        }
        /* out of blocks: preempt the newest running request not scheduled this step */
        int32_t v = s->num_running - 1;
        while (v >= 0 && s->running[v]->scheduled_step == s->step)
            v--;
        if (v < 0) return -(int)pg_error(PAGODA_ERR_INTERNAL, "scheduler: no preemption victim");
        pg_request *victim = s->running[v];
        victim->num_spec_tokens = 0;
        preempt(s, v);
        if (victim == r) return 0;
    }
}

/* Encoder pieces for running request r (encoding, not scheduled yet in this
 * step): as many as the encoder budget allows, at least one when no piece
 * ran yet in this step, on an encoder slot (none free: it waits). When they finish
 * its encoder, its decoder prompt follows in the same step if blocks and
 * budget allow (no preemption for it: it may wait a step). */
static pagoda_status schedule_encoder(pg_scheduler *s, pg_request *r) {
    pg_sched_output *o = &s->out;
    int32_t left = r->encoder_steps - r->encoder_done;
    int32_t k = s->enc_budget / s->enc_cost;
    if (k == 0 && o->num_enc == 0) k = 1;
    if (k > left) k = left;
    if (k <= 0 || o->num_enc >= s->max_encoding) return PAGODA_OK;
    if (r->encoder_slot < 0) {
        if (s->num_enc_free == 0) return PAGODA_OK;
        r->encoder_slot = s->enc_free[--s->num_enc_free];
    }
    int32_t j = o->num_enc++, nb;
    s->enc_reqs[j] = r;
    s->o_enc_ids[j] = r->id;
    s->o_enc_slots[j] = r->encoder_slot;
    s->o_enc_begin[j] = r->encoder_done;
    s->o_enc_num[j] = k;
    s->o_enc_fin[j] = k == left;
    s->o_enc_tables[j] = pg_kvm_block_table(s->kvm, s->cross_group, r, &nb);
    r->scheduled_step = s->step;
    s->enc_budget -= k * s->enc_cost;
    if (s->enc_budget < 0) s->enc_budget = 0;
    if (k < left || s->budget <= 0) return PAGODA_OK;
    /* the decoder's prompt right after its encoder */
    int32_t n = r->num_tokens - r->num_computed_tokens;
    if (n > s->budget) n = s->budget;
    n = probe_cut(s, r, r->num_computed_tokens, n);
    if (n <= 0) return PAGODA_OK;
    int32_t prev[PG_KV_MAX_GROUPS];
    table_lengths(s, r, prev);
    pagoda_status st = pg_kvm_allocate_slots(s->kvm, r, n, 0);
    if (st == PAGODA_ERR_LIMIT) return PAGODA_OK;
    if (st) return st;
    emit(s, r, n, false, prev);
    return PAGODA_OK;
}

pagoda_status pg_scheduler_schedule(pg_scheduler *s, pg_sched_output *out) {
    if (s->in_flight)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "scheduler: step %lld is still in flight (call update_from_output first)",
                        (long long)s->step);
    pg_sched_output *o = &s->out;
    s->step = o->step + 1;
    o->step = s->step;
    o->num_reqs = 0;
    o->num_tokens = 0;
    o->num_preempted = 0;
    o->num_enc = 0;
    o->num_spec_total = 0;
    s->o_qsl[0] = 0;
    /* report the finished ids gathered since the last step; gather into the other buffer */
    o->finished_ids = s->fin[s->fin_cur];
    o->num_finished = s->num_fin;
    s->fin_cur ^= 1;
    s->num_fin = 0;
    s->budget = s->max_tokens;
    s->probes_left = PG_SCHED_MAX_PROBES;
    s->enc_budget = s->enc_budget_max;
    /* the adaptive rule (scheduler.h): drafts while decodes + drafts stay
     * within max_batch_tokens, none at disable_by_batch_size running */
    s->spec_left = 0;
    if (s->spec.num_speculative_tokens > 0 &&
        (s->spec.disable_by_batch_size == 0 || s->num_running < s->spec.disable_by_batch_size)) {
        int32_t decodes = 0;
        for (int32_t i = 0; i < s->num_running; i++)
            decodes += s->running[i]->num_tokens - s->running[i]->num_computed_tokens == 1;
        int32_t cap = s->spec.max_batch_tokens > 0 ? s->spec.max_batch_tokens : s->max_tokens;
        s->spec_left = cap > decodes ? cap - decodes : 0;
    }
    if (s->spec.prepare && s->spec_left > 0) { /* the decodes propose_drafts may serve */
        int32_t n = 0, left = s->spec_left;
        for (int32_t i = 0; i < s->num_running && left > 0; i++) {
            pg_request *r = s->running[i];
            if (r->num_tokens - r->num_computed_tokens != 1 || r->no_spec ||
                r->encoder_done < r->encoder_steps)
                continue;
            int32_t k = spec_cap(s, r);
            if (k > left) k = left;
            if (k > r->max_total_tokens - r->num_tokens - 1)
                k = r->max_total_tokens - r->num_tokens - 1;
            if (k <= 0) continue;
            s->spec_cand[n] = r;
            s->spec_cand_k[n++] = k;
            left -= k;
        }
        if (n > 0) {
            pagoda_status pst =
                s->spec.prepare(s->spec.propose_ctx, s->spec_cand, s->spec_cand_k, n);
            if (pst) return pst;
        }
    }

    /* 1. decodes, then 2. prefill chunks of running requests */
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = 0; i < s->num_running && s->budget > 0;) {
            pg_request *r = s->running[i];
            int32_t pending = r->num_tokens - r->num_computed_tokens;
            if (r->scheduled_step == s->step || (pass == 0) != (pending == 1) ||
                r->encoder_done < r->encoder_steps) {
                i++;
                continue;
            }
            int rc = schedule_running(s, r);
            if (rc < 0) return (pagoda_status)(-rc);
            if (rc == 1) i++; /* else r left running[i]; victims are always at >= i */
        }
    }
    /* encoder pieces of running requests still encoding, in admission order */
    for (int32_t i = 0; i < s->num_running && (s->enc_budget > 0 || o->num_enc == 0); i++) {
        pg_request *r = s->running[i];
        if (r->encoder_done < r->encoder_steps && r->scheduled_step != s->step) {
            pagoda_status st = schedule_encoder(s, r);
            if (st) return st;
        }
    }
    /* 3. admit waiting requests FCFS, unless this step had to preempt */
    while (o->num_preempted == 0 && s->wq_len > 0 && s->budget > 0 &&
           s->num_running < s->max_seqs) {
        pg_request *r = wq_at(s, 0);
        if (r->encoder_steps > 0) { /* its cross-attention blocks and an encoder slot first */
            if (s->num_enc_free == 0 || (s->enc_budget < s->enc_cost && o->num_enc > 0)) break;
            pagoda_status st = pg_kvm_allocate_slots(s->kvm, r, 0, 0);
            if (st == PAGODA_ERR_LIMIT) break; /* the head waits for memory */
            if (st) return st;
            wq_pop_front(s);
            s->running[s->num_running++] = r;
            r->status = PG_REQ_RUNNING;
            r->num_computed_tokens = 0;
            r->num_cached_tokens = 0;
            if ((st = schedule_encoder(s, r))) return st;
            continue;
        }
        int32_t hit = pg_kvm_find_cached_prefix(s->kvm, r);
        int32_t n = r->num_tokens - hit;
        if (n > s->budget) n = s->budget;
        n = aligned_chunk(s, r, hit, n);
        n = probe_cut(s, r, hit, n);
        if (n == 0) break; /* the head waits for room; nobody skips it */
        int32_t prev[PG_KV_MAX_GROUPS] = {0};
        pagoda_status st = pg_kvm_allocate_slots(s->kvm, r, n, hit);
        if (st == PAGODA_ERR_LIMIT) break; /* the head waits for memory; nobody skips it */
        if (st) return st;
        wq_pop_front(s);
        s->running[s->num_running++] = r;
        r->status = PG_REQ_RUNNING;
        r->num_computed_tokens = hit;
        r->num_cached_tokens = hit;
        emit(s, r, n, true, prev);
    }
    s->in_flight = o->num_reqs > 0 || o->num_enc > 0;
    *out = *o;
    return PAGODA_OK;
}

/* ---- update ---- */

pagoda_status pg_scheduler_update_from_output(pg_scheduler *s, const pg_sched_output *so,
                                              const int32_t *sampled, pg_step_result *res) {
    return pg_scheduler_update_from_output_spec(s, so, sampled, NULL, 1, res);
}

/* Check request i's sampled tokens of a step with drafts (see
 * update_from_output_spec). */
static pagoda_status check_spec_tokens(const pg_scheduler *s, int32_t i, const int32_t *tok,
                                       int32_t cnt) {
    const int32_t D = s->o_num_spec[i];
    if (cnt < 1 || cnt > D + 1)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "scheduler: step %lld: request %llu got %d tokens for %d draft tokens "
                        "(1..%d)",
                        (long long)s->out.step, (unsigned long long)s->o_req_ids[i], cnt, D, D + 1);
    for (int32_t j = 0; j < cnt; j++)
        if (tok[j] < 0 ||
            (j < cnt - 1 && tok[j] != s->o_spec_ids[(size_t)i * PG_MAX_SPEC_TOKENS + j]))
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "scheduler: step %lld: request %llu: token %d of %d (%d) is %s",
                            (long long)s->out.step, (unsigned long long)s->o_req_ids[i], j, cnt,
                            tok[j], tok[j] < 0 ? "negative" : "not the accepted draft token");
    return PAGODA_OK;
}

pagoda_status pg_scheduler_update_from_output_spec(pg_scheduler *s, const pg_sched_output *so,
                                                   const int32_t *sampled,
                                                   const int32_t *num_sampled, int32_t stride,
                                                   pg_step_result *res) {
    if (res) {
        res->num_events = 0;
        res->events = s->events;
    }
    const pg_sched_output *o = &s->out;
    if (!so || so->step != o->step || so->num_reqs != o->num_reqs)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "scheduler: update for step %lld, step %lld is current",
                        so ? (long long)so->step : -1LL, (long long)o->step);
    if (!s->in_flight) {
        if (o->num_reqs == 0 && o->num_enc == 0) return PAGODA_OK; /* empty: no update */
        return pg_error(PAGODA_ERR_INVALID_ARG, "scheduler: step %lld was already updated",
                        (long long)o->step);
    }
    if (stride < 1) stride = 1;
    for (int32_t i = 0; i < o->num_reqs; i++) {
        if (!s->o_samples[i] || s->sched_reqs[i]->abort_pending) continue;
        if (!sampled || sampled[(size_t)i * stride] < 0)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "scheduler: step %lld: no sampled token for request %llu (index %d)",
                            (long long)o->step, (unsigned long long)s->o_req_ids[i], i);
        const int32_t cnt = num_sampled ? num_sampled[i] : 1;
        if (s->o_num_spec[i] > 0 || cnt != 1) {
            pagoda_status cst = check_spec_tokens(s, i, sampled + (size_t)i * stride, cnt);
            if (cst) return cst;
        }
    }
    int32_t ne = 0;
    for (int32_t j = 0; j < o->num_enc; j++) { /* encoder pieces done */
        pg_request *r = s->enc_reqs[j];
        r->encoder_done += s->o_enc_num[j];
        if (r->encoder_done >= r->encoder_steps) release_encoder_slot(s, r);
    }
    pg_state_cache *sc = pg_kvm_state_cache(s->kvm);
    for (int32_t i = 0; i < o->num_reqs; i++) {
        pg_request *r = s->sched_reqs[i];
        if (sc && s->o_restore[i] >= 0) { /* restored: no longer needs the pin */
            pg_state_cache_unpin(sc, s->o_restore[i]);
            r->state_restore = -1;
        }
        if (sc && s->o_snap[i] >= 0) { /* written: findable from now on */
            pg_state_cache_publish(sc, s->o_snap[i], s->snap_hash[i]);
            int32_t e = pg_state_cache_lookup(sc, s->snap_hash[i]);
            if (s->snap_decode[i]) { /* keep only a request's newest decode snapshot */
                if (r->state_snap_decode >= 0 && r->state_snap_decode != e &&
                    pg_state_cache_lookup(sc, r->state_snap_decode_hash) == r->state_snap_decode)
                    pg_state_cache_drop(sc, r->state_snap_decode); /* (not evicted meanwhile) */
                r->state_snap_decode = e;
                r->state_snap_decode_hash = s->snap_hash[i];
            }
        }
        const int32_t D = s->o_num_spec[i];
        const int32_t cnt = s->o_samples[i] && num_sampled ? num_sampled[i] : 1;
        r->num_spec_tokens = 0; /* drafts are proposed anew for every step */
        /* the rejected drafts' KV slots roll back: only the accepted count */
        r->num_computed_tokens += s->o_num_sched[i] - (D > 0 ? D - (cnt - 1) : 0);
        if (r->abort_pending) {
            s->events[ne++] = (pg_step_event){.req_id = r->id,
                                              .token = -1,
                                              .finish = PG_FINISH_ABORT,
                                              .stop_token = -1,
                                              .num_output_tokens = pg_request_num_output_tokens(r)};
            finish_request(s, r, PG_FINISH_ABORT);
            continue;
        }
        if (!s->o_samples[i]) continue;
        if (s->o_num_sched[i] - D == 1) spec_account(s, r, D, cnt - 1); /* a decode */
        if (D > 0) {
            pg_spec_stats *ss = &s->spec_stats;
            ss->num_drafts++;
            ss->num_draft_tokens += (uint64_t)D;
            ss->num_accepted_tokens += (uint64_t)(cnt - 1);
            for (int32_t p = 0; p < cnt - 1; p++)
                ss->accepted_per_pos[p]++;
        }
        const int32_t *toks = sampled + (size_t)i * stride;
        int32_t *evt = s->ev_tokens + (size_t)ne * (PG_MAX_SPEC_TOKENS + 1);
        int32_t nt = 0, last = -1;
        pg_finish_reason why = PG_FINISH_NONE;
        for (int32_t j = 0; j < cnt && why == PG_FINISH_NONE; j++) {
            pagoda_status st = pg_request_append_token(r, toks[j]);
            if (st) {
                PG_ERROR("%s", pg_last_error());
                why = PG_FINISH_LENGTH;
                break;
            }
            evt[nt++] = last = toks[j];
            why = pg_request_check_stop(r);
        }
        s->events[ne++] = (pg_step_event){.req_id = r->id,
                                          .token = last,
                                          .tokens = evt,
                                          .num_tokens = nt,
                                          .finish = why,
                                          .stop_token = why == PG_FINISH_STOP ? last : -1,
                                          .num_output_tokens = pg_request_num_output_tokens(r)};
        if (why != PG_FINISH_NONE)
            finish_request(s, r, why);
        else if (D > 0) /* free the blocks that held only rejected drafts */
            pg_kvm_truncate(s->kvm, r, r->num_tokens);
    }
    for (int32_t j = 0; j < o->num_enc; j++) { /* aborted during an encoder-only step */
        pg_request *r = id_find(s, s->o_enc_ids[j]);
        if (r && r->abort_pending) {
            s->events[ne++] = (pg_step_event){.req_id = r->id,
                                              .token = -1,
                                              .finish = PG_FINISH_ABORT,
                                              .stop_token = -1,
                                              .num_output_tokens = pg_request_num_output_tokens(r)};
            finish_request(s, r, PG_FINISH_ABORT);
        }
    }
    s->in_flight = false;
    if (res) res->num_events = ne;
    return PAGODA_OK;
}

/* ---- invariants ---- */

pagoda_status pg_scheduler_check(const pg_scheduler *s) {
    pagoda_status st = pg_kvm_check(s->kvm);
    if (st) return st;
    if (s->num_running > s->max_seqs)
        return pg_error(PAGODA_ERR_INTERNAL, "scheduler: %d running > max_num_seqs %d",
                        s->num_running, s->max_seqs);
    if (s->num_running + s->wq_len != s->num_live)
        return pg_error(PAGODA_ERR_INTERNAL, "scheduler: %d running + %d waiting != %d live",
                        s->num_running, s->wq_len, s->num_live);
    for (int32_t i = 0; i < s->num_running; i++) {
        const pg_request *r = s->running[i];
        if (r->status != PG_REQ_RUNNING || r->kv_slot < 0 || id_find(s, r->id) != r)
            return pg_error(PAGODA_ERR_INTERNAL, "scheduler: running request %llu is inconsistent",
                            (unsigned long long)r->id);
        if (r->num_computed_tokens < 0 || r->num_computed_tokens >= r->num_tokens)
            return pg_error(PAGODA_ERR_INTERNAL,
                            "scheduler: request %llu has %d computed of %d tokens",
                            (unsigned long long)r->id, r->num_computed_tokens, r->num_tokens);
    }
    for (int32_t i = 0; i < s->wq_len; i++) {
        const pg_request *r = wq_at(s, i);
        if ((r->status != PG_REQ_WAITING && r->status != PG_REQ_PREEMPTED) || r->kv_slot >= 0 ||
            r->num_computed_tokens != 0 || id_find(s, r->id) != r)
            return pg_error(PAGODA_ERR_INTERNAL, "scheduler: waiting request %llu is inconsistent",
                            (unsigned long long)r->id);
    }
    return PAGODA_OK;
}
