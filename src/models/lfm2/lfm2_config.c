/*
 * lfm2_config.c — config.json of LFM2 / LFM2.5 checkpoints (model_type "lfm2").
 *
 * Follows transformers' Lfm2Config: original LiquidAI key spellings are accepted where
 * the config class accepts them (block_ff_dim for intermediate_size, tie_embedding for
 * tie_word_embeddings, theta for rope_theta), `layer_types` wins over `full_attn_idxs`,
 * and the feed-forward width is derived exactly as Lfm2MLP does (Python int() of a
 * float64 product, rounding up to block_multiple_of only when a multiplier is set).
 * Fields that would change the math in a way not implemented here are
 * CAIRN_EUNSUPPORTED with the field named; other unknown fields are ignored.
 *
 * The shared HF parts (typed fields, RoPE block, special tokens) are formats/hf_config.c.
 * Pure functions of their input; thread-safe.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/lfm2/lfm2.h"

#define MAX_DIM (1 << 20)
#define MAX_VOCAB (1 << 24)

/* Positive finite number, also as a float; absent or null gives dflt. */
static int get_pos_double(const cJSON *o, const char *key, double dflt, double *out, char *err,
                          size_t err_len)
{
    const cJSON *v = hf_get(o, key);
    if (!hf_present(v)) {
        *out = dflt;
        return 0;
    }
    /* Positive also after rounding to float: the forward pass computes in float32. */
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !((float)v->valuedouble > 0) ||
        v->valuedouble > 3.0e38) {
        st_errf(err, err_len, "config.json: %s must be a positive number", key);
        return CAIRN_EFORMAT;
    }
    *out = v->valuedouble;
    return 0;
}

/* The first of two spellings that is present (HF reads the LiquidAI name first). */
static const char *spelling(const cJSON *o, const char *liquid, const char *hf)
{
    return hf_present(hf_get(o, liquid)) ? liquid : hf;
}

/* Layer kinds: layer_types, else full_attn_idxs, else every layer attends. */
static int parse_layer_kinds(const cJSON *root, lfm2_config_t *cfg, char *err, size_t err_len)
{
    const int n = cfg->base.n_layers;
    const cJSON *lt = hf_get(root, "layer_types"), *idx = hf_get(root, "full_attn_idxs"), *e;
    if (hf_present(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != n) {
            st_errf(err, err_len, "config.json: layer_types must be a list of %d entries", n);
            return CAIRN_EFORMAT;
        }
        int i = 0;
        cJSON_ArrayForEach(e, lt)
        {
            if (cJSON_IsString(e) && !strcmp(e->valuestring, "conv")) {
                cfg->kind[i] = LFM2_LAYER_CONV;
            } else if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention")) {
                cfg->kind[i] = LFM2_LAYER_ATTN;
            } else {
                st_errf(err, err_len,
                        "config.json: layer_types[%d] \"%.32s\" is not supported "
                        "(conv or full_attention)",
                        i, cJSON_IsString(e) ? e->valuestring : "?");
                return CAIRN_EUNSUPPORTED;
            }
            i++;
        }
    } else if (hf_present(idx)) {
        if (!cJSON_IsArray(idx)) {
            st_errf(err, err_len, "config.json: full_attn_idxs must be a list");
            return CAIRN_EFORMAT;
        }
        memset(cfg->kind, LFM2_LAYER_CONV, sizeof(cfg->kind));
        cJSON_ArrayForEach(e, idx)
        {
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
                e->valuedouble < 0 || e->valuedouble >= n) {
                st_errf(err, err_len,
                        "config.json: full_attn_idxs entries must be layer indices below %d", n);
                return CAIRN_EFORMAT;
            }
            cfg->kind[(int)e->valuedouble] = LFM2_LAYER_ATTN;
        }
    } else {
        memset(cfg->kind, LFM2_LAYER_ATTN, sizeof(cfg->kind));
    }
    cfg->n_attn = cfg->n_conv = 0;
    for (int i = 0; i < n; i++)
        cfg->slot[i] = cfg->kind[i] == LFM2_LAYER_ATTN ? cfg->n_attn++ : cfg->n_conv++;
    return 0;
}

/* The state handle's layout: conv layers' parts in layer order, each 64-byte aligned. */
void lfm2_config_layout_state(lfm2_config_t *cfg)
{
    cfg->state_layer_bytes = (size_t)(cfg->conv_taps - 1) * (size_t)cfg->base.hidden * sizeof(float);
    size_t off = 0;
    for (int l = 0; l < cfg->base.n_layers; l++) {
        cfg->state_off[l] = 0;
        if (cfg->kind[l] != LFM2_LAYER_CONV || cfg->state_layer_bytes == 0)
            continue;
        off = (off + 63) / 64 * 64;
        cfg->state_off[l] = off;
        off += cfg->state_layer_bytes;
    }
    cfg->state_bytes = off;
}

/* Lfm2MLP's width: int(2 * size / 3), then int(multiplier * w) rounded up to multiple_of. */
static int parse_ffn(const cJSON *root, lfm2_config_t *cfg, char *err, size_t err_len)
{
    int size, multiple_of, rc;
    bool adjust;
    const char *key = spelling(root, "block_ff_dim", "intermediate_size");
    if ((rc = hf_get_int(root, key, true, 0, 1, MAX_DIM, &size, err, err_len)) ||
        (rc = hf_get_bool(root, "block_auto_adjust_ff_dim", true, &adjust, err, err_len)) ||
        (rc = hf_get_int(root, "block_multiple_of", false, 256, 1, MAX_DIM, &multiple_of, err,
                      err_len)))
        return rc;
    cfg->base.ffn = size;
    if (adjust) {
        int64_t w = 2 * (int64_t)size / 3; /* exact for positive ints: int(2 * size / 3) */
        const cJSON *m = hf_get(root, "block_ffn_dim_multiplier");
        if (!m || hf_present(m)) { /* absent means the default 1.0; null means none */
            double mult;
            if ((rc = get_pos_double(root, "block_ffn_dim_multiplier", 1.0, &mult, err, err_len)))
                return rc;
            w = (int64_t)(mult * (double)w);
            w = multiple_of * ((w + multiple_of - 1) / multiple_of);
        }
        if (w < 1 || w > MAX_DIM) {
            st_errf(err, err_len, "config.json: the adjusted feed-forward width %lld is outside "
                    "[1, %d]", (long long)w, MAX_DIM);
            return CAIRN_EFORMAT;
        }
        cfg->base.ffn = (int)w;
    }
    return 0;
}

/* RoPE as formats/hf_config.h reads it, with Lfm2Config's default base (1e6, or the
 * LiquidAI key `theta`) wherever the file names none. */
static int parse_rope(const cJSON *root, lfm2_config_t *cfg, char *err, size_t err_len)
{
    double theta;
    int rc = get_pos_double(root, "theta", 1000000.0, &theta, err, err_len);
    if (rc || (rc = hf_parse_rope(root, &cfg->base, err, err_len)))
        return rc;
    const cJSON *rp = hf_get(root, "rope_parameters");
    bool named = hf_present(rp) ? hf_present(hf_get(rp, "rope_theta"))
                                : hf_present(hf_get(root, "rope_theta"));
    if (!named)
        cfg->base.rope_theta = (float)theta;
    return 0;
}

int lfm2_config_parse(const cJSON *root, lfm2_config_t *out, char *err, size_t err_len)
{
    int rc;
    bool conv_bias;
    lfm2_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cairn_model_config_t *b = &cfg.base;
    if (!cJSON_IsObject(root)) {
        st_errf(err, err_len, "config.json: not a JSON object");
        return CAIRN_EFORMAT;
    }

    if ((rc = hf_get_int(root, "num_hidden_layers", true, 0, 1, LFM2_MAX_LAYERS, &b->n_layers, err,
                      err_len)) ||
        (rc = hf_get_int(root, "hidden_size", true, 0, 1, MAX_DIM, &b->hidden, err, err_len)) ||
        (rc = hf_get_int(root, "num_attention_heads", true, 0, 1, MAX_DIM, &b->n_heads, err,
                      err_len)) ||
        (rc = hf_get_int(root, "num_key_value_heads", false, b->n_heads, 1, MAX_DIM, &b->n_kv_heads,
                      err, err_len)) ||
        (rc = hf_get_int(root, "vocab_size", true, 0, 1, MAX_VOCAB, &b->vocab, err, err_len)) ||
        (rc = hf_get_int(root, "max_position_embeddings", false, 128000, 1, 1 << 30, &b->max_pos,
                      err, err_len)) ||
        (rc = hf_get_int(root, "conv_L_cache", false, 3, 1, LFM2_MAX_CONV_TAPS, &cfg.conv_taps, err,
                      err_len)))
        return rc;
    if (!hf_present(hf_get(root, "head_dim")) && b->hidden % b->n_heads != 0) {
        st_errf(err, err_len,
                "config.json: hidden_size %d is not divisible by num_attention_heads %d",
                b->hidden, b->n_heads);
        return CAIRN_EFORMAT;
    }
    if ((rc = hf_get_int(root, "head_dim", false, b->hidden / b->n_heads, 1, 65536, &b->head_dim,
                      err, err_len)))
        return rc;
    if (b->n_heads % b->n_kv_heads != 0) {
        st_errf(err, err_len,
                "config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                b->n_heads, b->n_kv_heads);
        return CAIRN_EFORMAT;
    }
    if (b->head_dim % 2 != 0) {
        st_errf(err, err_len, "config.json: head_dim %d must be even for rotary embeddings",
                b->head_dim);
        return CAIRN_EFORMAT;
    }
    if ((int64_t)b->n_heads * b->head_dim > MAX_DIM || (int64_t)3 * b->hidden > MAX_DIM) {
        st_errf(err, err_len, "config.json: layer widths are too large");
        return CAIRN_ERANGE;
    }
    double eps;
    if ((rc = get_pos_double(root, "norm_eps", 1e-5, &eps, err, err_len)) ||
        (rc = hf_get_bool(root, spelling(root, "tie_embedding", "tie_word_embeddings"), true,
                       &b->tie_embeddings, err, err_len)) ||
        (rc = hf_get_bool(root, "conv_bias", false, &conv_bias, err, err_len)) ||
        (rc = parse_layer_kinds(root, &cfg, err, err_len)) ||
        (rc = parse_ffn(root, &cfg, err, err_len)) ||
        (rc = parse_rope(root, &cfg, err, err_len)) ||
        (rc = hf_parse_bos(root, b, err, err_len)) ||
        (rc = hf_parse_eos(root, b, "config.json", err, err_len)))
        return rc;
    b->rms_eps = (float)eps;
    lfm2_config_layout_state(&cfg);
    if (conv_bias) {
        st_errf(err, err_len, "config.json: conv_bias = true is not supported");
        return CAIRN_EUNSUPPORTED;
    }
    if (hf_present(hf_get(root, "quantization_config"))) {
        st_errf(err, err_len, "config.json: quantization_config is not supported");
        return CAIRN_EUNSUPPORTED;
    }
    *out = cfg;
    return 0;
}

int lfm2_config_parse_text(const char *json, size_t len, lfm2_config_t *out, char *err,
                           size_t err_len)
{
    if (!json || !out) {
        st_errf(err, err_len, "config.json: no input");
        return CAIRN_EINVAL;
    }
    cJSON *doc = NULL;
    hf_config_t hf;
    int rc = hf_config_parse(json, len, &doc, &hf, err, err_len);
    if (rc)
        return rc;
    if (strcmp(hf.model_type, "lfm2") != 0) {
        st_errf(err, err_len, "config.json: model_type \"%.40s\" is not lfm2", hf.model_type);
        rc = CAIRN_EUNSUPPORTED;
    } else {
        rc = lfm2_config_parse(hf.text, out, err, err_len);
        if (!rc)
            snprintf(out->base.model_type, sizeof out->base.model_type, "lfm2");
    }
    cJSON_Delete(doc);
    return rc;
}

/* ---- the family's parse_config ---- */

int lfm2_parse_config(const hf_config_t *hf, cairn_model_config_t *cfg, void **priv, char *err,
                      size_t err_len)
{
    *priv = NULL;
    lfm2_t *p = cairn_calloc(1, sizeof *p);
    if (!p) {
        st_errf(err, err_len, "out of memory");
        return CAIRN_ENOMEM;
    }
    int rc = lfm2_config_parse(hf->text, &p->cfg, err, err_len);
    if (rc) {
        cairn_free(p);
        return rc;
    }
    /* The caller set family and model_type; everything else is the family's. */
    memcpy(p->cfg.base.family, cfg->family, sizeof cfg->family);
    memcpy(p->cfg.base.model_type, cfg->model_type, sizeof cfg->model_type);
    *cfg = p->cfg.base;
    *priv = p;
    return 0;
}
