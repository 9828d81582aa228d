/* NUMA topology (sysfs) and binding a tensor-parallel rank to one node:
 * its threads on the node's CPUs, its memory allocated on the node.
 *
 * Read from <root>/devices/system/node/node<N>/{cpulist,meminfo} (Linux
 * sysfs; see the kernel's Documentation/ABI/stable/sysfs-devices-node), root
 * = "/sys" unless given or $PAGODA_SYSFS_ROOT is set (tests use a fake tree).
 * The memory policy uses the raw set_mempolicy(2) / mbind(2) system calls (no
 * libnuma). One rank per node: rank r of `size` uses node r mod n_nodes. */
#ifndef PAGODA_BASE_NUMA_H
#define PAGODA_BASE_NUMA_H

#include <stddef.h>
#include <stdint.h>

#include "base/affinity.h"
#include "base/status.h"

#define PG_NUMA_MAX_NODES 64

typedef struct pg_numa_node {
    int id;                               /* the N of node<N> */
    int n_cpus;                           /* CPUs in cpulist (0: a memory-only node) */
    uint64_t cpu_mask[PG_CPU_MAX / 64];   /* bit c set: logical CPU c is on this node */
    uint64_t mem_bytes;                   /* MemTotal of the node's meminfo (0: unknown) */
} pg_numa_node;

typedef struct pg_numa_topology {
    int n_nodes;                          /* nodes found, ascending id */
    pg_numa_node nodes[PG_NUMA_MAX_NODES];
} pg_numa_topology;

/* Read the nodes under `sysfs_root` (NULL: $PAGODA_SYSFS_ROOT, else "/sys")
 * into *t, sorted by id. Errors: PAGODA_ERR_UNSUPPORTED when there is no
 * node directory (a kernel without NUMA: treat the machine as one node),
 * PAGODA_ERR_FORMAT naming the file for a malformed cpulist,
 * PAGODA_ERR_LIMIT for more than PG_NUMA_MAX_NODES nodes. */
pagoda_status pg_numa_read(const char *sysfs_root, pg_numa_topology *t);

/* The index into t->nodes (not the id) of the node rank `rank` of `size`
 * should use: the nodes that have CPUs, round robin (rank r takes the
 * (r mod k)-th of the k nodes with CPUs). -1 if no node has CPUs. */
int pg_numa_node_for_rank(const pg_numa_topology *t, int rank, int size);

/* The node's CPUs, ascending, into cpus (room for cap); returns the count
 * (at most cap). */
int pg_numa_node_cpus(const pg_numa_node *node, int *cpus, int cap);

/* Bind the calling process to node t->nodes[index]: restrict the calling
 * thread's affinity to the node's CPUs and make that the set thread pools
 * created afterwards use (pg_cpu_restrict), then set the thread's memory
 * policy (set_mempolicy, inherited by threads created afterwards) to
 * MPOL_BIND on the node when `strict` (allocations fail rather than spill)
 * or MPOL_PREFERRED (spill to other nodes when it is full). *policy_set
 * (may be NULL) gets 1, or 0 when the kernel has no memory policies (ENOSYS:
 * built without CONFIG_NUMA, or qemu-user, which does not emulate the call):
 * the CPUs are still bound. Call it early in each rank, before loading
 * weights and creating pools. Errors:
 * PAGODA_ERR_INVALID_ARG (index out of range, a node without CPUs),
 * PAGODA_ERR_INTERNAL (the kernel refused the CPUs), PAGODA_ERR_IO (the
 * memory policy call failed; the message names the errno). */
pagoda_status pg_numa_bind_rank(const pg_numa_topology *t, int index, int strict, int *policy_set);

/* Move / allocate the pages of [addr, addr + bytes) on node `node_id` (an
 * id, not an index) with mbind(MPOL_PREFERRED, MPOL_MF_MOVE): for memory
 * allocated before the rank was bound (e.g. mapped weights). addr is rounded
 * down and the length up to pages. *moved (may be NULL) gets 1, or 0 when
 * the kernel has no memory policies (ENOSYS, as pg_numa_bind_rank). Errors:
 * PAGODA_ERR_INVALID_ARG (node_id outside 0..PG_NUMA_MAX_NODES-1),
 * PAGODA_ERR_IO (mbind failed). */
pagoda_status pg_numa_mbind(void *addr, size_t bytes, int node_id, int *moved);

#endif
