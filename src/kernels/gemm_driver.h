/* The one GEMM driver (gemm.c) and the weight formats that plug into it:
 * internal to src/kernels. A weight format (BF16, F32, W8A8, W4A8, the GGUF
 * blocks that become them, MXFP4) is one pg_gemm_format row: how it
 * plans a call's scratch, its input stage (activations -> the microkernel's
 * A layout), one microkernel tile, and its epilogue. The BLIS loops,
 * threading, the work split of grouped calls (mixture-of-experts) and the
 * prefetching are the driver's, written once (Goto & van de Geijn 2008;
 * BLIS's one macrokernel over many microkernels: Van Zee & van de Geijn
 * 2015). docs/ARCHITECTURE.md "GEMM" has the layouts. */
#ifndef PAGODA_KERNELS_GEMM_DRIVER_H
#define PAGODA_KERNELS_GEMM_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "kernels/blocking.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/ref/ops_ref.h"

typedef struct pg_gemm_format pg_gemm_format;
typedef struct pg_gemm_call pg_gemm_call;

/* A packed weight of any format: npanels panels of nr output columns (a
 * SwiGLU pair alternates gate, up panels), each kgroups k-groups of gbytes
 * (the format's header and weights of one group), panel after panel. */
struct pg_packed_weight {
    const pg_gemm_format *fmt;
    int swiglu;
    int64_t N, K;       /* logical N (gate rows for SwiGLU), K */
    int64_t kgroups;    /* k-groups of the whole K */
    int64_t npanels;    /* panels (SwiGLU: even) */
    int mr, nr, ar;     /* the microkernel's tile rows, panel width, A rows per group */
    size_t gbytes;      /* one k-group of one panel */
    size_t panel_bytes; /* kgroups * gbytes */
    void *data;         /* huge-page buffer, zero-filled padding */
    size_t bytes;
    pg_next_weight next; /* decode prefetch hint (pg_gemm_set_next) */
    /* float formats (gemm_float.c) */
    const pg_kernel_table *kt;
    pg_gemm_ukernel fuk;
    int bf16;    /* 1: BF16 panels, 0: F32 panels */
    size_t elem; /* bytes per packed element */
    /* quantized formats (qgemm.c) */
    pg_qgemm_ukernel quk;
    int bits, act_group, scale_f16;
    int mxfp4; /* MXFP4 (gemm_mxfp4.c): E8M0 header bytes, E2M1 codes; bits 4, act_group 1 */
    int kq;    /* K-quant (gemm_kquant.c): its pg_dtype (Q2_K .. Q6_K), else 0 */
    int64_t group, gk; /* scale group (0: per channel); k per packed group */
    size_t hbytes;     /* group header: [comp,] scales */
    /* data borrowed from a mapping (pg_gemm_adopt): pg_gemm_free calls
     * release(release_ctx) instead of freeing it */
    int borrowed;
    void (*release)(void *ctx);
    void *release_ctx;
};

/* One call's blocking and scratch: the driver's loop sizes, and the
 * regions the format's input stage fills (shared by all threads) and the
 * per-thread ones (acc block, one f32 row). */
typedef struct pg_gemm_geometry {
    int64_t M;
    int64_t mc;                       /* rows per ic block */
    int64_t nc_panels;                /* panels per jc block (even for SwiGLU) */
    int64_t kc_groups;                /* k-groups per pc block */
    int64_t a_stride;                 /* packed A: elements (bytes for int8) between row groups */
    size_t a_bytes, s_bytes, c_bytes; /* packed A, activation scales, corrections */
    size_t acc_bytes, row_bytes;      /* per thread */
} pg_gemm_geometry;

struct pg_gemm_call {
    const pg_packed_weight *w;
    pg_gemm_geometry g;
    const float *A;
    int64_t lda;
    const int32_t *a_rows; /* row r of the problem is A row a_rows[r] (NULL: r) */
    const float *norm_w;   /* RMSNorm fused into the input stage, else NULL */
    float eps;
    float *C;
    int64_t ldc;
    const float *bias;
    pg_gemm_epilogue ep;
    float glu_limit; /* SwiGLU: > 0 the clamped GPT-OSS form (pg_gemm_glu) */
    void *apack;     /* input stage output */
    float *ascale;   /* quantized: activation scales */
    int32_t *acorr;  /* quantized w_u8 kernels: activation-sum corrections */
    char *acc;       /* per-thread acc blocks, acc_bytes apart */
    char *rowbuf;    /* per-thread row buffers, row_bytes apart */
    int tn, tm;      /* dense call: thread grid over panel units x row tiles */
};

/* Row r of a call's A. */
static inline const float *pg_gemm_a_row(const pg_gemm_call *cl, int64_t r) {
    return cl->A + (cl->a_rows ? cl->a_rows[r] : r) * cl->lda;
}

/* The SwiGLU epilogue's elementwise step for a call: the table's
 * swiglu_f32, or GPT-OSS's clamped form (pg_ref_swiglu_oai, alpha 1.702)
 * when the call has a glu_limit. */
static inline void pg_gemm_glu(const pg_gemm_call *cl, const pg_kernel_table *kt, float *c,
                               const float *g, const float *u, size_t n) {
    if (cl->glu_limit > 0.0f)
        pg_ref_swiglu_oai(c, g, u, n, cl->glu_limit, 1.702f);
    else
        kt->swiglu_f32(c, g, u, n);
}

struct pg_gemm_format {
    const char *name;
    /* Blocking and scratch for M rows (gathered: rows come through a_rows). */
    void (*plan)(const pg_packed_weight *w, int64_t M, int gathered, pg_gemm_geometry *g);
    /* Input stage of rows [r0, r1) (r0 a multiple of ar), on thread tid
     * (its row buffer), or NULL when the microkernel reads A itself. */
    void (*input)(const pg_gemm_call *cl, int64_t r0, int64_t r1, int tid);
    int (*has_input)(const pg_gemm_call *cl);
    /* Most next-slice prefetch lines per block row (< 0: none) for a slice
     * of ng groups; the driver prefetches when a block of 2+ tiles (up to
     * PG_GEMM_PF_MAX_ROWS rows) reads few enough. */
    int64_t (*pf_limit)(const pg_packed_weight *w, int64_t ng);
    /* acc tile (rows x nr at c, ldc) (+)= A rows [ir, ir + rows) . panel
     * slice wp (ng groups from group pc); pf/pf_lines: lines of the next
     * slice to prefetch meanwhile (NULL: none). */
    void (*tile)(const pg_gemm_call *cl, const char *wp, int64_t pc, int64_t ng, int64_t ir,
                 int rows, float *c, int64_t ldc, int accumulate, const char *pf, int64_t pf_lines);
    /* acc block rows [m0, m1) x panels [p0, p1) (+ bias, residual, SwiGLU) -> C. */
    void (*epilogue)(const pg_gemm_call *cl, float *acc, int64_t ldacc, int64_t m0, int64_t m1,
                     int64_t p0, int64_t p1);
    int direct_store;   /* plain stores without bias accumulate whole panels in C */
    int balanced_tiles; /* a block's rows spread evenly over its tiles */
    int fused_rmsnorm;  /* the input stage can RMSNorm rows (norm_w) */
    const char *(*variant)(const pg_packed_weight *w);
};

enum { PG_GEMM_PF_MAX_ROWS = 64 };

extern const pg_gemm_format pg_gemm_format_bf16, pg_gemm_format_f32;
extern const pg_gemm_format pg_gemm_format_w8a8, pg_gemm_format_w4a8;
extern const pg_gemm_format pg_gemm_format_mxfp4;
extern const pg_gemm_format pg_gemm_format_q4_k, pg_gemm_format_q5_k, pg_gemm_format_q6_k;
extern const pg_gemm_format pg_gemm_format_q2_k, pg_gemm_format_q3_k, pg_gemm_format_iq4_xs;
extern const pg_gemm_format pg_gemm_format_iq4_nl;

/* The K-quant panel layout (gemm_kquant.c; the same for every ISA): 32
 * columns; per super-block of 256 k a header (F16 d[32], F16 dm[32], int8
 * sc[S][32], then m[S][32] when the type has its own minimums: Q2_K, Q4_K,
 * Q5_K; pg_kq_hdr_bytes: 640 bytes, 1152 for Q2_K, 384 for IQ4_XS whose dm
 * is 0; IQ4_NL (fs: a float scale per sub-block) has F16 ds[8][32] instead,
 * 512 bytes), the nibble plane (PG_KQ_NIB_BYTES) and (bits - 4) KiB of
 * high-bit planes. S = 256 / sub. */
enum { PG_KQ_NR = 32, PG_KQ_SC_OFF = 128, PG_KQ_NIB_BYTES = 4096 };
static inline size_t pg_kq_hdr_bytes(int sub, int has_min, int fs) {
    if (fs) return (size_t)(256 / sub) * PG_KQ_NR * 2;
    return PG_KQ_SC_OFF + (size_t)(256 / sub) * PG_KQ_NR * (has_min ? 2 : 1);
}
static inline size_t pg_kq_group_bytes(int bits, int sub, int has_min, int fs) {
    return pg_kq_hdr_bytes(sub, has_min, fs) + 1024 * (size_t)bits;
}
/* The table's microkernel for K-quant type t, IQ4_XS or IQ4_NL (NULL:
 * another type). */
const pg_qgemm_ukernel *pg_kq_ukernel(const pg_kernel_table *kt, pg_dtype t);
/* The driver row of K-quant type t, IQ4_XS or IQ4_NL (NULL: another type). */
const pg_gemm_format *pg_kq_format(pg_dtype t);
/* Pack GGUF Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS / IQ4_NL rows [N, K] (Wu: the up half of a
 * SwiGLU pair, else NULL) for table kt, over the default pool's threads (the bytes do not depend on
 * the split). Errors: PAGODA_ERR_INVALID_ARG (K not a multiple of 256), PAGODA_ERR_UNSUPPORTED (a
 * Q6_K / Q3_K scale whose 32 d / 4 d overflows F16), PAGODA_ERR_NOMEM. */
pagoda_status pg_kq_pack_gguf(pg_dtype t, const void *Wg, const void *Wu, int64_t N, int64_t K,
                              const pg_kernel_table *kt, pg_packed_weight **out);

/* The stages of the int8-activation formats (qgemm.c): w8a8, w4a8 and
 * mxfp4 share them (the input stage's per-token or per-(token, group)
 * quantization with the fused RMSNorm, the tile call through
 * pg_qgemm_ukernel, the scaled epilogues); only packing differs. */
void pg_qfmt_plan(const pg_packed_weight *w, int64_t M, int gathered, pg_gemm_geometry *g);
void pg_qfmt_input(const pg_gemm_call *cl, int64_t r0, int64_t r1, int tid);
int pg_qfmt_has_input(const pg_gemm_call *cl);
int64_t pg_qfmt_pf_limit(const pg_packed_weight *w, int64_t ng);
void pg_qfmt_tile(const pg_gemm_call *cl, const char *wp, int64_t pc, int64_t ng, int64_t ir,
                  int rows, float *c, int64_t ldc, int accumulate, const char *pf,
                  int64_t pf_lines);
void pg_qfmt_epilogue(const pg_gemm_call *cl, float *acc, int64_t ldacc, int64_t m0, int64_t m1,
                      int64_t p0, int64_t p1);
const char *pg_qfmt_variant(const pg_packed_weight *w);

/* Pack GGUF MXFP4 rows (Wu: the up half of a SwiGLU pair, else NULL) or
 * the Hugging Face blocks/scales (gemm.h pg_gemm_pack_mxfp4) for table kt;
 * arguments other than the layout checked by the caller. */
pagoda_status pg_mxfp4_pack_gguf(const void *Wg, const void *Wu, int64_t N, int64_t K,
                                 const pg_kernel_table *kt, pg_packed_weight **out);

/* Pack F32 / F16 / BF16 rows [N, K] (and, for a SwiGLU pair, Wu) as the
 * BF16 (F16 / BF16 sources) or F32 format of table kt (NULL: the process
 * table); arguments already checked by the caller (gemm.c). */
pagoda_status pg_gemm_pack_float(pg_dtype t, const void *Wg, const void *Wu, int64_t N, int64_t K,
                                 const pg_kernel_table *kt, pg_packed_weight **out);

/* A zeroed packed weight (pg_calloc_aligned) or NULL. */
pg_packed_weight *pg_gemm_weight_new(void);

/* Run one call of w (pg_gemm / pg_qgemm / pg_qgemm_rmsnorm): argument
 * checks, then the input stage and the compute region on pool. */
pagoda_status pg_gemm_run(const pg_packed_weight *w, const float *A, int64_t M, int64_t lda,
                          const float *norm_w, float eps, float *C, int64_t ldc, const float *bias,
                          pg_gemm_epilogue ep, pg_pool *pool, void *scratch);

static inline int64_t pg_ceil_div64(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}
static inline size_t pg_align_up(size_t x) {
    return (x + PG_ALIGN - 1) & ~(size_t)(PG_ALIGN - 1);
}

#endif
