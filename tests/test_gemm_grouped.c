/* Grouped GEMM (kernels/gemm.h pg_gemm_grouped), the expert GEMMs of a
 * mixture-of-experts layer: for random routings of T tokens over E experts
 * (top-k), including empty experts, one expert taking every token, top-k =
 * number of experts and a single token (M = 1), each expert's output must
 * equal, bit for bit,
 *   - pg_gemm on that expert's rows gathered into a contiguous matrix, on
 *     every kernel table this machine (or qemu) runs, at 1, 2 and 3
 *     threads (the grouped call splits (expert, panel) work differently);
 *   - and, with the scalar table, the scalar specification pg_ref_gemm
 *     (F32) / pg_ref_qgemm (W8A8, W4A8 with per-group activation scales).
 * Weight formats: BF16, F32, W8A8 per channel, W4A8 group 32 with
 * activation groups (the GGUF Q4_0 arithmetic); epilogues SwiGLU (rows
 * gathered through a_rows, with bias), store with bias and residual add. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/dtype.h"
#include "base/pool.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/qgemm.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/ref/ref.h"

static const char *const ISAS[] = {"scalar", "avx2", "avx512", "avx512bf16", "neon", "sve"};
enum { N_ISAS = sizeof ISAS / sizeof ISAS[0], MAXE = 12 };

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd_u64(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545f4914f6cdd1dull;
}
static float rnd(void) { /* [-1, 1) */
    return (float)((double)(rnd_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef enum { F_BF16, F_F32, F_W8, F_W4G } fmt;
static const char *const FMT_NAME[] = {"bf16", "f32", "w8a8", "w4a8-g32"};

/* One expert's weights: float source and, for quantized formats, the
 * unpacked q / scale the reference reads. */
typedef struct {
    float *w[2]; /* gate (or the only weight), up */
    int8_t *q[2];
    float *s[2];
    pg_qweight qw[2];
    pg_packed_weight *pw;
} expert;

static void make_expert(expert *x, fmt f, int swiglu, int64_t N, int64_t K,
                        const pg_kernel_table *kt) {
    memset(x, 0, sizeof *x);
    const int halves = swiglu ? 2 : 1;
    for (int h = 0; h < halves; h++) {
        x->w[h] = malloc((size_t)(N * K) * sizeof(float));
        assert_non_null(x->w[h]);
        for (int64_t i = 0; i < N * K; i++)
            x->w[h][i] = rnd() * 0.5f;
    }
    if (f == F_BF16 || f == F_F32) {
        if (f == F_BF16) /* a BF16 source: round the values once */
            for (int h = 0; h < halves; h++)
                for (int64_t i = 0; i < N * K; i++)
                    x->w[h][i] = pg_bf16_to_f32(pg_f32_to_bf16(x->w[h][i]));
        pagoda_status st = swiglu ? pg_gemm_pack_swiglu(PG_F32, x->w[0], x->w[1], N, K, kt, &x->pw)
                                  : pg_gemm_pack(PG_F32, x->w[0], N, K, kt, &x->pw);
        if (f == F_BF16) { /* F32 source packs as F32: repack from BF16 bits */
            pg_gemm_free(x->pw);
            uint16_t *b[2] = {NULL, NULL};
            for (int h = 0; h < halves; h++) {
                b[h] = malloc((size_t)(N * K) * 2);
                for (int64_t i = 0; i < N * K; i++)
                    b[h][i] = pg_f32_to_bf16(x->w[h][i]);
            }
            st = swiglu ? pg_gemm_pack_swiglu(PG_BF16, b[0], b[1], N, K, kt, &x->pw)
                        : pg_gemm_pack(PG_BF16, b[0], N, K, kt, &x->pw);
            free(b[0]);
            free(b[1]);
        }
        assert_int_equal(st, PAGODA_OK);
        return;
    }
    const int bits = f == F_W8 ? 8 : 4;
    const int64_t group = f == F_W8 ? 0 : 32, ng = pg_qweight_ngroups(K, group);
    for (int h = 0; h < halves; h++) {
        x->q[h] = malloc((size_t)(N * K));
        x->s[h] = malloc((size_t)(N * ng) * sizeof(float));
        assert_true(x->q[h] && x->s[h]);
        pg_qgemm_quantize_weight(PG_F32, x->w[h], K, bits, group, 0, N, x->q[h], x->s[h]);
        x->qw[h] = (pg_qweight){bits, group, N, K, x->q[h], x->s[h], f == F_W4G};
    }
    assert_int_equal(pg_gemm_pack_qweight(&x->qw[0], swiglu ? &x->qw[1] : NULL, kt, &x->pw),
                     PAGODA_OK);
}

static void free_expert(expert *x) {
    for (int h = 0; h < 2; h++) {
        free(x->w[h]);
        free(x->q[h]);
        free(x->s[h]);
    }
    pg_gemm_free(x->pw);
}

/* Routing: sel[t*k + r] = expert of token t's rank r (distinct per token). */
typedef enum { R_RANDOM, R_ONE_HOT, R_ALL } routing;

static void route(int T, int E, int k, routing r, int *sel) {
    for (int t = 0; t < T; t++) {
        if (r == R_ONE_HOT) { /* expert 1 takes every token (k = 1) */
            sel[t] = E > 1 ? 1 : 0;
            continue;
        }
        int perm[MAXE];
        for (int e = 0; e < E; e++)
            perm[e] = e;
        /* random: only the first half of the experts are ever chosen
         * (the others stay empty) unless k needs more */
        int pool_n = r == R_RANDOM && k <= E / 2 ? E / 2 : E;
        for (int i = 0; i < k; i++) {
            int j = i + (int)(rnd_u64() % (uint64_t)(pool_n - i));
            int tmp = perm[i];
            perm[i] = perm[j];
            perm[j] = tmp;
            sel[t * k + i] = perm[i];
        }
    }
}

typedef struct {
    const char *name;
    int T, E, k;
    routing r;
} scenario;

static const scenario SCEN[] = {
    {"random, empty experts", 9, 8, 2, R_RANDOM},
    {"one expert takes all", 23, 6, 1, R_ONE_HOT},
    {"top-k = experts", 5, 4, 4, R_ALL},
    {"one token", 1, 8, 3, R_RANDOM},
    {"hot and cold, many rows", 70, 3, 2, R_ALL},
};

static pg_pool *make_pool(int n) {
    pg_pool_options o = pg_pool_options_default();
    o.n_threads = n;
    o.pin = 0;
    o.blocktime_us = 0;
    pg_pool *p = NULL;
    assert_int_equal(pg_pool_create(&o, &p), PAGODA_OK);
    return p;
}

static void check_bits(const float *got, const float *want, int64_t n, const char *what,
                       const char *isa, fmt f, const scenario *sc, int e) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4) != 0) {
            fprintf(stderr, "%s %s %s [%s] expert %d: element %lld = %.9g, want %.9g\n", what, isa,
                    FMT_NAME[f], sc->name, e, (long long)i, got[i], want[i]);
            fail();
        }
}

/* One (table, format, scenario, pool): a SwiGLU grouped call with gathered
 * rows and bias, then a store (with bias) and a residual grouped call. */
static void run_case(const pg_kernel_table *kt, fmt f, const scenario *sc, pg_pool *pool) {
    const int64_t H = 70, I = 45; /* odd sizes: partial panels and k-groups */
    const int T = sc->T, E = sc->E, k = sc->k;
    expert gu[MAXE], dn[MAXE];
    for (int e = 0; e < E; e++) {
        make_expert(&gu[e], f, 1, I, H, kt);
        make_expert(&dn[e], f, 0, H, I, kt);
    }
    int sel[80 * 4], off[MAXE + 1] = {0}, rows[80 * 4];
    route(T, E, k, sc->r, sel);
    for (int i = 0; i < T * k; i++)
        off[sel[i] + 1]++;
    for (int e = 0; e < E; e++)
        off[e + 1] += off[e];
    int fill[MAXE];
    memcpy(fill, off, sizeof fill);
    for (int i = 0; i < T * k; i++)
        rows[fill[sel[i]]++] = i / k;
    const int R = T * k;
    float *x = malloc((size_t)(T * H) * sizeof(float));
    float *act = malloc((size_t)(R * I) * sizeof(float));
    float *out = malloc((size_t)(R * H) * sizeof(float));
    float *res = malloc((size_t)(R * H) * sizeof(float));
    float *gb = malloc((size_t)(2 * I) * sizeof(float)), *db = malloc((size_t)H * sizeof(float));
    float *g = malloc((size_t)(R * H) * sizeof(float)), *ref = malloc((size_t)(R * H) * sizeof(float));
    assert_true(x && act && out && res && gb && db && g && ref);
    for (int64_t i = 0; i < T * H; i++)
        x[i] = rnd() * 2.0f;
    for (int64_t i = 0; i < 2 * I; i++)
        gb[i] = rnd() * 0.1f;
    for (int64_t i = 0; i < H; i++)
        db[i] = rnd() * 0.1f;
    for (int64_t i = 0; i < R * H; i++)
        res[i] = rnd();
    const int nt = pool ? pg_pool_size(pool) : 1;
    size_t ss = 0;
    for (int e = 0; e < E; e++) {
        size_t a = pg_gemm_grouped_scratch_size(gu[e].pw, R, E, nt);
        size_t b = pg_gemm_grouped_scratch_size(dn[e].pw, R, E, nt);
        ss = a > ss ? a : ss;
        ss = b > ss ? b : ss;
        a = pg_gemm_scratch_size(gu[e].pw, R, 1);
        b = pg_gemm_scratch_size(dn[e].pw, R, 1);
        ss = a > ss ? a : ss;
        ss = b > ss ? b : ss;
    }
    void *scratch = pg_malloc_aligned(ss);
    assert_non_null(scratch);
    pg_gemm_problem p[MAXE];
    for (int e = 0; e < E; e++)
        p[e] = (pg_gemm_problem){gu[e].pw,   x,  off[e + 1] - off[e], H, rows + off[e],
                                 act + off[e] * I, I, gb, PG_GEMM_SWIGLU, 0.0f};
    assert_int_equal(pg_gemm_grouped(p, E, pool, scratch), PAGODA_OK);
    for (int pass = 0; pass < 2; pass++) { /* store with bias, then residual */
        float *C = pass ? res : out;
        float *before = pass ? malloc((size_t)(R * H) * sizeof(float)) : NULL;
        if (before) memcpy(before, res, (size_t)(R * H) * sizeof(float));
        for (int e = 0; e < E; e++)
            p[e] = (pg_gemm_problem){dn[e].pw, act + off[e] * I, off[e + 1] - off[e], I, NULL,
                                     C + off[e] * H, H, pass ? NULL : db,
                                     pass ? PG_GEMM_RESIDUAL : PG_GEMM_STORE, 0.0f};
        assert_int_equal(pg_gemm_grouped(p, E, pool, scratch), PAGODA_OK);
        for (int e = 0; e < E; e++) {
            const int64_t M = off[e + 1] - off[e];
            if (!M) continue;
            /* the SwiGLU rows: pg_gemm on the gathered rows, and the spec */
            for (int64_t r = 0; r < M; r++)
                memcpy(g + r * H, x + rows[off[e] + r] * H, (size_t)H * sizeof(float));
            if (pass == 0) {
                assert_int_equal(
                    pg_gemm(gu[e].pw, g, M, H, ref, I, gb, PG_GEMM_SWIGLU, NULL, scratch),
                    PAGODA_OK);
                check_bits(act + off[e] * I, ref, M * I, "swiglu vs pg_gemm", kt->isa, f, sc, e);
                if (kt == pg_kernels_for_isa("scalar") && f != F_BF16) {
                    if (f == F_F32)
                        pg_ref_gemm(PG_F32, gu[e].w[0], gu[e].w[1], I, H, g, M, H, ref, I, gb,
                                    PG_GEMM_SWIGLU, NULL);
                    else
                        pg_ref_qgemm(&gu[e].qw[0], &gu[e].qw[1], g, M, H, ref, I, gb,
                                     PG_GEMM_SWIGLU);
                    check_bits(act + off[e] * I, ref, M * I, "swiglu vs spec", kt->isa, f, sc, e);
                }
            }
            /* the down rows */
            if (pass) memcpy(ref, before + off[e] * H, (size_t)(M * H) * sizeof(float));
            assert_int_equal(pg_gemm(dn[e].pw, act + off[e] * I, M, I, ref, H, pass ? NULL : db,
                                     pass ? PG_GEMM_RESIDUAL : PG_GEMM_STORE, NULL, scratch),
                             PAGODA_OK);
            check_bits(C + off[e] * H, ref, M * H, pass ? "residual" : "store", kt->isa, f, sc, e);
        }
        free(before);
    }
    pg_free(scratch);
    free(x);
    free(act);
    free(out);
    free(res);
    free(gb);
    free(db);
    free(g);
    free(ref);
    for (int e = 0; e < E; e++) {
        free_expert(&gu[e]);
        free_expert(&dn[e]);
    }
}

static void test_grouped_vs_single(void **state) {
    (void)state;
    pg_pool *pools[3] = {NULL, make_pool(2), make_pool(3)};
    for (int l = 0; l < N_ISAS; l++) {
        const pg_kernel_table *kt = pg_kernels_for_isa(ISAS[l]);
        if (!kt) continue;
        for (int f = 0; f < 4; f++)
            for (size_t s = 0; s < sizeof SCEN / sizeof SCEN[0]; s++)
                for (int p = 0; p < 3; p++)
                    run_case(kt, (fmt)f, &SCEN[s], pools[p]);
    }
    pg_pool_free(pools[1]);
    pg_pool_free(pools[2]);
}

/* Every problem empty: nothing runs, nothing is read. */
static void test_grouped_empty(void **state) {
    (void)state;
    float w[32 * 8] = {0};
    pg_packed_weight *pw = NULL;
    assert_int_equal(pg_gemm_pack(PG_F32, w, 8, 32, NULL, &pw), PAGODA_OK);
    void *scratch = pg_malloc_aligned(pg_gemm_grouped_scratch_size(pw, 1, 4, 1));
    pg_gemm_problem p[4];
    for (int i = 0; i < 4; i++)
        p[i] = (pg_gemm_problem){.w = pw, .M = 0, .ep = PG_GEMM_STORE};
    assert_int_equal(pg_gemm_grouped(p, 4, NULL, scratch), PAGODA_OK);
    assert_int_equal(pg_gemm_grouped(p, 0, NULL, scratch), PAGODA_OK);
    /* bad arguments are refused before anything runs */
    float a[32], c[8];
    p[1] = (pg_gemm_problem){pw, a, 1, 16 /* lda < K */, NULL, c, 8, NULL, PG_GEMM_STORE, 0.0f};
    assert_int_equal(pg_gemm_grouped(p, 4, NULL, scratch), PAGODA_ERR_INVALID_ARG);
    p[1].lda = 32;
    p[1].ep = PG_GEMM_SWIGLU; /* not a pair */
    assert_int_equal(pg_gemm_grouped(p, 4, NULL, scratch), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_grouped(p, -1, NULL, scratch), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gemm_grouped(p, 4, NULL, NULL), PAGODA_ERR_INVALID_ARG);
    pg_free(scratch);
    pg_gemm_free(pw);
}

/* GPT-OSS's clamped SwiGLU (glu_limit > 0): the grouped SwiGLU equals
 * pg_ref_swiglu_oai of the gate and up projections (+ bias) computed as
 * plain stores, bit for bit (the sums and the bias add are the same). */
static void test_grouped_clamped_swiglu(void **state) {
    (void)state;
    const int64_t N = 37, K = 64, M = 5;
    for (int f = F_F32; f <= F_W8; f++) {
        const pg_kernel_table *kt = pg_kernels();
        expert pair, g1, u1;
        make_expert(&pair, (fmt)f, 1, N, K, kt);
        /* the same gate and up weights packed alone */
        memset(&g1, 0, sizeof g1);
        memset(&u1, 0, sizeof u1);
        if (f == F_F32) {
            assert_int_equal(pg_gemm_pack(PG_F32, pair.w[0], N, K, kt, &g1.pw), PAGODA_OK);
            assert_int_equal(pg_gemm_pack(PG_F32, pair.w[1], N, K, kt, &u1.pw), PAGODA_OK);
        } else {
            assert_int_equal(pg_gemm_pack_qweight(&pair.qw[0], NULL, kt, &g1.pw), PAGODA_OK);
            assert_int_equal(pg_gemm_pack_qweight(&pair.qw[1], NULL, kt, &u1.pw), PAGODA_OK);
        }
        float a[M * K], b[2 * N], g[M * N], u[M * N], want[M * N], got[M * N];
        for (int64_t i = 0; i < M * K; i++)
            a[i] = rnd() * 8.0f; /* large: some gates and ups beyond the limit */
        for (int64_t i = 0; i < 2 * N; i++)
            b[i] = rnd();
        size_t ss = pg_gemm_grouped_scratch_size(pair.pw, M, 1, 1);
        size_t s2 = pg_gemm_scratch_size(g1.pw, M, 1);
        void *scratch = pg_malloc_aligned(ss > s2 ? ss : s2);
        assert_int_equal(pg_gemm(g1.pw, a, M, K, g, N, b, PG_GEMM_STORE, NULL, scratch),
                         PAGODA_OK);
        assert_int_equal(pg_gemm(u1.pw, a, M, K, u, N, b + N, PG_GEMM_STORE, NULL, scratch),
                         PAGODA_OK);
        pg_ref_swiglu_oai(want, g, u, (size_t)(M * N), 7.0f, 1.702f);
        int clipped = 0;
        for (int64_t i = 0; i < M * N; i++)
            clipped += g[i] > 7.0f || u[i] > 7.0f || u[i] < -7.0f;
        assert_true(clipped > 0); /* the clamp is exercised */
        pg_gemm_problem p = {pair.pw, a, M, K, NULL, got, N, b, PG_GEMM_SWIGLU, 7.0f};
        assert_int_equal(pg_gemm_grouped(&p, 1, NULL, scratch), PAGODA_OK);
        check_bits(got, want, M * N, "clamped swiglu", kt->isa, (fmt)f, &SCEN[0], 0);
        pg_free(scratch);
        free_expert(&pair);
        pg_gemm_free(g1.pw);
        pg_gemm_free(u1.pw);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grouped_vs_single),
        cmocka_unit_test(test_grouped_empty),
        cmocka_unit_test(test_grouped_clamped_swiglu),
    };
    pg_pool_set_serial_macs(0); /* exercise the forked paths on small cases too */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
