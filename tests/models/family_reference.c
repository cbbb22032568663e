/*
 * A model family against HF transformers (fixtures/models/<FIXTURE>, computed by
 * transformers 5.17 in float32): the check-reference logic (src/tools/reference_check.c,
 * what `cairn check-reference` runs) through the engine, on the flat and the paged K/V
 * paths, on 2 threads (or THREADS; the determinism tests prove every thread count gives
 * the same bits) — last-position logits within 2e-3, the teacher-forced argmax at
 * every position whose reference top-2 margin is >= 1e-3 by prefill and by
 * token-at-a-time decode, the greedy continuation under the same margin rule. On the
 * paged path a later case is served part of its prompt from the cache (shared_prefix_672
 * shares 512 tokens with long_720: all of them for attention-only families, the deepest
 * recurrent checkpoint below them for a family with recurrent layers).
 *
 * Usage: FAMILY_TEST MODEL_DIR [THREADS] — each family's tests/models/<family>/
 * CMakeLists.txt passes its fixture; reference files of the same format with other
 * geometries run through the same checks by passing their folder.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tools/reference_check.h"

static const char *model_dir;

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

static int n_threads = 2;

static void test_f32_kv(void **state)
{
    (void)state;
    check(n_threads, CAIRN_DTYPE_F32);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3 || (argc == 3 && (n_threads = atoi(argv[2])) < 1)) {
        fprintf(stderr, "usage: %s MODEL_DIR [THREADS (default 2)]\n", argv[0]);
        return 2;
    }
    model_dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_kv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
