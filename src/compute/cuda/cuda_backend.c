/*
 * cuda_backend.c — the CUDA compute backend's object and ops (cuda_backend.h): buffers,
 * the upload ring, errors and sync, and the row/elementwise ops on kernels.cu; matmul is
 * cuda_gemm.c, attention cuda_attention.c, the K/V pool cuda_kv_storage.c.
 *
 * What runs where: RoPE angles are computed on the host exactly as the CPU backend does
 * (cosf/sinf of (float)pos * inv_freq, float32) and uploaded, so both backends rotate by
 * the same angles; token ids, K/V store lists and attention tables go through the ring of
 * pinned slots (cuda_host.h). Buffers are cudaMalloc'd (256-byte aligned); weights are
 * copied once (buffer_from_host) through the pinned slots, 16 MiB at a time.
 *
 * Capabilities (compute_supports): matmul of bf16 (bf16 products) and f32 (f32 products)
 * weights; embeddings and norm weights of f32, f16, bf16; K/V storage bf16 only; no short
 * convolution or delta rule. Anything else is refused when a family binds a model.
 *
 * Profile (knob CAIRN_CUDA_PROFILE=1, off by default; session 8): every op is bracketed
 * by two timing events on the stream (the K/V store kernel that flush_kv issues by its
 * own pair), and the host time inside the op is taken; at each full synchronization the
 * pairs are read: GPU time per kind of op, the GPU's idle time between consecutive ops
 * (waiting for the host to issue the next one), the host's time blocked in syncs. The
 * totals are logged (INFO) when the backend is destroyed. The events cost host time
 * (~2 us per op), so the wall clock of a profiled run is not the plain one's; no result
 * changes.
 *
 * Thread-safety: one thread at a time per object.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compute/cuda/cuda_host.h"
#include "compute/type_traits.h"
#include "util/util.h"

static cuda_backend_t *cu(compute_backend_t *be) { return (cuda_backend_t *)be; }

/* ---- profile (CAIRN_CUDA_PROFILE) --------------------------------------------------------- */

enum { PK_MATMUL, PK_ATTN, PK_KV, PK_ROWS, PK_NORM, PK_ROPE, PK_ELEM, PK_COPY, PK_KINDS };
static const char *const pk_name[PK_KINDS] = {"matmul", "attention", "kv store", "embeddings",
                                              "rmsnorm", "rope", "elementwise", "buffer copies"};

struct cuda_prof {
    cudaEvent_t *ev;   /* [2 * cap]: start, end of each bracketed op since the last fold */
    int *kind;         /* [cap] */
    int n, cap, ev_made;
    int open;          /* the kind being bracketed, -1: none */
    double t_open;     /* host clock at its start */
    double gpu[PK_KINDS], host[PK_KINDS], idle, sync_wait, t_first, t_last;
    long calls[PK_KINDS];
    bool failed;       /* an event call failed: the profile stops (reported) */
};

/* Opens the bracket of one op of the given kind (PK_*): its start event on the stream and
 * the host clock; grows the event pool as needed (a failure stops the profile). */
static void prof_begin(cuda_backend_t *b, int kind)
{
    struct cuda_prof *p = b->prof;
    if (!p || p->failed)
        return;
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 4096;
        cudaEvent_t *ev = cairn_realloc(p->ev, (size_t)cap * 2 * sizeof(*ev));
        if (ev)
            p->ev = ev;
        int *k = ev ? cairn_realloc(p->kind, (size_t)cap * sizeof(*k)) : NULL;
        if (k)
            p->kind = k;
        if (!ev || !k) {
            p->failed = true;
            return;
        }
        p->cap = cap;
    }
    while (p->ev_made < 2 * (p->n + 1))
        if (cudaEventCreate(&p->ev[p->ev_made++]) != cudaSuccess) {
            p->ev_made--;
            p->failed = true;
            return;
        }
    if (cudaEventRecord(p->ev[2 * p->n], b->stream) != cudaSuccess) {
        p->failed = true;
        return;
    }
    p->open = kind;
    p->t_open = cairn_now_seconds();
    if (p->t_first == 0)
        p->t_first = p->t_open;
}

/* Closes the open bracket: its end event, the op's host time and call count. */
static void prof_end(cuda_backend_t *b)
{
    struct cuda_prof *p = b->prof;
    if (!p || p->failed || p->open < 0)
        return;
    if (cudaEventRecord(p->ev[2 * p->n + 1], b->stream) != cudaSuccess) {
        p->failed = true;
        return;
    }
    p->kind[p->n++] = p->open;
    p->host[p->open] += cairn_now_seconds() - p->t_open;
    p->calls[p->open]++;
    p->open = -1;
}

/* After a full stream synchronization (wait_s: the host's time blocked in it): reads the
 * brackets recorded since the last fold. */
static void prof_fold(cuda_backend_t *b, double wait_s)
{
    struct cuda_prof *p = b->prof;
    if (!p || p->failed)
        return;
    p->sync_wait += wait_s;
    for (int i = 0; i < p->n; i++) {
        float ms = 0, gap = 0;
        if (cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]) != cudaSuccess ||
            (i > 0 && cudaEventElapsedTime(&gap, p->ev[2 * i - 1], p->ev[2 * i]) != cudaSuccess)) {
            p->failed = true;
            return;
        }
        p->gpu[p->kind[i]] += ms * 1e-3;
        p->idle += gap * 1e-3;
    }
    p->n = 0;
    p->t_last = cairn_now_seconds();
}

/* A synchronization of the stream, timed for the profile. */
static cudaError_t prof_sync(cuda_backend_t *b)
{
    const double t0 = b->prof ? cairn_now_seconds() : 0;
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (b->prof && e == cudaSuccess)
        prof_fold(b, cairn_now_seconds() - t0);
    return e;
}

/* Logs the totals (INFO; WARN when an event call failed). */
static void prof_report(cuda_backend_t *b)
{
    struct cuda_prof *p = b->prof;
    if (!p)
        return;
    if (p->failed) {
        cairn_log(CAIRN_LOG_WARN, "cuda profile: an event call failed; no figures");
        return;
    }
    double gpu = 0;
    for (int k = 0; k < PK_KINDS; k++)
        gpu += p->gpu[k];
    cairn_log(CAIRN_LOG_INFO,
              "cuda profile: %.1f ms from the first op to the last sync; GPU busy in ops %.1f ms, idle between ops "
              "%.1f ms (within syncs), host blocked in syncs %.1f ms",
              (p->t_last - p->t_first) * 1e3, gpu * 1e3, p->idle * 1e3, p->sync_wait * 1e3);
    for (int k = 0; k < PK_KINDS; k++)
        if (p->calls[k])
            cairn_log(CAIRN_LOG_INFO, "cuda profile: %-13s %7ld calls, GPU %8.2f ms, host %8.2f ms", pk_name[k],
                      p->calls[k], p->gpu[k] * 1e3, p->host[k] * 1e3);
}

/* Destroys the events and frees the profile. */
static void prof_free(cuda_backend_t *b)
{
    struct cuda_prof *p = b->prof;
    if (!p)
        return;
    for (int i = 0; i < p->ev_made; i++)
        cudaEventDestroy(p->ev[i]);
    cairn_free(p->ev);
    cairn_free(p->kind);
    cairn_free(p);
    b->prof = NULL;
}

bool compute_cuda_invariant(const compute_backend_t *be) { return ((const cuda_backend_t *)be)->invariant; }

/* ---- errors ------------------------------------------------------------------------- */

void cuda__fail(cuda_backend_t *b, int rc, const char *what, int cuda_err)
{
    if (b->error)
        return;
    b->error = rc;
    if (cuda_err)
        cairn_log(CAIRN_LOG_ERROR, "cuda backend: %s failed: %s (%s)", what,
                  cudaGetErrorName((cudaError_t)cuda_err), cudaGetErrorString((cudaError_t)cuda_err));
    else
        cairn_log(CAIRN_LOG_ERROR, "cuda backend: %s failed (%s)", what, cairn_strerror(rc));
}

bool cuda__check(cuda_backend_t *b, int e, const char *what)
{
    if (e == cudaSuccess)
        return true;
    cuda__fail(b, e == cudaErrorMemoryAllocation ? CAIRN_ENOMEM : CAIRN_EIO, what, e);
    return false;
}

/* ---- the upload ring and the blob ------------------------------------------------------ */

void *cuda__stage(cuda_backend_t *b, size_t n, int *slot)
{
    const int k = b->next_slot;
    cuda_slot_t *s = &b->slots[k];
    b->next_slot = (k + 1) % CUDA_SLOTS;
    *slot = k;
    if (s->pending) {
        if (!cuda__check(b, cudaEventSynchronize(s->ev), "waiting for an upload slot"))
            return NULL;
        s->pending = false;
    }
    if (n > s->cap) {
        size_t cap = s->cap ? s->cap : 64 << 10;
        while (cap < n)
            cap *= 2;
        if (s->host)
            cudaFreeHost(s->host);
        s->host = NULL;
        s->cap = 0;
        if (!cuda__check(b, cudaHostAlloc(&s->host, cap, cudaHostAllocDefault), "allocating pinned memory"))
            return NULL;
        s->cap = cap;
    }
    return s->host;
}

static void slot_sent(cuda_backend_t *b, int slot)
{
    if (cuda__check(b, cudaEventRecord(b->slots[slot].ev, b->stream), "recording an upload"))
        b->slots[slot].pending = true;
}

bool cuda__grow(cuda_backend_t *b, void **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return true;
    size_t c = *cap ? *cap : 1 << 20;
    while (c < n)
        c *= 2;
    if (*p)
        cudaFreeAsync(*p, b->stream); /* after every kernel already queued */
    *p = NULL;
    *cap = 0;
    if (!cuda__check(b, cudaMallocAsync(p, c, b->stream), "allocating device scratch"))
        return false;
    *cap = c;
    return true;
}

void *cuda__stage_to_blob(cuda_backend_t *b, int slot, size_t n)
{
    if (!cuda__grow(b, &b->blob, &b->blob_cap, n))
        return NULL;
    if (!cuda__check(b, cudaMemcpyAsync(b->blob, b->slots[slot].host, n, cudaMemcpyHostToDevice, b->stream),
                     "uploading op parameters"))
        return NULL;
    slot_sent(b, slot);
    return b->blob;
}

void cuda__stage_to(cuda_backend_t *b, int slot, void *dst, size_t n)
{
    if (cuda__check(b, cudaMemcpyAsync(dst, b->slots[slot].host, n, cudaMemcpyHostToDevice, b->stream),
                    "uploading"))
        slot_sent(b, slot);
}

void cuda__flush_kv(cuda_backend_t *b)
{
    if (b->kv_n == 0)
        return;
    const int n = b->kv_n;
    b->kv_n = 0;
    int slot;
    size_t bytes = (size_t)n * sizeof(cuda_kv_store_t);
    void *h = cuda__stage(b, bytes, &slot);
    if (!h)
        return;
    memcpy(h, b->kv_pending, bytes);
    prof_begin(b, PK_KV);
    void *d = cuda__stage_to_blob(b, slot, bytes);
    if (d)
        cuda__check(b, cuda_k_kv_store(d, n, b->stream), "the K/V store kernel");
    prof_end(b);
}

/* ---- identity and capabilities ------------------------------------------------------- */

static const char *cuda_numerics_id(const compute_backend_t *be, cairn_math_t math, cairn_dtype_t kv_dtype)
{
    (void)math; /* both math modes round activations to bf16 for bf16 weights: same bits */
    (void)kv_dtype; /* bf16 K/V only (cuda_supports, COMPUTE_OP_KV) */
    return ((const cuda_backend_t *)be)->numerics;
}

static bool cuda_supports(const compute_backend_t *be, compute_op_t op, cairn_dtype_t t)
{
    (void)be;
    switch (op) {
    case COMPUTE_OP_MATMUL: return t == CAIRN_DTYPE_BF16 || t == CAIRN_DTYPE_F32;
    case COMPUTE_OP_GET_ROWS:
    case COMPUTE_OP_NORM: return t == CAIRN_DTYPE_BF16 || t == CAIRN_DTYPE_F16 || t == CAIRN_DTYPE_F32;
    case COMPUTE_OP_KV: return t == CAIRN_DTYPE_BF16;
    case COMPUTE_OP_SHORT_CONV:
    case COMPUTE_OP_DELTA_RULE: return false;
    case COMPUTE_OP_COUNT: break;
    }
    return false;
}

/* The kernels' element type of a supported cairn type. */
static int ktype(cairn_dtype_t t)
{
    return t == CAIRN_DTYPE_BF16 ? CUDA_T_BF16 : t == CAIRN_DTYPE_F16 ? CUDA_T_F16 : CUDA_T_F32;
}

/* ---- buffers --------------------------------------------------------------------------- */

static int cuda_buffer_alloc(compute_backend_t *be, size_t bytes, compute_buffer_t *out)
{
    cuda_backend_t *b = cu(be);
    memset(out, 0, sizeof(*out));
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cairn_log(CAIRN_LOG_ERROR, "cuda backend: cudaMalloc of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return e == cudaErrorMemoryAllocation ? CAIRN_ENOMEM : CAIRN_EIO;
    }
    (void)b;
    *out = (compute_buffer_t){p, bytes, p};
    return CAIRN_OK;
}

static int cuda_buffer_write(compute_backend_t *be, compute_buffer_t *buf, size_t off, const void *src, size_t n);

static int cuda_buffer_from_host(compute_backend_t *be, const void *host, size_t bytes, compute_buffer_t *out)
{
    int rc = cuda_buffer_alloc(be, bytes, out);
    if (rc == CAIRN_OK && (rc = cuda_buffer_write(be, out, 0, host, bytes)))
        compute_buffer_free(be, out);
    return rc;
}

static void cuda_buffer_free(compute_backend_t *be, compute_buffer_t *buf)
{
    cuda_backend_t *b = cu(be);
    if (buf->handle) {
        cuda__flush_kv(b);
        cudaStreamSynchronize(b->stream); /* no queued op may still read it */
        cudaFree(buf->handle);
    }
    memset(buf, 0, sizeof(*buf));
}

/* Host -> device through the ring's pinned slots, CHUNK bytes at a time: the memcpy into
 * one slot overlaps the copies out of the others. Synchronous for the caller. */
static int cuda_buffer_write(compute_backend_t *be, compute_buffer_t *buf, size_t off, const void *src, size_t n)
{
    enum { CHUNK = 16 << 20 };
    cuda_backend_t *b = cu(be);
    if (off > buf->bytes || n > buf->bytes - off)
        return CAIRN_ERANGE;
    cuda__flush_kv(b);
    prof_begin(b, PK_COPY);
    for (size_t done = 0; done < n;) {
        size_t len = n - done < CHUNK ? n - done : CHUNK;
        int slot;
        void *h = cuda__stage(b, len, &slot);
        if (!h)
            break;
        memcpy(h, (const unsigned char *)src + done, len);
        cuda__stage_to(b, slot, (unsigned char *)buf->data + off + done, len);
        done += len;
    }
    prof_end(b);
    cudaError_t e = prof_sync(b);
    cuda__check(b, e, "a buffer upload");
    int rc = b->error;
    return rc;
}

static int cuda_buffer_read(compute_backend_t *be, const compute_buffer_t *buf, size_t off, void *dst, size_t n)
{
    cuda_backend_t *b = cu(be);
    if (off > buf->bytes || n > buf->bytes - off)
        return CAIRN_ERANGE;
    cuda__flush_kv(b);
    prof_begin(b, PK_COPY);
    cuda__check(b, cudaMemcpyAsync(dst, (const unsigned char *)buf->data + off, n, cudaMemcpyDeviceToHost, b->stream),
                "a buffer download");
    prof_end(b);
    cuda__check(b, prof_sync(b), "a buffer download");
    return b->error;
}

static int cuda_sync(compute_backend_t *be)
{
    cuda_backend_t *b = cu(be);
    cuda__flush_kv(b);
    cuda__check(b, prof_sync(b), "the step");
    int rc = b->error;
    b->error = 0;
    return rc;
}

/* ---- ops -------------------------------------------------------------------------------- */

static void cuda_matmul(compute_backend_t *be, const float *x, int rows, int in, const compute_mm_t *outs, int n,
                        cairn_math_t math)
{
    (void)math;
    cuda_backend_t *b = cu(be);
    cuda__flush_kv(b);
    prof_begin(b, PK_MATMUL);
    cuda__matmul(b, x, rows, in, outs, n);
    prof_end(b);
}

static void cuda_get_rows(compute_backend_t *be, float *dst, compute_mat_t table, const int32_t *ids, int n)
{
    cuda_backend_t *b = cu(be);
    cuda__flush_kv(b);
    if (n <= 0)
        return;
    int slot;
    int32_t *h = cuda__stage(b, (size_t)n * sizeof(int32_t), &slot);
    if (!h)
        return;
    for (int i = 0; i < n; i++) {
        CAIRN_ASSERT(ids[i] >= 0 && ids[i] < table.rows);
        h[i] = ids[i];
    }
    prof_begin(b, PK_ROWS);
    const int32_t *d = cuda__stage_to_blob(b, slot, (size_t)n * sizeof(int32_t));
    if (d)
        cuda__check(b, cuda_k_get_rows(dst, table.data, ktype(table.type), table.cols, d, n, b->stream),
                    "the embedding kernel");
    prof_end(b);
}

static void cuda_rmsnorm(compute_backend_t *be, float *out, const float *x, int rows, compute_mat_t w, float eps,
                         bool unit_offset)
{
    cuda_backend_t *b = cu(be);
    cuda__flush_kv(b);
    prof_begin(b, PK_NORM);
    cuda__check(b, cuda_k_rmsnorm(out, x, rows, w.cols, w.data, ktype(w.type), eps, unit_offset, b->stream),
                "the rmsnorm kernel");
    prof_end(b);
}

static void cuda_rope_angles(compute_backend_t *be, float *cos_sin, const float *inv_freq, int half, const int *pos,
                             int rows)
{
    cuda_backend_t *b = cu(be);
    cuda__flush_kv(b);
    if (rows <= 0 || half <= 0)
        return;
    const size_t bytes = (size_t)rows * 2 * half * sizeof(float);
    int slot;
    float *h = cuda__stage(b, bytes, &slot);
    if (!h)
        return;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < half; i++) {
            float angle = (float)pos[r] * inv_freq[i]; /* float32 product, as HF and the CPU backend */
            h[(size_t)r * 2 * half + 2 * i] = cosf(angle);
            h[(size_t)r * 2 * half + 2 * i + 1] = sinf(angle);
        }
    prof_begin(b, PK_ROPE);
    cuda__stage_to(b, slot, cos_sin, bytes);
    prof_end(b);
}

static void cuda_rope(compute_backend_t *be, float *x, int rows, int n_heads, int head_dim, int rot_dims,
                      const float *cos_sin)
{
    cuda_backend_t *b = cu(be);
    cuda__flush_kv(b);
    CAIRN_ASSERT(rot_dims >= 0 && rot_dims % 2 == 0 && rot_dims <= head_dim);
    prof_begin(b, PK_ROPE);
    cuda__check(b, cuda_k_rope(x, rows, n_heads, head_dim, rot_dims, cos_sin, b->stream), "the rope kernel");
    prof_end(b);
}

static void cuda_glu(compute_backend_t *be, float *out, const float *gate, const float *up, size_t n, compute_glu_t act)
{
    cuda_backend_t *b = cu(be);
    cuda__flush_kv(b);
    CAIRN_ASSERT((unsigned)act < COMPUTE_GLU_COUNT);
    prof_begin(b, PK_ELEM);
    cuda__check(b, cuda_k_glu(out, gate, up, n, (int)act, b->stream), "the glu kernel");
    prof_end(b);
}

static void cuda_mul(compute_backend_t *be, float *out, const float *a, const float *bb, size_t n)
{
    cuda_backend_t *b = cu(be);
    cuda__flush_kv(b);
    prof_begin(b, PK_ELEM);
    cuda__check(b, cuda_k_mul(out, a, bb, n, b->stream), "the mul kernel");
    prof_end(b);
}

static void cuda_add(compute_backend_t *be, float *x, const float *y, size_t n)
{
    cuda_backend_t *b = cu(be);
    cuda__flush_kv(b);
    prof_begin(b, PK_ELEM);
    cuda__check(b, cuda_k_add(x, y, n, b->stream), "the add kernel");
    prof_end(b);
}

static void cuda_scale(compute_backend_t *be, float *x, float s, size_t n)
{
    cuda_backend_t *b = cu(be);
    cuda__flush_kv(b);
    prof_begin(b, PK_ELEM);
    cuda__check(b, cuda_k_scale(x, s, n, b->stream), "the scale kernel");
    prof_end(b);
}

/* Queued: one kernel writes every store before the next op (cuda__flush_kv). */
static void cuda_kv_store(compute_backend_t *be, void *dst, cairn_dtype_t type, const float *src, int n)
{
    cuda_backend_t *b = cu(be);
    CAIRN_ASSERT(type == CAIRN_DTYPE_BF16); /* checked at bind (COMPUTE_OP_KV) */
    if (cairn_grow_array_int((void **)&b->kv_pending, &b->kv_cap, b->kv_n + 1, sizeof(*b->kv_pending), 1024)) {
        cuda__fail(b, CAIRN_ENOMEM, "queueing a K/V store", 0);
        return;
    }
    b->kv_pending[b->kv_n++] = (cuda_kv_store_t){dst, src, n, 0};
}

static int cuda_attn_create(compute_backend_t *be, const compute_attn_params_t *p, compute_attn_t **out)
{
    return cuda__attn_create(cu(be), p, out);
}

static void cuda_attn_destroy(compute_backend_t *be, compute_attn_t *a) { cuda__attn_destroy(cu(be), a); }

static void cuda_attention(compute_backend_t *be, compute_attn_t *a, int layer, const attn_query_t *queries, int n)
{
    cuda_backend_t *b = cu(be);
    cuda__flush_kv(b);
    prof_begin(b, PK_ATTN);
    cuda__attention(b, a, layer, queries, n);
    prof_end(b);
}

static const cairn_kv_storage_ops_t *cuda_kv_storage(compute_backend_t *be, void **ctx)
{
    *ctx = &cu(be)->kvs;
    return &cuda__kv_storage_ops;
}

static void cuda_destroy(compute_backend_t *be)
{
    cuda_backend_t *b = cu(be);
    if (b->stream && prof_sync(b) == cudaSuccess)
        prof_report(b);
    prof_free(b);
    cuda__gemm_fini(b);
    cuda__kv_storage_fini(b);
    if (b->blob)
        cudaFree(b->blob);
    if (b->xbf)
        cudaFree(b->xbf);
    if (b->partials)
        cudaFree(b->partials);
    if (b->tickets)
        cudaFree(b->tickets);
    for (int i = 0; i < CUDA_SLOTS; i++) {
        if (b->slots[i].host)
            cudaFreeHost(b->slots[i].host);
        if (b->slots[i].ev)
            cudaEventDestroy(b->slots[i].ev);
    }
    if (b->stream)
        cudaStreamDestroy(b->stream);
    cairn_free(b->kv_pending);
    cairn_free(b);
}

/* cuMemGetInfo on the backend's device (the runtime's primary context, made current on
 * this thread first). */
static int cuda_memory_info(compute_backend_t *be, uint64_t *free_bytes, uint64_t *total_bytes)
{
    cuda_backend_t *b = (cuda_backend_t *)be;
    size_t fr = 0, tot = 0;
    cudaError_t e = cudaSetDevice(b->device);
    CUresult r = e == cudaSuccess ? cuMemGetInfo(&fr, &tot) : CUDA_ERROR_INVALID_CONTEXT;
    if (r != CUDA_SUCCESS) {
        const char *msg = NULL;
        cuGetErrorString(r, &msg);
        cairn_log(CAIRN_LOG_ERROR, "cuda backend: cuMemGetInfo on device %d failed: %s", b->device,
                  e != cudaSuccess ? cudaGetErrorString(e) : msg ? msg : "unknown error");
        return CAIRN_EIO;
    }
    *free_bytes = fr;
    *total_bytes = tot;
    return CAIRN_OK;
}

static const compute_backend_ops_t ops = {
    .name = "cuda",
    .host_memory = false,
    .destroy = cuda_destroy,
    .numerics_id = cuda_numerics_id,
    .supports = cuda_supports,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_from_host = cuda_buffer_from_host,
    .buffer_free = cuda_buffer_free,
    .buffer_write = cuda_buffer_write,
    .buffer_read = cuda_buffer_read,
    .sync = cuda_sync,
    .matmul = cuda_matmul,
    .get_rows = cuda_get_rows,
    .rmsnorm = cuda_rmsnorm,
    .rope_angles = cuda_rope_angles,
    .rope = cuda_rope,
    .glu = cuda_glu,
    .mul = cuda_mul,
    .add = cuda_add,
    .scale = cuda_scale,
    .kv_store = cuda_kv_store,
    .attn_create = cuda_attn_create,
    .attn_destroy = cuda_attn_destroy,
    .attention = cuda_attention,
    .kv_storage = cuda_kv_storage,
    .short_conv = NULL,
    .delta_rule = NULL,
    .memory_info = cuda_memory_info,
};

int compute_cuda_create(const compute_backend_options_t *opt, compute_backend_t **out, char *err, size_t err_len)
{
    (void)opt;
    *out = NULL;
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev < 1) {
        cairn_errf(err, err_len, "cuda backend: no CUDA device (%s)",
                   e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        (void)cudaGetLastError();
        return CAIRN_EUNSUPPORTED;
    }
    const int dev = (int)cairn_knob_int("CAIRN_CUDA_DEVICE", false, 0, 0, 0, 1023);
    if (dev >= n_dev) {
        cairn_errf(err, err_len, "cuda backend: CAIRN_CUDA_DEVICE names a device this machine lacks (it has %d)", n_dev);
        return CAIRN_EUNSUPPORTED;
    }
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess || (e = cudaSetDevice(dev)) != cudaSuccess) {
        cairn_errf(err, err_len, "cuda backend: cannot use the device (%s)", cudaGetErrorString(e));
        return CAIRN_EUNSUPPORTED;
    }
    if (prop.major < 9) {
        cairn_errf(err, err_len, "cuda backend: %s is not sm_90 or newer (this build targets Hopper)", prop.name);
        return CAIRN_EUNSUPPORTED;
    }
    cuda_backend_t *b = cairn_calloc(1, sizeof(*b));
    if (!b) {
        cairn_errf(err, err_len, "%s", "cuda backend: out of memory");
        return CAIRN_ENOMEM;
    }
    b->base.ops = &ops;
    b->device = dev;
    b->sm_count = prop.multiProcessorCount;
    b->cc_major = prop.major;
    b->cc_minor = prop.minor;
    b->invariant = cairn_knob_bool("CAIRN_CUDA_INVARIANT", false, true, true);
    b->long_splits = cairn_knob_bool("CAIRN_CUDA_LONG_SPLITS", false, true, true);
    if (cairn_knob_bool("CAIRN_CUDA_PROFILE", false, false, false)) {
        b->prof = cairn_calloc(1, sizeof(*b->prof));
        if (!b->prof) {
            cairn_errf(err, err_len, "%s", "cuda backend: out of memory");
            cairn_free(b);
            return CAIRN_ENOMEM;
        }
        b->prof->open = -1;
    }
    int rc = CAIRN_EIO;
    if ((e = cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking)) != cudaSuccess)
        goto fail;
    for (int i = 0; i < CUDA_SLOTS; i++)
        if ((e = cudaEventCreateWithFlags(&b->slots[i].ev, cudaEventDisableTiming)) != cudaSuccess)
            goto fail;
    if ((rc = cuda__gemm_init(b)) || (rc = cuda__kv_storage_init(b))) {
        e = cudaSuccess;
        goto fail;
    }
    char suffix[24];
    cuda__gemm_id_suffix(b, suffix, sizeof(suffix));
    snprintf(b->numerics, sizeof(b->numerics), "cuda-sm%d%dcublaslt%zu-%s%s.%d", b->cc_major, b->cc_minor,
             cublasLtGetVersion(), b->invariant ? "inv" : "fast", suffix,
             b->long_splits ? CUDA_NUMERICS_REV : CUDA_NUMERICS_REV_SHORT);
    cairn_log(CAIRN_LOG_INFO, "cuda backend: %s (%d SMs), %s mode, numerics %s", prop.name, b->sm_count,
              b->invariant ? "batch-invariant" : "fast", b->numerics);
    *out = &b->base;
    return CAIRN_OK;
fail:
    if (err && err_len)
        snprintf(err, err_len, "cuda backend: set-up failed (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : cairn_strerror(rc));
    cuda_destroy(&b->base);
    return rc ? rc : CAIRN_EIO;
}
