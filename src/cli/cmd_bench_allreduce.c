/* `pagoda bench allreduce`: the latency of the tensor-parallel all-reduce
 * (src/dist/comm.h) for float counts around the models' hidden sizes, over
 * shared memory between -tp N forked ranks, or over MPI when started by
 * mpirun (every rank runs the command; rank 0 prints). For each count:
 * warm-up, then --repeats timed runs of --iters back-to-back all-reduces;
 * the median and the minimum per all-reduce over the runs, and the bytes
 * per second of one rank's vector (n * 4 / time). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "bench/harness.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "dist/comm.h"

#define CMD "pagoda bench allreduce"
#define MAX_COUNTS 32

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: pagoda bench allreduce [options]\n"
        "       mpirun -np N pagoda bench allreduce [options]\n\n"
        "All-reduce latency (sum of F32 vectors in rank order) between tensor-parallel ranks.\n"
        "Without mpirun the ranks are processes of this host over shared memory.\n\n"
        "  -tp N, --tensor-parallel-size N  ranks (default 2; 1..64); under mpirun the world\n"
        "                     size (then -tp, if given, must equal it)\n"
        "  --floats N[,N...]  vector lengths (default: 64,256,1024,2048,4096,16384,65536,262144;\n"
        "                     2048 and 4096 are the hidden sizes of Llama-3.2-1B / 8B)\n"
        "  --repeats R        timed runs per length, median reported (9)\n"
        "  --iters I          all-reduces per run (0 = about 2^22 floats' worth, 10..2000)\n");
}

/* "N[,N...]": every item an integer in [1, 2^26], no empty item, at most
 * MAX_COUNTS; 0 on anything else. */
static int parse_counts(const char *v, size_t *counts, int *n) {
    *n = 0;
    for (const char *p = v;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char item[32];
        long long x;
        if (len == 0 || len >= sizeof item || *n == MAX_COUNTS) return 0;
        memcpy(item, p, len);
        item[len] = 0;
        if (!pg_args_long(item, 1, 1 << 26, &x)) return 0;
        counts[(*n)++] = (size_t)x;
        if (!e) return 1;
        p = e + 1;
    }
}

int pg_cmd_bench_allreduce(int argc, char **argv) {
    long long tp = 0, repeats = 9, iters = 0;
    size_t counts[MAX_COUNTS] = {64, 256, 1024, 2048, 4096, 16384, 65536, 262144};
    int n_counts = 8;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "-tp") && strcmp(a, "--tensor-parallel-size") && strcmp(a, "--floats") &&
            strcmp(a, "--repeats") && strcmp(a, "--iters")) {
            if (pg_args_is_option(a)) return pg_args_unknown(CMD, a);
            return pg_args_unexpected(CMD, a);
        }
        const char *v = pg_args_value(CMD, argc, argv, &i);
        if (!v) return 2;
        if (!strcmp(a, "-tp") || !strcmp(a, "--tensor-parallel-size")) {
            if (!pg_args_long(v, 1, 64, &tp))
                return pg_args_bad_value(CMD, a, v, "an integer in [1, 64]");
        } else if (!strcmp(a, "--floats")) {
            if (!parse_counts(v, counts, &n_counts))
                return pg_args_bad_value(CMD, a, v,
                                         "up to 32 comma-separated integers in [1, 67108864]");
        } else if (!strcmp(a, "--repeats")) {
            if (!pg_args_long(v, 1, 1000, &repeats))
                return pg_args_bad_value(CMD, a, v, "an integer in [1, 1000]");
        } else if (!pg_args_long(v, 0, 1000000, &iters)) {
            return pg_args_bad_value(CMD, a, v, "an integer in [0, 1000000]");
        }
    }
    size_t max_n = 0;
    for (int k = 0; k < n_counts; k++)
        max_n = counts[k] > max_n ? counts[k] : max_n;

    pg_comm *c = NULL;
    pagoda_status st;
    if (pg_comm_under_mpi()) {
        st = pg_comm_create_mpi(&c);
        if (st == PAGODA_OK && tp && tp != pg_comm_size(c)) {
            if (pg_comm_rank(c) == 0)
                fprintf(stderr, "%s: -tp %lld but mpirun started %d ranks\n", CMD, tp,
                        pg_comm_size(c));
            pg_comm_free(c);
            return 2;
        }
    } else {
        st = pg_comm_create_shm(tp ? (int)tp : 2, max_n, 64, &c);
    }
    if (st != PAGODA_OK) {
        fprintf(stderr, "%s: %s\n", CMD, pg_last_error());
        return 1;
    }
    int rank = pg_comm_rank(c), size = pg_comm_size(c);
    if (rank == 0) {
        printf("command: pagoda bench");
        for (int i = 0; i < argc; i++)
            printf(" %s", argv[i]);
        printf("\nbackend %s, %d ranks, %lld runs per length (median and min per all-reduce)\n",
               pg_comm_kind_name(pg_comm_get_kind(c)), size, repeats);
        printf("%10s %8s %12s %12s %12s\n", "floats", "iters", "median us", "min us", "GB/s");
    }
    float *buf = malloc(max_n * sizeof(float));
    double *t = malloc((size_t)repeats * sizeof(double));
    int rc = 0;
    if (!buf || !t) {
        fprintf(stderr, "%s: out of memory\n", CMD);
        rc = 1;
        goto done;
    }
    for (size_t i = 0; i < max_n; i++)
        buf[i] = (float)((i * 7 + (size_t)rank) % 13) * 0.01f;
    for (int k = 0; k < n_counts && !rc; k++) {
        size_t n = counts[k];
        long long it = iters ? iters : (long long)((1 << 22) / n);
        if (!iters) it = it < 10 ? 10 : it > 2000 ? 2000 : it;
        /* warm-up; all-reduce of the same data grows it: rescale each time */
        for (int w = 0; w < 10 && !rc; w++)
            if (pg_comm_allreduce_sum_f32(c, buf, n) != PAGODA_OK) rc = 1;
        for (long long r = 0; r < repeats && !rc; r++) {
            if (pg_comm_barrier(c) != PAGODA_OK) {
                rc = 1;
                break;
            }
            double t0 = pg_bench_now();
            for (long long j = 0; j < it; j++)
                if (pg_comm_allreduce_sum_f32(c, buf, n) != PAGODA_OK) {
                    rc = 1;
                    break;
                }
            t[r] = (pg_bench_now() - t0) / (double)it;
            for (size_t i = 0; i < n; i++)
                buf[i] *= 1e-3f; /* keep the values finite */
        }
        if (rc) {
            fprintf(stderr, "%s: rank %d: %s\n", CMD, rank, pg_last_error());
            break;
        }
        double mn = t[0];
        for (long long r = 1; r < repeats; r++)
            mn = t[r] < mn ? t[r] : mn;
        double med = pg_bench_median(t, (int)repeats);
        if (rank == 0)
            printf("%10zu %8lld %12.2f %12.2f %12.3f\n", n, it, med * 1e6, mn * 1e6,
                   (double)n * 4.0 / med / 1e9);
        fflush(stdout);
    }
done:
    free(buf), free(t);
    pagoda_status fst = pg_comm_free(c);
    if (pg_comm_under_mpi() || rank == 0) {
        if (fst != PAGODA_OK) {
            fprintf(stderr, "%s: %s\n", CMD, pg_last_error());
            rc = 1;
        }
        return rc;
    }
    _exit(rc); /* a forked shm rank: no atexit handlers of the parent */
}
