/*
 * bench_cold_restore.c — time to first token of a returning conversation after a restart:
 * restored from the SSD cold tier by the engine versus recomputed.
 *
 * On a synthesized 8-layer Llama shape (hidden 512, 8/2 heads, head_dim 64, ffn 1536,
 * vocab 32000, bf16; 64 KiB of K/V per 16-token block), for prompts of 4K and 16K tokens:
 *   recompute  a fresh engine with the tier on and an empty directory: begin + one step
 *              over the whole prompt (the store misses once; this run persists the prompt)
 *   restore    after the engine is destroyed (writes drained), the store's files are
 *              dropped from the page cache (cold_files.h: drop_caches where the process
 *              may, and posix_fadvise DONTNEED on each); a fresh engine and
 *              store on the same directory: begin (restores) + one step over the last token
 *   raw read   the same object files read in chain order with read() after dropping them
 *              again, and one file of the same size read sequentially: the disk's bandwidth
 * and the restore bandwidth (payload bytes / time in restores). Targets: restore TTFT at
 * 16K >= 20x sooner than recompute; restore bandwidth >= 70% of raw read.
 * Usage: bench_cold_restore [DIR] [THREADS] [TOKENS,...]  (DIR default: a new directory
 * under /tmp; TOKENS default 4096,16384).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cairn/engine.h"
#include "tools/synth.h"

#include "cold_files.h"

static int make_engine(const cairn_checkpoint_t *ck, const char *root, int threads,
                       cairn_engine_t **e)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.n_threads = threads;
    o.pool_mib = 512;
    o.max_context = 32768;
    o.cold_root = root;
    o.cold_capture_blocks = 1 << 20;
    o.cold_capture_ms = 600000;
    o.cold_drain_ms = 600000;
    char err[256] = "";
    int rc = cairn_engine_create(ck, &o, e, err, sizeof err);
    if (rc)
        fprintf(stderr, "bench_cold_restore: engine: %s\n", err);
    return rc;
}

/* begin + one step to the first logits; returns seconds, or -1. */
static double ttft(cairn_engine_t *e, const int32_t *prompt, int n, int *restored)
{
    double t0 = cf_now();
    cairn_seq_t *s = NULL;
    int cached = 0;
    if (cairn_seq_begin(e, NULL, prompt, n, &s, &cached))
        return -1;
    cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
    const float *lg = NULL;
    int rows = 0;
    if (cairn_engine_step(e, &it, 1, &lg, &rows))
        return -1;
    double t = cf_now() - t0;
    *restored = cairn_seq_restored_tokens(s);
    cairn_seq_release(s); /* captures the prompt's blocks */
    return t;
}

int main(int argc, char **argv)
{
    char dir[512];
    if (argc > 1)
        snprintf(dir, sizeof dir, "%s", argv[1]);
    else {
        snprintf(dir, sizeof dir, "/tmp/bench_cold_restore_XXXXXX");
        if (!mkdtemp(dir))
            return 1;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    char model[600], cache[600];
    snprintf(model, sizeof model, "%s/model", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);

    cairn_synth_options_t so;
    cairn_synth_options_default(&so);
    cairn_synth_options_preset("llama-8l", &so);
    so.max_pos = 32768;
    so.seed = 7;
    char err[512] = "";
    if (cairn_synth_write(model, &so, err, sizeof err)) {
        fprintf(stderr, "bench_cold_restore: synth: %s\n", err);
        return 1;
    }
    cairn_checkpoint_t *ck = NULL;
    if (cairn_checkpoint_open(model, &ck, err, sizeof err)) {
        fprintf(stderr, "bench_cold_restore: %s\n", err);
        return 1;
    }
    printf("bench_cold_restore: llama 8 layers, hidden 512, 8/2 heads x 64, ffn 1536, vocab 32000, "
           "bf16 K/V, block 16 (64 KiB), %d threads, dir %s\n", threads, dir);
    printf("%7s %12s %12s %9s %10s %12s %12s %12s %7s\n", "tokens", "recompute_s", "restore_s",
           "speedup", "restored", "restore_MBs", "raw_obj_MBs", "raw_file_MBs", "ratio");

    int sizes[8] = {4096, 16384}, n_sizes = 2;
    if (argc > 3) {
        n_sizes = 0;
        for (char *p = argv[3]; *p && n_sizes < 8; p += *p == ',')
            sizes[n_sizes++] = (int)strtol(p, &p, 10);
    }
    size_t buf_len = 1 << 20;
    char *buf = malloc(buf_len);
    for (int si = 0; si < n_sizes; si++) {
        const int n = sizes[si];
        int32_t *prompt = malloc((size_t)n * sizeof *prompt);
        uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
        for (int i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            prompt[i] = (int32_t)(3 + x % 31000);
        }
        char root[700];
        snprintf(root, sizeof root, "%s/%d", cache, n);

        /* Recompute (and persist). */
        cairn_engine_t *e = NULL;
        int restored = 0;
        if (make_engine(ck, root, threads, &e))
            return 1;
        double t_full = ttft(e, prompt, n, &restored);
        cairn_engine_cold_flush(e);
        cairn_engine_destroy(e);

        /* Restart: cold page cache, fresh engine and store. */
        cf_drop(root);
        double t_open = cf_now();
        if (make_engine(ck, root, threads, &e))
            return 1;
        t_open = cf_now() - t_open;
        double t_rest = ttft(e, prompt, n, &restored);
        cairn_engine_cold_counters_t c;
        cairn_engine_cold_counters(e, &c);
        double rest_mbs = c.restore_seconds > 0 ? c.store.bytes_restored / c.restore_seconds / 1e6 : 0;
        cairn_engine_destroy(e);

        /* Raw reads of the same bytes, page cache dropped first. */
        cf_drop(root);
        double raw_s = 0;
        uint64_t raw = cf_read(root, false, &raw_s);
        double raw_obj_mbs = raw_s > 0 ? raw / raw_s / 1e6 : 0;
        char big[800];
        snprintf(big, sizeof big, "%s/raw.bin", dir);
        int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        memset(buf, 0x5a, buf_len);
        for (uint64_t w = 0; fd >= 0 && w < raw; w += buf_len)
            if (write(fd, buf, buf_len) != (ssize_t)buf_len)
                break;
        if (fd >= 0) {
            fsync(fd);
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
        fd = open(big, O_RDONLY);
        double t0 = cf_now();
        uint64_t got = 0;
        ssize_t r;
        while (fd >= 0 && (r = read(fd, buf, buf_len)) > 0)
            got += (uint64_t)r;
        double raw_file_mbs = got / (cf_now() - t0) / 1e6;
        if (fd >= 0)
            close(fd);
        unlink(big);

        printf("%7d %12.3f %12.4f %8.1fx %10d %12.0f %12.0f %12.0f %6.0f%%\n", n, t_full, t_rest,
               t_full / t_rest, restored, rest_mbs, raw_obj_mbs, raw_file_mbs,
               100.0 * rest_mbs / raw_obj_mbs);
        printf("        (store open %.1f ms; restore %.1f ms of the TTFT; %llu blocks, %.1f MB)\n",
               t_open * 1e3, c.restore_seconds * 1e3, (unsigned long long)c.restored_blocks,
               c.store.bytes_restored / 1e6);
        fflush(stdout);
        free(prompt);
    }
    free(buf);
    cairn_checkpoint_close(ck);
    return 0;
}
