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
} cairn_kv_storage_ops_t;

/* The host-memory backend (ctx unused, pass NULL). Static; never NULL. */
CAIRN_API const cairn_kv_storage_ops_t *cairn_kv_storage_host(void);

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_KV_STORAGE_H */
