/*
 * util/json.h — JSON parsing through cJSON with out-of-memory told apart from bad input.
 *
 * cJSON reports "allocation failed" and "malformed text" alike (a NULL result). cairn_init()
 * (include/cairn/common.h) routes cJSON's allocations through cairn_malloc/cairn_free once
 * per process; the hook records a failure in a thread-local flag, and cairn_json_parse()
 * reads it, so every caller can answer CAIRN_ENOMEM (a 503, an "out of memory" message)
 * rather than CAIRN_EFORMAT (a 400, "not valid JSON") when memory ran out.
 *
 * Thread-safety: reentrant; the failure flag is per thread.
 */
#ifndef CAIRN_UTIL_JSON_H
#define CAIRN_UTIL_JSON_H

#include <cjson/cJSON.h>

#include "cairn/common.h"

/*
 * Parses text[0..len) (need not be NUL-terminated) into *out (free with cJSON_Delete).
 * Parsing stops after the first value; with end != NULL, *end points past it (the caller
 * checks what follows), otherwise whatever follows is ignored (cJSON_ParseWithLength's
 * behaviour).
 * Returns CAIRN_OK, CAIRN_ENOMEM (an allocation failed: the text may be valid) or
 * CAIRN_EFORMAT (malformed; *error_at, when not NULL, receives the byte offset cJSON
 * stopped at). Calls cairn_init() itself, so the distinction holds for every caller.
 */
int cairn_json_parse(const char *text, size_t len, const char **end, cJSON **out,
                     size_t *error_at);

/* Whether an allocation made for cJSON on this thread failed since the last
 * cairn_json_oom_reset() (for cJSON calls other than parsing: printing, building). */
void cairn_json_oom_reset(void);
bool cairn_json_oom(void);

#endif
