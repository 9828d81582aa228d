/* What the pg_comm backends share (comm.h): the communicator struct and
 * the operations each backend provides. Private to src/dist/. */
#ifndef PAGODA_DIST_COMM_IMPL_H
#define PAGODA_DIST_COMM_IMPL_H

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

#endif
