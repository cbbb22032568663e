/*
 * fs_store_impl.h — private: the filesystem store's structure, shared by fs_store.c
 * (directory, index, quota, reads, maintenance, telemetry), fs_writer.c (queue, writer
 * thread), fs_ahead.c (the restores' reads ahead) and fs_ops.c (the store behind the tier
 * interface).
 *
 * Locks: `mu` guards the index, the LRU list and the counters; `qmu` guards the write
 * queue; `amu` guards the read-ahead (fs_ahead.c: the table, its buffers, the ring). No two
 * are ever held together, so there is no lock order to get wrong.
 */
#ifndef CAIRN_FS_STORE_IMPL_H
#define CAIRN_FS_STORE_IMPL_H

#include <pthread.h>
#include <sys/types.h>

#include "cairn/cold_tier.h"
#include "tier/tier_object.h"

typedef struct fs_entry {
    cairn_tier_hash_t hash, parent; /* parent: BLOCK only */
    uint64_t file_bytes;
    uint64_t boundary;         /* STATE: tokens before its boundary */
    uint32_t n_tokens;         /* BLOCK: tokens per block */
    uint32_t group;            /* the key's group (BLOCK: 0) */
    uint8_t kind;              /* CAIRN_TIER_BLOCK or CAIRN_TIER_STATE: with hash and group, the name */
    uint32_t pins;             /* readers in flight; eviction skips pinned entries */
    uint32_t children;         /* BLOCK: indexed objects anchored on it (blocks whose parent it
                                  is, sidecars at its boundary); the quota evicts only
                                  entries without children */
    bool removed;              /* unlinked from the index while pinned: freed on unpin */
    struct fs_entry *next;     /* hash bucket chain */
    struct fs_entry *prev_lru, *next_lru; /* lru_head is the least recently used */
} fs_entry_t;

/* One queued write: the object's identity and a private copy of tokens (BLOCK), layout
 * descriptor (STATE) and payload. The buffer reserves header_cap bytes in front of the
 * payload so the writer encodes the header in place and commits the object with a single
 * write. */
typedef struct {
    cairn_tier_object_t obj;   /* tokens, layout and payload point into the copies below */
    int32_t *tokens;
    uint8_t *layout;
    uint8_t *buf;
    size_t header_cap;
} fs_job_t;

/* Queue slots only STATE objects may take, beyond the depth every object shares: a capture
 * walk that fills the queue with blocks still leaves its sidecar room (a dropped sidecar
 * makes the turn's whole chain unrestorable for a hybrid model). */
#define FS_STATE_SLOTS 2

/* Objects a prefetch opened (and hinted to the kernel, or is reading), waiting for their
 * read (fs_ahead.c). */
#define FS_AHEAD_SLOTS 32

/* Direct reads in flight at most, and the bytes of their buffers at most (at least two
 * buffers whatever the object size). */
#define FS_DIRECT_BUFS 16
#define FS_DIRECT_BYTES (64u << 20)

typedef struct {
    cairn_tier_hash_t hash;
    int fd;
    int buf;                   /* a direct read into that buffer, or -1 (buffered hint) */
} fs_ahead_t;

typedef struct {
    uint8_t state;             /* fs_ahead.c: free, in flight, done, taken by a reader */
    int32_t res;               /* done: the read's result (bytes, or -errno) */
} fs_dbuf_t;

/* A prefetched object handed to its read (fs__take_ahead): fd -1 when none was kept; buf
 * >= 0 when the whole object was read directly: res bytes (or -errno) at `bytes`. */
typedef struct {
    int fd;
    int buf;
    int32_t res;
    const uint8_t *bytes;
} fs_taken_t;

struct cairn_cold_store {
    cairn_tier_store_t base;   /* first: the tier interface (fs_ops.c) */
    char *dir;                 /* <root>/<fingerprint hex> */
    cairn_tier_hash_t fp;
    cairn_dtype_t dtype;
    uint32_t block_tokens, n_layers;   /* n_layers 0: layout "any" */
    uint64_t *layer_bytes;
    uint64_t payload_bytes;
    uint64_t quota;

    pthread_mutex_t mu;
    fs_entry_t **buckets;
    size_t n_buckets, count;
    uint64_t used;
    size_t n_state;            /* of count, STATE objects */
    uint64_t state_used;       /* of used, their bytes */
    fs_entry_t *lru_head, *lru_tail;
    cairn_tier_stats_t c;      /* counters only; gauges are filled by stats() */

    pthread_mutex_t qmu;
    pthread_cond_t q_not_full, q_not_empty, q_idle;
    fs_job_t **queue;          /* ring of depth + FS_STATE_SLOTS entries */
    uint32_t depth, qcap, qhead, qlen; /* qcap = depth + FS_STATE_SLOTS */
    fs_job_t **batch;          /* the jobs the writer is committing (a group commit) */
    uint32_t batch_len, batch_max;
    bool stop, has_thread;
    pthread_t thread;

    pthread_mutex_t amu;
    fs_ahead_t ahead[FS_AHEAD_SLOTS]; /* oldest first; a full table closes its oldest */
    uint32_t n_ahead;
    int direct;                /* direct reads: -1 not set up yet, 0 off, 1 on */
    void *ring;                /* struct io_uring * of the direct reads */
    pid_t ring_pid;            /* the process that set the ring up */
    uint8_t *dmem;             /* n_dbuf buffers of dcap bytes, page-aligned (mmap) */
    size_t dcap;
    uint32_t n_dbuf;
    fs_dbuf_t dbuf[FS_DIRECT_BUFS];
    uint64_t direct_reads;     /* objects served from a direct read (under mu) */
};

/* The ops table of the tier interface (fs_ops.c); set by create. */
extern const cairn_tier_store_ops_t fs__ops;

/* The key of the BLOCK of group 0 named h (what the store's own block calls take). */
cairn_tier_key_t fs__block_key(const cairn_tier_hash_t *h);

/* Object and shard paths (docs/FORMAT.md 1.1: <hash>.kv for a BLOCK, <hash>.<group>.st
 * for a STATE); the caller frees. NULL on ENOMEM. */
char *fs__object_path(const cairn_cold_store_t *s, const cairn_tier_key_t *k);
char *fs__shard_path(const cairn_cold_store_t *s, const cairn_tier_hash_t *h);

/* Index operations; the caller holds s->mu. An entry is named by (hash, kind, group); the
 * key's domain is not stored (the hash covers it). */
fs_entry_t *fs__find_locked(cairn_cold_store_t *s, const cairn_tier_key_t *k);
/* Inserts (or touches) an entry as most recently used: parent and n_tokens of a BLOCK,
 * boundary of a STATE. CAIRN_ENOMEM on failure. */
int fs__insert_locked(cairn_cold_store_t *s, const cairn_tier_key_t *k, const cairn_tier_hash_t *parent,
                      uint64_t file_bytes, uint32_t n_tokens, uint64_t boundary);
/* Evicts until used <= quota, least recently used first among the unpinned entries
 * (except `keep`) that no other indexed object is anchored on: a chain is useless without
 * its head, so a block goes only after every descendant (and sidecar) it anchors, and a
 * shared prefix stays while any conversation through it is kept. Evicting an entry's last
 * child evicts the anchor next when the quota still needs room (an anchor is older than
 * its children by construction: written and read before them). Counts evictions. */
size_t fs__evict_locked(cairn_cold_store_t *s, uint64_t quota, const fs_entry_t *keep);

/*
 * The read path (fs_store.c) of cairn_cold_store_read and the interface's get: with
 * `dest` NULL the payload goes to dst (dst_size >= payload, else CAIRN_ERANGE); with dest
 * set it is asked for the destination after the entry is pinned (so nothing it does can
 * evict it), and a NULL destination returns CAIRN_ECANCELED (restore_declines). The other
 * results and counters: cairn_cold_store_read's.
 */
int fs__read(cairn_cold_store_t *s, const cairn_tier_hash_t *hash, const cairn_tier_hash_t *parent,
             const int32_t *tokens, uint32_t n_tokens, void *dst, size_t dst_size, cairn_tier_dest_fn dest,
             void *user);

/* The read path of a STATE object (the interface's get): pins the entry, reads and checks
 * the header against `want` (fingerprint, hash, group, boundary, the layout descriptor
 * byte for byte, the exact size), asks dest for the payload's destination, reads it and
 * checks its XXH3-128. Results and counters as fs__read's. */
int fs__read_state(cairn_cold_store_t *s, const cairn_tier_object_t *want, cairn_tier_dest_fn dest, void *user);

/* Prefetch (fs_ahead.c): opens the object of h and starts its direct read, or hints the
 * kernel to read it, keeping either for its read. fs__take_ahead hands a kept one over
 * (waiting for its direct read to complete; fd -1: none), fs__give_back returns its
 * buffer and closes its descriptor; fs__drop_ahead retires them all and releases the
 * ring and the buffers (destroy). Thread-safe (s->amu). */
void fs__prefetch(cairn_cold_store_t *s, const cairn_tier_hash_t *h);
fs_taken_t fs__take_ahead(cairn_cold_store_t *s, const cairn_tier_hash_t *h);
void fs__give_back(cairn_cold_store_t *s, fs_taken_t *t);
void fs__drop_ahead(cairn_cold_store_t *s);

/* Objects a read served from a direct read so far (tests: which path ran). */
uint64_t fs__direct_reads(cairn_cold_store_t *s);

/* Writer lifecycle (fs_writer.c). */
int fs__writer_start(cairn_cold_store_t *s);
void fs__writer_stop(cairn_cold_store_t *s);
/* Whether the object is queued or being written; the caller holds s->qmu. */
bool fs__writer_pending(cairn_cold_store_t *s, const cairn_tier_key_t *k);
/* The same, taking s->qmu. */
bool fs__pending(cairn_cold_store_t *s, const cairn_tier_key_t *k);
/* cairn_cold_store_enqueue of a BLOCK (group 0) or a STATE object (fs_writer.c); the same
 * contract. A BLOCK waits for one of the `depth` shared slots, a STATE may also take one
 * of the FS_STATE_SLOTS reserved for sidecars. */
int fs__enqueue(cairn_cold_store_t *s, const cairn_tier_object_t *obj, uint32_t wait_ms, bool *queued);

#endif
