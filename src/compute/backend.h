/*
 * backend.h — the compute backend interface: the operations a model family's forward pass
 * runs, the memory they run on, and the identity of the numerics they produce.
 *
 * Model (like ggml's struct ggml_backend_i). A backend is a table of function pointers
 * (compute_backend_ops_t) plus its private state. A family's forward pass calls the
 * compute_* wrappers below and never touches a kernel; the CPU backend
 * (src/compute/cpu/cpu_backend.c) is the first implementation, a CUDA backend (issue 15)
 * will be the second, and tests/compute/test_backend.c has a test double that records
 * every call. Adding a backend is one folder plus one line in backend.c's registry; it
 * edits no family, no other backend and nothing here.
 *
 * Memory. Every float* and void* an op takes is backend memory: host memory on the CPU
 * backend (`host_memory` true: callers may read and write it directly), device memory on
 * a device backend. Buffers come from compute_buffer_alloc, or wrap memory the caller
 * already has (mapped weights) through compute_buffer_from_host, which a device backend
 * implements as a copy. Row-major layouts throughout; shapes are given at each op.
 *
 * Errors. Ops return nothing: everything they could reject is checked when a model is
 * bound (compute_backend_require: element types, optional ops) and after that their
 * arguments are trusted (a violated precondition is a broken invariant). A backend that
 * runs asynchronously records a failure and reports it from compute_sync, which the
 * engine calls once per step; the CPU backend runs every op to completion before it
 * returns and its compute_sync always succeeds.
 *
 * DETERMINISM CONTRACT (every backend). For given inputs, an op's output bits depend only
 * on the numerics (compute_numerics_id) — never on how many rows share the call, which
 * other rows they are, the thread count, or how a caller chunked a sequence. Decode,
 * chunked prefill, batching and prefix hits rely on it for bit-identical logits, and the
 * cold tier relies on the numerics id: K/V written under one id are never read under
 * another (the model fingerprint includes it).
 *
 * Thread-safety: a backend object is used by one thread at a time (the engine thread);
 * ops may use worker threads internally. Distinct backend objects are independent.
 */
#ifndef CAIRN_COMPUTE_BACKEND_H
#define CAIRN_COMPUTE_BACKEND_H

#include "cairn/common.h"
#include "cairn/kv_storage.h"

/* Activation precision of matmul. F32: activations stay float32 (the exact mode; reference
 * checks). BF16: activations are rounded to bf16 for products with bf16 weights (fast
 * prefill); with other weight types a BF16 call computes exactly the F32 result. The
 * values are those of cairn_engine_options_t.math. */
typedef enum { CAIRN_MATH_F32 = 0, CAIRN_MATH_BF16 = 1 } cairn_math_t;

/* The activation of a gated MLP: out = act(gate) * up. */
typedef enum {
    COMPUTE_GLU_SILU = 0,      /* silu(g) = g / (1 + exp(-g))             (Llama, Qwen: SwiGLU) */
    COMPUTE_GLU_GELU_TANH = 1, /* g / (1 + exp(-2c(g + 0.044715 g^3))), c = sqrt(2/pi); the
                                * tanh approximation of GELU (Gemma: gelu_pytorch_tanh) */
    COMPUTE_GLU_SIGMOID = 2,   /* 1 / (1 + exp(-g))                        (output gates) */
    COMPUTE_GLU_COUNT
} compute_glu_t;

/* ---- operands ------------------------------------------------------------------------ */

/* A matrix in backend memory: [rows][cols] elements of `type`, rows packed
 * (cairn_dtype_row_bytes(type, cols) bytes apart). A vector is a 1 x n matrix. */
typedef struct {
    const void *data;
    cairn_dtype_t type;
    int rows, cols;
} compute_mat_t;

/* One product of a fused matmul: y [n_rows][w.rows] = x w^T (w.cols = the input width). */
typedef struct {
    float *y;
    compute_mat_t w;
} compute_mm_t;

/*
 * K/V of one sequence: maps (layer, pos) to its K and V rows, each [n_kv_heads * head_dim]
 * of the K/V type in backend memory, and returns how many consecutive positions from pos
 * are stored contiguously after them (>= 1). A position without storage — a block a
 * sliding window has dropped, a null entry of a block table — gives *k = *v = NULL and
 * the count of consecutive positions without storage: attention skips them (they are
 * masked). A return <= 0 is a broken invariant of the caller.
 */
typedef int (*attn_rows_fn)(void *ctx, int layer, int pos, void **k, void **v);

typedef struct {
    attn_rows_fn rows;
    void *ctx;
} attn_kv_t;

/* One query row: a token at position pos attends over its visible positions of kv. */
typedef struct {
    const float *q;       /* [n_heads * head_dim] rotated query */
    float *out;           /* [n_heads * head_dim] attention output */
    const attn_kv_t *kv;
    int pos;
} attn_query_t;

/* The shape and the math of one kind of attention layer (fixed when it is created). */
typedef struct {
    int n_heads, n_kv_heads, head_dim; /* query head h reads K/V head h / (n_heads / n_kv_heads) */
    cairn_dtype_t kv_type;
    int max_positions;   /* longest sequence (scratch is sized for it) */
    int window;          /* 0: full causal; W > 0: query p sees keys j with p - W < j <= p */
    float scale;         /* score = q.k * scale; 0 means 1 / sqrtf(head_dim) */
    float softcap;       /* 0: none; c > 0: score = c * tanhf(score / c) after the scale */
} compute_attn_params_t;

typedef struct compute_attn compute_attn_t;       /* the backend's state for one params */
typedef struct compute_backend compute_backend_t;

/* Backend memory. `data` is what the ops take; `bytes` its size. */
typedef struct {
    void *data;
    size_t bytes;
    void *handle; /* the backend's own (NULL for wrapped host memory on the CPU backend) */
} compute_buffer_t;

/* Operations a backend may lack; compute_backend_require reports them at bind time. */
typedef enum {
    COMPUTE_OP_MATMUL,     /* weights of a type: its matmul kernel */
    COMPUTE_OP_GET_ROWS,   /* embedding rows of a type */
    COMPUTE_OP_NORM,       /* norm weights of a type */
    COMPUTE_OP_KV,         /* K/V storage of a type (kv_store and attention) */
    COMPUTE_OP_SHORT_CONV, /* weights of a type */
    COMPUTE_OP_DELTA_RULE, /* type: CAIRN_DTYPE_F32 (operands and state are float32) */
    COMPUTE_OP_COUNT
} compute_op_t;

/* ---- the interface -------------------------------------------------------------------- */

typedef struct compute_backend_ops {
    const char *name;   /* "cpu" */
    bool host_memory;   /* backend memory is host memory */

    void (*destroy)(compute_backend_t *be);
    /* See compute_numerics_id. Static string. */
    const char *(*numerics_id)(const compute_backend_t *be, cairn_math_t math, cairn_dtype_t kv_dtype);
    /* See compute_supports. */
    bool (*supports)(const compute_backend_t *be, compute_op_t op, cairn_dtype_t type);

    /* Buffers (see compute_buffer_*). */
    int (*buffer_alloc)(compute_backend_t *be, size_t bytes, compute_buffer_t *out);
    int (*buffer_from_host)(compute_backend_t *be, const void *host, size_t bytes, compute_buffer_t *out);
    void (*buffer_free)(compute_backend_t *be, compute_buffer_t *buf);
    int (*buffer_write)(compute_backend_t *be, compute_buffer_t *buf, size_t off, const void *src, size_t n);
    int (*buffer_read)(compute_backend_t *be, const compute_buffer_t *buf, size_t off, void *dst, size_t n);
    int (*sync)(compute_backend_t *be);

    /* Ops: see the compute_* wrappers for each contract. */
    void (*matmul)(compute_backend_t *be, const float *x, int rows, int in, const compute_mm_t *outs,
                   int n, cairn_math_t math);
    void (*get_rows)(compute_backend_t *be, float *dst, compute_mat_t table, const int32_t *ids, int n);
    void (*rmsnorm)(compute_backend_t *be, float *out, const float *x, int rows, compute_mat_t w,
                    float eps, bool unit_offset);
    void (*rope_angles)(compute_backend_t *be, float *cos_sin, const float *inv_freq, int half,
                        const int *pos, int rows);
    void (*rope)(compute_backend_t *be, float *x, int rows, int n_heads, int head_dim, int rot_dims,
                 const float *cos_sin);
    void (*glu)(compute_backend_t *be, float *out, const float *gate, const float *up, size_t n,
                compute_glu_t act);
    void (*mul)(compute_backend_t *be, float *out, const float *a, const float *b, size_t n);
    void (*add)(compute_backend_t *be, float *x, const float *y, size_t n);
    void (*scale)(compute_backend_t *be, float *x, float s, size_t n);
    void (*kv_store)(compute_backend_t *be, void *dst, cairn_dtype_t type, const float *src, int n);
    int (*attn_create)(compute_backend_t *be, const compute_attn_params_t *p, compute_attn_t **out);
    void (*attn_destroy)(compute_backend_t *be, compute_attn_t *a);
    void (*attention)(compute_backend_t *be, compute_attn_t *a, int layer, const attn_query_t *queries,
                      int n);
    /* Where the K/V pool lives: NULL (or a NULL entry) means host memory
     * (cairn_kv_storage_host()); a device backend returns its storage backend and *ctx,
     * both valid for the backend's life, so kv_store and attention see the pool's bytes. */
    const cairn_kv_storage_ops_t *(*kv_storage)(compute_backend_t *be, void **ctx);
    /* Optional (NULL: the backend lacks it; compute_supports says so). */
    void (*short_conv)(compute_backend_t *be, float *out, const float *x, int n, compute_mat_t w,
                       float *state);
    void (*delta_rule)(compute_backend_t *be, float *out, const float *q, const float *k, const float *v,
                       const float *g, const float *beta, int n, int n_k_heads, int n_v_heads, int dk,
                       int dv, float *state);
    /* Optional, device backends (NULL: backend memory is host memory): see
     * compute_memory_info. */
    int (*memory_info)(compute_backend_t *be, uint64_t *free_bytes, uint64_t *total_bytes);
} compute_backend_ops_t;

/* Every backend object starts with this. */
struct compute_backend {
    const compute_backend_ops_t *ops;
};

/* ---- creating a backend (backend.c: the registry) ------------------------------------- */

typedef struct cairn_thread_pool cairn_thread_pool_t;

/* The CUDA backend (src/compute/cuda) reads its device from the knob CAIRN_CUDA_DEVICE
 * (default 0) and its mode from CAIRN_CUDA_INVARIANT (default 1: batch-invariant). */
typedef struct {
    int n_threads;             /* CPU: threads of the backend's own pool (>= 1; 0 means 1) */
    cairn_thread_pool_t *pool; /* CPU: use this pool instead (borrowed: it must outlive the
                                * backend, and no one else may run on it during an op) */
    const char *impl;          /* CPU: "scalar", "avx2", "avx512", "avx512-emubf16"; NULL: the
                                * process choice (the best the CPU runs, or CAIRN_KERNELS) */
} compute_backend_options_t;

/*
 * Creates the backend named `name` ("cpu"; NULL means "cpu"). CAIRN_ENOENT for a name no
 * backend has, CAIRN_EUNSUPPORTED when this build or machine cannot run it (e.g. an impl
 * the CPU lacks), CAIRN_EINVAL for bad options, CAIRN_ENOMEM. err receives a message.
 * The caller owns *out (compute_backend_destroy).
 */
int compute_backend_create(const char *name, const compute_backend_options_t *opt,
                           compute_backend_t **out, char *err, size_t err_len);
/* Names of the registered backends, NULL-terminated. */
const char *const *compute_backend_names(void);

static inline void compute_backend_destroy(compute_backend_t *be)
{
    if (be)
        be->ops->destroy(be);
}

/* ---- identity and capabilities -------------------------------------------------------- */

/*
 * The numerics id: a short string naming what bits this backend's ops produce in math
 * mode `math` with K/V stored as `kv_dtype` (the attention over a K/V type may compute
 * differently: the CPU's over q8_0 K takes q.k in integers, its own revision, and says so
 * in the id) — backend, implementation family, math mode. Two runs whose ids are equal
 * produce the same logits and the same K/V bytes for the same inputs; the model fingerprint
 * of the cold tier includes it, so K/V written under different numerics never mix on disk.
 * The canonical numerics of src/compute/cpu (every CPU implementation: scalar, AVX2,
 * AVX-512 follow one reduction order) have the ids "f32" and "bf16", the math-mode names
 * every fingerprint written so far already carries; any other numerics must use an id of
 * the form "<backend>-<family>-<mode>" (e.g. "cuda-wmma-bf16"), which cannot collide.
 * Static string, valid for the life of the process.
 */
static inline const char *compute_numerics_id(const compute_backend_t *be, cairn_math_t math,
                                              cairn_dtype_t kv_dtype)
{
    return be->ops->numerics_id(be, math, kv_dtype);
}

/* The storage backend the K/V pool must use with this backend (host memory: the host
 * backend), and its context in *ctx. */
static inline const cairn_kv_storage_ops_t *compute_kv_storage(compute_backend_t *be, void **ctx)
{
    *ctx = NULL;
    const cairn_kv_storage_ops_t *s = be->ops->kv_storage ? be->ops->kv_storage(be, ctx) : NULL;
    return s ? s : cairn_kv_storage_host();
}

/* The free and total bytes of a device backend's memory now (the CUDA backend:
 * cuMemGetInfo on its device), so callers size what they put there (the K/V pool) by the
 * device rather than by host memory. CAIRN_EUNSUPPORTED (both 0) for a backend whose
 * memory is host memory; CAIRN_EIO when the device cannot say. */
static inline int compute_memory_info(compute_backend_t *be, uint64_t *free_bytes, uint64_t *total_bytes)
{
    *free_bytes = *total_bytes = 0;
    return be->ops->memory_info ? be->ops->memory_info(be, free_bytes, total_bytes) : CAIRN_EUNSUPPORTED;
}

/* Whether the backend runs op with operands of `type` (see compute_op_t). */
static inline bool compute_supports(const compute_backend_t *be, compute_op_t op, cairn_dtype_t type)
{
    return be->ops->supports(be, op, type);
}

/* compute_supports, or CAIRN_EUNSUPPORTED with a message naming the backend, the op and
 * the type ("the cpu backend has no matmul kernel for q4_k"). Call at bind time. */
int compute_backend_require(const compute_backend_t *be, compute_op_t op, cairn_dtype_t type,
                            char *err, size_t err_len);

/* ---- buffers --------------------------------------------------------------------------- */

/* bytes of backend memory, 64-byte aligned, uninitialised. CAIRN_ENOMEM. */
static inline int compute_buffer_alloc(compute_backend_t *be, size_t bytes, compute_buffer_t *out)
{
    return be->ops->buffer_alloc(be, bytes, out);
}
/* Host memory the caller keeps alive as backend memory: wrapped (no copy) when
 * host_memory, copied otherwise. */
static inline int compute_buffer_from_host(compute_backend_t *be, const void *host, size_t bytes,
                                           compute_buffer_t *out)
{
    return be->ops->buffer_from_host(be, host, bytes, out);
}
/* Frees (or unwraps) a buffer; a zeroed buffer is a no-op. */
static inline void compute_buffer_free(compute_backend_t *be, compute_buffer_t *buf)
{
    be->ops->buffer_free(be, buf);
}
/* Host -> buffer and buffer -> host copies of n bytes at off; CAIRN_ERANGE past the end. */
static inline int compute_buffer_write(compute_backend_t *be, compute_buffer_t *buf, size_t off,
                                       const void *src, size_t n)
{
    return be->ops->buffer_write(be, buf, off, src, n);
}
static inline int compute_buffer_read(compute_backend_t *be, const compute_buffer_t *buf, size_t off,
                                      void *dst, size_t n)
{
    return be->ops->buffer_read(be, buf, off, dst, n);
}
/* Waits for every op issued so far; returns the first failure since the last sync. */
static inline int compute_sync(compute_backend_t *be) { return be->ops->sync(be); }

/* ---- ops ------------------------------------------------------------------------------- */

/*
 * y_i [rows][outs[i].w.rows] = x w_i^T for each of the n products, x [rows][in] f32, every
 * w_i [out_i][in] of any supported type; no y may alias x. Several products of one x
 * (q/k/v, gate/up) issued as one call are one parallel run on the CPU, with the same bits
 * as n separate calls. Row r of the result equals a one-row call on row r.
 */
static inline void compute_matmul(compute_backend_t *be, const float *x, int rows, int in,
                                  const compute_mm_t *outs, int n, cairn_math_t math)
{
    be->ops->matmul(be, x, rows, in, outs, n, math);
}

/* dst [n][table.cols] = rows ids[0..n) of table widened to f32 exactly (embeddings).
 * Every id must be < table.rows. ids [n] is host memory. */
static inline void compute_get_rows(compute_backend_t *be, float *dst, compute_mat_t table,
                                    const int32_t *ids, int n)
{
    be->ops->get_rows(be, dst, table, ids, n);
}

/*
 * RMSNorm of `rows` rows of n = w.cols: out[i] = ww[i] * (x[i] * s), s = 1 / sqrtf(ss / n +
 * eps), ss the sum of x^2 in the backend's canonical order, ww = w, or 1 + w (in float32)
 * when unit_offset (Gemma's zero-centred weights). HF LlamaRMSNorm / Gemma3RMSNorm in
 * float32. x, out [rows][n]; out may equal x.
 */
static inline void compute_rmsnorm(compute_backend_t *be, float *out, const float *x, int rows,
                                   compute_mat_t w, float eps, bool unit_offset)
{
    be->ops->rmsnorm(be, out, x, rows, w, eps, unit_offset);
}

/* cos_sin [rows][2*half]: pair i of row r = cosf, sinf of (float)pos[r] * inv_freq[i], the
 * angle one float32 product as HF computes it. inv_freq [half], pos [rows] are host memory. */
static inline void compute_rope_angles(compute_backend_t *be, float *cos_sin, const float *inv_freq,
                                       int half, const int *pos, int rows)
{
    be->ops->rope_angles(be, cos_sin, inv_freq, half, pos, rows);
}

/*
 * Rotates, in place, rows [rows][n_heads][head_dim]: in each head the first rot_dims
 * (even, <= head_dim) dimensions by rotate_half pairing (i, i + rot_dims/2) —
 * x' = x cos + rotate_half(x) sin, each product rounded then summed — with pair i of the
 * row's cos_sin [rows][rot_dims]; dimensions from rot_dims on pass through (partial
 * rotary, Qwen3.5's partial_rotary_factor).
 */
static inline void compute_rope(compute_backend_t *be, float *x, int rows, int n_heads, int head_dim,
                                int rot_dims, const float *cos_sin)
{
    be->ops->rope(be, x, rows, n_heads, head_dim, rot_dims, cos_sin);
}

/* out[i] = act(gate[i]) * up[i] (compute_glu_t), with the backend's canonical exp; out may
 * equal gate or up. */
static inline void compute_glu(compute_backend_t *be, float *out, const float *gate, const float *up,
                               size_t n, compute_glu_t act)
{
    be->ops->glu(be, out, gate, up, n, act);
}

/* out[i] = a[i] * b[i]; out may equal a or b. */
static inline void compute_mul(compute_backend_t *be, float *out, const float *a, const float *b, size_t n)
{
    be->ops->mul(be, out, a, b, n);
}

/* x[i] += y[i]. */
static inline void compute_add(compute_backend_t *be, float *x, const float *y, size_t n)
{
    be->ops->add(be, x, y, n);
}

/* x[i] *= s. */
static inline void compute_scale(compute_backend_t *be, float *x, float s, size_t n)
{
    be->ops->scale(be, x, s, n);
}

/* dst (n elements of type, a K or V row of the store) = src [n] rounded by the type's
 * reference rounding. */
static inline void compute_kv_store(compute_backend_t *be, void *dst, cairn_dtype_t type, const float *src,
                                    int n)
{
    be->ops->kv_store(be, dst, type, src, n);
}

/* The backend's state for attention of one shape and math (scratch); CAIRN_EINVAL for bad
 * params, CAIRN_EUNSUPPORTED for a K/V type the backend lacks, CAIRN_ENOMEM. */
static inline int compute_attn_create(compute_backend_t *be, const compute_attn_params_t *p,
                                      compute_attn_t **out)
{
    return be->ops->attn_create(be, p, out);
}
static inline void compute_attn_destroy(compute_backend_t *be, compute_attn_t *a)
{
    if (a)
        be->ops->attn_destroy(be, a);
}

/*
 * Causal grouped-query attention for n query rows of one layer: for each (query, head),
 * out = softmax(score(q, k_j)) . v over the visible keys j of the query's sequence — j <=
 * pos, inside the window, with storage (positions without storage are skipped) — where
 * score is q.k_j times scale, soft-capped when softcap > 0. Every visible key must be
 * stored before the call (the query's own position included). Queries of one sequence
 * should be adjacent (they share K/V tiles); any order gives the same bits.
 */
static inline void compute_attention(compute_backend_t *be, compute_attn_t *a, int layer,
                                     const attn_query_t *queries, int n)
{
    be->ops->attention(be, a, layer, queries, n);
}

/*
 * OPTIONAL (the CPU backend: src/compute/cpu/short_conv.c). Causal depthwise
 * convolution over n consecutive rows of ONE sequence, channels = w.rows, kernel length
 * L = w.cols (HF conv.weight [C][1][L] without bias):
 *   out[t][c] = sum_{j < L} w[c][j] * xs[t + j][c],  xs = state [L-1][channels] followed
 *   by x [n][channels] (the oldest row first);
 * afterwards state holds the last L-1 rows of xs. The reduction order over j must be fixed
 * and the same for any n, so that feeding a sequence in chunks gives the same bits.
 * out must not alias x or state.
 */
static inline void compute_short_conv(compute_backend_t *be, float *out, const float *x, int n,
                                      compute_mat_t w, float *state)
{
    CAIRN_ASSERT(be->ops->short_conv != NULL); /* checked at bind: compute_backend_require */
    be->ops->short_conv(be, out, x, n, w, state);
}

/*
 * OPTIONAL (the CPU backend runs src/compute/cpu/delta_rule.c). The gated delta rule over
 * n consecutive rows of ONE sequence, as HF's recurrent gated delta rule with
 * use_qk_l2norm_in_kernel: for each value head h (key head h / (n_v_heads / n_k_heads)),
 * with q, k l2-normalised by the op (eps 1e-6) and q then scaled by 1/sqrt(dk), for t in
 * order:
 *   S_h = S_h * exp(g[t][h]);  u = S_h^T k_t;  d = (v_t - u) * beta[t][h];
 *   S_h = S_h + k_t d^T;  out_t = S_h^T q_t.
 * q, k [n][n_k_heads][dk], v, out [n][n_v_heads][dv], g, beta [n][n_v_heads] (g is the
 * log-decay, beta already sigmoid-ed); state [n_v_heads][dk][dv] f32 in/out. Fixed
 * reduction orders, the same for any n (chunking never changes a bit).
 */
static inline void compute_delta_rule(compute_backend_t *be, float *out, const float *q, const float *k,
                                      const float *v, const float *g, const float *beta, int n,
                                      int n_k_heads, int n_v_heads, int dk, int dv, float *state)
{
    CAIRN_ASSERT(be->ops->delta_rule != NULL); /* checked at bind: compute_backend_require */
    be->ops->delta_rule(be, out, q, k, v, g, beta, n, n_k_heads, n_v_heads, dk, dv, state);
}

#endif
