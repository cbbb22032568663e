/*
 * stress_http.c — see stress_http.h. Test code: allocation failures abort.
 */
#include "stress/stress_http.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "stress/stress.h"

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (!q)
        abort();
    return q;
}

static int connect_local(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Decodes a chunked body in place; returns whether the last (zero) chunk was seen. */
static bool dechunk(char *body, size_t *len)
{
    char *in = body, *out = body, *end = body + *len;
    bool last = false;
    while (in < end) {
        char *e;
        unsigned long sz = strtoul(in, &e, 16);
        char *nl = memmem(in, (size_t)(end - in), "\r\n", 2);
        if (!nl || e == in)
            break;
        in = nl + 2;
        if (sz == 0) {
            last = true;
            break;
        }
        if (sz > (size_t)(end - in))
            sz = (unsigned long)(end - in);
        memmove(out, in, sz);
        out += sz;
        in += sz + 2;
    }
    *out = '\0';
    *len = (size_t)(out - body);
    return last;
}

sh_outcome_t sh_exchange(int port, const char *path, const char *body, const char *hang_up_after,
                         int timeout_ms, sh_resp_t *out)
{
    memset(out, 0, sizeof *out);
    out->body = calloc(1, 1);
    if (!out->body)
        abort();
    int fd = connect_local(port);
    if (fd < 0)
        return out->outcome = SH_REFUSED;
    char head[1024];
    size_t blen = body ? strlen(body) : 0;
    int hn = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      body ? "POST" : "GET", path, blen);
    if (!send_all(fd, head, (size_t)hn) || (blen && !send_all(fd, body, blen))) {
        close(fd);
        return out->outcome = SH_REFUSED;
    }
    if (hang_up_after && !hang_up_after[0]) {
        close(fd);
        return out->outcome = SH_HUNG_UP;
    }
    size_t cap = 8192, n = 0;
    char *raw = malloc(cap);
    if (!raw)
        abort();
    double deadline = stress_now_ms() + timeout_ms;
    sh_outcome_t oc = SH_TRUNCATED;
    bool reset = false;
    for (;;) {
        int left = (int)(deadline - stress_now_ms());
        if (left <= 0) {
            oc = SH_TIMEOUT;
            break;
        }
        struct pollfd p = {fd, POLLIN, 0};
        int pr = poll(&p, 1, left < 100 ? left : 100);
        if (pr < 0 && errno != EINTR)
            break;
        if (pr <= 0)
            continue;
        if (n + 4096 > cap)
            raw = xrealloc(raw, cap *= 2);
        ssize_t r = recv(fd, raw + n, cap - n - 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            reset = errno == ECONNRESET;
            break;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        raw[n] = '\0';
        if (hang_up_after && strstr(raw, hang_up_after)) {
            oc = SH_HUNG_UP;
            break;
        }
    }
    close(fd);
    raw[n] = '\0';
    char *sep = strstr(raw, "\r\n\r\n");
    if (n == 0 && (reset || oc == SH_TRUNCATED)) {
        free(raw);
        return out->outcome = reset ? SH_REFUSED : SH_TRUNCATED;
    }
    if (sscanf(raw, "HTTP/1.%*d %d", &out->status) != 1)
        out->status = 0;
    if (sep) {
        *sep = '\0';
        bool chunked = strcasestr(raw, "Transfer-Encoding: chunked") != NULL;
        const char *cl = strcasestr(raw, "Content-Length:");
        size_t len = n - (size_t)(sep + 4 - raw);
        out->body = xrealloc(out->body, len + 1);
        memcpy(out->body, sep + 4, len);
        out->body[len] = '\0';
        out->body_len = len;
        bool whole;
        if (chunked)
            whole = dechunk(out->body, &out->body_len);
        else
            whole = cl && strtoull(cl + 15, NULL, 10) == len;
        if (oc == SH_TRUNCATED && whole)
            oc = SH_COMPLETE;
    }
    free(raw);
    return out->outcome = oc;
}

void sh_free(sh_resp_t *r)
{
    free(r->body);
    memset(r, 0, sizeof *r);
}

char *sh_sse_text(const char *body, char *finish, size_t finish_cap, bool *saw_error, bool *saw_done)
{
    size_t cap = 256, n = 0;
    char *text = calloc(1, cap);
    if (!text)
        abort();
    *saw_error = *saw_done = false;
    if (finish_cap)
        finish[0] = '\0';
    for (const char *p = body; (p = strstr(p, "data: ")) != NULL;) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e)
            break;
        if (!strncmp(p, "[DONE]", 6)) {
            *saw_done = true;
            p = e;
            continue;
        }
        cJSON *j = cJSON_ParseWithLength(p, (size_t)(e - p));
        p = e;
        if (!j)
            continue;
        if (cJSON_GetObjectItem(j, "error"))
            *saw_error = true;
        cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        if (c0 && cJSON_GetNumberValue(cJSON_GetObjectItem(c0, "index")) == 0) {
            cJSON *d = cJSON_GetObjectItem(c0, "delta");
            cJSON *t = d ? cJSON_GetObjectItem(d, "content") : cJSON_GetObjectItem(c0, "text");
            if (cJSON_IsString(t)) {
                size_t l = strlen(t->valuestring);
                while (n + l + 1 > cap)
                    text = xrealloc(text, cap *= 2);
                memcpy(text + n, t->valuestring, l + 1);
                n += l;
            }
            cJSON *f = cJSON_GetObjectItem(c0, "finish_reason");
            if (finish_cap && cJSON_IsString(f))
                snprintf(finish, finish_cap, "%s", f->valuestring);
        }
        cJSON_Delete(j);
    }
    return text;
}
