/*
 * util.c — the shared small helpers of util/util.h (clock, array growth, messages, paths,
 * hex digits). Stateless and reentrant.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "util/util.h"

double cairn_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double cairn_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int cairn_grow_array(void **p, size_t *cap, size_t need, size_t elem, size_t min_cap)
{
    if (need <= *cap)
        return CAIRN_OK;
    if (elem == 0 || need > SIZE_MAX / elem)
        return CAIRN_ENOMEM;
    size_t n = *cap ? *cap : (min_cap ? min_cap : 1);
    while (n < need)
        n = n > SIZE_MAX / 2 / elem ? need : n * 2;
    void *q = cairn_realloc(*p, n * elem);
    if (!q)
        return CAIRN_ENOMEM;
    *p = q;
    *cap = n;
    return CAIRN_OK;
}

int cairn_grow_array_int(void **p, int *cap, int need, size_t elem, int min_cap)
{
    if (need < 0 || *cap < 0 || min_cap < 0)
        return CAIRN_EINVAL;
    size_t c = (size_t)*cap;
    int rc = cairn_grow_array(p, &c, (size_t)need, elem, (size_t)min_cap);
    if (rc)
        return rc;
    *cap = c > INT_MAX ? INT_MAX : (int)c;
    return CAIRN_OK;
}

void cairn_errf(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || !err_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

char *cairn_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = cairn_malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

int cairn_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}
