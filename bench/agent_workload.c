/*
 * agent_workload.c — the agent-style replay workload shared by bench_agent_replay and
 * bench_shared_tier (agent_workload.h: model, determinism of the token streams, failures).
 *
 * Thread-safety: see the header; agent_on_event runs on the scheduler's engine thread and
 * touches only its agent_wait_t, under that wait's mutex.
 */
#include "agent_workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/synth.h"

static void die(const char *prog, const char *what, int rc)
{
    fprintf(stderr, "%s: %s: %s\n", prog, what, cairn_strerror(rc));
    exit(1);
}

double agent_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void agent_fill_tokens(int32_t *t, int n, unsigned seed, int vocab)
{
    unsigned x = seed * 2654435761u + 1u;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        t[i] = (int32_t)((x >> 8) % (unsigned)(vocab - 3));
    }
}

static void on_event(void *user, const cairn_req_event_t *ev)
{
    agent_wait_t *w = user;
    pthread_mutex_lock(&w->mu);
    if (ev->kind == CAIRN_REQ_EVENT_DELTA) {
        for (int i = 0; i < ev->n_tokens && w->n_reply < w->cap_reply; i++)
            w->reply[w->n_reply++] = ev->tokens[i];
    } else {
        if (ev->usage)
            w->usage = *ev->usage;
        if (ev->kind == CAIRN_REQ_EVENT_ERROR)
            w->status = ev->status;
        if (ev->final) {
            w->final = true;
            pthread_cond_signal(&w->cv);
        }
    }
    pthread_mutex_unlock(&w->mu);
}

static void conv_push(const char *prog, agent_conv_t *c, const int32_t *t, int n)
{
    if (c->n + n > c->cap) {
        int cap = c->cap ? c->cap : 1024;
        while (cap < c->n + n)
            cap *= 2;
        int32_t *p = realloc(c->toks, (size_t)cap * sizeof(int32_t));
        if (!p)
            die(prog, "realloc", CAIRN_ENOMEM);
        c->toks = p;
        c->cap = cap;
    }
    memcpy(c->toks + c->n, t, (size_t)n * sizeof(int32_t));
    c->n += n;
}

void agent_sessions_init(agent_sessions_t *a, const char *prog, int sessions, int system, int tool, int gen,
                         int vocab)
{
    *a = (agent_sessions_t){.prog = prog, .sessions = sessions, .system = system, .tool = tool, .gen = gen,
                            .vocab = vocab};
    a->conv = calloc((size_t)sessions, sizeof *a->conv);
    a->w = calloc((size_t)sessions, sizeof *a->w);
    a->sys = malloc((size_t)system * sizeof(int32_t));
    a->tool_buf = malloc((size_t)tool * sizeof(int32_t));
    if (!a->conv || !a->w || !a->sys || !a->tool_buf)
        die(prog, "calloc", CAIRN_ENOMEM);
    agent_fill_tokens(a->sys, system, 7u, vocab);
    for (int i = 0; i < sessions; i++) {
        conv_push(prog, &a->conv[i], a->sys, system);
        pthread_mutex_init(&a->w[i].mu, NULL);
        pthread_cond_init(&a->w[i].cv, NULL);
        a->w[i].cap_reply = gen;
        if (!(a->w[i].reply = malloc((size_t)gen * sizeof(int32_t))))
            die(prog, "malloc", CAIRN_ENOMEM);
    }
}

void agent_sessions_fini(agent_sessions_t *a)
{
    for (int i = 0; i < a->sessions; i++) {
        free(a->conv[i].toks);
        pthread_mutex_destroy(&a->w[i].mu);
        pthread_cond_destroy(&a->w[i].cv);
        free(a->w[i].reply);
    }
    free(a->conv);
    free(a->w);
    free(a->sys);
    free(a->tool_buf);
    *a = (agent_sessions_t){0};
}

void agent_submit_turn(agent_sessions_t *a, int i, int t, cairn_sched_t *s)
{
    agent_conv_t *c = &a->conv[i];
    agent_wait_t *w = &a->w[i];
    agent_fill_tokens(a->tool_buf, a->tool, 1000u + (unsigned)(t * 131 + i), a->vocab);
    conv_push(a->prog, c, a->tool_buf, a->tool);
    w->final = false;
    w->status = 0;
    w->n_reply = 0;
    cairn_req_params_t p = {0};
    p.prompt = c->toks;
    p.n_prompt = c->n;
    cairn_sampling_params_init(&p.sampling);
    p.sampling.temperature = 0;
    p.sampling.max_tokens = a->gen;
    p.sampling.ignore_eos = true;
    p.on_event = on_event;
    p.user = w;
    char err[256];
    uint64_t id;
    if (cairn_sched_submit(s, &p, &id, err, sizeof err)) {
        fprintf(stderr, "%s: submit: %s\n", a->prog, err);
        exit(1);
    }
}

const cairn_req_usage_t *agent_wait_turn(agent_sessions_t *a, int i, int t, int32_t *replies)
{
    agent_wait_t *w = &a->w[i];
    pthread_mutex_lock(&w->mu);
    while (!w->final)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    if (w->status)
        die(a->prog, "request", w->status);
    memcpy(replies + ((size_t)t * a->sessions + i) * a->gen, w->reply, (size_t)w->n_reply * sizeof(int32_t));
    conv_push(a->prog, &a->conv[i], w->reply, w->n_reply);
    return &w->usage;
}

void agent_model_open(const char *prog, const char *dir, bool lfm2, cairn_checkpoint_t **ck,
                      cairn_tokenizer_t **tok)
{
    cairn_synth_options_t so;
    cairn_synth_options_default(&so);
    if (cairn_synth_options_preset("llama-8l", &so))
        die(prog, "preset", CAIRN_EINVAL);
    so.dtype = CAIRN_DTYPE_F16;
    if (lfm2) {
        so.arch = CAIRN_SYNTH_LFM2;
        so.attn_layers = 0; /* every third layer from layer 2: 2 and 5 */
        so.conv_taps = 3;
    }
    char err[512] = "";
    int rc = cairn_synth_write(dir, &so, err, sizeof err);
    if (rc) {
        fprintf(stderr, "%s: synth: %s\n", prog, err);
        exit(1);
    }
    if ((rc = cairn_checkpoint_open(dir, ck, err, sizeof err)))
        die(prog, err, rc);
    if ((rc = cairn_tokenizer_load(dir, tok, err, sizeof err)))
        die(prog, err, rc);
}
