/*
 * bench_scheduler.c — the scheduler under concurrent clients: aggregate generated
 * tokens/s and time to first token (p50, p99) at 1, 4 and 16 clients.
 *
 * The model is synthesized (src/tools/synth.h) into a temporary folder: the llama-8l
 * preset (8 layers, hidden 512, 8/2 heads, head_dim 64, ffn 1536, vocab 32000), f16
 * weights, paged bf16 K/V, f32 math. Each client is a thread running a closed loop: it
 * submits a request (a fresh 128-token prompt under a shared 64-token system prefix,
 * greedy, ignore_eos, --gen tokens), waits for its final event, and submits the next,
 * --rounds times. Aggregate tokens/s = generated tokens of all clients / wall time of
 * the level; TTFT is submit -> first token as the scheduler reports it.
 *
 * usage: bench_scheduler [--threads N] [--rounds N] [--gen N] [--prompt N]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cairn/scheduler.h"
#include "tools/synth.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_scheduler: %s: %s\n", what, cairn_strerror(rc));
    exit(1);
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool final;
    int status;
    cairn_req_usage_t usage;
} wait_t;

static void on_event(void *user, const cairn_req_event_t *ev)
{
    wait_t *w = user;
    if (ev->kind == CAIRN_REQ_EVENT_DELTA)
        return;
    pthread_mutex_lock(&w->mu);
    if (ev->usage)
        w->usage = *ev->usage;
    if (ev->kind == CAIRN_REQ_EVENT_ERROR)
        w->status = ev->status;
    if (ev->final) {
        w->final = true;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

typedef struct {
    cairn_sched_t *sched;
    int client, rounds, gen, prompt_len, prefix_len, vocab;
    double *ttft_ms;      /* [rounds] */
    long generated;
} client_t;

static void *client_main(void *arg)
{
    client_t *c = arg;
    int n = c->prefix_len + c->prompt_len;
    int32_t *ids = malloc((size_t)n * sizeof(int32_t));
    for (int r = 0; r < c->rounds; r++) {
        unsigned x = 12345u;
        for (int i = 0; i < c->prefix_len; i++) /* the shared system prompt */
            ids[i] = (int32_t)((x = x * 1664525u + 1013904223u) >> 8) % (c->vocab - 3);
        x = (unsigned)(c->client * 7919 + r * 104729 + 1);
        for (int i = c->prefix_len; i < n; i++)
            ids[i] = (int32_t)((x = x * 1664525u + 1013904223u) >> 8) % (c->vocab - 3);
        wait_t w;
        memset(&w, 0, sizeof(w));
        pthread_mutex_init(&w.mu, NULL);
        pthread_cond_init(&w.cv, NULL);
        cairn_req_params_t p = {0};
        p.prompt = ids;
        p.n_prompt = n;
        cairn_sampling_params_init(&p.sampling);
        p.sampling.temperature = 0;
        p.sampling.max_tokens = c->gen;
        p.sampling.ignore_eos = true;
        p.on_event = on_event;
        p.user = &w;
        uint64_t id;
        char err[256];
        int rc = cairn_sched_submit(c->sched, &p, &id, err, sizeof(err));
        if (rc) {
            fprintf(stderr, "bench_scheduler: submit: %s\n", err);
            exit(1);
        }
        pthread_mutex_lock(&w.mu);
        while (!w.final)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        if (w.status)
            die("request", w.status);
        c->ttft_ms[r] = w.usage.ttft_ms;
        c->generated += w.usage.completion_tokens;
        pthread_mutex_destroy(&w.mu);
        pthread_cond_destroy(&w.cv);
    }
    free(ids);
    return NULL;
}

static void run_level(cairn_engine_t *e, const cairn_tokenizer_t *tok, int clients, int rounds,
                      int gen, int prompt_len, int vocab)
{
    cairn_sched_t *s;
    int rc = cairn_sched_create(e, tok, NULL, &s);
    if (rc)
        die("sched_create", rc);
    client_t *cs = calloc((size_t)clients, sizeof(*cs));
    pthread_t *th = calloc((size_t)clients, sizeof(*th));
    double *ttft = calloc((size_t)(clients * rounds), sizeof(double));
    double t0 = now();
    for (int i = 0; i < clients; i++) {
        cs[i] = (client_t){s, i, rounds, gen, prompt_len, 64, vocab, ttft + i * rounds, 0};
        pthread_create(&th[i], NULL, client_main, &cs[i]);
    }
    long total = 0;
    for (int i = 0; i < clients; i++) {
        pthread_join(th[i], NULL);
        total += cs[i].generated;
    }
    double wall = now() - t0;
    cairn_sched_stats_t st;
    cairn_sched_stats(s, &st);
    int n = clients * rounds;
    qsort(ttft, (size_t)n, sizeof(double), cmp_double);
    double p50 = ttft[(n - 1) / 2], p99 = ttft[(int)((n - 1) * 0.99 + 0.5)];
    printf("clients %2d  requests %3d  generated %5ld  wall %6.2f s  aggregate %7.1f tok/s  "
           "TTFT p50 %7.1f ms  p99 %7.1f ms  steps %llu  preemptions %llu\n",
           clients, n, total, wall, total / wall, p50, p99, (unsigned long long)st.steps,
           (unsigned long long)st.preemptions);
    fflush(stdout);
    cairn_sched_destroy(s, 1000);
    free(cs);
    free(th);
    free(ttft);
}

int main(int argc, char **argv)
{
    int threads = 2, rounds = 2, gen = 64, prompt_len = 128;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0)
            rounds = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--gen") == 0)
            gen = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--prompt") == 0)
            prompt_len = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_scheduler [--threads N] [--rounds N] [--gen N] [--prompt N]\n");
            return 2;
        }
    }
    if (threads < 1 || rounds < 1 || gen < 1 || prompt_len < 1) {
        fprintf(stderr, "bench_scheduler: every option wants a positive integer\n");
        return 2;
    }
    char root[] = "/tmp/cairn-bench-sched-XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    cairn_synth_options_t so;
    cairn_synth_options_default(&so);
    if (cairn_synth_options_preset("llama-8l", &so))
        die("preset", CAIRN_EINVAL);
    so.dtype = CAIRN_DTYPE_F16;
    char err[512] = "";
    int rc = cairn_synth_write(root, &so, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "bench_scheduler: synth: %s\n", err);
        return 1;
    }
    cairn_checkpoint_t *ck;
    if ((rc = cairn_checkpoint_open(root, &ck, err, sizeof(err))))
        die(err, rc);
    cairn_tokenizer_t *tok;
    if ((rc = cairn_tokenizer_load(root, &tok, err, sizeof(err))))
        die(err, rc);
    cairn_engine_options_t eo;
    cairn_engine_options_default(&eo);
    eo.n_threads = threads;
    eo.cold = -1;
    cairn_engine_t *e;
    if ((rc = cairn_engine_create(ck, &eo, &e, err, sizeof(err))))
        die(err, rc);
    const cairn_model_config_t *c = cairn_engine_config(e);
    printf("bench_scheduler: llama-8l (%d layers, hidden %d, %d/%d heads, head_dim %d, ffn %d, "
           "vocab %d), f16 weights, bf16 K/V, f32 math, %d threads; prompt 64 shared + %d, "
           "gen %d, %d rounds per client\n",
           c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn, c->vocab,
           threads, prompt_len, gen, rounds);
    static const int levels[] = {1, 4, 16};
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
        run_level(e, tok, levels[i], rounds, gen, prompt_len, c->vocab);
    cairn_engine_destroy(e);
    cairn_tokenizer_destroy(tok);
    cairn_checkpoint_close(ck);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_scheduler: could not remove %s\n", root);
    return 0;
}
