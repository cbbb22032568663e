/*
 * gemma3_config.c — config.json of Gemma 3 text models (gemma3_text, and gemma3 with a
 * text_config).
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
 * Fields that would change the math in a way not implemented are CAIRN_EUNSUPPORTED
 * naming the field; unknown fields are ignored, as transformers does.
 * Pure functions of their input; thread-safe.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/safetensors.h"
#include "models/gemma3/gemma3.h"

#define MAX_DIM (1 << 20)
#define MAX_VOCAB (1 << 24)

static const cJSON *get(const cJSON *o, const char *key)
{
    return o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

static bool present(const cJSON *v) { return v && !cJSON_IsNull(v); }

/* Integer field within [lo, hi]; absent or null gives dflt. */
static int get_int(const cJSON *o, const char *key, int dflt, int lo, int hi, int *out, char *err,
                   size_t err_len)
{
    const cJSON *v = get(o, key);
    if (!present(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi) {
        st_errf(err, err_len, "config.json: %s must be an integer in [%d, %d]", key, lo, hi);
        return CAIRN_EFORMAT;
    }
    *out = (int)v->valuedouble;
    return 0;
}

/* Positive finite number; absent or null gives dflt (0 = "off" for optional caps). */
static int get_pos(const cJSON *o, const char *where, const char *key, double dflt, double *out,
                   char *err, size_t err_len)
{
    const cJSON *v = get(o, key);
    if (!present(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble > 0) ||
        v->valuedouble > 3.0e38) {
        st_errf(err, err_len, "config.json: %s%s must be a positive number", where, key);
        return CAIRN_EFORMAT;
    }
    *out = v->valuedouble;
    return 0;
}

/* Boolean field of the first of o1, o2 that has it; else dflt. */
static int get_bool2(const cJSON *o1, const cJSON *o2, const char *key, bool dflt, bool *out,
                     char *err, size_t err_len)
{
    const cJSON *v = present(get(o1, key)) ? get(o1, key) : get(o2, key);
    if (!present(v)) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsBool(v)) {
        st_errf(err, err_len, "config.json: %s must be true or false", key);
        return CAIRN_EFORMAT;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

static int add_eos(gemma3_config_t *c, const cJSON *v, char *err, size_t err_len)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble >= c->vocab) {
        st_errf(err, err_len, "config.json: eos_token_id entries must be token ids below %d",
                c->vocab);
        return CAIRN_EFORMAT;
    }
    int id = (int)v->valuedouble;
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] == id)
            return 0;
    if (c->n_eos >= CAIRN_MAX_EOS) {
        st_errf(err, err_len, "config.json: more than %d eos_token_id values", CAIRN_MAX_EOS);
        return CAIRN_ERANGE;
    }
    c->eos_ids[c->n_eos++] = id;
    return 0;
}

/* eos_token_id (int or list) of o, if any. */
static int parse_eos(const cJSON *o, gemma3_config_t *c, char *err, size_t err_len)
{
    const cJSON *v = get(o, "eos_token_id"), *e;
    if (!present(v))
        return 0;
    if (!cJSON_IsArray(v))
        return add_eos(c, v, err, err_len);
    cJSON_ArrayForEach(e, v)
    {
        int rc = add_eos(c, e, err, err_len);
        if (rc)
            return rc;
    }
    return 0;
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
    const cJSON *type = present(get(b, "rope_type")) ? get(b, "rope_type") : get(b, "type");
    const char *name = "default";
    if (present(type)) {
        if (!cJSON_IsString(type)) {
            st_errf(err, err_len, "config.json: %s rope_type must be a string", where);
            return CAIRN_EFORMAT;
        }
        name = type->valuestring;
    }
    double theta, factor;
    char w[80];
    snprintf(w, sizeof w, "%s ", where);
    int rc = get_pos(b, w, "rope_theta", r->theta, &theta, err, err_len);
    if (rc)
        return rc;
    const cJSON *prf = get(b, "partial_rotary_factor");
    if (present(prf) && !(cJSON_IsNumber(prf) && prf->valuedouble == 1.0)) {
        st_errf(err, err_len, "config.json: %s partial_rotary_factor is not supported", where);
        return CAIRN_EUNSUPPORTED;
    }
    r->theta = (float)theta;
    r->linear_factor = 1.0f;
    if (!strcmp(name, "default"))
        return 0;
    if (!strcmp(name, "linear")) {
        if ((rc = get_pos(b, w, "factor", 0, &factor, err, err_len)))
            return rc;
        if (factor == 0) {
            st_errf(err, err_len, "config.json: %s linear rope lacks factor", where);
            return CAIRN_EFORMAT;
        }
        r->linear_factor = (float)factor;
        return 0;
    }
    st_errf(err, err_len, "config.json: unsupported rope_type \"%.40s\" in %s", name, where);
    return CAIRN_EUNSUPPORTED;
}

static int parse_rope(const cJSON *t, gemma3_config_t *c, char *err, size_t err_len)
{
    double theta, local;
    int rc;
    if ((rc = get_pos(t, "", "rope_theta", 1e6, &theta, err, err_len)) ||
        (rc = get_pos(t, "", "rope_local_base_freq", 1e4, &local, err, err_len)))
        return rc;
    c->rope[GEMMA3_FULL] = (gemma3_rope_t){(float)theta, 1.0f};
    c->rope[GEMMA3_SLIDING] = (gemma3_rope_t){(float)local, 1.0f};

    const cJSON *rp = get(t, "rope_parameters");
    if (present(rp) && cJSON_IsObject(rp) &&
        (get(rp, "sliding_attention") || get(rp, "full_attention"))) {
        static const char *const names[2] = {"sliding_attention", "full_attention"};
        for (int k = 0; k < 2; k++) {
            bool used = false;
            for (int l = 0; l < c->n_layers; l++)
                used = used || c->kind[l] == k;
            const cJSON *b = get(rp, names[k]);
            if (!present(b)) {
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
    const cJSON *rs = present(rp) ? rp : get(t, "rope_scaling");
    const char *where = present(rp) ? "rope_parameters" : "rope_scaling";
    if (present(rs))
        return parse_rope_block(rs, where, &c->rope[GEMMA3_FULL], err, err_len);
    return 0;
}

static int parse_layer_kinds(const cJSON *t, gemma3_config_t *c, char *err, size_t err_len)
{
    const cJSON *lt = get(t, "layer_types");
    if (present(lt)) {
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
    const char *key = present(get(t, "sliding_window_pattern")) ? "sliding_window_pattern"
                                                                 : "_sliding_window_pattern";
    int pattern, rc;
    if ((rc = get_int(t, key, 6, 1, GEMMA3_MAX_LAYERS, &pattern, err, err_len)))
        return rc;
    for (int l = 0; l < c->n_layers; l++)
        c->kind[l] = (l + 1) % pattern ? GEMMA3_SLIDING : GEMMA3_FULL;
    return 0;
}

/* Fields whose non-default value changes the math in a way we do not implement. */
static int check_unsupported(const cJSON *root, const cJSON *t, char *err, size_t err_len)
{
    bool b;
    int rc;
    static const char *const flags[] = {"attention_bias", "use_bidirectional_attention"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(flags); i++) {
        if ((rc = get_bool2(t, NULL, flags[i], false, &b, err, err_len)))
            return rc;
        if (b) {
            st_errf(err, err_len, "config.json: %s = true is not supported", flags[i]);
            return CAIRN_EUNSUPPORTED;
        }
    }
    const cJSON *act = get(t, "hidden_activation");
    if (present(act) && (!cJSON_IsString(act) || strcmp(act->valuestring, "gelu_pytorch_tanh"))) {
        st_errf(err, err_len,
                "config.json: hidden_activation \"%.32s\" is not supported (only gelu_pytorch_tanh)",
                cJSON_IsString(act) ? act->valuestring : "?");
        return CAIRN_EUNSUPPORTED;
    }
    if (present(get(root, "quantization_config")) || present(get(t, "quantization_config"))) {
        st_errf(err, err_len, "config.json: quantization_config is not supported");
        return CAIRN_EUNSUPPORTED;
    }
    return 0;
}

static int parse_text(const cJSON *root, const cJSON *t, gemma3_config_t *c, char *err,
                      size_t err_len)
{
    int rc;
    if ((rc = get_int(t, "num_hidden_layers", 26, 1, GEMMA3_MAX_LAYERS, &c->n_layers, err,
                      err_len)) ||
        (rc = get_int(t, "hidden_size", 2304, 1, MAX_DIM, &c->hidden, err, err_len)) ||
        (rc = get_int(t, "num_attention_heads", 8, 1, MAX_DIM, &c->n_heads, err, err_len)) ||
        (rc = get_int(t, "num_key_value_heads", 4, 1, MAX_DIM, &c->n_kv_heads, err, err_len)) ||
        (rc = get_int(t, "head_dim", 256, 2, 65536, &c->head_dim, err, err_len)) ||
        (rc = get_int(t, "intermediate_size", 9216, 1, MAX_DIM, &c->ffn, err, err_len)) ||
        (rc = get_int(t, "vocab_size", 262208, 1, MAX_VOCAB, &c->vocab, err, err_len)) ||
        (rc = get_int(t, "max_position_embeddings", 131072, 1, 1 << 30, &c->max_pos, err,
                      err_len)) ||
        (rc = get_int(t, "sliding_window", 4096, 1, 1 << 30, &c->sliding_window, err, err_len)))
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
    double eps, qpas, acap, fcap;
    if ((rc = get_pos(t, "", "rms_norm_eps", 1e-6, &eps, err, err_len)) ||
        (rc = get_pos(t, "", "query_pre_attn_scalar", 256, &qpas, err, err_len)) ||
        (rc = get_pos(t, "", "attn_logit_softcapping", 0, &acap, err, err_len)) ||
        (rc = get_pos(t, "", "final_logit_softcapping", 0, &fcap, err, err_len)) ||
        (rc = get_bool2(t, root, "tie_word_embeddings", true, &c->tie_embeddings, err, err_len)))
        return rc;
    c->rms_eps = (float)eps;
    /* Python floats: qpas ** -0.5 and hidden ** 0.5 in double, used as float32. */
    c->attn_scale = (float)pow(qpas, -0.5);
    c->embed_scale = (float)sqrt((double)c->hidden);
    c->attn_softcap = (float)acap;
    c->final_softcap = (float)fcap;
    if ((rc = parse_layer_kinds(t, c, err, err_len)) || (rc = parse_rope(t, c, err, err_len)))
        return rc;

    /* Special tokens may sit on either level of a gemma3 config. */
    const cJSON *bos = present(get(t, "bos_token_id")) ? get(t, "bos_token_id")
                                                        : get(root, "bos_token_id");
    c->bos_id = -1;
    if (present(bos)) {
        if (!cJSON_IsNumber(bos) || bos->valuedouble != floor(bos->valuedouble) ||
            bos->valuedouble < 0 || bos->valuedouble >= c->vocab) {
            st_errf(err, err_len, "config.json: bos_token_id must be a token id below %d",
                    c->vocab);
            return CAIRN_EFORMAT;
        }
        c->bos_id = (int)bos->valuedouble;
    }
    if ((rc = parse_eos(t, c, err, err_len)) || (t != root && (rc = parse_eos(root, c, err, err_len))))
        return rc;
    return check_unsupported(root, t, err, err_len);
}

int gemma3_config_parse(const char *json, size_t len, gemma3_config_t *out, char *err,
                        size_t err_len)
{
    int rc;
    cJSON *root = NULL;
    gemma3_config_t c;
    memset(&c, 0, sizeof c);
    if (!json || !out) {
        st_errf(err, err_len, "config.json: no input");
        return CAIRN_EINVAL;
    }
    st_json_init();
    st_json_oom_reset();
    root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        rc = !root && st_json_oom() ? CAIRN_ENOMEM : CAIRN_EFORMAT;
        st_errf(err, err_len, "config.json: %s",
                rc == CAIRN_ENOMEM ? "out of memory" : "not a valid JSON object");
        goto fail;
    }
    const cJSON *mt = get(root, "model_type");
    const cJSON *text = root;
    if (!cJSON_IsString(mt)) {
        st_errf(err, err_len, "config.json: missing model_type");
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    if (!strcmp(mt->valuestring, "gemma3")) {
        text = get(root, "text_config");
        if (!cJSON_IsObject(text)) {
            st_errf(err, err_len, "config.json: gemma3 lacks a text_config object");
            rc = CAIRN_EFORMAT;
            goto fail;
        }
        const cJSON *tmt = get(text, "model_type");
        if (present(tmt) && (!cJSON_IsString(tmt) || strcmp(tmt->valuestring, "gemma3_text"))) {
            st_errf(err, err_len, "config.json: text_config model_type must be gemma3_text");
            rc = CAIRN_EUNSUPPORTED;
            goto fail;
        }
    } else if (strcmp(mt->valuestring, "gemma3_text") != 0) {
        st_errf(err, err_len, "config.json: model_type \"%.40s\" is not a Gemma 3 model",
                mt->valuestring);
        rc = CAIRN_EUNSUPPORTED;
        goto fail;
    }
    snprintf(c.model_type, sizeof c.model_type, "%s", mt->valuestring);
    if ((rc = parse_text(root, text, &c, err, err_len)))
        goto fail;
    cJSON_Delete(root);
    *out = c;
    return 0;
fail:
    cJSON_Delete(root);
    return rc;
}
