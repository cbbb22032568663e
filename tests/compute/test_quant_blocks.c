/*
 * Tests for the block-quantized element types (src/compute/quant_blocks.c): each
 * dequantizer against blocks built byte by byte here from the GGUF layout as FORMAT.md
 * section 4 numbers it (so a swapped nibble, a scale read from the wrong bits or a wrong
 * offset fails), the E4M3 code table, the llama.cpp-quantized fixture tensors against the
 * float weights they were quantized from (an independent producer: llama-quantize), and
 * the reference rounding's round trip (error bounds, idempotence on representable values,
 * zeros, NaN never becoming a float-to-int conversion).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "compute/quant_blocks.h"
#include "compute/type_traits.h"
#include "formats/gguf.h"
#include "formats/weights_folder.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)((int)(rnd32() % 2000001) - 1000000) * 1e-6f; }

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = compute_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static void dequant(cairn_dtype_t t, float *dst, const void *src, int n)
{
    compute_type_traits(t)->to_f32(dst, src, n);
}

/* ---- blocks built from the layout ---------------------------------------------------------- */

static void test_q8_0_layout(void **state)
{
    (void)state;
    uint8_t b[2 * 34];
    int8_t q[64];
    for (int i = 0; i < 64; i++)
        q[i] = (int8_t)(i * 7 % 255 - 127);
    put_f16(b, 0.5f);
    put_f16(b + 34, -0.125f);
    for (int i = 0; i < 32; i++) {
        b[2 + i] = (uint8_t)q[i];
        b[36 + i] = (uint8_t)q[32 + i];
    }
    float out[64];
    dequant(CAIRN_DTYPE_Q8_0, out, b, 64);
    for (int i = 0; i < 64; i++)
        assert_float_equal(out[i], (i < 32 ? 0.5f : -0.125f) * q[i], 0.0f);
}

static void test_q4_0_layout(void **state)
{
    (void)state;
    uint8_t b[18];
    int q[32];
    for (int i = 0; i < 32; i++)
        q[i] = (i * 5 + 3) % 16;
    put_f16(b, 2.0f);
    for (int i = 0; i < 16; i++)
        b[2 + i] = (uint8_t)(q[i] | q[i + 16] << 4); /* element i low nibble, i + 16 high */
    float out[32];
    dequant(CAIRN_DTYPE_Q4_0, out, b, 32);
    for (int i = 0; i < 32; i++)
        assert_float_equal(out[i], 2.0f * (float)(q[i] - 8), 0.0f);
}

/* The 12 scale bytes of q4_k / q5_k, written from the 6-bit sc and m as the layout says. */
static void pack_k4_scales(uint8_t s[12], const int sc[8], const int m[8])
{
    memset(s, 0, 12);
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] & 63);
        s[j + 4] = (uint8_t)(m[j] & 63);
    }
    for (int j = 4; j < 8; j++) {
        s[j + 4] = (uint8_t)((sc[j] & 15) | (m[j] & 15) << 4);
        s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
        s[j] |= (uint8_t)((m[j] >> 4) << 6);
    }
}

static void test_k4_layouts(void **state)
{
    (void)state;
    for (int five = 0; five < 2; five++) {
        uint8_t b[176];
        memset(b, 0, sizeof b);
        const float d = 0.25f, dmin = 0.0625f;
        int sc[8] = {1, 63, 17, 40, 33, 16, 62, 5}, m[8] = {0, 9, 63, 31, 48, 2, 21, 60};
        int q[256];
        for (int e = 0; e < 256; e++)
            q[e] = (e * 11 + e / 7) % (five ? 32 : 16);
        put_f16(b, d);
        put_f16(b + 2, dmin);
        pack_k4_scales(b + 4, sc, m);
        uint8_t *qh = b + 16, *qs = five ? b + 48 : b + 16;
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                int lo = q[64 * g + l], hi = q[64 * g + 32 + l];
                qs[32 * g + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                if (five)
                    qh[l] |= (uint8_t)((lo >> 4) << (2 * g) | (hi >> 4) << (2 * g + 1));
            }
        float out[256];
        dequant(five ? CAIRN_DTYPE_Q5_K : CAIRN_DTYPE_Q4_K, out, b, 256);
        for (int e = 0; e < 256; e++) {
            int j = e / 32;
            float want = (d * (float)sc[j]) * (float)q[e] - dmin * (float)m[j];
            if (out[e] != want)
                fail_msg("%s element %d: %g, want %g", five ? "q5_k" : "q4_k", e, out[e], want);
        }
    }
}

static void test_q6_k_layout(void **state)
{
    (void)state;
    uint8_t b[210];
    memset(b, 0, sizeof b);
    int q[256];
    int8_t sc[16];
    for (int e = 0; e < 256; e++)
        q[e] = (e * 37 + 5) % 64;
    for (int j = 0; j < 16; j++)
        sc[j] = (int8_t)(j * 17 - 128);
    uint8_t *ql = b, *qh = b + 128;
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const int *qq = q + 128 * h;
            ql[64 * h + l] = (uint8_t)((qq[l] & 15) | (qq[l + 64] & 15) << 4);
            ql[64 * h + l + 32] = (uint8_t)((qq[l + 32] & 15) | (qq[l + 96] & 15) << 4);
            qh[32 * h + l] = (uint8_t)((qq[l] >> 4) | (qq[l + 32] >> 4) << 2 | (qq[l + 64] >> 4) << 4 |
                                       (qq[l + 96] >> 4) << 6);
        }
    memcpy(b + 192, sc, 16);
    put_f16(b + 208, 0.03125f);
    float out[256];
    dequant(CAIRN_DTYPE_Q6_K, out, b, 256);
    for (int e = 0; e < 256; e++) {
        float want = (0.03125f * (float)sc[e / 16]) * (float)(q[e] - 32);
        if (out[e] != want)
            fail_msg("q6_k element %d: %g, want %g", e, out[e], want);
    }
}

static void test_q8_k_layout(void **state)
{
    (void)state;
    uint8_t b[292];
    const float d = 0.001953125f;
    memcpy(b, &d, 4);
    for (int i = 0; i < 256; i++)
        b[4 + i] = (uint8_t)(int8_t)(i - 128);
    float out[256];
    dequant(CAIRN_DTYPE_Q8_K, out, b, 256);
    for (int i = 0; i < 256; i++)
        assert_float_equal(out[i], d * (float)(i - 128), 0.0f);
    /* The rounding fills bsums with the sums of 16. */
    float x[256];
    for (int i = 0; i < 256; i++)
        x[i] = rndf();
    blk_q8_k_t k;
    compute_type_traits(CAIRN_DTYPE_Q8_K)->from_f32(&k, x, 256);
    for (int s = 0; s < 16; s++) {
        int sum = 0;
        for (int i = 0; i < 16; i++)
            sum += k.q[16 * s + i];
        assert_int_equal(k.bsums[s], sum);
    }
}

static void test_e4m3(void **state)
{
    (void)state;
    static const struct {
        uint8_t c;
        float v;
    } known[] = {{0x00, 0.0f}, {0x01, 0x1p-9f}, {0x07, 7 * 0x1p-9f}, {0x08, 0x1p-6f}, {0x38, 1.0f}, {0x39, 1.125f},
                 {0x40, 2.0f}, {0x7e, 448.0f}, {0xb8, -1.0f}, {0xfe, -448.0f}, {0x80, -0.0f}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        assert_float_equal(quant_e4m3_to_f32(known[i].c), known[i].v, 0.0f);
        assert_int_equal(quant_f32_to_e4m3(known[i].v), known[i].c);
    }
    assert_true(isnan(quant_e4m3_to_f32(0x7f)) && isnan(quant_e4m3_to_f32(0xff)));
    assert_int_equal(quant_f32_to_e4m3(NAN), 0x7f);
    assert_int_equal(quant_f32_to_e4m3(1e9f), 0x7e);   /* saturates */
    assert_int_equal(quant_f32_to_e4m3(-500.0f), 0xfe);
    /* Every code round-trips, and rounding is to nearest, ties to the even code. */
    for (int c = 0; c < 256; c++) {
        float v = quant_e4m3_to_f32((uint8_t)c);
        if (isnan(v))
            continue;
        if (v == 0.0f) {
            assert_int_equal(quant_f32_to_e4m3(v) & 0x7f, 0);
            continue;
        }
        assert_int_equal(quant_f32_to_e4m3(v), c);
        if ((c & 0x7f) < 0x7e) {
            float next = quant_e4m3_to_f32((uint8_t)(c + 1)), mid = (v + next) / 2;
            int even = (c & 1) ? c + 1 : c;
            assert_int_equal(quant_f32_to_e4m3(mid), even);
        }
    }
    /* A block: d * e4m3(e). */
    uint8_t b[34];
    put_f16(b, 0.5f);
    for (int i = 0; i < 32; i++)
        b[2 + i] = (uint8_t)(0x30 + i);
    float out[32];
    dequant(CAIRN_DTYPE_FP8_E4M3, out, b, 32);
    for (int i = 0; i < 32; i++)
        assert_float_equal(out[i], 0.5f * quant_e4m3_to_f32((uint8_t)(0x30 + i)), 0.0f);
}

/* ---- llama-quantize's tensors against the float weights they came from ---------------------- */

static const char *fixture(const char *name)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/gguf/q256/%s", CAIRN_FIXTURES_DIR, name);
    return path;
}

/* How much worse than llama-quantize (without an importance matrix) Cairn's reference
 * rounding may be on the same weights. */
#define QUALITY 1.10

static void test_fixture_tensors(void **state)
{
    (void)state;
    char err[256];
    fmt_tensors_t *hf = NULL;
    assert_int_equal(fmt_tensors_open(fixture("hf"), &hf, err, sizeof err), CAIRN_OK);
    static const struct {
        const char *file;
        double max_rel_rms; /* relative RMS error allowed over the tensors below */
    } files[] = {{"q256-Q8_0.gguf", 0.01}, {"q256-Q6_K.gguf", 0.03}, {"q256-Q5_K_M.gguf", 0.06},
                 {"q256-Q4_K_M.gguf", 0.12}, {"q256-Q4_0.gguf", 0.15}};
    static const struct {
        const char *gguf, *hf;
        int64_t rows, cols;
    } tensors[] = {
        {"token_embd.weight", "model.embed_tokens.weight", 4096, 256},
        {"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", 256, 256},
        {"blk.1.attn_v.weight", "model.layers.1.self_attn.v_proj.weight", 128, 256},
        {"blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight", 256, 512},
        {"blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight", 256, 512},
    };
    float *a = malloc(sizeof(float) * 4096 * 512), *ref = malloc(sizeof(float) * 4096 * 512);
    assert_non_null(a);
    assert_non_null(ref);
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        gguf_file_t *g = NULL;
        assert_int_equal(gguf_open(fixture(files[f].file), GGUF_OPEN_METADATA, &g, err, sizeof err), CAIRN_OK);
        for (size_t t = 0; t < sizeof tensors / sizeof tensors[0]; t++) {
            const gguf_tensor_t *gt = gguf_find_tensor(g, tensors[t].gguf);
            assert_non_null(gt);
            cairn_dtype_t dt;
            assert_int_equal(gguf_tensor_dtype(gt->type, &dt), CAIRN_OK);
            int64_t dims[2] = {tensors[t].rows, tensors[t].cols};
            cairn_tensor_t ht;
            assert_int_equal(fmt_tensors_bind(hf, tensors[t].hf, 2, dims, &ht, err, sizeof err), CAIRN_OK);
            size_t n = (size_t)(dims[0] * dims[1]);
            dequant(dt, a, gt->data, (int)n);
            dequant(ht.dtype, ref, ht.data, (int)n);
            double se = 0, ss = 0;
            for (size_t i = 0; i < n; i++) {
                se += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
                ss += (double)ref[i] * ref[i];
            }
            double rel = sqrt(se / ss);
            /* Cairn's reference rounding of the same float weights into the same type. */
            uint8_t *mine = malloc(n * 2);
            assert_non_null(mine);
            compute_type_traits(dt)->from_f32(mine, ref, (int64_t)n);
            dequant(dt, a, mine, (int)n);
            free(mine);
            double se2 = 0;
            for (size_t i = 0; i < n; i++)
                se2 += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
            double rel2 = sqrt(se2 / ss);
            printf("    %-18s %-22s %-5s relative RMS error %.4f (llama-quantize), %.4f (Cairn's rounding)\n",
                   files[f].file, tensors[t].gguf, cairn_dtype_name(dt), rel, rel2);
            if (!(rel2 <= rel * QUALITY))
                fail_msg("%s %s (%s): Cairn's rounding error %.4f > %.2f x llama-quantize's %.4f", files[f].file,
                         tensors[t].gguf, cairn_dtype_name(dt), rel2, QUALITY, rel);
            if (!(rel < files[f].max_rel_rms))
                fail_msg("%s %s (%s): relative RMS error %.4f >= %.3f", files[f].file, tensors[t].gguf,
                         cairn_dtype_name(dt), rel, files[f].max_rel_rms);
        }
        gguf_close(g);
    }
    free(a);
    free(ref);
    fmt_tensors_close(hf);
}

/* ---- the reference rounding ---------------------------------------------------------------- */

static void test_round_trip(void **state)
{
    (void)state;
    static const struct {
        cairn_dtype_t t;
        double max_rel_rms;
    } types[] = {{CAIRN_DTYPE_Q8_0, 0.010}, {CAIRN_DTYPE_Q8_K, 0.022}, {CAIRN_DTYPE_Q6_K, 0.029},
                 {CAIRN_DTYPE_Q5_K, 0.052}, {CAIRN_DTYPE_Q4_K, 0.10}, {CAIRN_DTYPE_Q4_0, 0.155},
                 {CAIRN_DTYPE_FP8_E4M3, 0.024}};
    enum { N = 4096 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float)), *z = malloc(N * sizeof(float));
    uint8_t *q = malloc(N * 2), *q2 = malloc(N * 2);
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(z);
    assert_non_null(q);
    assert_non_null(q2);
    for (int i = 0; i < N; i++) /* gaussian-ish, with outliers as real weights have */
        x[i] = (rndf() + rndf() + rndf()) * (i % 97 == 0 ? 8.0f : 1.0f);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const compute_type_traits_t *tt = compute_type_traits(types[k].t);
        tt->from_f32(q, x, N);
        tt->to_f32(y, q, N);
        double se = 0, ss = 0;
        for (int i = 0; i < N; i++) {
            se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
            ss += (double)x[i] * x[i];
        }
        double rel = sqrt(se / ss);
        printf("    %-9s round trip relative RMS error %.4f\n", tt->name, rel);
        if (!(rel < types[k].max_rel_rms))
            fail_msg("%s: relative RMS error %.4f >= %.3f", tt->name, rel, types[k].max_rel_rms);
        /* Rounding what the format represents changes nothing for the 8-bit types. */
        if (types[k].t == CAIRN_DTYPE_Q8_0 || types[k].t == CAIRN_DTYPE_FP8_E4M3) {
            tt->from_f32(q2, y, N);
            tt->to_f32(z, q2, N);
            assert_memory_equal(y, z, N * sizeof(float));
        }
        /* Zeros stay zeros; NaN and inf give no conversion out of range (UBSan). */
        float zero[256] = {0}, bad[256], back[256];
        tt->from_f32(q2, zero, 256);
        tt->to_f32(back, q2, 256);
        for (int i = 0; i < 256; i++)
            assert_float_equal(back[i], 0.0f, 0.0f);
        for (int i = 0; i < 256; i++)
            bad[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -1.0f;
        tt->from_f32(q2, bad, 256);
    }
    free(x);
    free(y);
    free(z);
    free(q);
    free(q2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0_layout),     cmocka_unit_test(test_q4_0_layout),
        cmocka_unit_test(test_k4_layouts),      cmocka_unit_test(test_q6_k_layout),
        cmocka_unit_test(test_q8_k_layout),     cmocka_unit_test(test_e4m3),
        cmocka_unit_test(test_fixture_tensors), cmocka_unit_test(test_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
