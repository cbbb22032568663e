/*
 * x86_impls.c — the x86 kernel implementations' registry entry and CPU feature detection.
 *
 * Model: cpuid leaves 1 and 7 say what the CPU implements, xgetbv whether the OS saves
 * the YMM/ZMM state; an implementation is available only when both hold. Read once.
 * AMX-INT8 (and AMX-BF16, the same tile state) also needs the kernel's permission for the
 * tile data (arch_prctl), asked once here. Adding an x86 implementation is a file in this folder plus a line in
 * kern__x86_impls (and its name in ../kernels.c's list of every build's names).
 * Thread-safety: pthread_once.
 */
#include "compute/cpu/x86/x86_impls.h"

#include <cpuid.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct {
    bool avx2, avx512, avx512_bf16, avx512_vnni, amx_int8, amx_bf16;
    unsigned family, model; /* cpuid leaf 1, with the extended fields */
} cpu;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;

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
    cpu.family = (a >> 8) & 0xf;
    cpu.model = (a >> 4) & 0xf;
    if (cpu.family == 6 || cpu.family == 15)
        cpu.model |= ((a >> 16) & 0xf) << 4;
    if (cpu.family == 15)
        cpu.family += (a >> 20) & 0xff;
    bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!osxsave || !avx)
        return;
    uint64_t xcr0 = read_xcr0();
    bool ymm_ok = (xcr0 & 0x6) == 0x6, zmm_ok = (xcr0 & 0xe6) == 0xe6;
    if (__get_cpuid_max(0, NULL) < 7)
        return;
    __cpuid_count(7, 0, a, b, c, d);
    bool avx2 = b & (1u << 5), f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30),
         vl = b & (1u << 31), vnni = c & (1u << 11);
    bool amx_tile = d & (1u << 24), amx_int8 = d & (1u << 25), amx_bf16 = d & (1u << 22),
         tile_os = (xcr0 & 0x60000) == 0x60000;
    cpu.avx2 = ymm_ok && avx2 && fma && f16c;
    cpu.avx512 = cpu.avx2 && zmm_ok && f && dq && bw && vl;
    cpu.avx512_vnni = cpu.avx512 && vnni;
    __cpuid_count(7, 1, a, b, c, d);
    cpu.avx512_bf16 = cpu.avx512 && (a & (1u << 5));
    /* The tile data is an XSAVE component Linux (>= 5.16) enables per process on request;
     * a refusal (older kernel, a sandbox) leaves AMX off and "avx512" runs instead. */
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    cpu.amx_int8 = cpu.avx512_bf16 && cpu.avx512_vnni && amx_tile && amx_int8 && tile_os &&
                   syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    cpu.amx_bf16 = cpu.amx_int8 && amx_bf16;
}

bool kern__x86_has_avx2(void)
{
    pthread_once(&detect_once, detect_cpu);
    return cpu.avx2;
}

bool kern__x86_has_avx512(void)
{
    pthread_once(&detect_once, detect_cpu);
    return cpu.avx512;
}

bool kern__x86_has_avx512_bf16(void)
{
    pthread_once(&detect_once, detect_cpu);
    return cpu.avx512_bf16;
}

bool kern__x86_has_avx512_vnni(void)
{
    pthread_once(&detect_once, detect_cpu);
    return cpu.avx512_vnni;
}

bool kern__x86_has_avx512_native(void) { return kern__x86_has_avx512_bf16() && kern__x86_has_avx512_vnni(); }

bool kern__x86_has_amx_int8(void)
{
    pthread_once(&detect_once, detect_cpu);
    return cpu.amx_int8;
}

bool kern__x86_has_amx_bf16(void)
{
    pthread_once(&detect_once, detect_cpu);
    return cpu.amx_bf16;
}

void kern__x86_cpu_signature(unsigned *family, unsigned *model)
{
    pthread_once(&detect_once, detect_cpu);
    *family = cpu.family;
    *model = cpu.model;
}

const kern_impl_t *const kern__x86_impls[] = {&kern__amx, &kern__avx512, &kern__avx512_emubf16, &kern__avx2};
const int kern__x86_n_impls = (int)CAIRN_ARRAY_LEN(kern__x86_impls);
