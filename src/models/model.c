/*
 * model.c — the family-independent helpers over a model (models/family.h): config
 * dispatch by model_type (config.json) or general.architecture (GGUF) and the checks on a
 * family's declared cache layout.
 *
 * The layout checks run once at engine creation, so a family that declares something
 * the KV core or the state allocator cannot serve fails there with a message naming the
 * layer, instead of misbehaving in a step.
 *
 * Thread-safety: pure functions of their arguments (the registry is thread-safe).
 */
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/family.h"

#define STATE_ALIGN 64

int cairn_model_parse_config(const char *json, size_t len, cairn_model_t *m, char *err,
                             size_t err_len)
{
    memset(m, 0, sizeof *m);
    cJSON *doc = NULL;
    hf_config_t hf;
    int rc = hf_config_parse(json, len, &doc, &hf, err, err_len);
    if (rc)
        return rc;
    const cairn_family_t *f = cairn_family_find(hf.model_type);
    if (!f) {
        st_errf(err, err_len, "config.json: unsupported model_type \"%.40s\"", hf.model_type);
        cJSON_Delete(doc);
        return CAIRN_EUNSUPPORTED;
    }
    cairn_model_t tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.family = f;
    snprintf(tmp.cfg.model_type, sizeof tmp.cfg.model_type, "%s", hf.model_type);
    snprintf(tmp.cfg.family, sizeof tmp.cfg.family, "%s", f->name);
    rc = f->parse_config(&hf, &tmp.cfg, &tmp.priv, err, err_len);
    cJSON_Delete(doc);
    if (rc)
        return rc;
    *m = tmp;
    return 0;
}

int cairn_model_parse_gguf(const gguf_file_t *g, cairn_model_t *m, char *err, size_t err_len)
{
    memset(m, 0, sizeof *m);
    gguf_str_t a;
    int rc = gguf_get_str(g, "general.architecture", true, &a, err, err_len);
    if (rc)
        return rc;
    char arch[32];
    if (a.n == 0 || a.n >= sizeof arch || memchr(a.p, 0, a.n)) {
        st_errf(err, err_len, "%s: general.architecture \"%.*s\" is not an architecture name",
                gguf_what(g), (int)(a.n < 40 ? a.n : 40), a.p);
        return a.n >= sizeof arch ? CAIRN_EUNSUPPORTED : CAIRN_EFORMAT;
    }
    memcpy(arch, a.p, a.n);
    arch[a.n] = 0;
    const cairn_family_t *f = cairn_family_find_gguf(arch);
    if (!f) {
        st_errf(err, err_len, "%s: unsupported GGUF architecture \"%s\"", gguf_what(g), arch);
        return CAIRN_EUNSUPPORTED;
    }
    cairn_model_t tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.family = f;
    snprintf(tmp.cfg.model_type, sizeof tmp.cfg.model_type, "%s", arch);
    snprintf(tmp.cfg.family, sizeof tmp.cfg.family, "%s", f->name);
    if ((rc = f->parse_gguf(g, arch, &tmp.cfg, &tmp.priv, err, err_len)))
        return rc;
    *m = tmp;
    return 0;
}

void cairn_model_fini(cairn_model_t *m)
{
    if (m->family && m->priv)
        m->family->destroy(m->priv);
    memset(m, 0, sizeof *m);
}

static size_t align_up(size_t n) { return (n + STATE_ALIGN - 1) / STATE_ALIGN * STATE_ALIGN; }

int cairn_model_cache_layout(const cairn_model_t *m, cairn_dtype_t kv_dtype,
                             cairn_layer_cache_t *layers, size_t *state_bytes)
{
    const int n = m->cfg.n_layers;
    memset(layers, 0, (size_t)n * sizeof *layers);
    int rc = m->family->cache_layout(m, kv_dtype, layers);
    if (rc)
        return rc;
    size_t total = 0;
    bool paged = false;
    for (int l = 0; l < n; l++) {
        const cairn_layer_cache_t *c = &layers[l];
        const char *bad = NULL;
        switch (c->kv.kind) {
        case CAIRN_KV_LAYER_FULL:
        case CAIRN_KV_LAYER_SLIDING:
            if (c->kv.n_kv_heads == 0 || c->kv.head_dim == 0)
                bad = "a paged layer needs K/V heads and head_dim";
            else if (c->kv.kind == CAIRN_KV_LAYER_SLIDING && c->kv.window == 0)
                bad = "a sliding layer needs a window";
            else if (c->state_bytes)
                bad = "only a recurrent layer has state";
            paged = true;
            break;
        case CAIRN_KV_LAYER_RECURRENT:
            if (c->state_bytes == 0)
                bad = "a recurrent layer needs state bytes";
            else if (c->state_bytes > ((size_t)1 << 40) - total)
                bad = "recurrent state too large";
            break;
        case CAIRN_KV_LAYER_SHARED:
            if (c->kv.shared_from >= (uint32_t)l ||
                (layers[c->kv.shared_from].kv.kind != CAIRN_KV_LAYER_FULL &&
                 layers[c->kv.shared_from].kv.kind != CAIRN_KV_LAYER_SLIDING))
                bad = "a shared layer must alias an earlier full or sliding layer";
            else if (c->state_bytes)
                bad = "only a recurrent layer has state";
            break;
        default:
            bad = "unknown layer kind";
            break;
        }
        if (bad) {
            cairn_log(CAIRN_LOG_ERROR, "model %s: layer %d: %s", m->cfg.family, l, bad);
            return CAIRN_EFORMAT;
        }
        total += align_up(c->state_bytes);
    }
    if (!paged) {
        cairn_log(CAIRN_LOG_ERROR, "model %s: no layer has paged K/V", m->cfg.family);
        return CAIRN_EFORMAT;
    }
    if (state_bytes)
        *state_bytes = total;
    return 0;
}

size_t cairn_model_state_offset(const cairn_layer_cache_t *layers, int layer)
{
    size_t off = 0;
    for (int l = 0; l < layer; l++)
        off += align_up(layers[l].state_bytes);
    return layers[layer].state_bytes ? off : 0;
}
