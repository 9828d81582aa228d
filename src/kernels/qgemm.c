/* The W8A8 and W4A8 weight formats of the GEMM driver (gemm_driver.h; the
 * arithmetic is qgemm.h's): weight quantization, packing, the per-token
 * activation quantization (input stage, with the fused RMSNorm), the tile
 * call and the fused epilogues. The driver blocks K at group boundaries
 * only, so the float accumulation order (one fmaf per group, groups
 * increasing) never depends on M or on the blocking. */
#include "kernels/qgemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/kquant.h"
#include "base/log.h"
#include "kernels/gemm_driver.h"
#include "kernels/ref/ref.h"

/* K blocks of KC_ELEMS k (KC_SMALL_M when M <= PG_GEMM_PF_MAX_ROWS: the next-slice
 * prefetch keeps up with slices of that size; larger M: fewer, longer
 * microkernel calls, +2-3% at M=512 on Zen 4, docs/PERFORMANCE.md);
 * MC_MAX rows (rounded up to whole tiles) of acc over NC_ELEMS columns =
 * 256 KiB (L2). */
enum {
    KC_ELEMS = 4096,
    KC_SMALL_M = 1024,
    NC_ELEMS = 128,
    MC_MAX = 512,
    QCHUNK = 256,
    ACT_GROUP_MAX = 4096,
    QMAX_NR = 64,
    PF_TILE_LINES = 64,
    EPI_PF_ROWS = 8
};


int64_t pg_qweight_ngroups(int64_t K, int64_t group) {
    return group > 0 ? pg_ceil_div64(K, group) : 1;
}
int64_t pg_qgemm_n(const pg_qpacked *w) {
    return w->N;
}
int64_t pg_qgemm_k(const pg_qpacked *w) {
    return w->K;
}
int pg_qgemm_bits(const pg_qpacked *w) {
    return w->bits;
}
int64_t pg_qgemm_group(const pg_qpacked *w) {
    return w->group;
}
int pg_qgemm_is_swiglu(const pg_qpacked *w) {
    return w->swiglu;
}
size_t pg_qgemm_packed_bytes(const pg_qpacked *w) {
    return w->bytes;
}
const void *pg_qgemm_packed_data(const pg_qpacked *w) {
    return w->data;
}
int64_t pg_qgemm_act_group(const pg_qpacked *w) {
    return w->act_group ? w->group : 0;
}
const char *pg_qgemm_variant(const pg_qpacked *w) {
    return w->quk.name;
}

void pg_qgemm_free(pg_qpacked *w) {
    pg_gemm_free(w);
}

/* ---- quantization */

void pg_qgemm_quantize_row(const float *a, int64_t K, int8_t *q, float *scale) {
    float m = pg_ref_amax_f32(a, (size_t)K);
    float inv = m > 0.0f ? 127.0f / m : 0.0f;
    *scale = m / 127.0f;
    (void)pg_ref_quant_i8(a, (size_t)K, inv, q);
}

static float src_at(pg_dtype t, const void *W, int64_t i) {
    if (t == PG_F32) return ((const float *)W)[i];
    uint16_t h = ((const uint16_t *)W)[i];
    return t == PG_F16 ? pg_f16_to_f32(h) : pg_bf16_to_f32(h);
}

/* rintf(p) for |p| < 2^22 without a branch: adding 1.5 * 2^23 leaves no
 * fraction bits, so the add rounds to nearest even and the subtraction is
 * exact. Where the compiler may fuse x * inv + C into one FMA (Arm, or an
 * FMA target) the product would round only once: rintf there (one
 * instruction on those targets anyway). */
static inline float round_small(float p) {
#if defined(__aarch64__) || defined(__FP_FAST_FMAF)
    return rintf(p);
#else
    const float c = 0x1.8p23f;
    return (p + c) - c;
#endif
}

/* Squared error of quantizing x[0..n) with scale d into [lo, hi]
 * (|x / d| <= 127 / 0.76 here: the scales come from the group's maximum).
 * Four partial sums in a fixed order and branch-free rounding, so the
 * compiler vectorizes it: a single running double sum made this search
 * (13 scales per W4 group) most of a W4 load's time. */
static double q_err(const float *x, int64_t n, float d, float lo, float hi) {
    float inv = d != 0.0f ? 1.0f / d : 0.0f;
    double e0 = 0, e1 = 0, e2 = 0, e3 = 0;
    int64_t k = 0;
    for (; k + 4 <= n; k += 4) {
        float v[4];
        double r[4];
        for (int j = 0; j < 4; j++) {
            v[j] = round_small(x[k + j] * inv);
            v[j] = v[j] < lo ? lo : (v[j] > hi ? hi : v[j]);
            r[j] = (double)x[k + j] - (double)d * v[j];
        }
        e0 += r[0] * r[0];
        e1 += r[1] * r[1];
        e2 += r[2] * r[2];
        e3 += r[3] * r[3];
    }
    for (; k < n; k++) {
        float v = round_small(x[k] * inv);
        v = v < lo ? lo : (v > hi ? hi : v);
        double r = (double)x[k] - (double)d * v;
        e0 += r * r;
    }
    return (e0 + e1) + (e2 + e3);
}

enum { QW_CHUNK = 1024 };

/* A scale in the normal F16 range is rounded to the nearest F16 (as GGUF
 * stores its block scales), so packing can keep it in 2 bytes exactly;
 * smaller or larger ones stay f32 (F16 subnormals would lose bits). */
static float f16_scale(float d) {
    float a = fabsf(d);
    if (!(a >= 0x1p-14f && a <= 65504.0f)) return d;
    return pg_f16_to_f32(pg_f32_to_f16(d));
}
static float keep_scale(float d) {
    return d;
}

void pg_qgemm_quantize_weight(pg_dtype src, const void *W, int64_t K, int bits, int64_t group,
                              int64_t n0, int64_t n1, int8_t *q, float *scale) {
    const int64_t G = group > 0 ? group : K, ng = pg_qweight_ngroups(K, group);
    const float lo = bits == 8 ? -127.0f : -8.0f, hi = bits == 8 ? 127.0f : 7.0f;
    /* group-wise scales are rounded to F16 (2 header bytes per column and
     * group instead of 4); a per-channel scale is streamed once per column */
    float (*rnd16)(float) = group > 0 ? f16_scale : keep_scale;
    float buf[QW_CHUNK];
    float *x = G <= QW_CHUNK ? buf : malloc((size_t)G * sizeof(float));
    if (!x) abort();
    for (int64_t n = n0; n < n1; n++) {
        for (int64_t g = 0; g < ng; g++) {
            int64_t k0 = g * G, k1 = k0 + G < K ? k0 + G : K, cnt = k1 - k0;
            float m = 0.0f, am = 0.0f;
            for (int64_t k = 0; k < cnt; k++) {
                x[k] = src_at(src, W, n * K + k0 + k);
                if (fabsf(x[k]) > am) am = fabsf(x[k]), m = x[k];
            }
            float d = rnd16(bits == 8 ? am / 127.0f : m / -8.0f);
            if (bits == 4 && d != 0.0f) {
                /* W4: search a few shrunken scales for the least squared
                 * error (the extreme may then clip by less than d / 2) */
                const float d0 = d;
                double best = q_err(x, cnt, d0, lo, hi);
                for (int i = 1; i <= 12; i++) {
                    float di = rnd16(d0 * (1.0f - 0.02f * (float)i));
                    double e = q_err(x, cnt, di, lo, hi);
                    if (e < best) best = e, d = di;
                }
            }
            float inv = d != 0.0f ? 1.0f / d : 0.0f;
            for (int64_t k = 0; k < cnt; k++) {
                float v = rintf(x[k] * inv);
                q[n * K + k0 + k] = (int8_t)(v < lo ? lo : (v > hi ? hi : v));
            }
            scale[n * ng + g] = d;
        }
    }
    if (x != buf) free(x);
}

pagoda_status pg_qgemm_from_gguf(pg_dtype t, const void *data, int64_t N, int64_t K, int8_t *q,
                                 float *scale) {
    const int64_t blk = t == PG_IQ4_XS ? 256 : 32;
    if ((t != PG_Q8_0 && t != PG_Q4_0 && t != PG_IQ4_NL && t != PG_IQ4_XS) || !data || !q ||
        !scale || N < 1 || K < 1 || K % blk)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "qgemm: from_gguf: need Q8_0/Q4_0/IQ4_NL rows with K a multiple of 32 or "
                        "IQ4_XS rows with K a multiple of 256 (%s, N=%lld, K=%lld)",
                        pg_dtype_name(t), (long long)N, (long long)K);
    const uint8_t *p = data;
    const int8_t *kv = pg_iq4nl_kvalues;
    if (t == PG_IQ4_XS) {
        for (int64_t b = 0; b < N * K / 256; b++, p += 136) {
            const float d = pg_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
            for (int s = 0; s < 8; s++) {
                int8_t *o = q + b * 256 + 32 * s;
                scale[b * 8 + s] = d * (float)(pg_iq4xs_scale(p, s) - 32); /* exact */
                for (int j = 0; j < 16; j++) {
                    o[j] = kv[p[8 + 16 * s + j] & 15];
                    o[j + 16] = kv[p[8 + 16 * s + j] >> 4];
                }
            }
        }
        return PAGODA_OK;
    }
    const int64_t nb = N * K / 32;
    for (int64_t b = 0; b < nb; b++) {
        uint16_t h = (uint16_t)(p[0] | p[1] << 8);
        scale[b] = pg_f16_to_f32(h);
        int8_t *o = q + b * 32;
        if (t == PG_Q8_0) {
            memcpy(o, p + 2, 32);
            p += 34;
        } else {
            const int off = t == PG_Q4_0 ? 8 : 0;
            for (int j = 0; j < 16; j++) {
                const int lo = p[2 + j] & 0xF, hi = p[2 + j] >> 4;
                o[j] = (int8_t)(t == PG_Q4_0 ? lo - off : kv[lo]);
                o[j + 16] = (int8_t)(t == PG_Q4_0 ? hi - off : kv[hi]);
            }
            p += 18;
        }
    }
    return PAGODA_OK;
}

/* ---- packing */

/* Write weight value v at group-local k, column c of one packed group. */
static void put_w(const pg_qpacked *pw, int8_t *d, int64_t k, int c, int v) {
    const int64_t kg = pw->quk.kg, nr = pw->quk.nr, vw = pw->quk.vw;
    int64_t s = (k / kg) * nr * kg + c * kg + k % kg;
    if (pw->bits == 8) {
        d[s] = (int8_t)v;
        return;
    }
    int64_t b = s / (2 * vw), in = s % (2 * vw);
    uint8_t *byte = (uint8_t *)&d[b * vw + in % vw];
    if (in < vw)
        *byte = (uint8_t)((*byte & 0xF0) | (v & 0xF));
    else
        *byte = (uint8_t)((*byte & 0x0F) | (v & 0xF) << 4);
}

static pagoda_status check_qweight(const pg_qweight *w, const char *what) {
    if (!w || !w->q || !w->scale)
        return pg_error(PAGODA_ERR_INVALID_ARG, "qgemm: pack: NULL %s weight", what);
    if (w->bits != 8 && w->bits != 4)
        return pg_error(PAGODA_ERR_INVALID_ARG, "qgemm: pack: bits %d (need 8 or 4)", w->bits);
    if (w->N < 1 || w->K < 1)
        return pg_error(PAGODA_ERR_INVALID_ARG, "qgemm: pack: N=%lld K=%lld must be >= 1",
                        (long long)w->N, (long long)w->K);
    if (w->group < 0 || w->group % 32)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "qgemm: pack: group size %lld (need 0 = per channel or a multiple of 32)",
                        (long long)w->group);
    if (w->act_group && w->group > ACT_GROUP_MAX)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "qgemm: pack: per-group activation scales need group <= %d (got %lld)",
                        ACT_GROUP_MAX, (long long)w->group);
    if (w->group == 0 && w->K > 65536)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "qgemm: pack: per-channel K=%lld > 65536 could overflow int32 sums; use "
                        "group-wise scales",
                        (long long)w->K);
    if (w->group > 65536)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "qgemm: pack: group size %lld > 65536 could overflow int32 sums",
                        (long long)w->group);
    return PAGODA_OK;
}

/* Checks of rows [begin, end) (both halves): values in range, scales
 * exact F16 (then packed in 2 bytes). */
typedef struct {
    const pg_qweight *h[2];
    int halves;
    int64_t ngroups;
    int8_t lo, hi;
    int bad;     /* set by any thread that finds a value out of range */
    int not_f16; /* set by any thread that finds a scale that is not an F16 */
} range_job;

static void range_rows(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    range_job *j = ctx;
    int bad = 0, not_f16 = 0;
    for (int h = 0; h < j->halves; h++) {
        const pg_qweight *s = j->h[h];
        const int8_t *q = s->q + (int64_t)begin * s->K;
        const int64_t n = ((int64_t)end - (int64_t)begin) * s->K;
        for (int64_t i = 0; i < n; i++)
            bad |= q[i] < j->lo || q[i] > j->hi;
        const float *sc = s->scale + (int64_t)begin * j->ngroups;
        const int64_t ns = ((int64_t)end - (int64_t)begin) * j->ngroups;
        for (int64_t i = 0; i < ns && !not_f16; i++) {
            float f = sc[i], back = pg_f16_to_f32(pg_f32_to_f16(f));
            not_f16 = memcmp(&f, &back, 4) != 0;
        }
    }
    if (bad) __atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);
    if (not_f16) __atomic_store_n(&j->not_f16, 1, __ATOMIC_RELAXED);
}

typedef struct {
    pg_qpacked *pw;
    const pg_qweight *h[2];
} pack_job;

/* Pack column n of half h (gate 0 / up 1): its groups' weights, the
 * compensation sum (a_u8 kernels) and the scales. */
static void pack_column(const pg_qpacked *pw, const pg_qweight *s, int h, int64_t n) {
    const pg_qgemm_ukernel *uk = &pw->quk;
    const int nr = uk->nr, bits = pw->bits;
    const int64_t K = pw->K, G = pw->gk, ng = pw->kgroups;
    const int32_t cmul = uk->a_u8 ? -128 * (bits == 4 ? 16 : 1) : 0;
    const int woff = uk->w_u8 ? (bits == 8 ? 128 : 8) : 0;
    int64_t p = n / nr;
    if (pw->swiglu) p = 2 * p + h;
    const int c = (int)(n % nr);
    char *panel = (char *)pw->data + (size_t)p * pw->panel_bytes;
    for (int64_t g = 0; g < ng; g++) {
        char *grp = panel + (size_t)g * pw->gbytes;
        int8_t *d = (int8_t *)(grp + pw->hbytes);
        int32_t sum = 0;
        /* padding k stay 0: their activations are 0 too */
        for (int64_t k = g * G; k < K && k < (g + 1) * G; k++) {
            int v = s->q[n * K + k];
            sum += v;
            put_w(pw, d, k - g * G, c, v + woff);
        }
        char *sc = grp;
        if (uk->a_u8) {
            int32_t comp = sum * cmul;
            memcpy(grp + c * 4, &comp, 4);
            sc += nr * 4;
        }
        if (pw->scale_f16) {
            uint16_t h16 = pg_f32_to_f16(s->scale[n * ng + g]);
            memcpy(sc + c * 2, &h16, 2);
        } else {
            memcpy(sc + c * 4, &s->scale[n * ng + g], 4);
        }
    }
}

/* Packed panels [begin, end): every byte of a panel (W4 nibbles of
 * neighbouring columns share bytes) is written by the one thread that owns
 * it, so the result does not depend on the split. */
static void pack_panels(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const pack_job *j = ctx;
    const pg_qpacked *pw = j->pw;
    const int64_t nr = pw->quk.nr;
    for (int64_t p = (int64_t)begin; p < (int64_t)end; p++) {
        const int h = pw->swiglu ? (int)(p % 2) : 0;
        const int64_t n0 = (pw->swiglu ? p / 2 : p) * nr;
        for (int64_t n = n0; n < n0 + nr && n < pw->N; n++)
            pack_column(pw, j->h[h], h, n);
    }
}

pagoda_status pg_qgemm_pack(const pg_qweight *w, const pg_qweight *w_up, const pg_qgemm_ukernel *uk,
                            pg_qpacked **out) {
    return pg_qgemm_pack_pool(w, w_up, uk, NULL, out);
}

pagoda_status pg_qgemm_pack_pool(const pg_qweight *w, const pg_qweight *w_up,
                                 const pg_qgemm_ukernel *uk, pg_pool *pool, pg_qpacked **out) {
    if (!out) return pg_error(PAGODA_ERR_INVALID_ARG, "qgemm: pack: NULL out");
    *out = NULL;
    pagoda_status st = check_qweight(w, "");
    if (st) return st;
    if (w_up) {
        if ((st = check_qweight(w_up, "up"))) return st;
        if (w_up->bits != w->bits || w_up->group != w->group || w_up->N != w->N ||
            w_up->K != w->K || (w_up->act_group != 0) != (w->act_group != 0))
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "qgemm: pack: gate and up differ in bits, group or shape");
    }
    if (!uk) uk = w->bits == 8 ? &pg_kernels()->qgemm_w8 : &pg_kernels()->qgemm_w4;
    if (uk->nr > QMAX_NR)
        return pg_error(PAGODA_ERR_INVALID_ARG, "qgemm: pack: microkernel %s has nr %d > %d",
                        uk->name, uk->nr, QMAX_NR);
    if (uk->bits != w->bits)
        return pg_error(PAGODA_ERR_INVALID_ARG, "qgemm: pack: microkernel %s is for W%d, not W%d",
                        uk->name, uk->bits, w->bits);
    const int bits = w->bits;
    const int use_pool = pool && pg_pool_size(pool) > 1 && w->N * w->K >= 65536;
    range_job rj = {.h = {w, w_up ? w_up : w},
                    .halves = w_up ? 2 : 1,
                    .ngroups = pg_qweight_ngroups(w->K, w->group),
                    .lo = bits == 8 ? -128 : -8,
                    .hi = bits == 8 ? 127 : 7};
    if (use_pool)
        pg_pool_parallel_for(pool, (size_t)w->N, 16, range_rows, &rj);
    else
        range_rows(&rj, 0, (size_t)w->N, 0);
    for (int h = 0; h < rj.halves && rj.bad; h++) {
        const pg_qweight *s = rj.h[h];
        for (int64_t i = 0; i < s->N * s->K; i++)
            if (s->q[i] < rj.lo || s->q[i] > rj.hi)
                return pg_error(PAGODA_ERR_INVALID_ARG,
                                "qgemm: pack: weight value %d at %lld outside [%d, %d] for W%d",
                                s->q[i], (long long)i, rj.lo, rj.hi, bits);
    }
    pg_qpacked *pw = pg_gemm_weight_new();
    if (!pw) return pg_error(PAGODA_ERR_NOMEM, "qgemm: pack: out of memory");
    pw->quk = *uk;
    pw->fmt = bits == 8 ? &pg_gemm_format_w8a8 : &pg_gemm_format_w4a8;
    pw->mr = uk->mr;
    pw->nr = uk->nr;
    pw->ar = uk->ar;
    pw->bits = bits;
    pw->swiglu = w_up != NULL;
    pw->act_group = w->act_group && w->group > 0;
    pw->N = w->N;
    pw->K = w->K;
    pw->group = w->group;
    pw->kgroups = pg_qweight_ngroups(w->K, w->group);
    pw->gk = w->group ? w->group : pg_ceil_div64(w->K, 32) * 32;
    const int nr = uk->nr;
    int64_t np = pg_ceil_div64(w->N, nr);
    pw->npanels = pw->swiglu ? 2 * np : np;
    /* F16 scales when the kernel has that form and every scale is an exact
     * F16 (widening back gives the same f32) */
    pw->scale_f16 = uk->run_hs != NULL && !rj.not_f16;
    /* header: [int32 comp (a_u8 kernels only)], scales f32 or F16 */
    pw->hbytes = (size_t)nr * ((pw->scale_f16 ? 2 : 4) + (uk->a_u8 ? 4 : 0));
    pw->gbytes = pw->hbytes + (size_t)(pw->gk * nr * bits / 8);
    pw->panel_bytes = (size_t)pw->kgroups * pw->gbytes;
    pw->bytes = (size_t)pw->npanels * pw->panel_bytes;
    pw->data = pg_alloc_huge(pw->bytes); /* zero-filled: padding stays 0 */
    if (!pw->data) {
        pg_free(pw);
        return pg_error(PAGODA_ERR_NOMEM, "qgemm: pack: cannot allocate %zu bytes", pw->bytes);
    }
    pack_job j = {pw, {w, w_up}};
    if (use_pool)
        pg_pool_parallel_for(pool, (size_t)pw->npanels, pw->swiglu ? 2 : 1, pack_panels, &j);
    else
        pack_panels(&j, 0, (size_t)pw->npanels, 0);
    *out = pw;
    return PAGODA_OK;
}

/* ---- call geometry */

/* w_u8 kernels: int32 corrections per (row, group): W8 one, -128 * sum a;
 * W4 two, 17 c and 16 c with c = -8 * sum a (dispatch.h pg_qgemm_ukernel);
 * MXFP4 one, -12 * sum a (dispatch.h, above pg_kernel_table). */
static int64_t acorr_per_group(const pg_qpacked *w) {
    if (w->kq) return 8; /* K-quants: 16 int16 activation sums (gemm_kquant.c) */
    return w->bits == 4 && !w->mxfp4 ? 2 : 1;
}

void pg_qfmt_plan(const pg_qpacked *w, int64_t M, int gathered, pg_gemm_geometry *g) {
    (void)gathered; /* the input stage copies every row anyway */
    const pg_qgemm_ukernel *uk = &w->quk;
    memset(g, 0, sizeof *g);
    g->M = M;
    int64_t mc = pg_ceil_div64(M, uk->mr) * uk->mr;
    /* MC_MAX rounded up to whole tiles: M = 512 is one block of 86 tiles
     * (6 x 83, 5, 5, 4 rows with mr 6), not 510 rows plus a 2-row block
     * whose tile per panel takes the slow decode path (+1% at M=512) */
    int64_t mc_max = pg_ceil_div64(MC_MAX, uk->mr) * uk->mr;
    g->mc = mc < mc_max ? mc : mc_max;
    g->nc_panels = NC_ELEMS / uk->nr;
    if (g->nc_panels < 2) g->nc_panels = 2;
    if (w->swiglu && (g->nc_panels & 1)) g->nc_panels++;
    int64_t kcg = (M <= PG_GEMM_PF_MAX_ROWS ? KC_SMALL_M : KC_ELEMS) / w->gk;
    g->kc_groups = M <= uk->mr || kcg < 1 ? w->kgroups : kcg;
    g->a_stride = w->kgroups * w->gk * uk->ar;
    if (g->a_stride % 1024 == 0) g->a_stride += 64;
    g->a_bytes = pg_align_up((size_t)(pg_ceil_div64(M, uk->ar) * g->a_stride));
    g->s_bytes =
        pg_align_up((size_t)(M + 1) * (size_t)(w->act_group ? w->kgroups : 1) * sizeof(float));
    g->c_bytes = uk->w_u8 ? pg_align_up((size_t)M * (size_t)(w->kgroups * acorr_per_group(w)) *
                                        sizeof(int32_t))
                          : 0;
    g->acc_bytes = pg_align_up((size_t)(g->mc * g->nc_panels * uk->nr) * sizeof(float));
    g->row_bytes = pg_align_up((size_t)w->K * sizeof(float));
}

size_t pg_qgemm_scratch_size(const pg_qpacked *w, int64_t M, int nthreads) {
    return pg_gemm_scratch_size(w, M, nthreads);
}

typedef pg_gemm_call call;

/* Input stage: rows [r0, r1) of A (RMSNorm-ed first into the thread's row
 * buffer when fused) -> per-token int8 in the layout of the microkernel
 * (+128 for a_u8 kernels), zero padding, the row scales and, for w_u8
 * kernels, the per-group activation-sum corrections. */
static void pack_a_rows(const call *cl, int64_t r0, int64_t r1, float *rowbuf) {
    const pg_qpacked *w = cl->w;
    const pg_kernel_table *kt = pg_kernels();
    const int64_t kg = w->quk.kg, ar = w->quk.ar, K = w->K, gk = w->gk, ng = w->kgroups;
    const uint8_t flip = w->quk.a_u8 ? 0x80 : 0;
    const int32_t woff = w->mxfp4 ? 12 : (w->bits == 8 ? 128 : 8);
    const int direct = ar == 1 && !flip; /* quantize straight into the packed row */
    int8_t tmp[QCHUNK];
    for (int64_t r = r0; r < r1; r++) {
        int8_t *grp = (int8_t *)cl->apack + (r / ar) * cl->g.a_stride;
        const float *a = pg_gemm_a_row(cl, r);
        if (cl->norm_w) {
            kt->rmsnorm_f32(rowbuf, a, cl->norm_w, 1, (size_t)K, cl->eps);
            a = rowbuf;
        }
        float inv = 0.0f;
        if (!w->act_group) {
            float m = kt->amax_f32(a, (size_t)K);
            inv = m > 0.0f ? 127.0f / m : 0.0f;
            cl->ascale[r] = m / 127.0f;
        }
        const int64_t slot = r % ar;
        for (int64_t g = 0; g < ng; g++) {
            const int64_t k0 = g * gk;
            const int64_t valid = K - k0 < gk ? K - k0 : gk;
            if (w->act_group) {
                float m = kt->amax_f32(a + k0, (size_t)valid);
                inv = m > 0.0f ? 127.0f / m : 0.0f;
                cl->ascale[r * ng + g] = m / 127.0f;
            }
            int32_t sum = 0;
            if (direct) {
                sum = kt->quant_i8(a + k0, (size_t)valid, inv, grp + k0);
                memset(grp + k0 + valid, 0, (size_t)(gk - valid));
            } else {
                for (int64_t c0 = 0; c0 < gk; c0 += QCHUNK) {
                    int64_t n = gk - c0 < QCHUNK ? gk - c0 : QCHUNK;
                    int64_t v = valid - c0 < n ? (valid - c0 > 0 ? valid - c0 : 0) : n;
                    sum += kt->quant_i8(a + k0 + c0, (size_t)v, inv, tmp);
                    memset(tmp + v, 0, (size_t)(n - v));
                    if (ar == 1) {
                        for (int64_t k = 0; k < n; k++)
                            grp[k0 + c0 + k] = (int8_t)((uint8_t)tmp[k] ^ flip);
                    } else {
                        for (int64_t k = 0; k < n; k++) {
                            int64_t kk = k0 + c0 + k;
                            grp[(kk / kg) * kg * ar + slot * kg + kk % kg] =
                                (int8_t)((uint8_t)tmp[k] ^ flip);
                        }
                    }
                }
            }
            if (cl->acorr) {
                const int32_t corr = -woff * sum;
                if (w->bits == 4 && !w->mxfp4) {
                    cl->acorr[(r * ng + g) * 2] = 17 * corr;
                    cl->acorr[(r * ng + g) * 2 + 1] = 16 * corr;
                } else {
                    cl->acorr[r * ng + g] = corr;
                }
            }
        }
    }
    if (ar == 2 && r1 == cl->g.M && (r1 & 1)) {
        const int64_t kp = ng * gk;
        int8_t *grp = (int8_t *)cl->apack + (r1 / 2) * cl->g.a_stride;
        for (int64_t k = 0; k < kp; k++)
            grp[(k / kg) * kg * 2 + kg + k % kg] = (int8_t)flip;
        if (w->act_group)
            for (int64_t g = 0; g < ng; g++)
                cl->ascale[r1 * ng + g] = 0.0f;
    }
}

void pg_qfmt_input(const pg_gemm_call *cl, int64_t r0, int64_t r1, int tid) {
    pack_a_rows(cl, r0, r1, (float *)(cl->rowbuf + (size_t)tid * cl->g.row_bytes));
}

int pg_qfmt_has_input(const pg_gemm_call *cl) {
    (void)cl;
    return 1;
}

/* The epilogue's element loops, one per case so that they vectorize (GCC's
 * -O2 cost model leaves loops of unknown trip count scalar; the attribute
 * asks for its -O3 model on these loops only). No FMA contraction: each
 * multiply and add rounds separately, as in the reference (ref/qgemm.c),
 * on every target. */
#if defined(__GNUC__) && !defined(__clang__)
#define VEC_LOOPS __attribute__((optimize("vect-cost-model=dynamic", "fp-contract=off")))
#else
#define VEC_LOOPS
#endif

VEC_LOOPS static void epi_rows(float *restrict c, const float *restrict y, float as,
                               const float *restrict b, int64_t n, int residual) {
    if (residual) {
        if (b)
            for (int64_t j = 0; j < n; j++)
                c[j] += y[j] * as + b[j];
        else
            for (int64_t j = 0; j < n; j++)
                c[j] += y[j] * as;
    } else {
        if (b)
            for (int64_t j = 0; j < n; j++)
                c[j] = y[j] * as + b[j];
        else
            for (int64_t j = 0; j < n; j++)
                c[j] = y[j] * as;
    }
}

VEC_LOOPS static void epi_scale_in_place(float *restrict d, float as, int64_t n) {
    for (int64_t j = 0; j < n; j++)
        d[j] *= as;
}

VEC_LOOPS static void epi_bias(float *restrict d, const float *restrict b, int64_t n) {
    for (int64_t j = 0; j < n; j++)
        d[j] += b[j];
}

/* The epilogue writes C rows of a block (nr..NC_ELEMS floats each, a row
 * apart): prefetch for writing the C segment EPI_PF_ROWS rows ahead, so the
 * misses overlap instead of each store waiting for its line (+1% per GEMM
 * at M=512 with act groups on Zen 4: sum of 5 noisy A/B pairs, 3 ahead). */
static void prefetch_c_row(const call *cl, int64_t m, int64_t m1, int64_t n0, int64_t cnt) {
    if (m >= m1) return;
    const float *c = cl->C + m * cl->ldc + n0;
    for (int64_t j = 0; j < cnt; j += 16)
        __builtin_prefetch(c + j, 1, 3);
}

void pg_qfmt_epilogue(const pg_gemm_call *cl, float *acc, int64_t ldacc, int64_t m0, int64_t m1,
                      int64_t p0, int64_t p1) {
    const pg_qpacked *w = cl->w;
    const int64_t nr = w->quk.nr, N = w->N;
    const float *bias = cl->bias;
    if (w->swiglu) {
        /* silu(g) * u by the table's swiglu_f32 (elementwise: a column's
         * result does not depend on where it sits in the call). The row
         * scale (per token; act groups are scaled in the kernel) and the
         * bias go into acc in place for all rows of the pair first, then
         * SwiGLU reads acc: a per-row copy right before it made its 64-byte
         * loads wait on the copy's narrower stores (no store forwarding
         * across stores), measured 4-5x slower per element. */
        const pg_kernel_table *kt = pg_kernels();
        for (int64_t p = p0; p < p1; p += 2) {
            int64_t n0 = (p / 2) * nr, cnt = N - n0 < nr ? N - n0 : nr;
            const int64_t off = (p - p0) * nr;
            for (int64_t m = m0; m < m1 && (!w->act_group || bias); m++) {
                float *gr = acc + (m - m0) * ldacc + off, *ur = gr + nr;
                if (!w->act_group) {
                    epi_scale_in_place(gr, cl->ascale[m], cnt);
                    epi_scale_in_place(ur, cl->ascale[m], cnt);
                }
                if (bias) {
                    epi_bias(gr, bias + n0, cnt);
                    epi_bias(ur, bias + N + n0, cnt);
                }
            }
            for (int64_t m = m0; m < m1; m++) {
                prefetch_c_row(cl, m + EPI_PF_ROWS, m1, n0, cnt);
                const float *gr = acc + (m - m0) * ldacc + off;
                pg_gemm_glu(cl, kt, cl->C + m * cl->ldc + n0, gr, gr + nr, (size_t)cnt);
            }
        }
        return;
    }
    int64_t n0 = p0 * nr, n1 = p1 * nr < N ? p1 * nr : N;
    for (int64_t m = m0; m < m1; m++) {
        prefetch_c_row(cl, m + EPI_PF_ROWS, m1, n0, n1 - n0);
        const float as = w->act_group ? 1.0f : cl->ascale[m];
        const float *y = acc + (m - m0) * ldacc;
        float *c = cl->C + m * cl->ldc + n0;
        epi_rows(c, y, as, bias ? bias + n0 : NULL, n1 - n0, cl->ep == PG_GEMM_RESIDUAL);
    }
}

int64_t pg_qfmt_pf_limit(const pg_packed_weight *w, int64_t ng) {
    /* Small M (2+ tiles reuse a slice): before each tile the driver
     * prefetches (to L2) its share of the next slice, so memory streams
     * while the tiles compute instead of stalling the first tile of every
     * slice. Only when a tile's share is at most PF_TILE_LINES: bigger
     * bursts (per-channel W8's 64 KiB slices) measured slower than the
     * hardware prefetcher alone. */
    (void)w;
    (void)ng;
    return PF_TILE_LINES;
}

void pg_qfmt_tile(const pg_gemm_call *cl, const char *wp, int64_t pc, int64_t ng, int64_t ir,
                 int rows, float *c, int64_t ldc, int accumulate, const char *pf,
                 int64_t pf_lines) {
    const pg_qpacked *w = cl->w;
    const pg_qgemm_ukernel *uk = &w->quk;
    for (int64_t l = 0; l < pf_lines; l++)
        __builtin_prefetch(pf + 64 * l, 0, 2);
    const int64_t acn = acorr_per_group(w);
    const int8_t *ap = (const int8_t *)cl->apack + (ir / uk->ar) * cl->g.a_stride + pc * w->gk * uk->ar;
    const float *as = w->act_group ? cl->ascale + ir * w->kgroups + pc : NULL;
    const int32_t *ac = cl->acorr ? cl->acorr + (ir * w->kgroups + pc) * acn : NULL;
    (w->scale_f16 ? uk->run_hs : uk->run)(ng, w->gk, ap, cl->g.a_stride, as, w->kgroups, ac,
                                          w->kgroups * acn, wp, c, ldc, rows, accumulate);
}

const char *pg_qfmt_variant(const pg_packed_weight *w) {
    return w->quk.name;
}

const pg_gemm_format pg_gemm_format_w8a8 = {
    .name = "w8a8",
    .plan = pg_qfmt_plan,
    .input = pg_qfmt_input,
    .has_input = pg_qfmt_has_input,
    .pf_limit = pg_qfmt_pf_limit,
    .tile = pg_qfmt_tile,
    .epilogue = pg_qfmt_epilogue,
    .balanced_tiles = 1,
    .fused_rmsnorm = 1,
    .variant = pg_qfmt_variant,
};

const pg_gemm_format pg_gemm_format_w4a8 = {
    .name = "w4a8",
    .plan = pg_qfmt_plan,
    .input = pg_qfmt_input,
    .has_input = pg_qfmt_has_input,
    .pf_limit = pg_qfmt_pf_limit,
    .tile = pg_qfmt_tile,
    .epilogue = pg_qfmt_epilogue,
    .balanced_tiles = 1,
    .fused_rmsnorm = 1,
    .variant = pg_qfmt_variant,
};

pagoda_status pg_qgemm(const pg_qpacked *w, const float *A, int64_t M, int64_t lda, float *C,
                       int64_t ldc, const float *bias, pg_gemm_epilogue ep, pg_pool *pool,
                       void *scratch) {
    return pg_gemm_run(w, A, M, lda, NULL, 0.0f, C, ldc, bias, ep, pool, scratch);
}

pagoda_status pg_qgemm_rmsnorm(const pg_qpacked *w, const float *X, int64_t M, int64_t ldx,
                               const float *norm_w, float eps, float *C, int64_t ldc,
                               const float *bias, pg_gemm_epilogue ep, pg_pool *pool,
                               void *scratch) {
    if (!norm_w) return pg_error(PAGODA_ERR_INVALID_ARG, "qgemm: rmsnorm: NULL norm weight");
    if (!(eps > 0.0f)) return pg_error(PAGODA_ERR_INVALID_ARG, "qgemm: rmsnorm: eps must be > 0");
    return pg_gemm_run(w, X, M, ldx, norm_w, eps, C, ldc, bias, ep, pool, scratch);
}
