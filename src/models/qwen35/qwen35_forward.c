/*
 * qwen35_forward.c — the Qwen3.5 hybrid decoder forward pass on the compute backend,
 * batched over rows (the model is written out in qwen35.h).
 *
 * All rows of a call share each matrix product (compute_matmul: per-row bits independent
 * of the row count and thread count). Everything else is row-local, except the two
 * recurrences of a linear-attention layer — the causal conv and the delta rule — which
 * absorb a sequence's rows one at a time, in order, into that sequence's state. The work
 * of one token therefore does not depend on which call it came in, what else was in the
 * call, or how many threads ran: a prompt in one step, in chunks, or token by token gives
 * the same bits. Full-attention layers store K/V through the views and read them back.
 *
 * The in_proj_qkv product is issued as three products over its q, k and v row ranges
 * (the same bits as one product: each output element is the same reduction), so q, k and
 * v land packed as the delta-rule op takes them, and the causal conv (the backend's
 * short_conv, LFM2's op: the same depthwise convolution without bias) runs on each part
 * with its rows of conv1d.weight and its own taps of state.
 *
 * Precision: float32 throughout, as HF computes with float32 weights: norms as (1 + w)
 * (the backend's unit_offset), the gated norm's plain w before the silu gate, q of the
 * delta rule scaled by dk^-0.5 after the L2 norm (inside the backend op).
 *
 * Host-side steps (the backend must have host memory, checked at create): the GDN
 * log-decay g = -exp(A_log) softplus(a + dt_bias) (no backend op has softplus) and the
 * split of q_proj's per-head [q | gate] rows. A device backend needs both as ops.
 *
 * Thread-safety: one call at a time per q35_fwd_t (shared scratch); states of different
 * sequences are touched by different calls of the ops only.
 */
#include <math.h>
#include <string.h>

#include "engine/rope.h"
#include "models/qwen35/qwen35.h"

/* ---- per-sequence state ---- */

size_t q35_layer_state_bytes(const q35_config_t *c)
{
    size_t conv = (size_t)(c->conv_kernel - 1) * q35_conv_dim(c);
    size_t rec = (size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
    return (conv + rec) * sizeof(float);
}

/* Layer l's parts of a state handle: conv taps of q, k, v ([K-1][width] each), then the
 * delta-rule states [Hv][dk][dv]. */
typedef struct {
    float *conv_q, *conv_k, *conv_v, *rec;
} layer_state_t;

static layer_state_t layer_state(const q35_fwd_t *f, void *state, int l)
{
    const q35_config_t *c = f->cfg;
    const size_t taps = (size_t)(c->conv_kernel - 1), KD = (size_t)q35_key_dim(c);
    float *p = (float *)((unsigned char *)state + f->state_off[l]);
    layer_state_t s = {p, p + taps * KD, p + 2 * taps * KD, NULL};
    s.rec = s.conv_v + taps * (size_t)q35_value_dim(c);
    return s;
}

/* ---- helpers ---- */

static compute_mat_t mat(const cairn_tensor_t *t)
{
    return (compute_mat_t){t->data, t->dtype, (int)t->shape[0], (int)t->shape[1]};
}

static compute_mat_t vec(const cairn_tensor_t *t)
{
    return (compute_mat_t){t->data, t->dtype, 1, (int)t->shape[0]};
}

/* Rows [r0, r0 + n) of a [rows][cols] weight as a matrix of its own ([rows][1][cols] for
 * the conv weight: the middle axis is 1). */
static compute_mat_t row_range(const cairn_tensor_t *t, int r0, int n)
{
    const int cols = (int)t->shape[t->ndim - 1];
    const size_t row_bytes = cairn_dtype_row_bytes(t->dtype, cols); /* any block type (--quantize) */
    return (compute_mat_t){(const unsigned char *)t->data + (size_t)r0 * row_bytes, t->dtype, n, cols};
}

static void matmul(q35_fwd_t *f, float *y, const float *x, int rows, const cairn_tensor_t *w)
{
    compute_mm_t mm = {y, mat(w)};
    compute_matmul(f->be, x, rows, (int)w->shape[1], &mm, 1, f->math);
}

/* torch.nn.functional.softplus (beta 1, threshold 20). */
static float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* ---- Gated DeltaNet layer ---- */

static void linear_layer(q35_fwd_t *f, const q35_layer_t *L, int l, const cairn_fwd_batch_t *b)
{
    const q35_config_t *c = f->cfg;
    const cairn_fwd_row_t *rows = b->rows;
    const int n = b->n_rows, dim = c->base.hidden;
    const int Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_k_dim, dv = c->lin_v_dim;
    const int KD = q35_key_dim(c), VD = q35_value_dim(c);
    compute_backend_t *be = f->be;

    /* In-projections of the normed input: q, k [n][KD], v, z [n][VD], b, a [n][Hv]. */
    compute_rmsnorm(be, f->xb, f->x, n, vec(&L->attn_norm), c->base.rms_eps, true);
    const compute_mm_t mm[6] = {{f->lq, row_range(&L->in_qkv, 0, KD)},
                                {f->lk, row_range(&L->in_qkv, KD, KD)},
                                {f->lv, row_range(&L->in_qkv, 2 * KD, VD)},
                                {f->z, mat(&L->in_z)},
                                {f->beta, mat(&L->in_b)},
                                {f->g, mat(&L->in_a)}};
    compute_matmul(be, f->xb, n, dim, mm, 6, f->math);

    /* Causal conv of q, k, v over each run of consecutive rows of one sequence, so each
     * sequence's taps absorb its rows oldest first. Then silu (x * 1 after the gate:
     * exactly silu(x)). */
    const compute_mat_t wq = row_range(&L->conv, 0, KD), wk = row_range(&L->conv, KD, KD);
    const compute_mat_t wv = row_range(&L->conv, 2 * KD, VD);
    for (int r0 = 0; r0 < n;) {
        int r1 = r0 + 1;
        while (r1 < n && rows[r1].seq == rows[r0].seq)
            r1++;
        layer_state_t st = layer_state(f, b->seqs[rows[r0].seq].state, l);
        compute_short_conv(be, f->cq + (size_t)r0 * KD, f->lq + (size_t)r0 * KD, r1 - r0, wq, st.conv_q);
        compute_short_conv(be, f->ck + (size_t)r0 * KD, f->lk + (size_t)r0 * KD, r1 - r0, wk, st.conv_k);
        compute_short_conv(be, f->cv + (size_t)r0 * VD, f->lv + (size_t)r0 * VD, r1 - r0, wv, st.conv_v);
        r0 = r1;
    }
    compute_glu(be, f->cq, f->cq, f->ones, (size_t)n * KD, COMPUTE_GLU_SILU);
    compute_glu(be, f->ck, f->ck, f->ones, (size_t)n * KD, COMPUTE_GLU_SILU);
    compute_glu(be, f->cv, f->cv, f->ones, (size_t)n * VD, COMPUTE_GLU_SILU);

    /* beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias), the log-decay. */
    compute_glu(be, f->beta, f->beta, f->ones, (size_t)n * Hv, COMPUTE_GLU_SIGMOID);
    for (int r = 0; r < n; r++)
        for (int h = 0; h < Hv; h++) {
            float *a = f->g + (size_t)r * Hv + h;
            *a = L->neg_a[h] * softplusf(*a + L->dt_bias[h]);
        }

    /* The delta rule over each run of consecutive rows of one sequence; core [n][VD]. */
    for (int r0 = 0; r0 < n;) {
        int r1 = r0 + 1;
        while (r1 < n && rows[r1].seq == rows[r0].seq)
            r1++;
        layer_state_t st = layer_state(f, b->seqs[rows[r0].seq].state, l);
        compute_delta_rule(be, f->core + (size_t)r0 * VD, f->cq + (size_t)r0 * KD,
                           f->ck + (size_t)r0 * KD, f->cv + (size_t)r0 * VD, f->g + (size_t)r0 * Hv,
                           f->beta + (size_t)r0 * Hv, r1 - r0, Hk, Hv, dk, dv, st.rec);
        r0 = r1;
    }

    /* Gated RMSNorm per value head: rmsnorm(o) * w, then * silu(z). */
    compute_rmsnorm(be, f->core, f->core, n * Hv, vec(&L->gnorm), c->base.rms_eps, false);
    compute_glu(be, f->core, f->z, f->core, (size_t)n * VD, COMPUTE_GLU_SILU);
    matmul(f, f->xb2, f->core, n, &L->out_proj);
    compute_add(be, f->x, f->xb2, (size_t)n * dim);
}

/* ---- gated full-attention layer ---- */

static void full_layer(q35_fwd_t *f, const q35_layer_t *L, int l, const cairn_fwd_batch_t *b)
{
    const q35_config_t *c = f->cfg;
    const cairn_fwd_row_t *rows = b->rows;
    const int n = b->n_rows, dim = c->base.hidden, hd = c->base.head_dim;
    const int nh = c->base.n_heads, nkv = c->base.n_kv_heads;
    const int q_dim = nh * hd, kv_dim = nkv * hd;
    compute_backend_t *be = f->be;

    compute_rmsnorm(be, f->xb, f->x, n, vec(&L->attn_norm), c->base.rms_eps, true);
    const compute_mm_t mm[3] = {{f->q2, mat(&L->wq)}, {f->k, mat(&L->wk)}, {f->v, mat(&L->wv)}};
    compute_matmul(be, f->xb, n, dim, mm, 3, f->math);

    /* q_proj gives [q | gate] per head: split into queries and gates, [n][nh][hd] each. */
    for (int r = 0; r < n; r++)
        for (int h = 0; h < nh; h++) {
            const float *src = f->q2 + ((size_t)r * nh + h) * 2 * hd;
            memcpy(f->q + ((size_t)r * nh + h) * hd, src, (size_t)hd * sizeof(float));
            memcpy(f->gate + ((size_t)r * nh + h) * hd, src + hd, (size_t)hd * sizeof(float));
        }
    compute_rmsnorm(be, f->q, f->q, n * nh, vec(&L->q_norm), c->base.rms_eps, true);
    compute_rmsnorm(be, f->k, f->k, n * nkv, vec(&L->k_norm), c->base.rms_eps, true);
    compute_rope(be, f->q, n, nh, hd, c->rope_dim, f->rope_cs); /* the first rope_dim dims */
    compute_rope(be, f->k, n, nkv, hd, c->rope_dim, f->rope_cs);

    for (int r = 0; r < n; r++) {
        const attn_kv_t *kv = &b->seqs[rows[r].seq].kv;
        void *kst, *vst;
        int ok = kv->rows(kv->ctx, l, rows[r].pos, &kst, &vst);
        CAIRN_ASSERT(ok > 0 && kst && vst);
        compute_kv_store(be, kst, f->kv_dtype, f->k + (size_t)r * kv_dim, kv_dim);
        compute_kv_store(be, vst, f->kv_dtype, f->v + (size_t)r * kv_dim, kv_dim);
        f->queries[r] = (attn_query_t){f->q + (size_t)r * q_dim, f->core + (size_t)r * q_dim, kv,
                                       rows[r].pos};
    }
    compute_attention(be, f->attn, l, f->queries, n);

    /* Output gate: attn * sigmoid(gate). */
    compute_glu(be, f->core, f->gate, f->core, (size_t)n * q_dim, COMPUTE_GLU_SIGMOID);
    matmul(f, f->xb2, f->core, n, &L->wo);
    compute_add(be, f->x, f->xb2, (size_t)n * dim);
}

/* ---- the pass ---- */

int q35_fwd_step(void *fwd, const cairn_fwd_batch_t *b)
{
    q35_fwd_t *f = fwd;
    const q35_config_t *c = f->cfg;
    const q35_weights_t *w = f->w;
    const cairn_fwd_row_t *rows = b->rows;
    const int dim = c->base.hidden, n = b->n_rows;
    compute_backend_t *be = f->be;
    CAIRN_ASSERT(n > 0 && n <= f->max_rows);

    /* The recurrences absorb rows in list order: each sequence's rows must continue its
     * state, position by position. */
    CAIRN_ASSERT(b->n_seqs >= 1 && b->n_seqs <= f->max_rows);
    for (int s = 0; s < b->n_seqs; s++) {
        f->next_pos[s] = b->seqs[s].n_past;
        CAIRN_ASSERT(c->n_linear == 0 || b->seqs[s].state != NULL);
    }
    for (int r = 0; r < n; r++) {
        CAIRN_ASSERT(rows[r].pos == f->next_pos[rows[r].seq]++);
        f->ids[r] = rows[r].token;
        f->pos[r] = rows[r].pos;
    }

    compute_get_rows(be, f->x, mat(&w->embed), f->ids, n);
    compute_rope_angles(be, f->rope_cs, f->inv_freq, c->rope_dim / 2, f->pos, n);

    for (int l = 0; l < c->base.n_layers; l++) {
        const q35_layer_t *L = &w->layers[l];
        if (L->kind == Q35_LAYER_LINEAR)
            linear_layer(f, L, l, b);
        else
            full_layer(f, L, l, b);

        /* MLP: pre-norm, SwiGLU, residual. */
        compute_rmsnorm(be, f->xb, f->x, n, vec(&L->ffn_norm), c->base.rms_eps, true);
        const compute_mm_t mm[2] = {{f->hb, mat(&L->w_gate)}, {f->hb2, mat(&L->w_up)}};
        compute_matmul(be, f->xb, n, dim, mm, 2, f->math);
        compute_glu(be, f->hb, f->hb, f->hb2, (size_t)n * c->base.ffn, COMPUTE_GLU_SILU);
        matmul(f, f->xb2, f->hb, n, &L->w_down);
        compute_add(be, f->x, f->xb2, (size_t)n * dim);
    }

    /* Final norm and lm_head for the rows that want logits (compacted into xb). */
    int n_out = 0, first_out = -1;
    for (int r = 0; r < n; r++) {
        if (rows[r].out_row < 0)
            continue;
        if (first_out < 0)
            first_out = rows[r].out_row;
        CAIRN_ASSERT(rows[r].out_row == first_out + n_out);
        compute_rmsnorm(be, f->xb + (size_t)n_out * dim, f->x + (size_t)r * dim, 1, vec(&w->norm),
                        c->base.rms_eps, true);
        n_out++;
    }
    if (n_out > 0)
        matmul(f, b->logits + (size_t)first_out * c->base.vocab, f->xb, n_out, &w->lm_head);
    return CAIRN_OK;
}

/* Every op and type the pass will use, checked once: a backend that lacks one fails here
 * with a message instead of in a step. */
static int check_backend(compute_backend_t *be, const q35_config_t *c, const q35_weights_t *w,
                         cairn_dtype_t kv_dtype)
{
    char err[160];
    if (!be->ops->host_memory) {
        cairn_log(CAIRN_LOG_ERROR, "qwen35: the %s backend has no host memory (the GDN gates and "
                  "the q/gate split run on the host)", be->ops->name);
        return CAIRN_EUNSUPPORTED;
    }
    int rc = compute_backend_require(be, COMPUTE_OP_GET_ROWS, w->embed.dtype, err, sizeof(err));
    rc = rc ? rc : compute_backend_require(be, COMPUTE_OP_KV, kv_dtype, err, sizeof(err));
    rc = rc ? rc : compute_backend_require(be, COMPUTE_OP_DELTA_RULE, CAIRN_DTYPE_F32, err, sizeof(err));
    for (int l = 0; !rc && l < c->base.n_layers; l++)
        if (w->layers[l].conv.data)
            rc = compute_backend_require(be, COMPUTE_OP_SHORT_CONV, w->layers[l].conv.dtype, err, sizeof(err));
    rc = rc ? rc : compute_backend_require(be, COMPUTE_OP_MATMUL, w->lm_head.dtype, err, sizeof(err));
    rc = rc ? rc : compute_backend_require(be, COMPUTE_OP_NORM, w->norm.dtype, err, sizeof(err));
    for (int l = 0; !rc && l < c->base.n_layers; l++) {
        const q35_layer_t *L = &w->layers[l];
        const cairn_tensor_t *mm[] = {&L->w_gate, &L->w_up, &L->w_down, &L->in_qkv, &L->in_z,
                                      &L->in_b, &L->in_a, &L->out_proj, &L->wq, &L->wk, &L->wv, &L->wo};
        const cairn_tensor_t *nm[] = {&L->attn_norm, &L->ffn_norm, &L->gnorm, &L->q_norm, &L->k_norm};
        for (size_t i = 0; !rc && i < CAIRN_ARRAY_LEN(mm); i++)
            if (mm[i]->data)
                rc = compute_backend_require(be, COMPUTE_OP_MATMUL, mm[i]->dtype, err, sizeof(err));
        for (size_t i = 0; !rc && i < CAIRN_ARRAY_LEN(nm); i++)
            if (nm[i]->data)
                rc = compute_backend_require(be, COMPUTE_OP_NORM, nm[i]->dtype, err, sizeof(err));
    }
    if (rc)
        cairn_log(CAIRN_LOG_ERROR, "qwen35: %s", err);
    return rc;
}

int q35_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **out)
{
    *out = NULL;
    const q35_config_t *cfg = q35_model_config(m);
    const q35_weights_t *w = q35_model_weights(m);
    int rc = check_backend(env->be, cfg, w, env->kv_dtype);
    if (rc)
        return rc;
    q35_fwd_t *f = cairn_calloc(1, sizeof(*f));
    if (!f)
        return CAIRN_ENOMEM;
    cairn_layer_cache_t *layers = NULL;
    rc = CAIRN_ENOMEM;
    f->cfg = cfg;
    f->w = w;
    f->be = env->be;
    f->math = (cairn_math_t)env->math;
    f->kv_dtype = env->kv_dtype;
    f->max_rows = env->max_rows;
    f->max_positions = env->max_positions;
    const cairn_model_config_t *b = &cfg->base;
    const size_t R = (size_t)env->max_rows;
    const size_t KD = (size_t)q35_key_dim(cfg), VD = (size_t)q35_value_dim(cfg), Hv = (size_t)cfg->lin_v_heads;
    const size_t q_dim = (size_t)b->n_heads * b->head_dim, kv_dim = (size_t)b->n_kv_heads * b->head_dim;
    const size_t core = VD > q_dim ? VD : q_dim;
    /* the `up` of silu over [n][KD] and [n][VD], of sigmoid over [n][Hv] */
    const size_t ones = R * (KD > VD ? (KD > Hv ? KD : Hv) : (VD > Hv ? VD : Hv));

    f->inv_freq = cairn_malloc((size_t)cfg->rope_dim / 2 * sizeof(float));
    f->ones = cairn_malloc(ones * sizeof(float));
    f->state_off = cairn_malloc((size_t)b->n_layers * sizeof(size_t));
    f->next_pos = cairn_malloc(R * sizeof(int));
    f->ids = cairn_malloc(R * sizeof(int32_t));
    f->pos = cairn_malloc(R * sizeof(int));
    f->x = cairn_malloc(R * b->hidden * sizeof(float));
    f->xb = cairn_malloc(R * b->hidden * sizeof(float));
    f->xb2 = cairn_malloc(R * b->hidden * sizeof(float));
    f->lq = cairn_malloc(R * KD * sizeof(float));
    f->lk = cairn_malloc(R * KD * sizeof(float));
    f->lv = cairn_malloc(R * VD * sizeof(float));
    f->cq = cairn_malloc(R * KD * sizeof(float));
    f->ck = cairn_malloc(R * KD * sizeof(float));
    f->cv = cairn_malloc(R * VD * sizeof(float));
    f->z = cairn_malloc(R * VD * sizeof(float));
    f->beta = cairn_malloc(R * Hv * sizeof(float));
    f->g = cairn_malloc(R * Hv * sizeof(float));
    f->core = cairn_malloc(R * core * sizeof(float));
    f->q2 = cairn_malloc(R * 2 * q_dim * sizeof(float));
    f->q = cairn_malloc(R * q_dim * sizeof(float));
    f->gate = cairn_malloc(R * q_dim * sizeof(float));
    f->k = cairn_malloc(R * kv_dim * sizeof(float));
    f->v = cairn_malloc(R * kv_dim * sizeof(float));
    f->hb = cairn_malloc(R * b->ffn * sizeof(float));
    f->hb2 = cairn_malloc(R * b->ffn * sizeof(float));
    f->rope_cs = cairn_malloc(R * cfg->rope_dim * sizeof(float));
    f->queries = cairn_malloc(R * sizeof(attn_query_t));
    layers = cairn_malloc((size_t)b->n_layers * sizeof(*layers));
    if (!f->inv_freq || !f->ones || !f->state_off || !f->next_pos || !f->ids || !f->pos || !f->x ||
        !f->xb || !f->xb2 || !f->lq || !f->lk || !f->lv || !f->cq || !f->ck || !f->cv || !f->z ||
        !f->beta || !f->g || !f->core || !f->q2 || !f->q || !f->gate || !f->k || !f->v || !f->hb ||
        !f->hb2 || !f->rope_cs || !f->queries || !layers)
        goto fail;
    for (size_t i = 0; i < ones; i++)
        f->ones[i] = 1.0f;
    /* Each linear layer's part of the state handle, where the engine put it. */
    if ((rc = cairn_model_cache_layout(m, env->kv_dtype, layers, NULL)))
        goto fail;
    for (int l = 0; l < b->n_layers; l++)
        f->state_off[l] = cairn_model_state_offset(layers, l);
    /* HF: inv_freq over dim = rope_dim (partial rotary), default rope type. */
    cairn_model_config_t rope = *b;
    rope.head_dim = cfg->rope_dim;
    rope.rope_type = CAIRN_ROPE_DEFAULT;
    if ((rc = rope_inv_freq(&rope, f->inv_freq)))
        goto fail;
    const compute_attn_params_t ap = {b->n_heads, b->n_kv_heads, b->head_dim, env->kv_dtype,
                                      env->max_positions, 0, 0.0f, 0.0f};
    if ((rc = compute_attn_create(f->be, &ap, &f->attn)))
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
    compute_attn_destroy(f->be, f->attn);
    void *bufs[] = {f->inv_freq, f->ones, f->state_off, f->next_pos, f->ids, f->pos, f->x, f->xb,
                    f->xb2, f->lq, f->lk, f->lv, f->cq, f->ck, f->cv, f->z, f->beta, f->g, f->core,
                    f->q2, f->q, f->gate, f->k, f->v, f->hb, f->hb2, f->rope_cs, f->queries};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(bufs); i++)
        cairn_free(bufs[i]);
    cairn_free(f);
}
