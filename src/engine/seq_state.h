/*
 * seq_state.h — the per-sequence state handle of a model with recurrent layers.
 *
 * A model family declares, per RECURRENT layer, how many bytes of state one sequence
 * carries (models/family.h, cairn_layer_cache_t.state_bytes: conv taps, the delta-rule
 * matrix). The engine owns one handle per sequence: that many bytes in one 64-byte-aligned
 * buffer, zeroed at creation (the state before position 0), layer l's part at
 * cairn_model_state_offset(l). The forward step reads and advances it; the KV pool never
 * holds it. A model without recurrent layers has no handle (size 0, data NULL).
 *
 * Checkpoints (issue 10): saving a handle when a sequence passes an exact block boundary
 * (registered with cairn_kv_seq_checkpoint under the boundary's key) and restoring it for
 * a prefix hit or a truncation belong here, beside the handle; until then a stateful
 * sequence can neither reuse a prefix (the KV core serves none without a checkpoint) nor
 * truncate below what it computed.
 *
 * Thread-safety: engine thread only.
 */
#ifndef CAIRN_ENGINE_SEQ_STATE_H
#define CAIRN_ENGINE_SEQ_STATE_H

#include "cairn/common.h"

typedef struct {
    void *data;   /* [bytes], 64-byte aligned; NULL when bytes == 0 */
    size_t bytes;
    void *raw;    /* the allocation data lies in */
} seq_state_t;

/* A zeroed handle of `bytes` (0: an empty handle, no allocation). CAIRN_ENOMEM. */
int seq_state_init(seq_state_t *st, size_t bytes);
/* Frees the handle; an empty or zeroed one is a no-op. */
void seq_state_fini(seq_state_t *st);
/* dst (initialised with the same size) receives a copy of src's state (fork). */
void seq_state_copy(seq_state_t *dst, const seq_state_t *src);

#endif
