/*
 * reference_check.h — compares the engine with reference outputs of HF transformers.
 *
 * A model folder's reference.json (format: /work/shared/fixtures/README.md) lists cases,
 * each with prompt_ids, the teacher-forced argmax_per_position and
 * top2_margin_per_position, greedy_ids with greedy_top2_margin, and last_logits_file (the
 * float32 LE logits [vocab] at the last prompt position). For every case and both K/V paths
 * the check runs, with float32 math:
 *   1. prefill: the whole prompt in one step, logits at every computed position
 *      (positions served by the prefix cache are not recomputed and not compared);
 *      last-position logits within max_abs_tol of the file, argmax equal to the
 *      reference wherever its margin >= min_margin;
 *   2. greedy: the continuation fed token by token, each argmax equal to greedy_ids up to
 *      the first step whose reference margin is below min_margin;
 *   3. decode: a fresh sequence fed the prompt one token at a time, the same argmax and
 *      last-logits checks.
 * Options choose the math mode, the compute backend (a device backend runs the paged path
 * only) and the tolerances (bf16 compute needs wider ones than the float32 defaults).
 * The library prints nothing: results come back in a report the caller renders.
 */
#ifndef CAIRN_TOOLS_REFERENCE_CHECK_H
#define CAIRN_TOOLS_REFERENCE_CHECK_H

#include "cairn/engine.h"

typedef struct {
    int n_threads;           /* default 1 */
    cairn_dtype_t kv_dtype;  /* default f32 */
    float max_abs_tol;       /* default 2e-3 */
    float min_margin;        /* default 1e-3 */
    cairn_engine_math_t math;/* default f32 */
    const char *backend;     /* default NULL: the cpu backend */
} refcheck_options_t;

typedef struct {
    char name[96];           /* case name from reference.json */
    cairn_kv_path_t path;
    bool passed;
    char error[1400];        /* non-empty when the case could not run or failed */
    int n_prompt;
    int n_cached;            /* prefill tokens served by the prefix cache */
    double max_abs_diff;     /* prefill last-position logits vs the file */
    double decode_max_abs_diff;
    int tf_checked, tf_agree;     /* prefill positions with margin >= min, agreeing */
    int dec_checked, dec_agree;   /* decode-path positions */
    int greedy_checked, greedy_matched, greedy_total;
    int first_bad_pos;       /* first disagreeing position (-1: none) */
    int first_bad_ours, first_bad_ref;
} refcheck_case_t;

typedef struct {
    refcheck_case_t *cases;  /* [n_cases] one per (case, path) */
    int n_cases;
    int n_passed, n_failed;
} refcheck_report_t;

void refcheck_options_default(refcheck_options_t *o);
/*
 * Runs the check on model_dir. Problems with the folder (no reference.json, a checkpoint
 * that does not open, a logits file of the wrong size) become failed entries with their
 * message in `error`, so the report always accounts for them. Returns CAIRN_OK when the
 * report is filled (even with failures), CAIRN_ENOMEM otherwise. Free with
 * refcheck_report_free().
 */
int refcheck_run(const char *model_dir, const refcheck_options_t *o, refcheck_report_t *rep);
void refcheck_report_free(refcheck_report_t *rep);

#endif
