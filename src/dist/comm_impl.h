/* What the pg_comm backends share (comm.h): the communicator struct and
 * the operations each backend provides. Private to src/dist/. */
#ifndef PAGODA_DIST_COMM_IMPL_H
#define PAGODA_DIST_COMM_IMPL_H

#include <stdint.h>

#include "dist/comm.h"

typedef struct pg_comm_ops {
    pagoda_status (*allreduce_sum_f32)(pg_comm *c, float *buf, size_t n);
    pagoda_status (*broadcast)(pg_comm *c, void *buf, size_t bytes, int root);
    pagoda_status (*allgather)(pg_comm *c, const void *send, size_t bytes, void *recv);
    pagoda_status (*barrier)(pg_comm *c);
    pagoda_status (*destroy)(pg_comm *c); /* frees impl, not c */
    pagoda_status (*check_peers)(pg_comm *c); /* NULL: nothing to check locally */
} pg_comm_ops;

struct pg_comm {
    pg_comm_kind kind;
    int rank, size;
    const pg_comm_ops *ops;
    void *impl; /* the backend's state */
};

/* The collectives, as the backends' call headers name them. */
enum { PG_COMM_OP_ALLREDUCE = 1, PG_COMM_OP_BROADCAST, PG_COMM_OP_ALLGATHER, PG_COMM_OP_BARRIER };

/* One rank's collective call, which every backend exchanges before any
 * payload moves so that mismatched calls are caught on every rank: op
 * (PG_COMM_OP_*), root rank (0 where the op has none), n (floats for the
 * all-reduce, bytes for broadcast / all-gather, 0 for the barrier). */
typedef struct pg_comm_call {
    int32_t op, root;
    uint64_t n;
} pg_comm_call;

/* Compares this rank's call with rank r's (theirs). Returns PAGODA_OK when
 * op, root and n all agree, else PAGODA_ERR_INTERNAL with a message naming
 * both ranks' calls ("comm: mismatched collectives: rank 0 called
 * allreduce(n=8, root=0), rank 1 called barrier(n=0, root=0)"); the caller
 * then marks its communicator unusable. */
pagoda_status pg_comm_check_call(const pg_comm *c, const pg_comm_call *mine, int r,
                                 const pg_comm_call *theirs);

#endif
