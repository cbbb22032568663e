/*
 * bench_shared_tier.c — N servers sharing one Redis (the shared cache tier): how much of an
 * agent workload's prompts they serve from cache when sessions move between them, the
 * TTFT that buys, and how fast the tier restores against what the loopback Redis can
 * deliver at all.
 *
 * Part 1, the agent replay without affinity. S sessions share one system prompt; turn t of
 * a session is its whole conversation so far plus a new tool result (R tokens), answered
 * with G greedy tokens (as bench_agent_replay; the workload: agent_workload.h). There are N servers (N = 1..4: an engine
 * and a scheduler each, in this process, each with its own pool and its own local SSD
 * tier directory); turn t of session i goes to server (i + t) mod N, i.e. round-robin with
 * no session affinity, so from turn 2 on a session lands on a server that did not serve
 * its previous turn (when N > 1). Each configuration runs twice: with the shared tier
 * (every server's --shared-tier pointing at one redis-server on loopback) and without it
 * (local tiers only); the replies of the two runs must be identical. Reported per run:
 * prompt tokens, hot (the server's own pool), restored (from its local SSD tier or from
 * Redis, the Redis part separately), computed, the share of prompt tokens served from
 * cache, and TTFT p50 / p99 over every request.
 *
 * Part 2, restore bandwidth. B blocks of the replay model's size (llama-8l: 64 KiB) are
 * written to Redis through the store; then, alternating, (a) the loopback maximum: the
 * same values fetched with plain pipelined GETs through hiredis's own reply objects
 * (nothing validated, nothing copied out) at 16, 32 and 128 in flight, the best median
 * being the maximum, and (b) the tier's restore walk over the Redis
 * store (EXISTS chain length, pipelined GETs, every object validated and its payload
 * copied into a destination buffer). Medians of 7 rounds each, GB/s and the ratio b/a,
 * plus the walk's thread CPU time per block.
 *
 * The redis-server is started by the bench on a free loopback port with a temporary
 * directory and no persistence, and killed at the end (redis-server must be installed:
 * scripts/deps.sh). Model: synthesized llama-8l, f16 weights, bf16 K/V, f32 math.
 *
 * usage: bench_shared_tier [--servers-max N] [--sessions S] [--turns T] [--system N]
 *                          [--tool R] [--gen G] [--threads N] [--blocks B] [--capture-ms MS]
 * (--servers-max 0: part 2 only.) Defaults: N up to 4, 4 sessions, 5 turns, a 1024-token system prompt, 128-token tool
 * results, 8-token replies, 1 thread per server, 512 blocks (32 MiB) for part 2, the
 * engine's capture deadline per turn (--capture-ms 0: its default, 250 ms). On a loaded
 * machine the deadline cuts captures short, so fewer blocks reach Redis and the token
 * counts vary from run to run; the `captured` column shows how many were queued (a
 * generous --capture-ms makes the counts repeatable).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <hiredis/hiredis.h>

#include "agent_workload.h"
#include "cairn/scheduler.h"
#include "cairn/shared_tier.h"

typedef struct {
    int servers_max, sessions, turns, system, tool, gen, threads, blocks, capture_ms;
} opts_t;

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_shared_tier: %s: %s\n", what, cairn_strerror(rc));
    exit(1);
}

/* ---- a private redis-server ---- */

static pid_t g_redis_pid;
static int g_redis_port;
static char g_redis_dir[64];

static void redis_stop(void)
{
    if (g_redis_pid > 0) {
        kill(g_redis_pid, SIGKILL);
        waitpid(g_redis_pid, NULL, 0);
        g_redis_pid = 0;
    }
    if (g_redis_dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_redis_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench_shared_tier: could not remove %s\n", g_redis_dir);
        g_redis_dir[0] = '\0';
    }
}

static redisContext *redis_client(void)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", g_redis_port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    return c;
}

static void redis_start(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &l))
        die("free port", CAIRN_EIO);
    g_redis_port = ntohs(a.sin_port);
    close(fd);
    snprintf(g_redis_dir, sizeof g_redis_dir, "/tmp/cairn-bench-redis-XXXXXX");
    if (!mkdtemp(g_redis_dir))
        die("mkdtemp", CAIRN_EIO);
    char port[16];
    snprintf(port, sizeof port, "%d", g_redis_port);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
            _exit(126);
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly",
               "no", "--dir", g_redis_dir, "--maxmemory", "2gb", "--maxmemory-policy", "allkeys-lru", (char *)NULL);
        _exit(127);
    }
    g_redis_pid = pid;
    atexit(redis_stop);
    for (int i = 0; i < 500; i++) {
        redisContext *c = redis_client();
        if (c) {
            redisReply *r = redisCommand(c, "PING");
            bool ok = r && r->type == REDIS_REPLY_STATUS;
            if (r)
                freeReplyObject(r);
            redisFree(c);
            if (ok)
                return;
        }
        usleep(10000);
    }
    fprintf(stderr, "bench_shared_tier: redis-server did not start (is it installed? scripts/deps.sh)\n");
    exit(1);
}

static void redis_flushall(void)
{
    redisContext *c = redis_client();
    if (!c)
        die("redis", CAIRN_EIO);
    redisReply *r = redisCommand(c, "FLUSHALL");
    if (r)
        freeReplyObject(r);
    redisFree(c);
}

/* ---- part 1: the replay ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int k = (int)(p * (n - 1) + 0.5);
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

typedef struct {
    long prompt, hot, restored, computed;
    uint64_t shared_blocks, shared_faults, captured;
    double p50, p99, wall;
} result_t;

typedef struct {
    const opts_t *o;
    const cairn_checkpoint_t *ck;
    const cairn_tokenizer_t *tok;
    const char *root;
    int vocab;
    char url[64];
} bench_t;

static result_t replay(const bench_t *b, int n_servers, bool shared, int32_t *replies)
{
    const opts_t *o = b->o;
    const int S = o->sessions;
    cairn_engine_t *eng[4];
    cairn_sched_t *sch[4];
    char dirs[4][512];
    cairn_shared_tier_config_t sc = {.url = b->url};
    for (int k = 0; k < n_servers; k++) {
        snprintf(dirs[k], sizeof dirs[k], "%s/local-%s-%d-%d", b->root, shared ? "shared" : "alone", n_servers, k);
        cairn_engine_options_t eo;
        cairn_engine_options_default(&eo);
        eo.n_threads = o->threads;
        eo.cold = 1;
        eo.cold_root = dirs[k];
        eo.shared_tier = shared ? &sc : NULL;
        eo.cold_capture_ms = o->capture_ms;
        char err[512] = "";
        int rc = cairn_engine_create(b->ck, &eo, &eng[k], err, sizeof err);
        if (rc) {
            fprintf(stderr, "bench_shared_tier: engine: %s\n", err);
            exit(1);
        }
        cairn_sched_options_t so;
        cairn_sched_options_default(&so);
        if (so.max_running < S)
            so.max_running = S;
        if ((rc = cairn_sched_create(eng[k], b->tok, &so, &sch[k])))
            die("sched_create", rc);
    }
    agent_sessions_t a;
    agent_sessions_init(&a, "bench_shared_tier", S, o->system, o->tool, o->gen, b->vocab);
    double *ttft = malloc((size_t)(S * o->turns) * sizeof(double));
    if (!ttft)
        die("calloc", CAIRN_ENOMEM);
    result_t res = {0};
    int n_ttft = 0;
    double t0 = agent_now();
    for (int t = 0; t < o->turns; t++) {
        for (int i = 0; i < S; i++)
            agent_submit_turn(&a, i, t, sch[(i + t) % n_servers]);
        for (int i = 0; i < S; i++) {
            const cairn_req_usage_t *u = agent_wait_turn(&a, i, t, replies);
            res.prompt += u->prompt_tokens;
            res.hot += u->cached_tokens;
            res.restored += u->restored_tokens;
            res.computed += u->prompt_tokens - u->cached_tokens - u->restored_tokens;
            ttft[n_ttft++] = u->ttft_ms;
        }
        /* Like an agent between its calls: the turn's captures reach the tiers before the
         * next turn (the shared tier writes asynchronously). */
        for (int k = 0; k < n_servers; k++)
            cairn_engine_cold_flush(eng[k]);
    }
    res.wall = agent_now() - t0;
    res.p50 = percentile(ttft, n_ttft, 0.50);
    res.p99 = percentile(ttft, n_ttft, 0.99);
    for (int k = 0; k < n_servers; k++) {
        cairn_sched_destroy(sch[k], 1000);
        cairn_engine_cold_counters_t cc;
        cairn_engine_cold_counters(eng[k], &cc);
        res.shared_blocks += cc.shared_restored_blocks;
        res.captured += cc.captured_blocks;
        res.shared_faults += cc.shared.faults;
        cairn_engine_destroy(eng[k]);
    }
    agent_sessions_fini(&a);
    free(ttft);
    return res;
}

static void print_result(int n, const char *mode, const result_t *r)
{
    printf("  %d  %-8s %8ld %8ld %9ld %9llu %9ld %7.1f%% %9.0f %9.0f %7.1f %8llu\n", n, mode, r->prompt, r->hot,
           r->restored, (unsigned long long)r->shared_blocks * 16, r->computed,
           r->prompt ? 100.0 * (double)(r->hot + r->restored) / (double)r->prompt : 0.0, r->p50, r->p99, r->wall,
           (unsigned long long)r->captured);
    fflush(stdout);
}

/* ---- part 2: restore bandwidth ---- */

#define BW_LAYERS 8
#define BW_LAYER_BYTES (8192u) /* llama-8l bf16: 16 tokens x 2 heads x 64 dims x 2 (K, V) x 2 bytes */
#define BW_TOKENS 16
#define BW_PAYLOAD (BW_LAYERS * BW_LAYER_BYTES)

typedef struct {
    uint8_t *bufs;
} bw_sink_t;

static void *bw_dest(void *user, size_t i, size_t size)
{
    bw_sink_t *k = user;
    return size == BW_PAYLOAD ? k->bufs + i * (size_t)BW_PAYLOAD : NULL;
}

static int cmp_d(const void *a, const void *b) { return cmp_double(a, b); }

static void bandwidth(const bench_t *b)
{
    const int B = b->o->blocks;
    redis_flushall();
    uint64_t layer_bytes[BW_LAYERS];
    for (int l = 0; l < BW_LAYERS; l++)
        layer_bytes[l] = BW_LAYER_BYTES;
    const cairn_tier_group_layout_t g = {BW_LAYERS, layer_bytes};
    cairn_tier_layout_t layout = {{{0}}, CAIRN_DTYPE_BF16, BW_TOKENS, 1, &g};
    memset(layout.fingerprint.bytes, 0x77, 32);
    cairn_shared_tier_config_t sc = {.url = b->url};
    cairn_tier_store_t *s = NULL;
    char err[512] = "";
    if (cairn_shared_tier_open(&sc, &layout, &s, err, sizeof err))
        die(err, CAIRN_EIO);
    cairn_tier_key_t *keys = calloc((size_t)B, sizeof *keys);
    int32_t *tokens = malloc((size_t)B * BW_TOKENS * sizeof(int32_t));
    uint8_t *pay = malloc(BW_PAYLOAD), *bufs = malloc((size_t)B * BW_PAYLOAD);
    if (!keys || !tokens || !pay || !bufs)
        die("malloc", CAIRN_ENOMEM);
    agent_fill_tokens(tokens, B * BW_TOKENS, 99u, 32000);
    for (int i = 0; i < B; i++) {
        keys[i].kind = CAIRN_TIER_BLOCK;
        for (int j = 0; j < 32; j++)
            keys[i].hash.bytes[j] = (uint8_t)(i * 131 + j * 7 + (i >> 8));
        memcpy(keys[i].hash.bytes, &i, sizeof i);
        for (size_t j = 0; j < BW_PAYLOAD; j++)
            pay[j] = (uint8_t)(j * 31 + (size_t)i);
        cairn_tier_object_t o = {.key = keys[i], .tokens = tokens + (size_t)i * BW_TOKENS, .n_tokens = BW_TOKENS,
                                 .payload = pay, .payload_size = BW_PAYLOAD};
        if (i)
            o.parent = keys[i - 1].hash;
        if (cairn_tier_store_put(s, &o, 10000, NULL))
            die("put", CAIRN_EIO);
    }
    cairn_tier_store_flush(s);
    /* The key texts, for the plain GETs. */
    char fp[65], dom[65], h[65];
    cairn_tier_hash_hex(&layout.fingerprint, fp);
    cairn_tier_hash_hex(&keys[0].domain, dom);
    char(*names)[256] = malloc((size_t)B * 256);
    for (int i = 0; i < B; i++) {
        cairn_tier_hash_hex(&keys[i].hash, h);
        snprintf(names[i], 256, "cairn:%s:%s:%s:0", fp, dom, h);
    }
    redisContext *c = redis_client();
    if (!c)
        die("redis", CAIRN_EIO);
    enum { ROUNDS = 7, N_DEPTHS = 3 };
    static const int depths[N_DEPTHS] = {16, 32, 128};
    double raw[N_DEPTHS][ROUNDS], walk[ROUNDS], cpu[ROUNDS];
    size_t value_bytes = 0;
    for (int r = 0; r < ROUNDS; r++) {
        /* (a) plain pipelined GETs through hiredis at several depths; the best median is
         * the loopback maximum. */
        double t0;
        for (int d = 0; d < N_DEPTHS; d++) {
            t0 = agent_now();
            size_t got = 0;
            int sent = 0, recv = 0;
            while (recv < B) {
                while (sent < B && sent - recv < depths[d])
                    redisAppendCommand(c, "GET %s", names[sent++]);
                redisReply *rep = NULL;
                if (redisGetReply(c, (void **)&rep) != REDIS_OK || !rep)
                    die("GET", CAIRN_EIO);
                got += rep->len;
                freeReplyObject(rep);
                recv++;
            }
            raw[d][r] = (double)got / (agent_now() - t0);
            value_bytes = got;
        }
        /* (b) the restore walk over the store, into destination buffers. */
        bw_sink_t k = {bufs};
        cairn_tier_chain_t chain = {keys, tokens, BW_TOKENS, (size_t)B};
        cairn_tier_restore_sink_t sink = {NULL, bw_dest, &k};
        cairn_tier_restore_result_t res;
        double c0 = thread_cpu();
        t0 = agent_now();
        if (cairn_tier_restore_chain(s, &chain, 0, &sink, &res) || res.loaded != (size_t)B) {
            fprintf(stderr, "bench_shared_tier: restore loaded %zu of %d\n", res.loaded, B);
            exit(1);
        }
        walk[r] = (double)B * BW_PAYLOAD / (agent_now() - t0);
        cpu[r] = (thread_cpu() - c0) / B * 1e6;
    }
    qsort(walk, ROUNDS, sizeof *walk, cmp_d);
    qsort(cpu, ROUNDS, sizeof *cpu, cmp_d);
    printf("\nrestore bandwidth: %d blocks of %u KiB (%.1f MiB of payload, %.1f MiB of values), medians of %d "
           "alternated rounds\n",
           B, BW_PAYLOAD / 1024u, (double)B * BW_PAYLOAD / 1048576.0, (double)value_bytes / 1048576.0, ROUNDS);
    double best = 0;
    for (int d = 0; d < N_DEPTHS; d++) {
        qsort(raw[d], ROUNDS, sizeof raw[d][0], cmp_d);
        printf("  plain pipelined GETs (hiredis, %3d in flight): %.2f GB/s of values\n", depths[d],
               raw[d][ROUNDS / 2] / 1e9);
        if (raw[d][ROUNDS / 2] > best)
            best = raw[d][ROUNDS / 2];
    }
    printf("  loopback Redis maximum (the best of those): %.2f GB/s\n"
           "  restore walk over the Redis store (EXISTS chain, pipelined GETs, validated, copied): %.2f GB/s of "
           "payload = %.0f%% of the maximum; %.1f us thread CPU per block\n",
           best / 1e9, walk[ROUNDS / 2] / 1e9, 100.0 * walk[ROUNDS / 2] / best, cpu[ROUNDS / 2]);
    redisFree(c);
    cairn_tier_store_destroy(s);
    free(names);
    free(keys);
    free(tokens);
    free(pay);
    free(bufs);
}

static int parse_opts(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){4, 4, 5, 1024, 128, 8, 1, 512, 0};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            return -1;
        const char *a = argv[i];
        int *dst = !strcmp(a, "--servers-max") ? &o->servers_max
                   : !strcmp(a, "--sessions")  ? &o->sessions
                   : !strcmp(a, "--turns")     ? &o->turns
                   : !strcmp(a, "--system")    ? &o->system
                   : !strcmp(a, "--tool")      ? &o->tool
                   : !strcmp(a, "--gen")       ? &o->gen
                   : !strcmp(a, "--threads")   ? &o->threads
                   : !strcmp(a, "--blocks")    ? &o->blocks
                   : !strcmp(a, "--capture-ms") ? &o->capture_ms
                                               : NULL;
        if (!dst)
            return -1;
        *dst = atoi(argv[++i]);
    }
    return o->servers_max < 0 || o->servers_max > 4 || o->sessions < 1 || o->turns < 1 || o->system < 1 ||
                   o->tool < 1 || o->gen < 1 || o->threads < 1 || o->blocks < 1 || o->capture_ms < 0
               ? -1
               : 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    if (parse_opts(argc, argv, &o)) {
        fprintf(stderr, "usage: bench_shared_tier [--servers-max N<=4] [--sessions S] [--turns T] [--system N] "
                        "[--tool R] [--gen G] [--threads N] [--blocks B] [--capture-ms MS]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    redis_start();
    char root[] = "/tmp/cairn-bench-shared-XXXXXX";
    if (!mkdtemp(root))
        die("mkdtemp", CAIRN_EIO);
    bench_t b = {&o, NULL, NULL, root, 0, ""};
    snprintf(b.url, sizeof b.url, "redis://127.0.0.1:%d", g_redis_port);
    if (o.servers_max == 0) {
        bandwidth(&b);
        char rm[128];
        snprintf(rm, sizeof rm, "rm -rf '%s'", root);
        return system(rm) == 0 ? 0 : 1;
    }
    char model[sizeof root + 8];
    snprintf(model, sizeof model, "%s/model", root);
    cairn_checkpoint_t *ck;
    cairn_tokenizer_t *tok;
    agent_model_open("bench_shared_tier", model, false, &ck, &tok);
    b.ck = ck;
    b.tok = tok;
    b.vocab = cairn_checkpoint_config(ck)->vocab;
    printf("bench_shared_tier: llama-8l (f16 weights, bf16 K/V, f32 math), %d thread(s) per server, redis-server "
           "on %s\n  %d sessions x %d turns, system prompt %d tokens (shared), tool result %d tokens, reply %d tokens; "
           "turn t of session i on server (i + t) mod N\n",
           o.threads, b.url, o.sessions, o.turns, o.system, o.tool, o.gen);
    printf("  capture deadline per turn: %s\n", o.capture_ms ? "--capture-ms" : "the engine's default (250 ms)");
    if (o.capture_ms)
        printf("    = %d ms\n", o.capture_ms);
    printf("\n  N  tiers      prompt      hot  restored  of which     computed  cached  TTFT p50  TTFT p99  wall s  captured\n"
           "                                         from Redis                      ms        ms               blocks\n");
    size_t n_rep = (size_t)o.turns * (size_t)o.sessions * (size_t)o.gen;
    int32_t *with = calloc(n_rep, sizeof(int32_t)), *without = calloc(n_rep, sizeof(int32_t));
    if (!with || !without)
        die("calloc", CAIRN_ENOMEM);
    bool all_same = true;
    for (int n = 1; n <= o.servers_max; n++) {
        redis_flushall();
        result_t rs = replay(&b, n, true, with);
        print_result(n, "+shared", &rs);
        result_t rl = replay(&b, n, false, without);
        print_result(n, "local", &rl);
        bool same = !memcmp(with, without, n_rep * sizeof(int32_t));
        all_same &= same;
        if (rs.shared_faults)
            printf("     (%llu shared-tier faults)\n", (unsigned long long)rs.shared_faults);
        if (!same)
            printf("     REPLIES DIFFER between the two runs\n");
    }
    printf("  replies identical with and without the shared tier: %s\n", all_same ? "yes" : "NO");
    bandwidth(&b);
    free(with);
    free(without);
    cairn_tokenizer_destroy(tok);
    cairn_checkpoint_close(ck);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_shared_tier: could not remove %s\n", root);
    return all_same ? 0 : 1;
}
