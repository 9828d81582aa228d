/* Thread pool: partition rule, parallel_for coverage, fork-join regions,
 * barriers, the futex sleep/wake path, nesting, concurrent callers,
 * oversubscription, pinning, options/environment errors, default pool. */
#define _GNU_SOURCE
#include "testutil.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/affinity.h"
#include "base/log.h"
#include "base/pool.h"

static pg_pool *make_pool(int n, long blocktime_us, int pin) {
    pg_pool_options o = pg_pool_options_default();
    o.n_threads = n;
    o.blocktime_us = blocktime_us;
    o.pin = pin;
    pg_pool *p = NULL;
    pagoda_status s = pg_pool_create(&o, &p);
    if (s != PAGODA_OK) fail_msg("pg_pool_create(%d): %s", n, pg_last_error());
    if (n > 0) assert_int_equal(pg_pool_size(p), n);
    return p;
}

/* ---- partition rule ------------------------------------------------------ */

static void test_partition_covers_range_exactly_once(void **state) {
    (void)state;
    static const size_t grains[] = {0, 1, 3, 16, 1000};
    for (int t = 1; t <= 9; t++) {
        for (size_t n = 0; n < 300; n += (n < 40 ? 1 : 7)) {
            for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
                size_t grain = grains[g] ? grains[g] : 1;
                size_t expect = 0, min_chunks = SIZE_MAX, max_chunks = 0;
                for (int tid = 0; tid < t; tid++) {
                    size_t b, e;
                    pg_pool_partition(n, grains[g], t, tid, &b, &e);
                    if (b == e) continue;
                    assert_true(b < e);
                    assert_int_equal(b, expect); /* contiguous, in tid order */
                    assert_int_equal(b % grain, 0);
                    if (e != n) assert_int_equal(e % grain, 0);
                    size_t chunks = (e - b + grain - 1) / grain;
                    if (chunks < min_chunks) min_chunks = chunks;
                    if (chunks > max_chunks) max_chunks = chunks;
                    expect = e;
                }
                assert_int_equal(expect, n);
                if (n) assert_true(max_chunks - min_chunks <= 1); /* balanced */
            }
        }
    }
    /* The documented formula on one case: 10 chunks over 4 threads = 3,3,2,2. */
    size_t b, e;
    pg_pool_partition(10, 1, 4, 1, &b, &e);
    assert_int_equal(b, 3);
    assert_int_equal(e, 6);
    pg_pool_partition(10, 1, 4, 3, &b, &e);
    assert_int_equal(b, 8);
    assert_int_equal(e, 10);
    pg_pool_partition(10, 1, 4, 4, &b, &e); /* no such thread: empty */
    assert_int_equal(b, e);
    pg_pool_partition(5, 2, 8, 2, &b, &e); /* chunks [0,2) [2,4) [4,5) */
    assert_int_equal(b, 4);
    assert_int_equal(e, 5);
    pg_pool_partition(5, 2, 8, 3, &b, &e); /* only 3 active threads */
    assert_int_equal(b, e);
}

/* ---- parallel_for ----------------------------------------------------------- */

typedef struct pf_check {
    unsigned char *hits;
    size_t n, grain;
    int nthreads;
    atomic_int bad;
    atomic_int calls;
} pf_check;

static void pf_mark(void *ctx, size_t begin, size_t end, int tid) {
    pf_check *c = ctx;
    atomic_fetch_add(&c->calls, 1);
    size_t b, e;
    pg_pool_partition(c->n, c->grain, c->nthreads, tid, &b, &e);
    if (b != begin || e != end || begin >= end) atomic_fetch_add(&c->bad, 1);
    for (size_t i = begin; i < end; i++)
        c->hits[i]++; /* disjoint ranges: no race */
}

static void check_parallel_for(pg_pool *p, size_t n, size_t grain) {
    pf_check c = {.n = n, .grain = grain, .nthreads = pg_pool_size(p)};
    c.hits = calloc(n ? n : 1, 1);
    assert_non_null(c.hits);
    pg_pool_parallel_for(p, n, grain, pf_mark, &c);
    assert_int_equal(atomic_load(&c.bad), 0);
    for (size_t i = 0; i < n; i++)
        if (c.hits[i] != 1)
            fail_msg("n=%zu grain=%zu: index %zu hit %d times", n, grain, i, c.hits[i]);
    size_t b, e;
    int expect_calls = 0;
    for (int t = 0; t < c.nthreads; t++) {
        pg_pool_partition(n, grain, c.nthreads, t, &b, &e);
        expect_calls += b < e;
    }
    assert_int_equal(atomic_load(&c.calls), expect_calls);
    free(c.hits);
}

static void test_parallel_for_covers_each_index_once(void **state) {
    (void)state;
    /* 3 and 5 threads oversubscribe a small machine: they run unpinned. */
    static const int sizes[] = {1, 2, 3, 5};
    for (size_t s = 0; s < 4; s++) {
        pg_pool *p = make_pool(sizes[s], -1, 1);
        for (size_t n = 0; n < 70; n++) {
            check_parallel_for(p, n, 1);
            check_parallel_for(p, n, 4);
        }
        check_parallel_for(p, 16384, 16);
        check_parallel_for(p, 100003, 0);
        pg_pool_free(p);
    }
}

/* ---- run / barrier ------------------------------------------------------------ */

typedef struct run_check {
    atomic_int per_tid[16];
    atomic_int bad;
    int n;
} run_check;

static void run_count(void *ctx, int tid, int nthreads) {
    run_check *c = ctx;
    if (nthreads != c->n || tid < 0 || tid >= nthreads)
        atomic_fetch_add(&c->bad, 1);
    else
        atomic_fetch_add(&c->per_tid[tid], 1);
}

static void test_run_calls_every_thread_once(void **state) {
    (void)state;
    for (int n = 1; n <= 4; n++) {
        pg_pool *p = make_pool(n, -1, 1);
        run_check c = {.n = n};
        for (int r = 0; r < 50; r++)
            pg_pool_run(p, run_count, &c);
        assert_int_equal(atomic_load(&c.bad), 0);
        for (int t = 0; t < n; t++)
            assert_int_equal(atomic_load(&c.per_tid[t]), 50);
        pg_pool_free(p);
    }
}

typedef struct phases {
    int slot[16];
    int phases;
    atomic_int bad;
    pg_pool *p;
} phases;

/* Each phase every thread writes its slot, waits, checks everyone's slot. */
static void run_phases(void *ctx, int tid, int nthreads) {
    phases *ph = ctx;
    for (int k = 1; k <= ph->phases; k++) {
        ph->slot[tid] = k; /* plain writes: the barrier orders them */
        pg_pool_barrier(ph->p, tid);
        for (int j = 0; j < nthreads; j++)
            if (ph->slot[j] != k) atomic_fetch_add(&ph->bad, 1);
        pg_pool_barrier(ph->p, tid);
    }
}

static void test_barrier_phases(void **state) {
    (void)state;
    static const long blocktimes[] = {0, 50, -1};
    for (int n = 1; n <= 4; n++) {
        for (int b = 0; b < 3; b++) {
            pg_pool *p = make_pool(n, blocktimes[b], 1);
            phases ph = {.phases = 200, .p = p};
            for (int r = 0; r < 5; r++)
                pg_pool_run(p, run_phases, &ph);
            assert_int_equal(atomic_load(&ph.bad), 0);
            pg_pool_free(p);
        }
    }
}

static void empty_region(void *ctx, int tid, int nthreads) {
    (void)ctx;
    (void)tid;
    (void)nthreads;
}

static void test_many_back_to_back_regions(void **state) {
    (void)state;
    /* 100k on x86; fewer on Arm, whose test builds run under qemu here. */
#if defined(__x86_64__)
    const int regions = 100000;
#else
    const int regions = 20000;
#endif
    pg_pool *p = make_pool(2, -1, 1);
    for (int r = 0; r < regions; r++)
        pg_pool_run(p, empty_region, NULL);
    run_check c = {.n = 2};
    for (int r = 0; r < regions / 10; r++)
        pg_pool_run(p, run_count, &c);
    assert_int_equal(atomic_load(&c.per_tid[1]), regions / 10);
    pg_pool_free(p);
}

/* ---- waiting policy ---------------------------------------------------------- */

static void test_blocktime_zero_sleeps_and_wakes(void **state) {
    (void)state;
    pg_pool *p = make_pool(3, 0, 0);
    assert_int_equal(pg_pool_blocktime_us(p), 0);
    run_check c = {.n = 3};
    for (int round = 0; round < 20; round++) {
        uint64_t before = pg_pool_sleep_count(p);
        pg_pool_run(p, run_count, &c);
        /* With block time 0 both workers go to sleep right after the region;
         * wait until they have (no timing assumption: just poll). */
        while (pg_pool_sleep_count(p) < before + 2)
            usleep(100);
        /* Next region must wake them through FUTEX_WAKE. */
    }
    pg_pool_run(p, run_count, &c);
    for (int t = 0; t < 3; t++)
        assert_int_equal(atomic_load(&c.per_tid[t]), 21);
    /* Many quick regions with immediate sleeping. */
    for (int r = 0; r < 2000; r++)
        pg_pool_run(p, empty_region, NULL);
    pg_pool_free(p);
}

static void test_large_blocktime_spins_and_stops(void **state) {
    (void)state;
    pg_pool *p = make_pool(2, 10 * 1000 * 1000, 1); /* spin up to 10 s */
    run_check c = {.n = 2};
    for (int r = 0; r < 1000; r++)
        pg_pool_run(p, run_count, &c);
    assert_int_equal(atomic_load(&c.per_tid[1]), 1000);
    phases ph = {.phases = 100, .p = p};
    pg_pool_run(p, run_phases, &ph);
    assert_int_equal(atomic_load(&ph.bad), 0);
    pg_pool_free(p); /* must stop a spinning worker promptly */
}

static void test_short_blocktime_with_idle_gaps(void **state) {
    (void)state;
    pg_pool *p = make_pool(2, 20, 1);
    run_check c = {.n = 2};
    for (int r = 0; r < 20; r++) {
        pg_pool_run(p, run_count, &c);
        usleep(2000); /* longer than the block time: workers may fall asleep */
    }
    assert_int_equal(atomic_load(&c.per_tid[0]), 20);
    assert_int_equal(atomic_load(&c.per_tid[1]), 20);
    pg_pool_free(p);
}

/* ---- nesting, concurrent callers --------------------------------------------- */

typedef struct nest {
    pg_pool *p;
    atomic_int inner_calls;
    atomic_int bad;
} nest;

static void inner_region(void *ctx, int tid, int nthreads) {
    nest *x = ctx;
    if (tid != 0 || nthreads != 1) atomic_fetch_add(&x->bad, 1);
    pg_pool_barrier(x->p, tid); /* a 1-thread region: returns at once */
    atomic_fetch_add(&x->inner_calls, 1);
}

static void inner_for(void *ctx, size_t begin, size_t end, int tid) {
    nest *x = ctx;
    if (begin != 0 || end != 100 || tid != 0) atomic_fetch_add(&x->bad, 1);
}

static void outer_region(void *ctx, int tid, int nthreads) {
    nest *x = ctx;
    pg_pool_run(x->p, inner_region, x);
    pg_pool_parallel_for(x->p, 100, 1, inner_for, x);
    pg_pool_barrier(x->p, tid); /* the outer barrier still works afterwards */
    (void)nthreads;
}

static void test_nested_run_is_inline(void **state) {
    (void)state;
    pg_pool *p = make_pool(3, -1, 0);
    nest x = {.p = p};
    for (int r = 0; r < 10; r++)
        pg_pool_run(p, outer_region, &x);
    assert_int_equal(atomic_load(&x.bad), 0);
    assert_int_equal(atomic_load(&x.inner_calls), 30);
    pg_pool_free(p);
}

/* pg_pool_region_count counts forked regions only (nested ones and
 * parallel_for calls with one thread's worth of work run inline). */
static void test_region_count(void **state) {
    (void)state;
    pg_pool *p = make_pool(3, -1, 0);
    assert_int_equal(pg_pool_region_count(p), 0);
    nest x = {.p = p};
    pg_pool_run(p, outer_region, &x); /* its inner run is nested */
    assert_int_equal(pg_pool_region_count(p), 1);
    run_check rc = {.n = 3};
    pg_pool_run(p, run_count, &rc);
    assert_int_equal(pg_pool_region_count(p), 2);
    check_parallel_for(p, 4, 8); /* n <= grain: inline */
    assert_int_equal(pg_pool_region_count(p), 2);
    check_parallel_for(p, 4, 1);
    assert_int_equal(pg_pool_region_count(p), 3);
    pg_pool_free(p);
    /* the serial threshold: set, then back to the environment / default */
    const int64_t def = pg_pool_serial_macs();
    assert_true(def >= 0);
    pg_pool_set_serial_macs(12345);
    assert_int_equal(pg_pool_serial_macs(), 12345);
    pg_pool_set_serial_macs(0);
    assert_int_equal(pg_pool_serial_macs(), 0);
    pg_pool_set_serial_macs(-1);
    assert_int_equal(pg_pool_serial_macs(), def);
}

typedef struct caller {
    pg_pool *p;
    int bad;
} caller;

static void *external_caller(void *arg) {
    caller *c = arg;
    for (int r = 0; r < 500; r++) {
        run_check rc = {.n = pg_pool_size(c->p)};
        pg_pool_run(c->p, run_count, &rc);
        for (int t = 0; t < rc.n; t++)
            if (atomic_load(&rc.per_tid[t]) != 1) c->bad++;
    }
    return NULL;
}

static void test_concurrent_callers_are_serialized(void **state) {
    (void)state;
    pg_pool *p = make_pool(2, 50, 0);
    caller a = {.p = p}, b = {.p = p};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, external_caller, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, external_caller, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.bad, 0);
    assert_int_equal(b.bad, 0);
    pg_pool_free(p);
}

/* ---- pinning ------------------------------------------------------------------- */

typedef struct pin_check {
    pg_pool *p;
    atomic_int bad;
} pin_check;

static void check_my_cpu(void *ctx, int tid, int nthreads) {
    pin_check *c = ctx;
    (void)nthreads;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        atomic_fetch_add(&c->bad, 1);
        return;
    }
    int cpu = pg_pool_cpu(c->p, tid);
    if (cpu >= 0 && (CPU_COUNT(&set) != 1 || !CPU_ISSET(cpu, &set))) atomic_fetch_add(&c->bad, 1);
}

static void test_threads_are_pinned_to_their_cpus(void **state) {
    (void)state;
    cpu_set_t old;
    assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
    int cpus[PG_CPU_MAX], n = 0;
    assert_int_equal(pg_cpu_allowed(cpus, PG_CPU_MAX, &n), PAGODA_OK);
    pg_pool *p = make_pool(0, -1, 1); /* default: one thread per physical core */
    for (int i = 0; i < pg_pool_size(p); i++)
        assert_true(pg_pool_cpu(p, i) >= 0);
    pin_check c = {.p = p};
    pg_pool_run(p, check_my_cpu, &c);
    assert_int_equal(atomic_load(&c.bad), 0);
    pg_pool_free(p);

    /* Explicit list: every listed CPU, in order. */
    char list[64];
    snprintf(list, sizeof list, "%d", cpus[n - 1]);
    pg_pool_options o = pg_pool_options_default();
    o.cpus = list;
    assert_int_equal(pg_pool_create(&o, &p), PAGODA_OK);
    assert_int_equal(pg_pool_size(p), 1);
    assert_int_equal(pg_pool_cpu(p, 0), cpus[n - 1]);
    pg_pool_free(p);

    /* More threads than listed CPUs: works, unpinned. */
    o.n_threads = 3;
    pg_log_set_level(PG_LOG_ERROR); /* the oversubscription warning is expected */
    assert_int_equal(pg_pool_create(&o, &p), PAGODA_OK);
    pg_log_set_level(PG_LOG_INFO);
    assert_int_equal(pg_pool_size(p), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pg_pool_cpu(p, i), -1);
    run_check rc = {.n = 3};
    pg_pool_run(p, run_count, &rc);
    for (int t = 0; t < 3; t++)
        assert_int_equal(atomic_load(&rc.per_tid[t]), 1);
    pg_pool_free(p);
    sched_setaffinity(0, sizeof old, &old);
}

/* ---- options, environment, default pool ---------------------------------------- */

static void expect_create_error(const pg_pool_options *o, const char *msg_part) {
    pg_pool *p = (pg_pool *)1;
    pagoda_status s = pg_pool_create(o, &p);
    if (s != PAGODA_ERR_INVALID_ARG) fail_msg("expected INVALID_ARG, got %d", s);
    assert_null(p);
    if (!strstr(pg_last_error(), msg_part))
        fail_msg("message '%s' lacks '%s'", pg_last_error(), msg_part);
}

static void test_bad_options_and_environment(void **state) {
    (void)state;
    pg_pool_options o = pg_pool_options_default();
    o.n_threads = -1;
    expect_create_error(&o, "thread count -1");
    o = pg_pool_options_default();
    o.blocktime_us = -5;
    expect_create_error(&o, "block time -5 us is negative");
    o.blocktime_us = PG_POOL_BLOCKTIME_MAX_US + 1;
    expect_create_error(&o, "above");
    o = pg_pool_options_default();
    o.cpus = "0-";
    expect_create_error(&o, "pool cpus: '0-' ends at offset 2");
    /* A CPU outside the allowed set. */
    int cpus[PG_CPU_MAX], n = 0;
    assert_int_equal(pg_cpu_allowed(cpus, PG_CPU_MAX, &n), PAGODA_OK);
    if (n < PG_CPU_MAX) {
        int missing = 0;
        for (int i = 0; i < n && cpus[i] == missing; i++)
            missing++;
        char list[16];
        snprintf(list, sizeof list, "%d", missing);
        o.cpus = list;
        expect_create_error(&o, "is not in the process's allowed set");
    }

    o = pg_pool_options_default();
    setenv("PAGODA_CPUS", "0,,1", 1);
    expect_create_error(&o, "PAGODA_CPUS: '0,,1' at offset 2: empty item");
    setenv("PAGODA_CPUS", "", 1); /* empty = unset */
    setenv("PAGODA_BLOCKTIME_US", "abc", 1);
    expect_create_error(&o, "PAGODA_BLOCKTIME_US: 'abc' is not a number");
    setenv("PAGODA_BLOCKTIME_US", "20000000", 1);
    expect_create_error(&o, "PAGODA_BLOCKTIME_US");
    setenv("PAGODA_BLOCKTIME_US", "55", 1);
    pg_pool *p = NULL;
    assert_int_equal(pg_pool_create(&o, &p), PAGODA_OK);
    assert_int_equal(pg_pool_blocktime_us(p), 55);
    pg_pool_free(p);
    o.blocktime_us = 7; /* the option wins over the environment */
    assert_int_equal(pg_pool_create(&o, &p), PAGODA_OK);
    assert_int_equal(pg_pool_blocktime_us(p), 7);
    pg_pool_free(p);
    unsetenv("PAGODA_BLOCKTIME_US");
    unsetenv("PAGODA_CPUS");
}

static void test_describe(void **state) {
    (void)state;
    pg_pool *p = make_pool(2, 123, 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    pg_pool_describe(p, f);
    fclose(f);
    assert_non_null(strstr(buf, "  pool threads     2 "));
    assert_non_null(strstr(buf, "not pinned"));
    assert_non_null(strstr(buf, "  pool blocktime   123 us"));
    assert_non_null(strstr(buf, "(option)"));
    free(buf);
    pg_pool_free(p);
}

static void test_default_pool(void **state) {
    (void)state;
    pg_pool_default_shutdown();
    pg_pool_options o = pg_pool_options_default();
    o.n_threads = 2;
    o.pin = 0;
    assert_int_equal(pg_pool_default_configure(&o), PAGODA_OK);
    pg_pool *p = pg_pool_default();
    assert_non_null(p);
    assert_int_equal(pg_pool_size(p), 2);
    assert_ptr_equal(pg_pool_default(), p);
    assert_int_equal(pg_pool_default_configure(&o), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "already exists"));
    check_parallel_for(p, 1000, 3);
    pg_pool_default_shutdown();

    /* A bad environment: the error is reported by configure ... */
    setenv("PAGODA_CPUS", "zz", 1);
    assert_int_equal(pg_pool_default_configure(NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "PAGODA_CPUS"));
    /* ... and pg_pool_default() falls back to the defaults (logging it). */
    pg_log_set_level(PG_LOG_OFF);
    p = pg_pool_default();
    pg_log_set_level(PG_LOG_INFO);
    assert_non_null(p);
    assert_true(pg_pool_size(p) >= 1);
    unsetenv("PAGODA_CPUS");
    pg_pool_default_shutdown();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partition_covers_range_exactly_once),
        cmocka_unit_test(test_parallel_for_covers_each_index_once),
        cmocka_unit_test(test_run_calls_every_thread_once),
        cmocka_unit_test(test_barrier_phases),
        cmocka_unit_test(test_many_back_to_back_regions),
        cmocka_unit_test(test_blocktime_zero_sleeps_and_wakes),
        cmocka_unit_test(test_large_blocktime_spins_and_stops),
        cmocka_unit_test(test_short_blocktime_with_idle_gaps),
        cmocka_unit_test(test_nested_run_is_inline),
        cmocka_unit_test(test_region_count),
        cmocka_unit_test(test_concurrent_callers_are_serialized),
        cmocka_unit_test(test_threads_are_pinned_to_their_cpus),
        cmocka_unit_test(test_bad_options_and_environment),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_default_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
