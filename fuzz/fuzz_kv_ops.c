/*
 * libFuzzer target: operation sequences against the KV cache core.
 *
 * The input is a program: byte 0 picks the model configuration, then each op is one
 * opcode byte followed by argument bytes (missing bytes read as 0). Ops cover the whole
 * public API (begin, append, commit, fork, truncate, end turn, preempt, resume, release,
 * evict, grow, checkpoint, lookup, stats/JSON) plus injected allocation failures. After
 * every op the cache's internal invariants are checked; a violation aborts. Memory errors
 * and leaks are the sanitizers'.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cairn/kv_cache.h"
#include "kv/kv_internal.h"

#define MAXSEQ 8

typedef struct {
    const uint8_t *p;
    size_t n;
} cursor_t;

static uint8_t next(cursor_t *c)
{
    if (!c->n)
        return 0;
    c->n--;
    return *c->p++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cursor_t cur = {data, size};
    uint8_t config = next(&cur);
    cairn_kv_layer_spec_t layers[5];
    uint32_t nl = 0;
    layers[nl++] = (cairn_kv_layer_spec_t){CAIRN_KV_LAYER_FULL, 1, 256, 0, 0};
    if (config & 1)
        layers[nl++] = (cairn_kv_layer_spec_t){CAIRN_KV_LAYER_SLIDING, 2, 64, 1 + (config >> 4), 0};
    if (config & 2)
        layers[nl++] = (cairn_kv_layer_spec_t){CAIRN_KV_LAYER_RECURRENT, 0, 0, 0, 0};
    if (config & 4)
        layers[nl++] = (cairn_kv_layer_spec_t){CAIRN_KV_LAYER_SHARED, 0, 0, 0, 0};
    cairn_kv_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.layers = layers;
    cfg.n_layers = nl;
    cfg.dtype = (cairn_dtype_t)(config % 3);
    cfg.block_size = 1 + ((config >> 3) & 3) * 3; /* 1, 4, 7, 10 */
    cfg.memory_mib = 2;
    cfg.initial_mib = 1;
    cfg.max_checkpoints = 4;
    cairn_kv_cache_t *cache = NULL;
    if (cairn_kv_cache_create(&cfg, &cache) != 0)
        return 0;
    cairn_kv_hash_t doms[3];
    memset(doms, 0, sizeof doms);
    cairn_kv_domain_from_salt(cache, "a", 1, &doms[1]);
    cairn_kv_domain_from_salt(cache, "b", 1, &doms[2]);
    cairn_kv_seq_t *seqs[MAXSEQ] = {0};
    int32_t toks[64];
    while (cur.n) {
        uint8_t op = next(&cur), a = next(&cur), b = next(&cur);
        cairn_kv_seq_t **sp = &seqs[a % MAXSEQ];
        size_t n = 1 + (b % 48), P;
        for (size_t i = 0; i < n; i++)
            toks[i] = (int32_t)((a >> 3) * 100 + (i % (1 + (b >> 6)) == 0 ? 7 : (int32_t)i));
        switch (op % 15) {
        case 0:
            if (!*sp) {
                cairn_kv_extra_key_t ek = {"x", 1};
                cairn_kv_seq_begin(cache, (b & 3) < 3 ? &doms[b & 3] : NULL, &ek, (a >> 7) & 1,
                                   toks, n, sp, &P);
            }
            break;
        case 1:
            if (*sp)
                cairn_kv_seq_append(*sp, toks, 1 + b % 9);
            break;
        case 2:
            if (*sp) {
                size_t c = cairn_kv_seq_n_computed(*sp), t = cairn_kv_seq_n_tokens(*sp);
                cairn_kv_seq_commit(*sp, c + (t > c ? b % (t - c + 2) : b % 2));
            }
            break;
        case 3:
            if (*sp && !seqs[b % MAXSEQ])
                cairn_kv_seq_fork(*sp, &seqs[b % MAXSEQ]);
            break;
        case 4:
            if (*sp)
                cairn_kv_seq_truncate(*sp, b % 12);
            break;
        case 5:
            if (*sp)
                cairn_kv_seq_end_turn(*sp, NULL);
            break;
        case 6:
            if (*sp)
                cairn_kv_seq_preempt(*sp, NULL);
            break;
        case 7:
            if (*sp)
                cairn_kv_seq_resume(*sp, &P);
            break;
        case 8:
            cairn_kv_seq_release(*sp, NULL);
            *sp = NULL;
            break;
        case 9:
            cairn_kv_cache_evict(cache, b % 8, NULL);
            break;
        case 10:
            cairn_kv_cache_grow(cache, b);
            break;
        case 11:
            if (*sp)
                cairn_kv_seq_checkpoint(*sp, (size_t)(b % 16) * cfg.block_size, NULL);
            break;
        case 12:
            cairn_kv_cache_lookup(cache, &doms[b % 3], NULL, 0, toks, n, &P);
            break;
        case 13: {
            cairn_kv_stats_t st;
            char *js = NULL;
            cairn_kv_cache_stats(cache, &st);
            if (cairn_kv_stats_to_json(&st, &js) == 0)
                cairn_free(js);
            break;
        }
        default:
            cairn_alloc_fail_after(b % 4, (a & 1) != 0); /* the next op may fail to allocate */
            continue;
        }
        cairn_alloc_fail_after(-1, false);
        if (kv_cache__check(cache) != 0)
            abort();
    }
    cairn_alloc_fail_after(-1, false);
    cairn_kv_cache_destroy(cache);
    return 0;
}
