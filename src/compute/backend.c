/*
 * backend.c — the registry of compute backends and the capability check every family
 * runs when it binds a model (backend.h).
 *
 * Adding a backend: its folder (src/compute/<name>/) and one line in `registry`.
 * Thread-safety: the registry is immutable.
 */
#include <stdio.h>
#include <string.h>

#include "compute/backend.h"
#include "compute/cpu/cpu_backend.h"
#ifdef CAIRN_HAVE_CUDA
#include "compute/cuda/cuda_backend.h"
#else
/* A build without CUDA still knows the name, so asking for it says what is missing. */
static int compute_cuda_create(const compute_backend_options_t *opt, compute_backend_t **out, char *err,
                               size_t err_len)
{
    (void)opt;
    *out = NULL;
    if (err && err_len)
        snprintf(err, err_len, "this build has no CUDA backend (configure with -DCAIRN_CUDA=ON)");
    return CAIRN_EUNSUPPORTED;
}
#endif

typedef struct {
    const char *name;
    int (*create)(const compute_backend_options_t *opt, compute_backend_t **out, char *err, size_t err_len);
} backend_entry_t;

static const backend_entry_t registry[] = {
    {"cpu", compute_cpu_create},
    {"cuda", compute_cuda_create},
};

static const char *const names[] = {"cpu", "cuda", NULL};

const char *const *compute_backend_names(void) { return names; }

int compute_backend_create(const char *name, const compute_backend_options_t *opt, compute_backend_t **out,
                           char *err, size_t err_len)
{
    *out = NULL;
    if (!name)
        name = "cpu";
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(registry); i++)
        if (!strcmp(registry[i].name, name))
            return registry[i].create(opt, out, err, err_len);
    if (err && err_len)
        snprintf(err, err_len, "no compute backend is named '%s'", name);
    return CAIRN_ENOENT;
}

static const char *op_name(compute_op_t op)
{
    switch (op) {
    case COMPUTE_OP_MATMUL: return "matmul kernel for weights of type";
    case COMPUTE_OP_GET_ROWS: return "embedding lookup for type";
    case COMPUTE_OP_NORM: return "norm kernel for weights of type";
    case COMPUTE_OP_KV: return "K/V storage of type";
    case COMPUTE_OP_SHORT_CONV: return "short convolution kernel for weights of type";
    case COMPUTE_OP_DELTA_RULE: return "gated delta rule kernel";
    case COMPUTE_OP_COUNT: break;
    }
    return "operation";
}

int compute_backend_require(const compute_backend_t *be, compute_op_t op, cairn_dtype_t type, char *err,
                            size_t err_len)
{
    if ((unsigned)op < COMPUTE_OP_COUNT && compute_supports(be, op, type))
        return CAIRN_OK;
    if (err && err_len) {
        if (op == COMPUTE_OP_DELTA_RULE)
            snprintf(err, err_len, "the %s backend has no %s", be->ops->name, op_name(op));
        else
            snprintf(err, err_len, "the %s backend has no %s %s", be->ops->name, op_name(op),
                     cairn_dtype_name(type));
    }
    return CAIRN_EUNSUPPORTED;
}
