/* The model interface end to end with toy architectures registered by the
 * test (model/arch.h): a hybrid with a full-attention layer, a
 * sliding-window layer and a recurrent-state layer, and one without the
 * state layer. The engine builds its KV cache groups from the layers'
 * specs, the runner allocates memory per group, and the toy forward reads
 * back what earlier steps stored, so a wrong block table, slot, window or
 * state slot changes the output or fails the step:
 *   full layer:    K[p] = (token, position) stored at the slot mapping; each
 *                  query sums the tokens at positions 0..p through its block
 *                  table, checking every stored position;
 *   sliding layer: the same over (p - W, p] (older blocks may be freed);
 *   state layer:   per request {sum of tokens, count}, updated token by
 *                  token; the count must equal the position (the runner
 *                  zeroes the state when a request is (re)admitted).
 * The next token is (full + 3 window + position + 1) mod V, which the test
 * computes on its own. Checked: outputs under batching, prefix-cache hits
 * (window model) and preemption (tiny KV cache), blocks all returned, the
 * runner's per-group plan and memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "base/alloc.h"
#include "engine/runner.h"
#include "model/arch.h"
#include "model/safetensors.h"
#include "pagoda.h"

enum { V = 512, H = 16, HD = 16, WINDOW = 32, MAX_STEP = 4096, MAX_SEQS = 256 };

typedef struct toy_state {
    int64_t sum, count;
} toy_state;

typedef struct toy {
    pg_model base;
} toy;

typedef struct toy_ws {
    int32_t max_tokens, max_seqs;
    float *kv_rows; /* [max_tokens][HD]: what each token stores */
    int64_t *full, *win;
} toy_ws;

static pagoda_status toy_ws_create(const pg_model *m, const pg_step_limits *lim, void **out) {
    (void)m;
    toy_ws *w = calloc(1, sizeof *w);
    if (!w) return PAGODA_ERR_NOMEM;
    w->max_tokens = lim->max_tokens;
    w->max_seqs = lim->max_seqs;
    w->kv_rows = calloc((size_t)lim->max_tokens * HD, sizeof(float));
    w->full = calloc((size_t)lim->max_tokens, sizeof(int64_t));
    w->win = calloc((size_t)lim->max_tokens, sizeof(int64_t));
    *out = w;
    return PAGODA_OK;
}

static void toy_ws_free(void *p) {
    toy_ws *w = p;
    if (!w) return;
    free(w->kv_rows);
    free(w->full);
    free(w->win);
    free(w);
}

static size_t toy_ws_bytes(const void *p) {
    const toy_ws *w = p;
    return (size_t)w->max_tokens * (HD * 4 + 16);
}

static size_t toy_weight_bytes(const pg_model *m) {
    (void)m;
    return 0;
}

/* Sum of the tokens stored at positions [first, p] of sequence i. */
static pagoda_status read_back(const pg_layer_cache *lc, int32_t i, int32_t first, int32_t p,
                               int64_t *sum) {
    const pg_paged_kv *kv = lc->kv;
    *sum = 0;
    for (int32_t q = first; q <= p; q++) {
        int32_t block = lc->block_tables[i][q / kv->block_size], off = q % kv->block_size;
        if (block <= 0)
            return pg_error(PAGODA_ERR_INTERNAL, "toy: position %d of request %d has no block", q,
                            i);
        const float *k = kv->k;
        float tok = k[pg_paged_kv_k_index(kv, block, 0, off, 0)];
        float pos = k[pg_paged_kv_k_index(kv, block, 0, off, 1)];
        if ((int32_t)pos != q)
            return pg_error(PAGODA_ERR_INTERNAL, "toy: block %d slot %d holds position %d, not %d",
                            block, off, (int32_t)pos, q);
        *sum += (int64_t)tok;
    }
    return PAGODA_OK;
}

static pagoda_status toy_forward(const pg_model *m, void *wsp, const pg_batch *b, float *logits) {
    toy_ws *w = wsp;
    pagoda_status st;
    for (int32_t t = 0; t < b->num_tokens; t++) {
        float *row = w->kv_rows + (size_t)t * HD;
        memset(row, 0, HD * sizeof(float));
        row[0] = (float)b->token_ids[t];
        row[1] = (float)b->positions[t];
    }
    for (int32_t l = 0; l < m->num_layers; l++) {
        const pg_layer_cache *lc = &b->layers[l];
        const pg_layer_cache_spec *spec = &m->cache[l];
        if (spec->kind == PG_LAYER_CACHE_STATE) {
            for (int32_t i = 0; i < b->num_seqs; i++) {
                toy_state *s = lc->states[i];
                for (int32_t t = b->query_start_loc[i]; t < b->query_start_loc[i + 1]; t++) {
                    if (s->count != b->positions[t])
                        return pg_error(PAGODA_ERR_INTERNAL,
                                        "toy: state of request %d has %lld tokens at position %d",
                                        i, (long long)s->count, b->positions[t]);
                    s->sum += b->token_ids[t];
                    s->count++;
                    /* a prefix-cache snapshot after snap_len[i] of this step's tokens */
                    if (lc->snap_len && lc->snap_len[i] == t - b->query_start_loc[i] + 1)
                        memcpy(lc->snap_states[i], s, sizeof *s);
                }
            }
            continue;
        }
        if ((st = pg_rope_kv_store(NULL, b->num_tokens, b->positions, lc->slot_mapping, w->kv_rows,
                                   HD, 1, w->kv_rows, HD, w->kv_rows, HD, lc->kv)))
            return st;
        for (int32_t i = 0; i < b->num_seqs; i++)
            for (int32_t t = b->query_start_loc[i]; t < b->query_start_loc[i + 1]; t++) {
                int32_t p = b->positions[t];
                bool sliding = spec->kind == PG_LAYER_CACHE_SLIDING;
                int32_t first = sliding && p - spec->window + 1 > 0 ? p - spec->window + 1 : 0;
                if ((st = read_back(lc, i, first, p, sliding ? &w->win[t] : &w->full[t])))
                    return st;
            }
    }
    for (int32_t r = 0; r < b->num_logits; r++) {
        int32_t t = b->logit_rows[r];
        int64_t next = (w->full[t] + 3 * w->win[t] + b->positions[t] + 1) % V;
        float *row = logits + (size_t)r * V;
        for (int32_t v = 0; v < V; v++)
            row[v] = v == next ? 10.0f : 0.0f;
    }
    return PAGODA_OK;
}

static void toy_free(pg_model *m) {
    pg_model_base_release(m);
    free(m);
}

static const pg_model_ops TOY_OPS = {
    .free = toy_free,
    .weight_bytes_per_step = toy_weight_bytes,
    .workspace_create = toy_ws_create,
    .workspace_free = toy_ws_free,
    .workspace_bytes = toy_ws_bytes,
    .forward = toy_forward,
};

static pagoda_status toy_create(const pg_model_source *src, const pg_model_options *o,
                                bool with_state, pg_model **out) {
    toy *t = calloc(1, sizeof *t);
    if (!t) return PAGODA_ERR_NOMEM;
    pagoda_status st = pg_model_base_init(&t->base, &TOY_OPS, src, o, with_state ? 3 : 2);
    if (st) {
        toy_free(&t->base);
        return st;
    }
    t->base.cache[0] =
        (pg_layer_cache_spec){.kind = PG_LAYER_CACHE_FULL, .num_kv_heads = 1, .head_dim = HD};
    t->base.cache[1] = (pg_layer_cache_spec){
        .kind = PG_LAYER_CACHE_SLIDING, .num_kv_heads = 1, .head_dim = HD, .window = WINDOW};
    if (with_state)
        t->base.cache[2] =
            (pg_layer_cache_spec){.kind = PG_LAYER_CACHE_STATE, .state_bytes = sizeof(toy_state)};
    *out = &t->base;
    return PAGODA_OK;
}

static pagoda_status hybrid_create(const pg_model_source *src, const pg_model_options *o,
                                   pg_model **out) {
    return toy_create(src, o, true, out);
}
static pagoda_status window_create(const pg_model_source *src, const pg_model_options *o,
                                   pg_model **out) {
    return toy_create(src, o, false, out);
}

static const pg_arch_tensor TOY_TENSORS[] = {
    {"model.embed_tokens.weight", "token_embd.weight", PG_DIM_VOCAB, PG_DIM_HIDDEN, PG_REQ_ALWAYS,
     false, false, false},
    {0},
};
static const char *const HYBRID_HF[] = {"ToyHybridForCausalLM", NULL};
static const char *const WINDOW_HF[] = {"ToyWindowForCausalLM", NULL};
static const char *const NO_TYPES[] = {NULL};
static const pg_arch TOY_HYBRID = {.name = "toy_hybrid",
                                   .hf_architectures = HYBRID_HF,
                                   .hf_model_types = NO_TYPES,
                                   .tensors = TOY_TENSORS,
                                   .create = hybrid_create};
static const pg_arch TOY_WINDOW = {.name = "toy_window",
                                   .hf_architectures = WINDOW_HF,
                                   .hf_model_types = NO_TYPES,
                                   .tensors = TOY_TENSORS,
                                   .create = window_create};

/* A model directory: config.json naming `arch`, an embedding, and the
 * stories260K tokenizer (vocab 512). */
static const char *write_model(const char *arch) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", pg_test_tmpdir(), arch);
    char cmd[2048], path[640];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cp '%s'/tokenizer.json '%s'/tokenizer_config.json '%s'", dir,
             pg_test_asset("llm/stories260K-hf"), pg_test_asset("llm/stories260K-hf"), dir);
    char *out = NULL;
    assert_int_equal(pg_test_run_command(cmd, &out), 0);
    free(out);
    char json[512];
    int n = snprintf(json, sizeof json,
                     "{\"architectures\": [\"%s\"], \"vocab_size\": %d, \"hidden_size\": %d, "
                     "\"intermediate_size\": %d, \"num_hidden_layers\": 3, "
                     "\"num_attention_heads\": 1, \"num_key_value_heads\": 1, \"head_dim\": %d, "
                     "\"max_position_embeddings\": 1024, \"torch_dtype\": \"float32\"}",
                     arch, V, H, H, HD);
    snprintf(path, sizeof path, "%s/config.json", dir);
    pg_test_write_file(path, json, (size_t)n);
    pg_safetensors_writer *w;
    int64_t shape[2] = {V, H};
    float *emb = calloc((size_t)V * H, sizeof(float));
    assert_non_null(emb);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(pg_safetensors_writer_create(&w), PAGODA_OK);
    assert_int_equal(pg_safetensors_writer_add(w, "model.embed_tokens.weight", PG_F32, 2, shape),
                     PAGODA_OK);
    assert_int_equal(pg_safetensors_writer_begin(w, path), PAGODA_OK);
    assert_int_equal(pg_safetensors_writer_write(w, emb, (size_t)V * H * 4), PAGODA_OK);
    assert_int_equal(pg_safetensors_writer_finish(w), PAGODA_OK);
    pg_safetensors_writer_free(w);
    free(emb);
    return dir;
}

/* The toy's greedy continuation, computed directly. */
static void expected(const int32_t *prompt, int32_t n, int32_t out_len, int32_t *out) {
    int32_t seq[1024];
    memcpy(seq, prompt, (size_t)n * sizeof *seq);
    for (int32_t k = 0; k < out_len; k++) {
        int32_t p = n + k - 1;
        int64_t full = 0, win = 0;
        for (int32_t q = 0; q <= p; q++) {
            full += seq[q];
            if (q > p - WINDOW) win += seq[q];
        }
        seq[p + 1] = out[k] = (int32_t)((full + 3 * win + p + 1) % V);
    }
}

typedef struct run_stats {
    pagoda_stats st;
    int32_t cached; /* prompt tokens served from the prefix cache, summed */
} run_stats;

/* n requests (prompts share a 48-token prefix), greedy, ignore_eos, all
 * added at once; each output must be the toy's continuation. */
static run_stats run_engine(const char *model, uint64_t kv_memory, int n, int prompt_len,
                            int out_len) {
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.kv_cache_dtype = PAGODA_KV_F32;
    o.kv_cache_memory = kv_memory;
    o.max_num_batched_tokens = 64; /* chunked prefill */
    o.max_num_seqs = 8;
    o.num_threads = 1;
    pagoda_engine *e;
    if (pagoda_engine_create(model, &o, &e) != PAGODA_OK) fail_msg("%s", pagoda_last_error());
    int32_t prompts[16][256], outs[16][256], got[16] = {0};
    uint64_t ids[16];
    assert_true(n <= 16 && prompt_len <= 256 && out_len <= 256);
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < prompt_len; i++)
            prompts[r][i] = i < 48 ? (7 * i + 3) % V : (r * 31 + i * 13) % V;
        pagoda_request q;
        pagoda_request_defaults(e, &q);
        q.prompt_token_ids = prompts[r];
        q.n_prompt_token_ids = (size_t)prompt_len;
        q.sampling.temperature = 0;
        q.sampling.max_tokens = out_len;
        q.sampling.ignore_eos = true;
        if (pagoda_engine_add_request(e, &q, &ids[r], NULL) != PAGODA_OK)
            fail_msg("%s", pagoda_last_error());
    }
    run_stats rs = {0};
    while (pagoda_engine_has_unfinished(e)) {
        size_t n_out;
        assert_int_equal(pagoda_engine_step(e, &n_out), PAGODA_OK);
        const pagoda_output *outs_ = pagoda_engine_outputs(e, &n_out);
        for (size_t k = 0; k < n_out; k++) {
            const pagoda_output *po = &outs_[k];
            int r = 0;
            while (r < n && ids[r] != po->id)
                r++;
            assert_true(r < n);
            if (po->finish_reason == PAGODA_FINISH_ERROR) fail_msg("toy step: %s", po->error);
            for (size_t j = 0; j < po->n_new_tokens; j++)
                outs[r][got[r]++] = po->new_token_ids[j];
            if (po->finish_reason != PAGODA_FINISH_NONE) rs.cached += po->n_cached_tokens;
        }
    }
    for (int r = 0; r < n; r++) {
        int32_t want[256];
        expected(prompts[r], prompt_len, out_len, want);
        assert_int_equal(got[r], out_len);
        assert_memory_equal(outs[r], want, (size_t)out_len * sizeof(int32_t));
    }
    pagoda_engine_get_stats(e, &rs.st);
    pagoda_engine_free(e);
    return rs;
}

static int setup(void **state) {
    (void)state;
    if (pg_arch_register(&TOY_HYBRID) != PAGODA_OK || pg_arch_register(&TOY_WINDOW) != PAGODA_OK)
        return -1;
    return 0;
}

/* The runner's plan: three groups (full, sliding, state), one paged tensor
 * shared by the two attention groups, state slots per request. */
static void test_runner_allocates_per_group(void **state) {
    (void)state;
    const char *dir = write_model("ToyHybridForCausalLM");
    pg_model_source *src;
    assert_int_equal(pg_model_source_open(dir, &src), PAGODA_OK);
    pg_model *m;
    assert_int_equal(pg_model_load(src, NULL, &m), PAGODA_OK);
    pg_kv_plan p;
    assert_int_equal(pg_runner_plan_kv(m, PG_F32, 16, &p), PAGODA_OK);
    assert_int_equal(p.num_groups, 3);
    assert_int_equal(p.groups[0].kind, PG_KV_FULL_ATTENTION);
    assert_int_equal(p.groups[1].kind, PG_KV_SLIDING_WINDOW);
    assert_int_equal(p.groups[1].u.sliding.window, WINDOW);
    assert_int_equal(p.groups[2].kind, PG_KV_MAMBA);
    assert_int_equal(p.groups[2].u.mamba.state_bytes, (int64_t)sizeof(toy_state));
    assert_int_equal(p.num_tensors, 1);
    assert_int_equal(p.kv_bytes_per_token, 2 * HD * 4);
    assert_int_equal(p.state_bytes_per_seq, sizeof(toy_state));
    pg_runner_config rc = {.num_blocks = 65,
                           .block_size = 16,
                           .kv_dtype = PG_F32,
                           .max_num_batched_tokens = 64,
                           .max_num_seqs = 8,
                           .max_model_len = 1024};
    pg_runner *r;
    assert_int_equal(pg_runner_create(m, &rc, &r), PAGODA_OK);
    assert_int_equal(pg_runner_kv_bytes(r), 65 * 16 * HD * 4 * 2 + 8 * sizeof(toy_state));
    pg_runner_free(r);
    pg_model_free(m);
    pg_model_source_free(src);
}

/* Plenty of memory, shared prefixes: correct outputs and prefix-cache hits
 * on the window model and on the hybrid, whose state layer resumes from the
 * state snapshots (engine/state_cache.h) the earlier requests left at block
 * boundaries (a wrong or missing restore fails the step: the toy state
 * counts its tokens). Every block comes back. */
static void test_prefix_cache_per_group(void **state) {
    (void)state;
    run_stats w = run_engine(write_model("ToyWindowForCausalLM"), 64 << 20, 6, 80, 40);
    assert_true(w.cached >= 5 * 48);
    assert_int_equal(w.st.num_free_kv_blocks, w.st.num_kv_blocks);
    run_stats h = run_engine(write_model("ToyHybridForCausalLM"), 64 << 20, 6, 80, 40);
    print_message("hybrid: %d prompt tokens from the prefix cache (window model: %d)\n", h.cached,
                  w.cached);
    assert_true(h.cached >= 5 * 32);
    assert_int_equal(h.st.num_free_kv_blocks, h.st.num_kv_blocks);
}

/* A KV cache of 40 blocks for 8 requests of 200 tokens: requests are
 * preempted and recomputed (the state of a resumed request starts over),
 * outputs stay exact, every block is returned. */
static void test_preemption_per_group(void **state) {
    (void)state;
    const uint64_t mem = 41ull * 16 * 2 * HD * 4 + 8 * sizeof(toy_state);
    run_stats h = run_engine(write_model("ToyHybridForCausalLM"), mem, 8, 100, 100);
    print_message("hybrid: %llu preemptions, %d blocks\n", (unsigned long long)h.st.num_preemptions,
                  h.st.num_kv_blocks);
    assert_true(h.st.num_preemptions > 0);
    assert_int_equal(h.st.num_free_kv_blocks, h.st.num_kv_blocks);
    run_stats w = run_engine(write_model("ToyWindowForCausalLM"), mem, 8, 100, 100);
    assert_true(w.st.num_preemptions > 0);
    assert_int_equal(w.st.num_free_kv_blocks, w.st.num_kv_blocks);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runner_allocates_per_group),
        cmocka_unit_test(test_prefix_cache_per_group),
        cmocka_unit_test(test_preemption_per_group),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
