/*
 * kv_storage.c — the host-memory storage backend of the physical KV pool.
 *
 * Owns nothing beyond the mapping it hands out: reserve() maps the maximum range once as
 * PROT_NONE with MAP_NORESERVE (address space only, no commit charge), commit() flips a
 * growing prefix to PROT_READ|PROT_WRITE with mprotect (the kernel then charges and
 * materialises pages on first touch; 4 KiB pages unless CAIRN_KV_HUGEPAGES=1), release()
 * unmaps the whole range. Growing never
 * copies or moves data. Stateless, so thread-safe; a given range belongs to one cache.
 */
#include "cairn/kv_storage.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t host_granularity(void *ctx)
{
    (void)ctx;
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static int host_reserve(void *ctx, size_t max_bytes, uint8_t **base)
{
    (void)ctx;
    void *p = mmap(NULL, max_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        cairn_log(CAIRN_LOG_ERROR, "kv storage: reserving %zu bytes failed: %s", max_bytes,
                  strerror(errno));
        return CAIRN_ENOMEM;
    }
    /* 4 KiB pages by default (MADV_NOHUGEPAGE, so a system whose transparent huge pages are
     * "always" does not hand the pool 2 MiB pages); CAIRN_KV_HUGEPAGES=1 asks for huge pages.
     * Measured on the 2-core development VM (docs/PERFORMANCE.md, session 6's idle window):
     * fresh huge pages cost 1.9-3.0 s of CPU per GiB to materialise there (its host reclaims
     * the guest's free memory), which made a restore's speed swing between 34% and 153% of
     * the disk's (TTFT after a restart 1.16-3.33 s) against 83-135% with 4 KiB pages
     * (1.09-2.23 s); an 8K-token prefill was 12% faster with 4 KiB pages (means of two) and decode the
     * same. Huge pages still save page faults where those are dear and fresh memory cheap. */
#ifdef MADV_HUGEPAGE
    (void)madvise(p, max_bytes,
                  cairn_knob_bool("CAIRN_KV_HUGEPAGES", false, false, false) ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
    *base = p;
    return CAIRN_OK;
}

static int host_commit(void *ctx, uint8_t *base, size_t old_bytes, size_t new_bytes)
{
    (void)ctx;
    if (new_bytes <= old_bytes)
        return CAIRN_OK;
    if (mprotect(base + old_bytes, new_bytes - old_bytes, PROT_READ | PROT_WRITE) != 0) {
        cairn_log(CAIRN_LOG_ERROR, "kv storage: committing %zu bytes failed: %s",
                  new_bytes - old_bytes, strerror(errno));
        return CAIRN_ENOMEM;
    }
    return CAIRN_OK;
}

static void host_copy(void *ctx, uint8_t *dst, const uint8_t *src, size_t n)
{
    (void)ctx;
    memcpy(dst, src, n);
}

static void host_release(void *ctx, uint8_t *base, size_t max_bytes)
{
    (void)ctx;
    if (base)
        munmap(base, max_bytes);
}

static const cairn_kv_storage_ops_t host_ops = {
    .name = "host",
    .granularity = host_granularity,
    .reserve = host_reserve,
    .commit = host_commit,
    .copy = host_copy,
    .release = host_release,
};

const cairn_kv_storage_ops_t *cairn_kv_storage_host(void)
{
    return &host_ops;
}
