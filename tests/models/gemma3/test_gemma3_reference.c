/*
 * Gemma 3 against HF transformers (fixtures/models/gemma3, computed by transformers 5.17
 * in float32): the check-reference logic (src/tools/reference_check.c) through the
 * engine, on the flat and the paged K/V paths, 1 and 2 threads — last-position logits
 * within 2e-3, the teacher-forced argmax at every position whose reference top-2 margin
 * is >= 1e-3 by prefill and by token-at-a-time decode, the greedy continuation under the
 * same margin rule. On the paged path shared_prefix_672 is served 512 tokens from the
 * cache (the sliding layers' blocks inside the window, the full layer's whole chain).
 *
 * Usage: test_gemma3_reference [MODEL_DIR] (default: the fixture), so reference files of
 * the same format with other geometries run through the same checks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "tools/reference_check.h"

static const char *model_dir = CAIRN_FIXTURES_DIR "/models/gemma3";

static void check(int threads, cairn_dtype_t kv)
{
    refcheck_options_t o;
    refcheck_options_default(&o);
    o.n_threads = threads;
    o.kv_dtype = kv;
    refcheck_report_t rep;
    assert_int_equal(refcheck_run(model_dir, &o, &rep), 0);
    bool saw_hit = false;
    for (int i = 0; i < rep.n_cases; i++) {
        const refcheck_case_t *c = &rep.cases[i];
        fprintf(stderr, "%s [%s, %d thread(s), %s K/V]: %s; prefill max |dlogit| %.3g (%d cached), "
                "decode %.3g; argmax %d/%d prefill, %d/%d decode; greedy %d/%d\n",
                c->name, c->path == CAIRN_KV_FLAT ? "flat" : "paged", threads, cairn_dtype_name(kv),
                c->passed ? "ok" : c->error, c->max_abs_diff, c->n_cached, c->decode_max_abs_diff,
                c->tf_agree, c->tf_checked, c->dec_agree, c->dec_checked, c->greedy_matched,
                c->greedy_total);
        assert_true(c->passed);
        assert_true(c->tf_checked + c->n_cached >= c->n_prompt - 2); /* near-ties are skipped */
        assert_true(c->greedy_matched >= 1);
        saw_hit |= c->path == CAIRN_KV_PAGED && c->n_cached > 0;
    }
    assert_int_equal(rep.n_failed, 0);
    assert_true(rep.n_passed >= 2);
    assert_true(saw_hit);
    refcheck_report_free(&rep);
}

static void test_f32_kv_1_thread(void **state) { (void)state; check(1, CAIRN_DTYPE_F32); }
static void test_f32_kv_2_threads(void **state) { (void)state; check(2, CAIRN_DTYPE_F32); }

int main(int argc, char **argv)
{
    if (argc > 1)
        model_dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_kv_1_thread),
        cmocka_unit_test(test_f32_kv_2_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
