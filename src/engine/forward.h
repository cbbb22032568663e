/*
 * forward.h — one batched forward pass of a Llama / Qwen3 decoder over a list of rows.
 *
 * A row is one new token of one sequence at its position. The rows of a call form one
 * activation matrix [n_rows][hidden] for the projections and the MLP; attention runs per
 * (row, head) over the row's sequence through an attn_kv_t accessor. The caller (engine.c)
 * guarantees that every row's position has K/V storage and that a sequence's rows appear
 * in increasing position order, contiguous with what is already stored.
 */
#ifndef CAIRN_ENGINE_FORWARD_H
#define CAIRN_ENGINE_FORWARD_H

#include "cairn/checkpoint.h"
#include "compute/cpu/attention.h"
#include "compute/cpu/kernels.h"

typedef struct {
    int seq;        /* index into the views passed to fwd_run */
    int pos;        /* absolute position in the sequence */
    int32_t token;
    int out_row;    /* logits row to write, or -1 */
} fwd_row_t;

typedef struct {
    const cairn_model_config_t *cfg;
    const cairn_model_weights_t *w;
    cairn_thread_pool_t *tp;
    cairn_math_t math;
    cairn_dtype_t kv_dtype;
    int max_rows;          /* rows per call */
    int max_positions;     /* longest sequence */
    float *inv_freq;       /* [head_dim/2] */
    /* Scratch of one call, row-major. */
    float *x;              /* [max_rows][hidden]  residual stream */
    float *xb;             /* [max_rows][hidden]  normed input of a sub-layer */
    float *xb2;            /* [max_rows][hidden]  sub-layer output */
    float *q;              /* [max_rows][n_heads*head_dim] */
    float *k;              /* [max_rows][n_kv_heads*head_dim] */
    float *v;              /* [max_rows][n_kv_heads*head_dim] */
    float *att;            /* [max_rows][n_heads*head_dim] attention output */
    float *hb;             /* [max_rows][ffn] gate, then silu(gate)*up */
    float *hb2;            /* [max_rows][ffn] up */
    float *rope_cs;        /* [max_rows][head_dim]  cos/sin pairs per row */
    float *head_tmp;       /* [head_dim] */
    attn_query_t *queries; /* [max_rows] */
    attn_cfg_t attn;       /* scratch [n_slots][attn_scratch_floats(...)]: scores, K/V tiles */
} fwd_t;

/* Allocates the scratch for max_rows rows and computes the RoPE table. */
int fwd_init(fwd_t *f, const cairn_model_config_t *cfg, const cairn_model_weights_t *w,
             cairn_thread_pool_t *tp, cairn_math_t math, cairn_dtype_t kv_dtype,
             int max_rows, int max_positions);
void fwd_fini(fwd_t *f);

/*
 * Runs rows [n_rows] (n_rows <= max_rows) through every layer, storing their K/V through
 * views[row.seq], and writes logits [vocab] for each row with out_row >= 0 at
 * logits + out_row * vocab. Rows with logits must have increasing, consecutive out_row.
 */
void fwd_run(fwd_t *f, const fwd_row_t *rows, int n_rows, const attn_kv_t *views,
             float *logits);

#endif
