/* Transformer ops (src/kernels/ops.h) against straightforward double-precision
 * math, plus their invariants (RoPE relative-position property, batch
 * invariance of matmul) and error paths. */
#include "testutil.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "base/pool.h"
#include "base/status.h"
#include "gen/gen_model.h"
#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"

/* Deterministic xorshift stream in [-1, 1). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = frand() * scale;
}
static bool close_rel(double a, double b, double tol) {
    return fabs(a - b) <= tol * fmax(1.0, fabs(b));
}

static void test_rmsnorm_matches_double(void **state) {
    (void)state;
    enum { M = 3, N = 67 };
    float x[M * N], w[N], y[M * N];
    fill(x, M * N, 3.0f);
    fill(w, N, 1.5f);
    pg_rmsnorm(y, x, w, M, N, 1e-5f);
    for (int r = 0; r < M; r++) {
        double ss = 0;
        for (int i = 0; i < N; i++)
            ss += (double)x[r * N + i] * x[r * N + i];
        double scale = 1.0 / sqrt(ss / N + 1e-5);
        for (int i = 0; i < N; i++)
            assert_true(close_rel(y[r * N + i], x[r * N + i] * scale * w[i], 1e-5));
    }
    /* in place gives the same bits */
    float z[M * N];
    memcpy(z, x, sizeof x);
    pg_rmsnorm(z, z, w, M, N, 1e-5f);
    assert_memory_equal(z, y, sizeof y);
}

static void test_softmax_stable_and_exact(void **state) {
    (void)state;
    float x[50];
    fill(x, 50, 20.0f);
    x[7] = 1000.0f; /* would overflow a naive exp */
    x[8] = 999.0f;
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < 50; i++)
        m = fmax(m, x[i]);
    double e[50];
    for (int i = 0; i < 50; i++)
        sum += (e[i] = exp((double)x[i] - m));
    pg_softmax(x, 50);
    double total = 0;
    for (int i = 0; i < 50; i++) {
        assert_true(isfinite(x[i]));
        assert_true(fabs(x[i] - e[i] / sum) <= 1e-6);
        total += x[i];
    }
    assert_true(fabs(total - 1.0) < 1e-5);
    float one = -3.0f;
    pg_softmax(&one, 1);
    assert_true(one == 1.0f);
}

static void test_silu_swiglu(void **state) {
    (void)state;
    float g[40], u[40], y[40];
    fill(g, 40, 8.0f);
    fill(u, 40, 2.0f);
    pg_silu(y, g, 40);
    for (int i = 0; i < 40; i++) {
        double s = g[i] / (1.0 + exp(-(double)g[i]));
        assert_true(close_rel(y[i], s, 1e-6));
    }
    pg_swiglu(y, g, u, 40);
    for (int i = 0; i < 40; i++) {
        double s = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        assert_true(close_rel(y[i], s, 1e-6));
    }
}

static void test_rope_inv_freq_plain_and_linear(void **state) {
    (void)state;
    float f[32];
    pg_rope_freq_params p = {.head_dim = 64, .theta = 500000.0};
    assert_int_equal(pg_rope_inv_freq(&p, f), PAGODA_OK);
    for (int i = 0; i < 32; i++)
        assert_true(close_rel(f[i], pow(500000.0, -2.0 * i / 64), 1e-6));
    p.scaling = PG_ROPE_FREQ_LINEAR;
    p.factor = 4.0;
    assert_int_equal(pg_rope_inv_freq(&p, f), PAGODA_OK);
    for (int i = 0; i < 32; i++)
        assert_true(close_rel(f[i], pow(500000.0, -2.0 * i / 64) / 4.0, 1e-6));
    p.head_dim = 7;
    assert_int_equal(pg_rope_inv_freq(&p, f), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "head_dim"));
}

/* Llama 3.1 frequency scaling, written independently from the HF formula:
 * wavelength bands around original_max / {high,low}_freq_factor. */
static void test_rope_inv_freq_llama3(void **state) {
    (void)state;
    enum { D = 128 };
    float f[D / 2];
    pg_rope_freq_params p = {.head_dim = D,
                             .theta = 500000.0,
                             .scaling = PG_ROPE_FREQ_LLAMA3,
                             .factor = 8.0,
                             .low_freq_factor = 1.0,
                             .high_freq_factor = 4.0,
                             .original_max_position = 8192.0};
    assert_int_equal(pg_rope_inv_freq(&p, f), PAGODA_OK);
    int n_high = 0, n_low = 0, n_mid = 0;
    for (int i = 0; i < D / 2; i++) {
        double base = pow(500000.0, -2.0 * i / D);
        double wl = 2 * M_PI / base;
        double want;
        if (wl < 8192.0 / 4.0) {
            want = base;
            n_high++;
        } else if (wl > 8192.0 / 1.0) {
            want = base / 8.0;
            n_low++;
        } else {
            double t = (8192.0 / wl - 1.0) / (4.0 - 1.0); /* 1 at the high edge, 0 at the low */
            want = base / 8.0 + t * (base - base / 8.0);
            n_mid++;
            assert_true(f[i] <= base * (1 + 1e-6) && f[i] >= base / 8.0 * (1 - 1e-6));
        }
        assert_true(close_rel(f[i], want, 1e-6));
    }
    assert_true(n_high > 0 && n_low > 0 && n_mid > 0); /* all three bands exercised */
    for (int i = 1; i < D / 2; i++)
        assert_true(f[i] < f[i - 1]);
    p.high_freq_factor = 0.5;
    assert_int_equal(pg_rope_inv_freq(&p, f), PAGODA_ERR_INVALID_ARG);
}

/* Cross-check with the model writer's own Llama-3 factors (the divisors
 * llama.cpp stores as rope_freqs.weight), an independent implementation. */
static void test_rope_inv_freq_llama3_matches_rope_freqs(void **state) {
    (void)state;
    enum { D = 64 };
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    o.hidden = 8 * D;
    o.heads = 8;
    o.head_dim = D;
    o.rope_theta = 500000.0f;
    o.rope_scaling = PG_ROPE_SCALING_LLAMA3;
    o.rope_factor = 32.0f;
    o.rope_low_freq_factor = 1.0f;
    o.rope_high_freq_factor = 4.0f;
    o.rope_original_max_position = 8192;
    float factors[D / 2], f[D / 2];
    pg_llama3_rope_factors(&o, factors);
    pg_rope_freq_params p = {.head_dim = D,
                             .theta = 500000.0,
                             .scaling = PG_ROPE_FREQ_LLAMA3,
                             .factor = 32.0,
                             .low_freq_factor = 1.0,
                             .high_freq_factor = 4.0,
                             .original_max_position = 8192.0};
    assert_int_equal(pg_rope_inv_freq(&p, f), PAGODA_OK);
    for (int i = 0; i < D / 2; i++)
        assert_true(close_rel(f[i], pow(500000.0, -2.0 * i / D) / factors[i], 1e-5));
}

static void rope_double(const float *x, double *y, int heads, int d, int pos, const float *f,
                        bool inter) {
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < d / 2; i++) {
            int ia = inter ? 2 * i : i, ib = inter ? 2 * i + 1 : i + d / 2;
            double a = x[h * d + ia], b = x[h * d + ib], t = pos * (double)f[i];
            y[h * d + ia] = a * cos(t) - b * sin(t);
            y[h * d + ib] = a * sin(t) + b * cos(t);
        }
}

static void test_rope_both_layouts(void **state) {
    (void)state;
    enum { H = 3, D = 16 };
    float f[D / 2], x[H * D], y[H * D];
    double want[H * D];
    pg_rope_freq_params p = {.head_dim = D, .theta = 10000.0};
    assert_int_equal(pg_rope_inv_freq(&p, f), PAGODA_OK);
    fill(x, H * D, 1.0f);
    for (int inter = 0; inter < 2; inter++)
        for (int pos = 0; pos < 600; pos += 37) {
            memcpy(y, x, sizeof x);
            pg_rope(y, H, D, pos, f, inter);
            rope_double(x, want, H, D, pos, f, inter);
            for (int i = 0; i < H * D; i++)
                assert_true(fabs(y[i] - want[i]) < 2e-6);
        }
    /* The layouts are the same rotation up to the dimension permutation that
     * llama.cpp's converter applies: interleaved index 2i <-> half index i,
     * 2i+1 <-> i + d/2. */
    float xi[D], xh[D];
    for (int i = 0; i < D / 2; i++) {
        xi[2 * i] = xh[i] = x[i];
        xi[2 * i + 1] = xh[i + D / 2] = x[D / 2 + i];
    }
    pg_rope(xi, 1, D, 123, f, true);
    pg_rope(xh, 1, D, 123, f, false);
    for (int i = 0; i < D / 2; i++) {
        assert_true(xi[2 * i] == xh[i]);
        assert_true(xi[2 * i + 1] == xh[i + D / 2]);
    }
}

/* <R(m) q, R(n) k> depends only on m - n (Su et al. 2021, eq. 16). */
static void test_rope_relative_position(void **state) {
    (void)state;
    enum { D = 32 };
    float f[D / 2], q[D], k[D], a[D], b[D];
    pg_rope_freq_params p = {.head_dim = D, .theta = 10000.0};
    assert_int_equal(pg_rope_inv_freq(&p, f), PAGODA_OK);
    fill(q, D, 1.0f);
    fill(k, D, 1.0f);
    double ref = 0;
    for (int shift = 0; shift < 200; shift += 50) {
        memcpy(a, q, sizeof q);
        memcpy(b, k, sizeof k);
        pg_rope(a, 1, D, 10 + shift, f, false);
        pg_rope(b, 1, D, 3 + shift, f, false);
        double dot = 0;
        for (int i = 0; i < D; i++)
            dot += (double)a[i] * b[i];
        if (shift == 0) ref = dot;
        assert_true(fabs(dot - ref) < 1e-4);
    }
}

/* ---- matmul */

static void quantize_q8_0(const float *x, uint8_t *out, size_t n) {
    for (size_t b = 0; b < n / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        float d = amax / 127.0f;
        uint16_t dh = pg_f32_to_f16(d);
        memcpy(out + b * 34, &dh, 2);
        for (int j = 0; j < 32; j++)
            out[b * 34 + 2 + j] = (uint8_t)(int8_t)(d ? lrintf(x[b * 32 + j] / d) : 0);
    }
}

static void quantize_q4_0(const float *x, uint8_t *out, size_t n) {
    for (size_t b = 0; b < n / 32; b++) {
        float mx = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[b * 32 + j]) > fabsf(mx)) mx = x[b * 32 + j];
        float d = mx / -8.0f;
        uint16_t dh = pg_f32_to_f16(d);
        memcpy(out + b * 18, &dh, 2);
        for (int j = 0; j < 16; j++) {
            int lo = d ? (int)lrintf(x[b * 32 + j] / d) + 8 : 8;
            int hi = d ? (int)lrintf(x[b * 32 + j + 16] / d) + 8 : 8;
            lo = lo < 0 ? 0 : lo > 15 ? 15 : lo;
            hi = hi < 0 ? 0 : hi > 15 ? 15 : hi;
            out[b * 18 + 2 + j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* Weights of dtype t for the f32 matrix wf[N, K]; returns a malloc'ed buffer. */
static void *make_weights(pg_dtype t, const float *wf, size_t N, size_t K) {
    size_t rb = pg_dtype_row_bytes(t, K);
    uint8_t *w = malloc(rb * N);
    for (size_t n = 0; n < N; n++) {
        const float *r = wf + n * K;
        uint8_t *o = w + n * rb;
        switch (t) {
        case PG_F32:
            memcpy(o, r, K * 4);
            break;
        case PG_F16:
            for (size_t k = 0; k < K; k++)
                ((uint16_t *)o)[k] = pg_f32_to_f16(r[k]);
            break;
        case PG_BF16:
            for (size_t k = 0; k < K; k++)
                ((uint16_t *)o)[k] = pg_f32_to_bf16(r[k]);
            break;
        case PG_Q8_0:
            quantize_q8_0(r, o, K);
            break;
        case PG_Q4_0:
            quantize_q4_0(r, o, K);
            break;
        default:
            fail();
        }
    }
    return w;
}

static void check_matmul(pg_dtype t) {
    enum { M = 5, N = 13, K = 96 };
    float wf[N * K], x[M * K], bias[N], out[M * N], row[N], deq[K];
    fill(wf, N * K, 1.0f);
    fill(x, M * K, 2.0f);
    fill(bias, N, 0.5f);
    void *w = make_weights(t, wf, N, K);
    size_t rb = pg_dtype_row_bytes(t, K);
    assert_int_equal(pg_matmul(out, x, w, t, bias, M, N, K), PAGODA_OK);
    for (int n = 0; n < N; n++) {
        pg_dequant_row(t, (uint8_t *)w + n * rb, deq, K);
        for (int m = 0; m < M; m++) {
            double s = bias[n];
            for (int k = 0; k < K; k++)
                s += (double)deq[k] * x[m * K + k];
            assert_true(close_rel(out[m * N + n], s, 1e-5));
        }
    }
    /* batch invariance: each row equals the M=1 result bit for bit */
    for (int m = 0; m < M; m++) {
        assert_int_equal(pg_matmul(row, x + m * K, w, t, bias, 1, N, K), PAGODA_OK);
        assert_memory_equal(row, out + m * N, sizeof row);
    }
    /* the quantized weights stay close to the f32 ones they came from */
    double err = 0, mag = 0;
    for (int n = 0; n < N; n++)
        for (int m = 0; m < M; m++) {
            double s = bias[n];
            for (int k = 0; k < K; k++)
                s += (double)wf[n * K + k] * x[m * K + k];
            err = fmax(err, fabs(out[m * N + n] - s));
            mag = fmax(mag, fabs(s));
        }
    double tol = t == PG_Q4_0 ? 0.15 : t == PG_Q8_0 ? 0.01 : t == PG_BF16 ? 0.01 : 1e-3;
    assert_true(err <= tol * mag);
    /* without bias, against the scalar reference rows */
    float ref[M * N], scratch[K];
    assert_int_equal(pg_matmul(out, x, w, t, NULL, M, N, K), PAGODA_OK);
    pg_ref_matmul_rows(ref, x, w, t, NULL, M, N, K, 0, N, scratch);
    for (int i = 0; i < M * N; i++)
        assert_true(close_rel(out[i], ref[i], 1e-5));
    free(w);
}

static void test_matmul_f32(void **state) {
    (void)state;
    check_matmul(PG_F32);
}
static void test_matmul_f16(void **state) {
    (void)state;
    check_matmul(PG_F16);
}
static void test_matmul_bf16(void **state) {
    (void)state;
    check_matmul(PG_BF16);
}
static void test_matmul_q8_0(void **state) {
    (void)state;
    check_matmul(PG_Q8_0);
}
static void test_matmul_q4_0(void **state) {
    (void)state;
    check_matmul(PG_Q4_0);
}

/* The default pool runs 3 threads here (main); a matmul split across them
 * equals the same columns computed one call at a time, bit for bit. */
static void test_matmul_independent_of_threads(void **state) {
    (void)state;
    enum { M = 3, N = 200, K = 256 };
    pg_dtype types[] = {PG_F32, PG_BF16, PG_Q8_0};
    float *wf = malloc(sizeof(float) * N * K), x[M * K], bias[N];
    float *out = malloc(sizeof(float) * M * N), col[M];
    fill(wf, N * K, 1.0f);
    fill(x, M * K, 1.0f);
    fill(bias, N, 1.0f);
    assert_int_equal(pg_pool_size(pg_pool_default()), 3);
    for (int t = 0; t < 3; t++) {
        void *w = make_weights(types[t], wf, N, K);
        size_t rb = pg_dtype_row_bytes(types[t], K);
        assert_int_equal(pg_matmul(out, x, w, types[t], bias, M, N, K), PAGODA_OK);
        for (int n = 0; n < N; n++) {
            assert_int_equal(pg_matmul(col, x, (uint8_t *)w + n * rb, types[t], bias + n, M, 1, K),
                             PAGODA_OK);
            for (int m = 0; m < M; m++)
                assert_true(col[m] == out[m * N + n]);
        }
        free(w);
    }
    free(wf);
    free(out);
}

static void test_matmul_errors(void **state) {
    (void)state;
    float x[40] = {0}, w[40] = {0}, out[4];
    assert_int_equal(pg_matmul(out, x, w, PG_I8, NULL, 1, 1, 40), PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pg_last_error(), "I8"));
    assert_int_equal(pg_matmul(out, x, w, PG_Q8_0, NULL, 1, 1, 40), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "multiple"));
    assert_false(pg_matmul_supports(PG_I32));
    assert_true(pg_matmul_supports(PG_Q4_0));
}

int main(void) {
    pg_pool_options po = pg_pool_options_default();
    po.n_threads = 3;
    po.pin = 0;
    if (pg_pool_default_configure(&po) != PAGODA_OK) {
        fprintf(stderr, "pool: %s\n", pg_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_matches_double),
        cmocka_unit_test(test_softmax_stable_and_exact),
        cmocka_unit_test(test_silu_swiglu),
        cmocka_unit_test(test_rope_inv_freq_plain_and_linear),
        cmocka_unit_test(test_rope_inv_freq_llama3),
        cmocka_unit_test(test_rope_inv_freq_llama3_matches_rope_freqs),
        cmocka_unit_test(test_rope_both_layouts),
        cmocka_unit_test(test_rope_relative_position),
        cmocka_unit_test(test_matmul_f32),
        cmocka_unit_test(test_matmul_f16),
        cmocka_unit_test(test_matmul_bf16),
        cmocka_unit_test(test_matmul_q8_0),
        cmocka_unit_test(test_matmul_q4_0),
        cmocka_unit_test(test_matmul_independent_of_threads),
        cmocka_unit_test(test_matmul_errors),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pg_pool_default_shutdown();
    return rc;
}
