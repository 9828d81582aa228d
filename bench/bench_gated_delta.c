/* Gated DeltaNet (kernels/gated_delta.h) at Qwen3.5-9B-like shapes: 16 key
 * heads, 32 value heads, dk = dv = 128, one layer. Tokens per second of
 *   prefill, chunked form: one sequence of T tokens in one call;
 *   prefill, recurrent form: the same tokens in steps of 8 (pieces < 16
 *     rows run the recurrent micro-kernel), the baseline of the ratio;
 *   decode: B sequences x 1 token per call (recurrent form).
 * for every micro-kernel set this CPU runs (each through p.uk), on 1 thread
 * (thread CPU time) and on the default pool (wall time). Median of R rounds.
 * Usage: bench_gated_delta [T (default 2048)] [rounds (default 5)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/pool.h"
#include "kernels/dispatch.h"
#include "kernels/gated_delta.h"

/* Wall clock on the pool; the calling thread's CPU time on 1 thread (robust
 * on a shared machine: time spent descheduled does not count). */
static int g_cpu_clock;
static double now(void) {
    struct timespec ts;
    clock_gettime(g_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t g_rng = 88172645463325252ull;
static float rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)(g_rng >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

enum { NK = 16, NV = 32, DK = 128, DV = 128, DECODE_B = 8 };

typedef struct setup {
    pg_gdn_params p;
    float *q, *k, *v, *g, *beta, *out, *states;
    void *scratch;
    size_t scratch_bytes;
    int T;
} setup;

/* Seconds for the T tokens of one sequence in steps of `step` rows (0: one call). */
static double run_prefill(setup *s, int step, pg_pool *pool) {
    const size_t ns = (size_t)NV * DK * DV;
    memset(s->states, 0, ns * sizeof(float));
    const int64_t ldqk = NK * DK, ldv = NV * DV;
    double t0 = now();
    for (int r = 0; r < s->T;) {
        const int n = step > 0 && r + step < s->T ? step : s->T - r;
        const int32_t cu[2] = {0, n}, pos = r;
        float *st[1] = {s->states};
        pg_gdn_batch b = {1, cu, &pos, st, NULL, NULL};
        if (pg_gdn_forward(&s->p, &b, s->q + r * ldqk, ldqk, s->k + r * ldqk, ldqk, s->v + r * ldv,
                           ldv, s->g + r * NV, s->beta + r * NV, s->out + r * ldv, ldv, s->scratch,
                           s->scratch_bytes, pool))
            return -1;
        r += n;
    }
    return now() - t0;
}

/* Seconds per decode step of DECODE_B sequences, 1 token each (reps steps). */
static double run_decode(setup *s, int reps, pg_pool *pool) {
    const int64_t ldqk = NK * DK, ldv = NV * DV;
    int32_t cu[DECODE_B + 1], pos[DECODE_B];
    float *st[DECODE_B];
    for (int i = 0; i <= DECODE_B; i++)
        cu[i] = i;
    for (int i = 0; i < DECODE_B; i++)
        pos[i] = 1000 + i, st[i] = s->states + (size_t)i * NV * DK * DV;
    pg_gdn_batch b = {DECODE_B, cu, pos, st, NULL, NULL};
    double t0 = now();
    for (int r = 0; r < reps; r++)
        if (pg_gdn_forward(&s->p, &b, s->q, ldqk, s->k, ldqk, s->v, ldv, s->g, s->beta, s->out, ldv,
                           s->scratch, s->scratch_bytes, pool))
            return -1;
    return (now() - t0) / reps;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

int main(int argc, char **argv) {
    const int T = argc > 1 ? atoi(argv[1]) : 2048, R = argc > 2 ? atoi(argv[2]) : 5;
    if (T < DECODE_B || R < 1 || R > 64) return 2;
    setup s = {.p = {NK, NV, DK, DV, false, 0.08838834764831845f, NULL}, .T = T};
    const size_t qk = (size_t)T * NK * DK, vv = (size_t)T * NV * DV;
    s.q = pg_malloc_aligned(qk * 4), s.k = pg_malloc_aligned(qk * 4);
    s.v = pg_malloc_aligned(vv * 4), s.out = pg_malloc_aligned(vv * 4);
    s.g = pg_malloc_aligned((size_t)T * NV * 4), s.beta = pg_malloc_aligned((size_t)T * NV * 4);
    s.states = pg_malloc_aligned((size_t)DECODE_B * NV * DK * DV * 4);
    pg_pool *pool = pg_pool_default();
    const int nth = pool ? pg_pool_size(pool) : 1;
    s.scratch_bytes = pg_gdn_scratch_bytes(&s.p, T, nth);
    s.scratch = pg_malloc_aligned(s.scratch_bytes);
    if (!s.q || !s.k || !s.v || !s.out || !s.g || !s.beta || !s.states || !s.scratch) return 1;
    for (size_t i = 0; i < qk; i++)
        s.q[i] = rnd(), s.k[i] = rnd();
    for (size_t i = 0; i < vv; i++)
        s.v[i] = rnd();
    for (size_t i = 0; i < (size_t)T * NV; i++)
        s.g[i] = -0.5f * (rnd() + 1.0f), s.beta[i] = 0.5f + 0.4f * rnd();
    memset(s.states, 0, (size_t)DECODE_B * NV * DK * DV * 4);
    printf("gated delta, %s: n_k %d n_v %d dk %d dv %d, prefill T %d, decode %d seqs, "
           "median of %d\n",
           pg_cpu()->model, NK, NV, DK, DV, T, DECODE_B, R);
    printf("%-8s %-7s %14s %14s %7s %14s\n", "uk", "threads", "chunked tok/s", "recur8 tok/s",
           "ratio", "decode tok/s");
    const pg_gdn_ukernels *seen[PG_ISA_COUNT];
    int nseen = 0;
    for (int l = 0; l < PG_ISA_COUNT; l++) {
        const pg_kernel_table *t = pg_kernels_for_isa(pg_isa_name((pg_isa)l));
        if (!t) continue;
        int dup = 0;
        for (int i = 0; i < nseen; i++)
            dup |= seen[i] == t->gdn;
        if (dup) continue;
        seen[nseen++] = t->gdn;
        s.p.uk = t->gdn;
        const int slow = strcmp(t->gdn->name, "scalar") == 0;
        for (int th = 0; th < 2; th++) {
            pg_pool *pl = th ? pool : NULL;
            g_cpu_clock = !th;
            if (th && nth == 1) continue;
            const int rr = slow ? 1 : R;
            double tc[64], tr[64], td[64];
            for (int r = 0; r < rr; r++) {
                tc[r] = run_prefill(&s, 0, pl);
                tr[r] = run_prefill(&s, 8, pl);
                td[r] = run_decode(&s, slow ? 2 : 50, pl);
            }
            const double c = median(tc, rr), rc = median(tr, rr), d = median(td, rr);
            printf("%-8s %-7d %14.0f %14.0f %7.2f %14.0f\n", t->gdn->name, th ? nth : 1, T / c,
                   T / rc, rc / c, DECODE_B / d);
        }
    }
    return 0;
}
