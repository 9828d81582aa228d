/* Kernel dispatch tables, one per ISA level, built once (see dispatch.h). */
#include "kernels/dispatch.h"

#include <pthread.h>
#include <stdlib.h>

#include "base/cpu.h"
#include "base/log.h"
#include "kernels/ref/ref.h"
#if defined(__x86_64__)
#include "kernels/x86/x86.h"
#elif defined(__aarch64__)
#include "kernels/arm/arm.h"
#endif

/* A GEMM microkernel descriptor. */
static pg_gemm_ukernel uk(const char *name, int mr, int nr, int kg, int ar,
                          void (*run)(int64_t, const void *, int64_t, const void *, float *,
                                      int64_t, int, int)) {
    pg_gemm_ukernel u = {name, mr, nr, kg, ar, run};
    return u;
}

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
    SET(t, cvt_f32_bf16, pg_ref_cvt_f32_bf16, "scalar");
    SET(t, swiglu_f32, pg_ref_swiglu_f32, "scalar");
    t->gemm_bf16 = uk("scalar", 4, 16, 2, 1, pg_ref_gemm_uk_bf16);
    t->gemm_f32 = uk("scalar", 4, 16, 1, 1, pg_ref_gemm_uk_f32);
#if defined(__x86_64__)
    if (level >= PG_ISA_AVX2 && level <= PG_ISA_AVX512BF16) {
        SET(t, dot_f32, pg_avx2_dot_f32, "avx2");
        SET(t, dot_bf16_f32, pg_avx2_dot_bf16_f32, "avx2");
        SET(t, dot_f16_f32, pg_avx2_dot_f16_f32, "avx2");
        SET(t, cvt_f32_bf16, pg_avx2_cvt_f32_bf16, "avx2");
        SET(t, swiglu_f32, pg_avx2_swiglu_f32, "avx2");
        t->gemm_bf16 = uk("avx2", 4, 16, 2, 1, pg_avx2_gemm_uk_bf16);
        t->gemm_f32 = uk("avx2", 6, 16, 1, 1, pg_avx2_gemm_uk_f32);
    }
    if (level >= PG_ISA_AVX512 && level <= PG_ISA_AVX512BF16) {
        SET(t, dot_f32, pg_avx512_dot_f32, "avx512");
        SET(t, dot_bf16_f32, pg_avx512_dot_bf16_f32, "avx512");
        SET(t, dot_f16_f32, pg_avx512_dot_f16_f32, "avx512");
        SET(t, cvt_f32_bf16, pg_avx512_cvt_f32_bf16, "avx512");
        SET(t, swiglu_f32, pg_avx512_swiglu_f32, "avx512");
        t->gemm_bf16 = uk("avx512", 8, 32, 2, 1, pg_avx512_gemm_uk_bf16);
        t->gemm_f32 = uk("avx512", 6, 64, 1, 1, pg_avx512_gemm_uk_f32);
    }
    /* avx512bf16: the BF16 GEMM uses VDPBF16PS; the dot products keep f32
     * activations (never rounded to BF16), so they stay avx512's. */
    if (level == PG_ISA_AVX512BF16) {
        SET(t, cvt_f32_bf16, pg_avx512bf16_cvt_f32_bf16, "avx512bf16");
        t->gemm_bf16 = uk("avx512bf16", 6, 64, 2, 1, pg_avx512bf16_gemm_uk_bf16);
    }
#elif defined(__aarch64__)
    if (level >= PG_ISA_NEON && level <= PG_ISA_SVE) {
        SET(t, dot_f32, pg_neon_dot_f32, "neon");
        SET(t, dot_bf16_f32, pg_neon_dot_bf16_f32, "neon");
        SET(t, dot_f16_f32, pg_neon_dot_f16_f32, "neon");
        SET(t, cvt_f32_bf16, pg_neon_cvt_f32_bf16, "neon");
        SET(t, swiglu_f32, pg_neon_swiglu_f32, "neon");
        t->gemm_f32 = uk("neon", 6, 16, 1, 1, pg_neon_gemm_uk_f32);
        /* BFMMLA where the core has FEAT_BF16 (the layout differs: k-quads,
         * row pairs), else widen + FMA on k-pairs. */
        if (pg_cpu()->bf16)
            t->gemm_bf16 = uk("neon-bfmmla", 8, 8, 4, 2, pg_bf16_gemm_uk_bfmmla);
        else
            t->gemm_bf16 = uk("neon", 4, 16, 2, 1, pg_neon_gemm_uk_bf16);
    }
    if (level == PG_ISA_SVE) {
        SET(t, dot_f32, pg_sve_dot_f32, "sve");
        SET(t, dot_bf16_f32, pg_sve_dot_bf16_f32, "sve");
        SET(t, dot_f16_f32, pg_sve_dot_f16_f32, "sve");
    }
#endif
}

void pg_kernels_describe(const pg_kernel_table *t, FILE *f, const char *prefix) {
    const char *p = prefix ? prefix : "";
    fprintf(f, "  %s%-16s %s\n", p, "dot_f32", t->variant.dot_f32);
    fprintf(f, "  %s%-16s %s\n", p, "dot_bf16_f32", t->variant.dot_bf16_f32);
    fprintf(f, "  %s%-16s %s\n", p, "dot_f16_f32", t->variant.dot_f16_f32);
    fprintf(f, "  %s%-16s %s\n", p, "cvt_f32_bf16", t->variant.cvt_f32_bf16);
    fprintf(f, "  %s%-16s %s\n", p, "swiglu_f32", t->variant.swiglu_f32);
    fprintf(f, "  %s%-16s %s (%dx%d)\n", p, "gemm_bf16", t->gemm_bf16.name, t->gemm_bf16.mr,
            t->gemm_bf16.nr);
    fprintf(f, "  %s%-16s %s (%dx%d)\n", p, "gemm_f32", t->gemm_f32.name, t->gemm_f32.mr,
            t->gemm_f32.nr);
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
