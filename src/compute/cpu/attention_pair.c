/*
 * attention_pair.c — the pair order of bf16 K/V attention (attention_impl.h, steps 1'
 * and 4') spelled out in scalar code, and the process's choice of attention numerics.
 *
 * Model. The "bf16 pair" numerics is what AMX-BF16 tiles compute when each tile product
 * takes one pair of bf16 elements per C element (x86/attention_amx.c): every pair's two
 * products summed exactly and rounded once, then added to the running sum. This file is
 * its definition: attn__generic_pair runs it with explicit denormals-as-zero and
 * flush-to-zero on every operation (daz / ftz below), and the AVX-512 emulation
 * (x86/attention_avx512.c) and the tiles are held to it bit for bit (test_attention,
 * test_attention_amx). The softmax (steps 2 and 3) is the canonical f32 one.
 *
 * The choice (kern__attn_pair_on): off by default (the f32 order of attention_impl.h) until
 * the tiles have been verified on AMX hardware; CAIRN_ATTN_BF16PAIR=auto runs the pair
 * order where the CPU's AMX-BF16 tiles pass their self-check (the intended default), =1
 * everywhere (the emulation where there are no tiles: tests on machines without AMX). The pair order enters the numerics id
 * (cpu_backend.c: "cpu-attnpair1-f32.2" / "cpu-attnpair1-bf16.2"), so a cache written under one order is never restored under
 * the other. The id changes for every K/V type while the pair order is on, although only
 * bf16 K/V attention computes differently (conservative: the id does not know the K/V
 * type).
 *
 * The tile order's choice (kern__attn_tile_on, attention_impl.h 1T / 4T) lives here too:
 * by default (CAIRN_ATTN_BF16TILE unset, auto or 1) it asks x86/attention_tile.c whether its
 * tiles are usable (AMX-BF16 granted, sanity check passed) and is on where they are;
 * CAIRN_ATTN_BF16TILE=0 turns it off; off wherever there are no tiles (the order has no
 * emulation). It wins over the pair order. Its numerics ids name the CPU's family and
 * model (kern__attn_tile_cpu; cpu_backend.c).
 *
 * Thread-safety: the primitives are pure; the choices are made once under a mutex and read
 * atomically.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cpu/attention_impl.h"
#ifdef CAIRN_HAVE_X86
#include "compute/cpu/x86/x86_impls.h"
#endif

/* ---- the pair order, scalar ---------------------------------------------------------- */

/* An operand read denormals-as-zero; a result flushed to zero (the same test). */
static inline float daz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }
static inline float ftz(float x) { return daz(x); }

float attn__bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if (!(u & 0x7f800000u))
        u &= 0x80000000u; /* a denormal (or zero): signed zero */
    else if ((u & 0x7fffffffu) > 0x7f800000u)
        u = (u | 0x00400000u) & 0xffff0000u; /* NaN, quieted */
    else
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u; /* nearest even (may round to inf) */
    memcpy(&x, &u, 4);
    return x;
}

void attn__pair_pack_q(float *slot, const float *q, int hd, int hdp)
{
    uint16_t *b = (uint16_t *)slot; /* hdp bf16 values in the slot's first half */
    for (int d = 0; d < hdp; d++) {
        float r = d < hd ? attn__bf16_round(q[d]) : 0.0f;
        uint32_t u;
        memcpy(&u, &r, 4);
        b[d] = (uint16_t)(u >> 16);
    }
}

/* One pair's step: acc = ftz(acc + ftz(fma(a1, b1, ftz(a0 * b0)))). */
static inline float pair_step(float acc, float a0, float b0, float a1, float b1)
{
    const float t = ftz(fmaf(daz(a1), daz(b1), ftz(daz(a0) * daz(b0))));
    return ftz(acc + t);
}

static void pair_scores16(float *s, const float *q, const float *kb, int hd, float scale)
{
    for (int k = 0; k < 16; k++) {
        const float *kr = kb + (size_t)k * hd;
        float acc = 0.0f;
        for (int d = 0; d < hd; d += 2) {
            const float q1 = d + 1 < hd ? attn__bf16_round(q[d + 1]) : 0.0f, k1 = d + 1 < hd ? kr[d + 1] : 0.0f;
            acc = pair_step(acc, attn__bf16_round(q[d]), kr[d], q1, k1);
        }
        s[k] = ftz(acc * scale);
    }
}

static float pair_softmax(float *s, int n)
{
    const float l = attn__generic.softmax(s, n);
    for (int j = 0; j < n; j++)
        s[j] = attn__bf16_round(s[j]);
    return l;
}

static void pair_pv(float *acc, int lda, const float *p, int ldp, int rows, int cnt, const float *vb, int hd)
{
    for (int r = 0; r < rows; r++) {
        float *a = acc + (size_t)r * lda;
        const float *pr = p + (size_t)r * ldp;
        for (int j = 0; j < cnt; j += 2) {
            const bool two = j + 1 < cnt; /* a position past the range: p = v = 0 */
            const float *v0 = vb + (size_t)j * hd, *v1 = v0 + hd;
            for (int d = 0; d < hd; d++)
                a[d] = pair_step(a[d], pr[j], v0[d], two ? pr[j + 1] : 0.0f, two ? v1[d] : 0.0f);
        }
    }
}

const attn_impl_t attn__generic_pair = {.name = "generic-pair", .scores16 = pair_scores16, .softmax = pair_softmax,
                                        .pv = pair_pv, .pack_q = attn__pair_pack_q};

/* ---- the choice ---------------------------------------------------------------------- */

enum { PAIR_UNDECIDED = 0, PAIR_OFF, PAIR_ON };
static int pair_mode = PAIR_UNDECIDED;    /* atomic; written under the mutex */
static int pair_forced = -1;              /* kern__attn_pair_set; atomic */
static pthread_mutex_t pair_lock = PTHREAD_MUTEX_INITIALIZER;

bool kern__attn_pair_on(void)
{
    const int forced = __atomic_load_n(&pair_forced, __ATOMIC_ACQUIRE);
    if (forced >= 0)
        return forced == 1;
    int m = __atomic_load_n(&pair_mode, __ATOMIC_ACQUIRE);
    if (m != PAIR_UNDECIDED)
        return m == PAIR_ON;
    pthread_mutex_lock(&pair_lock);
    if ((m = pair_mode) == PAIR_UNDECIDED) {
        /* Off unless asked for: the tiles have not yet run on real AMX hardware with this
         * code (docs/PERFORMANCE.md, session 7). "auto" is the intended default: on where
         * the tiles pass their self-check. Only "auto" asks the tiles. */
        const char *env = getenv("CAIRN_ATTN_BF16PAIR");
        bool on = false;
        if (env && !strcmp(env, "auto")) {
#ifdef CAIRN_HAVE_X86
            on = kern__attn_amx_on();
#endif
        } else {
            on = cairn_knob_bool("CAIRN_ATTN_BF16PAIR", false, false, false);
        }
        m = on ? PAIR_ON : PAIR_OFF;
        __atomic_store_n(&pair_mode, m, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&pair_lock);
    return m == PAIR_ON;
}

/* ---- the tile order's choice (its rendition: x86/attention_tile.c) ------------------ */

static int tile_mode = PAIR_UNDECIDED;    /* atomic; written under the mutex */
static int tile_forced = -1;              /* kern__attn_tile_set; atomic */

const attn_impl_t *kern__attn_tile_impl(void)
{
#ifdef CAIRN_HAVE_X86
    return kern__attn_tile_amx_usable() ? &attn__amx_tile : NULL;
#else
    return NULL;
#endif
}

bool kern__attn_tile_on(void)
{
    const int forced = __atomic_load_n(&tile_forced, __ATOMIC_ACQUIRE);
    if (forced >= 0)
        return forced == 1;
    int m = __atomic_load_n(&tile_mode, __ATOMIC_ACQUIRE);
    if (m != PAIR_UNDECIDED)
        return m == PAIR_ON;
    pthread_mutex_lock(&pair_lock);
    if ((m = tile_mode) == PAIR_UNDECIDED) {
        /* On by default ("auto"): the tiles are asked (their sanity check runs once) unless
         * CAIRN_ATTN_BF16TILE=0. */
        const char *env = getenv("CAIRN_ATTN_BF16TILE");
        const bool want = !env || !*env || !strcmp(env, "auto") || !strcmp(env, "1");
        m = want && kern__attn_tile_impl() ? PAIR_ON : PAIR_OFF;
        __atomic_store_n(&tile_mode, m, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&pair_lock);
    return m == PAIR_ON;
}

void kern__attn_tile_set(int mode) { __atomic_store_n(&tile_forced, mode < 0 ? -1 : mode ? 1 : 0, __ATOMIC_RELEASE); }

static char tile_cpu_name[32] = "none";
static pthread_once_t tile_cpu_once = PTHREAD_ONCE_INIT;

static void tile_cpu_fill(void)
{
#ifdef CAIRN_HAVE_X86
    unsigned fam = 0, model = 0;
    kern__x86_cpu_signature(&fam, &model);
    snprintf(tile_cpu_name, sizeof tile_cpu_name, "x86f%um%u", fam, model);
#endif
}

const char *kern__attn_tile_cpu(void)
{
    pthread_once(&tile_cpu_once, tile_cpu_fill);
    return tile_cpu_name;
}

const char *kern__attn_tile_state(void)
{
#ifdef CAIRN_HAVE_X86
    return kern__attn_tile_amx_state();
#else
    return "no tiles in this build";
#endif
}

void kern__attn_pair_set(int mode) { __atomic_store_n(&pair_forced, mode < 0 ? -1 : mode ? 1 : 0, __ATOMIC_RELEASE); }

void kern__attn_pair_tiles_allow(bool allow)
{
#ifdef CAIRN_HAVE_X86
    kern__attn_amx_allow(allow);
#else
    (void)allow;
#endif
}

const char *kern__attn_pair_tiles_state(void)
{
#ifdef CAIRN_HAVE_X86
    return kern__attn_amx_state();
#else
    return "no tiles in this build";
#endif
}
