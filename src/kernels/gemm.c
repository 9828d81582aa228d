/* Prepacked GEMM driver (see gemm.h): packing, the BLIS-style loops around
 * the table's microkernel, threading and the fused epilogues. Nothing here is
 * ISA-specific; the microkernels are (pg_gemm_ukernel, dispatch.h).
 *
 * Loops of one thread over its share of the output (docs/ARCHITECTURE.md):
 *   for jc: NC columns (a block of whole panels)        W block KC x NC in L2
 *     for ic: MC rows                                    acc block MC x NC
 *       for pc: KC (whole K when M <= MR: decode)        A block MC x KC in L2
 *         for jr: one panel of NR columns                W slice KC x NR in L1
 *           for ir: MR rows: microkernel (acc tile += A tile . W slice)
 *       epilogue: acc block (+ bias, residual, SwiGLU) -> C */
#include "kernels/gemm.h"

#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "kernels/blocking.h"
#include "kernels/qgemm.h"
#include "kernels/ref/ref.h"

/* Blocking (elements). KC_ELEMS x NR BF16 = 64 KiB for NR 64 (L2; 256 and
 * 1024 measured within noise of it on Zen 4); MC_MAX
 * rows of acc over NC_ELEMS columns = 256 KiB (L2), and W is streamed from
 * memory once per MC_MAX rows. NC_ELEMS is a multiple of every NR. */
enum { KC_ELEMS = 512, NC_ELEMS = 128, MC_MAX = 512, PF_MAX_ROWS = 64, PF_PER_GROUP = 4 };
#define PG_GEMM_MAX_NR 128 /* widest panel of any microkernel */

struct pg_packed_weight {
    pg_gemm_ukernel uk;
    const pg_kernel_table *kt;
    int bf16;           /* 1: BF16 panels (uint16), 0: f32 panels */
    int swiglu;         /* panels alternate gate, up (per NR columns) */
    int64_t N, K;       /* logical N (gate rows for SwiGLU), K */
    int64_t kgroups;    /* ceil(K / kg) */
    int64_t npanels;    /* panels of uk.nr columns (SwiGLU: even: gate, up, gate, ...) */
    size_t elem;        /* bytes per packed element */
    size_t panel_elems; /* kgroups * kg * nr */
    void *data;
    size_t bytes;
    pg_qpacked *q; /* quantized (W8A8 / W4A8): everything goes to qgemm.c */
    pg_next_weight next; /* decode prefetch hint (pg_gemm_set_next) */
};

static int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}
static size_t align_up(size_t x) {
    return (x + PG_ALIGN - 1) & ~(size_t)(PG_ALIGN - 1);
}

int64_t pg_gemm_n(const pg_packed_weight *w) {
    return w->N;
}
int64_t pg_gemm_k(const pg_packed_weight *w) {
    return w->K;
}
int pg_gemm_is_swiglu(const pg_packed_weight *w) {
    return w->swiglu;
}
size_t pg_gemm_packed_bytes(const pg_packed_weight *w) {
    return w->q ? pg_qgemm_packed_bytes(w->q) : w->bytes;
}
const char *pg_gemm_variant(const pg_packed_weight *w) {
    return w->q ? pg_qgemm_variant(w->q) : w->uk.name;
}
int pg_gemm_quant_bits(const pg_packed_weight *w) {
    return w->q ? pg_qgemm_bits(w->q) : 0;
}
const struct pg_qpacked *pg_gemm_qpacked(const pg_packed_weight *w) {
    return w ? w->q : NULL;
}

void pg_gemm_free(pg_packed_weight *w) {
    if (!w) return;
    if (w->q)
        pg_qgemm_free(w->q);
    else
        pg_free_huge(w->data, w->bytes);
    pg_free(w);
}

/* ---- quantized weights: a wrapper around a pg_qpacked */

static pagoda_status wrap_q(pagoda_status st, pg_qpacked *q, pg_packed_weight **out) {
    if (st) return st;
    pg_packed_weight *pw = pg_calloc_aligned(1, sizeof *pw);
    if (!pw) {
        pg_qgemm_free(q);
        return pg_error(PAGODA_ERR_NOMEM, "gemm: pack: out of memory");
    }
    pw->q = q;
    pw->N = pg_qgemm_n(q);
    pw->K = pg_qgemm_k(q);
    pw->swiglu = pg_qgemm_is_swiglu(q);
    *out = pw;
    return PAGODA_OK;
}

static const pg_qgemm_ukernel *q_uk(const pg_kernel_table *kt, int bits) {
    if (!kt) kt = pg_kernels();
    return bits == 8 ? &kt->qgemm_w8 : &kt->qgemm_w4;
}

pagoda_status pg_gemm_pack_qweight(const pg_qweight *w, const pg_qweight *w_up,
                                   const pg_kernel_table *kt, pg_packed_weight **out) {
    return pg_gemm_pack_qweight_pool(w, w_up, kt, NULL, out);
}

pagoda_status pg_gemm_pack_qweight_pool(const pg_qweight *w, const pg_qweight *w_up,
                                        const pg_kernel_table *kt, pg_pool *pool,
                                        pg_packed_weight **out) {
    if (!out) return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: pack: NULL out");
    *out = NULL;
    if (!w) return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: pack: NULL weight");
    pg_qpacked *q = NULL;
    pagoda_status st = pg_qgemm_pack_pool(w, w_up, q_uk(kt, w->bits), pool, &q);
    return wrap_q(st, q, out);
}

/* GGUF Q8_0 / Q4_0 rows (gate, and up for a SwiGLU pair) -> W8A8 / W4A8. */
static pagoda_status pack_gguf(pg_dtype t, const void *Wg, const void *Wu, int64_t N, int64_t K,
                               const pg_kernel_table *kt, pg_packed_weight **out) {
    if (!Wg || (N < 1 || K < 1))
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: pack: NULL weight or N=%lld K=%lld",
                        (long long)N, (long long)K);
    const int halves = Wu ? 2 : 1;
    int8_t *q = pg_malloc_aligned((size_t)(halves * N * K));
    float *s = pg_malloc_aligned((size_t)(halves * N * (K / 32 + 1)) * sizeof(float));
    pagoda_status st = PAGODA_OK;
    if (!q || !s) st = pg_error(PAGODA_ERR_NOMEM, "gemm: pack: out of memory");
    pg_qweight w[2];
    for (int h = 0; h < halves && !st; h++) {
        int8_t *qh = q + h * N * K;
        float *sh = s + h * N * (K / 32);
        st = pg_qgemm_from_gguf(t, h ? Wu : Wg, N, K, qh, sh);
        w[h] = (pg_qweight){t == PG_Q8_0 ? 8 : 4, 32, N, K, qh, sh, 1};
    }
    if (!st) st = pg_gemm_pack_qweight(&w[0], Wu ? &w[1] : NULL, kt, out);
    pg_free(q);
    pg_free(s);
    return st;
}

typedef struct {
    pg_dtype t;
    const void *W;
    int64_t K, group;
    int bits;
    int8_t *q;
    float *s;
} quant_job;

static void quant_rows(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const quant_job *j = ctx;
    pg_qgemm_quantize_weight(j->t, j->W, j->K, j->bits, j->group, (int64_t)begin, (int64_t)end,
                             j->q, j->s);
}

pagoda_status pg_gemm_pack_quantize(pg_dtype src_dtype, const void *W, const void *W_up, int64_t N,
                                    int64_t K, int bits, int64_t group, int act_group,
                                    const pg_kernel_table *kt, pg_pool *pool,
                                    pg_packed_weight **out) {
    if (!out) return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: pack: NULL out");
    *out = NULL;
    if (!W || N < 1 || K < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: quantize: NULL weight or N=%lld K=%lld",
                        (long long)N, (long long)K);
    if (src_dtype != PG_F32 && src_dtype != PG_F16 && src_dtype != PG_BF16)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "gemm: quantize: source dtype %s (need F32, F16 or BF16)",
                        pg_dtype_name(src_dtype));
    if ((bits != 8 && bits != 4) || group < 0 || group % 32)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "gemm: quantize: bits %d group %lld (need 8 or 4; 0 or a multiple of 32)",
                        bits, (long long)group);
    const int halves = W_up ? 2 : 1;
    const int64_t ng = pg_qweight_ngroups(K, group);
    int8_t *q = pg_malloc_aligned((size_t)(halves * N * K));
    float *s = pg_malloc_aligned((size_t)(halves * N * ng) * sizeof(float));
    pagoda_status st = PAGODA_OK;
    if (!q || !s) st = pg_error(PAGODA_ERR_NOMEM, "gemm: quantize: out of memory");
    pg_qweight w[2];
    for (int h = 0; h < halves && !st; h++) {
        quant_job j = {src_dtype, h ? W_up : W, K, group, bits, q + h * N * K, s + h * N * ng};
        if (pool && N * K >= 65536)
            pg_pool_parallel_for(pool, (size_t)N, 16, quant_rows, &j);
        else
            quant_rows(&j, 0, (size_t)N, 0);
        w[h] = (pg_qweight){bits, group, N, K, j.q, j.s, act_group};
    }
    if (!st) st = pg_gemm_pack_qweight_pool(&w[0], W_up ? &w[1] : NULL, kt, pool, out);
    pg_free(q);
    pg_free(s);
    return st;
}

/* Copy source row n (K elements of dtype t) into column c of a packed
 * panel: element k goes to group k / kg, slot k % kg. */
static void pack_row(const pg_packed_weight *pw, pg_dtype t, const void *src, int64_t n,
                     void *panel, int c) {
    const int64_t kg = pw->uk.kg, nr = pw->uk.nr, K = pw->K;
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

static pagoda_status pack_common(pg_dtype t, const void *Wg, const void *Wu, int64_t N, int64_t K,
                                 const pg_kernel_table *kt, pg_packed_weight **out) {
    if (!out) return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: pack: NULL out");
    *out = NULL;
    if (!Wg) return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: pack: NULL weight");
    if (N < 1 || K < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: pack: N=%lld K=%lld must be >= 1",
                        (long long)N, (long long)K);
    if (t == PG_Q8_0 || t == PG_Q4_0) return pack_gguf(t, Wg, Wu, N, K, kt, out);
    if (t != PG_F32 && t != PG_F16 && t != PG_BF16)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "gemm: pack: weight dtype %s not supported (F32, F16, BF16, Q8_0, Q4_0)",
                        pg_dtype_name(t));
    if (!kt) kt = pg_kernels();
    if ((t == PG_F32 ? kt->gemm_f32.nr : kt->gemm_bf16.nr) > PG_GEMM_MAX_NR)
        return pg_error(PAGODA_ERR_INTERNAL, "gemm: microkernel panel wider than %d",
                        PG_GEMM_MAX_NR);
    pg_packed_weight *pw = pg_calloc_aligned(1, sizeof *pw);
    if (!pw) return pg_error(PAGODA_ERR_NOMEM, "gemm: pack: out of memory");
    pw->kt = kt;
    pw->bf16 = t != PG_F32;
    pw->uk = pw->bf16 ? kt->gemm_bf16 : kt->gemm_f32;
    pw->swiglu = Wu != NULL;
    pw->N = N;
    pw->K = K;
    pw->kgroups = ceil_div(K, pw->uk.kg);
    int64_t np = ceil_div(N, pw->uk.nr);
    pw->npanels = pw->swiglu ? 2 * np : np;
    pw->elem = pw->bf16 ? 2 : 4;
    pw->panel_elems = (size_t)(pw->kgroups * pw->uk.kg * pw->uk.nr);
    pw->bytes = (size_t)pw->npanels * pw->panel_elems * pw->elem;
    pw->data = pg_alloc_huge(pw->bytes); /* zero-filled: padding stays 0 */
    if (!pw->data) {
        pg_free(pw);
        return pg_error(PAGODA_ERR_NOMEM, "gemm: pack: cannot allocate %zu bytes", pw->bytes);
    }
    const int nr = pw->uk.nr;
    for (int half = 0; half < (pw->swiglu ? 2 : 1); half++) {
        const void *src = half ? Wu : Wg;
        for (int64_t n = 0; n < N; n++) {
            int64_t p = n / nr;
            if (pw->swiglu) p = 2 * p + half;
            char *panel = (char *)pw->data + (size_t)p * pw->panel_elems * pw->elem;
            pack_row(pw, t, src, n, panel, (int)(n % nr));
        }
    }
    *out = pw;
    return PAGODA_OK;
}

pagoda_status pg_gemm_pack(pg_dtype src_dtype, const void *W, int64_t N, int64_t K,
                           const pg_kernel_table *kt, pg_packed_weight **out) {
    return pack_common(src_dtype, W, NULL, N, K, kt, out);
}

pagoda_status pg_gemm_pack_swiglu(pg_dtype src_dtype, const void *W_gate, const void *W_up,
                                  int64_t N, int64_t K, const pg_kernel_table *kt,
                                  pg_packed_weight **out) {
    if (!W_up) {
        if (out) *out = NULL;
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: pack_swiglu: NULL up weight");
    }
    return pack_common(src_dtype, W_gate, W_up, N, K, kt, out);
}

/* ---- call geometry */

typedef struct {
    int64_t M;
    int64_t mc;        /* rows per ic block (multiple of MR, <= MC_MAX) */
    int64_t nc_panels; /* panels per jc block (even for SwiGLU) */
    int64_t kc_groups; /* k-groups per pc block (all of them when M <= MR) */
    int64_t a_stride;  /* packed A: elements between row groups */
    size_t a_bytes;    /* packed A (BF16 path), 0 for F32 */
    size_t acc_bytes;  /* one thread's acc block */
} geometry;

static geometry plan(const pg_packed_weight *w, int64_t M) {
    geometry g;
    const pg_gemm_ukernel *uk = &w->uk;
    g.M = M;
    /* ic blocks of equal size (a multiple of MR): M = 512 as 510 + 2 rows
     * would stream all of W a second time for 2 rows. */
    int64_t mc_max = (MC_MAX / uk->mr) * uk->mr;
    int64_t nblocks = ceil_div(M, mc_max);
    g.mc = ceil_div(ceil_div(M, nblocks), uk->mr) * uk->mr;
    g.nc_panels = NC_ELEMS / uk->nr;
    if (g.nc_panels < 2) g.nc_panels = 2;
    if (w->swiglu && (g.nc_panels & 1)) g.nc_panels++;
    g.kc_groups = M <= uk->mr ? w->kgroups : (KC_ELEMS + uk->kg - 1) / uk->kg;
    if (w->bf16) {
        g.a_stride = w->kgroups * uk->kg * uk->ar; /* per row group */
        /* A row stride of a multiple of 4 KiB puts the MR rows of a tile
         * in one L1 set (and aliases loads): pad by one cache line. */
        if ((g.a_stride * 2) % 1024 == 0) g.a_stride += 32;
        g.a_bytes = align_up((size_t)(ceil_div(M, uk->ar) * g.a_stride) * 2);
    } else {
        g.a_stride = 0;
        g.a_bytes = 0;
    }
    g.acc_bytes = align_up((size_t)(g.mc * g.nc_panels * uk->nr) * sizeof(float));
    return g;
}

size_t pg_gemm_scratch_size(const pg_packed_weight *w, int64_t M, int nthreads) {
    if (!w || M < 1) return 0;
    if (w->q) return pg_qgemm_scratch_size(w->q, M, nthreads);
    if (nthreads < 1) nthreads = 1;
    geometry g = plan(w, M);
    return g.a_bytes + (size_t)nthreads * g.acc_bytes;
}

/* ---- one call */

typedef struct {
    const pg_packed_weight *w;
    geometry g;
    const float *A;
    int64_t lda;
    float *C;
    int64_t ldc;
    const float *bias;
    pg_gemm_epilogue ep;
    uint16_t *apack; /* BF16 path: A rounded and laid out for the microkernel */
    float *acc;      /* per-thread acc blocks, acc_bytes apart */
    int tn, tm;      /* thread grid: tn over panel units, tm over row tiles */
} call;

/* Input stage: rows [r0, r1) of A -> BF16 in the layout the microkernel
 * reads (ar 1: rows of kgroups*kg; ar 2: row pairs interleaved per group;
 * the k padding and a missing pair partner are zero). */
enum { CVT_CHUNK = 256 }; /* a multiple of every kg */

static void pack_a_rows(const call *cl, int64_t r0, int64_t r1) {
    const pg_packed_weight *w = cl->w;
    const int64_t kg = w->uk.kg, ar = w->uk.ar;
    const int64_t K = w->K, kp = w->kgroups * kg;
    for (int64_t r = r0; r < r1; r++) {
        uint16_t *grp = cl->apack + (r / ar) * cl->g.a_stride;
        const float *a = cl->A + r * cl->lda;
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
        uint16_t *grp = cl->apack + (r1 / 2) * cl->g.a_stride;
        for (int64_t k = 0; k < kp; k++)
            grp[(k / kg) * kg * 2 + kg + k % kg] = 0;
    }
}

static void input_stage(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const call *cl = ctx;
    int64_t ar = cl->w->uk.ar;
    int64_t r0 = (int64_t)begin * ar, r1 = (int64_t)end * ar;
    if (r1 > cl->g.M) r1 = cl->g.M;
    pack_a_rows(cl, r0, r1);
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

/* Epilogue of one (ic, jc) block: rows [m0, m1), panels [p0, p1). */
static void epilogue(const call *cl, const float *acc, int64_t ldacc, int64_t m0, int64_t m1,
                     int64_t p0, int64_t p1) {
    const pg_packed_weight *w = cl->w;
    const int64_t nr = w->uk.nr, N = w->N;
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
                w->kt->swiglu_f32(c, gr, ur, (size_t)cnt);
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

/* Thread `tid`'s rectangle: panels [p0, p1) and rows [m0, m1). */
static void share(const call *cl, int tid, int64_t *p0, int64_t *p1, int64_t *m0, int64_t *m1) {
    const pg_packed_weight *w = cl->w;
    int64_t unit = w->swiglu ? 2 : 1;
    int ti = tid % cl->tn, tj = tid / cl->tn;
    size_t b, e;
    pg_pool_partition((size_t)(w->npanels / unit), 1, cl->tn, ti, &b, &e);
    *p0 = (int64_t)b * unit;
    *p1 = (int64_t)e * unit;
    int64_t mr = w->uk.mr;
    pg_pool_partition((size_t)ceil_div(cl->g.M, mr), 1, cl->tm, tj, &b, &e);
    *m0 = (int64_t)b * mr;
    *m1 = (int64_t)e * mr < cl->g.M ? (int64_t)e * mr : cl->g.M;
    if (tj >= cl->tm) *m0 = *m1 = 0;
}

/* The W slice this thread reads after slice (jr, pc) of the block (jc, ic)
 * in compute()'s loop order, or NULL after its last one; *bytes its size. */
static const char *next_slice(const call *cl, int64_t jr, int64_t pc, int64_t jc, int64_t ic,
                              int64_t M1, int64_t P1, size_t *bytes) {
    const pg_packed_weight *w = cl->w;
    const geometry *g = &cl->g;
    if (!pg_gemm_next_slice_pos(&jr, &pc, jc, ic, M1, P1, g->nc_panels, g->kc_groups, g->mc,
                                w->kgroups)) {
        *bytes = 0;
        return NULL;
    }
    const int64_t ng = w->kgroups - pc < g->kc_groups ? w->kgroups - pc : g->kc_groups;
    *bytes = (size_t)(ng * w->uk.kg * w->uk.nr) * w->elem;
    return (const char *)w->data + (size_t)jr * w->panel_elems * w->elem +
           (size_t)(pc * w->uk.kg * w->uk.nr) * w->elem;
}

static void compute(void *ctx, int tid, int nthreads) {
    (void)nthreads;
    const call *cl = ctx;
    const pg_packed_weight *w = cl->w;
    const pg_gemm_ukernel *uk = &w->uk;
    const geometry *g = &cl->g;
    int64_t P0, P1, M0, M1;
    share(cl, tid, &P0, &P1, &M0, &M1);
    if (P0 >= P1 || M0 >= M1) return;
    float *acc = cl->acc + (size_t)tid * (g->acc_bytes / sizeof(float));
    const int64_t nr = uk->nr, mr = uk->mr, kg = uk->kg;
    const int64_t ldacc = g->nc_panels * nr;
    const size_t pbytes = w->panel_elems * w->elem;
    /* A plain store (no bias) accumulates whole panels in C itself: the
     * same sums, no acc block and no copy; a last partial panel (N not a
     * multiple of NR) still goes through acc. */
    const int64_t direct =
        cl->ep == PG_GEMM_STORE && !cl->bias && !w->swiglu ? w->N / nr : 0; /* panels */
    for (int64_t jc = P0; jc < P1; jc += g->nc_panels) {
        int64_t jc1 = jc + g->nc_panels < P1 ? jc + g->nc_panels : P1;
        int64_t pe = direct > jc ? (direct < jc1 ? direct : jc1) : jc; /* first panel via acc */
        for (int64_t ic = M0; ic < M1; ic += g->mc) {
            int64_t ic1 = ic + g->mc < M1 ? ic + g->mc : M1;
            for (int64_t pc = 0; pc < w->kgroups; pc += g->kc_groups) {
                int64_t ng = w->kgroups - pc < g->kc_groups ? w->kgroups - pc : g->kc_groups;
                for (int64_t jr = jc; jr < jc1; jr++) {
                    const char *wp = (const char *)w->data + (size_t)jr * pbytes +
                                     (size_t)(pc * kg * nr) * w->elem;
                    float *ct = acc + (jr - jc) * nr;
                    int64_t ldt = ldacc;
                    if (jr < pe) {
                        ct = cl->C + ic * cl->ldc + jr * nr;
                        ldt = cl->ldc;
                    }
                    /* Small M (2+ row tiles reuse this slice): the tiles
                     * prefetch the next slice, each a share in proportion
                     * to its rows (its time), so memory streams evenly
                     * instead of stalling the first tile of each slice.
                     * Only when a full tile's share fits PF_PER_GROUP
                     * lines per k-group (rows >= 6 for 6x64 BF16), and up
                     * to 64 rows (beyond, W is reused enough for the
                     * hardware prefetcher; the prefetches cost ~2%). One
                     * tile (decode) streams alone: measured no better. */
                    size_t nb = 0;
                    const char *nx = uk->run_pf && ic1 - ic > mr && ic1 - ic <= PF_MAX_ROWS
                                         ? next_slice(cl, jr, pc, jc, ic, M1, P1, &nb)
                                         : NULL;
                    const int64_t lines = (int64_t)(nb / 64);
                    if (lines * mr > PF_PER_GROUP * ng * (ic1 - ic)) nx = NULL;
                    for (int64_t ir = ic; ir < ic1; ir += mr) {
                        int rows = (int)(ic1 - ir < mr ? ic1 - ir : mr);
                        const void *ap;
                        int64_t as;
                        if (w->bf16) {
                            ap = cl->apack + (ir / uk->ar) * g->a_stride + pc * kg * uk->ar;
                            as = g->a_stride;
                        } else {
                            ap = cl->A + ir * cl->lda + pc;
                            as = cl->lda;
                        }
                        if (nx) { /* lines in proportion to the tile's rows */
                            const int64_t rb = ic1 - ic, l0 = (ir - ic) * lines / rb,
                                          l1 = (ir - ic + rows) * lines / rb;
                            uk->run_pf(ng, ap, as, wp, ct + (ir - ic) * ldt, ldt, rows, pc > 0,
                                       nx + 64 * l0, l1 - l0);
                        } else {
                            uk->run(ng, ap, as, wp, ct + (ir - ic) * ldt, ldt, rows, pc > 0);
                        }
                    }
                }
            }
            if (pe < jc1) epilogue(cl, acc + (pe - jc) * nr, ldacc, ic, ic1, pe, jc1);
        }
    }
    if (g->M <= mr) pg_next_weight_prefetch(&w->next, tid, cl->tn * cl->tm);
}

/* Units are virtual threads (share + acc block each). Normally pool thread
 * t gets unit t; when the pool runs the loop inline (a call from inside one
 * of its own regions) one thread walks every unit in turn. */
static void compute_range(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    for (size_t u = begin; u < end; u++)
        compute(ctx, (int)u, 0);
}

void pg_gemm_set_next(pg_packed_weight *w, const pg_packed_weight *next) {
    if (!w) return;
    pg_next_weight n = {0};
    if (next && next->q) {
        pg_qgemm_panels(next->q, &n);
    } else if (next) {
        n.data = next->data;
        n.panel_bytes = next->panel_elems * next->elem;
        n.npanels = next->npanels;
        n.unit = next->swiglu ? 2 : 1;
    }
    w->next = n;
    if (w->q) pg_qgemm_set_next(w->q, &n);
}

pagoda_status pg_gemm(const pg_packed_weight *w, const float *A, int64_t M, int64_t lda, float *C,
                      int64_t ldc, const float *bias, pg_gemm_epilogue ep, pg_pool *pool,
                      void *scratch) {
    if (!w || !A || !C || !scratch)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: NULL weight, A, C or scratch");
    if (w->q) return pg_qgemm(w->q, A, M, lda, C, ldc, bias, ep, pool, scratch);
    if (M < 1 || lda < w->K || ldc < w->N)
        return pg_error(
            PAGODA_ERR_INVALID_ARG,
            "gemm: M=%lld lda=%lld ldc=%lld (need M >= 1, lda >= K=%lld, ldc >= N=%lld)",
            (long long)M, (long long)lda, (long long)ldc, (long long)w->K, (long long)w->N);
    if ((ep == PG_GEMM_SWIGLU) != (w->swiglu != 0))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        w->swiglu ? "gemm: a SwiGLU-packed weight needs PG_GEMM_SWIGLU"
                                  : "gemm: PG_GEMM_SWIGLU needs a weight from pg_gemm_pack_swiglu");
    if (ep != PG_GEMM_STORE && ep != PG_GEMM_RESIDUAL && ep != PG_GEMM_SWIGLU)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: unknown epilogue %d", (int)ep);
    if ((uintptr_t)scratch % PG_ALIGN)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: scratch must be %d-byte aligned", PG_ALIGN);

    int nthreads = pool ? pg_pool_size(pool) : 1;
    call cl = {
        .w = w, .g = plan(w, M), .A = A, .lda = lda, .C = C, .ldc = ldc, .bias = bias, .ep = ep};
    cl.apack = scratch;
    void *acc_base = (char *)scratch + cl.g.a_bytes;
    cl.acc = acc_base;
    /* Thread grid: split panel units; when there are fewer units than
     * threads, split row tiles too. The split changes who computes an
     * element, never how. */
    int64_t units = w->npanels / (w->swiglu ? 2 : 1);
    cl.tn = units < nthreads ? (int)units : nthreads;
    cl.tm = nthreads / cl.tn;
    if (w->bf16) {
        size_t groups = (size_t)ceil_div(M, w->uk.ar);
        if (pool && M * w->K >= 16384)
            pg_pool_parallel_for(pool, groups, 1, input_stage, &cl);
        else
            input_stage(&cl, 0, groups, 0);
    }
    if (pool && nthreads > 1)
        pg_pool_parallel_for(pool, (size_t)nthreads, 1, compute_range, &cl);
    else
        compute(&cl, 0, 1);
    return PAGODA_OK;
}
