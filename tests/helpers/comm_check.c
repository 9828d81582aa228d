/* Collective checks run by every rank (comm_check.h). */
#include "comm_check.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return 1;
}

/* Deterministic data of (rank, tag): uniform in [-1, 1) with a spread of
 * exponents, so sums round and their order shows in the bits. */
static void fill(float *x, size_t n, int rank, uint32_t tag) {
    uint64_t s = 0x9E3779B97F4A7C15ull ^ ((uint64_t)(rank + 1) << 32) ^ tag;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float u = (float)((s >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
        x[i] = u * (float)(1u << (s & 7));
    }
}

static void fill_bytes(unsigned char *b, size_t n, int rank, uint32_t tag) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(rank * 131 + i * 7 + tag * 13 + (i >> 8));
}

/* The rank-order reference: ref = x_0 + x_1 + ... + x_{size-1}, left to right. */
static void reference(float *ref, float *tmp, size_t n, int size, uint32_t tag) {
    fill(ref, n, 0, tag);
    for (int r = 1; r < size; r++) {
        fill(tmp, n, r, tag);
        for (size_t i = 0; i < n; i++) ref[i] += tmp[i];
    }
}

static int check_allreduce(pg_comm *c, size_t n, uint32_t tag, float *buf, float *ref, float *tmp,
                           char *err, size_t cap) {
    int rank = pg_comm_rank(c), size = pg_comm_size(c);
    fill(buf, n, rank, tag);
    pagoda_status st = pg_comm_allreduce_sum_f32(c, buf, n);
    if (st != PAGODA_OK)
        return fail(err, cap, "rank %d: allreduce n=%zu: %s", rank, n, pg_last_error());
    reference(ref, tmp, n, size, tag);
    for (size_t i = 0; i < n; i++)
        if (memcmp(&buf[i], &ref[i], sizeof(float)) != 0)
            return fail(err, cap, "rank %d: allreduce n=%zu: element %zu is %.9g, rank order gives %.9g",
                        rank, n, i, (double)buf[i], (double)ref[i]);
    return 0;
}

static int check_broadcast(pg_comm *c, size_t bytes, int root, uint32_t tag, unsigned char *buf,
                           unsigned char *want, char *err, size_t cap) {
    int rank = pg_comm_rank(c);
    fill_bytes(buf, bytes, rank, tag);
    fill_bytes(want, bytes, root, tag);
    pagoda_status st = pg_comm_broadcast(c, buf, bytes, root);
    if (st != PAGODA_OK)
        return fail(err, cap, "rank %d: broadcast %zu bytes from %d: %s", rank, bytes, root,
                    pg_last_error());
    if (memcmp(buf, want, bytes) != 0)
        return fail(err, cap, "rank %d: broadcast %zu bytes from %d: wrong bytes", rank, bytes, root);
    return 0;
}

static int check_allgather(pg_comm *c, size_t bytes, uint32_t tag, unsigned char *send,
                           unsigned char *recv, unsigned char *want, char *err, size_t cap) {
    int rank = pg_comm_rank(c), size = pg_comm_size(c);
    fill_bytes(send, bytes, rank, tag);
    memset(recv, 0xA5, (size_t)size * bytes);
    pagoda_status st = pg_comm_allgather(c, send, bytes, recv);
    if (st != PAGODA_OK)
        return fail(err, cap, "rank %d: allgather %zu bytes: %s", rank, bytes, pg_last_error());
    for (int r = 0; r < size; r++) {
        fill_bytes(want, bytes, r, tag);
        if (memcmp(recv + (size_t)r * bytes, want, bytes) != 0)
            return fail(err, cap, "rank %d: allgather %zu bytes: rank %d's part is wrong", rank,
                        bytes, r);
    }
    return 0;
}

int pg_comm_check_collectives(pg_comm *c, size_t max_floats, size_t max_bytes, char *err,
                              size_t cap) {
    int rank = pg_comm_rank(c), size = pg_comm_size(c);
    size_t nf = max_floats ? max_floats : 4096;
    size_t nb = max_bytes ? max_bytes : 4096;
    float *buf = malloc(nf * sizeof(float)), *ref = malloc(nf * sizeof(float));
    float *tmp = malloc(nf * sizeof(float));
    unsigned char *b1 = malloc(nb), *b2 = malloc((size_t)size * nb), *b3 = malloc(nb);
    int bad = 0;
    if (!buf || !ref || !tmp || !b1 || !b2 || !b3) {
        bad = fail(err, cap, "rank %d: out of memory", rank);
        goto done;
    }
    /* every rank runs every step (a failed rank still keeps in step) */
    const size_t ns[] = {1, 2, 7, 64, 1000, nf};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        if (ns[k] > nf) continue;
        if (!bad) bad = check_allreduce(c, ns[k], (uint32_t)k, buf, ref, tmp, err, cap);
        else pg_comm_allreduce_sum_f32(c, buf, ns[k]);
    }
    const size_t bs[] = {1, 13, nb};
    for (int root = 0; root < size; root++)
        for (size_t k = 0; k < 3; k++) {
            if (!bad) bad = check_broadcast(c, bs[k], root, (uint32_t)(root * 3 + k), b1, b3, err, cap);
            else pg_comm_broadcast(c, b1, bs[k], root);
        }
    for (size_t k = 0; k < 3; k++) {
        if (!bad) bad = check_allgather(c, bs[k], (uint32_t)(100 + k), b1, b2, b3, err, cap);
        else pg_comm_allgather(c, b1, bs[k], b2);
    }
    if (pg_comm_barrier(c) != PAGODA_OK && !bad)
        bad = fail(err, cap, "rank %d: barrier: %s", rank, pg_last_error());
    /* back to back: any lost wake-up or reuse race shows as a hang or bad bits */
    for (int it = 0; it < 300; it++) {
        size_t n = 1 + (size_t)(it % 5) * 3;
        uint32_t tag = 1000 + (uint32_t)it;
        switch (it % 4) {
        case 0:
        case 1:
            if (!bad) bad = check_allreduce(c, n, tag, buf, ref, tmp, err, cap);
            else pg_comm_allreduce_sum_f32(c, buf, n);
            break;
        case 2:
            if (!bad) bad = check_broadcast(c, n, it % size, tag, b1, b3, err, cap);
            else pg_comm_broadcast(c, b1, n, it % size);
            break;
        default:
            if (pg_comm_barrier(c) != PAGODA_OK && !bad)
                bad = fail(err, cap, "rank %d: barrier %d: %s", rank, it, pg_last_error());
        }
    }
    /* above the limits: refused on every rank without communicating */
    if (max_floats && !bad) {
        pagoda_status st = pg_comm_allreduce_sum_f32(c, buf, max_floats + 1);
        if (st != PAGODA_ERR_INVALID_ARG)
            bad = fail(err, cap, "rank %d: allreduce of max_floats + 1: status %d, want INVALID_ARG",
                       rank, (int)st);
        else if (!strstr(pg_last_error(), "above the limit"))
            bad = fail(err, cap, "rank %d: allreduce above the limit: message '%s'", rank,
                       pg_last_error());
    }
    if (max_bytes && !bad && pg_comm_broadcast(c, b1, max_bytes + 1, 0) != PAGODA_ERR_INVALID_ARG)
        bad = fail(err, cap, "rank %d: broadcast of max_bytes + 1 not refused", rank);
    if (!bad && pg_comm_broadcast(c, b1, 1, size) != PAGODA_ERR_INVALID_ARG)
        bad = fail(err, cap, "rank %d: broadcast from root %d (of %d) not refused", rank, size, size);
    /* and still usable afterwards */
    if (pg_comm_barrier(c) != PAGODA_OK && !bad)
        bad = fail(err, cap, "rank %d: barrier after refusals: %s", rank, pg_last_error());
done:
    free(buf), free(ref), free(tmp), free(b1), free(b2), free(b3);
    return bad;
}

int pg_comm_check_mismatch(pg_comm *c, char *err, size_t cap) {
    int rank = pg_comm_rank(c);
    float buf[9] = {0};
    pagoda_status st = pg_comm_allreduce_sum_f32(c, buf, rank == 0 ? 8 : 9);
    if (st != PAGODA_ERR_INTERNAL)
        return fail(err, cap, "rank %d: mismatched allreduce: status %d, want INTERNAL", rank,
                    (int)st);
    if (!strstr(pg_last_error(), "mismatch"))
        return fail(err, cap, "rank %d: mismatched allreduce: message '%s'", rank, pg_last_error());
    return 0;
}
