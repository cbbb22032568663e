/*
 * cairn/common.h — status codes, allocation hooks and logging shared by every layer.
 *
 * Conventions (see docs/DESIGN.md):
 *  - Functions return int: 0 on success or a negative CAIRN_E* code; outputs go through
 *    pointers. cairn_strerror() names a code. The library never exits and never prints
 *    except through the log handler installed by the embedding program.
 *  - All heap allocation goes through cairn_malloc/cairn_calloc/cairn_realloc/cairn_free,
 *    and every file write through cairn_io_hook (see below), so tests can inject failures
 *    on the N-th call (the SQLite discipline).
 *
 * Thread-safety: the hooks and the log handler are process globals meant to be set once at
 * start-up (or by a single-threaded test); the functions that use them are thread-safe.
 */
#ifndef CAIRN_COMMON_H
#define CAIRN_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <sys/types.h>

/* Marks a declaration of the public API. libcairn.so is built with -fvisibility=hidden, so
 * it exports exactly these (include/cairn/ is the whole surface; the layers' internal
 * functions stay private); static linking and the tests, which link the layers' objects,
 * see everything. */
#if defined(__GNUC__) || defined(__clang__)
#define CAIRN_API __attribute__((visibility("default")))
#else
#define CAIRN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. 0 is success; every error is negative. */
enum {
    CAIRN_OK = 0,
    CAIRN_ENOMEM = -1,      /* an allocation failed */
    CAIRN_EINVAL = -2,      /* bad argument or misuse of the API */
    CAIRN_EIO = -3,         /* a read or write failed */
    CAIRN_ENOENT = -4,      /* a file, key or entry does not exist */
    CAIRN_EFORMAT = -5,     /* malformed input (file, JSON, header) */
    CAIRN_EUNSUPPORTED = -6,/* a valid but unsupported feature */
    CAIRN_EEXHAUSTED = -7,  /* the pool (or a queue) has no room even after eviction */
    CAIRN_ERANGE = -8,      /* a value or size outside what is allowed */
    CAIRN_ESTATE = -9,      /* the object is in the wrong state for this call */
    CAIRN_ECORRUPT = -10,   /* stored data failed validation (checksum, hash, header) */
    CAIRN_ENOSPC = -11,     /* the disk is full */
    CAIRN_EBUSY = -12,      /* the resource is in use */
    CAIRN_ECANCELED = -13,  /* the operation was canceled */
    CAIRN_ETEMPLATE = -14,  /* a chat template failed to parse or raised */
};

/* Returns a static, human-readable name for a status code. Never NULL. */
CAIRN_API const char *cairn_strerror(int status);

/* Version string, "MAJOR.MINOR.PATCH". */
CAIRN_API const char *cairn_version(void);

/*
 * Process-wide set-up, once: routes cJSON's allocations through cairn_malloc/cairn_free
 * so allocation failures inside JSON parsing are injected by the hooks below and reported
 * as CAIRN_ENOMEM, never as malformed JSON. Idempotent and thread-safe. The `cairn`
 * command calls it first thing; the library's entry points that parse JSON
 * (cairn_checkpoint_open, cairn_model_config_parse, cairn_tokenizer_load*, and the
 * internal parse wrapper every JSON reader uses) call it too; an embedder that uses cJSON
 * itself should call it before its own first cJSON call, because cJSON's hooks are one
 * process global: afterwards every cJSON allocation of the process goes through
 * cairn_malloc (which is malloc unless a test injects failures).
 */
CAIRN_API void cairn_init(void);

/* ---- Allocation hooks ------------------------------------------------------------ */

/*
 * Allocation functions used by every layer. They behave like the libc functions, except
 * that a test can make them fail: cairn_alloc_fail_after(n) makes the (n+1)-th following
 * allocation (and, if `sticky`, every one after it) return NULL. n < 0 disables injection.
 * cairn_free(NULL) is a no-op. Large arenas (the KV pool, mapped weights) use mmap
 * directly and are not counted.
 */
CAIRN_API void *cairn_malloc(size_t n);
CAIRN_API void *cairn_calloc(size_t count, size_t size);
CAIRN_API void *cairn_realloc(void *p, size_t n);
CAIRN_API void cairn_free(void *p);
CAIRN_API char *cairn_strdup(const char *s);
CAIRN_API char *cairn_strndup(const char *s, size_t n);

CAIRN_API void cairn_alloc_fail_after(long n, bool sticky);
/* Number of allocations made through the hooks since start-up (for tests). */
CAIRN_API unsigned long cairn_alloc_count(void);

/* ---- File-write hook ------------------------------------------------------------- */

/*
 * Every durable write in the library (cold tier objects, directory fsyncs) goes through
 * these wrappers. A test installs a hook to return a failure (e.g. -ENOSPC, -EIO) for a
 * chosen call; the hook receives the operation name ("write", "fsync", "rename", "open")
 * and returns 0 to let the call proceed or a negative errno to fail it.
 */
typedef int (*cairn_io_hook_fn)(const char *op, const char *path, void *user);
CAIRN_API void cairn_io_set_hook(cairn_io_hook_fn fn, void *user);
/* Returns 0 to proceed, or the negative errno the hook chose. */
CAIRN_API int cairn_io_check(const char *op, const char *path);

/* ---- Logging ---------------------------------------------------------------------- */

typedef enum { CAIRN_LOG_DEBUG, CAIRN_LOG_INFO, CAIRN_LOG_WARN, CAIRN_LOG_ERROR } cairn_log_level_t;
typedef void (*cairn_log_fn)(cairn_log_level_t level, const char *msg, void *user);
/* Installs the log handler (NULL: messages are dropped). Default: dropped. */
CAIRN_API void cairn_log_set_handler(cairn_log_fn fn, void *user);
/* printf-style logging through the handler; a no-op when none is installed. */
CAIRN_API void cairn_log(cairn_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- Knobs: environment > config > default ---------------------------------------- */

/*
 * One precedence rule for every tunable: a set, parseable environment variable wins; else
 * the config value if the caller has one (has_config); else the default. An environment
 * value that does not parse (or is out of [min, max]) is ignored with a CAIRN_LOG_WARN
 * naming the variable. Returns the chosen value.
 */
CAIRN_API int64_t cairn_knob_int(const char *env_name, bool has_config, int64_t config_value,
                       int64_t default_value, int64_t min, int64_t max);
/* Boolean knob: accepts 1/0, true/false, yes/no, on/off (case-insensitive). */
CAIRN_API bool cairn_knob_bool(const char *env_name, bool has_config, bool config_value, bool default_value);
/* String knob; returns a pointer to the environment string, config or default (not copied). */
CAIRN_API const char *cairn_knob_str(const char *env_name, const char *config_value, const char *default_value);

/* ---- Element types ---------------------------------------------------------------- */

/*
 * Element type of weights and K/V storage: a block format (block_elems elements in
 * block_bytes bytes; one traits table, src/compute/type_traits.c). f32 (4 bytes), f16 and
 * bf16 (2 bytes) are blocks of one element. The block-quantized types are GGUF's (ggml's
 * layouts, docs/FORMAT.md section 4): q8_0 and q4_0 (blocks of 32 with an f16 scale),
 * the k-quants q4_k, q5_k, q6_k (super-blocks of 256 with 6- or 8-bit sub-block scales),
 * q8_k (blocks of 256 with an f32 scale: the activation format of the k-quant products,
 * no weight type) and fp8_e4m3 (blocks of 32 e4m3 values with an f16 scale: an 8-bit K/V
 * type, not a GGUF one). The values are stable: they are written into cold-tier objects
 * and model fingerprints. A value outside the enum is no type: the functions below report
 * it (0, "?", CAIRN_EINVAL) and never treat it as another type.
 */
typedef enum {
    CAIRN_DTYPE_F32 = 0,
    CAIRN_DTYPE_F16 = 1,
    CAIRN_DTYPE_BF16 = 2,
    CAIRN_DTYPE_Q8_0 = 3,
    CAIRN_DTYPE_Q4_0 = 4,
    CAIRN_DTYPE_Q4_K = 5,
    CAIRN_DTYPE_Q5_K = 6,
    CAIRN_DTYPE_Q6_K = 7,
    CAIRN_DTYPE_Q8_K = 8,
    CAIRN_DTYPE_FP8_E4M3 = 9,
} cairn_dtype_t;
/* Bytes of one element: 4 or 2; 0 for an unknown type or a block-quantized one (whose
 * elements have no size of their own: use cairn_dtype_row_bytes). Callers that validate
 * input treat 0 as an error. */
CAIRN_API size_t cairn_dtype_size(cairn_dtype_t t);
/* Bytes of n consecutive elements of t; 0 when t is unknown, n < 0 or n is not a whole
 * number of t's blocks. */
CAIRN_API size_t cairn_dtype_row_bytes(cairn_dtype_t t, int64_t n);
/* Elements per block of t (1 for f32/f16/bf16, 32 or 256 for the quantized types); 0 for
 * an unknown type. */
CAIRN_API int cairn_dtype_block_elems(cairn_dtype_t t);
/* "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q8_k", "fp8_e4m3"; "?"
 * for an unknown type. */
CAIRN_API const char *cairn_dtype_name(cairn_dtype_t t);
/* Parses a name above or a long name ("float32", "float16", "bfloat16", "float8_e4m3"),
 * any case; CAIRN_EINVAL otherwise. */
CAIRN_API int cairn_dtype_parse(const char *s, cairn_dtype_t *out);

/* Broken invariant (never bad input): prints the location and aborts. */
#define CAIRN_ASSERT(cond) \
    do { if (!(cond)) cairn__assert_fail(#cond, __FILE__, __LINE__); } while (0)
CAIRN_API void cairn__assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));

#define CAIRN_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_COMMON_H */
