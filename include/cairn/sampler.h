/*
 * cairn/sampler.h — turning a logits vector into the next token, and deciding when a
 * sequence is finished.
 *
 * Three pieces, all per sequence:
 *
 *  1. cairn_sampling_params_t: the request's sampling controls with OpenAI/vLLM defaults
 *     and ranges. cairn_sampling_params_validate() checks them and writes a message the
 *     server can return to the client.
 *  2. cairn_sampler_t: applies the controls to one logits vector at a time and picks a
 *     token, in this order (vLLM/HF):
 *
 *        logit_bias -> min_tokens (stop ids masked) -> repetition penalty
 *        -> frequency/presence penalties -> temperature -> top-k -> top-p -> min-p
 *        -> sample (or argmax when temperature == 0)
 *
 *     It keeps the sequence's token counts (for the penalties), its RNG (xoshiro256**
 *     seeded through splitmix64 from the request seed) and the finish checks for stop
 *     token ids, max_tokens and the context limit.
 *  3. cairn_stop_matcher_t: an incremental matcher for stop strings over the decoded text
 *     stream. It returns the text that is safe to emit now, holds back a suffix that could
 *     still become a stop string, and on a match returns the text before the stop string
 *     (the stop string itself is never emitted, as in the OpenAI API).
 *
 * Finish reasons follow OpenAI: "stop" for an end-of-sequence/stop token id or a stop
 * string, "length" for max_tokens or the context limit. When both happen on the same
 * token, "stop" wins (vLLM checks stop conditions first).
 *
 * Determinism: given the seed, the logits and the accepted tokens, the sampled tokens are
 * the same on every run and machine build (the sampler is single-threaded and every sum
 * runs in a fixed order). Ties between equal logits are always broken by the lower id.
 *
 * Thread-safety: a sampler or stop matcher belongs to one sequence; calls on one object
 * must be serialized. Distinct objects are independent.
 */
#ifndef CAIRN_SAMPLER_H
#define CAIRN_SAMPLER_H

#include "cairn/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Parameters -------------------------------------------------------------------- */

/* One entry of OpenAI's logit_bias map: bias is added to the token's logit. */
typedef struct {
    int32_t token;
    float bias;               /* [-100, 100] */
} cairn_logit_bias_t;

/*
 * Sampling controls of one request. Pointer fields are borrowed: the sampler and the stop
 * matcher copy what they need at creation, so the caller may free them afterwards.
 * Ranges (checked by cairn_sampling_params_validate):
 */
typedef struct {
    float temperature;        /* >= 0, finite; 0 = greedy (argmax). Default 1. */
    int32_t top_k;            /* -1 or 0 = off, else >= 1 (clamped to the vocab). Default -1. */
    float top_p;              /* (0, 1]; 1 = off. Default 1. */
    float min_p;              /* [0, 1]; 0 = off. Default 0. */
    float repetition_penalty; /* > 0, finite; 1 = off. Over prompt + output. Default 1. */
    float presence_penalty;   /* [-2, 2]; 0 = off. Over generated tokens only. Default 0. */
    float frequency_penalty;  /* [-2, 2]; 0 = off. Over generated tokens only. Default 0. */
    bool has_seed;            /* false: a fresh seed per sampler (non-reproducible). */
    uint64_t seed;            /* used when has_seed; same seed, same logits -> same tokens */
    int32_t max_tokens;       /* -1 = until the context limit, else >= 1. Default -1. */
    int32_t min_tokens;       /* >= 0 (<= max_tokens): stop ids are masked until reached. */
    bool ignore_eos;          /* true: the model's eos ids do not stop (stop_token_ids do). */
    const int32_t *stop_token_ids; /* extra stopping ids, each in [0, vocab) */
    size_t n_stop_token_ids;
    const char *const *stop;  /* stop strings, each non-empty (see cairn_stop_matcher_t) */
    size_t n_stop;
    const cairn_logit_bias_t *logit_bias;
    size_t n_logit_bias;
} cairn_sampling_params_t;

/* Fills *p with the defaults above (OpenAI's: temperature 1, everything else off). */
CAIRN_API void cairn_sampling_params_init(cairn_sampling_params_t *p);

/*
 * Checks every range above against a vocabulary of vocab_size (> 0) tokens. Returns 0, or
 * CAIRN_EINVAL and, when err is not NULL, writes a NUL-terminated message naming the
 * OpenAI field and the bad value (e.g. "top_p must be in (0, 1], got 1.5") into
 * err[err_size]. Pure function; cost O(n_stop_token_ids + n_logit_bias + n_stop).
 */
CAIRN_API int cairn_sampling_params_validate(const cairn_sampling_params_t *p, int32_t vocab_size,
                                   char *err, size_t err_size);

/* ---- Finish reasons ---------------------------------------------------------------- */

typedef enum {
    CAIRN_FINISH_NONE = 0,    /* still generating */
    CAIRN_FINISH_STOP = 1,    /* stop token id (eos) or stop string */
    CAIRN_FINISH_LENGTH = 2,  /* max_tokens or the context limit */
} cairn_finish_reason_t;

/* "stop", "length", or NULL for CAIRN_FINISH_NONE (OpenAI's finish_reason: null). */
CAIRN_API const char *cairn_finish_reason_name(cairn_finish_reason_t r);

/* ---- Sampler ----------------------------------------------------------------------- */

/* What the sampler needs to know about the model. Borrowed at creation (copied). */
typedef struct {
    int32_t vocab_size;       /* length of the logits vector, > 0 */
    int32_t context_len;      /* prompt + generated tokens allowed; 0 = no limit */
    const int32_t *eos_ids;   /* the model's end-of-sequence ids (may be NULL if n_eos 0) */
    size_t n_eos;
} cairn_sampler_model_t;

typedef struct cairn_sampler cairn_sampler_t;

/*
 * Creates a sampler for one sequence. Validates params (CAIRN_EINVAL on a bad value; use
 * cairn_sampling_params_validate for the message) and model (CAIRN_EINVAL). Copies the
 * stop ids and logit biases; the stop strings are the stop matcher's business.
 *
 * Memory: O(n_stop_token_ids + n_eos + n_logit_bias) plus, when top-k or top-p is on, an
 * index array of vocab_size int32 (600 KiB for a 151936 vocab), plus a sparse token-count
 * table that grows with the number of distinct tokens seen when any penalty is on.
 * Errors: CAIRN_EINVAL, CAIRN_ENOMEM (nothing leaked). *out is set only on success.
 */
CAIRN_API int cairn_sampler_create(const cairn_sampling_params_t *params, const cairn_sampler_model_t *model,
                         cairn_sampler_t **out);

/* Frees the sampler. NULL is a no-op. */
CAIRN_API void cairn_sampler_destroy(cairn_sampler_t *s);

/*
 * Records the prompt: its length counts toward the context limit and, when the
 * repetition penalty is on, its tokens are penalized. Call once, before the first sample
 * (CAIRN_ESTATE otherwise). Errors: CAIRN_EINVAL (a token outside the vocab; nothing
 * recorded), CAIRN_ENOMEM (the count table could not grow; nothing recorded),
 * CAIRN_ESTATE. Cost O(n).
 */
CAIRN_API int cairn_sampler_set_prompt(cairn_sampler_t *s, const int32_t *tokens, size_t n);

/*
 * Picks the next token from logits[vocab_size] (float32). The logits are modified in
 * place: logit_bias, the min_tokens mask and the penalties are applied to them, NaN
 * becomes -inf and +inf becomes FLT_MAX. Draws one 64-bit number from the RNG unless
 * greedy. Does not record the token: call cairn_sampler_accept with the token actually
 * appended (it may differ, e.g. with speculative decoding).
 *
 * Errors: CAIRN_EINVAL (NULL arguments), CAIRN_ERANGE (every token has logit -inf after
 * the controls, so nothing can be sampled), CAIRN_ESTATE (the sequence has finished).
 * Never allocates.
 *
 * Cost (V = vocab_size): two or three O(V) passes (sanitize/argmax, the softmax
 * normalizer with one expf per id, the draw), plus O(distinct tokens) for the penalties,
 * plus for top-k one O(V) heap pass and an O(k log k) sort, and for top-p without top-k
 * an O(V) histogram of the mass in 1/64-nat bins after which only the ids of the bin
 * where the cut falls are selected and sorted (O(b log b) for b ids in that bin). About
 * 0.5 ms for top-k and 1-5 ms otherwise at V = 151936 on one core.
 */
CAIRN_API int cairn_sampler_sample(cairn_sampler_t *s, float *logits, int32_t *token_out);

/*
 * Appends a generated token: updates the penalty counts and checks the finish
 * conditions. *finish (may be NULL) receives CAIRN_FINISH_STOP if the token is a stop id
 * (the model's eos unless ignore_eos, or a stop_token_id) and at least min_tokens tokens
 * have been generated, else CAIRN_FINISH_LENGTH if max_tokens is reached or prompt +
 * generated reaches the context limit, else CAIRN_FINISH_NONE. Once finished, further
 * accept/sample calls return CAIRN_ESTATE until reset.
 * Errors: CAIRN_EINVAL (token outside the vocab), CAIRN_ENOMEM (the count table could
 * not grow; the token is not recorded), CAIRN_ESTATE. Cost O(1) amortized.
 */
CAIRN_API int cairn_sampler_accept(cairn_sampler_t *s, int32_t token, cairn_finish_reason_t *finish);

/* Number of tokens accepted since creation or reset. */
CAIRN_API int32_t cairn_sampler_generated(const cairn_sampler_t *s);

/* The finish reason of the last accept (CAIRN_FINISH_NONE while generating). */
CAIRN_API cairn_finish_reason_t cairn_sampler_finish_reason(const cairn_sampler_t *s);

/*
 * Returns the sampler to its just-created state: counts, prompt and finish cleared, the
 * RNG re-seeded from the same seed (so a reset sampler repeats its tokens for the same
 * logits). Keeps its memory. Cost O(table size).
 */
CAIRN_API void cairn_sampler_reset(cairn_sampler_t *s);

/* ---- Stop strings ------------------------------------------------------------------ */

/*
 * Incremental stop-string matcher over the decoded text of one sequence.
 *
 * The caller feeds each text delta from the streaming detokenizer. The matcher reports
 * the earliest point at which any stop string is complete, exactly as if the text had
 * been fed one byte at a time: the match that ends first wins, and among those ending at
 * the same byte the one that starts first (the longest), then the lowest index. So the
 * result never depends on how the text was chunked.
 *
 * Emitted text is always a prefix of the stream; the held-back part is the longest suffix
 * of the text seen so far that is a proper prefix of some stop string (fewer bytes than
 * the longest stop string). For valid UTF-8 input and stop strings the emitted text ends
 * on a character boundary, because a stop string starts with a lead byte.
 */
typedef struct cairn_stop_matcher cairn_stop_matcher_t;

/*
 * Creates a matcher for n stop strings (copied). n may be 0 (then all text passes
 * through). Errors: CAIRN_EINVAL (an empty or NULL stop string, stops NULL with n > 0),
 * CAIRN_ENOMEM. *out is set only on success.
 */
CAIRN_API int cairn_stop_matcher_create(const char *const *stops, size_t n, cairn_stop_matcher_t **out);

/* Frees the matcher. NULL is a no-op. */
CAIRN_API void cairn_stop_matcher_destroy(cairn_stop_matcher_t *m);

/*
 * Feeds len bytes of text (need not be NUL-terminated; len 0 is allowed). On return
 * *emit and *emit_len hold the text safe to send to the client now; the pointer is owned by
 * the matcher and valid until the next call on it. *stopped is set to true when a stop
 * string completed: then *emit is all remaining text before the stop string, anything
 * after it is dropped and the matcher is finished (further feeds return CAIRN_ESTATE
 * until reset). Errors: CAIRN_EINVAL, CAIRN_ESTATE, CAIRN_ENOMEM (the text is not
 * consumed; the state is unchanged). Cost O((held + len) * total stop bytes).
 */
CAIRN_API int cairn_stop_matcher_feed(cairn_stop_matcher_t *m, const char *text, size_t len,
                            const char **emit, size_t *emit_len, bool *stopped);

/*
 * Ends the stream without a stop string (eos or length): returns the held-back text,
 * which is now safe to emit, and finishes the matcher. Errors: CAIRN_EINVAL,
 * CAIRN_ESTATE (already finished). Never allocates.
 */
CAIRN_API int cairn_stop_matcher_flush(cairn_stop_matcher_t *m, const char **emit, size_t *emit_len);

/* Index of the stop string that matched, or -1 if none has. */
CAIRN_API int cairn_stop_matcher_matched(const cairn_stop_matcher_t *m);

/* Clears the held text and the finished state, for a new stream. Keeps its memory. */
CAIRN_API void cairn_stop_matcher_reset(cairn_stop_matcher_t *m);

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_SAMPLER_H */
