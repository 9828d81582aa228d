/* NUMA topology and rank binding (src/base/numa.h) on fake sysfs trees:
 * node parsing (ids out of order, memory-only nodes, meminfo), the rank to
 * node mapping, malformed and missing trees, and binding: the CPUs of the
 * node become the process's allowed set (what thread pools use), a node of
 * CPUs the process may not use is refused with the kernel's reason. Binding
 * runs in a forked child so the test process keeps its affinity. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/affinity.h"
#include "base/numa.h"
#include "base/status.h"
#include "testutil.h"

static void put(const char *root, const char *rel, const char *text) {
    char path[1024], dir[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    pg_test_mkdirs(dir);
    pg_test_write_file(path, text, strlen(text));
}

/* Nodes 10, 0, 2 (memory only), 1: read sorted, with CPUs and memory. */
static const char *fake_tree(void) {
    static char root[1024];
    snprintf(root, sizeof root, "%s/sys", pg_test_tmpdir());
    const char *n = "devices/system/node";
    char rel[256];
    snprintf(rel, sizeof rel, "%s/node10/cpulist", n), put(root, rel, "8-11\n");
    snprintf(rel, sizeof rel, "%s/node0/cpulist", n), put(root, rel, "0-3\n");
    snprintf(rel, sizeof rel, "%s/node0/meminfo", n);
    put(root, rel, "Node 0 MemTotal:        1024 kB\nNode 0 MemFree:          512 kB\n");
    snprintf(rel, sizeof rel, "%s/node2/cpulist", n), put(root, rel, "\n");
    snprintf(rel, sizeof rel, "%s/node2/meminfo", n), put(root, rel, "Node 2 MemTotal: 2048 kB\n");
    snprintf(rel, sizeof rel, "%s/node1/cpulist", n), put(root, rel, "4-7,12\n");
    snprintf(rel, sizeof rel, "%s/possible", n), put(root, rel, "0-10\n");   /* not a node */
    snprintf(rel, sizeof rel, "%s/has_cpu", n), put(root, rel, "0-1,10\n");
    return root;
}

static void test_read(void **state) {
    (void)state;
    pg_numa_topology t;
    assert_int_equal(pg_numa_read(fake_tree(), &t), PAGODA_OK);
    assert_int_equal(t.n_nodes, 4);
    int ids[] = {0, 1, 2, 10}, ncpu[] = {4, 5, 0, 4};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(t.nodes[i].id, ids[i]);
        assert_int_equal(t.nodes[i].n_cpus, ncpu[i]);
    }
    assert_int_equal(t.nodes[0].mem_bytes, 1024u << 10);
    assert_int_equal(t.nodes[1].mem_bytes, 0);
    assert_int_equal(t.nodes[2].mem_bytes, 2048u << 10);
    int cpus[16];
    assert_int_equal(pg_numa_node_cpus(&t.nodes[1], cpus, 16), 5);
    char list[64];
    assert_string_equal(pg_cpulist_format(cpus, 5, list, sizeof list), "4-7,12");
    assert_int_equal(pg_numa_node_cpus(&t.nodes[1], cpus, 2), 2);
    /* ranks round-robin over the nodes with CPUs (index 2 has none) */
    int want[] = {0, 1, 3, 0, 1};
    for (int r = 0; r < 5; r++) assert_int_equal(pg_numa_node_for_rank(&t, r, 5), want[r]);
    assert_int_equal(pg_numa_node_for_rank(&t, -1, 5), -1);
}

static void test_env_root(void **state) {
    (void)state;
    const char *root = fake_tree();
    setenv("PAGODA_SYSFS_ROOT", root, 1);
    pg_numa_topology t;
    pagoda_status st = pg_numa_read(NULL, &t);
    unsetenv("PAGODA_SYSFS_ROOT");
    assert_int_equal(st, PAGODA_OK);
    assert_int_equal(t.n_nodes, 4);
}

static void test_errors(void **state) {
    (void)state;
    char root[1024];
    pg_numa_topology t;
    snprintf(root, sizeof root, "%s/none", pg_test_tmpdir());
    assert_int_equal(pg_numa_read(root, &t), PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pg_last_error(), "no node directory"));
    snprintf(root, sizeof root, "%s/empty", pg_test_tmpdir());
    put(root, "devices/system/node/possible", "0\n");
    assert_int_equal(pg_numa_read(root, &t), PAGODA_ERR_UNSUPPORTED);
    assert_non_null(strstr(pg_last_error(), "no node<N> entries"));
    snprintf(root, sizeof root, "%s/bad", pg_test_tmpdir());
    put(root, "devices/system/node/node0/cpulist", "3-1\n");
    assert_int_equal(pg_numa_read(root, &t), PAGODA_ERR_FORMAT);
    assert_non_null(strstr(pg_last_error(), "node0/cpulist: '3-1' at offset 0"));
    assert_int_equal(t.n_nodes, 0);
    /* binding: bad indices and a memory-only node */
    assert_int_equal(pg_numa_read(fake_tree(), &t), PAGODA_OK);
    assert_int_equal(pg_numa_bind_rank(&t, 4, 0, NULL), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_numa_bind_rank(&t, -1, 0, NULL), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_numa_bind_rank(&t, 2, 0, NULL), PAGODA_ERR_INVALID_ARG);
    assert_string_equal(pg_last_error(), "numa: node 2 has no CPUs (a memory-only node)");
    assert_int_equal(pg_numa_mbind(&t, 1, 64, NULL), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_numa_mbind(&t, 1, -1, NULL), PAGODA_ERR_INVALID_ARG);
}

/* Child: bind to a node made of the first allowed CPU; exit 0 if the
 * process's allowed set (pg_cpu_allowed, the pools' set) and the kernel's
 * mask became exactly that CPU. */
static int bind_child(const char *root, int cpu) {
    /* natively the kernel applies the memory policy; qemu-user (the Arm
     * tests, PAGODA_EXEC_WRAPPER set) answers ENOSYS to set_mempolicy/mbind */
    const char *wrap = getenv("PAGODA_EXEC_WRAPPER");
    int emulated = wrap && *wrap;
    pg_numa_topology t;
    if (pg_numa_read(root, &t) != PAGODA_OK) return 10;
    int policy = -1;
    if (pg_numa_bind_rank(&t, 0, 0, &policy) != PAGODA_OK) {
        fprintf(stderr, "bind: %s\n", pg_last_error());
        return 11;
    }
    if (policy != !emulated) {
        fprintf(stderr, "bind: policy_set %d (emulated %d)\n", policy, emulated);
        return 16;
    }
    if (!emulated) {
        int mode = -1;
        unsigned long mask[2] = {0, 0};
        if (syscall(SYS_get_mempolicy, &mode, mask, 128ul, NULL, 0ul) != 0 || mode != 1 /* PREFERRED */ ||
            mask[0] != 1)
            return 17;
    }
    int cpus[PG_CPU_MAX], n = 0;
    if (pg_cpu_allowed(cpus, PG_CPU_MAX, &n) != PAGODA_OK || n != 1 || cpus[0] != cpu) return 12;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1 || !CPU_ISSET(cpu, &set))
        return 13;
    /* memory of the bound rank: a mapping moved to its node */
    size_t bytes = 1 << 16;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 14;
    memset(p, 1, bytes);
    int moved = -1;
    if (pg_numa_mbind(p, bytes, t.nodes[0].id, &moved) != PAGODA_OK || moved != !emulated) {
        fprintf(stderr, "mbind: %s (moved %d)\n", pg_last_error(), moved);
        return 15;
    }
    munmap(p, bytes);
    return 0;
}

static void test_bind(void **state) {
    (void)state;
    int cpus[PG_CPU_MAX], n = 0;
    assert_int_equal(pg_cpu_allowed(cpus, PG_CPU_MAX, &n), PAGODA_OK);
    assert_true(n >= 1);
    char root[1024], text[32];
    snprintf(root, sizeof root, "%s/one", pg_test_tmpdir());
    /* node 0 is the one node every Linux NUMA kernel has: its CPUs here are
     * the first CPU we may use, which may differ from the real node 0's */
    snprintf(text, sizeof text, "%d\n", cpus[0]);
    put(root, "devices/system/node/node0/cpulist", text);
    fflush(NULL);
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) _exit(bind_child(root, cpus[0]));
    int st = 0;
    assert_int_equal(waitpid(p, &st, 0), p);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* the parent's allowed set is unchanged */
    int n2 = 0;
    assert_int_equal(pg_cpu_allowed(cpus, PG_CPU_MAX, &n2), PAGODA_OK);
    assert_int_equal(n2, n);
}

/* CPUs beyond any machine's: the kernel refuses, the message says which. */
static void test_bind_refused(void **state) {
    (void)state;
    char root[1024];
    snprintf(root, sizeof root, "%s/far", pg_test_tmpdir());
    put(root, "devices/system/node/node0/cpulist", "1020-1023\n");
    pg_numa_topology t;
    assert_int_equal(pg_numa_read(root, &t), PAGODA_OK);
    assert_int_equal(pg_numa_bind_rank(&t, 0, 1, NULL), PAGODA_ERR_INTERNAL);
    if (!strstr(pg_last_error(), "numa: node 0: restrict: cannot bind to CPUs 1020-1023"))
        fail_msg("message: %s", pg_last_error());
    int empty[1] = {0};
    assert_int_equal(pg_cpu_restrict(empty, 0), PAGODA_ERR_INVALID_ARG);
    int far[1] = {PG_CPU_MAX};
    assert_int_equal(pg_cpu_restrict(far, 1), PAGODA_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read),  cmocka_unit_test(test_env_root),
        cmocka_unit_test(test_errors), cmocka_unit_test(test_bind),
        cmocka_unit_test(test_bind_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
