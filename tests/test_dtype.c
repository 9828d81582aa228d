/* F16/BF16 conversions and GGML block dequantization. */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "base/dtype.h"

static void test_f16_roundtrip_all_values(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = pg_f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        assert_int_equal(pg_f32_to_f16(f), h);
    }
    assert_true(pg_f16_to_f32(0x3c00) == 1.0f);
    assert_true(pg_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    assert_true(isinf(pg_f16_to_f32(0x7c00)));
    assert_int_equal(pg_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
    assert_int_equal(pg_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00); /* tie to even */
}

static void test_bf16_rounding(void **state) {
    (void)state;
    assert_int_equal(pg_f32_to_bf16(1.0f), 0x3f80);
    float x = 1.0f + ldexpf(1.0f, -8); /* exactly half an ulp: tie to even */
    assert_int_equal(pg_f32_to_bf16(x), 0x3f80);
    float y = 1.0f + ldexpf(1.0f, -8) + ldexpf(1.0f, -20);
    assert_int_equal(pg_f32_to_bf16(y), 0x3f81);
    assert_true(isnan(pg_bf16_to_f32(pg_f32_to_bf16(NAN))));
}

static void test_q8_0_and_q4_0_blocks(void **state) {
    (void)state;
    uint8_t q8[34];
    uint16_t d = pg_f32_to_f16(0.5f);
    memcpy(q8, &d, 2);
    for (int j = 0; j < 32; j++) q8[2 + j] = (uint8_t)(int8_t)(j - 16);
    float out[32];
    pg_dequant_row(PG_Q8_0, q8, out, 32);
    for (int j = 0; j < 32; j++) assert_true(out[j] == 0.5f * (float)(j - 16));

    uint8_t q4[18];
    memcpy(q4, &d, 2);
    for (int j = 0; j < 16; j++) q4[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    pg_dequant_row(PG_Q4_0, q4, out, 32);
    for (int j = 0; j < 16; j++) {
        assert_true(out[j] == 0.5f * (float)(j - 8));
        assert_true(out[j + 16] == 0.5f * (float)(15 - j - 8));
    }
    assert_int_equal(pg_dtype_row_bytes(PG_Q4_0, 64), 36);
    assert_int_equal(pg_dtype_row_bytes(PG_Q4_0, 33), 0);
    assert_string_equal(pg_dtype_name(PG_BF16), "BF16");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_roundtrip_all_values),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_q8_0_and_q4_0_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
