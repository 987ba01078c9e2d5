/* test_core.c - core helpers: half-precision conversion (exhaustive against
 * the C compiler's own _Float16 where available, else round trips), errors,
 * checked arithmetic, allocation accounting and its failure hook. */
#include "check.h"
#include "core/common.h"

TEST(f16_roundtrip_all) {
    /* every finite half converts to float and back unchanged */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t x = (uint16_t)h;
        if ((x & 0x7c00) == 0x7c00) continue;
        float f = tern_f16_to_f32(x);
        if (tern_f32_to_f16(f) != x) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

TEST(f16_known_values) {
    CHECK_EQ_INT(tern_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ_INT(tern_f32_to_f16(-2.0f), 0xc000);
    CHECK_EQ_INT(tern_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ_INT(tern_f32_to_f16(1e6f), 0x7c00);
    CHECK_EQ_INT(tern_f32_to_f16(5.9604645e-8f), 0x0001);
    CHECK_NEAR(tern_f16_to_f32(0x3555), 0.333251953125, 0);
    /* ties to even: 1 + 2^-11 is halfway between 1 and 1+2^-10 -> 1 */
    CHECK_EQ_INT(tern_f32_to_f16(1.0f + 0.00048828125f), 0x3c00);
    CHECK_EQ_INT(tern_f32_to_f16(1.0f + 3 * 0.00048828125f), 0x3c02);
}

TEST(f16_matches_compiler) {
#if defined(__FLT16_MAX__) && defined(__x86_64__) && !defined(__clang__)
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        float f = (float)((check_rand_unit() - 0.5) * pow(2.0, (int)(check_rand_u64() % 40) - 26));
        _Float16 h = (_Float16)f;
        uint16_t bits;
        memcpy(&bits, &h, 2);
        if (tern_f32_to_f16(f) != bits) bad++;
    }
    CHECK_EQ_INT(bad, 0);
#else
    SKIP_OPTIONAL("compiler has no _Float16 on this target");
#endif
}

TEST(bf16) {
    CHECK_EQ_INT(tern_f32_to_bf16(1.0f), 0x3f80);
    CHECK_NEAR(tern_bf16_to_f32(0x3f80), 1.0, 0);
    CHECK_EQ_INT(tern_f32_to_bf16(1.00390625f), 0x3f80); /* tie to even */
}

TEST(errors) {
    tern_status s = tern_fail(TERN_ERR_FORMAT, "file %s at %d", "x.gguf", 12);
    CHECK_EQ_INT(s, TERN_ERR_FORMAT);
    CHECK_STR(tern_last_error(), "file x.gguf at 12");
    tern_fail_prefix(s, "ctx");
    CHECK_STR(tern_last_error(), "ctx: file x.gguf at 12");
    CHECK_STR(tern_status_str(TERN_ERR_RANGE), "TERN_ERR_RANGE");
}

TEST(checked_math) {
    size_t o;
    CHECK(!tern_mul_ok(SIZE_MAX / 2 + 1, 2, &o));
    CHECK(tern_mul_ok(1000, 1000, &o) && o == 1000000);
    CHECK(!tern_add_ok(SIZE_MAX, 1, &o));
}

TEST(alloc_accounting_and_failure) {
    size_t before = tern_alloc_current();
    void *p = tern_malloc(1000);
    CHECK(p != NULL);
    CHECK_EQ_INT(tern_alloc_current() - before, 1000);
    tern_free(p, 1000);
    CHECK_EQ_INT(tern_alloc_current(), before);
    tern_alloc_fail_after(1);
    void *a = tern_malloc(10), *b = tern_malloc(10);
    CHECK(a != NULL);
    CHECK(b == NULL);
    tern_alloc_fail_after(-1);
    tern_free(a, 10);
}

TEST(map_missing_file) {
    tern_map m;
    tern_status s = tern_map_open("/nonexistent/tern.gguf", &m);
    CHECK_EQ_INT(s, TERN_ERR_IO);
    CHECK(strstr(tern_last_error(), "/nonexistent/tern.gguf") != NULL);
}

int main(void) {
    check_seed();
    RUN(f16_roundtrip_all);
    RUN(f16_known_values);
    RUN(f16_matches_compiler);
    RUN(bf16);
    RUN(errors);
    RUN(checked_math);
    RUN(alloc_accounting_and_failure);
    RUN(map_missing_file);
    return check_summary();
}
