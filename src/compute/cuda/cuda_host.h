/*
 * cuda_host.h — the CUDA backend object and the helpers its host files share
 * (cuda_backend.c: ops and buffers; cuda_gemm.c: cuBLASLt products; cuda_attention.c:
 * attention work lists; cuda_kv_storage.c: the device K/V pool and its staging).
 *
 * Model. One backend object owns one stream; every op enqueues on it, in call order, so
 * ops see each other's results without events. Parameters an op needs on the device
 * (token ids, K/V store lists, attention tables) are written into a pinned host slot
 * (a ring of CUDA_SLOTS, each reused only after the event of its last copy) and copied to
 * one device "blob" buffer that the next kernel reads: the stream runs that copy only
 * after every earlier kernel finished, so one blob serves every op. K/V stores are
 * queued on the host and written by one kernel before the next op (cuda__flush_kv).
 * Failures are recorded (the first one wins) and returned by compute_sync.
 *
 * Thread-safety: one thread at a time per object (backend.h).
 */
#ifndef CAIRN_COMPUTE_CUDA_HOST_H
#define CAIRN_COMPUTE_CUDA_HOST_H

#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "compute/cuda/cuda_backend.h"
#include "compute/cuda/cuda_internal.h"

#define CUDA_SLOTS 16
/* The revision of the backend's numerics, the numerics id's last part. Sessions 1-4 had
 * none: every row's keys in 512-key splits. 2 (sessions 5-7) cut them into 2048-key splits
 * from position CUDA_ATTN_SPLIT_AT on. 3 (the default since session 8) also cuts rows at
 * positions CUDA_ATTN_SPLIT_MID_AT .. CUDA_ATTN_SPLIT_AT - 1 into 1024-key splits (512
 * before), so K/V a GPU wrote under revision 2 are misses. 1: 512-key splits everywhere
 * (CAIRN_CUDA_LONG_SPLITS=0: batch-1 decode at long contexts has 4x the work items;
 * device run 16: 2.8x faster at one row of 32K positions, 7-8% slower at 64 x 8K and
 * 8 x 32K). */
#define CUDA_NUMERICS_REV 3
#define CUDA_NUMERICS_REV_SHORT 1

typedef struct {
    void *host;        /* pinned */
    size_t cap;
    cudaEvent_t ev;    /* recorded after the copy that reads this slot */
    bool pending;
} cuda_slot_t;

typedef struct cuda_backend cuda_backend_t;

/* The device K/V pool (cuda_kv_storage.c): one reserved virtual range, physical chunks
 * mapped as it grows; two pinned staging buffers for the cold tier. */
typedef struct {
    cuda_backend_t *be;
    size_t gran;                 /* cuMemGetAllocationGranularity (minimum) */
    struct cuda_map {
        size_t off, size;
        CUmemGenericAllocationHandle h;
    } *maps;                     /* [n_maps] mapped chunks in commit order */
    int n_maps, cap_maps;
    void *stage[2];
    size_t stage_cap[2];
    cudaEvent_t ev[2];
    bool pending[2];
    int error;                   /* first staging failure since stage_sync */
} cuda_kv_storage_t;

typedef struct cuda_gemm_cache cuda_gemm_cache_t;

struct cuda_backend {
    compute_backend_t base;      /* first: the object is a compute_backend_t */
    int device, sm_count, cc_major, cc_minor;
    bool invariant;
    bool long_splits;            /* CAIRN_CUDA_LONG_SPLITS: the split rule's long splits (CUDA_NUMERICS_REV) */
    cudaStream_t stream;
    int error;                   /* first failure since the last sync (CAIRN_E*), 0: none */
    cuda_slot_t slots[CUDA_SLOTS];
    int next_slot;
    void *blob;                  /* device parameters of the op being issued */
    size_t blob_cap;
    cuda_kv_store_t *kv_pending; /* [kv_n] queued K/V row stores (host) */
    int kv_n, kv_cap;
    cublasLtHandle_t lt;
    void *ws;                    /* cuBLASLt workspace (fast mode only) */
    size_t ws_bytes;
    void *xbf;                   /* device bf16 copy of a matmul's x */
    size_t xbf_cap;
    cuda_gemm_cache_t *gemm;
    float *partials;             /* device attention split partials */
    size_t partials_cap;
    int *tickets;                /* device: the fused merge's counters (cuda_attn_args_t), all 0 between calls */
    size_t tickets_cap;          /* bytes */
    cuda_kv_storage_t kvs;
    struct cuda_prof *prof;      /* CAIRN_CUDA_PROFILE=1: per-op GPU and host time (cuda_backend.c); NULL: off */
    char numerics[64];
};

/* Records a failure (the first one since the last sync is kept) and logs it once. */
void cuda__fail(cuda_backend_t *b, int rc, const char *what, int cuda_err);
/* cuda__fail with CAIRN_EIO when e is not cudaSuccess; returns e == cudaSuccess. */
bool cuda__check(cuda_backend_t *b, int e, const char *what);

/* A pinned host area of n bytes to fill (the slot's previous copy has finished); NULL on
 * failure (recorded). */
void *cuda__stage(cuda_backend_t *b, size_t n, int *slot);
/* Copies the slot's first n bytes to the blob and returns the blob (device), or NULL on
 * failure (recorded). The slot is reusable once the copy ran. */
void *cuda__stage_to_blob(cuda_backend_t *b, int slot, size_t n);
/* Copies the slot's first n bytes to dst (device memory). */
void cuda__stage_to(cuda_backend_t *b, int slot, void *dst, size_t n);
/* Issues the queued K/V stores (one kernel). Every op calls it first. */
void cuda__flush_kv(cuda_backend_t *b);
/* Grows a stream-ordered device buffer to at least n bytes (contents not kept); false on
 * failure (recorded). */
bool cuda__grow(cuda_backend_t *b, void **p, size_t *cap, size_t n);

/* cuda_gemm.c */
int cuda__gemm_init(cuda_backend_t *b);
void cuda__gemm_fini(cuda_backend_t *b);
/* Appended to the numerics id when knobs change the algorithms ("" otherwise). */
void cuda__gemm_id_suffix(const cuda_backend_t *b, char *buf, size_t len);
void cuda__matmul(cuda_backend_t *b, const float *x, int rows, int in, const compute_mm_t *outs, int n);

/* cuda_attention.c. A plan is one call's work lists on the device (valid until the next
 * op that uploads parameters) plus the kernels' arguments; cuda__attention plans and runs.
 * Benchmarks plan once and run many times, and may set the split rule (the invariant
 * mode's is cuda_attn_split_for's) and the decode tuning. */
typedef struct {
    cuda_attn_args_t args;         /* items: the decode items */
    const cuda_attn_item_t *items_pre;
    int n_dec, n_pre, head_dim;
} cuda_attn_plan_t;
bool cuda__attn_plan(cuda_backend_t *b, compute_attn_t *a, int layer, const attn_query_t *q, int n,
                     cuda_attn_plan_t *plan);
void cuda__attn_run(cuda_backend_t *b, const cuda_attn_plan_t *plan);
/* Keys per split: s0 for rows at positions below at1, s1 from at1 to below at2, s2 from
 * at2 on (multiples of CUDA_ATTN_CHUNK, at most CUDA_ATTN_MAX_SPLIT; at1 <= at2; a rule of
 * two tiers: at1 == at2). Other values than the CUDA_ATTN_SPLIT_* constants give other
 * bits: for benchmarks and tests only. */
void cuda__attn_set_split(compute_attn_t *a, int s0, int s1, int s2, int at1, int at2);
/* How decode work maps onto the device; no field changes a bit of the results. */
typedef struct {
    int run;         /* decode splits per work item (a power of two; 0: chosen per call to fill the
                      * device; clamped so that a run holds at most CUDA_ATTN_MAX_SPLIT keys) */
    int heads;       /* K/V heads per decode block (-1: all; 0: blocks of 4 warps each streaming its
                      * own head); lowered to the nearest count that divides n_kv_heads and fits */
    int l2_prefetch; /* 1: the K/V copies ask the L2 for whole 256-byte blocks */
    int full_tile;   /* 1: the decode softmax over all 16 tile rows even where 8-15 are empty (the
                      * kernel before session 6; for benchmarks) */
    int head_warps;  /* decode blocks of heads: warps per K/V head (0 or 1: one; 2 or 4: the PV
                      * product's output dims spread over them, two blocks per SM at <= 128
                      * registers); 1 where cuda_attn_head_warps_ok refuses the call's blocks */
    int fused_merge; /* 1: in a call of decode rows only, the decode kernel's last block per (row, K/V
                      * head group) merges the splits with all its threads (no merge kernel; the same
                      * bits); 0: the merge kernel (device run 23: session 7's fused merge, one warp per
                      * (row, head) at a time, was 3-5% slower; run 24, all threads: 0.5-2.4% slower,
                      * its merges still in the kernel's tail, on one SM per row) */
} cuda_attn_tuning_t;
/* The default tuning (no bit changes): decode blocks of all K/V heads, fewer (down to one)
 * when the batch does not fill the device, no L2 hint, the decode tile that skips its
 * empty rows. Device run 19 (session 6), queued: 3.86 / 4.24 / 4.24 TB/s at 32 x 4K /
 * 64 x 8K / 8 x 32K, against 3.76 / 4.17 / 4.07 with blocks of up to 4 heads (session 5's
 * default, chosen when the tile was full: 3.69 / 3.86 / 3.70 in the same run). */
/* Session 7 (device runs 21-22): 4 warps per head where a call's blocks of single splits
 * are fewer than the SMs: 1 x 32K 0.83 -> 1.24 TB/s, 1 x 8K 0.21 -> 0.32, other shapes
 * unchanged (the same blocks). */
/* Session 7 (branch cuda6): the fused merge stays off (device run 23, queued, fused against
 * the merge kernel: 32 x 4K 0.1460 / 0.1394 ms, 64 x 8K 0.5210 / 0.5071, 8 x 32K 0.2658 /
 * 0.2549). */
#define CUDA_ATTN_TUNING_DEFAULT ((cuda_attn_tuning_t){0, -1, 0, 0, 4, 0})
/* Sets the tuning; NULL: the default. */
void cuda__attn_set_tuning(compute_attn_t *a, const cuda_attn_tuning_t *t);
int cuda__attn_create(cuda_backend_t *b, const compute_attn_params_t *p, compute_attn_t **out);
void cuda__attn_destroy(cuda_backend_t *b, compute_attn_t *a);
void cuda__attention(cuda_backend_t *b, compute_attn_t *a, int layer, const attn_query_t *q, int n);

/* cuda_kv_storage.c */
extern const cairn_kv_storage_ops_t cuda__kv_storage_ops;
int cuda__kv_storage_init(cuda_backend_t *b);
void cuda__kv_storage_fini(cuda_backend_t *b);

#endif
