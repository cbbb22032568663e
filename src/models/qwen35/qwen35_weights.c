/*
 * qwen35_weights.c — opens a Qwen3.5 checkpoint folder: config, mapped weights, and the
 * small float32 tables the forward pass derives from them once.
 *
 * Layout accepted: config.json, optional generation_config.json and one model.safetensors
 * (docs/FORMAT.md, "safetensors and checkpoint folders"). The file is mapped read-only; its
 * header is validated by the shared parser (engine/safetensors.h). Every tensor the config
 * implies must be present with the shape it implies; a tensor nobody uses is an error
 * (the math would silently differ), except the vision tower and the MTP head, which
 * transformers does not use for text either.
 *
 * Derived tables (float32, owned by the model), each computed the way HF does in float32:
 * (1 + w) for every Qwen3_5RMSNorm, -exp(A_log), dt_bias and the gated norm's w widened,
 * and the conv1d weight transposed to tap-major [K][conv_dim] for the conv kernel.
 *
 * Thread-safety: immutable after open.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/safetensors.h"
#include "models/qwen35/qwen35.h"

#define CONFIG_MAX_LEN ((size_t)16 << 20)

struct q35_model {
    char *dir;
    q35_config_t cfg;
    q35_weights_t w;
    void *map;           /* model.safetensors, PROT_READ */
    size_t map_size;
    st_header_t hdr;
    bool *used;          /* [hdr.n_tensors] bound by the config */
    float *arena;        /* the derived tables */
    size_t arena_used, arena_len;
};

static char *path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = cairn_malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static int map_weights(q35_model_t *m, char *err, size_t err_len)
{
    int rc;
    char *path = path_join(m->dir, "model.safetensors");
    if (!path)
        return CAIRN_ENOMEM;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO;
        st_errf(err, err_len, "%s: %s", path, strerror(errno));
        goto done;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 8) {
        st_errf(err, err_len, "%s: not a safetensors file", path);
        rc = CAIRN_EFORMAT;
        goto done;
    }
    m->map_size = (size_t)st.st_size;
    m->map = mmap(NULL, m->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        rc = CAIRN_EIO;
        st_errf(err, err_len, "%s: mmap failed: %s", path, strerror(errno));
        goto done;
    }
    if ((rc = st_parse_header(m->map, m->map_size, path, &m->hdr, err, err_len)))
        goto done;
    m->used = cairn_calloc(m->hdr.n_tensors ? m->hdr.n_tensors : 1, sizeof(bool));
    rc = m->used ? 0 : CAIRN_ENOMEM;
done:
    if (fd >= 0)
        close(fd);
    cairn_free(path);
    return rc;
}

/* Binds tensor `name` (prefixed by pfx) of shape dims[0..ndim) into *out. */
static int bind(q35_model_t *m, const char *pfx, const char *name, int ndim, const int64_t *dims,
                cairn_tensor_t *out, char *err, size_t err_len)
{
    char full[160];
    snprintf(full, sizeof(full), "%s%s", pfx, name);
    const st_tensor_t *t = st_header_find(&m->hdr, full);
    if (!t) {
        st_errf(err, err_len, "%s: checkpoint lacks tensor '%s'", m->dir, full);
        return CAIRN_ENOENT;
    }
    bool match = t->ndim == ndim;
    for (int i = 0; match && i < ndim; i++)
        match = t->shape[i] == dims[i];
    if (!match) {
        char got[96] = "", want[96] = "";
        size_t g = 0, w = 0;
        for (int i = 0; i < t->ndim && g < sizeof(got); i++)
            g += (size_t)snprintf(got + g, sizeof(got) - g, "%s%lld", i ? ", " : "",
                                  (long long)t->shape[i]);
        for (int i = 0; i < ndim && w < sizeof(want); i++)
            w += (size_t)snprintf(want + w, sizeof(want) - w, "%s%lld", i ? ", " : "",
                                  (long long)dims[i]);
        st_errf(err, err_len, "model.safetensors: tensor '%s' has shape [%s] but config.json "
                "implies [%s]", full, got, want);
        return CAIRN_EFORMAT;
    }
    const uint8_t *data = (const uint8_t *)m->map + m->hdr.data_offset + t->begin;
    if ((uintptr_t)data % cairn_dtype_size(t->dtype) != 0) {
        st_errf(err, err_len, "model.safetensors: tensor '%s' is misaligned", full);
        return CAIRN_EUNSUPPORTED;
    }
    m->used[t - m->hdr.tensors] = true;
    memset(out, 0, sizeof(*out));
    out->data = data;
    out->dtype = t->dtype;
    out->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        out->shape[i] = dims[i];
    return 0;
}

static float *arena_take(q35_model_t *m, size_t n)
{
    CAIRN_ASSERT(m->arena_used + n <= m->arena_len);
    float *p = m->arena + m->arena_used;
    m->arena_used += n;
    return p;
}

/* A tensor of n elements widened to float32, plus `add` (1 for the (1 + w) norms). */
static float *widen(q35_model_t *m, const cairn_tensor_t *t, size_t n, float add)
{
    float *p = arena_take(m, n);
    kern_row_to_f32(p, t->data, t->dtype, (int)n);
    for (size_t i = 0; i < n; i++)
        p[i] = add + p[i]; /* HF: 1.0 + weight.float(), one float32 addition */
    return p;
}

static size_t arena_floats(const q35_config_t *c)
{
    const cairn_model_config_t *b = &c->base;
    size_t per_linear = (size_t)c->conv_kernel * q35_conv_dim(c) + 2 * (size_t)c->lin_v_heads +
                        (size_t)c->lin_v_dim;
    size_t per_full = 2 * (size_t)b->head_dim;
    return (size_t)b->hidden * (1 + 2 * (size_t)b->n_layers) + per_linear * c->n_linear +
           per_full * c->n_full;
}

static int bind_all(q35_model_t *m, char *err, size_t err_len)
{
    const q35_config_t *c = &m->cfg;
    const cairn_model_config_t *b = &c->base;
    const char *pfx = c->prefix;
    const int64_t H = b->hidden, hd = b->head_dim, K = c->conv_kernel, C = q35_conv_dim(c);
    const int64_t Hv = c->lin_v_heads, VD = q35_value_dim(c), dv = c->lin_v_dim;
    int64_t vh[2] = {b->vocab, H}, h1[1] = {H}, hd1[1] = {hd};
    int64_t up[2] = {b->ffn, H}, down[2] = {H, b->ffn};
    int64_t qkv[2] = {C, H}, zd[2] = {VD, H}, bd[2] = {Hv, H}, od[2] = {H, VD};
    int64_t conv[3] = {C, 1, K}, hv1[1] = {Hv}, dv1[1] = {dv};
    int64_t q[2] = {(int64_t)b->n_heads * hd * 2, H}, kv[2] = {(int64_t)b->n_kv_heads * hd, H};
    int64_t o[2] = {H, (int64_t)b->n_heads * hd};
    int rc;

    m->arena_len = arena_floats(c);
    m->arena = cairn_malloc(m->arena_len * sizeof(float));
    m->w.layers = cairn_calloc((size_t)b->n_layers, sizeof(q35_layer_t));
    if (!m->arena || !m->w.layers)
        return CAIRN_ENOMEM;

    if ((rc = bind(m, pfx, "embed_tokens.weight", 2, vh, &m->w.embed, err, err_len)) ||
        (rc = bind(m, pfx, "norm.weight", 1, h1, &m->w.norm, err, err_len)))
        return rc;
    if (b->tie_embeddings)
        m->w.lm_head = m->w.embed;
    else if ((rc = bind(m, "", "lm_head.weight", 2, vh, &m->w.lm_head, err, err_len)))
        return rc;
    m->w.norm1 = widen(m, &m->w.norm, (size_t)H, 1.0f);

    for (int l = 0; l < b->n_layers; l++) {
        q35_layer_t *L = &m->w.layers[l];
        L->kind = (q35_layer_kind_t)c->kind[l];
        char lp[96];
        snprintf(lp, sizeof(lp), "%slayers.%d.", pfx, l);
        if ((rc = bind(m, lp, "input_layernorm.weight", 1, h1, &L->attn_norm, err, err_len)) ||
            (rc = bind(m, lp, "post_attention_layernorm.weight", 1, h1, &L->ffn_norm, err,
                       err_len)) ||
            (rc = bind(m, lp, "mlp.gate_proj.weight", 2, up, &L->w_gate, err, err_len)) ||
            (rc = bind(m, lp, "mlp.up_proj.weight", 2, up, &L->w_up, err, err_len)) ||
            (rc = bind(m, lp, "mlp.down_proj.weight", 2, down, &L->w_down, err, err_len)))
            return rc;
        L->attn_norm1 = widen(m, &L->attn_norm, (size_t)H, 1.0f);
        L->ffn_norm1 = widen(m, &L->ffn_norm, (size_t)H, 1.0f);
        if (L->kind == Q35_LAYER_LINEAR) {
            cairn_tensor_t conv_t, a_log, dt, gn;
            if ((rc = bind(m, lp, "linear_attn.in_proj_qkv.weight", 2, qkv, &L->in_qkv, err,
                           err_len)) ||
                (rc = bind(m, lp, "linear_attn.in_proj_z.weight", 2, zd, &L->in_z, err,
                           err_len)) ||
                (rc = bind(m, lp, "linear_attn.in_proj_b.weight", 2, bd, &L->in_b, err,
                           err_len)) ||
                (rc = bind(m, lp, "linear_attn.in_proj_a.weight", 2, bd, &L->in_a, err,
                           err_len)) ||
                (rc = bind(m, lp, "linear_attn.out_proj.weight", 2, od, &L->out_proj, err,
                           err_len)) ||
                (rc = bind(m, lp, "linear_attn.conv1d.weight", 3, conv, &conv_t, err, err_len)) ||
                (rc = bind(m, lp, "linear_attn.A_log", 1, hv1, &a_log, err, err_len)) ||
                (rc = bind(m, lp, "linear_attn.dt_bias", 1, hv1, &dt, err, err_len)) ||
                (rc = bind(m, lp, "linear_attn.norm.weight", 1, dv1, &gn, err, err_len)))
                return rc;
            /* conv1d.weight [C][1][K] -> tap-major [K][C]: the value at (c, j) moves to
             * j * C + c, so one tap of every channel is contiguous. */
            float *cw = cairn_malloc((size_t)(C * K) * sizeof(float));
            if (!cw)
                return CAIRN_ENOMEM;
            kern_row_to_f32(cw, conv_t.data, conv_t.dtype, (int)(C * K));
            L->conv_w = arena_take(m, (size_t)(C * K));
            for (int64_t ch = 0; ch < C; ch++)
                for (int64_t j = 0; j < K; j++)
                    L->conv_w[j * C + ch] = cw[ch * K + j];
            cairn_free(cw);
            L->neg_a = widen(m, &a_log, (size_t)Hv, 0.0f);
            for (int64_t i = 0; i < Hv; i++)
                L->neg_a[i] = -expf(L->neg_a[i]); /* HF: -A_log.float().exp() */
            L->dt_bias = widen(m, &dt, (size_t)Hv, 0.0f);
            L->gnorm = widen(m, &gn, (size_t)dv, 0.0f);
        } else {
            cairn_tensor_t qn, kn;
            if ((rc = bind(m, lp, "self_attn.q_proj.weight", 2, q, &L->wq, err, err_len)) ||
                (rc = bind(m, lp, "self_attn.k_proj.weight", 2, kv, &L->wk, err, err_len)) ||
                (rc = bind(m, lp, "self_attn.v_proj.weight", 2, kv, &L->wv, err, err_len)) ||
                (rc = bind(m, lp, "self_attn.o_proj.weight", 2, o, &L->wo, err, err_len)) ||
                (rc = bind(m, lp, "self_attn.q_norm.weight", 1, hd1, &qn, err, err_len)) ||
                (rc = bind(m, lp, "self_attn.k_norm.weight", 1, hd1, &kn, err, err_len)))
                return rc;
            L->q_norm1 = widen(m, &qn, (size_t)hd, 1.0f);
            L->k_norm1 = widen(m, &kn, (size_t)hd, 1.0f);
        }
    }

    /* A tensor the config gives no use to means the math would differ; the vision tower
     * and the MTP head are not part of the text model. */
    for (size_t i = 0; i < m->hdr.n_tensors; i++) {
        const char *name = m->hdr.tensors[i].name;
        if (m->used[i] || !strncmp(name, "mtp.", 4) || !strncmp(name, "model.visual.", 13) ||
            (b->tie_embeddings && !strcmp(name, "lm_head.weight")))
            continue;
        st_errf(err, err_len, "model.safetensors: unexpected tensor '%s' (config.json gives it "
                "no use)", name);
        return CAIRN_EUNSUPPORTED;
    }
    return 0;
}

int q35_model_open(const char *dir, q35_model_t **out, char *err, size_t err_len)
{
    int rc;
    char *path = NULL, *text = NULL;
    size_t len = 0;
    *out = NULL;
    q35_model_t *m = cairn_calloc(1, sizeof(*m));
    if (!m || !(m->dir = cairn_strdup(dir))) {
        rc = CAIRN_ENOMEM;
        goto fail;
    }
    if (!(path = path_join(dir, "config.json"))) {
        rc = CAIRN_ENOMEM;
        goto fail;
    }
    if ((rc = st_read_file(path, CONFIG_MAX_LEN, &text, &len, err, err_len)) ||
        (rc = q35_config_parse(text, len, &m->cfg, err, err_len)))
        goto fail;
    cairn_free(path);
    cairn_free(text);
    text = NULL;
    if (!(path = path_join(dir, "generation_config.json"))) {
        rc = CAIRN_ENOMEM;
        goto fail;
    }
    rc = st_read_file(path, CONFIG_MAX_LEN, &text, &len, err, err_len);
    if (rc == 0)
        rc = cairn_generation_config_parse(text, len, &m->cfg.base, err, err_len);
    if (rc && rc != CAIRN_ENOENT)
        goto fail;
    if ((rc = map_weights(m, err, err_len)) || (rc = bind_all(m, err, err_len)))
        goto fail;
    cairn_free(path);
    cairn_free(text);
    *out = m;
    return 0;
fail:
    if (rc == CAIRN_ENOMEM)
        st_errf(err, err_len, "%s: out of memory", dir);
    cairn_free(path);
    cairn_free(text);
    q35_model_close(m);
    return rc;
}

void q35_model_close(q35_model_t *m)
{
    if (!m)
        return;
    st_header_free(&m->hdr);
    if (m->map)
        munmap(m->map, m->map_size);
    cairn_free(m->used);
    cairn_free(m->arena);
    cairn_free(m->w.layers);
    cairn_free(m->dir);
    cairn_free(m);
}

const q35_config_t *q35_model_config(const q35_model_t *m) { return &m->cfg; }
const q35_weights_t *q35_model_weights(const q35_model_t *m) { return &m->w; }
