/*
 * cuda_internal.h — what the CUDA backend's host code (cuda_*.c, plain C) and its kernels
 * (kernels.cu, attention.cu) share: the launchers of the kernels, the layout of the work
 * lists attention reads, and the backend object.
 *
 * Every launcher enqueues on the given stream and returns the launch's cudaError_t as an
 * int (0: queued); failures are recorded by the caller and reported at compute_sync.
 * Every pointer a kernel reads or writes is device memory.
 */
#ifndef CAIRN_COMPUTE_CUDA_INTERNAL_H
#define CAIRN_COMPUTE_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- attention work lists (built on the host per call, attention.c; read by attention.cu) */

/* Keys per split, a fixed function of the row's own position (never of the batch): a row
 * at position pos has its keys cut at multiples of CUDA_ATTN_SPLIT_SHORT when pos <
 * CUDA_ATTN_SPLIT_MID_AT, of CUDA_ATTN_SPLIT_MID from there to CUDA_ATTN_SPLIT_AT, of
 * CUDA_ATTN_SPLIT_LONG from there on (cuda_attn_split_for), so its bits depend on its own
 * position only. Long contexts get long splits: fewer partials to store and merge, fewer
 * split boundaries in the stream (device runs 9-13; the 1024-key tier since session 8,
 * numerics revision 3: 1024-key splits read 32 x 4K at 4.01 TB/s against 3.86 with 512,
 * device run 21). 16-key chunks. */
#define CUDA_ATTN_SPLIT_SHORT 512
#define CUDA_ATTN_SPLIT_MID 1024
#define CUDA_ATTN_SPLIT_LONG 2048
#define CUDA_ATTN_SPLIT_MID_AT 2048
#define CUDA_ATTN_SPLIT_AT 4096
#define CUDA_ATTN_CHUNK 16
/* The largest split the kernels take (their chunk pointer table holds this many keys). */
#define CUDA_ATTN_MAX_SPLIT 2048
/* Decode blocks of all K/V heads (the HEADS mode of attention.cu): at most this many
 * heads (warps), and their three stages must fit the block's shared memory (227 KiB on
 * sm_90 with the opt-in). */
#define CUDA_ATTN_MAX_HEADS_WARPS 8
#define CUDA_ATTN_SMEM_MAX (227 * 1024)
/* Splits whose accumulators the merge loads before combining them. */
#define CUDA_ATTN_MERGE_AHEAD 16
/* The fused merge's (merge_block): units of 4 output dims a thread folds at once, and the
 * splits of each whose loads (16 + 8 bytes) are issued before they are combined. */
#define CUDA_ATTN_MERGE_BLOCK_UNITS 4
#define CUDA_ATTN_MERGE_BLOCK_AHEAD 4
/* Warps per block of the attention kernels. */
#define CUDA_ATTN_WARPS 4

/* One query row: a token of a sequence group at pos. */
typedef struct {
    const float *q;   /* [n_heads * head_dim] rotated query */
    float *out;       /* [n_heads * head_dim] */
    int pos;
    int group;        /* index into the groups */
    int s_first;      /* first split holding a visible key */
    int n_splits;     /* splits [s_first, s_first + n_splits) */
    int part;         /* partial record of (row, split s, head h): (part + s - s_first) * n_heads + h */
    int n_items;      /* decode rows: the work items holding its splits (the blocks of one K/V head group
                       * the fused merge counts); 0 for prefill rows */
} cuda_attn_row_t;

/* The K/V of one sequence (adjacent query rows with one accessor): blocks of `block`
 * positions; table entries [2 * table, 2 * (table + n_blocks)) of the pointer table hold
 * K then V of each block (NULL: no storage, skipped). */
typedef struct {
    int table;
    int n_blocks;
} cuda_attn_group_t;

/* One work item: rows [row0, row0 + n_rows) of one group (consecutive positions) over the
 * keys of the splits [split, split + n_split) of `keys` keys each (prefill: always one split; decode: a run of
 * at most CUDA_ATTN_MAX_SPLIT keys, each split's partial computed from a reset state and
 * stored at its boundary, so a run's length never changes a bit). */
typedef struct {
    int row0, n_rows;
    int split;
    int pos_lo, pos_hi; /* the first and last row's positions */
    int n_split;
    int keys;           /* keys per split of these rows (every row of an item has the same) */
    int pad;
} cuda_attn_item_t;

typedef struct {
    const cuda_attn_row_t *rows;
    const cuda_attn_group_t *groups;
    const cuda_attn_item_t *items;
    const void *const *table; /* [2 * entries] K, V block base pointers */
    float *partials;          /* records [CUDA_ATTN_REC(head_dim)] floats: acc[head_dim], m, l */
    int n_items;
    int n_heads, n_kv_heads;
    int group_size;           /* n_heads / n_kv_heads (<= 16) */
    int tokens_per_warp;      /* 16 / group_size: query tokens in one 16-row mma tile */
    int kv_stride;            /* elements between consecutive positions: n_kv_heads * head_dim */
    int block;                /* positions per K/V block (a multiple of CUDA_ATTN_CHUNK) */
    int window;               /* 0: causal; W: keys j with pos - W < j <= pos */
    float scale;              /* score = q.k * scale */
    float scale_log2;         /* scale times log2(e) (no soft-cap: scores go straight to base 2) */
    float softcap;            /* 0: none */
    int n_rows;               /* for the merge */
    int heads;                /* decode: 0: blocks of 4 warps, each its own item and head; h > 0: blocks of
                               * h consecutive K/V heads of one item sharing each chunk (n_kv_heads % h == 0,
                               * cuda_attn_heads_fit) */
    int l2_prefetch;          /* 1: the K/V copies ask the L2 for 256-byte blocks (attention.cu's PF; no bit changes) */
    int full_tile;            /* 1: decode computes the softmax of all 16 tile rows even when rows 8-15 hold no
                               * query (attention.cu's LO off; no bit changes; for benchmarks) */
    int head_warps;           /* decode blocks of heads: warps per K/V head (0 or 1: one; 2 or 4: each computes
                               * 1/head_warps of the PV product's output dims; cuda_attn_head_warps_ok; no bit
                               * changes) */
    int fused_merge;          /* decode only (no prefill items in the call): the last block of each (row,
                               * block's K/V heads) to store its partials merges them (merge_row_head, the
                               * same fold as the merge kernel: the same bits); no merge kernel runs */
    int *tickets;             /* fused_merge: [n_rows * n_kv_heads] per (row, first K/V head of a block) the
                               * blocks done so far; all 0 between calls (the last block resets its own) */
} cuda_attn_args_t;

/* Floats per partial record: the accumulator, m and l, padded to 16 bytes. */
#define CUDA_ATTN_REC(hd) ((hd) + 4)

/* Head dims the attention kernels are built for. */
static inline int cuda_attn_head_dim_ok(int hd) { return hd == 32 || hd == 64 || hd == 128; }

/* Keys per split of a row at position pos (see CUDA_ATTN_SPLIT_SHORT). */
static inline int cuda_attn_split_for(int pos)
{
    return pos < CUDA_ATTN_SPLIT_MID_AT ? CUDA_ATTN_SPLIT_SHORT
           : pos < CUDA_ATTN_SPLIT_AT   ? CUDA_ATTN_SPLIT_MID
                                        : CUDA_ATTN_SPLIT_LONG;
}

/* Shared memory of a decode block of nh K/V heads: three stages of 16 keys of K and V of
 * each head, and the chunk pointer table. */
static inline size_t cuda_attn_heads_smem(int nh, int hd)
{
    return 3 * (size_t)nh * 2 * 16 * hd * 2 + 2 * (CUDA_ATTN_MAX_SPLIT / CUDA_ATTN_CHUNK + 1) * sizeof(void *);
}

/* Whether decode blocks of nh K/V heads fit. */
static inline int cuda_attn_heads_fit(int nh, int hd)
{
    return nh >= 1 && nh <= CUDA_ATTN_MAX_HEADS_WARPS && cuda_attn_heads_smem(nh, hd) <= CUDA_ATTN_SMEM_MAX;
}

/* Decode blocks of heads with w > 1 warps per head: at most CUDA_ATTN_HEAD_WARPS_MAX(w)
 * warps a block, and the kernel's registers capped so that CUDA_ATTN_HEAD_WARPS_BLOCKS(w)
 * such blocks fit an SM (w 4: 8 warps, 2 blocks, <= 128 registers, 16 warps an SM; w 2:
 * 4 warps, 3 blocks, <= 168 registers, 12 warps: at 128 registers its kernel spilled). */
#define CUDA_ATTN_HEAD_WARPS_MAX(w) ((w) == 2 ? 4 : 8)
#define CUDA_ATTN_HEAD_WARPS_BLOCKS(w) ((w) == 2 ? 3 : 2)

/* Whether decode blocks of nh heads can run w warps per head (w > 1): head_dim 128, at
 * most 8 query heads per K/V head (the tile that skips its empty rows), no L2 hint, and
 * at most CUDA_ATTN_HEAD_WARPS_MAX(w) warps per block. */
static inline int cuda_attn_head_warps_ok(int w, int nh, int hd, int group_size)
{
    return (w == 2 || w == 4) && hd == 128 && group_size <= 8 && nh >= 1 && nh * w <= CUDA_ATTN_HEAD_WARPS_MAX(w);
}

/* The decode kernel (a.heads = h: blocks of h K/V heads of one work item; 0: one
 * work item per warp, the warps of a block consecutive K/V heads; a.fused_merge: it also
 * merges each row's splits), the prefill kernel (one item of up to 4 * tokens_per_warp
 * rows per block, the warps sharing each K/V chunk), and the merge of every row's splits
 * into its output (a programmatic dependent launch: it must directly follow the attention
 * kernels on the stream; not run after a fused decode kernel). */
int cuda_attn_decode(const cuda_attn_args_t *a, int head_dim, int n_items, cudaStream_t s);
int cuda_attn_prefill(const cuda_attn_args_t *a, int head_dim, int n_items, cudaStream_t s);
int cuda_attn_merge(const cuda_attn_args_t *a, int head_dim, cudaStream_t s);

/* ---- elementwise and row kernels (kernels.cu) ------------------------------------------ */

/* Element types as the kernels see them (cairn_dtype_t values are mapped by the host). */
enum { CUDA_T_F32 = 0, CUDA_T_F16 = 1, CUDA_T_BF16 = 2 };

/* One K/V row store: dst [n] bf16 = src [n] f32 (round to nearest even). */
typedef struct {
    void *dst;
    const float *src;
    int n;
    int pad;
} cuda_kv_store_t;

int cuda_k_kv_store(const cuda_kv_store_t *stores, int n_stores, cudaStream_t s);
/* y [n] bf16 = x [n] f32, round to nearest even. */
int cuda_k_to_bf16(void *y, const float *x, size_t n, cudaStream_t s);
/* dst [n][cols] f32 = rows ids[] of table (type t). */
int cuda_k_get_rows(float *dst, const void *table, int t, int cols, const int32_t *ids, int n,
                    cudaStream_t s);
int cuda_k_rmsnorm(float *out, const float *x, int rows, int n, const void *w, int wt, float eps,
                   int unit_offset, cudaStream_t s);
int cuda_k_rope(float *x, int rows, int n_heads, int head_dim, int rot, const float *cos_sin,
                cudaStream_t s);
int cuda_k_glu(float *out, const float *gate, const float *up, size_t n, int act, cudaStream_t s);
int cuda_k_mul(float *out, const float *a, const float *b, size_t n, cudaStream_t s);
int cuda_k_add(float *x, const float *y, size_t n, cudaStream_t s);
int cuda_k_scale(float *x, float v, size_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
