/* Scalar argmax (the specification of the dispatch entry argmax_f32). */
#include <math.h>

#include "kernels/ref/ref.h"

size_t pg_ref_argmax_f32(const float *x, size_t n) {
    size_t best = n;
    for (size_t i = 0; i < n; i++) {
        if (isnan(x[i])) continue;
        if (best == n || x[i] > x[best]) best = i;
    }
    return best == n ? 0 : best;
}
