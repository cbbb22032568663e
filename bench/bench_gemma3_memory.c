/*
 * bench_gemma3_memory.c — the K/V memory of a long Gemma 3 conversation against an
 * all-full-attention cache of the same geometry (issue 10, Performance).
 *
 * The cache is the engine's: the family's declared layout (models/family.h cache_layout:
 * SLIDING(W) for the sliding layers, FULL for the others) handed to the KV core, which
 * groups and pages it exactly as the engine's paged path does. A conversation is fed as
 * the engine feeds it — prompt chunks of 512 tokens, each reserved (append) and then
 * committed — and the pool's blocks in use are read from the core's counters after every
 * commit (the peak) and at the end. No forward pass runs: memory does not depend on the
 * numbers in the blocks, only on which blocks are held. The comparison cache declares
 * every layer FULL (what a dense model of this shape, or an engine without sliding
 * groups, keeps). bf16 K/V, 16-token blocks.
 *
 * usage: bench_gemma3_memory [CONFIG_JSON] [--tokens N[,N...]]
 *   CONFIG_JSON: a Gemma 3 config.json (default: google/gemma-3-1b-it's text config:
 *   26 layers, window 512, every 6th layer full, 1 K/V head of 256).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn/kv_cache.h"
#include "models/family.h"

/* The fields of google/gemma-3-1b-it's config.json that shape its cache. */
static const char gemma3_1b_config[] =
    "{\"architectures\": [\"Gemma3ForCausalLM\"], \"model_type\": \"gemma3_text\", "
    "\"hidden_size\": 1152, \"intermediate_size\": 6912, \"num_hidden_layers\": 26, "
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"head_dim\": 256, "
    "\"vocab_size\": 262144, \"max_position_embeddings\": 32768, \"query_pre_attn_scalar\": 256, "
    "\"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"rope_local_base_freq\": 10000.0, "
    "\"rope_scaling\": null, \"sliding_window\": 512, \"sliding_window_pattern\": 6, "
    "\"hidden_activation\": \"gelu_pytorch_tanh\", \"tie_word_embeddings\": true, "
    "\"eos_token_id\": [1, 106], \"bos_token_id\": 2}";

#define BLOCK 16
#define CHUNK 512

typedef struct {
    uint64_t peak_bytes, end_bytes, block_bytes;
    uint32_t end_blocks, groups;
} usage_t;

/* Feeds n tokens in chunks through a fresh cache of layout specs; fills *u. */
static int run(const cairn_kv_layer_spec_t *specs, int n_layers, int n, usage_t *u)
{
    cairn_kv_config_t kc = {0};
    kc.n_layers = (uint32_t)n_layers;
    kc.layers = specs;
    kc.dtype = CAIRN_DTYPE_BF16;
    kc.block_size = BLOCK;
    kc.memory_mib = 8192;
    kc.initial_mib = 16;
    cairn_kv_cache_t *c;
    int rc = cairn_kv_cache_create(&kc, &c);
    if (rc)
        return rc;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    if (!tok) {
        cairn_kv_cache_destroy(c);
        return CAIRN_ENOMEM;
    }
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)((i * 7919u + 13u) % 262000u);
    cairn_kv_seq_t *s = NULL;
    cairn_kv_stats_t st;
    memset(u, 0, sizeof *u);
    for (int p = 0; p < n && rc == 0; p += CHUNK) {
        int len = n - p < CHUNK ? n - p : CHUNK;
        size_t hit = 0;
        rc = p == 0 ? cairn_kv_seq_begin(c, NULL, NULL, 0, tok, (size_t)len, &s, &hit)
                    : cairn_kv_seq_append(s, tok + p, (size_t)len);
        if (rc == 0) { /* reserved: the step's K/V slots are held while it computes */
            cairn_kv_cache_stats(c, &st);
            if ((uint64_t)st.blocks_in_use * st.block_bytes > u->peak_bytes)
                u->peak_bytes = (uint64_t)st.blocks_in_use * st.block_bytes;
            rc = cairn_kv_seq_commit(s, (size_t)(p + len));
        }
    }
    if (rc == 0) {
        cairn_kv_cache_stats(c, &st);
        u->end_blocks = st.blocks_in_use;
        u->block_bytes = st.block_bytes;
        u->end_bytes = (uint64_t)st.blocks_in_use * st.block_bytes;
    }
    cairn_kv_seq_release(s, NULL);
    cairn_kv_cache_destroy(c);
    free(tok);
    return rc;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) == (size_t)n)
        b[n] = 0;
    else {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

int main(int argc, char **argv)
{
    const char *cfg_path = NULL, *lens = "1024,4096,16384,32768";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            lens = argv[++i];
        else if (argv[i][0] != '-')
            cfg_path = argv[i];
        else {
            fprintf(stderr, "usage: bench_gemma3_memory [CONFIG_JSON] [--tokens N[,N...]]\n");
            return 2;
        }
    }
    char *text = cfg_path ? read_file(cfg_path) : NULL;
    if (cfg_path && !text) {
        fprintf(stderr, "bench_gemma3_memory: cannot read %s\n", cfg_path);
        return 1;
    }
    const char *json = text ? text : gemma3_1b_config;
    cairn_model_t m;
    char err[512] = "";
    int rc = cairn_model_parse_config(json, strlen(json), &m, err, sizeof err);
    free(text);
    if (rc) {
        fprintf(stderr, "bench_gemma3_memory: %s\n", err);
        return 1;
    }
    const int L = m.cfg.n_layers;
    cairn_layer_cache_t *layers = calloc((size_t)L, sizeof *layers);
    cairn_kv_layer_spec_t *paged = calloc((size_t)L, sizeof *paged), *full = calloc((size_t)L, sizeof *full);
    if (!layers || !paged || !full || cairn_model_cache_layout(&m, CAIRN_DTYPE_BF16, layers, NULL)) {
        fprintf(stderr, "bench_gemma3_memory: no cache layout\n");
        return 1;
    }
    int n_sliding = 0, window = 0;
    for (int l = 0; l < L; l++) {
        paged[l] = layers[l].kv;
        full[l] = layers[l].kv;
        full[l].kind = CAIRN_KV_LAYER_FULL;
        full[l].window = 0;
        if (paged[l].kind == CAIRN_KV_LAYER_SLIDING) {
            n_sliding++;
            window = (int)paged[l].window;
        }
    }
    printf("%s (%s): %d layers, %d sliding (window %d) + %d full, %u K/V heads x %u, bf16 K/V, "
           "%d-token blocks, prompt chunks of %d\n",
           cfg_path ? cfg_path : "gemma-3-1b-it", m.cfg.model_type, L, n_sliding, window,
           L - n_sliding, paged[0].n_kv_heads, paged[0].head_dim, BLOCK, CHUNK);
    printf("%8s  %14s %14s  %14s %14s  %8s\n", "tokens", "sliding groups", "(peak)", "all full",
           "(peak)", "ratio");
    for (const char *p = lens; *p;) {
        int n = atoi(p);
        usage_t g, f;
        if (n < 1 || (rc = run(paged, L, n, &g)) || (rc = run(full, L, n, &f))) {
            fprintf(stderr, "bench_gemma3_memory: %d tokens: %s\n", n, cairn_strerror(rc));
            return 1;
        }
        printf("%8d  %10.1f MiB %10.1f MiB  %10.1f MiB %10.1f MiB  %7.1f%%   (%u blocks of %llu KiB vs %u of %llu KiB)\n",
               n, g.end_bytes / 1048576.0, g.peak_bytes / 1048576.0, f.end_bytes / 1048576.0,
               f.peak_bytes / 1048576.0, 100.0 * (double)g.end_bytes / (double)f.end_bytes, g.end_blocks,
               (unsigned long long)g.block_bytes / 1024, f.end_blocks,
               (unsigned long long)f.block_bytes / 1024);
        const char *comma = strchr(p, ',');
        p = comma ? comma + 1 : p + strlen(p);
    }
    free(layers);
    free(paged);
    free(full);
    cairn_model_fini(&m);
    return 0;
}
