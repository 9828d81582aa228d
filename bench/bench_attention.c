/* Paged attention: the fast kernel (best micro-kernels of this CPU, 1 and 2
 * threads) against the straightforward reference (pg_ref_attention, 1
 * thread) in the same run, on the Llama-3.2-1B attention shape (32 query
 * heads, 8 KV heads, head_dim 64), F32 and BF16 KV cache:
 *   decode b1     1 request, 1 new token over a 2048-token context
 *   decode b32    32 requests, each 1 new token over 2048
 *   prefill 512   512 new tokens, no prefix
 *   prefill 512+1536  512 new tokens over a 1536-token cached prefix
 * Block ids are a random permutation (a fragmented cache). Median of
 * `rounds` alternating runs (ref, fast 1t, fast 2t). Then the block-size
 * sweep (16/32/64/128) of the fast kernel on decode b32 and prefill
 * 512+1536.
 * Usage: bench_attention [rounds (default 3)] [--no-ref] [--no-sweep] [--only SUBSTRING] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/pool.h"
#include "kernels/attention.h"
#include "kernels/dispatch.h"

enum { NH = 32, NKV = 8, HD = 64, CTX = 2048 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t g_rng = 88172645463325252ull;
static float rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)(g_rng >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

typedef struct scen {
    const char *name;
    int n_seqs, q_len, kv_len;
} scen;

typedef struct setup {
    pg_paged_kv kv;
    int32_t cu[33], lens[32];
    int32_t *tables[32];
    const int32_t *ctables[32];
    pg_attn_batch b;
    float *q, *out;
    void *scratch;
    size_t scratch_bytes;
    int n_tokens;
} setup;

static void setup_make(setup *s, const scen *sc, pg_dtype dt, int bs) {
    memset(s, 0, sizeof *s);
    int per = (sc->kv_len + bs - 1) / bs, nb = per * sc->n_seqs + 1;
    s->kv = (pg_paged_kv){NULL, NULL, dt, nb, NKV, bs, HD};
    size_t bytes = pg_paged_kv_bytes(dt, nb, NKV, bs, HD);
    s->kv.k = pg_alloc_huge(bytes);
    s->kv.v = pg_alloc_huge(bytes);
    size_t n = bytes / (dt == PG_F32 ? 4 : 2);
    for (size_t i = 0; i < n; i++) {
        float a = rnd(), c = rnd();
        if (dt == PG_F32)
            ((float *)s->kv.k)[i] = a, ((float *)s->kv.v)[i] = c;
        else
            ((uint16_t *)s->kv.k)[i] = pg_f32_to_bf16(a),
                       ((uint16_t *)s->kv.v)[i] = pg_f32_to_bf16(c);
    }
    int32_t *perm = malloc((size_t)nb * sizeof *perm);
    for (int i = 0; i < nb - 1; i++)
        perm[i] = i + 1;
    for (int i = nb - 2; i > 0; i--) {
        int j = (int)((g_rng = g_rng * 6364136223846793005ull + 1) >> 33) % (i + 1);
        int32_t x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    s->cu[0] = 0;
    for (int r = 0; r < sc->n_seqs; r++) {
        s->cu[r + 1] = s->cu[r] + sc->q_len;
        s->lens[r] = sc->kv_len;
        s->tables[r] = malloc((size_t)per * sizeof(int32_t));
        for (int i = 0; i < per; i++)
            s->tables[r][i] = perm[r * per + i];
        s->ctables[r] = s->tables[r];
    }
    free(perm);
    s->b = (pg_attn_batch){sc->n_seqs, s->cu, s->lens, s->ctables};
    s->n_tokens = s->cu[sc->n_seqs];
    s->q = pg_malloc_aligned((size_t)s->n_tokens * NH * HD * sizeof(float));
    s->out = pg_malloc_aligned((size_t)s->n_tokens * NH * HD * sizeof(float));
    for (size_t i = 0; i < (size_t)s->n_tokens * NH * HD; i++)
        s->q[i] = rnd();
}

static void setup_free(setup *s, const scen *sc) {
    size_t bytes = pg_paged_kv_bytes(s->kv.dtype, s->kv.num_blocks, NKV, s->kv.block_size, HD);
    pg_free_huge(s->kv.k, bytes);
    pg_free_huge(s->kv.v, bytes);
    for (int r = 0; r < sc->n_seqs; r++)
        free(s->tables[r]);
    pg_free(s->q);
    pg_free(s->out);
    pg_free(s->scratch);
}

static const pg_attn_params PARAMS = {NH, NKV, HD, 0.125f, 0, NULL, 0};

/* Seconds of one call: ref (pool unused) or fast on `pool` (NULL: 1 thread). */
static double time_once(setup *s, int ref, pg_pool *pool) {
    double t0 = now();
    pagoda_status st;
    if (ref) {
        st = pg_ref_attention(&PARAMS, &s->b, &s->kv, s->q, NH * HD, s->out, NH * HD);
    } else {
        size_t need =
            pg_attention_scratch_bytes(&PARAMS, &s->b, &s->kv, pool ? pg_pool_size(pool) : 1);
        if (need > s->scratch_bytes) {
            pg_free(s->scratch);
            s->scratch = pg_malloc_aligned(need);
            s->scratch_bytes = need;
        }
        st = pg_attention(&PARAMS, &s->b, &s->kv, s->q, NH * HD, s->out, NH * HD, s->scratch,
                          s->scratch_bytes, pool, NULL);
    }
    double dt = now() - t0;
    if (st != PAGODA_OK) {
        fprintf(stderr, "bench_attention: %s\n", pg_last_error());
        exit(1);
    }
    return dt;
}

/* Attention FLOPs of a scenario (2 per multiply-add, QK and PV, causal). */
static double flops(const scen *sc) {
    double pairs = 0;
    for (int i = 0; i < sc->q_len; i++)
        pairs += sc->kv_len - sc->q_len + i + 1;
    return pairs * sc->n_seqs * NH * HD * 4.0;
}

int main(int argc, char **argv) {
    int rounds = 3, with_ref = 1, sweep = 1;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-ref"))
            with_ref = 0;
        else if (!strcmp(argv[i], "--no-sweep"))
            sweep = 0;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (atoi(argv[i]) > 0)
            rounds = atoi(argv[i]);
    }
    if (rounds > 15) rounds = 15;
    pg_pool_options o = pg_pool_options_default();
    o.n_threads = 2;
    pg_pool *pool2 = NULL;
    if (pg_pool_create(&o, &pool2) != PAGODA_OK) pool2 = NULL;
    const pg_kernel_table *t = pg_kernels();
    printf("bench_attention: %s; Llama-3.2-1B attention (32 q heads, 8 KV heads, head_dim 64), "
           "context %d; micro-kernels %s (F32 KV) / %s (BF16 KV); median of %d; ms per call, "
           "GFLOP/s\n",
           pg_cpu()->model, CTX, t->variant.attn_f32kv, t->variant.attn_bf16kv, rounds);
    const scen scens[4] = {{"decode b1", 1, 1, CTX},
                           {"decode b32", 32, 1, CTX},
                           {"prefill 512", 1, 512, 512},
                           {"prefill 512+1536", 1, 512, CTX}};
    printf("  %-17s %-5s %4s | %10s | %10s %6s | %10s %6s\n", "scenario", "kv", "bs", "ref 1t",
           "fast 1t", "x ref", "fast 2t", "x ref");
    for (int dti = 0; dti < 2; dti++)
        for (int si = 0; si < 4; si++) {
            pg_dtype dt = dti ? PG_BF16 : PG_F32;
            char label[64];
            snprintf(label, sizeof label, "%s %s", scens[si].name, pg_dtype_name(dt));
            if (only && !strstr(label, only)) continue;
            setup s;
            setup_make(&s, &scens[si], dt, 128);
            double tr[15], t1[15], t2[15];
            time_once(&s, 0, NULL); /* warm-up */
            for (int r = 0; r < rounds; r++) {
                tr[r] = with_ref ? time_once(&s, 1, NULL) : NAN;
                t1[r] = time_once(&s, 0, NULL);
                t2[r] = pool2 ? time_once(&s, 0, pool2) : NAN;
            }
            qsort(tr, (size_t)rounds, sizeof(double), cmp_double);
            qsort(t1, (size_t)rounds, sizeof(double), cmp_double);
            qsort(t2, (size_t)rounds, sizeof(double), cmp_double);
            double mr = tr[rounds / 2], m1 = t1[rounds / 2], m2 = t2[rounds / 2],
                   f = flops(&scens[si]);
            printf("  %-17s %-5s %4d | %7.2f %4.1f | %7.2f %4.1f %5.1fx | %7.2f %4.1f %5.1fx\n",
                   scens[si].name, pg_dtype_name(dt), 128, mr * 1e3, f / mr * 1e-9, m1 * 1e3,
                   f / m1 * 1e-9, mr / m1, m2 * 1e3, f / m2 * 1e-9, mr / m2);
            fflush(stdout);
            setup_free(&s, &scens[si]);
        }
    if (!sweep) {
        pg_pool_free(pool2);
        return 0;
    }
    printf("  block size sweep (fast kernel, 1 thread, ms per call)\n");
    const int bss[4] = {16, 32, 64, 128};
    for (int dti = 0; dti < 2; dti++)
        for (int si = 1; si < 4; si += 2) {
            pg_dtype dt = dti ? PG_BF16 : PG_F32;
            printf("  %-17s %-5s", scens[si].name, pg_dtype_name(dt));
            setup s[4];
            double tb[4][15];
            for (int b = 0; b < 4; b++) {
                setup_make(&s[b], &scens[si], dt, bss[b]);
                time_once(&s[b], 0, NULL);
            }
            for (int r = 0; r < rounds; r++)
                for (int b = 0; b < 4; b++)
                    tb[b][r] = time_once(&s[b], 0, NULL);
            for (int b = 0; b < 4; b++) {
                qsort(tb[b], (size_t)rounds, sizeof(double), cmp_double);
                printf(" | bs %3d %7.2f", bss[b], tb[b][rounds / 2] * 1e3);
                setup_free(&s[b], &scens[si]);
            }
            printf("\n");
            fflush(stdout);
        }
    pg_pool_free(pool2);
    return 0;
}
