/*
 * tok_internal.h — private structures of the tokenizer layer (include/cairn/tokenizer.h).
 *
 * The tokenizer is a pipeline fixed at load time (see docs/DESIGN.md, "Tokenizer"):
 *
 *   text -> added tokens (not normalized) -> normalizers -> added tokens (normalized)
 *        -> pre-tokenizers (Split / ByteLevel) -> BPE per pre-token -> post-processor
 *
 * Everything here is immutable after load except the BPE word cache, which has its own
 * mutex. Files: tokenizer.c (load, public API, encode driver), tokenizer_gguf.c (the
 * same structures from a GGUF file's tokenizer.* metadata), json_scan.c (fast scanner
 * for the large vocab/merges sections), bpe.c (vocab and merge hash maps, merging, cache),
 * spm.c (the SentencePiece encoder of GGUF "llama" vocabularies),
 * pipeline.c (normalizers, added-token matching, pre-tokenizers), decode.c (ByteLevel
 * decoding and the streaming decoder).
 */
#ifndef CAIRN_TOK_INTERNAL_H
#define CAIRN_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <cjson/cJSON.h>

#include "cairn/common.h"
#include "cairn/tokenizer.h"

/* ---- small growable buffers ------------------------------------------------------- */

typedef struct { char *p; size_t len, cap; } tok_buf_t;
typedef struct { size_t off, len; } tok_span_t;
typedef struct { tok_span_t *p; size_t len, cap; } tok_spans_t;
typedef struct { int32_t *p; size_t len, cap; } tok_ids_t;

int tok_buf_reserve(tok_buf_t *b, size_t extra);
int tok_buf_append(tok_buf_t *b, const void *s, size_t n);
int tok_spans_push(tok_spans_t *v, size_t off, size_t len);
int tok_ids_push(tok_ids_t *v, int32_t id);

/* Formats an error message into err (may be NULL) and returns status. */
int tok_err(char *err, size_t errlen, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- UTF-8 and Unicode helpers (pipeline.c) --------------------------------------- */

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid/truncated. */
size_t tok_utf8_valid_len(const unsigned char *s, size_t n);
/* Whole-buffer validation. */
bool tok_utf8_valid(const char *s, size_t n);
/* Decodes a (validated) code point; *adv receives its length. */
uint32_t tok_utf8_decode(const unsigned char *s, size_t *adv);
size_t tok_utf8_encode(uint32_t cp, char out[4]);
bool tok_is_whitespace(uint32_t cp);   /* Unicode White_Space (Rust char::is_whitespace) */
bool tok_is_word_char(uint32_t cp);    /* alphanumeric or '_' (single_word boundaries) */

/* GPT-2 byte-to-unicode table: code point for each byte, and its inverse. */
extern const uint16_t tok_byte_to_cp[256];
/* Byte for a byte-level code point, or -1 if cp is not in the alphabet. */
int tok_cp_to_byte(uint32_t cp);

/* ---- BPE model (bpe.c) ------------------------------------------------------------ */

/* Open-addressing map from a borrowed byte string to a value (keys must outlive it). */
typedef struct {
    const char *k;   /* NULL = empty */
    uint32_t len;
    uint32_t tag;    /* high 32 bits of the key's hash: most mismatches never touch k */
    int32_t val;
} tok_strslot_t;
typedef struct {
    tok_strslot_t *slots;
    uint32_t mask;
} tok_strmap_t;

/* Merge ranks keyed by the (left id, right id) pair. */
typedef struct {
    uint64_t key;    /* left << 32 | right; UINT64_MAX = empty */
    uint32_t rank;
    uint32_t new_id;
} tok_mergeslot_t;
typedef struct {
    tok_mergeslot_t *slots;
    uint32_t mask;
    size_t count;
} tok_mergemap_t;

/* One direct-mapped cache slot (one 64-byte cache line): a short pre-token and its ids. */
#define TOK_CACHE_WORD 26
#define TOK_CACHE_IDS 8
#define TOK_CACHE_SLOTS 32768
typedef struct {
    uint32_t hash;   /* low 32 bits of the word's hash */
    uint8_t wlen;    /* 0 = empty */
    uint8_t nids;
    char word[TOK_CACHE_WORD];
    int32_t ids[TOK_CACHE_IDS];
} tok_cache_slot_t;

typedef struct {
    /* Model vocab: strings indexed by id live in the tokenizer's id table (text/len). */
    tok_strmap_t vocab;
    tok_mergemap_t merges;
    int32_t char_id[2048];   /* id of the one-character token for cp < 2048, or -1 */
    int32_t unk_id;          /* -1 if none */
    bool fuse_unk;
    bool ignore_merges;
    tok_cache_slot_t *cache; /* TOK_CACHE_SLOTS entries, 64-byte aligned in cache_mem */
    void *cache_mem;
    pthread_mutex_t cache_lock;
} tok_bpe_t;

/* ---- pipeline configuration (pipeline.c) ------------------------------------------ */

typedef enum {
    TOK_NORM_NFC, TOK_NORM_NFD, TOK_NORM_NFKC, TOK_NORM_NFKD, TOK_NORM_LOWERCASE,
    TOK_NORM_REPLACE, TOK_NORM_PREPEND, TOK_NORM_STRIP,
} tok_norm_kind_t;

typedef struct {
    tok_norm_kind_t kind;
    char *a; size_t alen;     /* Replace: literal pattern; Prepend: the prefix */
    char *b; size_t blen;     /* Replace: the replacement */
    bool left, right;         /* Strip */
} tok_norm_t;

typedef enum {
    TOK_SPLIT_ISOLATED, TOK_SPLIT_REMOVED, TOK_SPLIT_MERGED_PREV, TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior_t;

typedef enum { TOK_PRE_SPLIT, TOK_PRE_BYTELEVEL } tok_pre_kind_t;

typedef struct {
    tok_pre_kind_t kind;
    /* Split: a compiled regex, or a literal (literal != NULL). */
    pcre2_code *re;
    char *literal; size_t literal_len;
    tok_split_behavior_t behavior;
    bool invert;
    int fast_digits;          /* a known HF regex with a fast path (max \p{N} run), or 0 */
    /* ByteLevel */
    bool add_prefix_space;
    bool use_regex;
} tok_pre_t;

typedef struct {
    int32_t id;
    char *content; size_t len;      /* as written in tokenizer.json */
    char *match; size_t match_len;  /* what is matched: content, normalized if `normalized` */
    bool special, single_word, lstrip, rstrip, normalized;
} tok_added_t;

/* ---- the tokenizer ---------------------------------------------------------------- */

struct cairn_tokenizer {
    /* id -> token string (model vocab string or added-token content); NULL for holes. */
    char **text;
    uint32_t *text_len;
    uint8_t *is_special;       /* per id: 1 for special added tokens */
    size_t n_ids;
    char *arena;               /* backing store of the model vocab strings */

    tok_bpe_t bpe;

    tok_norm_t *norms; size_t n_norms;
    tok_pre_t *pres; size_t n_pres;
    bool has_bytelevel_pre;
    pcre2_code *gpt2_re;       /* for ByteLevel use_regex */
    bool jit_ok;               /* every regex is JIT-compiled: use pcre2_jit_match */
    pcre2_general_context *gctx;

    tok_added_t *added; size_t n_added;
    /* First-byte filter and distinct match lengths (descending) for each added class. */
    uint8_t added_first[2][256];
    size_t *added_lens[2]; size_t n_added_lens[2];
    tok_strmap_t added_map[2];  /* match string -> index into added[] + 1 */

    /* Post-processor (TemplateProcessing/Roberta/Bert): ids around the sequence. */
    int32_t *post_prefix; size_t n_post_prefix;
    int32_t *post_suffix; size_t n_post_suffix;

    enum { TOK_DEC_NONE, TOK_DEC_BYTELEVEL, TOK_DEC_SPM } decoder;

    /* SentencePiece (GGUF tokenizer.ggml.model "llama", spm.c): on instead of the BPE
     * pipeline; bpe.vocab then maps every token's text (any type) to its id, bpe.unk_id
     * is the unknown token. */
    struct {
        bool on;
        bool add_space_prefix;  /* "▁" before the first fragment and after added tokens */
        float *scores;          /* [n_ids] merge priority (higher first) */
        int16_t *byte_of;       /* [n_ids] the byte a <0xXX> byte token stands for, or -1 */
        int32_t byte_id[256];   /* token of each byte: <0xXX>, its 1-char token, or -1 */
        uint32_t max_len;       /* longest token text in bytes */
    } spm;

    /* tokenizer_config.json / chat_template.jinja */
    char *bos_token, *eos_token;
    bool add_bos_token, add_eos_token;
    char **tmpl_names, **tmpl_sources; size_t n_templates;
};

/* bpe.c */
uint64_t tok_hash(const void *p, size_t n);
/* Sized for `count` keys; the map does not grow (callers know their key count). */
int tok_strmap_init(tok_strmap_t *m, size_t count);
void tok_strmap_free(tok_strmap_t *m);
/* Inserts or overwrites; the key bytes are borrowed and must outlive the map. */
void tok_strmap_put(tok_strmap_t *m, const char *k, size_t n, int32_t val);
void tok_strmap_put_h(tok_strmap_t *m, const char *k, size_t n, int32_t val, uint64_t h);
/* The value for the key, or -1. The _h form takes the key's tok_hash (for batching). */
int32_t tok_strmap_get(const tok_strmap_t *m, const char *k, size_t n);
int32_t tok_strmap_get_h(const tok_strmap_t *m, const char *k, size_t n, uint64_t h);
/* Hints the slot of hash h into cache (batched loads hide memory latency this way). */
void tok_strmap_prefetch(const tok_strmap_t *m, uint64_t h);
void tok_mergemap_prefetch(const tok_mergemap_t *m, uint32_t a, uint32_t b);
int tok_mergemap_init(tok_mergemap_t *m, size_t count);
void tok_mergemap_free(tok_mergemap_t *m);
int tok_mergemap_put(tok_mergemap_t *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id);
int tok_bpe_init_tables(cairn_tokenizer_t *t);
void tok_bpe_fini(tok_bpe_t *b);
/* Appends the ids of one pre-token (already ByteLevel-mapped if applicable). */
int tok_bpe_encode_word(const cairn_tokenizer_t *t, const char *w, size_t n, tok_ids_t *out);

/* json_scan.c: fast parsing of model.vocab and model.merges. Each parses the value at
 * json[0] (with len bytes available after it) and sets *used to the bytes it consumed. */
int tok_json_load_vocab(cairn_tokenizer_t *t, const char *json, size_t len, size_t *used,
                        char *err, size_t errlen);
int tok_json_load_merges(cairn_tokenizer_t *t, const char *json, size_t len, size_t *used,
                         char *err, size_t errlen);
/* Called by tok_json_members for a listed member (index into names) instead of skipping
 * its value at json[off]: returns 0 with *end set past the value, 1 to let the scanner skip
 * it, or a negative status. */
typedef int (*tok_json_hook_fn)(void *user, size_t index, const char *json, size_t len,
                                size_t off, size_t *end);
/* One pass over the JSON object at json (leading whitespace allowed): for each of the n
 * names, records its value's extent (vlen[i] = 0 when absent), calling hook (if non-NULL)
 * on each listed member first. *end (if non-NULL) receives the offset after the object.
 * Returns 0, the hook's error, or CAIRN_EFORMAT / CAIRN_ENOMEM. */
int tok_json_members(const char *json, size_t len, const char *const *names, size_t n,
                     size_t *voff, size_t *vlen, tok_json_hook_fn hook, void *user, size_t *end);

/* tokenizer.c: pieces the GGUF constructor shares with the tokenizer.json loader. */
/* A zeroed tokenizer with its PCRE2 context (NULL: out of memory). */
cairn_tokenizer_t *tok_alloc(void);
/* added_tokens (a tokenizer.json-shaped cJSON array, or NULL) into t->added, the added
 * maps and is_special; call after the pipeline (normalized tokens are normalized). */
int tok_load_added(cairn_tokenizer_t *t, const cJSON *arr, char *err, size_t errlen);
/* Adds a named chat template (copied; the first source of a name wins). */
int tok_add_template(cairn_tokenizer_t *t, const char *name, const char *src);

/* tokenizer_gguf.c: the tokenizer of a GGUF file's metadata (cairn_tokenizer_load opens
 * the file; the fuzzer hands a parsed buffer). Errors name the key or token. */
struct gguf_file;
int tok_load_gguf(const struct gguf_file *g, cairn_tokenizer_t **out, char *err, size_t errlen);
int tok_load_gguf_file(const char *path, cairn_tokenizer_t **out, char *err, size_t errlen);

/* spm.c: appends the SentencePiece ids of text (valid UTF-8), added tokens included. */
int tok_spm_encode(const cairn_tokenizer_t *t, bool split_special, const char *text, size_t len,
                   tok_ids_t *out);

/* pipeline.c */
int tok_pipeline_load(cairn_tokenizer_t *t, const cJSON *normalizer, const cJSON *pre,
                      char *err, size_t errlen);
void tok_pipeline_fini(cairn_tokenizer_t *t);
int tok_normalize(const cairn_tokenizer_t *t, const char *s, size_t n, tok_buf_t *out);
/* Splits [s, s+n) at added tokens of class cls (0: not normalized, 1: normalized).
 * Emits spans: id >= 0 for a token, -1 for plain text, appended to segs/ids in order. */
int tok_split_added(const cairn_tokenizer_t *t, int cls, bool skip_special, const char *s,
                    size_t n, tok_spans_t *segs, tok_ids_t *seg_ids);
/* Runs the pre-tokenizers over `in` and BPE-encodes every resulting piece into out. */
int tok_pretokenize_encode(const cairn_tokenizer_t *t, const char *s, size_t n,
                           tok_ids_t *out);

#endif
