/*
 * The GGUF parser (src/formats/gguf.c, docs/FORMAT.md 3): the fixture files written by
 * llama.cpp's tools parse into what their header says; a small valid file truncated at
 * every offset, and files that lie about counts, lengths, offsets and sizes or carry
 * unknown type tags, are each refused with an error naming the problem (never a crash:
 * the ASan build runs these too); the typed metadata readers and the weights digest.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"

#define Q256 CAIRN_FIXTURES_DIR "/gguf/q256/"

static char err[512];

static gguf_file_t *open_fixture(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, Q256 "%s", name);
    gguf_file_t *g = NULL;
    int rc = gguf_open(path, GGUF_OPEN_METADATA, &g, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    return g;
}

/* The header of the bf16 fixture as llama.cpp's converter wrote it (see the fixtures
 * README): every count, type and offset, and the typed readers over real keys. */
static void test_fixture_header(void **state)
{
    (void)state;
    gguf_file_t *g = open_fixture("q256-bf16.gguf");
    assert_int_equal(gguf_version(g), 3);
    assert_int_equal(gguf_n_tensors(g), 24);
    assert_int_equal(gguf_n_kvs(g), 26);
    assert_int_equal(gguf_alignment(g), 32);
    /* The tensor table ends at byte 126506; data starts at the next multiple of 32. */
    assert_int_equal(gguf_data_offset(g), 126528);

    gguf_str_t s;
    assert_int_equal(gguf_get_str(g, "general.architecture", true, &s, err, sizeof err), 0);
    assert_true(gguf_str_eq(s, "qwen3"));
    uint64_t u;
    assert_int_equal(gguf_get_uint(g, "qwen3.block_count", true, 0, 100, &u, err, sizeof err), 0);
    assert_int_equal(u, 2);
    float f;
    assert_int_equal(gguf_get_float(g, "qwen3.rope.freq_base", true, 0, &f, err, sizeof err), 0);
    assert_true(f == 1000000.0f);
    bool b = true;
    assert_int_equal(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", true, &b, err, sizeof err), 0);
    assert_false(b);

    const gguf_kv_t *tok, *types, *merges;
    assert_int_equal(gguf_get_array(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, true, &tok, err,
                                    sizeof err), 0);
    assert_int_equal(tok->n, 4096);
    assert_true(gguf_str_eq(tok->strs[0], "!"));
    assert_true(gguf_str_eq(tok->strs[4095], "<|im_end|>"));
    assert_int_equal(gguf_get_array(g, "tokenizer.ggml.token_type", GGUF_TYPE_I32, true, &types,
                                    err, sizeof err), 0);
    assert_int_equal(gguf_array_int(types, 0), 1);
    assert_int_equal(gguf_array_int(types, 4095), 3);
    assert_int_equal(gguf_get_array(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, true, &merges,
                                    err, sizeof err), 0);
    assert_int_equal(merges->n, 3837);

    const gguf_tensor_t *t = gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 256);
    assert_int_equal(t->ne[1], 4096);
    assert_string_equal(t->type->name, "bf16");
    assert_int_equal(t->offset, 0);
    assert_int_equal(t->bytes, 256 * 4096 * 2);
    size_t len;
    const uint8_t *base = gguf_bytes(g, &len);
    assert_ptr_equal(t->data, base + 126528);
    t = gguf_find_tensor(g, "blk.1.attn_k_norm.weight");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 1);
    assert_string_equal(t->type->name, "f32");
    assert_null(gguf_find_tensor(g, "output.weight")); /* tied embeddings */
    cairn_dtype_t dt;
    assert_int_equal(gguf_tensor_dtype(t->type, &dt), 0);
    assert_int_equal(dt, CAIRN_DTYPE_F32);
    gguf_close(g);
}

/* The K-quant fixture: q4_k and q6_k tensors parse with their block geometry. A ggml
 * type maps to the Cairn element type of the same name, or to none. */
static void test_fixture_quant_types(void **state)
{
    (void)state;
    gguf_file_t *g = open_fixture("q256-Q4_K_M.gguf");
    const gguf_tensor_t *emb = gguf_find_tensor(g, "token_embd.weight");
    const gguf_tensor_t *q = gguf_find_tensor(g, "blk.0.attn_q.weight");
    assert_string_equal(emb->type->name, "q6_k");
    assert_int_equal(emb->bytes, 4096 / 1 * (256 / 256) * 210);
    assert_string_equal(q->type->name, "q4_k");
    assert_int_equal(q->bytes, 256 * 144);
    const char *names[] = {"q4_k", "q6_k", "q8_0", "q4_0", "q5_k"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(names); i++) {
        const gguf_tensor_type_t *t = NULL;
        for (uint32_t id = 0; id < 64 && !t; id++)
            if (gguf_tensor_type(id) && !strcmp(gguf_tensor_type(id)->name, names[i]))
                t = gguf_tensor_type(id);
        assert_non_null(t);
        cairn_dtype_t d, named;
        int rc = gguf_tensor_dtype(t, &d);
        if (cairn_dtype_parse(names[i], &named) != 0) {
            assert_int_equal(rc, CAIRN_EUNSUPPORTED); /* no such element type (yet) */
        } else {
            assert_int_equal(rc, 0);
            assert_int_equal(d, named);
            assert_int_equal(cairn_dtype_row_bytes(d, t->block_elems), t->block_bytes);
        }
    }
    gguf_close(g);
}

/* A small file with every value type, both kinds of arrays and two tensors. */
static uint8_t *small_file(size_t *len)
{
    gw_t *w = gw_new();
    gw_kv_str(w, "general.architecture", "qwen3");
    gw_kv_u32(w, "a.u32", 7);
    gw_kv_i32(w, "a.i32", -3);
    gw_kv_u64(w, "a.u64", 1ull << 40);
    gw_kv_f32(w, "a.f32", 0.5f);
    gw_kv_bool(w, "a.bool", 1);
    int32_t ints[3] = {1, -2, 3};
    gw_kv_arr(w, "a.ints", GGUF_TYPE_I32, ints, 3);
    const char *strs[] = {"x", "", "hello"};
    gw_kv_arr_str(w, "a.strs", strs, NULL, 3);
    float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t ne1[1] = {8}, ne2[2] = {4, 2};
    gw_tensor(w, "t.f32", 1, ne1, 0, data, sizeof data, UINT64_MAX);
    gw_tensor(w, "t.bf16", 2, ne2, 30, data, 16, UINT64_MAX);
    uint8_t *p = gw_finish(w, len);
    gw_free(w);
    return p;
}

static void test_small_file(void **state)
{
    (void)state;
    size_t len;
    uint8_t *p = small_file(&len);
    gguf_file_t *g = NULL;
    assert_int_equal(gguf_parse(p, len, "small", &g, err, sizeof err), 0);
    assert_int_equal(gguf_n_kvs(g), 8);
    assert_int_equal(gguf_n_tensors(g), 2);
    uint64_t u;
    float f;
    bool b;
    gguf_str_t s;
    const gguf_kv_t *a;
    assert_int_equal(gguf_get_uint(g, "a.u32", true, 0, 10, &u, err, sizeof err), 0);
    assert_int_equal(u, 7);
    assert_int_equal(gguf_get_uint(g, "a.u64", true, 0, UINT64_MAX, &u, err, sizeof err), 0);
    assert_int_equal(u, 1ull << 40);
    /* Out of range, negative, the wrong type, missing: each named. */
    assert_int_equal(gguf_get_uint(g, "a.u32", true, 0, 6, &u, err, sizeof err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "a.u32 = 7 is out of range"));
    assert_int_equal(gguf_get_uint(g, "a.i32", true, 0, 10, &u, err, sizeof err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "a.i32 = -3"));
    assert_int_equal(gguf_get_uint(g, "a.f32", true, 0, 10, &u, err, sizeof err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "a.f32 is f32, expected an integer"));
    assert_int_equal(gguf_get_uint(g, "a.none", true, 0, 10, &u, err, sizeof err), CAIRN_ENOENT);
    assert_non_null(strstr(err, "small: missing metadata a.none"));
    assert_int_equal(gguf_get_uint(g, "a.none", false, 42, 100, &u, err, sizeof err), 0);
    assert_int_equal(u, 42);
    assert_int_equal(gguf_get_float(g, "a.f32", true, 0, &f, err, sizeof err), 0);
    assert_true(f == 0.5f);
    assert_int_equal(gguf_get_float(g, "a.u32", true, 0, &f, err, sizeof err), CAIRN_EFORMAT);
    assert_int_equal(gguf_get_bool(g, "a.bool", false, &b, err, sizeof err), 0);
    assert_true(b);
    assert_int_equal(gguf_get_bool(g, "a.u32", false, &b, err, sizeof err), CAIRN_EFORMAT);
    assert_int_equal(gguf_get_str(g, "a.ints", true, &s, err, sizeof err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "a.ints is array of i32, expected a string"));
    /* Integer arrays are read whatever their width; string arrays are not integers. */
    assert_int_equal(gguf_get_array(g, "a.ints", GGUF_TYPE_U32, true, &a, err, sizeof err), 0);
    assert_int_equal(gguf_array_int(a, 1), -2);
    assert_int_equal(gguf_get_array(g, "a.strs", GGUF_TYPE_I32, true, &a, err, sizeof err),
                     CAIRN_EFORMAT);
    assert_int_equal(gguf_get_array(g, "a.strs", GGUF_TYPE_STRING, true, &a, err, sizeof err), 0);
    assert_int_equal(a->n, 3);
    assert_true(gguf_str_eq(a->strs[1], ""));
    assert_true(gguf_str_eq(a->strs[2], "hello"));
    const gguf_tensor_t *t = gguf_find_tensor(g, "t.bf16");
    assert_int_equal(t->offset, 32);
    assert_int_equal(t->bytes, 16);
    assert_memory_equal(t->data, p + gguf_data_offset(g) + 32, 16);
    gguf_close(g);
    free(p);
}

/* Every proper prefix of a valid file is an error, never a read past its end. */
static void test_truncated_everywhere(void **state)
{
    (void)state;
    size_t len;
    uint8_t *p = small_file(&len);
    for (size_t n = 0; n < len; n++) {
        /* A copy of exactly n bytes, so ASan sees any read past it. */
        uint8_t *q = malloc(n ? n : 1);
        memcpy(q, p, n);
        gguf_file_t *g = NULL;
        err[0] = 0;
        int rc = gguf_parse(q, n, "cut", &g, err, sizeof err);
        if (rc == 0)
            fprintf(stderr, "prefix of %zu bytes parsed\n", n);
        assert_int_not_equal(rc, 0);
        assert_null(g);
        assert_true(strlen(err) > 0);
        if (n >= 4 && !strstr(err, "truncated") && !strstr(err, "ends past the end"))
            fail_msg("prefix of %zu bytes: %s", n, err);
        free(q);
    }
    free(p);

    /* The same over the header of a real file (every byte of its metadata and table). */
    gguf_file_t *fx = open_fixture("q256-bf16.gguf");
    const uint8_t *fb = gguf_bytes(fx, &len);
    size_t header = (size_t)gguf_data_offset(fx);
    for (size_t n = 0; n < header; n += n < 4096 ? 1 : 61) {
        gguf_file_t *g = NULL;
        assert_int_equal(gguf_parse(fb, n, "cut", &g, err, sizeof err), CAIRN_EFORMAT);
    }
    /* Cut inside the data section: the tensor that no longer fits is named. */
    gguf_file_t *g = NULL;
    assert_int_equal(gguf_parse(fb, len - 1, "cut", &g, err, sizeof err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "ends past the end of the file"));
    gguf_close(fx);
}

/* A mutation of a valid file and what the parser must say about it. */
typedef struct {
    const char *what;
    int rc;
    const char *msg;
} lie_t;

static void expect(const uint8_t *p, size_t len, const lie_t *l)
{
    gguf_file_t *g = NULL;
    err[0] = 0;
    int rc = gguf_parse(p, len, "bad.gguf", &g, err, sizeof err);
    if (rc != l->rc || !strstr(err, l->msg))
        fprintf(stderr, "%s: got %d '%s', want %d '%s'\n", l->what, rc, err, l->rc, l->msg);
    assert_int_equal(rc, l->rc);
    assert_non_null(strstr(err, l->msg));
    assert_null(g);
}

/* Header fields patched in place. */
static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_lying_header(void **state)
{
    (void)state;
    size_t len;
    uint8_t *p = small_file(&len), *q = malloc(len);
#define MUTATE(stmt, rc_, msg_)                                                           \
    do {                                                                                  \
        memcpy(q, p, len);                                                                \
        stmt;                                                                             \
        lie_t l = {#stmt, rc_, msg_};                                                     \
        expect(q, len, &l);                                                               \
    } while (0)
    MUTATE(q[0] = 'X', CAIRN_EFORMAT, "not a GGUF file");
    MUTATE(put_le(q + 4, 1, 4), CAIRN_EUNSUPPORTED, "version 1 is not supported");
    MUTATE(put_le(q + 4, 0x03000000, 4), CAIRN_EUNSUPPORTED, "big-endian");
    MUTATE(put_le(q + 4, 4, 4), CAIRN_EUNSUPPORTED, "unknown GGUF version 4");
    MUTATE(put_le(q + 8, 1ull << 40, 8), CAIRN_EFORMAT, "tensor table (its count is larger");
    MUTATE(put_le(q + 16, 1ull << 40, 8), CAIRN_EFORMAT, "metadata (its count is larger");
    /* The first key's length, then its type tag (the key is "general.architecture"). */
    MUTATE(put_le(q + 24, 1ull << 62, 8), CAIRN_EFORMAT, "truncated");
    MUTATE(put_le(q + 24, 0, 8), CAIRN_EFORMAT, "empty key");
    MUTATE(put_le(q + 32 + 20, 13, 4), CAIRN_EFORMAT, "unknown value type 13");
    MUTATE(put_le(q + 32 + 20 + 4, 1ull << 62, 8), CAIRN_EFORMAT, "truncated");
    free(q);
    free(p);
#undef MUTATE
}

/* Files built to lie in one place each. */
static void test_lying_entries(void **state)
{
    (void)state;
    float data[8] = {0};
    int64_t ne1[1] = {8};
    size_t len;
    uint8_t *p;
    gw_t *w;
#define FILE_WITH(build, rc_, msg_)                                                       \
    do {                                                                                  \
        w = gw_new();                                                                     \
        build;                                                                            \
        p = gw_finish(w, &len);                                                           \
        lie_t l = {#build, rc_, msg_};                                                    \
        expect(p, len, &l);                                                               \
        free(p);                                                                          \
        gw_free(w);                                                                       \
    } while (0)
    uint8_t arr_bad[12] = {99, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
    FILE_WITH(gw_kv_raw(w, "k", GGUF_TYPE_ARRAY, arr_bad, sizeof arr_bad), CAIRN_EFORMAT,
              "'k' has unknown array element type 99");
    uint8_t nested[12] = {GGUF_TYPE_ARRAY, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
    FILE_WITH(gw_kv_raw(w, "k", GGUF_TYPE_ARRAY, nested, sizeof nested), CAIRN_EUNSUPPORTED,
              "array of arrays");
    uint8_t many[12] = {GGUF_TYPE_U32, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
    FILE_WITH(gw_kv_raw(w, "k", GGUF_TYPE_ARRAY, many, sizeof many), CAIRN_EFORMAT, "truncated");
    uint8_t strs[12] = {GGUF_TYPE_STRING, 0, 0, 0, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0};
    FILE_WITH(gw_kv_raw(w, "k", GGUF_TYPE_ARRAY, strs, sizeof strs), CAIRN_EFORMAT, "truncated");
    uint8_t two = 2;
    FILE_WITH(gw_kv_raw(w, "k", GGUF_TYPE_BOOL, &two, 1), CAIRN_EFORMAT, "'k' is not a bool");
    uint8_t bools[14] = {GGUF_TYPE_BOOL, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 7};
    FILE_WITH(gw_kv_raw(w, "k", GGUF_TYPE_ARRAY, bools, sizeof bools), CAIRN_EFORMAT,
              "element 1 is not a bool");
    FILE_WITH((gw_kv_u32(w, "k", 1), gw_kv_u32(w, "k", 2)), CAIRN_EFORMAT,
              "metadata key 'k' appears twice");
    FILE_WITH(gw_kv_u32(w, "general.alignment", 0), CAIRN_EFORMAT, "general.alignment");
    FILE_WITH(gw_kv_u32(w, "general.alignment", 48), CAIRN_EFORMAT, "general.alignment");
    FILE_WITH(gw_kv_u64(w, "general.alignment", 32), CAIRN_EFORMAT, "general.alignment");
    FILE_WITH(gw_tensor(w, "t", 1, ne1, 99, data, 32, UINT64_MAX), CAIRN_EUNSUPPORTED,
              "tensor 't' has unknown ggml type id 99");
    FILE_WITH(gw_tensor(w, "t", 1, ne1, 4, data, 32, UINT64_MAX), CAIRN_EUNSUPPORTED,
              "unknown ggml type id 4"); /* q4_2: removed from the format */
    FILE_WITH(gw_tensor(w, "t", 0, ne1, 0, data, 4, UINT64_MAX), CAIRN_EFORMAT,
              "tensor 't' has 0 dimensions");
    int64_t ne5[5] = {1, 1, 1, 1, 1};
    FILE_WITH(gw_tensor(w, "t", 5, ne5, 0, data, 4, UINT64_MAX), CAIRN_EFORMAT,
              "tensor 't' has 5 dimensions");
    int64_t neg[1] = {-1};
    FILE_WITH(gw_tensor(w, "t", 1, neg, 0, data, 4, UINT64_MAX), CAIRN_EFORMAT,
              "dimension 0 is negative");
    int64_t q33[1] = {33};
    FILE_WITH(gw_tensor(w, "t", 1, q33, 8, data, 32, UINT64_MAX), CAIRN_EFORMAT,
              "rows of 33 elements are not whole q8_0 blocks of 32");
    int64_t huge[3] = {1ll << 30, 1ll << 30, 1ll << 30};
    FILE_WITH(gw_tensor(w, "t", 3, huge, 0, data, 4, UINT64_MAX), CAIRN_EFORMAT,
              "tensor 't' is too large");
    int64_t big[2] = {1ll << 20, 1ll << 20};
    FILE_WITH(gw_tensor(w, "t", 2, big, 0, data, 32, UINT64_MAX), CAIRN_EFORMAT,
              "ends past the end of the file");
    FILE_WITH((gw_tensor(w, "t", 1, ne1, 0, data, 32, UINT64_MAX), gw_tensor_declare(w, 0, 1)),
              CAIRN_EFORMAT, "offset 1 is not a multiple of the alignment 32");
    FILE_WITH((gw_tensor(w, "t", 1, ne1, 0, data, 32, UINT64_MAX),
               gw_tensor_declare(w, 0, 1ull << 40)),
              CAIRN_EFORMAT, "ends past the end of the file");
    FILE_WITH((gw_tensor(w, "a", 1, ne1, 0, data, 32, UINT64_MAX),
               gw_tensor(w, "b", 1, ne1, 0, data, 32, UINT64_MAX), gw_tensor_declare(w, 1, 0)),
              CAIRN_EFORMAT, "tensors 'a' and 'b' overlap");
    FILE_WITH((gw_tensor(w, "a", 1, ne1, 0, data, 32, UINT64_MAX),
               gw_tensor(w, "a", 1, ne1, 0, data, 32, UINT64_MAX)),
              CAIRN_EFORMAT, "tensor 'a' appears twice");
    FILE_WITH(gw_tensor(w, "", 1, ne1, 0, data, 32, UINT64_MAX), CAIRN_EFORMAT, "name");
    /* Version 2 is read like 3; a metadata-only file needs no data section. */
    w = gw_new();
    gw_set_version(w, 2);
    gw_kv_str(w, "general.architecture", "llama");
    p = gw_finish(w, &len);
    gguf_file_t *g = NULL;
    assert_int_equal(gguf_parse(p, len, "v2", &g, err, sizeof err), 0);
    assert_int_equal(gguf_version(g), 2);
    assert_int_equal(gguf_data_offset(g), len);
    gguf_close(g);
    free(p);
    gw_free(w);
    /* Zero-size tensors may share an offset. */
    w = gw_new();
    int64_t ne0[1] = {0};
    gw_tensor(w, "a", 1, ne0, 0, NULL, 0, 0);
    gw_tensor(w, "b", 1, ne0, 0, NULL, 0, 0);
    gw_tensor(w, "c", 1, ne1, 0, data, 32, 0);
    p = gw_finish(w, &len);
    assert_int_equal(gguf_parse(p, len, "zero", &g, err, sizeof err), 0);
    gguf_close(g);
    free(p);
    gw_free(w);
#undef FILE_WITH
}

static void test_open_errors(void **state)
{
    (void)state;
    gguf_file_t *g = NULL;
    assert_int_equal(gguf_open("/nonexistent/x.gguf", GGUF_OPEN_METADATA, &g, err, sizeof err),
                     CAIRN_ENOENT);
    assert_non_null(strstr(err, "/nonexistent/x.gguf"));
    assert_int_equal(gguf_open("/tmp", GGUF_OPEN_METADATA, &g, err, sizeof err), CAIRN_EIO);
    char path[] = "/tmp/cairn-gguf-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(gguf_open(path, GGUF_OPEN_WEIGHTS, &g, err, sizeof err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "empty"));
    assert_false(gguf_file_is_gguf(path));
    assert_int_equal(write(fd, "{\"not\": 1}", 10), 10);
    assert_int_equal(gguf_open(path, GGUF_OPEN_WEIGHTS, &g, err, sizeof err), CAIRN_EFORMAT);
    assert_non_null(strstr(err, "not a GGUF file"));
    close(fd);
    unlink(path);
    assert_true(gguf_file_is_gguf(Q256 "q256-bf16.gguf"));
    assert_false(gguf_file_is_gguf(Q256 "q256-bf16.ref.json"));
}

/* The digest covers the header bytes and the file size, not the file's name. */
static void test_digest(void **state)
{
    (void)state;
    size_t len;
    uint8_t *p = small_file(&len);
    gguf_file_t *a = NULL, *b = NULL;
    uint8_t da[32], db[32];
    assert_int_equal(gguf_parse(p, len, "one.gguf", &a, err, sizeof err), 0);
    assert_int_equal(gguf_parse(p, len, "other/name.gguf", &b, err, sizeof err), 0);
    gguf_weights_digest(a, da);
    gguf_weights_digest(b, db);
    assert_memory_equal(da, db, 32);
    gguf_close(b);
    /* Another metadata value: another digest. */
    uint8_t *q = malloc(len);
    memcpy(q, p, len);
    for (size_t i = 0; i + 5 <= len; i++)
        if (!memcmp(q + i, "qwen3", 5)) {
            q[i] = 'Q';
            break;
        }
    assert_int_equal(gguf_parse(q, len, "one.gguf", &b, err, sizeof err), 0);
    gguf_weights_digest(b, db);
    assert_memory_not_equal(da, db, 32);
    gguf_close(a);
    gguf_close(b);
    free(q);
    free(p);
}

/* Allocation failures anywhere in the parse are CAIRN_ENOMEM, never a crash or a leak. */
static void test_out_of_memory(void **state)
{
    (void)state;
    size_t len;
    uint8_t *p = small_file(&len);
    int ok = 0;
    for (long n = 0; n < 64 && !ok; n++) {
        gguf_file_t *g = NULL;
        cairn_alloc_fail_after(n, false);
        int rc = gguf_parse(p, len, "oom", &g, err, sizeof err);
        cairn_alloc_fail_after(-1, false);
        if (rc == 0) {
            ok = 1;
            gguf_close(g);
        } else {
            assert_int_equal(rc, CAIRN_ENOMEM);
        }
    }
    assert_true(ok);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_header),
        cmocka_unit_test(test_fixture_quant_types),
        cmocka_unit_test(test_small_file),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_lying_header),
        cmocka_unit_test(test_lying_entries),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_digest),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
