/*
 * util/util.h — the small helpers every layer needs once: a monotonic clock, checked array
 * growth, error-message formatting, path joining and hex digits.
 *
 * Model. Each helper had several private copies across the layers (five monotonic clocks,
 * four array-growth helpers of which only one checked for overflow, two error setters, three
 * path joiners, three hex-digit parsers); this is the one implementation (util.c).
 *
 * Thread-safety: every function is reentrant; none keeps state.
 */
#ifndef CAIRN_UTIL_UTIL_H
#define CAIRN_UTIL_UTIL_H

#include <stddef.h>

#include "cairn/common.h"

/* Seconds on CLOCK_MONOTONIC (never jumps with the wall clock). */
double cairn_now_seconds(void);
/* The same clock in milliseconds. */
double cairn_now_ms(void);

/*
 * Grows the array *p of *cap elements of elem bytes so that it holds at least need
 * elements: the capacity doubles (starting at min_cap when *cap is 0) until it suffices,
 * and the contents are kept (cairn_realloc). Returns CAIRN_OK (also when no growth was
 * needed), or CAIRN_ENOMEM when the allocation fails or need * elem would overflow —
 * then *p and *cap are unchanged. elem and min_cap must be > 0.
 */
int cairn_grow_array(void **p, size_t *cap, size_t need, size_t elem, size_t min_cap);
/* The same for an int capacity (counts bounded by INT_MAX); need < 0 is CAIRN_EINVAL. */
int cairn_grow_array_int(void **p, int *cap, int need, size_t elem, int min_cap);

/* printf-style message into err[0..err_len) (truncated, always terminated); a NULL err or
 * zero err_len is a no-op. */
void cairn_errf(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* dir "/" name as a new string (free with cairn_free), or NULL when out of memory. */
char *cairn_path_join(const char *dir, const char *name);

/* The value of a hex digit (0-9, a-f, A-F), or -1. */
int cairn_hexval(int c);

#endif
