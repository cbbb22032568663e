/*
 * cmd_check_reference.c — `cairn check-reference MODEL_DIR`: the engine against the HF
 * reference outputs in MODEL_DIR/reference.json, on both K/V paths (see
 * src/tools/reference_check.h for what is compared). Prints one line per (case, path) and
 * ends with "N passed, N failed"; exits 0 only when nothing failed.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tools/reference_check.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cairn check-reference MODEL_DIR [--threads N] [--kv-dtype f32|bf16|f16] [--math f32|bf16]\n"
            "                             [--backend cpu|cuda] [--max-abs-tol X] [--min-margin X] [--verbose]\n"
            "\n"
            "Runs every case of MODEL_DIR/reference.json on the flat and the paged K/V path\n"
            "(the paged one only on a device backend) with float32 math (--math) and compares:\n"
            "last-position logits (max abs diff <= --max-abs-tol, default 2e-3), the\n"
            "teacher-forced argmax at every prompt position (prefill and decode), and the\n"
            "greedy continuation, wherever the reference top-2 margin is >= --min-margin\n"
            "(default 1e-3). --backend cuda computes in bf16 with bf16 K/V (its default):\n"
            "its tolerances default to --max-abs-tol 0.5 --min-margin 0.3 (docs/PERFORMANCE.md).\n");
}

static int run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"threads", required_argument, 0, 't'},
        {"kv-dtype", required_argument, 0, 'k'},
        {"verbose", no_argument, 0, 'v'},
        {"math", required_argument, 0, 'm'},
        {"backend", required_argument, 0, 'b'},
        {"max-abs-tol", required_argument, 0, 'a'},
        {"min-margin", required_argument, 0, 'g'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    refcheck_options_t o;
    refcheck_options_default(&o);
    int verbose = 0, c;
    bool kv_set = false, tol_set = false, margin_set = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:k:vh", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (!strcmp(optarg, "f32"))
                o.math = CAIRN_ENGINE_MATH_F32;
            else if (!strcmp(optarg, "bf16"))
                o.math = CAIRN_ENGINE_MATH_BF16;
            else {
                fprintf(stderr, "cairn check-reference: --math wants f32 or bf16, got '%s'\n", optarg);
                return 2;
            }
            break;
        case 'b':
            o.backend = optarg;
            break;
        case 'a':
        case 'g': {
            char *end;
            double x = strtod(optarg, &end);
            if (*end || !(x >= 0.0) || x > 1e6) {
                fprintf(stderr, "cairn check-reference: --%s wants a number >= 0, got '%s'\n",
                        c == 'a' ? "max-abs-tol" : "min-margin", optarg);
                return 2;
            }
            if (c == 'a') {
                o.max_abs_tol = (float)x;
                tol_set = true;
            } else {
                o.min_margin = (float)x;
                margin_set = true;
            }
            break;
        }
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
                fprintf(stderr, "cairn check-reference: --kv-dtype wants f32, bf16 or f16, got '%s'\n", optarg);
                return 2;
            }
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
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    if (o.backend && !strcmp(o.backend, "cuda")) {
        /* bf16 compute: bf16 K/V and the bf16 tolerances (docs/PERFORMANCE.md, "CUDA backend"). */
        if (!kv_set)
            o.kv_dtype = CAIRN_DTYPE_BF16;
        if (!tol_set)
            o.max_abs_tol = 0.5f;
        if (!margin_set)
            o.min_margin = 0.3f;
    }
    cairn_cli_install_logger(verbose);
    const char *dir = argv[optind];
    refcheck_report_t rep;
    int st = refcheck_run(dir, &o, &rep);
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
        printf("%-20s %-5s %s  max|d| %.2e (decode %.2e)  argmax prefill %d/%d  decode %d/%d  "
               "greedy %d/%d of %d",
               r->name, path, r->passed ? "ok  " : "FAIL", r->max_abs_diff, r->decode_max_abs_diff,
               r->tf_agree, r->tf_checked, r->dec_agree, r->dec_checked, r->greedy_matched,
               r->greedy_checked, r->greedy_total);
        if (r->n_cached)
            printf("  (cached prefix %d)", r->n_cached);
        printf("\n");
        if (!r->passed || verbose)
            if (r->error[0])
                printf("    %s\n", r->error);
        if (verbose)
            printf("    prompt %d tokens, %d positions below the margin threshold\n", r->n_prompt,
                   r->n_prompt - r->dec_checked);
    }
    printf("%d passed, %d failed\n", rep.n_passed, rep.n_failed);
    int status = rep.n_failed ? 1 : 0;
    refcheck_report_free(&rep);
    return status;
}

CAIRN_CLI_COMMAND(check_reference, "check-reference",
                  "compare the engine with a model folder's HF reference outputs", run)
