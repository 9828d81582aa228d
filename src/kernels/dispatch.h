/* The kernel dispatch table: one set of function pointers per process,
 * filled once at start-up from the CPU's features (src/base/cpu.h), possibly
 * lowered by PAGODA_ISA (e.g. "scalar", "avx2", "avx512", "neon", "sve").
 * Every entry has a scalar reference in src/kernels/ref/ that is its
 * specification; SIMD variants live in src/kernels/x86/ and src/kernels/arm/
 * and are tested against it.
 *
 * Reduction order: a variant's result may differ from the reference in the
 * last bits (different summation order), but for one table the order depends
 * only on n, never on where the row sits in a batch (batch invariance). */
#ifndef PAGODA_KERNELS_DISPATCH_H
#define PAGODA_KERNELS_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct pg_kernel_table {
    const char *isa; /* name of the level chosen: "scalar", "avx2", "avx512", "neon", "sve", ... */
    /* sum_i a[i]*b[i] over n floats (any n >= 0, any alignment). */
    float (*dot_f32)(const float *a, const float *b, size_t n);
    /* sum_i bf16(w[i])*x[i]: BF16 weights (raw uint16 bits) times f32 activations. */
    float (*dot_bf16_f32)(const uint16_t *w, const float *x, size_t n);
    /* sum_i f16(w[i])*x[i]: F16 weights (raw uint16 bits) times f32 activations. */
    float (*dot_f16_f32)(const uint16_t *w, const float *x, size_t n);
} pg_kernel_table;

/* The process-wide table. Thread-safe; the first call fills it. */
const pg_kernel_table *pg_kernels(void);

#endif
