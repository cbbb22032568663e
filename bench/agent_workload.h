/*
 * agent_workload.h — the agent-style workload that bench_agent_replay and
 * bench_shared_tier replay through the scheduler (token ids, no HTTP).
 *
 * Model. S sessions share one system prompt of `system` tokens. Turn t of session i is its
 * whole conversation so far (system prompt, every earlier tool result and reply) plus a new
 * tool result of `tool` pseudo-random tokens (seed 1000 + t * 131 + i), answered with `gen`
 * tokens generated greedily (temperature 0, ignore_eos). The replies are appended to the
 * conversation, so every later prompt starts with everything the session saw. The token
 * streams depend only on (S, system, tool, gen, vocab): two runs of the same workload submit
 * the same prompts for as long as their replies agree.
 *
 * The benches decide where each turn goes (which scheduler) and when servers restart; this
 * file only builds the prompts, submits them and collects the replies.
 *
 * Failures (out of memory, a rejected submit, a request that ends in an error) print
 * "<prog>: what: reason" and exit(1): these are benchmark programs, not the library.
 *
 * Thread-safety: an agent_sessions_t is driven by one thread; the scheduler's engine thread
 * delivers each session's events into its agent_wait_t under that wait's mutex.
 */
#ifndef CAIRN_BENCH_AGENT_WORKLOAD_H
#define CAIRN_BENCH_AGENT_WORKLOAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cairn/scheduler.h"

/* One request's completion: its reply tokens, status and usage, and when it is final. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool final;
    int status;              /* the ERROR event's status, 0 otherwise */
    cairn_req_usage_t usage; /* the last usage an event carried */
    int32_t *reply;          /* [cap_reply] generated tokens */
    int n_reply, cap_reply;
} agent_wait_t;

/* A session's history: the tokens every later prompt starts with. */
typedef struct {
    int32_t *toks; /* [cap] */
    int n, cap;
} agent_conv_t;

/* S sessions of the workload and their in-flight requests. */
typedef struct {
    const char *prog; /* the bench's name, for failures */
    int sessions, system, tool, gen, vocab;
    agent_conv_t *conv; /* [sessions] */
    agent_wait_t *w;    /* [sessions] */
    int32_t *sys;       /* [system] the shared system prompt */
    int32_t *tool_buf;  /* [tool] scratch for one tool result */
} agent_sessions_t;

/* Monotonic wall-clock time in seconds. */
double agent_now(void);

/* n pseudo-random ordinary token ids (below the 3 ChatML specials at the top of vocab). */
void agent_fill_tokens(int32_t *t, int n, unsigned seed, int vocab);

/* Allocates S sessions, each starting with the shared system prompt (seed 7). Exits on
 * failure. Free with agent_sessions_fini. */
void agent_sessions_init(agent_sessions_t *a, const char *prog, int sessions, int system, int tool, int gen,
                         int vocab);

/* Frees what agent_sessions_init allocated; the requests must have finished. */
void agent_sessions_fini(agent_sessions_t *a);

/* Appends turn t's tool result to session i's conversation and submits the whole
 * conversation to s (greedy, gen tokens, ignore_eos). Exits when the submit fails. */
void agent_submit_turn(agent_sessions_t *a, int i, int t, cairn_sched_t *s);

/* Waits until session i's request is final, copies its reply into
 * replies[(t * sessions + i) * gen ...] and appends it to the conversation; returns its
 * usage (valid until the next submit of session i). Exits when the request failed. */
const cairn_req_usage_t *agent_wait_turn(agent_sessions_t *a, int i, int t, int32_t *replies);

/* Writes the synthesized llama-8l (f16 weights; with lfm2, the LFM2 hybrid of the same
 * sizes: layers 2 and 5 attend, the others are 3-tap short convolutions) into dir and opens
 * its checkpoint and tokenizer. Exits on failure. */
void agent_model_open(const char *prog, const char *dir, bool lfm2, cairn_checkpoint_t **ck,
                      cairn_tokenizer_t **tok);

#endif
