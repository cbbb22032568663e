/*
 * cmd_check_reference.c — `cairn check-reference MODEL [REF.json]`: the engine against
 * reference outputs (src/tools/reference_check.h for what is compared), on both K/V
 * paths. MODEL is a checkpoint folder or a GGUF file; REF.json defaults to
 * MODEL/reference.json. Prints one line of figures per (case, path) and ends with
 * "N passed, N failed"; exits 0 only when nothing failed.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tools/reference_check.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cairn check-reference MODEL [REF.json] [--threads N] [--kv-dtype T]\n"
            "                             [--math f32|bf16] [--backend cpu|cuda] [--max-diff X]\n"
            "                             [--min-margin M] [--verbose]\n"
            "\n"
            "MODEL is a checkpoint folder or a .gguf file; REF.json defaults to MODEL/reference.json.\n"
            "Runs every case of REF.json on the flat and the paged K/V path (the paged one only on\n"
            "a device backend) and compares the logits at the reference positions (prefill and\n"
            "decode) and the teacher-forced argmax at every prompt position wherever the reference\n"
            "top-2 margin is at least M, and for HF references the greedy continuation. Defaults:\n"
            "an HF reference (last_logits_file) max |diff| 2e-3, M 1e-3; a llama.cpp reference\n"
            "(logits_file, logit_positions) max |diff| 0.1, M 0.25. Logits files are read beside\n"
            "REF.json, or from their .xz twin. --max-abs-tol is --max-diff. --backend cuda computes\n"
            "in bf16 with bf16 K/V (its default): for an HF reference its tolerances default to\n"
            "--max-diff 0.5 --min-margin 0.3 (docs/PERFORMANCE.md).\n");
}

static int parse_float(const char *s, float lo, float *out)
{
    char *end;
    double v = strtod(s, &end);
    if (*end || !(v >= lo) || v > 1e9)
        return -1;
    *out = (float)v;
    return 0;
}

static int run(int argc, char **argv)
{
    enum { OPT_MAX_DIFF = 256, OPT_MIN_MARGIN, OPT_MATH, OPT_BACKEND };
    static const struct option opts[] = {
        {"threads", required_argument, 0, 't'},
        {"kv-dtype", required_argument, 0, 'k'},
        {"math", required_argument, 0, OPT_MATH},
        {"backend", required_argument, 0, OPT_BACKEND},
        {"max-diff", required_argument, 0, OPT_MAX_DIFF},
        {"max-abs-tol", required_argument, 0, OPT_MAX_DIFF},
        {"min-margin", required_argument, 0, OPT_MIN_MARGIN},
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    refcheck_options_t o;
    refcheck_options_default(&o);
    int verbose = 0, c;
    float f;
    bool kv_set = false, tol_set = false, margin_set = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:k:vh", opts, NULL)) != -1) {
        switch (c) {
        case 't': {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || n < 1 || n > 1024) {
                fprintf(stderr, "cairn check-reference: --threads wants 1..1024, got '%s'\n", optarg);
                return 2;
            }
            o.n_threads = (int)n;
            break;
        }
        case 'k':
            kv_set = true;
            if (cairn_dtype_parse(optarg, &o.kv_dtype)) {
                fprintf(stderr, "cairn check-reference: --kv-dtype wants f32, bf16, f16, q8_0 or fp8_e4m3, got '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_MATH:
            if (!strcmp(optarg, "f32"))
                o.math = CAIRN_ENGINE_MATH_F32;
            else if (!strcmp(optarg, "bf16"))
                o.math = CAIRN_ENGINE_MATH_BF16;
            else {
                fprintf(stderr, "cairn check-reference: --math wants f32 or bf16, got '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_MAX_DIFF:
            if (parse_float(optarg, 0.0f, &f)) {
                fprintf(stderr, "cairn check-reference: --max-diff wants a number >= 0, got '%s'\n", optarg);
                return 2;
            }
            o.max_abs_tol = o.peer_max_abs_tol = f;
            tol_set = true;
            break;
        case OPT_MIN_MARGIN:
            if (parse_float(optarg, 0.0f, &f)) {
                fprintf(stderr, "cairn check-reference: --min-margin wants a number >= 0, got '%s'\n", optarg);
                return 2;
            }
            o.min_margin = o.peer_min_margin = f;
            margin_set = true;
            break;
        case OPT_BACKEND:
            o.backend = optarg;
            break;
        case 'v':
            verbose++;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1 && optind != argc - 2) {
        usage(stderr);
        return 2;
    }
    if (o.backend && !strcmp(o.backend, "cuda")) {
        /* bf16 compute: bf16 K/V and, for HF references, the bf16 tolerances
         * (docs/PERFORMANCE.md, "CUDA backend"). */
        if (!kv_set)
            o.kv_dtype = CAIRN_DTYPE_BF16;
        if (!tol_set)
            o.max_abs_tol = 0.5f;
        if (!margin_set)
            o.min_margin = 0.3f;
    }
    cairn_cli_install_logger(verbose);
    const char *model = argv[optind];
    refcheck_report_t rep;
    int st = optind == argc - 2 ? refcheck_run_file(model, argv[optind + 1], &o, &rep)
                                : refcheck_run(model, &o, &rep);
    if (st) {
        fprintf(stderr, "cairn check-reference: %s\n", cairn_strerror(st));
        return 1;
    }
    for (int i = 0; i < rep.n_cases; i++) {
        const refcheck_case_t *r = &rep.cases[i];
        const char *path = !strcmp(r->name, "(model)") ? "-" : r->path == CAIRN_KV_FLAT ? "flat" : "paged";
        if (r->n_prompt == 0) { /* never ran */
            printf("%-20s %-5s FAIL  %s\n", r->name, path, r->error);
            continue;
        }
        printf("%-20s %-5s %s  max|d| %.2e (decode %.2e) at %d positions  argmax prefill %d/%d  "
               "decode %d/%d",
               r->name, path, r->passed ? "ok  " : "FAIL", r->max_abs_diff, r->decode_max_abs_diff,
               r->n_logits, r->tf_agree, r->tf_checked, r->dec_agree, r->dec_checked);
        if (!r->peer)
            printf("  greedy %d/%d of %d", r->greedy_matched, r->greedy_checked, r->greedy_total);
        if (r->n_cached)
            printf("  (cached prefix %d)", r->n_cached);
        printf("\n");
        if (!r->passed || verbose)
            if (r->error[0])
                printf("    %s\n", r->error);
        if (verbose)
            printf("    prompt %d tokens, %d positions below the margin %g, tolerance %g\n",
                   r->n_prompt, r->n_prompt - r->dec_checked, (double)r->margin, (double)r->tol);
    }
    printf("%d passed, %d failed\n", rep.n_passed, rep.n_failed);
    int status = rep.n_failed ? 1 : 0;
    refcheck_report_free(&rep);
    return status;
}

CAIRN_CLI_COMMAND(check_reference, "check-reference",
                  "compare the engine with reference outputs (HF or llama.cpp) of a model", run)
