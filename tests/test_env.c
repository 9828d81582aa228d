/* The `pagoda env` report (pg_env_report); its findings section is tested
 * by tests/test_env_check.c. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/dispatch.h"
#include "kernels/env_report.h"

/* Run pg_env_report into a malloc'ed string. */
static char *report(void) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    pg_env_report(f);
    fclose(f);
    return buf;
}

/* true if the report has a line "  <key><spaces><value>" (value ends the line). */
static bool has_line(const char *text, const char *key, const char *value) {
    size_t kl = strlen(key), vl = strlen(value);
    for (const char *p = text; (p = strstr(p, key)); p += kl) {
        if (p < text + 2 || p[-1] != ' ' || p[-2] != ' ') continue;
        const char *q = p + kl;
        if (*q != ' ') continue;
        while (*q == ' ')
            q++;
        if (!strncmp(q, value, vl) && (q[vl] == '\n' || q[vl] == 0)) return true;
    }
    return false;
}

static void test_report_names_detected_features(void **state) {
    (void)state;
    char *r = report();
    const pg_cpu_info *c = pg_cpu();
    const pg_kernel_table *t = pg_kernels();
    pg_cpu_feature f[PG_CPU_MAX_FEATURES];
    size_t n = pg_cpu_features(c, f);
    assert_true(n > 0);
    for (size_t i = 0; i < n; i++)
        if (!has_line(r, f[i].name, f[i].present ? "yes" : "no"))
            fail_msg("report lacks '%s %s':\n%s", f[i].name, f[i].present ? "yes" : "no", r);
    assert_true(has_line(r, "model", c->model));
    assert_true(has_line(r, "best", pg_isa_name(c->best_isa)));
    assert_true(has_line(r, "chosen", t->isa));
    assert_true(has_line(r, "dot_f32", t->variant.dot_f32));
    assert_true(has_line(r, "dot_bf16_f32", t->variant.dot_bf16_f32));
    assert_true(has_line(r, "dot_f16_f32", t->variant.dot_f16_f32));
    assert_true(has_line(r, "transparent hp", c->thp_mode));
    char num[32];
    snprintf(num, sizeof num, "%d", c->physical_cores);
    assert_true(has_line(r, "physical cores", num));
    snprintf(num, sizeof num, "%d", c->numa_nodes);
    assert_true(has_line(r, "numa nodes", num));
    if (c->sve) {
        snprintf(num, sizeof num, "%d bytes (%d bits)", c->sve_vl_bytes, 8 * c->sve_vl_bytes);
        assert_true(has_line(r, "sve vector len", num));
    }
    const char *sections[] = {"\ncpu\n",    "\nisa features\n", "\nisa level\n", "\nkernels\n",
                              "\nmemory\n", "\nthreads\n",      "\nfindings\n"};
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        assert_non_null(strstr(r, sections[i]));
    free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_names_detected_features),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
