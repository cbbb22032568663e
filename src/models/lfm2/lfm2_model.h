/*
 * models/lfm2/lfm2_model.h — an opened LFM2 checkpoint folder (config + mapped weights).
 *
 * The folder holds config.json (model_type "lfm2"), optionally generation_config.json
 * (more eos ids) and model.safetensors; weights stay in their file dtype, mapped
 * read-only. Errors carry a one-line message naming the file and the problem.
 *
 * Thread-safety: immutable after open; any number of threads may read it.
 */
#ifndef CAIRN_MODELS_LFM2_MODEL_H
#define CAIRN_MODELS_LFM2_MODEL_H

#include "models/lfm2/lfm2.h"

typedef struct lfm2_model lfm2_model_t;

/*
 * Opens dir. Errors: CAIRN_ENOENT (no config.json or weights, a missing tensor),
 * CAIRN_EFORMAT (bad JSON, a lying header, a shape config.json disagrees with),
 * CAIRN_EUNSUPPORTED (another model_type, an unimplemented field, a tensor the config has
 * no use for, a sharded checkpoint), CAIRN_EIO, CAIRN_ENOMEM. Free with lfm2_model_close.
 */
int lfm2_model_open(const char *dir, lfm2_model_t **out, char *err, size_t err_len);
void lfm2_model_close(lfm2_model_t *m);
const lfm2_config_t *lfm2_model_config(const lfm2_model_t *m);
const lfm2_weights_t *lfm2_model_weights(const lfm2_model_t *m);

#endif
