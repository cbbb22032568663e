/*
 * qwen35_weights.c — binds the Qwen3.5 tensors (HF names under the config's prefix,
 * [out, in] shapes) and derives the small float32 tables the forward pass uses.
 *
 * Every tensor the config implies must be present with the shape it implies
 * (fmt_tensors_bind). Left unbound on purpose (q35_ignore_tensor): the vision tower
 * ("model.visual.*") and the multi-token-prediction head ("mtp.*"), which transformers
 * does not use for text either, and lm_head.weight of a tied checkpoint.
 *
 * Derived tables (float32, owned by q35_t), computed as HF does in float32: -exp(A_log)
 * and dt_bias widened. Every other tensor stays as stored (the backend's rmsnorm applies
 * (1 + w) in float32; the conv reads conv1d.weight in HF's layout).
 *
 * Thread-safety: called once at open; the result is immutable.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compute/type_traits.h"
#include "formats/safetensors.h"
#include "models/qwen35/qwen35.h"

/* Binds tensor pfx + name of shape dims[0..ndim) into *out. */
static int bind(fmt_tensors_t *ts, const char *pfx, const char *name, int ndim,
                const int64_t *dims, cairn_tensor_t *out, char *err, size_t err_len)
{
    char full[160];
    snprintf(full, sizeof(full), "%s%s", pfx, name);
    return fmt_tensors_bind(ts, full, ndim, dims, out, err, err_len);
}

static float *arena_take(q35_t *m, size_t n)
{
    CAIRN_ASSERT(m->arena_used + n <= m->arena_len);
    float *p = m->arena + m->arena_used;
    m->arena_used += n;
    return p;
}

/* A tensor of n elements widened to float32. */
static float *widen(q35_t *m, const cairn_tensor_t *t, size_t n)
{
    float *p = arena_take(m, n);
    compute_type_traits(t->dtype)->to_f32(p, t->data, (int64_t)n);
    return p;
}

static size_t arena_floats(const q35_config_t *c)
{
    size_t per_linear = 2 * (size_t)c->lin_v_heads;
    if (c->v_tiled) /* the conv taps, widened, in HF's channel order */
        per_linear += (size_t)q35_conv_dim(c) * (size_t)c->conv_kernel;
    return per_linear * c->n_linear;
}

/* GGUF v_tiled: t[Hv] (one float per value head) from the tiled order to HF's, in place. */
static void grouped_heads(const q35_config_t *c, float *t)
{
    float tmp[4096]; /* Hv <= 4096 (qwen35_config.c, qwen35_gguf.c) */
    memcpy(tmp, t, (size_t)c->lin_v_heads * sizeof(float));
    for (int p = 0; p < c->lin_v_heads; p++)
        t[q35_v_grouped(p, c->lin_k_heads, c->lin_v_heads)] = tmp[p];
}

/* GGUF v_tiled: the conv taps [conv_dim][K] widened to float32, the v channels in HF's
 * head order (q and k channels as stored). */
static void grouped_conv(q35_t *m, cairn_tensor_t *conv)
{
    const q35_config_t *c = &m->cfg;
    const int64_t K = c->conv_kernel, C = q35_conv_dim(c), KD2 = 2 * (int64_t)q35_key_dim(c);
    const int64_t dv = c->lin_v_dim;
    float *dst = arena_take(m, (size_t)(C * K));
    const compute_type_traits_t *tt = compute_type_traits(conv->dtype);
    const size_t row = cairn_dtype_row_bytes(conv->dtype, K);
    for (int64_t ch = 0; ch < C; ch++) {
        int64_t src = ch;
        if (ch >= KD2) { /* channel of HF head h, offset i: stored at tiled head p */
            const int64_t h = (ch - KD2) / dv, i = (ch - KD2) % dv;
            int64_t p = 0;
            while (q35_v_grouped((int)p, c->lin_k_heads, c->lin_v_heads) != h)
                p++;
            src = KD2 + p * dv + i;
        }
        tt->to_f32(dst + ch * K, (const unsigned char *)conv->data + (size_t)src * row, K);
    }
    *conv = (cairn_tensor_t){dst, CAIRN_DTYPE_F32, 2, {C, K, 0, 0}};
}

/* GGUF v_tiled: out_proj [hidden][Hv*dv] of a float type with its columns in HF's head
 * order, into m->copies; a block-quantized out_proj stays as stored and the forward pass
 * feeds it tiled activations (out_proj_tiled). */
static void grouped_out_proj(q35_t *m, q35_layer_t *L)
{
    const q35_config_t *c = &m->cfg;
    const compute_type_traits_t *tt = compute_type_traits(L->out_proj.dtype);
    if (tt->quantized) {
        L->out_proj_tiled = true;
        return;
    }
    const size_t es = cairn_dtype_size(L->out_proj.dtype), dv = (size_t)c->lin_v_dim;
    const size_t rows = (size_t)L->out_proj.shape[0], cols = (size_t)L->out_proj.shape[1];
    unsigned char *dst = m->copies + m->copies_used;
    CAIRN_ASSERT(m->copies_used + rows * cols * es <= m->copies_len);
    m->copies_used += rows * cols * es;
    const unsigned char *src = L->out_proj.data;
    for (size_t r = 0; r < rows; r++)
        for (int p = 0; p < c->lin_v_heads; p++) {
            const size_t h = (size_t)q35_v_grouped(p, c->lin_k_heads, c->lin_v_heads);
            memcpy(dst + (r * cols + h * dv) * es, src + (r * cols + (size_t)p * dv) * es, dv * es);
        }
    L->out_proj.data = dst;
}

/* Bytes of the float out_proj copies (GGUF v_tiled), known once bound. */
static size_t copies_bytes(const q35_t *m)
{
    size_t n = 0;
    for (int l = 0; l < m->cfg.base.n_layers; l++) {
        const cairn_tensor_t *t = &m->w.layers[l].out_proj;
        if (t->data && !compute_type_traits(t->dtype)->quantized)
            n += (size_t)t->shape[0] * (size_t)t->shape[1] * cairn_dtype_size(t->dtype);
    }
    return n;
}

int q35_bind(void *priv, const cairn_model_config_t *cfg, fmt_tensors_t *ts, char *err,
             size_t err_len)
{
    (void)cfg;
    q35_t *m = priv;
    const q35_config_t *c = &m->cfg;
    const cairn_model_config_t *b = &c->base;
    const char *pfx = c->prefix;
    const int64_t H = b->hidden, hd = b->head_dim, K = c->conv_kernel, C = q35_conv_dim(c);
    const int64_t Hv = c->lin_v_heads, VD = q35_value_dim(c), dv = c->lin_v_dim;
    int64_t vh[2] = {b->vocab, H}, h1[1] = {H}, hd1[1] = {hd};
    int64_t up[2] = {b->ffn, H}, down[2] = {H, b->ffn};
    int64_t qkv[2] = {C, H}, zd[2] = {VD, H}, bd[2] = {Hv, H}, od[2] = {H, VD};
    int64_t conv[3] = {C, 1, K}, hv1[1] = {Hv}, dv1[1] = {dv};
    if (c->conv_squeezed) { /* GGUF: [C, K] */
        conv[1] = K;
        conv[2] = 0;
    }
    int64_t q[2] = {(int64_t)b->n_heads * hd * 2, H}, kv[2] = {(int64_t)b->n_kv_heads * hd, H};
    int64_t o[2] = {H, (int64_t)b->n_heads * hd};
    int rc;

    m->arena_len = arena_floats(c);
    m->arena = cairn_malloc(m->arena_len * sizeof(float));
    m->w.layers = cairn_calloc((size_t)b->n_layers, sizeof(q35_layer_t));
    if (!m->arena || !m->w.layers) {
        st_errf(err, err_len, "%s: out of memory", fmt_tensors_dir(ts));
        return CAIRN_ENOMEM;
    }

    if ((rc = bind(ts, pfx, "embed_tokens.weight", 2, vh, &m->w.embed, err, err_len)) ||
        (rc = bind(ts, pfx, "norm.weight", 1, h1, &m->w.norm, err, err_len)))
        return rc;
    if (b->tie_embeddings)
        m->w.lm_head = m->w.embed;
    else if ((rc = bind(ts, "", "lm_head.weight", 2, vh, &m->w.lm_head, err, err_len)))
        return rc;

    for (int l = 0; l < b->n_layers; l++) {
        q35_layer_t *L = &m->w.layers[l];
        L->kind = (q35_layer_kind_t)c->kind[l];
        char lp[96];
        snprintf(lp, sizeof(lp), "%slayers.%d.", pfx, l);
        if ((rc = bind(ts, lp, "input_layernorm.weight", 1, h1, &L->attn_norm, err, err_len)) ||
            (rc = bind(ts, lp, "post_attention_layernorm.weight", 1, h1, &L->ffn_norm, err,
                       err_len)) ||
            (rc = bind(ts, lp, "mlp.gate_proj.weight", 2, up, &L->w_gate, err, err_len)) ||
            (rc = bind(ts, lp, "mlp.up_proj.weight", 2, up, &L->w_up, err, err_len)) ||
            (rc = bind(ts, lp, "mlp.down_proj.weight", 2, down, &L->w_down, err, err_len)))
            return rc;
        if (L->kind == Q35_LAYER_LINEAR) {
            cairn_tensor_t a_log, dt;
            if ((rc = bind(ts, lp, "linear_attn.in_proj_qkv.weight", 2, qkv, &L->in_qkv, err,
                           err_len)) ||
                (rc = bind(ts, lp, "linear_attn.in_proj_z.weight", 2, zd, &L->in_z, err,
                           err_len)) ||
                (rc = bind(ts, lp, "linear_attn.in_proj_b.weight", 2, bd, &L->in_b, err,
                           err_len)) ||
                (rc = bind(ts, lp, "linear_attn.in_proj_a.weight", 2, bd, &L->in_a, err,
                           err_len)) ||
                (rc = bind(ts, lp, "linear_attn.out_proj.weight", 2, od, &L->out_proj, err,
                           err_len)) ||
                (rc = bind(ts, lp, "linear_attn.conv1d.weight", c->conv_squeezed ? 2 : 3, conv,
                           &L->conv, err, err_len)) ||
                (rc = bind(ts, lp, "linear_attn.A_log", 1, hv1, &a_log, err, err_len)) ||
                (rc = bind(ts, lp, "linear_attn.dt_bias", 1, hv1, &dt, err, err_len)) ||
                (rc = bind(ts, lp, "linear_attn.norm.weight", 1, dv1, &L->gnorm, err, err_len)))
                return rc;
            L->neg_a = widen(m, &a_log, (size_t)Hv);
            if (!c->a_neg_exp) /* GGUF stores ssm_a = -exp(A_log) */
                for (int64_t i = 0; i < Hv; i++)
                    L->neg_a[i] = -expf(L->neg_a[i]); /* HF: -A_log.float().exp() */
            L->dt_bias = widen(m, &dt, (size_t)Hv);
            if (c->v_tiled) {
                grouped_heads(c, L->neg_a);
                grouped_heads(c, L->dt_bias);
                grouped_conv(m, &L->conv);
            }
        } else {
            if ((rc = bind(ts, lp, "self_attn.q_proj.weight", 2, q, &L->wq, err, err_len)) ||
                (rc = bind(ts, lp, "self_attn.k_proj.weight", 2, kv, &L->wk, err, err_len)) ||
                (rc = bind(ts, lp, "self_attn.v_proj.weight", 2, kv, &L->wv, err, err_len)) ||
                (rc = bind(ts, lp, "self_attn.o_proj.weight", 2, o, &L->wo, err, err_len)) ||
                (rc = bind(ts, lp, "self_attn.q_norm.weight", 1, hd1, &L->q_norm, err, err_len)) ||
                (rc = bind(ts, lp, "self_attn.k_norm.weight", 1, hd1, &L->k_norm, err, err_len)))
                return rc;
        }
    }
    if (c->v_tiled) {
        m->copies_len = copies_bytes(m);
        if (m->copies_len && !(m->copies = cairn_malloc(m->copies_len))) {
            st_errf(err, err_len, "%s: out of memory", fmt_tensors_dir(ts));
            return CAIRN_ENOMEM;
        }
        for (int l = 0; l < b->n_layers; l++)
            if (m->w.layers[l].kind == Q35_LAYER_LINEAR)
                grouped_out_proj(m, &m->w.layers[l]);
    }
    return 0;
}


bool q35_ignore_tensor(const void *priv, const cairn_model_config_t *cfg, const char *name)
{
    (void)priv;
    return !strncmp(name, "mtp.", 4) || !strncmp(name, "model.visual.", 13) ||
           (cfg->tie_embeddings && !strcmp(name, "lm_head.weight"));
}

void q35_destroy(void *priv)
{
    q35_t *m = priv;
    if (!m)
        return;
    cairn_free(m->arena);
    cairn_free(m->copies);
    cairn_free(m->w.layers);
    cairn_free(m);
}

const q35_config_t *q35_model_config(const cairn_model_t *m)
{
    return m && m->family == &cairn_family_qwen35 ? &((const q35_t *)m->priv)->cfg : NULL;
}

const q35_weights_t *q35_model_weights(const cairn_model_t *m)
{
    return m && m->family == &cairn_family_qwen35 ? &((const q35_t *)m->priv)->w : NULL;
}
