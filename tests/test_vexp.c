/* Vector exp (dispatch entry vexp_f32): every level this machine (or qemu)
 * runs, against the correctly rounded e^x (double exp rounded to float) on a
 * dense sample of every float in [-104, 0] (all exponents, a stride through
 * the mantissas; denormal results included) and in [0, 88.7], plus the
 * special values, every array length 0..40 (tails) and in-place use. */
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/dispatch.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ulp distance of two non-negative floats (denormals count one ulp each). */
static uint32_t ulp_dist(float a, float b) {
    uint32_t x = bits(a), y = bits(b);
    return x > y ? x - y : y - x;
}

/* Every level's table (NULL-terminated). */
static int tables(const pg_kernel_table **out) {
    int n = 0;
    for (int l = 0; l < PG_ISA_COUNT; l++) {
        const pg_kernel_table *t = pg_kernels_for_isa(pg_isa_name((pg_isa)l));
        if (t) out[n++] = t;
    }
    return n;
}

/* Run all tables over floats with magnitude bits [lo, hi) of sign `neg`,
 * stepping `stride`; the max ulp error per table must be <= max_ulp. */
static void sweep(uint32_t lo, uint32_t hi, uint32_t stride, int neg, uint32_t max_ulp) {
    enum { CH = 4096 };
    static float x[CH], want[CH], got[CH];
    const pg_kernel_table *t[PG_ISA_COUNT];
    int nt = tables(t);
    uint32_t worst[PG_ISA_COUNT] = {0};
    float worst_x[PG_ISA_COUNT] = {0};
    size_t count = 0;
    for (uint64_t m = lo; m < hi;) {
        int n = 0;
        for (; n < CH && m < hi; n++, m += stride) {
            x[n] = from_bits((uint32_t)m | (neg ? 0x80000000u : 0));
            want[n] = (float)exp((double)x[n]);
        }
        count += (size_t)n;
        for (int i = 0; i < nt; i++) {
            t[i]->vexp_f32(x, got, (size_t)n);
            for (int j = 0; j < n; j++) {
                uint32_t d = ulp_dist(got[j], want[j]);
                if (!(got[j] >= 0)) d = UINT32_MAX; /* NaN or negative */
                if (d > worst[i]) worst[i] = d, worst_x[i] = x[j];
            }
        }
    }
    for (int i = 0; i < nt; i++) {
        print_message("  vexp %-10s %s[%g, %g] (%zu values): max %u ulp (at x = %.9g)\n", t[i]->isa,
                      neg ? "-" : "+", (double)from_bits(lo), (double)from_bits(hi), count,
                      worst[i], (double)worst_x[i]);
        if (worst[i] > max_ulp)
            fail_msg("vexp %s: %u ulp at x = %.9g (allowed %u)", t[i]->isa, worst[i],
                     (double)worst_x[i], max_ulp);
    }
}

/* Under qemu every instruction is emulated: a sparser (still all-exponent) sample. */
static uint32_t stride(void) {
    return getenv("PAGODA_EXPECT_FEATURES") ? 2053 : 61;
}

static void test_softmax_domain(void **state) {
    (void)state;
    /* -0 .. -104: magnitudes 0 (incl. denormal inputs) to bits(104) */
    sweep(0, bits(104.0f) + 1, stride(), 1, 2);
    /* the tail down to where e^x rounds to zero, densely */
    sweep(bits(100.0f), bits(104.0f) + 1, stride() / 8 + 1, 1, 2);
}

static void test_positive_range(void **state) {
    (void)state;
    sweep(0, bits(88.72f), stride(), 0, 2);
}

static void test_special_values(void **state) {
    (void)state;
    const float in[] = {-INFINITY, INFINITY,     NAN,      -0.0f,    0.0f,   -1e30f,
                        -104.5f,   -103.97f,     -87.33f,  88.7228f, 88.73f, 1e30f,
                        -FLT_MIN,  FLT_TRUE_MIN, -FLT_MAX, FLT_MAX};
    enum { N = sizeof in / sizeof in[0] };
    const pg_kernel_table *t[PG_ISA_COUNT];
    int nt = tables(t);
    for (int i = 0; i < nt; i++) {
        float out[N];
        t[i]->vexp_f32(in, out, N);
        for (int j = 0; j < N; j++) {
            float want = (float)exp((double)in[j]);
            if (isnan(in[j]))
                assert_true(isnan(out[j]));
            else if (ulp_dist(out[j], want) > 2)
                fail_msg("vexp %s: e^%g = %g, want %g", t[i]->isa, (double)in[j], (double)out[j],
                         (double)want);
        }
        assert_true(out[0] == 0.0f && !signbit(out[0]));
        assert_true(isinf(out[1]) && out[1] > 0);
        assert_true(out[3] == 1.0f && out[4] == 1.0f);
        assert_true(out[5] == 0.0f && out[6] == 0.0f);
    }
}

/* Every length 0..40 (tails), in place, and nothing written past n. */
static void test_lengths_and_in_place(void **state) {
    (void)state;
    const pg_kernel_table *t[PG_ISA_COUNT];
    int nt = tables(t);
    for (int i = 0; i < nt; i++)
        for (size_t n = 0; n <= 40; n++) {
            float x[48], y[48];
            for (size_t j = 0; j < 48; j++)
                x[j] = -(float)j * 0.37f, y[j] = 12345.0f;
            t[i]->vexp_f32(x, y, n);
            for (size_t j = 0; j < 48; j++) {
                if (j < n)
                    assert_true(ulp_dist(y[j], (float)exp((double)x[j])) <= 2);
                else
                    assert_true(y[j] == 12345.0f);
            }
            t[i]->vexp_f32(x, x, n);
            assert_memory_equal(x, y, n * sizeof(float));
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_softmax_domain),
        cmocka_unit_test(test_positive_range),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_lengths_and_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
