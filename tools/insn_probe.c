/* insn_probe: call one kernel of the dispatch table REPS times on fixed
 * shapes, for counting executed instructions from outside (qemu -singlestep
 * -d exec on aarch64, valgrind --tool=callgrind on x86; see
 * tools/arm_insn_count.sh). The per-call count is the difference of two runs
 * with different REPS divided by the difference of REPS, so the start-up
 * (loader, table fill, buffer set-up) cancels. Not a timer.
 *
 *   insn_probe KERNEL REPS
 *
 * KERNEL (shapes fixed here, printed on stdout with the multiply-adds per call):
 *   gemm_bf16, gemm_f32        the table's GEMM microkernel, full mr x nr tile, K = 1024
 *   gemm_bf16_neon             aarch64 only: the NEON BF16 kernel for cores without FEAT_BF16
 *   qgemm_w8, qgemm_w4         the table's quantized microkernel, full tile, K = 1024 (8 groups of 128)
 *   qgemm_w8:NAME, qgemm_w4:NAME   a named variant of pg_qgemm_ukernel_variants ("dotprod", ...)
 *   attn_qk, attn_pv           BF16-KV attention micro-kernels: 4 query rows, 256 tokens (16 blocks
 *                              of 16), head_dim 128
 *   attn_qk_f32, attn_pv_f32   the same for an F32 KV cache
 *   vexp                       vexp_f32 over 4096 floats
 * Exit status 2 on a bad argument or a kernel this machine lacks. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "kernels/attention.h"
#include "kernels/dispatch.h"
#if defined(__aarch64__)
#include "kernels/arm/arm.h"
#endif

enum { K = 1024, GK = 128, BS = 16, NK = 256, HD = 128, NROWS = 4, NEXP = 4096 };

static uint32_t rng = 12345u;
static float frand(void) { /* deterministic values in [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}

static void *xmalloc(size_t n) {
    void *p = calloc(1, n);
    if (!p) {
        fprintf(stderr, "insn_probe: out of memory\n");
        exit(2);
    }
    return p;
}

static void fill_bf16(uint16_t *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = pg_f32_to_bf16(frand());
}
static void fill_f32(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = frand();
}

static double sum(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    return s;
}

static int run_gemm(const pg_gemm_ukernel *uk, int bf16, long reps) {
    const int64_t ng = K / uk->kg, as = 2 * K;
    size_t esz = bf16 ? 2 : 4;
    void *a = xmalloc((size_t)uk->mr * (size_t)as * esz);
    void *w = xmalloc((size_t)K * (size_t)uk->nr * esz);
    float *c = xmalloc((size_t)uk->mr * (size_t)uk->nr * sizeof(float));
    if (bf16) {
        fill_bf16(a, (size_t)uk->mr * (size_t)as);
        fill_bf16(w, (size_t)K * (size_t)uk->nr);
    } else {
        fill_f32(a, (size_t)uk->mr * (size_t)as);
        fill_f32(w, (size_t)K * (size_t)uk->nr);
    }
    for (long r = 0; r < reps; r++)
        uk->run(ng, a, as, w, c, uk->nr, uk->mr, 0);
    printf("gemm variant=%s mr=%d nr=%d K=%d macs_per_call=%ld checksum=%g\n", uk->name, uk->mr,
           uk->nr, K, (long)uk->mr * uk->nr * K, sum(c, (size_t)uk->mr * (size_t)uk->nr));
    free(a);
    free(w);
    free(c);
    return 0;
}

static int run_qgemm(const pg_qgemm_ukernel *uk, long reps) {
    const int64_t ng = K / GK, as = 2 * K;
    /* group header (dispatch.h): int32 comp[nr] for a_u8 kernels only, then
     * f32 scale[nr] (the run form; run_hs would take F16 scales) */
    const size_t hbytes = (size_t)uk->nr * (uk->a_u8 ? 8 : 4);
    const size_t gbytes = hbytes + (size_t)GK * (size_t)uk->nr * (size_t)uk->bits / 8;
    int8_t *a = xmalloc((size_t)uk->mr * (size_t)as);
    char *w = xmalloc((size_t)ng * gbytes);
    float *c = xmalloc((size_t)uk->mr * (size_t)uk->nr * sizeof(float));
    int32_t *ac = calloc((size_t)uk->mr * (size_t)ng, sizeof(int32_t)); /* w_u8 corrections */
    if (!ac) exit(2);
    for (size_t i = 0; i < (size_t)uk->mr * (size_t)as; i++)
        a[i] = (int8_t)(frand() * 127.0f);
    for (int64_t g = 0; g < ng; g++) {
        char *grp = w + (size_t)g * gbytes;
        memset(grp, 0, hbytes); /* comp stays 0 */
        float *scale = (float *)(grp + hbytes - (size_t)uk->nr * 4);
        for (int j = 0; j < uk->nr; j++)
            scale[j] = 0.01f;
        for (size_t i = hbytes; i < gbytes; i++)
            grp[i] = (char)(frand() * 127.0f);
    }
    for (long r = 0; r < reps; r++)
        uk->run(ng, GK, a, as, NULL, 0, uk->w_u8 ? ac : NULL, ng, w, c, uk->nr, uk->mr, 0);
    printf("qgemm variant=%s bits=%d mr=%d nr=%d K=%d macs_per_call=%ld checksum=%g\n", uk->name,
           uk->bits, uk->mr, uk->nr, K, (long)uk->mr * uk->nr * K,
           sum(c, (size_t)uk->mr * (size_t)uk->nr));
    free(a);
    free(w);
    free(c);
    free(ac);
    return 0;
}

static int run_attn(const pg_attn_ukernels *uk, int pv, long reps) {
    const int bf16 = uk->kv_dtype == PG_BF16;
    const size_t tile = (size_t)BS * HD, esz = bf16 ? 2 : 4;
    const int lds = NK;
    void *kv = xmalloc((size_t)(NK / BS) * tile * esz);
    const void *tiles[NK / BS];
    for (int b = 0; b < NK / BS; b++)
        tiles[b] = (const char *)kv + (size_t)b * tile * esz;
    if (bf16)
        fill_bf16(kv, (size_t)(NK / BS) * tile);
    else
        fill_f32(kv, (size_t)(NK / BS) * tile);
    float *q = xmalloc((size_t)NROWS * HD * sizeof(float));
    float *s = xmalloc((size_t)NROWS * (size_t)lds * sizeof(float));
    float *acc = xmalloc((size_t)NROWS * HD * sizeof(float));
    fill_f32(q, (size_t)NROWS * HD);
    for (size_t i = 0; i < (size_t)NROWS * (size_t)lds; i++)
        s[i] = frand() * 0.01f; /* probabilities for pv */
    for (long r = 0; r < reps; r++) {
        if (pv)
            uk->pv(s, lds, NROWS, tiles, BS, NK, HD, acc, HD);
        else
            uk->qk(q, HD, NROWS, tiles, BS, NK, HD, 0.088f, s, lds);
    }
    printf("attn_%s variant=%s kv=%s rows=%d tokens=%d head_dim=%d macs_per_call=%ld checksum=%g\n",
           pv ? "pv" : "qk", uk->name, bf16 ? "bf16" : "f32", NROWS, NK, HD,
           (long)NROWS * NK * HD, pv ? sum(acc, (size_t)NROWS * HD) : sum(s, (size_t)NROWS * NK));
    free(kv);
    free(q);
    free(s);
    free(acc);
    return 0;
}

static int run_vexp(const pg_kernel_table *t, long reps) {
    float *x = xmalloc(NEXP * sizeof(float)), *y = xmalloc(NEXP * sizeof(float));
    for (int i = 0; i < NEXP; i++)
        x[i] = frand() * 20.0f;
    for (long r = 0; r < reps; r++)
        t->vexp_f32(x, y, NEXP);
    printf("vexp variant=%s n=%d elements_per_call=%d checksum=%g\n", t->variant.vexp_f32, NEXP,
           NEXP, sum(y, NEXP));
    free(x);
    free(y);
    return 0;
}

static const pg_qgemm_ukernel *qvariant(int bits, const char *name) {
    if (!name) return bits == 8 ? &pg_kernels()->qgemm_w8 : &pg_kernels()->qgemm_w4;
    const pg_qgemm_ukernel *v[16];
    int n = pg_qgemm_ukernel_variants(bits, v, 16);
    for (int i = 0; i < n; i++)
        if (strcmp(v[i]->name, name) == 0) return v[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3 || atol(argv[2]) < 0) {
        fprintf(stderr, "usage: insn_probe KERNEL REPS (see tools/insn_probe.c)\n");
        return 2;
    }
    const char *kname = argv[1];
    const long reps = atol(argv[2]);
    const pg_kernel_table *t = pg_kernels();
    if (strcmp(kname, "gemm_bf16") == 0) return run_gemm(&t->gemm_bf16, 1, reps);
    if (strcmp(kname, "gemm_f32") == 0) return run_gemm(&t->gemm_f32, 0, reps);
#if defined(__aarch64__)
    if (strcmp(kname, "gemm_bf16_neon") == 0) {
        const pg_gemm_ukernel uk = {"neon", 4, 16, 2, 1, pg_neon_gemm_uk_bf16, NULL};
        return run_gemm(&uk, 1, reps);
    }
#endif
    if (strncmp(kname, "qgemm_w8", 8) == 0 || strncmp(kname, "qgemm_w4", 8) == 0) {
        const int bits = kname[7] == '8' ? 8 : 4;
        const char *name = kname[8] == ':' ? kname + 9 : NULL;
        if (kname[8] != '\0' && !name) goto bad;
        const pg_qgemm_ukernel *uk = qvariant(bits, name);
        if (!uk) {
            fprintf(stderr, "insn_probe: no qgemm variant '%s' on this machine\n", name);
            return 2;
        }
        return run_qgemm(uk, reps);
    }
    if (strcmp(kname, "attn_qk") == 0) return run_attn(t->attn_bf16kv, 0, reps);
    if (strcmp(kname, "attn_pv") == 0) return run_attn(t->attn_bf16kv, 1, reps);
    if (strcmp(kname, "attn_qk_f32") == 0) return run_attn(t->attn_f32kv, 0, reps);
    if (strcmp(kname, "attn_pv_f32") == 0) return run_attn(t->attn_f32kv, 1, reps);
    if (strcmp(kname, "vexp") == 0) return run_vexp(t, reps);
bad:
    fprintf(stderr, "insn_probe: unknown kernel '%s' (see tools/insn_probe.c)\n", kname);
    return 2;
}
