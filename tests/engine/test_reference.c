/*
 * Reference parity (issue 4): the check-reference logic (src/engine/reference_check.c)
 * passes on every fixture family — llama, llama31 (llama3 rope, tied, sharded), qwen3
 * and qwen3_f32 — on both K/V paths with f32 K/V and float32 math; and a broken model
 * folder (missing reference, truncated logits file) is reported as failures, not a crash.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "engine/engine_fixtures.h"
#include "tools/reference_check.h"

static void check_model(const char *model, int threads)
{
    refcheck_options_t o;
    refcheck_options_default(&o);
    o.n_threads = threads;
    refcheck_report_t rep;
    assert_int_equal(refcheck_run(fixture_model_dir(model), &o, &rep), 0);
    for (int i = 0; i < rep.n_cases; i++) {
        const refcheck_case_t *c = &rep.cases[i];
        if (!c->passed)
            fprintf(stderr, "%s/%s [%s]: %s\n", model, c->name,
                    c->path == CAIRN_KV_FLAT ? "flat" : "paged", c->error);
        assert_true(c->passed);
        /* Every position compared somewhere: prefill covers what the cache did not
         * serve, the decode path covers the whole prompt. */
        assert_int_equal(c->tf_checked + c->n_cached, c->n_prompt);
        assert_int_equal(c->dec_checked, c->n_prompt);
        assert_true(c->greedy_matched >= 1);
        assert_true(c->max_abs_diff <= 2e-3);
    }
    assert_int_equal(rep.n_failed, 0);
    assert_int_equal(rep.n_passed, 6); /* 3 cases x 2 paths */
    /* On the paged path the shared-prefix case is served 512 tokens from the cache. */
    bool saw_hit = false;
    for (int i = 0; i < rep.n_cases; i++)
        saw_hit |= rep.cases[i].path == CAIRN_KV_PAGED && rep.cases[i].n_cached == 512;
    assert_true(saw_hit);
    refcheck_report_free(&rep);
}

static void test_llama(void **state) { (void)state; check_model("llama", 1); }
static void test_llama31(void **state) { (void)state; check_model("llama31", 2); }
static void test_qwen3(void **state) { (void)state; check_model("qwen3", 1); }
static void test_qwen3_f32(void **state) { (void)state; check_model("qwen3_f32", 2); }

static void link_into(const char *dir, const char *model, const char *name)
{
    char src[1200], dst[1200];
    snprintf(src, sizeof(src), "%s/%s", fixture_model_dir(model), name);
    snprintf(dst, sizeof(dst), "%s/%s", dir, name);
    assert_int_equal(symlink(src, dst), 0);
}

/* A folder with the llama weights, its reference.json, and a truncated logits file for
 * chat_short (the other cases' logits files missing): every case fails with a message. */
static void test_broken_folder(void **state)
{
    (void)state;
    char dir[] = "/tmp/cairn-refcheck-XXXXXX";
    assert_non_null(mkdtemp(dir));
    link_into(dir, "llama", "config.json");
    link_into(dir, "llama", "generation_config.json");
    link_into(dir, "llama", "model.safetensors");
    refcheck_options_t o;
    refcheck_options_default(&o);
    refcheck_report_t rep;

    /* No reference.json: one failure naming it. */
    assert_int_equal(refcheck_run(dir, &o, &rep), 0);
    assert_int_equal(rep.n_passed, 0);
    assert_int_equal(rep.n_failed, 1);
    assert_non_null(strstr(rep.cases[0].error, "reference.json"));
    refcheck_report_free(&rep);

    link_into(dir, "llama", "reference.json");
    char path[1200];
    snprintf(path, sizeof(path), "%s/ref_chat_short.last_logits.f32", dir);
    FILE *f = fopen(path, "wb");
    float zeros[100] = {0};
    fwrite(zeros, sizeof(float), 100, f);
    fclose(f);
    assert_int_equal(refcheck_run(dir, &o, &rep), 0);
    assert_int_equal(rep.n_passed, 0);
    assert_int_equal(rep.n_failed, 6);
    assert_non_null(strstr(rep.cases[0].error, "expected 16384 bytes"));
    assert_non_null(strstr(rep.cases[2].error, "cannot open"));
    refcheck_report_free(&rep);

    /* A model folder that does not exist. */
    assert_int_equal(refcheck_run("/nonexistent/cairn-model", &o, &rep), 0);
    assert_int_equal(rep.n_failed, 1);
    assert_true(strlen(rep.cases[0].error) > 0);
    refcheck_report_free(&rep);

    static const char *names[] = {"config.json", "generation_config.json", "model.safetensors",
                                  "reference.json", "ref_chat_short.last_logits.f32"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(names); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* Wrong logits values (the right size) fail the last-logits comparison. */
static void test_wrong_logits(void **state)
{
    (void)state;
    char dir[] = "/tmp/cairn-refcheck-XXXXXX";
    assert_non_null(mkdtemp(dir));
    static const char *names[] = {"config.json", "generation_config.json", "model.safetensors",
                                  "reference.json", "ref_long_720.last_logits.f32",
                                  "ref_shared_prefix_672.last_logits.f32"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(names); i++)
        link_into(dir, "qwen3", names[i]);
    char src[1200], dst[1200];
    snprintf(src, sizeof(src), "%s/ref_chat_short.last_logits.f32", fixture_model_dir("qwen3"));
    snprintf(dst, sizeof(dst), "%s/ref_chat_short.last_logits.f32", dir);
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    float v[4096];
    assert_int_equal(fread(v, sizeof(float), 4096, in), 4096);
    v[100] += 0.01f;
    fwrite(v, sizeof(float), 4096, out);
    fclose(in);
    fclose(out);
    refcheck_options_t o;
    refcheck_options_default(&o);
    refcheck_report_t rep;
    assert_int_equal(refcheck_run(dir, &o, &rep), 0);
    assert_int_equal(rep.n_failed, 2); /* chat_short on both paths */
    assert_int_equal(rep.n_passed, 4);
    assert_false(rep.cases[0].passed);
    assert_true(rep.cases[0].max_abs_diff > 9e-3);
    assert_non_null(strstr(rep.cases[0].error, "last logits differ"));
    refcheck_report_free(&rep);
    unlink(dst);
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(names); i++) {
        snprintf(dst, sizeof(dst), "%s/%s", dir, names[i]);
        unlink(dst);
    }
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_llama31),
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_qwen3_f32),
        cmocka_unit_test(test_broken_folder),
        cmocka_unit_test(test_wrong_logits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
