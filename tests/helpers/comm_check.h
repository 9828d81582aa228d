/* Checks of a pg_comm's collectives (src/dist/comm.h) that every rank runs,
 * shared by tests/test_comm.c (SELF and SHM backends, cmocka) and
 * tests/mpi/comm_mpi_check.c (the MPI backend under mpirun, no cmocka).
 * Plain C: no cmocka asserts, because a forked SHM rank must not return into
 * the cmocka runner; each check returns 0 on success, or 1 with a one-line
 * message in err. Every rank must call the same checks in the same order. */
#ifndef PAGODA_TESTS_COMM_CHECK_H
#define PAGODA_TESTS_COMM_CHECK_H

#include <stddef.h>

#include "dist/comm.h"

/* All-reduce equals the rank-order sum (((x0 + x1) + x2) + ...) bit for bit
 * on random data for n in {1, 2, 7, 64, 1000, max_floats} (those <= max_floats),
 * broadcast from each root, allgather, barrier, 300 back-to-back mixed
 * collectives (no lost wake-ups), and an allreduce of max_floats + 1 / a
 * broadcast of max_bytes + 1 refused with PAGODA_ERR_INVALID_ARG on every
 * rank (skipped when the limit is 0 = unbounded). max_bytes >= 64. */
int pg_comm_check_collectives(pg_comm *c, size_t max_floats, size_t max_bytes, char *err,
                              size_t cap);

/* Rank 0 all-reduces 8 floats and the others 9: every rank must get
 * PAGODA_ERR_INTERNAL (size >= 2). Leaves the communicator unusable. */
int pg_comm_check_mismatch(pg_comm *c, char *err, size_t cap);

#endif
