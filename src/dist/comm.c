/* Collective communication: the backend-independent entry points and the
 * one-rank (SELF) backend (comm.h). */
#include "dist/comm.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dist/comm_impl.h"

int pg_comm_rank(const pg_comm *c) { return c->rank; }
int pg_comm_size(const pg_comm *c) { return c->size; }
pg_comm_kind pg_comm_get_kind(const pg_comm *c) { return c->kind; }

const char *pg_comm_kind_name(pg_comm_kind k) {
    switch (k) {
    case PG_COMM_SELF: return "self";
    case PG_COMM_SHM: return "shm";
    case PG_COMM_MPI: return "mpi";
    }
    return "?";
}

int pg_comm_under_mpi(void) {
    const char *v = getenv("OMPI_COMM_WORLD_SIZE");
    if (!v || !*v) v = getenv("PMI_SIZE");
    return v && *v;
}

static const char *op_name(int32_t op) {
    switch (op) {
    case PG_COMM_OP_ALLREDUCE:
        return "allreduce";
    case PG_COMM_OP_BROADCAST:
        return "broadcast";
    case PG_COMM_OP_ALLGATHER:
        return "allgather";
    case PG_COMM_OP_BARRIER:
        return "barrier";
    }
    return "?";
}

pagoda_status pg_comm_check_call(const pg_comm *c, const pg_comm_call *mine, int r,
                                 const pg_comm_call *theirs) {
    if (theirs->op == mine->op && theirs->n == mine->n && theirs->root == mine->root)
        return PAGODA_OK;
    return pg_error(PAGODA_ERR_INTERNAL,
                    "comm: mismatched collectives: rank %d called %s(n=%zu, root=%d), "
                    "rank %d called %s(n=%zu, root=%d)",
                    c->rank, op_name(mine->op), (size_t)mine->n, (int)mine->root, r,
                    op_name(theirs->op), (size_t)theirs->n, (int)theirs->root);
}

static pagoda_status check_root(const pg_comm *c, int root) {
    if (root < 0 || root >= c->size)
        return pg_error(PAGODA_ERR_INVALID_ARG, "comm: root rank %d of %d", root, c->size);
    return PAGODA_OK;
}

pagoda_status pg_comm_allreduce_sum_f32(pg_comm *c, float *buf, size_t n) {
    if (n == 0) return PAGODA_OK;
    return c->ops->allreduce_sum_f32(c, buf, n);
}

pagoda_status pg_comm_check_peers(pg_comm *c) {
    return c->ops->check_peers ? c->ops->check_peers(c) : PAGODA_OK;
}

pagoda_status pg_comm_broadcast(pg_comm *c, void *buf, size_t bytes, int root) {
    pagoda_status st = check_root(c, root);
    if (st != PAGODA_OK || bytes == 0) return st;
    return c->ops->broadcast(c, buf, bytes, root);
}

pagoda_status pg_comm_allgather(pg_comm *c, const void *send, size_t bytes, void *recv) {
    if (bytes == 0) return PAGODA_OK;
    return c->ops->allgather(c, send, bytes, recv);
}

pagoda_status pg_comm_barrier(pg_comm *c) { return c->ops->barrier(c); }

pagoda_status pg_comm_free(pg_comm *c) {
    if (!c) return PAGODA_OK;
    pagoda_status st = c->ops->destroy ? c->ops->destroy(c) : PAGODA_OK;
    free(c);
    return st;
}

/* Without MPI (PAGODA_MPI off or MPI not found, or a program not linking
 * src/dist/comm_mpi.c): comm_mpi.c's strong definition replaces this one. */
__attribute__((weak)) pagoda_status pg_comm_create_mpi(pg_comm **out) {
    *out = NULL;
    return pg_error(PAGODA_ERR_UNSUPPORTED,
                    "comm: this pagoda was built without MPI (configure with Open MPI installed: "
                    "libopenmpi-dev, -DPAGODA_MPI=ON)");
}

/* ---- SELF: one rank ---------------------------------------------------------------- */

static pagoda_status self_allreduce(pg_comm *c, float *buf, size_t n) {
    (void)c, (void)buf, (void)n; /* the sum over one rank is its own buffer */
    return PAGODA_OK;
}
static pagoda_status self_broadcast(pg_comm *c, void *buf, size_t bytes, int root) {
    (void)c, (void)buf, (void)bytes, (void)root;
    return PAGODA_OK;
}
static pagoda_status self_allgather(pg_comm *c, const void *send, size_t bytes, void *recv) {
    (void)c;
    if (recv != send) memmove(recv, send, bytes);
    return PAGODA_OK;
}
static pagoda_status self_barrier(pg_comm *c) {
    (void)c;
    return PAGODA_OK;
}

static const pg_comm_ops SELF_OPS = {self_allreduce, self_broadcast, self_allgather, self_barrier,
                                     NULL, NULL};

pagoda_status pg_comm_create_self(pg_comm **out) {
    pg_comm *c = calloc(1, sizeof *c);
    if (!c) return pg_error(PAGODA_ERR_NOMEM, "comm: out of memory");
    *c = (pg_comm){.kind = PG_COMM_SELF, .rank = 0, .size = 1, .ops = &SELF_OPS};
    *out = c;
    return PAGODA_OK;
}
