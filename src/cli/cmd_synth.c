/*
 * cmd_synth.c — `cairn synth`: writes a seeded random checkpoint (tools/synth.h).
 *
 * Only option parsing lives here. A --preset is applied first, whatever its position, so
 * the other options override it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn/common.h"
#include "cli/cli.h"
#include "tools/synth.h"

static void usage(FILE *out)
{
    cairn_synth_options_t d;
    cairn_synth_options_default(&d);
    fprintf(out,
            "usage: cairn synth OUT_DIR [options]\n"
            "\n"
            "Writes a random checkpoint, deterministic in the seed, in the Hugging Face\n"
            "layout: config.json, generation_config.json, model.safetensors (or shards with\n"
            "model.safetensors.index.json), a byte-level BPE tokenizer.json (256 byte tokens,\n"
            "merged tokens up to the vocab, <|endoftext|> <|im_start|> <|im_end|> as the last\n"
            "three ids), tokenizer_config.json and chat_template.jinja (ChatML, eos <|im_end|>).\n"
            "OUT_DIR is created if missing; files in it are replaced atomically.\n"
            "\n"
            "options (defaults are the 'tiny' preset):\n"
            "  --preset NAME      tiny | llama-8l | qwen3-8l | qwen3-0.6b | gemma3-1b |\n"
            "                     lfm2-1.2b | qwen3.5-0.8b (applied first)\n"
            "  --arch A           llama | qwen3 | gemma3 | lfm2 (default llama; lfm2: every\n"
            "                     third layer from layer 2 attends, the others are 3-tap convs)\n"
            "  --layers N         hidden layers (default %d)\n"
            "  --hidden N         hidden size (default %d)\n"
            "  --heads N          attention heads (default %d)\n"
            "  --kv-heads N       key/value heads, divides --heads (default %d)\n"
            "  --head-dim N       head dimension, even (default %d)\n"
            "  --ffn N            MLP intermediate size (default %d)\n"
            "  --vocab N          vocabulary size, at least 259 (default %d)\n"
            "  --tied             tie lm_head to the embeddings (default untied)\n"
            "  --untied           do not tie (overrides a tied preset)\n"
            "  --dtype T          bf16 | f16 | f32 (default bf16)\n"
            "  --seed N           random seed (default 0)\n"
            "  --rope-theta X     RoPE base (default %g)\n"
            "  --rms-eps X        RMSNorm epsilon (default %g)\n"
            "  --max-pos N        max_position_embeddings (default %d)\n"
            "  --shards N         weight files; above 1 writes an index (default 1)\n"
            "  --window N         gemma3: the sliding layers' window (default 512)\n"
            "  --pattern N        gemma3: every N-th layer is full attention (default 6)\n"
            "  --attn-layers LIST lfm2: the attention layers, e.g. 2,5,8 (the rest convolve)\n"
            "  --conv-taps N      lfm2: taps of the short convolution (default 3)\n"
            "\n"
            "presets: llama-8l (8 layers, hidden 512, 8/2 heads, head_dim 64, ffn 1536,\n"
            "vocab 32000, untied); qwen3-8l (qwen3, 8 layers, hidden 1024, 16/8 heads,\n"
            "head_dim 128, ffn 3072, vocab 32000, tied); qwen3-0.6b (the Qwen3-0.6B shape:\n"
            "28 layers, hidden 1024, 16/8 heads, head_dim 128, ffn 3072, vocab 151936, tied,\n"
            "rope_theta 1e6; about 1.2 GB in bf16); gemma3-1b (the gemma-3-1b-it text shape:\n"
            "26 layers, every 6th full attention, the others sliding over 512 tokens, hidden\n"
            "1152, 4/1 heads, head_dim 256, ffn 6912, vocab 262144, tied; about 2 GB in bf16);\n"
            "lfm2-1.2b (the LFM2-1.2B shape: 16\n"
            "layers, attention at 2, 5, 8, 10, 12, 14 and 3-tap gated convolutions elsewhere,\n"
            "hidden 2048, 32/8 heads, head_dim 64, ffn 8192, vocab 65536, tied; about 2.3 GB\n"
            "in bf16); qwen3.5-0.8b (the Qwen3.5-0.8B text model: 24 layers, 3 Gated\n"
            "DeltaNet (16/16 heads of 128, conv 4) to 1 gated attention (8/2 heads, head_dim\n"
            "256, partial rotary 0.25), hidden 1024, ffn 3584, vocab 248320, tied, rope_theta\n"
            "1e7; about 1.5 GB in bf16).\n",
            d.n_layers, d.hidden, d.n_heads, d.n_kv_heads, d.head_dim, d.ffn, d.vocab,
            d.rope_theta, d.rms_eps, d.max_pos);
}

static int parse_int(const char *opt, const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "cairn synth: %s needs an integer in [%ld, %ld], got '%s'\n", opt, lo, hi,
                s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_double(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0)) {
        fprintf(stderr, "cairn synth: %s needs a positive number, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int cmd_synth(int argc, char **argv)
{
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    const char *dir = NULL;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--preset")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "cairn synth: --preset needs a value\n");
                return 2;
            }
            if (cairn_synth_options_preset(argv[i + 1], &o) != 0) {
                fprintf(stderr, "cairn synth: unknown preset '%s' (see --help)\n", argv[i + 1]);
                return 2;
            }
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] == '\0') {
            if (dir) {
                fprintf(stderr, "cairn synth: more than one OUT_DIR ('%s', '%s')\n", dir, a);
                return 2;
            }
            dir = a;
            continue;
        }
        if (!strcmp(a, "--tied")) {
            o.tied = true;
            continue;
        }
        if (!strcmp(a, "--untied")) {
            o.tied = false;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "cairn synth: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0, n;
        if (!strcmp(a, "--preset")) {
            /* applied above */
        } else if (!strcmp(a, "--arch")) {
            if (!strcmp(v, "llama")) {
                o.arch = CAIRN_SYNTH_LLAMA;
            } else if (!strcmp(v, "qwen3")) {
                o.arch = CAIRN_SYNTH_QWEN3;
            } else if (!strcmp(v, "gemma3")) {
                o.arch = CAIRN_SYNTH_GEMMA3;
            } else if (!strcmp(v, "lfm2")) {
                o.arch = CAIRN_SYNTH_LFM2;
            } else {
                fprintf(stderr, "cairn synth: --arch must be llama, qwen3, gemma3 or lfm2, got '%s'\n", v);
                rc = -1;
            }
        } else if (!strcmp(a, "--dtype")) {
            if (cairn_dtype_parse(v, &o.dtype) != 0) {
                fprintf(stderr, "cairn synth: --dtype must be bf16, f16 or f32, got '%s'\n", v);
                rc = -1;
            }
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || end == v || *end || v[0] == '-') {
                fprintf(stderr, "cairn synth: --seed needs a non-negative integer, got '%s'\n", v);
                rc = -1;
            }
            o.seed = s;
        } else if (!strcmp(a, "--attn-layers")) {
            /* lfm2: comma-separated attention layer indices (< 64) */
            o.attn_layers = 0;
            for (const char *p = v; rc == 0 && *p;) {
                char *end;
                errno = 0;
                long l = strtol(p, &end, 10);
                if (errno || end == p || l < 0 || l >= 64 || (*end && *end != ',')) {
                    fprintf(stderr, "cairn synth: --attn-layers needs indices below 64 like 2,5,8, got '%s'\n", v);
                    rc = -1;
                    break;
                }
                o.attn_layers |= 1ull << l;
                p = *end ? end + 1 : end;
            }
        } else if (!strcmp(a, "--rope-theta")) {
            rc = parse_double(a, v, &o.rope_theta);
        } else if (!strcmp(a, "--rms-eps")) {
            rc = parse_double(a, v, &o.rms_eps);
        } else {
            static const struct {
                const char *opt;
                size_t off;
            } ints[] = {
                {"--layers", offsetof(cairn_synth_options_t, n_layers)},
                {"--hidden", offsetof(cairn_synth_options_t, hidden)},
                {"--heads", offsetof(cairn_synth_options_t, n_heads)},
                {"--kv-heads", offsetof(cairn_synth_options_t, n_kv_heads)},
                {"--head-dim", offsetof(cairn_synth_options_t, head_dim)},
                {"--ffn", offsetof(cairn_synth_options_t, ffn)},
                {"--vocab", offsetof(cairn_synth_options_t, vocab)},
                {"--max-pos", offsetof(cairn_synth_options_t, max_pos)},
                {"--shards", offsetof(cairn_synth_options_t, n_shards)},
                {"--window", offsetof(cairn_synth_options_t, sliding_window)},
                {"--pattern", offsetof(cairn_synth_options_t, sliding_pattern)},
                {"--conv-taps", offsetof(cairn_synth_options_t, conv_taps)},
            };
            size_t k = 0;
            while (k < CAIRN_ARRAY_LEN(ints) && strcmp(a, ints[k].opt) != 0)
                k++;
            if (k == CAIRN_ARRAY_LEN(ints)) {
                fprintf(stderr, "cairn synth: unknown option '%s' (see --help)\n", a);
                return 2;
            }
            rc = parse_int(a, v, 1, 1L << 30, &n);
            if (rc == 0)
                memcpy((char *)&o + ints[k].off, &n, sizeof n);
        }
        if (rc)
            return 2;
    }
    if (!dir) {
        usage(stderr);
        return 2;
    }

    char err[512] = "";
    int rc = cairn_synth_write(dir, &o, err, sizeof err);
    if (rc) {
        fprintf(stderr, "cairn: %s\n", err[0] ? err : cairn_strerror(rc));
        return rc == CAIRN_EINVAL ? 2 : 1;
    }
    return 0;
}

CAIRN_CLI_COMMAND(synth, "synth", "write a seeded random checkpoint (HF layout)", cmd_synth)
