/*
 * bench_agent_replay.c — an agent-style replay through the scheduler: how much of each
 * prompt the hot prefix cache and the SSD cold tier serve, across a server restart.
 *
 * Workload (token ids, no HTTP). S sessions share one long system prompt. Each session
 * runs T turns; turn t's prompt is the whole conversation so far (system prompt, every
 * earlier tool result and reply) plus a new tool result of R tokens, and the reply is G
 * tokens generated greedily (ignore_eos). The S requests of a turn are submitted together
 * and the turn ends when all have finished, as agents running side by side would. After
 * turn K the scheduler and the engine are destroyed (the cold tier drains its writer
 * queue) and recreated on the same cache directory: the hot cache is lost and turn K+1
 * must get its prefixes from the cold tier. The replay runs twice: with the cold tier,
 * then without it (the same restart, nothing on disk), and the generated tokens of both
 * runs must be identical (restored K/V are bit-identical to recomputed ones).
 *
 * Reported per turn and in total: prompt tokens, hot cached tokens, cold restored tokens,
 * computed tokens (prompt - hot - cold), mean and max TTFT (the scheduler's submit -> first
 * token) and the turn's wall time; the share of prompt tokens served from cache (hot +
 * cold; target >= 90% with the cold tier); the pool and cold-tier figures of the
 * scheduler's stats at the end of each run.
 *
 * Model: synthesized llama-8l (8 layers, hidden 512, 8/2 heads, head_dim 64, ffn 1536,
 * vocab 32000), f16 weights, paged bf16 K/V (64 KiB per 16-token block), f32 math. With
 * --arch lfm2 the same sizes as an LFM2 hybrid (layers 2 and 5 attend, the other six are
 * 3-tap short convolutions): its prefixes restore from blocks plus conv-state sidecars.
 *
 * usage: bench_agent_replay [--sessions S] [--turns T] [--system N] [--tool R] [--gen G]
 *                           [--restart-after K] [--restart-every] [--threads N] [--pool-mib M] [--dir DIR]
 *                           [--no-compare] [--arch llama|lfm2]
 * Defaults: 4 sessions, 8 turns, a 2048-token system prompt, 200-token tool results,
 * 16-token replies, restart after turn 4, 2 threads, 256 MiB pool, a new directory under
 * /tmp (removed at the end). The workload's prompts and replies: agent_workload.h.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent_workload.h"
#include "cairn/scheduler.h"

typedef struct {
    int sessions, turns, system, tool, gen, restart_after, threads, pool_mib;
    bool compare;
    bool restart_every; /* --restart-every: a restart before every turn but the first */
    bool lfm2;      /* --arch lfm2: the hybrid of the same sizes */
} opts_t;

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_agent_replay: %s: %s\n", what, cairn_strerror(rc));
    exit(1);
}

typedef struct {
    long prompt, hot, cold, computed;
    double ttft_sum, ttft_max, wall;
    int requests;
} tally_t;

static void tally_add(tally_t *a, const tally_t *b)
{
    a->prompt += b->prompt;
    a->hot += b->hot;
    a->cold += b->cold;
    a->computed += b->computed;
    a->ttft_sum += b->ttft_sum;
    a->ttft_max = b->ttft_max > a->ttft_max ? b->ttft_max : a->ttft_max;
    a->wall += b->wall;
    a->requests += b->requests;
}

static void print_row(const char *label, const tally_t *t)
{
    double served = t->prompt ? 100.0 * (double)(t->hot + t->cold) / (double)t->prompt : 0;
    printf("  %-7s %8ld %8ld %8ld %9ld %7.1f%% %9.0f %9.0f %8.2f\n", label, t->prompt, t->hot,
           t->cold, t->computed, served, t->requests ? t->ttft_sum / t->requests : 0, t->ttft_max,
           t->wall);
}

/* ---- The replay ------------------------------------------------------------------------ */

typedef struct {
    const opts_t *o;
    const cairn_checkpoint_t *ck;
    const cairn_tokenizer_t *tok;
    const char *cache_dir;
    int vocab;
} bench_t;

static void open_server(const bench_t *b, bool cold, cairn_engine_t **e, cairn_sched_t **s)
{
    cairn_engine_options_t eo;
    cairn_engine_options_default(&eo);
    eo.n_threads = b->o->threads;
    eo.pool_mib = b->o->pool_mib;
    eo.cold = cold ? 1 : -1;
    eo.cold_root = cold ? b->cache_dir : NULL;
    char err[512] = "";
    int rc = cairn_engine_create(b->ck, &eo, e, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench_agent_replay: engine: %s\n", err);
        exit(1);
    }
    cairn_engine_cold_counters_t cc;
    cairn_engine_cold_counters(*e, &cc);
    if (cold && !cc.enabled) {
        fprintf(stderr, "bench_agent_replay: the cold tier did not open under %s\n", b->cache_dir);
        exit(1);
    }
    cairn_sched_options_t so;
    cairn_sched_options_default(&so);
    if (so.max_running < b->o->sessions)
        so.max_running = b->o->sessions;
    if ((rc = cairn_sched_create(*e, b->tok, &so, s)))
        die("sched_create", rc);
}

/* The scheduler's view of the pool and the cold tier at the end of a run. */
static void print_stats(cairn_sched_t *s)
{
    cairn_sched_stats_t st;
    for (int i = 0; i < 1000; i++) { /* the snapshot trails the last event by one step */
        cairn_sched_stats(s, &st);
        if (st.running == 0 && st.pool_blocks_used == 0)
            break;
        usleep(1000);
    }
    printf("  pool: %llu blocks, %llu used, %llu cached, %llu free, %llu evictions; "
           "cold: %s, since the restart %llu blocks captured, %llu restored, %llu corruptions, %llu write errors, "
           "%llu queue drops\n",
           (unsigned long long)st.pool_blocks_total, (unsigned long long)st.pool_blocks_used,
           (unsigned long long)st.pool_blocks_cached, (unsigned long long)st.pool_blocks_free,
           (unsigned long long)st.pool_evictions, st.cold_enabled ? "on" : "off",
           (unsigned long long)st.cold_captured_blocks, (unsigned long long)st.cold_restored_blocks,
           (unsigned long long)st.cold_corruptions, (unsigned long long)st.cold_write_errors,
           (unsigned long long)st.cold_queue_drops);
}

/*
 * Runs the whole replay; replies[(turn * sessions + session) * gen ...] receives the
 * generated tokens. Returns the total tally.
 */
static tally_t replay(const bench_t *b, bool cold, int32_t *replies)
{
    const opts_t *o = b->o;
    int S = o->sessions;
    agent_sessions_t a;
    agent_sessions_init(&a, "bench_agent_replay", S, o->system, o->tool, o->gen, b->vocab);
    cairn_engine_t *e;
    cairn_sched_t *s;
    open_server(b, cold, &e, &s);
    printf("\n%s\n  %-7s %8s %8s %8s %9s %8s %9s %9s %8s\n",
           cold ? "cold tier on" : "cold tier off (comparison)", "turn", "prompt", "hot",
           "cold", "computed", "cached", "TTFT avg", "TTFT max", "wall s");
    tally_t total = {0};
    for (int t = 0; t < o->turns; t++) {
        if (t > 0 && (t == o->restart_after || o->restart_every)) {
            double r0 = agent_now();
            cairn_sched_destroy(s, 1000);
            cairn_engine_destroy(e); /* drains the cold tier's writer queue */
            open_server(b, cold, &e, &s);
            printf("  -- restart (%.2f s: scheduler and engine destroyed, writes drained, "
                   "recreated on the same cache dir)\n", agent_now() - r0);
        }
        double t0 = agent_now();
        for (int i = 0; i < S; i++)
            agent_submit_turn(&a, i, t, s);
        tally_t turn = {0};
        for (int i = 0; i < S; i++) {
            const cairn_req_usage_t *u = agent_wait_turn(&a, i, t, replies);
            turn.prompt += u->prompt_tokens;
            turn.hot += u->cached_tokens;
            turn.cold += u->restored_tokens;
            turn.computed += u->prompt_tokens - u->cached_tokens - u->restored_tokens;
            turn.ttft_sum += u->ttft_ms;
            if (u->ttft_ms > turn.ttft_max)
                turn.ttft_max = u->ttft_ms;
            turn.requests++;
        }
        turn.wall = agent_now() - t0;
        char label[16];
        snprintf(label, sizeof label, "%d", t + 1);
        print_row(label, &turn);
        fflush(stdout);
        tally_add(&total, &turn);
    }
    print_row("total", &total);
    print_stats(s);
    cairn_sched_destroy(s, 1000);
    cairn_engine_destroy(e);
    agent_sessions_fini(&a);
    return total;
}

static int parse_opts(int argc, char **argv, opts_t *o, const char **dir)
{
    *o = (opts_t){4, 8, 2048, 200, 16, 4, 2, 256, true, false, false};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int *dst = NULL;
        if (!strcmp(a, "--no-compare")) {
            o->compare = false;
            continue;
        }
        if (!strcmp(a, "--restart-every")) {
            o->restart_every = true;
            continue;
        }
        if (i + 1 >= argc)
            return -1;
        if (!strcmp(a, "--dir")) {
            *dir = argv[++i];
            continue;
        }
        if (!strcmp(a, "--arch")) {
            const char *v = argv[++i];
            if (strcmp(v, "llama") && strcmp(v, "lfm2"))
                return -1;
            o->lfm2 = !strcmp(v, "lfm2");
            continue;
        }
        dst = !strcmp(a, "--sessions")        ? &o->sessions
              : !strcmp(a, "--turns")         ? &o->turns
              : !strcmp(a, "--system")        ? &o->system
              : !strcmp(a, "--tool")          ? &o->tool
              : !strcmp(a, "--gen")           ? &o->gen
              : !strcmp(a, "--restart-after") ? &o->restart_after
              : !strcmp(a, "--threads")       ? &o->threads
              : !strcmp(a, "--pool-mib")      ? &o->pool_mib
                                              : NULL;
        if (!dst)
            return -1;
        *dst = atoi(argv[++i]);
    }
    if (o->sessions < 1 || o->turns < 1 || o->system < 1 || o->tool < 1 || o->gen < 1 ||
        o->restart_after < 0 || o->threads < 1 || o->pool_mib < 1)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    const char *dir_arg = NULL;
    if (parse_opts(argc, argv, &o, &dir_arg)) {
        fprintf(stderr, "usage: bench_agent_replay [--sessions S] [--turns T] [--system N] "
                        "[--tool R] [--gen G] [--restart-after K] [--restart-every] [--threads N] "
                        "[--pool-mib M] [--dir DIR] [--no-compare] [--arch llama|lfm2]\n");
        return 2;
    }
    char root[] = "/tmp/cairn-bench-replay-XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    char model[sizeof root + 8], cache[1024];
    snprintf(model, sizeof model, "%s/model", root);
    if (dir_arg)
        snprintf(cache, sizeof cache, "%s", dir_arg);
    else
        snprintf(cache, sizeof cache, "%s/cache", root);

    cairn_checkpoint_t *ck;
    cairn_tokenizer_t *tok;
    agent_model_open("bench_agent_replay", model, o.lfm2, &ck, &tok);
    int rc = 0;
    const cairn_model_config_t *c = cairn_checkpoint_config(ck);
    bench_t b = {&o, ck, tok, cache, c->vocab};
    printf("bench_agent_replay: %s (%d layers, hidden %d, %d/%d heads, head_dim %d, "
           "ffn %d, vocab %d), f16 weights, bf16 K/V, f32 math, %d threads, pool %d MiB\n"
           "  %d sessions x %d turns; system prompt %d tokens (shared), tool result %d tokens "
           "per turn, reply %d tokens (greedy); restart after turn %d; cache dir %s\n",
           o.lfm2 ? "lfm2 of llama-8l's sizes" : "llama-8l", c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn, c->vocab,
           o.threads, o.pool_mib, o.sessions, o.turns, o.system, o.tool, o.gen, o.restart_after,
           cache);

    size_t n_replies = (size_t)o.turns * (size_t)o.sessions * (size_t)o.gen;
    int32_t *with_cold = calloc(n_replies, sizeof(int32_t));
    int32_t *without = calloc(n_replies, sizeof(int32_t));
    if (!with_cold || !without)
        die("calloc", CAIRN_ENOMEM);
    double t0 = agent_now();
    tally_t on = replay(&b, true, with_cold);
    double wall_on = agent_now() - t0;
    tally_t off = {0};
    double wall_off = 0;
    if (o.compare) {
        t0 = agent_now();
        off = replay(&b, false, without);
        wall_off = agent_now() - t0;
    }

    printf("\nsummary\n  cold tier on:  %.1f%% of %ld prompt tokens served from cache "
           "(hot %ld, cold %ld), %ld computed, %.1f s (target >= 90%%)\n",
           100.0 * (double)(on.hot + on.cold) / (double)on.prompt, on.prompt, on.hot, on.cold,
           on.computed, wall_on);
    if (o.compare) {
        bool same = memcmp(with_cold, without, n_replies * sizeof(int32_t)) == 0;
        printf("  cold tier off: %.1f%% of %ld prompt tokens served from cache (hot %ld), "
               "%ld computed, %.1f s\n"
               "  replies identical with and without the cold tier: %s\n",
               100.0 * (double)off.hot / (double)off.prompt, off.prompt, off.hot, off.computed,
               wall_off, same ? "yes" : "NO");
        if (!same)
            rc = 1;
    }
    free(with_cold);
    free(without);
    cairn_tokenizer_destroy(tok);
    cairn_checkpoint_close(ck);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_agent_replay: could not remove %s\n", root);
    return rc ? 1 : 0;
}
