/*
 * tokenizer_gguf.c — the tokenizer of a GGUF file, from its tokenizer.* metadata
 * (docs/FORMAT.md 3.6), built into the same structures the tokenizer.json loader fills,
 * so encoding, decoding and streaming are the same code.
 *
 * What llama.cpp's converter writes for a Hugging Face byte-level BPE tokenizer
 * (tokenizer.ggml.model "gpt2") maps back to the tokenizer.json it came from:
 *   - tokens[id] is the token string of id; token_type says what it was: 1 normal (a
 *     model.vocab entry), 3 control (a special added token), 4 user-defined (an added
 *     token that is not special), 5 unused (a hole filled with a placeholder), 2 unknown,
 *     6 byte. Types 1, 2 and 6 form the BPE vocabulary; 3 and 4 become added tokens
 *     (matched on the raw text, as llama.cpp matches them); 5 stay out of both.
 *   - merges are "a b" strings in rank order (split at the first space after the first
 *     byte, as llama.cpp splits them);
 *   - tokenizer.ggml.pre names the model's pre-tokenizer. The table below gives, for each
 *     name we know, the normalizer and pre_tokenizer sections of the tokenizer.json those
 *     models ship (for "default", the splitting llama.cpp applies to files that predate
 *     the key: there is no tokenizer.json behind it), and whether the BPE model ignores
 *     merges. They are built as tokenizer.json objects and loaded by the same pipeline
 *     code. A name not in the table is an error naming it.
 *   - bos/eos ids with add_bos_token / add_eos_token become the post-processor (BOS
 *     before, EOS after, when special tokens are added); their token strings become
 *     bos_token / eos_token for chat templates.
 *   - tokenizer.chat_template (and tokenizer.chat_template.<name>) are the templates.
 *
 * Thread-safety: load-time only; the result is an ordinary immutable tokenizer.
 */
#include <stdio.h>
#include <string.h>

#include "formats/gguf.h"
#include "tokenizer/tok_internal.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* HF's byte-level BPE pre-tokenizer regexes (Split, behaviour Isolated). */
#define RE_QWEN2 \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3 \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O                                                                               \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?" \
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?" \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* llama.cpp's splitting for files without a pre-tokenizer name, applied in this order. */
static const char *const re_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
    NULL,
};

/* One known tokenizer.ggml.pre name. */
typedef struct {
    const char *name;
    const char *normalizer; /* NULL or a normalizer type ("NFC") */
    const char *const *splits; /* Split regexes, NULL-terminated; NULL: ByteLevel's own */
    bool ignore_merges;
    bool add_bos;           /* llama.cpp's default when add_bos_token is absent */
} pre_t;

static const char *const re_qwen2[] = {RE_QWEN2, NULL};
static const char *const re_llama3[] = {RE_LLAMA3, NULL};
static const char *const re_gpt4o[] = {RE_GPT4O, NULL};

static const pre_t pres[] = {
    /* Qwen2, Qwen2.5, Qwen3: NFC, then the Qwen split. */
    {"qwen2", "NFC", re_qwen2, false, false},
    /* Llama 3.x ("llama3" and "llama-v3" in older files): ignore_merges. */
    {"llama-bpe", NULL, re_llama3, true, true},
    {"llama3", NULL, re_llama3, true, true},
    {"llama-v3", NULL, re_llama3, true, true},
    /* o200k (GPT-4o) splitting. */
    {"gpt-4o", NULL, re_gpt4o, false, false},
    /* GPT-2 ("gpt-2" in llama.cpp): ByteLevel with its own regex. */
    {"gpt-2", NULL, NULL, false, false},
    {"default", NULL, re_default, false, false},
};

static const pre_t *find_pre(gguf_str_t name)
{
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(pres); i++)
        if (gguf_str_eq(name, pres[i].name))
            return &pres[i];
    return NULL;
}

/* The normalizer and pre_tokenizer sections of the tokenizer.json this name stands for. */
static int build_sections(const pre_t *p, cJSON **norm, cJSON **pre)
{
    *norm = NULL;
    *pre = cJSON_CreateObject();
    cJSON *seq = *pre ? cJSON_CreateArray() : NULL;
    if (!seq)
        goto nomem;
    /* Each item is attached before it is filled, so one delete frees whatever exists. */
    if (!cJSON_AddItemToObject(*pre, "pretokenizers", seq)) {
        cJSON_Delete(seq);
        goto nomem;
    }
    if (p->normalizer) {
        *norm = cJSON_CreateObject();
        if (!*norm || !cJSON_AddStringToObject(*norm, "type", p->normalizer))
            goto nomem;
    }
    if (!cJSON_AddStringToObject(*pre, "type", "Sequence"))
        goto nomem;
    for (size_t i = 0; p->splits && p->splits[i]; i++) {
        cJSON *s = cJSON_CreateObject(), *pat = NULL;
        if (!s || !cJSON_AddItemToArray(seq, s)) {
            cJSON_Delete(s);
            goto nomem;
        }
        if (!(pat = cJSON_CreateObject()) || !cJSON_AddItemToObject(s, "pattern", pat)) {
            cJSON_Delete(pat);
            goto nomem;
        }
        if (!cJSON_AddStringToObject(pat, "Regex", p->splits[i]) ||
            !cJSON_AddStringToObject(s, "type", "Split") ||
            !cJSON_AddStringToObject(s, "behavior", "Isolated") ||
            !cJSON_AddFalseToObject(s, "invert"))
            goto nomem;
    }
    cJSON *bl = cJSON_CreateObject();
    if (!bl || !cJSON_AddItemToArray(seq, bl)) {
        cJSON_Delete(bl);
        goto nomem;
    }
    if (!cJSON_AddStringToObject(bl, "type", "ByteLevel") ||
        !cJSON_AddFalseToObject(bl, "add_prefix_space") ||
        !cJSON_AddBoolToObject(bl, "use_regex", p->splits == NULL))
        goto nomem;
    return 0;
nomem:
    cJSON_Delete(*norm);
    cJSON_Delete(*pre);
    *norm = *pre = NULL;
    return CAIRN_ENOMEM;
}

/* Token types: absent means every token is normal. */
static int token_type(const gguf_kv_t *types, uint64_t i)
{
    return types ? (int)gguf_array_int(types, i) : TT_NORMAL;
}

/* The id table and the vocabulary map: for BPE the types normal, unknown and byte; for
 * SentencePiece (all_types) every token, a later duplicate winning as in llama.cpp. */
static int load_vocab(cairn_tokenizer_t *t, const gguf_kv_t *toks, const gguf_kv_t *types,
                      bool all_types, const char *what, char *err, size_t errlen)
{
    size_t n = (size_t)toks->n, bytes = 0, n_vocab = 0;
    for (size_t i = 0; i < n; i++) {
        gguf_str_t s = toks->strs[i];
        int ty = token_type(types, i);
        if (ty < TT_NORMAL || ty > TT_BYTE)
            return tok_err(err, errlen, CAIRN_EFORMAT, "%s: token %zu has unknown type %d", what, i, ty);
        if (!tok_utf8_valid(s.p, s.n) || memchr(s.p, 0, s.n))
            return tok_err(err, errlen, CAIRN_EFORMAT, "%s: token %zu is not valid UTF-8 text", what, i);
        bytes += s.n + 1;
        n_vocab += all_types || ty == TT_NORMAL || ty == TT_UNKNOWN || ty == TT_BYTE;
    }
    t->arena = cairn_malloc(bytes ? bytes : 1);
    t->text = cairn_calloc(n ? n : 1, sizeof *t->text);
    t->text_len = cairn_calloc(n ? n : 1, sizeof *t->text_len);
    if (!t->arena || !t->text || !t->text_len || tok_strmap_init(&t->bpe.vocab, n_vocab))
        return CAIRN_ENOMEM;
    t->n_ids = n;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        gguf_str_t s = toks->strs[i];
        memcpy(t->arena + at, s.p, s.n);
        t->arena[at + s.n] = 0;
        t->text[i] = t->arena + at;
        t->text_len[i] = (uint32_t)s.n;
        at += s.n + 1;
        int ty = token_type(types, i);
        if ((all_types || ty == TT_NORMAL || ty == TT_UNKNOWN || ty == TT_BYTE) && s.n)
            tok_strmap_put(&t->bpe.vocab, t->text[i], s.n, (int32_t)i);
    }
    return 0;
}

static int load_merges(cairn_tokenizer_t *t, const gguf_kv_t *merges, const char *what,
                       char *err, size_t errlen)
{
    int rc;
    if ((rc = tok_mergemap_init(&t->bpe.merges, (size_t)merges->n + 16)))
        return rc;
    for (uint64_t r = 0; r < merges->n; r++) {
        gguf_str_t m = merges->strs[r];
        const char *sp = m.n > 1 ? memchr(m.p + 1, ' ', m.n - 1) : NULL;
        if (!sp)
            return tok_err(err, errlen, CAIRN_EFORMAT, "%s: merge %llu ('%.*s') has no space",
                           what, (unsigned long long)r, (int)(m.n > 64 ? 64 : m.n), m.p);
        size_t an = (size_t)(sp - m.p), bn = m.n - an - 1;
        char both[512];
        if (an + bn > sizeof both)
            return tok_err(err, errlen, CAIRN_EFORMAT, "%s: merge %llu is too long", what,
                           (unsigned long long)r);
        memcpy(both, m.p, an);
        memcpy(both + an, sp + 1, bn);
        int32_t a = tok_strmap_get(&t->bpe.vocab, m.p, an);
        int32_t b = tok_strmap_get(&t->bpe.vocab, sp + 1, bn);
        int32_t ab = tok_strmap_get(&t->bpe.vocab, both, an + bn);
        if (a < 0 || b < 0 || ab < 0)
            return tok_err(err, errlen, CAIRN_EFORMAT,
                           "%s: merge %llu ('%.*s') names a token that is not in the vocabulary",
                           what, (unsigned long long)r, (int)(m.n > 64 ? 64 : m.n), m.p);
        if ((rc = tok_mergemap_put(&t->bpe.merges, (uint32_t)a, (uint32_t)b, (uint32_t)r,
                                   (uint32_t)ab)))
            return rc;
    }
    return 0;
}

/* Control and user-defined tokens as tokenizer.json added_tokens (matched on raw text);
 * with unknown_too (SentencePiece: llama.cpp matches <unk> in text too) unknown tokens as
 * special ones. */
static int load_added(cairn_tokenizer_t *t, const gguf_kv_t *toks, const gguf_kv_t *types,
                      bool unknown_too, char *err, size_t errlen)
{
    cJSON *arr = cJSON_CreateArray();
    if (!arr)
        return CAIRN_ENOMEM;
    int rc = 0;
    for (uint64_t i = 0; i < toks->n && !rc; i++) {
        int ty = token_type(types, i);
        bool special = ty == TT_CONTROL || (unknown_too && ty == TT_UNKNOWN);
        if ((!special && ty != TT_USER) || toks->strs[i].n == 0)
            continue;
        cJSON *a = cJSON_CreateObject();
        if (!a || !cJSON_AddItemToArray(arr, a)) {
            cJSON_Delete(a);
            rc = CAIRN_ENOMEM;
            break;
        }
        if (!cJSON_AddNumberToObject(a, "id", (double)i) ||
            !cJSON_AddStringToObject(a, "content", t->text[i]) ||
            !cJSON_AddBoolToObject(a, "special", special) ||
            !cJSON_AddFalseToObject(a, "normalized"))
            rc = CAIRN_ENOMEM;
    }
    if (!rc)
        rc = tok_load_added(t, arr, err, errlen);
    cJSON_Delete(arr);
    return rc;
}

/* A special token id key: dflt when absent (-1, or a default beyond the vocabulary: none);
 * an id outside the vocabulary is an error. */
static int special_id(const gguf_file_t *g, const char *key, size_t n_ids, int32_t dflt,
                      int32_t *out, char *err, size_t errlen)
{
    uint64_t v;
    *out = dflt >= 0 && (size_t)dflt < n_ids ? dflt : -1;
    if (!gguf_find(g, key))
        return 0;
    int rc = gguf_get_uint(g, key, true, 0, n_ids - 1, &v, err, errlen);
    if (!rc)
        *out = (int32_t)v;
    return rc;
}

/* llama.cpp's defaults for a tokenizer model: ids when the keys are absent, add_bos. */
typedef struct {
    int32_t bos, eos, unk;
    bool add_bos;
} specials_dflt_t;

/* BOS/EOS around encoded text, their strings, and the add flags. */
static int load_specials(cairn_tokenizer_t *t, const gguf_file_t *g, specials_dflt_t d,
                         char *err, size_t errlen)
{
    int32_t bos, eos, unk;
    int rc;
    const char *what = gguf_what(g);
    if ((rc = special_id(g, "tokenizer.ggml.bos_token_id", t->n_ids, d.bos, &bos, err, errlen)) ||
        (rc = special_id(g, "tokenizer.ggml.eos_token_id", t->n_ids, d.eos, &eos, err, errlen)) ||
        (rc = special_id(g, "tokenizer.ggml.unknown_token_id", t->n_ids, d.unk, &unk, err,
                         errlen)) ||
        (rc = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", d.add_bos, &t->add_bos_token,
                            err, errlen)) ||
        (rc = gguf_get_bool(g, "tokenizer.ggml.add_eos_token", false, &t->add_eos_token, err,
                            errlen)))
        return rc;
    if ((t->add_bos_token && bos < 0) || (t->add_eos_token && eos < 0))
        return tok_err(err, errlen, CAIRN_EFORMAT, "%s: tokenizer.ggml.add_%s_token is true but "
                       "tokenizer.ggml.%s_token_id is not set", what,
                       t->add_bos_token && bos < 0 ? "bos" : "eos",
                       t->add_bos_token && bos < 0 ? "bos" : "eos");
    t->bpe.unk_id = unk;
    if (bos >= 0 && !(t->bos_token = cairn_strdup(t->text[bos])))
        return CAIRN_ENOMEM;
    if (eos >= 0 && !(t->eos_token = cairn_strdup(t->text[eos])))
        return CAIRN_ENOMEM;
    if (t->add_bos_token) {
        if (!(t->post_prefix = cairn_malloc(sizeof *t->post_prefix)))
            return CAIRN_ENOMEM;
        t->post_prefix[0] = bos;
        t->n_post_prefix = 1;
    }
    if (t->add_eos_token) {
        if (!(t->post_suffix = cairn_malloc(sizeof *t->post_suffix)))
            return CAIRN_ENOMEM;
        t->post_suffix[0] = eos;
        t->n_post_suffix = 1;
    }
    return 0;
}

/* tokenizer.chat_template as "default", tokenizer.chat_template.<name> as <name>. */
static int load_templates(cairn_tokenizer_t *t, const gguf_file_t *g, char *err, size_t errlen)
{
    static const char prefix[] = "tokenizer.chat_template";
    for (size_t i = 0; i < gguf_n_kvs(g); i++) {
        const gguf_kv_t *kv = gguf_kv(g, i);
        if (kv->key.n < sizeof prefix - 1 || memcmp(kv->key.p, prefix, sizeof prefix - 1) != 0)
            continue;
        const char *rest = kv->key.p + sizeof prefix - 1;
        size_t rest_n = kv->key.n - (sizeof prefix - 1);
        if (rest_n && (rest[0] != '.' || rest_n == 1))
            continue; /* another key sharing the prefix */
        char name[64];
        if (rest_n > sizeof name)
            return tok_err(err, errlen, CAIRN_EFORMAT, "%s: chat template name of %.*s is too "
                           "long", gguf_what(g), 40, kv->key.p);
        snprintf(name, sizeof name, "%.*s", rest_n ? (int)rest_n - 1 : 7, rest_n ? rest + 1 : "default");
        if (kv->type != GGUF_TYPE_STRING)
            return tok_err(err, errlen, CAIRN_EFORMAT, "%s: metadata %.*s is not a string",
                           gguf_what(g), (int)kv->key.n, kv->key.p);
        gguf_str_t s = kv->strs[0];
        char *src = cairn_strndup(s.p, s.n);
        if (!src)
            return CAIRN_ENOMEM;
        int rc = memchr(s.p, 0, s.n) || !tok_utf8_valid(s.p, s.n)
                     ? tok_err(err, errlen, CAIRN_EFORMAT, "%s: chat template '%s' is not valid "
                               "UTF-8 text", gguf_what(g), name)
                     : tok_add_template(t, name, src);
        cairn_free(src);
        if (rc)
            return rc;
    }
    return 0;
}

/* The SentencePiece tables (spm.c): scores, byte tokens, the longest token. */
static int load_spm(cairn_tokenizer_t *t, const gguf_file_t *g, const gguf_kv_t *types,
                    char *err, size_t errlen)
{
    const char *what = gguf_what(g);
    const gguf_kv_t *scores;
    int rc;
    if ((rc = gguf_get_array(g, "tokenizer.ggml.scores", GGUF_TYPE_F32, false, &scores, err,
                             errlen)) ||
        (rc = gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", true, &t->spm.add_space_prefix,
                            err, errlen)))
        return rc;
    if (scores && scores->n != t->n_ids)
        return tok_err(err, errlen, CAIRN_EFORMAT, "%s: tokenizer.ggml.scores and tokens differ "
                       "in length", what);
    t->spm.scores = cairn_calloc(t->n_ids, sizeof *t->spm.scores);
    t->spm.byte_of = cairn_malloc(t->n_ids * sizeof *t->spm.byte_of);
    if (!t->spm.scores || !t->spm.byte_of)
        return CAIRN_ENOMEM;
    for (size_t i = 0; i < t->n_ids; i++) {
        if (scores)
            memcpy(&t->spm.scores[i], scores->data + 4 * i, 4);
        if (t->spm.scores[i] != t->spm.scores[i])
            return tok_err(err, errlen, CAIRN_EFORMAT, "%s: tokenizer.ggml.scores[%zu] is not a "
                           "number", what, i);
        if (t->text_len[i] > t->spm.max_len)
            t->spm.max_len = t->text_len[i];
        t->spm.byte_of[i] = -1;
        if (token_type(types, i) != TT_BYTE)
            continue;
        /* llama.cpp reads the byte as the hex digits after "<0x". */
        const char *x = t->text[i];
        unsigned v = 0;
        bool ok = t->text_len[i] == 6 && !memcmp(x, "<0x", 3) && x[5] == '>';
        for (int k = 3; ok && k < 5; k++) {
            char c = x[k];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            ok = d >= 0;
            v = v * 16 + (unsigned)(d >= 0 ? d : 0);
        }
        if (!ok)
            return tok_err(err, errlen, CAIRN_EFORMAT, "%s: byte token %zu ('%.16s') is not of "
                           "the form <0xHH>", what, i, x);
        t->spm.byte_of[i] = (int16_t)v;
    }
    /* Each byte's token, as llama.cpp's byte_to_token finds it. */
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        int32_t id = tok_strmap_get(&t->bpe.vocab, name, 6);
        if (id < 0 && b < 0x80) {
            char c = (char)b;
            id = tok_strmap_get(&t->bpe.vocab, &c, 1);
        }
        t->spm.byte_id[b] = id;
    }
    /* A byte without a token of its own becomes the unknown token (llama.cpp throws); there
     * is always one, as the id defaults to 0. */
    CAIRN_ASSERT(t->bpe.unk_id >= 0);
    t->spm.on = true;
    t->decoder = TOK_DEC_SPM;
    return 0;
}

int tok_load_gguf(const gguf_file_t *g, cairn_tokenizer_t **out, char *err, size_t errlen)
{
    const char *what = gguf_what(g);
    gguf_str_t model, pre_name;
    const gguf_kv_t *toks, *types, *merges = NULL;
    cJSON *norm = NULL, *pre = NULL;
    cairn_tokenizer_t *t = NULL;
    const pre_t *p = NULL;
    int rc;
    *out = NULL;
    if ((rc = gguf_get_str(g, "tokenizer.ggml.model", true, &model, err, errlen)))
        goto fail;
    bool spm = gguf_str_eq(model, "llama");
    if (!spm && !gguf_str_eq(model, "gpt2")) {
        rc = tok_err(err, errlen, CAIRN_EUNSUPPORTED, "%s: tokenizer.ggml.model \"%.*s\" is not "
                     "supported (only gpt2, byte-level BPE, and llama, SentencePiece)", what,
                     (int)(model.n > 32 ? 32 : model.n), model.p);
        goto fail;
    }
    if (!spm) {
        /* llama.cpp reads a file without the key as "default". */
        if ((rc = gguf_get_str(g, "tokenizer.ggml.pre", false, &pre_name, err, errlen)))
            goto fail;
        p = pre_name.p ? find_pre(pre_name) : find_pre((gguf_str_t){"default", 7});
        if (!p) {
            rc = tok_err(err, errlen, CAIRN_EUNSUPPORTED, "%s: tokenizer.ggml.pre \"%.*s\" is "
                         "not supported (known: qwen2, llama-bpe, gpt-4o, gpt-2, default)", what,
                         (int)(pre_name.n > 32 ? 32 : pre_name.n), pre_name.p);
            goto fail;
        }
    }
    if ((rc = gguf_get_array(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, true, &toks, err,
                             errlen)) ||
        (rc = gguf_get_array(g, "tokenizer.ggml.token_type", GGUF_TYPE_I32, false, &types, err,
                             errlen)) ||
        (!spm && (rc = gguf_get_array(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, true, &merges,
                                      err, errlen))))
        goto fail;
    if (toks->n == 0 || toks->n > (1u << 24) || (types && types->n != toks->n)) {
        rc = tok_err(err, errlen, CAIRN_EFORMAT, "%s: %s", what,
                     toks->n == 0 || toks->n > (1u << 24)
                         ? "tokenizer.ggml.tokens must hold 1 to 2^24 tokens"
                         : "tokenizer.ggml.token_type and tokens differ in length");
        goto fail;
    }
    if (!(t = tok_alloc())) {
        rc = CAIRN_ENOMEM;
        goto fail;
    }
    if (spm) {
        /* llama.cpp's SPM defaults: <unk> 0, <s> 1, </s> 2, BOS added. */
        specials_dflt_t d = {1, 2, 0, true};
        if ((rc = load_vocab(t, toks, types, true, what, err, errlen)) ||
            (rc = load_added(t, toks, types, true, err, errlen)) ||
            (rc = load_specials(t, g, d, err, errlen)) ||
            (rc = load_spm(t, g, types, err, errlen)) ||
            (rc = load_templates(t, g, err, errlen)))
            goto fail;
    } else {
        specials_dflt_t d = {-1, -1, -1, p->add_bos};
        t->bpe.ignore_merges = p->ignore_merges;
        t->decoder = TOK_DEC_BYTELEVEL;
        if ((rc = load_vocab(t, toks, types, false, what, err, errlen)) ||
            (rc = load_merges(t, merges, what, err, errlen)) ||
            (rc = build_sections(p, &norm, &pre)) ||
            (rc = tok_pipeline_load(t, norm, pre, err, errlen)) ||
            (rc = load_added(t, toks, types, false, err, errlen)) ||
            (rc = load_specials(t, g, d, err, errlen)) ||
            (rc = load_templates(t, g, err, errlen)) || (rc = tok_bpe_init_tables(t)))
            goto fail;
    }
    cJSON_Delete(norm);
    cJSON_Delete(pre);
    *out = t;
    return 0;
fail:
    if (rc == CAIRN_ENOMEM)
        tok_err(err, errlen, rc, "%s: out of memory", what);
    cJSON_Delete(norm);
    cJSON_Delete(pre);
    cairn_tokenizer_destroy(t);
    return rc;
}

int tok_load_gguf_file(const char *path, cairn_tokenizer_t **out, char *err, size_t errlen)
{
    gguf_file_t *g = NULL;
    int rc = gguf_open(path, GGUF_OPEN_METADATA, &g, err, errlen);
    if (rc)
        return rc;
    rc = tok_load_gguf(g, out, err, errlen);
    gguf_close(g);
    return rc;
}
