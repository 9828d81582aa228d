/* GGUF K-quants (Q4_K, Q5_K, Q6_K) in the GEMM driver (kernels/gemm.h
 * "K-quants", base/kquant.h): the dtypes and GGUF type ids, dequantization
 * against a second implementation written from llama.cpp's loop structure
 * (dequantize_row_q*_K), every kernel table this machine (or qemu) runs
 * against the scalar specification pg_ref_kq_gemm bit for bit (M = 1, 2, 5,
 * 13, 40; N not a multiple of 32; K = 256, 768; store / residual / SwiGLU,
 * with and without bias; 1 and 2 threads), the specification against the
 * f32 product with the dequantized weights, the fused RMSNorm input stage,
 * batch invariance and bad arguments; and a random-weight Llama written
 * by gen_model as Q4_K_M (Q4_K with token_embd / output / attn_v / ffn_down
 * in Q6_K: the embedding lookup dequantizes Q6_K rows, the output is its
 * own Q6_K GEMM), Q5_K_M and Q6_K GGUF files, each close to the F32 GGUF of
 * the same weights (teacher-forced mean KL), and an unsupported GGUF type
 * named with the supported list. */
#define _GNU_SOURCE /* memmem */
#include "testutil.h"
#include "model_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/dtype.h"
#include "base/kquant.h"
#include "base/pool.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/qgemm.h"
#include "kernels/ref/ref.h"
#include "gen/gen_model.h"
#include "model/gguf.h"
#include "model/model.h"

static const char *const ISAS[] = {"scalar", "avx2", "avx512", "avx512bf16", "neon", "sve"};
enum { N_ISAS = sizeof ISAS / sizeof ISAS[0] };
static const pg_dtype TYPES[] = {PG_Q4_K, PG_Q5_K, PG_Q6_K};


static void put16(uint8_t *p, float f) {
    uint16_t h = pg_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* Random GGUF rows [N, K] of type t: random quants and scale bytes, d and
 * dmin positive F16 of a few thousandths (any bytes are a valid block). */
static uint8_t *make_rows(pg_dtype t, int64_t N, int64_t K) {
    const size_t bb = pg_dtype_block_bytes(t), nb = (size_t)(N * K / 256);
    uint8_t *w = malloc(nb * bb);
    assert_non_null(w);
    for (size_t i = 0; i < nb * bb; i++)
        w[i] = (uint8_t)pg_test_rnd_u64();
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = w + b * bb;
        if (t == PG_Q6_K) {
            put16(blk + 208, 0.0005f + 0.002f * fabsf(pg_test_rnd()));
        } else {
            put16(blk, 0.001f + 0.004f * fabsf(pg_test_rnd()));
            put16(blk + 2, 0.001f + 0.004f * fabsf(pg_test_rnd()));
        }
    }
    return w;
}

/* ---- dequantization, written again from llama.cpp's loops */

static float rd16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return pg_f16_to_f32(h);
}

static void scale_min_k4(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void spec_dequant(pg_dtype t, const uint8_t *x, float *y) {
    if (t == PG_Q6_K) {
        const float d = rd16(x + 208);
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        for (int n = 0; n < 256; n += 128) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
        return;
    }
    const float d = rd16(x), mn = rd16(x + 2);
    const uint8_t *scales = x + 4, *qh = x + 16, *q = t == PG_Q5_K ? x + 48 : x + 16;
    int is = 0, u1 = 1, u2 = 2;
    for (int j = 0; j < 256; j += 64) {
        int sc, m;
        scale_min_k4(is, scales, &sc, &m);
        const float d1 = d * (float)sc, m1 = mn * (float)m;
        scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * (float)sc, m2 = mn * (float)m;
        for (int l = 0; l < 32; l++) {
            int v = q[l] & 0xF;
            if (t == PG_Q5_K && (qh[l] & u1)) v += 16;
            *y++ = d1 * (float)v - m1;
        }
        for (int l = 0; l < 32; l++) {
            int v = q[l] >> 4;
            if (t == PG_Q5_K && (qh[l] & u2)) v += 16;
            *y++ = d2 * (float)v - m2;
        }
        q += 32;
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
    }
}

static void test_dtype_and_dequant(void **state) {
    (void)state;
    const char *names[] = {"Q4_K", "Q5_K", "Q6_K"};
    const size_t bytes[] = {144, 176, 210};
    const uint32_t ids[] = {12, 13, 14};
    for (int i = 0; i < 3; i++) {
        const pg_dtype t = TYPES[i];
        assert_string_equal(pg_dtype_name(t), names[i]);
        assert_int_equal(pg_dtype_block_elems(t), 256);
        assert_int_equal(pg_dtype_block_bytes(t), bytes[i]);
        assert_int_equal(pg_dtype_row_bytes(t, 2048), 8 * bytes[i]);
        assert_int_equal(pg_dtype_row_bytes(t, 300), 0);
        assert_int_equal(pg_ggml_type_to_dtype(ids[i]), t);
        assert_int_equal(pg_dtype_to_ggml_type(t), ids[i]);
        uint8_t *w = make_rows(t, 4, 512);
        float got[2048], want[2048];
        pg_dequant_row(t, w, got, 2048);
        for (int b = 0; b < 8; b++)
            spec_dequant(t, w + (size_t)b * bytes[i], want + 256 * b);
        for (int k = 0; k < 2048; k++)
            if (fabsf(got[k] - want[k]) > 1e-6f * (fabsf(want[k]) + 1e-3f)) {
                fprintf(stderr, "%s element %d: %.9g want %.9g\n", names[i], k, got[k], want[k]);
                fail();
            }
        /* the integer form reproduces the same values */
        pg_kq_block kb;
        assert_int_equal(pg_kq_decode(t, w, &kb), 0);
        for (int k = 0; k < 256; k++) {
            const double p = (double)pg_f16_to_f32(kb.d) * kb.sc[k / kb.sub] * kb.u[k],
                         q = (double)pg_f16_to_f32(kb.dm) * kb.m[k / kb.sub];
            assert_true(fabs(p - q - (double)want[k]) <= 1e-6 * (fabs(p) + fabs(q)) + 1e-12);
        }
        free(w);
    }
    /* a Q6_K d too large for dm = 32 d in F16 */
    uint8_t blk[210] = {0};
    put16(blk + 208, 4096.0f);
    pg_kq_block kb;
    assert_int_equal(pg_kq_decode(PG_Q6_K, blk, &kb), -1);
    assert_int_equal(pg_kq_decode(PG_Q8_0, blk, &kb), -2);
}

/* ---- every table vs the specification */

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

static void run_vs_ref(pg_dtype t, const pg_kernel_table *kt, pg_pool *pool, int64_t M, int64_t N,
                       int64_t K, const uint8_t *wg, const uint8_t *wu, const float *A,
                       const float *bias, pg_gemm_epilogue ep, const float *C0) {
    pg_packed_weight *pw = NULL;
    if (ep == PG_GEMM_SWIGLU)
        assert_int_equal(pg_gemm_pack_swiglu(t, wg, wu, N, K, kt, &pw), PAGODA_OK);
    else
        assert_int_equal(pg_gemm_pack(t, wg, N, K, kt, &pw), PAGODA_OK);
    char lower[8];
    snprintf(lower, sizeof lower, "q%c_k", pg_dtype_name(t)[1]);
    assert_string_equal(pg_gemm_format_name(pw), lower);
    assert_int_equal(pg_gemm_quant_bits(pw), pg_kq_bits(t));
    const int64_t ldc = N + 3, lda = K + 1;
    float *got = malloc((size_t)(M * ldc) * sizeof(float));
    float *want = malloc((size_t)(M * ldc) * sizeof(float));
    assert_true(got && want);
    memcpy(got, C0, (size_t)(M * ldc) * sizeof(float));
    memcpy(want, C0, (size_t)(M * ldc) * sizeof(float));
    const int nt = pool ? pg_pool_size(pool) : 1;
    void *scratch = scratch_for(pw, M, nt);
    assert_int_equal(pg_gemm(pw, A, M, lda, got, ldc, bias, ep, pool, scratch), PAGODA_OK);
    pg_ref_kq_gemm(t, wg, wu, N, K, A, M, lda, want, ldc, bias, ep);
    char what[160];
    snprintf(what, sizeof what, "%s %s (%s) M=%lld N=%lld K=%lld ep=%d bias=%d threads=%d",
             pg_dtype_name(t), kt->isa, pg_gemm_variant(pw), (long long)M, (long long)N,
             (long long)K, (int)ep, bias != NULL, nt);
    check_bits(got, want, M * ldc, what);
    pg_free(scratch);
    free(got);
    free(want);
    pg_gemm_free(pw);
}

static void test_tables_vs_reference(void **state) {
    (void)state;
    pg_pool *pool2 = pg_test_pool(2);
    const int64_t Ms[] = {1, 2, 5, 13, 40};
    for (int ti = 0; ti < 3; ti++) {
        const pg_dtype t = TYPES[ti];
        for (int si = 0; si < 2; si++) {
            const int64_t N = si ? 45 : 70, K = si ? 768 : 256, M = Ms[(ti + si) % 5];
            const int64_t lda = K + 1, ldc = N + 3, M2 = 40;
            uint8_t *wg = make_rows(t, N, K), *wu = make_rows(t, N, K);
            float *A = malloc((size_t)(M2 * lda) * sizeof(float));
            float *C0 = malloc((size_t)(M2 * ldc) * sizeof(float));
            float *bias = malloc((size_t)(2 * N) * sizeof(float));
            assert_true(A && C0 && bias);
            for (int64_t i = 0; i < M2 * lda; i++)
                A[i] = pg_test_rnd() * (i % 7 == 0 ? 4.0f : 1.0f);
            memset(A + lda, 0, 256 * sizeof(float)); /* an all-zero super-block */
            for (int64_t i = 0; i < M2 * ldc; i++)
                C0[i] = pg_test_rnd();
            for (int64_t i = 0; i < 2 * N; i++)
                bias[i] = pg_test_rnd();
            for (int l = 0; l < N_ISAS; l++) {
                const pg_kernel_table *kt = pg_kernels_for_isa(ISAS[l]);
                if (!kt) continue;
                for (int mi = 0; mi < 5; mi++) {
                    if (mi != si && mi != 4 && mi != (ti + 2) % 5) continue;
                    run_vs_ref(t, kt, NULL, Ms[mi], N, K, wg, wu, A, NULL, PG_GEMM_STORE, C0);
                }
                run_vs_ref(t, kt, pool2, M, N, K, wg, wu, A, bias, PG_GEMM_RESIDUAL, C0);
                run_vs_ref(t, kt, pool2, M2, N, K, wg, wu, A, bias, PG_GEMM_SWIGLU, C0);
                run_vs_ref(t, kt, NULL, 3, N, K, wg, wu, A, NULL, PG_GEMM_SWIGLU, C0);
            }
            free(wg);
            free(wu);
            free(A);
            free(C0);
            free(bias);
        }
    }
    pg_pool_free(pool2);
}

/* The specification is the product with the dequantized weights up to the
 * int8 activations' rounding. */
static void test_spec_vs_dequantized(void **state) {
    (void)state;
    const int64_t M = 3, N = 20, K = 512;
    for (int ti = 0; ti < 3; ti++) {
        const pg_dtype t = TYPES[ti];
        uint8_t *w = make_rows(t, N, K);
        float A[3 * 512], C[3 * 20], row[512];
        for (int i = 0; i < M * K; i++)
            A[i] = pg_test_rnd();
        pg_ref_kq_gemm(t, w, NULL, N, K, A, M, K, C, N, NULL, PG_GEMM_STORE);
        for (int64_t n = 0; n < N; n++) {
            pg_dequant_row(t, w + (size_t)n * pg_dtype_row_bytes(t, K), row, K);
            for (int64_t m = 0; m < M; m++) {
                double y = 0, mag = 0;
                for (int64_t k = 0; k < K; k++) {
                    y += (double)A[m * K + k] * row[k];
                    mag += fabs((double)A[m * K + k] * row[k]);
                }
                /* each activation is off by at most half a step, 1/254 of its block's max */
                if (fabs(C[m * N + n] - y) > mag / 200.0 + 1e-6) {
                    fprintf(stderr, "%s m=%lld n=%lld: %.6g vs %.6g (mag %.3g)\n",
                            pg_dtype_name(t), (long long)m, (long long)n, C[m * N + n], y, mag);
                    fail();
                }
            }
        }
        free(w);
    }
}

/* Fused RMSNorm input stage == RMSNorm then the GEMM; a row alone == that
 * row inside a batch. */
static void test_fused_rmsnorm_and_batch_invariance(void **state) {
    (void)state;
    const int64_t M = 9, N = 64, K = 512;
    const pg_kernel_table *kt = pg_kernels();
    for (int ti = 0; ti < 3; ti++) {
        const pg_dtype t = TYPES[ti];
        uint8_t *w = make_rows(t, N, K);
        pg_packed_weight *pw = NULL;
        assert_int_equal(pg_gemm_pack(t, w, N, K, NULL, &pw), PAGODA_OK);
        float *X = malloc((size_t)(M * K) * sizeof(float)), *xn = malloc((size_t)(M * K) * 4);
        float *nw = malloc((size_t)K * 4), *c1 = malloc((size_t)(M * N) * 4),
              *c2 = malloc((size_t)(M * N) * 4), *c3 = malloc((size_t)N * 4);
        assert_true(X && xn && nw && c1 && c2 && c3);
        for (int64_t i = 0; i < M * K; i++)
            X[i] = pg_test_rnd() * 3.0f;
        for (int64_t i = 0; i < K; i++)
            nw[i] = 1.0f + 0.5f * pg_test_rnd();
        kt->rmsnorm_f32(xn, X, nw, (size_t)M, (size_t)K, 1e-5f);
        void *scratch = scratch_for(pw, M, 1);
        assert_int_equal(pg_gemm(pw, xn, M, K, c1, N, NULL, PG_GEMM_STORE, NULL, scratch),
                         PAGODA_OK);
        assert_int_equal(
            pg_qgemm_rmsnorm(pw, X, M, K, nw, 1e-5f, c2, N, NULL, PG_GEMM_STORE, NULL, scratch),
            PAGODA_OK);
        check_bits(c2, c1, M * N, "fused rmsnorm");
        for (int64_t m = 0; m < M; m++) {
            assert_int_equal(
                pg_gemm(pw, xn + m * K, 1, K, c3, N, NULL, PG_GEMM_STORE, NULL, scratch),
                PAGODA_OK);
            check_bits(c3, c1 + m * N, N, "row alone vs in the batch");
        }
        pg_free(scratch);
        free(X);
        free(xn);
        free(nw);
        free(c1);
        free(c2);
        free(c3);
        free(w);
        pg_gemm_free(pw);
    }
}

static void test_bad_args(void **state) {
    (void)state;
    uint8_t *w = make_rows(PG_Q4_K, 4, 256);
    pg_packed_weight *pw = (pg_packed_weight *)0x1;
    /* K not a multiple of 256 */
    assert_int_equal(pg_gemm_pack(PG_Q4_K, w, 4, 128, NULL, &pw), PAGODA_ERR_INVALID_ARG);
    assert_null(pw);
    assert_non_null(strstr(pg_last_error(), "multiple of 256"));
    /* a Q6_K block whose 32 d overflows F16 */
    uint8_t blk[210] = {0};
    put16(blk + 208, 60000.0f);
    assert_int_equal(pg_gemm_pack(PG_Q6_K, blk, 1, 256, NULL, &pw), PAGODA_ERR_UNSUPPORTED);
    assert_null(pw);
    assert_non_null(strstr(pg_last_error(), "Q6_K"));
    free(w);
}

/* ---- whole models from gen_model */

static void gen(const char *path, const char *dtype) {
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    o.hidden = 256;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.ffn = 512;
    o.vocab = 512;
    o.tie = false;
    o.init_std = 0.05f;
    o.seed = 11;
    o.gguf_path = path;
    o.gguf_dtype = !strcmp(dtype, "f32")    ? PG_F32
                   : !strcmp(dtype, "q6_k") ? PG_Q6_K
                   : dtype[1] == '4'        ? PG_Q4_K
                                            : PG_Q5_K;
    o.gguf_kmix = strlen(dtype) == 6;
    if (pg_gen_model_write(&o) != PAGODA_OK) fail_msg("%s", pg_last_error());
}

static void test_models(void **state) {
    (void)state;
    const char *dir = pg_test_tmpdir();
    char path[4][512];
    const char *types[4] = {"f32", "q4_k_m", "q5_k_m", "q6_k"};
    /* plain rounding, no importance search: bounds a few times llama.cpp's */
    const double max_kl[4] = {0, 0.05, 0.02, 0.01};
    enum { T = 48 };
    int32_t tok[T];
    for (int i = 0; i < T; i++)
        tok[i] = (int32_t)(pg_test_rnd_u64() % 512);
    float *lg[4];
    for (int i = 0; i < 4; i++) {
        snprintf(path[i], sizeof path[i], "%s/m-%s.gguf", dir, types[i]);
        gen(path[i], types[i]);
        pg_model_options o;
        pg_model_options_default(&o);
        o.compute = PG_F32;
        pg_model_source *src;
        pg_model *m = pg_test_load(path[i], &o, &src);
        lg[i] = malloc((size_t)T * 512 * sizeof(float));
        assert_non_null(lg[i]);
        pg_test_prefill_logits(m, tok, T, lg[i]);
        if (i) {
            double top1;
            const double kl = pg_test_mean_kl(lg[0], lg[i], T, 512, &top1);
            fprintf(stderr, "%s vs f32: mean KL %.5f, same top-1 %.1f%%\n", types[i], kl, top1);
            assert_true(kl > 0.0 && kl < max_kl[i]);
            /* one row alone equals that row in the prefill (batch invariance) */
            pg_test_seq *sq = pg_test_seq_create(m, T, 1, PG_F32);
            float *row = malloc(512 * sizeof(float));
            assert_non_null(row);
            assert_int_equal(pg_test_seq_forward(sq, tok, 5, row), PAGODA_OK);
            check_bits(row, lg[i] + 4 * 512, 512, "decode step vs prefill row");
            free(row);
            pg_test_seq_free(sq);
        }
        pg_model_free(m);
        pg_model_source_free(src);
    }
    for (int i = 0; i < 4; i++)
        free(lg[i]);
}

/* A GGUF tensor type pagoda does not read names itself and the list. */
static void test_unsupported_type(void **state) {
    (void)state;
    const char *dir = pg_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/q4k.gguf", dir);
    gen(path, "q4_k");
    /* retype the first Q4_K tensor as IQ4_XS (ggml type 23, same 256 block) */
    size_t len;
    char *bytes = pg_test_read_file(path, &len);
    pg_gguf *g;
    assert_int_equal(pg_gguf_open(path, &g), PAGODA_OK);
    const char *victim = NULL;
    for (size_t i = 0; i < pg_gguf_n_tensors(g) && !victim; i++)
        if (pg_gguf_tensor_at(g, i)->ggml_type == 12) victim = pg_gguf_tensor_at(g, i)->name;
    assert_non_null(victim);
    char name[128];
    snprintf(name, sizeof name, "%s", victim);
    pg_gguf_close(g);
    char *at = memmem(bytes, len, name, strlen(name));
    assert_non_null(at);
    /* name, then n_dims (u32), dims (u64 each), type (u32) */
    uint32_t nd;
    memcpy(&nd, at + strlen(name), 4);
    char *type_at = at + strlen(name) + 4 + 8 * nd; /* unaligned: memcpy */
    uint32_t type;
    memcpy(&type, type_at, 4);
    assert_int_equal(type, 12);
    type = 23;
    memcpy(type_at, &type, 4);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    fclose(f);
    free(bytes);
    pg_model_source *src = NULL;
    assert_int_equal(pg_model_source_open(path, &src), PAGODA_ERR_UNSUPPORTED);
    const char *e = pg_last_error();
    if (!strstr(e, "IQ4_XS") || !strstr(e, "Q4_K, Q5_K, Q6_K")) fail_msg("%s", e);
    pg_model_source_free(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_and_dequant),
        cmocka_unit_test(test_tables_vs_reference),
        cmocka_unit_test(test_spec_vs_dequantized),
        cmocka_unit_test(test_fused_rmsnorm_and_batch_invariance),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_unsupported_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
