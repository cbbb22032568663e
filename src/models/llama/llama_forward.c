/*
 * llama_forward.c — the llama family's forward pass (Llama, Mistral, Qwen3), batched over
 * rows: fwd_create / fwd_step / fwd_destroy of models/family.h.
 *
 * Model (HF LlamaForCausalLM / Qwen3ForCausalLM, float32 compute):
 *
 *   x = embed[token]
 *   for each layer:
 *       h = rmsnorm(x) * attn_norm
 *       q, k, v = h Wq^T, h Wk^T, h Wv^T
 *       (qwen3) q, k = rmsnorm per head * q_norm, k_norm
 *       q, k = rope(q, pos), rope(k, pos)            rotate_half pairing
 *       store k, v at (layer, pos) in the K/V dtype
 *       a = softmax(q k^T / sqrt(head_dim)) v         causal, grouped-query
 *       x = x + a Wo^T
 *       h = rmsnorm(x) * ffn_norm
 *       x = x + (silu(h Wgate^T) * (h Wup^T)) Wdown^T
 *   logits = (rmsnorm(x) * norm) Wlm^T                lm_head, or embed when tied
 *
 * All rows of a call share each matrix product (kern_matmul over n_rows), whose
 * per-row bits do not depend on n_rows or the thread count (kernels.h). Per-row work
 * (norms, RoPE, K/V stores) is row-local. Attention reads K/V only from the store, after
 * this call's rows have been written, so a token sees the same bytes whether its
 * predecessors were computed in this call, an earlier one, or reused from the cache.
 *
 * A row is one new token of one sequence at its position. The rows of a call form one
 * activation matrix [n_rows][hidden] for the projections and the MLP; attention runs per
 * (row, head) over the row's sequence through its attn_kv_t accessor (flat or paged).
 *
 * Thread-safety: one call at a time per context (the scratch is shared).
 */
#include <math.h>
#include <string.h>

#include "compute/cpu/kernels.h"
#include "engine/rope.h"
#include "models/llama/llama.h"

typedef struct {
    const cairn_model_config_t *cfg;
    const llama_weights_t *w;
    bool qk_norm;
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

/* A tensor's row r as bytes ([rows][cols] of its dtype). */
static const void *tensor_row(const cairn_tensor_t *t, int64_t r)
{
    return (const unsigned char *)t->data + (size_t)r * (size_t)t->shape[1] * cairn_dtype_size(t->dtype);
}

static void matmul(fwd_t *f, float *y, const float *x, int rows, const cairn_tensor_t *w)
{
    kern_matmul(f->tp, y, x, rows, (int)w->shape[1], w->data, w->dtype, (int)w->shape[0], f->math);
}

/*
 * y1 = x w1^T, y2 = x w2^T and (when w3) y3 = x w3^T as one parallel run (kern_matmul_n;
 * same bits as separate calls): decode wakes the pool once for q/k/v and once for
 * gate/up. Falls back to separate calls when the weights differ in dtype or width.
 */
static void matmul3(fwd_t *f, const float *x, int rows, float *y1, const cairn_tensor_t *w1, float *y2,
                    const cairn_tensor_t *w2, float *y3, const cairn_tensor_t *w3)
{
    const cairn_tensor_t *w[3] = {w1, w2, w3};
    float *y[3] = {y1, y2, y3};
    kern_mm_out_t outs[3];
    int n = 0;
    bool same = true;
    for (int i = 0; i < 3 && w[i]; i++) {
        outs[n++] = (kern_mm_out_t){y[i], w[i]->data, (int)w[i]->shape[0]};
        same = same && w[i]->dtype == w1->dtype && w[i]->shape[1] == w1->shape[1];
    }
    if (same) {
        kern_matmul_n(f->tp, x, rows, (int)w1->shape[1], w1->dtype, outs, n, f->math);
        return;
    }
    for (int i = 0; i < n; i++)
        matmul(f, y[i], x, rows, w[i]);
}

/* In-place RMSNorm of n_heads heads of head_dim with one weight [head_dim] (Qwen3 q/k norm). */
static void head_norm(fwd_t *f, float *x, int n_heads, const cairn_tensor_t *w)
{
    const int hd = f->cfg->head_dim;
    for (int h = 0; h < n_heads; h++) {
        kern_rmsnorm(f->head_tmp, x + (size_t)h * hd, w->data, w->dtype, hd, f->cfg->rms_eps);
        memcpy(x + (size_t)h * hd, f->head_tmp, (size_t)hd * sizeof(float));
    }
}

int llama_fwd_step(void *ctx, const cairn_fwd_batch_t *b)
{
    fwd_t *f = ctx;
    const cairn_fwd_row_t *rows = b->rows;
    const int n = b->n_rows;
    float *logits = b->logits;
    const cairn_model_config_t *c = f->cfg;
    const llama_weights_t *w = f->w;
    const int dim = c->hidden, hd = c->head_dim;
    const int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
    CAIRN_ASSERT(n > 0 && n <= f->max_rows);

    /* Token embeddings and the rotation angles of each row's position. */
    for (int r = 0; r < n; r++) {
        kern_row_to_f32(f->x + (size_t)r * dim, tensor_row(&w->embed, rows[r].token), w->embed.dtype, dim);
        kern_rope_angles(f->rope_cs + (size_t)r * hd, f->inv_freq, hd / 2, rows[r].pos);
    }

    for (int l = 0; l < c->n_layers; l++) {
        const llama_layer_weights_t *lw = &w->layers[l];

        /* Attention block: pre-norm, projections. */
        for (int r = 0; r < n; r++)
            kern_rmsnorm(f->xb + (size_t)r * dim, f->x + (size_t)r * dim, lw->attn_norm.data,
                         lw->attn_norm.dtype, dim, c->rms_eps);
        matmul3(f, f->xb, n, f->q, &lw->wq, f->k, &lw->wk, f->v, &lw->wv);

        for (int r = 0; r < n; r++) {
            float *q = f->q + (size_t)r * q_dim, *k = f->k + (size_t)r * kv_dim;
            if (f->qk_norm) {
                head_norm(f, q, c->n_heads, &lw->q_norm);
                head_norm(f, k, c->n_kv_heads, &lw->k_norm);
            }
            kern_rope(q, c->n_heads, hd, f->rope_cs + (size_t)r * hd);
            kern_rope(k, c->n_kv_heads, hd, f->rope_cs + (size_t)r * hd);

            /* Store this row's K/V; attention below reads them back from the store. */
            const attn_kv_t *kv = &b->seqs[rows[r].seq].kv;
            void *kst, *vst;
            int ok = kv->rows(kv->ctx, l, rows[r].pos, &kst, &vst);
            CAIRN_ASSERT(ok > 0);
            kern_row_from_f32(kst, f->kv_dtype, k, kv_dim);
            kern_row_from_f32(vst, f->kv_dtype, f->v + (size_t)r * kv_dim, kv_dim);

            f->queries[r] = (attn_query_t){q, f->att + (size_t)r * q_dim, kv, rows[r].pos};
        }
        attn_forward(f->tp, &f->attn, l, f->queries, n);

        /* Output projection and residual. */
        matmul(f, f->xb2, f->att, n, &lw->wo);
        kern_add(f->x, f->xb2, n * dim);

        /* MLP block: pre-norm, SwiGLU, residual. */
        for (int r = 0; r < n; r++)
            kern_rmsnorm(f->xb + (size_t)r * dim, f->x + (size_t)r * dim, lw->ffn_norm.data,
                         lw->ffn_norm.dtype, dim, c->rms_eps);
        matmul3(f, f->xb, n, f->hb, &lw->w_gate, f->hb2, &lw->w_up, NULL, NULL);
        kern_silu_mul(f->hb, f->hb, f->hb2, n * c->ffn);
        matmul(f, f->xb2, f->hb, n, &lw->w_down);
        kern_add(f->x, f->xb2, n * dim);
    }

    /* Final norm and lm_head, only for the rows that want logits (compacted into xb). */
    int n_out = 0, first_out = -1;
    for (int r = 0; r < n; r++) {
        if (rows[r].out_row < 0)
            continue;
        if (first_out < 0)
            first_out = rows[r].out_row;
        CAIRN_ASSERT(rows[r].out_row == first_out + n_out);
        kern_rmsnorm(f->xb + (size_t)n_out * dim, f->x + (size_t)r * dim, w->norm.data,
                     w->norm.dtype, dim, c->rms_eps);
        n_out++;
    }
    if (n_out > 0) {
        const cairn_tensor_t *head = w->lm_head.data ? &w->lm_head : &w->embed;
        matmul(f, logits + (size_t)first_out * c->vocab, f->xb, n_out, head);
    }
    return CAIRN_OK;
}

static void fwd_free(fwd_t *f);

int llama_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **out)
{
    *out = NULL;
    fwd_t *f = cairn_calloc(1, sizeof(*f));
    if (!f)
        return CAIRN_ENOMEM;
    const cairn_model_config_t *cfg = &m->cfg;
    const int max_rows = env->max_rows, max_positions = env->max_positions;
    const cairn_dtype_t kv_dtype = env->kv_dtype;
    cairn_thread_pool_t *tp = env->tp;
    f->cfg = cfg;
    f->w = llama_model_weights(m);
    f->qk_norm = ((const llama_t *)m->priv)->qk_norm;
    f->tp = tp;
    f->math = (cairn_math_t)env->math;
    f->kv_dtype = kv_dtype;
    f->max_rows = max_rows;
    f->max_positions = max_positions;
    const size_t R = (size_t)max_rows;
    const size_t q_dim = (size_t)cfg->n_heads * cfg->head_dim;
    const size_t kv_dim = (size_t)cfg->n_kv_heads * cfg->head_dim;
    const int n_slots = cairn_thread_pool_size(tp) > 0 ? cairn_thread_pool_size(tp) : 1;

    f->inv_freq = cairn_malloc((size_t)cfg->head_dim / 2 * sizeof(float));
    f->x = cairn_malloc(R * cfg->hidden * sizeof(float));
    f->xb = cairn_malloc(R * cfg->hidden * sizeof(float));
    f->xb2 = cairn_malloc(R * cfg->hidden * sizeof(float));
    f->q = cairn_malloc(R * q_dim * sizeof(float));
    f->k = cairn_malloc(R * kv_dim * sizeof(float));
    f->v = cairn_malloc(R * kv_dim * sizeof(float));
    f->att = cairn_malloc(R * q_dim * sizeof(float));
    f->hb = cairn_malloc(R * cfg->ffn * sizeof(float));
    f->hb2 = cairn_malloc(R * cfg->ffn * sizeof(float));
    f->rope_cs = cairn_malloc(R * cfg->head_dim * sizeof(float));
    f->head_tmp = cairn_malloc((size_t)cfg->head_dim * sizeof(float));
    f->queries = cairn_malloc(R * sizeof(attn_query_t));
    f->attn = (attn_cfg_t){cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, kv_dtype,
                           cairn_malloc((size_t)n_slots * sizeof(float) *
                                        attn_scratch_floats(cfg->n_heads, cfg->n_kv_heads,
                                                            cfg->head_dim, max_positions)),
                           n_slots, max_positions};
    if (!f->inv_freq || !f->x || !f->xb || !f->xb2 || !f->q || !f->k || !f->v || !f->att ||
        !f->hb || !f->hb2 || !f->rope_cs || !f->head_tmp || !f->queries || !f->attn.scratch)
        goto fail;
    int rc = rope_inv_freq(cfg, f->inv_freq);
    if (rc) {
        fwd_free(f);
        return rc;
    }
    *out = f;
    return CAIRN_OK;
fail:
    fwd_free(f);
    return CAIRN_ENOMEM;
}

void llama_fwd_destroy(void *f)
{
    if (f)
        fwd_free(f);
}

static void fwd_free(fwd_t *f)
{
    cairn_free(f->inv_freq);
    cairn_free(f->x);
    cairn_free(f->xb);
    cairn_free(f->xb2);
    cairn_free(f->q);
    cairn_free(f->k);
    cairn_free(f->v);
    cairn_free(f->att);
    cairn_free(f->hb);
    cairn_free(f->hb2);
    cairn_free(f->rope_cs);
    cairn_free(f->head_tmp);
    cairn_free(f->queries);
    cairn_free(f->attn.scratch);
    cairn_free(f);
}
