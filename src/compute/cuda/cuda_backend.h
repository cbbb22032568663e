/*
 * cuda_backend.h — the CUDA compute backend (src/compute/cuda): the ops of backend.h on an
 * NVIDIA GPU (sm_90, the H100/H200), registered as "cuda" in backend.c.
 *
 * Numerics: every matrix product is bf16 x bf16 with float32 accumulation in cuBLASLt
 * (activations rounded to bf16, whatever the math mode), f32 weights run an f32 product;
 * K/V are bf16; attention is tensor-core paged attention with a fixed split of the keys;
 * norms, RoPE and gates are float32 kernels. The numerics id is
 * "cuda-sm<cc>cublaslt<version>-<inv|fast>[r<rows>a<k>].<rev>" (backend.h; rev:
 * CUDA_NUMERICS_REV), the same for both math modes since their bits are the same.
 *
 * Batch invariance (knob CAIRN_CUDA_INVARIANT, default 1): a row's bits never depend on
 * the other rows of a call. Each GEMM shape runs one cuBLASLt algorithm chosen once, with
 * no split-K and no workspace, whatever the number of rows; attention splits every row's
 * keys at multiples of a split size that is a function of the row's own position (512
 * keys below position 2048, 1024 below 4096, 2048 from there: cuda_attn_split_for) and
 * merges the splits in order, whatever the batch. CAIRN_CUDA_INVARIANT=0 is the fast mode: cuBLASLt's heuristic
 * per row count (split-K, workspace); its numerics id has "-fast". Attention keeps the
 * position rule in both modes (bench_cuda_attention's split sweep measures what a split
 * fitted to the batch would gain).
 *
 * Thread-safety: as backend.h (one thread at a time per object).
 */
#ifndef CAIRN_COMPUTE_CUDA_BACKEND_H
#define CAIRN_COMPUTE_CUDA_BACKEND_H

#include "compute/backend.h"

/* Creates the backend on device CAIRN_CUDA_DEVICE (default 0). CAIRN_EUNSUPPORTED when
 * no usable device is present (the message says why), CAIRN_ENOMEM. */
int compute_cuda_create(const compute_backend_options_t *opt, compute_backend_t **out, char *err,
                        size_t err_len);

/* For tests and benchmarks: whether be runs the batch-invariant mode. */
bool compute_cuda_invariant(const compute_backend_t *be);

#endif
