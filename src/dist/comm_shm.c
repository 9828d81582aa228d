/* The SHM backend of pg_comm (comm.h): the ranks of one host are processes
 * sharing one MAP_SHARED | MAP_ANONYMOUS region mapped before fork.
 *
 * Region layout (every part 64-byte aligned):
 *   shm_hdr    the futex word, waiter count, fault flags, rank 0's pid
 *   shm_slot   per rank: its arrival count (phase), the posted call (op, n,
 *              root) for mismatch detection
 *   data       per rank: slot_bytes (max of 4 * max_floats and max_bytes)
 *   result     4 * max_floats bytes: the reduced sums
 *
 * Every collective is one or two phases. A phase: each rank publishes its
 * slot (data and call), increments its arrival count and wakes the waiters;
 * then waits until every rank's count reached its own: it spins for the
 * block time (the thread pool's: PAGODA_BLOCKTIME_US, default
 * PG_POOL_BLOCKTIME_DEFAULT_US; after 50 us with sched_yield between polls),
 * then sleeps with FUTEX_WAIT in 100 ms slices, checking the peers'
 * liveness after each slice. All-reduce: phase 1 publishes each rank's buffer, rank r sums
 * slice r of the elements over ranks 0, 1, ..., size-1 in that order into
 * `result`; phase 2 ends the reads of the data slots; every rank copies
 * `result` (identical bits everywhere). The next collective's first phase
 * cannot complete before every rank has finished copying, so no third phase
 * is needed.
 *
 * Liveness: rank 0 polls its children with waitpid(WNOHANG) and publishes a
 * dead rank in the header; children compare getppid() with rank 0's pid and
 * read the header's flags. A rank that frees its communicator marks itself
 * left, so peers still waiting get PAGODA_ERR_IO instead of hanging. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/pool.h"
#include "base/status.h"
#include "dist/comm.h"
#include "dist/comm_impl.h"

#define SHM_MAX_RANKS 64
#define SHM_ALIGN 64
#define SHM_YIELD_NS 50000     /* spin with sched_yield after 50 us (as the pool) */
#define SHM_SLICE_NS 100000000 /* 100 ms futex waits between liveness checks */

typedef struct shm_hdr {
    _Atomic uint32_t futex;   /* bumped on every arrival and fault */
    _Atomic uint32_t waiters; /* ranks sleeping (or about to) on futex */
    _Atomic int32_t dead;     /* 1 + the rank that exited (0: none) */
    _Atomic int32_t left;     /* 1 + a rank that freed its communicator */
    pid_t pid0;               /* rank 0's process id */
} shm_hdr;

typedef struct shm_slot {
    _Alignas(SHM_ALIGN) _Atomic uint64_t phase; /* phases this rank arrived at */
    /* the call posted with phase p is call[p & 1]: a rank that has passed
     * phase p may post p + 1 while a slower one still compares p's calls */
    pg_comm_call call[2];
} shm_slot;

typedef struct shm_impl {
    void *map;
    size_t map_bytes;
    shm_hdr *hdr;
    shm_slot *slot; /* [size] */
    char *data;     /* [size][slot_bytes] */
    float *result;  /* [max_floats] */
    size_t slot_bytes, max_floats, max_bytes;
    uint64_t phase;            /* this rank's arrivals so far */
    int64_t spin_ns;           /* block time before sleeping */
    int broken;                /* an error left the ranks out of step */
    pid_t pid[SHM_MAX_RANKS];  /* rank 0: the children's pids */
    int status[SHM_MAX_RANKS]; /* rank 0: wait status of a reaped child */
    char reaped[SHM_MAX_RANKS];
} shm_impl;

static size_t round_up(size_t x) {
    return (x + SHM_ALIGN - 1) / SHM_ALIGN * SHM_ALIGN;
}

static void futex_wake_all(_Atomic uint32_t *w) {
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Bump the futex word and wake sleepers (after publishing something). */
static void notify(shm_impl *s) {
    atomic_fetch_add(&s->hdr->futex, 1);
    if (atomic_load(&s->hdr->waiters) > 0) futex_wake_all(&s->hdr->futex);
}

static char *slot_data(shm_impl *s, int r) {
    return s->data + (size_t)r * s->slot_bytes;
}

/* Rank 0: reap child r if it exited. Returns 1 if it did (now or before). */
static int child_exited(shm_impl *s, int r) {
    if (s->reaped[r]) return 1;
    int st = 0;
    pid_t p = waitpid(s->pid[r], &st, WNOHANG);
    if (p == s->pid[r] || (p < 0 && errno == ECHILD)) {
        s->reaped[r] = 1;
        s->status[r] = p == s->pid[r] ? st : 0;
        return 1;
    }
    return 0;
}

/* Checked between futex slices: PAGODA_ERR_IO if a peer is gone. */
static pagoda_status check_peers(pg_comm *c) {
    shm_impl *s = c->impl;
    if (c->rank == 0) {
        for (int r = 1; r < c->size; r++) {
            if (!child_exited(s, r)) continue;
            int expect = 0;
            atomic_compare_exchange_strong(&s->hdr->dead, &expect, r + 1);
            notify(s);
            return pg_error(PAGODA_ERR_IO, "comm: rank %d exited", r);
        }
    } else if (getppid() != s->hdr->pid0) {
        return pg_error(PAGODA_ERR_IO, "comm: rank 0 exited");
    }
    return PAGODA_OK;
}

/* PAGODA_ERR_IO if the header reports a dead or departed rank. */
static pagoda_status check_flags(pg_comm *c) {
    shm_impl *s = c->impl;
    int d = atomic_load(&s->hdr->dead);
    if (d) return pg_error(PAGODA_ERR_IO, "comm: rank %d exited", d - 1);
    int l = atomic_load(&s->hdr->left);
    if (l) return pg_error(PAGODA_ERR_IO, "comm: rank %d left (freed its communicator)", l - 1);
    return PAGODA_OK;
}

static int all_arrived(shm_impl *s, int size, uint64_t phase) {
    for (int r = 0; r < size; r++)
        if (atomic_load_explicit(&s->slot[r].phase, memory_order_acquire) < phase) return 0;
    return 1;
}

/* Arrive at the next phase and wait for every rank to arrive there too. */
static pagoda_status phase(pg_comm *c) {
    shm_impl *s = c->impl;
    uint64_t ph = ++s->phase;
    atomic_store_explicit(&s->slot[c->rank].phase, ph, memory_order_seq_cst);
    notify(s);
    if (all_arrived(s, c->size, ph)) return PAGODA_OK;
    if (s->spin_ns > 0) {
        int64_t t0 = now_ns(), t = t0;
        for (int i = 1; t - t0 < s->spin_ns; i++) {
            if (all_arrived(s, c->size, ph)) return PAGODA_OK;
            cpu_relax();
            if ((i & 63) == 0) {
                t = now_ns();
                if (t - t0 > SHM_YIELD_NS) sched_yield();
            }
        }
    }
    for (;;) {
        atomic_fetch_add(&s->hdr->waiters, 1);
        uint32_t w = atomic_load(&s->hdr->futex);
        if (all_arrived(s, c->size, ph)) {
            atomic_fetch_sub(&s->hdr->waiters, 1);
            return PAGODA_OK;
        }
        pagoda_status st = check_flags(c);
        if (st != PAGODA_OK) {
            atomic_fetch_sub(&s->hdr->waiters, 1);
            return st;
        }
        struct timespec ts = {0, SHM_SLICE_NS};
        long rc = syscall(SYS_futex, (uint32_t *)&s->hdr->futex, FUTEX_WAIT, w, &ts, NULL, 0);
        int timed_out = rc < 0 && errno == ETIMEDOUT;
        atomic_fetch_sub(&s->hdr->waiters, 1);
        if (all_arrived(s, c->size, ph)) return PAGODA_OK;
        if (timed_out && (st = check_peers(c)) != PAGODA_OK) return st;
    }
}

/* Post this rank's call, run the first phase and compare every rank's call. */
static pagoda_status begin(pg_comm *c, int op, size_t n, int root) {
    shm_impl *s = c->impl;
    if (s->broken)
        return pg_error(PAGODA_ERR_IO, "comm: rank %d: unusable after an earlier error", c->rank);
    int k = (int)((s->phase + 1) & 1);
    const pg_comm_call me = {op, root, n};
    s->slot[c->rank].call[k] = me;
    pagoda_status st = phase(c);
    for (int r = 0; r < c->size && st == PAGODA_OK; r++)
        st = pg_comm_check_call(c, &me, r, &s->slot[r].call[k]);
    if (st != PAGODA_OK) s->broken = 1;
    return st;
}

static pagoda_status end(pg_comm *c) {
    pagoda_status st = phase(c);
    if (st != PAGODA_OK) ((shm_impl *)c->impl)->broken = 1;
    return st;
}

static pagoda_status shm_allreduce(pg_comm *c, float *buf, size_t n) {
    shm_impl *s = c->impl;
    if (n > s->max_floats)
        return pg_error(PAGODA_ERR_INVALID_ARG, "comm: allreduce of %zu floats above the limit %zu",
                        n, s->max_floats);
    memcpy(slot_data(s, c->rank), buf, n * sizeof(float));
    pagoda_status st = begin(c, PG_COMM_OP_ALLREDUCE, n, 0);
    if (st != PAGODA_OK) return st;
    /* slice r of the elements, summed over ranks in rank order */
    size_t lo = n * (size_t)c->rank / (size_t)c->size;
    size_t hi = n * (size_t)(c->rank + 1) / (size_t)c->size;
    const float *x0 = (const float *)slot_data(s, 0);
    memcpy(s->result + lo, x0 + lo, (hi - lo) * sizeof(float));
    for (int r = 1; r < c->size; r++) {
        const float *x = (const float *)slot_data(s, r);
        for (size_t i = lo; i < hi; i++)
            s->result[i] += x[i];
    }
    if ((st = end(c)) != PAGODA_OK) return st;
    memcpy(buf, s->result, n * sizeof(float));
    return PAGODA_OK;
}

static pagoda_status shm_broadcast(pg_comm *c, void *buf, size_t bytes, int root) {
    shm_impl *s = c->impl;
    if (bytes > s->max_bytes)
        return pg_error(PAGODA_ERR_INVALID_ARG, "comm: broadcast of %zu bytes above the limit %zu",
                        bytes, s->max_bytes);
    if (c->rank == root) memcpy(slot_data(s, root), buf, bytes);
    pagoda_status st = begin(c, PG_COMM_OP_BROADCAST, bytes, root);
    if (st != PAGODA_OK) return st;
    if (c->rank != root) memcpy(buf, slot_data(s, root), bytes);
    return end(c);
}

static pagoda_status shm_allgather(pg_comm *c, const void *send, size_t bytes, void *recv) {
    shm_impl *s = c->impl;
    if (bytes > s->max_bytes)
        return pg_error(PAGODA_ERR_INVALID_ARG, "comm: allgather of %zu bytes above the limit %zu",
                        bytes, s->max_bytes);
    memcpy(slot_data(s, c->rank), send, bytes);
    pagoda_status st = begin(c, PG_COMM_OP_ALLGATHER, bytes, 0);
    if (st != PAGODA_OK) return st;
    for (int r = 0; r < c->size; r++)
        memcpy((char *)recv + (size_t)r * bytes, slot_data(s, r), bytes);
    return end(c);
}

static pagoda_status shm_barrier(pg_comm *c) {
    return begin(c, PG_COMM_OP_BARRIER, 0, 0);
}

static pagoda_status describe_exit(int r, int st) {
    if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
        return pg_error(PAGODA_ERR_IO, "comm: rank %d exited with status %d", r, WEXITSTATUS(st));
    if (WIFSIGNALED(st))
        return pg_error(PAGODA_ERR_IO, "comm: rank %d killed by signal %d (%s)", r, WTERMSIG(st),
                        strsignal(WTERMSIG(st)));
    return PAGODA_OK;
}

static pagoda_status shm_destroy(pg_comm *c) {
    shm_impl *s = c->impl;
    pagoda_status ret = PAGODA_OK;
    /* peers still waiting in a collective return instead of hanging */
    int expect = 0;
    atomic_compare_exchange_strong(&s->hdr->left, &expect, c->rank + 1);
    notify(s);
    if (c->rank == 0) {
        for (int r = 1; r < c->size; r++) {
            if (!s->reaped[r]) {
                int st = 0;
                pid_t p;
                do
                    p = waitpid(s->pid[r], &st, 0);
                while (p < 0 && errno == EINTR);
                s->reaped[r] = 1;
                s->status[r] = p == s->pid[r] ? st : 0;
            }
            pagoda_status e = describe_exit(r, s->status[r]);
            if (ret == PAGODA_OK) ret = e;
        }
    }
    munmap(s->map, s->map_bytes);
    free(s);
    return ret;
}

/* Between collectives: the flags a peer published, then this rank's own
 * check (rank 0 reaps its children, the others watch rank 0). */
static pagoda_status shm_check_peers(pg_comm *c) {
    pagoda_status st = check_flags(c);
    return st != PAGODA_OK ? st : check_peers(c);
}

static const pg_comm_ops SHM_OPS = {shm_allreduce, shm_broadcast, shm_allgather, shm_barrier,
                                    shm_destroy, shm_check_peers};

pagoda_status pg_comm_create_shm(int size, size_t max_floats, size_t max_bytes, pg_comm **out) {
    *out = NULL;
    if (size < 1 || size > SHM_MAX_RANKS)
        return pg_error(PAGODA_ERR_INVALID_ARG, "comm: shm size %d outside 1..%d", size,
                        SHM_MAX_RANKS);
    if (max_floats > SIZE_MAX / 8 / SHM_MAX_RANKS || max_bytes > SIZE_MAX / 8 / SHM_MAX_RANKS)
        return pg_error(PAGODA_ERR_INVALID_ARG, "comm: shm buffer limits too large");
    size_t slot_bytes =
        round_up(max_floats * sizeof(float) > max_bytes ? max_floats * sizeof(float) : max_bytes);
    size_t hdr_bytes = round_up(sizeof(shm_hdr));
    size_t slots_bytes = round_up(sizeof(shm_slot) * (size_t)size);
    size_t map_bytes =
        hdr_bytes + slots_bytes + slot_bytes * (size_t)size + round_up(max_floats * sizeof(float));
    shm_impl *s = calloc(1, sizeof *s);
    pg_comm *c = calloc(1, sizeof *c);
    if (!s || !c) {
        free(s), free(c);
        return pg_error(PAGODA_ERR_NOMEM, "comm: out of memory");
    }
    void *map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        int e = errno;
        free(s), free(c);
        return pg_error(PAGODA_ERR_IO, "comm: mapping %zu shared bytes: %s", map_bytes,
                        strerror(e));
    }
    /* a fresh anonymous mapping is zero: phases 0, no faults */
    s->map = map, s->map_bytes = map_bytes;
    s->hdr = map;
    s->slot = (shm_slot *)((char *)map + hdr_bytes);
    s->data = (char *)map + hdr_bytes + slots_bytes;
    s->result = (float *)(s->data + slot_bytes * (size_t)size);
    s->slot_bytes = slot_bytes, s->max_floats = max_floats, s->max_bytes = max_bytes;
    s->hdr->pid0 = getpid();
    long long us = PG_POOL_BLOCKTIME_DEFAULT_US;
    const char *bt = getenv("PAGODA_BLOCKTIME_US");
    if (bt && *bt) {
        char *end;
        long long v = strtoll(bt, &end, 10);
        if (!*end && v >= 0 && v <= 10000000) us = v; /* the pool reports a bad value */
    }
    s->spin_ns = us * 1000;
    *c = (pg_comm){.kind = PG_COMM_SHM, .rank = 0, .size = size, .ops = &SHM_OPS, .impl = s};

    fflush(NULL); /* buffered output is not written twice by the children */
    for (int r = 1; r < size; r++) {
        pid_t p = fork();
        if (p == 0) {
            /* the child: its own view, no children of its own */
            memset(s->pid, 0, sizeof s->pid);
            c->rank = r;
            *out = c;
            return PAGODA_OK;
        }
        if (p < 0) {
            int e = errno;
            /* the children started so far see rank 0 leave and return */
            atomic_store(&s->hdr->left, 1);
            notify(s);
            for (int q = 1; q < r; q++)
                waitpid(s->pid[q], NULL, 0);
            munmap(map, map_bytes);
            free(s), free(c);
            return pg_error(PAGODA_ERR_IO, "comm: fork of rank %d: %s", r, strerror(e));
        }
        s->pid[r] = p;
    }
    *out = c;
    return PAGODA_OK;
}
