/*
 * lfm2_forward.c — the LFM2 forward pass, batched over rows (the model is in lfm2.h).
 *
 * All rows of a call share each matrix product (kern_matmul over n rows: per-row bits do
 * not depend on n or the thread count, kernels.h). The short convolution is a per-row
 * recurrence on its sequence's state, visited in row order; the caller keeps a
 * sequence's rows in position order, so each row sees exactly the state its predecessor
 * left, whether that predecessor was computed in this call, an earlier one, or restored
 * from a checkpoint. Attention reads K/V only from the store after this call's rows have
 * been written, as in engine/forward.c. Nothing a row computes depends on the other rows
 * of the call: logits are the same bits however rows are batched or chunked.
 *
 * Thread-safety: one call at a time per lfm2_fwd_t (the scratch is shared).
 */
#include <string.h>

#include "compute/cpu/short_conv.h"
#include "engine/rope.h"
#include "models/lfm2/lfm2.h"

/* A tensor's row r as bytes ([rows][cols] of its dtype). */
static const void *tensor_row(const cairn_tensor_t *t, int64_t r)
{
    return (const unsigned char *)t->data + (size_t)r * (size_t)t->shape[1] * cairn_dtype_size(t->dtype);
}

static void matmul(lfm2_fwd_t *f, float *y, const float *x, int rows, const cairn_tensor_t *w)
{
    kern_matmul(f->tp, y, x, rows, (int)w->shape[1], w->data, w->dtype, (int)w->shape[0], f->math);
}

/* Products of the same x with several weights as one parallel run (same bits as
 * separate kern_matmul calls); separate calls when the weights differ in dtype. */
static void matmul_n(lfm2_fwd_t *f, const float *x, int rows, float *const *y,
                     const cairn_tensor_t *const *w, int n)
{
    kern_mm_out_t outs[3];
    bool same = true;
    for (int i = 0; i < n; i++) {
        outs[i] = (kern_mm_out_t){y[i], w[i]->data, (int)w[i]->shape[0]};
        same = same && w[i]->dtype == w[0]->dtype && w[i]->shape[1] == w[0]->shape[1];
    }
    if (same) {
        kern_matmul_n(f->tp, x, rows, (int)w[0]->shape[1], w[0]->dtype, outs, n, f->math);
        return;
    }
    for (int i = 0; i < n; i++)
        matmul(f, y[i], x, rows, w[i]);
}

/* In-place RMSNorm of n_heads heads of head_dim with one weight [head_dim]. */
static void head_norm(lfm2_fwd_t *f, float *x, int n_heads, const cairn_tensor_t *w)
{
    const int hd = f->cfg->base.head_dim;
    for (int h = 0; h < n_heads; h++) {
        kern_rmsnorm(f->head_tmp, x + (size_t)h * hd, w->data, w->dtype, hd, f->cfg->base.rms_eps);
        memcpy(x + (size_t)h * hd, f->head_tmp, (size_t)hd * sizeof(float));
    }
}

/* Gated short convolution of layer l: xb2 = (C * conv(B * u)) Wout^T, states advanced. */
static void conv_block(lfm2_fwd_t *f, int l, const cairn_fwd_batch_t *b)
{
    const lfm2_config_t *c = f->cfg;
    const lfm2_layer_weights_t *lw = &f->w->layers[l];
    const int H = c->base.hidden, L = c->conv_taps;
    const float *taps = f->taps + (size_t)c->slot[l] * L * H;

    const cairn_fwd_row_t *rows = b->rows;
    const int n = b->n_rows;
    matmul(f, f->bcu, f->xb, n, &lw->in_proj);
    for (int r = 0; r < n; r++) {
        float *B = f->bcu + (size_t)r * 3 * H, *C = B + H, *u = C + H, *y = f->cy + (size_t)r * H;
        for (int i = 0; i < H; i++)
            u[i] = B[i] * u[i]; /* s_t = B * u, the convolution's input */
        short_conv_step(y, lfm2_state_layer(c, b->seqs[rows[r].seq].state, l), u, taps, H, L);
        for (int i = 0; i < H; i++)
            y[i] = C[i] * y[i];
    }
    matmul(f, f->xb2, f->cy, n, &lw->conv_out);
}

/* Attention of layer l: xb2 = softmax(q k^T / sqrt(hd)) v Wout^T, K/V stored. */
static void attn_block(lfm2_fwd_t *f, int l, const cairn_fwd_batch_t *b)
{
    const cairn_model_config_t *c = &f->cfg->base;
    const lfm2_layer_weights_t *lw = &f->w->layers[l];
    const int hd = c->head_dim, q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
    const cairn_fwd_row_t *rows = b->rows;
    const int n = b->n_rows;

    float *const y[3] = {f->q, f->k, f->v};
    const cairn_tensor_t *const w[3] = {&lw->wq, &lw->wk, &lw->wv};
    matmul_n(f, f->xb, n, y, w, 3);
    for (int r = 0; r < n; r++) {
        float *q = f->q + (size_t)r * q_dim, *k = f->k + (size_t)r * kv_dim;
        head_norm(f, q, c->n_heads, &lw->q_norm);
        head_norm(f, k, c->n_kv_heads, &lw->k_norm);
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
    matmul(f, f->xb2, f->att, n, &lw->wo);
}

void lfm2_fwd_run(lfm2_fwd_t *f, const cairn_fwd_batch_t *batch)
{
    const lfm2_config_t *c = f->cfg;
    const cairn_model_config_t *b = &c->base;
    const cairn_fwd_row_t *rows = batch->rows;
    const int n = batch->n_rows;
    float *logits = batch->logits;
    const lfm2_weights_t *w = f->w;
    const int dim = b->hidden, hd = b->head_dim;
    CAIRN_ASSERT(n > 0 && n <= f->max_rows);

    /* Token embeddings and the rotation angles of each row's position. */
    for (int r = 0; r < n; r++) {
        kern_row_to_f32(f->x + (size_t)r * dim, tensor_row(&w->embed, rows[r].token), w->embed.dtype, dim);
        if (c->n_attn > 0)
            kern_rope_angles(f->rope_cs + (size_t)r * hd, f->inv_freq, hd / 2, rows[r].pos);
    }

    for (int l = 0; l < b->n_layers; l++) {
        const lfm2_layer_weights_t *lw = &w->layers[l];

        /* Operator block (convolution or attention): pre-norm, residual. */
        for (int r = 0; r < n; r++)
            kern_rmsnorm(f->xb + (size_t)r * dim, f->x + (size_t)r * dim, lw->operator_norm.data,
                         lw->operator_norm.dtype, dim, b->rms_eps);
        if (c->kind[l] == LFM2_LAYER_CONV)
            conv_block(f, l, batch);
        else
            attn_block(f, l, batch);
        kern_add(f->x, f->xb2, n * dim);

        /* Feed-forward block: pre-norm, SwiGLU, residual. */
        for (int r = 0; r < n; r++)
            kern_rmsnorm(f->xb + (size_t)r * dim, f->x + (size_t)r * dim, lw->ffn_norm.data,
                         lw->ffn_norm.dtype, dim, b->rms_eps);
        float *const y[2] = {f->hb, f->hb2};
        const cairn_tensor_t *const wg[2] = {&lw->w1, &lw->w3};
        matmul_n(f, f->xb, n, y, wg, 2);
        kern_silu_mul(f->hb, f->hb, f->hb2, n * b->ffn);
        matmul(f, f->xb2, f->hb, n, &lw->w2);
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
                     w->norm.dtype, dim, b->rms_eps);
        n_out++;
    }
    if (n_out > 0) {
        const cairn_tensor_t *head = w->lm_head.data ? &w->lm_head : &w->embed;
        matmul(f, logits + (size_t)first_out * b->vocab, f->xb, n_out, head);
    }
}

int lfm2_fwd_init(lfm2_fwd_t *f, const lfm2_config_t *cfg, const lfm2_weights_t *w,
                  cairn_thread_pool_t *tp, cairn_math_t math, cairn_dtype_t kv_dtype,
                  int max_rows, int max_positions)
{
    memset(f, 0, sizeof(*f));
    const cairn_model_config_t *b = &cfg->base;
    f->cfg = cfg;
    f->w = w;
    f->tp = tp;
    f->math = math;
    f->kv_dtype = kv_dtype;
    f->max_rows = max_rows;
    f->max_positions = max_positions;
    const size_t R = (size_t)max_rows, H = (size_t)b->hidden, L = (size_t)cfg->conv_taps;
    const size_t q_dim = (size_t)b->n_heads * b->head_dim;
    const size_t kv_dim = (size_t)b->n_kv_heads * b->head_dim;
    const int n_slots = cairn_thread_pool_size(tp) > 0 ? cairn_thread_pool_size(tp) : 1;

    f->inv_freq = cairn_malloc((size_t)b->head_dim / 2 * sizeof(float));
    f->taps = cairn_malloc(((size_t)cfg->n_conv * L * H + 1) * sizeof(float));
    f->x = cairn_malloc(R * H * sizeof(float));
    f->xb = cairn_malloc(R * H * sizeof(float));
    f->xb2 = cairn_malloc(R * H * sizeof(float));
    f->bcu = cairn_malloc(R * 3 * H * sizeof(float));
    f->cy = cairn_malloc(R * H * sizeof(float));
    f->q = cairn_malloc(R * q_dim * sizeof(float));
    f->k = cairn_malloc(R * kv_dim * sizeof(float));
    f->v = cairn_malloc(R * kv_dim * sizeof(float));
    f->att = cairn_malloc(R * q_dim * sizeof(float));
    f->hb = cairn_malloc(R * b->ffn * sizeof(float));
    f->hb2 = cairn_malloc(R * b->ffn * sizeof(float));
    f->rope_cs = cairn_malloc(R * b->head_dim * sizeof(float));
    f->head_tmp = cairn_malloc((size_t)b->head_dim * sizeof(float));
    f->queries = cairn_malloc(R * sizeof(attn_query_t));
    f->attn = (attn_cfg_t){b->n_heads, b->n_kv_heads, b->head_dim, kv_dtype,
                           cairn_malloc((size_t)n_slots * sizeof(float) *
                                        attn_scratch_floats(b->n_heads, b->n_kv_heads,
                                                            b->head_dim, max_positions)),
                           n_slots, max_positions};
    if (!f->inv_freq || !f->taps || !f->x || !f->xb || !f->xb2 || !f->bcu || !f->cy || !f->q ||
        !f->k || !f->v || !f->att || !f->hb || !f->hb2 || !f->rope_cs || !f->head_tmp ||
        !f->queries || !f->attn.scratch) {
        lfm2_fwd_fini(f);
        return CAIRN_ENOMEM;
    }
    /* Conv taps, tap-major f32: taps[slot][k][c] = conv.weight[c][0][k]. */
    for (int l = 0; l < b->n_layers; l++) {
        if (cfg->kind[l] != LFM2_LAYER_CONV)
            continue;
        const cairn_tensor_t *cw = &w->layers[l].conv;
        float *t = f->taps + (size_t)cfg->slot[l] * L * H, row[LFM2_MAX_CONV_TAPS];
        for (size_t ch = 0; ch < H; ch++) {
            kern_row_to_f32(row, (const unsigned char *)cw->data + ch * L * cairn_dtype_size(cw->dtype),
                            cw->dtype, (int)L);
            for (size_t k = 0; k < L; k++)
                t[k * H + ch] = row[k];
        }
    }
    int rc = rope_inv_freq(b, f->inv_freq);
    if (rc) {
        lfm2_fwd_fini(f);
        return rc;
    }
    return CAIRN_OK;
}

int lfm2_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **out)
{
    *out = NULL;
    const lfm2_t *p = lfm2_of(m);
    lfm2_fwd_t *f = cairn_calloc(1, sizeof(*f));
    if (!p || !f) {
        cairn_free(f);
        return p ? CAIRN_ENOMEM : CAIRN_EINVAL;
    }
    int rc = lfm2_fwd_init(f, &p->cfg, &p->w, env->tp, (cairn_math_t)env->math, env->kv_dtype,
                           env->max_rows, env->max_positions);
    if (rc) {
        cairn_free(f);
        return rc;
    }
    *out = f;
    return CAIRN_OK;
}

void lfm2_fwd_destroy(void *fwd)
{
    if (!fwd)
        return;
    lfm2_fwd_fini(fwd);
    cairn_free(fwd);
}

int lfm2_fwd_step(void *fwd, const cairn_fwd_batch_t *batch)
{
    lfm2_fwd_run(fwd, batch);
    return CAIRN_OK;
}

void lfm2_fwd_fini(lfm2_fwd_t *f)
{
    cairn_free(f->inv_freq);
    cairn_free(f->taps);
    cairn_free(f->x);
    cairn_free(f->xb);
    cairn_free(f->xb2);
    cairn_free(f->bcu);
    cairn_free(f->cy);
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
    memset(f, 0, sizeof(*f));
}
