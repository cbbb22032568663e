/*
 * amx_tile_model.h — the part of a software model of the AMX tiles that every emulated-tile
 * test shares (test_quant_amx_emulated.c, test_attention_amx_emulated.c): eight tiles of
 * rows x colsb bytes taken from a palette-1 configuration, ldtilecfg / tilezero / tileloadd /
 * tilestored / tilerelease with their architectural semantics (Intel SDM), checks that no
 * tile is used unconfigured, and the bf16 operand reading (input denormals as zero) and
 * output flushing of the dot-product models. A test includes it after <immintrin.h>, its
 * cmocka headers, <math.h> and <string.h>, defines its own dot-product models (tdpbssd,
 * tdpbf16ps) on tmm[], maps those intrinsics itself, and then includes the kernel file.
 */
#ifndef CAIRN_TESTS_COMPUTE_AMX_TILE_MODEL_H
#define CAIRN_TESTS_COMPUTE_AMX_TILE_MODEL_H

/* Per thread, as the tiles are (a kernel may run on a thread pool). */
static _Thread_local struct {
    int rows, colsb;
    unsigned char d[16][64];
} tmm[8];
static _Thread_local bool configured;

static void emu_loadconfig(const void *cfg)
{
    const unsigned char *b = cfg;
    assert_int_equal(b[0], 1); /* palette 1 */
    for (int t = 0; t < 8; t++) {
        uint16_t colsb;
        memcpy(&colsb, b + 16 + 2 * t, 2);
        tmm[t].colsb = colsb;
        tmm[t].rows = b[48 + t];
        assert_true(tmm[t].rows <= 16 && tmm[t].colsb <= 64);
    }
    configured = true;
}

static void emu_load(int t, const void *base, long stride)
{
    assert_true(configured);
    for (int r = 0; r < tmm[t].rows; r++)
        memcpy(tmm[t].d[r], (const unsigned char *)base + r * stride, (size_t)tmm[t].colsb);
}

static void emu_store(int t, void *base, long stride)
{
    assert_true(configured);
    for (int r = 0; r < tmm[t].rows; r++)
        memcpy((unsigned char *)base + r * stride, tmm[t].d[r], (size_t)tmm[t].colsb);
}

static void emu_zero(int t)
{
    assert_true(configured);
    memset(tmm[t].d, 0, sizeof tmm[t].d);
}

/* A bf16 operand at p as f32, denormals read as zero (the tiles' DAZ). */
static float bf16_in(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    uint32_t u = (uint32_t)h << 16;
    if (!(u & 0x7f800000u))
        u &= 0x80000000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* An f32 result with denormals flushed to a signed zero (the tiles' FTZ). */
static float flush(float f) { return fpclassify(f) == FP_SUBNORMAL ? copysignf(0.0f, f) : f; }

#undef _tile_loadconfig
#undef _tile_release
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stored
#define _tile_loadconfig(c) emu_loadconfig(c)
#define _tile_release() (configured = false)
#define _tile_zero(t) emu_zero(t)
#define _tile_loadd(t, base, stride) emu_load(t, base, stride)
#define _tile_stored(t, base, stride) emu_store(t, base, stride)

#endif
