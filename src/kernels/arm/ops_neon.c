/* NEON row ops (RMSNorm, LayerNorm, softmax, SiLU, SwiGLU, GELU, argmax): the scheme of
 * x86/ops_avx512.c on 4 lanes; tails through a padded 4-float buffer.
 * Every loop runs its whole vectors first and the tail (< 4) as one more
 * step after it: a memcpy call inside the loop (the tail path) would make
 * GCC reload the exp constants from memory on every step (they cannot stay
 * in caller-saved registers across a call). Same steps in the same order. */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kernels/arm/arm.h"
#include "kernels/arm/vexp_neon.h"
#include "kernels/gelu_consts.h"

/* x[i..i+4), lanes past n = pad. */
static inline float32x4_t load_pad(const float *x, size_t i, size_t n, float pad) {
    if (i + 4 <= n) return vld1q_f32(x + i);
    float b[4] = {pad, pad, pad, pad};
    memcpy(b, x + i, (n - i) * sizeof(float));
    return vld1q_f32(b);
}

static inline void store_part(float *y, size_t i, size_t n, float32x4_t v) {
    if (i + 4 <= n) {
        vst1q_f32(y + i, v);
        return;
    }
    float b[4];
    vst1q_f32(b, v);
    memcpy(y + i, b, (n - i) * sizeof(float));
}

static inline float32x4_t sumsq_step(float32x4_t acc, const float *x, size_t i, size_t n) {
    float32x4_t v = load_pad(x, i, n, 0);
    return vfmaq_f32(acc, v, v);
}

static inline void norm_step(float *y, const float *x, const float *w, size_t i, size_t n,
                             float scale) {
    float32x4_t v = vmulq_n_f32(load_pad(x, i, n, 0), scale);
    store_part(y, i, n, vmulq_f32(load_pad(w, i, n, 0), v));
}

void pg_neon_rmsnorm_f32(float *out, const float *x, const float *w, size_t m, size_t n,
                         float eps) {
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * n;
        float *yr = out + r * n;
        float32x4_t acc = vdupq_n_f32(0);
        size_t i = 0;
        for (; i + 4 <= n; i += 4)
            acc = sumsq_step(acc, xr, i, n);
        if (i < n) acc = sumsq_step(acc, xr, i, n);
        float scale = 1.0f / sqrtf(vaddvq_f32(acc) / (float)n + eps);
        for (i = 0; i + 4 <= n; i += 4)
            norm_step(yr, xr, w, i, n, scale);
        if (i < n) norm_step(yr, xr, w, i, n, scale);
    }
}

static inline float32x4_t exp_step(float32x4_t sum, float *x, size_t i, size_t n, float32x4_t mv) {
    float32x4_t e = pg_exp_neon(vsubq_f32(load_pad(x, i, n, -INFINITY), mv));
    store_part(x, i, n, e);
    return vaddq_f32(sum, e);
}

void pg_neon_softmax_f32(float *x, size_t n) {
    float32x4_t mx = vdupq_n_f32(-INFINITY);
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        mx = vmaxq_f32(mx, vld1q_f32(x + i));
    if (i < n) mx = vmaxq_f32(mx, load_pad(x, i, n, -INFINITY));
    const float32x4_t mv = vdupq_n_f32(vmaxvq_f32(mx));
    float32x4_t sum = vdupq_n_f32(0);
    for (i = 0; i + 4 <= n; i += 4)
        sum = exp_step(sum, x, i, n, mv);
    if (i < n) sum = exp_step(sum, x, i, n, mv);
    const float inv = 1.0f / vaddvq_f32(sum);
    for (i = 0; i + 4 <= n; i += 4)
        vst1q_f32(x + i, vmulq_n_f32(vld1q_f32(x + i), inv));
    if (i < n) store_part(x, i, n, vmulq_n_f32(load_pad(x, i, n, 0), inv));
}

static inline float32x4_t silu(float32x4_t g) {
    float32x4_t e = pg_exp_neon(vnegq_f32(g));
    return vdivq_f32(g, vaddq_f32(vdupq_n_f32(1.0f), e));
}

void pg_neon_silu_f32(float *out, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(out + i, silu(vld1q_f32(x + i)));
    if (i < n) store_part(out, i, n, silu(load_pad(x, i, n, 0)));
}

static inline void swiglu_step(float *out, const float *gate, const float *up, size_t i, size_t n) {
    store_part(out, i, n, vmulq_f32(silu(load_pad(gate, i, n, 0)), load_pad(up, i, n, 0)));
}

void pg_neon_swiglu_f32(float *out, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        swiglu_step(out, gate, up, i, n);
    if (i < n) swiglu_step(out, gate, up, i, n);
}

size_t pg_neon_argmax_f32(const float *x, size_t n) {
    const float32x4_t ninf = vdupq_n_f32(-INFINITY);
    float32x4_t mx = ninf;
    for (size_t i = 0; i < n; i += 4) {
        float32x4_t v = load_pad(x, i, n, -INFINITY);
        v = vbslq_f32(vceqq_f32(v, v), v, ninf); /* NaN never wins */
        mx = vmaxq_f32(mx, v);
    }
    const float best = vmaxvq_f32(mx);
    for (size_t i = 0; i < n; i++)
        if (x[i] == best) return i;
    return 0; /* n == 0 or every value NaN */
}

static inline float32x4_t dev_sq_step(float32x4_t acc, const float *x, size_t i, size_t n,
                                      float mean) {
    float32x4_t d = vsubq_f32(load_pad(x, i, n, mean), vdupq_n_f32(mean)); /* pad lanes: 0 */
    return vfmaq_f32(acc, d, d);
}

static inline void ln_step(float *y, const float *x, const float *w, const float *b, size_t i,
                           size_t n, float mean, float rstd) {
    float32x4_t d = vmulq_n_f32(vsubq_f32(load_pad(x, i, n, 0), vdupq_n_f32(mean)), rstd);
    float32x4_t v = vmulq_f32(d, load_pad(w, i, n, 0));
    if (b) v = vaddq_f32(v, load_pad(b, i, n, 0));
    store_part(y, i, n, v);
}

void pg_neon_layernorm_f32(float *out, const float *x, const float *w, const float *b, size_t m,
                           size_t n, float eps) {
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * n;
        float *yr = out + r * n;
        float32x4_t acc = vdupq_n_f32(0);
        size_t i = 0;
        for (; i + 4 <= n; i += 4)
            acc = vaddq_f32(acc, vld1q_f32(xr + i));
        if (i < n) acc = vaddq_f32(acc, load_pad(xr, i, n, 0));
        const float mean = vaddvq_f32(acc) / (float)n;
        acc = vdupq_n_f32(0);
        for (i = 0; i + 4 <= n; i += 4)
            acc = dev_sq_step(acc, xr, i, n, mean);
        if (i < n) acc = dev_sq_step(acc, xr, i, n, mean);
        const float rstd = 1.0f / sqrtf(vaddvq_f32(acc) / (float)n + eps);
        for (i = 0; i + 4 <= n; i += 4)
            ln_step(yr, xr, w, b, i, n, mean, rstd);
        if (i < n) ln_step(yr, xr, w, b, i, n, mean, rstd);
    }
}

/* 0.5 x (1 + erf(x / sqrt 2)), both erf intervals computed and blended. */
static inline float32x4_t gelu(float32x4_t x) {
    const float32x4_t z = vmulq_n_f32(x, PG_GELU_RSQRT2);
    const float32x4_t a = vabsq_f32(z), z2 = vmulq_f32(z, z);
    float32x4_t p = vdupq_n_f32(PG_GELU_A5);
    p = vfmaq_f32(vdupq_n_f32(PG_GELU_A4), p, z2);
    p = vfmaq_f32(vdupq_n_f32(PG_GELU_A3), p, z2);
    p = vfmaq_f32(vdupq_n_f32(PG_GELU_A2), p, z2);
    p = vfmaq_f32(vdupq_n_f32(PG_GELU_A1), p, z2);
    p = vfmaq_f32(vdupq_n_f32(PG_GELU_A0), p, z2);
    const float32x4_t small = vaddq_f32(vdupq_n_f32(1.0f), vfmaq_f32(z, p, z));
    const float32x4_t ac = vminq_f32(a, vdupq_n_f32(PG_GELU_BIG));
    float32x4_t q = vdupq_n_f32(PG_GELU_B6);
    q = vfmaq_f32(vdupq_n_f32(PG_GELU_B5), q, ac);
    q = vfmaq_f32(vdupq_n_f32(PG_GELU_B4), q, ac);
    q = vfmaq_f32(vdupq_n_f32(PG_GELU_B3), q, ac);
    q = vfmaq_f32(vdupq_n_f32(PG_GELU_B2), q, ac);
    q = vfmaq_f32(vdupq_n_f32(PG_GELU_B1), q, ac);
    q = vfmaq_f32(vdupq_n_f32(PG_GELU_B0), q, ac);
    q = vfmaq_f32(ac, q, ac);
    float32x4_t e = pg_exp_neon(vnegq_f32(q));
    e = vbslq_f32(vcgeq_f32(a, vdupq_n_f32(PG_GELU_BIG)), vdupq_n_f32(0), e);
    const float32x4_t big =
        vbslq_f32(vcltq_f32(z, vdupq_n_f32(0)), e, vsubq_f32(vdupq_n_f32(2.0f), e));
    const float32x4_t t = vbslq_f32(vcltq_f32(a, vdupq_n_f32(PG_GELU_SPLIT)), small, big);
    return vmulq_f32(vmulq_n_f32(x, 0.5f), t);
}

void pg_neon_gelu_f32(float *out, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(out + i, gelu(vld1q_f32(x + i)));
    if (i < n) store_part(out, i, n, gelu(load_pad(x, i, n, 0)));
}
