/*
 * llama_config.c — config.json of the llama family (model_type "llama", "mistral",
 * "qwen3"); defaults and rejections in models/llama/llama.h.
 *
 * The shared HF parts (typed fields, RoPE, special tokens) are formats/hf_config.c; this
 * file adds the family's defaults (head_dim, max_position_embeddings), the size checks the
 * forward pass relies on, and the fields whose non-default value would change the math.
 *
 * Pure functions of their input; thread-safe.
 */
#include <stdio.h>
#include <string.h>

#include "formats/safetensors.h"
#include "models/llama/llama.h"

/* Upper bounds that keep every derived product far from overflow. */
#define MAX_DIM (1 << 20)
#define MAX_LAYERS 4096
#define MAX_VOCAB (1 << 24)

/* Rejects fields whose non-default value changes the math we implement. */
static int check_unsupported(const cJSON *root, const cairn_model_config_t *cfg, bool qwen,
                             char *err, size_t err_len)
{
    bool b;
    int rc;
    static const char *const bias_fields[] = {"attention_bias", "mlp_bias"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(bias_fields); i++) {
        if ((rc = hf_get_bool(root, bias_fields[i], false, &b, err, err_len)))
            return rc;
        if (b) {
            st_errf(err, err_len, "config.json: %s = true is not supported", bias_fields[i]);
            return CAIRN_EUNSUPPORTED;
        }
    }
    const cJSON *act = hf_get(root, "hidden_act");
    if (hf_present(act) && (!cJSON_IsString(act) || (strcmp(act->valuestring, "silu") != 0 &&
                                                    strcmp(act->valuestring, "swish") != 0))) {
        st_errf(err, err_len, "config.json: hidden_act \"%.32s\" is not supported (only silu)",
                cJSON_IsString(act) ? act->valuestring : "?");
        return CAIRN_EUNSUPPORTED;
    }
    if (hf_present(hf_get(root, "quantization_config"))) {
        st_errf(err, err_len, "config.json: quantization_config is not supported");
        return CAIRN_EUNSUPPORTED;
    }
    const cJSON *ptp = hf_get(root, "pretraining_tp");
    if (hf_present(ptp) && !(cJSON_IsNumber(ptp) && ptp->valuedouble == 1.0)) {
        st_errf(err, err_len, "config.json: pretraining_tp other than 1 is not supported");
        return CAIRN_EUNSUPPORTED;
    }
    /* Sliding windows: qwen3 gates them with use_sliding_window; mistral's is always on. */
    const cJSON *sw = hf_get(root, "sliding_window");
    if (qwen) {
        if ((rc = hf_get_bool(root, "use_sliding_window", false, &b, err, err_len)))
            return rc;
        if (b && hf_present(sw)) {
            st_errf(err, err_len,
                    "config.json: sliding_window with use_sliding_window = true is not supported");
            return CAIRN_EUNSUPPORTED;
        }
    } else if (!strcmp(cfg->model_type, "mistral") && (!sw || hf_present(sw))) {
        st_errf(err, err_len, "config.json: mistral sliding_window is not supported (must be null)");
        return CAIRN_EUNSUPPORTED;
    }
    const cJSON *lt = hf_get(root, "layer_types");
    if (hf_present(lt)) {
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

int llama_parse_config(const hf_config_t *hf, cairn_model_config_t *out, void **priv,
                       char *err, size_t err_len)
{
    int rc;
    const cJSON *root = hf->text;
    cairn_model_config_t cfg = *out; /* model_type and family set by the caller */
    bool qwen = !strcmp(cfg.model_type, "qwen3");
    *priv = NULL;

    if ((rc = hf_get_int(root, "num_hidden_layers", true, 0, 1, MAX_LAYERS, &cfg.n_layers, err,
                         err_len)) ||
        (rc = hf_get_int(root, "hidden_size", true, 0, 1, MAX_DIM, &cfg.hidden, err, err_len)) ||
        (rc = hf_get_int(root, "num_attention_heads", true, 0, 1, MAX_DIM, &cfg.n_heads, err,
                         err_len)) ||
        (rc = hf_get_int(root, "num_key_value_heads", false, cfg.n_heads, 1, MAX_DIM,
                         &cfg.n_kv_heads, err, err_len)) ||
        (rc = hf_get_int(root, "intermediate_size", true, 0, 1, MAX_DIM, &cfg.ffn, err,
                         err_len)) ||
        (rc = hf_get_int(root, "vocab_size", true, 0, 1, MAX_VOCAB, &cfg.vocab, err, err_len)) ||
        (rc = hf_get_int(root, "max_position_embeddings", false, qwen ? 32768 : 2048, 1, 1 << 30,
                         &cfg.max_pos, err, err_len)))
        return rc;
    if (!hf_present(hf_get(root, "head_dim")) && !qwen && cfg.hidden % cfg.n_heads != 0) {
        st_errf(err, err_len,
                "config.json: hidden_size %d is not divisible by num_attention_heads %d",
                cfg.hidden, cfg.n_heads);
        return CAIRN_EFORMAT;
    }
    if ((rc = hf_get_int(root, "head_dim", false, qwen ? 128 : cfg.hidden / cfg.n_heads, 1,
                         65536, &cfg.head_dim, err, err_len)))
        return rc;
    if (cfg.n_heads % cfg.n_kv_heads != 0) {
        st_errf(err, err_len,
                "config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                cfg.n_heads, cfg.n_kv_heads);
        return CAIRN_EFORMAT;
    }
    if (cfg.head_dim % 2 != 0) {
        st_errf(err, err_len, "config.json: head_dim %d must be even for rotary embeddings",
                cfg.head_dim);
        return CAIRN_EFORMAT;
    }
    if ((int64_t)cfg.n_heads * cfg.head_dim > MAX_DIM) {
        st_errf(err, err_len, "config.json: num_attention_heads x head_dim is too large");
        return CAIRN_ERANGE;
    }
    if ((rc = hf_get_pos_float(root, "config", "rms_norm_eps", false, 1e-6f, &cfg.rms_eps, err,
                               err_len)) ||
        (rc = hf_get_bool(root, "tie_word_embeddings", false, &cfg.tie_embeddings, err,
                          err_len)) ||
        (rc = hf_parse_rope(root, &cfg, err, err_len)) ||
        (rc = hf_parse_bos(root, &cfg, err, err_len)) ||
        (rc = hf_parse_eos(root, &cfg, "config.json", err, err_len)) ||
        (rc = check_unsupported(root, &cfg, qwen, err, err_len)))
        return rc;

    llama_t *l = cairn_calloc(1, sizeof *l);
    if (!l) {
        st_errf(err, err_len, "config.json: out of memory");
        return CAIRN_ENOMEM;
    }
    l->qk_norm = qwen;
    *out = cfg;
    *priv = l;
    return 0;
}
