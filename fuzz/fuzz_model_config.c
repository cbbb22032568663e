/*
 * fuzz_model_config.c — libFuzzer target for config.json and generation_config.json.
 *
 * The same input is parsed as both. An accepted config must be internally consistent
 * (the invariants the forward pass relies on), which is checked here.
 */
#include <stdint.h>
#include <stdlib.h>

#include "cairn/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cairn_model_config_t c;
    char err[256];
    if (cairn_model_config_parse((const char *)data, size, &c, err, sizeof err) == 0) {
        if (c.n_layers < 1 || c.hidden < 1 || c.n_heads < 1 || c.n_kv_heads < 1 ||
            c.n_heads % c.n_kv_heads != 0 || c.head_dim < 2 || c.head_dim % 2 != 0 ||
            c.ffn < 1 || c.vocab < 1 || !(c.rope_theta > 0) || !(c.rms_eps > 0) ||
            c.n_eos < 0 || c.n_eos > CAIRN_MAX_EOS || c.bos_id < -1 || c.bos_id >= c.vocab)
            abort();
        for (int i = 0; i < c.n_eos; i++)
            if (c.eos_ids[i] < 0 || c.eos_ids[i] >= c.vocab)
                abort();
        if (c.rope_type == CAIRN_ROPE_LLAMA3 &&
            !(c.rope_high_freq_factor > c.rope_low_freq_factor && c.rope_factor > 0 &&
              c.rope_orig_max_pos > 0))
            abort();
        int n_before = c.n_eos;
        if (cairn_generation_config_parse((const char *)data, size, &c, err, sizeof err) == 0 &&
            (c.n_eos < n_before || c.n_eos > CAIRN_MAX_EOS))
            abort();
    } else {
        cairn_model_config_t g = {.vocab = 1000};
        cairn_generation_config_parse((const char *)data, size, &g, err, sizeof err);
    }
    return 0;
}
