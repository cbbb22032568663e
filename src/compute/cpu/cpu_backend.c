/*
 * cpu_backend.c — the CPU compute backend (cpu_backend.h): the ops of backend.h on the
 * kernels of kernels.h, with the kernel implementation the object was created with.
 *
 * Each op is a thin loop over a kern_* kernel with the same contract, so a forward pass
 * through this backend computes exactly the bits of the same pass written against
 * kernels.h (tests/compute/test_backend.c asserts it). Buffers are cairn_malloc'd host
 * memory (64-byte aligned through over-allocation) or wrapped caller memory.
 *
 * Optional ops: short_conv is src/compute/cpu/short_conv.c (LFM2), delta_rule
 * src/compute/cpu/delta_rule.c (Qwen3.5: dr__rule on the object's kernel table and pool);
 * their contracts are in backend.h.
 *
 * Row-parallel ops. RMSNorm, RoPE and its angles run over the pool by rows, the GLU and the
 * elementwise add / mul / scale by ranges of whole 16-element groups, once a call is large
 * enough (PAR_MIN_ELEMS): each task a fixed range, each row or element computed exactly as
 * the serial loop computes it (no reduction crosses a row or an element), so the bits do
 * not depend on the split or the thread count.
 *
 * Op times (CAIRN_OP_TIMES=1): every op's wall-clock time is summed per kind (matmuls by
 * weight kind and row count, the vocab-sized head apart) and logged (CAIRN_LOG_INFO) when the
 * backend is destroyed: a profiling aid for prefill (docs/PERFORMANCE.md); off, it costs one
 * branch per op.
 *
 * Thread-safety: one thread at a time per object; ops use the object's pool.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "compute/cpu/attention_impl.h"
#include "compute/cpu/cpu_backend.h"
#include "compute/cpu/delta_rule_impl.h"
#include "compute/cpu/short_conv.h"
#include "util/util.h"

/* What CAIRN_OP_TIMES sums (T_MM_*: matmul calls by weight kind and rows). */
enum {
    T_MM_Q_PREFILL, /* quantized weights, >= 32 rows (the AMX tiles' shape) */
    T_MM_Q_SMALL,   /* quantized weights, < 32 rows */
    T_MM_F,         /* float weights */
    T_MM_HEAD,      /* a product with >= 65536 outputs (the vocab head) */
    T_NORM, T_ROPE_ANGLES, T_ROPE, T_GLU, T_ELEMWISE, T_KV_STORE, T_ATTENTION, T_GET_ROWS, T_OTHER,
    T_COUNT
};
static const char *const t_names[T_COUNT] = {
    "matmul quantized >=32 rows", "matmul quantized <32 rows", "matmul float", "matmul vocab head", "rmsnorm",
    "rope angles", "rope", "glu", "add/mul/scale", "kv store", "attention", "get rows", "other"};

typedef struct {
    compute_backend_t base;      /* first: the object is a compute_backend_t */
    const kern_impl_t *k;        /* resolved kernel table */
    cairn_thread_pool_t *tp;
    bool owns_tp;
    bool timed;                  /* CAIRN_OP_TIMES */
    double t_sum[T_COUNT];       /* seconds per kind */
    long t_calls[T_COUNT];
    double t_rows[T_COUNT];      /* rows (matmuls) */
} cpu_backend_t;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* T_BEGIN(c) ... T_END(c, kind, rows): an op's time into its kind, when timed. */
#define T_BEGIN(c) const double t0_ = (c)->timed ? mono_s() : 0.0
#define T_END(c, kind, rows)                                                                            \
    do {                                                                                                \
        if ((c)->timed) {                                                                               \
            (c)->t_sum[kind] += mono_s() - t0_;                                                         \
            (c)->t_calls[kind]++;                                                                       \
            (c)->t_rows[kind] += (rows);                                                                \
        }                                                                                               \
    } while (0)

struct compute_attn {
    attn_cfg_t cfg;              /* scratch [n_slots][attn_scratch_floats(...)] */
    attn_math_t math;
};

static cpu_backend_t *cpu(compute_backend_t *be) { return (cpu_backend_t *)be; }
static const cpu_backend_t *cpu_c(const compute_backend_t *be) { return (const cpu_backend_t *)be; }

/* The op times through the log (CAIRN_LOG_INFO, one line each): the application's
 * handler decides where they go (bench_engine prints them to stderr). */
static void log_times(const cpu_backend_t *c)
{
    double total = 0;
    for (int i = 0; i < T_COUNT; i++)
        total += c->t_sum[i];
    cairn_log(CAIRN_LOG_INFO, "cpu backend op times (%s, %d threads): %.3f s in ops", c->k->name,
              cairn_thread_pool_size(c->tp), total);
    for (int i = 0; i < T_COUNT; i++)
        if (c->t_calls[i])
            cairn_log(CAIRN_LOG_INFO, "  %-28s %9.3f s %5.1f%%  %8ld calls  %.1f rows/call", t_names[i], c->t_sum[i],
                      total > 0 ? 100.0 * c->t_sum[i] / total : 0.0, c->t_calls[i],
                      c->t_rows[i] / (double)c->t_calls[i]);
}

static void cpu_destroy(compute_backend_t *be)
{
    cpu_backend_t *c = cpu(be);
    if (c->timed)
        log_times(c);
    if (c->owns_tp)
        cairn_thread_pool_destroy(c->tp);
    cairn_free(c);
}

/*
 * The ids, built once: [order][math][q8] for the tile order (0), the pair order (1) and the
 * canonical one (2); q8 = 1 is the id with q8_0 K/V, "<id>+qk8.3" — the attention over q8_0
 * K takes q.k in integers (the query rounded to q8_0, exact block sums: attention_impl.h
 * step 1q) since numerics revision 3 of the CPU attention, so q8_0 K/V that an earlier build
 * wrote to disk under the bare id is never restored into it.
 */
static char numerics_ids[3][2][2][80];
static void ids_fill(void)
{
    static const char *const plain[2][2] = {{"cpu-attnpair1-f32.2", "cpu-attnpair1-bf16.2"}, {"f32.2", "bf16.2"}};
    for (int m = 0; m < 2; m++) {
        snprintf(numerics_ids[0][m][0], sizeof numerics_ids[0][m][0], "cpu-attntile1-%.40s-%s.2", kern__attn_tile_cpu(), m ? "bf16" : "f32");
        snprintf(numerics_ids[1][m][0], sizeof numerics_ids[1][m][0], "%s", plain[0][m]);
        snprintf(numerics_ids[2][m][0], sizeof numerics_ids[2][m][0], "%s", plain[1][m]);
        for (int o = 0; o < 3; o++)
            snprintf(numerics_ids[o][m][1], sizeof numerics_ids[o][m][1], "%.70s+qk8.3", numerics_ids[o][m][0]);
    }
}

static const char *cpu_numerics_id(const compute_backend_t *be, cairn_math_t math, cairn_dtype_t kv_dtype)
{
    /* Every CPU implementation follows the canonical order (kernels_impl.h). The ".2" is the
     * numerics revision: revision 2 sums RMSNorm's squares in double (issue 12), so K/V that
     * an earlier build wrote to disk, under the bare math name, is never restored into it.
     * bf16 K/V attention in the tile order or the pair order (attention_impl.h; AMX-BF16
     * machines, CAIRN_ATTN_BF16TILE / CAIRN_ATTN_BF16PAIR) is another numerics: its own ids,
     * for every K/V type. The tile order's bits are this CPU model's tiles', so its id names
     * it: "cpu-attntile1-x86f6m207-f32.2". q8_0 K/V adds "+qk8.3" (ids_fill). */
    (void)be;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, ids_fill);
    const int order = kern__attn_tile_on() ? 0 : kern__attn_pair_on() ? 1 : 2;
    return numerics_ids[order][math == CAIRN_MATH_BF16][kv_dtype == CAIRN_DTYPE_Q8_0];
}

static bool plain_type(cairn_dtype_t t)
{
    const compute_type_traits_t *tt = compute_type_traits(t);
    return tt && tt->block_elems == 1;
}

static bool cpu_supports(const compute_backend_t *be, compute_op_t op, cairn_dtype_t t)
{
    const kern_impl_t *k = cpu_c(be)->k;
    const compute_type_traits_t *tt = compute_type_traits(t);
    switch (op) {
    case COMPUTE_OP_MATMUL: return tt && (k->types[t].matmul_range || k->types[t].qmatmul_range);
    case COMPUTE_OP_GET_ROWS: return tt != NULL;                    /* the traits' to_f32 */
    case COMPUTE_OP_NORM: return plain_type(t);                     /* kern__rmsnorm reads elements */
    case COMPUTE_OP_KV: return tt && k->types[t].from_f32 && k->types[t].rows_to_f32;
    case COMPUTE_OP_SHORT_CONV: return plain_type(t);                /* short_conv.c widens taps */
    case COMPUTE_OP_DELTA_RULE: return t == CAIRN_DTYPE_F32;        /* dr__rule: f32 operands */
    case COMPUTE_OP_COUNT: break;
    }
    return false;
}

/* ---- buffers ------------------------------------------------------------------------ */

static int cpu_buffer_alloc(compute_backend_t *be, size_t bytes, compute_buffer_t *out)
{
    (void)be;
    memset(out, 0, sizeof(*out));
    if (bytes > SIZE_MAX - 64)
        return CAIRN_ERANGE;
    unsigned char *raw = cairn_malloc(bytes + 64);
    if (!raw)
        return CAIRN_ENOMEM;
    out->handle = raw;
    out->data = raw + (64 - (uintptr_t)raw % 64) % 64;
    out->bytes = bytes;
    return CAIRN_OK;
}

static int cpu_buffer_from_host(compute_backend_t *be, const void *host, size_t bytes, compute_buffer_t *out)
{
    (void)be;
    *out = (compute_buffer_t){(void *)host, bytes, NULL};
    return CAIRN_OK;
}

static void cpu_buffer_free(compute_backend_t *be, compute_buffer_t *buf)
{
    (void)be;
    cairn_free(buf->handle); /* NULL for wrapped memory */
    memset(buf, 0, sizeof(*buf));
}

static int cpu_buffer_write(compute_backend_t *be, compute_buffer_t *buf, size_t off, const void *src, size_t n)
{
    (void)be;
    if (off > buf->bytes || n > buf->bytes - off)
        return CAIRN_ERANGE;
    memcpy((unsigned char *)buf->data + off, src, n);
    return CAIRN_OK;
}

static int cpu_buffer_read(compute_backend_t *be, const compute_buffer_t *buf, size_t off, void *dst, size_t n)
{
    (void)be;
    if (off > buf->bytes || n > buf->bytes - off)
        return CAIRN_ERANGE;
    memcpy(dst, (const unsigned char *)buf->data + off, n);
    return CAIRN_OK;
}

static int cpu_sync(compute_backend_t *be)
{
    (void)be; /* every op ran to completion before it returned */
    return CAIRN_OK;
}

/* ---- row-parallel ops ---------------------------------------------------------------- */

enum {
    PAR_MIN_ELEMS = 16384, /* elements per task at least: smaller calls run inline */
    PAR_GROUP = 16         /* elementwise ranges are whole groups of 16 (the SIMD width) */
};

typedef enum { PAR_NORM, PAR_ROPE_ANGLES, PAR_ROPE, PAR_GLU, PAR_ADD, PAR_MUL, PAR_SCALE } par_op_t;

/* One row-parallel call: `units` rows (or groups of PAR_GROUP elements, the last one
 * short when n is not a multiple), each task a fixed range of them. */
typedef struct {
    par_op_t op;
    const kern_impl_t *k;
    size_t units, n;             /* units to split; n: elements (elementwise ops) */
    float *out;
    const float *a, *b;
    float s;                     /* scale */
    compute_mat_t w;             /* rmsnorm weight */
    float eps;
    bool unit_offset;
    const float *inv_freq;       /* rope angles */
    const int *pos;
    int half, n_heads, head_dim, rot_dims;
    compute_glu_t act;
} par_job_t;

static void par_range(const par_job_t *j, size_t u0, size_t u1)
{
    switch (j->op) {
    case PAR_NORM: {
        const size_t n = (size_t)j->w.cols;
        for (size_t r = u0; r < u1; r++)
            kern__rmsnorm(j->k, j->out + r * n, j->a + r * n, j->w.data, j->w.type, j->w.cols, j->eps,
                          j->unit_offset);
        return;
    }
    case PAR_ROPE_ANGLES:
        for (size_t r = u0; r < u1; r++)
            kern_rope_angles(j->out + r * 2 * (size_t)j->half, j->inv_freq, j->half, j->pos[r]);
        return;
    case PAR_ROPE:
        for (size_t r = u0; r < u1; r++)
            kern_rope_partial(j->out + r * (size_t)j->n_heads * (size_t)j->head_dim, j->n_heads, j->head_dim,
                              j->rot_dims, j->a + r * (size_t)j->rot_dims);
        return;
    case PAR_GLU:
    case PAR_ADD:
    case PAR_MUL:
    case PAR_SCALE: break;
    }
    const size_t e0 = u0 * PAR_GROUP, e1 = u1 * PAR_GROUP < j->n ? u1 * PAR_GROUP : j->n;
    float *o = j->out;
    switch (j->op) {
    case PAR_GLU: j->k->glu[j->act](o + e0, j->a + e0, j->b + e0, e1 - e0); return;
    case PAR_ADD:
        for (size_t i = e0; i < e1; i++)
            o[i] += j->b[i];
        return;
    case PAR_MUL:
        for (size_t i = e0; i < e1; i++)
            o[i] = j->a[i] * j->b[i];
        return;
    case PAR_SCALE:
        for (size_t i = e0; i < e1; i++)
            o[i] *= j->s;
        return;
    case PAR_NORM:
    case PAR_ROPE_ANGLES:
    case PAR_ROPE: break;
    }
    CAIRN_ASSERT(!"par_range: not an op");
}

static void par_task(void *p, int task, int n_tasks)
{
    const par_job_t *j = p;
    par_range(j, j->units * (size_t)task / (size_t)n_tasks, j->units * (size_t)(task + 1) / (size_t)n_tasks);
}

/* Runs j over the pool when its `elems` (the work, in elements) pay for it, else inline. */
static void par_run(cpu_backend_t *c, par_job_t *j, size_t elems)
{
    size_t n_tasks = elems / PAR_MIN_ELEMS;
    const size_t pool = (size_t)cairn_thread_pool_size(c->tp);
    if (n_tasks > pool)
        n_tasks = pool;
    if (n_tasks > j->units)
        n_tasks = j->units;
    if (n_tasks <= 1)
        par_range(j, 0, j->units);
    else
        cairn_thread_pool_run(c->tp, par_task, j, (int)n_tasks);
}

/* An elementwise job over n elements: units are groups of PAR_GROUP. */
static par_job_t elem_job(par_op_t op, const kern_impl_t *k, float *out, const float *a, const float *b, size_t n)
{
    return (par_job_t){.op = op, .k = k, .units = (n + PAR_GROUP - 1) / PAR_GROUP, .n = n, .out = out, .a = a,
                       .b = b};
}

/* ---- ops ------------------------------------------------------------------------------ */

static void cpu_matmul(compute_backend_t *be, const float *x, int rows, int in, const compute_mm_t *outs, int n,
                       cairn_math_t math)
{
    enum { CHUNK = 8 };
    cpu_backend_t *c = cpu(be);
    T_BEGIN(c);
    for (int start = 0; start < n; start += CHUNK) {
        kern_mm_t m[CHUNK];
        int cnt = 0;
        for (int i = start; i < n && i < start + CHUNK; i++) {
            CAIRN_ASSERT(outs[i].w.cols == in);
            m[cnt++] = (kern_mm_t){outs[i].y, outs[i].w.data, outs[i].w.type, outs[i].w.rows};
        }
        kern__matmul_n(c->k, c->tp, x, rows, in, m, cnt, math);
    }
    if (c->timed) {
        const compute_type_traits_t *tt = n > 0 ? compute_type_traits(outs[0].w.type) : NULL;
        const int kind = n > 0 && outs[0].w.rows >= 65536 ? T_MM_HEAD
                         : !tt || !tt->quantized          ? T_MM_F
                         : rows >= 32                     ? T_MM_Q_PREFILL
                                                          : T_MM_Q_SMALL;
        T_END(c, kind, rows);
    }
}

static void cpu_get_rows(compute_backend_t *be, float *dst, compute_mat_t table, const int32_t *ids, int n)
{
    cpu_backend_t *c = cpu(be);
    T_BEGIN(c);
    const compute_type_traits_t *tt = compute_type_traits(table.type);
    CAIRN_ASSERT(tt != NULL);
    const size_t row_bytes = cairn_dtype_row_bytes(table.type, table.cols);
    for (int r = 0; r < n; r++) {
        CAIRN_ASSERT(ids[r] >= 0 && ids[r] < table.rows);
        tt->to_f32(dst + (size_t)r * table.cols, (const unsigned char *)table.data + (size_t)ids[r] * row_bytes,
                   table.cols);
    }
    T_END(c, T_GET_ROWS, n);
}

static void cpu_rmsnorm(compute_backend_t *be, float *out, const float *x, int rows, compute_mat_t w, float eps,
                        bool unit_offset)
{
    cpu_backend_t *c = cpu(be);
    T_BEGIN(c);
    if (rows > 0) {
        par_job_t j = {.op = PAR_NORM, .k = c->k, .units = (size_t)rows, .out = out, .a = x, .w = w, .eps = eps,
                       .unit_offset = unit_offset};
        par_run(c, &j, (size_t)rows * (size_t)w.cols);
    }
    T_END(c, T_NORM, rows);
}

static void cpu_rope_angles(compute_backend_t *be, float *cos_sin, const float *inv_freq, int half, const int *pos,
                            int rows)
{
    cpu_backend_t *c = cpu(be);
    T_BEGIN(c);
    if (rows > 0) {
        /* cosf and sinf cost ~20 elementwise ops each: weigh them so */
        par_job_t j = {.op = PAR_ROPE_ANGLES, .units = (size_t)rows, .out = cos_sin, .inv_freq = inv_freq,
                       .pos = pos, .half = half};
        par_run(c, &j, (size_t)rows * (size_t)half * 40);
    }
    T_END(c, T_ROPE_ANGLES, rows);
}

static void cpu_rope(compute_backend_t *be, float *x, int rows, int n_heads, int head_dim, int rot_dims,
                     const float *cos_sin)
{
    cpu_backend_t *c = cpu(be);
    CAIRN_ASSERT(rot_dims >= 0 && rot_dims % 2 == 0 && rot_dims <= head_dim);
    T_BEGIN(c);
    if (rows > 0) {
        par_job_t j = {.op = PAR_ROPE, .units = (size_t)rows, .out = x, .a = cos_sin, .n_heads = n_heads,
                       .head_dim = head_dim, .rot_dims = rot_dims};
        par_run(c, &j, (size_t)rows * (size_t)n_heads * (size_t)rot_dims);
    }
    T_END(c, T_ROPE, rows);
}

static void cpu_glu(compute_backend_t *be, float *out, const float *gate, const float *up, size_t n,
                    compute_glu_t act)
{
    cpu_backend_t *c = cpu(be);
    CAIRN_ASSERT((unsigned)act < COMPUTE_GLU_COUNT);
    T_BEGIN(c);
    par_job_t j = elem_job(PAR_GLU, c->k, out, gate, up, n);
    j.act = act;
    par_run(c, &j, n * 8); /* an exp and a division per element */
    T_END(c, T_GLU, 0);
}

static void cpu_mul(compute_backend_t *be, float *out, const float *a, const float *b, size_t n)
{
    cpu_backend_t *c = cpu(be);
    T_BEGIN(c);
    par_job_t j = elem_job(PAR_MUL, c->k, out, a, b, n);
    par_run(c, &j, n);
    T_END(c, T_ELEMWISE, 0);
}

static void cpu_add(compute_backend_t *be, float *x, const float *y, size_t n)
{
    cpu_backend_t *c = cpu(be);
    T_BEGIN(c);
    par_job_t j = elem_job(PAR_ADD, c->k, x, NULL, y, n);
    par_run(c, &j, n);
    T_END(c, T_ELEMWISE, 0);
}

static void cpu_scale(compute_backend_t *be, float *x, float s, size_t n)
{
    cpu_backend_t *c = cpu(be);
    T_BEGIN(c);
    par_job_t j = elem_job(PAR_SCALE, c->k, x, NULL, NULL, n);
    j.s = s;
    par_run(c, &j, n);
    T_END(c, T_ELEMWISE, 0);
}

static void cpu_kv_store(compute_backend_t *be, void *dst, cairn_dtype_t type, const float *src, int n)
{
    /* The implementation's rounding is the traits row's reference rounding, bit for bit. */
    cpu_backend_t *c = cpu(be);
    const kern_impl_t *k = c->k;
    CAIRN_ASSERT((unsigned)type < COMPUTE_DTYPE_COUNT && k->types[type].from_f32);
    T_BEGIN(c);
    if (n > 0)
        k->types[type].from_f32(dst, src, n);
    T_END(c, T_KV_STORE, 1);
}

static void cpu_short_conv(compute_backend_t *be, float *out, const float *x, int n, compute_mat_t w,
                           float *state)
{
    (void)be;
    short_conv_rows(out, x, n, w.data, w.type, w.rows, w.cols, state);
}

static int cpu_attn_create(compute_backend_t *be, const compute_attn_params_t *p, compute_attn_t **out)
{
    cpu_backend_t *c = cpu(be);
    *out = NULL;
    if (p->n_heads < 1 || p->n_kv_heads < 1 || p->n_heads % p->n_kv_heads || p->head_dim < 1 ||
        p->max_positions < 1 || p->window < 0 || !(p->scale >= 0.0f) || !(p->softcap >= 0.0f))
        return CAIRN_EINVAL;
    if (!cpu_supports(be, COMPUTE_OP_KV, p->kv_type) ||
        !cairn_dtype_row_bytes(p->kv_type, p->head_dim)) /* a head is whole blocks */
        return CAIRN_EUNSUPPORTED;
    compute_attn_t *a = cairn_calloc(1, sizeof(*a));
    if (!a)
        return CAIRN_ENOMEM;
    const int n_slots = cairn_thread_pool_size(c->tp);
    const size_t per = attn_scratch_floats(p->n_heads, p->n_kv_heads, p->head_dim, p->max_positions);
    a->cfg = (attn_cfg_t){p->n_heads, p->n_kv_heads, p->head_dim, p->kv_type, NULL, n_slots, p->max_positions};
    a->math = (attn_math_t){p->window, p->scale, p->softcap};
    if (per > SIZE_MAX / sizeof(float) / (size_t)n_slots ||
        !(a->cfg.scratch = cairn_malloc((size_t)n_slots * per * sizeof(float)))) {
        cairn_free(a);
        return CAIRN_ENOMEM;
    }
    *out = a;
    return CAIRN_OK;
}

static void cpu_attn_destroy(compute_backend_t *be, compute_attn_t *a)
{
    (void)be;
    cairn_free(a->cfg.scratch);
    cairn_free(a);
}

static void cpu_attention(compute_backend_t *be, compute_attn_t *a, int layer, const attn_query_t *queries, int n)
{
    cpu_backend_t *c = cpu(be);
    T_BEGIN(c);
    kern__attn_forward(c->k, c->tp, &a->cfg, &a->math, layer, queries, n);
    T_END(c, T_ATTENTION, n);
}

static void cpu_delta_rule(compute_backend_t *be, float *out, const float *q, const float *k, const float *v,
                           const float *g, const float *beta, int n, int n_k_heads, int n_v_heads, int dk,
                           int dv, float *state)
{
    cpu_backend_t *c = cpu(be);
    T_BEGIN(c);
    dr__rule(c->k, c->tp, out, q, k, v, g, beta, n, n_k_heads, n_v_heads, dk, dv, state);
    T_END(c, T_OTHER, n);
}

static const compute_backend_ops_t ops = {
    .name = "cpu",
    .host_memory = true,
    .destroy = cpu_destroy,
    .numerics_id = cpu_numerics_id,
    .supports = cpu_supports,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_from_host = cpu_buffer_from_host,
    .buffer_free = cpu_buffer_free,
    .buffer_write = cpu_buffer_write,
    .buffer_read = cpu_buffer_read,
    .sync = cpu_sync,
    .matmul = cpu_matmul,
    .get_rows = cpu_get_rows,
    .rmsnorm = cpu_rmsnorm,
    .rope_angles = cpu_rope_angles,
    .rope = cpu_rope,
    .glu = cpu_glu,
    .mul = cpu_mul,
    .add = cpu_add,
    .scale = cpu_scale,
    .kv_store = cpu_kv_store,
    .attn_create = cpu_attn_create,
    .attn_destroy = cpu_attn_destroy,
    .attention = cpu_attention,
    .short_conv = cpu_short_conv,
    .delta_rule = cpu_delta_rule,
};

int compute_cpu_create(const compute_backend_options_t *opt, compute_backend_t **out, char *err, size_t err_len)
{
    compute_backend_options_t o = opt ? *opt : (compute_backend_options_t){0};
    *out = NULL;
    const kern_impl_t *k = kern__current();
    if (o.impl) {
        int rc = kern__impl_status(o.impl);
        if (rc) {
            cairn_errf(err, err_len,
                    rc == CAIRN_EINVAL ? "cpu backend: no kernel implementation is named '%s'"
                                       : "cpu backend: kernel implementation '%s' is not in this build or not "
                                         "supported by this CPU",
                    o.impl);
            return rc;
        }
        k = kern__impl_by_name(o.impl);
    }
    if (o.n_threads == 0)
        o.n_threads = 1;
    if (!o.pool && (o.n_threads < 1 || o.n_threads > 1024)) {
        cairn_errf(err, err_len, "cpu backend: n_threads must be in [1, 1024]");
        return CAIRN_EINVAL;
    }
    cpu_backend_t *c = cairn_calloc(1, sizeof(*c));
    if (!c) {
        cairn_errf(err, err_len, "cpu backend: out of memory");
        return CAIRN_ENOMEM;
    }
    c->base.ops = &ops;
    c->k = k;
    c->timed = cairn_knob_bool("CAIRN_OP_TIMES", false, false, false);
    c->tp = o.pool;
    if (!c->tp) {
        int rc = cairn_thread_pool_create(o.n_threads, &c->tp);
        if (rc) {
            cairn_errf(err, err_len, "cpu backend: cannot create the thread pool (%s)", cairn_strerror(rc));
            cairn_free(c);
            return rc;
        }
        c->owns_tp = true;
    }
    *out = &c->base;
    return CAIRN_OK;
}

cairn_thread_pool_t *compute_cpu_thread_pool(const compute_backend_t *be) { return cpu_c(be)->tp; }

const char *compute_cpu_impl_name(const compute_backend_t *be) { return cpu_c(be)->k->name; }
