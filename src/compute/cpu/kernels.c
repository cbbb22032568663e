/*
 * kernels.c — kernel dispatch, dtype conversions, the portable ("scalar") implementation
 * and the double-precision references.
 *
 * Model. Every reduction follows the canonical order of kernels_impl.h: 16 fma lanes over
 * blocks of 16 (F32 math) or vdpbf16ps-style pairs over blocks of 32 (BF16 math), a
 * zero-padded last block and a fixed summation tree. The order depends only on the
 * reduction length, so rows, threads and chunking never change a result — and because
 * the scalar, AVX2 and AVX-512 code all follow it, neither does the CPU. The scalar code
 * here spells the order out with fmaf(); the SIMD files are faster renditions of it.
 *
 * kern_matmul splits `out` into fixed ranges, one per pool task; each output element is
 * computed entirely by one task.
 *
 * The kern_ref_* functions are the independent references for tests: plain loops with
 * double accumulation (matmul, dot) or the textbook float formulas (rmsnorm, silu).
 *
 * Thread-safety: the implementation is chosen once (pthread_once); kern_set_impl is a
 * test hook that must not race with running kernels. All kernels are pure.
 */
#include "compute/cpu/kernels_impl.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <cpuid.h>

/* ---- conversions ------------------------------------------------------------------ */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float kern_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t kern_f32_to_bf16(float f)
{
    uint32_t b = f32_bits(f);
    if ((b & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((b >> 16) | 0x40); /* quiet NaN, sign and top payload kept */
    b += 0x7fffu + ((b >> 16) & 1u);        /* round to nearest, ties to even */
    return (uint16_t)(b >> 16);
}

float kern_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* zero or subnormal, exact */
        return sign ? -v : v;
    }
    if (e == 31)
        return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t kern_f32_to_f16(float f)
{
    uint32_t b = f32_bits(f);
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
    uint32_t a = b & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* quiet NaN */
    if (a >= 0x477ff000u) /* >= 65520: rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) { /* normal f16 */
        uint32_t r = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu);
        uint32_t rem = a & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
            r++; /* a carry into the exponent is the correct rounding */
        return (uint16_t)(sign | r);
    }
    /* Subnormal f16 (or zero): round(|f| * 2^24) to an integer, ties to even. */
    uint32_t e = a >> 23;
    uint32_t m = e ? ((a & 0x7fffffu) | 0x800000u) : (a & 0x7fffffu);
    uint32_t s = 126u - (e ? e : 1u); /* value = m * 2^(e-150); want m >> s */
    if (s >= 25u)
        return sign; /* below half the smallest subnormal */
    uint32_t r = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    if (rem > half || (rem == half && (r & 1u)))
        r++;
    return (uint16_t)(sign | r);
}

void kern_row_to_f32(float *dst, const void *src, cairn_dtype_t t, int n)
{
    if (t == CAIRN_DTYPE_F32) {
        memmove(dst, src, (size_t)n * 4);
    } else if (t == CAIRN_DTYPE_BF16) {
        const uint16_t *s = src;
        for (int i = 0; i < n; i++)
            dst[i] = kern_bf16_to_f32(s[i]);
    } else {
        const uint16_t *s = src;
        for (int i = 0; i < n; i++)
            dst[i] = kern_f16_to_f32(s[i]);
    }
}

void kern_row_from_f32(void *dst, cairn_dtype_t t, const float *src, int n)
{
    if (t == CAIRN_DTYPE_F32) {
        memmove(dst, src, (size_t)n * 4);
    } else if (t == CAIRN_DTYPE_BF16) {
        uint16_t *d = dst;
        for (int i = 0; i < n; i++)
            d[i] = kern_f32_to_bf16(src[i]);
    } else {
        uint16_t *d = dst;
        for (int i = 0; i < n; i++)
            d[i] = kern_f32_to_f16(src[i]);
    }
}

/* Element i of a row of type t, as float (exact). */
static inline float load_elem(const void *row, cairn_dtype_t t, size_t i)
{
    if (t == CAIRN_DTYPE_F32)
        return ((const float *)row)[i];
    if (t == CAIRN_DTYPE_BF16)
        return kern_bf16_to_f32(((const uint16_t *)row)[i]);
    return kern_f16_to_f32(((const uint16_t *)row)[i]);
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

static float canon_dot_f32(const float *x, const void *w, cairn_dtype_t t, int n)
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
static inline uint16_t bf16_round_daz(float f) { return kern_f32_to_bf16(flush_denormal(f)); }

/* One lane step of vdpbf16ps: acc + a1*b1, then + a0*b0, each an fma with DAZ/FTZ. */
static inline float dpbf16_lane(float acc, uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1)
{
    acc = flush_denormal(acc);
    acc = flush_denormal(fmaf(flush_denormal(kern_bf16_to_f32(a1)),
                              flush_denormal(kern_bf16_to_f32(b1)), acc));
    acc = flush_denormal(fmaf(flush_denormal(kern_bf16_to_f32(a0)),
                              flush_denormal(kern_bf16_to_f32(b0)), acc));
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

static void scalar_matmul_range(float *y, const float *x, int rows, int in, const void *w,
                                cairn_dtype_t wt, int out, int o0, int o1, cairn_math_t math)
{
    size_t wrow = (size_t)in * cairn_dtype_size(wt);
    bool bf16 = math == CAIRN_MATH_BF16 && wt == CAIRN_DTYPE_BF16;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * in;
        for (int o = o0; o < o1; o++) {
            const void *wo = (const char *)w + (size_t)o * wrow;
            y[(size_t)r * out + o] = bf16 ? canon_dot_bf16(xr, wo, in) : canon_dot_f32(xr, wo, wt, in);
        }
    }
}

static float scalar_dot(const float *a, const void *b, cairn_dtype_t t, int n)
{
    return canon_dot_f32(a, b, t, n);
}

static void scalar_axpy(float *acc, float s, const void *row, cairn_dtype_t t, int n)
{
    for (int i = 0; i < n; i++) {
        float p = s * load_elem(row, t, (size_t)i); /* a product, then a sum: no fma */
        acc[i] = acc[i] + p;
    }
}

static float scalar_sumsq(const float *x, int n) { return canon_dot_f32(x, x, CAIRN_DTYPE_F32, n); }

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

static void scalar_silu_mul(float *out, const float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        float s = g / (1.0f + kern__exp(-g));
        out[i] = s * up[i];
    }
}

const kern_impl_t kern__scalar = {
    .name = "scalar",
    .matmul_range = scalar_matmul_range,
    .dot = scalar_dot,
    .axpy = scalar_axpy,
    .sumsq = scalar_sumsq,
    .silu_mul = scalar_silu_mul,
};

/* ---- dispatch --------------------------------------------------------------------- */

static struct {
    bool avx2;        /* AVX2 + FMA + F16C, OS saves YMM */
    bool avx512;      /* F + BW + VL + DQ, OS saves ZMM */
    bool avx512_bf16; /* AVX512_BF16 on top */
} cpu;

static const kern_impl_t *_Atomic impl;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect_cpu(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!osxsave || !avx)
        return;
    uint64_t xcr0 = read_xcr0();
    bool ymm_ok = (xcr0 & 0x6) == 0x6, zmm_ok = (xcr0 & 0xe6) == 0xe6;
    if (__get_cpuid_max(0, NULL) < 7)
        return;
    __cpuid_count(7, 0, a, b, c, d);
    bool avx2 = b & (1u << 5), f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30),
         vl = b & (1u << 31);
    cpu.avx2 = ymm_ok && avx2 && fma && f16c;
    cpu.avx512 = cpu.avx2 && zmm_ok && f && dq && bw && vl;
    __cpuid_count(7, 1, a, b, c, d);
    cpu.avx512_bf16 = cpu.avx512 && (a & (1u << 5));
}

static const kern_impl_t *impl_by_name(const char *name)
{
    if (!strcmp(name, "scalar"))
        return &kern__scalar;
    if (!strcmp(name, "avx2"))
        return &kern__avx2;
    if (!strcmp(name, "avx512"))
        return &kern__avx512;
    if (!strcmp(name, "avx512-emubf16"))
        return &kern__avx512_emubf16;
    return NULL;
}

bool kern_impl_available(const char *name)
{
    const kern_impl_t *k = name ? impl_by_name(name) : NULL;
    pthread_once(&init_once, detect_cpu);
    if (k == &kern__avx2)
        return cpu.avx2;
    if (k == &kern__avx512)
        return cpu.avx512_bf16;
    if (k == &kern__avx512_emubf16)
        return cpu.avx512;
    return k != NULL;
}

static void choose_impl(void)
{
    pthread_once(&init_once, detect_cpu);
    const kern_impl_t *best = cpu.avx512_bf16 ? &kern__avx512
                              : cpu.avx512    ? &kern__avx512_emubf16
                              : cpu.avx2      ? &kern__avx2
                                              : &kern__scalar;
    const char *want = cairn_knob_str("CAIRN_KERNELS", NULL, NULL);
    if (want) {
        const kern_impl_t *k = impl_by_name(want);
        /* "avx512" on a CPU without AVX512_BF16 means the emulating variant. */
        if (k == &kern__avx512 && !cpu.avx512_bf16 && cpu.avx512)
            k = &kern__avx512_emubf16;
        bool ok = k && (k == &kern__scalar || (k == &kern__avx2 && cpu.avx2) ||
                        (k == &kern__avx512_emubf16 && cpu.avx512) || (k == &kern__avx512 && cpu.avx512_bf16));
        if (ok)
            best = k;
        else
            cairn_log(CAIRN_LOG_WARN, "CAIRN_KERNELS=%s is unknown or unsupported by this CPU; using %s",
                      want, best->name);
    }
    atomic_store(&impl, best);
}

static pthread_once_t choose_once = PTHREAD_ONCE_INIT;

static inline const kern_impl_t *cur(void)
{
    const kern_impl_t *k = atomic_load_explicit(&impl, memory_order_acquire);
    if (!k) {
        pthread_once(&choose_once, choose_impl);
        k = atomic_load(&impl);
    }
    return k;
}

const char *kern_init(void) { return cur()->name; }
const char *kern_impl_name(void) { return cur()->name; }

int kern_set_impl(const char *name)
{
    const kern_impl_t *k = name ? impl_by_name(name) : NULL;
    if (!k)
        return CAIRN_EINVAL;
    if (!kern_impl_available(name))
        return CAIRN_EUNSUPPORTED;
    (void)cur(); /* let the one-time choice happen first so it cannot override us */
    atomic_store(&impl, k);
    return CAIRN_OK;
}

bool kern_bf16_math_fast(void)
{
    const kern_impl_t *k = cur();
    return k == &kern__avx512 || k == &kern__avx512_emubf16;
}

/* ---- matmul over the pool --------------------------------------------------------- */

enum { MATMUL_UNIT = 16, MATMUL_MAX_N = 8 }; /* outputs per scheduling unit: keeps the SIMD tiles full */

struct matmul_job {
    const kern_impl_t *k;
    const float *x;
    int rows, in, n, units;
    cairn_dtype_t wt;
    cairn_math_t math;
    kern_mm_out_t outs[MATMUL_MAX_N];
    int first_unit[MATMUL_MAX_N + 1]; /* product i covers units [first_unit[i], first_unit[i+1]) */
};

/* Task `task` covers a fixed share of the units of all products together (units never
 * straddle products), so which thread computes an output never depends on the pool size
 * beyond the static split, and every output is one canonical reduction. */
static void matmul_task(void *p, int task, int n_tasks)
{
    struct matmul_job *j = p;
    int u0 = (int)((long)j->units * task / n_tasks), u1 = (int)((long)j->units * (task + 1) / n_tasks);
    for (int i = 0; i < j->n && u0 < u1; i++) {
        int f0 = j->first_unit[i], f1 = j->first_unit[i + 1];
        if (u0 >= f1)
            continue;
        int e = u1 < f1 ? u1 : f1;
        const kern_mm_out_t *m = &j->outs[i];
        int o0 = (u0 - f0) * MATMUL_UNIT, o1 = (e - f0) * MATMUL_UNIT < m->out ? (e - f0) * MATMUL_UNIT : m->out;
        if (o0 < o1)
            j->k->matmul_range(m->y, j->x, j->rows, j->in, m->w, j->wt, m->out, o0, o1, j->math);
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
    if (n_tasks > cairn_thread_pool_size(tp))
        n_tasks = cairn_thread_pool_size(tp);
    if (n_tasks > j->units)
        n_tasks = j->units;
    if (n_tasks >= 1)
        cairn_thread_pool_run(tp, matmul_task, j, (int)n_tasks);
}

void kern_matmul(cairn_thread_pool_t *tp, float *y, const float *x, int rows, int in,
                 const void *w, cairn_dtype_t wt, int out, cairn_math_t math)
{
    if (rows <= 0 || out <= 0)
        return;
    struct matmul_job j = {.k = cur(), .x = x, .rows = rows, .in = in < 0 ? 0 : in, .n = 1, .wt = wt,
                           .math = math};
    j.outs[0] = (kern_mm_out_t){y, w, out};
    matmul_run(tp, &j);
}

void kern_matmul_n(cairn_thread_pool_t *tp, const float *x, int rows, int in, cairn_dtype_t wt,
                   const kern_mm_out_t *outs, int n, cairn_math_t math)
{
    if (rows <= 0)
        return;
    for (int start = 0; start < n; start += MATMUL_MAX_N) {
        struct matmul_job j = {.k = cur(), .x = x, .rows = rows, .in = in < 0 ? 0 : in, .wt = wt, .math = math};
        for (int i = start; i < n && i < start + MATMUL_MAX_N; i++)
            if (outs[i].out > 0)
                j.outs[j.n++] = outs[i];
        matmul_run(tp, &j);
    }
}

float kern_dot(const float *a, const void *b, cairn_dtype_t t, int n) { return cur()->dot(a, b, t, n < 0 ? 0 : n); }

void kern_axpy(float *acc, float s, const void *row, cairn_dtype_t t, int n) { cur()->axpy(acc, s, row, t, n); }

void kern_rmsnorm(float *out, const float *x, const void *w, cairn_dtype_t wt, int n, float eps)
{
    if (n <= 0)
        return;
    float ss = cur()->sumsq(x, n);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) {
        float h = x[i] * scale; /* HF: (x * rsqrt(var + eps)), then weight * that */
        out[i] = load_elem(w, wt, (size_t)i) * h;
    }
}

void kern_silu_mul(float *out, const float *gate, const float *up, int n) { cur()->silu_mul(out, gate, up, n); }

void kern_rope(float *x, int n_heads, int head_dim, const float *cos_sin)
{
    int half = head_dim / 2;
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
    size_t wrow = (size_t)in * cairn_dtype_size(wt);
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            const void *wo = (const char *)w + (size_t)o * wrow;
            double s = 0;
            for (int i = 0; i < in; i++) {
                float xv = x[(size_t)r * in + i];
                if (bf16)
                    xv = kern_bf16_to_f32(kern_f32_to_bf16(xv));
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
