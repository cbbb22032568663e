/*
 * redis_server.c — a private redis-server per test (see redis_server.h).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tier/redis/redis_server.h"
#include "tier/tier_test_util.h"

static void track(const test_redis_t *r, bool forget);

static const char *server_binary(void)
{
    const char *env = getenv("CAIRN_REDIS_SERVER");
    if (env && env[0])
        return env;
    static const char *const candidates[] = {"/usr/bin/redis-server", "/usr/local/bin/redis-server",
                                             "/usr/sbin/redis-server"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++)
        if (access(candidates[i], X_OK) == 0)
            return candidates[i];
    return NULL;
}

int test_redis_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static bool answers(const test_redis_t *r)
{
    redisContext *c = test_redis_client(r);
    if (!c)
        return false;
    redisReply *rep = redisCommand(c, "PING");
    bool ok = rep && (rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_ERROR); /* NOAUTH: alive */
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return ok;
}

static int spawn(test_redis_t *r)
{
    const char *bin = server_binary();
    if (!bin) {
        fprintf(stderr, "redis-server not found (install it: scripts/deps.sh, Debian package redis-server; "
                        "or set CAIRN_REDIS_SERVER)\n");
        return -1;
    }
    char port[16], log[200];
    snprintf(port, sizeof port, "%d", r->port);
    snprintf(log, sizeof log, "%s/redis.log", r->dir);
    char extra[sizeof r->extra];
    snprintf(extra, sizeof extra, "%s", r->extra);
    const char *argv[64] = {bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                            "--dir", r->dir, "--logfile", log, "--daemonize", "no", "--protected-mode", "yes"};
    int argc = 17;
    for (char *tok = strtok(extra, " "); tok && argc < 62; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* Dies with the test (a failed assertion, a ctest timeout), and holds none of its
         * pipes open. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO);
            dup2(devnull, STDOUT_FILENO);
            dup2(devnull, STDERR_FILENO);
        }
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    r->pid = pid;
    track(r, false);
    for (int i = 0; i < 500; i++) { /* up to 5 s */
        if (answers(r))
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            r->pid = 0;
            fprintf(stderr, "redis-server exited at start (see %s)\n", log);
            return -1;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "redis-server did not answer on port %d\n", r->port);
    test_redis_kill(r);
    return -1;
}

/* Servers started and not stopped, by port: killed and removed at exit whatever happened
 * (a failed assertion leaves the test's own struct behind on a dead stack). */
typedef struct {
    int port;
    pid_t pid;
    char dir[128];
} live_t;
static live_t g_live[16];

static void cleanup_at_exit(void)
{
    for (size_t i = 0; i < sizeof g_live / sizeof g_live[0]; i++) {
        if (!g_live[i].port)
            continue;
        if (g_live[i].pid > 0) {
            kill(g_live[i].pid, SIGKILL);
            waitpid(g_live[i].pid, NULL, 0);
        }
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_live[i].dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", g_live[i].dir);
        g_live[i].port = 0;
    }
}

/* Records r's current pid (0: killed); forget removes it. */
static void track(const test_redis_t *r, bool forget)
{
    static bool registered;
    if (!registered) {
        atexit(cleanup_at_exit);
        registered = true;
    }
    live_t *slot = NULL;
    for (size_t i = 0; i < sizeof g_live / sizeof g_live[0] && !slot; i++)
        if (g_live[i].port == r->port)
            slot = &g_live[i];
    for (size_t i = 0; i < sizeof g_live / sizeof g_live[0] && !slot; i++)
        if (!g_live[i].port)
            slot = &g_live[i];
    if (!slot)
        return;
    if (forget) {
        memset(slot, 0, sizeof *slot);
        return;
    }
    slot->port = r->port;
    slot->pid = r->pid;
    snprintf(slot->dir, sizeof slot->dir, "%s", r->dir);
}

int test_redis_start(test_redis_t *r, const char *extra)
{
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "/tmp/cairn_redis.XXXXXX");
    if (!mkdtemp(r->dir))
        return -1;
    snprintf(r->extra, sizeof r->extra, "%s", extra ? extra : "");
    for (int attempt = 0; attempt < 3; attempt++) {
        if ((r->port = test_redis_free_port()) <= 0)
            return -1;
        snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", r->port);
        if (spawn(r) == 0)
            return 0;
    }
    return -1;
}

int test_redis_restart(test_redis_t *r)
{
    test_redis_kill(r);
    return spawn(r);
}

void test_redis_kill(test_redis_t *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
    }
    r->pid = 0;
    if (r->port)
        track(r, false);
}

void test_redis_stop(test_redis_t *r)
{
    test_redis_kill(r);
    track(r, true);
    if (r->dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", r->dir);
    }
    r->dir[0] = '\0';
}

redisContext *test_redis_client(const test_redis_t *r)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

cairn_tier_store_t *test_redis_store(const char *url, int variant, const cairn_shared_tier_config_t *cfg)
{
    cairn_shared_tier_config_t c = {.url = url, .count_objects = true};
    if (cfg) {
        c = *cfg;
        if (!c.url)
            c.url = url;
    }
    const cairn_tier_group_layout_t g = {T_LAYERS, t_layer_bytes};
    const cairn_tier_group_layout_t groups[2] = {g, g};
    const cairn_tier_layout_t layout = {t_fingerprint(variant), CAIRN_DTYPE_BF16, T_TOKENS, 2, groups};
    cairn_tier_store_t *s = NULL;
    char err[512] = "";
    if (cairn_shared_tier_open(&c, &layout, &s, err, sizeof err)) {
        fprintf(stderr, "cannot open the Redis store: %s\n", err);
        return NULL;
    }
    return s;
}
