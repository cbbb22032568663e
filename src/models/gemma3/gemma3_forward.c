/*
 * gemma3_forward.c — the Gemma 3 decoder forward pass, batched over rows, on the compute
 * backend: fwd_create / fwd_step / fwd_destroy of models/family.h.
 *
 * The model is spelled out in gemma3.h; the step below follows it top to bottom. Every
 * matrix product runs over all rows of the call at once (per-row bits independent of the
 * row count and the thread count: compute/backend.h's determinism contract), norms, RoPE
 * and K/V stores are row-local, and attention reads K/V only back from the store after
 * this call's rows wrote theirs, so a token's logits do not depend on how its sequence
 * was chunked or batched, nor on the K/V path. The two attention kinds differ in their
 * RoPE table and in the backend attention state (sliding: window W; full: none); both
 * use the scale query_pre_attn_scalar^-1/2 and the configured soft cap.
 *
 * Thread-safety: one call at a time per context (the scratch is shared).
 */
#include <math.h>
#include <string.h>

#include "engine/rope.h"
#include "models/gemma3/gemma3.h"

struct gemma3_fwd {
    const gemma3_config_t *cfg;
    const gemma3_weights_t *w;
    compute_backend_t *be;
    cairn_math_t math;
    cairn_dtype_t kv_dtype;
    int max_rows;
    float *inv_freq;       /* [2][head_dim/2]: GEMMA3_SLIDING, GEMMA3_FULL */
    /* Scratch of one call, row-major (backend memory: host memory on the CPU backend). */
    float *x;              /* [max_rows][hidden]  residual stream */
    float *xb;             /* [max_rows][hidden]  normed input of a sub-layer */
    float *xb2;            /* [max_rows][hidden]  sub-layer output */
    float *q;              /* [max_rows][n_heads*head_dim] */
    float *k;              /* [max_rows][n_kv_heads*head_dim] */
    float *v;              /* [max_rows][n_kv_heads*head_dim] */
    float *att;            /* [max_rows][n_heads*head_dim] attention output */
    float *hb;             /* [max_rows][ffn] gate, then gelu_tanh(gate)*up */
    float *hb2;            /* [max_rows][ffn] up */
    float *rope_cs;        /* [2][max_rows][head_dim] cos/sin pairs per kind and row */
    int32_t *ids;          /* [max_rows] token of each row */
    int *pos;              /* [max_rows] position of each row */
    attn_query_t *queries; /* [max_rows] */
    compute_attn_t *attn[2]; /* the backend's attention state per kind */
};

static compute_mat_t mat(const cairn_tensor_t *t)
{
    return (compute_mat_t){t->data, t->dtype, (int)t->shape[0], (int)t->shape[1]};
}

static compute_mat_t vec(const cairn_tensor_t *t)
{
    return (compute_mat_t){t->data, t->dtype, 1, (int)t->shape[0]};
}

static void matmul(gemma3_fwd_t *f, float *y, const float *x, int rows, const cairn_tensor_t *w)
{
    compute_mm_t mm = {y, mat(w)};
    compute_matmul(f->be, x, rows, (int)w->shape[1], &mm, 1, f->math);
}

/* Gemma's RMSNorm of n rows: x / rms(x) * (1 + w). */
static void norm(gemma3_fwd_t *f, float *out, const float *x, int rows, const cairn_tensor_t *w)
{
    compute_rmsnorm(f->be, out, x, rows, vec(w), f->cfg->rms_eps, true);
}

/* cap(s) = tanh(s / c) * c in place, as HF's final_logit_softcapping (host memory). */
static void softcap(float *x, size_t n, float cap)
{
    for (size_t i = 0; i < n; i++)
        x[i] = tanhf(x[i] / cap) * cap;
}

int gemma3_fwd_step(void *ctx, const cairn_fwd_batch_t *b)
{
    gemma3_fwd_t *f = ctx;
    const cairn_fwd_row_t *rows = b->rows;
    const int n = b->n_rows;
    const gemma3_config_t *c = f->cfg;
    const gemma3_weights_t *w = f->w;
    const int dim = c->hidden, hd = c->head_dim;
    const int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
    CAIRN_ASSERT(n > 0 && n <= f->max_rows);

    /* Scaled token embeddings, and the rotation angles of each row for both kinds. */
    for (int r = 0; r < n; r++) {
        f->ids[r] = rows[r].token;
        f->pos[r] = rows[r].pos;
    }
    compute_get_rows(f->be, f->x, mat(&w->embed), f->ids, n);
    compute_scale(f->be, f->x, c->embed_scale, (size_t)n * dim);
    for (int k = 0; k < 2; k++)
        compute_rope_angles(f->be, f->rope_cs + (size_t)k * f->max_rows * hd,
                            f->inv_freq + (size_t)k * (hd / 2), hd / 2, f->pos, n);

    for (int l = 0; l < c->n_layers; l++) {
        const gemma3_layer_t *L = &w->layers[l];
        const int kind = c->kind[l];
        const float *cs = f->rope_cs + (size_t)kind * f->max_rows * hd;

        /* Attention block: pre-norm, projections, q/k norms, RoPE of the layer's kind. */
        norm(f, f->xb, f->x, n, &L->attn_norm);
        compute_mm_t qkv[3] = {{f->q, mat(&L->wq)}, {f->k, mat(&L->wk)}, {f->v, mat(&L->wv)}};
        compute_matmul(f->be, f->xb, n, dim, qkv, 3, f->math);
        norm(f, f->q, f->q, n * c->n_heads, &L->q_norm);
        norm(f, f->k, f->k, n * c->n_kv_heads, &L->k_norm);
        compute_rope(f->be, f->q, n, c->n_heads, hd, hd, cs);
        compute_rope(f->be, f->k, n, c->n_kv_heads, hd, hd, cs);

        /* Store each row's K/V; attention reads them back from the store. */
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
        compute_attention(f->be, f->attn[kind], l, f->queries, n);

        /* Output projection, post-norm, residual. */
        matmul(f, f->xb2, f->att, n, &L->wo);
        norm(f, f->xb2, f->xb2, n, &L->post_attn_norm);
        compute_add(f->be, f->x, f->xb2, (size_t)n * dim);

        /* MLP block: pre-norm, GELU-tanh gate, post-norm, residual. */
        norm(f, f->xb, f->x, n, &L->pre_ffn_norm);
        compute_mm_t gu[2] = {{f->hb, mat(&L->w_gate)}, {f->hb2, mat(&L->w_up)}};
        compute_matmul(f->be, f->xb, n, dim, gu, 2, f->math);
        compute_glu(f->be, f->hb, f->hb, f->hb2, (size_t)n * c->ffn, COMPUTE_GLU_GELU_TANH);
        matmul(f, f->xb2, f->hb, n, &L->w_down);
        norm(f, f->xb2, f->xb2, n, &L->post_ffn_norm);
        compute_add(f->be, f->x, f->xb2, (size_t)n * dim);
    }

    /* Final norm and lm_head for the rows that want logits (compacted into xb). */
    int n_out = 0, first_out = -1;
    for (int r = 0; r < n; r++) {
        if (rows[r].out_row < 0)
            continue;
        if (first_out < 0)
            first_out = rows[r].out_row;
        CAIRN_ASSERT(rows[r].out_row == first_out + n_out);
        norm(f, f->xb + (size_t)n_out * dim, f->x + (size_t)r * dim, 1, &w->norm);
        n_out++;
    }
    if (n_out > 0) {
        float *out = b->logits + (size_t)first_out * c->vocab;
        matmul(f, out, f->xb, n_out, &w->lm_head);
        if (c->final_softcap > 0) {
            int rc = compute_sync(f->be);
            if (rc)
                return rc;
            softcap(out, (size_t)n_out * c->vocab, c->final_softcap);
        }
    }
    return CAIRN_OK;
}

/* inv_freq [head_dim/2] of one kind: the default frequencies, divided by a linear factor
 * (HF's linear rope: inv_freq / factor, one float32 division). */
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

/* Whether the backend runs every op this model asks for, in its tensors' types. */
static bool supported(compute_backend_t *be, const gemma3_config_t *c, const gemma3_weights_t *w,
                      cairn_dtype_t kv_dtype)
{
    /* Weights and scratch are host memory (cairn_malloc, the mapped checkpoint): a device
     * backend's kernels cannot read them, so one is refused here rather than fault. */
    if (!be->ops->host_memory) {
        cairn_log(CAIRN_LOG_ERROR, "gemma3: the %s backend has no host memory (this family's "
                  "weights and activations are host memory)", be->ops->name);
        return false;
    }
    if (!compute_supports(be, COMPUTE_OP_GET_ROWS, w->embed.dtype) ||
        !compute_supports(be, COMPUTE_OP_KV, kv_dtype) ||
        !compute_supports(be, COMPUTE_OP_MATMUL, w->lm_head.dtype) ||
        !compute_supports(be, COMPUTE_OP_NORM, w->norm.dtype))
        return false;
    for (int l = 0; l < c->n_layers; l++) {
        const gemma3_layer_t *L = &w->layers[l];
        const cairn_tensor_t *mm[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        const cairn_tensor_t *nm[] = {&L->attn_norm, &L->post_attn_norm, &L->pre_ffn_norm,
                                      &L->post_ffn_norm, &L->q_norm, &L->k_norm};
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(mm); i++)
            if (!compute_supports(be, COMPUTE_OP_MATMUL, mm[i]->dtype))
                return false;
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(nm); i++)
            if (!compute_supports(be, COMPUTE_OP_NORM, nm[i]->dtype))
                return false;
    }
    return true;
}

int gemma3_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **out)
{
    *out = NULL;
    const gemma3_t *g = m->priv;
    const gemma3_config_t *c = &g->cfg;
    compute_backend_t *be = env->be;
    if (!supported(be, c, &g->w, env->kv_dtype))
        return CAIRN_EUNSUPPORTED;
    gemma3_fwd_t *f = cairn_calloc(1, sizeof *f);
    if (!f)
        return CAIRN_ENOMEM;
    f->cfg = c;
    f->w = &g->w;
    f->be = be;
    f->math = (cairn_math_t)env->math;
    f->kv_dtype = env->kv_dtype;
    f->max_rows = env->max_rows;
    const size_t R = (size_t)env->max_rows, hd = (size_t)c->head_dim;
    const size_t q_dim = (size_t)c->n_heads * hd, kv_dim = (size_t)c->n_kv_heads * hd;
    int rc = CAIRN_ENOMEM;
    f->inv_freq = cairn_malloc(hd * sizeof(float)); /* 2 kinds x hd/2 */
    f->x = cairn_malloc(R * c->hidden * sizeof(float));
    f->xb = cairn_malloc(R * c->hidden * sizeof(float));
    f->xb2 = cairn_malloc(R * c->hidden * sizeof(float));
    f->q = cairn_malloc(R * q_dim * sizeof(float));
    f->k = cairn_malloc(R * kv_dim * sizeof(float));
    f->v = cairn_malloc(R * kv_dim * sizeof(float));
    f->att = cairn_malloc(R * q_dim * sizeof(float));
    f->hb = cairn_malloc(R * c->ffn * sizeof(float));
    f->hb2 = cairn_malloc(R * c->ffn * sizeof(float));
    f->rope_cs = cairn_malloc(2 * R * hd * sizeof(float));
    f->ids = cairn_malloc(R * sizeof(int32_t));
    f->pos = cairn_malloc(R * sizeof(int));
    f->queries = cairn_malloc(R * sizeof(attn_query_t));
    if (!f->inv_freq || !f->x || !f->xb || !f->xb2 || !f->q || !f->k || !f->v || !f->att ||
        !f->hb || !f->hb2 || !f->rope_cs || !f->ids || !f->pos || !f->queries)
        goto fail;
    for (int k = 0; k < 2; k++) {
        compute_attn_params_t ap = {c->n_heads, c->n_kv_heads, c->head_dim, env->kv_dtype,
                                    env->max_positions, k == GEMMA3_SLIDING ? c->sliding_window : 0,
                                    c->attn_scale, c->attn_softcap};
        if ((rc = compute_attn_create(be, &ap, &f->attn[k])))
            goto fail;
    }
    if ((rc = kind_inv_freq(c, &c->rope[GEMMA3_SLIDING], f->inv_freq)) ||
        (rc = kind_inv_freq(c, &c->rope[GEMMA3_FULL], f->inv_freq + hd / 2)))
        goto fail;
    *out = f;
    return CAIRN_OK;
fail:
    gemma3_fwd_destroy(f);
    return rc;
}

void gemma3_fwd_destroy(void *ctx)
{
    gemma3_fwd_t *f = ctx;
    if (!f)
        return;
    for (int k = 0; k < 2; k++)
        compute_attn_destroy(f->be, f->attn[k]);
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
    cairn_free(f->ids);
    cairn_free(f->pos);
    cairn_free(f->queries);
    cairn_free(f);
}
