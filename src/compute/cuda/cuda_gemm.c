/*
 * cuda_gemm.c — the CUDA backend's matrix products on cuBLASLt: y [rows][out] = x w^T.
 *
 * In cuBLASLt's column-major terms y^T (out x rows) = W (op T on the row-major [out][in]
 * weight, ld in) x x^T (ld in), a "TN" product with m = out, n = rows, k = in. bf16 weights
 * take x rounded to bf16 (one conversion per call, shared by the call's products) and
 * accumulate in float32 (CUBLAS_COMPUTE_32F); f32 weights take x as is in float32.
 *
 * Batch invariance. cuBLASLt's heuristic picks kernels by the row count (tile shapes,
 * split-K, stream-K with a workspace), so a row's bits would change with the batch. In the
 * invariant mode each (weight type, out, in) shape gets ONE algorithm, chosen once from the
 * heuristic's answer for CAIRN_CUDA_GEMM_REF_ROWS rows (default 256) with no workspace
 * (which rules out the split-K and stream-K variants that need one), split-K forced to 1,
 * and checked to accept a single row; every call of that shape runs it whatever its row
 * count, so each output element is one fixed k-loop. CAIRN_CUDA_GEMM_ALGO=k takes the k-th
 * acceptable answer instead of the first (for measurements); both knobs enter the numerics
 * id. The fast mode asks the heuristic for every (shape, rows) with a 32 MiB workspace.
 *
 * Thread-safety: one thread at a time per backend object.
 */
#include <stdio.h>
#include <string.h>

#include "compute/cuda/cuda_host.h"
#include "util/util.h"

#define FAST_WS_BYTES ((size_t)32 << 20)

/* Rows of W per product when a shape has no invariant algorithm as a whole (the lm_head's
 * 151936 rows): the product runs as chunks of this many output rows, each its own shape.
 * Fixed by the shape, never by the row count, so chunking keeps every bit. */
#define CHUNK_M 32768

typedef struct {
    cairn_dtype_t wtype;
    int out, in, ldc;          /* m = out rows of W here; y's leading dimension */
    int rows_key;              /* 0 in the invariant mode; the row count in the fast mode */
    bool chunked;              /* no algorithm for the whole: run CHUNK_M-row chunks */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
    int lrows;                 /* the cached x / y layouts are for this many rows (0: none) */
    cublasLtMatrixLayout_t bl, cl;
} gemm_entry_t;

struct cuda_gemm_cache {
    gemm_entry_t *e;
    int n, cap;
    int ref_rows, algo_index;
};

static void layouts_free(cublasLtMatrixLayout_t bl, cublasLtMatrixLayout_t cl);

int cuda__gemm_init(cuda_backend_t *b)
{
    if (cublasLtCreate(&b->lt) != CUBLAS_STATUS_SUCCESS) {
        cairn_log(CAIRN_LOG_ERROR, "cuda backend: cublasLtCreate failed");
        return CAIRN_EIO;
    }
    b->gemm = cairn_calloc(1, sizeof(*b->gemm));
    if (!b->gemm)
        return CAIRN_ENOMEM;
    b->gemm->ref_rows = (int)cairn_knob_int("CAIRN_CUDA_GEMM_REF_ROWS", false, 0, 256, 1, 65536);
    b->gemm->algo_index = (int)cairn_knob_int("CAIRN_CUDA_GEMM_ALGO", false, 0, 0, 0, 63);
    if (!b->invariant) {
        if (cudaMalloc(&b->ws, FAST_WS_BYTES) != cudaSuccess)
            return CAIRN_ENOMEM;
        b->ws_bytes = FAST_WS_BYTES;
    }
    return CAIRN_OK;
}

void cuda__gemm_id_suffix(const cuda_backend_t *b, char *buf, size_t len)
{
    buf[0] = '\0';
    if (b->invariant && (b->gemm->ref_rows != 256 || b->gemm->algo_index))
        snprintf(buf, len, "r%da%d", b->gemm->ref_rows, b->gemm->algo_index);
}

void cuda__gemm_fini(cuda_backend_t *b)
{
    if (b->gemm) {
        for (int i = 0; i < b->gemm->n; i++) {
            cublasLtMatmulDescDestroy(b->gemm->e[i].op);
            cublasLtMatrixLayoutDestroy(b->gemm->e[i].a);
            layouts_free(b->gemm->e[i].bl, b->gemm->e[i].cl);
        }
        cairn_free(b->gemm->e);
        cairn_free(b->gemm);
        b->gemm = NULL;
    }
    if (b->ws)
        cudaFree(b->ws);
    b->ws = NULL;
    if (b->lt)
        cublasLtDestroy(b->lt);
    b->lt = NULL;
}

static cudaDataType_t dt(cairn_dtype_t t) { return t == CAIRN_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* The layout of x (k x rows) and y (out x rows, leading dimension ldc); NULL-safe destroy
 * by the caller. */
static bool layouts(cairn_dtype_t wt, int out, int in, int ldc, int rows, cublasLtMatrixLayout_t *bl,
                    cublasLtMatrixLayout_t *cl)
{
    *bl = *cl = NULL;
    return cublasLtMatrixLayoutCreate(bl, dt(wt), (uint64_t)in, (uint64_t)rows, in) == CUBLAS_STATUS_SUCCESS &&
           cublasLtMatrixLayoutCreate(cl, CUDA_R_32F, (uint64_t)out, (uint64_t)rows, ldc) == CUBLAS_STATUS_SUCCESS;
}

static void layouts_free(cublasLtMatrixLayout_t bl, cublasLtMatrixLayout_t cl)
{
    if (bl)
        cublasLtMatrixLayoutDestroy(bl);
    if (cl)
        cublasLtMatrixLayoutDestroy(cl);
}

/* Whether algo runs the shape for `rows` rows (cublasLtMatmulAlgoCheck). */
static bool algo_ok(cuda_backend_t *b, const gemm_entry_t *e, const cublasLtMatmulAlgo_t *algo, int rows,
                    size_t max_ws)
{
    cublasLtMatrixLayout_t bl, cl;
    bool ok = layouts(e->wtype, e->out, e->in, e->ldc, rows, &bl, &cl);
    cublasLtMatmulHeuristicResult_t r;
    ok = ok && cublasLtMatmulAlgoCheck(b->lt, e->op, e->a, bl, cl, cl, algo, &r) == CUBLAS_STATUS_SUCCESS &&
         r.workspaceSize <= max_ws;
    layouts_free(bl, cl);
    return ok;
}

/* Picks the entry's algorithm from the heuristic's answer for `rows` rows with at most
 * max_ws bytes of workspace (see the top of the file). */
static bool pick(cuda_backend_t *b, gemm_entry_t *e, int rows, uint64_t max_ws)
{
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatrixLayout_t bl = NULL, cl = NULL;
    bool found = false;
    const uint32_t align = 16;
    int got = 0, accepted = 0;
    if (cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof(align)) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof(align)) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof(align)) &&
        !cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof(align)) &&
        layouts(e->wtype, e->out, e->in, e->ldc, rows, &bl, &cl)) {
        cublasLtMatmulHeuristicResult_t res[16];
        if (cublasLtMatmulAlgoGetHeuristic(b->lt, e->op, e->a, bl, cl, cl, pref, 16, res, &got) !=
            CUBLAS_STATUS_SUCCESS)
            got = 0;
        for (int i = 0; i < got && !found; i++) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS)
                continue;
            cublasLtMatmulAlgo_t algo = res[i].algo;
            if (b->invariant) {
                /* One k-loop per output element: no split-K, nothing reduced afterwards. */
                int32_t one = 1;
                uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
                if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one, sizeof(one)) ||
                    cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none,
                                                         sizeof(none)) ||
                    !algo_ok(b, e, &algo, rows, max_ws) || !algo_ok(b, e, &algo, 1, max_ws))
                    continue;
                if (accepted++ < b->gemm->algo_index)
                    continue;
            }
            e->algo = algo;
            e->ws = res[i].workspaceSize;
            found = true;
            int32_t id = 0, sk = 0;
            uint32_t tile = 0, stages = 0;
            size_t wr;
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &wr);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &wr);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(stages), &wr);
            cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof(sk), &wr);
            cairn_log(CAIRN_LOG_DEBUG,
                      "cuda backend: %d x %d %s, %d rows: cuBLASLt algo %d tile %u stages %u split-k %d, workspace %zu",
                      e->out, e->in, cairn_dtype_name(e->wtype), rows, id, tile, stages, sk, e->ws);
        }
    }
    layouts_free(bl, cl);
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (!found)
        cairn_log(CAIRN_LOG_INFO, "cuda backend: %d x %d %s, %d rows, workspace <= %llu: %d heuristic answers, %d "
                  "acceptable", e->out, e->in, cairn_dtype_name(e->wtype), rows, (unsigned long long)max_ws, got,
                  accepted);
    return found;
}

/* Builds the entry's descriptors and picks its algorithm. In the invariant mode a shape
 * with no workspace-free algorithm is chunked (when it has more than CHUNK_M rows), and a
 * chunk with none takes one with a workspace but still no split-K (logged). */
static bool entry_init(cuda_backend_t *b, gemm_entry_t *e)
{
    const cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (cublasLtMatmulDescCreate(&e->op, ct, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)) ||
        cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)) ||
        cublasLtMatrixLayoutCreate(&e->a, dt(e->wtype), (uint64_t)e->in, (uint64_t)e->out, e->in))
        return false;
    const int rows = e->rows_key ? e->rows_key : b->gemm->ref_rows;
    if (!b->invariant)
        return pick(b, e, rows, b->ws_bytes);
    if (pick(b, e, rows, 0))
        return true;
    if (e->out > CHUNK_M) {
        e->chunked = true;
        return true;
    }
    if (!b->ws && (cudaMalloc(&b->ws, FAST_WS_BYTES) != cudaSuccess || !(b->ws_bytes = FAST_WS_BYTES)))
        return false;
    if (!pick(b, e, rows, b->ws_bytes))
        return false;
    cairn_log(CAIRN_LOG_WARN, "cuda backend: the %d x %d %s product runs an algorithm with a workspace (split-K off)",
              e->out, e->in, cairn_dtype_name(e->wtype));
    return true;
}

static gemm_entry_t *entry(cuda_backend_t *b, cairn_dtype_t wt, int out, int in, int ldc, int rows)
{
    cuda_gemm_cache_t *c = b->gemm;
    const int key = b->invariant ? 0 : rows;
    for (int i = 0; i < c->n; i++)
        if (c->e[i].wtype == wt && c->e[i].out == out && c->e[i].in == in && c->e[i].ldc == ldc &&
            c->e[i].rows_key == key)
            return &c->e[i];
    if (cairn_grow_array_int((void **)&c->e, &c->cap, c->n + 1, sizeof(*c->e), 16))
        return NULL;
    gemm_entry_t *e = &c->e[c->n];
    memset(e, 0, sizeof(*e));
    e->wtype = wt;
    e->out = out;
    e->in = in;
    e->ldc = ldc;
    e->rows_key = key;
    if (!entry_init(b, e)) {
        if (e->op)
            cublasLtMatmulDescDestroy(e->op);
        if (e->a)
            cublasLtMatrixLayoutDestroy(e->a);
        return NULL;
    }
    c->n++;
    return e;
}

/* y [rows][ldc] (its first `out` columns) = x w^T for a weight of `out` rows at w. */
static bool product(cuda_backend_t *b, cairn_dtype_t wt, const void *w, int out, int in, int ldc, const void *xin,
                    float *y, int rows)
{
    gemm_entry_t *e = entry(b, wt, out, in, ldc, rows);
    if (!e) {
        cuda__fail(b, CAIRN_EUNSUPPORTED, "choosing a cuBLASLt algorithm", 0);
        return false;
    }
    if (e->chunked) {
        const size_t wrow = cairn_dtype_row_bytes(wt, in);
        for (int m0 = 0; m0 < out; m0 += CHUNK_M) {
            const int m = out - m0 < CHUNK_M ? out - m0 : CHUNK_M;
            if (!product(b, wt, (const unsigned char *)w + (size_t)m0 * wrow, m, in, ldc, xin, y + m0, rows))
                return false;
        }
        return true;
    }
    if (e->lrows != rows) {
        layouts_free(e->bl, e->cl);
        e->lrows = 0;
        if (!layouts(wt, out, in, ldc, rows, &e->bl, &e->cl)) {
            cuda__fail(b, CAIRN_ENOMEM, "a cuBLASLt layout", 0);
            return false;
        }
        e->lrows = rows;
    }
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = cublasLtMatmul(b->lt, e->op, &alpha, w, e->a, xin, e->bl, &beta, y, e->cl, y, e->cl, &e->algo,
                                       b->ws, e->ws, b->stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        cairn_log(CAIRN_LOG_ERROR, "cuda backend: cublasLtMatmul (%d x %d, %d rows) returned %d", out, in, rows, (int)st);
        cuda__fail(b, CAIRN_EIO, "a matrix product", 0);
        return false;
    }
    return true;
}

void cuda__matmul(cuda_backend_t *b, const float *x, int rows, int in, const compute_mm_t *outs, int n)
{
    if (rows <= 0 || n <= 0)
        return;
    const void *xbf = NULL;
    for (int i = 0; i < n; i++) {
        const compute_mat_t *w = &outs[i].w;
        CAIRN_ASSERT(w->cols == in);
        const void *xin = x;
        if (w->type == CAIRN_DTYPE_BF16) {
            if (!xbf) { /* one bf16 copy of x for every bf16 product of the call */
                if (!cuda__grow(b, &b->xbf, &b->xbf_cap, (size_t)rows * in * 2) ||
                    !cuda__check(b, cuda_k_to_bf16(b->xbf, x, (size_t)rows * in, b->stream), "the bf16 conversion"))
                    return;
                xbf = b->xbf;
            }
            xin = xbf;
        }
        if (((uintptr_t)w->data | (uintptr_t)outs[i].y | (uintptr_t)xin) % 16) {
            cuda__fail(b, CAIRN_EINVAL, "a matmul operand not aligned to 16 bytes", 0);
            return;
        }
        if (!product(b, w->type, w->data, w->rows, in, w->rows, xin, outs[i].y, rows))
            return;
    }
}
