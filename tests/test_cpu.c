/* CPU feature detection: consistency, a cross-check of the CPUID/HWCAP
 * result against the kernel's /proc/cpuinfo, features the test environment
 * promises (PAGODA_EXPECT_FEATURES, PAGODA_EXPECT_SVE_VL_BYTES: set for the
 * qemu -cpu max runs in cmake/tests.cmake), and ISA level resolution
 * (PAGODA_ISA semantics) on synthetic machines. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/status.h"

static void test_detection_is_consistent(void **state) {
    (void)state;
    const pg_cpu_info *c = pg_cpu();
    assert_ptr_equal(c, pg_cpu()); /* detected once */
#if defined(__x86_64__)
    assert_string_equal(c->arch, "x86_64");
#else
    assert_string_equal(c->arch, "aarch64");
#endif
    assert_true(c->model[0] != 0);
    assert_true(c->logical_cpus >= 1);
    assert_true(c->online_cpus >= c->logical_cpus);
    assert_true(c->physical_cores >= 1 && c->physical_cores <= c->logical_cpus);
    assert_true(c->smt_per_core >= 1);
    assert_true(c->numa_nodes >= 1);
    assert_true(c->mem_total > 0 && c->mem_available <= c->mem_total);
    assert_true(c->hugepages_free <= c->hugepages_total);
    const char *modes[] = {"always", "madvise", "never", "unknown"};
    bool known = false;
    for (int i = 0; i < 4; i++)
        known |= !strcmp(c->thp_mode, modes[i]);
    assert_true(known);
    assert_true(pg_isa_supported(c, c->best_isa));
    assert_int_equal(c->best_isa, pg_isa_best(c));
    /* A fresh detection gives the same answer. */
    pg_cpu_info again;
    pg_cpu_detect(&again);
    pg_cpu_feature f1[PG_CPU_MAX_FEATURES], f2[PG_CPU_MAX_FEATURES];
    size_t n = pg_cpu_features(c, f1);
    assert_int_equal(n, pg_cpu_features(&again, f2));
    for (size_t i = 0; i < n; i++)
        assert_int_equal(f1[i].present, f2[i].present);
    if (c->sve)
        assert_true(c->sve_vl_bytes >= 16 && c->sve_vl_bytes % 16 == 0);
    else
        assert_int_equal(c->sve_vl_bytes, 0);
}

/* The first "flags" (x86) or "Features" (arm) line of /proc/cpuinfo, with
 * a space at both ends for whole-word search; NULL if there is none (e.g.
 * qemu-user shows the host's x86 cpuinfo to an aarch64 guest). */
static char *cpuinfo_flags(void) {
#if defined(__x86_64__)
    const char *key = "flags";
#else
    const char *key = "Features";
#endif
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return NULL;
    static char line[8192];
    char *found = NULL;
    while (!found && fgets(line, sizeof line - 2, f)) {
        if (strncmp(line, key, strlen(key)) != 0) continue;
        char *colon = strchr(line, ':');
        if (!colon) continue;
        line[strcspn(line, "\n")] = 0;
        *colon = ' ';
        strcat(line, " ");
        found = colon;
    }
    fclose(f);
    return found;
}

static void __attribute__((unused)) test_features_match_proc_cpuinfo(void **state) {
    (void)state;
    char *flags = cpuinfo_flags();
    if (!flags) {
        fail_msg("no feature line for this architecture in /proc/cpuinfo");
    }
    pg_cpu_feature f[PG_CPU_MAX_FEATURES];
    size_t n = pg_cpu_features(pg_cpu(), f);
    for (size_t i = 0; i < n; i++) {
        char word[64];
        snprintf(word, sizeof word, " %s ", f[i].cpuinfo);
        bool kernel_says = strstr(flags, word) != NULL;
        if (kernel_says != f[i].present)
            fail_msg("feature %s: detected %s, /proc/cpuinfo says %s", f[i].name,
                     f[i].present ? "yes" : "no", kernel_says ? "yes" : "no");
    }
}

static void __attribute__((unused)) test_expected_features(void **state) {
    (void)state;
    const char *want = getenv("PAGODA_EXPECT_FEATURES");
    const char *vl = getenv("PAGODA_EXPECT_SVE_VL_BYTES");
    if ((!want || !*want) && (!vl || !*vl)) {
        fail_msg("PAGODA_EXPECT_FEATURES / PAGODA_EXPECT_SVE_VL_BYTES unset (set by CTest)");
    }
    pg_cpu_feature f[PG_CPU_MAX_FEATURES];
    size_t n = pg_cpu_features(pg_cpu(), f);
    char list[256];
    snprintf(list, sizeof list, "%s", want ? want : "");
    for (char *save = NULL, *name = strtok_r(list, ",", &save); name;
         name = strtok_r(NULL, ",", &save)) {
        bool found = false;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(f[i].name, name) != 0) continue;
            found = true;
            if (!f[i].present) fail_msg("expected feature %s not detected", name);
        }
        if (!found)
            fail_msg("PAGODA_EXPECT_FEATURES names %s, which this architecture does not know",
                     name);
    }
    if (vl && *vl) assert_int_equal(pg_cpu()->sve_vl_bytes, atoi(vl));
}

/* A synthetic machine with every feature of this architecture off. */
static pg_cpu_info bare(void) {
    pg_cpu_info c;
    memset(&c, 0, sizeof c);
    return c;
}

static void expect_level(const pg_cpu_info *c, const char *name, pg_isa want, bool want_clamped) {
    pg_isa got;
    bool clamped = !want_clamped;
    assert_int_equal(pg_isa_resolve(c, name, &got, &clamped), PAGODA_OK);
    if (got != want || clamped != want_clamped)
        fail_msg("resolve(%s): got %s%s, want %s%s", name ? name : "NULL", pg_isa_name(got),
                 clamped ? " (clamped)" : "", pg_isa_name(want), want_clamped ? " (clamped)" : "");
}

static void expect_unknown(const pg_cpu_info *c, const char *name) {
    pg_isa got;
    pg_clear_error();
    assert_int_equal(pg_isa_resolve(c, name, &got, NULL), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(got, pg_isa_best(c)); /* falls back to the best level */
    assert_non_null(strstr(pg_last_error(), name));
    assert_non_null(strstr(pg_last_error(), "valid: scalar"));
}

static void test_isa_resolution(void **state) {
    (void)state;
    pg_cpu_info c = bare();
    assert_int_equal(pg_isa_best(&c), PG_ISA_SCALAR);
    expect_level(&c, NULL, PG_ISA_SCALAR, false);
    expect_level(&c, "scalar", PG_ISA_SCALAR, false);
    expect_unknown(&c, "bogus");
    assert_int_equal(pg_isa_parse("AVX512"), PG_ISA_AVX512);
    assert_int_equal(pg_isa_parse("nope"), -1);
#if defined(__x86_64__)
    expect_level(&c, "avx2", PG_ISA_SCALAR, true); /* more than the hardware: clamp */
    c.avx2 = c.fma = c.f16c = true;
    assert_int_equal(pg_isa_best(&c), PG_ISA_AVX2);
    expect_level(&c, "", PG_ISA_AVX2, false);
    expect_level(&c, "Scalar", PG_ISA_SCALAR, false);
    expect_level(&c, "avx512", PG_ISA_AVX2, true);
    c.avx512f = c.avx512vl = c.avx512dq = true; /* no BW: not the avx512 level */
    assert_int_equal(pg_isa_best(&c), PG_ISA_AVX2);
    c.avx512bw = true;
    expect_level(&c, NULL, PG_ISA_AVX512, false);
    expect_level(&c, "avx512bf16", PG_ISA_AVX512, true);
    c.avx512_bf16 = true;
    expect_level(&c, "avx512bf16", PG_ISA_AVX512BF16, false);
    expect_level(&c, "avx2", PG_ISA_AVX2, false);
    expect_unknown(&c, "neon"); /* the other architecture's level */
    c.f16c = false;             /* every level builds on avx2, which needs F16C */
    assert_int_equal(pg_isa_best(&c), PG_ISA_SCALAR);
#else
    expect_level(&c, "neon", PG_ISA_SCALAR, true);
    c.asimd = true;
    expect_level(&c, NULL, PG_ISA_NEON, false);
    expect_level(&c, "sve", PG_ISA_NEON, true);
    c.sve = true; /* SVE without a known vector length is not usable */
    assert_int_equal(pg_isa_best(&c), PG_ISA_NEON);
    c.sve_vl_bytes = 32;
    expect_level(&c, "SVE", PG_ISA_SVE, false);
    expect_level(&c, "neon", PG_ISA_NEON, false);
    expect_unknown(&c, "avx2");
#endif
}

static void test_amx_request_matches_detection(void **state) {
    (void)state;
    pagoda_status s = pg_cpu_request_amx();
    if (!pg_cpu()->amx_tile) {
        assert_int_equal(s, PAGODA_ERR_UNSUPPORTED);
        assert_true(strlen(pg_last_error()) > 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detection_is_consistent),
#if defined(__x86_64__) /* qemu-user shows the host's /proc/cpuinfo */
        cmocka_unit_test(test_features_match_proc_cpuinfo),
#else /* the cross build's CTest entries say what -cpu max must show */
        cmocka_unit_test(test_expected_features),
#endif
        cmocka_unit_test(test_isa_resolution),
        cmocka_unit_test(test_amx_request_matches_detection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
