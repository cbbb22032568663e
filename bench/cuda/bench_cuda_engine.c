/*
 * bench_cuda_engine — the engine end to end on the CUDA backend, over a checkpoint folder
 * (a synth model: `cairn synth DIR --preset qwen3-0.6b`, or the 8B shape).
 *
 *   bench_cuda_engine MODEL_DIR CACHE_DIR [--ttft-tokens N] [--decode-steps N] [--skip-ttft]
 *                     [--skip-decode] [--skip-restore]
 *
 * 1. Decode tok/s at batch 1, 8 and 64: each sequence gets a 256-token prompt (prefilled
 *    first, not timed), then `decode-steps` (default 64) steps of one token for every
 *    sequence; wall clock over the decode steps; logits are read back every step (no
 *    sampling: a fixed token is fed). tok/s = batch * steps / time.
 * 2. TTFT of an N-token prompt (default 16384), wall clock from cairn_seq_begin to the
 *    first logits: cold (nothing cached), prefix hit (the same prompt again in the same
 *    engine: every full block is hot, the last token computes), and restored from the SSD
 *    tier (the prompt captured under CACHE_DIR, the engine destroyed, the page cache
 *    dropped when /proc/sys/vm/drop_caches is writable, a new engine restores every full
 *    block and computes the last token). The restored run's logits must equal the cold
 *    run's (memcmp) in the invariant mode; the bench says whether they do.
 * Mode: CAIRN_CUDA_INVARIANT (default 1); run once per mode to publish its cost.
 * --skip-decode, --skip-restore (session 8): only the TTFT parts asked for; with
 * CAIRN_CUDA_PROFILE=1 each engine's backend logs its GPU time per kind of op, the GPU's
 * idle time between ops and the host's time blocked in syncs when it is destroyed (the
 * cold + prefix-hit engine first: where a TTFT's time goes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cairn/engine.h"

static void log_stderr(cairn_log_level_t level, const char *msg, void *user)
{
    (void)user;
    if (level >= CAIRN_LOG_INFO)
        fprintf(stderr, "log: %s\n", msg);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static cairn_checkpoint_t *ck;

static cairn_engine_t *make(const char *cold_root, int pool_mib)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.backend = "cuda";
    o.kv_dtype = CAIRN_DTYPE_BF16;
    o.math = CAIRN_ENGINE_MATH_BF16;
    o.pool_mib = pool_mib;
    o.max_step_tokens = 512;
    o.max_context = 32768;
    o.cold = cold_root ? 1 : -1;
    o.cold_root = cold_root;
    o.cold_capture_blocks = 1 << 20;
    o.cold_capture_ms = 600000;
    o.cold_drain_ms = 600000;
    cairn_engine_t *e = NULL;
    char err[256] = "";
    if (cairn_engine_create(ck, &o, &e, err, sizeof(err))) {
        fprintf(stderr, "engine: %s\n", err);
        exit(1);
    }
    return e;
}

static void step_or_die(cairn_engine_t *e, cairn_batch_item_t *it, int n, const float **lg)
{
    int rows;
    if (cairn_engine_step(e, it, n, lg, &rows)) {
        fprintf(stderr, "step failed\n");
        exit(1);
    }
}

static void decode_bench(int batch, int steps, int vocab)
{
    cairn_engine_t *e = make(NULL, 16384);
    cairn_seq_t **s = calloc((size_t)batch, sizeof(*s));
    cairn_batch_item_t *it = calloc((size_t)batch, sizeof(*it));
    int32_t prompt[256];
    for (int b = 0; b < batch; b++) {
        for (int i = 0; i < 256; i++)
            prompt[i] = (int32_t)((b * 7919 + i * 104729) % (vocab - 300) + 1);
        char salt[32];
        snprintf(salt, sizeof(salt), "d%d", b);
        if (cairn_seq_begin(e, salt, prompt, 256, &s[b], NULL)) {
            fprintf(stderr, "begin failed\n");
            exit(1);
        }
        it[b] = (cairn_batch_item_t){s[b], 0, CAIRN_LOGITS_LAST};
    }
    const float *lg;
    step_or_die(e, it, batch, &lg); /* prefill */
    const int32_t tok = 42;
    double t0 = 0;
    for (int st = -2; st < steps; st++) { /* two warm-up steps */
        if (st == 0)
            t0 = now();
        for (int b = 0; b < batch; b++) {
            if (cairn_seq_feed(s[b], &tok, 1)) {
                fprintf(stderr, "feed failed\n");
                exit(1);
            }
            it[b] = (cairn_batch_item_t){s[b], 1, CAIRN_LOGITS_LAST};
        }
        step_or_die(e, it, batch, &lg);
    }
    double dt = now() - t0;
    printf("decode batch %3d: %d steps in %.3f s: %.1f tok/s (%.2f ms/step)\n", batch, steps, dt,
           batch * (double)steps / dt, dt / steps * 1e3);
    for (int b = 0; b < batch; b++)
        cairn_seq_release(s[b]);
    cairn_engine_destroy(e);
    free(s);
    free(it);
}

/* Begin + one step over the prompt, LOGITS_LAST; returns seconds, copies the logits. */
static double ttft(cairn_engine_t *e, const int32_t *p, int n, float *logits, int vocab, int *cached,
                   int *restored, cairn_seq_t **keep)
{
    double t0 = now();
    cairn_seq_t *s;
    if (cairn_seq_begin(e, NULL, p, n, &s, cached)) {
        fprintf(stderr, "begin failed\n");
        exit(1);
    }
    *restored = cairn_seq_restored_tokens(s);
    cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
    const float *lg;
    step_or_die(e, &it, 1, &lg);
    double dt = now() - t0;
    memcpy(logits, lg, (size_t)vocab * sizeof(float));
    if (keep)
        *keep = s;
    else {
        cairn_seq_end_turn(s);
        cairn_seq_release(s);
    }
    return dt;
}

int main(int argc, char **argv)
{
    cairn_log_set_handler(log_stderr, NULL);
    if (argc < 3) {
        fprintf(stderr, "usage: bench_cuda_engine MODEL_DIR CACHE_DIR [--ttft-tokens N] [--decode-steps N] [--skip-ttft] "
                        "[--skip-decode] [--skip-restore]\n");
        return 2;
    }
    int n_ttft = 16384, steps = 64;
    bool skip_ttft = false, skip_decode = false, skip_restore = false;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--ttft-tokens") && i + 1 < argc)
            n_ttft = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--decode-steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--skip-ttft"))
            skip_ttft = true;
        else if (!strcmp(argv[i], "--skip-decode"))
            skip_decode = true;
        else if (!strcmp(argv[i], "--skip-restore"))
            skip_restore = true;
    }
    char err[512] = "";
    double t0 = now();
    if (cairn_checkpoint_open(argv[1], &ck, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const cairn_model_config_t *cfg = cairn_checkpoint_config(ck);
    const int vocab = cfg->vocab;
    printf("model %s: %d layers, hidden %d, %d/%d heads x %d, ffn %d, vocab %d (open %.1f s); mode %s\n", argv[1],
           cfg->n_layers, cfg->hidden, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, cfg->ffn, vocab, now() - t0,
           getenv("CAIRN_CUDA_INVARIANT") && !strcmp(getenv("CAIRN_CUDA_INVARIANT"), "0") ? "fast" : "invariant");
    const int batches[3] = {1, 8, 64};
    for (int i = 0; i < 3 && !skip_decode; i++)
        decode_bench(batches[i], steps, vocab);
    if (skip_ttft) {
        cairn_checkpoint_close(ck);
        return 0;
    }

    int32_t *p = malloc((size_t)n_ttft * sizeof(int32_t));
    for (int i = 0; i < n_ttft; i++)
        p[i] = (int32_t)((i * 2654435761u) % (unsigned)(vocab - 300) + 1);
    float *cold = malloc((size_t)vocab * 4), *hit = malloc((size_t)vocab * 4), *rest = malloc((size_t)vocab * 4);
    int cached = 0, restored = 0;
    /* Cold and prefix hit, in an engine that also captures the prompt under CACHE_DIR. */
    cairn_engine_t *e = make(argv[2], 16384);
    double t_cold = ttft(e, p, n_ttft, cold, vocab, &cached, &restored, NULL);
    printf("ttft %d tokens cold: %.3f s (cached %d, restored %d)\n", n_ttft, t_cold, cached, restored);
    double t_hit = ttft(e, p, n_ttft, hit, vocab, &cached, &restored, NULL);
    printf("ttft %d tokens prefix hit: %.4f s (cached %d): logits %s the cold run's\n", n_ttft, t_hit, cached,
           memcmp(hit, cold, (size_t)vocab * 4) ? "DIFFER from" : "equal");
    if (skip_restore) {
        cairn_engine_destroy(e);
        printf("summary: ttft cold %.3f s, prefix hit %.4f s\n", t_cold, t_hit);
        free(p), free(cold), free(hit), free(rest);
        cairn_checkpoint_close(ck);
        return 0;
    }
    double tf = now();
    cairn_engine_cold_flush(e);
    cairn_engine_destroy(e); /* drains the writer */
    printf("cold tier: capture flushed in %.2f s\n", now() - tf);
    sync();
    FILE *dc = fopen("/proc/sys/vm/drop_caches", "w");
    bool dropped = dc && fputs("3\n", dc) >= 0;
    if (dc)
        dropped = (fclose(dc) == 0) && dropped;
    e = make(argv[2], 16384);
    double t_rest = ttft(e, p, n_ttft, rest, vocab, &cached, &restored, NULL);
    cairn_engine_cold_counters_t cc;
    cairn_engine_cold_counters(e, &cc);
    printf("ttft %d tokens restored from the SSD tier: %.3f s (restored %d tokens, restore walk %.3f s, page cache "
           "%s): logits %s the cold run's\n",
           n_ttft, t_rest, restored, cc.restore_seconds, dropped ? "dropped" : "NOT dropped",
           memcmp(rest, cold, (size_t)vocab * 4) ? "DIFFER from" : "equal");
    cairn_engine_destroy(e);
    printf("summary: ttft cold %.3f s, prefix hit %.4f s, restored %.3f s\n", t_cold, t_hit, t_rest);
    free(p), free(cold), free(hit), free(rest);
    cairn_checkpoint_close(ck);
    return 0;
}
