/*
 * x86_impls.h — private to the CPU backend: the x86 kernel implementations and what this
 * CPU can run (x86_impls.c reads cpuid and xgetbv once).
 *
 * Only the registry in ../kernels.c includes this, and only in a build with CAIRN_X86
 * (CAIRN_HAVE_X86 defined); the portable code never names an x86 symbol otherwise.
 */
#ifndef CAIRN_COMPUTE_CPU_X86_X86_IMPLS_H
#define CAIRN_COMPUTE_CPU_X86_X86_IMPLS_H

#include "compute/cpu/kernels_impl.h"

/* kernels_avx2.c / kernels_avx512.c; their `available` says whether the CPU has them. */
extern const kern_impl_t kern__avx2;
extern const kern_impl_t kern__avx512;         /* native AVX512_BF16 dot products */
extern const kern_impl_t kern__avx512_emubf16; /* same bits, BF16 dot emulated with AVX-512F */

/* The x86 implementations, best first, for the registry. */
extern const kern_impl_t *const kern__x86_impls[];
extern const int kern__x86_n_impls;

/* CPU features (cpuid + the OS saving the registers), read once; thread-safe. */
bool kern__x86_has_avx2(void);        /* AVX2 + FMA + F16C, OS saves YMM */
bool kern__x86_has_avx512(void);      /* F + BW + VL + DQ on top, OS saves ZMM */
bool kern__x86_has_avx512_bf16(void); /* AVX512_BF16 on top */

#endif
