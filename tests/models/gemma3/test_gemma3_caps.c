/*
 * Gemma 3's optional math through the forward pass (issue 10: "attention/final logit
 * soft-capping when configured", "rope_theta + rope_scaling for the full layers"). The
 * fixture configures none of it, so each test writes a variant of models/gemma3 (the same
 * weights, config.json changed) and checks an exact relation with the plain model:
 *   - final_logit_softcapping c: every logit is tanhf(u / c) * c of the uncapped logit u,
 *     bit for bit (HF: logits / c, tanh, * c);
 *   - attn_logit_softcapping: a cap of 2^100 is the identity in float32 (s / 2^100 is
 *     exact, tanhf of so small a number is the number, * 2^100 is exact), so the logits
 *     equal the uncapped ones bit for bit — the capped path of attention computes what the
 *     plain one does; a cap of 1 changes them; and with both caps on, flat vs paged and
 *     chunks of 1 / 7 keep memcmp identity;
 *   - linear RoPE scaling: the legacy rope_scaling block scales the full layers, exactly
 *     like rope_parameters.full_attention with the same factor and unlike the same factor
 *     on the sliding layers; factor 1 is the plain model bit for bit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <math.h>
#include <cmocka.h>

#include "cairn/engine.h"
#include "engine/engine_fixtures.h"

#define MODEL "gemma3"
#define VOCAB 4096
#define ROW (VOCAB * sizeof(float))

static int32_t *ids;
static int n_ids;
static float *plain; /* [n_ids][VOCAB] the fixture's logits, flat, whole prompt */

/* Logits of every position of the prompt, malloc'd: path, chunk (0: one step). */
static float *logits_of(const cairn_checkpoint_t *ck, cairn_kv_path_t path, int chunk)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.kv_path = path;
    o.kv_dtype = CAIRN_DTYPE_F32;
    o.pool_mib = 16;
    o.cold = -1;
    cairn_engine_t *e = NULL;
    char err[256] = "";
    if (cairn_engine_create(ck, &o, &e, err, sizeof err) != 0)
        fail_msg("engine: %s", err);
    cairn_seq_t *s;
    assert_int_equal(cairn_seq_begin(e, NULL, ids, n_ids, &s, NULL), 0);
    float *out = malloc((size_t)n_ids * ROW);
    for (int done = 0; done < n_ids;) {
        int len = chunk && chunk < n_ids - done ? chunk : n_ids - done;
        cairn_batch_item_t it = {s, len, CAIRN_LOGITS_ALL};
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
        assert_int_equal(rows, len);
        memcpy(out + (size_t)done * VOCAB, lg, (size_t)rows * ROW);
        done += rows;
    }
    cairn_seq_release(s);
    cairn_engine_destroy(e);
    return out;
}

/* The fixture with `fields` (a JSON object's members, merged over config.json: null
 * removes a member) in a temp folder; returns the opened checkpoint, the folder in dir. */
static cairn_checkpoint_t *variant(const char *fields, char *dir)
{
    strcpy(dir, "/tmp/cairn-gemma3-caps-XXXXXX");
    assert_non_null(mkdtemp(dir));
    static const char *const linked[] = {"model.safetensors", "tokenizer.json", "tokenizer_config.json",
                                         "generation_config.json", "chat_template.jinja"};
    char src[1200], dst[1200];
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(linked); i++) {
        snprintf(src, sizeof src, "%s/%s", fixture_model_dir(MODEL), linked[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, linked[i]);
        assert_int_equal(symlink(src, dst), 0);
    }
    snprintf(src, sizeof src, "%s/config.json", fixture_model_dir(MODEL));
    FILE *f = fopen(src, "rb");
    assert_non_null(f);
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    cJSON *cfg = cJSON_Parse(text), *add = cJSON_Parse(fields), *e;
    assert_non_null(cfg);
    assert_non_null(add);
    cJSON_ArrayForEach(e, add) {
        cJSON_DeleteItemFromObject(cfg, e->string);
        if (!cJSON_IsNull(e))
            cJSON_AddItemToObject(cfg, e->string, cJSON_Duplicate(e, true));
    }
    char *out = cJSON_Print(cfg);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    f = fopen(dst, "wb");
    assert_non_null(f);
    fputs(out, f);
    assert_int_equal(fclose(f), 0);
    cJSON_free(out);
    cJSON_Delete(cfg);
    cJSON_Delete(add);
    cairn_checkpoint_t *ck = NULL;
    char err[512] = "";
    if (cairn_checkpoint_open(dir, &ck, err, sizeof err) != 0)
        fail_msg("variant %s: %s", fields, err);
    return ck;
}

static void drop(cairn_checkpoint_t *ck, const char *dir)
{
    cairn_checkpoint_close(ck);
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static double max_diff(const float *a, const float *b)
{
    double m = 0;
    for (size_t i = 0; i < (size_t)n_ids * VOCAB; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

static void test_final_softcap(void **state)
{
    (void)state;
    char dir[64];
    cairn_checkpoint_t *ck = variant("{\"final_logit_softcapping\": 1.5}", dir);
    float *got = logits_of(ck, CAIRN_KV_FLAT, 0);
    size_t bent = 0;
    for (size_t i = 0; i < (size_t)n_ids * VOCAB; i++) {
        const float want = tanhf(plain[i] / 1.5f) * 1.5f;
        if (memcmp(&got[i], &want, sizeof want) != 0)
            fail_msg("logit %zu: %.9g, expected tanh(%.9g / 1.5) * 1.5 = %.9g", i, got[i], plain[i], want);
        bent += fabsf(plain[i]) > 0.5f;
    }
    assert_true(bent > 1000); /* the cap bends many logits: the relation is not trivial */
    fprintf(stderr, "final soft cap 1.5: %zu logits of |u| > 0.5 bent, every one exact\n", bent);
    free(got);
    drop(ck, dir);
}

static void test_attn_softcap(void **state)
{
    (void)state;
    char dir[64];
    /* 2^100: the identity in float32. */
    cairn_checkpoint_t *ck = variant("{\"attn_logit_softcapping\": 1.2676506002282294e30}", dir);
    float *got = logits_of(ck, CAIRN_KV_FLAT, 0);
    assert_memory_equal(got, plain, (size_t)n_ids * ROW);
    free(got);
    drop(ck, dir);
    /* A cap of 1 (scores are O(1) here) bites. */
    ck = variant("{\"attn_logit_softcapping\": 1.0}", dir);
    got = logits_of(ck, CAIRN_KV_FLAT, 0);
    const double d = max_diff(got, plain);
    fprintf(stderr, "attention soft cap 1: max |dlogit| %.3g from the plain model\n", d);
    assert_true(d > 1e-3);
    free(got);
    drop(ck, dir);
    /* Both caps on: flat vs paged, chunks of 1 and 7, bit for bit. */
    ck = variant("{\"attn_logit_softcapping\": 2.0, \"final_logit_softcapping\": 3.0}", dir);
    float *ref = logits_of(ck, CAIRN_KV_FLAT, 0);
    static const int chunks[] = {0, 1, 7};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(chunks); i++) {
        got = logits_of(ck, CAIRN_KV_PAGED, chunks[i]);
        assert_memory_equal(got, ref, (size_t)n_ids * ROW);
        free(got);
    }
    free(ref);
    drop(ck, dir);
}

static void test_linear_rope_on_full_layers(void **state)
{
    (void)state;
    char dir[64];
    /* Factor 1 is the plain model. */
    cairn_checkpoint_t *ck = variant("{\"rope_parameters\": null, \"rope_theta\": 1000000.0, "
                                     "\"rope_local_base_freq\": 10000.0, \"rope_scaling\": "
                                     "{\"rope_type\": \"linear\", \"factor\": 1.0}}", dir);
    float *got = logits_of(ck, CAIRN_KV_FLAT, 0);
    assert_memory_equal(got, plain, (size_t)n_ids * ROW);
    free(got);
    drop(ck, dir);
    /* The legacy spelling scales the full layers: exactly rope_parameters.full_attention. */
    ck = variant("{\"rope_parameters\": null, \"rope_theta\": 1000000.0, \"rope_local_base_freq\": "
                 "10000.0, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}}", dir);
    float *legacy = logits_of(ck, CAIRN_KV_FLAT, 0);
    drop(ck, dir);
    ck = variant("{\"rope_parameters\": {\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 8.0, "
                 "\"rope_theta\": 1000000.0}, \"sliding_attention\": {\"rope_type\": \"default\", "
                 "\"rope_theta\": 10000.0}}}", dir);
    float *full = logits_of(ck, CAIRN_KV_FLAT, 0);
    drop(ck, dir);
    ck = variant("{\"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\", "
                 "\"rope_theta\": 1000000.0}, \"sliding_attention\": {\"rope_type\": \"linear\", "
                 "\"factor\": 8.0, \"rope_theta\": 10000.0}}}", dir);
    float *sliding = logits_of(ck, CAIRN_KV_FLAT, 0);
    drop(ck, dir);
    assert_memory_equal(legacy, full, (size_t)n_ids * ROW);
    const double d_plain = max_diff(full, plain), d_sliding = max_diff(full, sliding);
    fprintf(stderr, "linear factor 8 on the full layers: max |dlogit| %.3g from the plain model, "
                    "%.3g from the same factor on the sliding layers\n", d_plain, d_sliding);
    assert_true(d_plain > 1e-4);
    assert_true(d_sliding > 1e-4);
    free(legacy);
    free(full);
    free(sliding);
}

static int setup(void **state)
{
    (void)state;
    ids = fixture_prompt(MODEL, "long_720", &n_ids);
    n_ids = 160; /* positions well past the window (32) and the first blocks */
    cairn_checkpoint_t *ck = fixture_open(MODEL);
    plain = logits_of(ck, CAIRN_KV_FLAT, 0);
    cairn_checkpoint_close(ck);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(ids);
    free(plain);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_final_softcap),
        cmocka_unit_test(test_attn_softcap),
        cmocka_unit_test(test_linear_rope_on_full_layers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
