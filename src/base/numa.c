/* NUMA topology from sysfs and rank binding (numa.h). */
#define _GNU_SOURCE
#include "base/numa.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* <linux/mempolicy.h> values (stable ABI), spelled here so no header of
 * libnuma is needed. */
#define PG_MPOL_PREFERRED 1
#define PG_MPOL_BIND 2
#define PG_MPOL_MF_MOVE (1 << 1)

static int cmp_node(const void *a, const void *b) {
    return ((const pg_numa_node *)a)->id - ((const pg_numa_node *)b)->id;
}

/* The first line of a small file into buf; 0 if it cannot be read. */
static int read_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (!ok) buf[0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return 1;
}

/* "Node 0 MemTotal:  5727992 kB" -> bytes; 0 if absent. */
static uint64_t node_mem_total(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    uint64_t bytes = 0;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "MemTotal:");
        if (!p) continue;
        unsigned long long kb = 0;
        if (sscanf(p + 9, "%llu", &kb) == 1) bytes = (uint64_t)kb << 10;
        break;
    }
    fclose(f);
    return bytes;
}

pagoda_status pg_numa_read(const char *sysfs_root, pg_numa_topology *t) {
    memset(t, 0, sizeof *t);
    const char *root = sysfs_root;
    if (!root) root = getenv("PAGODA_SYSFS_ROOT");
    if (!root || !*root) root = "/sys";
    char dir[512];
    snprintf(dir, sizeof dir, "%s/devices/system/node", root);
    DIR *d = opendir(dir);
    if (!d) return pg_error(PAGODA_ERR_UNSUPPORTED, "numa: no node directory %s: %s", dir, strerror(errno));
    struct dirent *e;
    pagoda_status st = PAGODA_OK;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        if (strncmp(nm, "node", 4) != 0 || !isdigit((unsigned char)nm[4])) continue;
        char *end;
        long id = strtol(nm + 4, &end, 10);
        if (*end || id < 0 || id > 1 << 20) continue;
        if (t->n_nodes == PG_NUMA_MAX_NODES) {
            st = pg_error(PAGODA_ERR_LIMIT, "numa: %s has more than %d nodes", dir, PG_NUMA_MAX_NODES);
            break;
        }
        pg_numa_node *n = &t->nodes[t->n_nodes];
        n->id = (int)id;
        char path[1024], text[4096];
        snprintf(path, sizeof path, "%s/%s/cpulist", dir, nm);
        if (read_line(path, text, sizeof text) && text[strspn(text, " \t")] != '\0') {
            int cpus[PG_CPU_MAX];
            int nc = 0;
            if (pg_cpulist_parse(path, text, cpus, PG_CPU_MAX, &nc) != PAGODA_OK) {
                char why[1024];
                snprintf(why, sizeof why, "%s", pg_last_error()); /* pg_error reuses its buffer */
                st = pg_error(PAGODA_ERR_FORMAT, "numa: %s", why);
                break;
            }
            for (int i = 0; i < nc; i++) n->cpu_mask[cpus[i] / 64] |= 1ull << (cpus[i] % 64);
            n->n_cpus = nc;
        }
        snprintf(path, sizeof path, "%s/%s/meminfo", dir, nm);
        n->mem_bytes = node_mem_total(path);
        t->n_nodes++;
    }
    closedir(d);
    if (st != PAGODA_OK) {
        memset(t, 0, sizeof *t);
        return st;
    }
    if (t->n_nodes == 0)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "numa: no node<N> entries in %s", dir);
    qsort(t->nodes, (size_t)t->n_nodes, sizeof t->nodes[0], cmp_node);
    return PAGODA_OK;
}

int pg_numa_node_for_rank(const pg_numa_topology *t, int rank, int size) {
    (void)size;
    int k = 0;
    for (int i = 0; i < t->n_nodes; i++) k += t->nodes[i].n_cpus > 0;
    if (k == 0 || rank < 0) return -1;
    int want = rank % k;
    for (int i = 0; i < t->n_nodes; i++)
        if (t->nodes[i].n_cpus > 0 && want-- == 0) return i;
    return -1;
}

int pg_numa_node_cpus(const pg_numa_node *node, int *cpus, int cap) {
    int n = 0;
    for (int c = 0; c < PG_CPU_MAX && n < cap; c++)
        if (node->cpu_mask[c / 64] >> (c % 64) & 1) cpus[n++] = c;
    return n;
}

pagoda_status pg_numa_bind_rank(const pg_numa_topology *t, int index, int strict, int *policy_set) {
    if (policy_set) *policy_set = 0;
    if (index < 0 || index >= t->n_nodes)
        return pg_error(PAGODA_ERR_INVALID_ARG, "numa: node index %d outside 0..%d", index,
                        t->n_nodes - 1);
    const pg_numa_node *node = &t->nodes[index];
    if (node->n_cpus == 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "numa: node %d has no CPUs (a memory-only node)",
                        node->id);
    if (node->id >= PG_NUMA_MAX_NODES)
        return pg_error(PAGODA_ERR_INVALID_ARG, "numa: node id %d above %d", node->id,
                        PG_NUMA_MAX_NODES - 1);
    int cpus[PG_CPU_MAX];
    int n = pg_numa_node_cpus(node, cpus, PG_CPU_MAX);
    pagoda_status st = pg_cpu_restrict(cpus, n);
    if (st != PAGODA_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", pg_last_error()); /* pg_error reuses its buffer */
        return pg_error(st, "numa: node %d: %s", node->id, why);
    }
    unsigned long mask = 1ul << node->id;
    long rc = syscall(SYS_set_mempolicy, strict ? PG_MPOL_BIND : PG_MPOL_PREFERRED, &mask,
                      (unsigned long)(sizeof mask * 8 + 1));
    if (rc != 0 && errno == ENOSYS) return PAGODA_OK;
    if (rc != 0)
        return pg_error(PAGODA_ERR_IO, "numa: set_mempolicy(%s, node %d): %s",
                        strict ? "MPOL_BIND" : "MPOL_PREFERRED", node->id, strerror(errno));
    if (policy_set) *policy_set = 1;
    return PAGODA_OK;
}

pagoda_status pg_numa_mbind(void *addr, size_t bytes, int node_id, int *moved) {
    if (moved) *moved = 0;
    if (node_id < 0 || node_id >= PG_NUMA_MAX_NODES)
        return pg_error(PAGODA_ERR_INVALID_ARG, "numa: node id %d outside 0..%d", node_id,
                        PG_NUMA_MAX_NODES - 1);
    if (bytes == 0) return PAGODA_OK;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) page = 4096;
    uintptr_t lo = (uintptr_t)addr / (uintptr_t)page * (uintptr_t)page;
    uintptr_t hi = ((uintptr_t)addr + bytes + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    unsigned long mask = 1ul << node_id;
    long rc = syscall(SYS_mbind, (void *)lo, (unsigned long)(hi - lo), PG_MPOL_PREFERRED, &mask,
                      (unsigned long)(sizeof mask * 8 + 1), PG_MPOL_MF_MOVE);
    if (rc != 0 && errno == ENOSYS) return PAGODA_OK;
    if (rc != 0)
        return pg_error(PAGODA_ERR_IO, "numa: mbind(%zu bytes, node %d): %s", bytes, node_id,
                        strerror(errno));
    if (moved) *moved = 1;
    return PAGODA_OK;
}
