/*
 * rope.c — RoPE inverse frequencies (rotate_half pairing; the rotation is kern_rope).
 *
 * HF computes the frequencies as float32 tensors with Python-float scalars, so each
 * operation below is one float32 operation on float32 operands (the scalar rounded to
 * float32 first), in the same order as modeling_rope_utils.py. powf is evaluated in double
 * and rounded once, which is the correctly rounded float32 power.
 * Pure functions; thread-safe.
 */
#include <math.h>

#include "engine/rope.h"

static void default_inv_freq(float theta, int dim, float *inv_freq)
{
    for (int i = 0; i < dim / 2; i++) {
        /* torch.arange(0, dim, 2).float() / dim */
        float expo = (float)(2 * i) / (float)dim;
        /* base ** expo, then 1.0 / that */
        float pw = (float)pow((double)theta, (double)expo);
        inv_freq[i] = 1.0f / pw;
    }
}

int rope_inv_freq(const cairn_model_config_t *cfg, float *inv_freq)
{
    const int dim = cfg->head_dim;
    default_inv_freq(cfg->rope_theta, dim, inv_freq);
    if (cfg->rope_type == CAIRN_ROPE_DEFAULT)
        return CAIRN_OK;
    if (cfg->rope_type != CAIRN_ROPE_LLAMA3)
        return CAIRN_EUNSUPPORTED;

    const float factor = cfg->rope_factor;
    const float low_ff = cfg->rope_low_freq_factor;
    const float high_ff = cfg->rope_high_freq_factor;
    const float old_ctx = (float)cfg->rope_orig_max_pos;
    /* Python floats (double) in HF; compared against float32 tensors after rounding. */
    const float low_freq_wavelen = (float)((double)cfg->rope_orig_max_pos / (double)low_ff);
    const float high_freq_wavelen = (float)((double)cfg->rope_orig_max_pos / (double)high_ff);
    const float two_pi = (float)(2.0 * M_PI);
    for (int i = 0; i < dim / 2; i++) {
        float f = inv_freq[i];
        /* Tensor.__rtruediv__ is reciprocal() * scalar, so x / t is (1 / t) * x here. */
        float wavelen = (1.0f / f) * two_pi;
        /* inv_freq_llama = where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq) */
        float llama = wavelen > low_freq_wavelen ? f / factor : f;
        /* smooth = (old_ctx / wavelen - low_ff) / (high_ff - low_ff) */
        float smooth = ((1.0f / wavelen) * old_ctx - low_ff) / (high_ff - low_ff);
        /* smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama */
        float smoothed = (1.0f - smooth) * llama / factor + smooth * llama;
        bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
        inv_freq[i] = medium ? smoothed : llama;
    }
    return CAIRN_OK;
}
