#include "base/dtype.h"
#include "kernels/ref/ref.h"

float pg_ref_dot_f32(const float *a, const float *b, size_t n) {
    float s = 0.0f;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

float pg_ref_dot_bf16_f32(const uint16_t *w, const float *x, size_t n) {
    float s = 0.0f;
    for (size_t i = 0; i < n; i++) s += pg_bf16_to_f32(w[i]) * x[i];
    return s;
}

float pg_ref_dot_f16_f32(const uint16_t *w, const float *x, size_t n) {
    float s = 0.0f;
    for (size_t i = 0; i < n; i++) s += pg_f16_to_f32(w[i]) * x[i];
    return s;
}
