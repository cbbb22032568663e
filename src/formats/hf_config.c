/*
 * hf_config.c — Hugging Face config.json / generation_config.json reading shared by every
 * family (formats/hf_config.h).
 *
 * Defaults and validation that belong to one family (head_dim defaults, which fields it
 * rejects) live in that family's parse_config; what is here is the part of the HF format
 * every decoder shares: typed fields, the RoPE block, special token ids and the
 * text_config nesting of multimodal wrappers.
 *
 * Pure functions of their input; thread-safe.
 */
#include "formats/hf_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "util/json.h"

/* Token ids are below this (the families' vocab bound). */
#define MAX_VOCAB (1 << 24)

const cJSON *hf_get(const cJSON *o, const char *key)
{
    return o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

bool hf_present(const cJSON *v) { return v && !cJSON_IsNull(v); }

int hf_get_int(const cJSON *o, const char *key, bool required, int dflt, int lo, int hi,
               int *out, char *err, size_t err_len)
{
    const cJSON *v = hf_get(o, key);
    if (!hf_present(v)) {
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

int hf_get_pos_float(const cJSON *o, const char *where, const char *key, bool required,
                     float dflt, float *out, char *err, size_t err_len)
{
    const cJSON *v = hf_get(o, key);
    if (!hf_present(v)) {
        if (required) {
            st_errf(err, err_len, "config.json: %s lacks %s", where, key);
            return CAIRN_EFORMAT;
        }
        *out = dflt;
        return 0;
    }
    /* Positive in float32 too: a tiny double (1e-60) would round to 0. */
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble > 0) ||
        v->valuedouble > 3.0e38 || !((float)v->valuedouble > 0)) {
        st_errf(err, err_len, "config.json: %s %s must be a positive number", where, key);
        return CAIRN_EFORMAT;
    }
    *out = (float)v->valuedouble;
    return 0;
}

int hf_get_bool(const cJSON *o, const char *key, bool dflt, bool *out, char *err,
                size_t err_len)
{
    const cJSON *v = hf_get(o, key);
    if (!hf_present(v)) {
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

int hf_parse_eos(const cJSON *o, cairn_model_config_t *cfg, const char *file, char *err,
                 size_t err_len)
{
    const cJSON *v = hf_get(o, "eos_token_id");
    if (!hf_present(v))
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

int hf_parse_bos(const cJSON *o, cairn_model_config_t *cfg, char *err, size_t err_len)
{
    const cJSON *bos = hf_get(o, "bos_token_id");
    cfg->bos_id = -1;
    if (!hf_present(bos))
        return 0;
    if (!cJSON_IsNumber(bos) || bos->valuedouble != floor(bos->valuedouble) ||
        bos->valuedouble < 0 || bos->valuedouble >= cfg->vocab) {
        st_errf(err, err_len, "config.json: bos_token_id must be a token id below %d",
                cfg->vocab);
        return CAIRN_EFORMAT;
    }
    cfg->bos_id = (int)bos->valuedouble;
    return 0;
}

/* The rope block: a transformers-5 rope_parameters object or a legacy rope_scaling one. */
static int parse_rope_block(const cJSON *rp, const char *where, cairn_model_config_t *cfg,
                            char *err, size_t err_len)
{
    if (!cJSON_IsObject(rp)) {
        st_errf(err, err_len, "config.json: %s must be an object", where);
        return CAIRN_EFORMAT;
    }
    const cJSON *type = hf_get(rp, "rope_type");
    if (!hf_present(type))
        type = hf_get(rp, "type");
    const char *name = "default";
    if (hf_present(type)) {
        if (!cJSON_IsString(type)) {
            st_errf(err, err_len, "config.json: %s rope_type must be a string", where);
            return CAIRN_EFORMAT;
        }
        name = type->valuestring;
    } else if (!hf_get(rp, "rope_theta")) {
        /* Per-layer-type parameters ({"full_attention": {...}, ...}) or something new. */
        st_errf(err, err_len, "config.json: %s has no rope_type", where);
        return CAIRN_EUNSUPPORTED;
    }
    int rc = hf_get_pos_float(rp, where, "rope_theta", false, cfg->rope_theta,
                              &cfg->rope_theta, err, err_len);
    if (rc)
        return rc;
    const cJSON *prf = hf_get(rp, "partial_rotary_factor");
    if (hf_present(prf) && !(cJSON_IsNumber(prf) && prf->valuedouble == 1.0)) {
        st_errf(err, err_len, "config.json: %s partial_rotary_factor is not supported", where);
        return CAIRN_EUNSUPPORTED;
    }
    if (!strcmp(name, "default")) {
        cfg->rope_type = CAIRN_ROPE_DEFAULT;
        return 0;
    }
    if (!strcmp(name, "llama3")) {
        cfg->rope_type = CAIRN_ROPE_LLAMA3;
        if ((rc = hf_get_pos_float(rp, where, "factor", true, 0, &cfg->rope_factor, err,
                                   err_len)) ||
            (rc = hf_get_pos_float(rp, where, "low_freq_factor", true, 0,
                                   &cfg->rope_low_freq_factor, err, err_len)) ||
            (rc = hf_get_pos_float(rp, where, "high_freq_factor", true, 0,
                                   &cfg->rope_high_freq_factor, err, err_len)) ||
            (rc = hf_get_int(rp, "original_max_position_embeddings", true, 0, 1, 1 << 30,
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

int hf_parse_rope(const cJSON *o, cairn_model_config_t *cfg, char *err, size_t err_len)
{
    cfg->rope_type = CAIRN_ROPE_DEFAULT;
    cfg->rope_theta = 10000.0f;
    const cJSON *rp = hf_get(o, "rope_parameters");
    if (hf_present(rp))
        return parse_rope_block(rp, "rope_parameters", cfg, err, err_len);
    int rc = hf_get_pos_float(o, "config", "rope_theta", false, 10000.0f, &cfg->rope_theta,
                              err, err_len);
    if (rc)
        return rc;
    const cJSON *rs = hf_get(o, "rope_scaling");
    if (hf_present(rs))
        return parse_rope_block(rs, "rope_scaling", cfg, err, err_len);
    return 0;
}

/* Parses a whole JSON document; `file` names it in messages. */
static int parse_doc(const char *json, size_t len, const char *file, cJSON **doc, char *err,
                     size_t err_len)
{
    int rc = cairn_json_parse(json, len, NULL, doc, NULL);
    if (rc)
        st_errf(err, err_len, "%s: %s", file,
                rc == CAIRN_ENOMEM ? "out of memory" : "not valid JSON");
    else if (!cJSON_IsObject(*doc)) {
        st_errf(err, err_len, "%s: not a JSON object", file);
        rc = CAIRN_EFORMAT;
    }
    if (rc) {
        cJSON_Delete(*doc);
        *doc = NULL;
    }
    return rc;
}

int hf_config_parse(const char *json, size_t len, cJSON **doc, hf_config_t *out, char *err,
                    size_t err_len)
{
    memset(out, 0, sizeof *out);
    *doc = NULL;
    if (!json) {
        st_errf(err, err_len, "config.json: no input");
        return CAIRN_EINVAL;
    }
    int rc = parse_doc(json, len, "config.json", doc, err, err_len);
    if (rc)
        return rc;
    const cJSON *mt = hf_get(*doc, "model_type");
    if (!cJSON_IsString(mt)) {
        st_errf(err, err_len, "config.json: missing model_type");
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    out->top = *doc;
    out->text = *doc;
    out->model_type = mt->valuestring;
    /* Multimodal wrappers (gemma3, qwen3_5) keep the language model under text_config. */
    const cJSON *tc = hf_get(*doc, "text_config");
    if (hf_present(tc)) {
        if (!cJSON_IsObject(tc)) {
            st_errf(err, err_len, "config.json: text_config must be an object");
            rc = CAIRN_EFORMAT;
            goto fail;
        }
        out->text = tc;
    }
    return 0;

fail:
    cJSON_Delete(*doc);
    *doc = NULL;
    memset(out, 0, sizeof *out);
    return rc;
}

int hf_generation_config_merge(const char *json, size_t len, cairn_model_config_t *cfg,
                               char *err, size_t err_len)
{
    if (!json || !cfg) {
        st_errf(err, err_len, "generation_config.json: no input");
        return CAIRN_EINVAL;
    }
    cJSON *root = NULL;
    int rc = parse_doc(json, len, "generation_config.json", &root, err, err_len);
    if (rc)
        return rc;
    /* Work on a copy so a failure leaves cfg untouched. */
    cairn_model_config_t tmp = *cfg;
    if ((rc = hf_parse_eos(root, &tmp, "generation_config.json", err, err_len)) == 0)
        *cfg = tmp;
    cJSON_Delete(root);
    return rc;
}
