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
extern const kern_impl_t kern__amx;            /* "avx512" with AMX-INT8 tiles for quantized prefill */

/* The x86 implementations, best first, for the registry. */
extern const kern_impl_t *const kern__x86_impls[];
extern const int kern__x86_n_impls;

/* The quantized rows (quant_avx512.c: AVX-512 VNNI; quant_avx2.c: AVX2), the contracts of
 * kern_type_ops_t (kernels_impl.h). */
#define KERN_QMM_ARGS                                                                                  \
    float *y, int ldy, const void *xq, size_t ldq, const int32_t *xsum, int rows, int n, const void *w, \
        size_t ldw, int o0, int o1, bool acc
void kern__avx512_qmm_q8_0(KERN_QMM_ARGS);
void kern__avx512_qmm_q4_0(KERN_QMM_ARGS);
void kern__avx512_qmm_q4_k(KERN_QMM_ARGS);
void kern__avx512_qmm_q5_k(KERN_QMM_ARGS);
void kern__avx512_qmm_q6_k(KERN_QMM_ARGS);
void kern__avx512_from_q8_0(void *dst, const float *src, int n);
void kern__avx512_from_q8_k(void *dst, const float *src, int n);
void kern__avx512_rows_q8_0(float *dst, const void *src, size_t stride, int rows, int n);
void kern__avx512_rows_fp8(float *dst, const void *src, size_t stride, int rows, int n);

/* quant_amx.c: AMX-INT8 tiles for calls of >= 32 rows, the rest through the VNNI rows. */
void kern__amx_qmm_q8_0(KERN_QMM_ARGS);
void kern__amx_qmm_q4_0(KERN_QMM_ARGS);
void kern__amx_qmm_q4_k(KERN_QMM_ARGS);
void kern__amx_qmm_q5_k(KERN_QMM_ARGS);
void kern__amx_qmm_q6_k(KERN_QMM_ARGS);

void kern__avx2_qmm_q8_0(KERN_QMM_ARGS);
void kern__avx2_qmm_q4_0(KERN_QMM_ARGS);
void kern__avx2_qmm_q4_k(KERN_QMM_ARGS);
void kern__avx2_qmm_q5_k(KERN_QMM_ARGS);
void kern__avx2_qmm_q6_k(KERN_QMM_ARGS);
/* The AVX2 quantized rows of a types[] table (kernels_avx2.c, and "avx512-emubf16"). */
#define KERN_AVX2_QROWS                                                                                \
    [CAIRN_DTYPE_Q8_0] = {.qmatmul_range = kern__avx2_qmm_q8_0},                                       \
    [CAIRN_DTYPE_Q4_0] = {.qmatmul_range = kern__avx2_qmm_q4_0},                                       \
    [CAIRN_DTYPE_Q4_K] = {.qmatmul_range = kern__avx2_qmm_q4_k},                                       \
    [CAIRN_DTYPE_Q5_K] = {.qmatmul_range = kern__avx2_qmm_q5_k},                                       \
    [CAIRN_DTYPE_Q6_K] = {.qmatmul_range = kern__avx2_qmm_q6_k}

/* CPU features (cpuid + the OS saving the registers), read once; thread-safe. */
bool kern__x86_has_avx2(void);        /* AVX2 + FMA + F16C, OS saves YMM */
bool kern__x86_has_avx512(void);      /* F + BW + VL + DQ on top, OS saves ZMM */
bool kern__x86_has_avx512_bf16(void); /* AVX512_BF16 on top */
bool kern__x86_has_avx512_vnni(void); /* AVX512_VNNI on top of AVX-512 */
/* "avx512": AVX512_BF16 and AVX512_VNNI (the bf16 dots and the int8 products). */
bool kern__x86_has_avx512_native(void);
/* "amx": "avx512" plus AMX-TILE and AMX-INT8, the OS saving the tile state and the kernel
 * granting this process the tile data (arch_prctl(ARCH_REQ_XCOMP_PERM)). */
bool kern__x86_has_amx_int8(void);

#endif
