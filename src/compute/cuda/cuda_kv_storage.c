/*
 * cuda_kv_storage.c — the K/V pool in device memory: the storage backend of
 * include/cairn/kv_storage.h on CUDA's virtual memory management.
 *
 * reserve() takes one virtual address range for the pool's maximum (cuMemAddressReserve,
 * nothing physical); commit() backs [old, new) with a new physical allocation
 * (cuMemCreate), maps it there (cuMemMap) and grants the device read/write
 * (cuMemSetAccess); release() unmaps and frees every chunk and the range. So the pool
 * grows without moving or copying a block and every block pointer stays valid, exactly as
 * the host backend's mmap/mprotect. Block copies (copy-on-write) and the cold tier's
 * staging copies run on the backend's stream, ordered with the kernels that write and
 * read the pool. Staging: two pinned host buffers, each with the event of its last copy.
 *
 * Thread-safety: one cache, on the engine thread (kv_storage.h).
 */
#include <string.h>

#include "compute/cuda/cuda_host.h"
#include "util/util.h"

static bool drv_ok(cuda_kv_storage_t *s, CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return true;
    const char *name = NULL;
    cuGetErrorName(r, &name);
    cairn_log(CAIRN_LOG_ERROR, "cuda kv storage: %s failed: %s", what, name ? name : "?");
    (void)s;
    return false;
}

static CUmemAllocationProp alloc_prop(const cuda_kv_storage_t *s)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = s->be->device;
    return p;
}

int cuda__kv_storage_init(cuda_backend_t *b)
{
    cuda_kv_storage_t *s = &b->kvs;
    memset(s, 0, sizeof(*s));
    s->be = b;
    cudaFree(0); /* the primary context is current: the driver calls below need it */
    CUmemAllocationProp p = alloc_prop(s);
    if (!drv_ok(s, cuMemGetAllocationGranularity(&s->gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                "cuMemGetAllocationGranularity"))
        return CAIRN_EUNSUPPORTED;
    for (int i = 0; i < 2; i++)
        if (cudaEventCreateWithFlags(&s->ev[i], cudaEventDisableTiming) != cudaSuccess)
            return CAIRN_EIO;
    return CAIRN_OK;
}

void cuda__kv_storage_fini(cuda_backend_t *b)
{
    cuda_kv_storage_t *s = &b->kvs;
    for (int i = 0; i < 2; i++) {
        if (s->stage[i])
            cudaFreeHost(s->stage[i]);
        if (s->ev[i])
            cudaEventDestroy(s->ev[i]);
    }
    cairn_free(s->maps);
    memset(s, 0, sizeof(*s));
}

static size_t kvs_granularity(void *ctx) { return ((cuda_kv_storage_t *)ctx)->gran; }

static int kvs_reserve(void *ctx, size_t max_bytes, uint8_t **base)
{
    cuda_kv_storage_t *s = ctx;
    cudaSetDevice(s->be->device);
    CUdeviceptr p = 0;
    if (!drv_ok(s, cuMemAddressReserve(&p, max_bytes, s->gran, 0, 0), "cuMemAddressReserve"))
        return CAIRN_ENOMEM;
    *base = (uint8_t *)(uintptr_t)p;
    return CAIRN_OK;
}

static int kvs_commit(void *ctx, uint8_t *base, size_t old_bytes, size_t new_bytes)
{
    cuda_kv_storage_t *s = ctx;
    if (new_bytes <= old_bytes)
        return CAIRN_OK;
    cudaSetDevice(s->be->device);
    if (cairn_grow_array_int((void **)&s->maps, &s->cap_maps, s->n_maps + 1, sizeof(*s->maps), 16))
        return CAIRN_ENOMEM;
    const size_t size = new_bytes - old_bytes;
    const CUdeviceptr at = (CUdeviceptr)(uintptr_t)(base + old_bytes);
    CUmemAllocationProp p = alloc_prop(s);
    CUmemGenericAllocationHandle h;
    if (!drv_ok(s, cuMemCreate(&h, size, &p, 0), "cuMemCreate"))
        return CAIRN_ENOMEM;
    if (!drv_ok(s, cuMemMap(at, size, 0, h, 0), "cuMemMap")) {
        cuMemRelease(h);
        return CAIRN_ENOMEM;
    }
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = s->be->device;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (!drv_ok(s, cuMemSetAccess(at, size, &acc, 1), "cuMemSetAccess")) {
        cuMemUnmap(at, size);
        cuMemRelease(h);
        return CAIRN_ENOMEM;
    }
    s->maps[s->n_maps++] = (struct cuda_map){old_bytes, size, h};
    return CAIRN_OK;
}

static void kvs_copy(void *ctx, uint8_t *dst, const uint8_t *src, size_t n)
{
    cuda_kv_storage_t *s = ctx;
    cuda__flush_kv(s->be);
    cuda__check(s->be, cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s->be->stream), "a K/V block copy");
}

static void kvs_release(void *ctx, uint8_t *base, size_t max_bytes)
{
    cuda_kv_storage_t *s = ctx;
    if (!base)
        return;
    cudaSetDevice(s->be->device);
    cudaStreamSynchronize(s->be->stream);
    for (int i = s->n_maps - 1; i >= 0; i--) {
        cuMemUnmap((CUdeviceptr)(uintptr_t)(base + s->maps[i].off), s->maps[i].size);
        cuMemRelease(s->maps[i].h);
    }
    s->n_maps = 0;
    cuMemAddressFree((CUdeviceptr)(uintptr_t)base, max_bytes);
}

/* ---- staging ------------------------------------------------------------------------- */

static bool stage_wait(cuda_kv_storage_t *s, int slot)
{
    if (!s->pending[slot])
        return true;
    s->pending[slot] = false;
    if (cudaEventSynchronize(s->ev[slot]) != cudaSuccess) {
        if (!s->error)
            s->error = CAIRN_EIO;
        return false;
    }
    return true;
}

static bool stage_reserve(cuda_kv_storage_t *s, int slot, size_t n)
{
    if (n <= s->stage_cap[slot])
        return true;
    if (s->stage[slot])
        cudaFreeHost(s->stage[slot]);
    s->stage[slot] = NULL;
    s->stage_cap[slot] = 0;
    if (cudaHostAlloc(&s->stage[slot], n, cudaHostAllocDefault) != cudaSuccess) {
        if (!s->error)
            s->error = CAIRN_ENOMEM;
        return false;
    }
    s->stage_cap[slot] = n;
    return true;
}

static void *kvs_stage(void *ctx, int slot, size_t n)
{
    cuda_kv_storage_t *s = ctx;
    if ((unsigned)slot > 1 || !stage_wait(s, slot) || s->error || !stage_reserve(s, slot, n))
        return NULL;
    return s->stage[slot];
}

static int queued(cuda_kv_storage_t *s, int slot, cudaError_t e)
{
    if (e == cudaSuccess)
        e = cudaEventRecord(s->ev[slot], s->be->stream);
    if (e != cudaSuccess) {
        if (!s->error)
            s->error = CAIRN_EIO;
        return CAIRN_EIO;
    }
    s->pending[slot] = true;
    return CAIRN_OK;
}

static int kvs_stage_upload(void *ctx, int slot, uint8_t *dst, size_t n)
{
    cuda_kv_storage_t *s = ctx;
    if ((unsigned)slot > 1 || n > s->stage_cap[slot])
        return CAIRN_EINVAL;
    return queued(s, slot, cudaMemcpyAsync(dst, s->stage[slot], n, cudaMemcpyHostToDevice, s->be->stream));
}

static int kvs_stage_download(void *ctx, int slot, const uint8_t *src, size_t n)
{
    cuda_kv_storage_t *s = ctx;
    if ((unsigned)slot > 1 || !stage_wait(s, slot) || !stage_reserve(s, slot, n))
        return s->error ? s->error : CAIRN_EINVAL;
    cuda__flush_kv(s->be); /* the block's queued K/V stores first */
    return queued(s, slot, cudaMemcpyAsync(s->stage[slot], src, n, cudaMemcpyDeviceToHost, s->be->stream));
}

static int kvs_stage_sync(void *ctx)
{
    cuda_kv_storage_t *s = ctx;
    if (cudaStreamSynchronize(s->be->stream) != cudaSuccess && !s->error)
        s->error = CAIRN_EIO;
    s->pending[0] = s->pending[1] = false;
    int rc = s->error;
    s->error = 0;
    return rc;
}

const cairn_kv_storage_ops_t cuda__kv_storage_ops = {
    .name = "cuda",
    .granularity = kvs_granularity,
    .reserve = kvs_reserve,
    .commit = kvs_commit,
    .copy = kvs_copy,
    .release = kvs_release,
    .stage = kvs_stage,
    .stage_upload = kvs_stage_upload,
    .stage_download = kvs_stage_download,
    .stage_sync = kvs_stage_sync,
};
