/* Tests for the cold object codec and the model fingerprint. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tier/tier_object.h"
#include "tier/tier_test_util.h"

/* Computed independently with Python's hashlib from the serialization in docs/FORMAT.md. */
#define PINNED_FP "9db1dc6b544901a354cd4cb9d4d146183052280b5e3e063ebb7e3150f356f702"

static size_t encode(uint8_t *obj, const cairn_tier_hash_t *fp, uint32_t seed)
{
    cairn_tier_object_t b = {.key.kind = CAIRN_TIER_BLOCK};
    int32_t tk[T_TOKENS];
    static uint8_t pay[T_PAYLOAD];
    t_block(seed, 2, &b.key.hash, &b.parent, tk, pay);
    b.tokens = tk;
    b.n_tokens = T_TOKENS;
    b.payload = pay;
    b.payload_size = T_PAYLOAD;
    size_t hb = 0;
    assert_int_equal(tier_object_encode_header(obj, 4096, fp, CAIRN_DTYPE_BF16, T_LAYERS, t_layer_bytes, &b, &hb),
                     CAIRN_OK);
    assert_int_equal(hb, tier_object_header_size(T_TOKENS, T_LAYERS));
    memcpy(obj + hb, pay, T_PAYLOAD);
    return hb + T_PAYLOAD;
}

static void test_encode_validate(void **state)
{
    (void)state;
    static uint8_t obj[4096 + T_PAYLOAD];
    cairn_tier_hash_t fp = t_fingerprint(0), h;
    size_t n = encode(obj, &fp, 1);
    t_block(1, 2, &h, NULL, NULL, NULL);
    tier_object_header_t hd;
    assert_int_equal(tier_object_validate(obj, n, &fp, &h, &hd), CAIRN_OK);
    assert_int_equal(hd.n_tokens, T_TOKENS);
    assert_int_equal(hd.n_layers, T_LAYERS);
    assert_int_equal(hd.payload_bytes, T_PAYLOAD);
    assert_int_equal(tier_object_layer_bytes(&hd, 3), T_LAYER_BYTES);
    assert_memory_equal(obj, "CAIRNKV\x1a", 8);
    /* Every single-bit flip anywhere is detected. */
    for (size_t byte = 0; byte < n; byte += (byte < 400 ? 1 : 97)) {
        obj[byte] ^= 0x04;
        assert_int_equal(tier_object_validate(obj, n, &fp, &h, &hd), CAIRN_ECORRUPT);
        obj[byte] ^= 0x04;
    }
    /* Every truncation is detected. */
    for (size_t len = 0; len < n; len += 37)
        assert_int_equal(tier_object_validate(obj, len, &fp, &h, &hd), CAIRN_ECORRUPT);
    /* Other fingerprint or other hash expected. */
    cairn_tier_hash_t fp1 = t_fingerprint(1), h1;
    t_block(1, 3, &h1, NULL, NULL, NULL);
    assert_int_equal(tier_object_validate(obj, n, &fp1, &h, &hd), CAIRN_ECORRUPT);
    assert_int_equal(tier_object_validate(obj, n, &fp, &h1, &hd), CAIRN_ECORRUPT);
    /* A partial header asks for more bytes. */
    assert_int_equal(tier_object_parse_header(obj, 100, &hd), CAIRN_ERANGE);
    assert_int_equal(hd.header_bytes, tier_object_header_size(T_TOKENS, T_LAYERS));
}

static void test_encode_rejects_bad_sizes(void **state)
{
    (void)state;
    uint8_t hdr[4096];
    cairn_tier_hash_t fp = t_fingerprint(0);
    int32_t tk[T_TOKENS] = {0};
    static uint8_t pay[T_PAYLOAD];
    cairn_tier_object_t b = {.tokens = tk, .n_tokens = T_TOKENS, .payload = pay, .payload_size = T_PAYLOAD - 1};
    size_t hb;
    assert_int_equal(
        tier_object_encode_header(hdr, sizeof hdr, &fp, CAIRN_DTYPE_BF16, T_LAYERS, t_layer_bytes, &b, &hb),
        CAIRN_EINVAL);
    b.payload_size = T_PAYLOAD;
    assert_int_equal(tier_object_encode_header(hdr, 100, &fp, CAIRN_DTYPE_BF16, T_LAYERS, t_layer_bytes, &b, &hb),
                     CAIRN_ERANGE);
    b.n_tokens = 0;
    assert_int_equal(
        tier_object_encode_header(hdr, sizeof hdr, &fp, CAIRN_DTYPE_BF16, T_LAYERS, t_layer_bytes, &b, &hb),
        CAIRN_EINVAL);
}

static void test_fingerprint(void **state)
{
    (void)state;
    uint8_t wd[32];
    const char *hdr = "{\"a\":{}}";
    cairn_tier_weights_file_t files[2] = {{"a.safetensors", hdr, strlen(hdr), 1000},
                                          {"b.safetensors", hdr, strlen(hdr), 2000}};
    assert_int_equal(cairn_tier_weights_digest(files, 2, wd), CAIRN_OK);
    uint8_t wd2[32];
    files[1].file_size = 2001;
    assert_int_equal(cairn_tier_weights_digest(files, 2, wd2), CAIRN_OK);
    assert_memory_not_equal(wd, wd2, 32);

    cairn_tier_model_desc_t d = {.architecture = "llama", .n_layers = 8, .n_heads = 8, .n_kv_heads = 2,
                                 .head_dim = 64, .block_tokens = 16, .kv_dtype = CAIRN_DTYPE_BF16,
                                 .rope_theta = 500000.0};
    memcpy(d.weights_digest, wd, 32);
    cairn_tier_hash_t base, x;
    assert_int_equal(cairn_tier_fingerprint(&d, &base), CAIRN_OK);
    assert_int_equal(cairn_tier_fingerprint(&d, &x), CAIRN_OK);
    assert_memory_equal(base.bytes, x.bytes, 32);
    /* rope_dim 0 means head_dim. */
    d.rope_dim = 64;
    assert_int_equal(cairn_tier_fingerprint(&d, &x), CAIRN_OK);
    assert_memory_equal(base.bytes, x.bytes, 32);
    /* Each K/V-relevant field changes the fingerprint. */
#define CHANGES(stmt, undo)                                      \
    do {                                                         \
        stmt;                                                    \
        assert_int_equal(cairn_tier_fingerprint(&d, &x), 0);     \
        assert_memory_not_equal(base.bytes, x.bytes, 32);        \
        undo;                                                    \
    } while (0)
    CHANGES(d.architecture = "qwen3", d.architecture = "llama");
    CHANGES(d.n_layers = 9, d.n_layers = 8);
    CHANGES(d.n_kv_heads = 4, d.n_kv_heads = 2);
    CHANGES(d.head_dim = 128, d.head_dim = 64);
    CHANGES(d.block_tokens = 32, d.block_tokens = 16);
    CHANGES(d.kv_dtype = CAIRN_DTYPE_F32, d.kv_dtype = CAIRN_DTYPE_BF16);
    CHANGES(d.rope_theta = 10000.0, d.rope_theta = 500000.0);
    CHANGES(d.rope_scaling_factor = 8.0, d.rope_scaling_factor = 0.0);
    CHANGES(d.extra = "sliding=4096", d.extra = NULL);
    CHANGES(d.weights_digest[31] ^= 1, d.weights_digest[31] ^= 1);
#undef CHANGES
    /* Pinned value: the canonical serialization must not drift silently. */
    cairn_tier_model_desc_t z = {.architecture = "llama", .n_layers = 1, .n_heads = 1, .n_kv_heads = 1,
                                 .head_dim = 1, .block_tokens = 16, .kv_dtype = CAIRN_DTYPE_F32};
    assert_int_equal(cairn_tier_fingerprint(&z, &x), CAIRN_OK);
    char hex[65];
    cairn_tier_hash_hex(&x, hex);
    cairn_tier_hash_t back;
    assert_int_equal(cairn_tier_hash_parse(hex, &back), CAIRN_OK);
    assert_memory_equal(back.bytes, x.bytes, 32);
    assert_int_equal(cairn_tier_hash_parse("zz", &back), CAIRN_EINVAL);
    assert_string_equal(hex, PINNED_FP);
}

/* The STATE byte form (FORMAT.md 1.8): the documented offsets, a round trip, and every
 * damage a reader must refuse. */
static void test_state_object(void **state)
{
    (void)state;
    static const uint8_t layout[] = "bf16;2;[4,8]";
    uint8_t pay[96];
    for (size_t i = 0; i < sizeof pay; i++)
        pay[i] = (uint8_t)(i * 13 + 1);
    cairn_tier_object_t st = {.key = {.kind = CAIRN_TIER_STATE, .group = 3}, .boundary = 48, .layout = layout,
                              .layout_size = sizeof layout, .payload = pay, .payload_size = sizeof pay};
    memset(st.key.hash.bytes, 0x5c, 32);
    cairn_tier_hash_t fp = t_fingerprint(0), other = t_fingerprint(1);
    uint8_t buf[512];
    size_t hb = 0;
    assert_int_equal(tier_state_encode_header(buf, sizeof buf, &fp, &st, &hb), CAIRN_OK);
    assert_int_equal(hb, 128 + sizeof layout + 16);
    assert_memory_equal(buf, "CAIRNST\x1a", 8);
    assert_int_equal(buf[8], 1);              /* version */
    assert_int_equal(buf[12], hb);            /* header bytes, u32 LE */
    assert_memory_equal(buf + 16, fp.bytes, 32);
    assert_memory_equal(buf + 48, st.key.hash.bytes, 32);
    assert_int_equal(buf[80], 3);             /* group */
    assert_int_equal(buf[84], sizeof layout); /* layout size */
    assert_int_equal(buf[88], 48);            /* boundary */
    assert_int_equal(buf[96], sizeof pay);    /* payload bytes */
    assert_memory_equal(buf + 128, layout, sizeof layout);
    memcpy(buf + hb, pay, sizeof pay);
    size_t len = hb + sizeof pay;
    tier_state_header_t h;
    assert_int_equal(tier_state_validate(buf, len, &fp, &h), CAIRN_OK);
    assert_int_equal(h.group, 3);
    assert_int_equal(h.boundary, 48);
    assert_int_equal(h.layout_size, sizeof layout);
    assert_int_equal(tier_state_validate(buf, len, &other, &h), CAIRN_ECORRUPT); /* another model */
    assert_int_equal(tier_state_validate(buf, len - 1, &fp, &h), CAIRN_ECORRUPT); /* truncated */
    assert_int_equal(tier_state_parse_header(buf, 40, &h), CAIRN_ERANGE);
    for (size_t at = 0; at < len; at += 7) { /* any flipped bit */
        buf[at] ^= 0x10;
        assert_int_equal(tier_state_validate(buf, len, &fp, &h), CAIRN_ECORRUPT);
        buf[at] ^= 0x10;
    }
    /* A BLOCK parser never accepts a STATE, nor the reverse. */
    tier_object_header_t bh;
    assert_int_equal(tier_object_validate(buf, len, NULL, NULL, &bh), CAIRN_ECORRUPT);
    st.boundary = 0;
    assert_int_equal(tier_state_encode_header(buf, sizeof buf, &fp, &st, &hb), CAIRN_EINVAL);
    st.boundary = 48;
    st.key.kind = CAIRN_TIER_BLOCK;
    assert_int_equal(tier_state_encode_header(buf, sizeof buf, &fp, &st, &hb), CAIRN_EINVAL);
    st.key.kind = CAIRN_TIER_STATE;
    assert_int_equal(tier_state_encode_header(buf, 100, &fp, &st, &hb), CAIRN_ERANGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_validate),
        cmocka_unit_test(test_encode_rejects_bad_sizes),
        cmocka_unit_test(test_fingerprint),
        cmocka_unit_test(test_state_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
