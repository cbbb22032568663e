/*
 * family_wrapper.c — a multimodal wrapper checkpoint runs its text model (issue 10:
 * "gemma3 whose text_config holds the text model", "qwen3_5 with text_config").
 *
 * From the text-model fixture models/<FIXTURE> the test writes, in a temp folder, the
 * checkpoint a ...ForConditionalGeneration save looks like: config.json with the wrapper's
 * model_type, the text model's fields under "text_config" and the special tokens at the
 * top level only; model.safetensors with every "model.X" tensor renamed PREFIX + "X"
 * (lm_head.weight stays at the top), plus the vision/MTP tensors named on the command
 * line, which the family must leave unbound. The wrapper must open with the same config
 * (layers, sizes, eos ids, tied embeddings) and give the same logits, bit for bit, at every
 * position of chat_short as the text model.
 *
 * Usage: FAMILY_TEST FIXTURE WRAPPER_MODEL_TYPE PREFIX[,PREFIX...] [EXTRA_TENSOR...]; each
 * family's tests/models/<family>/CMakeLists.txt registers it for its wrapper layouts.
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

#include "cairn/engine.h"
#include "engine/engine_fixtures.h"

static const char *g_fixture, *g_wrapper;
static char g_prefixes[512];
static char **g_extra;
static int g_n_extra;

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void put_file(const char *dir, const char *name, const void *data, size_t len)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* config.json of the wrapper: the fixture's object as text_config, specials moved up. */
static void write_config(const char *dir)
{
    char path[1200];
    size_t len;
    snprintf(path, sizeof path, "%s/config.json", fixture_model_dir(g_fixture));
    char *text = slurp(path, &len);
    cJSON *tc = cJSON_Parse(text);
    free(text);
    assert_non_null(tc);
    cJSON *top = cJSON_CreateObject();
    cJSON_AddStringToObject(top, "model_type", g_wrapper);
    static const char *const up[] = {"eos_token_id", "bos_token_id"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(up); i++) {
        cJSON *v = cJSON_DetachItemFromObject(tc, up[i]);
        if (v)
            cJSON_AddItemToObject(top, up[i], v);
    }
    cJSON_AddItemToObject(top, "text_config", tc);
    cJSON_AddItemToObject(top, "vision_config", cJSON_CreateObject());
    char *out = cJSON_PrintUnformatted(top);
    put_file(dir, "config.json", out, strlen(out));
    cJSON_free(out);
    cJSON_Delete(top);
}

/* model.safetensors with the text model's tensors under `prefix` and the extra (ignored)
 * tensors appended: bf16 [2] zeros each. */
static void write_weights(const char *dir, const char *prefix)
{
    char path[1200];
    size_t len;
    snprintf(path, sizeof path, "%s/model.safetensors", fixture_model_dir(g_fixture));
    char *file = slurp(path, &len);
    uint64_t hlen;
    memcpy(&hlen, file, 8);
    assert_true(8 + hlen <= len);
    cJSON *h = cJSON_ParseWithLength(file + 8, (size_t)hlen);
    assert_non_null(h);
    const char *data = file + 8 + hlen;
    const size_t data_len = len - 8 - (size_t)hlen;

    cJSON *nh = cJSON_CreateObject();
    cJSON *e = h->child;
    int renamed = 0;
    while (e) {
        cJSON *next = e->next;
        char name[512];
        if (!strncmp(e->string, "model.", 6)) {
            snprintf(name, sizeof name, "%s%s", prefix, e->string + 6);
            renamed++;
        } else {
            snprintf(name, sizeof name, "%s", e->string);
        }
        cJSON_AddItemToObject(nh, name, cJSON_DetachItemViaPointer(h, e));
        e = next;
    }
    assert_true(renamed > 10);
    for (int i = 0; i < g_n_extra; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "dtype", "BF16");
        const int shape[1] = {2};
        cJSON_AddItemToObject(t, "shape", cJSON_CreateIntArray(shape, 1));
        const int off[2] = {(int)data_len + 4 * i, (int)data_len + 4 * i + 4};
        cJSON_AddItemToObject(t, "data_offsets", cJSON_CreateIntArray(off, 2));
        cJSON_AddItemToObject(nh, g_extra[i], t);
    }
    char *hj = cJSON_PrintUnformatted(nh);
    size_t hj_len = strlen(hj), padded = (hj_len + 7) / 8 * 8;
    size_t out_len = 8 + padded + data_len + 4 * (size_t)g_n_extra;
    char *out = calloc(1, out_len);
    assert_non_null(out);
    uint64_t ph = padded;
    memcpy(out, &ph, 8);
    memset(out + 8, ' ', padded);
    memcpy(out + 8, hj, hj_len);
    memcpy(out + 8 + padded, data, data_len);
    put_file(dir, "model.safetensors", out, out_len);
    free(out);
    cJSON_free(hj);
    cJSON_Delete(nh);
    cJSON_Delete(h);
    free(file);
}

/* Logits of every position of ids on the flat path, malloc'd [n][vocab]. */
static float *logits_of(const cairn_checkpoint_t *ck, const int32_t *ids, int n)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.kv_path = CAIRN_KV_FLAT;
    o.kv_dtype = CAIRN_DTYPE_F32;
    o.cold = -1;
    cairn_engine_t *e = NULL;
    char err[256] = "";
    if (cairn_engine_create(ck, &o, &e, err, sizeof err) != 0)
        fail_msg("engine: %s", err);
    cairn_seq_t *s;
    assert_int_equal(cairn_seq_begin(e, NULL, ids, n, &s, NULL), 0);
    cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_ALL};
    const float *lg;
    int rows;
    assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
    assert_int_equal(rows, n);
    const size_t bytes = (size_t)n * (size_t)cairn_checkpoint_config(ck)->vocab * sizeof(float);
    float *out = malloc(bytes);
    memcpy(out, lg, bytes);
    cairn_seq_release(s);
    cairn_engine_destroy(e);
    return out;
}

static void test_wrapper_runs_the_text_model(void **state)
{
    (void)state;
    cairn_checkpoint_t *text = fixture_open(g_fixture);
    const cairn_model_config_t *tc = cairn_checkpoint_config(text);
    int n = 0;
    int32_t *ids = fixture_prompt(g_fixture, "chat_short", &n);
    float *want = logits_of(text, ids, n);

    char prefixes[512];
    snprintf(prefixes, sizeof prefixes, "%s", g_prefixes);
    int layouts = 0;
    for (char *save = NULL, *prefix = strtok_r(prefixes, ",", &save); prefix;
         prefix = strtok_r(NULL, ",", &save), layouts++) {
        char dir[] = "/tmp/cairn-wrapper-XXXXXX";
        assert_non_null(mkdtemp(dir));
        write_config(dir);
        write_weights(dir, prefix);
        static const char *const linked[] = {"tokenizer.json", "tokenizer_config.json",
                                             "generation_config.json", "chat_template.jinja"};
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(linked); i++) {
            char src[1200], dst[1200];
            snprintf(src, sizeof src, "%s/%s", fixture_model_dir(g_fixture), linked[i]);
            snprintf(dst, sizeof dst, "%s/%s", dir, linked[i]);
            assert_int_equal(symlink(src, dst), 0);
        }
        cairn_checkpoint_t *wrapped = NULL;
        char err[512] = "";
        if (cairn_checkpoint_open(dir, &wrapped, err, sizeof err) != 0)
            fail_msg("%s wrapper with tensors under %s: %s", g_wrapper, prefix, err);
        const cairn_model_config_t *wc = cairn_checkpoint_config(wrapped);
        assert_string_equal(wc->family, tc->family);
        assert_string_equal(wc->model_type, g_wrapper);
        assert_int_equal(wc->n_layers, tc->n_layers);
        assert_int_equal(wc->hidden, tc->hidden);
        assert_int_equal(wc->vocab, tc->vocab);
        assert_int_equal(wc->tie_embeddings, tc->tie_embeddings);
        assert_int_equal(wc->bos_id, tc->bos_id);
        assert_int_equal(wc->n_eos, tc->n_eos);
        assert_memory_equal(wc->eos_ids, tc->eos_ids, (size_t)tc->n_eos * sizeof(tc->eos_ids[0]));
        float *got = logits_of(wrapped, ids, n);
        assert_memory_equal(got, want, (size_t)n * (size_t)tc->vocab * sizeof(float));
        fprintf(stderr, "%s as %s, tensors under %s (+%d ignored): %d positions, same bits\n",
                g_fixture, g_wrapper, prefix, g_n_extra, n);
        free(got);
        cairn_checkpoint_close(wrapped);
        char cmd[1300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
    }
    assert_true(layouts >= 1);
    free(want);
    free(ids);
    cairn_checkpoint_close(text);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s FIXTURE WRAPPER_MODEL_TYPE PREFIX[,PREFIX...] [EXTRA_TENSOR...]\n",
                argv[0]);
        return 2;
    }
    g_fixture = argv[1];
    g_wrapper = argv[2];
    snprintf(g_prefixes, sizeof g_prefixes, "%s", argv[3]);
    g_extra = argv + 4;
    g_n_extra = argc - 4;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrapper_runs_the_text_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
