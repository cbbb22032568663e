/*
 * cpu_backend.h — the CPU compute backend: the first implementation of backend.h.
 *
 * Model: host memory, the kernels of kernels.h on the backend's thread pool, one kernel
 * implementation per backend object (chosen at creation and never compared again: its
 * resolved function table is held by the object). Every implementation computes the
 * canonical numerics of kernels_impl.h, so every CPU backend object has the numerics ids
 * "f32" and "bf16" whatever its implementation.
 *
 * Thread-safety: as backend.h (one thread at a time per object; ops use the pool).
 */
#ifndef CAIRN_COMPUTE_CPU_CPU_BACKEND_H
#define CAIRN_COMPUTE_CPU_CPU_BACKEND_H

#include "compute/backend.h"
#include "util/thread_pool.h"

/* The registry's constructor for "cpu" (see compute_backend_create for the errors). */
int compute_cpu_create(const compute_backend_options_t *opt, compute_backend_t **out, char *err,
                       size_t err_len);

/* The pool the backend's ops run on (owned or borrowed per the options), for code that
 * still calls kern_* directly during the move to the backend interface. */
cairn_thread_pool_t *compute_cpu_thread_pool(const compute_backend_t *be);

/* The name of the kernel implementation the backend runs ("avx512", "scalar", ...). */
const char *compute_cpu_impl_name(const compute_backend_t *be);

#endif
