/* Collective communication between tensor-parallel ranks (issue 22).
 *
 * A pg_comm joins `size` ranks (0 .. size-1) of one model replica. Rank 0
 * runs the scheduler and KV cache manager and broadcasts each step's plain-
 * data scheduler output; every rank runs the forward on its shard of the
 * heads / MLP columns / experts and the ranks sum their partial outputs with
 * pg_comm_allreduce_sum_f32 (one after attention, one after the MLP).
 *
 * Backends (pg_comm_kind):
 *   SELF  one rank (size 1): every collective is a no-op copy. TP=1 uses it,
 *         so the model code has a single path.
 *   SHM   ranks of one host as processes sharing an anonymous / memfd mapping:
 *         no network stack. pg_comm_create_shm forks the other ranks.
 *   MPI   ranks started by `mpirun` (Open MPI), within or across hosts.
 *
 * Determinism: every backend sums in rank order 0, 1, ..., size-1 with F32
 * adds (((x0 + x1) + x2) + ...), and every rank receives the same bits, so a
 * TP=N run is reproducible and batch-invariant; TP=N and TP=1 differ in the
 * last bits (a different summation order than one rank's GEMM).
 *
 * Faults: a collective whose peer has exited or stopped answering returns
 * PAGODA_ERR_IO with the rank named (never hangs forever); mismatched calls
 * (different n or op on different ranks) return PAGODA_ERR_INTERNAL where the
 * backend can detect them. After an error the communicator is unusable
 * except for pg_comm_free.
 *
 * Not thread-safe: one thread per rank calls the collectives, all ranks in
 * the same order. */
#ifndef PAGODA_DIST_COMM_H
#define PAGODA_DIST_COMM_H

#include <stddef.h>

#include "pagoda/status.h"

typedef struct pg_comm pg_comm;

typedef enum pg_comm_kind { PG_COMM_SELF = 0, PG_COMM_SHM, PG_COMM_MPI } pg_comm_kind;

/* This process's rank in [0, size) and the number of ranks. */
int pg_comm_rank(const pg_comm *c);
int pg_comm_size(const pg_comm *c);
pg_comm_kind pg_comm_get_kind(const pg_comm *c);
/* "self", "shm" or "mpi". */
const char *pg_comm_kind_name(pg_comm_kind k);

/* A one-rank communicator. Errors: PAGODA_ERR_NOMEM. */
pagoda_status pg_comm_create_self(pg_comm **out);

/* `size` ranks on this host: forks size - 1 child processes; returns in each
 * process with its own communicator (pg_comm_rank tells which; the caller is
 * rank 0). max_floats bounds the n of every allreduce and max_bytes the bytes
 * of every broadcast / allgather contribution (the shared buffers are sized
 * at creation). Errors: PAGODA_ERR_INVALID_ARG (size < 1 or > 64),
 * PAGODA_ERR_IO (mapping or fork failed). */
pagoda_status pg_comm_create_shm(int size, size_t max_floats, size_t max_bytes, pg_comm **out);

/* The ranks of MPI_COMM_WORLD (the process was started by mpirun; MPI is
 * initialised here if it was not). Errors: PAGODA_ERR_UNSUPPORTED when
 * pagoda was built without MPI, PAGODA_ERR_IO when MPI fails. */
pagoda_status pg_comm_create_mpi(pg_comm **out);

/* True when this process looks started by mpirun / mpiexec (OMPI_COMM_WORLD_SIZE
 * or PMI_SIZE in the environment), so `-tp N` picks the MPI backend. */
int pg_comm_under_mpi(void);

/* buf[0 .. n) = the element-wise sum over ranks of every rank's buf, in rank
 * order (see the header comment), identical bits on every rank. In place.
 * Errors: PAGODA_ERR_INVALID_ARG (n above the backend's limit), PAGODA_ERR_IO
 * (a peer died), PAGODA_ERR_INTERNAL (mismatched n across ranks). */
pagoda_status pg_comm_allreduce_sum_f32(pg_comm *c, float *buf, size_t n);

/* buf[0 .. bytes) of rank `root` copied to every rank's buf. Same errors. */
pagoda_status pg_comm_broadcast(pg_comm *c, void *buf, size_t bytes, int root);

/* recv[r * bytes .. (r + 1) * bytes) = rank r's send[0 .. bytes), on every
 * rank (recv holds size * bytes). Same errors. */
pagoda_status pg_comm_allgather(pg_comm *c, const void *send, size_t bytes, void *recv);

/* Returns when every rank has called it. Errors: PAGODA_ERR_IO. */
pagoda_status pg_comm_barrier(pg_comm *c);

/* Is every peer still there? A local check, no communication (call it
 * between collectives, from the thread that uses c, e.g. while idle):
 * PAGODA_ERR_IO "comm: rank N exited" when a peer is known to be gone. SHM:
 * rank 0 reaps its children with waitpid(WNOHANG), the others compare
 * getppid() with rank 0's pid, both read the flags peers published. MPI and
 * SELF: always PAGODA_OK (mpirun notices a rank that dies and ends the job). */
pagoda_status pg_comm_check_peers(pg_comm *c);

/* Leaves the communicator and frees it. For SHM, rank 0 waits for its
 * children (which free theirs and then _exit) and returns PAGODA_ERR_IO
 * naming a child that exited abnormally; other ranks return PAGODA_OK.
 * NULL is a no-op (PAGODA_OK). */
pagoda_status pg_comm_free(pg_comm *c);

#endif
