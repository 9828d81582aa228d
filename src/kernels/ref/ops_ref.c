#include "kernels/ref/ops_ref.h"

#include <math.h>

#include "kernels/ref/ref.h"

void pg_ref_rmsnorm(float *out, const float *x, const float *w, size_t m, size_t n, float eps) {
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * n;
        float *yr = out + r * n;
        float ss = 0.0f;
        for (size_t i = 0; i < n; i++)
            ss += xr[i] * xr[i];
        float scale = 1.0f / sqrtf(ss / (float)n + eps);
        for (size_t i = 0; i < n; i++)
            yr[i] = w[i] * (scale * xr[i]);
    }
}

void pg_ref_rope(float *x, size_t n_heads, size_t head_dim, int pos, const float *inv_freq,
                 bool interleaved) {
    size_t half = head_dim / 2;
    for (size_t i = 0; i < half; i++) {
        double angle = (double)pos * (double)inv_freq[i];
        float c = (float)cos(angle), s = (float)sin(angle);
        size_t ia = interleaved ? 2 * i : i;
        size_t ib = interleaved ? 2 * i + 1 : i + half;
        for (size_t h = 0; h < n_heads; h++) {
            float *v = x + h * head_dim;
            float a = v[ia], b = v[ib];
            v[ia] = a * c - b * s;
            v[ib] = a * s + b * c;
        }
    }
}

void pg_ref_softmax(float *x, size_t n) {
    float max = x[0];
    for (size_t i = 1; i < n; i++)
        if (x[i] > max) max = x[i];
    float sum = 0.0f;
    for (size_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (size_t i = 0; i < n; i++)
        x[i] *= inv;
}

void pg_ref_silu(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] / (1.0f + expf(-x[i]));
}

void pg_ref_swiglu(float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void pg_ref_matmul_rows(float *out, const float *x, const void *w, pg_dtype wtype,
                        const float *bias, size_t M, size_t N, size_t K, size_t n0, size_t n1,
                        float *scratch) {
    size_t row_bytes = pg_dtype_row_bytes(wtype, K);
    for (size_t n = n0; n < n1; n++) {
        const void *wr = (const uint8_t *)w + n * row_bytes;
        if (wtype != PG_F32 && wtype != PG_F16 && wtype != PG_BF16) pg_dequant_row(wtype, wr, scratch, K);
        float b = bias ? bias[n] : 0.0f;
        for (size_t m = 0; m < M; m++) {
            const float *xm = x + m * K;
            float s;
            switch (wtype) {
            case PG_F16:
                s = pg_ref_dot_f16_f32(wr, xm, K);
                break;
            case PG_BF16:
                s = pg_ref_dot_bf16_f32(wr, xm, K);
                break;
            case PG_F32:
                s = pg_ref_dot_f32(wr, xm, K);
                break;
            default:
                s = pg_ref_dot_f32(scratch, xm, K);
                break;
            }
            out[m * N + n] = s + b;
        }
    }
}

void pg_ref_swiglu_oai(float *out, const float *gate, const float *up, size_t n, float limit,
                       float alpha) {
    for (size_t i = 0; i < n; i++) {
        float g = gate[i] < limit ? gate[i] : limit;
        float u = up[i] < -limit ? -limit : (up[i] > limit ? limit : up[i]);
        float glu = g * (1.0f / (1.0f + expf(-(alpha * g))));
        out[i] = (u + 1.0f) * glu;
    }
}

void pg_ref_layernorm(float *out, const float *x, const float *w, const float *b, size_t m,
                      size_t n, float eps) {
    for (size_t r = 0; r < m; r++) {
        const float *xr = x + r * n;
        float *yr = out + r * n;
        float sum = 0.0f;
        for (size_t i = 0; i < n; i++)
            sum += xr[i];
        const float mean = sum / (float)n;
        float ss = 0.0f;
        for (size_t i = 0; i < n; i++) {
            const float d = xr[i] - mean;
            ss += d * d;
        }
        const float rstd = 1.0f / sqrtf(ss / (float)n + eps);
        for (size_t i = 0; i < n; i++)
            yr[i] = (xr[i] - mean) * rstd * w[i] + (b ? b[i] : 0.0f);
    }
}

void pg_ref_gelu(float *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}
