/*
 * bench_cold.c — cold tier throughput against the raw disk, in the same run.
 *
 * For chains of 256 and 1024 blocks of the 8-layer Llama shape (16 tokens x 8 layers x
 * (K,V) x 2 kv heads x 64 dims x bf16 = 64 KiB per block) it measures, median of R rounds:
 *   raw write   one file, 64 KiB sequential writes, one fsync at the end (best case)
 *   raw write/b the same with an fsync after every 64 KiB (the tier's durability cost)
 *   raw read    that file read sequentially in 64 KiB reads after dropping its pages
 *               (posix_fadvise DONTNEED)
 *   tier write  enqueue the chain and wait for the writer: time per block and MB/s, once
 *               with the object-at-a-time commit (write_batch 1: temp, write, fsync,
 *               rename, directory fsync per object) and once with the default group
 *               commit (up to 8 objects: writes, fdatasyncs, renames, one fsync per
 *               directory), rounds interleaved on the same disk
 *   tier cold   cairn_tier_restore_chain over the filesystem store (read + full
 *               validation, prefetch hints 16 ahead) after dropping every
 *               object's pages; the target is >= 70% of raw read
 *   tier warm   the same restore from the page cache, in MB/s and in CPU time of the
 *               restoring thread per block (CLOCK_THREAD_CPUTIME_ID: what the walk, the
 *               reads and the validation cost, less sensitive to a shared machine)
 * Then one capture turn at the default 250 ms deadline and queue depth 8, the block budget
 * (default 128) lifted, over a 1024-block chain of new blocks, per commit mode: blocks the
 * turn accepted (its reach) and blocks already durable when the turn ended. Last, the CPU
 * time per block of a capture walk over a chain that is all on disk already (the
 * metadata probe every turn pays for its persisted prefix).
 * Usage: bench_cold [DIR] [ROUNDS]  (DIR default: a new directory under /tmp).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <openssl/evp.h>

#include "cairn/cold_tier.h"

#define LAYERS 8
#define LAYER_BYTES (16 * 2 * 2 * 64 * 2) /* tokens x (K,V) x kv heads x dims x bf16 */
#define BLOCK (LAYERS * LAYER_BYTES)
#define TOKENS 16

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

static void drop_file(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

static void drop_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st))
            continue;
        if (S_ISDIR(st.st_mode))
            drop_tree(p);
        else
            drop_file(p);
    }
    closedir(d);
}

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
                rm_tree(p);
            else
                unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

typedef struct {
    size_t n;
    cairn_tier_hash_t *hashes;
    cairn_tier_key_t *keys;  /* the chain's keys (BLOCK, group 0) */
    int32_t *tokens;
    uint8_t *payload; /* n blocks */
    uint8_t *dst;     /* n blocks */
} chain_t;

static void make_chain(chain_t *c, size_t n, uint32_t seed)
{
    c->n = n;
    c->hashes = calloc(n, sizeof *c->hashes);
    c->keys = calloc(n, sizeof *c->keys);
    c->tokens = calloc(n * TOKENS, sizeof *c->tokens);
    c->payload = malloc(n * BLOCK);
    c->dst = malloc(n * BLOCK);
    cairn_tier_hash_t prev;
    memset(&prev, 0, sizeof prev);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        for (int t = 0; t < TOKENS; t++)
            c->tokens[i * TOKENS + t] = (int32_t)(seed * 100000 + i * TOKENS + (size_t)t);
        unsigned int len;
        EVP_MD_CTX *m = EVP_MD_CTX_new();
        EVP_DigestInit_ex(m, EVP_sha256(), NULL);
        EVP_DigestUpdate(m, prev.bytes, 32);
        EVP_DigestUpdate(m, &c->tokens[i * TOKENS], TOKENS * 4);
        EVP_DigestFinal_ex(m, c->hashes[i].bytes, &len);
        EVP_MD_CTX_free(m);
        prev = c->hashes[i];
        c->keys[i] = (cairn_tier_key_t){.kind = CAIRN_TIER_BLOCK, .hash = c->hashes[i]};
        for (size_t k = 0; k < BLOCK; k += 4) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            memcpy(c->payload + i * BLOCK + k, &x, 4);
        }
    }
}

static void *dest(void *user, size_t i, size_t size)
{
    chain_t *c = user;
    return size == BLOCK ? c->dst + i * BLOCK : NULL;
}

/* The tier's restore walk over the whole chain into c->dst; blocks loaded. */
static size_t tier_restore(cairn_cold_store_t *s, chain_t *c)
{
    cairn_tier_chain_t ch = {c->keys, c->tokens, TOKENS, c->n};
    cairn_tier_restore_sink_t sink = {NULL, dest, c};
    cairn_tier_restore_result_t res;
    cairn_tier_restore_chain(cairn_cold_store_tier(s), &ch, 0, &sink, &res);
    return res.loaded;
}

typedef struct {
    chain_t *c;
} turn_ctx_t;

static int turn_block(void *user, size_t i, cairn_tier_object_t *b)
{
    chain_t *c = ((turn_ctx_t *)user)->c;
    b->key = c->keys[i];
    memset(&b->parent, 0, sizeof b->parent);
    if (i)
        b->parent = c->hashes[i - 1];
    b->tokens = &c->tokens[i * TOKENS];
    b->n_tokens = TOKENS;
    b->payload = c->payload + i * BLOCK;
    b->payload_size = BLOCK;
    return 0;
}

static cairn_cold_store_t *open_tier(const char *dir, uint8_t tag, uint32_t write_batch)
{
    static const uint64_t layer_bytes[LAYERS] = {LAYER_BYTES, LAYER_BYTES, LAYER_BYTES, LAYER_BYTES,
                                                 LAYER_BYTES, LAYER_BYTES, LAYER_BYTES, LAYER_BYTES};
    char root[4096];
    snprintf(root, sizeof root, "%s/tier", dir);
    cairn_cold_config_t cfg = {.root = root, .dtype = CAIRN_DTYPE_BF16, .block_tokens = TOKENS,
                               .n_layers = LAYERS, .layer_bytes = layer_bytes, .write_batch = write_batch};
    cfg.fingerprint.bytes[0] = tag;
    cfg.fingerprint.bytes[1] = (uint8_t)write_batch;
    cairn_cold_store_t *s = NULL;
    return cairn_cold_store_create(&cfg, &s) ? NULL : s;
}

static void close_tier(cairn_cold_store_t *s)
{
    cairn_cold_store_clear(s, NULL);
    char md[4096];
    snprintf(md, sizeof md, "%s", cairn_cold_store_dir(s));
    cairn_cold_store_destroy(s);
    rm_tree(md);
}

/* Enqueues the chain and waits for the writer; ms per block. */
static double tier_write(cairn_cold_store_t *s, const chain_t *c)
{
    double t0 = now();
    for (size_t i = 0; i < c->n; i++) {
        cairn_cold_block_t b = {c->hashes[i], i ? c->hashes[i - 1] : (cairn_tier_hash_t){{0}},
                                &c->tokens[i * TOKENS], TOKENS, c->payload + i * BLOCK, BLOCK};
        if (cairn_cold_store_enqueue(s, &b, 60000, NULL))
            return -1;
    }
    cairn_cold_store_flush(s);
    return (now() - t0) * 1e3 / (double)c->n;
}

/* One capture turn at the default deadline over the chain: blocks accepted and durable. */
static void capture_turn(const char *dir, chain_t *c, uint32_t write_batch, uint8_t tag, double *accepted,
                         double *durable)
{
    cairn_cold_store_t *s = open_tier(dir, tag, write_batch);
    if (!s)
        exit(1);
    turn_ctx_t k = {c};
    cairn_tier_capture_result_t res;
    /* The default 250 ms deadline, the block budget lifted: how far the disk lets a turn go. */
    cairn_tier_capture_budget_t budget = {.blocks_per_turn = (uint32_t)c->n, .budget_ms = 250};
    cairn_tier_capture_chain(cairn_cold_store_tier(s), c->n, turn_block, &k, &budget, &res);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    *accepted = (double)res.enqueued;
    *durable = (double)st.objects;
    cairn_cold_store_flush(s);
    close_tier(s);
}

/* CPU time per block of a capture walk over a chain that is all on disk (20 walks). */
static double probe_ns(const char *dir, chain_t *c)
{
    cairn_cold_store_t *s = open_tier(dir, 250, 0);
    if (!s || tier_write(s, c) < 0)
        exit(1);
    turn_ctx_t k = {c};
    cairn_tier_capture_budget_t budget = {.blocks_per_turn = (uint32_t)c->n, .budget_ms = 10000};
    cairn_tier_capture_result_t res;
    double t0 = thread_cpu();
    for (int w = 0; w < 20; w++) {
        cairn_tier_capture_chain(cairn_cold_store_tier(s), c->n, turn_block, &k, &budget, &res);
        if (res.already != c->n)
            exit(1);
    }
    double ns = (thread_cpu() - t0) * 1e9 / (20.0 * (double)c->n);
    close_tier(s);
    return ns;
}

static double raw_write(const char *path, const uint8_t *buf, size_t n, int fsync_each)
{
    double t0 = now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    for (size_t i = 0; i < n; i++) {
        if (write(fd, buf + i * BLOCK, BLOCK) != BLOCK)
            abort();
        if (fsync_each)
            fsync(fd);
    }
    fsync(fd);
    close(fd);
    return now() - t0;
}

static double raw_read(const char *path, uint8_t *buf, size_t n)
{
    drop_file(path);
    double t0 = now();
    int fd = open(path, O_RDONLY);
    for (size_t i = 0; i < n; i++)
        if (read(fd, buf + i * BLOCK, BLOCK) != BLOCK)
            abort();
    close(fd);
    return now() - t0;
}

int main(int argc, char **argv)
{
    char tmpl[] = "/tmp/cairn-bench-cold-XXXXXX";
    const char *dir = argc > 1 && argv[1][0] ? argv[1] : mkdtemp(tmpl);
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (!dir || rounds < 1)
        return 2;
    if (mkdir(dir, 0700) < 0 && access(dir, W_OK) < 0) {
        fprintf(stderr, "bench_cold: cannot use %s\n", dir);
        return 2;
    }
    printf("cold tier bench: %d-byte blocks (8-layer Llama shape, bf16), dir %s, median of %d rounds\n", BLOCK,
           dir, rounds);
    printf("%-6s %10s %10s %10s %10s %10s %10s %10s %10s %8s %10s\n", "blocks", "raw_w", "raw_w/b", "raw_r",
           "w/blk_b1", "w/blk", "tier_w", "tier_cold", "tier_warm", "cold/raw", "warm_cpu");
    printf("%-6s %10s %10s %10s %10s %10s %10s %10s %10s %8s %10s\n", "", "MB/s", "MB/s", "MB/s", "ms", "ms", "MB/s",
           "MB/s", "MB/s", "", "us/blk");
    static const size_t sizes[] = {256, 1024};
    for (size_t si = 0; si < 2; si++) {
        size_t n = sizes[si];
        double mb = (double)n * BLOCK / 1e6;
        double rw[16], rwb[16], rr[16], tw1[16], tw[16], tc[16], tm[16], tcpu[16];
        for (int r = 0; r < rounds && r < 16; r++) {
            chain_t c;
            make_chain(&c, n, (uint32_t)(si * 100 + (size_t)r + 1));
            char raw[4096];
            snprintf(raw, sizeof raw, "%s/raw.bin", dir);
            rw[r] = mb / raw_write(raw, c.payload, n, 0);
            rr[r] = mb / raw_read(raw, c.dst, n);
            size_t m = n < 256 ? n : 256; /* per-block fsync is slow: time the first 256 */
            rwb[r] = (double)m * BLOCK / 1e6 / raw_write(raw, c.payload, m, 1);
            unlink(raw);

            /* The object-at-a-time commit first (the writer before group commit), then the
             * default group commit on a fresh store: same chain, same disk. */
            cairn_cold_store_t *s = open_tier(dir, (uint8_t)r, 1);
            if (!s || (tw1[r] = tier_write(s, &c)) < 0)
                return 1;
            close_tier(s);
            if (!(s = open_tier(dir, (uint8_t)r, 0)) || (tw[r] = tier_write(s, &c)) < 0)
                return 1;
            drop_tree(cairn_cold_store_dir(s));
            memset(c.dst, 0, n * BLOCK);
            double t0 = now();
            size_t got = tier_restore(s, &c);
            tc[r] = mb / (now() - t0);
            if (got != n || memcmp(c.dst, c.payload, n * BLOCK)) {
                fprintf(stderr, "restore mismatch: %zu of %zu\n", got, n);
                return 1;
            }
            t0 = now();
            double c0 = thread_cpu();
            tier_restore(s, &c);
            tcpu[r] = (thread_cpu() - c0) * 1e6 / (double)n;
            tm[r] = mb / (now() - t0);
            cairn_tier_stats_t st;
            cairn_cold_store_stats(s, &st);
            if (st.write_errors || st.corruptions)
                return 1;
            close_tier(s);
            free(c.hashes);
            free(c.keys);
            free(c.tokens);
            free(c.payload);
            free(c.dst);
        }
        int k = rounds < 16 ? rounds : 16;
        double mtw = median(tw, k), mtw1 = median(tw1, k);
        double mrr = median(rr, k), mtc = median(tc, k);
        printf("%-6zu %10.0f %10.0f %10.0f %10.3f %10.3f %10.0f %10.0f %10.0f %7.0f%% %10.1f\n", n, median(rw, k),
               median(rwb, k), mrr, mtw1, mtw, BLOCK / 1e3 / mtw, mtc, median(tm, k), 100.0 * mtc / mrr,
               median(tcpu, k));
    }
    /* Per-turn reach at the default deadline, rounds interleaved between the commit modes. */
    printf("\ncapture turn, 250 ms deadline (default), block budget lifted, queue depth 8, median of %d:\n",
           rounds);
    printf("%-22s %10s %10s\n", "commit", "accepted", "durable");
    double acc1[16], dur1[16], acc[16], dur[16];
    for (int r = 0; r < rounds && r < 16; r++) {
        chain_t c;
        make_chain(&c, 1024, (uint32_t)(900 + r));
        capture_turn(dir, &c, 1, (uint8_t)(200 + r), &acc1[r], &dur1[r]);
        capture_turn(dir, &c, 0, (uint8_t)(200 + r), &acc[r], &dur[r]);
        free(c.hashes);
        free(c.keys);
        free(c.tokens);
        free(c.payload);
        free(c.dst);
    }
    int k = rounds < 16 ? rounds : 16;
    printf("%-22s %10.0f %10.0f\n", "object at a time", median(acc1, k), median(dur1, k));
    printf("%-22s %10.0f %10.0f\n", "group commit", median(acc, k), median(dur, k));
    double pr[16];
    for (int r = 0; r < rounds && r < 16; r++) {
        chain_t c;
        make_chain(&c, 1024, (uint32_t)(950 + r));
        pr[r] = probe_ns(dir, &c);
        free(c.hashes);
        free(c.keys);
        free(c.tokens);
        free(c.payload);
        free(c.dst);
    }
    printf("\ncapture walk over 1024 blocks already on disk: %.0f ns CPU per block (median of %d)\n",
           median(pr, k), rounds);
    if (!(argc > 1 && argv[1][0]))
        rm_tree(dir);
    return 0;
}
