/* MXFP4 weights in the GEMM driver (kernels/gemm.h "MXFP4"): the dtype
 * (GGUF type 39, dequantization by hand-computed values, the E8M0 half
 * scale at its special codes), every kernel table this machine (or qemu)
 * runs against the scalar specification pg_ref_mxfp4_gemm bit for bit
 * (M = 1, 2, 7, 64, 300; odd N; K = 32, 96, 2880; store / residual /
 * SwiGLU, with and without bias; 1 and 2 threads; extreme scales), GGUF
 * and Hugging Face packing of the same weights (identical bytes and
 * results), batch invariance, grouped calls, the fused RMSNorm input stage
 * and bad arguments. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/dtype.h"
#include "base/pool.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/qgemm.h"
#include "kernels/ref/ref.h"
#include "model/gguf.h"

static const char *const ISAS[] = {"scalar", "avx2", "avx512", "avx512bf16", "neon", "sve"};
enum { N_ISAS = sizeof ISAS / sizeof ISAS[0] };

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint64_t rnd_u64(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545f4914f6cdd1dull;
}
static float rnd(void) { /* [-1, 1) */
    return (float)((double)(rnd_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
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

/* Random GGUF MXFP4 rows [N, K]: random codes; E in [e_lo, e_hi]. */
static uint8_t *make_gguf(int64_t N, int64_t K, int e_lo, int e_hi) {
    const size_t bytes = (size_t)(N * K / 32) * 17;
    uint8_t *w = malloc(bytes);
    assert_non_null(w);
    for (size_t b = 0; b < bytes / 17; b++) {
        w[b * 17] = (uint8_t)(e_lo + (int)(rnd_u64() % (uint64_t)(e_hi - e_lo + 1)));
        for (int j = 0; j < 16; j++)
            w[b * 17 + 1 + j] = (uint8_t)rnd_u64();
    }
    return w;
}

/* The same weights in the Hugging Face layout (blocks [N, K/32, 16] with
 * elements 2i / 2i + 1 in the low / high nibble of byte i; scales
 * [N, K/32]). */
static void gguf_to_hf(const uint8_t *w, int64_t N, int64_t K, uint8_t **blocks, uint8_t **scales) {
    const int64_t nb = N * K / 32;
    *blocks = malloc((size_t)nb * 16);
    *scales = malloc((size_t)nb);
    assert_true(*blocks && *scales);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *g = w + b * 17;
        uint8_t code[32];
        for (int j = 0; j < 16; j++) {
            code[j] = g[1 + j] & 0xF;
            code[j + 16] = g[1 + j] >> 4;
        }
        for (int i = 0; i < 16; i++)
            (*blocks)[b * 16 + i] = (uint8_t)(code[2 * i] | code[2 * i + 1] << 4);
        (*scales)[b] = g[0];
    }
}

static void check_bits(const float *got, const float *want, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4) != 0) {
            fprintf(stderr, "%s: element %lld = %.9g, want %.9g\n", what, (long long)i, got[i],
                    want[i]);
            fail();
        }
}

static void *scratch_for(const pg_packed_weight *pw, int64_t M, int nt) {
    void *s = pg_malloc_aligned(pg_gemm_scratch_size(pw, M, nt));
    assert_non_null(s);
    return s;
}

/* ---- the dtype */

static void test_dtype_and_dequant(void **state) {
    (void)state;
    assert_string_equal(pg_dtype_name(PG_MXFP4), "MXFP4");
    assert_int_equal(pg_dtype_block_elems(PG_MXFP4), 32);
    assert_int_equal(pg_dtype_block_bytes(PG_MXFP4), 17);
    assert_int_equal(pg_dtype_row_bytes(PG_MXFP4, 2880), 90 * 17);
    assert_int_equal(pg_ggml_type_to_dtype(39), PG_MXFP4);
    assert_int_equal(pg_dtype_to_ggml_type(PG_MXFP4), 39);
    assert_string_equal(pg_ggml_type_name(39), "MXFP4");
    /* E8M0 halved: 2^(E-128), subnormal at E = 0, 1, no NaN at 255 */
    assert_true(pg_e8m0_half_to_f32(127) == 0.5f);
    assert_true(pg_e8m0_half_to_f32(128) == 1.0f);
    assert_true(pg_e8m0_half_to_f32(2) == 0x1p-126f);
    assert_true(pg_e8m0_half_to_f32(1) == 0x1p-127f);
    assert_true(pg_e8m0_half_to_f32(0) == 0x1p-128f);
    assert_true(pg_e8m0_half_to_f32(254) == 0x1p126f);
    assert_true(pg_e8m0_half_to_f32(255) == 0x1p127f);
    /* one block, E = 127 (scale 1: the plain E2M1 values): codes 0..15 in
     * the low nibbles (elements 0..15), 15..0 in the high ones (16..31) */
    static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    uint8_t blk[2 * 17];
    blk[0] = 127;
    for (int j = 0; j < 16; j++)
        blk[1 + j] = (uint8_t)(j | (15 - j) << 4);
    /* second block: E = 130 (scale 8), byte 0x7F: element 0 = 6 * 8,
     * element 16 = -0.5 * 8 ... */
    blk[17] = 130;
    for (int j = 0; j < 16; j++)
        blk[18 + j] = 0x97; /* low code 7 (6.0), high code 9 (-0.5) */
    float out[64];
    pg_dequant_row(PG_MXFP4, blk, out, 64);
    for (int j = 0; j < 16; j++) {
        assert_true(out[j] == e2m1[j]);
        assert_true(out[16 + j] == e2m1[15 - j]);
        assert_true(out[32 + j] == 48.0f);
        assert_true(out[48 + j] == -4.0f);
    }
    /* codes 0 and 8 are +0 and -0 in E2M1; the doubled table has 0 for both */
    assert_true(out[0] == 0.0f && out[8] == 0.0f);
    /* E = 0: 12 * 2^-128 is an exact subnormal */
    blk[0] = 0;
    pg_dequant_row(PG_MXFP4, blk, out, 32);
    assert_true(out[7] == 0x1.8p-125f);
    assert_true(out[15] == -0x1.8p-125f);
}

/* ---- every table vs the specification */

typedef struct {
    int64_t M, N, K;
} shape;

/* C of pg_gemm (table kt, pool) vs the reference for one epilogue. */
static void run_vs_ref(const pg_kernel_table *kt, pg_pool *pool, const shape *sh, const uint8_t *wg,
                       const uint8_t *wu, const float *A, const float *bias, pg_gemm_epilogue ep,
                       const float *C0) {
    const int64_t M = sh->M, N = sh->N, K = sh->K;
    pg_packed_weight *pw = NULL;
    if (ep == PG_GEMM_SWIGLU)
        assert_int_equal(pg_gemm_pack_swiglu(PG_MXFP4, wg, wu, N, K, kt, &pw), PAGODA_OK);
    else
        assert_int_equal(pg_gemm_pack(PG_MXFP4, wg, N, K, kt, &pw), PAGODA_OK);
    assert_string_equal(pg_gemm_format_name(pw), "mxfp4");
    assert_int_equal(pg_gemm_quant_bits(pw), 4);
    const int ldc = (int)N + 3;
    float *got = malloc((size_t)(M * ldc) * sizeof(float));
    float *want = malloc((size_t)(M * ldc) * sizeof(float));
    assert_true(got && want);
    memcpy(got, C0, (size_t)(M * ldc) * sizeof(float));
    memcpy(want, C0, (size_t)(M * ldc) * sizeof(float));
    const int nt = pool ? pg_pool_size(pool) : 1;
    void *scratch = scratch_for(pw, M, nt);
    assert_int_equal(pg_gemm(pw, A, M, K + 1, got, ldc, bias, ep, pool, scratch), PAGODA_OK);
    pg_ref_mxfp4_gemm(wg, wu, N, K, A, M, K + 1, want, ldc, bias, ep);
    char what[160];
    snprintf(what, sizeof what, "%s (%s) M=%lld N=%lld K=%lld ep=%d bias=%d threads=%d", kt->isa,
             pg_gemm_variant(pw), (long long)M, (long long)N, (long long)K, (int)ep, bias != NULL,
             nt);
    check_bits(got, want, M * ldc, what);
    pg_free(scratch);
    free(got);
    free(want);
    pg_gemm_free(pw);
}

static void run_shape(const shape *sh, int e_lo, int e_hi, float a_scale, pg_pool *pool2) {
    const int64_t M = sh->M, N = sh->N, K = sh->K, lda = K + 1, ldc = N + 3;
    uint8_t *wg = make_gguf(N, K, e_lo, e_hi), *wu = make_gguf(N, K, e_lo, e_hi);
    float *A = malloc((size_t)(M * lda) * sizeof(float));
    float *C0 = malloc((size_t)(M * ldc) * sizeof(float));
    float *bias = malloc((size_t)(2 * N) * sizeof(float));
    assert_true(A && C0 && bias);
    for (int64_t i = 0; i < M * lda; i++)
        A[i] = rnd() * a_scale;
    for (int64_t m = 0; m < M && K >= 64; m += 3) /* some blocks all zero */
        memset(A + m * lda + 32, 0, 32 * sizeof(float));
    for (int64_t i = 0; i < M * ldc; i++)
        C0[i] = rnd();
    for (int64_t i = 0; i < 2 * N; i++)
        bias[i] = rnd() * 0.5f;
    for (int l = 0; l < N_ISAS; l++) {
        const pg_kernel_table *kt = pg_kernels_for_isa(ISAS[l]);
        if (!kt) continue;
        for (int ep = 0; ep < 3; ep++)
            for (int b = 0; b < 2; b++)
                run_vs_ref(kt, NULL, sh, wg, wu, A, b ? bias : NULL, (pg_gemm_epilogue)ep, C0);
        if (pool2) /* two threads: N split (or M split for narrow N) */
            run_vs_ref(kt, pool2, sh, wg, wu, A, bias, PG_GEMM_SWIGLU, C0),
                run_vs_ref(kt, pool2, sh, wg, wu, A, NULL, PG_GEMM_STORE, C0);
    }
    free(wg);
    free(wu);
    free(A);
    free(C0);
    free(bias);
}

static void test_tables_vs_reference(void **state) {
    (void)state;
    static const shape SH[] = {
        {1, 37, 32},   {2, 37, 96},    {7, 77, 2880}, {64, 33, 96},
        {300, 41, 96}, {1, 129, 2880}, {64, 9, 2880}, {13, 65, 32},
    };
    pg_pool *pool2 = make_pool(2);
    for (size_t i = 0; i < sizeof SH / sizeof SH[0]; i++)
        run_shape(&SH[i], 110, 135, 2.0f, i % 2 ? pool2 : NULL);
    pg_pool_free(pool2);
}

/* Every E8M0 code, including 0, 1 (subnormal scales) and 255, with tiny
 * activations so that d * a_s stays finite (and is subnormal for small E). */
static void test_extreme_scales(void **state) {
    (void)state;
    static const shape SH[] = {{3, 19, 256}, {9, 40, 96}};
    for (size_t i = 0; i < sizeof SH / sizeof SH[0]; i++)
        run_shape(&SH[i], 0, 255, 0x1p-100f, NULL);
}

/* ---- GGUF and Hugging Face sources give the same packed weight */

static void test_gguf_vs_hf(void **state) {
    (void)state;
    const int64_t N = 45, K = 160, M = 5;
    uint8_t *wg = make_gguf(N, K, 115, 130), *wu = make_gguf(N, K, 115, 130);
    uint8_t *bg, *sg, *bu, *su;
    gguf_to_hf(wg, N, K, &bg, &sg);
    gguf_to_hf(wu, N, K, &bu, &su);
    /* the HF layout dequantized by its own rule (lut[code] * 2^(s - 127))
     * equals GGUF's dequantization */
    float *dq = malloc((size_t)K * sizeof(float));
    assert_non_null(dq);
    for (int64_t n = 0; n < N; n++) {
        pg_dequant_row(PG_MXFP4, wg + n * (K / 32) * 17, dq, (size_t)K);
        for (int64_t k = 0; k < K; k++) {
            const uint8_t byte = bg[(n * (K / 32) + k / 32) * 16 + (k % 32) / 2];
            const int code = k % 2 ? byte >> 4 : byte & 0xF;
            const float v =
                ldexpf((float)pg_mxfp4_kvalues[code] * 0.5f, (int)sg[n * (K / 32) + k / 32] - 127);
            assert_true(v == dq[k]);
        }
    }
    free(dq);
    pg_pool *pool2 = make_pool(2);
    float A[5 * 160], c1[5 * 45], c2[5 * 45];
    for (int i = 0; i < 5 * 160; i++)
        A[i] = rnd();
    for (int l = 0; l < N_ISAS; l++) {
        const pg_kernel_table *kt = pg_kernels_for_isa(ISAS[l]);
        if (!kt) continue;
        for (int sw = 0; sw < 2; sw++) {
            pg_packed_weight *p1 = NULL, *p2 = NULL;
            if (sw) {
                assert_int_equal(pg_gemm_pack_swiglu(PG_MXFP4, wg, wu, N, K, kt, &p1), PAGODA_OK);
                assert_int_equal(pg_gemm_pack_mxfp4(bg, sg, bu, su, N, K, kt, pool2, &p2),
                                 PAGODA_OK);
            } else {
                assert_int_equal(pg_gemm_pack(PG_MXFP4, wg, N, K, kt, &p1), PAGODA_OK);
                assert_int_equal(pg_gemm_pack_mxfp4(bg, sg, NULL, NULL, N, K, kt, NULL, &p2),
                                 PAGODA_OK);
            }
            assert_int_equal(pg_gemm_packed_bytes(p1), pg_gemm_packed_bytes(p2));
            assert_int_equal(pg_gemm_is_swiglu(p2), sw);
            assert_memory_equal(pg_qgemm_packed_data(p1), pg_qgemm_packed_data(p2),
                                pg_gemm_packed_bytes(p1));
            /* 17 bytes per 32 weights (panels pad N up to the tile width) */
            assert_true(pg_gemm_packed_bytes(p1) >= (size_t)(N * K / 32 * 17 * (sw + 1)));
            const pg_gemm_epilogue ep = sw ? PG_GEMM_SWIGLU : PG_GEMM_STORE;
            void *scratch = scratch_for(p1, M, 1);
            assert_int_equal(pg_gemm(p1, A, M, K, c1, N, NULL, ep, NULL, scratch), PAGODA_OK);
            assert_int_equal(pg_gemm(p2, A, M, K, c2, N, NULL, ep, NULL, scratch), PAGODA_OK);
            check_bits(c1, c2, M * N, "gguf vs hf");
            pg_free(scratch);
            pg_gemm_free(p1);
            pg_gemm_free(p2);
        }
    }
    pg_pool_free(pool2);
    free(wg);
    free(wu);
    free(bg);
    free(sg);
    free(bu);
    free(su);
}

/* ---- batch invariance: a row alone equals the row inside M = 64 */

static void test_batch_invariance(void **state) {
    (void)state;
    const int64_t M = 64, N = 70, K = 2880;
    uint8_t *wg = make_gguf(N, K, 118, 130), *wu = make_gguf(N, K, 118, 130);
    float *A = malloc((size_t)(M * K) * sizeof(float));
    float *big = malloc((size_t)(M * N) * sizeof(float)), one[70];
    assert_true(A && big);
    for (int64_t i = 0; i < M * K; i++)
        A[i] = rnd() * 3.0f;
    pg_pool *pools[2] = {NULL, make_pool(2)};
    for (int l = 0; l < N_ISAS; l++) {
        const pg_kernel_table *kt = pg_kernels_for_isa(ISAS[l]);
        if (!kt) continue;
        for (int sw = 0; sw < 2; sw++) {
            pg_packed_weight *pw = NULL;
            if (sw)
                assert_int_equal(pg_gemm_pack_swiglu(PG_MXFP4, wg, wu, N, K, kt, &pw), PAGODA_OK);
            else
                assert_int_equal(pg_gemm_pack(PG_MXFP4, wg, N, K, kt, &pw), PAGODA_OK);
            const pg_gemm_epilogue ep = sw ? PG_GEMM_SWIGLU : PG_GEMM_STORE;
            for (int p = 0; p < 2; p++) {
                void *scratch = scratch_for(pw, M, p ? 2 : 1);
                assert_int_equal(pg_gemm(pw, A, M, K, big, N, NULL, ep, pools[p], scratch),
                                 PAGODA_OK);
                for (int64_t r = 0; r < M; r += 9) {
                    assert_int_equal(
                        pg_gemm(pw, A + r * K, 1, K, one, N, NULL, ep, pools[1 - p], scratch),
                        PAGODA_OK);
                    check_bits(one, big + r * N, N, "row alone vs in M = 64");
                }
                pg_free(scratch);
            }
            pg_gemm_free(pw);
        }
    }
    pg_pool_free(pools[1]);
    free(A);
    free(big);
    free(wg);
    free(wu);
}

/* ---- grouped calls: MXFP4 experts, each equal to its own pg_gemm */

static void test_grouped(void **state) {
    (void)state;
    enum { E = 4, T = 11, H = 96, I = 45 };
    pg_pool *pool = make_pool(2);
    for (int l = 0; l < N_ISAS; l++) {
        const pg_kernel_table *kt = pg_kernels_for_isa(ISAS[l]);
        if (!kt) continue;
        pg_packed_weight *gu[E], *dn[E];
        uint8_t *w[E][3];
        for (int e = 0; e < E; e++) {
            w[e][0] = make_gguf(I, H, 115, 130);
            w[e][1] = make_gguf(I, H, 115, 130);
            w[e][2] = make_gguf(H, 96, 115, 130); /* down: K = I padded to 96 */
            assert_int_equal(pg_gemm_pack_swiglu(PG_MXFP4, w[e][0], w[e][1], I, H, kt, &gu[e]),
                             PAGODA_OK);
            assert_int_equal(pg_gemm_pack(PG_MXFP4, w[e][2], H, 96, kt, &dn[e]), PAGODA_OK);
        }
        /* routing: expert e takes tokens t with (t + e) % 3 != 0, expert 3 none */
        int32_t rows[E][T];
        int64_t cnt[E] = {0};
        for (int e = 0; e < E - 1; e++)
            for (int t = 0; t < T; t++)
                if ((t + e) % 3) rows[e][cnt[e]++] = t;
        float x[T * H], gb[2 * I], act[E][T * 96], out[E][T * H], ref[T * H], g[T * H];
        for (int i = 0; i < T * H; i++)
            x[i] = rnd();
        for (int i = 0; i < 2 * I; i++)
            gb[i] = rnd() * 0.1f;
        memset(act, 0, sizeof act);
        size_t ss = 0;
        for (int e = 0; e < E; e++) {
            size_t a = pg_gemm_grouped_scratch_size(gu[e], T, E, 2);
            size_t b = pg_gemm_grouped_scratch_size(dn[e], T, E, 2);
            ss = a > ss ? a : ss;
            ss = b > ss ? b : ss;
            a = pg_gemm_scratch_size(gu[e], T, 1);
            ss = a > ss ? a : ss;
        }
        void *scratch = pg_malloc_aligned(ss);
        assert_non_null(scratch);
        pg_gemm_problem p[E];
        for (int e = 0; e < E; e++)
            p[e] = (pg_gemm_problem){.w = gu[e],
                                     .A = x,
                                     .M = cnt[e],
                                     .lda = H,
                                     .a_rows = rows[e],
                                     .C = act[e],
                                     .ldc = 96,
                                     .bias = gb,
                                     .ep = PG_GEMM_SWIGLU};
        assert_int_equal(pg_gemm_grouped(p, E, pool, scratch), PAGODA_OK);
        for (int e = 0; e < E; e++)
            p[e] = (pg_gemm_problem){.w = dn[e],
                                     .A = act[e],
                                     .M = cnt[e],
                                     .lda = 96,
                                     .C = out[e],
                                     .ldc = H,
                                     .ep = PG_GEMM_STORE};
        assert_int_equal(pg_gemm_grouped(p, E, pool, scratch), PAGODA_OK);
        for (int e = 0; e < E; e++) {
            if (!cnt[e]) continue;
            for (int64_t r = 0; r < cnt[e]; r++)
                memcpy(g + r * H, x + rows[e][r] * H, H * sizeof(float));
            float a2[T * 96];
            memset(a2, 0, sizeof a2);
            assert_int_equal(
                pg_gemm(gu[e], g, cnt[e], H, a2, 96, gb, PG_GEMM_SWIGLU, NULL, scratch), PAGODA_OK);
            check_bits(act[e], a2, cnt[e] * 96, "grouped swiglu vs pg_gemm");
            assert_int_equal(
                pg_gemm(dn[e], a2, cnt[e], 96, ref, H, NULL, PG_GEMM_STORE, NULL, scratch),
                PAGODA_OK);
            check_bits(out[e], ref, cnt[e] * H, "grouped down vs pg_gemm");
        }
        pg_free(scratch);
        for (int e = 0; e < E; e++) {
            pg_gemm_free(gu[e]);
            pg_gemm_free(dn[e]);
            for (int h = 0; h < 3; h++)
                free(w[e][h]);
        }
    }
    pg_pool_free(pool);
}

/* ---- the fused RMSNorm input stage: norm-then-GEMM, bit for bit */

static void test_fused_rmsnorm(void **state) {
    (void)state;
    const int64_t M = 7, N = 33, K = 96;
    uint8_t *w = make_gguf(N, K, 118, 130);
    float X[7 * 96], nw[96], normed[7 * 96], c1[7 * 33], c2[7 * 33];
    for (int i = 0; i < M * K; i++)
        X[i] = rnd() * 4.0f;
    for (int i = 0; i < K; i++)
        nw[i] = 0.5f + rnd() * 0.25f;
    pg_kernels()->rmsnorm_f32(normed, X, nw, (size_t)M, (size_t)K, 1e-5f);
    pg_packed_weight *pw = NULL;
    assert_int_equal(pg_gemm_pack(PG_MXFP4, w, N, K, NULL, &pw), PAGODA_OK);
    void *scratch = scratch_for(pw, M, 1);
    assert_int_equal(
        pg_qgemm_rmsnorm(pw, X, M, K, nw, 1e-5f, c1, N, NULL, PG_GEMM_STORE, NULL, scratch),
        PAGODA_OK);
    assert_int_equal(pg_gemm(pw, normed, M, K, c2, N, NULL, PG_GEMM_STORE, NULL, scratch),
                     PAGODA_OK);
    check_bits(c1, c2, M * N, "fused rmsnorm");
    pg_free(scratch);
    pg_gemm_free(pw);
    free(w);
}

/* ---- bad arguments */

static void test_bad_args(void **state) {
    (void)state;
    uint8_t *w = make_gguf(4, 64, 120, 130);
    uint8_t blocks[4 * 2 * 16] = {0}, scales[4 * 2] = {0};
    pg_packed_weight *pw = (pg_packed_weight *)1;
    assert_int_equal(pg_gemm_pack(PG_MXFP4, w, 4, 48, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_null(pw);
    assert_int_equal(pg_gemm_pack(PG_MXFP4, NULL, 4, 64, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack(PG_MXFP4, w, 0, 64, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack_swiglu(PG_MXFP4, w, NULL, 4, 64, NULL, &pw),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack_swiglu(PG_MXFP4, w, w, 4, 40, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack_mxfp4(blocks, scales, NULL, NULL, 4, 48, NULL, NULL, &pw),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack_mxfp4(blocks, scales, NULL, NULL, 4, 0, NULL, NULL, &pw),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack_mxfp4(NULL, scales, NULL, NULL, 4, 64, NULL, NULL, &pw),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack_mxfp4(blocks, NULL, NULL, NULL, 4, 64, NULL, NULL, &pw),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack_mxfp4(blocks, scales, blocks, NULL, 4, 64, NULL, NULL, &pw),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack_mxfp4(blocks, scales, NULL, NULL, 4, 64, NULL, NULL, NULL),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_pack_mxfp4(blocks, scales, NULL, NULL, 0, 64, NULL, NULL, &pw),
                     PAGODA_ERR_INVALID_ARG);
    /* a good pack, then bad calls */
    assert_int_equal(pg_gemm_pack_mxfp4(blocks, scales, NULL, NULL, 4, 64, NULL, NULL, &pw),
                     PAGODA_OK);
    float A[64] = {0}, C[4];
    void *scratch = scratch_for(pw, 1, 1);
    assert_int_equal(pg_gemm(pw, A, 1, 32, C, 4, NULL, PG_GEMM_STORE, NULL, scratch),
                     PAGODA_ERR_INVALID_ARG); /* lda < K */
    assert_int_equal(pg_gemm(pw, A, 1, 64, C, 4, NULL, PG_GEMM_SWIGLU, NULL, scratch),
                     PAGODA_ERR_INVALID_ARG); /* not a pair */
    assert_int_equal(pg_gemm(pw, A, 1, 64, C, 4, NULL, PG_GEMM_STORE, NULL, scratch), PAGODA_OK);
    for (int i = 0; i < 4; i++)
        assert_true(C[i] == 0.0f); /* codes 0: zero weights */
    pg_free(scratch);
    pg_gemm_free(pw);
    free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_and_dequant), cmocka_unit_test(test_tables_vs_reference),
        cmocka_unit_test(test_extreme_scales),    cmocka_unit_test(test_gguf_vs_hf),
        cmocka_unit_test(test_batch_invariance),  cmocka_unit_test(test_grouped),
        cmocka_unit_test(test_fused_rmsnorm),     cmocka_unit_test(test_bad_args),
    };
    pg_pool_set_serial_macs(0); /* exercise the forked paths on small cases too */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
