/*
 * cairn/kv_storage.h — where the KV pool's bytes live.
 *
 * The physical pool reserves one address range for its maximum size once and commits a
 * growing prefix of it, so growth never moves or copies a block. A backend provides that
 * reserve/commit/release contract plus a block copy (for copy-on-write):
 *
 *  - host (cairn_kv_storage_host): mmap(PROT_NONE, MAP_NORESERVE) reserves, mprotect
 *    (PROT_READ|PROT_WRITE) commits; pages are materialised by the kernel on first touch.
 *  - a device backend (CUDA later) maps the same contract onto cuMemAddressReserve /
 *    cuMemCreate + cuMemMap + cuMemSetAccess; its `base` is then a device address.
 *
 * Offsets and sizes passed to commit are multiples of granularity(). Thread-safety: a
 * backend instance is used by one cache, on its engine thread.
 *
 * Device memory. A backend whose range the host cannot address (device memory) also
 * provides the staging calls below, and the callers that move block bytes to or from
 * host memory (the cold tier's capture and restore) go through them: two host staging
 * buffers (pinned, so copies run asynchronously), each filled or emptied by one queued
 * copy, so a disk read into one overlaps the copy of the other. For host memory they are
 * NULL and callers read and write the range directly.
 */
#ifndef CAIRN_KV_STORAGE_H
#define CAIRN_KV_STORAGE_H

#include "cairn/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cairn_kv_storage_ops {
    const char *name;
    /* Commit granularity in bytes (a power of two, e.g. the page size). */
    size_t (*granularity)(void *ctx);
    /* Reserves max_bytes of address space (no memory committed); *base receives it.
     * Returns 0 or a negative CAIRN_E* (CAIRN_ENOMEM when the range cannot be reserved). */
    int (*reserve)(void *ctx, size_t max_bytes, uint8_t **base);
    /* Makes [old_bytes, new_bytes) of the range usable; bytes below old_bytes are left
     * untouched. Returns 0 or a negative CAIRN_E*; on failure nothing changes. */
    int (*commit)(void *ctx, uint8_t *base, size_t old_bytes, size_t new_bytes);
    /* Copies n bytes inside the range (memcpy for host memory). */
    void (*copy)(void *ctx, uint8_t *dst, const uint8_t *src, size_t n);
    /* Releases the whole range (committed or not). */
    void (*release)(void *ctx, uint8_t *base, size_t max_bytes);

    /* ---- device memory only (NULL when the range is host memory) ---- */
    /* Host staging buffer `slot` (0 or 1) of at least n bytes, after waiting for the
     * copy last queued on it; NULL when it cannot be allocated or that copy failed. The
     * buffer stays valid until the next stage() of the same slot. */
    void *(*stage)(void *ctx, int slot, size_t n);
    /* Queues the copy of the first n bytes of slot's buffer to dst (in the range); work
     * issued on the range afterwards sees them. Returns 0 or a negative CAIRN_E*. */
    int (*stage_upload)(void *ctx, int slot, uint8_t *dst, size_t n);
    /* Queues the copy of n bytes at src (in the range, after all work issued on it so
     * far) into slot's buffer; stage(slot) waits for it. 0 or a negative CAIRN_E*. */
    int (*stage_download)(void *ctx, int slot, const uint8_t *src, size_t n);
    /* Waits for every queued copy; returns the first failure since the last call. */
    int (*stage_sync)(void *ctx);
} cairn_kv_storage_ops_t;

/* The host-memory backend (ctx unused, pass NULL). Static; never NULL. */
CAIRN_API const cairn_kv_storage_ops_t *cairn_kv_storage_host(void);

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_KV_STORAGE_H */
