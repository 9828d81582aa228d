/* The mixture-of-experts block (model/decoder.h pg_dec_moe) against a
 * double-precision reference of Qwen3MoeSparseMoeBlock: random routings,
 * one token (M = 1), top-k = number of experts, one expert taking every
 * token while the others stay empty; and batch invariance: a token's row is
 * bitwise the same alone and among others, with F32 and with W8A8 experts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "base/alloc.h"
#include "model/decoder.h"

enum { H = 48, I = 40 };

typedef struct moe_case {
    int E, K;
    bool norm_topk;
    float *wr, *wg, *wu, *wd, *norm; /* router [E, H], experts [E][I, H] x 2 and [E][H, I] */
    pg_dec_moe f;
} moe_case;

static uint64_t g_rng = 88172645463325252ull;
static float frand(void) { /* uniform (-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *rand_buf(size_t n, float scale) {
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = scale * frand();
    return p;
}

static void build(moe_case *c, int E, int K, bool norm_topk, int bits) {
    memset(c, 0, sizeof *c);
    c->E = E;
    c->K = K;
    c->norm_topk = norm_topk;
    c->wr = rand_buf((size_t)E * H, 0.5f);
    c->wg = rand_buf((size_t)E * I * H, 0.2f);
    c->wu = rand_buf((size_t)E * I * H, 0.2f);
    c->wd = rand_buf((size_t)E * H * I, 0.2f);
    c->norm = rand_buf(H, 0.3f);
    for (int i = 0; i < H; i++)
        c->norm[i] += 1.0f;
    pg_linear_policy p;
    assert_int_equal(pg_linear_policy_init(&p, PG_F32, bits, 0, 0, NULL), PAGODA_OK);
    pg_linear_policy rp = p;
    rp.bits = 0;
    c->f = (pg_dec_moe){.norm = c->norm, .n_experts = E, .top_k = K, .norm_topk = norm_topk};
    c->f.gate_up = calloc((size_t)E, sizeof *c->f.gate_up);
    c->f.down = calloc((size_t)E, sizeof *c->f.down);
    pg_linear_src r = {.w = c->wr, .dtype = PG_F32, .n_out = E, .n_in = H};
    const pg_linear_src *rr = &r;
    assert_int_equal(pg_linear_pack(&rp, &rr, 1, false, "router", &c->f.router), PAGODA_OK);
    for (int e = 0; e < E; e++) {
        pg_linear_src g = {.w = c->wg + (size_t)e * I * H, .dtype = PG_F32, .n_out = I, .n_in = H};
        pg_linear_src u = {.w = c->wu + (size_t)e * I * H, .dtype = PG_F32, .n_out = I, .n_in = H};
        pg_linear_src d = {.w = c->wd + (size_t)e * H * I, .dtype = PG_F32, .n_out = H, .n_in = I};
        const pg_linear_src *dp = &d;
        assert_int_equal(pg_linear_pack_swiglu(&p, &g, &u, "gate/up", &c->f.gate_up[e]), PAGODA_OK);
        assert_int_equal(pg_linear_pack(&p, &dp, 1, true, "down", &c->f.down[e]), PAGODA_OK);
    }
}

static void destroy(moe_case *c) {
    pg_dec_moe_free(&c->f);
    free(c->wr);
    free(c->wg);
    free(c->wu);
    free(c->wd);
    free(c->norm);
}

/* x [T, H] += MoE(x) through the block; returns the workspace's x. */
static void run_block(const moe_case *c, const float *x, int T, float *out) {
    pg_dec_dims d = {.hidden = H,
                     .qkv_width = 1,
                     .attn_width = 1,
                     .act_width = 1,
                     .moe_experts = c->E,
                     .moe_top_k = c->K,
                     .moe_ffn = I};
    pg_pool *pool = pg_pool_default();
    d.gemm_scratch_min = pg_dec_moe_scratch_bytes(&c->f, T, pool ? pg_pool_size(pool) : 1);
    pg_step_limits lim = {
        .max_tokens = T, .max_seqs = 1, .max_model_len = T, .kv_dtype = PG_F32, .block_size = 16};
    const pg_linear *ls[3] = {&c->f.router, &c->f.gate_up[0], &c->f.down[0]};
    pg_dec_ws *ws;
    assert_int_equal(pg_dec_ws_create(&d, &lim, ls, 3, 0, &ws), PAGODA_OK);
    memcpy(ws->x, x, (size_t)T * H * sizeof(float));
    pg_batch b = {.num_tokens = T, .num_seqs = 1};
    assert_int_equal(pg_dec_moe_forward(&c->f, 1e-6f, &b, ws), PAGODA_OK);
    memcpy(out, ws->x, (size_t)T * H * sizeof(float));
    pg_dec_ws_free(ws);
}

/* Qwen3MoeSparseMoeBlock in double: RMSNorm, router, softmax, top-k (ties:
 * lower index), renormalise, weighted sum of SwiGLU experts, residual. */
static void reference(const moe_case *c, const float *x, int T, double *out, int *hist) {
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * H;
        double ss = 0, h[H], p[64], a[I];
        for (int i = 0; i < H; i++)
            ss += (double)xr[i] * xr[i];
        double sc = 1.0 / sqrt(ss / H + 1e-6);
        for (int i = 0; i < H; i++)
            h[i] = c->norm[i] * (xr[i] * sc);
        double mx = -1e300, z = 0;
        for (int e = 0; e < c->E; e++) {
            p[e] = 0;
            for (int i = 0; i < H; i++)
                p[e] += (double)c->wr[(size_t)e * H + i] * h[i];
            mx = fmax(mx, p[e]);
        }
        for (int e = 0; e < c->E; e++)
            z += p[e] = exp(p[e] - mx);
        int sel[64];
        double w[64], sw = 0;
        for (int k = 0; k < c->K; k++) {
            int best = -1;
            for (int e = 0; e < c->E; e++) {
                bool taken = false;
                for (int q = 0; q < k; q++)
                    taken |= sel[q] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            sel[k] = best;
            sw += w[k] = p[best] / z;
            hist[best]++;
        }
        for (int i = 0; i < H; i++)
            out[(size_t)t * H + i] = xr[i];
        for (int k = 0; k < c->K; k++) {
            const int e = sel[k];
            const double wk = c->norm_topk ? w[k] / sw : w[k];
            for (int j = 0; j < I; j++) {
                double g = 0, u = 0;
                for (int i = 0; i < H; i++) {
                    g += (double)c->wg[((size_t)e * I + j) * H + i] * h[i];
                    u += (double)c->wu[((size_t)e * I + j) * H + i] * h[i];
                }
                a[j] = g / (1.0 + exp(-g)) * u;
            }
            for (int i = 0; i < H; i++) {
                double o = 0;
                for (int j = 0; j < I; j++)
                    o += (double)c->wd[((size_t)e * H + i) * I + j] * a[j];
                out[(size_t)t * H + i] += wk * o;
            }
        }
    }
}

static void check(moe_case *c, const float *x, int T, int *hist) {
    float *got = malloc((size_t)T * H * sizeof(float));
    double *want = malloc((size_t)T * H * sizeof(double));
    assert_true(got && want);
    run_block(c, x, T, got);
    reference(c, x, T, want, hist);
    for (size_t i = 0; i < (size_t)T * H; i++)
        if (fabs(got[i] - want[i]) > 1e-4 * (1.0 + fabs(want[i])))
            fail_msg("row %zu col %zu: %.7g vs %.7g", i / H, i % H, got[i], want[i]);
    /* every row alone gives the same bits as in the batch */
    float one[H];
    for (int t = 0; t<T; t += T> 8 ? 5 : 1) {
        run_block(c, x + (size_t)t * H, 1, one);
        assert_memory_equal(one, got + (size_t)t * H, sizeof one);
    }
    free(got);
    free(want);
}

static void test_random_routing(void **state) {
    (void)state;
    moe_case c;
    build(&c, 8, 2, true, 0);
    float *x = rand_buf(37 * H, 1.0f);
    int hist[64] = {0};
    check(&c, x, 37, hist);
    check(&c, x, 1, hist); /* M = 1 */
    int used = 0;
    for (int e = 0; e < 8; e++)
        used += hist[e] > 0;
    assert_true(used >= 6); /* the routing spreads: the grouping is exercised */
    free(x);
    destroy(&c);
    build(&c, 5, 2, false, 0); /* without renormalisation */
    x = rand_buf(9 * H, 1.0f);
    check(&c, x, 9, hist);
    free(x);
    destroy(&c);
}

static void test_top_k_equals_experts(void **state) {
    (void)state;
    moe_case c;
    build(&c, 4, 4, true, 0);
    float *x = rand_buf(11 * H, 1.0f);
    int hist[64] = {0};
    check(&c, x, 11, hist);
    for (int e = 0; e < 4; e++)
        assert_int_equal(hist[e], 11);
    free(x);
    destroy(&c);
}

/* Expert 3's router row is +1 everywhere and the others -1 while every
 * token's normed row is positive: expert 3 takes all tokens, 7 stay empty. */
static void test_one_expert_takes_all(void **state) {
    (void)state;
    moe_case c;
    build(&c, 8, 1, true, 0);
    for (int e = 0; e < 8; e++)
        for (int i = 0; i < H; i++)
            c.wr[(size_t)e * H + i] = e == 3 ? 1.0f : -1.0f;
    pg_linear_free(&c.f.router);
    pg_linear_policy p;
    assert_int_equal(pg_linear_policy_init(&p, PG_F32, 0, 0, 0, NULL), PAGODA_OK);
    pg_linear_src r = {.w = c.wr, .dtype = PG_F32, .n_out = 8, .n_in = H};
    const pg_linear_src *rr = &r;
    assert_int_equal(pg_linear_pack(&p, &rr, 1, false, "router", &c.f.router), PAGODA_OK);
    float *x = rand_buf(20 * H, 1.0f);
    for (int i = 0; i < 20 * H; i++)
        x[i] = fabsf(x[i]) + 0.1f;
    for (int i = 0; i < H; i++)
        c.norm[i] = fabsf(c.norm[i]);
    int hist[64] = {0};
    check(&c, x, 20, hist);
    assert_int_equal(hist[3], 20);
    free(x);
    destroy(&c);
}

/* W8A8 experts: per-token activation scales keep each row's result its own. */
static void test_quantized_experts_batch_invariant(void **state) {
    (void)state;
    moe_case c;
    build(&c, 8, 2, true, 8);
    float *x = rand_buf(24 * H, 1.0f), *got = malloc(24 * H * sizeof(float)), one[H];
    assert_non_null(got);
    run_block(&c, x, 24, got);
    for (int t = 0; t < 24; t++) {
        run_block(&c, x + (size_t)t * H, 1, one);
        assert_memory_equal(one, got + (size_t)t * H, sizeof one);
    }
    free(x);
    free(got);
    destroy(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_routing),
        cmocka_unit_test(test_top_k_equals_experts),
        cmocka_unit_test(test_one_expert_takes_all),
        cmocka_unit_test(test_quantized_experts_batch_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
