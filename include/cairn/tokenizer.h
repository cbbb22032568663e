/*
 * cairn/tokenizer.h — Hugging Face tokenizer.json byte-level BPE (Qwen2/2.5/3, Llama 3.x,
 * SmolLM, ...), matching the `tokenizers` library token for token; the same tokenizers
 * from a GGUF file's metadata, and a GGUF file's SentencePiece vocabulary (Llama 2,
 * Mistral, Gemma), matching llama.cpp's tokenization.
 *
 * Supported tokenizer.json features (anything else is a load error naming the feature):
 *  - model: BPE with merges as "a b" strings or ["a","b"] arrays, ignore_merges,
 *    unk_token/fuse_unk; no dropout, byte_fallback or subword prefix/suffix.
 *  - normalizer: null, NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Strip, Replace with a
 *    String pattern, and Sequence of these.
 *  - pre_tokenizer: Split (Regex or String pattern; Isolated, Removed, MergedWithPrevious,
 *    MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space, use_regex), and
 *    Sequence of these. Regexes run in PCRE2 with JIT, PCRE2_UTF | PCRE2_UCP.
 *  - added_tokens with single_word, lstrip, rstrip, normalized, special.
 *  - post_processor: null, ByteLevel, TemplateProcessing (single), RobertaProcessing,
 *    BertProcessing, Sequence of these.
 *  - decoder: null (tokens joined by spaces, as `tokenizers` does) or ByteLevel (alone or
 *    in a Sequence).
 *
 * Input text must be valid UTF-8 (Python strings always are); invalid UTF-8 is rejected
 * with CAIRN_EINVAL, never tokenized. Decoding produces valid UTF-8, replacing invalid
 * byte sequences with U+FFFD the way Rust's String::from_utf8_lossy does.
 *
 * Thread-safety: a loaded tokenizer is immutable; every function taking a const
 * cairn_tokenizer_t * may be called from many threads at once (the internal word cache
 * has its own lock). A stream decoder belongs to one thread at a time.
 */
#ifndef CAIRN_TOKENIZER_H
#define CAIRN_TOKENIZER_H

#include "cairn/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cairn_tokenizer cairn_tokenizer_t;
typedef struct cairn_tokenizer_stream cairn_tokenizer_stream_t;

/*
 * Loads a tokenizer. `path` is either a directory holding tokenizer.json (and optionally
 * tokenizer_config.json and chat_template.jinja), the path of a tokenizer.json file
 * (the other two are then looked for beside it), or a GGUF file, whose tokenizer.*
 * metadata (`tokenizer.ggml.model` "gpt2", byte-level BPE, or "llama", SentencePiece;
 * docs/FORMAT.md 3.6) and chat templates are read instead. On success *out owns the tokenizer
 * (free with cairn_tokenizer_destroy). On failure returns CAIRN_ENOENT/EIO (files),
 * CAIRN_EFORMAT (malformed JSON or inconsistent vocab/merges), CAIRN_EUNSUPPORTED (a
 * feature listed as unsupported above) or CAIRN_ENOMEM, and writes a one-line message
 * into err (if non-NULL; truncated to errlen). Cost: 50-120 ms for a 150K-token vocab
 * (docs/PERFORMANCE.md).
 */
CAIRN_API int cairn_tokenizer_load(const char *path, cairn_tokenizer_t **out, char *err, size_t errlen);

/*
 * Loads from the text of a tokenizer.json already in memory (`len` bytes, no NUL needed);
 * no tokenizer_config.json is read. Same errors as cairn_tokenizer_load.
 */
CAIRN_API int cairn_tokenizer_load_json(const char *json, size_t len, cairn_tokenizer_t **out,
                              char *err, size_t errlen);

/* Frees the tokenizer; NULL is a no-op. No stream decoder may outlive it. */
CAIRN_API void cairn_tokenizer_destroy(cairn_tokenizer_t *tok);

/* Flags for cairn_tokenizer_encode_ex. */
enum {
    CAIRN_TOKENIZE_ADD_SPECIAL = 1,   /* run the post-processor (BOS/EOS) */
    CAIRN_TOKENIZE_SPLIT_SPECIAL = 2, /* treat special tokens' text as plain text */
};

/*
 * Encodes `len` bytes of UTF-8 text. Added and special tokens in the text are recognized
 * (unless CAIRN_TOKENIZE_SPLIT_SPECIAL). On success *ids receives a cairn_malloc'd array
 * of *n_ids ids (caller frees with cairn_free; NULL when n_ids is 0). Errors:
 * CAIRN_EINVAL (NULL arguments or invalid UTF-8), CAIRN_ENOMEM, CAIRN_EFORMAT (a regex
 * failed at match time). Cost: linear in len; ~tens of MB/s on English text.
 */
CAIRN_API int cairn_tokenizer_encode_ex(const cairn_tokenizer_t *tok, const char *text, size_t len,
                              unsigned flags, int32_t **ids, size_t *n_ids);
/* cairn_tokenizer_encode_ex with CAIRN_TOKENIZE_ADD_SPECIAL if add_special. */
CAIRN_API int cairn_tokenizer_encode(const cairn_tokenizer_t *tok, const char *text, size_t len,
                           bool add_special, int32_t **ids, size_t *n_ids);

/*
 * Decodes ids to text. *text receives a cairn_malloc'd NUL-terminated valid UTF-8 string
 * of *len bytes (caller frees). With skip_special, special added tokens are dropped. A
 * SentencePiece tokenizer that adds a prefix space drops it from the first token (the
 * stream decoder keeps it, as llama.cpp's token_to_piece does).
 * Errors: CAIRN_EINVAL (an id outside the vocabulary, NULL arguments), CAIRN_ENOMEM.
 */
CAIRN_API int cairn_tokenizer_decode(const cairn_tokenizer_t *tok, const int32_t *ids, size_t n,
                           bool skip_special, char **text, size_t *len);

/* Number of ids (max id + 1, added tokens included). */
CAIRN_API size_t cairn_tokenizer_vocab_size(const cairn_tokenizer_t *tok);

/* The token's string as stored in tokenizer.json (e.g. "Ġworld"), or NULL for an unknown
 * id. Borrowed: valid while the tokenizer lives. */
CAIRN_API const char *cairn_tokenizer_token_text(const cairn_tokenizer_t *tok, int32_t id);

/*
 * The bytes a token decodes to (e.g. " world"), possibly part of a UTF-8 character.
 * Writes up to cap bytes into buf and the full length into *len (call again with a larger
 * buffer if *len > cap). Errors: CAIRN_EINVAL for an unknown id.
 */
CAIRN_API int cairn_tokenizer_token_to_piece(const cairn_tokenizer_t *tok, int32_t id, char *buf,
                                   size_t cap, size_t *len);

/* The id of a token string (added tokens first, then the model vocab), or -1. */
CAIRN_API int32_t cairn_tokenizer_piece_to_id(const cairn_tokenizer_t *tok, const char *piece);

/* True if id is a special added token. */
CAIRN_API bool cairn_tokenizer_is_special(const cairn_tokenizer_t *tok, int32_t id);

/* bos_token / eos_token from tokenizer_config.json (a string or {"content": ...}), or
 * NULL; and their ids (-1 if absent or not in the vocabulary). Borrowed strings. */
CAIRN_API const char *cairn_tokenizer_bos_token(const cairn_tokenizer_t *tok);
CAIRN_API const char *cairn_tokenizer_eos_token(const cairn_tokenizer_t *tok);
CAIRN_API int32_t cairn_tokenizer_bos_id(const cairn_tokenizer_t *tok);
CAIRN_API int32_t cairn_tokenizer_eos_id(const cairn_tokenizer_t *tok);

/*
 * The chat template source (borrowed), or NULL. name NULL or "default" selects the default
 * template. Sources, first found wins: chat_template.jinja beside tokenizer.json (as
 * "default"), then tokenizer_config.json `chat_template` (a string, or a list of
 * {"name", "template"} objects).
 */
CAIRN_API const char *cairn_tokenizer_chat_template(const cairn_tokenizer_t *tok, const char *name);

/*
 * Streaming decoder: push ids one at a time and receive only complete UTF-8 characters;
 * bytes of a character split over several tokens are held until it completes. Bytes that
 * can never form a character are emitted as U+FFFD.
 *
 * create: *out owns the stream (CAIRN_ENOMEM on failure).
 * push: *text and *len receive the newly completed text (possibly empty); the pointer is
 *   valid until the next call on the stream. CAIRN_EINVAL for an unknown id.
 * flush: emits whatever is held (incomplete bytes as U+FFFD) and resets the stream.
 */
CAIRN_API int cairn_tokenizer_stream_create(const cairn_tokenizer_t *tok, bool skip_special,
                                  cairn_tokenizer_stream_t **out);
CAIRN_API int cairn_tokenizer_stream_push(cairn_tokenizer_stream_t *st, int32_t id, const char **text,
                                size_t *len);
CAIRN_API int cairn_tokenizer_stream_flush(cairn_tokenizer_stream_t *st, const char **text,
                                 size_t *len);
CAIRN_API void cairn_tokenizer_stream_destroy(cairn_tokenizer_stream_t *st);

#ifdef __cplusplus
}
#endif
#endif /* CAIRN_TOKENIZER_H */
