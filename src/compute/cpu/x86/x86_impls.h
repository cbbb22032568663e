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
extern const kern_impl_t kern__amx; /* "avx512" with AMX-INT8 tiles for quantized prefill, AMX-BF16 for bf16 */

/* GCC's AMX intrinsics (amxtileintrin.h) are asm statements that tell the compiler less
 * than the instructions do: ldtilecfg's operand is declared as 8 bytes read (the
 * configuration is 64), tileloadd declares no memory read at all and tilestored no memory
 * write. Without a barrier the compiler may drop or sink the stores of a configuration or
 * a packed operand that the tiles then read, or read a tile's stored output before (or
 * instead of) what tilestored wrote. AMX_BARRIER(obj) names the object as read and all
 * memory as clobbered: put it after an operand's (or the configuration's) stores and
 * before the tile instructions that read it, and after the tilestored of an output before
 * its first read. It emits no instruction. */
#define AMX_BARRIER(obj) __asm__ volatile("" : : "m"(obj) : "memory")

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
/* The same with the driver's side table (kern_type_ops_t qmm_table_*, qmatmul_range_table),
 * and the table's size and filling: _kq for the k-quants, _b32 for q8_0 / q4_0; q5_k fills
 * as q4_k. */
void kern__amx_qmm_q8_0_table(KERN_QMM_ARGS, const void *table);
void kern__amx_qmm_q4_0_table(KERN_QMM_ARGS, const void *table);
void kern__amx_qmm_q4_k_table(KERN_QMM_ARGS, const void *table);
void kern__amx_qmm_q5_k_table(KERN_QMM_ARGS, const void *table);
void kern__amx_qmm_q6_k_table(KERN_QMM_ARGS, const void *table);
size_t kern__amx_qmm_table_bytes_kq(int rows, int n);
size_t kern__amx_qmm_table_bytes_b32(int rows, int n);
#define KERN_QMM_FILL_ARGS \
    void *table, const void *xq, size_t ldq, const int32_t *xsum, int rows, int n, int t0, int t1
void kern__amx_qmm_table_fill_q4_k(KERN_QMM_FILL_ARGS);
void kern__amx_qmm_table_fill_q6_k(KERN_QMM_FILL_ARGS);
void kern__amx_qmm_table_fill_q8_0(KERN_QMM_FILL_ARGS);
void kern__amx_qmm_table_fill_q4_0(KERN_QMM_FILL_ARGS);

/* The BF16 rows' matmul_range (kern_type_ops_t): kernels_avx512.c's (vdpbf16ps), and
 * bf16_amx.c's (AMX-BF16 tiles for BF16-math calls of >= 32 rows, the rest through the
 * former; same bits). kern__amx_bf16_state: what the latter runs on this CPU, in words. */
void kern__avx512_matmul_bf16w(float *y, const float *x, int rows, int in, const void *w, int out, int o0, int o1,
                               cairn_math_t math);
void kern__amx_matmul_bf16w(float *y, const float *x, int rows, int in, const void *w, int out, int o0, int o1,
                            cairn_math_t math);
const char *kern__amx_bf16_state(void);

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

/* attention_avx512.c: the pair order's AVX-512 emulation (attention_impl.h, steps 1' and
 * 4'; the contracts of kern__attn_amx_scores / _pv, any row count, under DAZ/FTZ). */
void kern__avx512_pair_scores(float *s, size_t lds, const float *q, int rows, const float *kt, int hdp);
void kern__avx512_pair_pv(float *acc, int lda, const float *p, int ldp, int rows, int cnt, const float *vb, int hd);
/* attention_avx512.c: its canonical softmax and key transpose (attn_impl_t's softmax and
 * transpose16), for the tile order (attention_tile.c). */
float kern__avx512_softmax(float *s, int n);
/* attn__pair_pack_q (attention_impl.h) with AVX-512F, the same bits. */
void kern__avx512_pair_pack_q(float *slot, const float *q, int hd, int hdp);
void kern__avx512_transpose16(float *kt, const float *kb, int hd);

/* attention_tile.c: the tile order of bf16 K/V attention (attention_impl.h, steps 1T and
 * 4T) on AMX-BF16. attn__amx_tile: its primitives (every row through the tiles).
 * kern__attn_tile_amx_usable: the CPU has AMX-BF16 (tile data granted) and the tiles
 * passed their sanity check (decided once; thread-safe); kern__attn_tile_amx_state: that
 * decision in words. */
extern const struct attn_impl attn__amx_tile;
bool kern__attn_tile_amx_usable(void);
const char *kern__attn_tile_amx_state(void);

/* attention_amx.c: the pair order on AMX-BF16 tiles. kern__attn_amx_on: the CPU has
 * AMX-BF16 and the tiles passed their self-check against the emulation (decided once;
 * CAIRN_ATTN_TILES=0 keeps them off). kern__attn_amx_state: that decision in words.
 * kern__attn_amx_allow(false) (tests) keeps them off from now on.
 * kern__attn_amx_scores: s[r * lds + k] = the unscaled pair-order dot of packed q row r
 * (q + r * hdp floats, bf16) with key k of kt [hdp][16] (f32 values of bf16), rows a
 * multiple of 16. kern__attn_amx_pv: step 4' for rows (a multiple of 16) of p [rows][ldp]
 * (bf16 values) over cnt positions of vb [cnt][hd], into acc [rows][lda]; only where
 * kern__attn_amx_pv_fits(hd, cnt). */
bool kern__attn_amx_on(void);
const char *kern__attn_amx_state(void);
void kern__attn_amx_allow(bool allow);
void kern__attn_amx_scores(float *s, size_t lds, const float *q, int rows, const float *kt, int hdp);
bool kern__attn_amx_pv_fits(int hd, int cnt);
void kern__attn_amx_pv(float *acc, int lda, const float *p, int ldp, int rows, int cnt, const float *vb, int hd);

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
/* AMX-BF16 on top of kern__x86_has_amx_int8() (bf16_amx.c's tiles; its probe decides). */
bool kern__x86_has_amx_bf16(void);
/* The CPU's family and model (cpuid leaf 1 with the extended fields: the device's Xeon is
 * family 6, model 207); 0, 0 where cpuid has no leaf 1. */
void kern__x86_cpu_signature(unsigned *family, unsigned *model);

#endif
