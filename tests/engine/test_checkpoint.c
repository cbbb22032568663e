/*
 * test_checkpoint.c — opening HF checkpoint folders: the shared fixtures (single file,
 * sharded, tied, bf16 vs f32), the weights digest recipe, and corrupted copies written to
 * a temp folder, each of which must fail with a message naming the problem. Ends with
 * allocation-failure sweeps over a full open.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cairn/checkpoint.h"
#include "formats/safetensors.h"
#include "models/llama/llama.h"

/* The llama family's weights of an open checkpoint. */
static const llama_weights_t *ckpt_weights(const cairn_checkpoint_t *ck)
{
    return llama_model_weights(cairn_checkpoint_model(ck));
}

#define FIX CAIRN_FIXTURES_DIR "/models/"

/* ---- helpers ---- */

static char *read_all(const char *path, size_t *len)
{
    char *buf = NULL, err[256];
    assert_int_equal(st_read_file(path, (size_t)64 << 20, &buf, len, err, sizeof err), 0);
    return buf;
}

static void write_all(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void copy_file(const char *model, const char *name, const char *dir, size_t max_len)
{
    char src[1024], dst[1024];
    size_t len;
    snprintf(src, sizeof src, FIX "%s/%s", model, name);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    char *buf = read_all(src, &len);
    write_all(dst, buf, len < max_len ? len : max_len);
    cairn_free(buf);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_all(p, text, strlen(text));
}

static char *make_tmpdir(void)
{
    char tmpl[] = "/tmp/cairn-ckpt-XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    return strdup(tmpl);
}

static void remove_dir(char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
    free(dir);
}

/* A temp folder with the fixture's config files (no weights yet). */
static char *config_copy(const char *model)
{
    char *dir = make_tmpdir();
    copy_file(model, "config.json", dir, SIZE_MAX);
    copy_file(model, "generation_config.json", dir, SIZE_MAX);
    return dir;
}

typedef void (*edit_fn)(cJSON *hdr);

/*
 * Writes dir/<name> as the fixture's safetensors file `name` with its header JSON passed
 * through edit() and padded with `pad` spaces; the data section is copied unchanged.
 */
static void write_edited(const char *model, const char *name, const char *dir, edit_fn edit,
                         size_t pad)
{
    char src[1024], dst[1024];
    size_t len;
    snprintf(src, sizeof src, FIX "%s/%s", model, name);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    uint8_t *buf = (uint8_t *)read_all(src, &len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | buf[i];
    cJSON *hdr = cJSON_ParseWithLength((const char *)buf + 8, (size_t)n);
    assert_non_null(hdr);
    if (edit)
        edit(hdr);
    char *text = cJSON_PrintUnformatted(hdr);
    assert_non_null(text);
    size_t hl = strlen(text) + pad;
    uint8_t *out = malloc(8 + hl + (len - 8 - n));
    assert_non_null(out);
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(out + 8, text, strlen(text));
    memset(out + 8 + strlen(text), ' ', pad);
    memcpy(out + 8 + hl, buf + 8 + n, len - 8 - n);
    write_all(dst, out, 8 + hl + (len - 8 - n));
    free(out);
    cairn_free(text);
    cJSON_Delete(hdr);
    cairn_free(buf);
}

static void expect_open_error(const char *dir, int want, const char *needle, const char *needle2)
{
    cairn_checkpoint_t *ck = NULL;
    char err[512] = "";
    int rc = cairn_checkpoint_open(dir, &ck, err, sizeof err);
    if (rc != want)
        fail_msg("open returned %d (%s), wanted %d", rc, err, want);
    assert_null(ck);
    if (!strstr(err, needle) || (needle2 && !strstr(err, needle2)))
        fail_msg("error '%s' does not mention '%s'/'%s'", err, needle, needle2 ? needle2 : "");
}

static cairn_checkpoint_t *open_ok(const char *dir)
{
    cairn_checkpoint_t *ck = NULL;
    char err[512] = "";
    int rc = cairn_checkpoint_open(dir, &ck, err, sizeof err);
    if (rc)
        fail_msg("open %s: %d %s", dir, rc, err);
    return ck;
}

static void assert_shape(const cairn_tensor_t *t, int ndim, int64_t d0, int64_t d1)
{
    assert_non_null(t->data);
    assert_int_equal(t->ndim, ndim);
    assert_int_equal(t->shape[0], d0);
    if (ndim == 2)
        assert_int_equal(t->shape[1], d1);
}

static float to_f32(const cairn_tensor_t *t, size_t i)
{
    if (t->dtype == CAIRN_DTYPE_F32)
        return ((const float *)t->data)[i];
    assert_int_equal(t->dtype, CAIRN_DTYPE_BF16);
    uint32_t bits = (uint32_t)((const uint16_t *)t->data)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static size_t numel(const cairn_tensor_t *t)
{
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= (size_t)t->shape[i];
    return n;
}

/* ---- fixtures load ---- */

static void test_llama(void **state)
{
    cairn_checkpoint_t *ck = open_ok(FIX "llama");
    const cairn_model_config_t *c = cairn_checkpoint_config(ck);
    const llama_weights_t *w = ckpt_weights(ck);
    assert_string_equal(cairn_checkpoint_dir(ck), FIX "llama");
    assert_int_equal(c->n_layers, 3);
    assert_int_equal(c->n_kv_heads, 1);
    assert_shape(&w->embed, 2, 4096, 128);
    assert_shape(&w->lm_head, 2, 4096, 128);
    assert_ptr_not_equal(w->embed.data, w->lm_head.data);
    assert_shape(&w->norm, 1, 128, 0);
    for (int l = 0; l < 3; l++) {
        const llama_layer_weights_t *L = &w->layers[l];
        assert_shape(&L->attn_norm, 1, 128, 0);
        assert_shape(&L->wq, 2, 128, 128);
        assert_shape(&L->wk, 2, 32, 128);
        assert_shape(&L->wv, 2, 32, 128);
        assert_shape(&L->wo, 2, 128, 128);
        assert_shape(&L->ffn_norm, 1, 128, 0);
        assert_shape(&L->w_gate, 2, 320, 128);
        assert_shape(&L->w_up, 2, 320, 128);
        assert_shape(&L->w_down, 2, 128, 320);
        assert_null(L->q_norm.data);
        assert_null(L->k_norm.data);
        assert_int_equal(L->wq.dtype, CAIRN_DTYPE_BF16);
    }
    /* Every stored tensor is used: weight bytes = file size - 8 - header length. */
    assert_int_equal(cairn_checkpoint_weight_bytes(ck), 3085192 - 8 - 3200);
    cairn_checkpoint_close(ck);
}

static void test_llama31_sharded_tied(void **state)
{
    cairn_checkpoint_t *ck = open_ok(FIX "llama31");
    const cairn_model_config_t *c = cairn_checkpoint_config(ck);
    const llama_weights_t *w = ckpt_weights(ck);
    assert_int_equal(c->rope_type, CAIRN_ROPE_LLAMA3);
    assert_float_equal(c->rope_factor, 8.0f, 0);
    assert_int_equal(c->rope_orig_max_pos, 8192);
    assert_true(c->tie_embeddings);
    assert_ptr_equal(w->lm_head.data, w->embed.data);
    assert_shape(&w->lm_head, 2, 4096, 128);
    assert_shape(&w->layers[2].w_down, 2, 128, 320);
    assert_shape(&w->layers[1].wk, 2, 64, 128);
    /* The index's metadata.total_size is exactly the bytes we bind. */
    assert_int_equal(cairn_checkpoint_weight_bytes(ck), 2082560);
    cairn_checkpoint_close(ck);
}

static void test_qwen3(void **state)
{
    cairn_checkpoint_t *ck = open_ok(FIX "qwen3");
    const llama_weights_t *w = ckpt_weights(ck);
    assert_ptr_equal(w->lm_head.data, w->embed.data);
    for (int l = 0; l < 4; l++) {
        assert_shape(&w->layers[l].q_norm, 1, 32, 0);
        assert_shape(&w->layers[l].k_norm, 1, 32, 0);
        assert_shape(&w->layers[l].w_gate, 2, 384, 128);
        assert_shape(&w->layers[l].wq, 2, 128, 128);
        assert_shape(&w->layers[l].wk, 2, 64, 128);
    }
    cairn_checkpoint_close(ck);
}

static void assert_same_values(const cairn_tensor_t *a, const cairn_tensor_t *b)
{
    assert_int_equal(a->ndim, b->ndim);
    size_t n = numel(a);
    assert_int_equal(n, numel(b));
    for (size_t i = 0; i < n; i++)
        if (to_f32(a, i) != to_f32(b, i))
            fail_msg("element %zu differs: %g vs %g", i, to_f32(a, i), to_f32(b, i));
}

static void test_qwen3_bf16_equals_f32(void **state)
{
    cairn_checkpoint_t *a = open_ok(FIX "qwen3"), *b = open_ok(FIX "qwen3_f32");
    const llama_weights_t *wa = ckpt_weights(a), *wb = ckpt_weights(b);
    assert_int_equal(wb->embed.dtype, CAIRN_DTYPE_F32);
    assert_same_values(&wa->embed, &wb->embed);
    assert_same_values(&wa->norm, &wb->norm);
    for (int l = 0; l < 4; l++) {
        const cairn_tensor_t *ta = &wa->layers[l].attn_norm, *tb = &wb->layers[l].attn_norm;
        for (size_t k = 0; k < sizeof(llama_layer_weights_t) / sizeof(cairn_tensor_t); k++)
            assert_same_values(&ta[k], &tb[k]);
    }
    assert_int_equal(cairn_checkpoint_weight_bytes(b), 2 * cairn_checkpoint_weight_bytes(a));
    cairn_checkpoint_close(a);
    cairn_checkpoint_close(b);
}

/* docs/FORMAT.md 1.5: "cairn.weights.v1", u64 count, per file (name order) u32 name length,
 * name, u64 header length, header, u64 file size; all little-endian. */
static void sha_le(EVP_MD_CTX *sha, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    assert_true(EVP_DigestUpdate(sha, b, (size_t)bytes));
}

static void test_digest(void **state)
{
    const char *names[] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                           "model-00003-of-00003.safetensors"};
    EVP_MD_CTX *sha = EVP_MD_CTX_new();
    assert_non_null(sha);
    assert_true(EVP_DigestInit_ex(sha, EVP_sha256(), NULL));
    assert_true(EVP_DigestUpdate(sha, "cairn.weights.v1", 16));
    sha_le(sha, 3, 8);
    for (int i = 0; i < 3; i++) {
        char p[1024];
        size_t len;
        snprintf(p, sizeof p, FIX "llama31/%s", names[i]);
        uint8_t *buf = (uint8_t *)read_all(p, &len);
        uint64_t n = 0;
        for (int b = 7; b >= 0; b--)
            n = (n << 8) | buf[b];
        sha_le(sha, strlen(names[i]), 4);
        assert_true(EVP_DigestUpdate(sha, names[i], strlen(names[i])));
        sha_le(sha, n, 8);
        assert_true(EVP_DigestUpdate(sha, buf + 8, n));
        sha_le(sha, len, 8);
        cairn_free(buf);
    }
    uint8_t want[32], got[32], again[32], other[32];
    unsigned int wl = 0;
    assert_true(EVP_DigestFinal_ex(sha, want, &wl));
    EVP_MD_CTX_free(sha);
    cairn_checkpoint_t *ck = open_ok(FIX "llama31");
    cairn_checkpoint_weights_digest(ck, got);
    cairn_checkpoint_close(ck);
    assert_memory_equal(got, want, 32);
    ck = open_ok(FIX "llama31");
    cairn_checkpoint_weights_digest(ck, again);
    cairn_checkpoint_close(ck);
    assert_memory_equal(got, again, 32);
    ck = open_ok(FIX "llama");
    cairn_checkpoint_weights_digest(ck, other);
    cairn_checkpoint_close(ck);
    assert_memory_not_equal(got, other, 32);
}

/* ---- corrupted copies ---- */

static void test_missing_config(void **state)
{
    char *dir = make_tmpdir();
    copy_file("llama", "model.safetensors", dir, SIZE_MAX);
    expect_open_error(dir, CAIRN_ENOENT, "config.json", NULL);
    write_text(dir, "config.json", "{\"model_type\": \"llama\", ");
    expect_open_error(dir, CAIRN_EFORMAT, "config.json", "not valid JSON");
    write_text(dir, "config.json", "{\"model_type\": \"gpt_neox\"}");
    expect_open_error(dir, CAIRN_EUNSUPPORTED, "gpt_neox", NULL);
    write_text(dir, "config.json", "{\"model_type\": \"mamba\"}");
    expect_open_error(dir, CAIRN_EUNSUPPORTED, "mamba", NULL);
    remove_dir(dir);
}

static void test_no_weights(void **state)
{
    char *dir = config_copy("llama");
    expect_open_error(dir, CAIRN_ENOENT, "model.safetensors", NULL);
    remove_dir(dir);
}

static void test_truncated(void **state)
{
    char *dir = config_copy("llama");
    copy_file("llama", "model.safetensors", dir, 1500000);
    expect_open_error(dir, CAIRN_EFORMAT, "outside the data section", NULL);
    copy_file("llama", "model.safetensors", dir, 5);
    expect_open_error(dir, CAIRN_EFORMAT, "too short", NULL);
    copy_file("llama", "model.safetensors", dir, 1000); /* inside the header */
    expect_open_error(dir, CAIRN_EFORMAT, "header length", NULL);
    remove_dir(dir);
}

static void test_header_length_lies(void **state)
{
    char *dir = config_copy("llama");
    char p[1024];
    size_t len;
    snprintf(p, sizeof p, FIX "llama/model.safetensors");
    uint8_t *buf = (uint8_t *)read_all(p, &len);
    uint64_t huge = (uint64_t)len; /* one more than what fits after the 8 length bytes */
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(huge >> (8 * i));
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_all(p, buf, len);
    expect_open_error(dir, CAIRN_EFORMAT, "header length", NULL);
    buf[7] = 0xff;
    write_all(p, buf, len);
    expect_open_error(dir, CAIRN_EFORMAT, "header length", NULL);
    /* A shorter length cuts the JSON. */
    buf[7] = 0;
    buf[0] = 100;
    buf[1] = 0;
    buf[2] = 0;
    write_all(p, buf, len);
    expect_open_error(dir, CAIRN_EFORMAT, "not valid JSON", NULL);
    cairn_free(buf);
    remove_dir(dir);
}

static void set_offsets(cJSON *hdr, const char *name, double b, double e)
{
    cJSON *t = cJSON_GetObjectItemCaseSensitive(hdr, name);
    assert_non_null(t);
    cJSON *o = cJSON_CreateArray();
    cJSON_AddItemToArray(o, cJSON_CreateNumber(b));
    cJSON_AddItemToArray(o, cJSON_CreateNumber(e));
    cJSON_ReplaceItemInObjectCaseSensitive(t, "data_offsets", o);
}

static double offset_of(cJSON *hdr, const char *name, int which)
{
    cJSON *t = cJSON_GetObjectItemCaseSensitive(hdr, name);
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(t, "data_offsets"), which)
        ->valuedouble;
}

static void edit_overlap(cJSON *h)
{
    /* Two [128] bf16 norms: give the second the first's bytes. */
    double b = offset_of(h, "model.layers.0.input_layernorm.weight", 0);
    set_offsets(h, "model.layers.1.input_layernorm.weight", b + 2, b + 258);
}
static void edit_out_of_range(cJSON *h)
{
    set_offsets(h, "model.norm.weight", 3084000, 3084256);
}
static void edit_size_mismatch(cJSON *h)
{
    double b = offset_of(h, "model.norm.weight", 0);
    set_offsets(h, "model.norm.weight", b, b + 254);
}
static void edit_negative(cJSON *h) { set_offsets(h, "model.norm.weight", -2, 254); }
static void edit_dtype_f64(cJSON *h)
{
    cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "model.layers.2.mlp.up_proj.weight");
    cJSON_ReplaceItemInObjectCaseSensitive(t, "dtype", cJSON_CreateString("F64"));
}
static void edit_dtype_i8(cJSON *h)
{
    cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "model.norm.weight");
    cJSON_ReplaceItemInObjectCaseSensitive(t, "dtype", cJSON_CreateString("I8"));
}
static void edit_dtype_bogus(cJSON *h)
{
    cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "model.norm.weight");
    cJSON_ReplaceItemInObjectCaseSensitive(t, "dtype", cJSON_CreateString("Q4_K"));
}
static void edit_shape(cJSON *h)
{
    /* Same element count, wrong layout for the config: [256, 64] instead of [128, 128]. */
    cJSON *t = cJSON_GetObjectItemCaseSensitive(h, "model.layers.1.self_attn.q_proj.weight");
    cJSON *s = cJSON_CreateArray();
    cJSON_AddItemToArray(s, cJSON_CreateNumber(256));
    cJSON_AddItemToArray(s, cJSON_CreateNumber(64));
    cJSON_ReplaceItemInObjectCaseSensitive(t, "shape", s);
}
static void edit_missing(cJSON *h) { cJSON_DeleteItemFromObject(h, "model.layers.1.mlp.up_proj.weight"); }
static void edit_extra_bias(cJSON *h)
{
    /* A bias the config does not declare: reuse a zero-length span. */
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "dtype", "BF16");
    cJSON *s = cJSON_AddArrayToObject(t, "shape");
    cJSON_AddItemToArray(s, cJSON_CreateNumber(0));
    cJSON *o = cJSON_AddArrayToObject(t, "data_offsets");
    cJSON_AddItemToArray(o, cJSON_CreateNumber(0));
    cJSON_AddItemToArray(o, cJSON_CreateNumber(0));
    cJSON_AddItemToObject(h, "model.layers.0.self_attn.q_proj.bias", t);
}
static void edit_dup_name(cJSON *h)
{
    cJSON *t = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(h, "model.norm.weight"), true);
    cJSON_AddItemToObject(h, "model.norm.weight", t);
}
static void edit_not_object(cJSON *h)
{
    cJSON_ReplaceItemInObjectCaseSensitive(h, "model.norm.weight", cJSON_CreateNumber(3));
}

static void test_bad_headers(void **state)
{
    const struct {
        edit_fn edit;
        int rc;
        const char *n1, *n2;
    } cases[] = {
        {edit_overlap, CAIRN_EFORMAT, "overlap", "model.layers.1.input_layernorm.weight"},
        {edit_out_of_range, CAIRN_EFORMAT, "outside the data section", "model.norm.weight"},
        {edit_size_mismatch, CAIRN_EFORMAT, "model.norm.weight", "needs 256"},
        {edit_negative, CAIRN_EFORMAT, "model.norm.weight", "data_offsets"},
        {edit_dtype_f64, CAIRN_EUNSUPPORTED, "model.layers.2.mlp.up_proj.weight", "F64"},
        {edit_dtype_i8, CAIRN_EUNSUPPORTED, "model.norm.weight", "I8"},
        {edit_dtype_bogus, CAIRN_EFORMAT, "model.norm.weight", "Q4_K"},
        {edit_shape, CAIRN_EFORMAT, "model.layers.1.self_attn.q_proj.weight", "[256, 64]"},
        {edit_missing, CAIRN_ENOENT, "lacks tensor", "model.layers.1.mlp.up_proj.weight"},
        {edit_extra_bias, CAIRN_EUNSUPPORTED, "unexpected tensor", "q_proj.bias"},
        {edit_dup_name, CAIRN_EFORMAT, "model.norm.weight", "twice"},
        {edit_not_object, CAIRN_EFORMAT, "model.norm.weight", "not an object"},
    };
    char *dir = config_copy("llama");
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(cases); i++) {
        write_edited("llama", "model.safetensors", dir, cases[i].edit, 0);
        expect_open_error(dir, cases[i].rc, cases[i].n1, cases[i].n2);
    }
    /* The same edits with the fixture's own padding still load when unedited. */
    write_edited("llama", "model.safetensors", dir, NULL, 0);
    cairn_checkpoint_close(open_ok(dir));
    remove_dir(dir);
}

/* Wrong config vs right weights: the shape check names the tensor. */
static void test_config_shape_mismatch(void **state)
{
    char *dir = make_tmpdir();
    size_t len;
    char *cfg = read_all(FIX "llama/config.json", &len);
    char *p = strstr(cfg, "\"intermediate_size\": 320");
    assert_non_null(p);
    memcpy(p, "\"intermediate_size\": 384", 24);
    write_text(dir, "config.json", cfg);
    cairn_free(cfg);
    copy_file("llama", "model.safetensors", dir, SIZE_MAX);
    expect_open_error(dir, CAIRN_EFORMAT, "mlp", "[384, 128]");
    remove_dir(dir);
}

/* A header whose length puts bf16 data at an odd address still loads, via a copy. */
static void test_misaligned_copy(void **state)
{
    char *dir = config_copy("qwen3");
    write_edited("qwen3", "model.safetensors", dir, NULL, 1);
    cairn_checkpoint_t *a = open_ok(dir), *b = open_ok(FIX "qwen3");
    const llama_weights_t *wa = ckpt_weights(a), *wb = ckpt_weights(b);
    assert_int_equal((uintptr_t)wa->embed.data % 2, 0);
    assert_same_values(&wa->embed, &wb->embed);
    assert_same_values(&wa->layers[3].w_down, &wb->layers[3].w_down);
    uint8_t da[32], db[32];
    cairn_checkpoint_weights_digest(a, da);
    cairn_checkpoint_weights_digest(b, db);
    assert_memory_not_equal(da, db, 32); /* the header bytes differ */
    cairn_checkpoint_close(a);
    cairn_checkpoint_close(b);
    remove_dir(dir);
}

static void sharded_copy(const char *dir, bool with3)
{
    copy_file("llama31", "model-00001-of-00003.safetensors", dir, SIZE_MAX);
    copy_file("llama31", "model-00002-of-00003.safetensors", dir, SIZE_MAX);
    if (with3)
        copy_file("llama31", "model-00003-of-00003.safetensors", dir, SIZE_MAX);
}

static void test_sharded_errors(void **state)
{
    char *dir = config_copy("llama31");
    sharded_copy(dir, false);
    copy_file("llama31", "model.safetensors.index.json", dir, SIZE_MAX);
    expect_open_error(dir, CAIRN_ENOENT, "model-00003-of-00003.safetensors", NULL);

    /* Index pointing a tensor at the wrong shard. */
    sharded_copy(dir, true);
    size_t len;
    char *idx = read_all(FIX "llama31/model.safetensors.index.json", &len);
    cJSON *root = cJSON_Parse(idx);
    cairn_free(idx);
    cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    cJSON_ReplaceItemInObjectCaseSensitive(wm, "model.norm.weight",
                                           cJSON_CreateString("model-00001-of-00003.safetensors"));
    char *text = cJSON_Print(root);
    write_text(dir, "model.safetensors.index.json", text);
    cairn_free(text);
    expect_open_error(dir, CAIRN_EFORMAT, "model.norm.weight", "model-00001-of-00003");

    /* A shard name escaping the folder. */
    cJSON_ReplaceItemInObjectCaseSensitive(wm, "model.norm.weight",
                                           cJSON_CreateString("../model-00003-of-00003.safetensors"));
    text = cJSON_Print(root);
    write_text(dir, "model.safetensors.index.json", text);
    cairn_free(text);
    expect_open_error(dir, CAIRN_EFORMAT, "model.norm.weight", "not a file name");

    /* An index naming a tensor no shard holds. */
    cJSON_ReplaceItemInObjectCaseSensitive(wm, "model.norm.weight",
                                           cJSON_CreateString("model-00003-of-00003.safetensors"));
    cJSON_AddStringToObject(wm, "model.layers.9.mlp.up_proj.weight",
                            "model-00003-of-00003.safetensors");
    text = cJSON_Print(root);
    write_text(dir, "model.safetensors.index.json", text);
    cairn_free(text);
    expect_open_error(dir, CAIRN_EFORMAT, "model.layers.9.mlp.up_proj.weight", "not in shard");

    write_text(dir, "model.safetensors.index.json", "{\"weight_map\": [");
    expect_open_error(dir, CAIRN_EFORMAT, "index.json", "not valid JSON");
    write_text(dir, "model.safetensors.index.json", "{\"metadata\": {}}");
    expect_open_error(dir, CAIRN_EFORMAT, "weight_map", NULL);

    /* Restored, it loads (and all three shards were mapped). */
    copy_file("llama31", "model.safetensors.index.json", dir, SIZE_MAX);
    cairn_checkpoint_close(open_ok(dir));
    cJSON_Delete(root);
    remove_dir(dir);
}

/* Unsupported config features are caught at open too, naming the field. */
static void test_config_rope_yarn(void **state)
{
    char *dir = make_tmpdir();
    size_t len;
    char *cfg = read_all(FIX "llama/config.json", &len);
    cJSON *root = cJSON_Parse(cfg);
    cairn_free(cfg);
    cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    cJSON_ReplaceItemInObjectCaseSensitive(rp, "rope_type", cJSON_CreateString("yarn"));
    char *text = cJSON_Print(root);
    write_text(dir, "config.json", text);
    cairn_free(text);
    cJSON_Delete(root);
    copy_file("llama", "model.safetensors", dir, SIZE_MAX);
    expect_open_error(dir, CAIRN_EUNSUPPORTED, "yarn", "config.json");
    remove_dir(dir);
}

static void sweep(const char *dir, bool sticky)
{
    int rc = -1;
    long n;
    for (n = 0; n < 100000 && rc != 0; n++) {
        cairn_checkpoint_t *ck = NULL;
        char err[512] = "";
        cairn_alloc_fail_after(n, sticky);
        rc = cairn_checkpoint_open(dir, &ck, err, sizeof err);
        cairn_alloc_fail_after(-1, false);
        if (rc != 0 && rc != CAIRN_ENOMEM)
            fail_msg("allocation %ld failing gave %d: %s", n, rc, err);
        if (rc == 0)
            cairn_checkpoint_close(ck);
        else
            assert_null(ck);
    }
    assert_int_equal(rc, 0);
    assert_true(n > 10);
}

static void test_alloc_failures(void **state)
{
    sweep(FIX "llama31", false);
    sweep(FIX "llama31", true);
    sweep(FIX "qwen3", false);
}

static void test_bad_args(void **state)
{
    cairn_checkpoint_t *ck = (cairn_checkpoint_t *)1;
    char err[128];
    assert_int_equal(cairn_checkpoint_open(NULL, &ck, err, sizeof err), CAIRN_EINVAL);
    assert_int_equal(cairn_checkpoint_open(FIX "llama", NULL, err, sizeof err), CAIRN_EINVAL);
    /* err may be NULL. */
    assert_int_equal(cairn_checkpoint_open("/nonexistent-cairn", &ck, NULL, 0), CAIRN_ENOENT);
    cairn_checkpoint_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_llama31_sharded_tied),
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_qwen3_bf16_equals_f32),
        cmocka_unit_test(test_digest),
        cmocka_unit_test(test_missing_config),
        cmocka_unit_test(test_no_weights),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_header_length_lies),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_config_shape_mismatch),
        cmocka_unit_test(test_misaligned_copy),
        cmocka_unit_test(test_sharded_errors),
        cmocka_unit_test(test_config_rope_yarn),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
