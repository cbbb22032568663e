/*
 * attention.h — causal grouped-query attention over an abstract K/V row accessor.
 *
 * The flat and the paged K/V paths differ only in how (layer, position) maps to the
 * address of a K/V row; attention is written once against attn_kv_t, so both paths run
 * the same reductions in the same order and give the same bits. The order is spelled out
 * in attention_impl.h.
 */
#ifndef CAIRN_COMPUTE_CPU_ATTENTION_H
#define CAIRN_COMPUTE_CPU_ATTENTION_H

#include "cairn/common.h"
#include "util/thread_pool.h"

/*
 * Maps (layer, pos) of one sequence to its K and V rows, each [n_kv_heads * head_dim] of
 * the K/V dtype, and returns how many consecutive positions starting at pos are stored
 * contiguously after them (>= 1: the rest of a paged block, or the rest of a flat array).
 * Returns <= 0 when pos has no storage (a broken invariant for the callers).
 */
typedef int (*attn_rows_fn)(void *ctx, int layer, int pos, void **k, void **v);

typedef struct {
    attn_rows_fn rows;
    void *ctx;
} attn_kv_t;

/* One query row: a token at position pos attends over positions 0..pos of kv. */
typedef struct {
    const float *q;       /* [n_heads * head_dim] rotated query */
    float *out;           /* [n_heads * head_dim] attention output */
    const attn_kv_t *kv;
    int pos;
} attn_query_t;

typedef struct {
    int n_heads, n_kv_heads, head_dim;
    cairn_dtype_t kv_dtype;
    float *scratch;       /* [n_slots][attn_scratch_floats(...)] scores and K/V tiles */
    int n_slots;          /* scratch slots: tasks per call */
    int max_positions;    /* longest attention span (max context) */
} attn_cfg_t;

/* Floats of scratch one slot needs (cfg->scratch holds n_slots of them). */
size_t attn_scratch_floats(int n_heads, int n_kv_heads, int head_dim, int max_positions);

/*
 * out = softmax(q . k^T / sqrt(head_dim)) . v for every (query, head), in float32, in the
 * canonical order of attention_impl.h: each (query, head) row is reduced by one task, over
 * keys 0..pos by increasing position, with operations that depend only on pos and
 * head_dim. The work is cut into tiles of consecutive queries of one sequence times one
 * K/V head (the heads of a group share each converted K/V row), but tiling, the other
 * queries in the call and the thread count never change a bit. Decode (one query) and
 * prefill (many) therefore agree exactly.
 * Thread-safety: uses tp; one call at a time per cfg. Cost: each K/V row of the span is
 * read and widened to f32 once per tile, not once per (query, head).
 */
void attn_forward(cairn_thread_pool_t *tp, const attn_cfg_t *cfg, int layer,
                  const attn_query_t *queries, int n_queries);

#endif
