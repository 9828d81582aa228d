/* GGUF K-quant block decoding (kquant.h). */
#include "base/kquant.h"

#include <string.h>

const int8_t pg_iq4nl_kvalues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

int pg_kq_is_kquant(pg_dtype t) {
    return t == PG_Q4_K || t == PG_Q5_K || t == PG_Q6_K || t == PG_Q2_K || t == PG_Q3_K;
}

int pg_kq_in_gemm(pg_dtype t) {
    return pg_kq_is_kquant(t) || t == PG_IQ4_XS || t == PG_IQ4_NL;
}

int pg_kq_codebook(pg_dtype t) {
    return t == PG_IQ4_XS || t == PG_IQ4_NL;
}

int pg_kq_fscale(pg_dtype t) {
    return t == PG_IQ4_NL;
}

size_t pg_kq_super_bytes(pg_dtype t) {
    if (!pg_kq_in_gemm(t)) return 0;
    return PG_QK_K / pg_dtype_block_elems(t) * pg_dtype_block_bytes(t);
}

int pg_kq_bits(pg_dtype t) {
    return t == PG_Q4_K || t == PG_Q2_K || t == PG_Q3_K || t == PG_IQ4_XS || t == PG_IQ4_NL ? 4
           : t == PG_Q5_K                                                                   ? 5
           : t == PG_Q6_K                                                                   ? 6
                                                                                            : 0;
}

int pg_kq_sub(pg_dtype t) {
    return t == PG_Q4_K || t == PG_Q5_K || pg_kq_codebook(t) ? 32 : pg_kq_is_kquant(t) ? 16 : 0;
}

int pg_kq_has_min(pg_dtype t) {
    return t == PG_Q4_K || t == PG_Q5_K || t == PG_Q2_K;
}

int pg_iq4xs_scale(const void *blk, int s) {
    const uint8_t *b = blk;
    const int sh = b[2] | b[3] << 8;
    return ((b[4 + s / 2] >> (4 * (s % 2))) & 15) | ((sh >> (2 * s)) & 3) << 4;
}

/* dm = f * d as an F16 (f a power of two); 0, or -1 when it is not exact. */
static int scaled_dm(pg_kq_block *out, float f) {
    const float dm = f * pg_f16_to_f32(out->d);
    out->dm = pg_f32_to_f16(dm);
    return pg_f16_to_f32(out->dm) == dm || dm != dm ? 0 : -1;
}

static uint16_t rd16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* The 6-bit scale and min of sub-block s (0..7) from Q4_K / Q5_K's 12 bytes. */
static void scale_min(const uint8_t *b, int s, int8_t *sc, int8_t *m) {
    if (s < 4) {
        *sc = (int8_t)(b[s] & 63);
        *m = (int8_t)(b[s + 4] & 63);
    } else {
        *sc = (int8_t)((b[s + 4] & 15) | (b[s - 4] >> 6) << 4);
        *m = (int8_t)((b[s + 4] >> 4) | (b[s] >> 6) << 4);
    }
}

int pg_kq_decode(pg_dtype t, const void *blk, pg_kq_block *out) {
    const uint8_t *b = blk;
    if (t == PG_Q4_K || t == PG_Q5_K) {
        const uint8_t *qh = b + 16, *qs = t == PG_Q5_K ? b + 48 : b + 16;
        out->d = rd16(b);
        out->dm = rd16(b + 2);
        out->sub = 32;
        for (int s = 0; s < 8; s++)
            scale_min(b + 4, s, &out->sc[s], &out->m[s]);
        for (int e = 0; e < PG_QK_K; e++) {
            const int r = e % 64, byte = qs[32 * (e / 64) + e % 32];
            int q = r < 32 ? (byte & 15) : (byte >> 4);
            if (t == PG_Q5_K) q += 16 * ((qh[e % 32] >> (2 * (e / 64) + (r >= 32))) & 1);
            out->u[e] = (uint8_t)q;
        }
        return 0;
    }
    if (t == PG_Q6_K) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        out->d = rd16(b + 208);
        out->sub = 16;
        for (int s = 0; s < 16; s++)
            out->sc[s] = out->m[s] = sc[s];
        for (int e = 0; e < PG_QK_K; e++) {
            const int h = e / 128, j = (e % 128) / 32, l = e % 32;
            const int lb = ql[64 * h + l + 32 * (j & 1)];
            const int lo = j < 2 ? (lb & 15) : (lb >> 4);
            out->u[e] = (uint8_t)(lo | ((qh[32 * h + l] >> (2 * j)) & 3) << 4);
        }
        return scaled_dm(out, 32.0f);
    }
    if (t == PG_Q2_K) {
        const uint8_t *qs = b + 16;
        out->d = rd16(b + 80);
        out->dm = rd16(b + 82);
        out->sub = 16;
        for (int s = 0; s < 16; s++) {
            out->sc[s] = (int8_t)(b[s] & 15);
            out->m[s] = (int8_t)(b[s] >> 4);
        }
        for (int e = 0; e < PG_QK_K; e++)
            out->u[e] = (uint8_t)((qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
        return 0;
    }
    if (t == PG_Q3_K) {
        const uint8_t *hm = b, *qs = b + 32, *sb = b + 96;
        out->d = rd16(b + 108);
        out->sub = 16;
        for (int s = 0; s < 16; s++) {
            const int lo = s < 8 ? sb[s] & 15 : sb[s - 8] >> 4;
            const int hi = (sb[8 + s % 4] >> (2 * (s / 4))) & 3;
            out->sc[s] = out->m[s] = (int8_t)((lo | hi << 4) - 32);
        }
        for (int e = 0; e < PG_QK_K; e++) {
            const int h = e / 128, j = (e % 128) / 32, l = e % 32;
            const int lo = (qs[32 * h + l] >> (2 * j)) & 3, hb = (hm[l] >> (4 * h + j)) & 1;
            out->u[e] = (uint8_t)(lo | hb << 2); /* q + 4 */
        }
        return scaled_dm(out, 4.0f);
    }
    if (t == PG_IQ4_XS) {
        const uint8_t *qs = b + 8;
        out->d = rd16(b);
        out->dm = 0;
        out->sub = 32;
        for (int s = 0; s < 8; s++) {
            out->sc[s] = out->m[s] = (int8_t)(pg_iq4xs_scale(b, s) - 32);
            for (int j = 0; j < 16; j++) {
                out->u[32 * s + j] = qs[16 * s + j] & 15;
                out->u[32 * s + j + 16] = qs[16 * s + j] >> 4;
            }
        }
        return 0;
    }
    if (t == PG_IQ4_NL) {
        memset(out, 0, sizeof *out);
        out->sub = 32;
        for (int s = 0; s < 8; s++) {
            const uint8_t *blk32 = b + 18 * s;
            out->ds[s] = rd16(blk32);
            for (int j = 0; j < 16; j++) {
                out->u[32 * s + j] = blk32[2 + j] & 15;
                out->u[32 * s + j + 16] = blk32[2 + j] >> 4;
            }
        }
        return 0;
    }
    return -2;
}

/* IQ4_NL / IQ4_XS rows (dequantize_row_iq4_nl / _xs). */
static void iq4_dequant_row(pg_dtype t, const uint8_t *b, float *y, int64_t n) {
    const int8_t *kv = pg_iq4nl_kvalues;
    if (t == PG_IQ4_NL) {
        for (int64_t i = 0; i < n / 32; i++, b += 18, y += 32) {
            const float d = pg_f16_to_f32(rd16(b));
            for (int j = 0; j < 16; j++) {
                y[j] = d * (float)kv[b[2 + j] & 15];
                y[j + 16] = d * (float)kv[b[2 + j] >> 4];
            }
        }
        return;
    }
    for (int64_t i = 0; i < n / PG_QK_K; i++, b += 136) {
        const float d = pg_f16_to_f32(rd16(b));
        for (int s = 0; s < 8; s++, y += 32) {
            const float dl = d * (float)(pg_iq4xs_scale(b, s) - 32);
            const uint8_t *qs = b + 8 + 16 * s;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)kv[qs[j] & 15];
                y[j + 16] = dl * (float)kv[qs[j] >> 4];
            }
        }
    }
}

void pg_kq_dequant_row(pg_dtype t, const void *src, float *dst, int64_t n) {
    if (t == PG_IQ4_NL || t == PG_IQ4_XS) {
        iq4_dequant_row(t, src, dst, n);
        return;
    }
    const size_t bb = pg_dtype_block_bytes(t);
    pg_kq_block k;
    for (int64_t b = 0; b < n / PG_QK_K; b++) {
        (void)pg_kq_decode(t, (const uint8_t *)src + (size_t)b * bb, &k);
        float *y = dst + b * PG_QK_K;
        const float d = pg_f16_to_f32(k.d);
        if (t == PG_Q6_K) {
            for (int e = 0; e < PG_QK_K; e++)
                y[e] = d * (float)k.sc[e / 16] * (float)((int)k.u[e] - 32);
            continue;
        }
        if (t == PG_Q3_K) {
            for (int e = 0; e < PG_QK_K; e++)
                y[e] = d * (float)k.sc[e / 16] * (float)((int)k.u[e] - 4);
            continue;
        }
        const float dmin = pg_f16_to_f32(k.dm);
        for (int s = 0; s < PG_QK_K / k.sub; s++) {
            const float d1 = d * (float)k.sc[s], m1 = dmin * (float)k.m[s];
            for (int e = k.sub * s; e < k.sub * s + k.sub; e++)
                y[e] = d1 * (float)k.u[e] - m1;
        }
    }
}
