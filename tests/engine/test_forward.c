/*
 * Tests for the engine API and the forward pass (include/cairn/engine.h): logits against
 * the HF reference, step validation and logits modes, truncate / fork / end-turn
 * semantics on both K/V paths, prefix reuse and cache-salt isolation, RoPE frequencies,
 * and allocation failures during create and steps.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cairn/engine.h"
#include "engine/engine_fixtures.h"
#include "engine/rope.h"

static cairn_engine_t *make_engine(cairn_checkpoint_t *ck, cairn_kv_path_t path, cairn_dtype_t kv)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.kv_path = path;
    o.kv_dtype = kv;
    o.pool_mib = 16;
    cairn_engine_t *e = NULL;
    char err[256] = "";
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof(err)), 0);
    return e;
}

/* Prefill a prompt in one step; returns a malloc'd copy of the last logits [vocab]. */
static float *prefill_last(cairn_engine_t *e, const int32_t *ids, int n, cairn_seq_t **out)
{
    const int vocab = cairn_engine_config(e)->vocab;
    cairn_seq_t *s;
    assert_int_equal(cairn_seq_begin(e, NULL, ids, n, &s, NULL), 0);
    cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
    const float *lg;
    int rows;
    assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
    assert_int_equal(rows, 1);
    float *copy = malloc((size_t)vocab * sizeof(float));
    memcpy(copy, lg, (size_t)vocab * sizeof(float));
    if (out)
        *out = s;
    else
        cairn_seq_release(s);
    return copy;
}

static void test_defaults_and_bad_options(void **state)
{
    (void)state;
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    assert_int_equal(o.kv_path, CAIRN_KV_PAGED);
    assert_int_equal(o.kv_dtype, CAIRN_DTYPE_BF16);
    assert_int_equal(o.math, CAIRN_ENGINE_MATH_F32);
    assert_int_equal(o.n_threads, 1);

    cairn_checkpoint_t *ck = fixture_open("llama");
    cairn_engine_t *e = NULL;
    char err[256] = "";
    o.n_threads = 0;
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof(err)), CAIRN_EINVAL);
    assert_null(e);
    assert_true(strlen(err) > 0);
    cairn_engine_options_default(&o);
    o.kv_dtype = (cairn_dtype_t)99; /* no element type */
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof(err)), CAIRN_EINVAL);
    o.kv_dtype = CAIRN_DTYPE_Q6_K; /* an element type K/V cannot be stored in */
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof(err)), CAIRN_EUNSUPPORTED);
    assert_null(e);
    cairn_engine_options_default(&o);
    o.math = (cairn_engine_math_t)5;
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof(err)), CAIRN_EINVAL);

    /* NULL options: the defaults; max_context resolves to the model's (capped) maximum. */
    assert_int_equal(cairn_engine_create(ck, NULL, &e, err, sizeof(err)), 0);
    assert_int_equal(cairn_engine_options(e)->max_context, 8192);
    assert_int_equal(cairn_engine_config(e)->vocab, 4096);
    cairn_engine_destroy(e);
    cairn_checkpoint_close(ck);
}

/* The last logits of chat_short match HF's within 2e-3 on every model family and path. */
static void test_logits_match_reference(void **state)
{
    (void)state;
    static const char *models[] = {"llama", "llama31", "qwen3", "qwen3_f32"};
    for (size_t m = 0; m < 4; m++) {
        cairn_checkpoint_t *ck = fixture_open(models[m]);
        const int vocab = cairn_checkpoint_config(ck)->vocab;
        int n;
        int32_t *ids = fixture_prompt(models[m], "chat_short", &n);
        char path[1200];
        snprintf(path, sizeof(path), "%s/ref_chat_short.last_logits.f32", fixture_model_dir(models[m]));
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        float *ref = malloc((size_t)vocab * sizeof(float));
        assert_int_equal(fread(ref, sizeof(float), (size_t)vocab, f), (size_t)vocab);
        fclose(f);
        for (int p = 0; p < 2; p++) {
            cairn_engine_t *e = make_engine(ck, p ? CAIRN_KV_PAGED : CAIRN_KV_FLAT, CAIRN_DTYPE_F32);
            float *lg = prefill_last(e, ids, n, NULL);
            float maxd = 0;
            for (int i = 0; i < vocab; i++)
                maxd = fmaxf(maxd, fabsf(lg[i] - ref[i]));
            assert_true(maxd <= 2e-3f);
            free(lg);
            cairn_engine_destroy(e);
        }
        free(ref);
        free(ids);
        cairn_checkpoint_close(ck);
    }
}

static void test_step_validation_and_logits_modes(void **state)
{
    (void)state;
    cairn_checkpoint_t *ck = fixture_open("llama");
    cairn_engine_t *e = make_engine(ck, CAIRN_KV_FLAT, CAIRN_DTYPE_F32);
    const int32_t bad[2] = {5, 4096};
    cairn_seq_t *s = NULL, *t = NULL;
    assert_int_equal(cairn_seq_begin(e, NULL, bad, 2, &s, NULL), CAIRN_EINVAL);
    assert_null(s);
    const int32_t ids[10] = {4094, 82, 3566, 12, 7, 99, 1000, 2000, 3000, 4095};
    assert_int_equal(cairn_seq_begin(e, NULL, ids, 10, &s, NULL), 0);
    assert_int_equal(cairn_seq_begin(e, NULL, ids, 4, &t, NULL), 0);
    assert_int_equal(cairn_seq_n_pending(s), 10);
    assert_int_equal(cairn_seq_feed(s, bad + 1, 1), CAIRN_EINVAL);
    assert_int_equal(cairn_seq_n_pending(s), 10);

    const float *lg;
    int rows = -1;
    cairn_batch_item_t dup[2] = {{s, 1, CAIRN_LOGITS_LAST}, {s, 1, CAIRN_LOGITS_LAST}};
    assert_int_equal(cairn_engine_step(e, dup, 2, &lg, &rows), CAIRN_EINVAL);
    cairn_batch_item_t too_many = {s, 11, CAIRN_LOGITS_LAST};
    assert_int_equal(cairn_engine_step(e, &too_many, 1, &lg, &rows), CAIRN_EINVAL);
    assert_int_equal(cairn_seq_n_past(s), 0);

    /* NONE: no rows; LAST: one; ALL: one per token, in item order. */
    cairn_batch_item_t items[2] = {{s, 3, CAIRN_LOGITS_NONE}, {t, 2, CAIRN_LOGITS_ALL}};
    assert_int_equal(cairn_engine_step(e, items, 2, &lg, &rows), 0);
    assert_int_equal(rows, 2);
    assert_int_equal(cairn_seq_n_past(s), 3);
    assert_int_equal(cairn_seq_n_past(t), 2);
    items[0] = (cairn_batch_item_t){s, 0, CAIRN_LOGITS_LAST}; /* 0: all 7 pending */
    items[1] = (cairn_batch_item_t){t, 1, CAIRN_LOGITS_ALL};
    assert_int_equal(cairn_engine_step(e, items, 2, &lg, &rows), 0);
    assert_int_equal(rows, 2);
    assert_int_equal(cairn_seq_n_past(s), 10);
    assert_int_equal(cairn_seq_n_pending(s), 0);
    /* Nothing pending: invalid. */
    cairn_batch_item_t none = {s, 0, CAIRN_LOGITS_LAST};
    assert_int_equal(cairn_engine_step(e, &none, 1, &lg, &rows), CAIRN_EINVAL);

    cairn_engine_counters_t c;
    cairn_engine_counters(e, &c);
    assert_int_equal(c.steps, 2);
    assert_int_equal(c.tokens_computed, 13);
    assert_int_equal(c.logits_rows, 4);
    assert_int_equal(c.seqs_begun, 2);
    cairn_seq_release(t);
    cairn_engine_destroy(e); /* releases s */
    cairn_checkpoint_close(ck);
}

/* Truncating and recomputing a token gives the same bits; end_turn drops pending tokens. */
static void test_truncate_and_end_turn(void **state)
{
    (void)state;
    cairn_checkpoint_t *ck = fixture_open("qwen3");
    const int vocab = 4096;
    int n;
    int32_t *ids = fixture_prompt("qwen3", "chat_short", &n);
    for (int p = 0; p < 2; p++) {
        cairn_engine_t *e = make_engine(ck, p ? CAIRN_KV_PAGED : CAIRN_KV_FLAT, CAIRN_DTYPE_BF16);
        cairn_seq_t *s;
        float *first = prefill_last(e, ids, n, &s);
        /* Continue with three tokens, then roll back to n - 1 and recompute the last. */
        const int32_t more[3] = {17, 18, 19};
        assert_int_equal(cairn_seq_feed(s, more, 3), 0);
        cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
        assert_int_equal(cairn_seq_truncate(s, n + 4), CAIRN_EINVAL);
        assert_int_equal(cairn_seq_truncate(s, n - 1), 0);
        assert_int_equal(cairn_seq_n_past(s), n - 1);
        assert_int_equal(cairn_seq_feed(s, &ids[n - 1], 1), 0);
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
        assert_memory_equal(lg, first, (size_t)vocab * sizeof(float));

        assert_int_equal(cairn_seq_feed(s, more, 2), 0);
        assert_int_equal(cairn_seq_end_turn(s), 0);
        assert_int_equal(cairn_seq_n_pending(s), 0);
        assert_int_equal(cairn_seq_n_past(s), n);
        free(first);
        cairn_engine_destroy(e);
    }
    free(ids);
    cairn_checkpoint_close(ck);
}

/* A fork continues exactly like its parent; both can step in one batch. */
static void test_fork(void **state)
{
    (void)state;
    cairn_checkpoint_t *ck = fixture_open("llama31");
    const int vocab = 4096;
    int n;
    int32_t *ids = fixture_prompt("llama31", "chat_short", &n);
    for (int p = 0; p < 2; p++) {
        cairn_engine_t *e = make_engine(ck, p ? CAIRN_KV_PAGED : CAIRN_KV_FLAT, CAIRN_DTYPE_F16);
        cairn_seq_t *s, *c = NULL;
        float *first = prefill_last(e, ids, n, &s);
        const int32_t tok = 300;
        assert_int_equal(cairn_seq_feed(s, &tok, 1), 0);
        assert_int_equal(cairn_seq_fork(s, &c), CAIRN_ESTATE); /* pending token */
        assert_int_equal(cairn_seq_truncate(s, n), 0);
        assert_int_equal(cairn_seq_fork(s, &c), 0);
        assert_int_equal(cairn_seq_n_past(c), n);
        assert_memory_equal(cairn_seq_tokens(c), ids, (size_t)n * sizeof(int32_t));
        assert_int_equal(cairn_seq_feed(s, &tok, 1), 0);
        assert_int_equal(cairn_seq_feed(c, &tok, 1), 0);
        cairn_batch_item_t items[2] = {{s, 1, CAIRN_LOGITS_LAST}, {c, 1, CAIRN_LOGITS_LAST}};
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(e, items, 2, &lg, &rows), 0);
        assert_int_equal(rows, 2);
        assert_memory_equal(lg, lg + vocab, (size_t)vocab * sizeof(float));
        cairn_seq_release(c);
        free(first);
        cairn_engine_destroy(e);
    }
    free(ids);
    cairn_checkpoint_close(ck);
}

/* Paged: a prompt sharing 512 tokens with a computed one reuses 512 (32 blocks of 16) in
 * the same salt, none in another salt; the flat path never reuses. */
static void test_prefix_reuse_and_salt(void **state)
{
    (void)state;
    cairn_checkpoint_t *ck = fixture_open("llama");
    int n_long, n_shared;
    int32_t *lng = fixture_prompt("llama", "long_720", &n_long);
    int32_t *shr = fixture_prompt("llama", "shared_prefix_672", &n_shared);
    assert_memory_equal(lng, shr, 512 * sizeof(int32_t));
    for (int p = 0; p < 2; p++) {
        cairn_engine_t *e = make_engine(ck, p ? CAIRN_KV_PAGED : CAIRN_KV_FLAT, CAIRN_DTYPE_BF16);
        cairn_seq_t *a, *b;
        int cached = -1;
        assert_int_equal(cairn_seq_begin(e, "tenant-a", lng, n_long, &a, &cached), 0);
        assert_int_equal(cached, 0);
        cairn_batch_item_t it = {a, 0, CAIRN_LOGITS_NONE};
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
        assert_int_equal(cairn_seq_end_turn(a), 0);
        cairn_seq_release(a); /* published blocks stay cached */

        assert_int_equal(cairn_seq_begin(e, "tenant-b", shr, n_shared, &b, &cached), 0);
        assert_int_equal(cached, 0);
        cairn_seq_release(b);
        assert_int_equal(cairn_seq_begin(e, "tenant-a", shr, n_shared, &b, &cached), 0);
        assert_int_equal(cached, p ? 512 : 0);
        assert_int_equal(cairn_seq_n_past(b), cached);
        assert_int_equal(cairn_seq_n_pending(b), n_shared - cached);
        cairn_engine_counters_t c;
        cairn_engine_counters(e, &c);
        assert_int_equal(c.tokens_reused, (uint64_t)cached);
        /* The whole prompt cached: the last token is still computed. */
        cairn_seq_t *w;
        assert_int_equal(cairn_seq_begin(e, "tenant-a", lng, 513, &w, &cached), 0);
        assert_int_equal(cached, p ? 512 : 0);
        cairn_seq_release(w);
        cairn_seq_release(b);
        cairn_engine_destroy(e);
    }
    free(lng);
    free(shr);
    cairn_checkpoint_close(ck);
}

static void test_max_context(void **state)
{
    (void)state;
    cairn_checkpoint_t *ck = fixture_open("llama");
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.kv_path = CAIRN_KV_FLAT;
    o.max_context = 8;
    o.max_step_tokens = 3; /* an 8-token prompt runs as sub-batches 3 + 3 + 2 */
    cairn_engine_t *e = NULL;
    assert_int_equal(cairn_engine_create(ck, &o, &e, NULL, 0), 0);
    const int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    cairn_seq_t *s;
    assert_int_equal(cairn_seq_begin(e, NULL, ids, 9, &s, NULL), CAIRN_ERANGE);
    assert_int_equal(cairn_seq_begin(e, NULL, ids, 8, &s, NULL), 0);
    assert_int_equal(cairn_seq_feed(s, ids, 1), CAIRN_ERANGE);
    cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_ALL};
    const float *lg;
    int rows;
    assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
    assert_int_equal(rows, 8);
    cairn_engine_destroy(e);
    cairn_checkpoint_close(ck);
}

/* Llama 3 scaling: high frequencies unchanged, low ones divided by factor, a blend between. */
static void test_rope_llama3(void **state)
{
    (void)state;
    cairn_checkpoint_t *ck = fixture_open("llama31");
    cairn_model_config_t cfg = *cairn_checkpoint_config(ck);
    assert_int_equal(cfg.rope_type, CAIRN_ROPE_LLAMA3);
    float scaled[64], plain[64];
    assert_int_equal(rope_inv_freq(&cfg, scaled), 0);
    cfg.rope_type = CAIRN_ROPE_DEFAULT;
    assert_int_equal(rope_inv_freq(&cfg, plain), 0);
    const int half = cfg.head_dim / 2;
    assert_true(plain[0] == 1.0f); /* theta^0 */
    int n_high = 0, n_low = 0, n_mid = 0;
    for (int i = 0; i < half; i++) {
        float wavelen = 2.0f * (float)M_PI / plain[i];
        if (wavelen < (float)cfg.rope_orig_max_pos / cfg.rope_high_freq_factor) {
            assert_true(scaled[i] == plain[i]);
            n_high++;
        } else if (wavelen > (float)cfg.rope_orig_max_pos / cfg.rope_low_freq_factor) {
            assert_true(scaled[i] == plain[i] / cfg.rope_factor);
            n_low++;
        } else {
            assert_true(scaled[i] < plain[i] && scaled[i] > plain[i] / cfg.rope_factor);
            n_mid++;
        }
        if (i > 0)
            assert_true(plain[i] < plain[i - 1]);
    }
    assert_true(n_high > 0 && n_low > 0 && n_mid > 0);
    cairn_checkpoint_close(ck);
}

/* Every allocation of create, begin and step may fail: clean errors, no leaks, and a
 * later successful run still matches. */
static void test_allocation_failures(void **state)
{
    (void)state;
    cairn_checkpoint_t *ck = fixture_open("qwen3");
    const int32_t ids[20] = {4094, 82, 3566, 12, 7, 99, 1000, 2000, 3000, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    float *want = NULL;
    for (int p = 0; p < 2; p++) {
        bool done = false;
        for (long k = 0; !done && k < 10000; k++) {
            cairn_engine_options_t o;
            cairn_engine_options_default(&o);
            o.kv_path = p ? CAIRN_KV_PAGED : CAIRN_KV_FLAT;
            o.pool_mib = 4;
            o.n_threads = 2;
            cairn_engine_t *e = NULL;
            cairn_seq_t *s = NULL;
            const float *lg = NULL;
            int rows = 0;
            cairn_alloc_fail_after(k, false);
            int rc = cairn_engine_create(ck, &o, &e, NULL, 0);
            if (rc == 0)
                rc = cairn_seq_begin(e, NULL, ids, 20, &s, NULL);
            if (rc == 0) {
                cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
                rc = cairn_engine_step(e, &it, 1, &lg, &rows);
            }
            cairn_alloc_fail_after(-1, false);
            if (rc == 0) {
                done = true;
                if (!want) {
                    want = malloc(4096 * sizeof(float));
                    memcpy(want, lg, 4096 * sizeof(float));
                } else {
                    assert_memory_equal(lg, want, 4096 * sizeof(float));
                }
            } else {
                assert_true(rc == CAIRN_ENOMEM || rc == CAIRN_EEXHAUSTED);
            }
            cairn_engine_destroy(e);
        }
        assert_true(done);
    }
    free(want);
    cairn_checkpoint_close(ck);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_bad_options),
        cmocka_unit_test(test_logits_match_reference),
        cmocka_unit_test(test_step_validation_and_logits_modes),
        cmocka_unit_test(test_truncate_and_end_turn),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_prefix_reuse_and_salt),
        cmocka_unit_test(test_max_context),
        cmocka_unit_test(test_rope_llama3),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
