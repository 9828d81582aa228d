/* The MPI backend of pg_comm (src/dist/comm_mpi.c) under mpirun: the same
 * checks as tests/test_comm.c runs on the SHM backend (helpers/comm_check.c):
 * rank-order all-reduce bits, broadcast from each root, allgather, barrier,
 * back-to-back collectives, then mismatched calls detected on every rank.
 * CTest runs it as comm_mpi_np2 / comm_mpi_np3 (cmake/tests.cmake). Exits 0
 * when every check passed on this rank, 1 otherwise (mpirun then fails). */
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "comm_check.h"
#include "dist/comm.h"

int main(void) {
    if (!pg_comm_under_mpi()) {
        fprintf(stderr, "comm_mpi_check: not started by mpirun (no OMPI_COMM_WORLD_SIZE / PMI_SIZE)\n");
        return 1;
    }
    pg_comm *c = NULL;
    if (pg_comm_create_mpi(&c) != PAGODA_OK) {
        fprintf(stderr, "comm_mpi_check: %s\n", pg_last_error());
        return 1;
    }
    char err[512] = "";
    int bad = 0;
    if (pg_comm_get_kind(c) != PG_COMM_MPI || pg_comm_size(c) < 2) {
        snprintf(err, sizeof err, "kind %s, size %d: want mpi with >= 2 ranks",
                 pg_comm_kind_name(pg_comm_get_kind(c)), pg_comm_size(c));
        bad = 1;
    }
    if (!bad) bad = pg_comm_check_collectives(c, 0, 0, err, sizeof err);
    if (!bad) bad = pg_comm_check_mismatch(c, err, sizeof err);
    int rank = pg_comm_rank(c), size = pg_comm_size(c);
    pg_comm_free(c);
    if (bad) {
        fprintf(stderr, "comm_mpi_check: %s\n", err);
        return 1;
    }
    printf("comm_mpi_check: rank %d of %d: ok\n", rank, size);
    return 0;
}
