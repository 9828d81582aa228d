/* Placeholder table with the scalar references only; CPU-feature based
 * selection replaces this (see dispatch.h). */
#include "kernels/dispatch.h"

#include "kernels/ref/ref.h"

static const pg_kernel_table SCALAR = {
    .isa = "scalar",
    .dot_f32 = pg_ref_dot_f32,
    .dot_bf16_f32 = pg_ref_dot_bf16_f32,
    .dot_f16_f32 = pg_ref_dot_f16_f32,
};

const pg_kernel_table *pg_kernels(void) { return &SCALAR; }
