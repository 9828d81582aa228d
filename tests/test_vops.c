/* Row ops of the dispatch table (rmsnorm_f32, softmax_f32, silu_f32,
 * swiglu_f32, argmax_f32, layernorm_f32, gelu_f32): every level this machine
 * (or qemu) runs against the scalar references, every length 1..70 (vector
 * tails), special values, a dense GELU sweep against double precision, and
 * row results independent of the number of rows (batch invariance). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/dispatch.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/ref/ref.h"

static uint64_t g_rng = 0x853c49e6748fea9bull;
static float rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (float)((g_rng * 2685821657736338717ull) >> 40) / (float)(1u << 23) - 1.0f;
}

static int tables(const pg_kernel_table **out) {
    int n = 0;
    for (int l = 0; l < PG_ISA_COUNT; l++) {
        const pg_kernel_table *t = pg_kernels_for_isa(pg_isa_name((pg_isa)l));
        if (t) out[n++] = t;
    }
    return n;
}

/* |a - b| <= rel * |b| + abs_tol, NaN equal to NaN, infinities equal. */
static void near(float a, float b, float rel, float abs_tol, const char *what, const char *isa,
                 size_t n, size_t i) {
    if (isnan(b) && isnan(a)) return;
    if (a == b) return;
    if (!(fabsf(a - b) <= rel * fabsf(b) + abs_tol))
        fail_msg("%s %s n=%zu i=%zu: %.9g vs reference %.9g", what, isa, n, i, (double)a,
                 (double)b);
}

enum { MAXN = 70 };

static void test_matches_reference(void **state) {
    (void)state;
    const pg_kernel_table *t[PG_ISA_COUNT];
    int nt = tables(t);
    float x[MAXN], g[MAXN], u[MAXN], w[MAXN], ref[MAXN], got[MAXN];
    for (size_t n = 1; n <= MAXN; n++) {
        for (size_t i = 0; i < n; i++)
            x[i] = rnd() * 12, g[i] = rnd() * 20, u[i] = rnd(), w[i] = rnd() + 1;
        for (int k = 0; k < nt; k++) {
            const char *isa = t[k]->isa;
            pg_ref_rmsnorm(ref, x, w, 1, n, 1e-5f);
            t[k]->rmsnorm_f32(got, x, w, 1, n, 1e-5f);
            for (size_t i = 0; i < n; i++)
                near(got[i], ref[i], 4e-6f, 0, "rmsnorm", isa, n, i);
            memcpy(ref, x, n * 4), memcpy(got, x, n * 4);
            pg_ref_softmax(ref, n);
            t[k]->softmax_f32(got, n);
            for (size_t i = 0; i < n; i++)
                near(got[i], ref[i], 1e-5f, 1e-30f, "softmax", isa, n, i);
            pg_ref_silu(ref, g, n);
            t[k]->silu_f32(got, g, n);
            for (size_t i = 0; i < n; i++)
                near(got[i], ref[i], 2e-6f, 1e-30f, "silu", isa, n, i);
            pg_ref_swiglu(ref, g, u, n);
            t[k]->swiglu_f32(got, g, u, n);
            for (size_t i = 0; i < n; i++)
                near(got[i], ref[i], 2e-6f, 1e-30f, "swiglu", isa, n, i);
            /* LayerNorm with and without bias, rows with an offset (mean far from 0) */
            for (int wb = 0; wb < 2; wb++) {
                float xs[MAXN];
                for (size_t i = 0; i < n; i++)
                    xs[i] = x[i] + 30.0f;
                pg_ref_layernorm(ref, xs, w, wb ? u : NULL, 1, n, 1e-5f);
                t[k]->layernorm_f32(got, xs, w, wb ? u : NULL, 1, n, 1e-5f);
                for (size_t i = 0; i < n; i++) /* n = 1: x - mean is 0 in both */
                    near(got[i], ref[i], 2e-5f, 2e-5f, "layernorm", isa, n, i);
            }
            pg_ref_gelu(ref, g, n);
            t[k]->gelu_f32(got, g, n);
            for (size_t i = 0; i < n; i++)
                near(got[i], ref[i], 3e-6f, 1.2e-7f * fabsf(g[i]) + 1e-30f, "gelu", isa, n, i);
            /* argmax: exact, with planted ties (the first wins) */
            size_t at = (size_t)(g_rng % n);
            float keep = x[at];
            x[at] = 100.0f;
            if (at + 3 < n) x[at + 3] = 100.0f;
            assert_int_equal(t[k]->argmax_f32(x, n), pg_ref_argmax_f32(x, n));
            assert_int_equal(t[k]->argmax_f32(x, n), at);
            x[at] = keep;
            if (at + 3 < n) x[at + 3] = rnd();
            assert_int_equal(t[k]->argmax_f32(x, n), pg_ref_argmax_f32(x, n));
        }
    }
}

static void test_special_values(void **state) {
    (void)state;
    const pg_kernel_table *t[PG_ISA_COUNT];
    int nt = tables(t);
    for (int k = 0; k < nt; k++) {
        /* silu of large magnitudes: -> x for big x, -> -0 for very negative x */
        float in[6] = {-200.0f, -90.0f, 0.0f, 90.0f, 200.0f, -INFINITY}, out[6], ref[6];
        t[k]->silu_f32(out, in, 6);
        pg_ref_silu(ref, in, 6);
        for (int i = 0; i < 6; i++)
            near(out[i], ref[i], 2e-6f, 0, "silu special", t[k]->isa, 6, (size_t)i);
        /* softmax with -inf entries (masked logits) and one huge logit */
        float s[7] = {-INFINITY, 1.0f, -INFINITY, 80.0f, 2.0f, -INFINITY, -1e30f};
        float r[7];
        memcpy(r, s, sizeof s);
        t[k]->softmax_f32(s, 7);
        pg_ref_softmax(r, 7);
        for (int i = 0; i < 7; i++)
            near(s[i], r[i], 1e-5f, 1e-30f, "softmax special", t[k]->isa, 7, (size_t)i);
        /* argmax skips NaN; all NaN -> 0; -inf only -> first */
        float a[9] = {NAN, -3.0f, NAN, 7.0f, NAN, 7.0f, -INFINITY, 2.0f, NAN};
        assert_int_equal(t[k]->argmax_f32(a, 9), 3);
        float nn[5] = {NAN, NAN, NAN, NAN, NAN};
        assert_int_equal(t[k]->argmax_f32(nn, 5), 0);
        float ni[5] = {NAN, -INFINITY, -INFINITY, NAN, NAN};
        assert_int_equal(t[k]->argmax_f32(ni, 5), pg_ref_argmax_f32(ni, 5));
        assert_int_equal(t[k]->argmax_f32(ni, 0), 0);
    }
}

/* GELU on a dense sweep of [-12, 12] (both erf intervals, their borders at
 * |x| = 0.875 sqrt 2 and 4 sqrt 2, the far tails) against a double-precision
 * GELU, and the special values. The SIMD erf is ARM's optimized-routines one
 * (1.1 ulp of erf); like libm's erff in the reference, 1 + erf(z) then has
 * an absolute error of about an ulp of erf (~6e-8) where erf(z) is near -1,
 * so the bound is 4 ulp of the result plus 1.5e-7 |x| (the ~0.5 |x| 6e-8 of
 * that absolute error, with margin). */
static void test_gelu_sweep(void **state) {
    (void)state;
    const pg_kernel_table *t[PG_ISA_COUNT];
    int nt = tables(t);
    enum { N = 24001 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    assert_true(x && y);
    for (int i = 0; i < N; i++)
        x[i] = -12.0f + 24.0f * (float)i / (float)(N - 1);
    for (int k = 0; k < nt; k++) {
        t[k]->gelu_f32(y, x, N);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            const double xd = x[i], exact = 0.5 * xd * (1.0 + erf(xd / sqrt(2.0)));
            const double err = fabs(y[i] - exact);
            const double tol = 4.0 * 1.19e-7 * fabs(exact) + 1.5e-7 * fabs(xd);
            if (!(err <= tol))
                fail_msg("gelu %s x=%.9g: %.9g vs exact %.9g", t[k]->isa, xd, (double)y[i], exact);
            if (err > worst) worst = err;
        }
        print_message("gelu %-10s max abs error vs double on [-12, 12]: %.3g\n", t[k]->isa, worst);
        float sp[6] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f}, so[6], sr[6];
        t[k]->gelu_f32(so, sp, 6);
        pg_ref_gelu(sr, sp, 6);
        assert_true(isnan(so[0]));
        assert_true(isinf(so[1]) && so[1] > 0);
        assert_true(isnan(so[2]) == isnan(sr[2])); /* -inf * 0: NaN in both */
        assert_true(so[3] == 0.0f && so[4] == 0.0f);
        near(so[5], sr[5], 1e-6f, 0, "gelu tiny", t[k]->isa, 6, 5);
    }
    free(x);
    free(y);
}

/* RMSNorm of a row alone equals the same row inside m = 5 rows, bitwise. */
static void test_rmsnorm_rows_independent(void **state) {
    (void)state;
    const pg_kernel_table *t[PG_ISA_COUNT];
    int nt = tables(t);
    enum { M = 5, N = 67 };
    float x[M * N], w[N], all[M * N], one[N];
    for (int i = 0; i < M * N; i++)
        x[i] = rnd();
    for (int i = 0; i < N; i++)
        w[i] = rnd();
    for (int k = 0; k < nt; k++) {
        t[k]->rmsnorm_f32(all, x, w, M, N, 1e-6f);
        for (int r = 0; r < M; r++) {
            t[k]->rmsnorm_f32(one, x + r * N, w, 1, N, 1e-6f);
            assert_memory_equal(one, all + r * N, sizeof one);
        }
        /* in place */
        float y[M * N];
        memcpy(y, x, sizeof y);
        t[k]->rmsnorm_f32(y, y, w, M, N, 1e-6f);
        assert_memory_equal(y, all, sizeof y);
        /* LayerNorm: the same two properties */
        t[k]->layernorm_f32(all, x, w, x, M, N, 1e-5f);
        for (int r = 0; r < M; r++) {
            t[k]->layernorm_f32(one, x + r * N, w, x, 1, N, 1e-5f);
            assert_memory_equal(one, all + r * N, sizeof one);
        }
        memcpy(y, x, sizeof y);
        t[k]->layernorm_f32(y, y, w, x, M, N, 1e-5f);
        assert_memory_equal(y, all, sizeof y);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_gelu_sweep),
        cmocka_unit_test(test_rmsnorm_rows_independent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
