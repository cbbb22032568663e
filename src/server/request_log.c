/*
 * request_log.c — one JSON line per finished request (--request-log FILE).
 *
 * Model. Lines are appended to a file opened in append mode and flushed after each line,
 * so `tail -f` and log shippers see whole lines. A line carries the request id, endpoint,
 * the hashed cache domain (never the key or the salt), the HTTP status, prompt tokens,
 * hot cached and cold restored tokens, the reason for any cache miss, TTFT, decode
 * tokens/s, completion tokens, the finish reason and what the turn's end queued for the
 * disk ("persist": policy, queued, already, deferred, written). Write failures are logged, never
 * fatal: the log must not take the server down.
 *
 * Thread-safety: reqlog_write may be called from any thread (one mutex per log).
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "server/server_impl.h"

struct reqlog {
    FILE *f;
    char *path;
    pthread_mutex_t mu;
};

int reqlog_open(const char *path, reqlog_t **out, char *err, size_t err_len)
{
    *out = NULL;
    reqlog_t *l = cairn_calloc(1, sizeof *l);
    if (!l || !(l->path = cairn_strdup(path))) {
        cairn_free(l);
        return CAIRN_ENOMEM;
    }
    if (cairn_io_check("open", path) != 0 || !(l->f = fopen(path, "a"))) {
        snprintf(err, err_len, "cannot open request log %s: %s", path, strerror(errno));
        cairn_free(l->path);
        cairn_free(l);
        return CAIRN_EIO;
    }
    pthread_mutex_init(&l->mu, NULL);
    *out = l;
    return 0;
}

void reqlog_close(reqlog_t *l)
{
    if (!l)
        return;
    fclose(l->f);
    pthread_mutex_destroy(&l->mu);
    cairn_free(l->path);
    cairn_free(l);
}

void reqlog_write(reqlog_t *l, const reqlog_entry_t *e)
{
    if (!l)
        return;
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return;
    cJSON_AddStringToObject(o, "id", e->id ? e->id : "");
    cJSON_AddStringToObject(o, "endpoint", e->endpoint ? e->endpoint : "");
    cJSON_AddStringToObject(o, "domain", e->domain ? e->domain : "default");
    cJSON_AddNumberToObject(o, "status", e->http_status);
    const cairn_req_usage_t *u = e->usage;
    cJSON_AddNumberToObject(o, "prompt_tokens", u ? u->prompt_tokens : 0);
    cJSON_AddNumberToObject(o, "cached_tokens", u ? u->cached_tokens : 0);
    cJSON_AddNumberToObject(o, "restored_tokens", u ? u->restored_tokens : 0);
    if (u && u->miss_reason)
        cJSON_AddStringToObject(o, "miss_reason", u->miss_reason);
    else
        cJSON_AddNullToObject(o, "miss_reason");
    if (u && u->cold_reason)
        cJSON_AddStringToObject(o, "cold_reason", u->cold_reason);
    else
        cJSON_AddNullToObject(o, "cold_reason");
    cJSON_AddNumberToObject(o, "completion_tokens", u ? u->completion_tokens : 0);
    cJSON_AddNumberToObject(o, "queue_ms", u ? u->queue_ms : 0);
    cJSON_AddNumberToObject(o, "ttft_ms", u ? u->ttft_ms : 0);
    cJSON_AddNumberToObject(o, "decode_tps", u ? u->decode_tps : 0);
    cJSON_AddNumberToObject(o, "preemptions", u ? u->preemptions : 0);
    if (u && u->persist_policy) {
        /* What this turn's end queued for the disk (cold tier's background capture). */
        cJSON *p = cJSON_AddObjectToObject(o, "persist");
        if (p) {
            cJSON_AddStringToObject(p, "policy", u->persist_policy);
            cJSON_AddNumberToObject(p, "queued", u->persist_queued);
            cJSON_AddNumberToObject(p, "already", u->persist_already);
            cJSON_AddNumberToObject(p, "deferred", u->persist_deferred);
            cJSON_AddNumberToObject(p, "written", u->persist_written);
        }
    }
    cJSON_AddStringToObject(o, "finish_reason", e->finish ? e->finish : "none");
    if (e->error)
        cJSON_AddStringToObject(o, "error", e->error);
    char *line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!line)
        return;
    pthread_mutex_lock(&l->mu);
    int bad = cairn_io_check("write", l->path) != 0 || fputs(line, l->f) < 0
              || fputc('\n', l->f) == EOF || fflush(l->f) != 0;
    pthread_mutex_unlock(&l->mu);
    if (bad)
        cairn_log(CAIRN_LOG_WARN, "request log %s: write failed", l->path);
    cJSON_free(line);
}
