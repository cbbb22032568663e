/*
 * bench_engine.c — engine throughput: pp512 and tg128 tokens/s, decode bytes per token,
 * and time to first token of a prefix-cached 4K-token prompt against a cold one.
 *
 * Models are synthesized (src/tools/synth.h) into a temporary folder: llama-8l (8 layers, hidden 512, 8/2 heads, head_dim 64, ffn 1536, vocab 32000) and
 * qwen3-8l (8 layers, hidden 1024, 16/8 heads, head_dim 128, ffn 3072, vocab 32000,
 * tied); --with-0.6b adds the Qwen3-0.6B shape (28 layers, vocab 151936; writes ~1.2 GB).
 * --model NAME runs one preset only. Weights are stored in bf16 (what real checkpoints
 * ship), measured in both math modes, and in f16 (llama.cpp's comparison format), measured
 * in f32 math only (bf16 math with f16 weights computes the f32 result); --weights bf16|f16
 * picks one. --only pp|tg skips the other phase (profiling). Every figure is the median of
 * --runs runs (default 3), paged K/V path in bf16. "cpu" is the process CPU time per
 * token (all threads): on a shared machine it is steadier than the wall-clock figures. pp512: one 512-token prompt in one step, cold (fresh cache salt). tg128:
 * 128 single-token steps after a 16-token prompt. Bytes per decode token: every weight
 * except the embedding table (one row is read; when tied, lm_head reads it whole) plus
 * the K/V rows attended (paged layers only), at the mean context of the run. For models
 * with recurrent layers (--model lfm2-1.2b) also what their state checkpoints cost: CPU
 * time per save and per restore, and pp512 with checkpoints off.
 *
 * CAIRN_OP_TIMES=1 prints the CPU backend's time per op kind (matmuls, attention, norms, ...)
 * to stderr as each engine closes (the log, which this bench then sends to stderr).
 *
 * --gguf FILE measures an existing checkpoint instead (a .gguf file, e.g. a llama-quantize'd
 * Q4_K_M of the 0.6B shape, or an HF folder): pp512, tg128 and a --long N-token prompt
 * (default 8192, prefilled in 512-token steps), K/V --kv-dtype (default bf16).
 *
 * usage: bench_engine [--threads N] [--runs N] [--with-0.6b] [--skip-ttft] [--model NAME]
 *                     [--weights bf16|f16] [--only pp|tg]
 *        bench_engine --gguf FILE [--threads N] [--runs N] [--only pp|tg] [--long N]
 *                     [--math-bf16] [--kv-dtype T]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cairn/engine.h"
#include "compute/cpu/kernels.h"
#include "models/family.h"
#include "tools/synth.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
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

static cairn_dtype_t kv_dtype = CAIRN_DTYPE_BF16;
static int long_prompt = 8192; /* --gguf: the long prefill's tokens (0: none) */

static cairn_engine_t *make_ckpt(cairn_checkpoint_t *ck, int threads, cairn_engine_math_t math,
                                 int state_ckpt_mib)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.n_threads = threads;
    o.math = math;
    o.kv_dtype = kv_dtype;
    o.kv_path = CAIRN_KV_PAGED;
    o.pool_mib = 2048;
    o.max_context = long_prompt + 64 > 8192 ? long_prompt + 64 : 8192;
    o.max_step_tokens = 512;
    o.state_ckpt_mib = state_ckpt_mib;
    cairn_engine_t *e;
    char err[256] = "";
    int rc = cairn_engine_create(ck, &o, &e, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "bench_engine: %s\n", err);
        exit(1);
    }
    return e;
}

static cairn_engine_t *make(cairn_checkpoint_t *ck, int threads, cairn_engine_math_t math)
{
    return make_ckpt(ck, threads, math, 0);
}

struct bench_opts {
    int threads, runs;
    bool ttft, do_pp, do_tg;
    int weights; /* bit 0: bf16, bit 1: f16 */
};

/* One model in one weight dtype: pp512 and tg128 in the math modes that differ. */
static void bench_dtype(const char *preset, const char *root, cairn_dtype_t wdt, const struct bench_opts *bo)
{
    cairn_synth_options_t so;
    cairn_synth_options_default(&so);
    if (cairn_synth_options_preset(preset, &so))
        die(preset, CAIRN_EINVAL);
    so.dtype = wdt;
    so.seed = 7;
    const char *wname = wdt == CAIRN_DTYPE_F16 ? "f16" : "bf16";
    char dir[1024], err[512] = "";
    snprintf(dir, sizeof(dir), "%s/%s-%s", root, preset, wname);
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
    /* K/V rows only for the layers the pool pages; recurrent layers read their state. */
    cairn_layer_cache_t *layers = calloc((size_t)c->n_layers, sizeof(*layers));
    size_t state_bytes = 0;
    if (!layers || cairn_model_cache_layout(cairn_checkpoint_model(ck), CAIRN_DTYPE_BF16, layers,
                                            &state_bytes))
        die("cache layout", CAIRN_ENOMEM);
    uint64_t kv_row = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (layers[l].kv.kind == CAIRN_KV_LAYER_FULL || layers[l].kv.kind == CAIRN_KV_LAYER_SLIDING)
            kv_row += 2ull * layers[l].kv.n_kv_heads * layers[l].kv.head_dim * 2; /* bf16 K+V */
    free(layers);
    printf("%s: %d layers, hidden %d, heads %d/%d x %d, ffn %d, vocab %d%s, %s weights %.1f MB, %d threads\n",
           preset, c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn, c->vocab,
           c->tie_embeddings ? " (tied)" : "", wname, cairn_checkpoint_weight_bytes(ck) / 1e6, bo->threads);

    int32_t *ids = malloc(4096 * sizeof(int32_t));
    const int n_math = wdt == CAIRN_DTYPE_BF16 ? 2 : 1;
    const int runs = bo->runs;
    for (int m = 0; m < n_math; m++) {
        cairn_engine_math_t math = m ? CAIRN_ENGINE_MATH_BF16 : CAIRN_ENGINE_MATH_F32;
        cairn_engine_t *e = make(ck, bo->threads, math);
        double pp[16], tg[16], ppc[16], tgc[16];
        fill_tokens(ids, 512, c->vocab, 1);
        prefill(e, NULL, ids, 512, NULL, NULL); /* warm-up: page in the weights */
        for (int r = 0; r < runs && bo->do_pp; r++) {
            double c0 = cpu_now();
            pp[r] = 512.0 / prefill(e, NULL, ids, 512, NULL, NULL);
            ppc[r] = (cpu_now() - c0) / 512.0 * 1e3;
        }
        for (int r = 0; r < runs && bo->do_tg; r++) {
            cairn_seq_t *s;
            prefill(e, NULL, ids, 16, &s, NULL);
            double c0 = cpu_now();
            tg[r] = 128.0 / decode(e, s, 128, c->vocab);
            tgc[r] = (cpu_now() - c0) / 128.0 * 1e3;
            cairn_seq_release(s);
        }
        printf("  math %-4s", m ? "bf16" : "f32");
        if (bo->do_pp)
            printf("  pp512 %8.1f tok/s (cpu %.3f ms/tok)", median(pp, runs), median(ppc, runs));
        if (bo->do_tg) {
            double tgm = median(tg, runs);
            double bytes = (double)weight_read + (double)kv_row * (16 + 64); /* mean context 80 */
            printf("  tg128 %7.1f tok/s (cpu %.2f ms/tok)  decode %.1f MB/token -> %.1f GB/s", tgm,
                   median(tgc, runs), bytes / 1e6, bytes * tgm / 1e9);
        }
        printf("\n");
        if (state_bytes && bo->do_pp) {
            /* What the recurrent checkpoints of a prefill cost: each pp512 run saves the
             * grid points 16, 64, 256 and the prompt's last full blocks 496, 512, each a
             * sub-batch cut. Runs alternate with an engine whose checkpoints are off, so
             * the on/off ratio (wall and CPU) compares runs of one moment. */
            cairn_engine_counters_t e0, e1;
            cairn_engine_counters(e, &e0);
            cairn_engine_t *off = make_ckpt(ck, bo->threads, math, -1);
            prefill(off, NULL, ids, 512, NULL, NULL);
            double on_w[16], off_w[16], on_c[16], off_c[16];
            for (int r = 0; r < runs; r++) {
                double c0 = cpu_now();
                on_w[r] = prefill(e, NULL, ids, 512, NULL, NULL);
                on_c[r] = cpu_now() - c0;
                c0 = cpu_now();
                off_w[r] = prefill(off, NULL, ids, 512, NULL, NULL);
                off_c[r] = cpu_now() - c0;
            }
            cairn_engine_destroy(off);
            cairn_engine_counters(e, &e1);
            const double saves = (double)(e1.ckpt_saves - e0.ckpt_saves);
            const double save_s = e1.ckpt_save_seconds - e0.ckpt_save_seconds;
            printf("             checkpoints: %.0f saved per pp512, %.1f us CPU each (state %.1f KiB = %.1f GB/s); "
                   "pp512 on/off: wall %.3f, CPU %.3f\n",
                   saves / runs, save_s / saves * 1e6, state_bytes / 1024.0,
                   (double)state_bytes * saves / save_s / 1e9, median(off_w, runs) / median(on_w, runs),
                   median(off_c, runs) / median(on_c, runs));
        }
        cairn_engine_destroy(e);
    }

    if (bo->ttft && wdt == CAIRN_DTYPE_BF16) {
        /* Cold 4K prompt, then the same prompt again in the same salt (all but the last
         * partial block served from the cache). bf16 math, as a server prefills. */
        cairn_engine_t *e = make(ck, bo->threads, CAIRN_ENGINE_MATH_BF16);
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
        if (state_bytes) {
            cairn_engine_counters_t ec;
            cairn_engine_counters(e, &ec);
            printf("             checkpoint restores: %llu, %.1f us CPU each\n",
                   (unsigned long long)ec.ckpt_restores,
                   ec.ckpt_restores ? ec.ckpt_restore_seconds / (double)ec.ckpt_restores * 1e6 : 0.0);
        }
        cairn_engine_destroy(e);
    }
    free(ids);
    cairn_checkpoint_close(ck);
}

/*
 * An existing checkpoint (a .gguf file or an HF folder): pp512, tg128 and one prefill of
 * long_prompt tokens in 512-token steps (what an agent's first turn costs), in the given
 * math mode. Bytes per decode token: every weight byte (the embedding is read whole as
 * the tied lm_head; for an untied model this counts the embedding too, an overestimate).
 */
static void bench_file(const char *path, const struct bench_opts *bo, cairn_engine_math_t math)
{
    cairn_checkpoint_t *ck;
    char err[512] = "";
    int rc = cairn_checkpoint_open(path, &ck, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "bench_engine: %s\n", err);
        exit(1);
    }
    const cairn_model_config_t *c = cairn_checkpoint_config(ck);
    const uint64_t wbytes = cairn_checkpoint_weight_bytes(ck);
    const uint64_t kv_row = (uint64_t)c->n_layers * 2 * cairn_dtype_row_bytes(kv_dtype, (int64_t)c->n_kv_heads * c->head_dim);
    printf("%s: %d layers, hidden %d, heads %d/%d x %d, ffn %d, vocab %d%s, weights %.1f MB, %d threads, math %s, "
           "K/V %s, kernels %s\n", path, c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn, c->vocab,
           c->tie_embeddings ? " (tied)" : "", wbytes / 1e6, bo->threads, math ? "bf16" : "f32",
           cairn_dtype_name(kv_dtype), kern_impl_name());
    cairn_engine_t *e = make(ck, bo->threads, math);
    const int nids = long_prompt > 512 ? long_prompt : 512;
    int32_t *ids = malloc((size_t)nids * sizeof(int32_t));
    if (!ids)
        die("malloc", CAIRN_ENOMEM);
    fill_tokens(ids, nids, c->vocab, 1);
    double pp[16], tg[16], ppc[16], tgc[16], lp[16], lpc[16];
    prefill(e, NULL, ids, 512, NULL, NULL); /* warm-up: page in the weights */
    for (int r = 0; r < bo->runs; r++) {
        if (bo->do_pp) {
            double c0 = cpu_now();
            pp[r] = 512.0 / prefill(e, NULL, ids, 512, NULL, NULL);
            ppc[r] = (cpu_now() - c0) / 512.0 * 1e3;
        }
        if (bo->do_tg) {
            cairn_seq_t *s;
            prefill(e, NULL, ids, 16, &s, NULL);
            double c0 = cpu_now();
            tg[r] = 128.0 / decode(e, s, 128, c->vocab);
            tgc[r] = (cpu_now() - c0) / 128.0 * 1e3;
            cairn_seq_release(s);
        }
        if (bo->do_pp && long_prompt > 0) {
            /* cairn_engine_step cuts the prompt into max_step_tokens (512) sub-batches. */
            double c0 = cpu_now();
            lp[r] = long_prompt / prefill(e, NULL, ids, long_prompt, NULL, NULL);
            lpc[r] = (cpu_now() - c0) / long_prompt * 1e3;
        }
    }
    if (bo->do_pp)
        printf("  pp512 %8.1f tok/s (cpu %.3f ms/tok)\n", median(pp, bo->runs), median(ppc, bo->runs));
    if (bo->do_pp && long_prompt > 0)
        printf("  pp%d %7.1f tok/s (cpu %.3f ms/tok)\n", long_prompt, median(lp, bo->runs), median(lpc, bo->runs));
    if (bo->do_tg) {
        double tgm = median(tg, bo->runs), bytes = (double)wbytes + (double)kv_row * (16 + 64);
        printf("  tg128 %7.1f tok/s (cpu %.2f ms/tok)  decode %.1f MB/token -> %.1f GB/s\n", tgm,
               median(tgc, bo->runs), bytes / 1e6, bytes * tgm / 1e9);
    }
    free(ids);
    cairn_engine_destroy(e);
    cairn_checkpoint_close(ck);
}

static void bench_model(const char *preset, const char *root, const struct bench_opts *bo)
{
    if (bo->weights & 1)
        bench_dtype(preset, root, CAIRN_DTYPE_BF16, bo);
    if (bo->weights & 2)
        bench_dtype(preset, root, CAIRN_DTYPE_F16, bo);
}

static void rm_tree(const char *root)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_engine: could not remove %s\n", root);
}

/* With CAIRN_OP_TIMES=1 the CPU backend logs its per-op times when an engine closes: shown. */
static void log_to_stderr(cairn_log_level_t level, const char *msg, void *user)
{
    (void)level, (void)user;
    fprintf(stderr, "%s\n", msg);
}

int main(int argc, char **argv)
{
    if (getenv("CAIRN_OP_TIMES"))
        cairn_log_set_handler(log_to_stderr, NULL);
    struct bench_opts bo = {.threads = 2, .runs = 3, .ttft = true, .do_pp = true, .do_tg = true, .weights = 3};
    bool big = false;
    const char *only_model = NULL, *file = NULL;
    cairn_engine_math_t file_math = CAIRN_ENGINE_MATH_F32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            bo.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            bo.runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--with-0.6b"))
            big = true;
        else if (!strcmp(argv[i], "--skip-ttft"))
            bo.ttft = false;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc)
            only_model = argv[++i];
        else if (!strcmp(argv[i], "--gguf") && i + 1 < argc)
            file = argv[++i];
        else if (!strcmp(argv[i], "--math-bf16"))
            file_math = CAIRN_ENGINE_MATH_BF16;
        else if (!strcmp(argv[i], "--long") && i + 1 < argc)
            long_prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kv-dtype") && i + 1 < argc) {
            if (cairn_dtype_parse(argv[++i], &kv_dtype)) {
                fprintf(stderr, "bench_engine: --kv-dtype: unknown type\n");
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--weights") && i + 1 < argc) {
            i++;
            bo.weights = !strcmp(argv[i], "bf16") ? 1 : !strcmp(argv[i], "f16") ? 2 : 0;
            if (!bo.weights) {
                fprintf(stderr, "bench_engine: --weights bf16|f16\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            i++;
            bo.do_pp = !strcmp(argv[i], "pp");
            bo.do_tg = !strcmp(argv[i], "tg");
            bo.ttft = false;
            if (!bo.do_pp && !bo.do_tg) {
                fprintf(stderr, "bench_engine: --only pp|tg\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_engine [--threads N] [--runs N] [--with-0.6b] [--skip-ttft] "
                            "[--model NAME] [--weights bf16|f16] [--only pp|tg]\n"
                            "       bench_engine --gguf FILE [--threads N] [--runs N] [--only pp|tg] [--long N] "
                            "[--math-bf16] [--kv-dtype T]\n");
            return 2;
        }
    }
    if (bo.threads < 1 || bo.runs < 1 || bo.runs > 16) {
        fprintf(stderr, "bench_engine: --threads >= 1, --runs in 1..16\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines as they come, even into a pipe */
    if (file) {
        if (long_prompt < 0 || long_prompt > 32768) {
            fprintf(stderr, "bench_engine: --long in 0..32768\n");
            return 2;
        }
        bench_file(file, &bo, file_math);
        return 0;
    }
    char root[] = "/tmp/cairn-bench-engine-XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    if (only_model) {
        bench_model(only_model, root, &bo);
    } else {
        bench_model("llama-8l", root, &bo);
        bench_model("qwen3-8l", root, &bo);
        if (big)
            bench_model("qwen3-0.6b", root, &bo);
    }
    rm_tree(root);
    return 0;
}
