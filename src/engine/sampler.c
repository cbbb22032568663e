/*
 * sampler.c — per-sequence token sampling: parameters, penalties, truncation, RNG and the
 * token-level finish checks (the stop-string matcher lives in stop_matcher.c).
 *
 * Model. sample() takes one logits vector and applies, in vLLM/HF order: logit_bias,
 * the min_tokens mask, the repetition penalty, the frequency and presence penalties,
 * temperature, top-k, top-p, min-p; then draws one token. Temperature 0 is argmax.
 *
 * Ordering. Every selection uses one total order on token ids: higher logit first, and
 * for equal logits the lower id first. Because the order is total, quickselect, the
 * heapsort and the nucleus cut all produce a unique result whatever the pivots, and the
 * sampled token depends only on (seed, logits, accepted tokens).
 *
 * Probabilities. Weights are w_i = expf((l_i - l_max) / T) in float; normalizers and
 * cumulative sums are double, summed in a fixed order (id order for the full vocabulary,
 * bin by bin then best first for the top-p cut, list order for a candidate list).
 * Nothing is multithreaded.
 *
 * Truncation without a full sort. top-k keeps a k-heap in one sequential pass over the
 * logits (most ids cost one comparison) and heapsorts only the k winners. top-p without
 * top-k first histograms the mass by distance below the best logit in 1/64-nat bins:
 * the bins before the one where the mass reaches p are wholly inside the nucleus, so only
 * the boundary bin (plus one of margin) is ordered, by growing a sorted best-first prefix
 * in rounds of 64, 256, 1024, ... ids (quickselect over the rest, heapsort of the new
 * block) until the mass is reached. min-p is a threshold on w_i (= p_i / p_max), which
 * truncation and renormalisation leave unchanged, so it needs no sort.
 *
 * Counts. The penalties need, per token, "appeared in the prompt" and "times generated".
 * They live in a sparse open-addressing table keyed by token id (linear probing, load at
 * most 1/2), so memory and per-step penalty cost grow with the distinct tokens of the
 * sequence, not with the vocabulary. The table exists only when a penalty is on.
 *
 * RNG. xoshiro256** (Blackman & Vigna), its 256-bit state filled by four outputs of
 * splitmix64 started at the seed. One 64-bit output per non-greedy sample gives a
 * uniform double u in [0, 1) from its top 53 bits.
 *
 * Thread-safety: a sampler belongs to one sequence; its calls must be serialized.
 */
#include "cairn/sampler.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* One entry of the sparse count table. token < 0 marks an empty slot. */
struct count_slot {
    int32_t token;
    uint32_t count;      /* times generated (accepted) */
    uint32_t in_prompt;  /* 1 if the token occurs in the prompt */
};

struct cairn_sampler {
    /* Scalar controls (the pointer fields of the caller's params are not kept). */
    float temperature, top_p, min_p, rep, presence, frequency;
    int32_t top_k;              /* 0 = off, else 1 <= top_k < vocab */
    int32_t max_tokens;         /* -1 = no limit */
    int32_t min_tokens;
    int32_t vocab, context_len; /* context_len 0 = no limit */

    int32_t *stop_ids;          /* sorted, unique: eos (unless ignore_eos) + stop ids */
    size_t n_stop_ids;
    cairn_logit_bias_t *bias;
    size_t n_bias;
    int32_t *idx;               /* [vocab] scratch for top-k / top-p, else NULL */

    bool track;                 /* any penalty on: the count table is maintained */
    struct count_slot *slots;   /* [cap], cap a power of two, or NULL */
    size_t cap, used;

    uint64_t seed;
    uint64_t rng[4];

    bool started;               /* sample or accept has been called */
    int32_t prompt_len;
    int32_t generated;
    cairn_finish_reason_t finish;
};

/* ---- parameters ---------------------------------------------------------------------- */

void cairn_sampling_params_init(cairn_sampling_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->temperature = 1.0f;
    p->top_k = -1;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
    p->max_tokens = -1;
}

__attribute__((format(printf, 3, 4)))
static int invalid(char *err, size_t err_size, const char *fmt, ...)
{
    if (err && err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return CAIRN_EINVAL;
}

int cairn_sampling_params_validate(const cairn_sampling_params_t *p, int32_t vocab_size,
                                   char *err, size_t err_size)
{
    if (err && err_size)
        err[0] = '\0';
    if (!p)
        return invalid(err, err_size, "sampling parameters missing");
    if (vocab_size <= 0)
        return invalid(err, err_size, "vocabulary size must be positive, got %d", vocab_size);
    if (!isfinite(p->temperature) || p->temperature < 0.0f)
        return invalid(err, err_size, "temperature must be a finite number >= 0, got %g",
                       (double)p->temperature);
    if (p->top_k < -1)
        return invalid(err, err_size, "top_k must be -1 (or 0) to disable, or at least 1, got %d",
                       p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return invalid(err, err_size, "top_p must be in (0, 1], got %g", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return invalid(err, err_size, "min_p must be in [0, 1], got %g", (double)p->min_p);
    if (!isfinite(p->repetition_penalty) || !(p->repetition_penalty > 0.0f))
        return invalid(err, err_size, "repetition_penalty must be a finite number > 0, got %g",
                       (double)p->repetition_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return invalid(err, err_size, "presence_penalty must be in [-2, 2], got %g",
                       (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return invalid(err, err_size, "frequency_penalty must be in [-2, 2], got %g",
                       (double)p->frequency_penalty);
    if (p->max_tokens != -1 && p->max_tokens < 1)
        return invalid(err, err_size, "max_tokens must be at least 1, got %d", p->max_tokens);
    if (p->min_tokens < 0)
        return invalid(err, err_size, "min_tokens must be >= 0, got %d", p->min_tokens);
    if (p->max_tokens != -1 && p->min_tokens > p->max_tokens)
        return invalid(err, err_size, "min_tokens (%d) must not exceed max_tokens (%d)",
                       p->min_tokens, p->max_tokens);
    if (p->n_stop_token_ids && !p->stop_token_ids)
        return invalid(err, err_size, "stop_token_ids missing");
    for (size_t i = 0; i < p->n_stop_token_ids; i++)
        if (p->stop_token_ids[i] < 0 || p->stop_token_ids[i] >= vocab_size)
            return invalid(err, err_size, "stop_token_ids[%zu] = %d is outside the vocabulary [0, %d)",
                           i, p->stop_token_ids[i], vocab_size);
    if (p->n_stop && !p->stop)
        return invalid(err, err_size, "stop strings missing");
    for (size_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return invalid(err, err_size, "stop[%zu] must be a non-empty string", i);
    if (p->n_logit_bias && !p->logit_bias)
        return invalid(err, err_size, "logit_bias missing");
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const cairn_logit_bias_t *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= vocab_size)
            return invalid(err, err_size, "logit_bias token %d is outside the vocabulary [0, %d)",
                           b->token, vocab_size);
        if (!(b->bias >= -100.0f && b->bias <= 100.0f))
            return invalid(err, err_size, "logit_bias for token %d must be in [-100, 100], got %g",
                           b->token, (double)b->bias);
    }
    return CAIRN_OK;
}

const char *cairn_finish_reason_name(cairn_finish_reason_t r)
{
    switch (r) {
    case CAIRN_FINISH_STOP: return "stop";
    case CAIRN_FINISH_LENGTH: return "length";
    default: return NULL;
    }
}

/* ---- RNG: splitmix64 seeding xoshiro256** ---------------------------------------- */

static uint64_t splitmix64_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static void rng_seed(uint64_t st[4], uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        st[i] = splitmix64_next(&x);
}

static uint64_t rng_next(uint64_t st[4])
{
    uint64_t result = rotl64(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl64(st[3], 45);
    return result;
}

/* Uniform double in [0, 1): the top 53 bits of one output. */
static double rng_uniform(uint64_t st[4]) { return (double)(rng_next(st) >> 11) * 0x1p-53; }

/* A seed for requests without one: clock, a process counter and the object address. */
static uint64_t fresh_seed(const void *obj)
{
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    x ^= atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ULL;
    x ^= (uint64_t)(uintptr_t)obj;
    return splitmix64_next(&x);
}

/* ---- sparse count table ---------------------------------------------------------- */

static inline size_t slot_hash(int32_t token, size_t cap)
{
    return (size_t)(((uint32_t)token * 0x9e3779b1u) & (uint32_t)(cap - 1));
}

static struct count_slot *table_find_or_add(struct count_slot *slots, size_t cap, int32_t token,
                                            bool *added)
{
    size_t i = slot_hash(token, cap);
    while (slots[i].token >= 0 && slots[i].token != token)
        i = (i + 1) & (cap - 1);
    *added = slots[i].token < 0;
    if (*added)
        slots[i].token = token;
    return &slots[i];
}

/* Ensures room for `more` new tokens at load <= 1/2. On failure nothing changes. */
static int table_reserve(cairn_sampler_t *s, size_t more)
{
    size_t need = s->used + more;
    if (need > (size_t)s->vocab)
        need = (size_t)s->vocab;   /* there are no more distinct tokens than that */
    if (s->slots && need * 2 <= s->cap)
        return CAIRN_OK;
    size_t cap = s->cap ? s->cap : 64;
    while (need * 2 > cap)
        cap *= 2;
    struct count_slot *ns = cairn_malloc(cap * sizeof(*ns));
    if (!ns)
        return CAIRN_ENOMEM;
    for (size_t i = 0; i < cap; i++)
        ns[i] = (struct count_slot){ .token = -1 };
    for (size_t i = 0; i < s->cap; i++) {
        if (s->slots[i].token < 0)
            continue;
        bool added;
        *table_find_or_add(ns, cap, s->slots[i].token, &added) = s->slots[i];
    }
    cairn_free(s->slots);
    s->slots = ns;
    s->cap = cap;
    return CAIRN_OK;
}

/* ---- ordering, selection and sorting of candidate ids ----------------------------- */

/* The total order: a before b if its logit is higher, or equal with a lower id. */
static inline bool better(const float *l, int32_t a, int32_t b)
{
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

static inline void swap_ids(int32_t *a, size_t i, size_t j)
{
    int32_t t = a[i];
    a[i] = a[j];
    a[j] = t;
}

/* Sift-down for heapsort; the heap's root is the worst element of a[0..n). */
static void sift_down(const float *l, int32_t *a, size_t root, size_t n)
{
    for (;;) {
        size_t c = 2 * root + 1;
        if (c >= n)
            return;
        if (c + 1 < n && better(l, a[c], a[c + 1]))
            c++;
        if (!better(l, a[root], a[c]))
            return;
        swap_ids(a, root, c);
        root = c;
    }
}

/* Sorts a[0..n) best first. Heapsort: O(n log n), no allocation, no recursion. */
static void sort_best_first(const float *l, int32_t *a, size_t n)
{
    if (n < 2)
        return;
    if (n <= 16) {
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0 && better(l, a[j], a[j - 1]); j--)
                swap_ids(a, j, j - 1);
        return;
    }
    for (size_t i = n / 2; i-- > 0;)
        sift_down(l, a, i, n);
    for (size_t end = n - 1; end > 0; end--) {
        swap_ids(a, 0, end);   /* the worst of a[0..end] goes to the back */
        sift_down(l, a, 0, end);
    }
}

/*
 * Rearranges a[0..n) so that a[0..k) are the k best ids (in no particular order).
 * Quickselect with a median-of-three pivot; after 2*log2(n) unproductive rounds it sorts
 * the remaining window instead, which bounds the worst case at O(n log n).
 */
static void select_best(const float *l, int32_t *a, size_t n, size_t k)
{
    if (k == 0 || k >= n)
        return;
    size_t lo = 0, hi = n;
    int budget = 8;
    for (size_t m = n; m > 1; m >>= 1)
        budget += 2;
    while (hi - lo > 16) {
        if (budget-- == 0)
            break;
        size_t mid = lo + (hi - lo) / 2, last = hi - 1;
        /* Median of a[lo], a[mid], a[last] moved to a[last] as the pivot. */
        if (better(l, a[mid], a[lo]))
            swap_ids(a, mid, lo);
        if (better(l, a[last], a[lo]))
            swap_ids(a, last, lo);
        if (better(l, a[mid], a[last]))
            swap_ids(a, mid, last);
        int32_t pivot = a[last];
        size_t store = lo;
        for (size_t i = lo; i < last; i++)
            if (better(l, a[i], pivot))
                swap_ids(a, i, store++);
        swap_ids(a, store, last);
        if (store == k)
            return;
        if (store < k)
            lo = store + 1;
        else
            hi = store;
    }
    sort_best_first(l, a + lo, hi - lo);
}

/* ---- sampler ----------------------------------------------------------------------- */

static bool is_stop_id(const cairn_sampler_t *s, int32_t token)
{
    size_t lo = 0, hi = s->n_stop_ids;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->stop_ids[mid] == token)
            return true;
        if (s->stop_ids[mid] < token)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

int cairn_sampler_create(const cairn_sampling_params_t *p, const cairn_sampler_model_t *model,
                         cairn_sampler_t **out)
{
    if (!p || !model || !out || model->context_len < 0 || (model->n_eos && !model->eos_ids))
        return CAIRN_EINVAL;
    int rc = cairn_sampling_params_validate(p, model->vocab_size, NULL, 0);
    if (rc)
        return rc;
    for (size_t i = 0; i < model->n_eos; i++)
        if (model->eos_ids[i] < 0 || model->eos_ids[i] >= model->vocab_size)
            return CAIRN_EINVAL;

    cairn_sampler_t *s = cairn_calloc(1, sizeof(*s));
    if (!s)
        return CAIRN_ENOMEM;
    s->temperature = p->temperature;
    s->top_p = p->top_p;
    s->min_p = p->min_p;
    s->rep = p->repetition_penalty;
    s->presence = p->presence_penalty;
    s->frequency = p->frequency_penalty;
    s->top_k = (p->top_k > 0 && p->top_k < model->vocab_size) ? p->top_k : 0;
    s->max_tokens = p->max_tokens;
    s->min_tokens = p->min_tokens;
    s->vocab = model->vocab_size;
    s->context_len = model->context_len;
    s->track = s->rep != 1.0f || s->presence != 0.0f || s->frequency != 0.0f;

    size_t n_ids = (p->ignore_eos ? 0 : model->n_eos) + p->n_stop_token_ids;
    if (n_ids) {
        s->stop_ids = cairn_malloc(n_ids * sizeof(int32_t));
        if (!s->stop_ids)
            goto nomem;
        size_t n = 0;
        for (size_t i = 0; !p->ignore_eos && i < model->n_eos; i++)
            s->stop_ids[n++] = model->eos_ids[i];
        for (size_t i = 0; i < p->n_stop_token_ids; i++)
            s->stop_ids[n++] = p->stop_token_ids[i];
        /* Insertion sort (the list is a handful of ids), then drop duplicates. */
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0 && s->stop_ids[j] < s->stop_ids[j - 1]; j--) {
                int32_t t = s->stop_ids[j];
                s->stop_ids[j] = s->stop_ids[j - 1];
                s->stop_ids[j - 1] = t;
            }
        size_t u = 0;
        for (size_t i = 0; i < n; i++)
            if (u == 0 || s->stop_ids[u - 1] != s->stop_ids[i])
                s->stop_ids[u++] = s->stop_ids[i];
        s->n_stop_ids = u;
    }
    if (p->n_logit_bias) {
        s->bias = cairn_malloc(p->n_logit_bias * sizeof(*s->bias));
        if (!s->bias)
            goto nomem;
        memcpy(s->bias, p->logit_bias, p->n_logit_bias * sizeof(*s->bias));
        s->n_bias = p->n_logit_bias;
    }
    if (s->top_k || s->top_p < 1.0f) {
        s->idx = cairn_malloc((size_t)s->vocab * sizeof(int32_t));
        if (!s->idx)
            goto nomem;
    }
    if (s->track && table_reserve(s, 32) != CAIRN_OK)
        goto nomem;
    s->seed = p->has_seed ? p->seed : fresh_seed(s);
    cairn_sampler_reset(s);
    *out = s;
    return CAIRN_OK;
nomem:
    cairn_sampler_destroy(s);
    return CAIRN_ENOMEM;
}

void cairn_sampler_destroy(cairn_sampler_t *s)
{
    if (!s)
        return;
    cairn_free(s->stop_ids);
    cairn_free(s->bias);
    cairn_free(s->idx);
    cairn_free(s->slots);
    cairn_free(s);
}

void cairn_sampler_reset(cairn_sampler_t *s)
{
    for (size_t i = 0; i < s->cap; i++)
        s->slots[i] = (struct count_slot){ .token = -1 };
    s->used = 0;
    rng_seed(s->rng, s->seed);
    s->started = false;
    s->prompt_len = 0;
    s->generated = 0;
    s->finish = CAIRN_FINISH_NONE;
}

int cairn_sampler_set_prompt(cairn_sampler_t *s, const int32_t *tokens, size_t n)
{
    if (!s || (n && !tokens) || n > INT32_MAX)
        return CAIRN_EINVAL;
    if (s->started || s->prompt_len)
        return CAIRN_ESTATE;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->vocab)
            return CAIRN_EINVAL;
    /* Only the repetition penalty looks at the prompt. */
    if (s->rep != 1.0f) {
        int rc = table_reserve(s, n);
        if (rc)
            return rc;
        for (size_t i = 0; i < n; i++) {
            bool added;
            struct count_slot *e = table_find_or_add(s->slots, s->cap, tokens[i], &added);
            s->used += added;
            e->in_prompt = 1;
        }
    }
    s->prompt_len = (int32_t)n;
    return CAIRN_OK;
}

/* logit_bias, the min_tokens mask and the penalties, in that order, in place. */
static void apply_controls(const cairn_sampler_t *s, float *logits)
{
    for (size_t i = 0; i < s->n_bias; i++)
        logits[s->bias[i].token] += s->bias[i].bias;
    if (s->generated < s->min_tokens)
        for (size_t i = 0; i < s->n_stop_ids; i++)
            logits[s->stop_ids[i]] = -INFINITY;
    if (!s->track)
        return;
    for (size_t i = 0; i < s->cap; i++) {
        const struct count_slot *e = &s->slots[i];
        if (e->token < 0)
            continue;
        float l = logits[e->token];
        /* HF/vLLM repetition penalty: shrink a positive logit, grow a negative one. */
        if (s->rep != 1.0f)
            l = l > 0.0f ? l / s->rep : l * s->rep;
        /* OpenAI penalties over generated tokens only (vLLM: frequency, then presence). */
        if (e->count) {
            l -= s->frequency * (float)e->count;
            l -= s->presence;
        }
        logits[e->token] = l;
    }
}

/* Weight of a candidate relative to the best token: p_i / p_max before truncation. */
static inline float weight(float l, float lmax, float temp) { return expf((l - lmax) / temp); }

/*
 * Makes idx[0..m) the m best of idx[0..n) sorted best first, given idx[0..done) already
 * are the `done` best, sorted. Only the new block is selected and sorted.
 */
static void extend_sorted(const float *l, int32_t *idx, size_t n, size_t done, size_t m)
{
    if (m > n)
        m = n;
    if (m <= done)
        return;
    select_best(l, idx + done, n - done, m - done);
    sort_best_first(l, idx + done, m - done);
}

/*
 * out[0..k) = the k best ids of [0, V), sorted best first. One sequential pass keeps a
 * heap of the k best seen so far with the worst at the root, so most ids cost a single
 * comparison: O(V + k log k) for typical logits, O(V log k) at worst.
 */
static void top_k_sorted(const float *l, size_t V, size_t k, int32_t *out)
{
    for (size_t i = 0; i < k; i++)
        out[i] = (int32_t)i;
    for (size_t i = k / 2; i-- > 0;)
        sift_down(l, out, i, k);
    for (size_t i = k; i < V; i++) {
        if (better(l, (int32_t)i, out[0])) {
            out[0] = (int32_t)i;
            sift_down(l, out, 0, k);
        }
    }
    sort_best_first(l, out, k);
}

/*
 * top-p without top-k. Computes the normalizer *z over all V ids and a histogram of the
 * mass by distance below the best logit, (l_max - l) / T, in bins of 1/64 nat (the last
 * bin takes everything beyond 64 nats, weight < 1e-27). Let b be the first bin at which
 * the running mass reaches p * z. Every id in a bin before b is certainly in the nucleus
 * (their mass is below p * z and they beat everything after them): they go to
 * idx[0..*n_sure) in id order, their mass (the sum of their bins) to *sure_mass. Bin b
 * and one more bin of margin (bin sums and the sorted cumulative sum may round apart) go
 * to idx[*n_sure..return), where the caller sorts just enough of them to find the exact
 * cut. Three O(V) passes (one with expf); only the boundary bins are ever sorted.
 */
enum { NUCLEUS_BINS = 4096, NUCLEUS_BINS_PER_NAT = 64 };

static inline int nucleus_bin(float x)   /* x = (l - lmax) / T <= 0 */
{
    float d = -x * (float)NUCLEUS_BINS_PER_NAT;
    return d < (float)(NUCLEUS_BINS - 1) ? (int)d : NUCLEUS_BINS - 1;
}

static size_t nucleus_candidates(const float *l, size_t V, float lmax, float T, float top_p,
                                 int32_t *idx, double *z_out, size_t *n_sure,
                                 double *sure_mass)
{
    double mass[NUCLEUS_BINS] = { 0 };   /* 32 KiB of stack */
    double z = 0.0;
    for (size_t i = 0; i < V; i++) {
        float x = (l[i] - lmax) / T;
        float w = expf(x);
        z += w;
        mass[nucleus_bin(x)] += w;
    }
    const double target = (double)top_p * z;
    double cum = 0.0;
    int b = 0;
    while (b < NUCLEUS_BINS - 1 && cum + mass[b] < target)
        cum += mass[b++];
    int last = b < NUCLEUS_BINS - 1 ? b + 1 : b;
    size_t ns = 0;
    for (size_t i = 0; i < V; i++)
        if (nucleus_bin((l[i] - lmax) / T) < b)
            idx[ns++] = (int32_t)i;
    size_t n = ns;
    for (size_t i = 0; i < V; i++) {
        int bin = nucleus_bin((l[i] - lmax) / T);
        if (bin >= b && bin <= last)
            idx[n++] = (int32_t)i;
    }
    *z_out = z;
    *n_sure = ns;
    *sure_mass = cum;   /* the bins before b, summed bin by bin */
    return n;
}

int cairn_sampler_sample(cairn_sampler_t *s, float *logits, int32_t *token_out)
{
    if (!s || !logits || !token_out)
        return CAIRN_EINVAL;
    if (s->finish != CAIRN_FINISH_NONE)
        return CAIRN_ESTATE;
    s->started = true;
    apply_controls(s, logits);

    /* Sanitize and find the best token (lowest id among equal maxima). */
    const size_t V = (size_t)s->vocab;
    int32_t best = -1;
    float lmax = -INFINITY;
    for (size_t i = 0; i < V; i++) {
        float v = logits[i];
        if (isnan(v))
            logits[i] = v = -INFINITY;
        else if (v == INFINITY)
            logits[i] = v = FLT_MAX;
        if (v > lmax) {
            lmax = v;
            best = (int32_t)i;
        }
    }
    if (best < 0)
        return CAIRN_ERANGE;
    if (s->temperature == 0.0f) {
        *token_out = best;
        return CAIRN_OK;
    }

    const float T = s->temperature;
    const double u = rng_uniform(s->rng);
    const int32_t *cand = NULL;  /* the candidate ids in draw order, or NULL for all ids */
    size_t n = V;

    if (s->top_k || s->top_p < 1.0f) {
        cand = s->idx;
        double z = 0.0, cum = 0.0;
        size_t sorted_from = 0;   /* idx[sorted_from..n) are to be ordered best first */
        if (s->top_k) {
            n = (size_t)s->top_k;
            top_k_sorted(logits, V, n, s->idx);
            for (size_t i = 0; i < n; i++)
                z += weight(logits[s->idx[i]], lmax, T);
        } else {
            n = nucleus_candidates(logits, V, lmax, T, s->top_p, s->idx, &z, &sorted_from, &cum);
        }
        if (s->top_p < 1.0f) {
            /* Keep the shortest best-first prefix whose mass reaches top_p (HF/vLLM:
             * drop a token when the mass of everything better is already >= top_p).
             * The ids before sorted_from are all inside; order the rest lazily in
             * blocks of 64, 256, 1024, ... until the mass is reached. */
            const double target = (double)s->top_p * z;
            int32_t *rest = s->idx + sorted_from;
            const size_t avail = n - sorted_from;
            size_t done = s->top_k ? avail : 0, i = 0;
            for (size_t block = 64; i < avail; block *= 4) {
                if (!s->top_k) {
                    extend_sorted(logits, rest, avail, done, done + block);
                    done = done + block < avail ? done + block : avail;
                }
                for (; i < done; i++) {
                    cum += weight(logits[rest[i]], lmax, T);
                    if (cum >= target) {
                        n = sorted_from + i + 1;
                        goto nucleus_done;
                    }
                }
            }
        nucleus_done:;
        }
        if (s->min_p > 0.0f) {
            /* p_i / p_max >= min_p; the best id (weight 1) always stays. Order kept. */
            size_t keep = 0;
            for (size_t i = 0; i < n; i++)
                if (weight(logits[s->idx[i]], lmax, T) >= s->min_p)
                    s->idx[keep++] = s->idx[i];
            n = keep;
        }
    }

    /* Draw: normalizer over the final candidates, then the first cumulative sum > u*z. */
    const float min_w = s->min_p;   /* only used for the unsorted full-vocabulary path */
    double z = 0.0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = cand ? cand[i] : (int32_t)i;
        float w = weight(logits[id], lmax, T);
        if (cand || w >= min_w)
            z += w;
    }
    const double target = u * z;
    double cum = 0.0;
    int32_t pick = best;
    for (size_t i = 0; i < n; i++) {
        int32_t id = cand ? cand[i] : (int32_t)i;
        float w = weight(logits[id], lmax, T);
        if (!cand && w < min_w)
            continue;
        if (w > 0.0f)
            pick = id;   /* falls back to the last positive weight if rounding leaves cum <= target */
        cum += w;
        if (cum > target)
            break;
    }
    *token_out = pick;
    return CAIRN_OK;
}

int cairn_sampler_accept(cairn_sampler_t *s, int32_t token, cairn_finish_reason_t *finish)
{
    if (!s || token < 0 || token >= s->vocab)
        return CAIRN_EINVAL;
    if (s->finish != CAIRN_FINISH_NONE)
        return CAIRN_ESTATE;
    if (s->track) {
        int rc = table_reserve(s, 1);
        if (rc)
            return rc;
        bool added;
        struct count_slot *e = table_find_or_add(s->slots, s->cap, token, &added);
        s->used += added;
        e->count++;
    }
    s->started = true;
    s->generated++;
    if (s->generated >= s->min_tokens && is_stop_id(s, token))
        s->finish = CAIRN_FINISH_STOP;
    else if (s->max_tokens > 0 && s->generated >= s->max_tokens)
        s->finish = CAIRN_FINISH_LENGTH;
    else if (s->context_len > 0 && (int64_t)s->prompt_len + s->generated >= s->context_len)
        s->finish = CAIRN_FINISH_LENGTH;
    if (finish)
        *finish = s->finish;
    return CAIRN_OK;
}

int32_t cairn_sampler_generated(const cairn_sampler_t *s) { return s->generated; }

cairn_finish_reason_t cairn_sampler_finish_reason(const cairn_sampler_t *s) { return s->finish; }
