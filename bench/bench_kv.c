/*
 * bench_kv — KV cache core benchmarks (medians of repeated runs, with a baseline measured
 * in the same run). Built, never run by ctest. Usage: bench_kv [reps] (default 21).
 *
 *  1. block hashing of a 32K-token prompt (bs 16), ns/token; baseline: one SHA-256 over the
 *     same token bytes in a single call (the throughput floor of the hash itself);
 *  2. lookup of a fully cached 32K-token prompt from its block hashes, and hash + lookup;
 *     baseline: the hashing alone;
 *  3. block allocate + free pairs per second through the pool (and through the sequence
 *     API: append one block's tokens + truncate them); baseline: cairn_malloc + cairn_free
 *     of a block-metadata-sized object;
 *  4. pool grow 2 GiB -> 4 GiB (commit in place); baseline: the copying grow (new mapping,
 *     memcpy of the old contents) at 256 MiB -> 512 MiB, which scales linearly.
 */
#include "cairn/kv_cache.h"
#include "kv/kv_internal.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

#define CHECK(x)                                                                   \
    do {                                                                           \
        int rc_ = (x);                                                             \
        if (rc_) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cairn_strerror(rc_)); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static cairn_kv_cache_t *make_cache(uint32_t n_layers, uint64_t mib, uint64_t init_mib)
{
    static cairn_kv_layer_spec_t layers[64];
    for (uint32_t i = 0; i < n_layers; i++)
        layers[i] = (cairn_kv_layer_spec_t){CAIRN_KV_LAYER_FULL, 8, 128, 0, 0};
    cairn_kv_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.layers = layers;
    cfg.n_layers = n_layers;
    cfg.dtype = CAIRN_DTYPE_BF16;
    cfg.block_size = 16;
    cfg.memory_mib = mib;
    cfg.initial_mib = init_mib;
    cairn_kv_cache_t *c = NULL;
    CHECK(cairn_kv_cache_create(&cfg, &c));
    return c;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 21;
    if (reps < 3 || reps > 1000)
        reps = 21;
    double *t = calloc((size_t)reps, sizeof *t), *u = calloc((size_t)reps, sizeof *u);
    const size_t N = 32768, BS = 16, NB = N / BS;
    int32_t *toks = malloc(N * sizeof *toks);
    for (size_t i = 0; i < N; i++)
        toks[i] = (int32_t)((i * 2654435761u) % 151936);
    cairn_kv_hash_t *h = malloc(NB * sizeof *h);

    /* 1. hashing */
    cairn_kv_cache_t *c = make_cache(1, 256, 0); /* 1 layer: 64 KiB blocks, 4096 blocks */
    cairn_kv_hash_t dom;
    CHECK(cairn_kv_domain_from_salt(c, "bench-tenant", 12, &dom));
    for (int r = 0; r < reps; r++) {
        double t0 = now_ns();
        CHECK(cairn_kv_cache_hash_blocks(c, &dom, NULL, 0, toks, N, h));
        t[r] = now_ns() - t0;
        unsigned char md[32];
        unsigned int len;
        t0 = now_ns();
        EVP_Digest(toks, N * sizeof *toks, md, &len, EVP_sha256(), NULL);
        u[r] = now_ns() - t0;
    }
    double hash_ns = median(t, reps), sha_ns = median(u, reps);
    printf("hash 32K-token prompt: %.2f ns/token (%.1f us); single-call SHA-256 of the same bytes: "
           "%.2f ns/token; ratio %.2fx\n", hash_ns / N, hash_ns / 1e3, sha_ns / N, hash_ns / sha_ns);

    /* 2. lookup of a fully cached prompt */
    cairn_kv_seq_t *s = NULL;
    size_t P;
    CHECK(cairn_kv_seq_begin(c, &dom, NULL, 0, toks, N, &s, &P));
    CHECK(cairn_kv_seq_commit(s, N));
    cairn_kv_seq_release(s, NULL); /* all 2048 blocks cached */
    for (int r = 0; r < reps; r++) {
        double t0 = now_ns();
        CHECK(cairn_kv_cache_lookup_hashes(c, &dom, h, N, &P));
        t[r] = now_ns() - t0;
        if (P != N - BS) {
            fprintf(stderr, "lookup found %zu tokens\n", P);
            return 1;
        }
        t0 = now_ns();
        CHECK(cairn_kv_cache_lookup(c, &dom, NULL, 0, toks, N, &P));
        u[r] = now_ns() - t0;
    }
    double look_ns = median(t, reps), full_ns = median(u, reps);
    printf("lookup fully cached 32K prompt: %.1f us from hashes (%.1f ns/block); hash+lookup %.1f us; "
           "lookup/hashing ratio %.2f\n", look_ns / 1e3, look_ns / NB, full_ns / 1e3, look_ns / hash_ns);

    /* 3. allocate + free pairs */
    const int PAIRS = 2000000;
    for (int r = 0; r < reps; r++) {
        double t0 = now_ns();
        for (int i = 0; i < PAIRS; i++) {
            CHECK(kv_cache__ensure_free(c, 1));
            uint32_t id = kv_cache__alloc(c);
            kv_block_pool_unref(&c->pool, id);
        }
        t[r] = now_ns() - t0;
        t0 = now_ns();
        for (int i = 0; i < PAIRS; i++) {
            void *p = cairn_malloc(sizeof(kv_block_t));
            __asm__ volatile("" : : "r"(p) : "memory");
            cairn_free(p);
        }
        u[r] = now_ns() - t0;
    }
    double pair_ns = median(t, reps), mal_ns = median(u, reps);
    CHECK(cairn_kv_seq_begin(c, &dom, NULL, 0, toks, 1, &s, &P));
    CHECK(cairn_kv_seq_commit(s, 1));
    const int SEQ_PAIRS = 200000;
    for (int r = 0; r < reps; r++) {
        double t0 = now_ns();
        for (int i = 0; i < SEQ_PAIRS; i++) {
            CHECK(cairn_kv_seq_append(s, toks + 1, BS));
            CHECK(cairn_kv_seq_truncate(s, BS));
        }
        t[r] = now_ns() - t0;
    }
    double seq_ns = median(t, reps);
    printf("block alloc+free: %.1f M pairs/s (%.1f ns/pair); sequence append(16)+truncate(16): "
           "%.1f M/s; cairn_malloc+free baseline %.1f M pairs/s; ratio %.2fx\n",
           PAIRS / pair_ns * 1e3, pair_ns / PAIRS, SEQ_PAIRS / seq_ns * 1e3, PAIRS / mal_ns * 1e3,
           mal_ns / pair_ns);
    cairn_kv_seq_release(s, NULL);
    cairn_kv_cache_destroy(c);

    /* 4. grow 2 GiB -> 4 GiB: 8 layers x 8 heads x 128 x bf16 x 16 tokens x K,V = 512 KiB/block */
    int greps = reps < 11 ? reps : 11;
    for (int r = 0; r < greps; r++) {
        c = make_cache(8, 4096, 2048);
        cairn_kv_layer_view_t v;
        CHECK(cairn_kv_layer_view(c, 0, &v));
        memset(v.base, 0x11, 64u << 20); /* some live data that must not move */
        cairn_kv_stats_t st;
        cairn_kv_cache_stats(c, &st);
        double t0 = now_ns();
        CHECK(cairn_kv_cache_grow(c, st.blocks_free + 1));
        t[r] = now_ns() - t0;
        cairn_kv_stats_t st2;
        cairn_kv_cache_stats(c, &st2);
        cairn_kv_layer_view_t v2;
        CHECK(cairn_kv_layer_view(c, 0, &v2));
        if (st2.bytes_committed != 2 * st.bytes_committed || v2.base != v.base || v.base[12345] != 0x11) {
            fprintf(stderr, "grow did not double in place\n");
            return 1;
        }
        cairn_kv_cache_destroy(c);
        /* baseline: copying grow, 256 MiB -> 512 MiB with the old range fully written */
        size_t old = 256u << 20;
        uint8_t *a = mmap(NULL, old, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memset(a, 0x22, old);
        t0 = now_ns();
        uint8_t *b = mmap(NULL, 2 * old, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memcpy(b, a, old);
        munmap(a, old);
        u[r] = now_ns() - t0;
        munmap(b, 2 * old);
    }
    double grow_ns = median(t, greps), copy_ns = median(u, greps);
    printf("grow 2 GiB -> 4 GiB in place: %.1f us, 0 bytes copied; copying grow 256 MiB -> 512 MiB: "
           "%.1f ms (x8 for 2 GiB: ~%.0f ms); ratio ~%.0fx\n",
           grow_ns / 1e3, copy_ns / 1e6, 8 * copy_ns / 1e6, 8 * copy_ns / grow_ns);
    free(t);
    free(u);
    free(toks);
    free(h);
    return 0;
}
