/* The MXFP4 weight format of the GEMM driver (gemm_driver.h; arithmetic in
 * gemm.h "MXFP4", spec pg_ref_mxfp4_gemm in ref/mxfp4.c): packing of GGUF
 * block_mxfp4 rows and of Hugging Face (gpt-oss) *_blocks / *_scales
 * tensors into panels of 4-bit codes with an E8M0 byte per (column, block),
 * and the format row. The input stage (int8 activations with one scale per
 * token and 32-block: GGUF Q8_0 activation blocks), the tile call and the
 * epilogues are the int8 formats' (qgemm.c pg_qfmt_*); the microkernels are
 * the table's `mxfp4` entry (dispatch.h).
 *
 * Source layouts (both 32 weights per block, one E8M0 byte per block):
 *   GGUF (ggml type 39; llama.cpp ggml/src/ggml-common.h block_mxfp4 and
 *   ggml-quants.c dequantize_row_mxfp4): 17-byte blocks { e; qs[16] },
 *   element j < 16 in the low nibble of qs[j], element j + 16 in its high
 *   nibble.
 *   Hugging Face (transformers integrations/mxfp4.py
 *   convert_moe_packed_tensors): blocks [rows, K/32, 16] uint8 and scales
 *   [rows, K/32] uint8; byte i of a block holds element 2i in its LOW
 *   nibble and element 2i + 1 in its HIGH nibble (interleaved: out[:, 0::2]
 *   = lut[lo], out[:, 1::2] = lut[hi]), value lut[code] * 2^(scale - 127).
 * Both decode to the same (code, E) per element, so the packed bytes (and
 * results) of the two sources are identical. */
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "kernels/gemm.h"
#include "kernels/gemm_driver.h"

enum { BLK = 32, QMAX_NR = 64 };

/* One half (gate or up) of a source: GGUF rows, or HF blocks + scales. */
typedef struct {
    const uint8_t *gguf;
    const uint8_t *blocks, *scales;
} mx_src;

/* The 32 codes and the E8M0 byte of block g of row n. */
static uint8_t src_block(const mx_src *s, int64_t n, int64_t g, int64_t nb, uint8_t code[BLK]) {
    if (s->gguf) {
        const uint8_t *b = s->gguf + (size_t)(n * nb + g) * 17;
        for (int j = 0; j < 16; j++) {
            code[j] = b[1 + j] & 0xF;
            code[j + 16] = b[1 + j] >> 4;
        }
        return b[0];
    }
    const uint8_t *b = s->blocks + (size_t)(n * nb + g) * 16;
    for (int i = 0; i < 16; i++) {
        code[2 * i] = b[i] & 0xF;
        code[2 * i + 1] = b[i] >> 4;
    }
    return s->scales[n * nb + g];
}

/* Code v at block-local k, column c of one packed block (the W4 layout of
 * dispatch.h pg_qgemm_ukernel: k-chunks of kg, vw nibble pairing). */
static void put_code(const pg_qgemm_ukernel *uk, uint8_t *d, int64_t k, int c, uint8_t v) {
    const int64_t kg = uk->kg, nr = uk->nr, vw = uk->vw;
    int64_t s = (k / kg) * nr * kg + c * kg + k % kg;
    int64_t b = s / (2 * vw), in = s % (2 * vw);
    uint8_t *byte = &d[b * vw + in % vw];
    if (in < vw)
        *byte = (uint8_t)((*byte & 0xF0) | v);
    else
        *byte = (uint8_t)((*byte & 0x0F) | v << 4);
}

typedef struct {
    pg_packed_weight *pw;
    mx_src h[2];
} pack_job;

/* Panels [begin, end): each written whole by one thread (codes of
 * neighbouring columns share bytes), so the bytes do not depend on the
 * split. */
static void pack_panels(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const pack_job *j = ctx;
    const pg_packed_weight *pw = j->pw;
    const pg_qgemm_ukernel *uk = &pw->quk;
    const int64_t nr = uk->nr, nb = pw->kgroups;
    uint8_t code[BLK];
    for (int64_t p = (int64_t)begin; p < (int64_t)end; p++) {
        const int h = pw->swiglu ? (int)(p % 2) : 0;
        const int64_t n0 = (pw->swiglu ? p / 2 : p) * nr;
        uint8_t *panel = (uint8_t *)pw->data + (size_t)p * pw->panel_bytes;
        for (int64_t n = n0; n < n0 + nr && n < pw->N; n++) {
            const int c = (int)(n - n0);
            for (int64_t g = 0; g < nb; g++) {
                uint8_t *grp = panel + (size_t)g * pw->gbytes;
                grp[c] = src_block(&j->h[h], n, g, nb, code);
                for (int k = 0; k < BLK; k++)
                    put_code(uk, grp + pw->hbytes, k, c, code[k]);
            }
        }
    }
}

static pagoda_status pack(const mx_src *g, const mx_src *u, int64_t N, int64_t K,
                          const pg_kernel_table *kt, pg_pool *pool, pg_packed_weight **out) {
    if (!kt) kt = pg_kernels();
    const pg_qgemm_ukernel *uk = &kt->mxfp4;
    if (!uk->run || uk->nr > QMAX_NR || uk->bits != 4 || uk->kg > BLK)
        return pg_error(PAGODA_ERR_INVALID_ARG, "mxfp4: pack: table %s has no MXFP4 microkernel",
                        kt->isa);
    pg_packed_weight *pw = pg_gemm_weight_new();
    if (!pw) return pg_error(PAGODA_ERR_NOMEM, "mxfp4: pack: out of memory");
    pw->quk = *uk;
    pw->fmt = &pg_gemm_format_mxfp4;
    pw->mr = uk->mr;
    pw->nr = uk->nr;
    pw->ar = uk->ar;
    pw->bits = 4;
    pw->mxfp4 = 1;
    pw->act_group = 1;
    pw->swiglu = u != NULL;
    pw->N = N;
    pw->K = K;
    pw->group = BLK;
    pw->gk = BLK;
    pw->kgroups = K / BLK;
    const int64_t np = pg_ceil_div64(N, uk->nr);
    pw->npanels = pw->swiglu ? 2 * np : np;
    pw->hbytes = (size_t)uk->nr; /* one E8M0 byte per column */
    pw->gbytes = pw->hbytes + (size_t)(BLK * uk->nr / 2);
    pw->panel_bytes = (size_t)pw->kgroups * pw->gbytes;
    pw->bytes = (size_t)pw->npanels * pw->panel_bytes;
    pw->data = pg_alloc_huge(pw->bytes); /* zero-filled: missing columns stay code 0 */
    if (!pw->data) {
        pg_free(pw);
        return pg_error(PAGODA_ERR_NOMEM, "mxfp4: pack: cannot allocate %zu bytes", pw->bytes);
    }
    pack_job j = {pw, {*g, u ? *u : *g}};
    if (pool && pg_pool_size(pool) > 1 && N * K >= 65536)
        pg_pool_parallel_for(pool, (size_t)pw->npanels, pw->swiglu ? 2 : 1, pack_panels, &j);
    else
        pack_panels(&j, 0, (size_t)pw->npanels, 0);
    *out = pw;
    return PAGODA_OK;
}

pagoda_status pg_mxfp4_pack_gguf(const void *Wg, const void *Wu, int64_t N, int64_t K,
                                 const pg_kernel_table *kt, pg_packed_weight **out) {
    *out = NULL;
    if (K % BLK)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "mxfp4: pack: K=%lld is not a multiple of the block size 32", (long long)K);
    mx_src g = {.gguf = Wg}, u = {.gguf = Wu};
    return pack(&g, Wu ? &u : NULL, N, K, kt, NULL, out);
}

pagoda_status pg_gemm_pack_mxfp4(const uint8_t *blocks, const uint8_t *scales,
                                 const uint8_t *up_blocks, const uint8_t *up_scales, int64_t N,
                                 int64_t K, const pg_kernel_table *kt, pg_pool *pool,
                                 pg_packed_weight **out) {
    if (!out) return pg_error(PAGODA_ERR_INVALID_ARG, "mxfp4: pack: NULL out");
    *out = NULL;
    if (!blocks || !scales || !up_blocks != !up_scales)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "mxfp4: pack: NULL blocks or scales (or only one of the up pair)");
    if (N < 1 || K < 1 || K % BLK)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "mxfp4: pack: N=%lld K=%lld (need N >= 1, K a positive multiple of 32)",
                        (long long)N, (long long)K);
    mx_src g = {.blocks = blocks, .scales = scales}, u = {.blocks = up_blocks, .scales = up_scales};
    return pack(&g, up_blocks ? &u : NULL, N, K, kt, pool, out);
}

const pg_gemm_format pg_gemm_format_mxfp4 = {
    .name = "mxfp4",
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
