/* The BF16 and F32 weight formats of the GEMM driver (gemm_driver.h; the
 * arithmetic is gemm.h's): packing F32 / F16 / BF16 rows into the
 * microkernel's panels, the BF16 input stage (A rounded to BF16 in the
 * microkernel's layout), the tile call and the bias / residual / SwiGLU
 * epilogue. */
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "kernels/gemm_driver.h"

/* Blocking (elements). KC_ELEMS x NR BF16 = 64 KiB for NR 64 (L2; 256 and
 * 1024 measured within noise of it on Zen 4); MC_MAX rows of acc over
 * NC_ELEMS columns = 256 KiB (L2), and W is streamed from memory once per
 * MC_MAX rows. NC_ELEMS is a multiple of every NR. The next-slice prefetch
 * runs when a full tile's share fits PF_PER_GROUP lines per k-group. */
enum { KC_ELEMS = 512, NC_ELEMS = 128, MC_MAX = 512, PF_PER_GROUP = 4 };
#define PG_GEMM_MAX_NR 128 /* widest panel of any microkernel */

/* Copy source row n (K elements of dtype t) into column c of a packed
 * panel: element k goes to group k / kg, slot k % kg. */
static void pack_row(const pg_packed_weight *pw, pg_dtype t, const void *src, int64_t n,
                     void *panel, int c) {
    const int64_t kg = pw->fuk.kg, nr = pw->fuk.nr, K = pw->K;
    for (int64_t g = 0; g < pw->kgroups; g++) {
        const int64_t k0 = g * kg, cnt = K - k0 < kg ? K - k0 : kg;
        const size_t at = (size_t)((g * nr + c) * kg);
        for (int64_t j = 0; j < cnt; j++) {
            const size_t i = (size_t)(n * K + k0 + j);
            if (t == PG_F32) {
                float v = ((const float *)src)[i];
                if (pw->bf16)
                    ((uint16_t *)panel)[at + j] = pg_f32_to_bf16(v);
                else
                    ((float *)panel)[at + j] = v;
            } else {
                uint16_t h = ((const uint16_t *)src)[i];
                ((uint16_t *)panel)[at + j] = t == PG_BF16 ? h : pg_f32_to_bf16(pg_f16_to_f32(h));
            }
        }
    }
}

typedef struct float_pack_job {
    const pg_packed_weight *pw;
    pg_dtype t;
    const void *src[2]; /* gate, up (NULL: not a pair) */
} float_pack_job;

/* Rows [begin, end) of both halves into their panels. */
static void pack_rows(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const float_pack_job *j = ctx;
    const pg_packed_weight *pw = j->pw;
    const int nr = pw->fuk.nr;
    for (int half = 0; half < (pw->swiglu ? 2 : 1); half++) {
        for (int64_t n = (int64_t)begin; n < (int64_t)end; n++) {
            int64_t p = n / nr;
            if (pw->swiglu) p = 2 * p + half;
            char *panel = (char *)pw->data + (size_t)p * pw->panel_bytes;
            pack_row(pw, j->t, j->src[half], n, panel, (int)(n % nr));
        }
    }
}

/* Pack F32 / F16 / BF16 rows (gate and, for a SwiGLU pair, up). */
pagoda_status pg_gemm_pack_float(pg_dtype t, const void *Wg, const void *Wu, int64_t N, int64_t K,
                                 const pg_kernel_table *kt, pg_packed_weight **out) {
    if (!kt) kt = pg_kernels();
    if ((t == PG_F32 ? kt->gemm_f32.nr : kt->gemm_bf16.nr) > PG_GEMM_MAX_NR)
        return pg_error(PAGODA_ERR_INTERNAL, "gemm: microkernel panel wider than %d",
                        PG_GEMM_MAX_NR);
    pg_packed_weight *pw = pg_gemm_weight_new();
    if (!pw) return pg_error(PAGODA_ERR_NOMEM, "gemm: pack: out of memory");
    pw->kt = kt;
    pw->bf16 = t != PG_F32;
    pw->fmt = pw->bf16 ? &pg_gemm_format_bf16 : &pg_gemm_format_f32;
    pw->fuk = pw->bf16 ? kt->gemm_bf16 : kt->gemm_f32;
    pw->mr = pw->fuk.mr;
    pw->nr = pw->fuk.nr;
    pw->ar = pw->fuk.ar;
    pw->swiglu = Wu != NULL;
    pw->N = N;
    pw->K = K;
    pw->kgroups = pg_ceil_div64(K, pw->fuk.kg);
    int64_t np = pg_ceil_div64(N, pw->fuk.nr);
    pw->npanels = pw->swiglu ? 2 * np : np;
    pw->elem = pw->bf16 ? 2 : 4;
    pw->gbytes = (size_t)(pw->fuk.kg * pw->fuk.nr) * pw->elem;
    pw->panel_bytes = (size_t)pw->kgroups * pw->gbytes;
    pw->bytes = (size_t)pw->npanels * pw->panel_bytes;
    pw->data = pg_alloc_huge(pw->bytes); /* zero-filled: padding stays 0 */
    if (!pw->data) {
        pg_free(pw);
        return pg_error(PAGODA_ERR_NOMEM, "gemm: pack: cannot allocate %zu bytes", pw->bytes);
    }
    /* rows over the default pool's threads: each row fills its own column
     * of one panel, so the bytes do not depend on the split */
    float_pack_job j = {pw, t, {Wg, Wu}};
    pg_pool *pool = pg_pool_default();
    if (pool && pg_pool_size(pool) > 1 && N * K >= 65536)
        pg_pool_parallel_for(pool, (size_t)N, 16, pack_rows, &j);
    else
        pack_rows(&j, 0, (size_t)N, 0);
    *out = pw;
    return PAGODA_OK;
}

static void plan(const pg_packed_weight *w, int64_t M, int gathered, pg_gemm_geometry *g) {
    const pg_gemm_ukernel *uk = &w->fuk;
    memset(g, 0, sizeof *g);
    g->M = M;
    /* ic blocks of equal size (a multiple of MR): M = 512 as 510 + 2 rows
     * would stream all of W a second time for 2 rows. */
    int64_t mc_max = (MC_MAX / uk->mr) * uk->mr;
    int64_t nblocks = pg_ceil_div64(M, mc_max);
    g->mc = pg_ceil_div64(pg_ceil_div64(M, nblocks), uk->mr) * uk->mr;
    g->nc_panels = NC_ELEMS / uk->nr;
    if (g->nc_panels < 2) g->nc_panels = 2;
    if (w->swiglu && (g->nc_panels & 1)) g->nc_panels++;
    g->kc_groups = M <= uk->mr ? w->kgroups : (KC_ELEMS + uk->kg - 1) / uk->kg;
    if (w->bf16) {
        g->a_stride = w->kgroups * uk->kg * uk->ar; /* per row group */
        /* A row stride of a multiple of 4 KiB puts the MR rows of a tile
         * in one L1 set (and aliases loads): pad by one cache line. */
        if ((g->a_stride * 2) % 1024 == 0) g->a_stride += 32;
        g->a_bytes = pg_align_up((size_t)(pg_ceil_div64(M, uk->ar) * g->a_stride) * 2);
    } else if (gathered) {
        /* F32 reads A in place; gathered rows are copied together first */
        g->a_stride = w->K;
        g->a_bytes = pg_align_up((size_t)(M * w->K) * sizeof(float));
    }
    g->acc_bytes = pg_align_up((size_t)(g->mc * g->nc_panels * uk->nr) * sizeof(float));
}

/* Input stage: rows [r0, r1) of A -> BF16 in the layout the microkernel
 * reads (ar 1: rows of kgroups*kg; ar 2: row pairs interleaved per group;
 * the k padding and a missing pair partner are zero). */
enum { CVT_CHUNK = 256 }; /* a multiple of every kg */

static void input_bf16(const pg_gemm_call *cl, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const pg_packed_weight *w = cl->w;
    const int64_t kg = w->fuk.kg, ar = w->fuk.ar;
    const int64_t K = w->K, kp = w->kgroups * kg;
    uint16_t *apack = cl->apack;
    for (int64_t r = r0; r < r1; r++) {
        uint16_t *grp = apack + (r / ar) * cl->g.a_stride;
        const float *a = pg_gemm_a_row(cl, r);
        if (ar == 1) {
            w->kt->cvt_f32_bf16(a, grp, (size_t)K);
            for (int64_t k = K; k < kp; k++)
                grp[k] = 0;
            continue;
        }
        uint16_t tmp[CVT_CHUNK];
        const int64_t slot = r % ar;
        for (int64_t k0 = 0; k0 < kp; k0 += CVT_CHUNK) {
            int64_t n = kp - k0 < CVT_CHUNK ? kp - k0 : CVT_CHUNK;
            int64_t valid = K - k0 < n ? (K - k0 > 0 ? K - k0 : 0) : n;
            w->kt->cvt_f32_bf16(a + k0, tmp, (size_t)valid);
            for (int64_t k = valid; k < n; k++)
                tmp[k] = 0;
            for (int64_t k = 0; k < n; k++) {
                int64_t kk = k0 + k;
                grp[(kk / kg) * kg * ar + slot * kg + kk % kg] = tmp[k];
            }
        }
    }
    /* the zero partner of an odd last row */
    if (ar == 2 && r1 == cl->g.M && (r1 & 1)) {
        uint16_t *grp = apack + (r1 / 2) * cl->g.a_stride;
        for (int64_t k = 0; k < kp; k++)
            grp[(k / kg) * kg * 2 + kg + k % kg] = 0;
    }
}

/* F32 with gathered rows: copy them together (the microkernel reads rows
 * a_stride apart). */
static void input_f32(const pg_gemm_call *cl, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    float *apack = cl->apack;
    for (int64_t r = r0; r < r1; r++)
        memcpy(apack + r * cl->g.a_stride, pg_gemm_a_row(cl, r), (size_t)cl->w->K * sizeof(float));
}

static int has_input_bf16(const pg_gemm_call *cl) {
    (void)cl;
    return 1;
}
static int has_input_f32(const pg_gemm_call *cl) {
    return cl->a_rows != NULL;
}

static int64_t pf_limit(const pg_packed_weight *w, int64_t ng) {
    /* Small M (2+ row tiles reuse a slice): the tiles prefetch the next
     * slice, each a share in proportion to its rows, so memory streams
     * evenly instead of stalling the first tile of each slice. Only when a
     * full tile's share fits PF_PER_GROUP lines per k-group (rows >= 6 for
     * 6x64 BF16), and up to 64 rows (beyond, W is reused enough for the
     * hardware prefetcher; the prefetches cost ~2%). One tile (decode)
     * streams alone: measured no better. */
    return w->fuk.run_pf ? PF_PER_GROUP * ng : -1;
}

static void tile(const pg_gemm_call *cl, const char *wp, int64_t pc, int64_t ng, int64_t ir,
                 int rows, float *c, int64_t ldc, int accumulate, const char *pf,
                 int64_t pf_lines) {
    const pg_packed_weight *w = cl->w;
    const pg_gemm_ukernel *uk = &w->fuk;
    const void *ap;
    int64_t as;
    if (w->bf16) {
        ap = (const uint16_t *)cl->apack + (ir / uk->ar) * cl->g.a_stride + pc * uk->kg * uk->ar;
        as = cl->g.a_stride;
    } else if (cl->a_rows) {
        ap = (const float *)cl->apack + ir * cl->g.a_stride + pc;
        as = cl->g.a_stride;
    } else {
        ap = cl->A + ir * cl->lda + pc;
        as = cl->lda;
    }
    if (pf)
        uk->run_pf(ng, ap, as, wp, c, ldc, rows, accumulate, pf, pf_lines);
    else
        uk->run(ng, ap, as, wp, c, ldc, rows, accumulate);
}

/* c[j] = r[j] + (y[j] + b[j]) with r or b NULL meaning no term: the
 * residual / bias epilogue, 4 floats at a time with the baseline ISA's
 * vectors (GCC vector extensions; generic files get no -m flags). The
 * same IEEE additions in the same order as the scalar loop, bit for bit. */
typedef float v4f __attribute__((vector_size(16)));

static void add_rows(float *c, const float *r, const float *y, const float *b, int64_t n) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        v4f t, u;
        memcpy(&t, y + j, sizeof t);
        if (b) {
            memcpy(&u, b + j, sizeof u);
            t = t + u;
        }
        if (r) {
            memcpy(&u, r + j, sizeof u);
            t = u + t;
        }
        memcpy(c + j, &t, sizeof t);
    }
    for (; j < n; j++) {
        float t = b ? y[j] + b[j] : y[j];
        c[j] = r ? r[j] + t : t;
    }
}

static void epilogue(const pg_gemm_call *cl, float *acc, int64_t ldacc, int64_t m0, int64_t m1,
                     int64_t p0, int64_t p1) {
    const pg_packed_weight *w = cl->w;
    const int64_t nr = w->nr, N = w->N;
    const float *bias = cl->bias;
    if (w->swiglu) {
        float gb[PG_GEMM_MAX_NR], ub[PG_GEMM_MAX_NR];
        for (int64_t p = p0; p < p1; p += 2) {
            int64_t n0 = (p / 2) * nr, cnt = N - n0 < nr ? N - n0 : nr;
            const int64_t off = (p - p0) * nr;
            for (int64_t m = m0; m < m1; m++) {
                const float *gr = acc + (m - m0) * ldacc + off, *ur = gr + nr;
                float *c = cl->C + m * cl->ldc + n0;
                if (bias) {
                    for (int64_t j = 0; j < cnt; j++) {
                        gb[j] = gr[j] + bias[n0 + j];
                        ub[j] = ur[j] + bias[N + n0 + j];
                    }
                    gr = gb;
                    ur = ub;
                }
                pg_gemm_glu(cl, w->kt, c, gr, ur, (size_t)cnt);
            }
        }
        return;
    }
    int64_t n0 = p0 * nr, n1 = p1 * nr < N ? p1 * nr : N;
    for (int64_t m = m0; m < m1; m++) {
        const float *y = acc + (m - m0) * ldacc;
        float *c = cl->C + m * cl->ldc + n0;
        const int64_t cnt = n1 - n0;
        if (cl->ep == PG_GEMM_RESIDUAL)
            add_rows(c, c, y, bias ? bias + n0 : NULL, cnt);
        else if (bias)
            add_rows(c, NULL, y, bias + n0, cnt);
        else
            memcpy(c, y, (size_t)cnt * sizeof(float));
    }
}

static const char *variant(const pg_packed_weight *w) {
    return w->fuk.name;
}

const pg_gemm_format pg_gemm_format_bf16 = {
    .name = "bf16",
    .plan = plan,
    .input = input_bf16,
    .has_input = has_input_bf16,
    .pf_limit = pf_limit,
    .tile = tile,
    .epilogue = epilogue,
    .direct_store = 1,
    .variant = variant,
};

const pg_gemm_format pg_gemm_format_f32 = {
    .name = "f32",
    .plan = plan,
    .input = input_f32,
    .has_input = has_input_f32,
    .pf_limit = pf_limit,
    .tile = tile,
    .epilogue = epilogue,
    .direct_store = 1,
    .variant = variant,
};
