/* Quantized GEMM (kernels/qgemm.h): every W8A8 and W4A8 microkernel this
 * machine (or qemu) runs against the scalar specification pg_ref_qgemm,
 * bit for bit (integer sums are exact and the f32 steps happen in one fixed
 * order, so there is no tolerance): M = 1 and odd M, odd N, K not a
 * multiple of the group, group sizes 32/64/128 and per channel, all three
 * epilogues with and without bias, 1 and 2 threads, K long enough to be
 * blocked; batch invariance (row i alone == row i inside larger batches);
 * the activation quantizer and its SIMD entries; RMSNorm fused into the
 * input stage; packing over a pool equals the single-threaded pack byte
 * for byte; bad arguments. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/dtype.h"
#include "base/pool.h"
#include "kernels/dispatch.h"
#include "kernels/qgemm.h"
#include "kernels/ref/ref.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd_u64(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ull;
}
static float rnd(void) { /* [-1, 1) */
    return (float)(rnd_u64() >> 40) / (float)(1u << 23) - 1.0f;
}
static int64_t rnd_int(int64_t lo, int64_t hi) {
    return lo + (int64_t)(rnd_u64() % (uint64_t)(hi - lo + 1));
}
static int on_qemu_arm(void) {
#if defined(__aarch64__)
    return 1;
#else
    return 0;
#endif
}

typedef struct {
    pg_qweight w;
    int8_t *q;
    float *s;
} owned_qweight;

static int g_act_group; /* pg_qweight.act_group of the weights made */
static void make_qweight(owned_qweight *o, int bits, int64_t group, int64_t N, int64_t K) {
    int64_t ng = pg_qweight_ngroups(K, group);
    o->q = malloc((size_t)(N * K));
    o->s = malloc((size_t)(N * ng) * sizeof(float));
    assert_true(o->q && o->s);
    int lo = bits == 8 ? -128 : -8, hi = bits == 8 ? 127 : 7;
    for (int64_t i = 0; i < N * K; i++)
        o->q[i] = (int8_t)rnd_int(lo, hi);
    /* half the weights get exact F16 scales (kernels with run_hs then pack
     * them in 2 bytes), half f32 ones that are not */
    const int f16 = (int)rnd_int(0, 1);
    for (int64_t i = 0; i < N * ng; i++) {
        o->s[i] = (0.5f + 0.5f * rnd()) * 0.01f;
        if (f16) o->s[i] = pg_f16_to_f32(pg_f32_to_f16(o->s[i]));
    }
    o->w = (pg_qweight){bits, group, N, K, o->q, o->s, g_act_group};
}
static void free_qweight(owned_qweight *o) {
    free(o->q);
    free(o->s);
}

static pg_pool *make_pool(int n) {
    pg_pool_options o = pg_pool_options_default();
    o.n_threads = n;
    o.pin = 0;
    o.blocktime_us = 0;
    pg_pool *p = NULL;
    assert_int_equal(pg_pool_create(&o, &p), PAGODA_OK);
    return p;
}

/* Run pg_qgemm into C (prefilled with C0) and return 0 on success. */
static void run_q(const pg_qpacked *pw, const float *A, int64_t M, int64_t lda, float *C,
                  int64_t ldc, const float *bias, pg_gemm_epilogue ep, pg_pool *pool) {
    int threads = pool ? pg_pool_size(pool) : 1;
    size_t ss = pg_qgemm_scratch_size(pw, M, threads);
    void *scratch = pg_malloc_aligned(ss);
    assert_non_null(scratch);
    assert_int_equal(pg_qgemm(pw, A, M, lda, C, ldc, bias, ep, pool, scratch), PAGODA_OK);
    pg_free(scratch);
}

static void check_case(const pg_qgemm_ukernel *uk, int64_t group, int64_t M, int64_t N, int64_t K,
                       pg_gemm_epilogue ep, int with_bias, pg_pool *pool) {
    const int swiglu = ep == PG_GEMM_SWIGLU;
    owned_qweight g, u;
    make_qweight(&g, uk->bits, group, N, K);
    if (swiglu) make_qweight(&u, uk->bits, group, N, K);
    const int64_t lda = K + rnd_int(0, 3), ldc = N + rnd_int(0, 3);
    float *A = malloc((size_t)(M * lda) * sizeof *A);
    float *C = malloc((size_t)(M * ldc) * sizeof *C);
    float *R = malloc((size_t)(M * ldc) * sizeof *R);
    float *bias = malloc((size_t)(2 * N) * sizeof *bias);
    assert_true(A && C && R && bias);
    for (int64_t i = 0; i < M * lda; i++)
        A[i] = rnd() * 3.0f;
    if (M > 2) /* an all-zero row: scale 0 */
        for (int64_t k = 0; k < K; k++)
            A[1 * lda + k] = 0.0f;
    for (int64_t i = 0; i < 2 * N; i++)
        bias[i] = rnd();
    for (int64_t i = 0; i < M * ldc; i++)
        C[i] = R[i] = rnd();
    const float *b = with_bias ? bias : NULL;
    pg_qpacked *pw = NULL;
    assert_int_equal(pg_qgemm_pack(&g.w, swiglu ? &u.w : NULL, uk, &pw), PAGODA_OK);
    assert_int_equal(pg_qgemm_n(pw), N);
    assert_int_equal(pg_qgemm_k(pw), K);
    assert_int_equal(pg_qgemm_is_swiglu(pw), swiglu);
    run_q(pw, A, M, lda, C, ldc, b, ep, pool);
    pg_ref_qgemm(&g.w, swiglu ? &u.w : NULL, A, M, lda, R, ldc, b, ep);
    for (int64_t i = 0; i < M * ldc; i++) {
        if (memcmp(&C[i], &R[i], 4) != 0) {
            fprintf(stderr,
                    "%s W%d group=%lld ep=%d bias=%d M=%lld N=%lld K=%lld: C[%lld,%lld] = %.9g, "
                    "ref %.9g\n",
                    uk->name, uk->bits, (long long)group, ep, with_bias, (long long)M, (long long)N,
                    (long long)K, (long long)(i / ldc), (long long)(i % ldc), C[i], R[i]);
            fail();
        }
    }
    pg_qgemm_free(pw);
    free_qweight(&g);
    if (swiglu) free_qweight(&u);
    free(A);
    free(C);
    free(R);
    free(bias);
}

static void test_qgemm_vs_reference(void **state) {
    (void)state;
    g_act_group = 0;
    pg_pool *pool2 = make_pool(2);
    const int64_t groups[] = {0, 32, 64, 128};
    const int rounds = on_qemu_arm() ? 3 : 6;
    for (int bits = 8; bits >= 4; bits -= 4) {
        const pg_qgemm_ukernel *uks[8];
        int nu = pg_qgemm_ukernel_variants(bits, uks, 8);
        assert_true(nu >= 1);
        assert_string_equal(uks[0]->name, "scalar");
        fprintf(stderr, "W%d variants:", bits);
        for (int v = 0; v < nu; v++)
            fprintf(stderr, " %s", uks[v]->name);
        fprintf(stderr, "\n");
        for (int v = 0; v < nu; v++) {
            for (int gi = 0; gi < 4; gi++) {
                for (int r = 0; r < rounds; r++) {
                    int64_t M = r == 0 ? 1 : rnd_int(2, 19);
                    int64_t N = 2 * rnd_int(1, 40) + 1;
                    int64_t K = rnd_int(1, 300);
                    if (r == 1) K = groups[gi] ? 3 * groups[gi] + 5 : 97;
                    pg_gemm_epilogue ep = (pg_gemm_epilogue)(r % 3);
                    check_case(uks[v], groups[gi], M, N, K, ep, r & 1, (r & 2) ? pool2 : NULL);
                }
            }
            /* K beyond the K block (1024 int8): the f32 accumulator is carried
             * across K blocks; M above mr takes the prefill path */
            check_case(uks[v], 32, 9, 37, 1100, PG_GEMM_STORE, 1, pool2);
            check_case(uks[v], 128, 13, 21, 2100, PG_GEMM_SWIGLU, 0, NULL);
            check_case(uks[v], 0, 7, 33, 1500, PG_GEMM_RESIDUAL, 1, pool2);
            /* 33 rows: balanced tiles and the next-slice prefetch of small M;
             * 70 rows, K past 4096: the long K blocks of larger M */
            check_case(uks[v], 32, 33, 70, 1100, PG_GEMM_RESIDUAL, 0, pool2);
            check_case(uks[v], 32, 70, 17, 4200, PG_GEMM_STORE, 1, NULL);
            /* decode (M <= 2) over many panels on the pool (threads' shares
             * of N with a partial last panel) */
            check_case(uks[v], 32, 1, 1000, 300, PG_GEMM_RESIDUAL, 1, pool2);
            check_case(uks[v], 0, 2, 777, 200, PG_GEMM_SWIGLU, 0, pool2);
            check_case(uks[v], 0, 1, 1030, 130, PG_GEMM_STORE, 1, pool2);
            /* more rows than one M block (MC_MAX rounded up to whole tiles):
             * two blocks, the SwiGLU epilogue's in-place scale and bias */
            check_case(uks[v], 32, 600, 9, 70, PG_GEMM_SWIGLU, 1, pool2);
            check_case(uks[v], 0, 530, 5, 40, PG_GEMM_RESIDUAL, 0, NULL);
            /* activation scales per (token, group) */
            g_act_group = 1;
            for (int gi = 1; gi < 4; gi++)
                for (int r = 0; r < rounds; r++) {
                    int64_t M = r == 0 ? 1 : rnd_int(2, 19), N = 2 * rnd_int(1, 40) + 1;
                    int64_t K = r == 1 ? 3 * groups[gi] + 5 : rnd_int(1, 300);
                    check_case(uks[v], groups[gi], M, N, K, (pg_gemm_epilogue)(r % 3), r & 1,
                               (r & 2) ? pool2 : NULL);
                }
            check_case(uks[v], 32, 9, 37, 1100, PG_GEMM_STORE, 1, pool2);
            check_case(uks[v], 32, 600, 9, 70, PG_GEMM_SWIGLU, 1, pool2);
            check_case(uks[v], 32, 530, 7, 50, PG_GEMM_SWIGLU, 0, NULL);
            g_act_group = 0;
        }
    }
    pg_pool_free(pool2);
}

/* Row i computed alone equals row i inside batches of several sizes, at
 * 1 and 2 threads: per-token scales and a fixed K order. */
static void test_qgemm_batch_invariance(void **state) {
    (void)state;
    pg_pool *pool2 = make_pool(2);
    const int64_t N = 45;
    const int64_t sizes[] = {7, 64, on_qemu_arm() ? 80 : 530};
    for (int bits = 8; bits >= 4; bits -= 4) {
        const pg_qgemm_ukernel *uks[8];
        int nu = pg_qgemm_ukernel_variants(bits, uks, 8);
        for (int v = 0; v < nu; v++) {
            for (int gi = 0; gi < 3; gi++) {
                /* group 64 over 1100 k: M <= 64 and M > 64 block K differently */
                const int64_t K = gi == 1 ? 1100 : 200;
                owned_qweight g;
                g_act_group = gi == 2;
                make_qweight(&g, bits, gi ? 64 : 0, N, K);
                pg_qpacked *pw = NULL;
                assert_int_equal(pg_qgemm_pack(&g.w, NULL, uks[v], &pw), PAGODA_OK);
                const int64_t Mmax = sizes[2];
                float *A = malloc((size_t)(Mmax * K) * sizeof *A);
                float *C = malloc((size_t)(Mmax * N) * sizeof *C);
                float *one = malloc((size_t)N * sizeof *one);
                assert_true(A && C && one);
                for (int64_t i = 0; i < Mmax * K; i++)
                    A[i] = rnd() * (1.0f + (float)(i % 7));
                for (int si = 0; si < 3; si++) {
                    const int64_t M = sizes[si];
                    for (int t = 0; t < 2; t++) {
                        run_q(pw, A, M, K, C, N, NULL, PG_GEMM_STORE, t ? pool2 : NULL);
                        for (int64_t i = 0; i < M; i += (M > 64 ? 37 : 5)) {
                            run_q(pw, A + i * K, 1, K, one, N, NULL, PG_GEMM_STORE, NULL);
                            if (memcmp(one, C + i * N, (size_t)N * sizeof *one) != 0) {
                                fprintf(stderr, "%s W%d: row %lld differs in M=%lld threads %d\n",
                                        uks[v]->name, bits, (long long)i, (long long)M, t + 1);
                                fail();
                            }
                        }
                    }
                }
                free(A);
                free(C);
                free(one);
                pg_qgemm_free(pw);
                free_qweight(&g);
            }
            g_act_group = 0;
        }
    }
    pg_pool_free(pool2);
}

/* Extreme values: every weight at the bottom (-128 / -8) or top of its
 * range and every activation at +-127, over the longest per-channel K
 * (65536) and in 32-groups: the integer sums reach their largest
 * magnitudes (the AVX512_VNNI W4 kernel's raw-byte sums wrap modulo 2^32 on
 * the way) and must still equal the reference exactly. */
static void test_qgemm_extreme_values(void **state) {
    (void)state;
    g_act_group = 0;
    const int64_t N = 40, K = on_qemu_arm() ? 16384 : 65536, M = 3;
    float *A = malloc((size_t)(M * K) * sizeof *A);
    float *C = malloc((size_t)(M * N) * sizeof *C);
    float *R = malloc((size_t)(M * N) * sizeof *R);
    int8_t *q = malloc((size_t)(N * K));
    float *sc = malloc((size_t)(N * (K / 32)) * sizeof *sc);
    assert_true(A && C && R && q && sc);
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) /* row 0 all +127, row 1 all -127, row 2 mixed */
            A[m * K + k] = m == 0 ? 1.0f : (m == 1 ? -1.0f : ((k / 3) & 1 ? 2.0f : -2.0f));
    for (int bits = 8; bits >= 4; bits -= 4) {
        const int8_t lo = bits == 8 ? -128 : -8, hi = bits == 8 ? 127 : 7;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < K; k++)
                q[n * K + k] = n % 3 == 0 ? lo : (n % 3 == 1 ? hi : ((k + n) & 1 ? lo : hi));
        for (int64_t i = 0; i < N * (K / 32); i++)
            sc[i] = 0.0078125f * (float)(1 + i % 5);
        const pg_qgemm_ukernel *uks[8];
        int nu = pg_qgemm_ukernel_variants(bits, uks, 8);
        for (int v = 0; v < nu; v++)
            for (int gi = 0; gi < 2; gi++) {
                pg_qweight w = {bits, gi ? 32 : 0, N, K, q, sc, 0};
                pg_qpacked *pw = NULL;
                assert_int_equal(pg_qgemm_pack(&w, NULL, uks[v], &pw), PAGODA_OK);
                run_q(pw, A, M, K, C, N, NULL, PG_GEMM_STORE, NULL);
                pg_ref_qgemm(&w, NULL, A, M, K, R, N, NULL, PG_GEMM_STORE);
                for (int64_t i = 0; i < M * N; i++)
                    if (memcmp(&C[i], &R[i], 4) != 0) {
                        fprintf(stderr, "%s W%d group %d: C[%lld] = %.9g, ref %.9g\n", uks[v]->name,
                                bits, gi ? 32 : 0, (long long)i, C[i], R[i]);
                        fail();
                    }
                pg_qgemm_free(pw);
            }
    }
    free(A);
    free(C);
    free(R);
    free(q);
    free(sc);
}

/* pg_qgemm called from inside a region of its own pool (the pool then runs
 * it inline on one thread) computes every output, the same bits. */
typedef struct {
    const pg_qpacked *pw;
    const float *A;
    float *C;
    pg_pool *pool;
    void *scratch;
    int64_t M, K, N;
} nested_ctx;

static void nested_region(void *vctx, int tid, int n) {
    (void)n;
    nested_ctx *c = vctx;
    if (tid != 0) return;
    assert_int_equal(
        pg_qgemm(c->pw, c->A, c->M, c->K, c->C, c->N, NULL, PG_GEMM_STORE, c->pool, c->scratch),
        PAGODA_OK);
}

static void test_qgemm_nested_in_pool(void **state) {
    (void)state;
    const int64_t M = 9, N = 200, K = 160;
    pg_pool *pool = make_pool(2);
    owned_qweight g;
    make_qweight(&g, 4, 32, N, K);
    float *A = malloc((size_t)(M * K) * sizeof *A), *C = calloc((size_t)(M * N), sizeof *C);
    float *R = malloc((size_t)(M * N) * sizeof *R);
    assert_true(A && C && R);
    for (int64_t i = 0; i < M * K; i++)
        A[i] = rnd();
    pg_qpacked *pw = NULL;
    assert_int_equal(pg_qgemm_pack(&g.w, NULL, NULL, &pw), PAGODA_OK);
    void *scratch = pg_malloc_aligned(pg_qgemm_scratch_size(pw, M, 2));
    assert_non_null(scratch);
    assert_int_equal(pg_qgemm(pw, A, M, K, R, N, NULL, PG_GEMM_STORE, pool, scratch), PAGODA_OK);
    nested_ctx c = {pw, A, C, pool, scratch, M, K, N};
    pg_pool_run(pool, nested_region, &c);
    assert_memory_equal(C, R, (size_t)(M * N) * sizeof *C);
    pg_free(scratch);
    pg_qgemm_free(pw);
    pg_pool_free(pool);
    free_qweight(&g);
    free(A);
    free(C);
    free(R);
}

/* A call below the pool's serial threshold walks every thread's share on
 * the caller: no region forked, the bits of the forked call. */
static void test_qgemm_serial_below_threshold(void **state) {
    (void)state;
    const int64_t M = 3, N = 512, K = 256;
    pg_pool *pool = make_pool(2);
    owned_qweight g;
    make_qweight(&g, 8, 32, N, K);
    float *A = malloc((size_t)(M * K) * sizeof *A), *F = malloc((size_t)(M * N) * sizeof *F);
    float *S = malloc((size_t)(M * N) * sizeof *S);
    assert_true(A && F && S);
    for (int64_t i = 0; i < M * K; i++)
        A[i] = rnd() * 3.0f;
    pg_qpacked *pw = NULL;
    assert_int_equal(pg_qgemm_pack(&g.w, NULL, NULL, &pw), PAGODA_OK);
    void *scratch = pg_malloc_aligned(pg_qgemm_scratch_size(pw, M, 2));
    assert_non_null(scratch);
    const int64_t macs = M * N * K;
    pg_pool_set_serial_macs(macs); /* at the threshold: forked */
    const uint64_t r0 = pg_pool_region_count(pool);
    assert_int_equal(pg_qgemm(pw, A, M, K, F, N, NULL, PG_GEMM_STORE, pool, scratch), PAGODA_OK);
    const uint64_t r1 = pg_pool_region_count(pool);
    assert_true(r1 > r0);
    pg_pool_set_serial_macs(macs + 1); /* one above: on the caller */
    assert_int_equal(pg_qgemm(pw, A, M, K, S, N, NULL, PG_GEMM_STORE, pool, scratch), PAGODA_OK);
    assert_int_equal(pg_pool_region_count(pool), r1);
    assert_memory_equal(F, S, (size_t)(M * N) * sizeof *F);
    pg_pool_set_serial_macs(0);
    pg_free(scratch);
    pg_qgemm_free(pw);
    pg_pool_free(pool);
    free_qweight(&g);
    free(A);
    free(F);
    free(S);
}

static void test_quantize_row(void **state) {
    (void)state;
    float a[5] = {0.5f, -2.0f, 1.0f, 0.0f, 2.0f};
    int8_t q[5];
    float s;
    pg_qgemm_quantize_row(a, 5, q, &s);
    assert_true(s == 2.0f / 127.0f);
    assert_int_equal(q[1], -127);
    assert_int_equal(q[4], 127);
    assert_int_equal(q[3], 0);
    assert_int_equal(q[2], 64); /* 63.5 rounds to even */
    float z[3] = {0, 0, 0};
    pg_qgemm_quantize_row(z, 3, q, &s);
    assert_true(s == 0.0f);
    assert_int_equal(q[0] | q[1] | q[2], 0);
}

/* The input stage's SIMD entries (amax_f32, quant_i8) of every table this
 * machine runs equal the scalar reference bit for bit: lengths around the
 * vector widths, ties (x * inv exactly k + 0.5 round to even), clamping,
 * zeros, NaN ignored by amax. */
static void test_quant_entries(void **state) {
    (void)state;
    const char *isas[] = {"scalar", "avx2", "avx512", "avx512bf16", "neon", "sve"};
    float x[300];
    int8_t q[300], r[300];
    int tested = 0;
    for (size_t t = 0; t < sizeof isas / sizeof isas[0]; t++) {
        const pg_kernel_table *kt = pg_kernels_for_isa(isas[t]);
        if (!kt) continue;
        tested++;
        for (int round = 0; round < 60; round++) {
            size_t n = round < 40 ? (size_t)round : (size_t)rnd_int(41, 300);
            for (size_t i = 0; i < n; i++) {
                int kind = (int)rnd_int(0, 5);
                x[i] = kind == 0   ? (float)rnd_int(-130, 130) + 0.5f /* ties at inv 1 */
                       : kind == 1 ? 0.0f
                                   : rnd() * 140.0f;
            }
            float inv = round % 3 == 0 ? 1.0f : 127.0f / (1.0f + (float)round);
            assert_true(memcmp(&(float){kt->amax_f32(x, n)}, &(float){pg_ref_amax_f32(x, n)}, 4) ==
                        0);
            memset(q, 0x55, sizeof q);
            memset(r, 0x55, sizeof r);
            int32_t sq = kt->quant_i8(x, n, inv, q), sr = pg_ref_quant_i8(x, n, inv, r);
            if (sq != sr || memcmp(q, r, sizeof q) != 0) {
                fprintf(stderr, "%s quant_i8 n=%zu inv=%g differs from the reference\n",
                        kt->variant.quant_i8, n, (double)inv);
                fail();
            }
            if (n > 3) { /* a NaN never wins the max */
                x[n / 2] = NAN;
                assert_true(kt->amax_f32(x, n) == pg_ref_amax_f32(x, n));
            }
        }
    }
    assert_true(tested >= 1);
    float t2[4] = {2.5f, -2.5f, 3.5f, 1000.0f};
    int8_t q2[4];
    assert_int_equal(pg_ref_quant_i8(t2, 4, 1.0f, q2), 2 - 2 + 4 + 127);
    assert_int_equal(q2[0], 2);
    assert_int_equal(q2[1], -2);
    assert_int_equal(q2[2], 4);
    assert_int_equal(q2[3], 127);
}

/* RMSNorm fused into the input stage (pg_qgemm_rmsnorm) equals the table's
 * rmsnorm_f32 followed by pg_qgemm, bit for bit, for every microkernel,
 * per-token and per-(token, group) activation scales, 1 and 2 threads. */
static void test_qgemm_rmsnorm_fused(void **state) {
    (void)state;
    pg_pool *pool2 = make_pool(2);
    const pg_kernel_table *kt = pg_kernels();
    for (int bits = 8; bits >= 4; bits -= 4) {
        const pg_qgemm_ukernel *uks[8];
        int nu = pg_qgemm_ukernel_variants(bits, uks, 8);
        for (int v = 0; v < nu; v++) {
            for (int c = 0; c < 4; c++) {
                g_act_group = c == 3;
                const int64_t group = c == 0 ? 0 : 32 * c;
                const int64_t M = c == 0 ? 1 : rnd_int(2, 23), N = 2 * rnd_int(1, 30) + 1;
                const int64_t K = rnd_int(1, 260), ldx = K + rnd_int(0, 2);
                const pg_gemm_epilogue ep = (pg_gemm_epilogue)(c % 3);
                owned_qweight g, u;
                make_qweight(&g, bits, group, N, K);
                if (ep == PG_GEMM_SWIGLU) make_qweight(&u, bits, group, N, K);
                float *X = malloc((size_t)(M * ldx) * sizeof *X), *nw = malloc((size_t)K * 4);
                float *Xn = malloc((size_t)(M * K) * sizeof *Xn);
                float *C = malloc((size_t)(M * N) * sizeof *C), *R = malloc((size_t)(M * N) * 4);
                assert_true(X && nw && Xn && C && R);
                for (int64_t i = 0; i < M * ldx; i++)
                    X[i] = rnd() * 4.0f;
                for (int64_t k = 0; k < K; k++)
                    nw[k] = 0.5f + rnd();
                for (int64_t i = 0; i < M * N; i++)
                    C[i] = R[i] = rnd();
                for (int64_t m = 0; m < M; m++)
                    kt->rmsnorm_f32(Xn + m * K, X + m * ldx, nw, 1, (size_t)K, 1e-5f);
                pg_qpacked *pw = NULL;
                assert_int_equal(
                    pg_qgemm_pack(&g.w, ep == PG_GEMM_SWIGLU ? &u.w : NULL, uks[v], &pw),
                    PAGODA_OK);
                pg_pool *pool = (c & 1) ? pool2 : NULL;
                run_q(pw, Xn, M, K, R, N, NULL, ep, pool);
                void *scratch = pg_malloc_aligned(pg_qgemm_scratch_size(pw, M, pool ? 2 : 1));
                assert_non_null(scratch);
                assert_int_equal(
                    pg_qgemm_rmsnorm(pw, X, M, ldx, nw, 1e-5f, C, N, NULL, ep, pool, scratch),
                    PAGODA_OK);
                if (memcmp(C, R, (size_t)(M * N) * sizeof *C) != 0) {
                    fprintf(stderr, "%s W%d group %lld: fused RMSNorm differs\n", uks[v]->name,
                            bits, (long long)group);
                    fail();
                }
                assert_int_equal(
                    pg_qgemm_rmsnorm(pw, X, M, ldx, NULL, 1e-5f, C, N, NULL, ep, pool, scratch),
                    PAGODA_ERR_INVALID_ARG);
                assert_int_equal(
                    pg_qgemm_rmsnorm(pw, X, M, ldx, nw, 0.0f, C, N, NULL, ep, pool, scratch),
                    PAGODA_ERR_INVALID_ARG);
                pg_free(scratch);
                pg_qgemm_free(pw);
                free_qweight(&g);
                if (ep == PG_GEMM_SWIGLU) free_qweight(&u);
                free(X);
                free(nw);
                free(Xn);
                free(C);
                free(R);
            }
            g_act_group = 0;
        }
    }
    pg_pool_free(pool2);
}

/* A kernel with an F16-scale form (run_hs) packs exact F16 scales in 2
 * bytes per column and group, f32 ones in 4; both compute the reference. */
static void test_qgemm_f16_scales(void **state) {
    (void)state;
    for (int bits = 8; bits >= 4; bits -= 4) {
        const pg_qgemm_ukernel *uks[8];
        int nu = pg_qgemm_ukernel_variants(bits, uks, 8);
        for (int v = 0; v < nu; v++) {
            if (!uks[v]->run_hs) continue;
            const int64_t N = 2 * uks[v]->nr, K = 256, G = 32;
            owned_qweight g;
            make_qweight(&g, bits, G, N, K);
            size_t bytes[2];
            for (int f = 0; f < 2; f++) {
                for (int64_t i = 0; i < N * K / G; i++) {
                    float x = pg_f16_to_f32(pg_f32_to_f16(g.s[i]));
                    g.s[i] = f ? x : x * (1.0f + 0x1p-20f); /* f: exact F16 */
                }
                pg_qpacked *pw = NULL;
                assert_int_equal(pg_qgemm_pack(&g.w, NULL, uks[v], &pw), PAGODA_OK);
                bytes[f] = pg_qgemm_packed_bytes(pw);
                pg_qgemm_free(pw);
            }
            assert_int_equal(bytes[0] - bytes[1], (size_t)(N * (K / G) * 2));
            free_qweight(&g);
            check_case(uks[v], 32, 7, 45, 200, PG_GEMM_STORE, 1, NULL);
        }
    }
}

static void test_qgemm_bad_args(void **state) {
    (void)state;
    owned_qweight g;
    make_qweight(&g, 8, 32, 5, 64);
    pg_qpacked *pw = (pg_qpacked *)&g; /* must be reset to NULL on error */
    pg_qweight w = g.w;
    w.bits = 5;
    assert_int_equal(pg_qgemm_pack(&w, NULL, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_null(pw);
    assert_non_null(strstr(pg_last_error(), "bits 5"));
    w = g.w;
    w.group = 48;
    assert_int_equal(pg_qgemm_pack(&w, NULL, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "group size 48"));
    w = g.w;
    w.bits = 4; /* values of an int8 weight are out of the int4 range */
    assert_int_equal(pg_qgemm_pack(&w, NULL, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "outside [-8, 7]"));
    w = g.w;
    w.group = 0;
    w.K = 70000;
    assert_int_equal(pg_qgemm_pack(&w, NULL, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "per-channel"));
    w.group = 131072; /* one group as long: the same int32 bound */
    assert_int_equal(pg_qgemm_pack(&w, NULL, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "group size 131072"));
    w = g.w;
    w.N = 0;
    assert_int_equal(pg_qgemm_pack(&w, NULL, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    pg_qweight up = g.w;
    up.N = 4;
    assert_int_equal(pg_qgemm_pack(&g.w, &up, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_qgemm_pack(NULL, NULL, NULL, &pw), PAGODA_ERR_INVALID_ARG);

    assert_int_equal(pg_qgemm_pack(&g.w, NULL, NULL, &pw), PAGODA_OK);
    float A[64] = {0}, C[5];
    void *scratch = pg_malloc_aligned(pg_qgemm_scratch_size(pw, 1, 1) + 64);
    assert_int_equal(pg_qgemm(pw, A, 1, 64, C, 5, NULL, PG_GEMM_SWIGLU, NULL, scratch),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_qgemm(pw, A, 1, 63, C, 5, NULL, PG_GEMM_STORE, NULL, scratch),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_qgemm(pw, A, 1, 64, C, 5, NULL, PG_GEMM_STORE, NULL, (char *)scratch + 4),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_qgemm(pw, A, 1, 64, C, 5, NULL, PG_GEMM_STORE, NULL, scratch), PAGODA_OK);
    for (int i = 0; i < 5; i++)
        assert_true(C[i] == 0.0f);
    pg_free(scratch);
    pg_qgemm_free(pw);
    free_qweight(&g);
}

/* Packing over a pool (pg_qgemm_pack_pool, the load-time path) gives the
 * bytes of the single-threaded pg_qgemm_pack for every microkernel layout,
 * W8 and W4, per channel / groups (F16 and f32 scales), act groups, SwiGLU
 * pairs and a partial last panel, at 2 and 3 threads; an out-of-range value
 * found by a pool thread is the same error. */
static void test_qgemm_pack_pool_identical(void **state) {
    (void)state;
    pg_pool *pools[2] = {make_pool(2), make_pool(3)};
    const int64_t N = 157, K = 480; /* N * K >= 65536: the pool path runs */
    for (int bits = 8; bits >= 4; bits -= 4) {
        const pg_qgemm_ukernel *uks[8];
        int nu = pg_qgemm_ukernel_variants(bits, uks, 8);
        for (int v = 0; v < nu; v++)
            for (int c = 0; c < 4; c++) {
                const int64_t group = c == 0 ? 0 : c == 3 ? 128 : 32;
                const int swiglu = c == 2;
                g_act_group = c == 1;
                owned_qweight g, u;
                make_qweight(&g, bits, group, N, K);
                if (swiglu) make_qweight(&u, bits, group, N, K);
                pg_qpacked *one = NULL;
                assert_int_equal(pg_qgemm_pack(&g.w, swiglu ? &u.w : NULL, uks[v], &one),
                                 PAGODA_OK);
                assert_int_equal(pg_qgemm_act_group(one), c == 1 ? group : 0);
                for (int pi = 0; pi < 2; pi++) {
                    pg_qpacked *par = NULL;
                    assert_int_equal(
                        pg_qgemm_pack_pool(&g.w, swiglu ? &u.w : NULL, uks[v], pools[pi], &par),
                        PAGODA_OK);
                    assert_int_equal(pg_qgemm_packed_bytes(par), pg_qgemm_packed_bytes(one));
                    if (memcmp(pg_qgemm_packed_data(par), pg_qgemm_packed_data(one),
                               pg_qgemm_packed_bytes(one)) != 0)
                        fail_msg("%s W%d group %lld case %d: pool-packed bytes differ",
                                 uks[v]->name, bits, (long long)group, c);
                    assert_int_equal(pg_qgemm_act_group(par), pg_qgemm_act_group(one));
                    pg_qgemm_free(par);
                }
                pg_qgemm_free(one);
                if (bits == 4 && v == 0 && c == 0) {
                    g.q[N * K - 5] = 9; /* near the end: found by the last thread */
                    pg_qpacked *bad = (pg_qpacked *)&g;
                    assert_int_equal(pg_qgemm_pack_pool(&g.w, NULL, NULL, pools[1], &bad),
                                     PAGODA_ERR_INVALID_ARG);
                    assert_null(bad);
                    assert_non_null(strstr(pg_last_error(), "weight value 9 at"));
                }
                free_qweight(&g);
                if (swiglu) free_qweight(&u);
            }
    }
    g_act_group = 0;
    pg_pool_free(pools[0]);
    pg_pool_free(pools[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qgemm_vs_reference),
        cmocka_unit_test(test_qgemm_batch_invariance),
        cmocka_unit_test(test_qgemm_extreme_values),
        cmocka_unit_test(test_qgemm_nested_in_pool),
        cmocka_unit_test(test_quantize_row),
        cmocka_unit_test(test_qgemm_bad_args),
        cmocka_unit_test(test_quant_entries),
        cmocka_unit_test(test_qgemm_rmsnorm_fused),
        cmocka_unit_test(test_qgemm_f16_scales),
        cmocka_unit_test(test_qgemm_pack_pool_identical),
        cmocka_unit_test(test_qgemm_serial_below_threshold),
    };
    pg_pool_set_serial_macs(0); /* exercise the forked paths on small cases too */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
