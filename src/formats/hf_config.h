/*
 * formats/hf_config.h — reading Hugging Face config.json and generation_config.json.
 *
 * What every family's parse_config shares: the document parsed once (out of memory told
 * apart from bad JSON), the text model's object found (multimodal wrappers such as
 * "gemma3" and "qwen3_5" nest it under "text_config"; the top-level model_type picks the
 * family), typed field readers whose errors name the field, the RoPE block
 * (transformers >= 5 "rope_parameters", or the older "rope_theta" + "rope_scaling" with
 * "rope_type" or the legacy "type"), and the special token ids (bos_token_id,
 * eos_token_id: an int or a list, merged with generation_config.json's).
 *
 * Messages start with "config.json: " (or the file given) and name the field. Pure
 * functions of their input; thread-safe.
 */
#ifndef CAIRN_FORMATS_HF_CONFIG_H
#define CAIRN_FORMATS_HF_CONFIG_H

#include <cjson/cJSON.h>

#include "cairn/checkpoint.h"

/* A parsed config.json. */
typedef struct {
    const cJSON *top;        /* the file's top-level object */
    const cJSON *text;       /* the text model's fields: top->text_config when that is an
                                object, else top */
    const char *model_type;  /* top-level model_type (never NULL once parsed) */
} hf_config_t;

/*
 * Parses a config.json text (len bytes, need not be NUL-terminated) into *doc (free with
 * cJSON_Delete) and *out (pointers into *doc). Errors: CAIRN_ENOMEM ("out of memory"),
 * CAIRN_EFORMAT ("not valid JSON", "not a JSON object", "missing model_type",
 * text_config not an object), each message prefixed "config.json: ".
 */
int hf_config_parse(const char *json, size_t len, cJSON **doc, hf_config_t *out, char *err,
                    size_t err_len);

/* o[key], NULL when absent (o may be NULL). */
const cJSON *hf_get(const cJSON *o, const char *key);
/* Present and not JSON null. */
bool hf_present(const cJSON *v);

/*
 * Integer field `key` of o into *out. Absent or null: *out = dflt, or CAIRN_EFORMAT
 * ("missing KEY") when required. Must be an exact integer in [lo, hi], else CAIRN_EFORMAT.
 */
int hf_get_int(const cJSON *o, const char *key, bool required, int dflt, int lo, int hi,
               int *out, char *err, size_t err_len);
/* A positive finite float (absent/null: dflt, or an error when required); `where` names
 * the object in messages ("config", "rope_parameters"). */
int hf_get_pos_float(const cJSON *o, const char *where, const char *key, bool required,
                     float dflt, float *out, char *err, size_t err_len);
/* A boolean (absent/null: dflt). */
int hf_get_bool(const cJSON *o, const char *key, bool dflt, bool *out, char *err,
                size_t err_len);

/*
 * RoPE of o into cfg->rope_*: "rope_parameters" when present, else "rope_theta" (default
 * 10000) and an optional "rope_scaling" block. Types: "default" and "llama3" (its four
 * parameters required); others, per-layer-type blocks without rope_type, and a
 * partial_rotary_factor other than 1 are CAIRN_EUNSUPPORTED naming them.
 */
int hf_parse_rope(const cJSON *o, cairn_model_config_t *cfg, char *err, size_t err_len);

/* bos_token_id of o (absent/null: -1) into cfg->bos_id; must be a token id < cfg->vocab. */
int hf_parse_bos(const cJSON *o, cairn_model_config_t *cfg, char *err, size_t err_len);
/*
 * Adds eos_token_id of o (absent, null, an int or a list of ints) to cfg's eos list,
 * deduplicated, at most CAIRN_MAX_EOS; `file` prefixes messages. Ids must be below
 * cfg->vocab (when it is set).
 */
int hf_parse_eos(const cJSON *o, cairn_model_config_t *cfg, const char *file, char *err,
                 size_t err_len);

/*
 * Adds the eos ids of a generation_config.json text to cfg (all or nothing: on failure
 * cfg is untouched). A missing eos field is not an error. Errors: CAIRN_ENOMEM,
 * CAIRN_EFORMAT, CAIRN_ERANGE (too many ids).
 */
int hf_generation_config_merge(const char *json, size_t len, cairn_model_config_t *cfg,
                               char *err, size_t err_len);

#endif
