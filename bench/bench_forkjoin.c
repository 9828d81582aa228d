/* Fork-join latency: pagoda's pool vs OpenMP (GCC libgomp and LLVM libomp).
 *
 * Two regions, each timed as the median over batches of back-to-back runs:
 *   empty  an empty parallel region (pure fork + join cost);
 *   axpy   y = a*x + y over 16384 floats (64 KiB per vector), split
 *          statically across the threads (a short region, like one small
 *          decode-step op).
 * Two OpenMP runtimes cannot share a process, so this one source builds twice
 * (bench/bench_forkjoin.cmake): bench_forkjoin links libgomp, and
 * peer_forkjoin_llvmomp links LLVM's libomp (which provides the GOMP_* entry
 * points GCC's -fopenmp code calls). Each runtime keeps its defaults
 * (libgomp: OMP_WAIT_POLICY unset; libomp: KMP_BLOCKTIME 200 ms); the pool
 * keeps its defaults too (pinned, one thread per physical core, its default
 * block time).
 *
 * Usage:
 *   bench_forkjoin [--rounds R (5)] [--batches B] [--regions N] [--threads "1 2"]
 *       driver: runs R rounds, each round alternating child processes
 *       pool, libgomp, libomp for every thread count, then prints a table of
 *       the medians over rounds (min..max in brackets) and the ratio
 *       pool / best OpenMP (< 1 means the pool is faster). Then prints the
 *       pool's wake-up cost after idle gaps (the data behind the default
 *       block time).
 *   bench_forkjoin --run pool|omp T B N   one measurement, prints
 *       "empty=<ns> axpy=<ns>" (median ns per region).
 *   bench_forkjoin --wake                 the idle-gap table only.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/pool.h"

#define AXPY_N 16384

/* x and y in one buffer, y 2 KiB past a 4 KiB boundary from x, so loads of
 * x never 4K-alias the stores to y (which would make timings depend on code
 * placement rather than on the runtime). */
static float g_buf[2 * AXPY_N + 512] __attribute__((aligned(4096)));
#define g_x (g_buf)
#define g_y (g_buf + AXPY_N + 512)
static const float g_a = 1e-7f;

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the regions ------------------------------------------------------------ */

__attribute__((noinline)) static void axpy_range(size_t begin, size_t end) {
    for (size_t i = begin; i < end; i++)
        g_y[i] = g_a * g_x[i] + g_y[i];
}

static void omp_empty(int t) {
#pragma omp parallel num_threads(t)
    { __asm__ __volatile__("" ::: "memory"); }
}

/* The same kernel function and the same static split as the pool's
 * parallel_for (pg_pool_partition, grain 16), so only the runtime differs.
 * (`#pragma omp parallel for schedule(static)` measured the same.) */
static void omp_axpy(int t) {
#pragma omp parallel num_threads(t)
    {
        size_t b, e;
        pg_pool_partition(AXPY_N, 16, omp_get_num_threads(), omp_get_thread_num(), &b, &e);
        if (b < e) axpy_range(b, e);
    }
}

static void pool_empty_fn(void *ctx, int tid, int nthreads) {
    (void)ctx;
    (void)tid;
    (void)nthreads;
    __asm__ __volatile__("" ::: "memory");
}

static void pool_axpy_fn(void *ctx, size_t begin, size_t end, int tid) {
    (void)ctx;
    (void)tid;
    axpy_range(begin, end);
}

typedef enum { RT_POOL, RT_OMP } runtime;

typedef struct bench {
    runtime rt;
    int threads;
    pg_pool *pool;
} bench;

static void region(const bench *b, int axpy) {
    if (b->rt == RT_POOL) {
        if (axpy)
            pg_pool_parallel_for(b->pool, AXPY_N, 16, pool_axpy_fn, NULL);
        else
            pg_pool_run(b->pool, pool_empty_fn, NULL);
    } else {
        if (axpy)
            omp_axpy(b->threads);
        else
            omp_empty(b->threads);
    }
}

/* Median over `batches` of the mean ns per region of `regions` back-to-back. */
static double time_regions(const bench *b, int axpy, int batches, int regions) {
    for (int r = 0; r < regions / 5 + 1; r++)
        region(b, axpy); /* warm up, spin up */
    double *per = malloc((size_t)batches * sizeof *per);
    for (int k = 0; k < batches; k++) {
        double t0 = now_ns();
        for (int r = 0; r < regions; r++)
            region(b, axpy);
        per[k] = (now_ns() - t0) / regions;
    }
    double m = median(per, batches);
    free(per);
    return m;
}

static int run_one(const char *which, int threads, int batches, int regions) {
    for (int i = 0; i < AXPY_N; i++) {
        g_x[i] = (float)(i % 7) - 3.0f;
        g_y[i] = 0.0f;
    }
    bench b = {.rt = strncmp(which, "pool", 4) == 0 ? RT_POOL : RT_OMP, .threads = threads};
    if (b.rt == RT_POOL) {
        pg_pool_options o = pg_pool_options_default();
        o.n_threads = threads;
        if (strcmp(which, "pool-unpinned") == 0) o.pin = 0;
        if (pg_pool_create(&o, &b.pool) != PAGODA_OK) {
            fprintf(stderr, "bench_forkjoin: %s\n", pg_last_error());
            return 1;
        }
    }
    double e = time_regions(&b, 0, batches, regions);
    double a = time_regions(&b, 1, batches, regions);
    printf("empty=%.1f axpy=%.1f check=%g\n", e, a, (double)g_y[5]);
    pg_pool_free(b.pool);
    return 0;
}

/* ---- idle gaps: the wake-up cost behind the default block time ---------- */

static double gap_latency(pg_pool *p, int gap_us, int reps) {
    double *v = malloc((size_t)reps * sizeof *v);
    for (int r = 0; r < reps; r++) {
        if (gap_us) usleep((useconds_t)gap_us);
        double t0 = now_ns();
        pg_pool_run(p, pool_empty_fn, NULL);
        v[r] = now_ns() - t0;
    }
    double m = median(v, reps);
    free(v);
    return m;
}

static int run_wake(void) {
    static const int gaps[] = {0, 20, 100, 200, 500, 1000, 2000};
    static const long bts[] = {0, 100, 300, 1000, 5000};
    const int nb = sizeof bts / sizeof bts[0];
    printf("\npool (2 threads) empty-region latency after an idle gap, median ns of 200:\n");
    printf("| gap (us) |");
    for (int j = 0; j < nb; j++)
        printf(" blocktime %ld us%s |", bts[j],
               bts[j] == PG_POOL_BLOCKTIME_DEFAULT_US ? " (default)" : "");
    printf("\n| --- |");
    for (int j = 0; j < nb; j++)
        printf(" --- |");
    printf("\n");
    /* One pool at a time: idle pools' spinning workers would share the CPUs. */
    enum { NG = sizeof gaps / sizeof gaps[0] };
    double lat[NG][8];
    for (int j = 0; j < nb; j++) {
        pg_pool_options o = pg_pool_options_default();
        o.n_threads = 2;
        o.blocktime_us = bts[j];
        pg_pool *p = NULL;
        if (pg_pool_create(&o, &p) != PAGODA_OK) {
            fprintf(stderr, "bench_forkjoin: %s\n", pg_last_error());
            return 1;
        }
        for (int g = 0; g < NG; g++) {
            gap_latency(p, gaps[g], 20); /* settle */
            lat[g][j] = gap_latency(p, gaps[g], 200);
        }
        pg_pool_free(p);
    }
    for (int g = 0; g < NG; g++) {
        printf("| %d |", gaps[g]);
        for (int j = 0; j < nb; j++)
            printf(" %.0f |", lat[g][j]);
        printf("\n");
    }
    return 0;
}

/* ---- driver ------------------------------------------------------------------- */

#define MAX_ROUNDS 32
#define MAX_T 8

typedef struct cell {
    double empty[MAX_ROUNDS], axpy[MAX_ROUNDS];
    int n;
    int ok;
} cell;

static int run_child(const char *exe, const char *which, int t, int batches, int regions, cell *c) {
    char cmd[PATH_MAX + 128];
    snprintf(cmd, sizeof cmd, "'%s' --run %s %d %d %d", exe, which, t, batches, regions);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    char line[256] = "";
    double e = -1, a = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "empty=%lf axpy=%lf", &e, &a) == 2) break;
    int rc = pclose(f);
    if (rc != 0 || e < 0) return -1;
    c->empty[c->n] = e;
    c->axpy[c->n] = a;
    c->n++;
    c->ok = 1;
    return 0;
}

static void fmt_cell(char *buf, size_t cap, const double *v, int n) {
    if (n == 0) {
        snprintf(buf, cap, "n/a");
        return;
    }
    double tmp[MAX_ROUNDS];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    double m = median(tmp, n);
    snprintf(buf, cap, "%.0f [%.0f..%.0f]", m, tmp[0], tmp[n - 1]);
}

static double cell_median(const double *v, int n) {
    double tmp[MAX_ROUNDS];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    return median(tmp, n);
}

static int driver(int rounds, int batches, int regions, const int *ts, int nt) {
    char self[PATH_MAX], peer[PATH_MAX + 32];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        perror("bench_forkjoin: /proc/self/exe");
        return 1;
    }
    self[len] = '\0';
    snprintf(peer, sizeof peer, "%s", self);
    char *slash = strrchr(peer, '/');
    snprintf(slash + 1, sizeof peer - (size_t)(slash + 1 - peer), "peer_forkjoin_llvmomp");
    int have_peer = access(peer, X_OK) == 0;

    static cell cells[3][MAX_T];
    memset(cells, 0, sizeof cells);
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < nt; i++) {
            /* Alternate: pool, libgomp, libomp, then the next thread count. */
            run_child(self, "pool", ts[i], batches, regions, &cells[0][i]);
            run_child(self, "omp", ts[i], batches, regions, &cells[1][i]);
            if (have_peer) run_child(peer, "omp", ts[i], batches, regions, &cells[2][i]);
        }
    }
    printf("fork-join latency, median ns per region over %d rounds [min..max of the round "
           "medians];\neach round: median of %d batches x %d back-to-back regions; "
           "runtimes alternate pool, libgomp, libomp%s\n\n",
           rounds, batches, regions, have_peer ? "" : " (libomp peer not built)");
    printf("| region | threads | pagoda pool | libgomp (GCC) | libomp (LLVM) | pool / best "
           "OpenMP |\n| --- | --- | --- | --- | --- | --- |\n");
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < nt; i++) {
            char b0[64], b1[64], b2[64];
            double *v0 = k ? cells[0][i].axpy : cells[0][i].empty;
            double *v1 = k ? cells[1][i].axpy : cells[1][i].empty;
            double *v2 = k ? cells[2][i].axpy : cells[2][i].empty;
            fmt_cell(b0, sizeof b0, v0, cells[0][i].n);
            fmt_cell(b1, sizeof b1, v1, cells[1][i].n);
            fmt_cell(b2, sizeof b2, v2, cells[2][i].n);
            double best = -1;
            if (cells[1][i].n) best = cell_median(v1, cells[1][i].n);
            if (cells[2][i].n) {
                double m2 = cell_median(v2, cells[2][i].n);
                if (best < 0 || m2 < best) best = m2;
            }
            char ratio[32] = "n/a";
            if (best > 0 && cells[0][i].n)
                snprintf(ratio, sizeof ratio, "%.2f", cell_median(v0, cells[0][i].n) / best);
            printf("| %s | %d | %s | %s | %s | %s |\n", k ? "axpy 16384 f32" : "empty", ts[i], b0,
                   b1, b2, ratio);
        }
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "--run") == 0) {
        if (argc != 6) {
            fprintf(stderr, "usage: %s --run pool|omp THREADS BATCHES REGIONS\n", argv[0]);
            return 2;
        }
        return run_one(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    }
    if (argc >= 2 && strcmp(argv[1], "--wake") == 0) return run_wake();
    int rounds = 5, batches = 20, regions = 10000;
    int ts[MAX_T] = {1, 2}, nt = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batches") && i + 1 < argc)
            batches = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--regions") && i + 1 < argc)
            regions = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            nt = 0;
            for (char *s = strtok(argv[++i], " ,"); s && nt < MAX_T; s = strtok(NULL, " ,"))
                ts[nt++] = atoi(s);
        } else {
            fprintf(stderr,
                    "usage: %s [--rounds R] [--batches B] [--regions N] [--threads \"1 2\"] | "
                    "--run pool|omp T B N | --wake\n",
                    argv[0]);
            return 2;
        }
    }
    if (rounds < 1 || rounds > MAX_ROUNDS || batches < 1 || regions < 1 || nt < 1) {
        fprintf(stderr, "bench_forkjoin: rounds 1..%d, batches >= 1, regions >= 1\n", MAX_ROUNDS);
        return 2;
    }
    int rc = driver(rounds, batches, regions, ts, nt);
    if (rc == 0) rc = run_wake();
    return rc;
}
