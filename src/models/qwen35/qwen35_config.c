/*
 * qwen35_config.c — config.json of Qwen3.5 checkpoints (Qwen3_5TextConfig, transformers
 * 5.17), either the text model itself (model_type "qwen3_5_text", tensors under "model.")
 * or the multimodal wrapper (model_type "qwen3_5", the text model in "text_config",
 * tensors under "model.language_model."; the vision tower is not computed).
 *
 * Defaults are Qwen3_5TextConfig's: num_key_value_heads 4, head_dim 256, the linear_*
 * sizes 16 key heads / 32 value heads of 128, conv kernel 4, rms_norm_eps 1e-6,
 * max_position_embeddings 32768, rope_theta 10000, partial_rotary_factor 0.25 (read from
 * rope_parameters, else the top level), layer_types from full_attention_interval 4 (every
 * 4th layer full). The sizes no real file omits (hidden_size, num_hidden_layers,
 * num_attention_heads, intermediate_size, vocab_size) are required.
 *
 * Rejected as CAIRN_EUNSUPPORTED, naming the field: attention_bias true, hidden_act other
 * than silu, a rope type other than "default", quantization_config, MoE fields
 * (num_experts), an active sliding window, unknown layer types. attn_output_gate is
 * accepted either way: transformers' Qwen3_5Attention always gates its output, so that is
 * what a reference computes. mrope_section / mrope_interleaved only matter for image and
 * video positions (all three position rows are equal for text) and are ignored.
 *
 * Pure functions of their input; thread-safe.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/qwen35/qwen35.h"

#define MAX_DIM (1 << 20)
#define MAX_VOCAB (1 << 24)

/* A positive finite number (absent/null: dflt), as a double; positive also once rounded
 * to float32, which is what the forward pass computes with (an rms_norm_eps of 1e-60 would
 * be 0 there). */
static int get_pos(const cJSON *o, const char *key, double dflt, double *out, char *err,
                   size_t err_len)
{
    const cJSON *v = hf_get(o, key);
    if (!hf_present(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !((float)v->valuedouble > 0) ||
        v->valuedouble > 3.0e38) {
        st_errf(err, err_len, "config.json: %s must be a positive number", key);
        return CAIRN_EFORMAT;
    }
    *out = v->valuedouble;
    return 0;
}

/* eos_token_id / bos_token_id of the text config, else of the wrapper. */
static int parse_special_ids(const cJSON *tc, const cJSON *root, cairn_model_config_t *b,
                             char *err, size_t err_len)
{
    const cJSON *eos = hf_present(hf_get(tc, "eos_token_id")) ? tc : root;
    const cJSON *bos = hf_present(hf_get(tc, "bos_token_id")) ? tc : root;
    int rc = hf_parse_eos(eos, b, "config.json", err, err_len);
    return rc ? rc : hf_parse_bos(bos, b, err, err_len);
}

/* A field whose presence (non-null, non-false, non-empty) means math we do not compute. */
static bool active(const cJSON *v)
{
    if (!hf_present(v) || cJSON_IsFalse(v))
        return false;
    if (cJSON_IsArray(v) || cJSON_IsObject(v))
        return v->child != NULL;
    if (cJSON_IsNumber(v))
        return v->valuedouble != 0;
    return true;
}

/* rope_parameters (transformers >= 5) or the legacy top-level rope_theta / rope_scaling. */
static int parse_rope(const cJSON *tc, q35_config_t *c, char *err, size_t err_len)
{
    double theta = 10000.0, prf = 0.25;
    int rc;
    if ((rc = get_pos(tc, "rope_theta", theta, &theta, err, err_len)) ||
        (rc = get_pos(tc, "partial_rotary_factor", prf, &prf, err, err_len)))
        return rc;
    if (active(hf_get(tc, "rope_scaling"))) {
        st_errf(err, err_len, "config.json: rope_scaling is not supported for qwen3_5");
        return CAIRN_EUNSUPPORTED;
    }
    const cJSON *rp = hf_get(tc, "rope_parameters");
    if (hf_present(rp)) {
        if (!cJSON_IsObject(rp)) {
            st_errf(err, err_len, "config.json: rope_parameters must be an object");
            return CAIRN_EFORMAT;
        }
        const cJSON *type = hf_get(rp, "rope_type");
        if (!hf_present(type))
            type = hf_get(rp, "type");
        if (hf_present(type) && !(cJSON_IsString(type) && !strcmp(type->valuestring, "default"))) {
            st_errf(err, err_len, "config.json: rope_parameters rope_type '%s' is not supported "
                    "(only default)", cJSON_IsString(type) ? type->valuestring : "?");
            return CAIRN_EUNSUPPORTED;
        }
        if ((rc = get_pos(rp, "rope_theta", theta, &theta, err, err_len)) ||
            (rc = get_pos(rp, "partial_rotary_factor", prf, &prf, err, err_len)))
            return rc;
    }
    if (prf > 1.0) {
        st_errf(err, err_len, "config.json: partial_rotary_factor %g is above 1", prf);
        return CAIRN_EFORMAT;
    }
    c->base.rope_type = CAIRN_ROPE_DEFAULT;
    c->base.rope_theta = (float)theta;
    /* HF: dim = int(head_dim * partial_rotary_factor), a Python float product truncated. */
    c->rope_dim = (int)((double)c->base.head_dim * prf);
    if (c->rope_dim < 2 || c->rope_dim % 2) {
        st_errf(err, err_len, "config.json: head_dim %d * partial_rotary_factor %g gives %d "
                "rotary dims (must be even and >= 2)", c->base.head_dim, prf, c->rope_dim);
        return CAIRN_EFORMAT;
    }
    return 0;
}

/* layer_types, or the pattern of full_attention_interval. */
static int parse_layer_types(const cJSON *tc, q35_config_t *c, char *err, size_t err_len)
{
    const int n = c->base.n_layers;
    const cJSON *lt = hf_get(tc, "layer_types");
    if (hf_present(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != n) {
            st_errf(err, err_len, "config.json: layer_types must be a list of %d names "
                    "(num_hidden_layers)", n);
            return CAIRN_EFORMAT;
        }
        int l = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, lt)
        {
            if (cJSON_IsString(e) && !strcmp(e->valuestring, "linear_attention")) {
                c->kind[l] = Q35_LAYER_LINEAR;
            } else if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention")) {
                c->kind[l] = Q35_LAYER_FULL;
            } else {
                st_errf(err, err_len, "config.json: layer_types[%d] '%s' is not supported "
                        "(linear_attention or full_attention)", l,
                        cJSON_IsString(e) ? e->valuestring : "?");
                return CAIRN_EUNSUPPORTED;
            }
            l++;
        }
    } else {
        int interval;
        int rc = hf_get_int(tc, "full_attention_interval", false, 4, 1, 1 << 20, &interval, err,
                         err_len);
        if (rc)
            return rc;
        for (int l = 0; l < n; l++)
            c->kind[l] = (l + 1) % interval ? Q35_LAYER_LINEAR : Q35_LAYER_FULL;
    }
    c->n_linear = c->n_full = 0;
    for (int l = 0; l < n; l++)
        c->slot[l] = (int16_t)(c->kind[l] == Q35_LAYER_LINEAR ? c->n_linear++ : c->n_full++);
    if (c->n_full == 0) {
        /* The paged cache (and so prefix reuse) hangs off the full-attention layers: a
         * stack of linear layers only has nothing to page. */
        st_errf(err, err_len, "config.json: no full_attention layer among the %d layers "
                "(layer_types or full_attention_interval): not supported", n);
        return CAIRN_EUNSUPPORTED;
    }
    return 0;
}

static int parse_text(const cJSON *tc, const cJSON *root, bool wrapped, q35_config_t *c,
                      char *err, size_t err_len)
{
    cairn_model_config_t *b = &c->base;
    int rc;
    if ((rc = hf_get_int(tc, "hidden_size", true, 0, 1, MAX_DIM, &b->hidden, err, err_len)) ||
        (rc = hf_get_int(tc, "num_hidden_layers", true, 0, 1, Q35_MAX_LAYERS, &b->n_layers, err,
                      err_len)) ||
        (rc = hf_get_int(tc, "num_attention_heads", true, 0, 1, 4096, &b->n_heads, err, err_len)) ||
        (rc = hf_get_int(tc, "num_key_value_heads", false, 4, 1, 4096, &b->n_kv_heads, err,
                      err_len)) ||
        (rc = hf_get_int(tc, "head_dim", false, 256, 2, 4096, &b->head_dim, err, err_len)) ||
        (rc = hf_get_int(tc, "intermediate_size", true, 0, 1, MAX_DIM, &b->ffn, err, err_len)) ||
        (rc = hf_get_int(tc, "vocab_size", true, 0, 1, MAX_VOCAB, &b->vocab, err, err_len)) ||
        (rc = hf_get_int(tc, "max_position_embeddings", false, 32768, 1, 1 << 30, &b->max_pos, err,
                      err_len)) ||
        (rc = hf_get_int(tc, "linear_num_key_heads", false, 16, 1, 4096, &c->lin_k_heads, err,
                      err_len)) ||
        (rc = hf_get_int(tc, "linear_num_value_heads", false, 32, 1, 4096, &c->lin_v_heads, err,
                      err_len)) ||
        (rc = hf_get_int(tc, "linear_key_head_dim", false, 128, 1, 4096, &c->lin_k_dim, err,
                      err_len)) ||
        (rc = hf_get_int(tc, "linear_value_head_dim", false, 128, 1, 1024, &c->lin_v_dim, err,
                      err_len)) ||
        (rc = hf_get_int(tc, "linear_conv_kernel_dim", false, 4, 1, 64, &c->conv_kernel, err,
                      err_len)))
        return rc;
    if (b->n_heads % b->n_kv_heads) {
        st_errf(err, err_len, "config.json: num_attention_heads %d is not a multiple of "
                "num_key_value_heads %d", b->n_heads, b->n_kv_heads);
        return CAIRN_EFORMAT;
    }
    if (c->lin_v_heads % c->lin_k_heads) {
        st_errf(err, err_len, "config.json: linear_num_value_heads %d is not a multiple of "
                "linear_num_key_heads %d", c->lin_v_heads, c->lin_k_heads);
        return CAIRN_EFORMAT;
    }
    double eps;
    if ((rc = get_pos(tc, "rms_norm_eps", 1e-6, &eps, err, err_len)))
        return rc;
    b->rms_eps = (float)eps;

    /* Math we do not compute. */
    bool flag;
    if ((rc = hf_get_bool(tc, "attention_bias", false, &flag, err, err_len)))
        return rc;
    if (flag) {
        st_errf(err, err_len, "config.json: attention_bias true is not supported");
        return CAIRN_EUNSUPPORTED;
    }
    const cJSON *act = hf_get(tc, "hidden_act");
    if (hf_present(act) && !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu"))) {
        st_errf(err, err_len, "config.json: hidden_act '%s' is not supported (only silu)",
                cJSON_IsString(act) ? act->valuestring : "?");
        return CAIRN_EUNSUPPORTED;
    }
    static const char *const refused[] = {"quantization_config", "num_experts", "sliding_window",
                                          "use_sliding_window"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(refused); i++) {
        if (active(hf_get(tc, refused[i])) || active(hf_get(root, refused[i]))) {
            st_errf(err, err_len, "config.json: %s is not supported for qwen3_5", refused[i]);
            return CAIRN_EUNSUPPORTED;
        }
    }

    /* Tied embeddings: the text config's flag; the wrapper's must not contradict it. */
    bool tie_text, tie_root;
    if ((rc = hf_get_bool(tc, "tie_word_embeddings", false, &tie_text, err, err_len)) ||
        (rc = hf_get_bool(root, "tie_word_embeddings", tie_text, &tie_root, err, err_len)))
        return rc;
    if (wrapped && hf_present(hf_get(tc, "tie_word_embeddings")) &&
        hf_present(hf_get(root, "tie_word_embeddings")) && tie_text != tie_root) {
        st_errf(err, err_len, "config.json: tie_word_embeddings differs between the wrapper "
                "and text_config");
        return CAIRN_EFORMAT;
    }
    b->tie_embeddings = wrapped ? tie_root : tie_text;

    if ((rc = parse_rope(tc, c, err, err_len)) || (rc = parse_layer_types(tc, c, err, err_len)))
        return rc;
    return parse_special_ids(tc, root, b, err, err_len);
}
int q35_parse_config(const hf_config_t *hf, cairn_model_config_t *cfg, void **priv, char *err,
                     size_t err_len)
{
    *priv = NULL;
    const bool wrapped = !strcmp(hf->model_type, "qwen3_5");
    if (wrapped) {
        if (hf->text == hf->top) {
            st_errf(err, err_len, "config.json: model_type qwen3_5 needs a text_config object");
            return CAIRN_EFORMAT;
        }
        const cJSON *tmt = hf_get(hf->text, "model_type");
        if (hf_present(tmt) && !(cJSON_IsString(tmt) && !strcmp(tmt->valuestring, "qwen3_5_text"))) {
            st_errf(err, err_len, "config.json: text_config model_type \"%.32s\" is not "
                    "qwen3_5_text", cJSON_IsString(tmt) ? tmt->valuestring : "?");
            return CAIRN_EUNSUPPORTED;
        }
    }
    q35_t *m = cairn_calloc(1, sizeof(*m));
    if (!m) {
        st_errf(err, err_len, "config.json: out of memory");
        return CAIRN_ENOMEM;
    }
    q35_config_t *c = &m->cfg;
    c->base = *cfg; /* model_type and family, set by the caller */
    snprintf(c->prefix, sizeof(c->prefix), "%s", wrapped ? "model.language_model." : "model.");
    int rc = parse_text(hf->text, hf->top, wrapped, c, err, err_len);
    if (rc) {
        cairn_free(m);
        return rc;
    }
    *cfg = c->base;
    *priv = m;
    return 0;
}
