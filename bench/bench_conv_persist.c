/*
 * bench_conv_persist.c — a whole agent conversation across restarts (issue 17): the first
 * request of a Claude Code-shaped session on the Qwen3-0.6B shape, computed once and
 * persisted by the background capture, then every later session and every later turn
 * after a restart served from the SSD cold tier.
 *
 * Model: `cairn synth --preset qwen3-0.6b` (28 layers, hidden 1024, 16/8 heads x 128, ffn
 * 3072, vocab 151936, bf16 weights; bf16 K/V: 112 KiB per token, 1.75 MiB per 16-token
 * block). The prompt is token ids shaped like Claude Code's first request: a 2,746-token
 * system prompt, 24 tool definitions of 666 tokens each (the prefix every session of the
 * agent shares, 18,730 tokens in all) and a 16-token user message: 18,746 tokens.
 *
 * Phases (each engine is a fresh engine and store over the same directory: a restart):
 *   first    the first request ever, empty cache: TTFT (begin + prefill to the first
 *            logits; wall and process CPU time), then the exit's persistence of everything
 *            not on disk (written blocks, MB/s). Skipped when DIR/first.txt exists (it
 *            records the figures; the prefill takes ~10 minutes on 2 cores);
 *            --first-only runs this phase alone (again, whatever DIR/first.txt says) and
 *            exits: the real prefill, then its blocks persisted, for a later run without
 *            --synthetic to restore;
 *   session  a new session after a restart (same prefix, another 16-token user message),
 *            the page cache dropped first (sync + /proc/sys/vm/drop_caches where the process
 *            may, and POSIX_FADV_DONTNEED on every file): TTFT (wall, process CPU), restored
 *            tokens, restore MB/s (payload bytes / time in restores) and the restoring
 *            thread's CPU (cairn_seq_begin restores inline); bracketed by raw reads of the
 *            same object files, O_DIRECT before, read() through the dropped page cache and
 *            O_DIRECT after (raw MB/s); the tail (the first step after the restore: the
 *            prefill of the prompt tokens no block holds) in wall and process CPU time, and
 *            the three CLOCK_MONOTONIC instants that bound the restore and the tail (to cut a
 *            `perf record -k CLOCK_MONOTONIC` profile into the two); one `summary:` line;
 *            TTFT's clock starts at cairn_seq_begin: the checkpoint (its weights copied into
 *            anonymous memory at open, formats/weights_folder.c) and the engine + store open
 *            come before it;
 *   replay   T turns of that session, a restart before each: turn t's prompt is the whole
 *            conversation (the previous prompt, its G-token greedy reply, an R-token tool
 *            result); per turn the tokens reusable from the previous turn (its computed
 *            full blocks), restored, computed, TTFT.
 * --synthetic replaces `first` (when the machine is too busy for a 10-minute prefill): the
 * session prefix's 1,170 objects are written straight into a filesystem store (valid
 * objects under the real block hashes, a constant bf16 payload; the disk's write MB/s),
 * and every phase runs the engine over that store, lent (cold_store) and reopened at each
 * restart. Restore, raw read and TTFT after a restart measure the same bytes and work;
 * the replies are those of junk K/V, which changes no timing and no token count.
 * --kv-dtype q8_0 runs every phase with 8-bit K/V (34 bytes per 32 elements: 53% of bf16's
 * bytes per block, in the pool and on disk; the synthetic payload is then a constant q8_0
 * block) in a directory of its own (cache-q8_0, cache-synthetic-q8_0).
 * Usage: bench_conv_persist DIR [--threads N] [--turns T] [--tool R] [--gen G]
 *        [--synthetic | --first-only] [--kv-dtype bf16|q8_0]
 * Defaults: 2 threads, 3 turns, 256-token tool results, 8-token replies, bf16 K/V.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cairn/cold_tier.h"
#include "cairn/engine.h"
#include "cairn/kv_cache.h"
#include "tools/synth.h"

#include "cold_files.h"

#define SYSTEM_TOKENS 2746
#define TOOLS 24
#define TOOL_TOKENS 666
#define USER_TOKENS 16
#define PREFIX_TOKENS (SYSTEM_TOKENS + TOOLS * TOOL_TOKENS)
#define PROMPT_TOKENS (PREFIX_TOKENS + USER_TOKENS)
#define BS 16

/* Token ids of a section: a seeded xorshift over the ordinary ids. */
static void fill(int32_t *t, int n, uint64_t seed)
{
    uint64_t x = 0x9E3779B97F4A7C15ull ^ seed;
    for (int i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        t[i] = (int32_t)(3 + x % 151000);
    }
}

/* The K/V element type of every phase (--kv-dtype). */
static cairn_dtype_t g_kv_dtype = CAIRN_DTYPE_BF16;

/* The synthetic store (--synthetic): the Qwen3-0.6B block layout, a fixed fingerprint. A
 * layer's block holds K and V rows of 8 heads x 128 for each of BS tokens. */
#define SYN_LAYERS 28
#define SYN_ROWS (BS * 8 * 2)
#define SYN_ROW 128

static size_t syn_layer_bytes(void) { return SYN_ROWS * cairn_dtype_row_bytes(g_kv_dtype, SYN_ROW); }

static cairn_cold_store_t *open_synthetic(const char *root)
{
    static uint64_t lb[SYN_LAYERS];
    for (int l = 0; l < SYN_LAYERS; l++)
        lb[l] = syn_layer_bytes();
    cairn_cold_config_t cfg = {.root = root, .dtype = g_kv_dtype, .block_tokens = BS,
                               .n_layers = SYN_LAYERS, .layer_bytes = lb};
    memset(cfg.fingerprint.bytes, 0x5c, sizeof cfg.fingerprint.bytes);
    cairn_cold_store_t *s = NULL;
    if (cairn_cold_store_create(&cfg, &s)) {
        fprintf(stderr, "bench_conv_persist: cannot open the synthetic store under %s\n", root);
        exit(1);
    }
    return s;
}

/* Writes blocks [0, n_blocks) of tokens' chain (default domain) into s; returns seconds. */
static double fill_synthetic(cairn_cold_store_t *s, const int32_t *tokens, size_t n_blocks)
{
    cairn_kv_layer_spec_t spec = {CAIRN_KV_LAYER_FULL, 1, 8, 0, 0};
    cairn_kv_config_t kc = {0};
    kc.n_layers = 1;
    kc.layers = &spec;
    kc.dtype = CAIRN_DTYPE_BF16;
    kc.block_size = BS;
    kc.memory_mib = 1;
    cairn_kv_cache_t *c = NULL;
    cairn_kv_hash_t dom, *h = malloc(n_blocks * sizeof *h);
    if (!h || cairn_kv_cache_create(&kc, &c) || cairn_kv_domain_from_salt(c, NULL, 0, &dom) ||
        cairn_kv_cache_hash_blocks(c, &dom, NULL, 0, tokens, n_blocks * BS, h)) {
        fprintf(stderr, "bench_conv_persist: hashing failed\n");
        exit(1);
    }
    cairn_kv_cache_destroy(c);
    const size_t payload = (size_t)SYN_LAYERS * syn_layer_bytes();
    uint8_t *pay = malloc(payload);
    if (g_kv_dtype == CAIRN_DTYPE_Q8_0) {
        /* q8_0 blocks of 32: an f16 scale 2^-10, then 32 int8 quants of 10: 0.0098 each. */
        for (size_t i = 0; i < payload; i += 34) {
            pay[i] = 0x00, pay[i + 1] = 0x14;
            memset(pay + i + 2, 10, 32);
        }
    } else {
        for (size_t i = 0; i < payload; i += 2)
            pay[i] = 0x24, pay[i + 1] = 0x3c; /* bf16 0.01 */
    }
    double t0 = cf_now();
    for (size_t i = 0; i < n_blocks; i++) {
        cairn_cold_block_t b;
        memset(&b, 0, sizeof b);
        memcpy(b.hash.bytes, h[i].bytes, 32);
        if (i)
            memcpy(b.parent.bytes, h[i - 1].bytes, 32);
        b.tokens = tokens + i * BS;
        b.n_tokens = BS;
        b.payload = pay;
        b.payload_size = payload;
        if (cairn_cold_store_enqueue(s, &b, 600000, NULL)) {
            fprintf(stderr, "bench_conv_persist: enqueue failed\n");
            exit(1);
        }
    }
    cairn_cold_store_flush(s);
    double t = cf_now() - t0;
    free(pay);
    free(h);
    return t;
}

static cairn_engine_t *make_engine(const cairn_checkpoint_t *ck, const char *root, int threads,
                                   cairn_cold_store_t *lent)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.n_threads = threads;
    o.pool_mib = 2560; /* the conversation (~2.1 GB in bf16) and its growth */
    o.kv_dtype = g_kv_dtype;
    o.max_context = 32768;
    o.cold_root = root;
    if (lent) {
        o.cold = 1;
        o.cold_store = cairn_cold_store_tier(lent);
    }
    o.cold_drain_ms = 600000;
    cairn_engine_t *e = NULL;
    char err[256] = "";
    if (cairn_engine_create(ck, &o, &e, err, sizeof err)) {
        fprintf(stderr, "bench_conv_persist: engine: %s\n", err);
        exit(1);
    }
    return e;
}

typedef struct {
    double ttft, ttft_cpu;
    double begin_s, begin_cpu; /* cairn_seq_begin alone: the restore (it runs inline), wall and
                                  this thread's CPU */
    double tail_cpu;           /* the first step alone (the prefill of the tokens left): process CPU */
    double mono[3];            /* CLOCK_MONOTONIC at begin, after begin, at the first logits */
    int restored, hot;
    int32_t reply[64];
} turn_t;

/* begin + prefill to the first logits (TTFT), then `gen` greedy tokens; release. */
static void run_turn(cairn_engine_t *e, const int32_t *prompt, int n, int gen, turn_t *t)
{
    memset(t, 0, sizeof *t);
    const int vocab = cairn_engine_config(e)->vocab;
    double t0 = cf_now(), c0 = cf_cpu_now(), b0 = cf_thread_cpu_now();
    cairn_seq_t *s = NULL;
    if (cairn_seq_begin(e, NULL, prompt, n, &s, &t->hot)) {
        fprintf(stderr, "bench_conv_persist: begin failed\n");
        exit(1);
    }
    t->begin_s = cf_now() - t0;
    t->begin_cpu = cf_thread_cpu_now() - b0;
    const double cb = cf_cpu_now();
    t->mono[0] = t0;
    t->mono[1] = t0 + t->begin_s;
    t->restored = cairn_seq_restored_tokens(s);
    for (int g = 0; g < gen; g++) {
        const float *lg = NULL;
        int rows = 0;
        /* The prefill goes in max_step_tokens sub-batches inside one step. */
        cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
        if (cairn_engine_step(e, &it, 1, &lg, &rows)) {
            fprintf(stderr, "bench_conv_persist: step failed\n");
            exit(1);
        }
        if (g == 0) {
            t->mono[2] = cf_now();
            t->ttft = t->mono[2] - t0;
            t->ttft_cpu = cf_cpu_now() - c0;
            t->tail_cpu = cf_cpu_now() - cb;
        }
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (lg[v] > lg[best])
                best = v;
        t->reply[g] = best;
        if (cairn_seq_feed(s, &t->reply[g], 1)) {
            fprintf(stderr, "bench_conv_persist: feed failed\n");
            exit(1);
        }
    }
    cairn_seq_release(s); /* queues the conversation's blocks for the capture thread */
}

int main(int argc, char **argv)
{
    static const char usage[] = "usage: bench_conv_persist DIR [--threads N] [--turns T] [--tool R] [--gen G] "
                                "[--synthetic | --first-only] [--kv-dtype bf16|q8_0]\n";
    if (argc < 2 || argv[1][0] == '-') {
        /* DIR first: an option there (--help) is not a directory to fill with gigabytes */
        fputs(usage, argc >= 2 && !strcmp(argv[1], "--help") ? stdout : stderr);
        return argc >= 2 && !strcmp(argv[1], "--help") ? 0 : 2;
    }
    const char *dir = argv[1];
    int threads = 2, turns = 3, tool = 256, gen = 8;
    bool synthetic = false, first_only = false;
    for (int i = 2; i < argc; i += 2) {
        if (!strcmp(argv[i], "--synthetic") || !strcmp(argv[i], "--first-only")) {
            *(argv[i][2] == 's' ? &synthetic : &first_only) = true;
            i--;
            continue;
        }
        if (i + 1 >= argc)
            break;
        if (!strcmp(argv[i], "--kv-dtype")) {
            if (cairn_dtype_parse(argv[i + 1], &g_kv_dtype) ||
                (g_kv_dtype != CAIRN_DTYPE_BF16 && g_kv_dtype != CAIRN_DTYPE_Q8_0)) {
                fprintf(stderr, "bench_conv_persist: --kv-dtype wants bf16 or q8_0, got '%s'\n", argv[i + 1]);
                return 2;
            }
            continue;
        }
        int v = atoi(argv[i + 1]);
        if (strcmp(argv[i], "--threads") && strcmp(argv[i], "--turns") && strcmp(argv[i], "--tool") &&
            strcmp(argv[i], "--gen")) {
            fprintf(stderr, "bench_conv_persist: unknown option '%s'\n%s", argv[i], usage);
            return 2;
        }
        if (!strcmp(argv[i], "--threads"))
            threads = v;
        else if (!strcmp(argv[i], "--turns"))
            turns = v;
        else if (!strcmp(argv[i], "--tool"))
            tool = v;
        else if (!strcmp(argv[i], "--gen"))
            gen = v > 64 ? 64 : v < 1 ? 1 : v;
    }
    char model[1024], root[1024], first_path[1024];
    snprintf(model, sizeof model, "%s/model", dir);
    const char *suffix = g_kv_dtype == CAIRN_DTYPE_BF16 ? "" : "-q8_0";
    snprintf(root, sizeof root, "%s/%s%s", dir, synthetic ? "cache-synthetic" : "cache", suffix);
    snprintf(first_path, sizeof first_path, "%s/first%s.txt", dir, suffix);
    mkdir(dir, 0700);
    char err[512] = "", cfg[1100];
    snprintf(cfg, sizeof cfg, "%s/config.json", model);
    if (access(cfg, F_OK)) {
        cairn_synth_options_t so;
        cairn_synth_options_default(&so);
        cairn_synth_options_preset("qwen3-0.6b", &so);
        so.seed = 7;
        if (cairn_synth_write(model, &so, err, sizeof err)) {
            fprintf(stderr, "bench_conv_persist: synth: %s\n", err);
            return 1;
        }
    }
    cairn_checkpoint_t *ck = NULL;
    if (cairn_checkpoint_open(model, &ck, err, sizeof err)) {
        fprintf(stderr, "bench_conv_persist: %s\n", err);
        return 1;
    }
    printf("bench_conv_persist: qwen3-0.6b shape, %s K/V (%.2f MiB per 16-token block), %d threads, "
           "dir %s\n",
           cairn_dtype_name(g_kv_dtype), SYN_LAYERS * syn_layer_bytes() / 1048576.0, threads, dir);

    /* The session's prompt: system prompt, 24 tools, a user message. */
    int cap = PROMPT_TOKENS + turns * (tool + 64) + 64;
    int32_t *conv = malloc((size_t)cap * sizeof *conv);
    fill(conv, SYSTEM_TOKENS, 1);
    for (int k = 0; k < TOOLS; k++)
        fill(conv + SYSTEM_TOKENS + k * TOOL_TOKENS, TOOL_TOKENS, 100 + (uint64_t)k);
    fill(conv + PREFIX_TOKENS, USER_TOKENS, 1000);

    if (synthetic && first_only) {
        fprintf(stderr, "bench_conv_persist: --first-only computes the real prefill; not with --synthetic\n");
        return 2;
    }
    /* first: once per directory (or the synthetic fill); --first-only computes it again. */
    cairn_cold_store_t *lent = NULL;
    FILE *f = synthetic || first_only ? NULL : fopen(first_path, "r");
    if (synthetic) {
        lent = open_synthetic(root);
        const size_t nb = (PROMPT_TOKENS - 1) / BS;
        cairn_tier_stats_t st0, st1;
        cairn_cold_store_stats(lent, &st0);
        double t = fill_synthetic(lent, conv, nb);
        cairn_cold_store_stats(lent, &st1);
        printf("synthetic first request: %zu blocks of the prefix written straight to the store: %.0f MB in "
               "%.1f s (%.0f MB/s, fdatasync'd group commits); %llu objects held\n",
               nb, (st1.bytes_written - st0.bytes_written) / 1e6, t, (st1.bytes_written - st0.bytes_written) / 1e6 / t,
               (unsigned long long)st1.objects);
        cairn_cold_store_destroy(lent);
        lent = NULL;
    } else if (f) {
        char line[512];
        printf("first (recorded in %s):\n", first_path);
        while (fgets(line, sizeof line, f))
            printf("  %s", line);
        fclose(f);
    } else {
        cairn_engine_t *e = make_engine(ck, root, threads, NULL);
        turn_t t;
        run_turn(e, conv, PROMPT_TOKENS, 1, &t);
        if (t.restored || t.hot)
            printf("warning: not a first request: %d tokens restored, %d hot (%s held blocks)\n", t.restored, t.hot,
                   root);
        double t0 = cf_now();
        cairn_cold_persist_report_t r;
        int rc = cairn_engine_cold_persist(e, 600000, &r);
        double persist_s = cf_now() - t0;
        cairn_engine_destroy(e);
        char line[512];
        snprintf(line, sizeof line,
                 "first ever: %d prompt tokens, TTFT %.1f s wall (%.1f s process CPU); exit persistence %s: "
                 "%llu blocks written (%.0f MB) in %.1f s (%.0f MB/s), %llu skipped\n",
                 PROMPT_TOKENS, t.ttft, t.ttft_cpu, rc ? "incomplete" : "complete",
                 (unsigned long long)r.written, r.bytes / 1e6, persist_s, r.bytes / 1e6 / persist_s,
                 (unsigned long long)r.skipped);
        printf("%s", line);
        f = fopen(first_path, "w");
        if (f) {
            fputs(line, f);
            fclose(f);
        }
    }
    fflush(stdout);

    if (first_only) {
        free(conv);
        cairn_checkpoint_close(ck);
        return 0;
    }

    /* session: a new session after a restart, cold page cache. The raw reads of the same
     * files bracket it: O_DIRECT before (what the restore's direct reads can get), then
     * after it read() through the dropped page cache and O_DIRECT again. */
    fill(conv + PREFIX_TOKENS, USER_TOKENS, 2000);
    double raw_s[3] = {0, 0, 0};
    uint64_t raw_b[3] = {0, 0, 0};
    bool dropped = cf_drop(root);
    raw_b[0] = cf_read(root, true, &raw_s[0]);
    cf_drop(root);
    double t_open = cf_now();
    if (synthetic)
        lent = open_synthetic(root);
    cairn_engine_t *e = make_engine(ck, root, threads, lent);
    t_open = cf_now() - t_open;
    turn_t t;
    run_turn(e, conv, PROMPT_TOKENS, gen, &t);
    cairn_engine_cold_counters_t c;
    cairn_engine_cold_counters(e, &c);
    double rest_mbs = c.restore_seconds > 0 ? c.store.bytes_restored / c.restore_seconds / 1e6 : 0;
    cairn_engine_destroy(e);
    cairn_cold_store_destroy(lent);
    lent = NULL;
    cf_drop(root);
    raw_b[1] = cf_read(root, false, &raw_s[1]);
    cf_drop(root);
    raw_b[2] = cf_read(root, true, &raw_s[2]);
    /* After every read: mapping fresh memory first would warm the memory the restore's
     * pool then gets. */
    const double fresh_cpu = cf_fresh_memory_cpu(c.store.bytes_restored);
    double raw_mbs[3], raw_best = 0;
    for (int k = 0; k < 3; k++) {
        raw_mbs[k] = raw_s[k] > 0 ? raw_b[k] / raw_s[k] / 1e6 : 0;
        raw_best = raw_mbs[k] > raw_best ? raw_mbs[k] : raw_best;
    }
    const int full = (PROMPT_TOKENS - 1) / BS * BS;
    printf("new session after a restart: TTFT %.2f s wall (%.2f s CPU), %d of %d full-block prompt tokens "
           "restored (%.1f%%), %d hot; engine + store open %.2f s\n",
           t.ttft, t.ttft_cpu, t.restored, full, 100.0 * t.restored / full, t.hot, t_open);
    printf("  restore %.0f MB in %.2f s: %.0f MB/s (begin %.2f s wall, %.2f s CPU of the restoring thread); "
           "prefill of the %d tokens left %.2f s wall, %.2f s process CPU\n",
           c.store.bytes_restored / 1e6, c.restore_seconds, rest_mbs, t.begin_s, t.begin_cpu,
           PROMPT_TOKENS - t.restored - t.hot, t.ttft - t.begin_s, t.tail_cpu);
    printf("  windows (CLOCK_MONOTONIC s, for perf record -k CLOCK_MONOTONIC): begin %.6f, restored %.6f, first "
           "logits %.6f\n",
           t.mono[0], t.mono[1], t.mono[2]);
    printf("  raw read of the same object files (%s): O_DIRECT before %.0f MB/s, read() after %.0f MB/s, "
           "O_DIRECT after %.0f MB/s (%.0f MB each)\n",
           dropped ? "page cache dropped with drop_caches" : "page cache dropped per file with FADV_DONTNEED",
           raw_mbs[0], raw_mbs[1], raw_mbs[2], raw_b[1] / 1e6);
    printf("  fresh memory: populating %.0f MB of new anonymous huge pages took %.2f s CPU (the part of the "
           "restore's CPU that materialises its pool blocks)\n",
           c.store.bytes_restored / 1e6, fresh_cpu);
    printf("summary: %s K/V, TTFT %.2f s wall / %.2f s process CPU; restore %.0f MB at %.0f MB/s (%.2f s CPU, "
           "fresh-memory probe %.2f s); raw read best %.0f MB/s (restore = %.0f%% of it); tail %d tokens %.2f s "
           "wall / %.2f s CPU\n",
           cairn_dtype_name(g_kv_dtype), t.ttft, t.ttft_cpu, c.store.bytes_restored / 1e6, rest_mbs, t.begin_cpu,
           fresh_cpu, raw_best, raw_best > 0 ? 100.0 * rest_mbs / raw_best : 0, PROMPT_TOKENS - t.restored - t.hot,
           t.ttft - t.begin_s, t.tail_cpu);
    fflush(stdout);

    /* replay: a restart before every turn. */
    int n = PROMPT_TOKENS;
    int computed_before = n + gen - 1; /* the session turn computed its prompt and gen - 1 replies */
    memcpy(conv + n, t.reply, (size_t)gen * sizeof *conv);
    n += gen;
    printf("%5s %8s %9s %9s %9s %7s %10s %10s\n", "turn", "prompt", "reusable", "restored", "computed", "reused",
           "TTFT_s", "TTFT_cpu_s");
    long tot_reusable = 0, tot_restored = 0;
    for (int k = 1; k <= turns; k++) {
        fill(conv + n, tool, 5000 + (uint64_t)k);
        n += tool;
        int reusable = computed_before / BS * BS;
        if (reusable > (n - 1) / BS * BS)
            reusable = (n - 1) / BS * BS;
        cf_drop(root);
        if (synthetic)
            lent = open_synthetic(root);
        e = make_engine(ck, root, threads, lent);
        run_turn(e, conv, n, gen, &t);
        cairn_engine_destroy(e); /* persists this turn's new blocks */
        cairn_cold_store_destroy(lent);
        lent = NULL;
        printf("%5d %8d %9d %9d %9d %6.1f%% %10.2f %10.2f\n", k, n, reusable, t.restored, n - t.restored - t.hot,
               100.0 * t.restored / reusable, t.ttft, t.ttft_cpu);
        fflush(stdout);
        tot_reusable += reusable;
        tot_restored += t.restored;
        computed_before = n + gen - 1;
        memcpy(conv + n, t.reply, (size_t)gen * sizeof *conv);
        n += gen;
    }
    printf("replay: %ld of %ld reusable tokens restored (%.1f%%)\n", tot_restored, tot_reusable,
           tot_reusable ? 100.0 * tot_restored / tot_reusable : 0);
    free(conv);
    cairn_checkpoint_close(ck);
    return 0;
}
