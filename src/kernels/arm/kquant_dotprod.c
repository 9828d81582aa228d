/* K-quant GEMM microkernels with SDOT (FEAT_DotProd) (pg_kernel_table.q2_k
 * .. q6_k, dispatch.h; spec pg_ref_kq_gemm, bitwise equal to
 * pg_ref_kq_uk_*).
 *
 * Up to 2 rows x 32 columns on the packed layout of gemm_kquant.c (shared
 * with x86): a 16-byte quarter of a 64-byte k-chunk is 4 columns x 4 k, the
 * operand of one SDOT against the row's 4 activations of that chunk
 * (duplicated in every lane). The panel runs as two halves of 16 columns
 * (the low nibbles, then the high ones) so the int32 sums of a sub-block
 * (I), the super-block's sum P and the minimum term Q fit the 32 vector
 * registers. The weights u (0..63) are non-negative and fit int8, so SDOT
 * takes them as they are. Per sub-block P += I * sc (MLA); Q = sum_s m[s] *
 * (activation sum of s) by MLA with a scalar; then y = fma(P, d a_s, y), y
 * = fms(Q, dm a_s, y) per super-block (FMLA / FMLS: fused, as the spec's
 * fmaf). IQ4_XS (cb): TBL (vqtbl1q_s8) maps the nibbles to the signed
 * codebook values, which SDOT takes as they are; no minimum term. IQ4_NL
 * (fs): each sub-block's sums go straight to the outputs, y = fma(I, ds *
 * a_s, y) with the sub-block's F16 scales ds. */
#include <arm_neon.h>
#include <string.h>

#include "base/kquant.h"
#include "kernels/arm/arm.h"
#include "kernels/gemm_driver.h"
#include "kernels/kquant_uk.h"

enum { MR = 2, NQ = 4 };

static inline __attribute__((always_inline)) int32x4_t widen4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    const int16x8_t h = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(v)));
    return vmovl_s16(vget_low_s16(h));
}

static inline __attribute__((always_inline)) float32x4_t f16x4(const char *p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p)));
}

static inline __attribute__((always_inline)) void
tile(const int mr, const int bits, const int sub, const int has_min, const int cb, const int fs,
     int64_t ng, const int8_t *a, int64_t as, const float *asc, int64_t ass, const int32_t *ac,
     int64_t acs, const char *w, float *c, int64_t ldc, int accumulate) {
    const pg_kq_shape sh = pg_kq_shape_of(bits, sub, has_min, fs);
    const int S = sh.S, cps = sh.cps, hb = sh.hb, per = sh.per;
    const uint8x16_t lo = vdupq_n_u8(0x0F);
    const uint8x16_t hm = vdupq_n_u8((uint8_t)(((1 << hb) - 1) << 4));
    const int8x16_t kv = vld1q_s8(pg_iq4nl_kvalues);
    for (int64_t g = 0; g < ng; g++) {
        const pg_kq_view gv = pg_kq_view_at(w, g, &sh, has_min);
        const char *grp = gv.grp;
        const int8_t *sc = gv.sc, *mm = gv.m;
        const uint8_t *nib = gv.nib;
        const int8_t *ag = a + g * 256;
        for (int h = 0; h < 2; h++) {
            int32x4_t P[MR][NQ], I[MR][NQ];
            float32x4_t Y[MR][NQ]; /* fs: the outputs, one FMLA per sub-block */
            for (int i = 0; i < mr; i++)
                for (int q = 0; q < NQ; q++) {
                    P[i][q] = vdupq_n_s32(0);
                    if (fs)
                        Y[i][q] = accumulate || g ? vld1q_f32(c + i * ldc + 16 * h + 4 * q)
                                                  : vdupq_n_f32(0.0f);
                }
            for (int s = 0; s < S; s++) {
                for (int i = 0; i < mr; i++)
                    for (int q = 0; q < NQ; q++)
                        I[i][q] = vdupq_n_s32(0);
                for (int cc = 0; cc < cps; cc++) {
                    const int ch = s * cps + cc;
                    int8x16_t wq[NQ];
                    const int8x16_t shv = vdupq_n_s8((int8_t)(4 - hb * (2 * (ch % per) + h)));
                    for (int q = 0; q < NQ; q++) {
                        const uint8x16_t x = vld1q_u8(nib + ch * 64 + 16 * q);
                        uint8x16_t u = h ? vshrq_n_u8(x, 4) : vandq_u8(x, lo);
                        if (hb) {
                            const uint8x16_t hp =
                                vld1q_u8(nib + PG_KQ_NIB_BYTES + (ch / per) * 64 + 16 * q);
                            u = vorrq_u8(u, vandq_u8(vshlq_u8(hp, shv), hm));
                        }
                        wq[q] = cb ? vqtbl1q_s8(kv, u) : vreinterpretq_s8_u8(u);
                    }
                    for (int i = 0; i < mr; i++) {
                        int32_t a4;
                        memcpy(&a4, ag + i * as + 4 * ch, 4);
                        const int8x16_t av = vreinterpretq_s8_s32(vdupq_n_s32(a4));
                        for (int q = 0; q < NQ; q++)
                            I[i][q] = vdotq_s32(I[i][q], wq[q], av);
                    }
                }
                if (fs) {
                    for (int q = 0; q < NQ; q++) {
                        const float32x4_t ds = f16x4(grp + 2 * (s * PG_KQ_NR + 16 * h + 4 * q));
                        for (int i = 0; i < mr; i++)
                            Y[i][q] = vfmaq_f32(Y[i][q], vcvtq_f32_s32(I[i][q]),
                                                vmulq_n_f32(ds, asc[i * ass + g]));
                    }
                    continue;
                }
                for (int q = 0; q < NQ; q++) {
                    const int32x4_t scv = widen4(sc + s * PG_KQ_NR + 16 * h + 4 * q);
                    for (int i = 0; i < mr; i++)
                        P[i][q] = vmlaq_s32(P[i][q], I[i][q], scv);
                }
            }
            if (fs) {
                for (int i = 0; i < mr; i++)
                    for (int q = 0; q < NQ; q++)
                        vst1q_f32(c + i * ldc + 16 * h + 4 * q, Y[i][q]);
                continue;
            }
            /* Q into I (none for the codebook types) */
            for (int i = 0; i < mr; i++)
                for (int q = 0; q < NQ; q++)
                    I[i][q] = vdupq_n_s32(0);
            if (!cb)
                for (int s = 0; s < S; s++)
                    for (int q = 0; q < NQ; q++) {
                        const int32x4_t mv = widen4(mm + s * PG_KQ_NR + 16 * h + 4 * q);
                        for (int i = 0; i < mr; i++) {
                            const int16_t *bs = (const int16_t *)(ac + i * acs) + 16 * g;
                            int32_t b = 0;
                            for (int t = s * sub / 16; t < (s + 1) * sub / 16; t++)
                                b += bs[t];
                            I[i][q] = vmlaq_n_s32(I[i][q], mv, b);
                        }
                    }
            for (int q = 0; q < NQ; q++) {
                const float32x4_t d = f16x4(grp + 2 * (16 * h + 4 * q));
                const float32x4_t dm = f16x4(grp + 2 * PG_KQ_NR + 2 * (16 * h + 4 * q));
                for (int i = 0; i < mr; i++) {
                    const float ai = asc[i * ass + g];
                    float *ci = c + i * ldc + 16 * h + 4 * q;
                    float32x4_t y = accumulate || g ? vld1q_f32(ci) : vdupq_n_f32(0.0f);
                    y = vfmaq_f32(y, vcvtq_f32_s32(P[i][q]), vmulq_n_f32(d, ai));
                    if (!cb) y = vfmsq_f32(y, vcvtq_f32_s32(I[i][q]), vmulq_n_f32(dm, ai));
                    vst1q_f32(ci, y);
                }
            }
        }
    }
}

#define KQ_UK(NAME, BITS, SUB, MIN, CB, FS)                                                        \
    void NAME(int64_t ngroups, int64_t gk, const void *a, int64_t a_stride, const float *as,       \
              int64_t as_stride, const int32_t *ac, int64_t ac_stride, const void *w, float *c,    \
              int64_t ldc, int mr, int accumulate) {                                               \
        (void)gk;                                                                                  \
        if (mr == 1)                                                                               \
            tile(1, BITS, SUB, MIN, CB, FS, ngroups, a, a_stride, as, as_stride, ac, ac_stride, w, \
                 c, ldc, accumulate);                                                              \
        else                                                                                       \
            tile(MR, BITS, SUB, MIN, CB, FS, ngroups, a, a_stride, as, as_stride, ac, ac_stride,   \
                 w, c, ldc, accumulate);                                                           \
    }
PG_KQ_ROWS(KQ_UK, pg_dotprod_kq_uk)
