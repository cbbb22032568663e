/*
 * bench_engine.c — engine throughput: pp512 and tg128 tokens/s, decode bytes per token,
 * and time to first token of a prefix-cached 4K-token prompt against a cold one.
 *
 * Models are synthesized (src/engine/synth.h) into a temporary folder with f16 weights:
 * llama-8l (8 layers, hidden 512, 8/2 heads, head_dim 64, ffn 1536, vocab 32000) and
 * qwen3-8l (8 layers, hidden 1024, 16/8 heads, head_dim 128, ffn 3072, vocab 32000,
 * tied); --with-0.6b adds the Qwen3-0.6B shape (28 layers, vocab 151936; writes ~1.2 GB).
 * Every figure is the median of --runs runs (default 3), paged K/V path in bf16, in both
 * math modes. pp512: one 512-token prompt in one step, cold (fresh cache salt). tg128:
 * 128 single-token steps after a 16-token prompt. Bytes per decode token: every weight
 * except the embedding table (one row is read; when tied, lm_head reads it whole) plus
 * the K/V rows attended, at the mean context of the run.
 *
 * usage: bench_engine [--threads N] [--runs N] [--with-0.6b] [--skip-ttft]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cairn/engine.h"
#include "engine/synth.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_engine: %s: %s\n", what, cairn_strerror(rc));
    exit(1);
}

/* Deterministic pseudo-random prompt tokens in [0, vocab - 3). */
static void fill_tokens(int32_t *t, int n, int vocab, unsigned seed)
{
    unsigned x = seed * 2654435761u + 1;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        t[i] = (int32_t)((x >> 8) % (unsigned)(vocab - 3));
    }
}

static int salt_counter;

/* Seconds to prefill ids [n] cold (fresh salt) in one step; *seq keeps the sequence. */
static double prefill(cairn_engine_t *e, const char *salt, const int32_t *ids, int n,
                      cairn_seq_t **seq, int *cached)
{
    char buf[64];
    if (!salt) {
        snprintf(buf, sizeof(buf), "bench-%d", salt_counter++);
        salt = buf;
    }
    double t0 = now();
    cairn_seq_t *s;
    int rc = cairn_seq_begin(e, salt, ids, n, &s, cached);
    if (rc)
        die("begin", rc);
    cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
    const float *lg;
    int rows;
    if ((rc = cairn_engine_step(e, &it, 1, &lg, &rows)))
        die("step", rc);
    double dt = now() - t0;
    if (seq)
        *seq = s;
    else
        cairn_seq_release(s);
    return dt;
}

static double decode(cairn_engine_t *e, cairn_seq_t *s, int n, int vocab)
{
    double t0 = now();
    int32_t tok = 11;
    for (int i = 0; i < n; i++) {
        int rc = cairn_seq_feed(s, &tok, 1);
        cairn_batch_item_t it = {s, 1, CAIRN_LOGITS_LAST};
        const float *lg;
        int rows;
        if (rc || (rc = cairn_engine_step(e, &it, 1, &lg, &rows)))
            die("decode step", rc);
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (lg[v] > lg[best])
                best = v;
        tok = best % (vocab - 3);
    }
    return now() - t0;
}

static cairn_engine_t *make(cairn_checkpoint_t *ck, int threads, cairn_engine_math_t math)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.n_threads = threads;
    o.math = math;
    o.kv_dtype = CAIRN_DTYPE_BF16;
    o.kv_path = CAIRN_KV_PAGED;
    o.pool_mib = 1024;
    o.max_context = 8192;
    o.max_step_tokens = 512;
    cairn_engine_t *e;
    char err[256] = "";
    int rc = cairn_engine_create(ck, &o, &e, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "bench_engine: %s\n", err);
        exit(1);
    }
    return e;
}

static void bench_model(const char *preset, const char *root, int threads, int runs, bool ttft)
{
    cairn_synth_options_t so;
    cairn_synth_options_default(&so);
    if (cairn_synth_options_preset(preset, &so))
        die(preset, CAIRN_EINVAL);
    so.dtype = CAIRN_DTYPE_F16;
    so.seed = 7;
    char dir[1024], err[512] = "";
    snprintf(dir, sizeof(dir), "%s/%s", root, preset);
    int rc = cairn_synth_write(dir, &so, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "bench_engine: synth %s: %s\n", preset, err);
        exit(1);
    }
    cairn_checkpoint_t *ck;
    if ((rc = cairn_checkpoint_open(dir, &ck, err, sizeof(err)))) {
        fprintf(stderr, "bench_engine: %s\n", err);
        exit(1);
    }
    const cairn_model_config_t *c = cairn_checkpoint_config(ck);
    const uint64_t embed_bytes = (uint64_t)c->vocab * c->hidden * 2;
    const uint64_t weight_read = cairn_checkpoint_weight_bytes(ck) - (c->tie_embeddings ? 0 : embed_bytes);
    const uint64_t kv_row = (uint64_t)c->n_layers * 2 * c->n_kv_heads * c->head_dim * 2; /* bf16 K+V */
    printf("%s: %d layers, hidden %d, heads %d/%d x %d, ffn %d, vocab %d%s, f16 weights %.1f MB, %d threads\n",
           preset, c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn, c->vocab,
           c->tie_embeddings ? " (tied)" : "", cairn_checkpoint_weight_bytes(ck) / 1e6, threads);

    int32_t *ids = malloc(4096 * sizeof(int32_t));
    for (int m = 0; m < 2; m++) {
        cairn_engine_math_t math = m ? CAIRN_ENGINE_MATH_BF16 : CAIRN_ENGINE_MATH_F32;
        cairn_engine_t *e = make(ck, threads, math);
        double pp[16], tg[16];
        fill_tokens(ids, 512, c->vocab, 1);
        prefill(e, NULL, ids, 512, NULL, NULL); /* warm-up: page in the weights */
        for (int r = 0; r < runs; r++)
            pp[r] = 512.0 / prefill(e, NULL, ids, 512, NULL, NULL);
        for (int r = 0; r < runs; r++) {
            cairn_seq_t *s;
            prefill(e, NULL, ids, 16, &s, NULL);
            tg[r] = 128.0 / decode(e, s, 128, c->vocab);
            cairn_seq_release(s);
        }
        double ppm = median(pp, runs), tgm = median(tg, runs);
        double bytes = (double)weight_read + (double)kv_row * (16 + 64); /* mean context 80 */
        printf("  math %-4s  pp512 %8.1f tok/s   tg128 %7.1f tok/s   decode %.1f MB/token -> %.1f GB/s\n",
               m ? "bf16" : "f32", ppm, tgm, bytes / 1e6, bytes * tgm / 1e9);
        cairn_engine_destroy(e);
    }

    if (ttft) {
        /* Cold 4K prompt, then the same prompt again in the same salt (all but the last
         * partial block served from the cache). bf16 math, as a server prefills. */
        cairn_engine_t *e = make(ck, threads, CAIRN_ENGINE_MATH_BF16);
        fill_tokens(ids, 4096, c->vocab, 2);
        double cold[16], warm[16];
        int cached = 0;
        for (int r = 0; r < runs; r++) {
            char salt[32];
            snprintf(salt, sizeof(salt), "ttft-%d", r);
            cold[r] = prefill(e, salt, ids, 4096, NULL, NULL);
            warm[r] = prefill(e, salt, ids, 4096, NULL, &cached);
        }
        double cm = median(cold, runs), wm = median(warm, runs);
        printf("  TTFT 4096-token prompt: cold %.3f s, prefix-cached (%d tokens reused) %.4f s = %.2f%% of cold\n",
               cm, cached, wm, 100.0 * wm / cm);
        cairn_engine_destroy(e);
    }
    free(ids);
    cairn_checkpoint_close(ck);
}

static void rm_tree(const char *root)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_engine: could not remove %s\n", root);
}

int main(int argc, char **argv)
{
    int threads = 2, runs = 3;
    bool big = false, ttft = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--with-0.6b"))
            big = true;
        else if (!strcmp(argv[i], "--skip-ttft"))
            ttft = false;
        else {
            fprintf(stderr, "usage: bench_engine [--threads N] [--runs N] [--with-0.6b] [--skip-ttft]\n");
            return 2;
        }
    }
    if (threads < 1 || runs < 1 || runs > 16) {
        fprintf(stderr, "bench_engine: --threads >= 1, --runs in 1..16\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines as they come, even into a pipe */
    char root[] = "/tmp/cairn-bench-engine-XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    bench_model("llama-8l", root, threads, runs, ttft);
    bench_model("qwen3-8l", root, threads, runs, ttft);
    if (big)
        bench_model("qwen3-0.6b", root, threads, runs, false);
    rm_tree(root);
    return 0;
}
