/* Kernel dispatch tables, one per ISA level, built once (see dispatch.h). */
#include "kernels/dispatch.h"

#include <pthread.h>
#include <stdlib.h>

#include "base/cpu.h"
#include "base/log.h"
#include "kernels/attention.h"
#include "kernels/gated_delta.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/ref/ref.h"
#if defined(__x86_64__)
#include "kernels/x86/x86.h"
#elif defined(__aarch64__)
#include "kernels/arm/arm.h"
#endif

/* Attention micro-kernel sets (kernels/attention.h), one per ISA and KV dtype. */
static const pg_attn_ukernels UK_SCALAR_F32 = {"scalar", PG_F32, pg_ref_attn_qk_f32kv,
                                               pg_ref_attn_softmax, pg_ref_attn_pv_f32kv};
static const pg_attn_ukernels UK_SCALAR_BF16 = {"scalar", PG_BF16, pg_ref_attn_qk_bf16kv,
                                                pg_ref_attn_softmax, pg_ref_attn_pv_bf16kv};
#if defined(__x86_64__)
static const pg_attn_ukernels UK_AVX2_F32 = {"avx2", PG_F32, pg_avx2_attn_qk_f32kv,
                                             pg_avx2_attn_softmax, pg_avx2_attn_pv_f32kv};
static const pg_attn_ukernels UK_AVX2_BF16 = {"avx2", PG_BF16, pg_avx2_attn_qk_bf16kv,
                                              pg_avx2_attn_softmax, pg_avx2_attn_pv_bf16kv};
static const pg_attn_ukernels UK_AVX512_F32 = {"avx512", PG_F32, pg_avx512_attn_qk_f32kv,
                                               pg_avx512_attn_softmax, pg_avx512_attn_pv_f32kv};
static const pg_attn_ukernels UK_AVX512_BF16 = {"avx512", PG_BF16, pg_avx512_attn_qk_bf16kv,
                                                pg_avx512_attn_softmax, pg_avx512_attn_pv_bf16kv};
static const pg_attn_ukernels UK_AVX512BF16_BF16 = {
    "avx512bf16", PG_BF16, pg_avx512bf16_attn_qk_bf16kv, pg_avx512_attn_softmax,
    pg_avx512bf16_attn_pv_bf16kv};
#elif defined(__aarch64__)
static const pg_attn_ukernels UK_NEON_F32 = {"neon", PG_F32, pg_neon_attn_qk_f32kv,
                                             pg_neon_attn_softmax, pg_neon_attn_pv_f32kv};
static const pg_attn_ukernels UK_NEON_BF16 = {"neon", PG_BF16, pg_neon_attn_qk_bf16kv,
                                              pg_neon_attn_softmax, pg_neon_attn_pv_bf16kv};
static const pg_attn_ukernels UK_NEON_BF16DOT = {"neon_bf16", PG_BF16, pg_neon_bf16_attn_qk_bf16kv,
                                                 pg_neon_attn_softmax, pg_neon_bf16_attn_pv_bf16kv};
#endif
/* Gated DeltaNet micro-kernel sets (kernels/gated_delta.h), one per ISA. */
static const pg_gdn_ukernels GDN_SCALAR = {"scalar", pg_ref_gdn_recurrent_uk, pg_ref_gdn_mm_uk,
                                           pg_ref_vexp_f32};
#if defined(__x86_64__)
static const pg_gdn_ukernels GDN_AVX2 = {"avx2", pg_avx2_gdn_recurrent, pg_avx2_gdn_mm,
                                         pg_avx2_vexp_f32};
static const pg_gdn_ukernels GDN_AVX512 = {"avx512", pg_avx512_gdn_recurrent, pg_avx512_gdn_mm,
                                           pg_avx512_vexp_f32};
#elif defined(__aarch64__)
static const pg_gdn_ukernels GDN_NEON = {"neon", pg_neon_gdn_recurrent, pg_neon_gdn_mm,
                                         pg_neon_vexp_f32};
#endif
/* A GEMM microkernel descriptor. */
static pg_gemm_ukernel uk(const char *name, int mr, int nr, int kg, int ar,
                          void (*run)(int64_t, const void *, int64_t, const void *, float *,
                                      int64_t, int, int)) {
    pg_gemm_ukernel u = {name, mr, nr, kg, ar, run, NULL};
    return u;
}

/* Quantized GEMM microkernel descriptors (kernels/qgemm.h). */
typedef void (*qrun_fn)(int64_t, int64_t, const void *, int64_t, const float *, int64_t,
                        const int32_t *, int64_t, const void *, float *, int64_t, int, int);
static pg_qgemm_ukernel quk(const char *name, int bits, int mr, int nr, int kg, int ar, int vw,
                            int a_u8, int w_u8, qrun_fn run, qrun_fn run_hs) {
    pg_qgemm_ukernel u = {name, mr, nr, kg, ar, vw, a_u8, bits, w_u8, run, run_hs};
    return u;
}
#define QUK_SCALAR(b)                                                                              \
    quk("scalar", b, 4, 8, 4, 1, 16, 0, 0, pg_ref_qgemm_uk_w##b, pg_ref_qgemm_uk_w##b##_hs)
#define QUK_AVX512VNNI(b)                                                                          \
    quk("avx512vnni", b, 6, 32, 4, 1, 64, 0, 1, pg_avx512vnni_qgemm_uk_w##b,                       \
        pg_avx512vnni_qgemm_uk_w##b##_hs)
#define QUK_AVX2(b)                                                                                \
    quk("avx2", b, 3, 16, 4, 1, 32, 0, 0, pg_avx2_qgemm_uk_w##b, pg_avx2_qgemm_uk_w##b##_hs)
#define QUK_AVXVNNI(b) quk("avxvnni", b, 3, 16, 4, 1, 32, 1, 0, pg_avxvnni_qgemm_uk_w##b, NULL)
#define QUK_DOTPROD(b)                                                                             \
    quk("dotprod", b, 4, 8, 4, 1, 16, 0, 0, pg_dotprod_qgemm_uk_w##b, pg_dotprod_qgemm_uk_w##b##_hs)
#define QUK_I8MM(b)                                                                                \
    quk("i8mm", b, 4, 8, 8, 2, 16, 0, 0, pg_i8mm_qgemm_uk_w##b, pg_i8mm_qgemm_uk_w##b##_hs)

/* MXFP4 microkernels (dispatch.h, above pg_kernel_table): bits 4, no F16
 * form; avx512vnni feeds offset codes (w_u8). */
#define MXUK_SCALAR quk("scalar", 4, 4, 8, 4, 1, 16, 0, 0, pg_ref_mxfp4_uk, NULL)
#define MXUK_AVX512VNNI quk("avx512vnni", 4, 6, 32, 4, 1, 64, 0, 1, pg_avx512vnni_mxfp4_uk, NULL)
#define MXUK_AVX2 quk("avx2", 4, 3, 16, 4, 1, 32, 0, 0, pg_avx2_mxfp4_uk, NULL)
#define MXUK_DOTPROD quk("dotprod", 4, 4, 8, 4, 1, 16, 0, 0, pg_dotprod_mxfp4_uk, NULL)

/* K-quant microkernels (dispatch.h, above pg_kernel_table): nr 32, one
 * packed layout for every ISA. */
#define KQUK(name, b, mr, fn) quk(name, b, mr, 32, 4, 1, 64, 0, 0, fn, NULL)
#define KQ_SET(t, name, mr, P)                                                                     \
    ((t)->q4_k = KQUK(name, 4, mr, P##_q4_k), (t)->q5_k = KQUK(name, 5, mr, P##_q5_k),             \
     (t)->q6_k = KQUK(name, 6, mr, P##_q6_k), (t)->q2_k = KQUK(name, 4, mr, P##_q2_k),             \
     (t)->q3_k = KQUK(name, 4, mr, P##_q3_k), (t)->iq4_xs = KQUK(name, 4, mr, P##_iq4_xs),         \
     (t)->iq4_nl = KQUK(name, 4, mr, P##_iq4_nl))

/* Set an entry and record which variant filled it. */
#define SET(t, entry, fn, name) ((t)->entry = (fn), (t)->variant.entry = (name))

/* Build the table of `level`: the scalar references, overlaid by each level's
 * variants from the lowest up to `level`, so an entry without a variant at
 * `level` keeps the best lower one. */
static void fill_table(pg_kernel_table *t, pg_isa level) {
    t->isa = pg_isa_name(level);
    SET(t, dot_f32, pg_ref_dot_f32, "scalar");
    SET(t, dot_bf16_f32, pg_ref_dot_bf16_f32, "scalar");
    SET(t, dot_f16_f32, pg_ref_dot_f16_f32, "scalar");
    SET(t, vexp_f32, pg_ref_vexp_f32, "scalar");
    SET(t, attn_f32kv, &UK_SCALAR_F32, "scalar");
    SET(t, attn_bf16kv, &UK_SCALAR_BF16, "scalar");
    SET(t, rmsnorm_f32, pg_ref_rmsnorm, "scalar");
    SET(t, softmax_f32, pg_ref_softmax, "scalar");
    SET(t, silu_f32, pg_ref_silu, "scalar");
    SET(t, swiglu_f32, pg_ref_swiglu, "scalar");
    SET(t, argmax_f32, pg_ref_argmax_f32, "scalar");
    SET(t, layernorm_f32, pg_ref_layernorm, "scalar");
    SET(t, gelu_f32, pg_ref_gelu, "scalar");
    SET(t, cvt_f32_bf16, pg_ref_cvt_f32_bf16, "scalar");
    SET(t, amax_f32, pg_ref_amax_f32, "scalar");
    SET(t, quant_i8, pg_ref_quant_i8, "scalar");
    SET(t, gdn, &GDN_SCALAR, "scalar");
    t->gemm_bf16 = uk("scalar", 4, 16, 2, 1, pg_ref_gemm_uk_bf16);
    t->gemm_f32 = uk("scalar", 4, 16, 1, 1, pg_ref_gemm_uk_f32);
    t->qgemm_w8 = QUK_SCALAR(8);
    t->qgemm_w4 = QUK_SCALAR(4);
    t->mxfp4 = MXUK_SCALAR;
    KQ_SET(t, "scalar", 4, pg_ref_kq_uk);
#if defined(__x86_64__)
    if (level >= PG_ISA_AVX2 && level <= PG_ISA_AVX512BF16) {
        SET(t, dot_f32, pg_avx2_dot_f32, "avx2");
        SET(t, dot_bf16_f32, pg_avx2_dot_bf16_f32, "avx2");
        SET(t, dot_f16_f32, pg_avx2_dot_f16_f32, "avx2");
        SET(t, vexp_f32, pg_avx2_vexp_f32, "avx2");
        SET(t, attn_f32kv, &UK_AVX2_F32, "avx2");
        SET(t, attn_bf16kv, &UK_AVX2_BF16, "avx2");
        SET(t, rmsnorm_f32, pg_avx2_rmsnorm_f32, "avx2");
        SET(t, softmax_f32, pg_avx2_softmax_f32, "avx2");
        SET(t, silu_f32, pg_avx2_silu_f32, "avx2");
        SET(t, swiglu_f32, pg_avx2_swiglu_f32, "avx2");
        SET(t, argmax_f32, pg_avx2_argmax_f32, "avx2");
        SET(t, layernorm_f32, pg_avx2_layernorm_f32, "avx2");
        SET(t, gelu_f32, pg_avx2_gelu_f32, "avx2");
        SET(t, cvt_f32_bf16, pg_avx2_cvt_f32_bf16, "avx2");
        SET(t, amax_f32, pg_avx2_amax_f32, "avx2");
        SET(t, quant_i8, pg_avx2_quant_i8, "avx2");
        SET(t, gdn, &GDN_AVX2, "avx2");
        t->gemm_bf16 = uk("avx2", 4, 16, 2, 1, pg_avx2_gemm_uk_bf16);
        t->gemm_f32 = uk("avx2", 6, 16, 1, 1, pg_avx2_gemm_uk_f32);
        /* VNNI is a feature, not a level: AVX-VNNI (VEX) on AVX2 cores */
        if (pg_cpu()->avx_vnni)
            t->qgemm_w8 = QUK_AVXVNNI(8), t->qgemm_w4 = QUK_AVXVNNI(4);
        else
            t->qgemm_w8 = QUK_AVX2(8), t->qgemm_w4 = QUK_AVX2(4);
        t->mxfp4 = MXUK_AVX2;
        KQ_SET(t, "avx2", 4, pg_avx2_kq_uk); /* VPMADDUBSW; avx512vnni replaces it below */
    }
    if (level >= PG_ISA_AVX512 && level <= PG_ISA_AVX512BF16) {
        SET(t, dot_f32, pg_avx512_dot_f32, "avx512");
        SET(t, dot_bf16_f32, pg_avx512_dot_bf16_f32, "avx512");
        SET(t, dot_f16_f32, pg_avx512_dot_f16_f32, "avx512");
        SET(t, vexp_f32, pg_avx512_vexp_f32, "avx512");
        SET(t, attn_f32kv, &UK_AVX512_F32, "avx512");
        SET(t, attn_bf16kv, &UK_AVX512_BF16, "avx512");
        SET(t, rmsnorm_f32, pg_avx512_rmsnorm_f32, "avx512");
        SET(t, softmax_f32, pg_avx512_softmax_f32, "avx512");
        SET(t, silu_f32, pg_avx512_silu_f32, "avx512");
        SET(t, swiglu_f32, pg_avx512_swiglu_f32, "avx512");
        SET(t, argmax_f32, pg_avx512_argmax_f32, "avx512");
        SET(t, layernorm_f32, pg_avx512_layernorm_f32, "avx512");
        SET(t, gelu_f32, pg_avx512_gelu_f32, "avx512");
        SET(t, cvt_f32_bf16, pg_avx512_cvt_f32_bf16, "avx512");
        SET(t, amax_f32, pg_avx512_amax_f32, "avx512");
        SET(t, quant_i8, pg_avx512_quant_i8, "avx512");
        SET(t, gdn, &GDN_AVX512, "avx512");
        t->gemm_bf16 = uk("avx512", 8, 32, 2, 1, pg_avx512_gemm_uk_bf16);
        t->gemm_f32 = uk("avx512", 6, 64, 1, 1, pg_avx512_gemm_uk_f32);
        if (pg_cpu()->avx512_vnni) {
            t->qgemm_w8 = QUK_AVX512VNNI(8), t->qgemm_w4 = QUK_AVX512VNNI(4),
            t->mxfp4 = MXUK_AVX512VNNI;
            KQ_SET(t, "avx512vnni", 4, pg_avx512vnni_kq_uk);
        }
    }
    /* avx512bf16: the BF16 GEMM and attention over a BF16 KV cache use
     * VDPBF16PS; the dot products keep f32 activations (never rounded to
     * BF16), so they stay avx512's. */
    if (level == PG_ISA_AVX512BF16) {
        SET(t, attn_bf16kv, &UK_AVX512BF16_BF16, "avx512bf16");
        SET(t, cvt_f32_bf16, pg_avx512bf16_cvt_f32_bf16, "avx512bf16");
        t->gemm_bf16 = uk("avx512bf16", 6, 64, 2, 1, pg_avx512bf16_gemm_uk_bf16);
        t->gemm_bf16.run_pf = pg_avx512bf16_gemm_uk_bf16_pf;
    }
#elif defined(__aarch64__)
    if (level >= PG_ISA_NEON && level <= PG_ISA_SVE) {
        SET(t, dot_f32, pg_neon_dot_f32, "neon");
        SET(t, dot_bf16_f32, pg_neon_dot_bf16_f32, "neon");
        SET(t, dot_f16_f32, pg_neon_dot_f16_f32, "neon");
        SET(t, vexp_f32, pg_neon_vexp_f32, "neon");
        SET(t, attn_f32kv, &UK_NEON_F32, "neon");
        SET(t, rmsnorm_f32, pg_neon_rmsnorm_f32, "neon");
        SET(t, softmax_f32, pg_neon_softmax_f32, "neon");
        SET(t, silu_f32, pg_neon_silu_f32, "neon");
        SET(t, swiglu_f32, pg_neon_swiglu_f32, "neon");
        SET(t, argmax_f32, pg_neon_argmax_f32, "neon");
        SET(t, layernorm_f32, pg_neon_layernorm_f32, "neon");
        SET(t, gelu_f32, pg_neon_gelu_f32, "neon");
        /* BFDOT is a feature, not a level: used at neon and sve when present */
        if (pg_cpu()->bf16)
            SET(t, attn_bf16kv, &UK_NEON_BF16DOT, "neon_bf16");
        else
            SET(t, attn_bf16kv, &UK_NEON_BF16, "neon");
        SET(t, cvt_f32_bf16, pg_neon_cvt_f32_bf16, "neon");
        SET(t, amax_f32, pg_neon_amax_f32, "neon");
        SET(t, quant_i8, pg_neon_quant_i8, "neon");
        SET(t, gdn, &GDN_NEON, "neon");
        t->gemm_f32 = uk("neon", 5, 16, 1, 1, pg_neon_gemm_uk_f32);
        /* BFMMLA where the core has FEAT_BF16 (the layout differs: k-quads,
         * row pairs), else widen + FMA on k-pairs. */
        if (pg_cpu()->bf16) {
            t->gemm_bf16 = uk("neon-bfmmla", 8, 8, 4, 2, pg_bf16_gemm_uk_bfmmla);
            t->gemm_bf16.run_pf = pg_bf16_gemm_uk_bfmmla_pf;
        } else {
            t->gemm_bf16 = uk("neon", 4, 16, 2, 1, pg_neon_gemm_uk_bf16);
        }
        /* SMMLA where the core has FEAT_I8MM, else SDOT (FEAT_DotProd) */
        if (pg_cpu()->i8mm)
            t->qgemm_w8 = QUK_I8MM(8), t->qgemm_w4 = QUK_I8MM(4);
        else if (pg_cpu()->asimd_dotprod)
            t->qgemm_w8 = QUK_DOTPROD(8), t->qgemm_w4 = QUK_DOTPROD(4);
        /* MXFP4: SDOT with a vqtbl1q_s8 code lookup (I8MM cores have it too) */
        if (pg_cpu()->asimd_dotprod) {
            t->mxfp4 = MXUK_DOTPROD;
            KQ_SET(t, "dotprod", 2, pg_dotprod_kq_uk); /* K-quants: SDOT, one layout */
        }
    }
    if (level == PG_ISA_SVE) {
        SET(t, dot_f32, pg_sve_dot_f32, "sve");
        SET(t, dot_bf16_f32, pg_sve_dot_bf16_f32, "sve");
        SET(t, dot_f16_f32, pg_sve_dot_f16_f32, "sve");
        SET(t, vexp_f32, pg_sve_vexp_f32, "sve");
    }
#endif
}

void pg_kernels_describe(const pg_kernel_table *t, FILE *f, const char *prefix) {
    const char *p = prefix ? prefix : "";
    fprintf(f, "  %s%-16s %s\n", p, "dot_f32", t->variant.dot_f32);
    fprintf(f, "  %s%-16s %s\n", p, "dot_bf16_f32", t->variant.dot_bf16_f32);
    fprintf(f, "  %s%-16s %s\n", p, "dot_f16_f32", t->variant.dot_f16_f32);
    fprintf(f, "  %s%-16s %s\n", p, "vexp_f32", t->variant.vexp_f32);
    fprintf(f, "  %s%-16s %s\n", p, "attn_f32kv", t->variant.attn_f32kv);
    fprintf(f, "  %s%-16s %s\n", p, "attn_bf16kv", t->variant.attn_bf16kv);
    fprintf(f, "  %s%-16s %s\n", p, "rmsnorm_f32", t->variant.rmsnorm_f32);
    fprintf(f, "  %s%-16s %s\n", p, "softmax_f32", t->variant.softmax_f32);
    fprintf(f, "  %s%-16s %s\n", p, "silu_f32", t->variant.silu_f32);
    fprintf(f, "  %s%-16s %s\n", p, "swiglu_f32", t->variant.swiglu_f32);
    fprintf(f, "  %s%-16s %s\n", p, "argmax_f32", t->variant.argmax_f32);
    fprintf(f, "  %s%-16s %s\n", p, "layernorm_f32", t->variant.layernorm_f32);
    fprintf(f, "  %s%-16s %s\n", p, "gelu_f32", t->variant.gelu_f32);
    fprintf(f, "  %s%-16s %s\n", p, "cvt_f32_bf16", t->variant.cvt_f32_bf16);
    fprintf(f, "  %s%-16s %s\n", p, "amax_f32", t->variant.amax_f32);
    fprintf(f, "  %s%-16s %s\n", p, "quant_i8", t->variant.quant_i8);
    fprintf(f, "  %s%-16s %s\n", p, "gdn", t->variant.gdn);
    fprintf(f, "  %s%-16s %s (%dx%d)\n", p, "gemm_bf16", t->gemm_bf16.name, t->gemm_bf16.mr,
            t->gemm_bf16.nr);
    fprintf(f, "  %s%-16s %s (%dx%d)\n", p, "gemm_f32", t->gemm_f32.name, t->gemm_f32.mr,
            t->gemm_f32.nr);
    fprintf(f, "  %s%-16s %s (%dx%d)\n", p, "qgemm_w8a8", t->qgemm_w8.name, t->qgemm_w8.mr,
            t->qgemm_w8.nr);
    fprintf(f, "  %s%-16s %s (%dx%d)\n", p, "qgemm_w4a8", t->qgemm_w4.name, t->qgemm_w4.mr,
            t->qgemm_w4.nr);
    fprintf(f, "  %s%-16s %s (%dx%d)\n", p, "mxfp4", t->mxfp4.name, t->mxfp4.mr, t->mxfp4.nr);
    fprintf(f, "  %s%-16s %s (%dx%d)\n", p, "q2_k..q6_k", t->q4_k.name, t->q4_k.mr, t->q4_k.nr);
}

/* Tables of every level this CPU supports (others stay zeroed). */
static pg_kernel_table g_tables[PG_ISA_COUNT];
static pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void) {
    const pg_cpu_info *cpu = pg_cpu();
    for (int l = 0; l < PG_ISA_COUNT; l++)
        if (pg_isa_supported(cpu, (pg_isa)l)) fill_table(&g_tables[l], (pg_isa)l);
}

const pg_kernel_table *pg_kernels_for_isa(const char *isa) {
    pthread_once(&g_tables_once, tables_init);
    int l = pg_isa_parse(isa);
    if (l < 0 || !pg_isa_supported(pg_cpu(), (pg_isa)l)) return NULL;
    return &g_tables[l];
}

const pg_kernel_table *pg_kernels_select(const char *isa_or_null) {
    pthread_once(&g_tables_once, tables_init);
    const pg_cpu_info *cpu = pg_cpu();
    pg_isa level;
    bool clamped;
    if (pg_isa_resolve(cpu, isa_or_null, &level, &clamped) != PAGODA_OK)
        PG_ERROR("%s; using %s", pg_last_error(), pg_isa_name(level));
    else if (clamped)
        PG_WARN("PAGODA_ISA=%s: this CPU does not support it; using %s", isa_or_null,
                pg_isa_name(level));
    return &g_tables[level];
}

static const pg_kernel_table *g_active;
static pthread_once_t g_active_once = PTHREAD_ONCE_INIT;

static void active_init(void) {
    g_active = pg_kernels_select(getenv("PAGODA_ISA"));
}

const pg_kernel_table *pg_kernels(void) {
    pthread_once(&g_active_once, active_init);
    return g_active;
}

int pg_attn_ukernel_variants(pg_dtype dtype, const pg_attn_ukernels **out, int max) {
    pthread_once(&g_tables_once, tables_init);
    int n = 0;
    const pg_attn_ukernels *prev = NULL;
    for (int l = 0; l < PG_ISA_COUNT; l++) {
        if (!g_tables[l].isa) continue;
        const pg_attn_ukernels *u =
            dtype == PG_BF16 ? g_tables[l].attn_bf16kv : g_tables[l].attn_f32kv;
        if (u != prev && n < max) out[n++] = u;
        prev = u;
    }
#if defined(__aarch64__)
    /* the exact-widening NEON BF16 set, when the tables use BFDOT instead */
    if (dtype == PG_BF16 && pg_isa_supported(pg_cpu(), PG_ISA_NEON) && pg_cpu()->bf16 && n < max)
        out[n++] = &UK_NEON_BF16;
#endif
    return n;
}

/* Every quantized microkernel this machine runs (kernels/qgemm.h). */
int pg_qgemm_ukernel_variants(int bits, const pg_qgemm_ukernel **out, int max) {
    pthread_once(&g_tables_once, tables_init);
    static pg_qgemm_ukernel extra[2][2];
    int n = 0;
    for (int l = 0; l < PG_ISA_COUNT; l++) {
        if (!g_tables[l].isa) continue;
        const pg_qgemm_ukernel *u = bits == 8 ? &g_tables[l].qgemm_w8 : &g_tables[l].qgemm_w4;
        int dup = 0;
        for (int j = 0; j < n; j++)
            dup |= out[j]->run == u->run;
        if (!dup && n < max) out[n++] = u;
    }
    const int b = bits == 8 ? 0 : 1;
    (void)b;
#if defined(__x86_64__)
    /* AVX-VNNI where the tables use AVX512_VNNI instead; the AVX2 fallback
     * where they use AVX-VNNI */
    if (pg_cpu()->avx_vnni && pg_cpu()->avx512_vnni && pg_isa_supported(pg_cpu(), PG_ISA_AVX512) &&
        n < max) {
        extra[b][0] = bits == 8 ? QUK_AVXVNNI(8) : QUK_AVXVNNI(4);
        out[n++] = &extra[b][0];
    }
    if (pg_cpu()->avx_vnni && pg_isa_supported(pg_cpu(), PG_ISA_AVX2) && n < max) {
        extra[b][1] = bits == 8 ? QUK_AVX2(8) : QUK_AVX2(4);
        out[n++] = &extra[b][1];
    }
#elif defined(__aarch64__)
    /* SDOT where the tables use SMMLA instead */
    if (pg_cpu()->i8mm && pg_cpu()->asimd_dotprod && pg_isa_supported(pg_cpu(), PG_ISA_NEON) &&
        n < max) {
        extra[b][0] = bits == 8 ? QUK_DOTPROD(8) : QUK_DOTPROD(4);
        out[n++] = &extra[b][0];
    }
#endif
    return n;
}
