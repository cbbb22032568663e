/*
 * cold_store_impl.h — private: the store structure shared by cold_store.c (directory,
 * index, quota, reads, maintenance, telemetry) and cold_writer.c (queue, writer thread,
 * capture).
 *
 * Locks: `mu` guards the index, the LRU list and the counters; `qmu` guards the write
 * queue. They are never held together, so there is no lock order to get wrong.
 */
#ifndef CAIRN_COLD_STORE_IMPL_H
#define CAIRN_COLD_STORE_IMPL_H

#include <pthread.h>

#include "tier/tier_object.h"

typedef struct cold_entry {
    cairn_cold_hash_t hash, parent;
    uint64_t file_bytes;
    uint32_t n_tokens;
    uint32_t pins;             /* readers in flight; eviction skips pinned entries */
    bool removed;              /* unlinked from the index while pinned: freed on unpin */
    struct cold_entry *next;   /* hash bucket chain */
    struct cold_entry *prev_lru, *next_lru; /* lru_head is the least recently used */
} cold_entry_t;

/* One queued write: the block's identity and a private copy of tokens and payload. The
 * buffer reserves header_cap bytes in front of the payload so the writer encodes the
 * header in place and commits the object with a single write. */
typedef struct {
    cairn_cold_block_t blk;    /* tokens and payload point into the copies below */
    int32_t *tokens;
    uint8_t *buf;
    size_t header_cap;
} cold_job_t;

struct cairn_cold_store {
    char *dir;                 /* <root>/<fingerprint hex> */
    cairn_cold_hash_t fp;
    cairn_dtype_t dtype;
    uint32_t block_tokens, n_layers;   /* n_layers 0: layout "any" */
    uint64_t *layer_bytes;
    uint64_t payload_bytes;
    uint64_t quota;

    pthread_mutex_t mu;
    cold_entry_t **buckets;
    size_t n_buckets, count;
    uint64_t used;
    cold_entry_t *lru_head, *lru_tail;
    cairn_cold_stats_t c;      /* counters only; gauges are filled by stats() */

    pthread_mutex_t qmu;
    pthread_cond_t q_not_full, q_not_empty, q_idle;
    cold_job_t **queue;
    uint32_t depth, qhead, qlen;
    cold_job_t **batch;        /* the jobs the writer is committing (a group commit) */
    uint32_t batch_len, batch_max;
    bool stop, has_thread;
    pthread_t thread;
    unsigned long tmp_seq;

    pthread_mutex_t trace_mu;
    char *trace_path;
    cairn_cold_stats_t trace_base;
};

/* Object and temp-file paths; the caller frees. NULL on ENOMEM. */
char *cold__object_path(const cairn_cold_store_t *s, const cairn_cold_hash_t *h);
char *cold__shard_path(const cairn_cold_store_t *s, const cairn_cold_hash_t *h);

/* Index operations; the caller holds s->mu. */
cold_entry_t *cold__find_locked(cairn_cold_store_t *s, const cairn_cold_hash_t *h);
/* Inserts (or touches) an entry as most recently used. CAIRN_ENOMEM on failure. */
int cold__insert_locked(cairn_cold_store_t *s, const cairn_cold_hash_t *h, const cairn_cold_hash_t *parent,
                        uint64_t file_bytes, uint32_t n_tokens);
/* Evicts LRU unpinned entries (except `keep`) until used <= quota; counts evictions. */
size_t cold__evict_locked(cairn_cold_store_t *s, uint64_t quota, const cold_entry_t *keep);

/* Writer lifecycle (cold_writer.c). */
int cold__writer_start(cairn_cold_store_t *s);
void cold__writer_stop(cairn_cold_store_t *s);
/* Whether the block is queued or being written. */
bool cold__writer_pending(cairn_cold_store_t *s, const cairn_cold_hash_t *h);

/* Monotonic milliseconds. */
double cold__now_ms(void);

#endif
