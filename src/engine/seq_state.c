/*
 * seq_state.c — per-sequence recurrent state handles (engine/seq_state.h).
 *
 * Thread-safety: engine thread only.
 */
#include <string.h>

#include "engine/seq_state.h"

#define ALIGN 64

int seq_state_init(seq_state_t *st, size_t bytes)
{
    memset(st, 0, sizeof(*st));
    if (bytes == 0)
        return CAIRN_OK;
    st->raw = cairn_calloc(1, bytes + ALIGN - 1);
    if (!st->raw)
        return CAIRN_ENOMEM;
    st->data = (void *)(((uintptr_t)st->raw + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
    st->bytes = bytes;
    return CAIRN_OK;
}

void seq_state_fini(seq_state_t *st)
{
    cairn_free(st->raw);
    memset(st, 0, sizeof(*st));
}

void seq_state_copy(seq_state_t *dst, const seq_state_t *src)
{
    CAIRN_ASSERT(dst->bytes == src->bytes);
    if (src->bytes)
        memcpy(dst->data, src->data, src->bytes);
}
