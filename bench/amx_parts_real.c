/*
 * amx_parts_real.c — bench_amx_parts's "full" kernels: quant_amx.c compiled into the bench
 * with its real tile instructions under other names (real_amx_qmm_*), so one bench source can
 * measure any build of that file (a variant's -DAMX_KQ_SCHED / -DAMX_B32_AHEAD, or another
 * revision's file first on the include path) beside the library's VNNI kernels. The library
 * still grants the tile permission (kern_impl_available("amx")); only call these where it did.
 */
#if defined(__x86_64__)
#define kern__amx_qmm_q8_0 real_amx_qmm_q8_0
#define kern__amx_qmm_q4_0 real_amx_qmm_q4_0
#define kern__amx_qmm_q4_k real_amx_qmm_q4_k
#define kern__amx_qmm_q5_k real_amx_qmm_q5_k
#define kern__amx_qmm_q6_k real_amx_qmm_q6_k
#define kern__amx_qmm_q8_0_table real_amx_qmm_q8_0_table
#define kern__amx_qmm_q4_0_table real_amx_qmm_q4_0_table
#define kern__amx_qmm_q4_k_table real_amx_qmm_q4_k_table
#define kern__amx_qmm_q5_k_table real_amx_qmm_q5_k_table
#define kern__amx_qmm_q6_k_table real_amx_qmm_q6_k_table
#define kern__amx_qmm_table_bytes_kq real_amx_qmm_table_bytes_kq
#define kern__amx_qmm_table_bytes_b32 real_amx_qmm_table_bytes_b32
#define kern__amx_qmm_table_fill_q4_k real_amx_qmm_table_fill_q4_k
#define kern__amx_qmm_table_fill_q6_k real_amx_qmm_table_fill_q6_k
#define kern__amx_qmm_table_fill_q8_0 real_amx_qmm_table_fill_q8_0
#define kern__amx_qmm_table_fill_q4_0 real_amx_qmm_table_fill_q4_0
#include "compute/cpu/x86/x86_impls.h"
void real_amx_qmm_q8_0(KERN_QMM_ARGS);
void real_amx_qmm_q4_0(KERN_QMM_ARGS);
void real_amx_qmm_q4_k(KERN_QMM_ARGS);
void real_amx_qmm_q5_k(KERN_QMM_ARGS);
void real_amx_qmm_q6_k(KERN_QMM_ARGS);
#include "compute/cpu/x86/quant_amx.c"
#else
typedef int amx_parts_real_empty; /* ISO C: a translation unit declares something */
#endif
