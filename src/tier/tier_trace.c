/*
 * tier_trace.c — the per-turn telemetry trace: one JSON line of a store's counter deltas
 * per turn (docs/FORMAT.md 1.6), appended to a file.
 *
 * Model: the trace keeps the counters it last reported; each turn reports the store's
 * counters minus those and keeps the new ones. The baseline starts at zero, so the first
 * line counts from the store's opening (corruptions found by its open scan included).
 * One trace serves one store.
 * Thread-safety: a mutex serializes turns (baseline update and append together).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "cairn/tier.h"

struct cairn_tier_trace {
    pthread_mutex_t mu;
    char *path;
    cairn_tier_stats_t base;   /* the counters of the previous line */
};

int cairn_tier_trace_create(const char *path, cairn_tier_trace_t **out)
{
    *out = NULL;
    const char *p = cairn_knob_str("CAIRN_COLD_TRACE", path, NULL);
    if (!p || !p[0])
        return CAIRN_OK;
    cairn_tier_trace_t *t = cairn_calloc(1, sizeof *t);
    if (!t || !(t->path = cairn_strdup(p))) {
        cairn_free(t);
        return CAIRN_ENOMEM;
    }
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return CAIRN_OK;
}

void cairn_tier_trace_destroy(cairn_tier_trace_t *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->mu);
    cairn_free(t->path);
    cairn_free(t);
}

/* Appends line[0..len) to the trace file; failures are logged. */
static void append(const char *path, const char *line, int len)
{
    int fd = -1;
    if (cairn_io_check("open", path) == 0)
        fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || cairn_io_check("write", path) < 0 || write(fd, line, (size_t)len) != len)
        cairn_log(CAIRN_LOG_WARN, "cold tier: cannot append to trace %s", path);
    if (fd >= 0)
        close(fd);
}

void cairn_tier_trace_turn(cairn_tier_trace_t *t, cairn_tier_store_t *s, const char *label)
{
    if (!t)
        return;
    cairn_tier_stats_t cur;
    cairn_tier_store_stats(s, &cur);
    pthread_mutex_lock(&t->mu);
    cairn_tier_stats_t base = t->base;
    t->base = cur;
    char *js = cairn_tier_stats_json(&cur, &base);
    cJSON *lab = cJSON_CreateString(label ? label : "");
    char *labtxt = lab ? cJSON_PrintUnformatted(lab) : NULL;
    cJSON_Delete(lab);
    if (js && labtxt) {
        size_t n = strlen(js) + strlen(labtxt) + 32;
        char *line = cairn_malloc(n);
        if (line) {
            int len = snprintf(line, n, "{\"turn\":%s,\"cold\":%s}\n", labtxt, js);
            append(t->path, line, len);
            cairn_free(line);
        }
    }
    cairn_free(js);
    cJSON_free(labtxt);
    pthread_mutex_unlock(&t->mu);
}

void cairn_tier_trace_restore(cairn_tier_trace_t *t, size_t hot_blocks, const cairn_tier_hybrid_result_t *r)
{
    if (!t || !r)
        return;
    char line[512];
    int len = snprintf(line, sizeof line,
                       "{\"turn\":\"restore\",\"restore\":{\"hot\":%zu,\"proposed\":%zu,\"boundary\":%zu,"
                       "\"loaded\":%zu,\"sidecars\":%u,\"refused\":%u,\"corrupt\":%u,\"miss\":\"%s\"}}\n",
                       hot_blocks, r->proposed, r->boundary, r->loaded, r->sidecars_read, r->candidates_refused,
                       r->sidecar_corruptions, cairn_tier_miss_name(r->miss));
    if (len <= 0 || (size_t)len >= sizeof line)
        return;
    pthread_mutex_lock(&t->mu);
    append(t->path, line, len);
    pthread_mutex_unlock(&t->mu);
}
