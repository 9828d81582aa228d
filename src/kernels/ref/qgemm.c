/* Scalar quantized GEMM: the reference microkernels (the "scalar" table's
 * qgemm entries) and the specification pg_ref_qgemm on unpacked data. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "kernels/dispatch.h"
#include "kernels/qgemm.h"
#include "kernels/ref/ref.h"

float pg_ref_amax_f32(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float v = fabsf(x[i]);
        m = v > m ? v : m;
    }
    return m;
}

int32_t pg_ref_quant_i8(const float *x, size_t n, float inv, int8_t *q) {
    int32_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        float v = x[i] * inv;
        v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
        v = rintf(v);
        q[i] = (int8_t)v;
        sum += q[i];
    }
    return sum;
}

/* The scalar layout: mr 4, nr 8, kg 4, ar 1, vw 16, signed activations. */
enum { REF_NR = 8, REF_KG = 4, REF_VW = 16 };

/* Weight q[j][k] of one group's packed data (group-local k). */
static int ref_wq(const int8_t *d, int bits, int64_t k, int j) {
    int64_t s = (k / REF_KG) * REF_NR * REF_KG + (int64_t)j * REF_KG + k % REF_KG;
    if (bits == 8) return d[s];
    int64_t b = s / (2 * REF_VW), in = s % (2 * REF_VW);
    uint8_t byte = (uint8_t)d[b * REF_VW + in % REF_VW];
    int v = in < REF_VW ? (byte & 0xF) : (byte >> 4);
    return v >= 8 ? v - 16 : v;
}

static void ref_uk(int bits, int hs, int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                   const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                   const void *w, float *c, int64_t ldc, int mr, int accumulate) {
    const int8_t *ap = a;
    const size_t hbytes = (size_t)REF_NR * (hs ? 2 : 4);
    const size_t gbytes = hbytes + (size_t)(gk * REF_NR * bits / 8);
    for (int i = 0; i < mr; i++) {
        for (int j = 0; j < REF_NR; j++) {
            float y = accumulate ? c[i * ldc + j] : 0.0f;
            for (int64_t g = 0; g < ngroups; g++) {
                const char *grp = (const char *)w + (size_t)g * gbytes;
                float s;
                if (hs) {
                    uint16_t h;
                    memcpy(&h, grp + j * 2, 2);
                    s = pg_f16_to_f32(h);
                } else {
                    memcpy(&s, grp + j * 4, 4);
                }
                const int8_t *d = (const int8_t *)(grp + hbytes);
                const int8_t *ar = ap + i * a_stride + g * gk;
                int32_t isum = 0;
                for (int64_t k = 0; k < gk; k++)
                    isum += (int32_t)ar[k] * ref_wq(d, bits, k, j);
                if (as) s = s * as[i * as_stride + g];
                y = fmaf((float)isum, s, y);
            }
            c[i * ldc + j] = y;
        }
    }
}

void pg_ref_qgemm_uk_w8(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                        const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                        const void *w, float *c, int64_t ldc, int mr, int accumulate) {
    ref_uk(8, 0, ngroups, gk, a, a_stride, as, as_stride, ac, ac_stride, w, c, ldc, mr, accumulate);
}
void pg_ref_qgemm_uk_w4(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                        const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                        const void *w, float *c, int64_t ldc, int mr, int accumulate) {
    ref_uk(4, 0, ngroups, gk, a, a_stride, as, as_stride, ac, ac_stride, w, c, ldc, mr, accumulate);
}
void pg_ref_qgemm_uk_w8_hs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                           const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                           const void *w, float *c, int64_t ldc, int mr, int accumulate) {
    ref_uk(8, 1, ngroups, gk, a, a_stride, as, as_stride, ac, ac_stride, w, c, ldc, mr, accumulate);
}
void pg_ref_qgemm_uk_w4_hs(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride,
                           const float *as, int64_t as_stride, const int32_t *ac, int64_t ac_stride,
                           const void *w, float *c, int64_t ldc, int mr, int accumulate) {
    ref_uk(4, 1, ngroups, gk, a, a_stride, as, as_stride, ac, ac_stride, w, c, ldc, mr, accumulate);
}

/* as_g: per-group activation scales, or NULL (per token: applied by the
 * caller). */
static float ref_qdot(const pg_qweight *w, int64_t n, const int8_t *qa, const float *as_g) {
    const int64_t K = w->K, G = w->group ? w->group : K;
    const int64_t ng = pg_qweight_ngroups(K, w->group);
    float y = 0.0f;
    for (int64_t g = 0; g < ng; g++) {
        int32_t isum = 0;
        for (int64_t k = g * G; k < K && k < (g + 1) * G; k++)
            isum += (int32_t)qa[k] * w->q[n * K + k];
        float s = w->scale[n * ng + g];
        if (as_g) s = s * as_g[g];
        y = fmaf((float)isum, s, y);
    }
    return y;
}

void pg_ref_qgemm_store(float *c, float y, float u, const float *bias, int64_t N, int64_t n,
                        int ep) {
    if (ep == PG_GEMM_SWIGLU) {
        if (bias) y += bias[n], u += bias[N + n];
        /* the process table's swiglu_f32, as the driver's epilogue */
        pg_kernels()->swiglu_f32(c, &y, &u, 1);
        return;
    }
    if (bias) y += bias[n];
    if (ep == PG_GEMM_RESIDUAL)
        *c += y;
    else
        *c = y;
}

void pg_ref_qgemm(const pg_qweight *w, const pg_qweight *w_up, const float *A, int64_t M,
                  int64_t lda, float *C, int64_t ldc, const float *bias, int ep) {
    const int64_t N = w->N, K = w->K;
    const int64_t ng = pg_qweight_ngroups(K, w->group), G = w->group ? w->group : K;
    int8_t *qa = malloc((size_t)K);
    float *asg = malloc((size_t)ng * sizeof(float));
    if (!qa || !asg) abort();
    const int per_group = w->act_group && w->group > 0;
    for (int64_t m = 0; m < M; m++) {
        float as = 1.0f;
        if (per_group)
            for (int64_t g = 0; g < ng; g++) {
                int64_t k1 = (g + 1) * G < K ? (g + 1) * G : K;
                pg_qgemm_quantize_row(A + m * lda + g * G, k1 - g * G, qa + g * G, &asg[g]);
            }
        else
            pg_qgemm_quantize_row(A + m * lda, K, qa, &as);
        const float *ag = per_group ? asg : NULL;
        for (int64_t n = 0; n < N; n++) {
            float y = ref_qdot(w, n, qa, ag), u = 0.0f;
            if (!per_group) y = y * as;
            if (ep == PG_GEMM_SWIGLU) {
                u = ref_qdot(w_up, n, qa, ag);
                if (!per_group) u = u * as;
            }
            pg_ref_qgemm_store(&C[m * ldc + n], y, u, bias, N, n, ep);
        }
    }
    free(qa);
    free(asg);
}
