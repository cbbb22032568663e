/*
 * attention.h — the CPU backend's causal grouped-query attention over an abstract K/V row
 * accessor (attn_kv_t, src/compute/backend.h).
 *
 * The flat and the paged K/V paths differ only in how (layer, position) maps to the
 * address of a K/V row; attention is written once against attn_kv_t, so both paths run
 * the same reductions in the same order and give the same bits. The order is spelled out
 * in attention_impl.h. Positions the accessor reports without storage (a sliding
 * window's null blocks) are skipped.
 */
#ifndef CAIRN_COMPUTE_CPU_ATTENTION_H
#define CAIRN_COMPUTE_CPU_ATTENTION_H

#include "cairn/common.h"
#include "compute/backend.h"
#include "util/thread_pool.h"

typedef struct {
    int n_heads, n_kv_heads, head_dim;
    cairn_dtype_t kv_dtype;
    float *scratch;       /* [n_slots][attn_scratch_floats(...)] scores and K/V tiles */
    int n_slots;          /* scratch slots: tasks per call */
    int max_positions;    /* longest attention span (max context) */
} attn_cfg_t;

/* What masks and shapes the scores (compute_attn_params_t's fields); all zero (or a NULL
 * pointer) is Llama's full causal attention with scale 1 / sqrtf(head_dim). */
typedef struct {
    int window;           /* 0: full causal; W > 0: query p sees keys p - W < j <= p */
    float scale;          /* score scale; 0: 1 / sqrtf(head_dim) */
    float softcap;        /* 0: none; c > 0: score = c * tanhf(score / c) after the scale */
} attn_math_t;

/* Floats of scratch one slot needs (cfg->scratch holds n_slots of them). */
size_t attn_scratch_floats(int n_heads, int n_kv_heads, int head_dim, int max_positions);

/*
 * out = softmax(score(q, k)) . v for every (query, head) over its visible keys, in
 * float32, in the canonical order of attention_impl.h: each (query, head) row is reduced
 * by one task, over its keys by increasing position, with operations that depend only on
 * pos, the window and head_dim. The work is cut into tiles of consecutive queries of one
 * sequence times one K/V head (the heads of a group share each converted K/V row), but
 * tiling, the other queries in the call and the thread count never change a bit. Decode
 * (one query) and prefill (many) therefore agree exactly. bf16 K/V run the tile order of
 * attention_impl.h instead where kern__attn_tile_on() (AMX-BF16 tiles and
 * CAIRN_ATTN_BF16TILE not 0), else the pair order where kern__attn_pair_on() (AMX-BF16
 * machines whose tiles passed their check, or CAIRN_ATTN_BF16PAIR=1): the same guarantees,
 * other bits. Full causal
 * attention (an all-zero attn_math_t); runs the process's kernel implementation
 * (kern_impl_name).
 * Thread-safety: uses tp; one call at a time per cfg. Cost: each K/V row of the span (the
 * window, when there is one) is read and widened to f32 once per tile, not once per
 * (query, head).
 */
void attn_forward(cairn_thread_pool_t *tp, const attn_cfg_t *cfg, int layer,
                  const attn_query_t *queries, int n_queries);

#endif
