/*
 * json.c — cJSON's allocation hooks and the parse wrapper of util/json.h.
 *
 * The hooks are process-global in cJSON (cJSON_InitHooks), so they are installed exactly
 * once, by cairn_init() (pthread_once), never as the side effect of loading some file:
 * the server's request parsing and the tokenizer get the same out-of-memory reporting
 * whether or not a checkpoint was opened first.
 *
 * Thread-safety: the hook installation is once-only; the failure flag is thread-local.
 */
#include "util/json.h"

#include <pthread.h>

static _Thread_local bool json_oom;

static void *json_malloc(size_t n)
{
    void *p = cairn_malloc(n);
    if (!p)
        json_oom = true;
    return p;
}

static void json_free(void *p) { cairn_free(p); }

static void install(void)
{
    cJSON_Hooks hooks = {json_malloc, json_free};
    cJSON_InitHooks(&hooks);
}

void cairn_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install);
}

void cairn_json_oom_reset(void) { json_oom = false; }
bool cairn_json_oom(void) { return json_oom; }

int cairn_json_parse(const char *text, size_t len, const char **end, cJSON **out,
                     size_t *error_at)
{
    cairn_init();
    *out = NULL;
    if (error_at)
        *error_at = 0;
    if (!text)
        return CAIRN_EFORMAT;
    json_oom = false;
    const char *stop = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &stop, false);
    if (!root) {
        if (json_oom)
            return CAIRN_ENOMEM;
        if (error_at) {
            const char *at = cJSON_GetErrorPtr();
            *error_at = at && at >= text && at <= text + len ? (size_t)(at - text) : 0;
        }
        return CAIRN_EFORMAT;
    }
    if (end)
        *end = stop;
    *out = root;
    return CAIRN_OK;
}
