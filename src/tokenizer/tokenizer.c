/*
 * tokenizer.c — loading tokenizer.json (+ tokenizer_config.json, chat_template.jinja), the
 * encode driver and the small public accessors. A GGUF file is handed to
 * tokenizer_gguf.c, which builds the same structures from its metadata.
 *
 * Loading: one scan finds the top-level sections; model.vocab and model.merges go through
 * the fast scanner (json_scan.c) straight into the vocab arena and hash maps; the small
 * sections are parsed with cJSON. Every feature not implemented is rejected with
 * CAIRN_EUNSUPPORTED and a message naming it, so a tokenizer either loads and matches the
 * reference implementation or does not load at all.
 *
 * Encode: added tokens (not normalized) split the raw text; each plain segment is
 * normalized, split again at normalized added tokens, pre-tokenized and BPE-encoded; the
 * post-processor's ids go around the result when asked.
 *
 * Ownership: the tokenizer owns every string it returns; all of it is freed by
 * cairn_tokenizer_destroy. Thread-safety: immutable after load (see tok_internal.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "tokenizer/tok_internal.h"
#include "util/json.h"

static void *pcre_alloc(PCRE2_SIZE n, void *user)
{
    (void)user;
    return cairn_malloc(n);
}

static void pcre_free(void *p, void *user)
{
    (void)user;
    cairn_free(p);
}

static int read_file(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    int rc;
    if (!f) {
        return tok_err(err, errlen, errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO, "%s: %s", path,
                       strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = tok_err(err, errlen, CAIRN_EIO, "%s: not a regular file", path);
        goto fail;
    }
    buf = cairn_malloc((size_t)st.st_size + 1);
    if (!buf) { rc = CAIRN_ENOMEM; goto fail; }
    if (st.st_size && fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        rc = tok_err(err, errlen, CAIRN_EIO, "%s: read failed", path);
        goto fail;
    }
    buf[st.st_size] = '\0';
    fclose(f);
    *out = buf;
    *len = (size_t)st.st_size;
    return 0;
fail:
    cairn_free(buf);
    fclose(f);
    return rc;
}

cairn_tokenizer_t *tok_alloc(void)
{
    cairn_tokenizer_t *t = cairn_calloc(1, sizeof *t);
    if (!t) return NULL;
    t->jit_ok = true;
    t->gctx = pcre2_general_context_create(pcre_alloc, pcre_free, NULL);
    if (!t->gctx) {
        cairn_free(t);
        return NULL;
    }
    return t;
}

/* Parses json[off, off+len) with cJSON; NULL with *rc set on failure (absent: no error):
 * CAIRN_ENOMEM when an allocation failed, CAIRN_EFORMAT when the text is malformed. */
static cJSON *parse_part(const char *json, size_t off, size_t len, int *rc)
{
    *rc = 0;
    if (!len) return NULL;
    cJSON *j = NULL;
    *rc = cairn_json_parse(json + off, len, NULL, &j, NULL);
    return j;
}

static int grow_ids(cairn_tokenizer_t *t, size_t n)
{
    if (n <= t->n_ids) return 0;
    char **nt = cairn_realloc(t->text, n * sizeof *nt);
    if (!nt) return CAIRN_ENOMEM;
    t->text = nt;
    uint32_t *nl = cairn_realloc(t->text_len, n * sizeof *nl);
    if (!nl) return CAIRN_ENOMEM;
    t->text_len = nl;
    for (size_t i = t->n_ids; i < n; i++) { t->text[i] = NULL; t->text_len[i] = 0; }
    t->n_ids = n;
    return 0;
}

static int cmp_len_desc(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int tok_load_added(cairn_tokenizer_t *t, const cJSON *arr, char *err, size_t errlen)
{
    int rc = 0;
    if (!arr || cJSON_IsNull(arr)) goto index;
    if (!cJSON_IsArray(arr)) return tok_err(err, errlen, CAIRN_EFORMAT, "added_tokens is not a list");
    size_t n = (size_t)cJSON_GetArraySize(arr);
    t->added = cairn_calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return CAIRN_ENOMEM;
    const cJSON *e;
    /* Grow the id table once, to the largest added id. */
    double max_id = -1;
    cJSON_ArrayForEach(e, arr) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (cJSON_IsNumber(id) && id->valuedouble > max_id && id->valuedouble < (1 << 24)) max_id = id->valuedouble;
    }
    if (max_id >= 0 && (rc = grow_ids(t, (size_t)max_id + 1))) return rc;
    cJSON_ArrayForEach(e, arr) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) ||
            !cJSON_IsString(content) || !content->valuestring[0])
            return tok_err(err, errlen, CAIRN_EFORMAT, "added_tokens entry without a valid id and content");
        if (!tok_utf8_valid(content->valuestring, strlen(content->valuestring)))
            return tok_err(err, errlen, CAIRN_EFORMAT, "added token %d is not valid UTF-8", (int)id->valuedouble);
        tok_added_t *a = &t->added[t->n_added++];
        a->id = (int32_t)id->valuedouble;
        a->len = strlen(content->valuestring);
        if (!(a->content = cairn_strdup(content->valuestring))) return CAIRN_ENOMEM;
        const cJSON *f;
#define FLAG(name) (f = cJSON_GetObjectItemCaseSensitive(e, #name), cJSON_IsTrue(f))
        a->special = FLAG(special);
        a->single_word = FLAG(single_word);
        a->lstrip = FLAG(lstrip);
        a->rstrip = FLAG(rstrip);
        a->normalized = FLAG(normalized);
#undef FLAG
        if (a->normalized && t->n_norms) {
            tok_buf_t nb = {0};
            if ((rc = tok_normalize(t, a->content, a->len, &nb))) { cairn_free(nb.p); return rc; }
            a->match = nb.p;
            a->match_len = nb.len;
        } else {
            if (!(a->match = cairn_strdup(a->content))) return CAIRN_ENOMEM;
            a->match_len = a->len;
        }
        if ((rc = grow_ids(t, (size_t)a->id + 1))) return rc;
        t->text[a->id] = a->content;
        t->text_len[a->id] = (uint32_t)a->len;
    }
index:
    t->is_special = cairn_calloc(t->n_ids ? t->n_ids : 1, 1);
    if (!t->is_special) return CAIRN_ENOMEM;
    for (int cls = 0; cls < 2; cls++) {
        size_t cnt = 0;
        for (size_t i = 0; i < t->n_added; i++) cnt += t->added[i].normalized == (cls == 1);
        if ((rc = tok_strmap_init(&t->added_map[cls], cnt))) return rc;
        t->added_lens[cls] = cairn_malloc((cnt ? cnt : 1) * sizeof(size_t));
        if (!t->added_lens[cls]) return CAIRN_ENOMEM;
        /* Insert in reverse so that, for equal strings, the first entry wins. */
        for (size_t i = t->n_added; i-- > 0;) {
            tok_added_t *a = &t->added[i];
            if (a->normalized != (cls == 1) || !a->match_len) continue;
            tok_strmap_put(&t->added_map[cls], a->match, a->match_len, (int32_t)i);
            t->added_first[cls][(unsigned char)a->match[0]] = 1;
            bool seen = false;
            for (size_t k = 0; k < t->n_added_lens[cls]; k++) seen |= t->added_lens[cls][k] == a->match_len;
            if (!seen) t->added_lens[cls][t->n_added_lens[cls]++] = a->match_len;
        }
        qsort(t->added_lens[cls], t->n_added_lens[cls], sizeof(size_t), cmp_len_desc);
    }
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].special) t->is_special[t->added[i].id] = 1;
    return 0;
}

static int push_ids(int32_t **arr, size_t *n, const int32_t *ids, size_t k)
{
    int32_t *p = cairn_realloc(*arr, (*n + k + 1) * sizeof *p);
    if (!p) return CAIRN_ENOMEM;
    memcpy(p + *n, ids, k * sizeof *p);
    *arr = p;
    *n += k;
    return 0;
}

/* Reads ["token", id] (Roberta/Bert cls and sep). */
static int pair_id(const cJSON *j, const char *key, int32_t *id, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    const cJSON *x = cJSON_GetArrayItem(v, 1);
    if (!cJSON_IsArray(v) || !cJSON_IsNumber(x) || x->valuedouble < 0)
        return tok_err(err, errlen, CAIRN_EFORMAT, "post_processor '%s' is not [token, id]", key);
    *id = (int32_t)x->valuedouble;
    return 0;
}

static int load_post(cairn_tokenizer_t *t, const cJSON *j, int depth, char *err, size_t errlen)
{
    if (!j || cJSON_IsNull(j)) return 0;
    const cJSON *tv = cJSON_GetObjectItemCaseSensitive(j, "type");
    const char *type = cJSON_IsString(tv) ? tv->valuestring : NULL;
    int rc;
    if (!type || depth > 8) return tok_err(err, errlen, CAIRN_EFORMAT, "post_processor without a type");
    if (strcmp(type, "ByteLevel") == 0) return 0; /* only adjusts offsets */
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *e, *arr = cJSON_GetObjectItemCaseSensitive(j, "processors");
        if (!cJSON_IsArray(arr)) return tok_err(err, errlen, CAIRN_EFORMAT, "post_processor Sequence without a list");
        cJSON_ArrayForEach(e, arr)
            if ((rc = load_post(t, e, depth + 1, err, errlen))) return rc;
        return 0;
    }
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        int32_t cls, sep;
        if ((rc = pair_id(j, "cls", &cls, err, errlen)) || (rc = pair_id(j, "sep", &sep, err, errlen)))
            return rc;
        if (push_ids(&t->post_prefix, &t->n_post_prefix, &cls, 1) ||
            push_ids(&t->post_suffix, &t->n_post_suffix, &sep, 1))
            return CAIRN_ENOMEM;
        return 0;
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        return tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported post_processor type '%s'", type);
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
    const cJSON *e;
    bool seen_seq = false;
    if (!cJSON_IsArray(single)) return tok_err(err, errlen, CAIRN_EFORMAT, "TemplateProcessing without 'single'");
    cJSON_ArrayForEach(e, single) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        if (cJSON_GetObjectItemCaseSensitive(e, "Sequence")) {
            if (seen_seq) return tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported TemplateProcessing with two sequences in 'single'");
            seen_seq = true;
            continue;
        }
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
        if (!cJSON_IsString(name)) return tok_err(err, errlen, CAIRN_EFORMAT, "TemplateProcessing item without a token");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(specials, name->valuestring);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(st, "ids"), *x;
        if (!cJSON_IsArray(ids))
            return tok_err(err, errlen, CAIRN_EFORMAT, "TemplateProcessing token '%s' has no ids", name->valuestring);
        cJSON_ArrayForEach(x, ids) {
            if (!cJSON_IsNumber(x) || x->valuedouble < 0) return tok_err(err, errlen, CAIRN_EFORMAT, "TemplateProcessing id is not a number");
            int32_t v = (int32_t)x->valuedouble;
            if (seen_seq ? push_ids(&t->post_suffix, &t->n_post_suffix, &v, 1)
                         : push_ids(&t->post_prefix, &t->n_post_prefix, &v, 1))
                return CAIRN_ENOMEM;
        }
    }
    return 0;
}

static int load_decoder(cairn_tokenizer_t *t, const cJSON *j, char *err, size_t errlen)
{
    t->decoder = TOK_DEC_NONE;
    if (!j || cJSON_IsNull(j)) return 0;
    const cJSON *tv = cJSON_GetObjectItemCaseSensitive(j, "type");
    const char *type = cJSON_IsString(tv) ? tv->valuestring : "";
    if (strcmp(type, "ByteLevel") == 0) { t->decoder = TOK_DEC_BYTELEVEL; return 0; }
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *e, *arr = cJSON_GetObjectItemCaseSensitive(j, "decoders");
        size_t n = 0;
        cJSON_ArrayForEach(e, arr) {
            const cJSON *et = cJSON_GetObjectItemCaseSensitive(e, "type");
            const char *ets = cJSON_IsString(et) ? et->valuestring : "";
            if (strcmp(ets, "ByteLevel") != 0)
                return tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported decoder type '%s'", ets);
            n++;
        }
        if (n) t->decoder = TOK_DEC_BYTELEVEL;
        return 0;
    }
    return tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported decoder type '%s'", type);
}

typedef struct {
    cairn_tokenizer_t *t;
    char *err;
    size_t errlen;
    bool have_vocab, have_merges;
} model_ctx_t;

/* Parses vocab and merges in place during the model scan (one pass over the big data);
 * merges listed before the vocab are left for after the scan. */
static int model_hook(void *user, size_t index, const char *json, size_t len, size_t off,
                      size_t *end)
{
    model_ctx_t *mc = user;
    size_t used = 0;
    int rc;
    if (index == 1) {
        if (json[off] != '{') return 1; /* reported after the type check */
        if ((rc = tok_json_load_vocab(mc->t, json + off, len - off, &used, mc->err, mc->errlen))) return rc;
        mc->have_vocab = true;
    } else if (index == 2 && mc->have_vocab) {
        if ((rc = tok_json_load_merges(mc->t, json + off, len - off, &used, mc->err, mc->errlen))) return rc;
        mc->have_merges = true;
    } else {
        return 1;
    }
    *end = off + used;
    return 0;
}

/* Validates the BPE model options and loads vocab and merges from the model object at
 * json[0] (len bytes available); *end receives the bytes the object spans. */
static int load_model(cairn_tokenizer_t *t, const char *m, size_t len, size_t *end,
                      char *err, size_t errlen)
{
    static const char *const names[] = {
        "type", "vocab", "merges", "dropout", "unk_token", "continuing_subword_prefix",
        "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges",
    };
    enum { N = sizeof names / sizeof names[0] };
    size_t vo[N], vl[N];
    cJSON *v[N] = {0};
    model_ctx_t mc = {t, err, errlen, false, false};
    int rc;
    if ((rc = tok_json_members(m, len, names, N, vo, vl, model_hook, &mc, end))) {
        if (rc == CAIRN_EFORMAT && err && errlen && !err[0]) tok_err(err, errlen, rc, "model is not a JSON object");
        return rc;
    }
    for (int i = 0; i < N; i++) {
        if (i == 1 || i == 2) continue;
        v[i] = parse_part(m, vo[i], vl[i], &rc);
        if (rc) {
            rc = tok_err(err, errlen, rc, "model.%s %s", names[i],
                         rc == CAIRN_ENOMEM ? "could not be parsed: out of memory" : "is malformed");
            goto fail;
        }
    }
    if (v[0] && (!cJSON_IsString(v[0]) || strcmp(v[0]->valuestring, "BPE") != 0)) {
        rc = tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported model type '%s'",
                     cJSON_IsString(v[0]) ? v[0]->valuestring : "?");
        goto fail;
    }
    if (!vl[1] || !vl[2]) {
        rc = tok_err(err, errlen, CAIRN_EFORMAT, "model has no %s", vl[1] ? "merges" : "vocab");
        goto fail;
    }
    if (!mc.have_vocab) {
        rc = tok_err(err, errlen, CAIRN_EFORMAT, "model.vocab is not an object");
        goto fail;
    }
    if (v[3] && !cJSON_IsNull(v[3]) && !(cJSON_IsNumber(v[3]) && v[3]->valuedouble == 0.0)) {
        rc = tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported BPE option 'dropout'");
        goto fail;
    }
    for (int i = 5; i <= 6; i++) {
        if (v[i] && !cJSON_IsNull(v[i]) && !(cJSON_IsString(v[i]) && !v[i]->valuestring[0])) {
            rc = tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported BPE option '%s'", names[i]);
            goto fail;
        }
    }
    if (cJSON_IsTrue(v[8])) {
        rc = tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported BPE option 'byte_fallback'");
        goto fail;
    }
    t->bpe.fuse_unk = cJSON_IsTrue(v[7]);
    t->bpe.ignore_merges = cJSON_IsTrue(v[9]);
    if (!mc.have_merges) {
        size_t used;
        if ((rc = tok_json_load_merges(t, m + vo[2], vl[2], &used, err, errlen))) goto fail;
    }
    t->bpe.unk_id = -1;
    if (cJSON_IsString(v[4]))
        t->bpe.unk_id = tok_strmap_get(&t->bpe.vocab, v[4]->valuestring, strlen(v[4]->valuestring));
fail:
    for (int i = 0; i < N; i++) cJSON_Delete(v[i]);
    return rc;
}

typedef struct {
    cairn_tokenizer_t *t;
    char *err;
    size_t errlen;
    bool loaded;
} top_ctx_t;

static int top_hook(void *user, size_t index, const char *json, size_t len, size_t off,
                    size_t *end)
{
    top_ctx_t *tc = user;
    if (index != 0 || tc->loaded) return 1;
    size_t used = 0;
    int rc = load_model(tc->t, json + off, len - off, &used, tc->err, tc->errlen);
    if (rc) return rc;
    tc->loaded = true;
    *end = off + used;
    return 0;
}

int cairn_tokenizer_load_json(const char *json, size_t len, cairn_tokenizer_t **out,
                              char *err, size_t errlen)
{
    static const char *const names[] = {
        "model", "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder",
        "truncation", "padding",
    };
    enum { N = sizeof names / sizeof names[0] };
    size_t vo[N], vl[N];
    cJSON *v[N] = {0};
    cairn_tokenizer_t *t = NULL;
    int rc;

    if (!json || !out) return tok_err(err, errlen, CAIRN_EINVAL, "NULL argument");
    *out = NULL;
    cairn_init();
    if (err && errlen) err[0] = '\0';
    if (!(t = tok_alloc())) return CAIRN_ENOMEM;
    top_ctx_t tc = {t, err, errlen, false};
    if ((rc = tok_json_members(json, len, names, N, vo, vl, top_hook, &tc, NULL))) {
        if (rc == CAIRN_EFORMAT && err && errlen && !err[0])
            rc = tok_err(err, errlen, rc, "tokenizer.json is not a JSON object");
        goto fail;
    }
    for (int i = 1; i < N; i++) {
        v[i] = parse_part(json, vo[i], vl[i], &rc);
        if (rc) {
            rc = tok_err(err, errlen, rc, "tokenizer.json section '%s' %s", names[i],
                         rc == CAIRN_ENOMEM ? "could not be parsed: out of memory" : "is malformed");
            goto fail;
        }
    }
    if (v[6] && !cJSON_IsNull(v[6])) {
        rc = tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported tokenizer option 'truncation'");
        goto fail;
    }
    if (v[7] && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetObjectItemCaseSensitive(v[7], "strategy"), "Fixed"))) {
        rc = tok_err(err, errlen, CAIRN_EUNSUPPORTED, "unsupported tokenizer option 'padding' with a Fixed length");
        goto fail;
    }
    if (!tc.loaded) { rc = tok_err(err, errlen, CAIRN_EFORMAT, "tokenizer.json has no model"); goto fail; }
    if ((rc = tok_pipeline_load(t, v[2], v[3], err, errlen))) goto fail;
    if ((rc = tok_load_added(t, v[1], err, errlen))) goto fail;
    if ((rc = load_post(t, v[4], 0, err, errlen))) goto fail;
    if ((rc = load_decoder(t, v[5], err, errlen))) goto fail;
    for (size_t i = 0; i < t->n_post_prefix + t->n_post_suffix; i++) {
        int32_t id = i < t->n_post_prefix ? t->post_prefix[i] : t->post_suffix[i - t->n_post_prefix];
        if ((size_t)id >= t->n_ids || !t->text[id]) {
            rc = tok_err(err, errlen, CAIRN_EFORMAT, "post_processor id %d is not in the vocab", (int)id);
            goto fail;
        }
    }
    if ((rc = tok_bpe_init_tables(t))) goto fail;
    for (int i = 0; i < N; i++) cJSON_Delete(v[i]);
    *out = t;
    return 0;
fail:
    if (rc == CAIRN_ENOMEM && err && errlen && !err[0]) tok_err(err, errlen, rc, "out of memory");
    for (int i = 0; i < N; i++) cJSON_Delete(v[i]);
    cairn_tokenizer_destroy(t);
    return rc;
}

static char *token_string(const cJSON *v)
{
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int tok_add_template(cairn_tokenizer_t *t, const char *name, const char *src)
{
    for (size_t i = 0; i < t->n_templates; i++)
        if (strcmp(t->tmpl_names[i], name) == 0) return 0; /* first source wins */
    char **nn = cairn_realloc(t->tmpl_names, (t->n_templates + 1) * sizeof *nn);
    if (!nn) return CAIRN_ENOMEM;
    t->tmpl_names = nn;
    char **ns = cairn_realloc(t->tmpl_sources, (t->n_templates + 1) * sizeof *ns);
    if (!ns) return CAIRN_ENOMEM;
    t->tmpl_sources = ns;
    char *a = cairn_strdup(name), *b = cairn_strdup(src);
    if (!a || !b) { cairn_free(a); cairn_free(b); return CAIRN_ENOMEM; }
    t->tmpl_names[t->n_templates] = a;
    t->tmpl_sources[t->n_templates] = b;
    t->n_templates++;
    return 0;
}

static int join_path(char *out, size_t cap, const char *dir, const char *name, char *err,
                     size_t errlen)
{
    int k = snprintf(out, cap, "%s/%s", dir, name);
    if (k < 0 || (size_t)k >= cap) return tok_err(err, errlen, CAIRN_ERANGE, "path too long: %s", dir);
    return 0;
}

/* Reads tokenizer_config.json and chat_template.jinja from dir (both optional). */
static int load_config(cairn_tokenizer_t *t, const char *dir, char *err, size_t errlen)
{
    char path[4096];
    char *buf = NULL;
    size_t len;
    cJSON *j = NULL;
    int rc;

    if ((rc = join_path(path, sizeof path, dir, "chat_template.jinja", err, errlen))) return rc;
    rc = read_file(path, &buf, &len, err, errlen);
    if (rc == 0) {
        rc = tok_add_template(t, "default", buf);
        cairn_free(buf);
        buf = NULL;
        if (rc) goto fail;
    } else if (rc != CAIRN_ENOENT) {
        goto fail;
    }
    if (err && errlen) err[0] = '\0';
    if ((rc = join_path(path, sizeof path, dir, "tokenizer_config.json", err, errlen))) goto fail;
    rc = read_file(path, &buf, &len, err, errlen);
    if (rc == CAIRN_ENOENT) {
        if (err && errlen) err[0] = '\0';
        return 0;
    }
    if (rc) goto fail;
    rc = cairn_json_parse(buf, len, NULL, &j, NULL);
    if (rc == CAIRN_ENOMEM) {
        rc = tok_err(err, errlen, rc, "%s: out of memory", path);
        goto fail;
    }
    if (rc || !cJSON_IsObject(j)) {
        rc = tok_err(err, errlen, CAIRN_EFORMAT, "%s: malformed JSON", path);
        goto fail;
    }
    const char *bos = token_string(cJSON_GetObjectItemCaseSensitive(j, "bos_token"));
    const char *eos = token_string(cJSON_GetObjectItemCaseSensitive(j, "eos_token"));
    if (bos && !(t->bos_token = cairn_strdup(bos))) { rc = CAIRN_ENOMEM; goto fail; }
    if (eos && !(t->eos_token = cairn_strdup(eos))) { rc = CAIRN_ENOMEM; goto fail; }
    t->add_bos_token = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "add_bos_token"));
    t->add_eos_token = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "add_eos_token"));
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(j, "chat_template"), *e;
    if (cJSON_IsString(ct)) {
        if ((rc = tok_add_template(t, "default", ct->valuestring))) goto fail;
    } else if (cJSON_IsArray(ct)) {
        cJSON_ArrayForEach(e, ct) {
            const char *name = token_string(cJSON_GetObjectItemCaseSensitive(e, "name"));
            const char *src = token_string(cJSON_GetObjectItemCaseSensitive(e, "template"));
            if (!name || !src) {
                rc = tok_err(err, errlen, CAIRN_EFORMAT, "%s: chat_template entry without name and template", path);
                goto fail;
            }
            if ((rc = tok_add_template(t, name, src))) goto fail;
        }
    }
    rc = 0;
fail:
    cJSON_Delete(j);
    cairn_free(buf);
    return rc;
}

int cairn_tokenizer_load(const char *path, cairn_tokenizer_t **out, char *err, size_t errlen)
{
    char file[4096], dir[4096];
    struct stat st;
    int rc;

    if (!path || !out) return tok_err(err, errlen, CAIRN_EINVAL, "NULL argument");
    *out = NULL;
    cairn_init();
    if (stat(path, &st) != 0)
        return tok_err(err, errlen, errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO, "%s: %s", path,
                       strerror(errno));
    if (strlen(path) >= sizeof dir) return tok_err(err, errlen, CAIRN_ERANGE, "path too long");
    if (S_ISREG(st.st_mode) && gguf_file_is_gguf(path)) return tok_load_gguf_file(path, out, err, errlen);
    if (S_ISDIR(st.st_mode)) {
        strcpy(dir, path);
        if ((rc = join_path(file, sizeof file, path, "tokenizer.json", err, errlen))) return rc;
    } else {
        strcpy(file, path);
        const char *slash = strrchr(path, '/');
        if (slash) {
            memcpy(dir, path, (size_t)(slash - path));
            dir[slash - path] = '\0';
        } else {
            strcpy(dir, ".");
        }
    }
    /* Map the file rather than read it: a pre-populated mapping of a 10 MB file costs far
     * less than faulting in a fresh heap buffer of the same size. */
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tok_err(err, errlen, errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO, "%s: %s", file,
                       strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        close(fd);
        return tok_err(err, errlen, CAIRN_EIO, "%s: not a readable, non-empty file", file);
    }
    size_t len = (size_t)st.st_size;
    void *json = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (json == MAP_FAILED) return tok_err(err, errlen, CAIRN_EIO, "%s: mmap failed", file);
    rc = cairn_tokenizer_load_json(json, len, out, err, errlen);
    munmap(json, len);
    if (rc) return rc;
    if ((rc = load_config(*out, dir, err, errlen))) {
        cairn_tokenizer_destroy(*out);
        *out = NULL;
    }
    return rc;
}

void cairn_tokenizer_destroy(cairn_tokenizer_t *t)
{
    if (!t) return;
    tok_bpe_fini(&t->bpe);
    tok_pipeline_fini(t);
    for (size_t i = 0; i < t->n_added; i++) {
        cairn_free(t->added[i].content);
        cairn_free(t->added[i].match);
    }
    cairn_free(t->added);
    for (int c = 0; c < 2; c++) {
        tok_strmap_free(&t->added_map[c]);
        cairn_free(t->added_lens[c]);
    }
    for (size_t i = 0; i < t->n_templates; i++) {
        cairn_free(t->tmpl_names[i]);
        cairn_free(t->tmpl_sources[i]);
    }
    cairn_free(t->tmpl_names);
    cairn_free(t->tmpl_sources);
    cairn_free(t->bos_token);
    cairn_free(t->eos_token);
    cairn_free(t->post_prefix);
    cairn_free(t->post_suffix);
    cairn_free(t->text);
    cairn_free(t->text_len);
    cairn_free(t->is_special);
    cairn_free(t->spm.scores);
    cairn_free(t->spm.byte_of);
    cairn_free(t->arena);
    pcre2_general_context_free(t->gctx);
    cairn_free(t);
}

/* Encodes one plain segment (no non-normalized added token inside). */
static int encode_segment(const cairn_tokenizer_t *t, bool split_special, const char *s,
                          size_t n, tok_ids_t *out)
{
    tok_buf_t nb = {0};
    tok_spans_t segs = {0};
    tok_ids_t seg_ids = {0};
    int rc;
    if (t->n_norms) {
        if ((rc = tok_normalize(t, s, n, &nb))) goto fail;
        s = nb.p;
        n = nb.len;
    }
    if (!t->n_added_lens[1]) {
        rc = tok_pretokenize_encode(t, s, n, out);
        goto fail;
    }
    if ((rc = tok_split_added(t, 1, split_special, s, n, &segs, &seg_ids))) goto fail;
    for (size_t i = 0; i < segs.len; i++) {
        if (seg_ids.p[i] >= 0) rc = tok_ids_push(out, seg_ids.p[i]);
        else rc = tok_pretokenize_encode(t, s + segs.p[i].off, segs.p[i].len, out);
        if (rc) goto fail;
    }
fail:
    cairn_free(nb.p);
    cairn_free(segs.p);
    cairn_free(seg_ids.p);
    return rc;
}

int cairn_tokenizer_encode_ex(const cairn_tokenizer_t *t, const char *text, size_t len,
                              unsigned flags, int32_t **ids, size_t *n_ids)
{
    tok_spans_t segs = {0};
    tok_ids_t seg_ids = {0}, out = {0};
    int rc;
    bool split_special = flags & CAIRN_TOKENIZE_SPLIT_SPECIAL;

    if (!t || (!text && len) || !ids || !n_ids) return CAIRN_EINVAL;
    *ids = NULL;
    *n_ids = 0;
    if (len && !tok_utf8_valid(text, len)) return CAIRN_EINVAL;
    /* English runs ~3.5-4.5 bytes per token: one allocation avoids regrowing. */
    out.cap = len / 3 + 16;
    if (!(out.p = cairn_malloc(out.cap * sizeof *out.p))) return CAIRN_ENOMEM;
    if (flags & CAIRN_TOKENIZE_ADD_SPECIAL)
        for (size_t i = 0; i < t->n_post_prefix; i++)
            if ((rc = tok_ids_push(&out, t->post_prefix[i]))) goto fail;
    if (t->spm.on) {
        if ((rc = tok_spm_encode(t, split_special, text, len, &out))) goto fail;
    } else if (len && !t->n_added_lens[0]) {
        if ((rc = encode_segment(t, split_special, text, len, &out))) goto fail;
    } else if (len) {
        if ((rc = tok_split_added(t, 0, split_special, text, len, &segs, &seg_ids))) goto fail;
        for (size_t i = 0; i < segs.len; i++) {
            if (seg_ids.p[i] >= 0) rc = tok_ids_push(&out, seg_ids.p[i]);
            else rc = encode_segment(t, split_special, text + segs.p[i].off, segs.p[i].len, &out);
            if (rc) goto fail;
        }
    }
    if (flags & CAIRN_TOKENIZE_ADD_SPECIAL)
        for (size_t i = 0; i < t->n_post_suffix; i++)
            if ((rc = tok_ids_push(&out, t->post_suffix[i]))) goto fail;
    cairn_free(segs.p);
    cairn_free(seg_ids.p);
    *ids = out.p;
    *n_ids = out.len;
    return 0;
fail:
    cairn_free(segs.p);
    cairn_free(seg_ids.p);
    cairn_free(out.p);
    return rc;
}

int cairn_tokenizer_encode(const cairn_tokenizer_t *t, const char *text, size_t len,
                           bool add_special, int32_t **ids, size_t *n_ids)
{
    return cairn_tokenizer_encode_ex(t, text, len, add_special ? CAIRN_TOKENIZE_ADD_SPECIAL : 0,
                                     ids, n_ids);
}

size_t cairn_tokenizer_vocab_size(const cairn_tokenizer_t *t)
{
    return t ? t->n_ids : 0;
}

const char *cairn_tokenizer_token_text(const cairn_tokenizer_t *t, int32_t id)
{
    if (!t || id < 0 || (size_t)id >= t->n_ids) return NULL;
    return t->text[id];
}

int32_t cairn_tokenizer_piece_to_id(const cairn_tokenizer_t *t, const char *piece)
{
    if (!t || !piece) return -1;
    size_t n = strlen(piece);
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && memcmp(t->added[i].content, piece, n) == 0)
            return t->added[i].id;
    return tok_strmap_get(&t->bpe.vocab, piece, n);
}

bool cairn_tokenizer_is_special(const cairn_tokenizer_t *t, int32_t id)
{
    return t && id >= 0 && (size_t)id < t->n_ids && t->is_special[id];
}

const char *cairn_tokenizer_bos_token(const cairn_tokenizer_t *t) { return t ? t->bos_token : NULL; }
const char *cairn_tokenizer_eos_token(const cairn_tokenizer_t *t) { return t ? t->eos_token : NULL; }

int32_t cairn_tokenizer_bos_id(const cairn_tokenizer_t *t)
{
    return t && t->bos_token ? cairn_tokenizer_piece_to_id(t, t->bos_token) : -1;
}

int32_t cairn_tokenizer_eos_id(const cairn_tokenizer_t *t)
{
    return t && t->eos_token ? cairn_tokenizer_piece_to_id(t, t->eos_token) : -1;
}

const char *cairn_tokenizer_chat_template(const cairn_tokenizer_t *t, const char *name)
{
    if (!t) return NULL;
    if (!name) name = "default";
    for (size_t i = 0; i < t->n_templates; i++)
        if (strcmp(t->tmpl_names[i], name) == 0) return t->tmpl_sources[i];
    return NULL;
}
