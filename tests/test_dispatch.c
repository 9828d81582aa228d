/* Kernel dispatch: every variant this machine (or qemu) supports against the
 * scalar references, any n, misaligned pointers, alignment-independent
 * (batch-invariant) summation order, and PAGODA_ISA-style level selection. */
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/dtype.h"
#include "base/log.h"
#include "kernels/dispatch.h"
#include "kernels/gated_delta.h"
#include "kernels/ref/ref.h"

static const size_t SIZES[] = {0, 1, 3, 7, 8, 15, 16, 17, 31, 64, 100, 1000, 4097};
enum { N_SIZES = sizeof SIZES / sizeof SIZES[0], MAX_N = 4097, PAD = 4 };

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float rnd(void) { /* xorshift64*, uniform in [-1, 1) */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (float)((g_rng * 2685821657736338717ull) >> 40) / (float)(1u << 23) - 1.0f;
}

/* The logical inputs (MAX_N elements each) and misalignable work buffers
 * (PAD spare elements, so a view can start at element offset 0..PAD-1 of a
 * 64-byte aligned block). */
typedef struct {
    float sa[MAX_N], sb[MAX_N];
    uint16_t sbf[MAX_N], sf16[MAX_N];
    float *a, *b;
    uint16_t *wbf, *wf16;
} data;

/* integers: small integers, so every product and partial sum is exact in
 * f32 and any summation order must give the reference's bits. */
static void fill(data *d, bool integers) {
    for (size_t i = 0; i < MAX_N; i++) {
        float x = rnd(), y = rnd(), w = rnd(), v = rnd();
        if (integers) x = floorf(x * 8), y = floorf(y * 8), w = floorf(w * 8), v = floorf(v * 8);
        d->sa[i] = x;
        d->sb[i] = y;
        d->sbf[i] = pg_f32_to_bf16(integers ? w : w * 1.7f);
        d->sf16[i] = pg_f32_to_f16(integers ? v : v * 3.1f);
    }
}

static data *alloc_data(void) {
    data *d = calloc(1, sizeof *d);
    assert_non_null(d);
    d->a = pg_malloc_aligned((MAX_N + PAD) * sizeof(float));
    d->b = pg_malloc_aligned((MAX_N + PAD) * sizeof(float));
    d->wbf = pg_malloc_aligned((MAX_N + PAD) * sizeof(uint16_t));
    d->wf16 = pg_malloc_aligned((MAX_N + PAD) * sizeof(uint16_t));
    assert_true(d->a && d->b && d->wbf && d->wf16);
    return d;
}

static void free_data(data *d) {
    pg_free(d->a);
    pg_free(d->b);
    pg_free(d->wbf);
    pg_free(d->wf16);
    free(d);
}

/* sum |w_i x_i| in double: the scale of the rounding error of any f32 order. */
static double abs_sum(const float *w, const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += fabs((double)w[i] * x[i]);
    return s;
}

/* Reordered f32 sums of n terms differ by a few ulps of sum|w*x| times
 * sqrt(n) in practice; 4e-6 relative (~32 ulps) is well below the weight of
 * one term (~1/n of the sum for n <= 4097), so a dropped or doubled element
 * cannot hide in it. Integer data catches those exactly at any n. */
#define REL_TOL 4e-6

static const char *const ENTRY[3] = {"dot_f32", "dot_bf16_f32", "dot_f16_f32"};

/* Run the three entries of t on the first n inputs placed at element
 * offsets off (first operand) and ob (second operand). */
static void run_table(const pg_kernel_table *t, data *d, size_t n, size_t off, size_t ob,
                      float r[3]) {
    float *a = d->a + off, *b = d->b + ob;
    uint16_t *wbf = d->wbf + off, *wf16 = d->wf16 + off;
    memcpy(a, d->sa, n * sizeof *a);
    memcpy(b, d->sb, n * sizeof *b);
    memcpy(wbf, d->sbf, n * sizeof *wbf);
    memcpy(wf16, d->sf16, n * sizeof *wf16);
    r[0] = t->dot_f32(a, b, n);
    r[1] = t->dot_bf16_f32(wbf, b, n);
    r[2] = t->dot_f16_f32(wf16, b, n);
}

/* Every entry of t against the references for every size: within REL_TOL of
 * sum|w*x| (exact: bit-identical, for integer data), and bit-identical
 * across pointer misalignments (the order depends only on n). */
static void check_table(const pg_kernel_table *t, data *d, bool exact) {
    static float wbf[MAX_N], wf16[MAX_N];
    for (size_t i = 0; i < MAX_N; i++)
        wbf[i] = pg_bf16_to_f32(d->sbf[i]), wf16[i] = pg_f16_to_f32(d->sf16[i]);
    for (int s = 0; s < N_SIZES; s++) {
        size_t n = SIZES[s];
        float ref[3] = {pg_ref_dot_f32(d->sa, d->sb, n), pg_ref_dot_bf16_f32(d->sbf, d->sb, n),
                        pg_ref_dot_f16_f32(d->sf16, d->sb, n)};
        double scale[3] = {abs_sum(d->sa, d->sb, n), abs_sum(wbf, d->sb, n),
                           abs_sum(wf16, d->sb, n)};
        uint32_t first[3]; /* bit patterns at offset 0 */
        for (size_t off = 0; off < PAD; off++) {
            float r[3];
            run_table(t, d, n, off, (off * 3 + 1) % PAD, r);
            for (int k = 0; k < 3; k++) {
                double err = fabs((double)r[k] - (double)ref[k]);
                if (exact ? r[k] != ref[k] : err > REL_TOL * scale[k])
                    fail_msg("%s[%s] n=%zu off=%zu: got %.9g want %.9g (err %.3g, sum|wx| %.3g)",
                             ENTRY[k], t->isa, n, off, r[k], ref[k], err, scale[k]);
                uint32_t bits;
                memcpy(&bits, &r[k], sizeof bits);
                if (off == 0)
                    first[k] = bits;
                else if (bits != first[k])
                    fail_msg("%s[%s] n=%zu: result at offset %zu (%.9g) differs in its bits from "
                             "offset 0 (order must depend only on n)",
                             ENTRY[k], t->isa, n, off, r[k]);
            }
        }
    }
}

/* Each level name: its table exists exactly when the CPU supports it. */
static int for_each_supported(void (*fn)(const pg_kernel_table *t, void *arg), void *arg) {
    int tested = 0;
    for (int l = 0; l < PG_ISA_COUNT; l++) {
        const char *name = pg_isa_name((pg_isa)l);
        const pg_kernel_table *t = pg_kernels_for_isa(name);
        assert_int_equal(t != NULL, pg_isa_supported(pg_cpu(), (pg_isa)l));
        if (!t) continue;
        assert_string_equal(t->isa, name);
        fn(t, arg);
        tested++;
    }
    return tested;
}

static void check_random(const pg_kernel_table *t, void *arg) {
    print_message("  variant table %s: dot_f32=%s dot_bf16_f32=%s dot_f16_f32=%s\n", t->isa,
                  t->variant.dot_f32, t->variant.dot_bf16_f32, t->variant.dot_f16_f32);
    check_table(t, arg, false);
}

static void check_exact(const pg_kernel_table *t, void *arg) {
    check_table(t, arg, true);
}

static void test_variants_match_reference_random(void **state) {
    (void)state;
    data *d = alloc_data();
    fill(d, false);
    int tested = for_each_supported(check_random, d);
    /* scalar plus the best level at least (qemu -cpu max / this x86: >= 3). */
    assert_true(tested >= 1 + (pg_cpu()->best_isa != PG_ISA_SCALAR));
    free_data(d);
}

static void test_variants_match_reference_exact_on_integers(void **state) {
    (void)state;
    data *d = alloc_data();
    fill(d, true);
    for_each_supported(check_exact, d);
    free_data(d);
}

/* Table contents: no NULL entry, and each entry's variant is a level not
 * above the table's own that this CPU supports. */
static void check_entries(const pg_kernel_table *t, void *arg) {
    (void)arg;
    assert_non_null(t->dot_f32);
    assert_non_null(t->dot_bf16_f32);
    assert_non_null(t->dot_f16_f32);
    /* the Gated DeltaNet set (bitwise tests against its reference:
     * tests/test_gated_delta.c) */
    assert_non_null(t->gdn);
    assert_non_null(t->gdn->recurrent);
    assert_non_null(t->gdn->mm);
    assert_non_null(t->gdn->vexp);
    assert_string_equal(t->gdn->name, t->variant.gdn);
    const char *v[4] = {t->variant.dot_f32, t->variant.dot_bf16_f32, t->variant.dot_f16_f32,
                        t->variant.gdn};
    int level = pg_isa_parse(t->isa);
    for (int k = 0; k < 4; k++) {
        int vl = pg_isa_parse(v[k]);
        assert_true(vl >= 0);
        assert_true(vl <= level);
        assert_true(pg_isa_supported(pg_cpu(), (pg_isa)vl));
    }
}

static void test_tables_are_complete(void **state) {
    (void)state;
    for_each_supported(check_entries, NULL);
    assert_null(pg_kernels_for_isa("bogus"));
    assert_null(pg_kernels_for_isa(NULL));
#if defined(__x86_64__)
    assert_null(pg_kernels_for_isa("sve")); /* the other architecture's levels never exist */
#else
    assert_null(pg_kernels_for_isa("avx2"));
#endif
}

/* PAGODA_ISA semantics through pg_kernels_select (the process table is
 * filled once, so forcing is tested on the function it calls). */
static void test_select_levels(void **state) {
    (void)state;
    const pg_cpu_info *c = pg_cpu();
    const char *best = pg_isa_name(c->best_isa);
    assert_string_equal(pg_kernels_select(NULL)->isa, best);
    assert_string_equal(pg_kernels_select("")->isa, best);
    const pg_kernel_table *s = pg_kernels_select("scalar");
    assert_string_equal(s->isa, "scalar");
    assert_ptr_equal(s->dot_f32, pg_ref_dot_f32);
    assert_string_equal(s->variant.dot_f16_f32, "scalar");
#if defined(__x86_64__)
    if (pg_isa_supported(c, PG_ISA_AVX2)) {
        const pg_kernel_table *t = pg_kernels_select("AVX2");
        assert_string_equal(t->isa, "avx2");
        assert_string_equal(t->variant.dot_f32, "avx2");
    }
#else
    if (pg_isa_supported(c, PG_ISA_NEON))
        assert_string_equal(pg_kernels_select("neon")->variant.dot_f32, "neon");
#endif
    /* Unknown names fall back to the best level (and log an error). */
    pg_log_level saved = pg_log_get_level();
    pg_log_set_level(PG_LOG_OFF);
    assert_string_equal(pg_kernels_select("bogus")->isa, best);
    pg_log_set_level(saved);
    /* The process table is what PAGODA_ISA asks for (unset under ctest: best). */
    assert_ptr_equal(pg_kernels(), pg_kernels_select(getenv("PAGODA_ISA")));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_variants_match_reference_random),
        cmocka_unit_test(test_variants_match_reference_exact_on_integers),
        cmocka_unit_test(test_tables_are_complete),
        cmocka_unit_test(test_select_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
