/*
 * sched_specs.h — the requests the scheduler tests submit (test_scheduler over the qwen3
 * fixture, tests/models/family_scheduler.c over each recurrent family's): one request's
 * description, the shared-prefix workload both run, its conversion into
 * cairn_req_params_t, and the solo requests an n > 1 request must reproduce.
 *
 * Model. A request is token ids plus sampling (temperature, a fixed seed, max_tokens with
 * ignore_eos so lengths are exact whatever the model emits), n choices and an optional
 * cache_salt. The workload is deterministic: the same (n, prefix_len, max_tokens) gives
 * the same requests in every test and run.
 *
 * Thread-safety: plain data and pure functions.
 */
#ifndef CAIRN_TEST_SCHED_SPECS_H
#define CAIRN_TEST_SCHED_SPECS_H

#include <stdint.h>
#include <string.h>

#include "cairn/scheduler.h"

/* One request's description. */
typedef struct {
    int32_t prompt[1200]; /* [n_prompt] token ids */
    int n_prompt;
    float temperature;
    uint64_t seed;
    int max_tokens;
    int n;            /* choices */
    const char *salt; /* cache_salt, or NULL */
} sched_spec_t;

/* n requests over a shared prefix_len-token "system prompt" with distinct suffixes (5 to
 * 27 tokens); even ones greedy, odd ones sampled at temperature 0.9; seed 1000 + i;
 * max_tokens + i % 5 tokens; one choice; no salt. Ids stay below 4000. */
static inline void sched_specs_shared_prefix(sched_spec_t *specs, int n, int prefix_len, int max_tokens)
{
    for (int i = 0; i < n; i++) {
        sched_spec_t *r = &specs[i];
        memset(r, 0, sizeof(*r));
        for (int k = 0; k < prefix_len; k++)
            r->prompt[k] = (int32_t)((k * 37 + 11) % 4000);
        int suffix = 5 + (i * 7) % 23;
        for (int k = 0; k < suffix; k++)
            r->prompt[prefix_len + k] = (int32_t)((i * 131 + k * 17 + 3) % 4000);
        r->n_prompt = prefix_len + suffix;
        r->temperature = i % 2 ? 0.9f : 0.0f;
        r->seed = 1000 + (uint64_t)i;
        r->max_tokens = max_tokens + i % 5;
        r->n = 1;
    }
}

/* The submit parameters of r (prompt and salt point into r, which must outlive the
 * submit call); on_event and user are left for the caller. */
static inline cairn_req_params_t sched_spec_params(const sched_spec_t *r)
{
    cairn_req_params_t p = {0};
    p.prompt = r->prompt;
    p.n_prompt = r->n_prompt;
    p.cache_salt = r->salt;
    cairn_sampling_params_init(&p.sampling);
    p.sampling.temperature = r->temperature;
    p.sampling.has_seed = true;
    p.sampling.seed = r->seed;
    p.sampling.max_tokens = r->max_tokens;
    p.sampling.ignore_eos = true; /* exact lengths whatever the model emits */
    p.n = r->n;
    return p;
}

/* The requests whose outputs choice i of `multi` (n = multi->n) must equal: the same
 * request with one choice and seed + i, into solo[0 .. multi->n). */
static inline void sched_spec_choices_solo(const sched_spec_t *multi, sched_spec_t *solo)
{
    for (int i = 0; i < multi->n; i++) {
        solo[i] = *multi;
        solo[i].n = 1;
        solo[i].seed = multi->seed + (uint64_t)i;
    }
}

#endif
