/* Prepacked GEMM (kernels/gemm.h): every variant this machine (or qemu)
 * supports against the scalar specification pg_ref_gemm, on randomized
 * shapes (M = 1, odd N and K, K not a multiple of the K block), with and
 * without bias, all three epilogues and F32/F16/BF16 weights; bitwise batch
 * invariance (row i alone == row i inside M = 7, 64, 512 at 1 and 2
 * threads); the activation conversion; bad arguments.
 *
 * Tolerance. The F32 path must equal the reference bit for bit (one fused
 * multiply-add per product in increasing k, everywhere). On the BF16 path
 * the variants with k-pairs (scalar, x86, NEON without BF16) reproduce the
 * reference's order and rounding (exact products, odd k then even k added
 * with round-to-nearest), so they must also match bit for bit. BFMMLA (Arm)
 * sums four exact products per step with its own intermediate rounding
 * (round-to-odd without FEAT_EBF16): both it and the reference add the SAME
 * exact products (A is rounded to BF16 identically) in f32, so each differs
 * from the exact sum by at most gamma_n * sum|p| with n ~ K additions and
 * unit roundoff u = 2^-24 (Higham, "Accuracy and Stability of Numerical
 * Algorithms", 2nd ed., sec. 4.2); round-to-odd steps cost at most 2u. The
 * test allows |C - ref| <= 4 (K + 4) u sum_k |a_k w_k|, then propagates it
 * through the epilogue (|silu'| <= 1.1). The SwiGLU epilogue is the table's
 * swiglu_f32, whose SIMD variants use a polynomial exp (within 2 ulp, see
 * test_vops): 16 ulp of the result are allowed for them. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/dtype.h"
#include "base/pool.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/ref/ref.h"
#if defined(__aarch64__)
#include "kernels/arm/arm.h"
#endif

static const char *const ISAS[] = {"scalar", "avx2", "avx512", "avx512bf16", "neon", "sve"};
enum { N_ISAS = sizeof ISAS / sizeof ISAS[0] };

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint64_t rnd_u64(void) { /* xorshift64* */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ull;
}
static float rnd(void) { /* uniform in [-1, 1) */
    return (float)(rnd_u64() >> 40) / (float)(1u << 23) - 1.0f;
}
static int64_t rnd_int(int64_t lo, int64_t hi) { /* [lo, hi] */
    return lo + (int64_t)(rnd_u64() % (uint64_t)(hi - lo + 1));
}

static int on_qemu_arm(void) {
#if defined(__aarch64__)
    return 1;
#else
    return 0;
#endif
}

/* A weight of dtype t with N rows of K, values in [-scale, scale). */
static void *make_weight(pg_dtype t, int64_t N, int64_t K, float scale) {
    size_t n = (size_t)(N * K);
    if (t == PG_F32) {
        float *w = malloc(n * sizeof *w);
        assert_non_null(w);
        for (size_t i = 0; i < n; i++)
            w[i] = rnd() * scale;
        return w;
    }
    uint16_t *w = malloc(n * sizeof *w);
    assert_non_null(w);
    for (size_t i = 0; i < n; i++)
        w[i] = t == PG_F16 ? pg_f32_to_f16(rnd() * scale) : pg_f32_to_bf16(rnd() * scale);
    return w;
}

static float w_f32(pg_dtype t, const void *W, size_t i) {
    if (t == PG_F32) return ((const float *)W)[i];
    uint16_t h = ((const uint16_t *)W)[i];
    return t == PG_F16 ? pg_bf16_to_f32(pg_f32_to_bf16(pg_f16_to_f32(h))) : pg_bf16_to_f32(h);
}

/* sum_k |a_k w_k| with A rounded as the kernel rounds it. */
static double abs_dot(pg_dtype t, const void *W, int64_t K, int64_t n, const float *a) {
    double s = 0;
    for (int64_t k = 0; k < K; k++) {
        float ak = t == PG_F32 ? a[k] : pg_bf16_to_f32(pg_f32_to_bf16(a[k]));
        s += fabs((double)ak * w_f32(t, W, (size_t)(n * K + k)));
    }
    return s;
}

typedef struct {
    pg_dtype t;
    int64_t M, N, K, lda, ldc;
    pg_gemm_epilogue ep;
    int with_bias;
} gemm_case;

/* Run one case on table kt with `pool` and compare with the reference. */
static void check_case(const pg_kernel_table *kt, const gemm_case *gc, pg_pool *pool) {
    const int64_t M = gc->M, N = gc->N, K = gc->K;
    const int swiglu = gc->ep == PG_GEMM_SWIGLU;
    void *Wg = make_weight(gc->t, N, K, 1.0f);
    void *Wu = swiglu ? make_weight(gc->t, N, K, 1.0f) : NULL;
    float *A = malloc((size_t)(M * gc->lda) * sizeof *A);
    float *C = malloc((size_t)(M * gc->ldc) * sizeof *C);
    float *R = malloc((size_t)(M * gc->ldc) * sizeof *R);
    float *Y = malloc((size_t)(M * 2 * N) * sizeof *Y);
    float *bias = malloc((size_t)(2 * N) * sizeof *bias);
    assert_true(A && C && R && Y && bias);
    for (int64_t i = 0; i < M * gc->lda; i++)
        A[i] = rnd() * 2.0f;
    for (int64_t i = 0; i < 2 * N; i++)
        bias[i] = rnd();
    for (int64_t i = 0; i < M * gc->ldc; i++)
        C[i] = R[i] = rnd(); /* residual input; also checks untouched padding */
    const float *b = gc->with_bias ? bias : NULL;

    pg_packed_weight *pw = NULL;
    pagoda_status st = swiglu ? pg_gemm_pack_swiglu(gc->t, Wg, Wu, N, K, kt, &pw)
                              : pg_gemm_pack(gc->t, Wg, N, K, kt, &pw);
    assert_int_equal(st, PAGODA_OK);
    assert_int_equal(pg_gemm_n(pw), N);
    assert_int_equal(pg_gemm_k(pw), K);
    int threads = pool ? pg_pool_size(pool) : 1;
    size_t ss = pg_gemm_scratch_size(pw, M, threads);
    void *scratch = pg_malloc_aligned(ss ? ss : 64);
    assert_non_null(scratch);
    assert_int_equal(pg_gemm(pw, A, M, gc->lda, C, gc->ldc, b, gc->ep, pool, scratch), PAGODA_OK);
    pg_ref_gemm(gc->t, Wg, Wu, N, K, A, M, gc->lda, R, gc->ldc, b, gc->ep, Y);

    const pg_gemm_ukernel *uk = gc->t == PG_F32 ? &kt->gemm_f32 : &kt->gemm_bf16;
    /* the sums are bitwise the reference's (F32, k-pair BF16); the SwiGLU
     * epilogue is too when the table uses the scalar swiglu_f32 */
    const int exact_sum = gc->t == PG_F32 || uk->kg == 2;
    const int exact = exact_sum && (!swiglu || kt->swiglu_f32 == pg_ref_swiglu);
    const double u = ldexp(1.0, -24);
    for (int64_t m = 0; m < M; m++) {
        for (int64_t n = 0; n < gc->ldc; n++) {
            float got = C[m * gc->ldc + n], want = R[m * gc->ldc + n];
            if (exact || n >= N) {
                if (memcmp(&got, &want, 4) != 0) {
                    fprintf(stderr,
                            "%s %s ep=%d M=%lld N=%lld K=%lld: C[%lld,%lld] = %.9g, ref %.9g\n",
                            kt->isa, pg_dtype_name(gc->t), gc->ep, (long long)M, (long long)N,
                            (long long)K, (long long)m, (long long)n, got, want);
                    fail();
                }
                continue;
            }
            const double ks = exact_sum ? 0.0 : 4.0 * (double)(K + 4) * u;
            double tg = ks * abs_dot(gc->t, Wg, K, n, A + m * gc->lda);
            double tol = tg;
            if (swiglu) {
                /* + the SIMD swiglu_f32's few ulp (vexp within 2 ulp, then a
                 * division and a product): 16 ulp of the result */
                double tu = ks * abs_dot(gc->t, Wu, K, n, A + m * gc->lda);
                double g = Y[m * 2 * N + n], up = Y[m * 2 * N + N + n];
                if (b) g += b[n], up += b[N + n];
                tol = 1.1 * fabs(up) * tg + fabs(g) * tu + 16 * u * fabs(want) + 1e-30;
            } else {
                tol += 4 * u * fabs(want);
            }
            if (!(fabs((double)got - want) <= tol)) {
                fprintf(
                    stderr,
                    "%s %s ep=%d M=%lld N=%lld K=%lld: C[%lld,%lld] = %.9g, ref %.9g, tol %.3g\n",
                    kt->isa, pg_dtype_name(gc->t), gc->ep, (long long)M, (long long)N, (long long)K,
                    (long long)m, (long long)n, got, want, tol);
                fail();
            }
        }
    }
    pg_free(scratch);
    pg_gemm_free(pw);
    free(Wg);
    free(Wu);
    free(A);
    free(C);
    free(R);
    free(Y);
    free(bias);
}

/* The tables to test: every supported level, plus (aarch64) the NEON table
 * with the k-pair BF16 kernel that cores without FEAT_BF16 get, which
 * qemu -cpu max (with BF16) would otherwise never select. */
#if defined(__aarch64__)
static pg_kernel_table g_extra;
#endif
static int tables(const pg_kernel_table *out[N_ISAS + 1]) {
    int n = 0;
    for (int l = 0; l < N_ISAS; l++)
        if (pg_kernels_for_isa(ISAS[l])) out[n++] = pg_kernels_for_isa(ISAS[l]);
#if defined(__aarch64__)
    const pg_kernel_table *neon = pg_kernels_for_isa("neon");
    if (neon) {
        g_extra = *neon;
        g_extra.isa = "neon-no-bf16";
        g_extra.gemm_bf16 = (pg_gemm_ukernel){"neon", 4, 16, 2, 1, pg_neon_gemm_uk_bf16, NULL};
        out[n++] = &g_extra;
    }
#endif
    return n;
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

/* Every supported variant vs the reference on random shapes. */
static void test_gemm_vs_reference(void **state) {
    (void)state;
    pg_pool *pool2 = make_pool(2);
    const pg_dtype types[] = {PG_F32, PG_F16, PG_BF16};
    const int rounds = on_qemu_arm() ? 6 : 14;
    const pg_kernel_table *ts[N_ISAS + 1];
    int nt = tables(ts);
    for (int l = 0; l < nt; l++) {
        const pg_kernel_table *kt = ts[l];
        for (int r = 0; r < rounds; r++) {
            for (int ti = 0; ti < 3; ti++) {
                for (int ep = PG_GEMM_STORE; ep <= PG_GEMM_SWIGLU; ep++) {
                    gemm_case gc;
                    gc.t = types[ti];
                    gc.ep = (pg_gemm_epilogue)ep;
                    /* M = 1 first, then random; odd sizes; K sometimes past a
                     * K block (256) and not a multiple of it. */
                    gc.M = r == 0 ? 1 : rnd_int(1, r % 3 == 0 ? 40 : 13);
                    gc.N = r == 1 ? 1 : rnd_int(1, 150) | 1;
                    gc.K = r == 2 ? 1 : (r % 4 == 3 ? rnd_int(257, 1100) : rnd_int(1, 90));
                    gc.lda = gc.K + rnd_int(0, 3);
                    gc.ldc = gc.N + rnd_int(0, 3);
                    gc.with_bias = (r + ep) & 1;
                    check_case(kt, &gc, (r & 1) ? pool2 : NULL);
                }
            }
        }
    }
    pg_pool_free(pool2);
}

/* Row i of C is the same bits whether computed alone (M = 1) or inside
 * M = 7, 32, 64, 512 (32 and up take the prefetching tiles), on 1 or 2 threads; N = 130 (40 under
 * qemu) splits N between threads, N = 5 (one panel) makes the threads split M. K = 600 crosses the
 * K block (512). */
static void invariance_case(const pg_kernel_table *kt, pg_dtype t, int64_t N, int64_t K,
                            pg_gemm_epilogue ep, int with_bias, pg_pool *p1, pg_pool *p2) {
    const int64_t MMAX = 512, Ms[] = {1, 7, 32, 64, 512};
    const int swiglu = ep == PG_GEMM_SWIGLU;
    void *Wg = make_weight(t, N, K, 0.5f);
    void *Wu = swiglu ? make_weight(t, N, K, 0.5f) : NULL;
    float *A = malloc((size_t)(MMAX * K) * sizeof *A);
    float *C = malloc((size_t)(MMAX * N) * sizeof *C);
    float *base = malloc((size_t)(MMAX * N) * sizeof *base);
    float *bias = malloc((size_t)(2 * N) * sizeof *bias);
    assert_true(A && C && base && bias);
    for (int64_t i = 0; i < MMAX * K; i++)
        A[i] = rnd() * 3.0f;
    for (int64_t i = 0; i < 2 * N; i++)
        bias[i] = rnd();
    const float *b = with_bias ? bias : NULL; /* no bias: STORE accumulates in C */
    pg_packed_weight *pw = NULL;
    assert_int_equal(swiglu ? pg_gemm_pack_swiglu(t, Wg, Wu, N, K, kt, &pw)
                            : pg_gemm_pack(t, Wg, N, K, kt, &pw),
                     PAGODA_OK);
    void *scratch = pg_malloc_aligned(pg_gemm_scratch_size(pw, MMAX, 2));
    assert_non_null(scratch);
    /* the baseline: every row alone (M = 1), one thread */
    for (int64_t i = 0; i < MMAX; i++)
        assert_int_equal(pg_gemm(pw, A + i * K, 1, K, base + i * N, N, b, ep, p1, scratch),
                         PAGODA_OK);
    for (int pi = 0; pi < 2; pi++) {
        pg_pool *p = pi ? p2 : p1;
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            int64_t M = Ms[mi];
            /* the batch starts at a different row each time */
            int64_t off = M == MMAX ? 0 : rnd_int(0, MMAX - M);
            memset(C, 0, (size_t)(M * N) * sizeof *C);
            assert_int_equal(pg_gemm(pw, A + off * K, M, K, C, N, b, ep, p, scratch), PAGODA_OK);
            if (memcmp(C, base + off * N, (size_t)(M * N) * sizeof *C) != 0) {
                for (int64_t e = 0; e < M * N; e++)
                    if (memcmp(C + e, base + off * N + e, 4) != 0) {
                        fprintf(stderr,
                                "%s %s ep=%d N=%lld: M=%lld threads=%d row %lld col %lld: %.9g vs "
                                "alone %.9g\n",
                                kt->isa, pg_dtype_name(t), ep, (long long)N, (long long)M, pi + 1,
                                (long long)(off + e / N), (long long)(e % N), C[e],
                                base[off * N + e]);
                        break;
                    }
                fail();
            }
        }
    }
    pg_free(scratch);
    pg_gemm_free(pw);
    free(Wg);
    free(Wu);
    free(A);
    free(C);
    free(base);
    free(bias);
}

static void test_gemm_batch_invariance(void **state) {
    (void)state;
    pg_pool *p1 = make_pool(1), *p2 = make_pool(2);
    const pg_kernel_table *ts[N_ISAS + 1];
    int nt = tables(ts);
    for (int l = 0; l < nt; l++) {
        const pg_kernel_table *kt = ts[l];
        const int64_t n = on_qemu_arm() ? 40 : 130; /* several panels either way */
        invariance_case(kt, PG_BF16, n, 600, PG_GEMM_STORE, 1, p1, p2);
        invariance_case(kt, PG_BF16, n, 600, PG_GEMM_STORE, 0, p1, p2);
        invariance_case(kt, PG_F32, n, 600, PG_GEMM_STORE, 0, p1, p2);
        invariance_case(kt, PG_BF16, 5, 300, PG_GEMM_STORE, 1, p1, p2);
        invariance_case(kt, PG_F16, 40, 70, PG_GEMM_SWIGLU, 1, p1, p2);
    }
    pg_pool_free(p1);
    pg_pool_free(p2);
}

/* A microkernel's run_pf (run plus a software prefetch) gives run's bits
 * for every row count and prefetch length, including several lines per
 * k-group, lengths past 4 ngroups (dropped) and 0. */
static void test_gemm_ukernel_prefetch(void **state) {
    (void)state;
    const pg_kernel_table *ts[N_ISAS + 1];
    int nt = tables(ts), checked = 0;
    enum { NG = 37 };
    for (int l = 0; l < nt; l++) {
        const pg_gemm_ukernel *uks[] = {&ts[l]->gemm_bf16, &ts[l]->gemm_f32};
        for (int u = 0; u < 2; u++) {
            const pg_gemm_ukernel *uk = uks[u];
            if (!uk->run_pf) continue;
            const int bf16 = u == 0;
            const size_t esz = bf16 ? 2 : 4;
            const int64_t as = NG * uk->kg * uk->ar + 8; /* elements per A row (group) */
            const size_t an = (size_t)(as * uk->mr), wn = (size_t)(NG * uk->kg * uk->nr);
            char *a = malloc(an * esz), *w = malloc(wn * esz), *pf = malloc(64 * 4 * NG + 64 * 8);
            const int64_t ldc = uk->nr + 3;
            float *c1 = malloc((size_t)(uk->mr * ldc) * 4),
                  *c2 = malloc((size_t)(uk->mr * ldc) * 4);
            assert_true(a && w && pf && c1 && c2);
            for (size_t i = 0; i < an; i++) {
                float v = rnd();
                if (bf16)
                    ((uint16_t *)a)[i] = pg_f32_to_bf16(v);
                else
                    ((float *)a)[i] = v;
            }
            for (size_t i = 0; i < wn; i++) {
                float v = rnd();
                if (bf16)
                    ((uint16_t *)w)[i] = pg_f32_to_bf16(v);
                else
                    ((float *)w)[i] = v;
            }
            /* one, two and four lines per k-group, a partial last group, clamped */
            const int64_t lens[] = {0, 5, NG, 2 * NG - 3, 4 * NG, 4 * NG + 7};
            for (int mr = 1; mr <= uk->mr; mr++)
                for (int acc = 0; acc < 2; acc++)
                    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                        for (int64_t i = 0; i < uk->mr * ldc; i++)
                            c1[i] = c2[i] = rnd();
                        uk->run(NG, a, as, w, c1, ldc, mr, acc);
                        uk->run_pf(NG, a, as, w, c2, ldc, mr, acc, pf, lens[li]);
                        assert_memory_equal(c1, c2, (size_t)(uk->mr * ldc) * 4);
                        checked++;
                    }
            free(a);
            free(w);
            free(pf);
            free(c1);
            free(c2);
        }
    }
    if (!checked) print_message("no microkernel with run_pf on this machine\n");
}

/* cvt_f32_bf16 of every table equals the reference: ties, NaN, inf,
 * negative zero, every tail length. */
static void test_gemm_cvt_bf16(void **state) {
    (void)state;
    enum { N = 67 };
    float src[N];
    uint16_t want[N], got[N + 1];
    for (int i = 0; i < N; i++)
        src[i] = rnd() * 100.0f;
    uint32_t specials[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0x80000000u,
                           0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        memcpy(&src[3 * i + 1], &specials[i], 4);
    pg_ref_cvt_f32_bf16(src, want, N);
    for (int l = 0; l < N_ISAS; l++) {
        const pg_kernel_table *kt = pg_kernels_for_isa(ISAS[l]);
        if (!kt) continue;
        for (int n = 0; n <= N; n++) {
            got[n < N ? n : N] = 0xabcd; /* the element past the end stays */
            kt->cvt_f32_bf16(src, got, (size_t)n);
            assert_memory_equal(got, want, (size_t)n * sizeof(uint16_t));
            if (n < N) assert_int_equal(got[n], 0xabcd);
        }
    }
}

/* pg_gemm called from inside a region of its own pool (the pool then runs
 * it inline on one thread) computes every output, the same bits. */
typedef struct {
    pg_packed_weight *pw;
    const float *A;
    float *C;
    pg_pool *pool;
    void *scratch;
    int64_t M;
} nested_ctx;

static void nested_region(void *vctx, int tid, int n) {
    (void)n;
    nested_ctx *c = vctx;
    if (tid != 0) return;
    int64_t K = pg_gemm_k(c->pw), N = pg_gemm_n(c->pw);
    assert_int_equal(
        pg_gemm(c->pw, c->A, c->M, K, c->C, N, NULL, PG_GEMM_STORE, c->pool, c->scratch),
        PAGODA_OK);
}

static void test_gemm_nested_in_pool(void **state) {
    (void)state;
    const int64_t M = 9, N = 200, K = 70;
    pg_pool *pool = make_pool(2);
    uint16_t *W = make_weight(PG_BF16, N, K, 1.0f);
    float *A = malloc((size_t)(M * K) * sizeof *A), *C = calloc((size_t)(M * N), sizeof *C);
    float *R = malloc((size_t)(M * N) * sizeof *R);
    assert_true(A && C && R);
    for (int64_t i = 0; i < M * K; i++)
        A[i] = rnd();
    pg_packed_weight *pw = NULL;
    assert_int_equal(pg_gemm_pack(PG_BF16, W, N, K, pg_kernels(), &pw), PAGODA_OK);
    void *scratch = pg_malloc_aligned(pg_gemm_scratch_size(pw, M, 2));
    assert_non_null(scratch);
    assert_int_equal(pg_gemm(pw, A, M, K, R, N, NULL, PG_GEMM_STORE, pool, scratch), PAGODA_OK);
    nested_ctx c = {pw, A, C, pool, scratch, M};
    pg_pool_run(pool, nested_region, &c);
    assert_memory_equal(C, R, (size_t)(M * N) * sizeof *C);
    pg_free(scratch);
    pg_gemm_free(pw);
    pg_pool_free(pool);
    free(W);
    free(A);
    free(C);
    free(R);
}

/* The decode prefetch hint (pg_gemm_set_next) changes no result: a chain of
 * float, quantized and SwiGLU weights linked in a cycle gives, at M = 1 and
 * 3 on 1 and 2 threads, the bits it gave unlinked; NULL arguments are
 * no-ops. */
static void test_gemm_next_prefetch(void **state) {
    (void)state;
    enum { NW = 3, M = 3 };
    const int64_t N = 200, K = 96;
    pg_pool *pools[2] = {make_pool(1), make_pool(2)};
    float *W = malloc((size_t)(N * K) * sizeof *W), *A = malloc((size_t)(M * K) * sizeof *A);
    assert_true(W && A);
    for (int64_t i = 0; i < N * K; i++)
        W[i] = rnd();
    for (int64_t i = 0; i < M * K; i++)
        A[i] = rnd();
    pg_packed_weight *pw[NW] = {NULL};
    assert_int_equal(pg_gemm_pack(PG_F32, W, N, K, NULL, &pw[0]), PAGODA_OK);
    assert_int_equal(pg_gemm_pack_quantize(PG_F32, W, NULL, N, K, 4, 32, 0, NULL, NULL, &pw[1]),
                     PAGODA_OK);
    assert_int_equal(pg_gemm_pack_swiglu(PG_F32, W, W, N / 2, K, NULL, &pw[2]), PAGODA_OK);
    const pg_gemm_epilogue ep[NW] = {PG_GEMM_STORE, PG_GEMM_RESIDUAL, PG_GEMM_SWIGLU};
    size_t ss = 0;
    for (int i = 0; i < NW; i++) {
        size_t s = pg_gemm_scratch_size(pw[i], M, 2);
        ss = s > ss ? s : ss;
    }
    void *scratch = pg_malloc_aligned(ss);
    float *C = calloc((size_t)(2 * 2 * NW * 2 * M * N), sizeof *C);
    assert_true(scratch && C);
    for (int linked = 0; linked < 2; linked++) {
        if (linked)
            for (int i = 0; i < NW; i++)
                pg_gemm_set_next(pw[i], pw[(i + 1) % NW]);
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < NW; i++)
                for (int64_t m = 1; m <= M; m += 2) {
                    float *c = C + ((((size_t)linked * 2 + t) * NW + i) * 2 + m / 2) * M * N;
                    assert_int_equal(pg_gemm(pw[i], A, m, K, c, N, NULL, ep[i], pools[t], scratch),
                                     PAGODA_OK);
                }
    }
    const size_t half = (size_t)2 * NW * 2 * M * N;
    assert_memory_equal(C, C + half, half * sizeof *C);
    pg_gemm_set_next(NULL, pw[0]);
    pg_gemm_set_next(pw[0], NULL);
    for (int i = 0; i < NW; i++)
        pg_gemm_free(pw[i]);
    pg_free(scratch);
    pg_pool_free(pools[0]);
    pg_pool_free(pools[1]);
    free(W);
    free(A);
    free(C);
}

static void test_gemm_bad_args(void **state) {
    (void)state;
    float W[6] = {1, 2, 3, 4, 5, 6}, A[3] = {1, 1, 1}, C[2];
    pg_packed_weight *pw = (pg_packed_weight *)&W; /* must be overwritten with NULL */
    assert_int_equal(pg_gemm_pack(PG_I8, W, 2, 3, NULL, &pw), PAGODA_ERR_UNSUPPORTED);
    assert_null(pw);
    assert_int_equal(pg_gemm_pack(PG_F32, W, 0, 3, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack(PG_F32, W, 2, -1, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack(PG_F32, NULL, 2, 3, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack_swiglu(PG_F32, W, NULL, 2, 3, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack(PG_F32, W, 2, 3, NULL, &pw), PAGODA_OK);
    size_t ss = pg_gemm_scratch_size(pw, 1, 1);
    char *scratch = pg_malloc_aligned(ss + 64);
    assert_non_null(scratch);
    assert_int_equal(pg_gemm(pw, A, 1, 3, C, 2, NULL, PG_GEMM_SWIGLU, NULL, scratch),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm(pw, A, 0, 3, C, 2, NULL, PG_GEMM_STORE, NULL, scratch),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm(pw, A, 1, 2, C, 2, NULL, PG_GEMM_STORE, NULL, scratch),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm(pw, A, 1, 3, C, 1, NULL, PG_GEMM_STORE, NULL, scratch),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm(pw, A, 1, 3, C, 2, NULL, (pg_gemm_epilogue)7, NULL, scratch),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm(pw, A, 1, 3, C, 2, NULL, PG_GEMM_STORE, NULL, scratch + 4),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm(pw, NULL, 1, 3, C, 2, NULL, PG_GEMM_STORE, NULL, scratch),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm(pw, A, 1, 3, C, 2, NULL, PG_GEMM_STORE, NULL, scratch), PAGODA_OK);
    assert_true(C[0] == 6.0f && C[1] == 15.0f);
    pg_gemm_free(pw);
    pg_gemm_free(NULL);
    assert_int_equal(pg_gemm_scratch_size(NULL, 1, 1), 0);
    pg_free(scratch);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_cvt_bf16),         cmocka_unit_test(test_gemm_vs_reference),
        cmocka_unit_test(test_gemm_batch_invariance), cmocka_unit_test(test_gemm_nested_in_pool),
        cmocka_unit_test(test_gemm_bad_args),         cmocka_unit_test(test_gemm_ukernel_prefetch),
        cmocka_unit_test(test_gemm_next_prefetch),
    };
    pg_pool_set_serial_macs(0); /* exercise the forked paths on small cases too */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
