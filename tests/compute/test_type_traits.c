/*
 * Tests for the element-type table (src/compute/type_traits.c): every row against the
 * definition of its format (block geometry, exact conversions over every 16-bit pattern,
 * names that parse back), and that a value outside the table is reported everywhere —
 * size 0, row bytes 0, name "?", no traits, refused by the backends — instead of being
 * treated like another type (the former cairn_dtype_size returned 2 for any such value).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "compute/backend.h"
#include "compute/cpu/kernels.h"
#include "compute/type_traits.h"

static void test_rows(void **state)
{
    (void)state;
    static const struct {
        cairn_dtype_t t;
        const char *name, *long_name;
        int block_elems, block_bytes;
    } want[] = {
        {CAIRN_DTYPE_F32, "f32", "float32", 1, 4},
        {CAIRN_DTYPE_F16, "f16", "float16", 1, 2},
        {CAIRN_DTYPE_BF16, "bf16", "bfloat16", 1, 2},
        {CAIRN_DTYPE_Q8_0, "q8_0", "q8_0", 32, 34},
        {CAIRN_DTYPE_Q4_0, "q4_0", "q4_0", 32, 18},
        {CAIRN_DTYPE_Q4_K, "q4_k", "q4_k", 256, 144},
        {CAIRN_DTYPE_Q5_K, "q5_k", "q5_k", 256, 176},
        {CAIRN_DTYPE_Q6_K, "q6_k", "q6_k", 256, 210},
        {CAIRN_DTYPE_Q8_K, "q8_k", "q8_k", 256, 292},
        {CAIRN_DTYPE_FP8_E4M3, "fp8_e4m3", "float8_e4m3", 32, 34},
    };
    assert_int_equal(CAIRN_ARRAY_LEN(want), COMPUTE_DTYPE_COUNT); /* a new type needs a row here */
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(want); i++) {
        const compute_type_traits_t *tt = compute_type_traits(want[i].t);
        assert_non_null(tt);
        assert_string_equal(tt->name, want[i].name);
        assert_string_equal(cairn_dtype_name(want[i].t), want[i].name);
        assert_int_equal(tt->block_elems, want[i].block_elems);
        assert_int_equal(tt->block_bytes, want[i].block_bytes);
        const bool blocks = want[i].block_elems > 1;
        assert_int_equal(cairn_dtype_block_elems(want[i].t), want[i].block_elems);
        /* A quantized element has no size of its own. */
        assert_int_equal(cairn_dtype_size(want[i].t), blocks ? 0 : (size_t)want[i].block_bytes);
        assert_int_equal(cairn_dtype_row_bytes(want[i].t, 37 * want[i].block_elems), (size_t)37 * want[i].block_bytes);
        if (blocks) /* not a whole number of blocks */
            assert_int_equal(cairn_dtype_row_bytes(want[i].t, 37 * want[i].block_elems + 1), 0);
        assert_int_equal(cairn_dtype_row_bytes(want[i].t, 0), 0);
        assert_int_equal(cairn_dtype_row_bytes(want[i].t, -1), 0);
        assert_int_equal(tt->quantized, blocks);
        assert_non_null(tt->to_f32);
        assert_non_null(tt->from_f32);
        cairn_dtype_t p = (cairn_dtype_t)-1;
        assert_int_equal(cairn_dtype_parse(want[i].name, &p), CAIRN_OK);
        assert_int_equal(p, want[i].t);
        p = (cairn_dtype_t)-1;
        assert_int_equal(cairn_dtype_parse(want[i].long_name, &p), CAIRN_OK);
        assert_int_equal(p, want[i].t);
    }
    cairn_dtype_t p = CAIRN_DTYPE_F32;
    assert_int_equal(cairn_dtype_parse("BF16", &p), CAIRN_OK); /* any case */
    assert_int_equal(p, CAIRN_DTYPE_BF16);
    assert_int_equal(cairn_dtype_parse("Q4_K", &p), CAIRN_OK);
    assert_int_equal(p, CAIRN_DTYPE_Q4_K);
    assert_int_equal(cairn_dtype_parse("q4_k_m", &p), CAIRN_EINVAL); /* a file type, not an element type */
    assert_int_equal(cairn_dtype_parse("", &p), CAIRN_EINVAL);
    assert_int_equal(cairn_dtype_parse(NULL, &p), CAIRN_EINVAL);
}

/* The rows' conversions are the exact definitions: every f16 / bf16 bit pattern widens to
 * the value the kernels use and rounds back to itself (NaN stays NaN). */
static void test_conversions_exhaustive(void **state)
{
    (void)state;
    static uint16_t h[65536], back[65536];
    static float f[65536];
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    const cairn_dtype_t half_types[] = {CAIRN_DTYPE_F16, CAIRN_DTYPE_BF16};
    for (size_t k = 0; k < CAIRN_ARRAY_LEN(half_types); k++) {
        const compute_type_traits_t *tt = compute_type_traits(half_types[k]);
        tt->to_f32(f, h, 65536);
        tt->from_f32(back, f, 65536);
        for (uint32_t i = 0; i < 65536; i++) {
            float want = half_types[k] == CAIRN_DTYPE_F16 ? kern_f16_to_f32(h[i]) : kern_bf16_to_f32(h[i]);
            if (isnan(want)) {
                assert_true(isnan(f[i]));
                continue;
            }
            assert_memory_equal(&f[i], &want, sizeof(float));
            assert_int_equal(back[i], h[i]);
        }
    }
    float x[5] = {1.5f, -2.0f, 0.0f, 1e30f, -1e-30f}, y[5];
    compute_type_traits(CAIRN_DTYPE_F32)->to_f32(y, x, 5);
    assert_memory_equal(x, y, sizeof(x));
}

/* Values outside the table: no row, no size, no name, and every backend refuses them. */
static void test_unknown_types(void **state)
{
    (void)state;
    const int bad[] = {COMPUTE_DTYPE_COUNT, COMPUTE_DTYPE_COUNT + 1, 99, -1, 0x7fffffff};
    compute_backend_t *be = NULL;
    char err[160];
    assert_int_equal(compute_backend_create("cpu", NULL, &be, err, sizeof(err)), CAIRN_OK);
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(bad); i++) {
        cairn_dtype_t t = (cairn_dtype_t)bad[i];
        assert_null(compute_type_traits(t));
        assert_int_equal(cairn_dtype_size(t), 0);
        assert_int_equal(cairn_dtype_row_bytes(t, 16), 0);
        assert_string_equal(cairn_dtype_name(t), "?");
        for (int op = 0; op < COMPUTE_OP_COUNT; op++) {
            assert_false(compute_supports(be, (compute_op_t)op, t));
            err[0] = 0;
            assert_int_equal(compute_backend_require(be, (compute_op_t)op, t, err, sizeof(err)), CAIRN_EUNSUPPORTED);
            assert_non_null(strstr(err, "the cpu backend has no"));
        }
    }
    /* And the known ones are supported where the CPU has kernels for them: matmul for
     * every weight type (q8_k is only an activation format and fp8_e4m3 only a K/V type),
     * K/V in the plain types and the two 8-bit K/V types, norms in the plain types. */
    for (int t = 0; t < COMPUTE_DTYPE_COUNT; t++) {
        const bool plain = compute_type_traits((cairn_dtype_t)t)->block_elems == 1;
        const bool weight = t != CAIRN_DTYPE_Q8_K && t != CAIRN_DTYPE_FP8_E4M3;
        const bool kv = plain || t == CAIRN_DTYPE_Q8_0 || t == CAIRN_DTYPE_FP8_E4M3;
        assert_int_equal(compute_supports(be, COMPUTE_OP_MATMUL, (cairn_dtype_t)t), weight);
        assert_int_equal(compute_supports(be, COMPUTE_OP_KV, (cairn_dtype_t)t), kv);
        assert_int_equal(compute_backend_require(be, COMPUTE_OP_NORM, (cairn_dtype_t)t, err, sizeof(err)),
                         plain ? CAIRN_OK : CAIRN_EUNSUPPORTED);
        assert_true(compute_supports(be, COMPUTE_OP_GET_ROWS, (cairn_dtype_t)t));
    }
    compute_backend_destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_conversions_exhaustive),
        cmocka_unit_test(test_unknown_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
