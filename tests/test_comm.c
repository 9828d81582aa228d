/* Collective communication (src/dist/comm.h): the SELF backend and the SHM
 * backend with 2, 3 and 4 forked ranks -- rank-order all-reduce bits,
 * broadcast, allgather, barrier, limits, mismatched calls, a rank that dies
 * mid-collective, a rank 0 that leaves, abnormal exits reported by free.
 * The MPI backend runs the same checks (helpers/comm_check.c) under mpirun:
 * tests/mpi/comm_mpi_check.c.
 *
 * Forked ranks never return into cmocka: they run plain checks, free their
 * communicator and _exit(0 or 1); rank 0 sees a failing child through
 * pg_comm_free's status. A dead peer is detected by polling between 100 ms
 * futex waits, so no check here depends on timing: a hang would be the
 * failure (CTest's timeout). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/status.h"
#include "comm_check.h"
#include "dist/comm.h"
#include "testutil.h"

/* A forked rank ends here: report, free, _exit. */
static void child_exit(pg_comm *c, int bad, const char *err) {
    if (bad) fprintf(stderr, "%s\n", err);
    pagoda_status st = pg_comm_free(c);
    if (st != PAGODA_OK) fprintf(stderr, "rank free: %s\n", pg_last_error()), bad = 1;
    _exit(bad ? 1 : 0);
}

static void test_self(void **state) {
    (void)state;
    pg_comm *c = NULL;
    assert_int_equal(pg_comm_create_self(&c), PAGODA_OK);
    assert_int_equal(pg_comm_rank(c), 0);
    assert_int_equal(pg_comm_size(c), 1);
    assert_int_equal(pg_comm_get_kind(c), PG_COMM_SELF);
    assert_string_equal(pg_comm_kind_name(pg_comm_get_kind(c)), "self");
    char err[512] = "";
    int bad = pg_comm_check_collectives(c, 0, 0, err, sizeof err);
    if (bad) fail_msg("%s", err);
    assert_int_equal(pg_comm_broadcast(c, err, 1, 1), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_comm_free(c), PAGODA_OK);
    assert_int_equal(pg_comm_free(NULL), PAGODA_OK);
}

static void run_shm(int size, size_t max_floats, size_t max_bytes) {
    pg_comm *c = NULL;
    assert_int_equal(pg_comm_create_shm(size, max_floats, max_bytes, &c), PAGODA_OK);
    assert_int_equal(pg_comm_size(c), size);
    assert_int_equal(pg_comm_get_kind(c), PG_COMM_SHM);
    char err[512] = "";
    int bad = pg_comm_check_collectives(c, max_floats, max_bytes, err, sizeof err);
    if (pg_comm_rank(c) != 0) child_exit(c, bad, err);
    pagoda_status st = pg_comm_free(c);
    if (bad) fail_msg("%s", err);
    if (st != PAGODA_OK) fail_msg("free: %s", pg_last_error());
}

static void test_shm_2(void **state) {
    (void)state, run_shm(2, 4096, 256);
}
static void test_shm_3(void **state) {
    (void)state, run_shm(3, 1001, 100);
}
static void test_shm_4(void **state) {
    (void)state, run_shm(4, 4096, 4096);
}
static void test_shm_1(void **state) {
    (void)state, run_shm(1, 64, 64);
}

/* Block time 0: every wait sleeps on the futex at once, so the back-to-back
 * calls exercise the wake-up path (a lost wake-up would cost 100 ms slices,
 * not a hang, but a wrong futex protocol would show as bad bits or a hang). */
static void test_shm_4_futex(void **state) {
    (void)state;
    setenv("PAGODA_BLOCKTIME_US", "0", 1);
    run_shm(4, 512, 64);
    unsetenv("PAGODA_BLOCKTIME_US");
}

static void test_shm_bad_size(void **state) {
    (void)state;
    pg_comm *c = (pg_comm *)&c; /* overwritten with NULL on error */
    assert_int_equal(pg_comm_create_shm(0, 16, 16, &c), PAGODA_ERR_INVALID_ARG);
    assert_null(c);
    assert_int_equal(pg_comm_create_shm(65, 16, 16, &c), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "shm size 65 outside 1..64"));
}

static void test_shm_mismatch(void **state) {
    (void)state;
    pg_comm *c = NULL;
    assert_int_equal(pg_comm_create_shm(3, 64, 64, &c), PAGODA_OK);
    char err[512] = "";
    int bad = pg_comm_check_mismatch(c, err, sizeof err);
    /* unusable afterwards, on every rank */
    if (!bad && pg_comm_barrier(c) == PAGODA_OK) {
        snprintf(err, sizeof err, "rank %d: barrier after a mismatch succeeded", pg_comm_rank(c));
        bad = 1;
    }
    if (pg_comm_rank(c) != 0) child_exit(c, bad, err);
    pagoda_status st = pg_comm_free(c);
    if (bad) fail_msg("%s", err);
    if (st != PAGODA_OK) fail_msg("free: %s", pg_last_error());
}

/* Rank 2 dies without a word mid-run: ranks 0 and 1, waiting in an
 * all-reduce, get PAGODA_ERR_IO naming it; free reports its exit status. */
static void test_shm_dead_rank(void **state) {
    (void)state;
    pg_comm *c = NULL;
    assert_int_equal(pg_comm_create_shm(3, 64, 64, &c), PAGODA_OK);
    int rank = pg_comm_rank(c);
    float x[16] = {1};
    char err[512] = "";
    int bad = 0;
    if (pg_comm_barrier(c) != PAGODA_OK) {
        snprintf(err, sizeof err, "rank %d: first barrier: %s", rank, pg_last_error());
        bad = 1;
    }
    if (rank == 2) _exit(3); /* no free: a crash */
    if (!bad) {
        pagoda_status st = pg_comm_allreduce_sum_f32(c, x, 16);
        if (st != PAGODA_ERR_IO || !strstr(pg_last_error(), "comm: rank 2 exited")) {
            snprintf(err, sizeof err, "rank %d: allreduce with rank 2 dead: status %d '%s'", rank,
                     (int)st, pg_last_error());
            bad = 1;
        }
    }
    if (rank != 0) child_exit(c, bad, err);
    if (bad) {
        pg_comm_free(c);
        fail_msg("%s", err);
    }
    assert_int_equal(pg_comm_free(c), PAGODA_ERR_IO);
    assert_string_equal(pg_last_error(), "comm: rank 2 exited with status 3");
}

/* A child killed by a signal between collectives: free names the signal. */
static void test_shm_killed_rank(void **state) {
    (void)state;
    pg_comm *c = NULL;
    assert_int_equal(pg_comm_create_shm(2, 64, 64, &c), PAGODA_OK);
    if (pg_comm_rank(c) == 1) {
        pg_comm_barrier(c);
        raise(SIGKILL);
        _exit(0);
    }
    assert_int_equal(pg_comm_barrier(c), PAGODA_OK);
    /* the next collective finds it gone (it was killed after the barrier) */
    assert_int_equal(pg_comm_barrier(c), PAGODA_ERR_IO);
    assert_string_equal(pg_last_error(), "comm: rank 1 exited");
    assert_int_equal(pg_comm_free(c), PAGODA_ERR_IO);
    assert_non_null(strstr(pg_last_error(), "comm: rank 1 killed by signal 9"));
}

/* pg_comm_check_peers between collectives (an idle server): OK while the
 * child lives, PAGODA_ERR_IO naming it once it was killed -- polled, no
 * collective involved; SELF always OK. */
static void test_shm_check_peers(void **state) {
    (void)state;
    pg_comm *c = NULL;
    assert_int_equal(pg_comm_create_self(&c), PAGODA_OK);
    assert_int_equal(pg_comm_check_peers(c), PAGODA_OK);
    pg_comm_free(c);
    assert_int_equal(pg_comm_create_shm(2, 64, 64, &c), PAGODA_OK);
    if (pg_comm_rank(c) == 1) {
        pg_comm_barrier(c);
        raise(SIGKILL);
        _exit(0);
    }
    assert_int_equal(pg_comm_barrier(c), PAGODA_OK);
    pagoda_status st = PAGODA_OK;
    for (int i = 0; i < 100000 && st == PAGODA_OK; i++) { /* until the kill lands */
        st = pg_comm_check_peers(c);
        if (st == PAGODA_OK) usleep(1000);
    }
    assert_int_equal(st, PAGODA_ERR_IO);
    assert_string_equal(pg_last_error(), "comm: rank 1 exited");
    assert_int_equal(pg_comm_check_peers(c), PAGODA_ERR_IO); /* stays gone */
    assert_int_equal(pg_comm_free(c), PAGODA_ERR_IO);
}

/* Rank 0 frees its communicator while rank 1 waits in a barrier: rank 1
 * returns PAGODA_ERR_IO (it would otherwise wait forever) and exits 0. */
static void test_shm_rank0_leaves(void **state) {
    (void)state;
    pg_comm *c = NULL;
    assert_int_equal(pg_comm_create_shm(2, 64, 64, &c), PAGODA_OK);
    if (pg_comm_rank(c) == 1) {
        pagoda_status st = pg_comm_barrier(c);
        int ok = st == PAGODA_ERR_IO && strstr(pg_last_error(), "rank 0 left");
        if (!ok)
            fprintf(stderr, "rank 1: barrier after rank 0 left: %d '%s'\n", (int)st,
                    pg_last_error());
        pg_comm_free(c);
        _exit(ok ? 0 : 1);
    }
    pagoda_status st = pg_comm_free(c);
    if (st != PAGODA_OK) fail_msg("free: %s", pg_last_error());
}

/* test_comm does not link src/dist/comm_mpi.c: the stub answers. */
static void test_mpi_unsupported(void **state) {
    (void)state;
    pg_comm *c = (pg_comm *)&c;
    assert_int_equal(pg_comm_create_mpi(&c), PAGODA_ERR_UNSUPPORTED);
    assert_null(c);
    assert_non_null(strstr(pg_last_error(), "built without MPI"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self),
        cmocka_unit_test(test_shm_1),
        cmocka_unit_test(test_shm_2),
        cmocka_unit_test(test_shm_3),
        cmocka_unit_test(test_shm_4),
        cmocka_unit_test(test_shm_4_futex),
        cmocka_unit_test(test_shm_bad_size),
        cmocka_unit_test(test_shm_mismatch),
        cmocka_unit_test(test_shm_dead_rank),
        cmocka_unit_test(test_shm_killed_rank),
        cmocka_unit_test(test_shm_rank0_leaves),
        cmocka_unit_test(test_shm_check_peers),
        cmocka_unit_test(test_mpi_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
