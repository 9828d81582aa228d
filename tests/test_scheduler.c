/* Scheduler: budgets, chunked prefill, decode priority, prefix-cache reuse,
 * preemption (recompute) fairness, aborts, rejections, finish conditions and
 * a randomized stress test. The test plays the model: a fake runner keeps a
 * KV "cache" of token ids indexed by slot, writes each scheduled token at its
 * slot, then checks that every position a request attends to (through its
 * block table) holds the right token, and samples token = f(id, position). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/scheduler.h"

#define MAX_REQS 1200
#define MAX_LEN 256

typedef struct shadow {
    bool live, admitted_once, preempted_waiting, running;
    int32_t toks[MAX_LEN];
    int32_t n, prompt_n, max_tokens, min_tokens, eos;
    bool ignore_eos;
    int32_t stop[4], nstop;
    int64_t arrive_step, finish_step;
    pg_finish_reason finish;
    pg_request *req; /* the harness creates and frees it; the scheduler borrows it */
} shadow;

typedef struct harness {
    pg_scheduler *s;
    pg_sched_config cfg;
    int32_t *kv; /* [num_blocks * block_size]: token id stored at each slot, -1 never written */
    int32_t kv_n;
    shadow *sh; /* [MAX_REQS] indexed by id */
    int64_t steps;
    int64_t last_first_admit; /* id of the latest first admission (FCFS check) */
    int64_t preemptions, fresh_admissions, max_running;
    int32_t (*model)(uint64_t id, int32_t pos); /* token sampled for position pos */
    bool check_every_step;
    int64_t spec_steps, spec_rejected; /* decodes with drafts, of them with a rejection */
} harness;

#define SPEC_STRIDE (PG_MAX_SPEC_TOKENS + 1)

static int32_t model_hash(uint64_t id, int32_t pos) {
    uint64_t x = id * 0x9E3779B97F4A7C15ULL + (uint64_t)pos * 0xC2B2AE3D27D4EB4FULL;
    x ^= x >> 31;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 29;
    return (int32_t)(x % 1000);
}

static int32_t g_prefill_align; /* pg_sched_config.prefill_align of the next h_init */
static pg_spec_config g_spec;   /* pg_sched_config.spec of the next h_init */

/* groups: NULL for one full-attention group; group 0 must be full attention */
static void h_init_groups(harness *h, int32_t budget, int32_t seqs, int32_t max_len, int32_t bs,
                          int32_t num_blocks, bool caching, const pg_kv_cache_spec *groups,
                          int32_t num_groups) {
    memset(h, 0, sizeof *h);
    pg_sched_config_default(&h->cfg);
    h->cfg.kv.num_groups = num_groups;
    for (int32_t g = 0; g < num_groups; g++)
        h->cfg.kv.groups[g] = groups[g];
    h->cfg.max_num_batched_tokens = budget;
    h->cfg.max_num_seqs = seqs;
    h->cfg.max_model_len = max_len;
    h->cfg.kv.block_size = bs;
    h->cfg.kv.num_blocks = num_blocks;
    h->cfg.kv.enable_prefix_caching = caching;
    h->cfg.prefill_align = g_prefill_align;
    h->cfg.spec = g_spec;
    assert_int_equal(pg_scheduler_create(&h->cfg, &h->s), PAGODA_OK);
    h->kv_n = num_blocks * bs;
    h->kv = malloc((size_t)h->kv_n * sizeof *h->kv);
    for (int32_t i = 0; i < h->kv_n; i++)
        h->kv[i] = -1;
    h->sh = calloc(MAX_REQS, sizeof *h->sh);
    h->last_first_admit = -1;
    h->model = model_hash;
    h->check_every_step = true;
}

static void h_init(harness *h, int32_t budget, int32_t seqs, int32_t max_len, int32_t bs,
                   int32_t num_blocks, bool caching) {
    h_init_groups(h, budget, seqs, max_len, bs, num_blocks, caching, NULL, 0);
}

static void h_free(harness *h) {
    pg_scheduler_destroy(h->s);
    for (int32_t i = 0; i < MAX_REQS; i++)
        pg_request_destroy(h->sh[i].req);
    free(h->kv);
    free(h->sh);
}

typedef struct req_spec {
    int32_t prompt_n, max_tokens, min_tokens, eos;
    bool ignore_eos;
    const int32_t *stop;
    int32_t nstop;
    const int32_t *prompt; /* NULL: tokens 1000 + id*7 + i */
} req_spec;

static pagoda_status h_add(harness *h, uint64_t id, req_spec rs) {
    assert_true(id < MAX_REQS && rs.prompt_n <= MAX_LEN);
    static shadow tmp;
    shadow *x = &tmp;
    memset(x, 0, sizeof *x);
    for (int32_t i = 0; i < rs.prompt_n; i++)
        x->toks[i] = rs.prompt ? rs.prompt[i] : 1000 + (int32_t)id * 7 + i;
    /* made for a longer context than the scheduler's: it checks the prompt
     * and caps the rest itself */
    pg_request *r;
    pagoda_status st = pg_request_create(id, x->toks, rs.prompt_n, rs.max_tokens, 4 * MAX_LEN, &r);
    if (st) return st;
    r->min_tokens = rs.min_tokens;
    r->eos_token_id = rs.eos;
    r->ignore_eos = rs.ignore_eos;
    r->num_stop_token_ids = rs.nstop;
    for (int32_t i = 0; i < rs.nstop; i++)
        r->stop_token_ids[i] = rs.stop[i];
    if ((st = pg_scheduler_add_request(h->s, r))) {
        pg_request_destroy(r);
        return st;
    }
    pg_request_destroy(h->sh[id].req); /* an earlier request of this id, finished */
    x->req = r;
    x->live = true;
    x->n = x->prompt_n = rs.prompt_n;
    x->max_tokens = rs.max_tokens;
    x->min_tokens = rs.min_tokens;
    x->eos = rs.eos;
    x->ignore_eos = rs.ignore_eos;
    x->nstop = rs.nstop;
    for (int32_t i = 0; i < rs.nstop; i++)
        x->stop[i] = rs.stop[i];
    x->arrive_step = h->steps;
    h->sh[id] = *x;
    return PAGODA_OK;
}

static pg_finish_reason expected_finish(const harness *h, const shadow *x) {
    int32_t out = x->n - x->prompt_n, last = x->toks[x->n - 1];
    if (out >= x->min_tokens) {
        if (!x->ignore_eos && x->eos >= 0 && last == x->eos) return PG_FINISH_STOP;
        for (int32_t i = 0; i < x->nstop; i++)
            if (last == x->stop[i]) return PG_FINISH_STOP;
    }
    if (out >= x->max_tokens || x->n >= h->cfg.max_model_len) return PG_FINISH_LENGTH;
    return PG_FINISH_NONE;
}

static void h_abort(harness *h, uint64_t id) {
    assert_int_equal(pg_scheduler_abort(h->s, id), PAGODA_OK);
    h->sh[id].live = false;
    h->sh[id].finish = PG_FINISH_ABORT;
    h->sh[id].running = false;
    h->sh[id].finish_step = h->steps;
}

/* Validate the plan against the shadow state, "run" it, update. Returns the
 * number of scheduled requests. `aborts_in_flight`: ids to abort between
 * schedule and update. */
static int32_t h_step_ex(harness *h, pg_sched_output *out_copy, const uint64_t *aborts_in_flight,
                         int32_t n_aborts) {
    pg_sched_output o;
    assert_int_equal(pg_scheduler_schedule(h->s, &o), PAGODA_OK);
    const int32_t bs = o.block_size;
    /* budgets */
    assert_true(o.num_tokens <= h->cfg.max_num_batched_tokens);
    assert_true(o.num_reqs <= h->cfg.max_num_seqs);
    pg_sched_stats ss;
    pg_scheduler_get_stats(h->s, &ss);
    assert_true(ss.num_running <= h->cfg.max_num_seqs);
    if (ss.num_running > h->max_running) h->max_running = ss.num_running;
    /* liveness: work exists -> something is scheduled */
    if (pg_scheduler_num_unfinished(h->s) > 0) assert_true(o.num_reqs > 0);

    /* events first: preemptions */
    for (int32_t i = 0; i < o.num_preempted; i++) {
        shadow *x = &h->sh[o.preempted_ids[i]];
        assert_true(x->live && x->running);
        x->running = false;
        x->preempted_waiting = true;
        h->preemptions++;
    }
    for (int32_t i = 0; i < o.num_finished; i++)
        assert_false(h->sh[o.finished_ids[i]].live);

    bool fresh = false;
    assert_int_equal(o.query_start_loc[0], 0);
    int32_t sum = 0;
    for (int32_t i = 0; i < o.num_reqs; i++) {
        shadow *x = &h->sh[o.req_ids[i]];
        assert_true(x->live);
        int32_t n = o.num_scheduled_tokens[i], c = o.num_computed_tokens[i];
        const int32_t D = o.num_spec_tokens[i]; /* drafts after the last token */
        const int32_t *drafts = o.spec_token_ids + (size_t)i * PG_MAX_SPEC_TOKENS;
        assert_true(n >= 1);
        assert_int_equal(o.query_start_loc[i + 1] - o.query_start_loc[i], n);
        assert_int_equal(o.seq_lens[i], c + n);
        assert_true(c + n - D <= x->n);
        assert_int_equal(o.samples[i], c + n - D == x->n);
        if (D > 0) { /* only decodes carry drafts, within the budgets */
            assert_int_equal(n, D + 1);
            assert_true(D <= h->cfg.spec.num_speculative_tokens);
            assert_true(x->n + D < x->prompt_n + x->max_tokens);
        }
        sum += n;
        if (o.is_new[i]) {
            assert_false(x->running);
            assert_int_equal(c % bs, 0); /* prefix hit: whole blocks */
            assert_true(c < x->n);       /* never the last token */
            if (x->preempted_waiting) {
                x->preempted_waiting = false;
            } else {
                assert_false(x->admitted_once);
                fresh = true;
                /* FCFS: first admissions in arrival (= id) order */
                assert_true((int64_t)o.req_ids[i] > h->last_first_admit);
                h->last_first_admit = (int64_t)o.req_ids[i];
                h->fresh_admissions++;
            }
            x->admitted_once = true;
            x->running = true;
        } else {
            assert_true(x->running);
        }
        for (int32_t g = 0; g < o.num_groups; g++) {
            const int32_t *table = o.block_tables[g * o.req_stride + i];
            int32_t nb = o.num_blocks[g * o.req_stride + i];
            assert_true(o.num_new_blocks[g * o.req_stride + i] >= 0);
            pg_kv_cache_kind kind =
                h->cfg.kv.num_groups ? h->cfg.kv.groups[g].kind : PG_KV_FULL_ATTENTION;
            if (kind == PG_KV_MAMBA) { /* one state block, never shared, no slots */
                assert_int_equal(nb, 1);
                assert_true(table[0] > 0);
                for (int32_t j = 0; j < i; j++)
                    assert_true(o.block_tables[g * o.req_stride + j][0] != table[0]);
                for (int32_t t = 0; t < n; t++)
                    assert_int_equal(o.slot_mapping[g * o.token_stride + o.query_start_loc[i] + t],
                                     -1);
                continue;
            }
            assert_true(nb * bs >= c + n);
            for (int32_t t = 0; t < n; t++) {
                int32_t k = o.query_start_loc[i] + t, pos = c + t;
                assert_int_equal(o.positions[k], pos);
                assert_int_equal(o.token_ids[k], /* recompute feeds prompt + outputs */
                                 pos < x->n ? x->toks[pos] : drafts[pos - x->n]);
                int32_t slot = o.slot_mapping[g * o.token_stride + k];
                assert_int_equal(slot, table[pos / bs] * bs + pos % bs);
                assert_true(table[pos / bs] > 0 && slot < h->kv_n);
                h->kv[slot] = o.token_ids[k]; /* write K/V */
            }
        }
    }
    assert_int_equal(sum, o.num_tokens);
    assert_int_equal(o.query_start_loc[o.num_reqs], o.num_tokens);
    /* preempted requests resume before any newer waiting request is admitted */
    if (fresh)
        for (int32_t id = 0; id < MAX_REQS; id++)
            if (h->sh[id].live) assert_false(h->sh[id].preempted_waiting);
    /* attention: every position each request reads holds the right token */
    static int32_t sampled[512 * SPEC_STRIDE], nsampled[512];
    assert_true(o.num_reqs <= 512);
    for (int32_t i = 0; i < o.num_reqs; i++) {
        const shadow *x = &h->sh[o.req_ids[i]];
        const int32_t *table = o.block_tables[i];
        const int32_t *drafts = o.spec_token_ids + (size_t)i * PG_MAX_SPEC_TOKENS;
        for (int32_t pos = 0; pos < o.seq_lens[i]; pos++)
            assert_int_equal(h->kv[table[pos / bs] * bs + pos % bs],
                             pos < x->n ? x->toks[pos] : drafts[pos - x->n]);
        for (int32_t g = 1; g < o.num_groups; g++) { /* sliding window: the window of the
                                                        chunk's first query on */
            const pg_kv_cache_spec *sp = &h->cfg.kv.groups[g];
            if (sp->kind != PG_KV_SLIDING_WINDOW) continue;
            const int32_t *tw = o.block_tables[g * o.req_stride + i];
            int32_t from = o.num_computed_tokens[i] - sp->u.sliding.window + 1;
            for (int32_t pos = from > 0 ? from : 0; pos < o.seq_lens[i]; pos++) {
                assert_true(tw[pos / bs] > 0);
                assert_int_equal(h->kv[tw[pos / bs] * bs + pos % bs],
                                 pos < x->n ? x->toks[pos] : drafts[pos - x->n]);
            }
        }
        /* the model's tokens after the last token and after each draft, kept
         * while the drafts agree (greedy verification) */
        const int32_t D = o.num_spec_tokens[i];
        nsampled[i] = 0;
        for (int32_t j = 0; o.samples[i] && j <= D; j++) {
            int32_t t = h->model(o.req_ids[i], x->n + j);
            sampled[i * SPEC_STRIDE + j] = t;
            nsampled[i] = j + 1;
            if (j == D || t != drafts[j]) break;
        }
        if (!o.samples[i]) sampled[i * SPEC_STRIDE] = -1;
    }
    if (out_copy) *out_copy = o;
    for (int32_t a = 0; a < n_aborts; a++)
        h_abort(h, aborts_in_flight[a]);

    pg_step_result res;
    assert_int_equal(
        pg_scheduler_update_from_output_spec(h->s, &o, sampled, nsampled, SPEC_STRIDE, &res),
        PAGODA_OK);
    h->steps++;
    int32_t ev = 0;
    for (int32_t i = 0; i < o.num_reqs; i++) {
        shadow *x = &h->sh[o.req_ids[i]];
        if (!x->live) { /* aborted while in flight */
            assert_true(ev < res.num_events);
            assert_true(res.events[ev].req_id == o.req_ids[i]);
            assert_int_equal(res.events[ev].finish, PG_FINISH_ABORT);
            assert_int_equal(res.events[ev].token, -1);
            ev++;
            continue;
        }
        if (!o.samples[i]) continue;
        assert_true(ev < res.num_events);
        const pg_step_event *e = &res.events[ev++];
        assert_true(e->req_id == o.req_ids[i]);
        /* tokens appended one by one; a finish among them ends the list */
        pg_finish_reason want = PG_FINISH_NONE;
        int32_t got = 0;
        for (int32_t j = 0; j < nsampled[i] && want == PG_FINISH_NONE; j++) {
            x->toks[x->n++] = sampled[i * SPEC_STRIDE + j];
            want = expected_finish(h, x);
            got++;
        }
        assert_int_equal(e->num_tokens, got);
        for (int32_t j = 0; j < got; j++)
            assert_int_equal(e->tokens[j], sampled[i * SPEC_STRIDE + j]);
        assert_int_equal(e->token, x->toks[x->n - 1]);
        assert_int_equal(e->num_output_tokens, x->n - x->prompt_n);
        assert_int_equal(e->finish, want);
        if (want == PG_FINISH_STOP) assert_int_equal(e->stop_token, x->toks[x->n - 1]);
        if (want != PG_FINISH_NONE) {
            x->live = false;
            x->running = false;
            x->finish = want;
            x->finish_step = h->steps;
            assert_null(pg_scheduler_get_request(h->s, o.req_ids[i]));
        } else {
            const pg_request *r = pg_scheduler_get_request(h->s, o.req_ids[i]);
            assert_non_null(r);
            assert_int_equal(r->num_tokens, x->n);
            assert_int_equal(r->num_computed_tokens, x->n - 1); /* rejected drafts rolled back */
            if (o.num_spec_tokens[i] > 0) { /* blocks past the accepted tokens are freed */
                int32_t nb;
                pg_kvm_block_table(pg_scheduler_kvm(h->s), 0, r, &nb);
                /* the computed tokens' blocks, at most one more for the pending token */
                assert_true(nb >= (x->n - 1 + bs - 1) / bs && nb <= (x->n + bs - 1) / bs);
                h->spec_steps++;
                h->spec_rejected += nsampled[i] <= o.num_spec_tokens[i];
            }
        }
    }
    assert_int_equal(ev, res.num_events);
    if (h->check_every_step) {
        pagoda_status st = pg_scheduler_check(h->s);
        if (st) fail_msg("%s", pg_last_error());
    }
    return o.num_reqs;
}

static int32_t h_step(harness *h) {
    return h_step_ex(h, NULL, NULL, 0);
}

static void h_run_to_end(harness *h, int64_t max_steps) {
    while (pg_scheduler_num_unfinished(h->s) > 0) {
        assert_true(max_steps-- > 0);
        h_step(h);
    }
}

/* Everything finished: every block free with ref_cnt 0. */
static void assert_all_free(harness *h) {
    pg_kvm *m = pg_scheduler_kvm(h->s);
    pg_block_pool *pool = pg_kvm_pool(m);
    assert_int_equal(pg_block_pool_num_free(pool), h->cfg.kv.num_blocks - 1);
    for (int32_t b = 1; b < h->cfg.kv.num_blocks; b++)
        assert_int_equal(pg_block_pool_ref_cnt(pool, b), 0);
    assert_int_equal(pg_scheduler_check(h->s), PAGODA_OK);
}

/* ---- tests ---- */

static void test_chunked_prefill_then_decode(void **state) {
    (void)state;
    harness h;
    h_init(&h, 8, 4, 128, 4, 32, true);
    assert_int_equal(h_add(&h, 1, (req_spec){.prompt_n = 10, .max_tokens = 5, .eos = -1}),
                     PAGODA_OK);
    pg_sched_output o;
    h_step_ex(&h, &o, NULL, 0);
    assert_int_equal(o.num_scheduled_tokens[0], 8); /* chunk 1 */
    assert_int_equal(o.samples[0], 0);
    assert_int_equal(o.is_new[0], 1);
    assert_int_equal(o.num_new_blocks[0], 2);
    h_step_ex(&h, &o, NULL, 0);
    assert_int_equal(o.num_scheduled_tokens[0], 2); /* rest of the prompt + first token */
    assert_int_equal(o.samples[0], 1);
    assert_int_equal(o.is_new[0], 0);
    assert_int_equal(o.num_new_blocks[0], 1);
    for (int i = 0; i < 4; i++) {
        h_step_ex(&h, &o, NULL, 0);
        assert_int_equal(o.num_scheduled_tokens[0], 1);
    }
    assert_int_equal(pg_scheduler_num_unfinished(h.s), 0);
    assert_int_equal(h.sh[1].finish, PG_FINISH_LENGTH);
    assert_int_equal(h.sh[1].n, 15);
    /* the next (empty) step reports it finished */
    assert_int_equal(pg_scheduler_schedule(h.s, &o), PAGODA_OK);
    assert_int_equal(o.num_reqs, 0);
    assert_int_equal(o.num_finished, 1);
    assert_true(o.finished_ids[0] == 1);
    assert_int_equal(pg_scheduler_update_from_output(h.s, &o, NULL, NULL), PAGODA_OK);
    assert_all_free(&h);
    h_free(&h);
}

/* prefill_align (hybrid models' state grid): prefill chunks end on multiples
 * of it unless they end the prompt; a chunk that cannot reach the next
 * multiple waits (the FCFS head blocks admission), except alone in a step. */
static void test_prefill_chunks_on_the_grid(void **state) {
    (void)state;
    harness h;
    g_prefill_align = 16;
    h_init(&h, 24, 4, 128, 4, 64, false);
    g_prefill_align = 0;
    for (uint64_t id = 1; id <= 2; id++)
        assert_int_equal(h_add(&h, id, (req_spec){.prompt_n = 40, .max_tokens = 3, .eos = -1}),
                         PAGODA_OK);
    pg_sched_output o;
    h_step_ex(&h, &o, NULL, 0); /* 1: 24 -> 16 (grid); 2 cannot reach 16 with 8 left: waits */
    assert_int_equal(o.num_reqs, 1);
    assert_int_equal(o.num_scheduled_tokens[0], 16);
    h_step_ex(&h, &o, NULL, 0); /* 1: the rest of its prompt (24, ends the prompt) */
    assert_int_equal(o.num_reqs, 1);
    assert_int_equal(o.num_scheduled_tokens[0], 24);
    h_step_ex(&h, &o, NULL, 0); /* 1 decodes; 2: 23 -> 16 */
    assert_int_equal(o.num_reqs, 2);
    assert_int_equal(o.num_scheduled_tokens[0], 1);
    assert_int_equal(o.num_scheduled_tokens[1], 16);
    while (pg_scheduler_num_unfinished(h.s) > 0)
        h_step_ex(&h, &o, NULL, 0);
    assert_all_free(&h);
    h_free(&h);
    /* a budget below the grid: alone in a step, an off-grid chunk still runs */
    g_prefill_align = 64;
    h_init(&h, 24, 4, 128, 4, 64, false);
    g_prefill_align = 0;
    assert_int_equal(h_add(&h, 1, (req_spec){.prompt_n = 40, .max_tokens = 1, .eos = -1}),
                     PAGODA_OK);
    h_step_ex(&h, &o, NULL, 0);
    assert_int_equal(o.num_scheduled_tokens[0], 24);
    while (pg_scheduler_num_unfinished(h.s) > 0)
        h_step_ex(&h, &o, NULL, 0);
    h_free(&h);
}

/* A long prompt is spread over many steps while a running decode gets its
 * token in every one of them, first in the batch. */
static void test_decodes_flow_during_long_prefill(void **state) {
    (void)state;
    harness h;
    h_init(&h, 16, 4, 256, 4, 128, true);
    assert_int_equal(h_add(&h, 1, (req_spec){.prompt_n = 3, .max_tokens = 30, .eos = -1}),
                     PAGODA_OK);
    h_step(&h); /* prompt of 1 done, now decoding */
    assert_int_equal(h_add(&h, 2, (req_spec){.prompt_n = 150, .max_tokens = 2, .eos = -1}),
                     PAGODA_OK);
    int chunks = 0;
    while (h.sh[2].n == 150) {
        pg_sched_output o;
        h_step_ex(&h, &o, NULL, 0);
        assert_int_equal(o.num_reqs, 2);
        assert_true(o.req_ids[0] == 1);
        assert_int_equal(o.num_scheduled_tokens[0], 1);
        assert_true(o.req_ids[1] == 2);
        assert_int_equal(o.num_tokens,
                         16 < 1 + (150 - o.num_computed_tokens[1]) ? 16 : o.num_tokens);
        chunks++;
    }
    assert_int_equal(chunks, (150 + 14) / 15);
    h_run_to_end(&h, 100);
    assert_all_free(&h);
    h_free(&h);
}

static void test_budgets_and_max_num_seqs(void **state) {
    (void)state;
    harness h;
    h_init(&h, 20, 3, 128, 4, 200, true);
    for (uint64_t id = 0; id < 10; id++)
        assert_int_equal(
            h_add(&h, id, (req_spec){.prompt_n = 5 + (int32_t)id * 3, .max_tokens = 6, .eos = -1}),
            PAGODA_OK);
    h_run_to_end(&h, 1000); /* h_step asserts both budgets every step */
    assert_int_equal(h.max_running, 3);
    for (uint64_t id = 0; id < 10; id++)
        assert_int_equal(h.sh[id].finish, PG_FINISH_LENGTH);
    assert_all_free(&h);
    h_free(&h);
}

static void test_prefix_cache_reuse_across_requests(void **state) {
    (void)state;
    harness h;
    h_init(&h, 64, 4, 128, 4, 64, true);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++)
        prompt[i] = 500 + i;
    assert_int_equal(
        h_add(&h, 1, (req_spec){.prompt_n = 40, .max_tokens = 2, .eos = -1, .prompt = prompt}),
        PAGODA_OK);
    h_run_to_end(&h, 10);
    prompt[37] = 1; /* same first 36 tokens = 9 blocks */
    assert_int_equal(
        h_add(&h, 2, (req_spec){.prompt_n = 40, .max_tokens = 2, .eos = -1, .prompt = prompt}),
        PAGODA_OK);
    pg_sched_output o;
    h_step_ex(&h, &o, NULL, 0);
    assert_int_equal(o.num_computed_tokens[0], 36);
    assert_int_equal(o.num_scheduled_tokens[0], 4);
    pg_sched_stats st;
    pg_scheduler_get_stats(h.s, &st);
    assert_true(st.kv.prefix_queries_tokens == 80);
    assert_true(st.kv.prefix_hits_tokens == 36);
    h_run_to_end(&h, 10);
    assert_all_free(&h);
    h_free(&h);
}

/* Pool of 10 usable blocks of 4 tokens; three requests grow until blocks run
 * out: the newest running one is preempted, goes to the FRONT of the queue
 * and resumes before a newer waiting request; outputs stay consistent (the
 * harness checks the recomputed tokens and the KV content). */
static void test_preemption_and_fair_resume(void **state) {
    (void)state;
    harness h;
    h_init(&h, 64, 8, 64, 4, 11, true);
    for (uint64_t id = 1; id <= 3; id++)
        assert_int_equal(h_add(&h, id, (req_spec){.prompt_n = 8, .max_tokens = 16, .eos = -1}),
                         PAGODA_OK);
    h_step(&h); /* all three admitted: 6 blocks + 3 for the 9th token later */
    assert_int_equal(h_add(&h, 4, (req_spec){.prompt_n = 4, .max_tokens = 4, .eos = -1}),
                     PAGODA_OK);
    int64_t first_preempt_step = -1;
    uint64_t victim = 0;
    while (pg_scheduler_num_unfinished(h.s) > 0) {
        pg_sched_output o;
        h_step_ex(&h, &o, NULL, 0);
        if (o.num_preempted && first_preempt_step < 0) {
            first_preempt_step = o.step;
            victim = o.preempted_ids[0];
            /* the victim is the most recently admitted running request */
            assert_true(victim == 4 || victim == 3);
        }
        assert_true(h.steps < 200);
    }
    assert_true(first_preempt_step >= 0);
    assert_true(h.preemptions >= 1);
    pg_sched_stats st;
    pg_scheduler_get_stats(h.s, &st);
    assert_true(st.num_preemptions == (uint64_t)h.preemptions);
    for (uint64_t id = 1; id <= 4; id++) {
        assert_int_equal(h.sh[id].finish, PG_FINISH_LENGTH);
        assert_int_equal(h.sh[id].n - h.sh[id].prompt_n, h.sh[id].max_tokens);
    }
    assert_all_free(&h);
    h_free(&h);
}

static void test_abort_anywhere(void **state) {
    (void)state;
    harness h;
    h_init(&h, 16, 2, 128, 4, 64, true);
    for (uint64_t id = 1; id <= 4; id++)
        assert_int_equal(h_add(&h, id, (req_spec){.prompt_n = 6, .max_tokens = 20, .eos = -1}),
                         PAGODA_OK);
    h_step(&h);     /* 1 and 2 running (max_num_seqs 2), 3 and 4 waiting */
    h_abort(&h, 4); /* waiting */
    h_abort(&h, 1); /* running, between steps */
    uint64_t in_flight[1] = {2};
    pg_sched_output o;
    h_step_ex(&h, &o, in_flight, 1); /* running and part of the step in flight */
    assert_int_equal(o.num_finished, 1);
    assert_true(o.finished_ids[0] == 1); /* only requests the runner knew */
    assert_int_equal(pg_scheduler_abort(h.s, 77), PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "77"));
    h_step_ex(&h, &o, NULL, 0);
    assert_int_equal(o.num_finished, 1);
    assert_true(o.finished_ids[0] == 2);
    h_abort(&h, 3);
    assert_int_equal(pg_scheduler_num_unfinished(h.s), 0);
    assert_all_free(&h);
    h_free(&h);
}

static void test_rejections_have_clear_messages(void **state) {
    (void)state;
    harness h;
    h_init(&h, 16, 2, 100, 4, 11, true); /* 10 usable blocks = 40 tokens */
    assert_int_equal(h_add(&h, 1, (req_spec){.prompt_n = 100, .max_tokens = 1, .eos = -1}),
                     PAGODA_ERR_LIMIT);
    assert_non_null(strstr(pg_last_error(), "request 1: prompt of 100 tokens"));
    assert_non_null(strstr(pg_last_error(), "max_model_len 100"));
    assert_int_equal(h_add(&h, 2, (req_spec){.prompt_n = 30, .max_tokens = 20, .eos = -1}),
                     PAGODA_ERR_LIMIT);
    assert_non_null(strstr(pg_last_error(), "50 tokens need 13 KV blocks"));
    assert_non_null(strstr(pg_last_error(), "only 10 blocks"));
    assert_int_equal(h_add(&h, 3, (req_spec){.prompt_n = 0, .max_tokens = 1, .eos = -1}),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(h_add(&h, 4, (req_spec){.prompt_n = 4, .max_tokens = 0, .eos = -1}),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "max_tokens 0"));
    assert_int_equal(
        h_add(&h, 5, (req_spec){.prompt_n = 4, .max_tokens = 2, .min_tokens = 3, .eos = -1}),
        PAGODA_ERR_INVALID_ARG);
    assert_int_equal(h_add(&h, 6, (req_spec){.prompt_n = 4, .max_tokens = 2, .eos = -1}),
                     PAGODA_OK);
    assert_int_equal(h_add(&h, 6, (req_spec){.prompt_n = 4, .max_tokens = 2, .eos = -1}),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "already in use"));
    assert_int_equal(pg_scheduler_num_unfinished(h.s), 1);
    h_run_to_end(&h, 10);
    assert_all_free(&h);
    h_free(&h);

    pg_sched_config c;
    pg_sched_config_default(&c);
    pg_scheduler *s = NULL;
    c.kv.num_blocks = 100;
    c.max_num_seqs = 0;
    assert_int_equal(pg_scheduler_create(&c, &s), PAGODA_ERR_INVALID_ARG);
    c.max_num_seqs = 4;
    c.max_num_batched_tokens = 3;
    assert_int_equal(pg_scheduler_create(&c, &s), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "max_num_batched_tokens 3 < max_num_seqs 4"));
    c.max_num_batched_tokens = 2048;
    c.kv.num_blocks = 1;
    assert_int_equal(pg_scheduler_create(&c, &s), PAGODA_ERR_INVALID_ARG);
    assert_null(s);
}

/* Run s to its end, every sampled token 5. */
static void run_plain(pg_scheduler *s) {
    int32_t tok[16];
    for (int guard = 0; pg_scheduler_num_unfinished(s) > 0 && guard < 100; guard++) {
        pg_sched_output o;
        assert_int_equal(pg_scheduler_schedule(s, &o), PAGODA_OK);
        for (int32_t i = 0; i < o.num_reqs; i++)
            tok[i] = 5;
        assert_int_equal(pg_scheduler_update_from_output(s, &o, tok, NULL), PAGODA_OK);
    }
    assert_int_equal(pg_scheduler_num_unfinished(s), 0);
}

/* The scheduler borrows requests (their creator frees them, after they
 * finished, were aborted or the scheduler is gone: ASan sees a double
 * free otherwise), hashes their blocks unless the creator did with its
 * block size and algorithm, and validates the fields the creator set. */
static void test_requests_are_the_creators(void **state) {
    (void)state;
    pg_sched_config c;
    pg_sched_config_default(&c);
    c.max_num_batched_tokens = 64;
    c.max_num_seqs = 4;
    c.max_model_len = 32;
    c.kv.block_size = 4;
    c.kv.num_blocks = 64;
    pg_scheduler *s;
    assert_int_equal(pg_scheduler_create(&c, &s), PAGODA_OK);
    const pg_block_hash_algo sha = PG_BLOCK_HASH_SHA256;
    int32_t prompt[10] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
    pg_request *a, *b, *d, *x;
    /* a: hashed by its creator as the scheduler would: kept as is */
    assert_int_equal(pg_request_create(1, prompt, 10, 4, 1000, &a), PAGODA_OK);
    assert_int_equal(pg_request_hash_blocks(a, 4, &sha), PAGODA_OK);
    assert_int_equal(a->num_block_hashes, 2);
    const pg_block_hash *ha = a->block_hashes;
    pg_block_hash h0 = a->block_hashes[0], h1 = a->block_hashes[1];
    assert_int_equal(pg_scheduler_add_request(s, a), PAGODA_OK);
    assert_ptr_equal(a->block_hashes, ha);
    assert_int_equal(a->max_total_tokens, 14);
    /* b: hashed with another block size: rehashed with the scheduler's */
    assert_int_equal(pg_request_create(2, prompt, 10, 40, 1000, &b), PAGODA_OK);
    assert_int_equal(pg_request_hash_blocks(b, 8, &sha), PAGODA_OK);
    assert_int_equal(b->num_block_hashes, 1);
    assert_int_equal(pg_scheduler_add_request(s, b), PAGODA_OK);
    assert_int_equal(b->block_size, 4);
    assert_int_equal(b->num_block_hashes, 2);
    assert_memory_equal(&b->block_hashes[1], &h1, sizeof h1);
    assert_int_equal(b->max_total_tokens, 32); /* made for max_model_len 1000: capped */
    /* d: not hashed by its creator, salted: hashed here, its chain differs */
    assert_int_equal(pg_request_create(3, prompt, 10, 4, 32, &d), PAGODA_OK);
    assert_int_equal(pg_request_set_salt(d, "tenant", 6), PAGODA_OK);
    assert_int_equal(pg_scheduler_add_request(s, d), PAGODA_OK);
    assert_int_equal(d->num_block_hashes, 2);
    assert_memory_not_equal(&d->block_hashes[0], &h0, sizeof h0);
    assert_int_equal(pg_request_set_salt(d, "late", 4), PAGODA_ERR_INVALID_ARG);
    /* fields the creator set wrong: rejected, the request stays its creator's */
    assert_int_equal(pg_request_create(4, prompt, 10, 4, 32, &x), PAGODA_OK);
    x->min_tokens = 5;
    assert_int_equal(pg_scheduler_add_request(s, x), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "min_tokens 5"));
    x->min_tokens = 0;
    x->probe_len = 11;
    assert_int_equal(pg_scheduler_add_request(s, x), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "probe_len 11"));
    x->probe_len = 0;
    x->num_stop_token_ids = PG_MAX_STOP_TOKENS + 1;
    assert_int_equal(pg_scheduler_add_request(s, x), PAGODA_ERR_INVALID_ARG);
    x->num_stop_token_ids = 1;
    x->stop_token_ids[0] = -2;
    assert_int_equal(pg_scheduler_add_request(s, x), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "stop token id -2"));
    x->num_stop_token_ids = 0;
    x->id = 1; /* a is live */
    assert_int_equal(pg_scheduler_add_request(s, x), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "already in use"));
    x->id = 4;
    assert_int_equal(pg_scheduler_num_unfinished(s), 3);
    /* d aborted while queued, a and b run to their ends: all still readable */
    assert_int_equal(pg_scheduler_abort(s, 3), PAGODA_OK);
    assert_int_equal(d->status, PG_REQ_FINISHED);
    assert_int_equal(d->finish_reason, PG_FINISH_ABORT);
    run_plain(s);
    assert_int_equal(a->status, PG_REQ_FINISHED);
    assert_int_equal(a->finish_reason, PG_FINISH_LENGTH);
    assert_int_equal(a->num_tokens, 14);
    assert_int_equal(b->num_tokens, 32);
    assert_int_equal(b->num_block_hashes, 8);
    /* x, now valid, is queued when the scheduler goes */
    assert_int_equal(pg_scheduler_add_request(s, x), PAGODA_OK);
    assert_null(pg_scheduler_get_request(s, 1));
    pg_scheduler_destroy(s);
    assert_int_equal(x->status, PG_REQ_WAITING);
    pg_request_destroy(a);
    pg_request_destroy(b);
    pg_request_destroy(d);
    pg_request_destroy(x);
}

static const int32_t *g_script;
static int32_t script_model(uint64_t id, int32_t pos) {
    return g_script[pos];
}

static void test_finish_conditions(void **state) {
    (void)state;
    /* outputs start at position 4: tokens 7 (eos), 9 (stop), 7, 5 ... */
    static const int32_t script[32] = {0, 0, 0, 0, 7, 9, 7, 5, 5, 5, 5, 5, 5, 5, 5, 5};
    g_script = script;
    int32_t stops[1] = {9};
    struct {
        req_spec rs;
        int32_t outputs;
        pg_finish_reason why;
    } cases[] = {
        {{.prompt_n = 4, .max_tokens = 10, .eos = 7}, 1, PG_FINISH_STOP},
        /* min_tokens 2 hides the first EOS; 9 is no stop token here; EOS again at output 3 */
        {{.prompt_n = 4, .max_tokens = 10, .eos = 7, .min_tokens = 2}, 3, PG_FINISH_STOP},
        {{.prompt_n = 4, .max_tokens = 10, .eos = 7, .ignore_eos = true, .stop = stops, .nstop = 1},
         2,
         PG_FINISH_STOP},
        {{.prompt_n = 4, .max_tokens = 10, .eos = 7, .ignore_eos = true}, 10, PG_FINISH_LENGTH},
        {{.prompt_n = 4, .max_tokens = 10, .eos = 7, .min_tokens = 3}, 3, PG_FINISH_STOP},
        {{.prompt_n = 4, .max_tokens = 30, .eos = -1}, 12, PG_FINISH_LENGTH}, /* max_model_len 16 */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        harness h;
        h_init(&h, 16, 2, 16, 4, 16, true);
        h.model = script_model;
        assert_int_equal(h_add(&h, 1, cases[k].rs), PAGODA_OK);
        h_run_to_end(&h, 40);
        assert_int_equal(h.sh[1].n - 4, cases[k].outputs);
        assert_int_equal(h.sh[1].finish, cases[k].why);
        assert_all_free(&h);
        h_free(&h);
    }
}

static void test_update_protocol_errors(void **state) {
    (void)state;
    harness h;
    h_init(&h, 16, 2, 64, 4, 16, true);
    assert_int_equal(h_add(&h, 1, (req_spec){.prompt_n = 3, .max_tokens = 3, .eos = -1}),
                     PAGODA_OK);
    pg_sched_output o, o2;
    assert_int_equal(pg_scheduler_schedule(h.s, &o), PAGODA_OK);
    assert_int_equal(pg_scheduler_schedule(h.s, &o2), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "in flight"));
    /* the harness does not see this step: play the runner's part */
    for (int32_t t = 0; t < o.num_tokens; t++)
        h.kv[o.slot_mapping[t]] = o.token_ids[t];
    int32_t bad[1] = {-1};
    assert_int_equal(pg_scheduler_update_from_output(h.s, &o, bad, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "no sampled token for request 1"));
    assert_int_equal(pg_scheduler_get_request(h.s, 1)->num_computed_tokens,
                     0); /* nothing applied */
    o2 = o;
    o2.step = 99;
    int32_t good[1] = {5};
    assert_int_equal(pg_scheduler_update_from_output(h.s, &o2, good, NULL), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_scheduler_update_from_output(h.s, &o, good, NULL), PAGODA_OK);
    assert_int_equal(pg_scheduler_update_from_output(h.s, &o, good, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "already updated"));
    h.sh[1].toks[h.sh[1].n++] = 5;
    h.sh[1].running = h.sh[1].admitted_once = true;
    h.last_first_admit = 1;
    h_run_to_end(&h, 10);
    assert_all_free(&h);
    h_free(&h);
}

/* ---- "no heap allocation per step in the steady state" ----
 * With glibc (and no sanitizer, which owns malloc), the test binary
 * interposes malloc/calloc/realloc with counting wrappers around glibc's
 * own entry points, so allocations made inside pagoda_core are counted. */
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_UNDEFINED__)
#define COUNT_MALLOC 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static volatile long g_allocs;
void *malloc(size_t n);
void *calloc(size_t n, size_t m);
void *realloc(void *p, size_t n);
void *malloc(size_t n) {
    g_allocs++;
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t m) {
    g_allocs++;
    return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n) {
    g_allocs++;
    return __libc_realloc(p, n);
}
#endif

#ifdef COUNT_MALLOC
static void test_steps_do_not_allocate(void **state) {
    (void)state;
    harness h;
    h_init(&h, 32, 8, 128, 4, 41, true); /* small pool: preemption happens too */
    for (uint64_t id = 0; id < 40; id++)
        assert_int_equal(h_add(&h, id,
                               (req_spec){.prompt_n = 5 + (int32_t)(id * 7) % 40,
                                          .max_tokens = 5 + (int32_t)(id * 3) % 30,
                                          .eos = -1}),
                         PAGODA_OK);
    long allocs = 0;
    int64_t steps = 0;
    while (pg_scheduler_num_unfinished(h.s) > 0) {
        pg_sched_output o;
        long before = g_allocs;
        assert_int_equal(pg_scheduler_schedule(h.s, &o), PAGODA_OK);
        allocs += g_allocs - before;
        int32_t sampled[8];
        for (int32_t i = 0; i < o.num_reqs; i++)
            sampled[i] = model_hash(o.req_ids[i], o.seq_lens[i]);
        if (steps % 7 == 3 && o.num_reqs > 1) { /* an abort in flight and one between steps */
            before = g_allocs;
            assert_int_equal(pg_scheduler_abort(h.s, o.req_ids[1]), PAGODA_OK);
            allocs += g_allocs - before;
        }
        pg_step_result res;
        before = g_allocs;
        assert_int_equal(pg_scheduler_update_from_output(h.s, &o, sampled, &res), PAGODA_OK);
        allocs += g_allocs - before;
        steps++;
        assert_true(steps < 5000);
    }
    pg_sched_stats st;
    pg_scheduler_get_stats(h.s, &st);
    print_message("no-alloc: %lld steps, %llu preemptions, %ld allocations\n", (long long)steps,
                  (unsigned long long)st.num_preemptions, allocs);
    assert_true(st.num_preemptions > 0);
    assert_int_equal(allocs, 0);
    /* the counter does see allocations made inside pagoda_core */
    long before = g_allocs;
    assert_int_equal(h_add(&h, 999, (req_spec){.prompt_n = 4, .max_tokens = 1, .eos = -1}),
                     PAGODA_OK);
    assert_true(g_allocs > before);
    h_free(&h);
}
#endif

/* No starvation: a long request arriving into a steady stream of short ones
 * (which keep the small pool busy and get preempted by it) finishes within a
 * bound, and so does every short one. */
static void test_no_starvation_under_steady_load(void **state) {
    (void)state;
    harness h;
    h_init(&h, 16, 4, 64, 4, 17, true); /* 16 usable blocks = 64 tokens */
    uint64_t id = 0, long_id = 0;
    for (int step = 0; step < 600; step++) {
        if (step % 2 == 0)
            assert_int_equal(
                h_add(&h, id++, (req_spec){.prompt_n = 4 + step % 5, .max_tokens = 6, .eos = -1}),
                PAGODA_OK);
        if (step == 10) {
            long_id = id++;
            assert_int_equal(
                h_add(&h, long_id, (req_spec){.prompt_n = 30, .max_tokens = 30, .eos = -1}),
                PAGODA_OK);
        }
        h_step(&h);
    }
    h_run_to_end(&h, 1000);
    int64_t worst = 0;
    for (uint64_t i = 0; i < id; i++) {
        assert_int_equal(h.sh[i].finish, PG_FINISH_LENGTH);
        int64_t lat = h.sh[i].finish_step - h.sh[i].arrive_step;
        if (i != long_id && lat > worst) worst = lat;
    }
    int64_t long_lat = h.sh[long_id].finish_step - h.sh[long_id].arrive_step;
    print_message("starvation: long request %lld steps, worst short %lld steps, %lld preemptions\n",
                  (long long)long_lat, (long long)worst, (long long)h.preemptions);
    /* its own work is 60 tokens (>= 1 token per step once admitted); the queue
     * ahead of it at arrival is a few short requests */
    assert_true(long_lat <= 150);
    assert_true(worst <= 150);
    assert_all_free(&h);
    h_free(&h);
}

/* 1000 random requests (random lengths, shared prefixes, random EOS, random
 * aborts incl. in flight) through a small pool that forces preemption.
 * Invariants are checked every step by the harness; at the end every block
 * is free. */
static void random_stress(const pg_kv_cache_spec *groups, int32_t num_groups, int32_t num_blocks,
                          uint64_t total, bool expect_hits) {
    harness h;
    h_init_groups(&h, 48, 8, 96, 4, num_blocks, true, groups, num_groups);
    srand(20261130);
    int32_t prefixes[3][32];
    for (int p = 0; p < 3; p++)
        for (int i = 0; i < 32; i++)
            prefixes[p][i] = 100 * p + i;
    uint64_t next_id = 0;
    int64_t aborted = 0;
    pg_kvm *kvm = pg_scheduler_kvm(h.s);
    while (next_id < total || pg_scheduler_num_unfinished(h.s) > 0) {
        /* arrivals */
        int arrivals = next_id < total ? rand() % 3 : 0;
        for (int a = 0; a < arrivals && next_id < total; a++) {
            int32_t prompt[MAX_LEN];
            int32_t n = 1 + rand() % 60;
            int p = rand() % 4; /* 3 of 4 requests share a system prompt */
            for (int32_t i = 0; i < n; i++)
                prompt[i] = (p < 3 && i < 32) ? prefixes[p][i] : 2000 + rand() % 1000;
            req_spec rs = {.prompt_n = n,
                           .max_tokens = 1 + rand() % 40,
                           .eos = (rand() % 2) ? 999 - rand() % 20 : -1,
                           .min_tokens = rand() % 3 == 0 ? 1 : 0,
                           .prompt = prompt};
            if (rs.min_tokens > rs.max_tokens) rs.min_tokens = rs.max_tokens;
            pagoda_status st = h_add(&h, next_id, rs);
            int32_t total_len = n + rs.max_tokens < 96 ? n + rs.max_tokens : 96;
            if (pg_kvm_blocks_for_tokens(kvm, total_len) > num_blocks - 1)
                assert_int_equal(st, PAGODA_ERR_LIMIT);
            else
                assert_int_equal(st, PAGODA_OK);
            next_id++;
        }
        /* random aborts between steps and in flight */
        uint64_t in_flight[2];
        int32_t nf = 0;
        if (rand() % 50 == 0 && next_id > 0) {
            uint64_t id = (uint64_t)rand() % next_id;
            if (h.sh[id].live) {
                if (rand() % 2) {
                    h_abort(&h, id);
                } else {
                    in_flight[nf++] = id;
                }
                aborted++;
            }
        }
        if (pg_scheduler_num_unfinished(h.s) == 0) continue;
        h_step_ex(&h, NULL, in_flight, nf);
        assert_true(h.steps < 100000);
    }
    /* every request reached an end; none starved */
    int64_t worst_wait = 0;
    for (uint64_t id = 0; id < total; id++) {
        shadow *x = &h.sh[id];
        if (x->prompt_n == 0) continue; /* rejected */
        assert_false(x->live);
        assert_true(x->finish != PG_FINISH_NONE);
        if (x->finish_step - x->arrive_step > worst_wait)
            worst_wait = x->finish_step - x->arrive_step;
    }
    print_message("stress: %lld steps, %lld preemptions, %lld aborts, worst latency %lld steps, "
                  "%lld decodes with drafts (%lld with a rejection)\n",
                  (long long)h.steps, (long long)h.preemptions, (long long)aborted,
                  (long long)worst_wait, (long long)h.spec_steps, (long long)h.spec_rejected);
    if (h.cfg.spec.num_speculative_tokens > 0) assert_true(h.spec_rejected > 100);
    assert_true(h.preemptions > 0); /* the pool is small enough to force it */
    pg_sched_stats st;
    pg_scheduler_get_stats(h.s, &st);
    if (expect_hits) {
        assert_true(st.kv.prefix_hits_tokens > 0);
        assert_true(st.kv.evictions > 0);
    } else {
        assert_true(st.kv.prefix_hits_tokens == 0);
    }
    assert_all_free(&h);
    h_free(&h);
}

static void test_random_stress(void **state) {
    (void)state;
    random_stress(NULL, 0, 41, 1000, true); /* 40 usable blocks = 160 tokens */
}

/* Hybrid models' groups: full attention + sliding window (window 10
 * tokens), then a recurrent-state group, all from one pool. */
static const pg_kv_cache_spec HYBRID_GROUPS[3] = {
    {.kind = PG_KV_FULL_ATTENTION,
     .block_size = 4,
     .num_layers = 1,
     .num_kv_heads = 1,
     .head_size = 8,
     .dtype_bytes = 2},
    {.kind = PG_KV_SLIDING_WINDOW,
     .block_size = 4,
     .num_layers = 1,
     .num_kv_heads = 1,
     .head_size = 8,
     .dtype_bytes = 2,
     .u.sliding.window = 10},
    {.kind = PG_KV_MAMBA, .block_size = 4, .num_layers = 1, .u.mamba.state_bytes = 128},
};

/* The same with hybrid models: full + sliding window, then also the
 * recurrent-state group. */
static void test_random_stress_hybrid_groups(void **state) {
    (void)state;
    const pg_kv_cache_spec *g = HYBRID_GROUPS;
    random_stress(g, 2, 81, 400, true);
    /* a recurrent-state group cannot reuse prefixes: no hits for the model */
    random_stress(g, 3, 81, 300, false);
}

/* Speculative decoding: a proposer that guesses the model's next tokens
 * right 3 times in 4 (a wrong guess is a token the model never samples). */
static int32_t guess_proposer(void *ctx, const pg_request *r, int32_t k, int32_t *out) {
    (void)ctx;
    int32_t n = rand() % (k + 1);
    for (int32_t j = 0; j < n; j++)
        out[j] = rand() % 4 ? model_hash(r->id, r->num_tokens + j) : 5000 + rand() % 100;
    return n;
}

/* The random stress workload (preemption, shared prefixes, EOS, aborts in
 * flight) with draft tokens on every decode the adaptive budget allows:
 * the harness checks every step that drafts are scheduled after the last
 * token, that attention reads the accepted tokens where drafts were
 * rejected (their slots rolled back and rewritten), that blocks past the
 * accepted length are freed, and that prefix-cache hits (preempted
 * requests resuming, shared prompts) only ever bring accepted tokens. */
static void test_random_stress_speculative(void **state) {
    (void)state;
    g_spec = (pg_spec_config){
        .num_speculative_tokens = 4, .max_batch_tokens = 20, .propose = guess_proposer};
    random_stress(NULL, 0, 41, 600, true);
    random_stress(HYBRID_GROUPS, 2, 81, 300, true); /* full + sliding window */
    g_spec = (pg_spec_config){0};
}

/* The adaptive rule and the n-gram proposer: a request whose tokens repeat
 * gets drafts copied from its own history while the step is small; with
 * more decodes than max_batch_tokens - 1 allows, fewer drafts, and none at
 * disable_by_batch_size running requests. Counters follow vLLM's. */
static int32_t cycle_model(uint64_t id, int32_t pos) {
    return 10 + (int32_t)(id % 3) + pos % 5; /* a 5-token cycle: n-gram guesses right */
}

static void test_speculative_ngram_and_adaptive_budget(void **state) {
    (void)state;
    g_spec = (pg_spec_config){.num_speculative_tokens = 3,
                              .prompt_lookup_min = 2,
                              .prompt_lookup_max = 4,
                              .max_batch_tokens = 8,
                              .disable_by_batch_size = 4};
    harness h;
    h_init(&h, 64, 8, 128, 4, 200, true);
    h.model = cycle_model;
    int32_t prompt[10];
    for (int32_t i = 0; i < 10; i++)
        prompt[i] = cycle_model(0, i);
    assert_int_equal(
        h_add(&h, 0, (req_spec){.prompt_n = 10, .max_tokens = 40, .eos = -1, .prompt = prompt}),
        PAGODA_OK);
    pg_sched_output o;
    h_step_ex(&h, &o, NULL, 0); /* prefill */
    assert_int_equal(o.num_spec_total, 0);
    h_step_ex(&h, &o, NULL, 0); /* one decode: 3 drafts copied from the cycle, all accepted */
    assert_int_equal(o.num_spec_tokens[0], 3);
    assert_int_equal(o.num_tokens, 4);
    pg_sched_stats st;
    pg_scheduler_get_stats(h.s, &st);
    assert_int_equal(st.spec.num_drafts, 1);
    assert_int_equal(st.spec.num_draft_tokens, 3);
    assert_int_equal(st.spec.num_accepted_tokens, 3);
    assert_int_equal(st.spec.accepted_per_pos[2], 1);
    /* three more requests: 4 decodes leave 8 - 4 = 4 draft tokens */
    for (uint64_t id = 1; id <= 3; id++) {
        int32_t p2[10];
        for (int32_t i = 0; i < 10; i++)
            p2[i] = cycle_model(id, i);
        assert_int_equal(
            h_add(&h, id, (req_spec){.prompt_n = 10, .max_tokens = 40, .eos = -1, .prompt = p2}),
            PAGODA_OK);
    }
    h_step_ex(&h, &o, NULL, 0); /* request 0 decodes (3 drafts), 1..3 prefill */
    h_step_ex(&h, &o, NULL, 0); /* 4 running = disable_by_batch_size: no drafts */
    assert_int_equal(o.num_reqs, 4);
    assert_int_equal(o.num_spec_total, 0);
    h_abort(&h, 3);
    h_step_ex(&h, &o, NULL, 0); /* 3 decodes: 8 - 3 = 5 drafts, in admission order */
    assert_int_equal(o.num_spec_total, 5);
    assert_int_equal(o.num_spec_tokens[0], 3);
    assert_int_equal(o.num_spec_tokens[1], 2);
    assert_int_equal(o.num_spec_tokens[2], 0);
    h_run_to_end(&h, 100);
    for (uint64_t id = 0; id < 3; id++) /* the model's tokens, whatever was drafted */
        for (int32_t p = 0; p < 50; p++)
            assert_int_equal(h.sh[id].toks[p], cycle_model(id, p));
    assert_all_free(&h);
    h_free(&h);
    g_spec = (pg_spec_config){0};
}

/* The prepare hook (the draft model's batching point): once per step that
 * may carry drafts, before any propose, with the decodes in admission order
 * and each one's cap under the step's draft budget; not called while no
 * draft may be given. */
static uint64_t g_prep_ids[8];
static int32_t g_prep_k[8], g_prep_n, g_prep_calls;
static pagoda_status record_prepare(void *ctx, pg_request *const *reqs, const int32_t *k,
                                    int32_t n) {
    (void)ctx;
    g_prep_calls++;
    g_prep_n = n;
    for (int32_t i = 0; i < n && i < 8; i++) {
        g_prep_ids[i] = reqs[i]->id;
        g_prep_k[i] = k[i];
    }
    return PAGODA_OK;
}

static void test_speculative_prepare_hook(void **state) {
    (void)state;
    g_spec = (pg_spec_config){.num_speculative_tokens = 3,
                              .prompt_lookup_min = 2,
                              .prompt_lookup_max = 4,
                              .max_batch_tokens = 8,
                              .disable_by_batch_size = 4,
                              .prepare = record_prepare};
    g_prep_calls = 0;
    harness h;
    h_init(&h, 64, 8, 128, 4, 200, true);
    h.model = cycle_model;
    for (uint64_t id = 0; id < 3; id++) {
        int32_t p[10];
        for (int32_t i = 0; i < 10; i++)
            p[i] = cycle_model(id, i);
        assert_int_equal(
            h_add(&h, id, (req_spec){.prompt_n = 10, .max_tokens = 40, .eos = -1, .prompt = p}),
            PAGODA_OK);
    }
    pg_sched_output o;
    h_step_ex(&h, &o, NULL, 0); /* prefills: no decode, no call */
    assert_int_equal(g_prep_calls, 0);
    h_step_ex(&h, &o, NULL, 0); /* 3 decodes: 8 - 3 = 5 drafts: 3, then 2 */
    assert_int_equal(g_prep_calls, 1);
    assert_int_equal(g_prep_n, 2);
    assert_int_equal(g_prep_ids[0], 0);
    assert_int_equal(g_prep_k[0], 3);
    assert_int_equal(g_prep_ids[1], 1);
    assert_int_equal(g_prep_k[1], 2);
    assert_int_equal(o.num_spec_tokens[0], 3);
    assert_int_equal(o.num_spec_tokens[1], 2);
    assert_int_equal(o.num_spec_tokens[2], 0);
    int32_t p[10];
    for (int32_t i = 0; i < 10; i++)
        p[i] = cycle_model(3, i);
    assert_int_equal(
        h_add(&h, 3, (req_spec){.prompt_n = 10, .max_tokens = 40, .eos = -1, .prompt = p}),
        PAGODA_OK);
    h_step_ex(&h, &o, NULL, 0); /* 3 decodes + a prefill */
    assert_int_equal(g_prep_calls, 2);
    h_step_ex(&h, &o, NULL, 0); /* 4 running = disable_by_batch_size: no call */
    assert_int_equal(g_prep_calls, 2);
    assert_int_equal(o.num_spec_total, 0);
    h_run_to_end(&h, 100);
    assert_all_free(&h);
    h_free(&h);
    g_spec = (pg_spec_config){0};
}

/* Acceptance-adaptive K (scheduler.h): a proposer whose drafts the model
 * never samples (5000 + ...) loses its drafts within a few steps and then
 * pays only for rare probes whose waits double; once it guesses right
 * again, a probe is accepted and the cap climbs back to K. Without the
 * rule (min_draft_gain < 0) every decode gets K drafts. The tokens are the
 * model's throughout. */
static bool g_guess_right;
static int32_t switch_proposer(void *ctx, const pg_request *r, int32_t k, int32_t *out) {
    (void)ctx;
    for (int32_t j = 0; j < k; j++)
        out[j] = g_guess_right ? cycle_model(r->id, r->num_tokens + j) : 5000 + j;
    return k;
}

/* One decode step of the single request of h: its draft count. */
static int32_t adaptive_step(harness *h) {
    pg_sched_output o;
    h_step_ex(h, &o, NULL, 0);
    assert_int_equal(o.num_reqs, 1);
    return o.num_spec_tokens[0];
}

static void test_speculative_adaptive_k(void **state) {
    (void)state;
    for (int off = 0; off < 2; off++) {
        g_spec = (pg_spec_config){.num_speculative_tokens = 4,
                                  .max_batch_tokens = 8,
                                  .propose = switch_proposer,
                                  .min_draft_gain = off ? -1.0f : 0.0f};
        g_guess_right = false;
        harness h;
        h_init(&h, 64, 8, 256, 4, 200, true);
        h.model = cycle_model;
        int32_t prompt[10];
        for (int32_t i = 0; i < 10; i++)
            prompt[i] = cycle_model(0, i);
        assert_int_equal(
            h_add(&h, 0,
                  (req_spec){.prompt_n = 10, .max_tokens = 200, .eos = -1, .prompt = prompt}),
            PAGODA_OK);
        pg_sched_output o;
        h_step_ex(&h, &o, NULL, 0); /* prefill */
        /* never agreeing: K at first, then fewer; the first 12 steps pay
         * less than half of 12 K drafts, the next 60 at most 6 probes */
        int32_t drafts = 0, first = adaptive_step(&h);
        assert_int_equal(first, 4);
        for (int i = 1; i < 12; i++)
            drafts += adaptive_step(&h);
        if (off) {
            assert_int_equal(drafts, 11 * 4);
        } else {
            assert_true(drafts < 11 * 4 / 2);
        }
        drafts = 0;
        for (int i = 0; i < 60; i++)
            drafts += adaptive_step(&h);
        print_message("adaptive K %s: %d drafts in 60 never-agreeing steps\n", off ? "off" : "on",
                      drafts);
        if (off) {
            assert_int_equal(drafts, 60 * 4);
        } else {
            assert_true(drafts >= 1 && drafts <= 6);
        }
        /* agreeing again: within 70 steps (a probe's wait is at most
         * PG_SPEC_MAX_WAIT) the request is back to 4 drafts a step */
        g_guess_right = true;
        int i = 0, d = 0;
        for (; i < 70 && d < 4; i++)
            d = adaptive_step(&h);
        assert_int_equal(d, 4);
        if (off) assert_int_equal(i, 1);
        h_run_to_end(&h, 200);
        for (int32_t p = 0; p < 210; p++) /* the model's tokens, whatever was drafted */
            assert_int_equal(h.sh[0].toks[p], cycle_model(0, p));
        assert_all_free(&h);
        h_free(&h);
    }
    g_spec = (pg_spec_config){0};
}

/* Encoder-decoder requests: encoder pieces cost encoder_step_tokens of the
 * budget each (at least one piece per step), at most max_num_encoding
 * requests encode at once, the decoder prompt follows in the step that
 * finishes the encoder, the cross-attention table is the encoder's blocks,
 * aborts while encoding and preemption free the encoder slot (a preempted
 * request encodes again). */
static pg_request *g_enc_reqs[8]; /* enc_add's requests by id, freed by enc_free */

static pagoda_status enc_add(pg_scheduler *s, uint64_t id, int32_t steps) {
    int32_t prompt[4] = {1, 2, 3, 4};
    pg_request *r;
    assert_true(id < 8 && !g_enc_reqs[id]);
    assert_int_equal(pg_request_create(id, prompt, 4, 3, 16, &r), PAGODA_OK);
    r->encoder_steps = steps;
    pagoda_status st = pg_scheduler_add_request(s, r);
    if (st)
        pg_request_destroy(r);
    else
        g_enc_reqs[id] = r;
    return st;
}

/* After the scheduler is gone: free enc_add's requests. */
static void enc_free(void) {
    for (int i = 0; i < 8; i++) {
        pg_request_destroy(g_enc_reqs[i]);
        g_enc_reqs[i] = NULL;
    }
}

static void enc_update(pg_scheduler *s, const pg_sched_output *o) {
    int32_t tok[16];
    for (int32_t i = 0; i < o->num_reqs; i++)
        tok[i] = 7;
    assert_int_equal(pg_scheduler_update_from_output(s, o, tok, NULL), PAGODA_OK);
    assert_int_equal(pg_scheduler_check(s), PAGODA_OK);
}

static void test_encoder_pieces(void **state) {
    (void)state;
    pg_sched_config c;
    pg_sched_config_default(&c);
    c.max_num_batched_tokens = 250;
    c.max_num_seqs = 8;
    c.max_model_len = 16;
    c.encoder_step_tokens = 100;
    c.max_num_encoder_tokens = 250;
    c.max_num_encoding = 2;
    c.kv.block_size = 4;
    c.kv.num_blocks = 64;
    c.kv.num_groups = 2;
    c.kv.groups[0] = (pg_kv_cache_spec){.kind = PG_KV_FULL_ATTENTION,
                                        .block_size = 4,
                                        .num_layers = 1,
                                        .num_kv_heads = 1,
                                        .head_size = 8,
                                        .dtype_bytes = 2};
    c.kv.groups[1] = c.kv.groups[0];
    c.kv.groups[1].kind = PG_KV_CROSS_ATTENTION;
    c.kv.groups[1].u.cross.max_encoder_len = 20; /* 5 blocks */
    pg_scheduler *s;
    assert_int_equal(pg_scheduler_create(&c, &s), PAGODA_OK);
    assert_int_equal(enc_add(s, 1, 3), PAGODA_OK);
    assert_int_equal(enc_add(s, 2, 3), PAGODA_OK);
    assert_int_equal(enc_add(s, 3, 3), PAGODA_OK);
    pg_sched_output o;
    /* step 0: request 1 admitted, 2 pieces (budget 250 / 100); request 2
     * admitted with the piece the budget still allows... none left: it waits
     * with its blocks; request 3 has no encoder slot */
    assert_int_equal(pg_scheduler_schedule(s, &o), PAGODA_OK);
    assert_int_equal(o.num_reqs, 0);
    assert_int_equal(o.enc_cross_group, 1);
    assert_int_equal(o.num_enc, 1);
    assert_int_equal(o.enc_req_ids[0], 1);
    assert_int_equal(o.enc_step_begin[0], 0);
    assert_int_equal(o.enc_num_steps[0], 2);
    assert_false(o.enc_finishes[0]);
    int32_t nb;
    const int32_t *x = pg_kvm_block_table(pg_scheduler_kvm(s), 1, pg_scheduler_get_request(s, 1),
                                          &nb);
    assert_int_equal(nb, 5);
    assert_ptr_equal(o.enc_cross_tables[0], x);
    enc_update(s, &o);
    /* step 1: request 1's last piece, then its 4 prompt tokens (from the
     * decoder's budget); request 2 gets the 1 piece the encoder budget
     * (250 - 100) allows */
    assert_int_equal(pg_scheduler_schedule(s, &o), PAGODA_OK);
    assert_int_equal(o.num_enc, 2);
    assert_int_equal(o.enc_req_ids[0], 1);
    assert_int_equal(o.enc_step_begin[0], 2);
    assert_int_equal(o.enc_num_steps[0], 1);
    assert_true(o.enc_finishes[0]);
    assert_int_equal(o.enc_req_ids[1], 2);
    assert_int_equal(o.enc_num_steps[1], 1);
    assert_int_equal(o.num_reqs, 1);
    assert_int_equal(o.req_ids[0], 1);
    assert_int_equal(o.num_scheduled_tokens[0], 4);
    assert_true(o.samples[0]);
    assert_int_equal(o.slot_mapping[o.token_stride], -1); /* cross group: no slots */
    assert_int_equal(o.num_blocks[o.req_stride], 5);
    enc_update(s, &o);
    /* step 2: 1 decodes; 2 finishes (2 pieces) with its prompt; 3 has a
     * slot (1's was freed) but no encoder budget left: it waits */
    assert_int_equal(pg_scheduler_schedule(s, &o), PAGODA_OK);
    assert_int_equal(o.req_ids[0], 1);
    assert_int_equal(o.num_scheduled_tokens[0], 1);
    assert_int_equal(o.enc_req_ids[0], 2);
    assert_int_equal(o.enc_num_steps[0], 2);
    assert_true(o.enc_finishes[0]);
    assert_int_equal(o.num_enc, 1);
    assert_int_equal(o.num_reqs, 2);
    /* abort 3 while encoding (if it was scheduled, it ends at the update) */
    assert_int_equal(pg_scheduler_abort(s, 3), PAGODA_OK);
    enc_update(s, &o);
    assert_null(pg_scheduler_get_request(s, 3));
    /* a budget below one piece still runs one per step */
    assert_int_equal(enc_add(s, 4, 2), PAGODA_OK);
    int guard = 0;
    while (pg_scheduler_num_unfinished(s) > 0 && guard++ < 50) {
        assert_int_equal(pg_scheduler_schedule(s, &o), PAGODA_OK);
        assert_true(o.num_enc <= 2);
        enc_update(s, &o);
    }
    assert_int_equal(pg_scheduler_num_unfinished(s), 0);
    pg_sched_stats st;
    pg_scheduler_get_stats(s, &st);
    assert_int_equal(st.kv.num_free_blocks, 63);
    /* a request with encoder steps on a scheduler without a cross group */
    pg_scheduler_destroy(s);
    enc_free();
    c.kv.num_groups = 1;
    assert_int_equal(pg_scheduler_create(&c, &s), PAGODA_OK);
    assert_int_equal(enc_add(s, 1, 3), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "cross-attention"));
    pg_scheduler_destroy(s);
    enc_free();
}

int main(void) {
    pg_log_set_level(PG_LOG_ERROR); /* small test pools warn about max_model_len */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_prefill_then_decode),
        cmocka_unit_test(test_prefill_chunks_on_the_grid),
        cmocka_unit_test(test_decodes_flow_during_long_prefill),
        cmocka_unit_test(test_budgets_and_max_num_seqs),
        cmocka_unit_test(test_prefix_cache_reuse_across_requests),
        cmocka_unit_test(test_preemption_and_fair_resume),
        cmocka_unit_test(test_abort_anywhere),
        cmocka_unit_test(test_rejections_have_clear_messages),
        cmocka_unit_test(test_finish_conditions),
        cmocka_unit_test(test_requests_are_the_creators),
        cmocka_unit_test(test_update_protocol_errors),
#ifdef COUNT_MALLOC /* glibc malloc hooks; not under the sanitizers' allocator */
        cmocka_unit_test(test_steps_do_not_allocate),
#endif
        cmocka_unit_test(test_no_starvation_under_steady_load),
        cmocka_unit_test(test_random_stress),
        cmocka_unit_test(test_encoder_pieces),
        cmocka_unit_test(test_random_stress_hybrid_groups),
        cmocka_unit_test(test_random_stress_speculative),
        cmocka_unit_test(test_speculative_ngram_and_adaptive_budget),
        cmocka_unit_test(test_speculative_prepare_hook),
        cmocka_unit_test(test_speculative_adaptive_k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
