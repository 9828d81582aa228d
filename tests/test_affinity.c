/* CPU-list parsing and formatting, the allowed set, physical-core selection
 * (on a fake sysfs tree) and pinning. */
#define _GNU_SOURCE
#include "testutil.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/affinity.h"
#include "base/status.h"

static void expect_list(const char *s, const int *want, int nwant) {
    int cpus[PG_CPU_MAX], n = -1;
    pagoda_status st = pg_cpulist_parse("test", s, cpus, PG_CPU_MAX, &n);
    if (st != PAGODA_OK) fail_msg("'%s' rejected: %s", s, pg_last_error());
    assert_int_equal(n, nwant);
    for (int i = 0; i < n; i++)
        assert_int_equal(cpus[i], want[i]);
}

static void test_cpulist_accepts(void **state) {
    (void)state;
    expect_list("0", (int[]){0}, 1);
    expect_list("0-3,8,10-11", (int[]){0, 1, 2, 3, 8, 10, 11}, 7);
    expect_list(" 1 , 3 ", (int[]){1, 3}, 2);
    expect_list("0-7:2", (int[]){0, 2, 4, 6}, 4);
    expect_list("3,1,2,1,2-3", (int[]){1, 2, 3}, 3); /* sorted, deduplicated */
    expect_list("1023", (int[]){1023}, 1);
    expect_list("5-5", (int[]){5}, 1);
}

static void expect_reject(const char *s, const char *msg_part) {
    int cpus[PG_CPU_MAX], n = -1;
    pagoda_status st = pg_cpulist_parse("PAGODA_CPUS", s, cpus, PG_CPU_MAX, &n);
    if (st != PAGODA_ERR_INVALID_ARG) fail_msg("'%s' accepted (status %d)", s ? s : "(null)", st);
    const char *m = pg_last_error();
    if (!strstr(m, msg_part))
        fail_msg("'%s': message '%s' lacks '%s'", s ? s : "(null)", m, msg_part);
    assert_non_null(strstr(m, "PAGODA_CPUS: "));
    assert_null(strchr(m, '\n'));
}

static void test_cpulist_rejects_with_clear_messages(void **state) {
    (void)state;
    expect_reject(NULL, "empty CPU list");
    expect_reject("", "empty CPU list");
    expect_reject("   ", "empty CPU list");
    expect_reject("0,,1", "'0,,1' at offset 2: empty item");
    expect_reject(",0", "at offset 0: empty item");
    expect_reject("0,", "at offset 2: empty item");
    expect_reject("3-1", "range end 1 is below its start 3");
    expect_reject("a", "at offset 0: expected a CPU number, found 'a'");
    expect_reject("-1", "expected a CPU number, found '-'");
    expect_reject("0-", "ends at offset 2 where a range end was expected");
    expect_reject("1-x", "at offset 2: expected a range end, found 'x'");
    expect_reject("1024", "CPU 1024 is out of range (max 1023)");
    expect_reject("0-99999999999", "out of range");
    expect_reject("0-7:0", "stride must be at least 1");
    expect_reject("0-7:", "where a stride was expected");
    expect_reject("0 1", "at offset 2: expected ',' or end of list, found '1'");
    expect_reject("0-3x", "at offset 3: expected ',' or end of list, found 'x'");
    expect_reject("2:1", "found ':'");
}

static void test_cpulist_capacity_limit(void **state) {
    (void)state;
    int cpus[4], n = -1;
    assert_int_equal(pg_cpulist_parse("opt", "0-9", cpus, 4, &n), PAGODA_ERR_LIMIT);
    assert_non_null(strstr(pg_last_error(), "more than 4 CPUs"));
    assert_int_equal(pg_cpulist_parse("opt", "0-3", cpus, 4, &n), PAGODA_OK);
    assert_int_equal(n, 4);
}

static void test_cpulist_format_round_trip(void **state) {
    (void)state;
    char buf[64];
    int a[] = {0, 1, 2, 3, 8, 10, 11};
    assert_string_equal(pg_cpulist_format(a, 7, buf, sizeof buf), "0-3,8,10-11");
    assert_string_equal(pg_cpulist_format(a, 0, buf, sizeof buf), "");
    int b[] = {5};
    assert_string_equal(pg_cpulist_format(b, 1, buf, sizeof buf), "5");
    /* Too small: truncated with "...", still terminated. */
    pg_cpulist_format(a, 7, buf, 8);
    assert_true(strlen(buf) < 8);
    assert_non_null(strstr(buf, "..."));
    /* Parse(format(x)) == x. */
    int c[] = {1, 3, 4, 5, 9, 100, 101, 1023};
    pg_cpulist_format(c, 8, buf, sizeof buf);
    int back[16], n = 0;
    assert_int_equal(pg_cpulist_parse("t", buf, back, 16, &n), PAGODA_OK);
    assert_int_equal(n, 8);
    assert_memory_equal(back, c, sizeof c);
}

static void test_allowed_set_is_sane(void **state) {
    (void)state;
    int cpus[PG_CPU_MAX], n = 0;
    assert_int_equal(pg_cpu_allowed(cpus, PG_CPU_MAX, &n), PAGODA_OK);
    assert_true(n >= 1);
    for (int i = 0; i < n; i++) {
        assert_true(cpus[i] >= 0 && cpus[i] < PG_CPU_MAX);
        if (i) assert_true(cpus[i] > cpus[i - 1]);
    }
    int k = pg_cpu_physical_cores(NULL, cpus, n, cpus); /* in place, real sysfs */
    assert_true(k >= 1 && k <= n);
}

static void write_topo(const char *root, int cpu, int pkg, int core) {
    char path[512], val[32];
    snprintf(path, sizeof path, "%s/cpu%d", root, cpu);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/cpu%d/topology", root, cpu);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/cpu%d/topology/physical_package_id", root, cpu);
    snprintf(val, sizeof val, "%d\n", pkg);
    pg_test_write_file(path, val, strlen(val));
    snprintf(path, sizeof path, "%s/cpu%d/topology/core_id", root, cpu);
    snprintf(val, sizeof val, "%d\n", core);
    pg_test_write_file(path, val, strlen(val));
}

static void test_physical_cores_on_fake_topology(void **state) {
    (void)state;
    const char *root = pg_test_tmpdir();
    /* Two packages x two cores x two hyperthreads, numbered like Linux on
     * x86 (siblings far apart): cpu c and c+4 share a core. */
    for (int c = 0; c < 8; c++)
        write_topo(root, c, (c % 4) / 2, c % 2);
    /* cpu 8 has no topology files: counts as its own core. */
    int cpus[] = {0, 1, 2, 3, 4, 5, 6, 7, 8}, out[9];
    int k = pg_cpu_physical_cores(root, cpus, 9, out);
    assert_int_equal(k, 5);
    int want[] = {0, 1, 2, 3, 8};
    assert_memory_equal(out, want, sizeof want);
    /* Only the second hyperthreads: each is then its core's first CPU. */
    int ht[] = {5, 6};
    k = pg_cpu_physical_cores(root, ht, 2, out);
    assert_int_equal(k, 2);
    assert_int_equal(out[0], 5);
    assert_int_equal(out[1], 6);
    /* Same core_id in different packages are different cores. */
    int two[] = {0, 2};
    assert_int_equal(pg_cpu_physical_cores(root, two, 2, out), 2);
}

static void test_pin_self(void **state) {
    (void)state;
    cpu_set_t old;
    assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
    int cpus[PG_CPU_MAX], n = 0;
    assert_int_equal(pg_cpu_allowed(cpus, PG_CPU_MAX, &n), PAGODA_OK);
    int target = cpus[n - 1];
    assert_int_equal(pg_cpu_pin_self(target), PAGODA_OK);
    cpu_set_t now;
    assert_int_equal(sched_getaffinity(0, sizeof now, &now), 0);
    assert_int_equal(CPU_COUNT(&now), 1);
    assert_true(CPU_ISSET(target, &now));
    /* The allowed set is the process's, not narrowed by pinning. */
    int n2 = 0;
    assert_int_equal(pg_cpu_allowed(cpus, PG_CPU_MAX, &n2), PAGODA_OK);
    assert_int_equal(n2, n);
    assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);

    assert_int_equal(pg_cpu_pin_self(-1), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_cpu_pin_self(PG_CPU_MAX), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "out of range"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpulist_accepts),
        cmocka_unit_test(test_cpulist_rejects_with_clear_messages),
        cmocka_unit_test(test_cpulist_capacity_limit),
        cmocka_unit_test(test_cpulist_format_round_trip),
        cmocka_unit_test(test_allowed_set_is_sane),
        cmocka_unit_test(test_physical_cores_on_fake_topology),
        cmocka_unit_test(test_pin_self),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
