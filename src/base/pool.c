/* Thread pool: fork-join regions over persistent pinned workers. See pool.h.
 *
 * Synchronisation words, each on its own cache-line pair (128 bytes: covers
 * the x86 adjacent-line prefetcher and 128-byte-line Arm cores):
 *   fork   epoch counter; the caller publishes fn/ctx (same line, read by
 *          workers right after they see the epoch move) then bumps it
 *          (release); workers wait for it to change (acquire).
 *   join   count of workers still running the region; each decrements it
 *          when done (release); the caller waits for 0 (acquire).
 *   bar_*  sense-reversing central barrier: arrival counter + phase word.
 * Every waiter spins for the block time, then sleeps on the word with
 * FUTEX_WAIT. A sleeper first increments the word's `sleepers`, then
 * re-reads the word (both seq_cst); a notifier changes the word, then reads
 * `sleepers` (both seq_cst) and calls FUTEX_WAKE only if someone may sleep.
 * By the single total order of seq_cst operations either the sleeper sees
 * the new value or the notifier sees the sleeper, and FUTEX_WAIT itself
 * re-checks the value in the kernel, so no wake-up is lost. */
#define _GNU_SOURCE
#include "base/pool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/affinity.h"
#include "base/log.h"

#define PG_POOL_LINE 128
/* Spin with only pause/isb for this long, then spin with sched_yield. */
#define PG_POOL_PURE_SPIN_NS 50000u

typedef struct waitword {
    _Atomic uint32_t value;
    _Atomic uint32_t sleepers;
} waitword;

typedef struct worker_arg {
    struct pg_pool *pool;
    int tid;
} worker_arg;

/* Padding between the synchronisation words is deliberate (false sharing). */
struct pg_pool { // NOLINT(clang-analyzer-optin.performance.Padding)
    /* Read-only after creation. */
    int n;
    int pinned;
    long blocktime_us;
    uint64_t blocktime_ns;
    uint64_t id; /* unique per pool: the caller-pinning cache key */
    int *cpus;   /* n entries when pinned */
    int n_cpus_listed;
    char cpus_text[256]; /* the CPU list the pool chose from, formatted */
    const char *src_threads, *src_cpus, *src_blocktime;
    pthread_t *threads; /* n-1 workers: tid 1..n-1 */
    worker_arg *args;
    int n_started;

    /* Locked by every region's caller: kept off the lines workers read. */
    _Alignas(PG_POOL_LINE) pthread_mutex_t run_mu;

    /* Fork line: written by the caller, read by all workers. */
    _Alignas(PG_POOL_LINE) waitword fork;
    void (*fn)(void *ctx, int tid, int nthreads);
    void *ctx;
    int stop;

    _Alignas(PG_POOL_LINE) waitword join;
    _Alignas(PG_POOL_LINE) _Atomic uint32_t bar_count;
    _Alignas(PG_POOL_LINE) waitword bar_phase;
    _Alignas(PG_POOL_LINE) _Atomic uint64_t n_sleeps; /* diagnostics */
    _Atomic uint64_t n_regions;                       /* diagnostics: forked regions */
};

/* Pool whose region the calling thread is executing (NULL outside regions),
 * and depth of inline (nested) regions on it. */
static _Thread_local pg_pool *tl_pool;
static _Thread_local int tl_nested;
/* id of the pool this (external) thread was pinned for. */
static _Thread_local uint64_t tl_pinned_id;
static _Atomic uint64_t g_next_id = 1;

/* ---- waiting ------------------------------------------------------------ */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("isb" ::: "memory"); /* a short stall, like Rust's spin_loop */
#else
    atomic_signal_fence(memory_order_seq_cst);
#endif
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *word, uint32_t expected) {
    /* Returns on wake-up, EAGAIN (value already changed) or EINTR; the caller
     * re-checks the value in every case. */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* After changing w->value (seq_cst), wake sleepers if there may be any. */
static inline void notify(waitword *w) {
    if (atomic_load_explicit(&w->sleepers, memory_order_seq_cst) != 0) futex_wake_all(&w->value);
}

static inline bool wait_done(uint32_t v, uint32_t old, bool until_zero) {
    return until_zero ? v == 0 : v != old;
}

/* Wait until w->value != old (until_zero false) or == 0 (until_zero true):
 * spin for the pool's block time, then sleep on the futex. Returns the value
 * seen (acquire). */
static uint32_t wait_word(pg_pool *p, waitword *w, uint32_t old, bool until_zero) {
    uint32_t v = atomic_load_explicit(&w->value, memory_order_acquire);
    if (wait_done(v, old, until_zero)) return v;
    if (p->blocktime_ns > 0) {
        uint64_t start = now_ns();
        for (;;) {
            for (int i = 0; i < 64; i++) {
                cpu_relax();
                v = atomic_load_explicit(&w->value, memory_order_acquire);
                if (wait_done(v, old, until_zero)) return v;
            }
            uint64_t spent = now_ns() - start;
            if (spent >= p->blocktime_ns) break;
            /* Past the first PG_POOL_PURE_SPIN_NS, offer the CPU to any other
             * runnable thread between checks (a no-op on an otherwise idle
             * core): an oversubscribed or shared machine then lets the thread
             * we wait for run instead of burning its time slice. */
            if (spent >= PG_POOL_PURE_SPIN_NS) sched_yield();
        }
    }
    for (;;) {
        atomic_fetch_add_explicit(&w->sleepers, 1, memory_order_seq_cst);
        v = atomic_load_explicit(&w->value, memory_order_seq_cst);
        if (!wait_done(v, old, until_zero)) {
            atomic_fetch_add_explicit(&p->n_sleeps, 1, memory_order_relaxed);
            futex_wait(&w->value, v);
        }
        atomic_fetch_sub_explicit(&w->sleepers, 1, memory_order_relaxed);
        v = atomic_load_explicit(&w->value, memory_order_acquire);
        if (wait_done(v, old, until_zero)) return v;
    }
}

/* ---- workers -------------------------------------------------------------- */

static void *worker_main(void *arg) {
    worker_arg *a = arg;
    pg_pool *p = a->pool;
    int tid = a->tid;
    tl_pool = p;
    uint32_t seen = 0; /* the fork epoch starts at 0 and moves only after all workers exist */
    for (;;) {
        seen = wait_word(p, &p->fork, seen, false);
        if (p->stop) break;
        p->fn(p->ctx, tid, p->n);
        if (atomic_fetch_sub_explicit(&p->join.value, 1, memory_order_seq_cst) == 1)
            notify(&p->join);
    }
    return NULL;
}

/* Publish a job (or stop) and wake the workers. Caller holds run_mu. */
static void fork_workers(pg_pool *p, void (*fn)(void *, int, int), void *ctx) {
    if (p->fn != fn) p->fn = fn; /* avoid dirtying the line when unchanged */
    if (p->ctx != ctx) p->ctx = ctx;
    atomic_store_explicit(&p->join.value, (uint32_t)(p->n - 1), memory_order_relaxed);
    atomic_fetch_add_explicit(&p->fork.value, 1, memory_order_seq_cst);
    notify(&p->fork);
}

static void stop_workers(pg_pool *p) {
    if (p->n_started == 0) return;
    pthread_mutex_lock(&p->run_mu);
    p->stop = 1;
    atomic_fetch_add_explicit(&p->fork.value, 1, memory_order_seq_cst);
    notify(&p->fork);
    pthread_mutex_unlock(&p->run_mu);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->threads[i], NULL);
    p->n_started = 0;
}

/* ---- options -------------------------------------------------------------- */

pg_pool_options pg_pool_options_default(void) {
    pg_pool_options o = {.n_threads = 0, .cpus = NULL, .blocktime_us = -1, .pin = 1};
    return o;
}

static pagoda_status parse_blocktime(const char *what, const char *s, long *out) {
    const char *q = s;
    while (*q == ' ')
        q++;
    if (*q < '0' || *q > '9')
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "%s: '%s' is not a number of microseconds (expected 0..%ld)", what, s,
                        PG_POOL_BLOCKTIME_MAX_US);
    char *end = NULL;
    errno = 0;
    long v = strtol(q, &end, 10);
    while (*end == ' ')
        end++;
    if (*end != '\0' || errno == ERANGE || v > PG_POOL_BLOCKTIME_MAX_US)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "%s: '%s' is not a number of microseconds in 0..%ld", what, s,
                        PG_POOL_BLOCKTIME_MAX_US);
    *out = v;
    return PAGODA_OK;
}

static pagoda_status pool_create(const pg_pool_options *opt, bool use_env, pg_pool **out) {
    *out = NULL;
    pg_pool_options o = opt ? *opt : pg_pool_options_default();
    if (o.n_threads < 0 || o.n_threads > PG_POOL_MAX_THREADS)
        return pg_error(PAGODA_ERR_INVALID_ARG, "pool: thread count %d is outside 0..%d",
                        o.n_threads, PG_POOL_MAX_THREADS);

    /* Block time. */
    long bt = PG_POOL_BLOCKTIME_DEFAULT_US;
    const char *src_bt = "default";
    const char *env_bt = use_env ? getenv("PAGODA_BLOCKTIME_US") : NULL;
    if (o.blocktime_us >= 0) {
        if (o.blocktime_us > PG_POOL_BLOCKTIME_MAX_US)
            return pg_error(PAGODA_ERR_INVALID_ARG, "pool: block time %ld us is above %ld us",
                            o.blocktime_us, PG_POOL_BLOCKTIME_MAX_US);
        bt = o.blocktime_us;
        src_bt = "option";
    } else if (o.blocktime_us != -1) {
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "pool: block time %ld us is negative (-1 means default)", o.blocktime_us);
    } else if (env_bt && *env_bt) {
        pagoda_status s = parse_blocktime("PAGODA_BLOCKTIME_US", env_bt, &bt);
        if (s != PAGODA_OK) return s;
        src_bt = "PAGODA_BLOCKTIME_US";
    }

    /* CPUs. */
    int allowed[PG_CPU_MAX], list[PG_CPU_MAX];
    int n_allowed = 0, n_list = 0;
    pagoda_status s = pg_cpu_allowed(allowed, PG_CPU_MAX, &n_allowed);
    if (s != PAGODA_OK) return s;
    const char *env_cpus = use_env ? getenv("PAGODA_CPUS") : NULL;
    const char *src_cpus;
    if (o.cpus || (env_cpus && *env_cpus)) {
        const char *what = o.cpus ? "pool cpus" : "PAGODA_CPUS";
        src_cpus = o.cpus ? "option" : "PAGODA_CPUS";
        s = pg_cpulist_parse(what, o.cpus ? o.cpus : env_cpus, list, PG_CPU_MAX, &n_list);
        if (s != PAGODA_OK) return s;
        for (int i = 0, j = 0; i < n_list; i++) {
            while (j < n_allowed && allowed[j] < list[i])
                j++;
            if (j == n_allowed || allowed[j] != list[i]) {
                char buf[128];
                return pg_error(PAGODA_ERR_INVALID_ARG,
                                "%s: CPU %d is not in the process's allowed set %s", what, list[i],
                                pg_cpulist_format(allowed, n_allowed, buf, sizeof buf));
            }
        }
    } else {
        src_cpus = "one per physical core";
        memcpy(list, allowed, (size_t)n_allowed * sizeof *list);
        n_list = pg_cpu_physical_cores(NULL, allowed, n_allowed, list);
    }
    if (n_list < 1) { /* cannot happen: the allowed set is never empty */
        list[0] = 0;
        n_list = 1;
    }
    int n = o.n_threads > 0 ? o.n_threads : n_list;
    bool pinned = o.pin != 0 && n <= n_list;
    if (o.pin && n > n_list)
        PG_WARN("pool: %d threads on %d CPUs: threads are not pinned (oversubscribed)", n, n_list);

    /* Allocate (cache-line aligned: the struct holds padded atomics). */
    size_t size = (sizeof(pg_pool) + PG_POOL_LINE - 1) / PG_POOL_LINE * PG_POOL_LINE;
    pg_pool *p = aligned_alloc(PG_POOL_LINE, size);
    if (!p) return pg_error(PAGODA_ERR_NOMEM, "pool: out of memory");
    memset(p, 0, size);
    pthread_mutex_init(&p->run_mu, NULL);
    p->n = n;
    p->pinned = pinned;
    p->blocktime_us = bt;
    p->blocktime_ns = (uint64_t)bt * 1000u;
    p->id = atomic_fetch_add(&g_next_id, 1);
    p->n_cpus_listed = n_list;
    pg_cpulist_format(list, n_list, p->cpus_text, sizeof p->cpus_text);
    p->src_threads = o.n_threads > 0 ? "option" : "one per chosen CPU";
    p->src_cpus = src_cpus;
    p->src_blocktime = src_bt;
    p->cpus = malloc((size_t)n * sizeof *p->cpus);
    p->threads = n > 1 ? malloc((size_t)(n - 1) * sizeof *p->threads) : NULL;
    p->args = n > 1 ? malloc((size_t)(n - 1) * sizeof *p->args) : NULL;
    if (!p->cpus || (n > 1 && (!p->threads || !p->args))) {
        pg_pool_free(p);
        return pg_error(PAGODA_ERR_NOMEM, "pool: out of memory");
    }
    for (int i = 0; i < n; i++)
        p->cpus[i] = pinned ? list[i] : -1;

    for (int i = 1; i < n; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        /* Pinned: its CPU. Unpinned: the whole allowed set, not the creating
         * thread's mask (which may itself be pinned by an earlier region). */
        cpu_set_t set;
        CPU_ZERO(&set);
        if (pinned)
            CPU_SET(p->cpus[i], &set);
        else
            for (int c = 0; c < n_allowed; c++)
                CPU_SET(allowed[c], &set);
        pthread_attr_setaffinity_np(&attr, sizeof set, &set);
        p->args[i - 1] = (worker_arg){.pool = p, .tid = i};
        int rc = pthread_create(&p->threads[i - 1], &attr, worker_main, &p->args[i - 1]);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            pg_pool_free(p);
            return pg_error(PAGODA_ERR_INTERNAL, "pool: cannot start worker %d of %d: %s", i, n,
                            strerror(rc));
        }
        p->n_started = i;
        char name[32];
        snprintf(name, sizeof name, "pagoda-w%d", i % 100000);
        name[15] = 0;
        pthread_setname_np(p->threads[i - 1], name);
    }
    *out = p;
    return PAGODA_OK;
}

pagoda_status pg_pool_create(const pg_pool_options *opt, pg_pool **out) {
    return pool_create(opt, true, out);
}

void pg_pool_free(pg_pool *p) {
    if (!p) return;
    stop_workers(p);
    pthread_mutex_destroy(&p->run_mu);
    free(p->cpus);
    free(p->threads);
    free(p->args);
    free(p);
}

int pg_pool_size(const pg_pool *p) {
    return p->n;
}
uint64_t pg_pool_sleep_count(const pg_pool *p) {
    return atomic_load_explicit(&p->n_sleeps, memory_order_relaxed);
}
long pg_pool_blocktime_us(const pg_pool *p) {
    return p->blocktime_us;
}
int pg_pool_cpu(const pg_pool *p, int i) {
    return i >= 0 && i < p->n ? p->cpus[i] : -1;
}

/* ---- regions -------------------------------------------------------------- */

static void pin_caller(pg_pool *p) {
    if (!p->pinned || tl_pinned_id == p->id) return;
    tl_pinned_id = p->id;
    if (pg_cpu_pin_self(p->cpus[0]) != PAGODA_OK)
        PG_DEBUG("pool: cannot pin the calling thread: %s", pg_last_error());
}

void pg_pool_run(pg_pool *p, void (*fn)(void *ctx, int tid, int nthreads), void *ctx) {
    if (tl_pool == p) { /* nested: run inline as a 1-thread region */
        tl_nested++;
        fn(ctx, 0, 1);
        tl_nested--;
        return;
    }
    pg_pool *prev = tl_pool;
    if (p->n == 1) {
        pin_caller(p);
        tl_pool = p;
        fn(ctx, 0, 1);
        tl_pool = prev;
        return;
    }
    pthread_mutex_lock(&p->run_mu);
    pin_caller(p);
    atomic_fetch_add_explicit(&p->n_regions, 1, memory_order_relaxed);
    fork_workers(p, fn, ctx);
    tl_pool = p;
    fn(ctx, 0, p->n);
    tl_pool = prev;
    wait_word(p, &p->join, 0, true);
    pthread_mutex_unlock(&p->run_mu);
}

void pg_pool_barrier(pg_pool *p, int tid) {
    (void)tid;
    if (p->n == 1 || tl_nested > 0) return;
    uint32_t phase = atomic_load_explicit(&p->bar_phase.value, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) == (uint32_t)p->n - 1) {
        /* Last to arrive: reset the count for the next barrier, then open. */
        atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->bar_phase.value, 1, memory_order_seq_cst);
        notify(&p->bar_phase);
    } else {
        wait_word(p, &p->bar_phase, phase, false);
    }
}

void pg_pool_partition(size_t n, size_t grain, int nthreads, int tid, size_t *begin, size_t *end) {
    if (grain == 0) grain = 1;
    if (nthreads < 1) nthreads = 1;
    size_t chunks = n / grain + (n % grain != 0);
    size_t t = chunks < (size_t)nthreads ? chunks : (size_t)nthreads;
    size_t i = (size_t)tid;
    if (tid < 0 || i >= t) {
        *begin = *end = n;
        return;
    }
    size_t q = chunks / t, r = chunks % t;
    size_t c0 = i * q + (i < r ? i : r);
    size_t c1 = c0 + q + (i < r);
    *begin = c0 * grain;
    *end = c1 * grain < n ? c1 * grain : n;
}

typedef struct pfor_job {
    size_t n, grain;
    void (*fn)(void *ctx, size_t begin, size_t end, int tid);
    void *ctx;
} pfor_job;

static void pfor_body(void *arg, int tid, int nthreads) {
    const pfor_job *j = arg;
    size_t b, e;
    pg_pool_partition(j->n, j->grain, nthreads, tid, &b, &e);
    if (b < e) j->fn(j->ctx, b, e, tid);
}

void pg_pool_parallel_for(pg_pool *p, size_t n, size_t grain,
                          void (*fn)(void *ctx, size_t begin, size_t end, int tid), void *ctx) {
    if (n == 0) return;
    if (grain == 0) grain = 1;
    if (p->n == 1 || n <= grain || tl_pool == p) {
        /* One thread's worth of work (or nested): no fork. */
        fn(ctx, 0, n, 0);
        return;
    }
    pfor_job j = {.n = n, .grain = grain, .fn = fn, .ctx = ctx};
    pg_pool_run(p, pfor_body, &j);
}

uint64_t pg_pool_region_count(const pg_pool *p) {
    return atomic_load_explicit(&p->n_regions, memory_order_relaxed);
}

/* -2: not read yet; -1 (set): back to the environment / default */
static _Atomic int64_t g_serial_set = -1, g_serial_env = -2;

int64_t pg_pool_serial_macs(void) {
    int64_t v = atomic_load_explicit(&g_serial_set, memory_order_relaxed);
    if (v >= 0) return v;
    v = atomic_load_explicit(&g_serial_env, memory_order_relaxed);
    if (v == -2) {
        const char *e = getenv("PAGODA_SERIAL_MACS");
        char *end = NULL;
        long long x = e ? strtoll(e, &end, 10) : -1;
        if (e && (end == e || *end || x < 0)) {
            PG_WARN("pool: PAGODA_SERIAL_MACS='%s' is not a count >= 0; using %ld", e,
                    (long)PG_POOL_SERIAL_MACS_DEFAULT);
            x = -1;
        }
        v = x >= 0 ? (int64_t)x : (int64_t)PG_POOL_SERIAL_MACS_DEFAULT;
        atomic_store_explicit(&g_serial_env, v, memory_order_relaxed);
    }
    return v;
}

void pg_pool_set_serial_macs(int64_t macs) {
    atomic_store_explicit(&g_serial_set, macs < 0 ? -1 : macs, memory_order_relaxed);
}

/* ---- describe / default pool --------------------------------------------- */

void pg_pool_describe(const pg_pool *p, FILE *f) {
    fprintf(f, "  %-16s %d (the calling thread + %d workers; %s)\n", "pool threads", p->n, p->n - 1,
            p->src_threads);
    if (p->pinned) {
        char buf[256];
        fprintf(f, "  %-16s %s (pinned, thread i on the i-th CPU; %s)\n", "pool cpus",
                pg_cpulist_format(p->cpus, p->n, buf, sizeof buf), p->src_cpus);
    } else {
        fprintf(f, "  %-16s not pinned (from %s; %s)\n", "pool cpus", p->cpus_text, p->src_cpus);
    }
    fprintf(f, "  %-16s %ld us spin, then futex sleep (%s)\n", "pool blocktime", p->blocktime_us,
            p->src_blocktime);
}

static pthread_mutex_t g_default_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(pg_pool *) g_default;

pg_pool *pg_pool_default(void) {
    pg_pool *p = atomic_load_explicit(&g_default, memory_order_acquire);
    if (p) return p;
    pthread_mutex_lock(&g_default_mu);
    p = atomic_load_explicit(&g_default, memory_order_relaxed);
    if (!p) {
        if (pool_create(NULL, true, &p) != PAGODA_OK) {
            PG_ERROR("%s; using the default thread settings", pg_last_error());
            if (pool_create(NULL, false, &p) != PAGODA_OK) {
                pg_pool_options one = {.n_threads = 1, .cpus = NULL, .blocktime_us = 0, .pin = 0};
                if (pool_create(&one, false, &p) != PAGODA_OK) p = NULL;
            }
        }
        atomic_store_explicit(&g_default, p, memory_order_release);
    }
    pthread_mutex_unlock(&g_default_mu);
    return p;
}

pagoda_status pg_pool_default_configure(const pg_pool_options *opt) {
    pthread_mutex_lock(&g_default_mu);
    pagoda_status s = PAGODA_OK;
    pg_pool *p = atomic_load_explicit(&g_default, memory_order_relaxed);
    if (p) {
        s = pg_error(PAGODA_ERR_INVALID_ARG,
                     "pool: the default pool already exists (%d threads); configure it before "
                     "first use",
                     p->n);
    } else {
        s = pool_create(opt, true, &p);
        if (s == PAGODA_OK) atomic_store_explicit(&g_default, p, memory_order_release);
    }
    pthread_mutex_unlock(&g_default_mu);
    return s;
}

void pg_pool_default_shutdown(void) {
    pthread_mutex_lock(&g_default_mu);
    pg_pool *p = atomic_exchange(&g_default, NULL);
    pthread_mutex_unlock(&g_default_mu);
    pg_pool_free(p);
}
