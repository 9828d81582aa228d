/* Tensor parallelism in the model (issue 22; docs/ARCHITECTURE.md "Tensor
 * parallelism"): a model loaded as rank r of 2 packs its heads and its
 * slice of the MLP / expert columns and all-reduces the residual; its
 * logits must be those of the whole model.
 *
 * The ranks are forked processes joined by a test-only communicator (a
 * shared anonymous mapping and a spinning barrier, in rank-order sums as
 * comm.h specifies): this checks the model's sharding, not a transport.
 * Each rank computes every prompt position's logits (one prefill step) and
 * 32 greedy steps, F32 weights and an F32 KV cache, and writes them to
 * shared memory; the parent compares them with a TP=1 run (also forked, so
 * no process ever forks with live pool threads): within 1e-4, the same
 * greedy ids, and every rank's logits bitwise equal to rank 0's. On the
 * Qwen3 dense and Qwen3-MoE oracles (both forms) and stories260K (8 / 4
 * heads, intermediate 172: all divide by 2). Batch invariance under TP=2:
 * three requests prefilled together give bitwise the logits each gives
 * alone. Error cases: head counts that do not divide, a row-parallel split
 * off a quantization group, an architecture without TP, a communicator that
 * does not match. */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model_run.h"
#include "testutil.h"

#include "base/alloc.h"
#include "base/pool.h"
#include "dist/comm.h"
#include "dist/comm_impl.h"
#include "model/source.h"
#include "pagoda.h"

/* ---- a test-only communicator over forked processes ------------------------------------- */

#define MAX_RANKS 4
#define SLOT_BYTES (1u << 20) /* per rank: up to 256 Ki floats per collective */

typedef struct shm_region {
    _Atomic uint32_t arrive, gen;
    _Atomic int dead; /* set when a waiter saw a peer gone */
    int size;
    pid_t pid[MAX_RANKS];
    _Alignas(64) unsigned char slot[MAX_RANKS][SLOT_BYTES];
} shm_region;

typedef struct test_comm_impl {
    shm_region *r;
} test_comm_impl;

/* Every rank arrives, then all leave; a peer that exited fails the wait. */
static pagoda_status tc_barrier(pg_comm *c) {
    shm_region *r = ((test_comm_impl *)c->impl)->r;
    const uint32_t g = atomic_load(&r->gen);
    if (atomic_fetch_add(&r->arrive, 1) == (uint32_t)r->size - 1) {
        atomic_store(&r->arrive, 0);
        atomic_fetch_add(&r->gen, 1);
        return PAGODA_OK;
    }
    for (unsigned long spin = 0; atomic_load(&r->gen) == g; spin++) {
        if (spin % 1024 == 0) {
            for (int i = 0; i < r->size; i++)
                if (i != c->rank && kill(r->pid[i], 0) != 0 && errno == ESRCH) {
                    atomic_store(&r->dead, 1);
                    return pg_error(PAGODA_ERR_IO, "test comm: rank %d is gone", i);
                }
            if (atomic_load(&r->dead)) return pg_error(PAGODA_ERR_IO, "test comm: a rank died");
        }
        sched_yield();
    }
    return PAGODA_OK;
}

static pagoda_status tc_allreduce(pg_comm *c, float *buf, size_t n) {
    shm_region *r = ((test_comm_impl *)c->impl)->r;
    if (n * sizeof(float) > SLOT_BYTES)
        return pg_error(PAGODA_ERR_INVALID_ARG, "test comm: %zu floats", n);
    memcpy(r->slot[c->rank], buf, n * sizeof(float));
    pagoda_status st = tc_barrier(c);
    if (st != PAGODA_OK) return st;
    memcpy(buf, r->slot[0], n * sizeof(float));
    for (int k = 1; k < c->size; k++) { /* rank order: ((x0 + x1) + x2) + ... */
        const float *x = (const float *)r->slot[k];
        for (size_t i = 0; i < n; i++)
            buf[i] += x[i];
    }
    return tc_barrier(c);
}

static pagoda_status tc_broadcast(pg_comm *c, void *buf, size_t bytes, int root) {
    shm_region *r = ((test_comm_impl *)c->impl)->r;
    if (bytes > SLOT_BYTES) return pg_error(PAGODA_ERR_INVALID_ARG, "test comm: %zu bytes", bytes);
    if (c->rank == root) memcpy(r->slot[root], buf, bytes);
    pagoda_status st = tc_barrier(c);
    if (st != PAGODA_OK) return st;
    if (c->rank != root) memcpy(buf, r->slot[root], bytes);
    return tc_barrier(c);
}

static pagoda_status tc_allgather(pg_comm *c, const void *send, size_t bytes, void *recv) {
    shm_region *r = ((test_comm_impl *)c->impl)->r;
    if (bytes > SLOT_BYTES) return pg_error(PAGODA_ERR_INVALID_ARG, "test comm: %zu bytes", bytes);
    memcpy(r->slot[c->rank], send, bytes);
    pagoda_status st = tc_barrier(c);
    if (st != PAGODA_OK) return st;
    for (int k = 0; k < c->size; k++)
        memcpy((unsigned char *)recv + (size_t)k * bytes, r->slot[k], bytes);
    return tc_barrier(c);
}

static pagoda_status tc_destroy(pg_comm *c) {
    free(c->impl);
    return PAGODA_OK;
}

static const pg_comm_ops TEST_OPS = {tc_allreduce, tc_broadcast, tc_allgather, tc_barrier,
                                     tc_destroy, NULL};

static pg_comm *test_comm(shm_region *r, int rank, int size) {
    pg_comm *c = calloc(1, sizeof *c);
    test_comm_impl *impl = calloc(1, sizeof *impl);
    if (!c || !impl) abort();
    impl->r = r;
    *c = (pg_comm){.kind = PG_COMM_SHM, .rank = rank, .size = size, .ops = &TEST_OPS, .impl = impl};
    return c;
}

/* ---- running a model on forked ranks -------------------------------------------------- */

#define MAX_PROMPT 40
#define N_GREEDY 32
#define MAX_VOCAB 4096

typedef struct rank_out {
    int done;
    int32_t vocab;
    int32_t greedy[N_GREEDY];
    float prefill[MAX_PROMPT * MAX_VOCAB]; /* [n_prompt][vocab] */
    float batch[3 * MAX_VOCAB];            /* the three requests' last logits, batched */
    float alone[3 * MAX_VOCAB];            /* the same, each request alone */
    char err[256];
} rank_out;

typedef struct job {
    const char *path;
    int32_t n_prompt;
    int32_t prompt[MAX_PROMPT];
    bool batch; /* also the batch-invariance runs */
} job;

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

#define BS 16

/* The last logits of n requests (prompt prefixes of lens[i] tokens) run in
 * ONE step over one paged KV cache per layer (request i in its own blocks). */
static pagoda_status run_batch(const pg_model *m, const job *j, const int32_t *lens, int n,
                               float *out) {
    const int32_t L = pg_model_num_layers(m);
    const int32_t per = (MAX_PROMPT + BS - 1) / BS, nb = 1 + n * per;
    int32_t T = 0, qsl[4] = {0}, seq_lens[3], rows[3], tokens[3 * MAX_PROMPT], pos[3 * MAX_PROMPT],
            slot[3 * MAX_PROMPT], tables[3][8];
    const int32_t *tp[3];
    for (int i = 0; i < n; i++) {
        for (int32_t b = 0; b < per; b++)
            tables[i][b] = 1 + i * per + b;
        tp[i] = tables[i];
        for (int32_t p = 0; p < lens[i]; p++, T++) {
            tokens[T] = j->prompt[p];
            pos[T] = p;
            slot[T] = tables[i][p / BS] * BS + p % BS;
        }
        qsl[i + 1] = T;
        seq_lens[i] = lens[i];
        rows[i] = T - 1;
    }
    pg_paged_kv *kv = calloc((size_t)L, sizeof *kv);
    pg_layer_cache *lc = calloc((size_t)L, sizeof *lc);
    void **mem = calloc((size_t)L, sizeof *mem);
    if (!kv || !lc || !mem) abort();
    for (int32_t l = 0; l < L; l++) {
        const pg_layer_cache_spec *c = pg_model_layer_cache(m, l);
        size_t half = pg_paged_kv_bytes(PG_F32, nb, c->num_kv_heads, BS, c->head_dim);
        mem[l] = pg_calloc_aligned(1, 2 * half);
        if (!mem[l]) abort();
        kv[l] = (pg_paged_kv){.k = mem[l],
                              .v = (char *)mem[l] + half,
                              .dtype = PG_F32,
                              .num_blocks = nb,
                              .num_kv_heads = c->num_kv_heads,
                              .block_size = BS,
                              .head_dim = c->head_dim};
        lc[l] = (pg_layer_cache){.kv = &kv[l], .slot_mapping = slot, .block_tables = tp};
    }
    pg_step_limits lim = {.max_tokens = 3 * MAX_PROMPT,
                          .max_seqs = 3,
                          .max_model_len = MAX_PROMPT,
                          .kv_dtype = PG_F32,
                          .block_size = BS};
    pg_model_workspace *ws;
    pagoda_status st = pg_model_workspace_create(m, &lim, &ws);
    if (st == PAGODA_OK) {
        pg_batch b = {.num_tokens = T,
                      .num_seqs = n,
                      .token_ids = tokens,
                      .positions = pos,
                      .query_start_loc = qsl,
                      .seq_lens = seq_lens,
                      .logit_rows = rows,
                      .num_logits = n,
                      .layers = lc};
        st = pg_model_forward(m, ws, &b, out);
        pg_model_workspace_free(ws);
    }
    for (int32_t l = 0; l < L; l++)
        pg_free(mem[l]);
    free(mem);
    free(kv);
    free(lc);
    return st;
}

/* One rank's work (no cmocka assertions: this may be a forked child). */
static int rank_main(const job *j, pg_comm *comm, int rank, int size, rank_out *o) {
    pg_model_options opt;
    pg_model_options_default(&opt);
    opt.compute = PG_F32;
    opt.tp_rank = rank;
    opt.tp_size = size;
    opt.comm = comm;
    pg_model_source *src = NULL;
    pg_model *m = NULL;
    pagoda_status st = pg_model_source_open(j->path, &src);
    if (st == PAGODA_OK) st = pg_model_load(src, &opt, &m);
    if (st != PAGODA_OK) {
        snprintf(o->err, sizeof o->err, "%s", pg_last_error());
        pg_model_source_free(src);
        return 1;
    }
    const int32_t V = pg_model_get_config(m)->vocab_size;
    int rc = 1;
    o->vocab = V;
    if (V > MAX_VOCAB) {
        snprintf(o->err, sizeof o->err, "vocab %d above the test's %d", V, MAX_VOCAB);
        goto out;
    }
    pg_test_prefill_logits(m, j->prompt, j->n_prompt, o->prefill);
    pg_test_seq *s = pg_test_seq_create(m, j->n_prompt + N_GREEDY, 16, PG_F32);
    float *last = malloc((size_t)V * sizeof(float));
    if (!last) abort();
    st = pg_test_seq_forward(s, j->prompt, j->n_prompt, last);
    for (int32_t i = 0; i < N_GREEDY && st == PAGODA_OK; i++) {
        o->greedy[i] = argmax(last, V);
        if (i + 1 < N_GREEDY) st = pg_test_seq_forward(s, &o->greedy[i], 1, last);
    }
    free(last);
    pg_test_seq_free(s);
    if (st == PAGODA_OK && j->batch) {
        const int32_t lens[3] = {j->n_prompt, j->n_prompt / 2 + 1, 5};
        st = run_batch(m, j, lens, 3, o->batch);
        for (int i = 0; i < 3 && st == PAGODA_OK; i++)
            st = run_batch(m, j, &lens[i], 1, o->alone + (size_t)i * V);
    }
    if (st != PAGODA_OK) {
        snprintf(o->err, sizeof o->err, "%s", pg_last_error());
        goto out;
    }
    o->done = 1;
    rc = 0;
out:
    pg_model_free(m);
    pg_model_source_free(src);
    return rc;
}

/* Run j on `size` ranks (forked; the parent is rank 0 unless size is 1, when
 * a single child runs it), their outputs into out[0 .. size). */
static void run_ranks(const job *j, int size, rank_out *out) {
    shm_region *r =
        mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(r != MAP_FAILED);
    memset(out, 0, (size_t)size * sizeof *out);
    r->size = size;
    pg_pool_default_shutdown(); /* no live pool threads across fork */
    for (int k = 0; k < size; k++)
        r->pid[k] = getpid();
    pid_t kids[MAX_RANKS] = {0};
    for (int k = 0; k < size; k++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            r->pid[k] = getpid();
            pg_comm *c = test_comm(r, k, size);
            alarm(900); /* a stuck rank dies rather than hanging ctest */
            int rc = rank_main(j, size > 1 ? c : NULL, k, size, &out[k]);
            pg_comm_free(c);
            fflush(NULL);
            _exit(rc);
        }
        kids[k] = pid;
        r->pid[k] = pid;
    }
    for (int k = 0; k < size; k++) {
        int status = 0;
        assert_int_equal(waitpid(kids[k], &status, 0), kids[k]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !out[k].done)
            fail_msg("rank %d of %d failed (status 0x%x): %s", k, size, (unsigned)status,
                     out[k].err);
    }
    munmap(r, sizeof *r);
}

/* Shared output buffers (the children write them). */
static rank_out *shared_outputs(int n) {
    rank_out *o = mmap(NULL, (size_t)n * sizeof *o, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(o != MAP_FAILED);
    return o;
}

static void load_prompt(const char *oracle_dir, job *j) {
    char rel[256];
    snprintf(rel, sizeof rel, "oracles/%s/expected.json", oracle_dir);
    size_t len;
    char *text = pg_test_read_file(pg_test_asset(rel), &len);
    /* "token_ids": [a, b, ...] (the oracle's prompt) */
    const char *p = strstr(text, "\"token_ids\"");
    assert_non_null(p);
    p = strchr(p, '[');
    assert_non_null(p);
    j->n_prompt = 0;
    for (p++; *p && *p != ']';) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        assert_true(j->n_prompt < MAX_PROMPT);
        j->prompt[j->n_prompt++] = (int32_t)v;
        p = end;
    }
    free(text);
    assert_true(j->n_prompt > 8);
}

/* TP=2 against TP=1 on j: logits within 1e-4, greedy ids equal, rank 1's
 * outputs bitwise rank 0's; batch invariance when j->batch. */
static void check_tp2(const job *j) {
    rank_out *one = shared_outputs(1), *two = shared_outputs(2);
    run_ranks(j, 1, one);
    run_ranks(j, 2, two);
    const int32_t V = one->vocab;
    assert_int_equal(two[0].vocab, V);
    const size_t n = (size_t)j->n_prompt * (size_t)V;
    double max_diff = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)one->prefill[i] - (double)two[0].prefill[i]);
        if (d > max_diff) max_diff = d;
    }
    print_message("%s: TP=2 vs TP=1 max |dlogit| %.3g over %d positions\n", j->path, max_diff,
                  j->n_prompt);
    assert_true(max_diff < 1e-4);
    assert_memory_equal(one->greedy, two[0].greedy, sizeof one->greedy);
    assert_memory_equal(two[0].prefill, two[1].prefill, n * sizeof(float));
    assert_memory_equal(two[0].greedy, two[1].greedy, sizeof two->greedy);
    if (j->batch) { /* each request alone vs the three in one step: bitwise */
        assert_memory_equal(two[0].batch, two[0].alone, 3 * (size_t)V * sizeof(float));
        assert_memory_equal(two[1].batch, two[0].batch, 3 * (size_t)V * sizeof(float));
        /* and the batch against TP=1 */
        for (size_t i = 0; i < 3 * (size_t)V; i++)
            assert_true(fabs((double)two[0].batch[i] - (double)one->batch[i]) < 1e-4);
    }
    munmap(one, sizeof *one);
    munmap(two, 2 * sizeof *two);
}

static void check_oracle(const char *dir, const char *form, bool batch) {
    job j = {.batch = batch};
    char rel[256];
    snprintf(rel, sizeof rel, "oracles/%s/%s", dir, form);
    j.path = strdup(pg_test_asset(rel));
    load_prompt(dir, &j);
    check_tp2(&j);
    free((void *)j.path);
}

static void test_qwen3_dense_tp2(void **state) {
    (void)state;
    check_oracle("qwen3-dense-tiny", "hf", true);
    check_oracle("qwen3-dense-tiny", "model.gguf", false);
}

static void test_qwen3_moe_tp2(void **state) {
    (void)state;
    check_oracle("qwen3-moe-tiny", "hf", true);
    check_oracle("qwen3-moe-tiny", "model.gguf", false);
}

/* GPT-OSS: attention sinks (sliced per head), sliding windows, router
 * bias, expert biases (the down_proj's on rank 0 only), clamped SwiGLU. */
static void test_gpt_oss_tp2(void **state) {
    (void)state;
    check_oracle("gpt-oss-tiny", "hf", true);
    check_oracle("gpt-oss-tiny", "model.gguf", false);
}

/* stories260K: 8 heads / 4 KV heads, intermediate 172, F32 weights. */
static void test_stories260k_tp2(void **state) {
    (void)state;
    job j = {.batch = true, .n_prompt = 24};
    j.path = strdup(pg_test_asset("llm/stories260K-hf"));
    for (int32_t i = 0; i < j.n_prompt; i++)
        j.prompt[i] = 1 + (i * 37 + 11) % 500;
    check_tp2(&j);
    free((void *)j.path);
}

/* ---- errors (no collective runs: load fails first) --------------------------------------- */

static pagoda_status load_as(const char *path, int rank, int size, int bits, int64_t group,
                             pg_comm *c) {
    pg_model_options opt;
    pg_model_options_default(&opt);
    opt.compute = PG_F32;
    opt.tp_rank = rank;
    opt.tp_size = size;
    opt.comm = c;
    opt.quant_bits = bits;
    opt.quant_group = group;
    pg_model_source *src;
    assert_int_equal(pg_model_source_open(path, &src), PAGODA_OK);
    pg_model *m = NULL;
    pagoda_status st = pg_model_load(src, &opt, &m);
    pg_model_free(m);
    pg_model_source_free(src);
    return st;
}

static void test_errors(void **state) {
    (void)state;
    char stories[1024], dense[1024], whisper[1024];
    snprintf(stories, sizeof stories, "%s", pg_test_asset("llm/stories260K-hf"));
    snprintf(dense, sizeof dense, "%s", pg_test_asset("oracles/qwen3-dense-tiny/hf"));
    snprintf(whisper, sizeof whisper, "%s", pg_test_asset("oracles/whisper-tiny-random/hf"));
    /* 8 heads / 4 KV heads do not divide by 3 */
    pg_comm *c3 = test_comm(NULL, 1, 3);
    assert_int_equal(load_as(stories, 1, 3, 0, 0, c3), PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pg_last_error(), "num_attention_heads 8"));
    assert_non_null(strstr(pg_last_error(), "num_key_value_heads 4"));
    /* the qwen3 oracle's 2 KV heads do not divide by 4 */
    pg_comm *c4 = test_comm(NULL, 0, 4);
    assert_int_equal(load_as(dense, 0, 4, 0, 0, c4), PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pg_last_error(), "num_key_value_heads 2"));
    /* W8A8 with groups of 64 on rank 1 of 2: o_proj's 64 query columns split
     * at 32 (heads 4 x 16 / 2), inside a group */
    pg_comm *c2 = test_comm(NULL, 1, 2);
    assert_int_equal(load_as(dense, 1, 2, 8, 64, c2), PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pg_last_error(), "quantization group boundary"));
    /* groups of 32 fall on the split: loads */
    assert_int_equal(load_as(dense, 1, 2, 8, 32, c2), PAGODA_OK);
    /* a communicator that does not match the options */
    assert_int_equal(load_as(dense, 0, 2, 0, 0, c2), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(load_as(dense, 1, 2, 0, 0, NULL), PAGODA_ERR_INVALID_ARG);
    /* an architecture without tensor parallelism */
    assert_int_equal(load_as(whisper, 1, 2, 0, 0, c2), PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pg_last_error(), "tensor parallelism"));
    pg_comm_free(c2);
    pg_comm_free(c3);
    pg_comm_free(c4);
}

/* Block-quantized rows: the GGUF Q8_0 stories260K splits its Q8_0
 * o_proj [64, 64] at column 32, a whole block: loads as rank 1 of 2. */
static void test_gguf_quantized_shard_loads(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s", pg_test_asset("llm/llama2c/stories260K-q8_0.gguf"));
    pg_comm *c2 = test_comm(NULL, 1, 2);
    assert_int_equal(load_as(path, 1, 2, 0, 0, c2), PAGODA_OK);
    pg_comm_free(c2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),          cmocka_unit_test(test_gguf_quantized_shard_loads),
        cmocka_unit_test(test_stories260k_tp2), cmocka_unit_test(test_qwen3_dense_tp2),
        cmocka_unit_test(test_qwen3_moe_tp2),   cmocka_unit_test(test_gpt_oss_tp2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
