/*
 * gemma3_forward.c — the Gemma 3 decoder forward pass, batched over rows.
 *
 * The model is spelled out in gemma3.h; this file follows it top to bottom. Every matrix
 * product runs over all rows of the call at once (kern_matmul: per-row bits independent
 * of the row count and the thread count), norms, RoPE and K/V stores are row-local, and
 * attention reads K/V only back from the store after this call's rows wrote theirs, so a
 * token's logits do not depend on how its sequence was chunked or batched.
 *
 * Thread-safety: one call at a time per gemma3_fwd_t (the scratch is shared).
 */
#include <math.h>
#include <string.h>

#include "engine/rope.h"
#include "models/gemma3/gemma3.h"

static const void *tensor_row(const cairn_tensor_t *t, int64_t r)
{
    return (const unsigned char *)t->data + (size_t)r * (size_t)t->shape[1] * cairn_dtype_size(t->dtype);
}

static void matmul(gemma3_fwd_t *f, float *y, const float *x, int rows, const cairn_tensor_t *w)
{
    kern_matmul(f->tp, y, x, rows, (int)w->shape[1], w->data, w->dtype, (int)w->shape[0], f->math);
}

/* Several products of one x as one parallel run when the weights agree in dtype and
 * width (kern_matmul_n, same bits as separate calls). */
static void matmul_n(gemma3_fwd_t *f, const float *x, int rows, int n, float *const *y,
                     const cairn_tensor_t *const *w)
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

/* out[r] = rmsnorm(x[r]) * w for n rows of width dim; w is the float32 (1 + weight). */
static void norm_rows(const gemma3_fwd_t *f, float *out, const float *x, int n, int dim,
                      const float *w)
{
    for (int r = 0; r < n; r++)
        kern_rmsnorm(out + (size_t)r * dim, x + (size_t)r * dim, w, CAIRN_DTYPE_F32, dim,
                     f->cfg->rms_eps);
}

/* In place: each of n_heads heads of x normed with w [head_dim] (q_norm / k_norm). */
static void head_norm(gemma3_fwd_t *f, float *x, int n_heads, const float *w)
{
    const int hd = f->cfg->head_dim;
    for (int h = 0; h < n_heads; h++) {
        kern_rmsnorm(f->head_tmp, x + (size_t)h * hd, w, CAIRN_DTYPE_F32, hd, f->cfg->rms_eps);
        memcpy(x + (size_t)h * hd, f->head_tmp, (size_t)hd * sizeof(float));
    }
}

static void softcap(float *x, size_t n, float cap)
{
    for (size_t i = 0; i < n; i++)
        x[i] = tanhf(x[i] / cap) * cap;
}

void gemma3_fwd_run(gemma3_fwd_t *f, const cairn_fwd_batch_t *b)
{
    const cairn_fwd_row_t *rows = b->rows;
    const int n = b->n_rows;
    float *logits = b->logits;
    const gemma3_config_t *c = f->cfg;
    const gemma3_weights_t *w = f->w;
    const int dim = c->hidden, hd = c->head_dim;
    const int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
    CAIRN_ASSERT(n > 0 && n <= f->max_rows);

    /* Scaled token embeddings, and each row's rotation angles for both kinds. */
    for (int r = 0; r < n; r++) {
        float *x = f->x + (size_t)r * dim;
        kern_row_to_f32(x, tensor_row(&w->embed, rows[r].token), w->embed.dtype, dim);
        for (int i = 0; i < dim; i++)
            x[i] = x[i] * c->embed_scale;
        for (int k = 0; k < 2; k++)
            kern_rope_angles(f->rope_cs + ((size_t)k * f->max_rows + r) * hd,
                             f->inv_freq + (size_t)k * (hd / 2), hd / 2, rows[r].pos);
    }

    for (int l = 0; l < c->n_layers; l++) {
        const gemma3_layer_t *L = &w->layers[l];
        const int kind = c->kind[l];

        /* Attention block: pre-norm, projections, q/k norms, RoPE, K/V store. */
        norm_rows(f, f->xb, f->x, n, dim, L->attn_norm);
        float *qkv[3] = {f->q, f->k, f->v};
        const cairn_tensor_t *wqkv[3] = {&L->wq, &L->wk, &L->wv};
        matmul_n(f, f->xb, n, 3, qkv, wqkv);
        for (int r = 0; r < n; r++) {
            float *q = f->q + (size_t)r * q_dim, *k = f->k + (size_t)r * kv_dim;
            const float *cs = f->rope_cs + ((size_t)kind * f->max_rows + r) * hd;
            head_norm(f, q, c->n_heads, L->q_norm);
            head_norm(f, k, c->n_kv_heads, L->k_norm);
            kern_rope(q, c->n_heads, hd, cs);
            kern_rope(k, c->n_kv_heads, hd, cs);

            const attn_kv_t *kv = &b->seqs[rows[r].seq].kv;
            void *kst, *vst;
            int ok = kv->rows(kv->ctx, l, rows[r].pos, &kst, &vst);
            CAIRN_ASSERT(ok > 0);
            kern_row_from_f32(kst, f->kv_dtype, k, kv_dim);
            kern_row_from_f32(vst, f->kv_dtype, f->v + (size_t)r * kv_dim, kv_dim);
            f->queries[r] = (gemma3_query_t){q, f->att + (size_t)r * q_dim, kv, rows[r].pos};
        }
        gemma3_attention(f->tp, &f->attn, l, kind == GEMMA3_SLIDING ? c->sliding_window : 0,
                         f->queries, n);

        /* Output projection, post-norm, residual. */
        matmul(f, f->xb2, f->att, n, &L->wo);
        norm_rows(f, f->xb2, f->xb2, n, dim, L->post_attn_norm);
        kern_add(f->x, f->xb2, n * dim);

        /* MLP block: pre-norm, gated GELU-tanh, post-norm, residual. */
        norm_rows(f, f->xb, f->x, n, dim, L->pre_ffn_norm);
        float *gu[2] = {f->hb, f->hb2};
        const cairn_tensor_t *wgu[2] = {&L->w_gate, &L->w_up};
        matmul_n(f, f->xb, n, 2, gu, wgu);
        gemma3_gelu_tanh_mul(f->hb, f->hb, f->hb2, n * c->ffn);
        matmul(f, f->xb2, f->hb, n, &L->w_down);
        norm_rows(f, f->xb2, f->xb2, n, dim, L->post_ffn_norm);
        kern_add(f->x, f->xb2, n * dim);
    }

    /* Final norm and lm_head for the rows that want logits (compacted into xb). */
    int n_out = 0, first_out = -1;
    for (int r = 0; r < n; r++) {
        if (rows[r].out_row < 0)
            continue;
        if (first_out < 0)
            first_out = rows[r].out_row;
        CAIRN_ASSERT(rows[r].out_row == first_out + n_out);
        kern_rmsnorm(f->xb + (size_t)n_out * dim, f->x + (size_t)r * dim, w->norm, CAIRN_DTYPE_F32,
                     dim, c->rms_eps);
        n_out++;
    }
    if (n_out > 0) {
        float *out = logits + (size_t)first_out * c->vocab;
        matmul(f, out, f->xb, n_out, &w->lm_head);
        if (c->final_softcap > 0)
            softcap(out, (size_t)n_out * c->vocab, c->final_softcap);
    }
}

/* inv_freq [head_dim/2] of one kind: the default frequencies, divided by a linear factor. */
static int kind_inv_freq(const gemma3_config_t *c, const gemma3_rope_t *r, float *inv_freq)
{
    cairn_model_config_t rc;
    memset(&rc, 0, sizeof rc);
    rc.head_dim = c->head_dim;
    rc.rope_type = CAIRN_ROPE_DEFAULT;
    rc.rope_theta = r->theta;
    int st = rope_inv_freq(&rc, inv_freq);
    if (st)
        return st;
    if (r->linear_factor != 1.0f)
        for (int i = 0; i < c->head_dim / 2; i++)
            inv_freq[i] = inv_freq[i] / r->linear_factor;
    return 0;
}

int gemma3_fwd_init(gemma3_fwd_t *f, const gemma3_config_t *cfg, const gemma3_weights_t *w,
                    cairn_thread_pool_t *tp, cairn_math_t math, cairn_dtype_t kv_dtype,
                    int max_rows, int max_positions)
{
    memset(f, 0, sizeof(*f));
    f->cfg = cfg;
    f->w = w;
    f->tp = tp;
    f->math = math;
    f->kv_dtype = kv_dtype;
    f->max_rows = max_rows;
    const size_t R = (size_t)max_rows, hd = (size_t)cfg->head_dim;
    const size_t q_dim = (size_t)cfg->n_heads * hd, kv_dim = (size_t)cfg->n_kv_heads * hd;
    const int n_slots = cairn_thread_pool_size(tp) > 0 ? cairn_thread_pool_size(tp) : 1;

    f->inv_freq = cairn_malloc(hd * sizeof(float)); /* 2 kinds x hd/2 */
    f->x = cairn_malloc(R * cfg->hidden * sizeof(float));
    f->xb = cairn_malloc(R * cfg->hidden * sizeof(float));
    f->xb2 = cairn_malloc(R * cfg->hidden * sizeof(float));
    f->q = cairn_malloc(R * q_dim * sizeof(float));
    f->k = cairn_malloc(R * kv_dim * sizeof(float));
    f->v = cairn_malloc(R * kv_dim * sizeof(float));
    f->att = cairn_malloc(R * q_dim * sizeof(float));
    f->hb = cairn_malloc(R * cfg->ffn * sizeof(float));
    f->hb2 = cairn_malloc(R * cfg->ffn * sizeof(float));
    f->rope_cs = cairn_malloc(2 * R * hd * sizeof(float));
    f->head_tmp = cairn_malloc(hd * sizeof(float));
    f->queries = cairn_malloc(R * sizeof(gemma3_query_t));
    f->attn = (gemma3_attn_cfg_t){cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, kv_dtype,
                                  cfg->attn_scale, cfg->attn_softcap, max_positions, NULL,
                                  n_slots};
    f->attn.scratch = cairn_malloc((size_t)n_slots * gemma3_attn_scratch_floats(&f->attn) *
                                   sizeof(float));
    if (!f->inv_freq || !f->x || !f->xb || !f->xb2 || !f->q || !f->k || !f->v || !f->att ||
        !f->hb || !f->hb2 || !f->rope_cs || !f->head_tmp || !f->queries || !f->attn.scratch) {
        gemma3_fwd_fini(f);
        return CAIRN_ENOMEM;
    }
    int rc;
    if ((rc = kind_inv_freq(cfg, &cfg->rope[GEMMA3_SLIDING], f->inv_freq)) ||
        (rc = kind_inv_freq(cfg, &cfg->rope[GEMMA3_FULL], f->inv_freq + hd / 2))) {
        gemma3_fwd_fini(f);
        return rc;
    }
    return CAIRN_OK;
}

void gemma3_fwd_fini(gemma3_fwd_t *f)
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
    memset(f, 0, sizeof(*f));
}

/* ---- the family's forward context (models/family.h) ---- */

int gemma3_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **out)
{
    *out = NULL;
    const gemma3_t *g = m->priv;
    gemma3_fwd_t *f = cairn_calloc(1, sizeof *f);
    if (!f)
        return CAIRN_ENOMEM;
    int rc = gemma3_fwd_init(f, &g->cfg, &g->w, env->tp, (cairn_math_t)env->math, env->kv_dtype,
                             env->max_rows, env->max_positions);
    if (rc) {
        cairn_free(f);
        return rc;
    }
    *out = f;
    return CAIRN_OK;
}

void gemma3_fwd_destroy(void *fwd)
{
    if (!fwd)
        return;
    gemma3_fwd_fini(fwd);
    cairn_free(fwd);
}

int gemma3_fwd_step(void *fwd, const cairn_fwd_batch_t *batch)
{
    gemma3_fwd_run(fwd, batch);
    return CAIRN_OK;
}
