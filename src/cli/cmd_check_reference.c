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
            "usage: cairn check-reference MODEL_DIR [--threads N] [--kv-dtype f32|bf16|f16] [--verbose]\n"
            "\n"
            "Runs every case of MODEL_DIR/reference.json on the flat and the paged K/V path\n"
            "with float32 math and compares: last-position logits (max abs diff <= 2e-3),\n"
            "the teacher-forced argmax at every prompt position (prefill and decode), and\n"
            "the greedy continuation, wherever the reference top-2 margin is >= 1e-3.\n");
}

static int run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"threads", required_argument, 0, 't'},
        {"kv-dtype", required_argument, 0, 'k'},
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    refcheck_options_t o;
    refcheck_options_default(&o);
    int verbose = 0, c;
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
