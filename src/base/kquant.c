/* GGUF K-quant block decoding (kquant.h). */
#include "base/kquant.h"

#include <string.h>

int pg_kq_is_kquant(pg_dtype t) {
    return t == PG_Q4_K || t == PG_Q5_K || t == PG_Q6_K;
}

int pg_kq_bits(pg_dtype t) {
    return t == PG_Q4_K ? 4 : t == PG_Q5_K ? 5 : t == PG_Q6_K ? 6 : 0;
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
        const float dm = 32.0f * pg_f16_to_f32(out->d);
        out->dm = pg_f32_to_f16(dm);
        return pg_f16_to_f32(out->dm) == dm || dm != dm ? 0 : -1;
    }
    return -2;
}

void pg_kq_dequant_row(pg_dtype t, const void *src, float *dst, int64_t n) {
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
        const float dmin = pg_f16_to_f32(k.dm);
        for (int s = 0; s < 8; s++) {
            const float d1 = d * (float)k.sc[s], m1 = dmin * (float)k.m[s];
            for (int e = 32 * s; e < 32 * s + 32; e++)
                y[e] = d1 * (float)k.u[e] - m1;
        }
    }
}
