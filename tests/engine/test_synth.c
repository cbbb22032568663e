/*
 * test_synth.c — synthesized checkpoints load back with the requested config, are
 * byte-for-byte deterministic in the seed (and independent of the shard count), ship a
 * coherent byte-level tokenizer, and fail cleanly on bad options and write errors.
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
#include <errno.h>
#include <math.h>
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
#include "tools/synth.h"

static char *make_tmpdir(void)
{
    char tmpl[] = "/tmp/cairn-synth-XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    return strdup(tmpl);
}

static int count_entries(const char *dir, const char *containing)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && (!containing || strstr(e->d_name, containing)))
            n++;
    closedir(d);
    return n;
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

static char *read_in(const char *dir, const char *name, size_t *len)
{
    char p[1024], err[256], *buf = NULL;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int rc = st_read_file(p, (size_t)64 << 20, &buf, len, err, sizeof err);
    if (rc)
        fail_msg("%s", err);
    return buf;
}

static bool same_file(const char *d1, const char *d2, const char *name)
{
    size_t l1, l2;
    char *a = read_in(d1, name, &l1), *b = read_in(d2, name, &l2);
    bool same = l1 == l2 && memcmp(a, b, l1) == 0;
    cairn_free(a);
    cairn_free(b);
    return same;
}

static void synth_ok(const char *dir, const cairn_synth_options_t *o)
{
    char err[512] = "";
    int rc = cairn_synth_write(dir, o, err, sizeof err);
    if (rc)
        fail_msg("synth: %d %s", rc, err);
}

static float elem(const cairn_tensor_t *t, size_t i)
{
    if (t->dtype == CAIRN_DTYPE_F32)
        return ((const float *)t->data)[i];
    uint16_t h = ((const uint16_t *)t->data)[i];
    if (t->dtype == CAIRN_DTYPE_BF16) {
        uint32_t bits = (uint32_t)h << 16;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e ? ldexpf((float)(m | 0x400), e - 25) : ldexpf((float)m, -24);
    return (h & 0x8000) ? -v : v;
}

static void test_roundtrip_llama(void **state)
{
    char *dir = make_tmpdir();
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    o.n_layers = 3;
    o.hidden = 96;
    o.n_heads = 6;
    o.n_kv_heads = 2;
    o.head_dim = 32;
    o.ffn = 160;
    o.vocab = 300;
    o.max_pos = 4096;
    o.rope_theta = 250000.0;
    o.rms_eps = 1e-5;
    o.seed = 42;
    synth_ok(dir, &o);

    cairn_checkpoint_t *ck;
    char err[512] = "";
    assert_int_equal(cairn_checkpoint_open(dir, &ck, err, sizeof err), 0);
    const cairn_model_config_t *c = cairn_checkpoint_config(ck);
    assert_string_equal(c->model_type, "llama");
    assert_int_equal(c->n_layers, 3);
    assert_int_equal(c->hidden, 96);
    assert_int_equal(c->n_heads, 6);
    assert_int_equal(c->n_kv_heads, 2);
    assert_int_equal(c->head_dim, 32);
    assert_int_equal(c->ffn, 160);
    assert_int_equal(c->vocab, 300);
    assert_int_equal(c->max_pos, 4096);
    assert_float_equal(c->rope_theta, 250000.0f, 0);
    assert_float_equal(c->rms_eps, 1e-5f, 1e-12);
    assert_false(c->tie_embeddings);
    assert_int_equal(c->n_eos, 1);
    assert_int_equal(c->eos_ids[0], 299);
    assert_int_equal(c->bos_id, -1);

    const llama_weights_t *w = ckpt_weights(ck);
    assert_ptr_not_equal(w->lm_head.data, w->embed.data);
    assert_int_equal(w->layers[2].wq.shape[0], 192);
    assert_int_equal(w->layers[2].wk.shape[0], 64);
    assert_int_equal(w->embed.dtype, CAIRN_DTYPE_BF16);
    /* Sane scales: projections ~ N(0, 0.02), norms near 1. */
    double sum2 = 0;
    size_t n = (size_t)w->layers[0].w_up.shape[0] * (size_t)w->layers[0].w_up.shape[1];
    for (size_t i = 0; i < n; i++)
        sum2 += (double)elem(&w->layers[0].w_up, i) * elem(&w->layers[0].w_up, i);
    double sd = sqrt(sum2 / (double)n);
    assert_true(sd > 0.018 && sd < 0.022);
    for (int i = 0; i < 96; i++) {
        float v = elem(&w->layers[1].attn_norm, (size_t)i);
        assert_true(v > 0.85f && v < 1.15f);
    }
    cairn_checkpoint_close(ck);
    remove_dir(dir);
}

static void test_roundtrip_qwen3_sharded_dtypes(void **state)
{
    const cairn_dtype_t dts[] = {CAIRN_DTYPE_F32, CAIRN_DTYPE_F16, CAIRN_DTYPE_BF16};
    char *ref_dir = make_tmpdir();
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    o.arch = CAIRN_SYNTH_QWEN3;
    o.tied = true;
    o.seed = 7;
    o.dtype = CAIRN_DTYPE_F32;
    synth_ok(ref_dir, &o);
    cairn_checkpoint_t *ref;
    char err[512] = "";
    assert_int_equal(cairn_checkpoint_open(ref_dir, &ref, err, sizeof err), 0);
    for (size_t k = 0; k < 3; k++) {
        char *dir = make_tmpdir();
        o.dtype = dts[k];
        o.n_shards = 4;
        synth_ok(dir, &o);
        assert_int_equal(count_entries(dir, "-of-00004.safetensors"), 4);
        assert_int_equal(count_entries(dir, ".tmp."), 0);
        cairn_checkpoint_t *ck;
        assert_int_equal(cairn_checkpoint_open(dir, &ck, err, sizeof err), 0);
        const cairn_model_config_t *c = cairn_checkpoint_config(ck);
        assert_string_equal(c->model_type, "qwen3");
        assert_true(c->tie_embeddings);
        const llama_weights_t *w = ckpt_weights(ck);
        const llama_weights_t *rw = ckpt_weights(ref);
        assert_ptr_equal(w->lm_head.data, w->embed.data);
        assert_int_equal(w->layers[1].q_norm.shape[0], 16);
        assert_int_equal(w->layers[1].k_norm.dtype, dts[k]);
        /* Same seed, other dtype or sharding: the same values up to the dtype's rounding. */
        for (size_t i = 0; i < 64 * 192; i++) {
            float a = elem(&w->layers[1].w_down, i), b = elem(&rw->layers[1].w_down, i);
            assert_true(fabsf(a - b) <= fabsf(b) * (k == 1 ? 1e-3f : 8e-3f) + 1e-7f);
        }
        cairn_checkpoint_close(ck);
        remove_dir(dir);
    }
    cairn_checkpoint_close(ref);
    remove_dir(ref_dir);
}

static void test_deterministic_in_seed(void **state)
{
    char *a = make_tmpdir(), *b = make_tmpdir(), *c = make_tmpdir();
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    o.seed = 1234;
    synth_ok(a, &o);
    synth_ok(b, &o);
    o.seed = 1235;
    synth_ok(c, &o);
    const char *files[] = {"model.safetensors", "config.json", "generation_config.json",
                           "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(files); i++)
        assert_true(same_file(a, b, files[i]));
    assert_false(same_file(a, c, "model.safetensors"));
    assert_true(same_file(a, c, "config.json"));

    /* Rewriting a folder sharded removes the stale single file; seed-equal values. */
    o.seed = 1234;
    o.n_shards = 2;
    synth_ok(b, &o);
    assert_int_equal(count_entries(b, "model.safetensors"), 1); /* only the index */
    cairn_checkpoint_t *ca, *cb;
    char err[512];
    assert_int_equal(cairn_checkpoint_open(a, &ca, err, sizeof err), 0);
    assert_int_equal(cairn_checkpoint_open(b, &cb, err, sizeof err), 0);
    const llama_weights_t *wa = ckpt_weights(ca), *wb = ckpt_weights(cb);
    assert_memory_equal(wa->embed.data, wb->embed.data, 512 * 64 * 2);
    assert_memory_equal(wa->lm_head.data, wb->lm_head.data, 512 * 64 * 2);
    uint8_t da[32], db[32];
    cairn_checkpoint_weights_digest(ca, da);
    cairn_checkpoint_weights_digest(cb, db);
    assert_memory_not_equal(da, db, 32);
    cairn_checkpoint_close(ca);
    cairn_checkpoint_close(cb);
    remove_dir(a);
    remove_dir(b);
    remove_dir(c);
}

static void test_tokenizer_files(void **state)
{
    char *dir = make_tmpdir();
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    o.vocab = 70000; /* two-byte merges (65536) and some three-byte ones */
    o.n_layers = 1;
    o.hidden = 16;
    o.n_heads = 2;
    o.n_kv_heads = 1;
    o.head_dim = 8;
    o.ffn = 16;
    synth_ok(dir, &o);
    size_t len;
    char *text = read_in(dir, "tokenizer.json", &len);
    cJSON *tok = cJSON_ParseWithLength(text, len);
    cairn_free(text);
    assert_non_null(tok);
    cJSON *model = cJSON_GetObjectItemCaseSensitive(tok, "model");
    cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    assert_int_equal(cJSON_GetArraySize(vocab), 70000 - 3);
    assert_int_equal(cJSON_GetArraySize(merges), 70000 - 3 - 256);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(model, "type")->valuestring, "BPE");
    /* GPT-2 byte order: '!' is 0, 'A' is 32, the space byte is shown as U+0120 at 220. */
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(vocab, "!")->valueint, 0);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(vocab, "A")->valueint, 32);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(vocab, "\xc4\xa0")->valueint, 220);
    /* Each merge makes the token with the next id, from parts that already exist. */
    int id = 256;
    cJSON *m;
    cJSON_ArrayForEach(m, merges)
    {
        const char *l = cJSON_GetArrayItem(m, 0)->valuestring, *r = cJSON_GetArrayItem(m, 1)->valuestring;
        cJSON *lid = cJSON_GetObjectItemCaseSensitive(vocab, l);
        cJSON *rid = cJSON_GetObjectItemCaseSensitive(vocab, r);
        assert_non_null(lid);
        assert_non_null(rid);
        assert_true(lid->valueint < id && rid->valueint < 256);
        if (id % 4999 == 0 || id == 70000 - 4) {
            char joined[64];
            snprintf(joined, sizeof joined, "%s%s", l, r);
            assert_int_equal(cJSON_GetObjectItemCaseSensitive(vocab, joined)->valueint, id);
        }
        id++;
    }
    cJSON *added = cJSON_GetObjectItemCaseSensitive(tok, "added_tokens");
    assert_int_equal(cJSON_GetArraySize(added), 3);
    const char *names[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    for (int i = 0; i < 3; i++) {
        cJSON *t = cJSON_GetArrayItem(added, i);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(t, "content")->valuestring, names[i]);
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(t, "id")->valueint, 70000 - 3 + i);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "special")));
    }
    cJSON *dec = cJSON_GetObjectItemCaseSensitive(tok, "decoder");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(dec, "type")->valuestring, "ByteLevel");
    cJSON_Delete(tok);

    text = read_in(dir, "tokenizer_config.json", &len);
    cJSON *tc = cJSON_ParseWithLength(text, len);
    cairn_free(text);
    assert_non_null(tc);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(tc, "eos_token")->valuestring, "<|im_end|>");
    assert_non_null(strstr(cJSON_GetObjectItemCaseSensitive(tc, "chat_template")->valuestring,
                           "<|im_start|>assistant"));
    cJSON_Delete(tc);
    remove_dir(dir);
}

static void test_presets_and_bad_options(void **state)
{
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    assert_int_equal(cairn_synth_options_preset("qwen3-0.6b", &o), 0);
    assert_int_equal(o.n_layers, 28);
    assert_int_equal(o.vocab, 151936);
    assert_true(o.tied);
    assert_float_equal(o.rope_theta, 1e6, 0);
    assert_int_equal(cairn_synth_options_preset("llama-8l", &o), 0);
    assert_int_equal(o.hidden, 512);
    assert_int_equal(o.n_kv_heads, 2);
    assert_false(o.tied);
    assert_int_equal(cairn_synth_options_preset("qwen3-8l", &o), 0);
    assert_int_equal(o.arch, CAIRN_SYNTH_QWEN3);
    assert_int_equal(cairn_synth_options_preset("gpt2", &o), CAIRN_EINVAL);

    char *dir = make_tmpdir();
    char err[256];
    cairn_synth_options_default(&o);
    o.vocab = 258;
    assert_int_equal(cairn_synth_write(dir, &o, err, sizeof err), CAIRN_EINVAL);
    assert_non_null(strstr(err, "vocab"));
    cairn_synth_options_default(&o);
    o.n_kv_heads = 3;
    assert_int_equal(cairn_synth_write(dir, &o, err, sizeof err), CAIRN_EINVAL);
    assert_non_null(strstr(err, "kv-heads"));
    cairn_synth_options_default(&o);
    o.head_dim = 15;
    assert_int_equal(cairn_synth_write(dir, &o, err, sizeof err), CAIRN_EINVAL);
    assert_non_null(strstr(err, "head-dim"));
    cairn_synth_options_default(&o);
    o.n_shards = 1000;
    assert_int_equal(cairn_synth_write(dir, &o, err, sizeof err), CAIRN_EINVAL);
    assert_non_null(strstr(err, "shards"));
    assert_int_equal(count_entries(dir, NULL), 0);
    remove_dir(dir);
}

/* I/O failure injection: fail the n-th hooked operation of the given kind. */
static struct {
    const char *op;
    int countdown;
    int err;
} inject;

static int io_hook(const char *op, const char *path, void *user)
{
    if (inject.op && !strcmp(op, inject.op) && inject.countdown-- == 0)
        return inject.err;
    return 0;
}

static void test_write_failures(void **state)
{
    const char *ops[] = {"open", "write", "fsync", "rename"};
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    o.n_shards = 2;
    cairn_io_set_hook(io_hook, NULL);
    for (size_t k = 0; k < CAIRN_ARRAY_LEN(ops); k++) {
        for (int n = 0;; n++) {
            char *dir = make_tmpdir();
            char err[512] = "";
            inject.op = ops[k];
            inject.countdown = n;
            inject.err = (n % 2) ? -ENOSPC : -EIO;
            int rc = cairn_synth_write(dir, &o, err, sizeof err);
            bool fired = inject.countdown < 0;
            inject.op = NULL;
            assert_int_equal(count_entries(dir, ".tmp."), 0);
            remove_dir(dir);
            if (!fired) {
                assert_int_equal(rc, 0);
                assert_true(n > 3);
                break;
            }
            assert_int_equal(rc, (n % 2) ? CAIRN_ENOSPC : CAIRN_EIO);
            assert_true(err[0] != '\0');
        }
    }
    cairn_io_set_hook(NULL, NULL);
}

static void test_alloc_failures(void **state)
{
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    o.vocab = 300;
    o.n_shards = 2;
    o.arch = CAIRN_SYNTH_QWEN3;
    int rc = -1;
    long n;
    /* Every allocation of the first few hundred (options, config, headers, the start of
     * the tokenizer), then a stride through the tokenizer's thousands of small ones. */
    for (n = 0; n < 1000000 && rc != 0; n += n < 300 ? 1 : 61) {
        char *dir = make_tmpdir();
        char err[512] = "";
        cairn_alloc_fail_after(n, false);
        rc = cairn_synth_write(dir, &o, err, sizeof err);
        cairn_alloc_fail_after(-1, false);
        if (rc != 0 && rc != CAIRN_ENOMEM)
            fail_msg("allocation %ld failing gave %d: %s", n, rc, err);
        assert_int_equal(count_entries(dir, ".tmp."), 0);
        remove_dir(dir);
    }
    assert_int_equal(rc, 0);
    assert_true(n > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_llama),
        cmocka_unit_test(test_roundtrip_qwen3_sharded_dtypes),
        cmocka_unit_test(test_deterministic_in_seed),
        cmocka_unit_test(test_tokenizer_files),
        cmocka_unit_test(test_presets_and_bad_options),
        cmocka_unit_test(test_write_failures),
        cmocka_unit_test(test_alloc_failures),
    };
    if (getenv("CAIRN_TEST_FILTER"))
        cmocka_set_test_filter(getenv("CAIRN_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
