/*
 * gemma3_config.c — config.json of Gemma 3 text models (gemma3_text, and gemma3 with a
 * text_config); the contract is gemma3_config_from_hf in gemma3.h.
 *
 * Defaults are those of transformers' Gemma3TextConfig (hidden 2304, 26 layers, 8 heads,
 * 4 K/V heads, head_dim 256, ffn 9216, vocab 262208, 131072 positions, rms_norm_eps 1e-6,
 * query_pre_attn_scalar 256, sliding_window 4096, rope_theta 1e6, rope_local_base_freq
 * 1e4, sliding_window_pattern 6, tied embeddings), so a file that omits a field means
 * what it means to transformers; the checkpoint's tensor shapes are checked against the
 * result anyway.
 *
 * Both RoPE spellings are read: transformers 5 writes "rope_parameters" keyed by layer
 * kind ({"sliding_attention": {...}, "full_attention": {...}}); older files carry
 * rope_local_base_freq for the sliding layers and rope_theta + rope_scaling for the full
 * ones (a flat rope_parameters block is read like rope_scaling).
 *
 * The shared HF readers (typed fields, special tokens) are formats/hf_config.c. Fields
 * that would change the math in a way not implemented are CAIRN_EUNSUPPORTED naming the
 * field; unknown fields are ignored, as transformers does.
 * Pure functions of their input; thread-safe.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/gemma3/gemma3.h"

#define MAX_DIM (1 << 20)
#define MAX_VOCAB (1 << 24)

/* A boolean of the first of o1, o2 that has it; else dflt. */
static int get_bool2(const cJSON *o1, const cJSON *o2, const char *key, bool dflt, bool *out,
                     char *err, size_t err_len)
{
    return hf_get_bool(hf_present(hf_get(o1, key)) ? o1 : o2, key, dflt, out, err, err_len);
}

/*
 * One RoPE block ({"rope_type", "rope_theta", "factor", ...}); rope_theta absent keeps
 * the kind's default. `where` names the block in messages.
 */
static int parse_rope_block(const cJSON *b, const char *where, gemma3_rope_t *r, char *err,
                            size_t err_len)
{
    if (!cJSON_IsObject(b)) {
        st_errf(err, err_len, "config.json: %s must be an object", where);
        return CAIRN_EFORMAT;
    }
    const cJSON *type = hf_present(hf_get(b, "rope_type")) ? hf_get(b, "rope_type") : hf_get(b, "type");
    const char *name = "default";
    if (hf_present(type)) {
        if (!cJSON_IsString(type)) {
            st_errf(err, err_len, "config.json: %s rope_type must be a string", where);
            return CAIRN_EFORMAT;
        }
        name = type->valuestring;
    }
    int rc = hf_get_pos_float(b, where, "rope_theta", false, r->theta, &r->theta, err, err_len);
    if (rc)
        return rc;
    const cJSON *prf = hf_get(b, "partial_rotary_factor");
    if (hf_present(prf) && !(cJSON_IsNumber(prf) && prf->valuedouble == 1.0)) {
        st_errf(err, err_len, "config.json: %s partial_rotary_factor is not supported", where);
        return CAIRN_EUNSUPPORTED;
    }
    r->linear_factor = 1.0f;
    if (!strcmp(name, "default"))
        return 0;
    if (!strcmp(name, "linear"))
        return hf_get_pos_float(b, where, "factor", true, 0, &r->linear_factor, err, err_len);
    st_errf(err, err_len, "config.json: unsupported rope_type \"%.40s\" in %s", name, where);
    return CAIRN_EUNSUPPORTED;
}

static int parse_rope(const cJSON *t, gemma3_config_t *c, char *err, size_t err_len)
{
    int rc;
    c->rope[GEMMA3_FULL] = (gemma3_rope_t){1e6f, 1.0f};
    c->rope[GEMMA3_SLIDING] = (gemma3_rope_t){1e4f, 1.0f};
    if ((rc = hf_get_pos_float(t, "config", "rope_theta", false, 1e6f, &c->rope[GEMMA3_FULL].theta,
                               err, err_len)) ||
        (rc = hf_get_pos_float(t, "config", "rope_local_base_freq", false, 1e4f,
                               &c->rope[GEMMA3_SLIDING].theta, err, err_len)))
        return rc;

    const cJSON *rp = hf_get(t, "rope_parameters");
    if (hf_present(rp) && cJSON_IsObject(rp) &&
        (hf_get(rp, "sliding_attention") || hf_get(rp, "full_attention"))) {
        static const char *const names[2] = {"sliding_attention", "full_attention"};
        for (int k = 0; k < 2; k++) {
            bool used = false;
            for (int l = 0; l < c->n_layers; l++)
                used = used || c->kind[l] == k;
            const cJSON *b = hf_get(rp, names[k]);
            if (!hf_present(b)) {
                if (!used)
                    continue;
                st_errf(err, err_len, "config.json: rope_parameters lacks %s", names[k]);
                return CAIRN_EFORMAT;
            }
            char where[64];
            snprintf(where, sizeof where, "rope_parameters.%s", names[k]);
            if ((rc = parse_rope_block(b, where, &c->rope[k], err, err_len)))
                return rc;
        }
        return 0;
    }
    /* Legacy: rope_scaling (or a flat rope_parameters block) scales the full layers. */
    const cJSON *rs = hf_present(rp) ? rp : hf_get(t, "rope_scaling");
    if (hf_present(rs))
        return parse_rope_block(rs, hf_present(rp) ? "rope_parameters" : "rope_scaling",
                                &c->rope[GEMMA3_FULL], err, err_len);
    return 0;
}

static int parse_layer_kinds(const cJSON *t, gemma3_config_t *c, char *err, size_t err_len)
{
    const cJSON *lt = hf_get(t, "layer_types");
    if (hf_present(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers) {
            st_errf(err, err_len, "config.json: layer_types must be a list of %d entries",
                    c->n_layers);
            return CAIRN_EFORMAT;
        }
        int l = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, lt)
        {
            if (cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention"))
                c->kind[l++] = GEMMA3_SLIDING;
            else if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention"))
                c->kind[l++] = GEMMA3_FULL;
            else {
                st_errf(err, err_len,
                        "config.json: layer_types entry \"%.32s\" is not supported "
                        "(sliding_attention or full_attention)",
                        cJSON_IsString(e) ? e->valuestring : "?");
                return CAIRN_EUNSUPPORTED;
            }
        }
        return 0;
    }
    const char *key = hf_present(hf_get(t, "sliding_window_pattern")) ? "sliding_window_pattern"
                                                                       : "_sliding_window_pattern";
    int pattern, rc;
    if ((rc = hf_get_int(t, key, false, 6, 1, GEMMA3_MAX_LAYERS, &pattern, err, err_len)))
        return rc;
    for (int l = 0; l < c->n_layers; l++)
        c->kind[l] = (l + 1) % pattern ? GEMMA3_SLIDING : GEMMA3_FULL;
    return 0;
}

/* Fields whose non-default value changes the math in a way we do not implement. */
static int check_unsupported(const cJSON *top, const cJSON *t, char *err, size_t err_len)
{
    bool b;
    int rc;
    static const char *const flags[] = {"attention_bias", "use_bidirectional_attention"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(flags); i++) {
        if ((rc = hf_get_bool(t, flags[i], false, &b, err, err_len)))
            return rc;
        if (b) {
            st_errf(err, err_len, "config.json: %s = true is not supported", flags[i]);
            return CAIRN_EUNSUPPORTED;
        }
    }
    const cJSON *act = hf_get(t, "hidden_activation");
    if (hf_present(act) && (!cJSON_IsString(act) || strcmp(act->valuestring, "gelu_pytorch_tanh"))) {
        st_errf(err, err_len,
                "config.json: hidden_activation \"%.32s\" is not supported (only gelu_pytorch_tanh)",
                cJSON_IsString(act) ? act->valuestring : "?");
        return CAIRN_EUNSUPPORTED;
    }
    if (hf_present(hf_get(top, "quantization_config")) || hf_present(hf_get(t, "quantization_config"))) {
        st_errf(err, err_len, "config.json: quantization_config is not supported");
        return CAIRN_EUNSUPPORTED;
    }
    return 0;
}

void gemma3_config_common(const gemma3_config_t *c, cairn_model_config_t *cfg)
{
    cfg->n_layers = c->n_layers;
    cfg->hidden = c->hidden;
    cfg->n_heads = c->n_heads;
    cfg->n_kv_heads = c->n_kv_heads;
    cfg->head_dim = c->head_dim;
    cfg->ffn = c->ffn;
    cfg->max_pos = c->max_pos;
    cfg->rms_eps = c->rms_eps;
    cfg->rope_type = CAIRN_ROPE_DEFAULT; /* the full layers'; gemma3_config_t has both kinds */
    cfg->rope_theta = c->rope[GEMMA3_FULL].theta;
    cfg->rope_factor = c->rope[GEMMA3_FULL].linear_factor;
}

/* The text model's fields of t into *g, the common ones into *cfg. */
static int parse_text(const cJSON *top, const cJSON *t, cairn_model_config_t *cfg, gemma3_config_t *c,
                      char *err, size_t err_len)
{
    int rc;
    if ((rc = hf_get_int(t, "num_hidden_layers", false, 26, 1, GEMMA3_MAX_LAYERS, &c->n_layers,
                         err, err_len)) ||
        (rc = hf_get_int(t, "hidden_size", false, 2304, 1, MAX_DIM, &c->hidden, err, err_len)) ||
        (rc = hf_get_int(t, "num_attention_heads", false, 8, 1, MAX_DIM, &c->n_heads, err, err_len)) ||
        (rc = hf_get_int(t, "num_key_value_heads", false, 4, 1, MAX_DIM, &c->n_kv_heads, err,
                         err_len)) ||
        (rc = hf_get_int(t, "head_dim", false, 256, 2, 65536, &c->head_dim, err, err_len)) ||
        (rc = hf_get_int(t, "intermediate_size", false, 9216, 1, MAX_DIM, &c->ffn, err, err_len)) ||
        (rc = hf_get_int(t, "vocab_size", false, 262208, 1, MAX_VOCAB, &c->vocab, err, err_len)) ||
        (rc = hf_get_int(t, "max_position_embeddings", false, 131072, 1, 1 << 30, &c->max_pos, err,
                         err_len)) ||
        (rc = hf_get_int(t, "sliding_window", false, 4096, 1, 1 << 30, &c->sliding_window, err,
                         err_len)))
        return rc;
    if (c->n_heads % c->n_kv_heads) {
        st_errf(err, err_len,
                "config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                c->n_heads, c->n_kv_heads);
        return CAIRN_EFORMAT;
    }
    if (c->head_dim % 2) {
        st_errf(err, err_len, "config.json: head_dim %d must be even for rotary embeddings",
                c->head_dim);
        return CAIRN_EFORMAT;
    }
    if ((int64_t)c->n_heads * c->head_dim > MAX_DIM) {
        st_errf(err, err_len, "config.json: num_attention_heads x head_dim is too large");
        return CAIRN_ERANGE;
    }
    float qpas;
    if ((rc = hf_get_pos_float(t, "config", "rms_norm_eps", false, 1e-6f, &c->rms_eps, err, err_len)) ||
        (rc = hf_get_pos_float(t, "config", "query_pre_attn_scalar", false, 256, &qpas, err, err_len)) ||
        (rc = hf_get_pos_float(t, "config", "attn_logit_softcapping", false, 0, &c->attn_softcap, err,
                               err_len)) ||
        (rc = hf_get_pos_float(t, "config", "final_logit_softcapping", false, 0, &c->final_softcap,
                               err, err_len)) ||
        (rc = get_bool2(t, top, "tie_word_embeddings", true, &c->tie_embeddings, err, err_len)))
        return rc;
    /* Python floats: qpas ** -0.5 and hidden ** 0.5 in double, used as float32. */
    c->attn_scale = (float)pow((double)qpas, -0.5);
    c->embed_scale = (float)sqrt((double)c->hidden);
    if ((rc = parse_layer_kinds(t, c, err, err_len)) || (rc = parse_rope(t, c, err, err_len)) ||
        (rc = check_unsupported(top, t, err, err_len)))
        return rc;

    gemma3_config_common(c, cfg);
    cfg->vocab = c->vocab;
    cfg->tie_embeddings = c->tie_embeddings;
    /* Special tokens may sit on either level of a gemma3 config. */
    if ((rc = hf_parse_bos(hf_present(hf_get(t, "bos_token_id")) ? t : top, cfg, err, err_len)) ||
        (rc = hf_parse_eos(t, cfg, "config.json", err, err_len)) ||
        (t != top && (rc = hf_parse_eos(top, cfg, "config.json", err, err_len))))
        return rc;
    return 0;
}

int gemma3_config_from_hf(const hf_config_t *hf, cairn_model_config_t *cfg, gemma3_config_t *g,
                          char *err, size_t err_len)
{
    memset(g, 0, sizeof *g);
    snprintf(g->model_type, sizeof g->model_type, "%s", hf->model_type);
    if (!strcmp(hf->model_type, "gemma3")) {
        if (hf->text == hf->top) {
            st_errf(err, err_len, "config.json: gemma3 lacks a text_config object");
            return CAIRN_EFORMAT;
        }
        const cJSON *tmt = hf_get(hf->text, "model_type");
        if (hf_present(tmt) && (!cJSON_IsString(tmt) || strcmp(tmt->valuestring, "gemma3_text"))) {
            st_errf(err, err_len, "config.json: text_config model_type must be gemma3_text");
            return CAIRN_EUNSUPPORTED;
        }
    } else if (strcmp(hf->model_type, "gemma3_text") != 0) {
        st_errf(err, err_len, "config.json: model_type \"%.40s\" is not a Gemma 3 model",
                hf->model_type);
        return CAIRN_EUNSUPPORTED;
    }
    return parse_text(hf->top, hf->text, cfg, g, err, err_len);
}
