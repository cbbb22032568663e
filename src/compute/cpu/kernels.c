/*
 * kernels.c — the CPU kernels' registry and dispatch, the portable ("scalar")
 * implementation, the pool-parallel matmul driver, and the double-precision references.
 *
 * Model. Every reduction follows the canonical order of kernels_impl.h: 16 fma lanes over
 * blocks of 16 (F32 math) or vdpbf16ps-style pairs over blocks of 32 (BF16 math), a
 * zero-padded last block and a fixed summation tree. The order depends only on the
 * reduction length, so rows, threads and chunking never change a result — and because
 * the scalar, AVX2 and AVX-512 code all follow it, neither does the CPU. The scalar code
 * here spells the order out with fmaf(); the SIMD files (src/compute/cpu/x86) are faster
 * renditions of it.
 *
 * Registry. The implementations this build has, best first: the x86 ones when built with
 * CAIRN_X86 (x86/x86_impls.c says which the CPU can run), then scalar. Each is resolved
 * once into a complete table (empty entries take the scalar implementation's), and the
 * process runs one of them (kern_init: the first the CPU can run, or CAIRN_KERNELS).
 *
 * kern_matmul splits `out` into fixed ranges, one per pool task; each output element is
 * computed entirely by one task.
 *
 * The kern_ref_* functions are the independent references for tests: plain loops with
 * double accumulation (matmul, dot) or the textbook float formulas (rmsnorm, silu).
 *
 * Thread-safety: resolution and the choice happen once (pthread_once); kern_set_impl is a
 * test hook that must not race with running kernels. All kernels are pure.
 */
#include "compute/cpu/kernels_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "compute/cpu/attention_impl.h"
#include "compute/cpu/delta_rule.h"
#ifdef CAIRN_HAVE_X86
#include "compute/cpu/x86/x86_impls.h"
#endif

/* ---- conversions ------------------------------------------------------------------ */

float kern_bf16_to_f32(uint16_t h) { return compute_bf16_to_f32(h); }
uint16_t kern_f32_to_bf16(float f) { return compute_f32_to_bf16(f); }
float kern_f16_to_f32(uint16_t h) { return compute_f16_to_f32(h); }
uint16_t kern_f32_to_f16(float f) { return compute_f32_to_f16(f); }

static const compute_type_traits_t *traits_of(cairn_dtype_t t)
{
    const compute_type_traits_t *tt = compute_type_traits(t);
    CAIRN_ASSERT(tt != NULL); /* types are checked when a model binds its weights */
    return tt;
}

void kern_row_to_f32(float *dst, const void *src, cairn_dtype_t t, int n)
{
    if (n > 0)
        traits_of(t)->to_f32(dst, src, n);
}

void kern_row_from_f32(void *dst, cairn_dtype_t t, const float *src, int n)
{
    const compute_type_traits_t *tt = traits_of(t);
    CAIRN_ASSERT(tt->from_f32 != NULL);
    if (n > 0)
        tt->from_f32(dst, src, n);
}

static inline uint32_t f32_bits(float f) { return compute_f32_bits(f); }
static inline float bits_f32(uint32_t u) { return compute_bits_f32(u); }

/* Element i of a row of a one-element-per-block type, as float (exact). */
static inline float load_elem(const void *row, cairn_dtype_t t, size_t i)
{
    switch (t) {
    case CAIRN_DTYPE_F32: return ((const float *)row)[i];
    case CAIRN_DTYPE_F16: return compute_f16_to_f32(((const uint16_t *)row)[i]);
    case CAIRN_DTYPE_BF16: return compute_bf16_to_f32(((const uint16_t *)row)[i]);
    case CAIRN_DTYPE_Q8_0:
    case CAIRN_DTYPE_Q4_0:
    case CAIRN_DTYPE_Q4_K:
    case CAIRN_DTYPE_Q5_K:
    case CAIRN_DTYPE_Q6_K:
    case CAIRN_DTYPE_Q8_K:
    case CAIRN_DTYPE_FP8_E4M3: break; /* blocks: no element has a place of its own */
    }
    CAIRN_ASSERT(!"load_elem: not a plain float type");
    return 0.0f;
}

/* ---- the canonical order, spelled out (the "scalar" implementation) ---------------- */

/* The fixed 16 -> 1 summation tree. */
static float tree16(const float a[16])
{
    float b[8], c[4], d[2];
    for (int j = 0; j < 8; j++)
        b[j] = a[j] + a[j + 8];
    for (int j = 0; j < 4; j++)
        c[j] = b[j] + b[j + 4];
    for (int j = 0; j < 2; j++)
        d[j] = c[j] + c[j + 2];
    return d[0] + d[1];
}

static inline float canon_dot_f32(const float *x, const void *w, cairn_dtype_t t, int n)
{
    float a[16] = {0};
    for (int k = 0; k < n; k += 16)
        for (int j = 0; j < 16; j++) {
            bool in = k + j < n; /* the last block is zero-padded */
            a[j] = fmaf(in ? x[k + j] : 0.0f, in ? load_elem(w, t, (size_t)(k + j)) : 0.0f, a[j]);
        }
    return tree16(a);
}

/* Flushes a denormal to zero of the same sign (DAZ on inputs, FTZ on outputs). */
static inline float flush_denormal(float v)
{
    uint32_t b = f32_bits(v);
    return (b & 0x7f800000u) ? v : bits_f32(b & 0x80000000u);
}

/* f32 -> bf16 as vcvtne2ps2bf16: denormal inputs become signed zero, then RNE. */
static inline uint16_t bf16_round_daz(float f) { return compute_f32_to_bf16(flush_denormal(f)); }

/* One lane step of vdpbf16ps: acc + a1*b1, then + a0*b0, each an fma with DAZ/FTZ. */
static inline float dpbf16_lane(float acc, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1)
{
    acc = flush_denormal(acc);
    acc = flush_denormal(fmaf(flush_denormal(compute_bf16_to_f32(a1)),
                              flush_denormal(compute_bf16_to_f32(b1)), acc));
    acc = flush_denormal(fmaf(flush_denormal(compute_bf16_to_f32(a0)),
                              flush_denormal(compute_bf16_to_f32(b0)), acc));
    return acc;
}

static float canon_dot_bf16(const float *x, const uint16_t *w, int n)
{
    float a[16] = {0};
    for (int k = 0; k < n; k += 32)
        for (int j = 0; j < 16; j++) {
            int i0 = k + 2 * j, i1 = i0 + 1; /* zero-padded past n */
            uint16_t x0 = i0 < n ? bf16_round_daz(x[i0]) : 0, x1 = i1 < n ? bf16_round_daz(x[i1]) : 0;
            uint16_t w0 = i0 < n ? w[i0] : 0, w1 = i1 < n ? w[i1] : 0;
            a[j] = dpbf16_lane(a[j], x0, x1, w0, w1);
        }
    return tree16(a);
}

static inline void scalar_matmul_t(float *y, const float *x, int rows, int in, const void *w, cairn_dtype_t wt,
                                   int out, int o0, int o1, cairn_math_t math)
{
    size_t wrow = cairn_dtype_row_bytes(wt, in);
    bool bf16 = math == CAIRN_MATH_BF16 && wt == CAIRN_DTYPE_BF16;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * in;
        for (int o = o0; o < o1; o++) {
            const void *wo = (const char *)w + (size_t)o * wrow;
            y[(size_t)r * out + o] = bf16 ? canon_dot_bf16(xr, wo, in) : canon_dot_f32(xr, wo, wt, in);
        }
    }
}

static inline void scalar_axpy_t(float *acc, float s, const void *row, cairn_dtype_t t, int n)
{
    for (int i = 0; i < n; i++) {
        float p = s * load_elem(row, t, (size_t)i); /* a product, then a sum: no fma */
        acc[i] = acc[i] + p;
    }
}

static inline void scalar_rows_to_f32_t(float *dst, const void *src, size_t stride, int rows, cairn_dtype_t t,
                                        int n)
{
    const compute_type_traits_t *tt = traits_of(t);
    for (int r = 0; r < rows; r++)
        tt->to_f32(dst + (size_t)r * n, (const unsigned char *)src + (size_t)r * stride, n);
}

/* The scalar row of one plain float type: the kernels above with the type a constant. */
#define SCALAR_TYPE_OPS(SUF, T)                                                                        \
    static void scalar_matmul_##SUF(float *y, const float *x, int rows, int in, const void *w, int out,  \
                                    int o0, int o1, cairn_math_t math)                                 \
    {                                                                                                  \
        scalar_matmul_t(y, x, rows, in, w, T, out, o0, o1, math);                                      \
    }                                                                                                  \
    static float scalar_dot_##SUF(const float *a, const void *b, int n) { return canon_dot_f32(a, b, T, n); } \
    static void scalar_axpy_##SUF(float *acc, float s, const void *row, int n)                         \
    {                                                                                                  \
        scalar_axpy_t(acc, s, row, T, n);                                                              \
    }                                                                                                  \
    static void scalar_rows_##SUF(float *dst, const void *src, size_t stride, int rows, int n)         \
    {                                                                                                  \
        scalar_rows_to_f32_t(dst, src, stride, rows, T, n);                                            \
    }
SCALAR_TYPE_OPS(f32, CAIRN_DTYPE_F32)
SCALAR_TYPE_OPS(f16, CAIRN_DTYPE_F16)
SCALAR_TYPE_OPS(bf16, CAIRN_DTYPE_BF16)
static void scalar_from_f32_f32(void *dst, const float *src, int n) { memcpy(dst, src, (size_t)n * 4); }
static void scalar_from_f32_f16(void *dst, const float *src, int n)
{
    uint16_t *d = dst;
    for (int i = 0; i < n; i++)
        d[i] = compute_f32_to_f16(src[i]);
}
static void scalar_from_f32_bf16(void *dst, const float *src, int n)
{
    uint16_t *d = dst;
    for (int i = 0; i < n; i++)
        d[i] = compute_f32_to_bf16(src[i]);
}
#define SCALAR_ROW(SUF)                                                                                \
    {scalar_matmul_##SUF, scalar_dot_##SUF, scalar_axpy_##SUF, scalar_rows_##SUF, scalar_from_f32_##SUF, \
     CAIRN_DTYPE_F32, NULL, NULL, NULL, NULL}

/* The canonical RMSNorm sum (kernels_impl.h): squares rounded to float, summed in double in
 * 8 lanes over blocks of 8 (zero-padded), then (j, j+4), (j, j+2), (0, 1). */
static double scalar_sumsq(const float *x, int n)
{
    double a[8] = {0};
    for (int k = 0; k < n; k += 8)
        for (int j = 0; j < 8; j++)
            if (k + j < n) {
                float sq = x[k + j] * x[k + j];
                a[j] += (double)sq;
            }
    double b[4], c[2];
    for (int j = 0; j < 4; j++)
        b[j] = a[j] + a[j + 4];
    for (int j = 0; j < 2; j++)
        c[j] = b[j] + b[j + 2];
    return c[0] + c[1];
}

float kern__exp(float x)
{
    if (isnan(x))
        return x;
    if (x > KERN_EXP_HI)
        return INFINITY;
    if (x < KERN_EXP_LO)
        return 0.0f;
    float k = rintf(x * KERN_LOG2E);
    float r = fmaf(-k, KERN_LN2_HI, x);
    r = fmaf(-k, KERN_LN2_LO, r);
    float p = KERN_EXP_C7;
    p = fmaf(p, r, KERN_EXP_C6);
    p = fmaf(p, r, KERN_EXP_C5);
    p = fmaf(p, r, KERN_EXP_C4);
    p = fmaf(p, r, KERN_EXP_C3);
    p = fmaf(p, r, KERN_EXP_C2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    int ki = (int)k;
    int k1 = (int)floorf(k * 0.5f), k2 = ki - k1;
    float s1 = bits_f32((uint32_t)(k1 + 127) << 23), s2 = bits_f32((uint32_t)(k2 + 127) << 23);
    return p * s1 * s2;
}

static void scalar_silu_mul(float *out, const float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float s = g / (1.0f + kern__exp(-g));
        out[i] = s * up[i];
    }
}

static void scalar_gelu_tanh_mul(float *out, const float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float g3 = (g * g) * g;
        float u = g + KERN_GELU_K * g3;
        float e = kern__exp(KERN_GELU_M2C * u);
        float s = g / (1.0f + e);
        out[i] = s * up[i];
    }
}

static void scalar_sigmoid_mul(float *out, const float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + kern__exp(-gate[i]));
        out[i] = s * up[i];
    }
}

static void scalar_norm_apply(float *out, const float *x, float s, const void *w, cairn_dtype_t wt, int n)
{
    if (wt == CAIRN_DTYPE_F32) { /* the same two products, without load_elem's switch per element */
        const float *wf = w;
        for (int i = 0; i < n; i++) {
            float h = x[i] * s;
            out[i] = wf[i] * h;
        }
        return;
    }
    for (int i = 0; i < n; i++) {
        float h = x[i] * s; /* HF: (x * rsqrt(var + eps)), then weight * that */
        out[i] = load_elem(w, wt, (size_t)i) * h;
    }
}

const kern_impl_t kern__scalar = {
    .name = "scalar",
    .types = {[CAIRN_DTYPE_F32] = SCALAR_ROW(f32), [CAIRN_DTYPE_F16] = SCALAR_ROW(f16),
              [CAIRN_DTYPE_BF16] = SCALAR_ROW(bf16)}, /* quantized types: quant_kernels.c's rows, added at resolution */
    .sumsq = scalar_sumsq,
    .norm_apply = scalar_norm_apply,
    .glu = {[COMPUTE_GLU_SILU] = scalar_silu_mul, [COMPUTE_GLU_GELU_TANH] = scalar_gelu_tanh_mul,
            [COMPUTE_GLU_SIGMOID] = scalar_sigmoid_mul},
    .bf16_math_fast = false,
    .attn = &attn__generic,
    .delta_step = dr_ref_delta_step, /* delta_rule.c */
};

/* ---- registry and dispatch -------------------------------------------------------- */

/* Every implementation name any build of Cairn has (the CAIRN_KERNELS values): a name on
 * this list that this build lacks is "unsupported", any other name "invalid". */
static const char *const all_names[] = {"scalar", "avx2", "avx512", "avx512-emubf16", "amx"};

enum { MAX_IMPLS = 8 };
static kern_impl_t resolved[MAX_IMPLS]; /* the registry, complete, best first */
static const kern_impl_t *sources[MAX_IMPLS];
static int n_resolved;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

/* The scalar implementation's row of type t: kern__scalar's own rows for the plain float
 * types, quant_kernels.c's for the quantized ones. */
static const kern_type_ops_t *scalar_row(int t)
{
    switch ((cairn_dtype_t)t) {
    case CAIRN_DTYPE_Q8_0: return &kern__scalar_q8_0;
    case CAIRN_DTYPE_Q4_0: return &kern__scalar_q4_0;
    case CAIRN_DTYPE_Q4_K: return &kern__scalar_q4_k;
    case CAIRN_DTYPE_Q5_K: return &kern__scalar_q5_k;
    case CAIRN_DTYPE_Q6_K: return &kern__scalar_q6_k;
    case CAIRN_DTYPE_Q8_K: return &kern__scalar_q8_k;
    case CAIRN_DTYPE_FP8_E4M3: return &kern__scalar_fp8;
    case CAIRN_DTYPE_F32:
    case CAIRN_DTYPE_F16:
    case CAIRN_DTYPE_BF16: return &kern__scalar.types[t];
    }
    CAIRN_ASSERT(!"scalar_row: a type without a row (COMPUTE_DTYPE_COUNT and the table disagree)");
    return NULL;
}

static void resolve_one(kern_impl_t *dst, const kern_impl_t *src)
{
    *dst = *src;
    for (int t = 0; t < COMPUTE_DTYPE_COUNT; t++) {
        kern_type_ops_t *o = &dst->types[t];
        const kern_type_ops_t *s = scalar_row(t);
        if (!o->matmul_range)
            o->matmul_range = s->matmul_range;
        if (!o->dot)
            o->dot = s->dot;
        if (!o->axpy)
            o->axpy = s->axpy;
        if (!o->rows_to_f32)
            o->rows_to_f32 = s->rows_to_f32;
        if (!o->from_f32)
            o->from_f32 = s->from_f32;
        if (!o->qmatmul_range)
            o->qmatmul_range = s->qmatmul_range;
        o->act = s->act; /* canonical: the same activation type in every implementation */
    }
    if (!dst->sumsq)
        dst->sumsq = kern__scalar.sumsq;
    if (!dst->norm_apply)
        dst->norm_apply = kern__scalar.norm_apply;
    for (int a = 0; a < COMPUTE_GLU_COUNT; a++)
        if (!dst->glu[a])
            dst->glu[a] = kern__scalar.glu[a];
    if (!dst->attn)
        dst->attn = kern__scalar.attn;
    if (!dst->conv_step)
        dst->conv_step = kern__scalar.conv_step;
    if (!dst->delta_step)
        dst->delta_step = kern__scalar.delta_step;
}

static void resolve_all(void)
{
#ifdef CAIRN_HAVE_X86
    for (int i = 0; i < kern__x86_n_impls && n_resolved < MAX_IMPLS - 1; i++)
        sources[n_resolved++] = kern__x86_impls[i];
#endif
    sources[n_resolved++] = &kern__scalar;
    for (int i = 0; i < n_resolved; i++)
        resolve_one(&resolved[i], sources[i]);
}

static int find_impl(const char *name)
{
    pthread_once(&resolve_once, resolve_all);
    for (int i = 0; name && i < n_resolved; i++)
        if (!strcmp(resolved[i].name, name))
            return i;
    return -1;
}

static bool runnable(int i) { return i >= 0 && (!sources[i]->available || sources[i]->available()); }

const kern_impl_t *kern__impl_by_name(const char *name)
{
    int i = find_impl(name);
    return i < 0 ? NULL : &resolved[i];
}

bool kern_impl_available(const char *name) { return runnable(find_impl(name)); }

static const kern_impl_t *_Atomic impl;
static pthread_once_t choose_once = PTHREAD_ONCE_INIT;

static void choose_impl(void)
{
    pthread_once(&resolve_once, resolve_all);
    int best = n_resolved - 1; /* scalar */
    for (int i = 0; i < n_resolved; i++)
        if (runnable(i)) {
            best = i;
            break;
        }
    const char *want = cairn_knob_str("CAIRN_KERNELS", NULL, NULL);
    if (want) {
        int k = find_impl(want);
        /* An implementation this CPU cannot run may name a stand-in with the same bits
         * ("avx512" without AVX512_BF16 means "avx512-emubf16"). */
        if (k >= 0 && !runnable(k) && sources[k]->stand_in)
            k = find_impl(sources[k]->stand_in);
        if (runnable(k))
            best = k;
        else
            cairn_log(CAIRN_LOG_WARN, "CAIRN_KERNELS=%s is unknown or unsupported by this CPU; using %s",
                      want, resolved[best].name);
    }
    atomic_store(&impl, &resolved[best]);
}

const kern_impl_t *kern__current(void)
{
    const kern_impl_t *k = atomic_load_explicit(&impl, memory_order_acquire);
    if (!k) {
        pthread_once(&choose_once, choose_impl);
        k = atomic_load(&impl);
    }
    return k;
}

static inline const kern_impl_t *cur(void) { return kern__current(); }

const char *kern_init(void) { return cur()->name; }
const char *kern_impl_name(void) { return cur()->name; }

int kern__impl_status(const char *name)
{
    int i = find_impl(name);
    if (i < 0) {
        for (size_t j = 0; name && j < CAIRN_ARRAY_LEN(all_names); j++)
            if (!strcmp(name, all_names[j]))
                return CAIRN_EUNSUPPORTED; /* another build's implementation */
        return CAIRN_EINVAL;
    }
    return runnable(i) ? CAIRN_OK : CAIRN_EUNSUPPORTED;
}

int kern_set_impl(const char *name)
{
    int rc = kern__impl_status(name);
    if (rc)
        return rc;
    int i = find_impl(name);
    (void)cur(); /* let the one-time choice happen first so it cannot override us */
    atomic_store(&impl, &resolved[i]);
    return CAIRN_OK;
}

bool kern_bf16_math_fast(void) { return cur()->bf16_math_fast; }

/* ---- matmul over the pool --------------------------------------------------------- */

enum {
    MATMUL_UNIT = 16,          /* outputs per scheduling unit: keeps the SIMD tiles full */
    MATMUL_MAX_N = 8,
    MATMUL_TASKS_PER_THREAD = 4, /* tasks of a large product per participant */
    MATMUL_SPLIT_ROWS = 16       /* float/bf16 weights: more rows, one task per participant */
};

/* The most tasks a product is cut into. The pool's participants claim tasks as they come
 * free, so more tasks than threads let the others finish the share of a thread that was
 * late or lost its CPU; a task is always a fixed slice of outputs, so the cut changes no
 * bit (each output is one canonical reduction inside one task). */
static long max_tasks(const cairn_thread_pool_t *tp)
{
    const int n = cairn_thread_pool_size(tp);
    return n > 1 ? (long)n * MATMUL_TASKS_PER_THREAD : 1;
}

struct matmul_job {
    const kern_impl_t *k;
    const float *x;
    int rows, in, n, units;
    cairn_math_t math;
    kern_mm_t outs[MATMUL_MAX_N];
    int first_unit[MATMUL_MAX_N + 1]; /* product i covers units [first_unit[i], first_unit[i+1]) */
};

/* Task `task` covers a fixed share of the units of all products together (units never
 * straddle products); whichever thread runs it, every output is one canonical reduction,
 * so the bits depend neither on the pool size nor on the cut. */
static void matmul_task(void *p, int task, int n_tasks)
{
    struct matmul_job *j = p;
    int u0 = (int)((long)j->units * task / n_tasks), u1 = (int)((long)j->units * (task + 1) / n_tasks);
    for (int i = 0; i < j->n && u0 < u1; i++) {
        int f0 = j->first_unit[i], f1 = j->first_unit[i + 1];
        if (u0 >= f1)
            continue;
        int e = u1 < f1 ? u1 : f1;
        const kern_mm_t *m = &j->outs[i];
        int o0 = (u0 - f0) * MATMUL_UNIT, o1 = (e - f0) * MATMUL_UNIT < m->out ? (e - f0) * MATMUL_UNIT : m->out;
        if (o0 < o1)
            j->k->types[m->wt].matmul_range(m->y, j->x, j->rows, j->in, m->w, m->out, o0, o1, j->math);
        u0 = e;
    }
}

static void matmul_run(cairn_thread_pool_t *tp, struct matmul_job *j)
{
    long out_total = 0;
    j->units = 0;
    for (int i = 0; i < j->n; i++) {
        j->first_unit[i] = j->units;
        j->units += (j->outs[i].out + MATMUL_UNIT - 1) / MATMUL_UNIT;
        out_total += j->outs[i].out;
    }
    j->first_unit[j->n] = j->units;
    /* Small products are not worth waking the workers for (~64k multiply-adds each). */
    long work = (long)j->rows * j->in * out_total;
    long n_tasks = work / 65536 + 1;
    /* A BF16-math call rounds all of x once per call (kernels_avx512.c): with many rows,
     * one task per thread, so that cost is not paid four times. */
    const long cap = j->rows > MATMUL_SPLIT_ROWS ? cairn_thread_pool_size(tp) : max_tasks(tp);
    if (n_tasks > cap)
        n_tasks = cap;
    if (n_tasks > j->units)
        n_tasks = j->units;
    if (n_tasks >= 1)
        cairn_thread_pool_run(tp, matmul_task, j, (int)n_tasks);
}

/* ---- quantized matmul: activation rounding, then the products ---------------------- */

enum {
    QMM_MAX_ACTS = 2,        /* distinct activation types in one call (q8_0, q8_k) */
    QMM_STACK = 16 * 1024,   /* activation bytes kept on the stack (decode) */
    QMM_FALLBACK = 32 * 1024 /* stack piece when the heap buffer cannot be had */
};

struct qmatmul_job {
    const kern_impl_t *k;
    int rows, n, units;      /* rows and input elements of this piece */
    bool acc;                /* continue from y (a later piece of the input) */
    int n_out;
    kern_mm_t outs[MATMUL_MAX_N];
    size_t w_off[MATMUL_MAX_N]; /* bytes from a weight row's start to this piece */
    size_t ldw[MATMUL_MAX_N];   /* bytes per weight row */
    const void *xq[MATMUL_MAX_N];
    size_t ldq[MATMUL_MAX_N];
    const int32_t *xsum[MATMUL_MAX_N];
    int first_unit[MATMUL_MAX_N + 1];
    size_t y_off;            /* rows skipped: y of product i starts at outs[i].y + y_off * out */
    const void *table[MATMUL_MAX_N]; /* the rows' side table of product i (qmm_table_*), or NULL */
};

static void qmatmul_task(void *p, int task, int n_tasks)
{
    struct qmatmul_job *j = p;
    int u0 = (int)((long)j->units * task / n_tasks), u1 = (int)((long)j->units * (task + 1) / n_tasks);
    for (int i = 0; i < j->n_out && u0 < u1; i++) {
        int f0 = j->first_unit[i], f1 = j->first_unit[i + 1];
        if (u0 >= f1)
            continue;
        int e = u1 < f1 ? u1 : f1;
        const kern_mm_t *m = &j->outs[i];
        int o0 = (u0 - f0) * MATMUL_UNIT, o1 = (e - f0) * MATMUL_UNIT < m->out ? (e - f0) * MATMUL_UNIT : m->out;
        if (o0 < o1 && j->table[i])
            j->k->types[m->wt].qmatmul_range_table(m->y + j->y_off * (size_t)m->out, m->out, j->xq[i], j->ldq[i],
                                                   j->xsum[i], j->rows, j->n,
                                                   (const unsigned char *)m->w + j->w_off[i], j->ldw[i], o0, o1,
                                                   j->acc, j->table[i]);
        else if (o0 < o1)
            j->k->types[m->wt].qmatmul_range(m->y + j->y_off * (size_t)m->out, m->out, j->xq[i], j->ldq[i],
                                             j->xsum[i], j->rows, j->n, (const unsigned char *)m->w + j->w_off[i],
                                             j->ldw[i], o0, o1, j->acc);
        u0 = e;
    }
}

struct act_job {
    const kern_impl_t *k;
    const float *x;
    int rows, in, k0, n; /* round x[r][k0 .. k0 + n) for r < rows */
    int n_act;
    cairn_dtype_t act[QMM_MAX_ACTS];
    unsigned char *dst[QMM_MAX_ACTS];
    size_t ld[QMM_MAX_ACTS];
    int32_t *sums[QMM_MAX_ACTS]; /* q8_0: [rows][n / 32] block sums; NULL otherwise */
};

static void act_task(void *p, int task, int n_tasks)
{
    const struct act_job *j = p;
    int r0 = (int)((long)j->rows * task / n_tasks), r1 = (int)((long)j->rows * (task + 1) / n_tasks);
    for (int a = 0; a < j->n_act; a++)
        for (int r = r0; r < r1; r++) {
            unsigned char *q = j->dst[a] + (size_t)r * j->ld[a];
            j->k->types[j->act[a]].from_f32(q, j->x + (size_t)r * j->in + j->k0, j->n);
            if (j->sums[a])
                kern__q8_0_sums(j->sums[a] + (size_t)r * (j->n / 32), q, j->n / 32);
        }
}

/* Rounds x[0..rows)[k0 .. k0+n) to each activation type, in parallel when it is large. */
static void act_run(cairn_thread_pool_t *tp, struct act_job *a)
{
    long work = (long)a->rows * a->n * a->n_act;
    int n_tasks = work >= 65536 ? cairn_thread_pool_size(tp) : 1;
    if (n_tasks > a->rows)
        n_tasks = a->rows;
    if (n_tasks <= 1)
        act_task(a, 0, 1);
    else
        cairn_thread_pool_run(tp, act_task, a, n_tasks);
}

/* The side tables of one call's products (kern_type_ops_t qmm_table_*): each distinct
 * table filled over its row tiles, the tiles cut among the tasks. */
struct table_job {
    const struct qmatmul_job *q;
    int n_tab, tiles;
    int prod[MATMUL_MAX_N]; /* the product whose type and activations table i is for */
};

static void table_task(void *p, int task, int n_tasks)
{
    const struct table_job *t = p;
    const struct qmatmul_job *j = t->q;
    const int t0 = (int)((long)t->tiles * task / n_tasks), t1 = (int)((long)t->tiles * (task + 1) / n_tasks);
    for (int i = 0; i < t->n_tab && t0 < t1; i++) {
        const int k = t->prod[i];
        j->k->types[j->outs[k].wt].qmm_table_fill((void *)(uintptr_t)j->table[k], j->xq[k], j->ldq[k], j->xsum[k],
                                                  j->rows, j->n, t0, t1);
    }
}

/* Gives the products of j whose type has a side table one (products of one type share it),
 * carved from *mem (allocated here, 64-byte aligned parts; the caller frees it), and fills
 * them. No table (the kernels build their own) when the call takes none or the block cannot
 * be had. */
static void tables_run(cairn_thread_pool_t *tp, struct qmatmul_job *j, void **mem)
{
    struct table_job t = {.q = j, .tiles = (j->rows + 15) / 16};
    size_t bytes[MATMUL_MAX_N], total = 0;
    int owner[MATMUL_MAX_N];
    for (int i = 0; i < j->n_out; i++) {
        const kern_type_ops_t *o = &j->k->types[j->outs[i].wt];
        j->table[i] = NULL;
        owner[i] = -1;
        bytes[i] = 0;
        if (!o->qmm_table_bytes)
            continue;
        for (int p = 0; p < i && owner[i] < 0; p++)
            if (j->outs[p].wt == j->outs[i].wt && bytes[p])
                owner[i] = p;
        if (owner[i] >= 0)
            continue;
        bytes[i] = o->qmm_table_bytes(j->rows, j->n);
        bytes[i] = bytes[i] <= SIZE_MAX - 64 - total ? (bytes[i] + 63) & ~(size_t)63 : 0;
        total += bytes[i];
    }
    unsigned char *base = total ? cairn_malloc(total + 64) : NULL;
    *mem = base;
    if (!base)
        return;
    unsigned char *p = base + (64 - (uintptr_t)base % 64) % 64;
    for (int i = 0; i < j->n_out; i++) {
        if (bytes[i]) {
            j->table[i] = p;
            p += bytes[i];
            t.prod[t.n_tab++] = i;
        } else if (owner[i] >= 0) {
            j->table[i] = j->table[owner[i]];
        }
    }
    int n_tasks = cairn_thread_pool_size(tp);
    if (n_tasks > t.tiles)
        n_tasks = t.tiles;
    if (n_tasks <= 1)
        table_task(&t, 0, 1);
    else
        cairn_thread_pool_run(tp, table_task, &t, n_tasks);
}

/* Tasks per participant of a quantized product (CAIRN_QMM_TASKS, 1..32, default
 * MATMUL_TASKS_PER_THREAD), read once per process: a measuring knob for decode, where each
 * task's first weight tile starts cold and the last task's tail is the others' wait. */
static long qmm_max_tasks(const cairn_thread_pool_t *tp)
{
    static _Atomic int cached = -1;
    int per = atomic_load_explicit(&cached, memory_order_relaxed);
    if (per < 0) {
        per = (int)cairn_knob_int("CAIRN_QMM_TASKS", false, 0, MATMUL_TASKS_PER_THREAD, 1, 32);
        atomic_store_explicit(&cached, per, memory_order_relaxed);
    }
    const int n = cairn_thread_pool_size(tp);
    return n > 1 ? (long)n * per : 1;
}

static void qmatmul_run(cairn_thread_pool_t *tp, struct qmatmul_job *j, long out_total)
{
    long work = (long)j->rows * j->n * out_total / 4; /* int8 products are ~4x cheaper */
    long n_tasks = work / 65536 + 1;
    if (n_tasks > qmm_max_tasks(tp))
        n_tasks = qmm_max_tasks(tp);
    if (n_tasks > j->units)
        n_tasks = j->units;
    if (n_tasks >= 1)
        cairn_thread_pool_run(tp, qmatmul_task, j, (int)n_tasks);
}

/* Bytes of one activation row of n elements in the driver's buffer (blocks and sums). */
static size_t act_row_bytes(cairn_dtype_t act, int n)
{
    size_t b = cairn_dtype_row_bytes(act, n);
    return act == CAIRN_DTYPE_Q8_0 ? b + (size_t)(n / 32) * sizeof(int32_t) : b;
}

/*
 * The quantized products of one call (every outs[i].wt quantized, n <= MATMUL_MAX_N). x is
 * rounded once per activation type for all rows into one buffer (the stack for decode,
 * else the heap); when the heap buffer cannot be had, rows and input are cut into pieces
 * that fit a fixed stack buffer and the products carry their accumulators across pieces,
 * which changes no bit (kernels_impl.h) — only speed.
 */
static void qmatmul_n(const kern_impl_t *k, cairn_thread_pool_t *tp, const float *x, int rows, int in,
                      const kern_mm_t *outs, int n)
{
    struct qmatmul_job j = {.k = k, .n_out = n};
    struct act_job a = {.k = k, .x = x, .in = in};
    int act_of[MATMUL_MAX_N];
    int piece = 1; /* input granularity: the largest block among weights and activations */
    long out_total = 0;
    for (int i = 0; i < n; i++) {
        const kern_type_ops_t *t = &k->types[outs[i].wt];
        CAIRN_ASSERT(t->qmatmul_range != NULL);
        int f = 0;
        while (f < a.n_act && a.act[f] != t->act)
            f++;
        if (f == a.n_act) {
            CAIRN_ASSERT(a.n_act < QMM_MAX_ACTS);
            a.act[a.n_act++] = t->act;
        }
        act_of[i] = f;
        int bw = cairn_dtype_block_elems(outs[i].wt), ba = cairn_dtype_block_elems(t->act);
        piece = bw > piece ? bw : piece;
        piece = ba > piece ? ba : piece;
        j.outs[i] = outs[i];
        j.ldw[i] = cairn_dtype_row_bytes(outs[i].wt, in);
        CAIRN_ASSERT(j.ldw[i] > 0); /* in is whole blocks: checked when the weights were bound */
        j.first_unit[i] = j.units;
        j.units += (outs[i].out + MATMUL_UNIT - 1) / MATMUL_UNIT;
        out_total += outs[i].out;
    }
    j.first_unit[n] = j.units;

    /* Per row: each activation type's blocks, plus the q8_0 block sums. */
    size_t row_bytes = 0;
    for (int f = 0; f < a.n_act; f++)
        row_bytes += act_row_bytes(a.act[f], in);
    /* Each region (sums, blocks) starts 64-byte aligned: QMM_PAD covers the padding. */
    const size_t pad = (size_t)QMM_MAX_ACTS * 2 * 64;
    _Alignas(64) unsigned char stack[QMM_STACK > QMM_FALLBACK ? QMM_STACK : QMM_FALLBACK];
    unsigned char *buf = NULL, *heap = NULL;
    if ((size_t)rows * row_bytes + pad <= sizeof stack)
        buf = stack;
    else if ((size_t)rows <= (SIZE_MAX - pad - 64) / row_bytes && (heap = cairn_malloc((size_t)rows * row_bytes + pad + 64)))
        buf = heap + (64 - (uintptr_t)heap % 64) % 64;

    int rstep = rows, kstep = in;
    if (!buf) {
        /* Pieces of the stack buffer: as many whole rows as fit, else one row and as many
         * whole pieces of the input as fit. */
        buf = stack;
        size_t per_piece = 0;
        for (int f = 0; f < a.n_act; f++)
            per_piece += act_row_bytes(a.act[f], piece);
        if (row_bytes + pad <= sizeof stack) {
            rstep = (int)((sizeof stack - pad) / row_bytes);
        } else {
            rstep = 1;
            kstep = (int)((sizeof stack - pad) / per_piece) * piece;
        }
    }
    for (int r0 = 0; r0 < rows; r0 += rstep)
        for (int k0 = 0; k0 < in; k0 += kstep) {
            const int nr = rows - r0 < rstep ? rows - r0 : rstep, nk = in - k0 < kstep ? in - k0 : kstep;
            a.x = x + (size_t)r0 * in;
            a.rows = nr;
            a.k0 = k0;
            a.n = nk;
            unsigned char *p = buf;
            for (int f = 0; f < a.n_act; f++) {
                a.ld[f] = cairn_dtype_row_bytes(a.act[f], nk);
                a.sums[f] = NULL;
                if (a.act[f] == CAIRN_DTYPE_Q8_0) {
                    a.sums[f] = (int32_t *)(void *)p;
                    p += ((size_t)nr * (size_t)(nk / 32) * sizeof(int32_t) + 63) & ~(size_t)63;
                }
                a.dst[f] = p;
                p += ((size_t)nr * a.ld[f] + 63) & ~(size_t)63;
            }
            act_run(tp, &a);
            j.rows = nr;
            j.n = nk;
            j.acc = k0 > 0;
            j.y_off = (size_t)r0;
            for (int i = 0; i < n; i++) {
                j.xq[i] = a.dst[act_of[i]];
                j.ldq[i] = a.ld[act_of[i]];
                j.xsum[i] = a.sums[act_of[i]];
                j.w_off[i] = cairn_dtype_row_bytes(outs[i].wt, k0);
                j.table[i] = NULL;
            }
            /* One side table per call and weight type where the kernels take one (not for
             * the fallback's pieces: the heap is short then) */
            void *tables = NULL;
            if (rstep == rows && kstep == in)
                tables_run(tp, &j, &tables);
            qmatmul_run(tp, &j, out_total);
            cairn_free(tables);
        }
    cairn_free(heap);
}

void kern__matmul_n(const kern_impl_t *k, cairn_thread_pool_t *tp, const float *x, int rows, int in,
                    const kern_mm_t *outs, int n, cairn_math_t math)
{
    if (rows <= 0)
        return;
    for (int start = 0; start < n; start += MATMUL_MAX_N) {
        /* Plain and quantized products run as two jobs (a fused call never mixes them in
         * practice: q/k/v and gate/up share a file's type). */
        struct matmul_job j = {.k = k, .x = x, .rows = rows, .in = in < 0 ? 0 : in, .math = math};
        kern_mm_t q[MATMUL_MAX_N];
        int nq = 0;
        for (int i = start; i < n && i < start + MATMUL_MAX_N; i++) {
            if (outs[i].out <= 0)
                continue;
            CAIRN_ASSERT((unsigned)outs[i].wt < COMPUTE_DTYPE_COUNT);
            if (k->types[outs[i].wt].qmatmul_range) {
                q[nq++] = outs[i];
                continue;
            }
            CAIRN_ASSERT(k->types[outs[i].wt].matmul_range);
            j.outs[j.n++] = outs[i];
        }
        if (j.n)
            matmul_run(tp, &j);
        if (nq && in > 0)
            qmatmul_n(k, tp, x, rows, in, q, nq);
    }
}

void kern_matmul(cairn_thread_pool_t *tp, float *y, const float *x, int rows, int in,
                 const void *w, cairn_dtype_t wt, int out, cairn_math_t math)
{
    if (rows <= 0 || out <= 0)
        return;
    kern_mm_t m = {y, w, wt, out};
    kern__matmul_n(cur(), tp, x, rows, in, &m, 1, math);
}

void kern_matmul_n(cairn_thread_pool_t *tp, const float *x, int rows, int in, cairn_dtype_t wt,
                   const kern_mm_out_t *outs, int n, cairn_math_t math)
{
    const kern_impl_t *k = cur();
    for (int start = 0; start < n; start += MATMUL_MAX_N) {
        kern_mm_t m[MATMUL_MAX_N];
        int c = 0;
        for (int i = start; i < n && i < start + MATMUL_MAX_N; i++)
            m[c++] = (kern_mm_t){outs[i].y, outs[i].w, wt, outs[i].out};
        kern__matmul_n(k, tp, x, rows, in, m, c, math);
    }
}

/* ---- vector kernels --------------------------------------------------------------- */

static inline const kern_type_ops_t *type_ops(const kern_impl_t *k, cairn_dtype_t t)
{
    CAIRN_ASSERT((unsigned)t < COMPUTE_DTYPE_COUNT && k->types[t].dot);
    return &k->types[t];
}

float kern_dot(const float *a, const void *b, cairn_dtype_t t, int n)
{
    return type_ops(cur(), t)->dot(a, b, n < 0 ? 0 : n);
}

void kern_axpy(float *acc, float s, const void *row, cairn_dtype_t t, int n)
{
    type_ops(cur(), t)->axpy(acc, s, row, n);
}

void kern__rmsnorm(const kern_impl_t *k, float *out, const float *x, const void *w, cairn_dtype_t wt, int n,
                   float eps, bool unit_offset)
{
    if (n <= 0)
        return;
    /* The mean of the squares in double, then float (as llama.cpp computes it): with
     * quantized activations downstream, matching its rounding here keeps the two engines'
     * activations on the same side of the rounding boundaries. */
    const float mean = (float)(k->sumsq(x, n) / n);
    float scale = 1.0f / sqrtf(mean + eps);
    if (unit_offset) {
        for (int i = 0; i < n; i++) {
            float h = x[i] * scale, ww = 1.0f + load_elem(w, wt, (size_t)i); /* Gemma: (1 + w) in float32 */
            out[i] = ww * h;
        }
        return;
    }
    k->norm_apply(out, x, scale, w, wt, n);
}

void kern_rmsnorm(float *out, const float *x, const void *w, cairn_dtype_t wt, int n, float eps)
{
    kern__rmsnorm(cur(), out, x, w, wt, n, eps, false);
}

void kern_rmsnorm_unit_offset(float *out, const float *x, const void *w, cairn_dtype_t wt, int n, float eps)
{
    kern__rmsnorm(cur(), out, x, w, wt, n, eps, true);
}

void kern_silu_mul(float *out, const float *gate, const float *up, int n)
{
    if (n > 0)
        cur()->glu[COMPUTE_GLU_SILU](out, gate, up, (size_t)n);
}

void kern_glu(float *out, const float *gate, const float *up, size_t n, compute_glu_t act)
{
    CAIRN_ASSERT((unsigned)act < COMPUTE_GLU_COUNT);
    cur()->glu[act](out, gate, up, n);
}

void kern_rope_partial(float *x, int n_heads, int head_dim, int rot_dims, const float *cos_sin)
{
    int half = rot_dims / 2;
    for (int h = 0; h < n_heads; h++) {
        float *q = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
            float x1 = q[i], x2 = q[i + half];
            /* HF: q*cos + rotate_half(q)*sin, rotate_half(q) = cat(-x2, x1); each product
             * rounded, then summed (no fma). */
            float a1 = x1 * c, b1 = x2 * s, a2 = x2 * c, b2 = x1 * s;
            q[i] = a1 - b1;
            q[i + half] = a2 + b2;
        }
    }
}

void kern_rope(float *x, int n_heads, int head_dim, const float *cos_sin)
{
    kern_rope_partial(x, n_heads, head_dim, head_dim, cos_sin);
}

void kern_rope_angles(float *cos_sin, const float *inv_freq, int half_dim, int pos)
{
    for (int i = 0; i < half_dim; i++) {
        float angle = (float)pos * inv_freq[i]; /* float32 product, as HF */
        cos_sin[2 * i] = cosf(angle);
        cos_sin[2 * i + 1] = sinf(angle);
    }
}

void kern_add(float *x, const float *y, int n)
{
    for (int i = 0; i < n; i++)
        x[i] += y[i];
}

/* ---- references ------------------------------------------------------------------- */

void kern_ref_matmul(float *y, const float *x, int rows, int in, const void *w,
                     cairn_dtype_t wt, int out, cairn_math_t math)
{
    bool bf16 = math == CAIRN_MATH_BF16 && wt == CAIRN_DTYPE_BF16;
    size_t wrow = cairn_dtype_row_bytes(wt, in);
    if (traits_of(wt)->quantized) {
        /* The dequantized weights times unrounded x, in double: what the canonical product
         * approximates (it also rounds x to the activation type). */
        float *wf = cairn_malloc((size_t)in * sizeof(float));
        CAIRN_ASSERT(wf != NULL); /* a test reference */
        for (int o = 0; o < out; o++) {
            traits_of(wt)->to_f32(wf, (const char *)w + (size_t)o * wrow, in);
            for (int r = 0; r < rows; r++) {
                double s = 0;
                for (int i = 0; i < in; i++)
                    s += (double)x[(size_t)r * in + i] * wf[i];
                y[(size_t)r * out + o] = (float)s;
            }
        }
        cairn_free(wf);
        return;
    }
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            const void *wo = (const char *)w + (size_t)o * wrow;
            double s = 0;
            for (int i = 0; i < in; i++) {
                float xv = x[(size_t)r * in + i];
                if (bf16)
                    xv = compute_bf16_to_f32(compute_f32_to_bf16(xv));
                s += (double)xv * (double)load_elem(wo, wt, (size_t)i);
            }
            y[(size_t)r * out + o] = (float)s;
        }
}

float kern_ref_dot(const float *a, const void *b, cairn_dtype_t t, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)a[i] * (double)load_elem(b, t, (size_t)i);
    return (float)s;
}

void kern_ref_axpy(float *acc, float s, const void *row, cairn_dtype_t t, int n)
{
    for (int i = 0; i < n; i++) {
        float p = s * load_elem(row, t, (size_t)i);
        acc[i] = acc[i] + p;
    }
}

void kern_ref_rmsnorm(float *out, const float *x, const void *w, cairn_dtype_t wt, int n, float eps)
{
    float ss = 0;
    for (int i = 0; i < n; i++) {
        float sq = x[i] * x[i];
        ss += sq;
    }
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) {
        float h = x[i] * scale;
        out[i] = load_elem(w, wt, (size_t)i) * h;
    }
}

void kern_ref_silu_mul(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        float s = g / (1.0f + expf(-g));
        out[i] = s * up[i];
    }
}

void kern_ref_glu(float *out, const float *gate, const float *up, int n, compute_glu_t act)
{
    for (int i = 0; i < n; i++) {
        double g = gate[i], a;
        switch (act) {
        case COMPUTE_GLU_SILU: a = g / (1.0 + exp(-g)); break;
        case COMPUTE_GLU_GELU_TANH: /* 0.5 g (1 + tanh(u)) = g / (1 + exp(-2u)), without its cancellation */
            a = g / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
            break;
        case COMPUTE_GLU_SIGMOID: a = 1.0 / (1.0 + exp(-g)); break;
        case COMPUTE_GLU_COUNT:
        default: CAIRN_ASSERT(!"kern_ref_glu: not an activation"); a = 0; /* never reached */
        }
        out[i] = (float)(a * (double)up[i]);
    }
}
