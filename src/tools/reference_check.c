/*
 * reference_check.c — `cairn check-reference` as a library: the engine against the
 * outputs of HF transformers or llama.cpp (tools/reference_check.h).
 *
 * The JSON is read generically (any case names, any vocab: a logits file must hold
 * exactly positions x vocab float32 values, read plain or through liblzma from its .xz
 * twin). Each (case, K/V path) pair becomes one report entry;
 * every problem — a missing file, a malformed field, an engine error, a mismatch — is
 * recorded in that entry and makes it fail, so `N passed, N failed` accounts for all of it.
 * Each path gets its own engine, shared by the cases in file order, so on the paged path a
 * later case whose prompt extends an earlier one's prefix is served from the cache (and
 * its last logits still have to match).
 *
 * Thread-safety: none needed (one call owns everything it creates).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <lzma.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tools/reference_check.h"
#include "util/json.h"

#define REF_JSON_MAX ((size_t)256 << 20)

/* One case of a reference file, decoded. */
typedef struct {
    const char *name;
    bool peer;                          /* llama.cpp layout */
    int32_t *prompt;  int n_prompt;
    int32_t *argmax;  float *margin;    /* [n_prompt] teacher-forced */
    int32_t *greedy;  float *gmargin;   /* [n_greedy] (HF layout) */
    int n_greedy;
    int *pos;         int n_pos;        /* reference logits positions, ascending */
    float *logits;                      /* [n_pos][vocab] */
} ref_case_t;

void refcheck_options_default(refcheck_options_t *o)
{
    o->n_threads = 1;
    o->kv_dtype = CAIRN_DTYPE_F32;
    o->math = CAIRN_ENGINE_MATH_F32;
    o->max_abs_tol = 2e-3f;
    o->min_margin = 1e-3f;
    o->peer_max_abs_tol = 0.1f;
    o->peer_min_margin = 0.25f;
    o->backend = NULL;
}

void refcheck_report_free(refcheck_report_t *rep)
{
    cairn_free(rep->cases);
    memset(rep, 0, sizeof(*rep));
}

static void fail_case(refcheck_case_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_case(refcheck_case_t *c, const char *fmt, ...)
{
    c->passed = false;
    if (c->error[0])
        return; /* keep the first problem */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof(c->error), fmt, ap);
    va_end(ap);
}

static refcheck_case_t *add_entry(refcheck_report_t *rep, const char *name, cairn_kv_path_t path)
{
    refcheck_case_t *p = cairn_realloc(rep->cases, (size_t)(rep->n_cases + 1) * sizeof(*p));
    if (!p)
        return NULL;
    rep->cases = p;
    refcheck_case_t *c = &p[rep->n_cases++];
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->path = path;
    c->passed = true;
    c->first_bad_pos = -1;
    return c;
}

/* Reads a whole file (at most max bytes) into a NUL-terminated buffer. */
static int read_file(const char *path, size_t max, char **out, size_t *len)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO;
    int rc = CAIRN_EIO;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0)
        goto fail;
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0)
        goto fail;
    if ((size_t)size > max) {
        rc = CAIRN_ERANGE;
        goto fail;
    }
    buf = cairn_malloc((size_t)size + 1);
    if (!buf) {
        rc = CAIRN_ENOMEM;
        goto fail;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size)
        goto fail;
    buf[size] = 0;
    fclose(f);
    *out = buf;
    *len = (size_t)size;
    return CAIRN_OK;
fail:
    cairn_free(buf);
    fclose(f);
    return rc;
}

/*
 * Decompresses the .xz file at path into out[0..want): it must hold exactly want bytes.
 * CAIRN_ENOENT (no file), CAIRN_ERANGE (another size), CAIRN_EFORMAT (not xz), CAIRN_EIO,
 * CAIRN_ENOMEM.
 */
static int read_xz(const char *path, uint8_t *out, size_t want)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO;
    lzma_stream z = LZMA_STREAM_INIT;
    int rc = CAIRN_EFORMAT;
    if (lzma_stream_decoder(&z, UINT64_MAX, 0) != LZMA_OK) {
        fclose(f);
        return CAIRN_ENOMEM;
    }
    uint8_t in[1 << 16], spill[64];
    z.next_out = out;
    z.avail_out = want;
    for (;;) {
        if (z.avail_in == 0 && !feof(f)) {
            z.next_in = in;
            z.avail_in = fread(in, 1, sizeof in, f);
            if (ferror(f)) {
                rc = CAIRN_EIO;
                break;
            }
        }
        if (z.avail_out == 0 && z.next_out != spill) {
            /* Output full: anything more means the file is larger than expected. */
            z.next_out = spill;
            z.avail_out = sizeof spill;
        }
        lzma_ret r = lzma_code(&z, feof(f) && z.avail_in == 0 ? LZMA_FINISH : LZMA_RUN);
        if (r == LZMA_STREAM_END) {
            rc = z.total_out == want ? CAIRN_OK : CAIRN_ERANGE;
            break;
        }
        if (r == LZMA_MEM_ERROR) {
            rc = CAIRN_ENOMEM;
            break;
        }
        if (r != LZMA_OK || z.total_out > want) {
            rc = z.total_out > want ? CAIRN_ERANGE : CAIRN_EFORMAT;
            break;
        }
    }
    lzma_end(&z);
    fclose(f);
    return rc;
}

/* Reads want bytes of float32 logits from path, or from path.xz when path is absent.
 * On failure err says which file and why. */
static int read_logits(const char *path, size_t want, float **out, char *err, size_t err_len)
{
    char *data = NULL;
    size_t len = 0;
    *out = NULL;
    int st = read_file(path, want + 1, &data, &len);
    if (st == CAIRN_OK && len != want)
        st = CAIRN_ERANGE;
    if (st == CAIRN_ENOENT) {
        char xz[1200];
        if (snprintf(xz, sizeof xz, "%s.xz", path) >= (int)sizeof xz)
            return CAIRN_ERANGE;
        data = cairn_malloc(want ? want : 1);
        if (!data)
            return CAIRN_ENOMEM;
        st = read_xz(xz, (uint8_t *)data, want);
        if (st == CAIRN_ENOENT)
            (void)!snprintf(err, err_len, "%s: cannot open (nor its .xz)", path);
        else if (st == CAIRN_ERANGE || st == CAIRN_EFORMAT)
            snprintf(err, err_len, "%s: %s %zu bytes", xz,
                     st == CAIRN_ERANGE ? "does not decompress to" : "is not an xz file of",
                     want);
        else if (st)
            snprintf(err, err_len, "%s: %s", xz, cairn_strerror(st));
    } else if (st == CAIRN_ERANGE) {
        snprintf(err, err_len, "%s: expected %zu bytes", path, want);
    } else if (st) {
        snprintf(err, err_len, "%s: %s", path, cairn_strerror(st));
    }
    if (st) {
        cairn_free(data);
        return st;
    }
    *out = (float *)data; /* float32 LE; this runtime is little-endian x86-64 */
    return CAIRN_OK;
}

/* A JSON array of numbers as int32 or float (one of the outputs NULL). */
static int json_numbers(const cJSON *arr, int32_t **ints, float **floats, int *n)
{
    if (!cJSON_IsArray(arr))
        return CAIRN_EFORMAT;
    int len = cJSON_GetArraySize(arr), i = 0;
    void *buf = cairn_malloc((size_t)(len ? len : 1) * 4);
    if (!buf)
        return CAIRN_ENOMEM;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsNumber(it)) {
            cairn_free(buf);
            return CAIRN_EFORMAT;
        }
        if (ints)
            ((int32_t *)buf)[i++] = (int32_t)it->valuedouble;
        else
            ((float *)buf)[i++] = (float)it->valuedouble;
    }
    if (ints)
        *ints = buf;
    else
        *floats = buf;
    *n = len;
    return CAIRN_OK;
}

static void case_free(ref_case_t *rc)
{
    cairn_free(rc->prompt);
    cairn_free(rc->argmax);
    cairn_free(rc->margin);
    cairn_free(rc->greedy);
    cairn_free(rc->gmargin);
    cairn_free(rc->pos);
    cairn_free(rc->logits);
    memset(rc, 0, sizeof(*rc));
}

/* A logits file name: a plain name inside the reference file's folder. */
static bool plain_name(const cJSON *v)
{
    return cJSON_IsString(v) && v->valuestring[0] && !strchr(v->valuestring, '/') &&
           strcmp(v->valuestring, "..") != 0;
}

/* Decodes one case object; on failure writes a message into err. */
static int case_load(const cJSON *obj, const char *file, const char *dir, int vocab,
                     ref_case_t *rc, char *err, size_t err_len)
{
    memset(rc, 0, sizeof(*rc));
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(obj, "name");
    rc->name = cJSON_IsString(name) ? name->valuestring : "(unnamed)";
    const cJSON *lf = cJSON_GetObjectItemCaseSensitive(obj, "logits_file");
    rc->peer = lf != NULL;
    int n_arg = 0, n_mar = 0, n_gm = 0, st;
    if ((st = json_numbers(cJSON_GetObjectItemCaseSensitive(obj, "prompt_ids"), &rc->prompt, NULL, &rc->n_prompt)) ||
        (st = json_numbers(cJSON_GetObjectItemCaseSensitive(obj, "argmax_per_position"), &rc->argmax, NULL, &n_arg)) ||
        (st = json_numbers(cJSON_GetObjectItemCaseSensitive(obj, "top2_margin_per_position"), NULL, &rc->margin, &n_mar)) ||
        (!rc->peer &&
         ((st = json_numbers(cJSON_GetObjectItemCaseSensitive(obj, "greedy_ids"), &rc->greedy, NULL, &rc->n_greedy)) ||
          (st = json_numbers(cJSON_GetObjectItemCaseSensitive(obj, "greedy_top2_margin"), NULL, &rc->gmargin, &n_gm))))) {
        snprintf(err, err_len, "%s: case %s: missing or malformed arrays", file, rc->name);
        return st;
    }
    if (rc->n_prompt < 1 || n_arg != rc->n_prompt || n_mar != rc->n_prompt || n_gm != rc->n_greedy) {
        snprintf(err, err_len, "%s: case %s: array lengths disagree", file, rc->name);
        return CAIRN_EFORMAT;
    }
    if (!rc->peer) {
        lf = cJSON_GetObjectItemCaseSensitive(obj, "last_logits_file");
        if (!plain_name(lf)) {
            snprintf(err, err_len, "%s: case %s: bad last_logits_file", file, rc->name);
            return CAIRN_EFORMAT;
        }
        if (!(rc->pos = cairn_malloc(sizeof *rc->pos)))
            return CAIRN_ENOMEM;
        rc->pos[0] = rc->n_prompt - 1;
        rc->n_pos = 1;
    } else {
        const cJSON *nv = cJSON_GetObjectItemCaseSensitive(obj, "n_vocab");
        if (!plain_name(lf)) {
            snprintf(err, err_len, "%s: case %s: bad logits_file", file, rc->name);
            return CAIRN_EFORMAT;
        }
        if (nv && !(cJSON_IsNumber(nv) && nv->valuedouble == vocab)) {
            snprintf(err, err_len, "%s: case %s: n_vocab %g differs from the model's %d", file,
                     rc->name, cJSON_IsNumber(nv) ? nv->valuedouble : -1.0, vocab);
            return CAIRN_EFORMAT;
        }
        if ((st = json_numbers(cJSON_GetObjectItemCaseSensitive(obj, "logit_positions"),
                               &rc->pos, NULL, &rc->n_pos))) {
            snprintf(err, err_len, "%s: case %s: missing or malformed logit_positions", file,
                     rc->name);
            return st;
        }
        for (int i = 0; i < rc->n_pos; i++) {
            if (rc->pos[i] < 0 || rc->pos[i] >= rc->n_prompt || (i && rc->pos[i] <= rc->pos[i - 1])) {
                snprintf(err, err_len, "%s: case %s: logit_positions must ascend inside the prompt",
                         file, rc->name);
                return CAIRN_EFORMAT;
            }
        }
    }
    char path[1100];
    int k = snprintf(path, sizeof(path), "%s/%s", dir, lf->valuestring);
    if (k < 0 || (size_t)k >= sizeof(path)) {
        snprintf(err, err_len, "%s: case %s: logits file path too long", file, rc->name);
        return CAIRN_ERANGE;
    }
    return read_logits(path, (size_t)rc->n_pos * (size_t)vocab * 4, &rc->logits, err, err_len);
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static double max_abs_diff(const float *a, const float *b, int n)
{
    double m = 0.0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) /* NaN counts as infinitely wrong */
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* Records a teacher-forced or greedy comparison at pos; returns false on a mismatch. */
static bool compare_pos(refcheck_case_t *c, int pos, int ours, int ref)
{
    if (ours == ref)
        return true;
    if (c->first_bad_pos < 0) {
        c->first_bad_pos = pos;
        c->first_bad_ours = ours;
        c->first_bad_ref = ref;
    }
    c->passed = false;
    return false;
}

/* Compares logits row `lg` of position pos with the reference, if pos has one; *at is
 * the index of the next reference position (positions ascend). Returns the difference or
 * -1 when pos has no reference logits. */
static double compare_logits(const ref_case_t *rc, int vocab, int pos, const float *lg, int *at)
{
    while (*at < rc->n_pos && rc->pos[*at] < pos)
        (*at)++;
    if (*at >= rc->n_pos || rc->pos[*at] != pos)
        return -1.0;
    return max_abs_diff(lg, rc->logits + (size_t)*at * vocab, vocab);
}

/* Prefill + greedy continuation on one sequence. */
static void run_prefill_greedy(cairn_engine_t *e, const ref_case_t *rc, int vocab,
                               refcheck_case_t *c)
{
    cairn_seq_t *s = NULL;
    const float *lg;
    int rows, st;
    if ((st = cairn_seq_begin(e, NULL, rc->prompt, rc->n_prompt, &s, &c->n_cached))) {
        fail_case(c, "prefill: begin: %s", cairn_strerror(st));
        return;
    }
    cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_ALL};
    if ((st = cairn_engine_step(e, &it, 1, &lg, &rows))) {
        fail_case(c, "prefill: step: %s", cairn_strerror(st));
        goto out;
    }
    CAIRN_ASSERT(rows == rc->n_prompt - c->n_cached);
    int at = 0, worst = -1;
    for (int r = 0; r < rows; r++) {
        int pos = c->n_cached + r;
        double d = compare_logits(rc, vocab, pos, lg + (size_t)r * vocab, &at);
        if (d >= 0.0) {
            c->n_logits++;
            if (worst < 0 || d > c->max_abs_diff) {
                c->max_abs_diff = d;
                worst = pos;
            }
        }
        if (rc->margin[pos] < c->margin)
            continue;
        c->tf_checked++;
        c->tf_agree += compare_pos(c, pos, argmax(lg + (size_t)r * vocab, vocab), rc->argmax[pos]);
    }
    if (!(c->max_abs_diff <= c->tol)) {
        if (rc->peer)
            fail_case(c, "prefill: logits at position %d differ by %.3g (> %.3g)", worst,
                      c->max_abs_diff, c->tol);
        else
            fail_case(c, "prefill: last logits differ by %.3g (> %.3g)", c->max_abs_diff, c->tol);
    }

    /* Greedy: logits i predict greedy[i]; then feed the reference token. */
    const float *last = lg + (size_t)(rows - 1) * vocab;
    c->greedy_total = rc->n_greedy;
    for (int i = 0; i < rc->n_greedy; i++) {
        if (rc->gmargin[i] < c->margin)
            break;
        c->greedy_checked++;
        if (!compare_pos(c, rc->n_prompt + i, argmax(last, vocab), rc->greedy[i]))
            break;
        c->greedy_matched++;
        if (i + 1 == rc->n_greedy)
            break;
        it = (cairn_batch_item_t){s, 0, CAIRN_LOGITS_LAST};
        if ((st = cairn_seq_feed(s, &rc->greedy[i], 1)) || (st = cairn_engine_step(e, &it, 1, &lg, &rows))) {
            fail_case(c, "greedy: %s", cairn_strerror(st));
            break;
        }
        last = lg;
    }
out:
    cairn_seq_release(s);
}

/* The prompt fed one token per step. */
static void run_decode(cairn_engine_t *e, const ref_case_t *rc, int vocab, refcheck_case_t *c)
{
    cairn_seq_t *s = NULL;
    const float *lg = NULL;
    int rows, st, at = 0, worst = -1;
    if ((st = cairn_seq_begin(e, NULL, rc->prompt, 1, &s, NULL))) {
        fail_case(c, "decode: begin: %s", cairn_strerror(st));
        return;
    }
    for (int pos = 0; pos < rc->n_prompt; pos++) {
        cairn_batch_item_t it = {s, 1, CAIRN_LOGITS_LAST};
        if ((pos > 0 && (st = cairn_seq_feed(s, &rc->prompt[pos], 1))) ||
            (st = cairn_engine_step(e, &it, 1, &lg, &rows))) {
            fail_case(c, "decode: position %d: %s", pos, cairn_strerror(st));
            goto out;
        }
        double d = compare_logits(rc, vocab, pos, lg, &at);
        if (d >= 0.0 && (worst < 0 || d > c->decode_max_abs_diff)) {
            c->decode_max_abs_diff = d;
            worst = pos;
        }
        if (rc->margin[pos] < c->margin)
            continue;
        c->dec_checked++;
        c->dec_agree += compare_pos(c, pos, argmax(lg, vocab), rc->argmax[pos]);
    }
    if (!(c->decode_max_abs_diff <= c->tol)) {
        if (rc->peer)
            fail_case(c, "decode: logits at position %d differ by %.3g (> %.3g)", worst,
                      c->decode_max_abs_diff, c->tol);
        else
            fail_case(c, "decode: last logits differ by %.3g (> %.3g)", c->decode_max_abs_diff,
                      c->tol);
    }
out:
    cairn_seq_release(s);
}

static const char *path_name(cairn_kv_path_t p) { return p == CAIRN_KV_FLAT ? "flat" : "paged"; }

int refcheck_run(const char *model_dir, const refcheck_options_t *o, refcheck_report_t *rep)
{
    char path[1100];
    snprintf(path, sizeof(path), "%s/reference.json", model_dir);
    return refcheck_run_file(model_dir, path, o, rep);
}

int refcheck_run_file(const char *model, const char *ref_path, const refcheck_options_t *o,
                      refcheck_report_t *rep)
{
    static const cairn_kv_path_t paths[2] = {CAIRN_KV_FLAT, CAIRN_KV_PAGED};
    memset(rep, 0, sizeof(*rep));
    char err[1400] = "", dir[1100];
    char *json_text = NULL;
    size_t json_len = 0;
    cJSON *root = NULL;
    cairn_checkpoint_t *ck = NULL;
    cairn_engine_t *engines[2] = {NULL, NULL};
    ref_case_t *cases = NULL;
    int n_cases = 0, rc = CAIRN_OK;

    /* Logits files are named relative to the reference file's folder. */
    const char *slash = strrchr(ref_path, '/');
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - ref_path) : 1, slash ? ref_path : ".");
    const char *file = slash ? slash + 1 : ref_path;
    int st = cairn_checkpoint_open(model, &ck, err, sizeof(err));
    if (st)
        goto whole_fail;
    const int vocab = cairn_checkpoint_config(ck)->vocab;
    st = read_file(ref_path, REF_JSON_MAX, &json_text, &json_len);
    if (st) {
        snprintf(err, sizeof(err), "%s: %s", ref_path, st == CAIRN_ENOENT ? "cannot open" : "cannot read");
        goto whole_fail;
    }
    st = cairn_json_parse(json_text, json_len, NULL, &root, NULL);
    if (st == CAIRN_ENOMEM)
        goto nomem;
    const cJSON *arr = root ? cJSON_GetObjectItemCaseSensitive(root, "cases") : NULL;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0) {
        snprintf(err, sizeof(err), "%s: no \"cases\" array", ref_path);
        st = CAIRN_EFORMAT;
        goto whole_fail;
    }
    n_cases = cJSON_GetArraySize(arr);
    cases = cairn_calloc((size_t)n_cases, sizeof(*cases));
    if (!cases)
        goto nomem;

    /* A device backend has no flat path (its K/V live in the device pool). */
    const int first_path = o->backend && strcmp(o->backend, "cpu") ? 1 : 0;
    for (int p = first_path; p < 2; p++) {
        cairn_engine_options_t eo;
        cairn_engine_options_default(&eo);
        eo.n_threads = o->n_threads;
        eo.kv_path = paths[p];
        eo.kv_dtype = o->kv_dtype;
        eo.math = o->math;
        eo.backend = o->backend;
        eo.pool_mib = 64;
        char eerr[256] = "";
        st = cairn_engine_create(ck, &eo, &engines[p], eerr, sizeof(eerr));
        if (st) {
            refcheck_case_t *c = add_entry(rep, "(engine)", paths[p]);
            if (!c)
                goto nomem;
            fail_case(c, "%s", eerr[0] ? eerr : cairn_strerror(st));
        }
    }

    const cJSON *obj;
    int i = 0;
    cJSON_ArrayForEach(obj, arr) {
        ref_case_t *rcase = &cases[i++];
        char cerr[1400] = "";
        st = case_load(obj, file, dir, vocab, rcase, cerr, sizeof(cerr));
        for (int p = first_path; p < 2; p++) {
            refcheck_case_t *c = add_entry(rep, rcase->name, paths[p]);
            if (!c)
                goto nomem;
            if (st == CAIRN_ENOMEM)
                goto nomem;
            c->peer = rcase->peer;
            c->tol = rcase->peer ? o->peer_max_abs_tol : o->max_abs_tol;
            c->margin = rcase->peer ? o->peer_min_margin : o->min_margin;
            if (st) {
                fail_case(c, "%s", cerr);
                continue;
            }
            if (!engines[p]) {
                fail_case(c, "no engine for the %s path", path_name(paths[p]));
                continue;
            }
            c->n_prompt = rcase->n_prompt;
            for (int t = 0; t < rcase->n_prompt; t++)
                if (rcase->prompt[t] < 0 || rcase->prompt[t] >= vocab)
                    fail_case(c, "prompt token %d out of the vocabulary", rcase->prompt[t]);
            if (!c->error[0]) {
                run_prefill_greedy(engines[p], rcase, vocab, c);
                run_decode(engines[p], rcase, vocab, c);
            }
            if (!c->passed && !c->error[0] && c->first_bad_pos >= 0)
                snprintf(c->error, sizeof(c->error), "argmax differs at position %d: %d, reference %d",
                         c->first_bad_pos, c->first_bad_ours, c->first_bad_ref);
        }
    }
    goto finish;

whole_fail: {
        refcheck_case_t *c = add_entry(rep, "(model)", CAIRN_KV_FLAT);
        if (!c)
            goto nomem;
        fail_case(c, "%s", err[0] ? err : cairn_strerror(st));
        goto finish;
    }
nomem:
    rc = CAIRN_ENOMEM;
finish:
    for (int p = 0; p < 2; p++)
        cairn_engine_destroy(engines[p]);
    for (int j = 0; j < n_cases; j++)
        case_free(&cases[j]);
    cairn_free(cases);
    cJSON_Delete(root);
    cairn_free(json_text);
    cairn_checkpoint_close(ck);
    for (int j = 0; j < rep->n_cases; j++) {
        if (rep->cases[j].passed)
            rep->n_passed++;
        else
            rep->n_failed++;
    }
    if (rc)
        refcheck_report_free(rep);
    return rc;
}
