/*
 * http_test_util.c — see http_test_util.h. Test code: aborts on allocation failure via
 * the callers' asserts; connects to 127.0.0.1 only.
 */
#include "http_test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cairn/checkpoint.h"
#include "cairn/engine.h"
#include "cairn/tokenizer.h"

int test_server_start(test_server_t *ts, const char *model, const cairn_server_options_t *opt,
                      int pool_mib)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/%s", CAIRN_FIXTURES_DIR, model);
    return test_server_start_dir(ts, dir, model, opt, pool_mib, 0);
}

int test_server_start_dir(test_server_t *ts, const char *dir, const char *model,
                          const cairn_server_options_t *opt, int pool_mib, int max_context)
{
    memset(ts, 0, sizeof *ts);
    char err[512] = "";
    int rc = cairn_checkpoint_open(dir, &ts->ck, err, sizeof err);
    if (!rc)
        rc = cairn_tokenizer_load(dir, &ts->tok, err, sizeof err);
    cairn_engine_options_t eo;
    cairn_engine_options_default(&eo);
    eo.n_threads = 1;
    if (pool_mib > 0)
        eo.pool_mib = pool_mib;
    if (max_context > 0)
        eo.max_context = max_context;
    if (!rc)
        rc = cairn_engine_create(ts->ck, &eo, &ts->eng, err, sizeof err);
    cairn_server_options_t so;
    if (opt) {
        so = *opt;
    } else {
        cairn_server_options_default(&so);
        so.port = 0;
    }
    if (!so.model_id || !strcmp(so.model_id, "cairn"))
        so.model_id = model;
    if (!rc)
        rc = cairn_server_create(ts->eng, ts->tok, &so, &ts->srv, err, sizeof err);
    if (rc) {
        fprintf(stderr, "test_server_start: %s (%s)\n", err, cairn_strerror(rc));
        test_server_stop(ts);
        return rc;
    }
    ts->port = cairn_server_port(ts->srv);
    return 0;
}

void test_server_stop(test_server_t *ts)
{
    cairn_server_destroy(ts->srv, 2000);
    cairn_engine_destroy(ts->eng);
    cairn_tokenizer_destroy(ts->tok);
    cairn_checkpoint_close(ts->ck);
    memset(ts, 0, sizeof *ts);
}

static int connect_local(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int http_send(int port, const char *method, const char *path, const char *headers,
              const char *body, size_t body_len)
{
    int fd = connect_local(port);
    if (fd < 0)
        return -1;
    char head[2048];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     method, path, headers ? headers : "", body ? body_len : 0);
    if (send(fd, head, (size_t)n, MSG_NOSIGNAL) != n) {
        close(fd);
        return -1;
    }
    size_t off = 0;
    while (body && off < body_len) {
        ssize_t w = send(fd, body + off, body_len - off, MSG_NOSIGNAL);
        if (w <= 0)
            break; /* the server may answer early (413) and close */
        off += (size_t)w;
    }
    return fd;
}

static char *read_all(int fd, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *p = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) {
            cap *= 2;
            p = realloc(p, cap);
        }
        ssize_t r = recv(fd, p + n, cap - n - 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    p[n] = '\0';
    *len = n;
    return p;
}

static void dechunk(char *body, size_t *len)
{
    char *in = body, *out = body, *end = body + *len;
    while (in < end) {
        char *e;
        unsigned long sz = strtoul(in, &e, 16);
        char *nl = strstr(in, "\r\n");
        if (!nl || e == in)
            break;
        in = nl + 2;
        if (sz == 0)
            break;
        if (in + sz > end)
            sz = (unsigned long)(end - in);
        memmove(out, in, sz);
        out += sz;
        in += sz + 2;
    }
    *out = '\0';
    *len = (size_t)(out - body);
}

int http_request(int port, const char *method, const char *path, const char *headers,
                 const char *body, size_t body_len, http_resp_t *out)
{
    memset(out, 0, sizeof *out);
    int fd = http_send(port, method, path, headers, body, body_len);
    if (fd < 0)
        return -1;
    size_t len;
    char *raw = read_all(fd, &len);
    close(fd);
    char *sep = strstr(raw, "\r\n\r\n");
    if (!sep || sscanf(raw, "HTTP/1.%*d %d", &out->status) != 1) {
        free(raw);
        return -1;
    }
    *sep = '\0';
    out->headers = strdup(raw);
    size_t blen = len - (size_t)(sep + 4 - raw);
    out->body = malloc(blen + 1);
    memcpy(out->body, sep + 4, blen);
    out->body[blen] = '\0';
    out->body_len = blen;
    if (strcasestr(out->headers, "Transfer-Encoding: chunked"))
        dechunk(out->body, &out->body_len);
    free(raw);
    return 0;
}

void http_resp_free(http_resp_t *r)
{
    free(r->headers);
    free(r->body);
    memset(r, 0, sizeof *r);
}

cJSON *http_json(const http_resp_t *r) { return r->body ? cJSON_Parse(r->body) : NULL; }

char *sse_collect(const char *body, int *n_events, char *finish, size_t finish_cap,
                  cJSON **usage, int *saw_done)
{
    size_t cap = 256, n = 0;
    char *text = calloc(1, cap);
    *n_events = 0;
    *saw_done = 0;
    if (finish)
        finish[0] = '\0';
    if (usage)
        *usage = NULL;
    const char *p = body;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e)
            break;
        (*n_events)++;
        if (!strncmp(p, "[DONE]", 6)) {
            *saw_done = 1;
            p = e;
            continue;
        }
        cJSON *j = cJSON_ParseWithLength(p, (size_t)(e - p));
        p = e;
        if (!j)
            continue;
        cJSON *u = cJSON_GetObjectItem(j, "usage");
        if (usage && cJSON_IsObject(u)) {
            cJSON_Delete(*usage);
            *usage = cJSON_Duplicate(u, 1);
        }
        cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        if (c0 && cJSON_GetNumberValue(cJSON_GetObjectItem(c0, "index")) == 0) {
            cJSON *d = cJSON_GetObjectItem(c0, "delta");
            cJSON *t = d ? cJSON_GetObjectItem(d, "content") : cJSON_GetObjectItem(c0, "text");
            if (cJSON_IsString(t)) {
                size_t l = strlen(t->valuestring);
                while (n + l + 1 > cap)
                    text = realloc(text, cap *= 2);
                memcpy(text + n, t->valuestring, l + 1);
                n += l;
            }
            cJSON *f = cJSON_GetObjectItem(c0, "finish_reason");
            if (finish && cJSON_IsString(f))
                snprintf(finish, finish_cap, "%s", f->valuestring);
        }
        cJSON_Delete(j);
    }
    return text;
}

size_t http_read_until(int fd, const char *needle, int timeout_ms, int *found)
{
    /* A sliding window: a long stream (a fast model can send megabytes before the needle)
     * keeps only the tail that could still hold the start of the needle. */
    char buf[65536];
    size_t n = 0, total = 0, keep = strlen(needle);
    *found = 0;
    int waited = 0;
    while (waited < timeout_ms) {
        struct pollfd pf = {fd, POLLIN, 0};
        int pr = poll(&pf, 1, 50);
        waited += 50;
        if (pr <= 0)
            continue;
        if (n > keep) {
            memmove(buf, buf + n - keep, keep);
            n = keep;
        }
        ssize_t r = recv(fd, buf + n, sizeof buf - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
        total += (size_t)r;
        buf[n] = '\0';
        if (strstr(buf, needle)) {
            *found = 1;
            break;
        }
    }
    return total;
}

double metrics_value(const char *text, const char *name)
{
    size_t l = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (!strncmp(p, name, l) && p[l] == ' ')
            return strtod(p + l + 1, NULL);
    }
    return -1;
}

/* ---- a `cairn serve` child process ---- */

static double child_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int test_child_serve(test_child_t *c, const char *const *argv, const char *const *env)
{
    static const char needle[] = "listening on http://127.0.0.1:";
    c->pid = 0;
    c->port = 0;
    int fds[2];
    if (pipe(fds))
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        for (int i = 0; env && env[i] && env[i + 1]; i += 2)
            setenv(env[i], env[i + 1], 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    char buf[4096];
    size_t len = 0;
    int port = 0;
    const double deadline = child_now_ms() + 30000;
    while (port == 0 && child_now_ms() < deadline && len < sizeof buf - 1) {
        struct pollfd p = {fds[0], POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        ssize_t n = read(fds[0], buf + len, sizeof buf - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        const char *at = strstr(buf, needle);
        if (at && strchr(at, '\n'))
            port = atoi(at + strlen(needle));
    }
    /* The rest of stdout is not read: the server prints nothing more there. */
    close(fds[0]);
    if (port <= 0) {
        fprintf(stderr, "%s did not start; stdout: %.*s\n", argv[0], (int)len, buf);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    c->pid = (int)pid;
    c->port = port;
    return 0;
}

int test_child_stop(test_child_t *c, int timeout_ms)
{
    if (c->pid <= 0)
        return -1;
    kill(c->pid, SIGTERM);
    int st = 0;
    const double deadline = child_now_ms() + timeout_ms;
    pid_t w = 0;
    while ((w = waitpid(c->pid, &st, WNOHANG)) == 0 && child_now_ms() < deadline)
        usleep(20000);
    if (w == 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &st, 0);
        c->pid = 0;
        return -1;
    }
    c->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void test_child_kill(test_child_t *c)
{
    if (c->pid > 0) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
    }
    c->pid = 0;
}
