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
 * Only the logits leave a step, so the last layer's attention, output projection and MLP
 * run only for the rows that want logits (its K/V is stored for every row): a prefill
 * chunk that samples nothing stops after the last layer's K/V, a chunk that samples its
 * last token carries that row alone (host-memory backends).
 *
 * Every operation is an op of the compute backend (compute/backend.h), never a kernel.
 * All rows of a call share each matrix product (compute_matmul over n_rows), whose
 * per-row bits do not depend on n_rows or the thread count (the backend's determinism
 * contract). Per-row work
 * (norms, RoPE, K/V stores) is row-local. Attention reads K/V only from the store, after
 * this call's rows have been written, so a token sees the same bytes whether its
 * predecessors were computed in this call, an earlier one, or reused from the cache.
 *
 * A row is one new token of one sequence at its position. The rows of a call form one
 * activation matrix [n_rows][hidden] for the projections and the MLP; attention runs per
 * (row, head) over the row's sequence through its attn_kv_t accessor (flat or paged).
 *
 * Memory. Scratch comes from compute_buffer_alloc and the weights go through
 * compute_buffer_from_host once at fwd_create: on the CPU backend that is host memory and
 * the mapped weights themselves (no copy); on a device backend (CUDA) it is device memory
 * and one upload, and the logits are computed into device scratch and read back.
 *
 * Thread-safety: one call at a time per context (the scratch is shared).
 */
#include <string.h>

#include "engine/rope.h"
#include "models/llama/llama.h"

enum { SCRATCH_X, SCRATCH_XB, SCRATCH_XB2, SCRATCH_Q, SCRATCH_K, SCRATCH_V, SCRATCH_ATT, SCRATCH_HB,
       SCRATCH_HB2, SCRATCH_ROPE, SCRATCH_LOGITS, SCRATCH_COUNT };

typedef struct {
    const cairn_model_config_t *cfg;
    const llama_weights_t *src;    /* the model's weights (host memory) */
    const llama_weights_t *w;      /* the weights in backend memory (dw, or src) */
    llama_weights_t dw;            /* device backend: the model's weights with backend data */
    compute_buffer_t *wbufs;       /* [n_wbufs] the uploaded weights */
    int n_wbufs;
    compute_buffer_t scratch[SCRATCH_COUNT];
    bool qk_norm;
    compute_backend_t *be;
    cairn_math_t math;
    cairn_dtype_t kv_dtype;
    int max_rows;          /* rows per call */
    float *inv_freq;       /* [head_dim/2] */
    /* Scratch of one call, row-major (backend memory: host memory on the CPU backend). */
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
    float *logits;         /* device backend: [max_rows][vocab]; NULL: straight into the batch's */
    int32_t *ids;          /* [max_rows] token of each row */
    int *pos;              /* [max_rows] position of each row */
    attn_query_t *queries; /* [max_rows] */
    compute_attn_t *attn;  /* the backend's attention state (scratch) */
} fwd_t;

/* A weight tensor [out][in] as a backend matrix. */
static compute_mat_t mat(const cairn_tensor_t *t)
{
    return (compute_mat_t){t->data, t->dtype, (int)t->shape[0], t->ndim > 1 ? (int)t->shape[1] : 1};
}

/* A norm weight [n] as a 1 x n matrix. */
static compute_mat_t vec(const cairn_tensor_t *t)
{
    return (compute_mat_t){t->data, t->dtype, 1, (int)t->shape[0]};
}

static void matmul(fwd_t *f, float *y, const float *x, int rows, const cairn_tensor_t *w)
{
    compute_mm_t mm = {y, mat(w)};
    compute_matmul(f->be, x, rows, (int)w->shape[1], &mm, 1, f->math);
}

/*
 * y1 = x w1^T, y2 = x w2^T and (when w3) y3 = x w3^T as one call: decode wakes the pool
 * once for q/k/v and once for gate/up (same bits as separate calls).
 */
static void matmul3(fwd_t *f, const float *x, int rows, float *y1, const cairn_tensor_t *w1, float *y2,
                    const cairn_tensor_t *w2, float *y3, const cairn_tensor_t *w3)
{
    compute_mm_t mm[3] = {{y1, mat(w1)}, {y2, mat(w2)}, {y3, w3 ? mat(w3) : mat(w1)}};
    compute_matmul(f->be, x, rows, (int)w1->shape[1], mm, w3 ? 3 : 2, f->math);
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
        f->ids[r] = rows[r].token;
        f->pos[r] = rows[r].pos;
    }
    compute_get_rows(f->be, f->x, mat(&w->embed), f->ids, n);
    compute_rope_angles(f->be, f->rope_cs, f->inv_freq, hd / 2, f->pos, n);
    int n_out = 0; /* rows that want logits */
    for (int r = 0; r < n; r++)
        n_out += rows[r].out_row >= 0;

    for (int l = 0; l < c->n_layers; l++) {
        const llama_layer_weights_t *lw = &w->layers[l];
        int na = n; /* rows this layer carries past its K/V stores */

        /* Attention block: pre-norm, projections, (qwen3) q/k norms, RoPE. */
        compute_rmsnorm(f->be, f->xb, f->x, n, vec(&lw->attn_norm), c->rms_eps, false);
        matmul3(f, f->xb, n, f->q, &lw->wq, f->k, &lw->wk, f->v, &lw->wv);
        if (f->qk_norm) {
            compute_rmsnorm(f->be, f->q, f->q, n * c->n_heads, vec(&lw->q_norm), c->rms_eps, false);
            compute_rmsnorm(f->be, f->k, f->k, n * c->n_kv_heads, vec(&lw->k_norm), c->rms_eps, false);
        }
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
        /* The last layer's attention and MLP feed only the logits: past its K/V stores
         * they run for the rows that want logits alone, moved to the front of x and q
         * (host memory; a device backend computes every row). Each row's bits are the
         * same either way (every op is row-local or per-row exact in any batch). */
        if (l == c->n_layers - 1 && n_out < n && f->be->ops->host_memory) {
            na = 0;
            for (int r = 0; r < n; r++) {
                if (rows[r].out_row < 0)
                    continue;
                if (na != r) {
                    memcpy(f->x + (size_t)na * dim, f->x + (size_t)r * dim, (size_t)dim * sizeof(float));
                    memcpy(f->q + (size_t)na * q_dim, f->q + (size_t)r * q_dim, (size_t)q_dim * sizeof(float));
                }
                f->queries[na] = (attn_query_t){f->q + (size_t)na * q_dim, f->att + (size_t)na * q_dim,
                                                &b->seqs[rows[r].seq].kv, rows[r].pos};
                na++;
            }
            if (na == 0)
                break;
        }
        compute_attention(f->be, f->attn, l, f->queries, na);

        /* Output projection and residual. */
        matmul(f, f->xb2, f->att, na, &lw->wo);
        compute_add(f->be, f->x, f->xb2, (size_t)na * dim);

        /* MLP block: pre-norm, SwiGLU, residual. */
        compute_rmsnorm(f->be, f->xb, f->x, na, vec(&lw->ffn_norm), c->rms_eps, false);
        matmul3(f, f->xb, na, f->hb, &lw->w_gate, f->hb2, &lw->w_up, NULL, NULL);
        compute_glu(f->be, f->hb, f->hb, f->hb2, (size_t)na * c->ffn, COMPUTE_GLU_SILU);
        matmul(f, f->xb2, f->hb, na, &lw->w_down);
        compute_add(f->be, f->x, f->xb2, (size_t)na * dim);
    }

    /* Final norm and lm_head, only for the rows that want logits (compacted into xb; in
     * x they are rows 0..n_out-1 when the last layer carried them alone, else rows r). */
    const bool compacted = n_out < n && f->be->ops->host_memory;
    int first_out = -1;
    for (int r = 0, j = 0; r < n; r++) {
        if (rows[r].out_row < 0)
            continue;
        if (first_out < 0)
            first_out = rows[r].out_row;
        CAIRN_ASSERT(rows[r].out_row == first_out + j);
        compute_rmsnorm(f->be, f->xb + (size_t)j * dim, f->x + (size_t)(compacted ? j : r) * dim, 1,
                        vec(&w->norm), c->rms_eps, false);
        j++;
    }
    if (n_out > 0) {
        const cairn_tensor_t *head = w->lm_head.data ? &w->lm_head : &w->embed;
        float *dst = logits + (size_t)first_out * c->vocab;
        matmul(f, f->logits ? f->logits : dst, f->xb, n_out, head);
        if (f->logits) /* device backend: read back (waits for the step) */
            return compute_buffer_read(f->be, &f->scratch[SCRATCH_LOGITS], 0, dst,
                                       (size_t)n_out * c->vocab * sizeof(float));
    }
    return CAIRN_OK;
}

static void fwd_free(fwd_t *f);

/* compute_supports, logging the backend's message when it says no. */
static bool require(compute_backend_t *be, compute_op_t op, cairn_dtype_t t)
{
    char msg[160];
    if (compute_backend_require(be, op, t, msg, sizeof(msg)) == CAIRN_OK)
        return true;
    cairn_log(CAIRN_LOG_ERROR, "llama: %s", msg);
    return false;
}

/* Bytes of a tensor (every dtype here is a plain one-element block type). */
static size_t tensor_bytes(const cairn_tensor_t *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return cairn_dtype_row_bytes(t->dtype, n);
}

/* Every weight in backend memory: the model's own on a host-memory backend, else one
 * upload per tensor into f->dw (same shapes and dtypes, backend data pointers). */
static int upload_weights(fwd_t *f, const cairn_model_config_t *cfg)
{
    if (f->be->ops->host_memory) {
        f->w = f->src;
        return CAIRN_OK;
    }
    f->dw = *f->src;
    f->dw.layers = cairn_calloc((size_t)cfg->n_layers, sizeof(*f->dw.layers));
    const int per_layer = 11, n = 3 + per_layer * cfg->n_layers;
    f->wbufs = cairn_calloc((size_t)n, sizeof(*f->wbufs));
    if (!f->dw.layers || !f->wbufs)
        return CAIRN_ENOMEM;
    cairn_tensor_t *ts[3] = {&f->dw.embed, &f->dw.norm, &f->dw.lm_head};
    for (int l = 0; l < cfg->n_layers; l++)
        f->dw.layers[l] = f->src->layers[l];
    for (int i = 0; i < n; i++) {
        cairn_tensor_t *t;
        if (i < 3) {
            t = ts[i];
        } else {
            llama_layer_weights_t *L = &f->dw.layers[(i - 3) / per_layer];
            cairn_tensor_t *lt[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->q_norm,
                                    &L->k_norm, &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down};
            t = lt[(i - 3) % per_layer];
        }
        if (!t->data)
            continue;
        int rc = compute_buffer_from_host(f->be, t->data, tensor_bytes(t), &f->wbufs[i]);
        if (rc)
            return rc;
        f->n_wbufs = i + 1;
        t->data = f->wbufs[i].data;
    }
    f->w = &f->dw;
    return CAIRN_OK;
}

int llama_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **out)
{
    *out = NULL;
    const cairn_model_config_t *cfg = &m->cfg;
    const llama_weights_t *w = llama_model_weights(m);
    compute_backend_t *be = env->be;
    /* Everything the ops will be asked for, checked once: a type the backend lacks is
     * CAIRN_EUNSUPPORTED here, never a wrong kernel later. */
    if (!require(be, COMPUTE_OP_GET_ROWS, w->embed.dtype) || !require(be, COMPUTE_OP_KV, env->kv_dtype))
        return CAIRN_EUNSUPPORTED;
    for (int l = 0; l < cfg->n_layers; l++) {
        const llama_layer_weights_t *L = &w->layers[l];
        const cairn_tensor_t *mm[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        const cairn_tensor_t *nm[] = {&L->attn_norm, &L->ffn_norm, &L->q_norm, &L->k_norm};
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(mm); i++)
            if (!require(be, COMPUTE_OP_MATMUL, mm[i]->dtype))
                return CAIRN_EUNSUPPORTED;
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(nm); i++)
            if (nm[i]->data && !require(be, COMPUTE_OP_NORM, nm[i]->dtype))
                return CAIRN_EUNSUPPORTED;
    }
    const cairn_tensor_t *head = w->lm_head.data ? &w->lm_head : &w->embed;
    if (!require(be, COMPUTE_OP_MATMUL, head->dtype) || !require(be, COMPUTE_OP_NORM, w->norm.dtype))
        return CAIRN_EUNSUPPORTED;

    fwd_t *f = cairn_calloc(1, sizeof(*f));
    if (!f)
        return CAIRN_ENOMEM;
    const int max_rows = env->max_rows;
    f->cfg = cfg;
    f->src = w;
    f->qk_norm = ((const llama_t *)m->priv)->qk_norm;
    f->be = be;
    f->math = (cairn_math_t)env->math;
    f->kv_dtype = env->kv_dtype;
    f->max_rows = max_rows;
    const size_t R = (size_t)max_rows;
    const size_t q_dim = (size_t)cfg->n_heads * cfg->head_dim;
    const size_t kv_dim = (size_t)cfg->n_kv_heads * cfg->head_dim;

    f->inv_freq = cairn_malloc((size_t)cfg->head_dim / 2 * sizeof(float));
    f->ids = cairn_malloc(R * sizeof(int32_t));
    f->pos = cairn_malloc(R * sizeof(int));
    f->queries = cairn_malloc(R * sizeof(attn_query_t));
    if (!f->inv_freq || !f->ids || !f->pos || !f->queries)
        goto nomem;
    /* Activations in backend memory. */
    const size_t floats[SCRATCH_COUNT] = {
        [SCRATCH_X] = R * cfg->hidden, [SCRATCH_XB] = R * cfg->hidden, [SCRATCH_XB2] = R * cfg->hidden,
        [SCRATCH_Q] = R * q_dim, [SCRATCH_K] = R * kv_dim, [SCRATCH_V] = R * kv_dim, [SCRATCH_ATT] = R * q_dim,
        [SCRATCH_HB] = R * cfg->ffn, [SCRATCH_HB2] = R * cfg->ffn, [SCRATCH_ROPE] = R * cfg->head_dim,
        [SCRATCH_LOGITS] = be->ops->host_memory ? 0 : R * cfg->vocab,
    };
    for (int i = 0; i < SCRATCH_COUNT; i++) {
        if (!floats[i])
            continue;
        int rc = compute_buffer_alloc(be, floats[i] * sizeof(float), &f->scratch[i]);
        if (rc) {
            fwd_free(f);
            return rc;
        }
    }
    f->x = f->scratch[SCRATCH_X].data;
    f->xb = f->scratch[SCRATCH_XB].data;
    f->xb2 = f->scratch[SCRATCH_XB2].data;
    f->q = f->scratch[SCRATCH_Q].data;
    f->k = f->scratch[SCRATCH_K].data;
    f->v = f->scratch[SCRATCH_V].data;
    f->att = f->scratch[SCRATCH_ATT].data;
    f->hb = f->scratch[SCRATCH_HB].data;
    f->hb2 = f->scratch[SCRATCH_HB2].data;
    f->rope_cs = f->scratch[SCRATCH_ROPE].data;
    f->logits = f->scratch[SCRATCH_LOGITS].data;
    int up = upload_weights(f, cfg);
    if (up) {
        fwd_free(f);
        return up;
    }
    compute_attn_params_t ap = {cfg->n_heads, cfg->n_kv_heads, cfg->head_dim, env->kv_dtype,
                                env->max_positions, 0, 0.0f, 0.0f};
    int rc = compute_attn_create(be, &ap, &f->attn);
    if (rc == CAIRN_OK)
        rc = rope_inv_freq(cfg, f->inv_freq);
    /* GGUF llama3 scaling: llama.cpp's theta = pos * inv_freq[i] / rope_freqs[i]. */
    if (rc == CAIRN_OK && w->rope_freqs.data)
        for (int i = 0; i < cfg->head_dim / 2; i++)
            f->inv_freq[i] /= ((const float *)w->rope_freqs.data)[i];
    if (rc) {
        fwd_free(f);
        return rc;
    }
    *out = f;
    return CAIRN_OK;
nomem:
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
    compute_attn_destroy(f->be, f->attn);
    for (int i = 0; i < SCRATCH_COUNT; i++)
        compute_buffer_free(f->be, &f->scratch[i]);
    for (int i = 0; i < f->n_wbufs; i++)
        compute_buffer_free(f->be, &f->wbufs[i]);
    cairn_free(f->wbufs);
    cairn_free(f->dw.layers);
    cairn_free(f->inv_freq);
    cairn_free(f->ids);
    cairn_free(f->pos);
    cairn_free(f->queries);
    cairn_free(f);
}
