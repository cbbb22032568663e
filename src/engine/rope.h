/*
 * rope.h — rotary position embedding frequencies, computed the way HF transformers does.
 */
#ifndef CAIRN_ENGINE_ROPE_H
#define CAIRN_ENGINE_ROPE_H

#include "cairn/checkpoint.h"

/*
 * Fills inv_freq [head_dim / 2] for cfg's rope type, in float32 like HF:
 * default: inv_freq[i] = 1 / theta^((2i) / head_dim), every operation rounded to float32;
 * llama3: HF _compute_llama3_parameters (low frequencies divided by factor, a smooth blend
 * between the two wavelength thresholds). CAIRN_EUNSUPPORTED for another type.
 */
int rope_inv_freq(const cairn_model_config_t *cfg, float *inv_freq);

#endif
