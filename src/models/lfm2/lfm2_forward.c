/*
 * lfm2_forward.c — the LFM2 forward pass, batched over rows (the model is in lfm2.h):
 * fwd_create / fwd_step / fwd_destroy of models/family.h.
 *
 * Every operation is an op of the compute backend (compute/backend.h), never a kernel.
 * All rows of a call share each matrix product (compute_matmul over n rows: per-row bits
 * do not depend on n or the thread count). The short convolution runs per sequence over
 * its consecutive rows, advancing that sequence's state in position order, so each row
 * sees exactly the state its predecessor left, whether that predecessor was computed in
 * this call, an earlier one, or restored from a checkpoint (compute_short_conv gives the
 * same bits for any chunking). Attention reads K/V only from the store after this call's
 * rows have been written. Nothing a row computes depends on the other rows of the call:
 * logits are the same bits however rows are batched or chunked.
 *
 * Thread-safety: one call at a time per lfm2_fwd_t (the scratch is shared).
 */
#include <string.h>

#include "engine/rope.h"
#include "models/lfm2/lfm2.h"

/* A weight tensor [out][in] as a backend matrix; the conv weight [C][1][L] as [C][L]. */
static compute_mat_t mat(const cairn_tensor_t *t)
{
    return (compute_mat_t){t->data, t->dtype, (int)t->shape[0],
                           t->ndim > 1 ? (int)t->shape[t->ndim - 1] : 1};
}

/* Rows [r0, r0 + n) of a weight matrix [out][in]. */
static compute_mat_t mat_rows(const cairn_tensor_t *t, int r0, int n)
{
    compute_mat_t m = mat(t);
    m.data = (const unsigned char *)t->data + (size_t)r0 * cairn_dtype_row_bytes(t->dtype, m.cols); /* any block type */
    m.rows = n;
    return m;
}

/* A norm weight [n] as a 1 x n matrix. */
static compute_mat_t vec(const cairn_tensor_t *t)
{
    return (compute_mat_t){t->data, t->dtype, 1, (int)t->shape[0]};
}

static void matmul(lfm2_fwd_t *f, float *y, const float *x, int rows, const cairn_tensor_t *w)
{
    compute_mm_t mm = {y, mat(w)};
    compute_matmul(f->be, x, rows, (int)w->shape[1], &mm, 1, f->math);
}

/* Gated short convolution of layer l: xb2 = (C * conv(B * u)) Wout^T, states advanced. */
static void conv_block(lfm2_fwd_t *f, int l, const cairn_fwd_batch_t *b)
{
    const lfm2_config_t *c = f->cfg;
    const lfm2_layer_weights_t *lw = &f->w->layers[l];
    const int H = c->base.hidden, n = b->n_rows;
    const size_t nh = (size_t)n * H;

    /* B, C, u: the three thirds of in_proj's rows, as one fused product. */
    const compute_mm_t bcu[3] = {{f->cb, mat_rows(&lw->in_proj, 0, H)},
                                 {f->cc, mat_rows(&lw->in_proj, H, H)},
                                 {f->cu, mat_rows(&lw->in_proj, 2 * H, H)}};
    compute_matmul(f->be, f->xb, n, H, bcu, 3, f->math);
    compute_mul(f->be, f->cu, f->cb, f->cu, nh); /* s = B * u, the convolution's input */
    /* Each run of consecutive rows of one sequence through its own state. */
    for (int r0 = 0, r1; r0 < n; r0 = r1) {
        const int seq = b->rows[r0].seq;
        for (r1 = r0 + 1; r1 < n && b->rows[r1].seq == seq; r1++)
            ;
        compute_short_conv(f->be, f->cy + (size_t)r0 * H, f->cu + (size_t)r0 * H, r1 - r0,
                           mat(&lw->conv), lfm2_state_layer(c, b->seqs[seq].state, l));
    }
    compute_mul(f->be, f->cy, f->cc, f->cy, nh); /* C * conv */
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

    const compute_mm_t qkv[3] = {{f->q, mat(&lw->wq)}, {f->k, mat(&lw->wk)}, {f->v, mat(&lw->wv)}};
    compute_matmul(f->be, f->xb, n, c->hidden, qkv, 3, f->math);
    compute_rmsnorm(f->be, f->q, f->q, n * c->n_heads, vec(&lw->q_norm), c->rms_eps, false);
    compute_rmsnorm(f->be, f->k, f->k, n * c->n_kv_heads, vec(&lw->k_norm), c->rms_eps, false);
    compute_rope(f->be, f->q, n, c->n_heads, hd, hd, f->rope_cs);
    compute_rope(f->be, f->k, n, c->n_kv_heads, hd, hd, f->rope_cs);

    /* Store each row's K/V; attention below reads them back from the store. */
    for (int r = 0; r < n; r++) {
        const attn_kv_t *kv = &b->seqs[rows[r].seq].kv;
        void *kst, *vst;
        int ok = kv->rows(kv->ctx, l, rows[r].pos, &kst, &vst);
        CAIRN_ASSERT(ok > 0 && kst);
        compute_kv_store(f->be, kst, f->kv_dtype, f->k + (size_t)r * kv_dim, kv_dim);
        compute_kv_store(f->be, vst, f->kv_dtype, f->v + (size_t)r * kv_dim, kv_dim);
        f->queries[r] = (attn_query_t){f->q + (size_t)r * q_dim, f->att + (size_t)r * q_dim, kv,
                                       rows[r].pos};
    }
    compute_attention(f->be, f->attn, l, f->queries, n);
    matmul(f, f->xb2, f->att, n, &lw->wo);
}

void lfm2_fwd_run(lfm2_fwd_t *f, const cairn_fwd_batch_t *batch)
{
    const lfm2_config_t *c = f->cfg;
    const cairn_model_config_t *b = &c->base;
    const cairn_fwd_row_t *rows = batch->rows;
    const int n = batch->n_rows;
    const lfm2_weights_t *w = f->w;
    const int dim = b->hidden, hd = b->head_dim;
    CAIRN_ASSERT(n > 0 && n <= f->max_rows);

    /* Token embeddings and the rotation angles of each row's position. */
    for (int r = 0; r < n; r++) {
        f->ids[r] = rows[r].token;
        f->pos[r] = rows[r].pos;
    }
    compute_get_rows(f->be, f->x, mat(&w->embed), f->ids, n);
    if (c->n_attn > 0)
        compute_rope_angles(f->be, f->rope_cs, f->inv_freq, hd / 2, f->pos, n);

    for (int l = 0; l < b->n_layers; l++) {
        const lfm2_layer_weights_t *lw = &w->layers[l];

        /* Operator block (convolution or attention): pre-norm, residual. */
        compute_rmsnorm(f->be, f->xb, f->x, n, vec(&lw->operator_norm), b->rms_eps, false);
        if (c->kind[l] == LFM2_LAYER_CONV)
            conv_block(f, l, batch);
        else
            attn_block(f, l, batch);
        compute_add(f->be, f->x, f->xb2, (size_t)n * dim);

        /* Feed-forward block: pre-norm, SwiGLU, residual. */
        compute_rmsnorm(f->be, f->xb, f->x, n, vec(&lw->ffn_norm), b->rms_eps, false);
        const compute_mm_t gu[2] = {{f->hb, mat(&lw->w1)}, {f->hb2, mat(&lw->w3)}};
        compute_matmul(f->be, f->xb, n, dim, gu, 2, f->math);
        compute_glu(f->be, f->hb, f->hb, f->hb2, (size_t)n * b->ffn, COMPUTE_GLU_SILU);
        matmul(f, f->xb2, f->hb, n, &lw->w2);
        compute_add(f->be, f->x, f->xb2, (size_t)n * dim);
    }

    /* Final norm (embedding_norm) and lm_head, only for the rows that want logits
     * (compacted into xb). */
    int n_out = 0, first_out = -1;
    for (int r = 0; r < n; r++) {
        if (rows[r].out_row < 0)
            continue;
        if (first_out < 0)
            first_out = rows[r].out_row;
        CAIRN_ASSERT(rows[r].out_row == first_out + n_out);
        compute_rmsnorm(f->be, f->xb + (size_t)n_out * dim, f->x + (size_t)r * dim, 1, vec(&w->norm),
                        b->rms_eps, false);
        n_out++;
    }
    if (n_out > 0) {
        const cairn_tensor_t *head = w->lm_head.data ? &w->lm_head : &w->embed;
        matmul(f, batch->logits + (size_t)first_out * b->vocab, f->xb, n_out, head);
    }
}

/* Every op and type the model will ask of the backend, checked once. */
static int check_backend(compute_backend_t *be, const lfm2_config_t *c, const lfm2_weights_t *w,
                         cairn_dtype_t kv_dtype)
{
    const cairn_tensor_t *head = w->lm_head.data ? &w->lm_head : &w->embed;
    if (!be->ops->host_memory) { /* weights and scratch are host memory */
        cairn_log(CAIRN_LOG_ERROR, "lfm2: the %s backend has no host memory (this family's "
                  "weights and activations are host memory)", be->ops->name);
        return CAIRN_EUNSUPPORTED;
    }
    if (!compute_supports(be, COMPUTE_OP_GET_ROWS, w->embed.dtype) ||
        !compute_supports(be, COMPUTE_OP_NORM, w->norm.dtype) ||
        !compute_supports(be, COMPUTE_OP_MATMUL, head->dtype) ||
        (c->n_attn > 0 && !compute_supports(be, COMPUTE_OP_KV, kv_dtype)))
        return CAIRN_EUNSUPPORTED;
    for (int l = 0; l < c->base.n_layers; l++) {
        const lfm2_layer_weights_t *L = &w->layers[l];
        const cairn_tensor_t *mm[] = {&L->w1, &L->w2, &L->w3, &L->in_proj, &L->conv_out,
                                      &L->wq, &L->wk, &L->wv, &L->wo};
        const cairn_tensor_t *nm[] = {&L->operator_norm, &L->ffn_norm, &L->q_norm, &L->k_norm};
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(mm); i++)
            if (mm[i]->data && !compute_supports(be, COMPUTE_OP_MATMUL, mm[i]->dtype))
                return CAIRN_EUNSUPPORTED;
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(nm); i++)
            if (nm[i]->data && !compute_supports(be, COMPUTE_OP_NORM, nm[i]->dtype))
                return CAIRN_EUNSUPPORTED;
        if (L->conv.data && !compute_supports(be, COMPUTE_OP_SHORT_CONV, L->conv.dtype))
            return CAIRN_EUNSUPPORTED;
    }
    return CAIRN_OK;
}

int lfm2_fwd_init(lfm2_fwd_t *f, const lfm2_config_t *cfg, const lfm2_weights_t *w,
                  compute_backend_t *be, cairn_math_t math, cairn_dtype_t kv_dtype, int max_rows,
                  int max_positions)
{
    memset(f, 0, sizeof(*f));
    const cairn_model_config_t *b = &cfg->base;
    int rc = check_backend(be, cfg, w, kv_dtype);
    if (rc)
        return rc;
    f->cfg = cfg;
    f->w = w;
    f->be = be;
    f->math = math;
    f->kv_dtype = kv_dtype;
    f->max_rows = max_rows;
    const size_t R = (size_t)max_rows, H = (size_t)b->hidden;
    const size_t q_dim = (size_t)b->n_heads * b->head_dim;
    const size_t kv_dim = (size_t)b->n_kv_heads * b->head_dim;

    f->inv_freq = cairn_malloc((size_t)b->head_dim / 2 * sizeof(float));
    f->x = cairn_malloc(R * H * sizeof(float));
    f->xb = cairn_malloc(R * H * sizeof(float));
    f->xb2 = cairn_malloc(R * H * sizeof(float));
    f->cb = cairn_malloc(R * H * sizeof(float));
    f->cc = cairn_malloc(R * H * sizeof(float));
    f->cu = cairn_malloc(R * H * sizeof(float));
    f->cy = cairn_malloc(R * H * sizeof(float));
    f->q = cairn_malloc(R * q_dim * sizeof(float));
    f->k = cairn_malloc(R * kv_dim * sizeof(float));
    f->v = cairn_malloc(R * kv_dim * sizeof(float));
    f->att = cairn_malloc(R * q_dim * sizeof(float));
    f->hb = cairn_malloc(R * b->ffn * sizeof(float));
    f->hb2 = cairn_malloc(R * b->ffn * sizeof(float));
    f->rope_cs = cairn_malloc(R * b->head_dim * sizeof(float));
    f->ids = cairn_malloc(R * sizeof(int32_t));
    f->pos = cairn_malloc(R * sizeof(int));
    f->queries = cairn_malloc(R * sizeof(attn_query_t));
    if (!f->inv_freq || !f->x || !f->xb || !f->xb2 || !f->cb || !f->cc || !f->cu || !f->cy ||
        !f->q || !f->k || !f->v || !f->att || !f->hb || !f->hb2 || !f->rope_cs || !f->ids ||
        !f->pos || !f->queries) {
        lfm2_fwd_fini(f);
        return CAIRN_ENOMEM;
    }
    if (cfg->n_attn > 0) {
        compute_attn_params_t ap = {b->n_heads, b->n_kv_heads, b->head_dim, kv_dtype,
                                    max_positions, 0, 0.0f, 0.0f};
        if ((rc = compute_attn_create(be, &ap, &f->attn))) {
            lfm2_fwd_fini(f);
            return rc;
        }
    }
    if ((rc = rope_inv_freq(b, f->inv_freq))) {
        lfm2_fwd_fini(f);
        return rc;
    }
    return CAIRN_OK;
}

void lfm2_fwd_fini(lfm2_fwd_t *f)
{
    if (f->be)
        compute_attn_destroy(f->be, f->attn);
    float *bufs[] = {f->inv_freq, f->x, f->xb, f->xb2, f->cb, f->cc, f->cu, f->cy, f->q, f->k,
                     f->v, f->att, f->hb, f->hb2, f->rope_cs};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(bufs); i++)
        cairn_free(bufs[i]);
    cairn_free(f->ids);
    cairn_free(f->pos);
    cairn_free(f->queries);
    memset(f, 0, sizeof(*f));
}

int lfm2_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **out)
{
    *out = NULL;
    const lfm2_t *p = lfm2_of(m);
    if (!p)
        return CAIRN_EINVAL;
    lfm2_fwd_t *f = cairn_calloc(1, sizeof(*f));
    if (!f)
        return CAIRN_ENOMEM;
    int rc = lfm2_fwd_init(f, &p->cfg, &p->w, env->be, (cairn_math_t)env->math, env->kv_dtype,
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
