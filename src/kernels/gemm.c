/* The one prepacked GEMM driver (gemm.h, gemm_driver.h): the BLIS-style
 * loops around a weight format's microkernel, threading, the work split of
 * grouped calls, decode prefetching and the call checks. Formats (packing,
 * input stage, tile, epilogue) are rows: gemm_float.c (BF16, F32),
 * qgemm.c (W8A8, W4A8 and the GGUF Q8_0 / Q4_0 blocks that become them),
 * gemm_mxfp4.c (MXFP4: GGUF and Hugging Face gpt-oss blocks),
 * gemm_kquant.c (GGUF Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
 * Nothing here is ISA-specific.
 *
 * Loops of one thread over a rectangle of the output (docs/ARCHITECTURE.md):
 *   for jc: NC columns (a block of whole panels)        W block KC x NC in L2
 *     for ic: MC rows                                    acc block MC x NC
 *       for pc: KC (whole K when M <= MR: decode)        A block MC x KC in L2
 *         for jr: one panel of NR columns                W slice KC x NR in L1
 *           for ir: MR rows: the format's tile (acc tile += A tile . W slice)
 *       epilogue: acc block (+ bias, residual, SwiGLU) -> C */
#include "kernels/gemm.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "base/alloc.h"
#include "base/kquant.h"
#include "base/log.h"
#include "kernels/gemm_driver.h"
#include "kernels/qgemm.h"

pg_packed_weight *pg_gemm_weight_new(void) {
    return pg_calloc_aligned(1, sizeof(pg_packed_weight));
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
    return w->bytes;
}
const char *pg_gemm_variant(const pg_packed_weight *w) {
    return w->fmt->variant(w);
}
const char *pg_gemm_format_name(const pg_packed_weight *w) {
    return w->fmt->name;
}
int pg_gemm_quant_bits(const pg_packed_weight *w) {
    return w->bits;
}
const pg_packed_weight *pg_gemm_qpacked(const pg_packed_weight *w) {
    return w && w->bits ? w : NULL;
}

void pg_gemm_free(pg_packed_weight *w) {
    if (!w) return;
    if (w->borrowed) {
        if (w->release) w->release(w->release_ctx);
    } else {
        pg_free_huge(w->data, w->bytes);
    }
    pg_free(w);
}

/* ---- serialized weights (gemm.h "serialized packed weights") */

static const pg_gemm_format *const SERIAL_FORMATS[] = {
    &pg_gemm_format_bf16,  &pg_gemm_format_f32,  &pg_gemm_format_w8a8,   &pg_gemm_format_w4a8,
    &pg_gemm_format_mxfp4, &pg_gemm_format_q4_k, &pg_gemm_format_q5_k,   &pg_gemm_format_q6_k,
    &pg_gemm_format_q2_k,  &pg_gemm_format_q3_k, &pg_gemm_format_iq4_xs, &pg_gemm_format_iq4_nl,
};
enum { N_SERIAL_FORMATS = sizeof SERIAL_FORMATS / sizeof SERIAL_FORMATS[0] };

/* Word indices of the description. */
enum {
    D_FMT,
    D_SWIGLU,
    D_N,
    D_K,
    D_KGROUPS,
    D_NPANELS,
    D_MR,
    D_NR,
    D_AR,
    D_GBYTES,
    D_PANEL,
    D_BYTES,
    D_BF16,
    D_ELEM,
    D_BITS,
    D_ACT_GROUP,
    D_SCALE_F16,
    D_MXFP4,
    D_KQ,
    D_GROUP,
    D_GK,
    D_HBYTES,
    D_UK_KG,
    D_UK_FLAGS,
};

/* A K-quant description's super-block bytes and bits are its type's (the
 * microkernel reads that many per group whatever the description says). */
static int kq_group_ok(const int64_t *d) {
    const pg_dtype t = (pg_dtype)d[D_KQ];
    return pg_kq_in_gemm(t) && d[D_BITS] == pg_kq_bits(t) &&
           (uint64_t)d[D_GBYTES] ==
               pg_kq_group_bytes(pg_kq_bits(t), pg_kq_sub(t), pg_kq_has_min(t), pg_kq_fscale(t));
}

/* The table's microkernel for a format (float: *fu, quantized: *qu). */
static void serial_ukernel(const pg_kernel_table *kt, int fmt, int kq, const pg_gemm_ukernel **fu,
                           const pg_qgemm_ukernel **qu) {
    *fu = NULL;
    *qu = NULL;
    const pg_gemm_format *f = SERIAL_FORMATS[fmt];
    if (f == &pg_gemm_format_bf16)
        *fu = &kt->gemm_bf16;
    else if (f == &pg_gemm_format_f32)
        *fu = &kt->gemm_f32;
    else if (f == &pg_gemm_format_w8a8)
        *qu = &kt->qgemm_w8;
    else if (f == &pg_gemm_format_w4a8)
        *qu = &kt->qgemm_w4;
    else if (f == &pg_gemm_format_mxfp4)
        *qu = &kt->mxfp4;
    else if (pg_kq_format((pg_dtype)kq) == f) /* only the K-quant row of that type */
        *qu = pg_kq_ukernel(kt, (pg_dtype)kq);
}

/* vw, a_u8, w_u8 and run_hs presence of a quantized microkernel as one word. */
static int64_t q_flags(const pg_qgemm_ukernel *u) {
    return (int64_t)u->vw | (int64_t)u->a_u8 << 16 | (int64_t)u->w_u8 << 17 |
           (int64_t)(u->run_hs != NULL) << 18 | (int64_t)u->bits << 20;
}

void pg_gemm_describe(const pg_packed_weight *w, int64_t d[PG_GEMM_DESC_WORDS]) {
    memset(d, 0, PG_GEMM_DESC_WORDS * sizeof d[0]);
    d[D_FMT] = -1;
    for (int i = 0; i < N_SERIAL_FORMATS; i++)
        if (w->fmt == SERIAL_FORMATS[i]) d[D_FMT] = i;
    d[D_SWIGLU] = w->swiglu;
    d[D_N] = w->N;
    d[D_K] = w->K;
    d[D_KGROUPS] = w->kgroups;
    d[D_NPANELS] = w->npanels;
    d[D_MR] = w->mr;
    d[D_NR] = w->nr;
    d[D_AR] = w->ar;
    d[D_GBYTES] = (int64_t)w->gbytes;
    d[D_PANEL] = (int64_t)w->panel_bytes;
    d[D_BYTES] = (int64_t)w->bytes;
    d[D_BF16] = w->bf16;
    d[D_ELEM] = (int64_t)w->elem;
    d[D_BITS] = w->bits;
    d[D_ACT_GROUP] = w->act_group;
    d[D_SCALE_F16] = w->scale_f16;
    d[D_MXFP4] = w->mxfp4;
    d[D_KQ] = w->kq;
    d[D_GROUP] = w->group;
    d[D_GK] = w->gk;
    d[D_HBYTES] = (int64_t)w->hbytes;
    d[D_UK_KG] = w->bits ? w->quk.kg : w->fuk.kg;
    d[D_UK_FLAGS] = w->bits ? q_flags(&w->quk) : 0;
}

const void *pg_gemm_data(const pg_packed_weight *w) {
    return w->data;
}

pagoda_status pg_gemm_adopt(const int64_t d[PG_GEMM_DESC_WORDS], const void *data, size_t bytes,
                            const pg_kernel_table *kt, void (*release)(void *ctx), void *ctx,
                            pg_packed_weight **out) {
    *out = NULL;
    if (!kt) kt = pg_kernels();
    if (d[D_FMT] < 0 || d[D_FMT] >= N_SERIAL_FORMATS)
        return pg_error(PAGODA_ERR_FORMAT, "gemm: adopt: unknown format %lld", (long long)d[D_FMT]);
    for (int i = D_SWIGLU; i < PG_GEMM_DESC_WORDS; i++)
        if (d[i] < 0) return pg_error(PAGODA_ERR_FORMAT, "gemm: adopt: negative field %d", i);
    if (d[D_N] < 1 || d[D_K] < 1 || d[D_NR] < 1 || d[D_NR] > 1024 || d[D_KGROUPS] < 1 ||
        d[D_NPANELS] != (d[D_SWIGLU] ? 2 : 1) * pg_ceil_div64(d[D_N], d[D_NR]) ||
        d[D_PANEL] != d[D_KGROUPS] * d[D_GBYTES] || d[D_BYTES] != d[D_NPANELS] * d[D_PANEL] ||
        (uint64_t)d[D_BYTES] != (uint64_t)bytes || !data || ((uintptr_t)data & 63))
        return pg_error(PAGODA_ERR_FORMAT, "gemm: adopt: inconsistent packed-weight geometry");
    const pg_gemm_ukernel *fu;
    const pg_qgemm_ukernel *qu;
    serial_ukernel(kt, (int)d[D_FMT], (int)d[D_KQ], &fu, &qu);
    int same;
    if (fu)
        same = !d[D_BITS] && fu->run && fu->mr == d[D_MR] && fu->nr == d[D_NR] &&
               fu->ar == d[D_AR] && fu->kg == d[D_UK_KG] &&
               d[D_KGROUPS] == pg_ceil_div64(d[D_K], fu->kg);
    else
        same = qu && qu->run && d[D_BITS] && qu->mr == d[D_MR] && qu->nr == d[D_NR] &&
               qu->ar == d[D_AR] && qu->kg == d[D_UK_KG] && q_flags(qu) == d[D_UK_FLAGS] &&
               (!d[D_SCALE_F16] || qu->run_hs) && (!d[D_KQ] || kq_group_ok(d));
    if (!same)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "gemm: adopt: the %s weight was packed for another microkernel than "
                        "table %s's",
                        SERIAL_FORMATS[d[D_FMT]]->name, kt->isa);
    pg_packed_weight *w = pg_gemm_weight_new();
    if (!w) return pg_error(PAGODA_ERR_NOMEM, "gemm: adopt: out of memory");
    w->fmt = SERIAL_FORMATS[d[D_FMT]];
    w->swiglu = (int)d[D_SWIGLU];
    w->N = d[D_N];
    w->K = d[D_K];
    w->kgroups = d[D_KGROUPS];
    w->npanels = d[D_NPANELS];
    w->mr = (int)d[D_MR];
    w->nr = (int)d[D_NR];
    w->ar = (int)d[D_AR];
    w->gbytes = (size_t)d[D_GBYTES];
    w->panel_bytes = (size_t)d[D_PANEL];
    w->bytes = (size_t)d[D_BYTES];
    w->data = (void *)(uintptr_t)data; /* read only: nothing writes packed panels */
    w->kt = kt;
    if (fu) w->fuk = *fu;
    if (qu) w->quk = *qu;
    w->bf16 = (int)d[D_BF16];
    w->elem = (size_t)d[D_ELEM];
    w->bits = (int)d[D_BITS];
    w->act_group = (int)d[D_ACT_GROUP];
    w->scale_f16 = (int)d[D_SCALE_F16];
    w->mxfp4 = (int)d[D_MXFP4];
    w->kq = (int)d[D_KQ];
    w->group = d[D_GROUP];
    w->gk = d[D_GK];
    w->hbytes = (size_t)d[D_HBYTES];
    w->borrowed = 1;
    w->release = release;
    w->release_ctx = ctx;
    *out = w;
    return PAGODA_OK;
}

/* ---- packing entry points (the formats pack) */

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
    return pg_qgemm_pack_pool(w, w_up, q_uk(kt, w->bits), pool, out);
}

/* GGUF Q8_0 / Q4_0 rows (gate, and up for a SwiGLU pair) -> W8A8 / W4A8;
 * IQ4_NL rows with K not a multiple of 256 -> W8A8 with groups of 32 (its
 * codebook values, qgemm.h pg_qgemm_from_gguf). IQ4_XS and the other
 * IQ4_NL rows are K-quant rows (gemm_kquant.c). */
static pagoda_status pack_gguf(pg_dtype t, const void *Wg, const void *Wu, int64_t N, int64_t K,
                               const pg_kernel_table *kt, pg_packed_weight **out) {
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
        w[h] = (pg_qweight){t == PG_Q4_0 ? 4 : 8, 32, N, K, qh, sh, 1};
    }
    if (!st) st = pg_gemm_pack_qweight_pool(&w[0], Wu ? &w[1] : NULL, kt, pg_pool_default(), out);
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

static pagoda_status pack_common(pg_dtype t, const void *Wg, const void *Wu, int64_t N, int64_t K,
                                 const pg_kernel_table *kt, pg_packed_weight **out) {
    if (!out) return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: pack: NULL out");
    *out = NULL;
    if (!Wg) return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: pack: NULL weight");
    if (N < 1 || K < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: pack: N=%lld K=%lld must be >= 1",
                        (long long)N, (long long)K);
    if (t == PG_Q8_0 || t == PG_Q4_0 || (t == PG_IQ4_NL && K % 256))
        return pack_gguf(t, Wg, Wu, N, K, kt, out);
    if (t == PG_MXFP4) return pg_mxfp4_pack_gguf(Wg, Wu, N, K, kt, out);
    if (pg_kq_in_gemm(t)) return pg_kq_pack_gguf(t, Wg, Wu, N, K, kt, out);
    if (t != PG_F32 && t != PG_F16 && t != PG_BF16)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "gemm: pack: weight dtype %s not supported (F32, F16, BF16, Q8_0, Q4_0, "
                        "MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)",
                        pg_dtype_name(t));
    return pg_gemm_pack_float(t, Wg, Wu, N, K, kt, out);
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

/* ---- the loops */

static size_t per_thread_bytes(const pg_gemm_geometry *g) {
    return g->acc_bytes + g->row_bytes;
}
static size_t shared_bytes(const pg_gemm_geometry *g) {
    return g->a_bytes + g->s_bytes + g->c_bytes;
}

size_t pg_gemm_scratch_size(const pg_packed_weight *w, int64_t M, int nthreads) {
    if (!w || M < 1) return 0;
    if (nthreads < 1) nthreads = 1;
    pg_gemm_geometry g;
    w->fmt->plan(w, M, 0, &g);
    return shared_bytes(&g) + (size_t)nthreads * per_thread_bytes(&g);
}

/* The W slice a thread reads after slice (jr, pc) of block (jc, ic) in
 * compute_rect's loop order (rows up to M1, panels up to P1), and its
 * bytes; NULL after the last one. */
static const char *next_slice(const pg_gemm_call *cl, int64_t jr, int64_t pc, int64_t jc,
                              int64_t ic, int64_t M1, int64_t P1, size_t *bytes) {
    const pg_packed_weight *w = cl->w;
    const pg_gemm_geometry *g = &cl->g;
    if (!pg_gemm_next_slice_pos(&jr, &pc, jc, ic, M1, P1, g->nc_panels, g->kc_groups, g->mc,
                                w->kgroups)) {
        *bytes = 0;
        return NULL;
    }
    const int64_t ng = w->kgroups - pc < g->kc_groups ? w->kgroups - pc : g->kc_groups;
    *bytes = (size_t)ng * w->gbytes;
    return (const char *)w->data + (size_t)jr * w->panel_bytes + (size_t)pc * w->gbytes;
}

/* Rows of the next tile: the block's remaining rows spread evenly over
 * the fewest tiles (32 rows with mr 6: 6 6 5 5 5 5, not 6 6 6 6 6 2), in
 * multiples of ar. A row's result does not depend on its tile. */
static int tile_rows(int64_t left, int64_t mr, int64_t ar) {
    const int64_t tiles = pg_ceil_div64(left, mr);
    int64_t r = pg_ceil_div64(pg_ceil_div64(left, tiles), ar) * ar;
    r = r < mr ? r : mr;
    return (int)(r < left ? r : left);
}

/* Panels [P0, P1) x rows [M0, M1) of a call, with acc block acc. */
static void compute_rect(const pg_gemm_call *cl, float *acc, int64_t P0, int64_t P1, int64_t M0,
                         int64_t M1) {
    const pg_packed_weight *w = cl->w;
    const pg_gemm_format *fmt = w->fmt;
    const pg_gemm_geometry *g = &cl->g;
    const int64_t nr = w->nr, mr = w->mr;
    const int64_t ldacc = g->nc_panels * nr;
    /* A plain store (no bias) accumulates whole panels in C itself: the
     * same sums, no acc block and no copy; a last partial panel (N not a
     * multiple of NR) still goes through acc. */
    const int64_t direct = fmt->direct_store && cl->ep == PG_GEMM_STORE && !cl->bias && !w->swiglu
                               ? w->N / nr
                               : 0; /* panels */
    for (int64_t jc = P0; jc < P1; jc += g->nc_panels) {
        int64_t jc1 = jc + g->nc_panels < P1 ? jc + g->nc_panels : P1;
        int64_t pe = direct > jc ? (direct < jc1 ? direct : jc1) : jc; /* first panel via acc */
        for (int64_t ic = M0; ic < M1; ic += g->mc) {
            int64_t ic1 = ic + g->mc < M1 ? ic + g->mc : M1;
            const int64_t rb = ic1 - ic;
            for (int64_t pc = 0; pc < w->kgroups; pc += g->kc_groups) {
                int64_t ng = w->kgroups - pc < g->kc_groups ? w->kgroups - pc : g->kc_groups;
                const int64_t limit = fmt->pf_limit(w, ng);
                for (int64_t jr = jc; jr < jc1; jr++) {
                    const char *wp = (const char *)w->data + (size_t)jr * w->panel_bytes +
                                     (size_t)pc * w->gbytes;
                    float *ct = acc + (jr - jc) * nr;
                    int64_t ldt = ldacc;
                    if (jr < pe) {
                        ct = cl->C + ic * cl->ldc + jr * nr;
                        ldt = cl->ldc;
                    }
                    /* Small M (2+ row tiles reuse this slice): the tiles
                     * prefetch the next slice, each a share in proportion
                     * to its rows, when a tile's share is small enough for
                     * the format (pf_limit). */
                    size_t nb = 0;
                    const char *nx = limit >= 0 && rb > mr && rb <= PG_GEMM_PF_MAX_ROWS
                                         ? next_slice(cl, jr, pc, jc, ic, M1, P1, &nb)
                                         : NULL;
                    const int64_t lines = (int64_t)(nb / 64);
                    if (lines * mr > limit * rb) nx = NULL;
                    for (int64_t ir = ic; ir < ic1;) {
                        const int rows = fmt->balanced_tiles ? tile_rows(ic1 - ir, mr, w->ar)
                                                             : (int)(ic1 - ir < mr ? ic1 - ir : mr);
                        const char *pf = NULL;
                        int64_t pl = 0;
                        if (nx) { /* lines in proportion to the tile's rows */
                            const int64_t l0 = (ir - ic) * lines / rb,
                                          l1 = (ir - ic + rows) * lines / rb;
                            pf = nx + 64 * l0;
                            pl = l1 - l0;
                        }
                        fmt->tile(cl, wp, pc, ng, ir, rows, ct + (ir - ic) * ldt, ldt, pc > 0, pf,
                                  pl);
                        ir += rows;
                    }
                }
            }
            if (pe < jc1) fmt->epilogue(cl, acc + (pe - jc) * nr, ldacc, ic, ic1, pe, jc1);
        }
    }
}

static float *thread_acc(const pg_gemm_call *cl, int tid) {
    return (float *)(cl->acc + (size_t)tid * cl->g.acc_bytes);
}

/* ---- one call: a static grid of tn x tm virtual threads */

/* Thread `tid`'s rectangle: panels [p0, p1) and rows [m0, m1). */
static void share(const pg_gemm_call *cl, int tid, int64_t *p0, int64_t *p1, int64_t *m0,
                  int64_t *m1) {
    const pg_packed_weight *w = cl->w;
    int64_t unit = w->swiglu ? 2 : 1;
    int ti = tid % cl->tn, tj = tid / cl->tn;
    size_t b, e;
    pg_pool_partition((size_t)(w->npanels / unit), 1, cl->tn, ti, &b, &e);
    *p0 = (int64_t)b * unit;
    *p1 = (int64_t)e * unit;
    int64_t mr = w->mr;
    pg_pool_partition((size_t)pg_ceil_div64(cl->g.M, mr), 1, cl->tm, tj, &b, &e);
    *m0 = (int64_t)b * mr;
    *m1 = (int64_t)e * mr < cl->g.M ? (int64_t)e * mr : cl->g.M;
    if (tj >= cl->tm) *m0 = *m1 = 0;
}

static void compute(const pg_gemm_call *cl, int tid) {
    int64_t P0, P1, M0, M1;
    share(cl, tid, &P0, &P1, &M0, &M1);
    if (P0 >= P1 || M0 >= M1) return;
    compute_rect(cl, thread_acc(cl, tid), P0, P1, M0, M1);
    if (cl->g.M <= cl->w->mr) pg_next_weight_prefetch(&cl->w->next, tid, cl->tn * cl->tm);
}

/* Units are virtual threads (share + acc block each). Normally pool thread
 * t gets unit t; when the pool runs the loop inline (a call from inside one
 * of its own regions) one thread walks every unit in turn. */
static void compute_range(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    for (size_t u = begin; u < end; u++)
        compute(ctx, (int)u);
}

/* ---- decode calls (M <= the tile rows): static shares, tails stolen
 *
 * Each thread starts on its static share (pg_pool_partition of the panel
 * units, as compute() splits them, so pg_next_weight's prefetch still
 * guesses right) and claims it front to back, a chunk of units at a time;
 * a thread whose share is done takes chunks from the back of the others'
 * shares. A decode call streams its weight at the memory's rate, so a
 * thread slowed by an interrupt, another process or a slower share of the
 * bandwidth no longer makes the other one wait at the join for the rest
 * of its share. Every panel is still computed whole by one thread, so the
 * results are those of the static split bit for bit. */
enum { STEAL_MAX_THREADS = 64, STEAL_CHUNK_BYTES = 256 << 10 };

typedef struct steal_call {
    const pg_gemm_call *cl;
    _Atomic uint64_t *range; /* per thread: next unit (low 32 bits), end (high 32 bits) */
    int64_t chunk, unit;     /* units per claim; panels per unit */
    int n;
} steal_call;

/* Claim up to chunk units of r from its front (the owner) or its back (a
 * thief) into [*b, *e); false once r is empty. */
static bool claim(_Atomic uint64_t *r, int64_t chunk, bool back, int64_t *b, int64_t *e) {
    uint64_t v = atomic_load_explicit(r, memory_order_relaxed);
    for (;;) {
        const uint64_t f = v & 0xFFFFFFFFu, l = v >> 32;
        if (f >= l) return false;
        const uint64_t c = l - f < (uint64_t)chunk ? l - f : (uint64_t)chunk;
        const uint64_t nv = back ? f | (l - c) << 32 : (f + c) | l << 32;
        if (atomic_compare_exchange_weak_explicit(r, &v, nv, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *b = (int64_t)(back ? l - c : f);
            *e = (int64_t)(back ? l : f + c);
            return true;
        }
    }
}

/* Units are threads, as in compute_range (inline: one thread walks them). */
static void steal_range(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const steal_call *s = ctx;
    const pg_gemm_call *cl = s->cl;
    for (size_t u = begin; u < end; u++) {
        float *acc = thread_acc(cl, (int)u);
        int64_t b, e;
        for (int k = 0; k < s->n; k++) {
            _Atomic uint64_t *r = &s->range[((int)u + k) % s->n];
            while (claim(r, s->chunk, k > 0, &b, &e))
                compute_rect(cl, acc, b * s->unit, e * s->unit, 0, cl->g.M);
        }
        pg_next_weight_prefetch(&cl->w->next, (int)u, s->n);
    }
}

static void compute_stealing(const pg_gemm_call *cl, pg_pool *pool, int nthreads) {
    const pg_packed_weight *w = cl->w;
    _Atomic uint64_t range[STEAL_MAX_THREADS];
    const int64_t unit = w->swiglu ? 2 : 1, units = w->npanels / unit;
    for (int t = 0; t < nthreads; t++) {
        size_t b, e;
        pg_pool_partition((size_t)units, 1, nthreads, t, &b, &e);
        atomic_init(&range[t], (uint64_t)b | (uint64_t)e << 32);
    }
    int64_t chunk = (int64_t)(STEAL_CHUNK_BYTES / ((size_t)unit * w->panel_bytes));
    steal_call s = {cl, range, chunk > 1 ? chunk : 1, unit, nthreads};
    pg_pool_parallel_for(pool, (size_t)nthreads, 1, steal_range, &s);
}

static void input_range(void *ctx, size_t begin, size_t end, int tid) {
    const pg_gemm_call *cl = ctx;
    int64_t ar = cl->w->ar;
    int64_t r0 = (int64_t)begin * ar, r1 = (int64_t)end * ar;
    if (r1 > cl->g.M) r1 = cl->g.M;
    cl->w->fmt->input(cl, r0, r1, tid);
}

void pg_gemm_set_next(pg_packed_weight *w, const pg_packed_weight *next) {
    if (!w) return;
    pg_next_weight n = {0};
    if (next) {
        n.data = next->data;
        n.panel_bytes = next->panel_bytes;
        n.npanels = next->npanels;
        n.unit = next->swiglu ? 2 : 1;
    }
    w->next = n;
}

static pagoda_status check_call(const pg_packed_weight *w, const float *A, int64_t M, int64_t lda,
                                const float *C, int64_t ldc, pg_gemm_epilogue ep) {
    if (!w || !A || !C)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: NULL weight, A, C or scratch");
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
    return PAGODA_OK;
}

/* Point a call's shared scratch regions into p (in order: packed A,
 * activation scales, corrections). */
static void lay_out(pg_gemm_call *cl, char *p) {
    cl->apack = p;
    p += cl->g.a_bytes;
    cl->ascale = (float *)p;
    p += cl->g.s_bytes;
    cl->acorr = cl->g.c_bytes ? (int32_t *)p : NULL;
}

pagoda_status pg_gemm_run(const pg_packed_weight *w, const float *A, int64_t M, int64_t lda,
                          const float *norm_w, float eps, float *C, int64_t ldc, const float *bias,
                          pg_gemm_epilogue ep, pg_pool *pool, void *scratch) {
    pagoda_status st = check_call(w, A, M, lda, C, ldc, ep);
    if (st) return st;
    if (!scratch) return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: NULL weight, A, C or scratch");
    if ((uintptr_t)scratch % PG_ALIGN)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: scratch must be %d-byte aligned", PG_ALIGN);
    if (norm_w && !w->fmt->fused_rmsnorm)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: %s weights have no fused RMSNorm",
                        w->fmt->name);
    int nthreads = pool ? pg_pool_size(pool) : 1;
    pg_gemm_call cl = {.w = w,
                       .A = A,
                       .lda = lda,
                       .norm_w = norm_w,
                       .eps = eps,
                       .C = C,
                       .ldc = ldc,
                       .bias = bias,
                       .ep = ep};
    w->fmt->plan(w, M, 0, &cl.g);
    lay_out(&cl, scratch);
    cl.acc = (char *)scratch + shared_bytes(&cl.g);
    cl.rowbuf = cl.acc + (size_t)nthreads * cl.g.acc_bytes;
    /* Thread grid: split panel units; when there are fewer units than
     * threads, split row tiles too. The split changes who computes an
     * element, never how. */
    int64_t units = w->npanels / (w->swiglu ? 2 : 1);
    cl.tn = units < nthreads ? (int)units : nthreads;
    cl.tm = nthreads / cl.tn;
    /* a call below the pool's serial threshold walks the same nthreads
     * shares on the caller (pool.h pg_pool_serial_macs: a fork-join costs
     * more than such a call under load; the results are the same bits) */
    const bool fork =
        pool && nthreads > 1 && M * w->N * (w->swiglu ? 2 : 1) * w->K >= pg_pool_serial_macs();
    if (w->fmt->has_input(&cl)) {
        size_t groups = (size_t)pg_ceil_div64(M, w->ar);
        if (fork && M * w->K >= 16384)
            pg_pool_parallel_for(pool, groups, 1, input_range, &cl);
        else
            input_range(&cl, 0, groups, 0);
    }
    if (fork && nthreads <= STEAL_MAX_THREADS && M <= w->mr && units >= nthreads &&
        units < ((int64_t)1 << 32))
        compute_stealing(&cl, pool, nthreads);
    else if (fork)
        pg_pool_parallel_for(pool, (size_t)nthreads, 1, compute_range, &cl);
    else
        compute_range(&cl, 0, (size_t)nthreads, 0);
    return PAGODA_OK;
}

pagoda_status pg_gemm(const pg_packed_weight *w, const float *A, int64_t M, int64_t lda, float *C,
                      int64_t ldc, const float *bias, pg_gemm_epilogue ep, pg_pool *pool,
                      void *scratch) {
    return pg_gemm_run(w, A, M, lda, NULL, 0.0f, C, ldc, bias, ep, pool, scratch);
}

/* ---- grouped calls: many problems, one work split */

/* Bookkeeping at the start of a grouped call's scratch: the calls, the cost
 * of one panel unit of each, the first input row group of each. */
static size_t book_bytes(int n) {
    return pg_align_up((size_t)n * (sizeof(pg_gemm_call) + sizeof(double)) +
                       (size_t)(n + 1) * sizeof(size_t));
}

size_t pg_gemm_grouped_scratch_size(const pg_packed_weight *w, int64_t total_rows, int max_problems,
                                    int nthreads) {
    if (!w || total_rows < 1 || max_problems < 1) return 0;
    if (nthreads < 1) nthreads = 1;
    /* the problems' rows sum to at most total_rows, so their shared
     * regions sum to at most those of total_rows plus one row group and
     * the alignment of each; per thread the largest acc block */
    pg_gemm_geometry g, g1;
    w->fmt->plan(w, total_rows, 1, &g);
    w->fmt->plan(w, w->ar, 1, &g1);
    return book_bytes(max_problems) + shared_bytes(&g) +
           (size_t)max_problems * (shared_bytes(&g1) + 4 * PG_ALIGN) +
           (size_t)nthreads * per_thread_bytes(&g);
}

typedef struct {
    pg_gemm_call *calls;
    int n;
    const double *cost; /* per problem: cost of one panel unit */
    double total;       /* all units of all problems */
    const size_t *row0; /* input stage: first row group of each problem (prefix sums) */
    int nthreads;
} grouped;

static void grouped_input(void *ctx, size_t begin, size_t end, int tid) {
    const grouped *gr = ctx;
    int i = 0;
    for (size_t u = begin; u < end;) {
        while (gr->row0[i + 1] <= u)
            i++;
        size_t e = end < gr->row0[i + 1] ? end : gr->row0[i + 1];
        pg_gemm_call *cl = &gr->calls[i];
        if (cl->w->fmt->has_input(cl)) input_range(cl, u - gr->row0[i], e - gr->row0[i], tid);
        u = e;
    }
}

/* Thread tid's work: the panel units whose cost midpoints fall in its
 * equal share [tid, tid + 1) * total / nthreads of the cumulative cost, in
 * (problem, unit) order: a run of whole problems and at most two partial
 * ones. Every thread computes the same sums in the same order, so each
 * unit belongs to exactly one thread; who computes an element never
 * changes how. */
static void grouped_compute(void *ctx, int tid, int nthreads) {
    const grouped *gr = ctx;
    (void)nthreads;
    const double lo = gr->total * tid / gr->nthreads, hi = gr->total * (tid + 1) / gr->nthreads;
    double at = 0.0;
    for (int i = 0; i < gr->n && at < hi; i++) {
        const pg_gemm_call *cl = &gr->calls[i];
        const int64_t unit = cl->w->swiglu ? 2 : 1, units = cl->w->npanels / unit;
        const double c = gr->cost[i], next = at + c * (double)units;
        if (next > lo) {
            /* [u0, u1): the units with lo <= at + (u + 0.5) c < hi */
            int64_t u0 = 0, u1;
            while (u0 < units && at + ((double)u0 + 0.5) * c < lo)
                u0++;
            u1 = u0;
            while (u1 < units && at + ((double)u1 + 0.5) * c < hi)
                u1++;
            if (u0 < u1) compute_rect(cl, thread_acc(cl, tid), u0 * unit, u1 * unit, 0, cl->g.M);
        }
        at = next;
    }
}

static void grouped_compute_range(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    for (size_t u = begin; u < end; u++)
        grouped_compute(ctx, (int)u, 0);
}

pagoda_status pg_gemm_grouped(const pg_gemm_problem *p, int n, pg_pool *pool, void *scratch) {
    if (n < 0 || (n > 0 && !p))
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: grouped: %d problems", n);
    if (!scratch || (uintptr_t)scratch % PG_ALIGN)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gemm: grouped: scratch NULL or not %d-aligned",
                        PG_ALIGN);
    pg_gemm_call *cl = scratch;
    double *cost = (double *)(cl + n);
    size_t *row0 = (size_t *)(cost + n);
    const int nthreads = pool ? pg_pool_size(pool) : 1;
    size_t acc_bytes = 0, row_bytes = 0, shared = 0;
    int m = 0; /* problems with rows */
    for (int i = 0; i < n; i++) {
        if (p[i].M == 0) continue;
        pagoda_status st = check_call(p[i].w, p[i].A, p[i].M, p[i].lda, p[i].C, p[i].ldc, p[i].ep);
        if (st) return st;
        cl[m] = (pg_gemm_call){.w = p[i].w,
                               .A = p[i].A,
                               .lda = p[i].lda,
                               .a_rows = p[i].a_rows,
                               .C = p[i].C,
                               .ldc = p[i].ldc,
                               .bias = p[i].bias,
                               .ep = p[i].ep,
                               .glu_limit = p[i].glu_limit};
        p[i].w->fmt->plan(p[i].w, p[i].M, p[i].a_rows != NULL, &cl[m].g);
        if (cl[m].g.acc_bytes > acc_bytes) acc_bytes = cl[m].g.acc_bytes;
        if (cl[m].g.row_bytes > row_bytes) row_bytes = cl[m].g.row_bytes;
        shared += pg_align_up(shared_bytes(&cl[m].g));
        m++;
    }
    if (m == 0) return PAGODA_OK;
    /* shared regions one after another, then the per-thread blocks */
    char *at = (char *)scratch + book_bytes(n);
    char *acc = at + shared, *rowbuf = acc + (size_t)nthreads * acc_bytes;
    double total = 0.0;
    int64_t in_work = 0;
    row0[0] = 0;
    for (int i = 0; i < m; i++) {
        pg_gemm_call *c = &cl[i];
        const pg_packed_weight *w = c->w;
        lay_out(c, at);
        at += pg_align_up(shared_bytes(&c->g));
        c->g.acc_bytes = acc_bytes;
        c->acc = acc;
        c->rowbuf = rowbuf;
        c->g.row_bytes = row_bytes;
        /* a panel unit streams its bytes once and runs ceil(M / mr) tiles
         * over them: cost ~ bytes x (1 + tiles) */
        const int64_t unit = w->swiglu ? 2 : 1;
        cost[i] =
            (double)w->panel_bytes * (double)unit * (1.0 + (double)pg_ceil_div64(c->g.M, w->mr));
        total += cost[i] * (double)(w->npanels / unit);
        row0[i + 1] = row0[i] + (size_t)pg_ceil_div64(c->g.M, w->ar);
        in_work += c->g.M * w->K;
    }
    grouped gr = {cl, m, cost, total, row0, nthreads};
    if (pool && nthreads > 1 && in_work >= 16384)
        pg_pool_parallel_for(pool, row0[m], 1, grouped_input, &gr);
    else
        grouped_input(&gr, 0, row0[m], 0);
    if (pool && nthreads > 1)
        pg_pool_parallel_for(pool, (size_t)nthreads, 1, grouped_compute_range, &gr);
    else
        grouped_compute(&gr, 0, 1);
    return PAGODA_OK;
}
