/*
 * reference_check.c — `cairn check-reference` as a library: the engine against HF outputs.
 *
 * The JSON is read generically (any case names, any vocab: the logits file must hold
 * exactly vocab float32 values). Each (case, K/V path) pair becomes one report entry;
 * every problem — a missing file, a malformed field, an engine error, a mismatch — is
 * recorded in that entry and makes it fail, so `N passed, N failed` accounts for all of it.
 * Each path gets its own engine, shared by the cases in file order, so on the paged path a
 * later case whose prompt extends an earlier one's prefix is served from the cache (and
 * its last logits still have to match).
 *
 * Thread-safety: none needed (one call owns everything it creates).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tools/reference_check.h"
#include "util/json.h"

#define REF_JSON_MAX ((size_t)256 << 20)

/* One case of reference.json, decoded. */
typedef struct {
    const char *name;
    int32_t *prompt;  int n_prompt;
    int32_t *argmax;  float *margin;    /* [n_prompt] teacher-forced */
    int32_t *greedy;  float *gmargin;   /* [n_greedy] */
    int n_greedy;
    float *last;                        /* [vocab] reference logits at the last position */
} ref_case_t;

void refcheck_options_default(refcheck_options_t *o)
{
    o->n_threads = 1;
    o->kv_dtype = CAIRN_DTYPE_F32;
    o->max_abs_tol = 2e-3f;
    o->min_margin = 1e-3f;
    o->math = CAIRN_ENGINE_MATH_F32;
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
        return CAIRN_ENOENT;
    int rc = CAIRN_EIO;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0)
        goto fail;
    long size = ftell(f);
    if (size < 0 || (size_t)size > max || fseek(f, 0, SEEK_SET) != 0)
        goto fail;
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
    cairn_free(rc->last);
    memset(rc, 0, sizeof(*rc));
}

/* Decodes one case object; on failure writes a message into err. */
static int case_load(const cJSON *obj, const char *dir, int vocab, ref_case_t *rc, char *err,
                     size_t err_len)
{
    memset(rc, 0, sizeof(*rc));
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(obj, "name");
    rc->name = cJSON_IsString(name) ? name->valuestring : "(unnamed)";
    int n_arg = 0, n_mar = 0, n_gm = 0, st;
    if ((st = json_numbers(cJSON_GetObjectItemCaseSensitive(obj, "prompt_ids"), &rc->prompt, NULL, &rc->n_prompt)) ||
        (st = json_numbers(cJSON_GetObjectItemCaseSensitive(obj, "argmax_per_position"), &rc->argmax, NULL, &n_arg)) ||
        (st = json_numbers(cJSON_GetObjectItemCaseSensitive(obj, "top2_margin_per_position"), NULL, &rc->margin, &n_mar)) ||
        (st = json_numbers(cJSON_GetObjectItemCaseSensitive(obj, "greedy_ids"), &rc->greedy, NULL, &rc->n_greedy)) ||
        (st = json_numbers(cJSON_GetObjectItemCaseSensitive(obj, "greedy_top2_margin"), NULL, &rc->gmargin, &n_gm))) {
        snprintf(err, err_len, "reference.json: case %s: missing or malformed arrays", rc->name);
        return st;
    }
    if (rc->n_prompt < 1 || n_arg != rc->n_prompt || n_mar != rc->n_prompt || n_gm != rc->n_greedy) {
        snprintf(err, err_len, "reference.json: case %s: array lengths disagree", rc->name);
        return CAIRN_EFORMAT;
    }
    const cJSON *lf = cJSON_GetObjectItemCaseSensitive(obj, "last_logits_file");
    if (!cJSON_IsString(lf) || strchr(lf->valuestring, '/')) {
        snprintf(err, err_len, "reference.json: case %s: bad last_logits_file", rc->name);
        return CAIRN_EFORMAT;
    }
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, lf->valuestring);
    char *data = NULL;
    size_t len = 0;
    st = read_file(path, (size_t)vocab * 4 + 1, &data, &len);
    if (st == CAIRN_OK && len != (size_t)vocab * 4)
        st = CAIRN_EFORMAT;
    if (st) {
        if (st == CAIRN_ENOENT)
            snprintf(err, err_len, "%s: cannot open", path);
        else
            snprintf(err, err_len, "%s: expected %zu bytes (%d float32 logits)", path,
                     (size_t)vocab * 4, vocab);
        cairn_free(data);
        return st;
    }
    rc->last = (float *)data; /* float32 LE; this runtime is little-endian x86-64 */
    return CAIRN_OK;
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

/* Prefill + greedy continuation on one sequence. */
static void run_prefill_greedy(cairn_engine_t *e, const ref_case_t *rc, const refcheck_options_t *o,
                               int vocab, refcheck_case_t *c)
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
    for (int r = 0; r < rows; r++) {
        int pos = c->n_cached + r;
        if (rc->margin[pos] < o->min_margin)
            continue;
        c->tf_checked++;
        c->tf_agree += compare_pos(c, pos, argmax(lg + (size_t)r * vocab, vocab), rc->argmax[pos]);
    }
    const float *last = lg + (size_t)(rows - 1) * vocab;
    c->max_abs_diff = max_abs_diff(last, rc->last, vocab);
    if (!(c->max_abs_diff <= o->max_abs_tol))
        fail_case(c, "prefill: last logits differ by %.3g (> %.3g)", c->max_abs_diff, o->max_abs_tol);

    /* Greedy: logits i predict greedy[i]; then feed the reference token. */
    c->greedy_total = rc->n_greedy;
    for (int i = 0; i < rc->n_greedy; i++) {
        if (rc->gmargin[i] < o->min_margin)
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
static void run_decode(cairn_engine_t *e, const ref_case_t *rc, const refcheck_options_t *o,
                       int vocab, refcheck_case_t *c)
{
    cairn_seq_t *s = NULL;
    const float *lg = NULL;
    int rows, st;
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
        if (rc->margin[pos] < o->min_margin)
            continue;
        c->dec_checked++;
        c->dec_agree += compare_pos(c, pos, argmax(lg, vocab), rc->argmax[pos]);
    }
    c->decode_max_abs_diff = max_abs_diff(lg, rc->last, vocab);
    if (!(c->decode_max_abs_diff <= o->max_abs_tol))
        fail_case(c, "decode: last logits differ by %.3g (> %.3g)", c->decode_max_abs_diff,
                  o->max_abs_tol);
out:
    cairn_seq_release(s);
}

static const char *path_name(cairn_kv_path_t p) { return p == CAIRN_KV_FLAT ? "flat" : "paged"; }

int refcheck_run(const char *model_dir, const refcheck_options_t *o, refcheck_report_t *rep)
{
    static const cairn_kv_path_t paths[2] = {CAIRN_KV_FLAT, CAIRN_KV_PAGED};
    memset(rep, 0, sizeof(*rep));
    char err[1400] = "", path[1024];
    char *json_text = NULL;
    size_t json_len = 0;
    cJSON *root = NULL;
    cairn_checkpoint_t *ck = NULL;
    cairn_engine_t *engines[2] = {NULL, NULL};
    ref_case_t *cases = NULL;
    int n_cases = 0, rc = CAIRN_OK;

    int st = cairn_checkpoint_open(model_dir, &ck, err, sizeof(err));
    if (st)
        goto whole_fail;
    const int vocab = cairn_checkpoint_config(ck)->vocab;
    snprintf(path, sizeof(path), "%s/reference.json", model_dir);
    st = read_file(path, REF_JSON_MAX, &json_text, &json_len);
    if (st) {
        snprintf(err, sizeof(err), "%s: %s", path, st == CAIRN_ENOENT ? "cannot open" : "cannot read");
        goto whole_fail;
    }
    st = cairn_json_parse(json_text, json_len, NULL, &root, NULL);
    if (st == CAIRN_ENOMEM)
        goto nomem;
    const cJSON *arr = root ? cJSON_GetObjectItemCaseSensitive(root, "cases") : NULL;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0) {
        snprintf(err, sizeof(err), "%s: no \"cases\" array", path);
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
        st = case_load(obj, model_dir, vocab, rcase, cerr, sizeof(cerr));
        for (int p = first_path; p < 2; p++) {
            refcheck_case_t *c = add_entry(rep, rcase->name, paths[p]);
            if (!c)
                goto nomem;
            if (st == CAIRN_ENOMEM)
                goto nomem;
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
                run_prefill_greedy(engines[p], rcase, o, vocab, c);
                run_decode(engines[p], rcase, o, vocab, c);
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
