/*
 * reference_check.h — compares the engine with reference outputs of another engine.
 *
 * A reference file (format: /work/shared/fixtures/README.md) lists cases, each with
 * prompt_ids and the teacher-forced argmax_per_position and top2_margin_per_position,
 * plus reference logits in one of two layouts:
 *   - HF transformers (models/<m>/reference.json): last_logits_file, the float32 LE
 *     logits [vocab] at the last prompt position, and greedy_ids with greedy_top2_margin;
 *   - llama.cpp (gguf/<m>/<m>-<type>.ref.json): logit_positions and logits_file, the
 *     float32 LE logits [positions][vocab] at those positions (n_vocab must be the
 *     model's); no greedy continuation.
 * Logits files are named relative to the reference file's folder; when a file is absent,
 * its ".xz"-compressed twin beside it is read instead (the fixtures ship them so).
 * Each layout has its own tolerances: an HF reference is an exact float32 computation
 * (max_abs_tol, min_margin), a llama.cpp reference another engine's arithmetic
 * (peer_max_abs_tol, peer_min_margin). For every case and both K/V paths the check runs:
 *   1. prefill: the whole prompt in one step, logits at every computed position
 *      (positions served by the prefix cache are not recomputed and not compared);
 *      logits at the reference positions within the tolerance, argmax equal to the
 *      reference wherever its margin >= the margin threshold;
 *   2. greedy (HF layout): the continuation fed token by token, each argmax equal to
 *      greedy_ids up to the first step whose reference margin is below the threshold;
 *   3. decode: a fresh sequence fed the prompt one token at a time, the same argmax and
 *      logits checks at every position.
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
    cairn_engine_math_t math;/* default f32 */
    const char *backend;     /* default NULL: the cpu backend */
    float max_abs_tol;       /* HF layout: default 2e-3 */
    float min_margin;        /* HF layout: default 1e-3 */
    float peer_max_abs_tol;  /* llama.cpp layout: default 0.1 */
    float peer_min_margin;   /* llama.cpp layout: default 0.25 */
} refcheck_options_t;

typedef struct {
    char name[96];           /* case name from reference.json */
    cairn_kv_path_t path;
    bool passed;
    char error[1400];        /* non-empty when the case could not run or failed */
    bool peer;               /* a llama.cpp-layout case */
    float tol, margin;       /* the thresholds this case was held to */
    int n_prompt;
    int n_cached;            /* prefill tokens served by the prefix cache */
    int n_logits;            /* reference positions compared in prefill */
    double max_abs_diff;     /* prefill logits vs the file, max over n_logits positions */
    double decode_max_abs_diff; /* the same on the decode path, every reference position */
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
 * Runs the check of the model at `model` (a checkpoint folder or a GGUF file) against the
 * reference file ref_path. Problems (no reference file, a checkpoint that does not open, a
 * logits file of the wrong size, a vocabulary that differs) become failed entries with
 * their message in `error`, so the report always accounts for them. Returns CAIRN_OK when
 * the report is filled (even with failures), CAIRN_ENOMEM otherwise. Free with
 * refcheck_report_free().
 */
int refcheck_run_file(const char *model, const char *ref_path, const refcheck_options_t *o,
                      refcheck_report_t *rep);
/* refcheck_run_file(model_dir, model_dir/reference.json, ...). */
int refcheck_run(const char *model_dir, const refcheck_options_t *o, refcheck_report_t *rep);
void refcheck_report_free(refcheck_report_t *rep);

#endif
