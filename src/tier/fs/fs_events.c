/*
 * fs_events.c — the event counters of the processes that used a model directory:
 * <model dir>/events.json (docs/FORMAT.md 1.11), which `cairn cache stats` prints.
 *
 * Model. Each engine with a local store adds its cold-tier event counters (captures,
 * restores, sidecars, misses by reason: named counters, cairn_cold_events_t) to the file
 * when it closes, so a run that reused nothing can be explained afterwards from the
 * directory alone. The file is one JSON object: {"format": "cairn-cold-events",
 * "version": 1, "processes": N, "updated": UNIX_SECONDS, "counters": {NAME: VALUE, ...}};
 * names are [a-z0-9_]{1,47}, values non-negative integers below 2^53. Names this build
 * does not know are kept (a newer build's counters survive an older one's update).
 * Invariants: an update is read-merge-write under an exclusive flock of
 * <model dir>/.events.lock (processes sharing the directory never lose each other's
 * counts); the new text goes to <model dir>/.events.tmp (the lock makes one name enough),
 * fdatasync, rename over events.json, directory fsync, so a crash leaves the old file or
 * the new one; an unreadable or invalid file is replaced (its counts are lost, logged).
 * Every write goes through cairn_io_check.
 * Thread-safety: reentrant; concurrent updates (threads or processes) serialize on the lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cairn/cold_tier.h"
#include "util/json.h"
#include "util/util.h"

#define EVENTS_FILE "events.json"
#define EVENTS_LOCK ".events.lock"
#define EVENTS_TMP ".events.tmp"
#define EVENTS_MAX_BYTES (64 * 1024)
#define EVENTS_MAX_VALUE 9007199254740991.0 /* 2^53 - 1: exact in a JSON number */

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= CAIRN_COLD_EVENT_NAME)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

static int find(const cairn_cold_events_t *e, const char *name)
{
    for (uint32_t i = 0; i < e->n; i++)
        if (!strcmp(e->names[i], name))
            return (int)i;
    return -1;
}

int cairn_cold_events_set(cairn_cold_events_t *e, const char *name, uint64_t value)
{
    if (!e || !name || !name_ok(name))
        return CAIRN_EINVAL;
    int i = find(e, name);
    if (i < 0) {
        if (e->n == CAIRN_COLD_EVENTS_MAX)
            return CAIRN_ERANGE;
        i = (int)e->n++;
        snprintf(e->names[i], sizeof e->names[i], "%s", name);
    }
    e->values[i] = value;
    return CAIRN_OK;
}

uint64_t cairn_cold_events_get(const cairn_cold_events_t *e, const char *name)
{
    int i = e && name ? find(e, name) : -1;
    return i < 0 ? 0 : e->values[i];
}

/* A member that must be a whole number in [0, 2^53). */
static int whole(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > EVENTS_MAX_VALUE ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return CAIRN_EFORMAT;
    *out = (uint64_t)v->valuedouble;
    return CAIRN_OK;
}

int cairn_cold_events_parse(const char *text, size_t len, cairn_cold_events_t *out, char *err, size_t err_len)
{
    if (!text || !out)
        return CAIRN_EINVAL;
    memset(out, 0, sizeof *out);
    if (err && err_len)
        err[0] = '\0';
    if (len > EVENTS_MAX_BYTES) {
        if (err)
            snprintf(err, err_len, "events file larger than %d bytes", EVENTS_MAX_BYTES);
        return CAIRN_EFORMAT;
    }
    cJSON *root = NULL;
    int rc = cairn_json_parse(text, len, NULL, &root, NULL);
    if (rc) {
        if (err && rc == CAIRN_EFORMAT)
            snprintf(err, err_len, "not valid JSON");
        return rc;
    }
    const char *why = NULL;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *counters = cJSON_GetObjectItemCaseSensitive(root, "counters");
    uint64_t version = 0;
    if (!cJSON_IsObject(root))
        why = "not a JSON object";
    else if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "cairn-cold-events"))
        why = "format is not \"cairn-cold-events\"";
    else if (whole(ver, &version) || version != 1)
        why = "version is not 1";
    else if (whole(cJSON_GetObjectItemCaseSensitive(root, "processes"), &out->processes))
        why = "processes is not a whole number";
    else if (whole(cJSON_GetObjectItemCaseSensitive(root, "updated"), &out->updated_s))
        why = "updated is not a whole number";
    else if (!cJSON_IsObject(counters))
        why = "counters is not an object";
    const cJSON *c = NULL;
    if (!why)
        cJSON_ArrayForEach(c, counters)
        {
            uint64_t v = 0;
            if (!c->string || !name_ok(c->string)) {
                why = "a counter name is not [a-z0-9_]{1,47}";
                break;
            }
            if (find(out, c->string) >= 0) {
                why = "a counter is named twice";
                break;
            }
            if (whole(c, &v)) {
                why = "a counter is not a whole number";
                break;
            }
            if (cairn_cold_events_set(out, c->string, v)) {
                why = "too many counters";
                break;
            }
        }
    cJSON_Delete(root);
    if (why) {
        if (err)
            snprintf(err, err_len, "%s", why);
        memset(out, 0, sizeof *out);
        return CAIRN_EFORMAT;
    }
    return CAIRN_OK;
}

/* Reads the file at path (at most EVENTS_MAX_BYTES + 1 bytes) into a NUL-terminated buffer. */
static int slurp(const char *path, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO;
    char *buf = cairn_malloc(EVENTS_MAX_BYTES + 2);
    if (!buf) {
        close(fd);
        return CAIRN_ENOMEM;
    }
    size_t n = 0;
    int rc = CAIRN_OK;
    while (n < EVENTS_MAX_BYTES + 1) {
        ssize_t r = read(fd, buf + n, EVENTS_MAX_BYTES + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = CAIRN_EIO;
            break;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (rc) {
        cairn_free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return CAIRN_OK;
}

int cairn_cold_events_read(const char *model_dir, cairn_cold_events_t *out, char *err, size_t err_len)
{
    if (!model_dir || !out)
        return CAIRN_EINVAL;
    memset(out, 0, sizeof *out);
    char *path = cairn_path_join(model_dir, EVENTS_FILE);
    if (!path)
        return CAIRN_ENOMEM;
    char *text = NULL;
    size_t len = 0;
    int rc = slurp(path, &text, &len);
    if (rc == CAIRN_OK)
        rc = cairn_cold_events_parse(text, len, out, err, err_len);
    else if (err && rc == CAIRN_EIO)
        snprintf(err, err_len, "cannot read %s", path);
    cairn_free(text);
    cairn_free(path);
    return rc;
}

/* The file's text for e (at most EVENTS_MAX_BYTES; free with cairn_free), or NULL (no
 * memory). Not static: fuzz_cold_events re-parses what it renders. */
char *fs_events_render(const cairn_cold_events_t *e, size_t *len);
char *fs_events_render(const cairn_cold_events_t *e, size_t *len)
{
    char *buf = cairn_malloc(EVENTS_MAX_BYTES);
    if (!buf)
        return NULL;
    size_t n = (size_t)snprintf(buf, EVENTS_MAX_BYTES,
                                "{\"format\":\"cairn-cold-events\",\"version\":1,\"processes\":%" PRIu64
                                ",\"updated\":%" PRIu64 ",\"counters\":{",
                                e->processes, e->updated_s);
    for (uint32_t i = 0; i < e->n && n < EVENTS_MAX_BYTES; i++)
        n += (size_t)snprintf(buf + n, EVENTS_MAX_BYTES - n, "%s\"%s\":%" PRIu64, i ? "," : "", e->names[i],
                              e->values[i] > (uint64_t)EVENTS_MAX_VALUE ? (uint64_t)EVENTS_MAX_VALUE : e->values[i]);
    if (n < EVENTS_MAX_BYTES)
        n += (size_t)snprintf(buf + n, EVENTS_MAX_BYTES - n, "}}\n");
    if (n >= EVENTS_MAX_BYTES) { /* cannot happen: 64 names of 47 bytes and 16 digits */
        cairn_free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return CAIRN_EIO;
        p += w;
        n -= (size_t)w;
    }
    return CAIRN_OK;
}

/* Writes text to tmp, syncs it and renames it over path, then syncs the directory. */
static int commit(const char *dir, const char *tmp, const char *path, const char *text, size_t len)
{
    if (cairn_io_check("open", tmp) < 0)
        return CAIRN_EIO;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno == ENOSPC ? CAIRN_ENOSPC : CAIRN_EIO;
    int rc = cairn_io_check("write", tmp) < 0 ? CAIRN_EIO : write_all(fd, text, len);
    if (rc == CAIRN_OK && (cairn_io_check("fsync", tmp) < 0 || fdatasync(fd) < 0))
        rc = CAIRN_EIO;
    close(fd);
    if (rc == CAIRN_OK && (cairn_io_check("rename", path) < 0 || rename(tmp, path) < 0))
        rc = CAIRN_EIO;
    if (rc) {
        unlink(tmp);
        return rc;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (cairn_io_check("fsync", dir) < 0 || fsync(dfd) < 0)
            rc = CAIRN_EIO;
        close(dfd);
    }
    return rc;
}

int cairn_cold_events_add(const char *model_dir, const cairn_cold_events_t *delta)
{
    if (!model_dir || !delta)
        return CAIRN_EINVAL;
    char *lock = cairn_path_join(model_dir, EVENTS_LOCK), *tmp = cairn_path_join(model_dir, EVENTS_TMP);
    char *path = cairn_path_join(model_dir, EVENTS_FILE), *text = NULL, *out = NULL;
    cairn_cold_events_t *cur = cairn_calloc(1, sizeof *cur);
    int lfd = -1, rc = CAIRN_ENOMEM;
    if (!lock || !tmp || !path || !cur)
        goto done;
    rc = CAIRN_EIO;
    if (cairn_io_check("open", lock) < 0 || (lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
        goto done;
    while (flock(lfd, LOCK_EX) < 0)
        if (errno != EINTR)
            goto done;
    size_t len = 0;
    char err[128] = "";
    rc = slurp(path, &text, &len);
    if (rc == CAIRN_OK)
        rc = cairn_cold_events_parse(text, len, cur, err, sizeof err);
    if (rc == CAIRN_ENOMEM)
        goto done;
    if (rc && rc != CAIRN_ENOENT)
        cairn_log(CAIRN_LOG_WARN, "cold tier: %s is invalid (%s): its counts start again", path,
                  err[0] ? err : cairn_strerror(rc));
    if (rc)
        memset(cur, 0, sizeof *cur);
    cur->processes += delta->processes;
    cur->updated_s = delta->updated_s ? delta->updated_s : (uint64_t)time(NULL);
    rc = CAIRN_OK;
    for (uint32_t i = 0; i < delta->n && rc == CAIRN_OK; i++) {
        uint64_t sum = cairn_cold_events_get(cur, delta->names[i]) + delta->values[i];
        rc = cairn_cold_events_set(cur, delta->names[i], sum);
    }
    if (rc == CAIRN_ERANGE) /* names beyond CAIRN_COLD_EVENTS_MAX are dropped */
        rc = CAIRN_OK;
    if (rc)
        goto done;
    size_t out_len = 0;
    rc = CAIRN_ENOMEM;
    if (!(out = fs_events_render(cur, &out_len)))
        goto done;
    rc = commit(model_dir, tmp, path, out, out_len);
done:
    if (lfd >= 0)
        close(lfd); /* releases the lock */
    cairn_free(out);
    cairn_free(text);
    cairn_free(cur);
    cairn_free(path);
    cairn_free(tmp);
    cairn_free(lock);
    return rc;
}
