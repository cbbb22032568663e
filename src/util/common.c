/*
 * common.c — status names, allocation and I/O failure hooks, logging, knobs.
 *
 * The allocation hooks count every call so a test can fail the N-th one; the countdown
 * is one atomic stepped by compare-exchange, so the N-th allocation of the process fails
 * exactly once whichever threads allocate. The I/O hook, the log handler and their user
 * pointers are plain globals: set them before the threads that use them start (or while
 * none runs), as documented in cairn/common.h. Knob parsing implements the single
 * precedence rule (environment > config > default) used by every layer.
 */
#include "cairn/common.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *cairn_strerror(int status)
{
    switch (status) {
    case CAIRN_OK: return "success";
    case CAIRN_ENOMEM: return "out of memory";
    case CAIRN_EINVAL: return "invalid argument";
    case CAIRN_EIO: return "I/O error";
    case CAIRN_ENOENT: return "not found";
    case CAIRN_EFORMAT: return "malformed input";
    case CAIRN_EUNSUPPORTED: return "unsupported feature";
    case CAIRN_EEXHAUSTED: return "pool exhausted";
    case CAIRN_ERANGE: return "value out of range";
    case CAIRN_ESTATE: return "wrong state for this operation";
    case CAIRN_ECORRUPT: return "stored data is corrupt";
    case CAIRN_ENOSPC: return "no space left on device";
    case CAIRN_EBUSY: return "resource busy";
    case CAIRN_ECANCELED: return "canceled";
    case CAIRN_ETEMPLATE: return "chat template error";
    default: return "unknown error";
    }
}

const char *cairn_version(void) { return "0.1.0"; }

/* ---- allocation hooks ---- */

static atomic_long fail_countdown = -1; /* < 0: injection off */
static atomic_bool fail_sticky;
static atomic_ulong alloc_calls;

/* One compare-exchange per step of the countdown, so concurrent allocations each take a
 * distinct count: exactly the chosen one fails (a load then a separate decrement let two
 * threads take the same count, failing none or two). */
static bool alloc_should_fail(void)
{
    atomic_fetch_add(&alloc_calls, 1);
    long c = atomic_load(&fail_countdown);
    while (c >= 0) {
        long next = c > 0 ? c - 1 : atomic_load(&fail_sticky) ? 0 : -1;
        if (atomic_compare_exchange_weak(&fail_countdown, &c, next))
            return c == 0;
    }
    return false;
}

void cairn_alloc_fail_after(long n, bool sticky)
{
    atomic_store(&fail_sticky, sticky);
    atomic_store(&fail_countdown, n < 0 ? -1 : n);
}

unsigned long cairn_alloc_count(void) { return atomic_load(&alloc_calls); }

void *cairn_malloc(size_t n) { return alloc_should_fail() ? NULL : malloc(n ? n : 1); }

void *cairn_calloc(size_t count, size_t size)
{
    if (alloc_should_fail())
        return NULL;
    return calloc(count ? count : 1, size ? size : 1);
}

void *cairn_realloc(void *p, size_t n) { return alloc_should_fail() ? NULL : realloc(p, n ? n : 1); }

void cairn_free(void *p) { free(p); }

char *cairn_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = cairn_malloc(len + 1);
    if (!d)
        return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

char *cairn_strdup(const char *s) { return cairn_strndup(s, strlen(s)); }

/* ---- I/O hook ---- */

static cairn_io_hook_fn io_hook;
static void *io_hook_user;

void cairn_io_set_hook(cairn_io_hook_fn fn, void *user)
{
    io_hook = fn;
    io_hook_user = user;
}

int cairn_io_check(const char *op, const char *path)
{
    cairn_io_hook_fn fn = io_hook;
    return fn ? fn(op, path, io_hook_user) : 0;
}

/* ---- logging ---- */

static cairn_log_fn log_fn;
static void *log_user;

void cairn_log_set_handler(cairn_log_fn fn, void *user)
{
    log_fn = fn;
    log_user = user;
}

void cairn_log(cairn_log_level_t level, const char *fmt, ...)
{
    cairn_log_fn fn = log_fn;
    if (!fn)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fn(level, buf, log_user);
}

/* ---- knobs ---- */

int64_t cairn_knob_int(const char *env_name, bool has_config, int64_t config_value,
                       int64_t default_value, int64_t min, int64_t max)
{
    const char *s = env_name ? getenv(env_name) : NULL;
    if (s && *s) {
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        while (*end && isspace((unsigned char)*end))
            end++;
        if (errno == 0 && *end == '\0' && end != s && v >= min && v <= max)
            return v;
        cairn_log(CAIRN_LOG_WARN, "ignoring %s=\"%s\": not an integer in [%lld, %lld]",
                  env_name, s, (long long)min, (long long)max);
    }
    return has_config ? config_value : default_value;
}

bool cairn_knob_bool(const char *env_name, bool has_config, bool config_value, bool default_value)
{
    const char *s = env_name ? getenv(env_name) : NULL;
    if (s && *s) {
        static const char *yes[] = {"1", "true", "yes", "on"};
        static const char *no[] = {"0", "false", "no", "off"};
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(yes); i++) {
            if (!strcasecmp(s, yes[i]))
                return true;
            if (!strcasecmp(s, no[i]))
                return false;
        }
        cairn_log(CAIRN_LOG_WARN, "ignoring %s=\"%s\": not a boolean", env_name, s);
    }
    return has_config ? config_value : default_value;
}

const char *cairn_knob_str(const char *env_name, const char *config_value, const char *default_value)
{
    const char *s = env_name ? getenv(env_name) : NULL;
    if (s && *s)
        return s;
    return config_value ? config_value : default_value;
}

void cairn__assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "cairn: invariant broken: %s at %s:%d\n", expr, file, line);
    abort();
}
