#include "base/dtype.h"

#include "base/kquant.h"

static const struct {
    const char *name;
    size_t block_elems, block_bytes;
} DTYPES[PG_DTYPE_COUNT] = {
    [PG_F32] = {"F32", 1, 4},   [PG_F16] = {"F16", 1, 2},    [PG_BF16] = {"BF16", 1, 2},
    [PG_Q8_0] = {"Q8_0", 32, 34}, [PG_Q4_0] = {"Q4_0", 32, 18}, [PG_I8] = {"I8", 1, 1},
    [PG_U8] = {"U8", 1, 1},     [PG_I16] = {"I16", 1, 2},    [PG_I32] = {"I32", 1, 4},
    [PG_I64] = {"I64", 1, 8},   [PG_F64] = {"F64", 1, 8},    [PG_BOOL] = {"BOOL", 1, 1},
    [PG_MXFP4] = {"MXFP4", 32, 17},
    [PG_Q4_K] = {"Q4_K", 256, 144}, [PG_Q5_K] = {"Q5_K", 256, 176}, [PG_Q6_K] = {"Q6_K", 256, 210},
    [PG_Q2_K] = {"Q2_K", 256, 84},  [PG_Q3_K] = {"Q3_K", 256, 110}, [PG_IQ4_NL] = {"IQ4_NL", 32, 18},
    [PG_IQ4_XS] = {"IQ4_XS", 256, 136},
};

const int8_t pg_mxfp4_kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

const char *pg_dtype_name(pg_dtype t) {
    return (unsigned)t < PG_DTYPE_COUNT ? DTYPES[t].name : "?";
}
size_t pg_dtype_block_elems(pg_dtype t) {
    return (unsigned)t < PG_DTYPE_COUNT ? DTYPES[t].block_elems : 0;
}
size_t pg_dtype_block_bytes(pg_dtype t) {
    return (unsigned)t < PG_DTYPE_COUNT ? DTYPES[t].block_bytes : 0;
}
size_t pg_dtype_row_bytes(pg_dtype t, size_t n) {
    size_t be = pg_dtype_block_elems(t);
    if (!be || n % be) return 0;
    return n / be * pg_dtype_block_bytes(t);
}

float pg_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while (!(mant & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t pg_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t exp = (u >> 23) & 0xff;
    uint32_t mant = u & 0x7fffff;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 | (mant >> 13) : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00);
    if (e <= 0) { /* subnormal or zero */
        if (e < -10) return (uint16_t)sign;
        mant |= 0x800000;
        int shift = 14 - e;
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++; /* may carry into exp: ok */
    return (uint16_t)(sign | half);
}

void pg_dequant_row(pg_dtype t, const void *src, float *dst, size_t n) {
    const uint8_t *s = src;
    switch (t) {
    case PG_F32:
        memcpy(dst, src, n * 4);
        break;
    case PG_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = pg_f16_to_f32(h);
        }
        break;
    case PG_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = pg_bf16_to_f32(h);
        }
        break;
    case PG_Q8_0:
        for (size_t b = 0; b < n / 32; b++, s += 34) {
            uint16_t dh;
            memcpy(&dh, s, 2);
            float d = pg_f16_to_f32(dh);
            for (int j = 0; j < 32; j++) dst[b * 32 + j] = d * (float)(int8_t)s[2 + j];
        }
        break;
    case PG_Q4_0:
        for (size_t b = 0; b < n / 32; b++, s += 18) {
            uint16_t dh;
            memcpy(&dh, s, 2);
            float d = pg_f16_to_f32(dh);
            for (int j = 0; j < 16; j++) {
                dst[b * 32 + j] = d * (float)((s[2 + j] & 0x0f) - 8);
                dst[b * 32 + j + 16] = d * (float)((s[2 + j] >> 4) - 8);
            }
        }
        break;
    case PG_MXFP4: /* llama.cpp ggml-quants.c dequantize_row_mxfp4 */
        for (size_t b = 0; b < n / 32; b++, s += 17) {
            const float d = pg_e8m0_half_to_f32(s[0]);
            for (int j = 0; j < 16; j++) {
                dst[b * 32 + j] = (float)pg_mxfp4_kvalues[s[1 + j] & 0x0f] * d;
                dst[b * 32 + j + 16] = (float)pg_mxfp4_kvalues[s[1 + j] >> 4] * d;
            }
        }
        break;
    case PG_Q4_K:
    case PG_Q5_K:
    case PG_Q6_K:
    case PG_Q2_K:
    case PG_Q3_K:
    case PG_IQ4_NL:
    case PG_IQ4_XS:
        pg_kq_dequant_row(t, src, dst, (int64_t)n);
        break;
    default:
        memset(dst, 0, n * 4);
        break;
    }
}
