/* Status codes, logging levels, aligned allocation and the workspace arena. */
#include "testutil.h"

#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/status.h"

static void test_error_message_is_one_line(void **state) {
    (void)state;
    pagoda_status s = pg_error(PAGODA_ERR_FORMAT, "%s: bad\nthing %d", "f.gguf", 7);
    assert_int_equal(s, PAGODA_ERR_FORMAT);
    assert_string_equal(pg_last_error(), "f.gguf: bad thing 7");
    assert_string_equal(pg_status_name(PAGODA_ERR_FORMAT), "format error");
    assert_string_equal(pg_status_name((pagoda_status)999), "unknown error");
    pg_clear_error();
    assert_string_equal(pg_last_error(), "");
}

static void test_log_levels_parse(void **state) {
    (void)state;
    assert_int_equal(pg_log_parse_level("debug"), PG_LOG_DEBUG);
    assert_int_equal(pg_log_parse_level("warn"), PG_LOG_WARN);
    assert_int_equal(pg_log_parse_level("error"), PG_LOG_ERROR);
    assert_int_equal(pg_log_parse_level("loud"), -1);
    pg_log_set_level(PG_LOG_ERROR);
    assert_int_equal(pg_log_get_level(), PG_LOG_ERROR);
    PG_INFO("suppressed");
}

static void test_aligned_alloc(void **state) {
    (void)state;
    for (size_t n = 1; n < 5000; n = n * 3 + 1) {
        void *p = pg_malloc_aligned(n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % PG_ALIGN, 0);
        memset(p, 0xab, n);
        pg_free(p);
    }
    assert_null(pg_calloc_aligned(SIZE_MAX / 2, 4));
}

static void test_huge_alloc_is_aligned_and_zeroed(void **state) {
    (void)state;
    size_t n = (5u << 20) + 123;
    uint8_t *p = pg_alloc_huge(n);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % (2u << 20), 0);
    for (size_t i = 0; i < n; i += 4096) assert_int_equal(p[i], 0);
    p[n - 1] = 1;
    pg_free_huge(p, n);
    uint8_t *small = pg_alloc_huge(100);
    assert_non_null(small);
    pg_free_huge(small, 100);
}

static void test_arena(void **state) {
    (void)state;
    pg_arena a;
    assert_int_equal(pg_arena_init(&a, 1000), PAGODA_OK);
    void *x = pg_arena_alloc(&a, 10);
    void *y = pg_arena_alloc(&a, 10);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal((uintptr_t)y % PG_ALIGN, 0);
    assert_true((uint8_t *)y >= (uint8_t *)x + 10);
    size_t m = pg_arena_mark(&a);
    assert_non_null(pg_arena_alloc(&a, 500));
    assert_null(pg_arena_alloc(&a, 900)); /* exhausted: NULL, no overflow */
    pg_arena_restore(&a, m);
    assert_non_null(pg_arena_alloc(&a, 800));
    assert_true(a.high_water >= 874);
    pg_arena_reset(&a);
    assert_int_equal(a.used, 0);
    pg_arena_free(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_message_is_one_line),
        cmocka_unit_test(test_log_levels_parse),
        cmocka_unit_test(test_aligned_alloc),
        cmocka_unit_test(test_huge_alloc_is_aligned_and_zeroed),
        cmocka_unit_test(test_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
