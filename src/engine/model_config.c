/*
 * model_config.c — config.json and generation_config.json of Hugging Face checkpoints.
 *
 * Accepts the families Cairn computes: model_type "llama" (and "mistral" without a
 * sliding window, the same math) and "qwen3". Defaults follow the transformers config
 * classes (LlamaConfig, Qwen3Config): n_kv_heads = n_heads; head_dim = hidden / n_heads for
 * llama and 128 for qwen3; rope_theta 10000; rms_norm_eps 1e-6; max_position_embeddings
 * 2048 (llama) / 32768 (qwen3); tie_word_embeddings false. Sizes the math cannot default
 * (hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size)
 * must be present. Unknown fields are ignored; fields that would change the math in a way
 * we do not implement (biases, an active sliding window, another activation, unknown rope
 * types, quantization) are CAIRN_EUNSUPPORTED with the field named.
 *
 * RoPE comes from "rope_parameters" (transformers >= 5) or "rope_theta" + "rope_scaling"
 * (older files, with "rope_type" or the legacy "type" key).
 *
 * Pure functions of their input; thread-safe.
 */
#include "engine/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Upper bounds that keep every derived product far from overflow. */
#define MAX_DIM (1 << 20)
#define MAX_LAYERS 4096
#define MAX_VOCAB (1 << 24)

static const cJSON *get(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static bool present(const cJSON *v) { return v && !cJSON_IsNull(v); }

/*
 * Reads integer field `key` into *out. Absent or null: *out = dflt, or an error when
 * required. Must be an exact integer within [lo, hi].
 */
static int get_int(const cJSON *o, const char *key, bool required, int dflt, int lo, int hi,
                   int *out, char *err, size_t err_len)
{
    const cJSON *v = get(o, key);
    if (!present(v)) {
        if (required) {
            st_errf(err, err_len, "config.json: missing %s", key);
            return CAIRN_EFORMAT;
        }
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble)) {
        st_errf(err, err_len, "config.json: %s must be an integer", key);
        return CAIRN_EFORMAT;
    }
    if (!(v->valuedouble >= lo && v->valuedouble <= hi)) {
        st_errf(err, err_len, "config.json: %s = %g is outside [%d, %d]", key, v->valuedouble,
                lo, hi);
        return CAIRN_EFORMAT;
    }
    *out = (int)v->valuedouble;
    return 0;
}

/* Reads a positive finite float field (absent/null: dflt). `where` names the object. */
static int get_pos_float(const cJSON *o, const char *where, const char *key, bool required,
                         float dflt, float *out, char *err, size_t err_len)
{
    const cJSON *v = get(o, key);
    if (!present(v)) {
        if (required) {
            st_errf(err, err_len, "config.json: %s lacks %s", where, key);
            return CAIRN_EFORMAT;
        }
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble > 0) ||
        v->valuedouble > 3.0e38) {
        st_errf(err, err_len, "config.json: %s %s must be a positive number", where, key);
        return CAIRN_EFORMAT;
    }
    *out = (float)v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *key, bool dflt, bool *out, char *err,
                    size_t err_len)
{
    const cJSON *v = get(o, key);
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

/* Adds token id v (number) to the eos list unless already there. */
static int add_eos(cairn_model_config_t *cfg, const cJSON *v, const char *file, char *err,
                   size_t err_len)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        (cfg->vocab > 0 && v->valuedouble >= cfg->vocab) || v->valuedouble > MAX_VOCAB) {
        st_errf(err, err_len, "%s: eos_token_id entries must be token ids below vocab_size %d",
                file, cfg->vocab);
        return CAIRN_EFORMAT;
    }
    int id = (int)v->valuedouble;
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_ids[i] == id)
            return 0;
    if (cfg->n_eos >= CAIRN_MAX_EOS) {
        st_errf(err, err_len, "%s: more than %d distinct eos_token_id values", file,
                CAIRN_MAX_EOS);
        return CAIRN_ERANGE;
    }
    cfg->eos_ids[cfg->n_eos++] = id;
    return 0;
}

/* eos_token_id: absent, null, an int or a list of ints. */
static int parse_eos(const cJSON *root, cairn_model_config_t *cfg, const char *file, char *err,
                     size_t err_len)
{
    const cJSON *v = get(root, "eos_token_id");
    if (!present(v))
        return 0;
    if (cJSON_IsArray(v)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, v)
        {
            int rc = add_eos(cfg, e, file, err, err_len);
            if (rc)
                return rc;
        }
        return 0;
    }
    return add_eos(cfg, v, file, err, err_len);
}

/* The rope block: a transformers-5 rope_parameters object or a legacy rope_scaling one. */
static int parse_rope_block(const cJSON *rp, const char *where, cairn_model_config_t *cfg,
                            char *err, size_t err_len)
{
    if (!cJSON_IsObject(rp)) {
        st_errf(err, err_len, "config.json: %s must be an object", where);
        return CAIRN_EFORMAT;
    }
    const cJSON *type = get(rp, "rope_type");
    if (!present(type))
        type = get(rp, "type");
    const char *name = "default";
    if (present(type)) {
        if (!cJSON_IsString(type)) {
            st_errf(err, err_len, "config.json: %s rope_type must be a string", where);
            return CAIRN_EFORMAT;
        }
        name = type->valuestring;
    } else if (!get(rp, "rope_theta")) {
        /* Per-layer-type parameters ({"full_attention": {...}, ...}) or something new. */
        st_errf(err, err_len, "config.json: %s has no rope_type", where);
        return CAIRN_EUNSUPPORTED;
    }
    int rc = get_pos_float(rp, where, "rope_theta", false, cfg->rope_theta, &cfg->rope_theta,
                           err, err_len);
    if (rc)
        return rc;
    const cJSON *prf = get(rp, "partial_rotary_factor");
    if (present(prf) && !(cJSON_IsNumber(prf) && prf->valuedouble == 1.0)) {
        st_errf(err, err_len, "config.json: %s partial_rotary_factor is not supported", where);
        return CAIRN_EUNSUPPORTED;
    }
    if (!strcmp(name, "default")) {
        cfg->rope_type = CAIRN_ROPE_DEFAULT;
        return 0;
    }
    if (!strcmp(name, "llama3")) {
        cfg->rope_type = CAIRN_ROPE_LLAMA3;
        if ((rc = get_pos_float(rp, where, "factor", true, 0, &cfg->rope_factor, err, err_len)) ||
            (rc = get_pos_float(rp, where, "low_freq_factor", true, 0, &cfg->rope_low_freq_factor,
                                err, err_len)) ||
            (rc = get_pos_float(rp, where, "high_freq_factor", true, 0,
                                &cfg->rope_high_freq_factor, err, err_len)) ||
            (rc = get_int(rp, "original_max_position_embeddings", true, 0, 1, 1 << 30,
                          &cfg->rope_orig_max_pos, err, err_len)))
            return rc;
        if (!(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor)) {
            st_errf(err, err_len,
                    "config.json: %s high_freq_factor must be greater than low_freq_factor",
                    where);
            return CAIRN_EFORMAT;
        }
        return 0;
    }
    st_errf(err, err_len, "config.json: unsupported rope_type \"%.40s\" in %s", name, where);
    return CAIRN_EUNSUPPORTED;
}

/* Rejects fields whose non-default value changes the math we implement. */
static int check_unsupported(const cJSON *root, cairn_model_config_t *cfg, char *err,
                             size_t err_len)
{
    bool b;
    int rc;
    static const char *const bias_fields[] = {"attention_bias", "mlp_bias"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(bias_fields); i++) {
        if ((rc = get_bool(root, bias_fields[i], false, &b, err, err_len)))
            return rc;
        if (b) {
            st_errf(err, err_len, "config.json: %s = true is not supported", bias_fields[i]);
            return CAIRN_EUNSUPPORTED;
        }
    }
    const cJSON *act = get(root, "hidden_act");
    if (present(act) && (!cJSON_IsString(act) || (strcmp(act->valuestring, "silu") != 0 &&
                                                    strcmp(act->valuestring, "swish") != 0))) {
        st_errf(err, err_len, "config.json: hidden_act \"%.32s\" is not supported (only silu)",
                cJSON_IsString(act) ? act->valuestring : "?");
        return CAIRN_EUNSUPPORTED;
    }
    if (present(get(root, "quantization_config"))) {
        st_errf(err, err_len, "config.json: quantization_config is not supported");
        return CAIRN_EUNSUPPORTED;
    }
    const cJSON *ptp = get(root, "pretraining_tp");
    if (present(ptp) && !(cJSON_IsNumber(ptp) && ptp->valuedouble == 1.0)) {
        st_errf(err, err_len, "config.json: pretraining_tp other than 1 is not supported");
        return CAIRN_EUNSUPPORTED;
    }
    /* Sliding windows: qwen3 gates them with use_sliding_window; mistral's is always on. */
    const cJSON *sw = get(root, "sliding_window");
    if (cfg->arch == CAIRN_ARCH_QWEN3) {
        if ((rc = get_bool(root, "use_sliding_window", false, &b, err, err_len)))
            return rc;
        if (b && present(sw)) {
            st_errf(err, err_len,
                    "config.json: sliding_window with use_sliding_window = true is not supported");
            return CAIRN_EUNSUPPORTED;
        }
    } else if (!strcmp(cfg->model_type, "mistral") && (!sw || present(sw))) {
        st_errf(err, err_len, "config.json: mistral sliding_window is not supported (must be null)");
        return CAIRN_EUNSUPPORTED;
    }
    const cJSON *lt = get(root, "layer_types");
    if (present(lt)) {
        const cJSON *e;
        if (!cJSON_IsArray(lt)) {
            st_errf(err, err_len, "config.json: layer_types must be a list");
            return CAIRN_EFORMAT;
        }
        cJSON_ArrayForEach(e, lt)
        {
            if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention") != 0) {
                st_errf(err, err_len,
                        "config.json: layer_types entry \"%.32s\" is not supported "
                        "(only full_attention)",
                        cJSON_IsString(e) ? e->valuestring : "?");
                return CAIRN_EUNSUPPORTED;
            }
        }
    }
    return 0;
}

int cairn_model_config_parse(const char *json, size_t len, cairn_model_config_t *out,
                             char *err, size_t err_len)
{
    int rc;
    cJSON *root = NULL;
    cairn_model_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    if (!json || !out) {
        st_errf(err, err_len, "config.json: no input");
        return CAIRN_EINVAL;
    }
    st_json_init();
    st_json_oom_reset();
    root = cJSON_ParseWithLength(json, len);
    if (!root) {
        rc = st_json_oom() ? CAIRN_ENOMEM : CAIRN_EFORMAT;
        st_errf(err, err_len, "config.json: %s",
                rc == CAIRN_ENOMEM ? "out of memory" : "not valid JSON");
        goto fail;
    }
    if (!cJSON_IsObject(root)) {
        st_errf(err, err_len, "config.json: not a JSON object");
        rc = CAIRN_EFORMAT;
        goto fail;
    }

    const cJSON *mt = get(root, "model_type");
    if (!cJSON_IsString(mt)) {
        st_errf(err, err_len, "config.json: missing model_type");
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    if (!strcmp(mt->valuestring, "llama") || !strcmp(mt->valuestring, "mistral")) {
        cfg.arch = CAIRN_ARCH_LLAMA;
    } else if (!strcmp(mt->valuestring, "qwen3")) {
        cfg.arch = CAIRN_ARCH_QWEN3;
    } else {
        st_errf(err, err_len, "config.json: unsupported model_type \"%.40s\"", mt->valuestring);
        rc = CAIRN_EUNSUPPORTED;
        goto fail;
    }
    snprintf(cfg.model_type, sizeof cfg.model_type, "%s", mt->valuestring);
    bool qwen = cfg.arch == CAIRN_ARCH_QWEN3;

    if ((rc = get_int(root, "num_hidden_layers", true, 0, 1, MAX_LAYERS, &cfg.n_layers, err,
                      err_len)) ||
        (rc = get_int(root, "hidden_size", true, 0, 1, MAX_DIM, &cfg.hidden, err, err_len)) ||
        (rc = get_int(root, "num_attention_heads", true, 0, 1, MAX_DIM, &cfg.n_heads, err,
                      err_len)) ||
        (rc = get_int(root, "num_key_value_heads", false, cfg.n_heads, 1, MAX_DIM,
                      &cfg.n_kv_heads, err, err_len)) ||
        (rc = get_int(root, "intermediate_size", true, 0, 1, MAX_DIM, &cfg.ffn, err, err_len)) ||
        (rc = get_int(root, "vocab_size", true, 0, 1, MAX_VOCAB, &cfg.vocab, err, err_len)) ||
        (rc = get_int(root, "max_position_embeddings", false, qwen ? 32768 : 2048, 1, 1 << 30,
                      &cfg.max_pos, err, err_len)))
        goto fail;
    if (!present(get(root, "head_dim")) && !qwen && cfg.hidden % cfg.n_heads != 0) {
        st_errf(err, err_len,
                "config.json: hidden_size %d is not divisible by num_attention_heads %d",
                cfg.hidden, cfg.n_heads);
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    if ((rc = get_int(root, "head_dim", false, qwen ? 128 : cfg.hidden / cfg.n_heads, 1, 65536,
                      &cfg.head_dim, err, err_len)))
        goto fail;
    if (cfg.n_heads % cfg.n_kv_heads != 0) {
        st_errf(err, err_len,
                "config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                cfg.n_heads, cfg.n_kv_heads);
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    if (cfg.head_dim % 2 != 0) {
        st_errf(err, err_len, "config.json: head_dim %d must be even for rotary embeddings",
                cfg.head_dim);
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    if ((int64_t)cfg.n_heads * cfg.head_dim > MAX_DIM) {
        st_errf(err, err_len, "config.json: num_attention_heads x head_dim is too large");
        rc = CAIRN_ERANGE;
        goto fail;
    }
    if ((rc = get_pos_float(root, "config", "rms_norm_eps", false, 1e-6f, &cfg.rms_eps, err,
                            err_len)) ||
        (rc = get_bool(root, "tie_word_embeddings", false, &cfg.tie_embeddings, err, err_len)))
        goto fail;

    /* RoPE. */
    cfg.rope_type = CAIRN_ROPE_DEFAULT;
    cfg.rope_theta = 10000.0f;
    const cJSON *rp = get(root, "rope_parameters");
    if (present(rp)) {
        if ((rc = parse_rope_block(rp, "rope_parameters", &cfg, err, err_len)))
            goto fail;
    } else {
        if ((rc = get_pos_float(root, "config", "rope_theta", false, 10000.0f, &cfg.rope_theta,
                                err, err_len)))
            goto fail;
        const cJSON *rs = get(root, "rope_scaling");
        if (present(rs) && (rc = parse_rope_block(rs, "rope_scaling", &cfg, err, err_len)))
            goto fail;
    }

    /* Special tokens: bos may be null; eos an int or a list. */
    const cJSON *bos = get(root, "bos_token_id");
    cfg.bos_id = -1;
    if (present(bos)) {
        if (!cJSON_IsNumber(bos) || bos->valuedouble != floor(bos->valuedouble) ||
            bos->valuedouble < 0 || bos->valuedouble >= cfg.vocab) {
            st_errf(err, err_len, "config.json: bos_token_id must be a token id below %d",
                    cfg.vocab);
            rc = CAIRN_EFORMAT;
            goto fail;
        }
        cfg.bos_id = (int)bos->valuedouble;
    }
    if ((rc = parse_eos(root, &cfg, "config.json", err, err_len)) ||
        (rc = check_unsupported(root, &cfg, err, err_len)))
        goto fail;

    cJSON_Delete(root);
    *out = cfg;
    return 0;

fail:
    cJSON_Delete(root);
    return rc;
}

int cairn_generation_config_parse(const char *json, size_t len, cairn_model_config_t *cfg,
                                  char *err, size_t err_len)
{
    int rc;
    if (!json || !cfg) {
        st_errf(err, err_len, "generation_config.json: no input");
        return CAIRN_EINVAL;
    }
    st_json_init();
    st_json_oom_reset();
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        rc = st_json_oom() ? CAIRN_ENOMEM : CAIRN_EFORMAT;
        st_errf(err, err_len, "generation_config.json: %s",
                rc == CAIRN_ENOMEM ? "out of memory" : "not valid JSON");
        return rc;
    }
    if (!cJSON_IsObject(root)) {
        st_errf(err, err_len, "generation_config.json: not a JSON object");
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    /* Work on a copy so a failure leaves cfg untouched. */
    cairn_model_config_t tmp = *cfg;
    if ((rc = parse_eos(root, &tmp, "generation_config.json", err, err_len)))
        goto fail;
    *cfg = tmp;
    cJSON_Delete(root);
    return 0;

fail:
    cJSON_Delete(root);
    return rc;
}
