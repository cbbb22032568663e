/*
 * qwen35_forward.c — the Qwen3.5 hybrid decoder forward pass, batched over rows (the model
 * is written out in qwen35.h).
 *
 * All rows of a call share each matrix product (kern_matmul: per-row bits independent of
 * the row count and thread count). Everything else is row-local, except the two
 * recurrences of a linear-attention layer — the causal conv and the delta rule — which
 * absorb a sequence's rows one at a time, in list order, into that sequence's state. The
 * work of one token therefore does not depend on which call it came in, what else was in
 * the call, or how many threads ran: a prompt in one step, in chunks, or token by token
 * gives the same bits. Full-attention layers store K/V through the views and read them
 * back (attention.h), as the dense forward pass does.
 *
 * Precision: float32 throughout, as HF computes with float32 weights. Where HF rounds in
 * a particular order we follow it (norm weights as (1 + w) in float32, q scaled by
 * dk^-0.5 after the L2 norm, the gated norm's w applied before the gate); reductions use
 * the canonical orders of kernels.h and delta_rule.h.
 *
 * Thread-safety: one call at a time per q35_fwd_t (shared scratch); states of different
 * sequences are touched by different tasks only.
 */
#include <math.h>
#include <string.h>

#include "engine/rope.h"
#include "compute/cpu/delta_rule.h"
#include "models/qwen35/qwen35.h"

/* L2-norm epsilon of the GDN kernels (HF l2norm, FLA), fixed: not rms_norm_eps. */
#define Q35_L2_EPS 1e-6f

/* ---- per-sequence state ---- */

size_t q35_layer_state_bytes(const q35_config_t *c)
{
    size_t conv = (size_t)(c->conv_kernel - 1) * q35_conv_dim(c);
    size_t rec = (size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
    return (conv + rec) * sizeof(float);
}

/* Layer l's conv taps [K-1][C] and delta-rule states [Hv][dk][dv] in a state handle. */
static float *layer_conv(const q35_fwd_t *f, void *state, int l)
{
    return (float *)((unsigned char *)state + f->state_off[l]);
}

static float *layer_rec(const q35_fwd_t *f, void *state, int l)
{
    return layer_conv(f, state, l) + (size_t)(f->cfg->conv_kernel - 1) * q35_conv_dim(f->cfg);
}

/* ---- helpers ---- */

static const void *tensor_row(const cairn_tensor_t *t, int64_t r)
{
    return (const unsigned char *)t->data + (size_t)r * (size_t)t->shape[1] * cairn_dtype_size(t->dtype);
}

static void matmul(q35_fwd_t *f, float *y, const float *x, int rows, const cairn_tensor_t *w)
{
    kern_matmul(f->tp, y, x, rows, (int)w->shape[1], w->data, w->dtype, (int)w->shape[0], f->math);
}

/* Products of the same x with up to 4 weights as one parallel run when their dtypes and
 * widths agree (kern_matmul_n, the same bits as separate calls). */
static void matmul_multi(q35_fwd_t *f, const float *x, int rows, int n, float *const *y,
                         const cairn_tensor_t *const *w)
{
    kern_mm_out_t outs[4];
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

/* out[r] = rmsnorm(x[r]) * w for n rows of dim (w float32, already 1 + w where due). */
static void norm_rows(float *out, const float *x, const float *w, int n, int dim, float eps)
{
    for (int r = 0; r < n; r++)
        kern_rmsnorm(out + (size_t)r * dim, x + (size_t)r * dim, w, CAIRN_DTYPE_F32, dim, eps);
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* torch.nn.functional.softplus (beta 1, threshold 20). */
static float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* ---- Gated DeltaNet layer ---- */

/* The delta-rule work of one call: one task per (sequence, value head). */
typedef struct {
    q35_fwd_t *f;
    const cairn_fwd_batch_t *b;
    int layer;
    const float *decay; /* [n_rows][Hv] */
    const float *beta;  /* [n_rows][Hv] */
} delta_job_t;

static void delta_task(void *ctx, int task, int n_tasks)
{
    (void)n_tasks;
    const delta_job_t *j = ctx;
    const q35_config_t *c = j->f->cfg;
    const int Hv = c->lin_v_heads, dk = c->lin_k_dim, dv = c->lin_v_dim;
    const int group = Hv / c->lin_k_heads, C = q35_conv_dim(c), KD = q35_key_dim(c);
    const int seq = task / Hv, h = task % Hv, kh = h / group;
    float *S = layer_rec(j->f, j->b->seqs[seq].state, j->layer) + (size_t)h * dk * dv;
    for (int r = 0; r < j->b->n_rows; r++) {
        if (j->b->rows[r].seq != seq)
            continue;
        const float *mixed = j->f->qkv + (size_t)r * C;
        const float *q = mixed + (size_t)kh * dk;
        const float *k = mixed + KD + (size_t)kh * dk;
        const float *v = mixed + 2 * KD + (size_t)h * dv;
        dr_delta_step(S, q, k, v, j->decay[(size_t)r * Hv + h], j->beta[(size_t)r * Hv + h], dk,
                      dv, j->f->core + (size_t)r * c->lin_v_heads * dv + (size_t)h * dv);
    }
}

static void linear_layer(q35_fwd_t *f, const q35_layer_t *L, int l, const cairn_fwd_batch_t *b)
{
    const cairn_fwd_row_t *rows = b->rows;
    const int n = b->n_rows;
    const q35_config_t *c = f->cfg;
    const int dim = c->base.hidden, C = q35_conv_dim(c), K = c->conv_kernel;
    const int Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_k_dim, dv = c->lin_v_dim;
    const int KD = q35_key_dim(c), VD = q35_value_dim(c);

    /* In-projections of the normed input: qkv [n][C], z [n][VD], b and a [n][Hv]. */
    norm_rows(f->xb, f->x, L->attn_norm1, n, dim, c->base.rms_eps);
    float *beta = f->ba, *decay = f->ba + (size_t)n * Hv; /* b and a, then beta and decay */
    float *ys[4] = {f->qkv, f->z, beta, decay};
    const cairn_tensor_t *ws[4] = {&L->in_qkv, &L->in_z, &L->in_b, &L->in_a};
    matmul_multi(f, f->xb, n, 4, ys, ws);

    /* Causal conv + silu, then the per-token gates; rows in list order, so each sequence's
     * conv state absorbs its rows oldest first. The conv output replaces qkv. */
    for (int r = 0; r < n; r++) {
        float *state = layer_conv(f, b->seqs[rows[r].seq].state, l);
        float *mixed = f->qkv + (size_t)r * C;
        dr_conv_step(f->core, state, mixed, L->conv_w, C, K);
        kern_silu_mul(mixed, f->core, f->ones, C); /* silu(x) * 1: exactly silu(x) */
        for (int h = 0; h < Hk; h++) {
            float *q = mixed + (size_t)h * dk, *k = mixed + KD + (size_t)h * dk;
            dr_l2norm(q, dk, Q35_L2_EPS);
            dr_l2norm(k, dk, Q35_L2_EPS);
            for (int i = 0; i < dk; i++)
                q[i] = q[i] * f->q_scale;
        }
        for (int h = 0; h < Hv; h++) {
            float *bt = beta + (size_t)r * Hv + h, *at = decay + (size_t)r * Hv + h;
            *bt = sigmoidf(*bt);
            /* g = -exp(A_log) * softplus(a + dt_bias); the state decays by exp(g). */
            *at = expf(L->neg_a[h] * softplusf(*at + L->dt_bias[h]));
        }
    }

    /* The delta rule, one task per (sequence, value head); core [n][VD]. */
    delta_job_t job = {f, b, l, decay, beta};
    cairn_thread_pool_run(f->tp, delta_task, &job, b->n_seqs * Hv);

    /* Gated RMSNorm per value head: rmsnorm(o) * w, then * silu(z). */
    for (int r = 0; r < n; r++) {
        for (int h = 0; h < Hv; h++) {
            float *o = f->core + (size_t)r * VD + (size_t)h * dv;
            kern_rmsnorm(o, o, L->gnorm, CAIRN_DTYPE_F32, dv, c->base.rms_eps);
            kern_silu_mul(o, f->z + (size_t)r * VD + (size_t)h * dv, o, dv);
        }
    }
    matmul(f, f->xb2, f->core, n, &L->out_proj);
    kern_add(f->x, f->xb2, n * dim);
}

/* ---- gated full-attention layer ---- */

static void full_layer(q35_fwd_t *f, const q35_layer_t *L, int l, const cairn_fwd_batch_t *b)
{
    const cairn_fwd_row_t *rows = b->rows;
    const int n = b->n_rows;
    const q35_config_t *c = f->cfg;
    const int dim = c->base.hidden, hd = c->base.head_dim, nh = c->base.n_heads;
    const int q_dim = nh * hd, kv_dim = c->base.n_kv_heads * hd;

    norm_rows(f->xb, f->x, L->attn_norm1, n, dim, c->base.rms_eps);
    float *ys[3] = {f->q, f->k, f->v};
    const cairn_tensor_t *ws[3] = {&L->wq, &L->wk, &L->wv};
    matmul_multi(f, f->xb, n, 3, ys, ws);

    for (int r = 0; r < n; r++) {
        const float *q2 = f->q + (size_t)r * 2 * q_dim; /* [nh][q | gate] */
        float *q = f->qh + (size_t)r * q_dim, *k = f->k + (size_t)r * kv_dim;
        const float *cs = f->rope_cs + (size_t)r * c->rope_dim;
        for (int h = 0; h < nh; h++) {
            float *qh = q + (size_t)h * hd;
            kern_rmsnorm(qh, q2 + (size_t)h * 2 * hd, L->q_norm1, CAIRN_DTYPE_F32, hd,
                         c->base.rms_eps);
            kern_rope(qh, 1, c->rope_dim, cs); /* the first rope_dim dims; the rest pass */
        }
        for (int h = 0; h < c->base.n_kv_heads; h++) {
            float *kh = k + (size_t)h * hd;
            kern_rmsnorm(kh, kh, L->k_norm1, CAIRN_DTYPE_F32, hd, c->base.rms_eps);
            kern_rope(kh, 1, c->rope_dim, cs);
        }
        const attn_kv_t *kv = &b->seqs[rows[r].seq].kv;
        void *kst, *vst;
        int ok = kv->rows(kv->ctx, l, rows[r].pos, &kst, &vst);
        CAIRN_ASSERT(ok > 0);
        kern_row_from_f32(kst, f->kv_dtype, k, kv_dim);
        kern_row_from_f32(vst, f->kv_dtype, f->v + (size_t)r * kv_dim, kv_dim);
        f->queries[r] = (attn_query_t){q, f->core + (size_t)r * q_dim, kv, rows[r].pos};
    }
    attn_forward(f->tp, &f->attn, l, f->queries, n);

    /* Output gate: attn * sigmoid(gate), gate the second half of each head's q_proj. */
    for (int r = 0; r < n; r++) {
        float *a = f->core + (size_t)r * q_dim;
        const float *q2 = f->q + (size_t)r * 2 * q_dim;
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < hd; i++)
                a[(size_t)h * hd + i] = a[(size_t)h * hd + i] * sigmoidf(q2[(size_t)h * 2 * hd + hd + i]);
    }
    matmul(f, f->xb2, f->core, n, &L->wo);
    kern_add(f->x, f->xb2, n * dim);
}

/* ---- the pass ---- */

int q35_fwd_step(void *fwd, const cairn_fwd_batch_t *b)
{
    q35_fwd_t *f = fwd;
    const q35_config_t *c = f->cfg;
    const q35_weights_t *w = f->w;
    const cairn_fwd_row_t *rows = b->rows;
    const int dim = c->base.hidden, n = b->n_rows;
    CAIRN_ASSERT(n > 0 && n <= f->max_rows);
    /* The recurrence absorbs rows in list order: each sequence's rows must continue its
     * state, position by position. */
    CAIRN_ASSERT(b->n_seqs >= 1 && b->n_seqs <= f->max_rows);
    for (int s = 0; s < b->n_seqs; s++) {
        f->next_pos[s] = b->seqs[s].n_past;
        CAIRN_ASSERT(c->n_linear == 0 || b->seqs[s].state != NULL);
    }
    for (int r = 0; r < n; r++)
        CAIRN_ASSERT(rows[r].pos == f->next_pos[rows[r].seq]++);

    for (int r = 0; r < n; r++) {
        kern_row_to_f32(f->x + (size_t)r * dim, tensor_row(&w->embed, rows[r].token), w->embed.dtype, dim);
        kern_rope_angles(f->rope_cs + (size_t)r * c->rope_dim, f->inv_freq, c->rope_dim / 2, rows[r].pos);
    }

    for (int l = 0; l < c->base.n_layers; l++) {
        const q35_layer_t *L = &w->layers[l];
        if (L->kind == Q35_LAYER_LINEAR)
            linear_layer(f, L, l, b);
        else
            full_layer(f, L, l, b);

        /* MLP: pre-norm, SwiGLU, residual. */
        norm_rows(f->xb, f->x, L->ffn_norm1, n, dim, c->base.rms_eps);
        float *ys[2] = {f->hb, f->hb2};
        const cairn_tensor_t *ws[2] = {&L->w_gate, &L->w_up};
        matmul_multi(f, f->xb, n, 2, ys, ws);
        kern_silu_mul(f->hb, f->hb, f->hb2, n * c->base.ffn);
        matmul(f, f->xb2, f->hb, n, &L->w_down);
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
        kern_rmsnorm(f->xb + (size_t)n_out * dim, f->x + (size_t)r * dim, w->norm1,
                     CAIRN_DTYPE_F32, dim, c->base.rms_eps);
        n_out++;
    }
    if (n_out > 0)
        matmul(f, b->logits + (size_t)first_out * c->base.vocab, f->xb, n_out, &w->lm_head);
    return CAIRN_OK;
}

int q35_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **out)
{
    *out = NULL;
    q35_fwd_t *f = cairn_calloc(1, sizeof(*f));
    if (!f)
        return CAIRN_ENOMEM;
    const q35_config_t *cfg = q35_model_config(m);
    const int max_rows = env->max_rows, max_positions = env->max_positions;
    const cairn_dtype_t kv_dtype = env->kv_dtype;
    cairn_thread_pool_t *tp = env->tp;
    cairn_layer_cache_t *layers = NULL;
    int rc = CAIRN_ENOMEM;
    f->cfg = cfg;
    f->w = q35_model_weights(m);
    f->tp = tp;
    f->math = (cairn_math_t)env->math;
    f->kv_dtype = kv_dtype;
    f->max_rows = max_rows;
    f->max_positions = max_positions;
    const cairn_model_config_t *b = &cfg->base;
    const size_t R = (size_t)max_rows, C = (size_t)q35_conv_dim(cfg), VD = (size_t)q35_value_dim(cfg);
    const size_t q_dim = (size_t)b->n_heads * b->head_dim, kv_dim = (size_t)b->n_kv_heads * b->head_dim;
    const size_t core = VD > q_dim ? VD : q_dim;
    const int n_slots = cairn_thread_pool_size(tp) > 0 ? cairn_thread_pool_size(tp) : 1;
    /* HF: query * (dk ** -0.5), the Python float rounded to float32. */
    f->q_scale = (float)pow((double)cfg->lin_k_dim, -0.5);

    f->inv_freq = cairn_malloc((size_t)cfg->rope_dim / 2 * sizeof(float));
    f->ones = cairn_malloc(C * sizeof(float));
    f->state_off = cairn_malloc((size_t)b->n_layers * sizeof(size_t));
    f->next_pos = cairn_malloc(R * sizeof(int));
    f->x = cairn_malloc(R * b->hidden * sizeof(float));
    f->xb = cairn_malloc(R * b->hidden * sizeof(float));
    f->xb2 = cairn_malloc(R * b->hidden * sizeof(float));
    f->qkv = cairn_malloc(R * C * sizeof(float));
    f->z = cairn_malloc(R * VD * sizeof(float));
    f->ba = cairn_malloc(R * 2 * cfg->lin_v_heads * sizeof(float));
    /* core also takes one conv output row before the silu: at least C floats. */
    f->core = cairn_malloc((R * core > C ? R * core : C) * sizeof(float));
    f->q = cairn_malloc(R * 2 * q_dim * sizeof(float));
    f->qh = cairn_malloc(R * q_dim * sizeof(float));
    f->k = cairn_malloc(R * kv_dim * sizeof(float));
    f->v = cairn_malloc(R * kv_dim * sizeof(float));
    f->hb = cairn_malloc(R * b->ffn * sizeof(float));
    f->hb2 = cairn_malloc(R * b->ffn * sizeof(float));
    f->rope_cs = cairn_malloc(R * cfg->rope_dim * sizeof(float));
    f->queries = cairn_malloc(R * sizeof(attn_query_t));
    f->attn = (attn_cfg_t){b->n_heads, b->n_kv_heads, b->head_dim, kv_dtype,
                           cairn_malloc((size_t)n_slots * sizeof(float) *
                                        attn_scratch_floats(b->n_heads, b->n_kv_heads,
                                                            b->head_dim, max_positions)),
                           n_slots, max_positions};
    layers = cairn_malloc((size_t)b->n_layers * sizeof(*layers));
    if (!f->inv_freq || !f->ones || !f->state_off || !f->next_pos || !f->x || !f->xb ||
        !f->xb2 || !f->qkv || !f->z || !f->ba || !f->core || !f->q || !f->qh || !f->k || !f->v ||
        !f->hb || !f->hb2 || !f->rope_cs || !f->queries || !f->attn.scratch || !layers)
        goto fail;
    for (size_t i = 0; i < C; i++)
        f->ones[i] = 1.0f;
    /* Each linear layer's part of the state handle, where the engine put it. */
    if ((rc = cairn_model_cache_layout(m, kv_dtype, layers, NULL)))
        goto fail;
    for (int l = 0; l < b->n_layers; l++)
        f->state_off[l] = cairn_model_state_offset(layers, l);
    /* HF: inv_freq over dim = rope_dim (partial rotary), default rope type. */
    cairn_model_config_t rope = *b;
    rope.head_dim = cfg->rope_dim;
    rope.rope_type = CAIRN_ROPE_DEFAULT;
    if ((rc = rope_inv_freq(&rope, f->inv_freq)))
        goto fail;
    cairn_free(layers);
    *out = f;
    return CAIRN_OK;
fail:
    cairn_free(layers);
    q35_fwd_destroy(f);
    return rc;
}

void q35_fwd_destroy(void *fwd)
{
    q35_fwd_t *f = fwd;
    if (!f)
        return;
    cairn_free(f->inv_freq);
    cairn_free(f->ones);
    cairn_free(f->state_off);
    cairn_free(f->next_pos);
    cairn_free(f->x);
    cairn_free(f->xb);
    cairn_free(f->xb2);
    cairn_free(f->qkv);
    cairn_free(f->z);
    cairn_free(f->ba);
    cairn_free(f->core);
    cairn_free(f->q);
    cairn_free(f->qh);
    cairn_free(f->k);
    cairn_free(f->v);
    cairn_free(f->hb);
    cairn_free(f->hb2);
    cairn_free(f->rope_cs);
    cairn_free(f->queries);
    cairn_free(f->attn.scratch);
    cairn_free(f);
}
