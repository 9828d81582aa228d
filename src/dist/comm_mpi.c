/* The MPI backend of pg_comm (comm.h): the ranks of MPI_COMM_WORLD, started
 * by mpirun (Open MPI), within or across hosts.
 *
 * Built only when CMake finds MPI (PAGODA_MPI, CMakeLists.txt) and linked
 * only into the programs that need it (the `pagoda` command, the MPI tests)
 * as an object file: its pg_comm_create_mpi overrides the weak one of
 * comm.c, which returns PAGODA_ERR_UNSUPPORTED.
 *
 * Every collective first all-gathers a 16-byte call header (op, root, n), so
 * mismatched calls are detected on every rank (PAGODA_ERR_INTERNAL) before
 * any payload moves; the barrier is that exchange alone. The all-reduce does
 * not use MPI_Allreduce, whose summation order is the implementation's
 * choice: it all-gathers the size * n floats and every rank sums them in
 * rank order 0, 1, ..., size-1 (the same adds in the same order everywhere,
 * so identical bits; O(size * n) bytes per rank, fine for the hidden-size
 * vectors of tensor parallelism at a few ranks). Errors return (the
 * communicator's handler is MPI_ERRORS_RETURN) as PAGODA_ERR_IO with MPI's
 * message; a rank that dies is normally noticed by mpirun, which then ends
 * the job. */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dist/comm.h"
#include "dist/comm_impl.h"

typedef struct mpi_impl {
    MPI_Comm comm;
    int we_initialized; /* MPI_Init_thread was called here: finalize on free */
    int broken;
    pg_comm_call *hdrs; /* [size] */
    float *gather;  /* [size * cap] */
    size_t cap;
} mpi_impl;

static pagoda_status mpi_fail(pg_comm *c, int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    ((mpi_impl *)c->impl)->broken = 1;
    return pg_error(PAGODA_ERR_IO, "comm: rank %d: MPI %s: %s", c->rank, what, msg);
}

/* Exchange the call headers and compare them. */
static pagoda_status begin(pg_comm *c, int op, size_t n, int root) {
    mpi_impl *m = c->impl;
    if (m->broken)
        return pg_error(PAGODA_ERR_IO, "comm: rank %d: unusable after an earlier error", c->rank);
    pg_comm_call me = {op, root, n};
    int rc =
        MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, m->hdrs, (int)sizeof me, MPI_BYTE, m->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "allgather of call headers");
    for (int r = 0; r < c->size; r++) {
        pagoda_status st = pg_comm_check_call(c, &me, r, &m->hdrs[r]);
        if (st != PAGODA_OK) {
            m->broken = 1;
            return st;
        }
    }
    return PAGODA_OK;
}

static pagoda_status mpi_allreduce(pg_comm *c, float *buf, size_t n) {
    mpi_impl *m = c->impl;
    if (n > (size_t)INT_MAX / (size_t)c->size)
        return pg_error(PAGODA_ERR_INVALID_ARG, "comm: allreduce of %zu floats above the limit %zu",
                        n, (size_t)INT_MAX / (size_t)c->size);
    pagoda_status st = begin(c, PG_COMM_OP_ALLREDUCE, n, 0);
    if (st != PAGODA_OK) return st;
    if (n > m->cap) {
        float *g = realloc(m->gather, n * (size_t)c->size * sizeof(float));
        if (!g) {
            m->broken = 1;
            return pg_error(PAGODA_ERR_NOMEM, "comm: out of memory (%zu floats)",
                            n * (size_t)c->size);
        }
        m->gather = g, m->cap = n;
    }
    int rc = MPI_Allgather(buf, (int)n, MPI_FLOAT, m->gather, (int)n, MPI_FLOAT, m->comm);
    if (rc != MPI_SUCCESS) return mpi_fail(c, rc, "allgather");
    memcpy(buf, m->gather, n * sizeof(float));
    for (int r = 1; r < c->size; r++) {
        const float *x = m->gather + (size_t)r * n;
        for (size_t i = 0; i < n; i++)
            buf[i] += x[i];
    }
    return PAGODA_OK;
}

static pagoda_status mpi_broadcast(pg_comm *c, void *buf, size_t bytes, int root) {
    if (bytes > (size_t)INT_MAX)
        return pg_error(PAGODA_ERR_INVALID_ARG, "comm: broadcast of %zu bytes above the limit %d",
                        bytes, INT_MAX);
    pagoda_status st = begin(c, PG_COMM_OP_BROADCAST, bytes, root);
    if (st != PAGODA_OK) return st;
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, ((mpi_impl *)c->impl)->comm);
    return rc == MPI_SUCCESS ? PAGODA_OK : mpi_fail(c, rc, "broadcast");
}

static pagoda_status mpi_allgather(pg_comm *c, const void *send, size_t bytes, void *recv) {
    if (bytes > (size_t)INT_MAX / (size_t)c->size)
        return pg_error(PAGODA_ERR_INVALID_ARG, "comm: allgather of %zu bytes above the limit %zu",
                        bytes, (size_t)INT_MAX / (size_t)c->size);
    pagoda_status st = begin(c, PG_COMM_OP_ALLGATHER, bytes, 0);
    if (st != PAGODA_OK) return st;
    int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE,
                           ((mpi_impl *)c->impl)->comm);
    return rc == MPI_SUCCESS ? PAGODA_OK : mpi_fail(c, rc, "allgather");
}

/* The header exchange needs every rank's contribution: a barrier. */
static pagoda_status mpi_barrier(pg_comm *c) {
    return begin(c, PG_COMM_OP_BARRIER, 0, 0);
}

static pagoda_status mpi_destroy(pg_comm *c) {
    mpi_impl *m = c->impl;
    MPI_Comm_free(&m->comm);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (m->we_initialized && !finalized) MPI_Finalize();
    free(m->hdrs), free(m->gather), free(m);
    return PAGODA_OK;
}

/* no local liveness check: mpirun notices a rank that dies and ends the job */
static const pg_comm_ops MPI_OPS = {mpi_allreduce, mpi_broadcast, mpi_allgather, mpi_barrier,
                                    mpi_destroy, NULL};

pagoda_status pg_comm_create_mpi(pg_comm **out) {
    *out = NULL;
    int inited = 0, finalized = 0, we = 0;
    MPI_Finalized(&finalized);
    if (finalized)
        return pg_error(PAGODA_ERR_IO, "comm: MPI was already finalized in this process");
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return pg_error(PAGODA_ERR_IO, "comm: MPI_Init_thread failed");
        if (provided < MPI_THREAD_SERIALIZED) {
            MPI_Finalize();
            return pg_error(PAGODA_ERR_IO, "comm: MPI provides thread level %d, below SERIALIZED",
                            provided);
        }
        we = 1;
    }
    mpi_impl *m = calloc(1, sizeof *m);
    pg_comm *c = calloc(1, sizeof *c);
    if (!m || !c) {
        free(m), free(c);
        if (we) MPI_Finalize();
        return pg_error(PAGODA_ERR_NOMEM, "comm: out of memory");
    }
    m->we_initialized = we;
    int rank = 0, size = 1;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &m->comm) != MPI_SUCCESS) {
        free(m), free(c);
        if (we) MPI_Finalize();
        return pg_error(PAGODA_ERR_IO, "comm: MPI_Comm_dup(MPI_COMM_WORLD) failed");
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &rank);
    MPI_Comm_size(m->comm, &size);
    m->hdrs = calloc((size_t)size, sizeof *m->hdrs);
    if (!m->hdrs) {
        *c = (pg_comm){.kind = PG_COMM_MPI, .rank = rank, .size = size, .ops = &MPI_OPS, .impl = m};
        pg_comm_free(c);
        return pg_error(PAGODA_ERR_NOMEM, "comm: out of memory");
    }
    *c = (pg_comm){.kind = PG_COMM_MPI, .rank = rank, .size = size, .ops = &MPI_OPS, .impl = m};
    *out = c;
    return PAGODA_OK;
}
