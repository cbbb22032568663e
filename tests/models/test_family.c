/*
 * test_family.c — the model-family interface (src/models/family.h) proven by a do-nothing
 * family that lives only in this file: registering it touches no library source, and the
 * checkpoint loader and the engine then open, create and step it like any family.
 *
 * The family "test_nothing" has two layers: layer 0 FULL (one K/V head of 2 elements),
 * layer 1 RECURRENT with an 8-byte state (a row counter). Its forward step stores each
 * row's token as its K/V, advances the counter, and writes logits that expose what it saw:
 *   logits[0] = the sequence's counter after the row (rows computed since the state began),
 *   logits[1] = the sum of the tokens stored at positions 0..pos, read back from storage,
 *   logits[2] = pos,  logits[3] = 1 when the row had a block table (paged path).
 * The tests check that the engine builds K/V storage and state handles from the declared
 * layout, that a step's rows and views follow the contract, that state persists across
 * steps and forks, and the stateful rules (no prefix reuse without a checkpoint, no
 * truncation below what was computed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cairn/engine.h"
#include "models/family.h"

#define VOCAB 32
#define N_LAYERS 2

/* ---- the family ---- */

typedef struct {
    cairn_tensor_t weight; /* [4] f32, bound to prove the bind path */
} nothing_t;

typedef struct {
    cairn_fwd_env_t env;
    size_t state_off;      /* layer 1's part of the state handle */
    int steps;             /* fwd_step calls */
} nothing_fwd_t;

static int nothing_parse(const hf_config_t *hf, cairn_model_config_t *cfg, void **priv,
                         char *err, size_t err_len)
{
    int rc = hf_get_int(hf->text, "vocab_size", true, 0, 4, 1 << 16, &cfg->vocab, err, err_len);
    if (rc)
        return rc;
    cfg->n_layers = N_LAYERS;
    cfg->hidden = 2;
    cfg->n_heads = cfg->n_kv_heads = 1;
    cfg->head_dim = 2;
    cfg->ffn = 2;
    cfg->max_pos = 256;
    cfg->bos_id = -1;
    if ((rc = hf_parse_eos(hf->text, cfg, "config.json", err, err_len)))
        return rc;
    *priv = cairn_calloc(1, sizeof(nothing_t));
    return *priv ? 0 : CAIRN_ENOMEM;
}

static int nothing_bind(void *priv, const cairn_model_config_t *cfg, fmt_tensors_t *ts,
                        char *err, size_t err_len)
{
    int64_t dims[1] = {4};
    return fmt_tensors_bind(ts, "nothing.weight", 1, dims, &((nothing_t *)priv)->weight, err,
                            err_len);
}

static void nothing_destroy(void *priv) { cairn_free(priv); }

static int nothing_layout(const cairn_model_t *m, cairn_dtype_t kv_dtype,
                          cairn_layer_cache_t *layers)
{
    layers[0] = (cairn_layer_cache_t){{CAIRN_KV_LAYER_FULL, 1, 2, 0, 0}, 0};
    layers[1] = (cairn_layer_cache_t){{CAIRN_KV_LAYER_RECURRENT, 0, 0, 0, 0}, sizeof(uint64_t)};
    return 0;
}

static void nothing_describe(const cairn_model_t *m, cairn_tier_model_desc_t *d, char *extra,
                             size_t extra_len)
{
    d->architecture = m->cfg.model_type;
    d->n_layers = N_LAYERS;
    snprintf(extra, extra_len, "nothing=1");
}

static int nothing_fwd_create(const cairn_model_t *m, const cairn_fwd_env_t *env, void **out)
{
    nothing_fwd_t *f = cairn_calloc(1, sizeof(*f));
    if (!f)
        return CAIRN_ENOMEM;
    cairn_layer_cache_t layers[N_LAYERS];
    assert_int_equal(cairn_model_cache_layout(m, env->kv_dtype, layers, NULL), 0);
    f->env = *env;
    f->state_off = cairn_model_state_offset(layers, 1);
    *out = f;
    return 0;
}

static void nothing_fwd_destroy(void *f) { cairn_free(f); }

/* K/V element type of the test: f32, so a token is stored exactly. */
static float *kv_row(const attn_kv_t *kv, int layer, int pos, float **v)
{
    void *k = NULL, *vv = NULL;
    int run = kv->rows(kv->ctx, layer, pos, &k, &vv);
    assert_true(run >= 1);
    *v = vv;
    return k;
}

static int nothing_fwd_step(void *ctx, const cairn_fwd_batch_t *b)
{
    nothing_fwd_t *f = ctx;
    f->steps++;
    assert_true(b->n_rows >= 1 && b->n_rows <= f->env.max_rows);
    int expect_pos = -1, prev_seq = -1;
    for (int r = 0; r < b->n_rows; r++) {
        const cairn_fwd_row_t *row = &b->rows[r];
        assert_true(row->seq >= 0 && row->seq < b->n_seqs);
        const cairn_fwd_seq_t *s = &b->seqs[row->seq];
        /* Rows of a sequence are contiguous, in order, starting at its n_past. */
        if (row->seq != prev_seq)
            expect_pos = s->n_past;
        assert_int_equal(row->pos, expect_pos);
        expect_pos++;
        prev_seq = row->seq;
        assert_non_null(s->state);
        assert_int_equal((uintptr_t)s->state % 64, 0);

        /* Store this row's K/V, then read every stored row back. */
        float *v, *k = kv_row(&s->kv, 0, row->pos, &v);
        k[0] = k[1] = (float)row->token;
        v[0] = v[1] = -(float)row->token;
        float sum = 0;
        for (int p = 0; p <= row->pos; p++) {
            float *pv, *pk = kv_row(&s->kv, 0, p, &pv);
            assert_true(pk[0] == -pv[0]);
            sum += pk[0];
        }
        uint64_t *counter = (uint64_t *)((char *)s->state + f->state_off);
        (*counter)++;
        bool table = false;
        if (s->blocks) {
            size_t n = 0;
            const uint32_t *t = cairn_kv_seq_block_table(s->blocks, 0, &n);
            table = t && n >= (size_t)row->pos / 16 + 1 && t[row->pos / 16] != CAIRN_KV_NULL_BLOCK;
            /* The recurrent layer has no pages. */
            assert_null(cairn_kv_seq_block_table(s->blocks, 1, &n));
        }
        if (row->out_row >= 0) {
            float *lg = b->logits + (size_t)row->out_row * VOCAB;
            memset(lg, 0, VOCAB * sizeof(float));
            lg[0] = (float)*counter;
            lg[1] = sum;
            lg[2] = (float)row->pos;
            lg[3] = table ? 1.0f : 0.0f;
        }
    }
    return 0;
}

static const char *const nothing_types[] = {"test_nothing", NULL};

static const cairn_family_t nothing_family = {
    .name = "nothing",
    .model_types = nothing_types,
    .parse_config = nothing_parse,
    .bind = nothing_bind,
    .destroy = nothing_destroy,
    .cache_layout = nothing_layout,
    .describe = nothing_describe,
    .fwd_create = nothing_fwd_create,
    .fwd_destroy = nothing_fwd_destroy,
    .fwd_step = nothing_fwd_step,
};

/* ---- a checkpoint folder for it ---- */

static void write_file(const char *dir, const char *name, const void *data, size_t len)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* config.json + model.safetensors holding nothing.weight [4] f32 (and `extra`, if any). */
static char *make_folder(const char *extra_tensor)
{
    char tmpl[] = "/tmp/cairn-family-XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    char *dir = strdup(tmpl);
    const char *cfg = "{\"model_type\": \"test_nothing\", \"vocab_size\": 32, \"eos_token_id\": 7}";
    write_file(dir, "config.json", cfg, strlen(cfg));
    char hdr[256];
    int n = extra_tensor
                ? snprintf(hdr, sizeof hdr,
                           "{\"nothing.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                           "\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}}",
                           extra_tensor)
                : snprintf(hdr, sizeof hdr,
                           "{\"nothing.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}");
    while (n % 8)
        hdr[n++] = ' ';
    unsigned char buf[8 + 256 + 20] = {0};
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, hdr, (size_t)n);
    float w[5] = {1, 2, 3, 4, 5};
    memcpy(buf + 8 + n, w, sizeof w);
    write_file(dir, "model.safetensors", buf, 8 + (size_t)n + (extra_tensor ? 20 : 16));
    return dir;
}

static void remove_folder(char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    }
    closedir(d);
    rmdir(dir);
    free(dir);
}

static int setup(void **state)
{
    assert_int_equal(cairn_family_register(&nothing_family), 0);
    return 0;
}

static int teardown(void **state)
{
    assert_int_equal(cairn_family_unregister(&nothing_family), 0);
    return 0;
}

static cairn_engine_t *engine_for(const cairn_checkpoint_t *ck, cairn_kv_path_t path)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.kv_path = path;
    o.kv_dtype = CAIRN_DTYPE_F32;
    o.pool_mib = 1;
    o.cold = -1;
    o.max_step_tokens = 3; /* steps of 5 rows are split: the n_past of sub-batches */
    cairn_engine_t *e = NULL;
    char err[256] = "";
    int rc = cairn_engine_create(ck, &o, &e, err, sizeof err);
    if (rc)
        fail_msg("engine: %d %s", rc, err);
    return e;
}

/* ---- tests ---- */

static void test_registry(void **state)
{
    assert_ptr_equal(cairn_family_find("test_nothing"), &nothing_family);
    assert_non_null(cairn_family_find("llama"));
    assert_null(cairn_family_find("no_such_type"));
    cairn_family_t incomplete = nothing_family;
    incomplete.fwd_step = NULL;
    assert_int_equal(cairn_family_register(&incomplete), CAIRN_EINVAL);
    assert_int_equal(cairn_family_unregister(&incomplete), CAIRN_ENOENT);
    /* A test family is never cold-tier eligible. */
    assert_false(cairn_cold_family_eligible("test_nothing"));
}

static void test_open(void **state)
{
    char *dir = make_folder(NULL);
    cairn_checkpoint_t *ck = NULL;
    char err[512] = "";
    assert_int_equal(cairn_checkpoint_open(dir, &ck, err, sizeof err), 0);
    const cairn_model_config_t *c = cairn_checkpoint_config(ck);
    assert_string_equal(c->family, "nothing");
    assert_string_equal(c->model_type, "test_nothing");
    assert_int_equal(c->vocab, VOCAB);
    assert_int_equal(c->n_eos, 1);
    assert_int_equal(cairn_checkpoint_weight_bytes(ck), 16);
    const nothing_t *n = cairn_checkpoint_model(ck)->priv;
    assert_true(((const float *)n->weight.data)[3] == 4.0f);
    cairn_checkpoint_close(ck);
    remove_folder(dir);

    /* A tensor the family neither binds nor ignores fails the open, naming it. */
    dir = make_folder("stray.bias");
    assert_int_equal(cairn_checkpoint_open(dir, &ck, err, sizeof err), CAIRN_EUNSUPPORTED);
    assert_non_null(strstr(err, "stray.bias"));
    remove_folder(dir);
}

/* Expected logits of a row of a fresh sequence over tokens[0..pos]. */
static void check_row(const float *lg, const int32_t *tokens, int pos, float counter, bool paged)
{
    float sum = 0;
    for (int p = 0; p <= pos; p++)
        sum += (float)tokens[p];
    assert_true(lg[0] == counter);
    assert_true(lg[1] == sum);
    assert_true(lg[2] == (float)pos);
    assert_true(lg[3] == (paged ? 1.0f : 0.0f));
}

static void run_paths(void **state)
{
    char *dir = make_folder(NULL);
    cairn_checkpoint_t *ck = NULL;
    char err[512] = "";
    assert_int_equal(cairn_checkpoint_open(dir, &ck, err, sizeof err), 0);
    for (int path = 0; path < 2; path++) {
        bool paged = path == CAIRN_KV_PAGED;
        cairn_engine_t *e = engine_for(ck, (cairn_kv_path_t)path);
        int32_t toks[40];
        for (int i = 0; i < 40; i++)
            toks[i] = (int32_t)((i * 7 + 3) % VOCAB);
        cairn_seq_t *s = NULL, *t = NULL;
        int cached = -1;
        assert_int_equal(cairn_seq_begin(e, NULL, toks, 33, &s, &cached), 0);
        assert_int_equal(cached, 0);
        cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_ALL};
        const float *lg;
        int nr;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &nr), 0);
        assert_int_equal(nr, 33);
        for (int r = 0; r < 33; r++)
            check_row(lg + (size_t)r * VOCAB, toks, r, (float)(r + 1), paged);

        /* The state persists across steps. */
        assert_int_equal(cairn_seq_feed(s, &toks[33], 1), 0);
        it = (cairn_batch_item_t){s, 0, CAIRN_LOGITS_LAST};
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &nr), 0);
        check_row(lg, toks, 33, 34.0f, paged);

        /* A fork carries a copy of the state; the two then advance independently. */
        assert_int_equal(cairn_seq_fork(s, &t), 0);
        assert_int_equal(cairn_seq_feed(t, &toks[34], 1), 0);
        assert_int_equal(cairn_seq_feed(s, &toks[34], 1), 0);
        cairn_batch_item_t two[2] = {{s, 0, CAIRN_LOGITS_LAST}, {t, 0, CAIRN_LOGITS_LAST}};
        assert_int_equal(cairn_engine_step(e, two, 2, &lg, &nr), 0);
        assert_int_equal(nr, 2);
        check_row(lg, toks, 34, 35.0f, paged);
        check_row(lg + VOCAB, toks, 34, 35.0f, paged);

        /* Rewinding the state below the first checkpoint (16) recomputes from the empty
         * state (engine/seq_state.h): tokens [0, 10) are pending again. */
        assert_int_equal(cairn_seq_truncate(s, 10), 0);
        assert_int_equal(cairn_seq_n_past(s), 0);
        assert_int_equal(cairn_seq_n_pending(s), 10);
        it = (cairn_batch_item_t){s, 0, CAIRN_LOGITS_LAST};
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &nr), 0);
        check_row(lg, toks, 9, 10.0f, paged);
        cairn_seq_release(t);
        assert_int_equal(cairn_seq_end_turn(s), 0);

        /* The same prompt again: paged, the first step checkpointed the state at 16 (the
         * grid) and 32 (the prompt's last full block), so the begin resumes at 32 with
         * that state; flat shares nothing and starts over. */
        cairn_seq_t *u = NULL;
        assert_int_equal(cairn_seq_begin(e, NULL, toks, 33, &u, &cached), 0);
        assert_int_equal(cached, paged ? 32 : 0);
        it = (cairn_batch_item_t){u, 0, CAIRN_LOGITS_LAST};
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &nr), 0);
        check_row(lg, toks, 32, 33.0f, paged);
        if (paged) {
            cairn_kv_stats_t st;
            assert_int_equal(cairn_engine_kv_stats(e, &st), 0);
            assert_true(st.blocks_in_use > 0);
        }
        cairn_engine_destroy(e);
    }
    cairn_checkpoint_close(ck);
    remove_folder(dir);
}

static void test_engine_steps(void **state) { run_paths(state); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_open),
        cmocka_unit_test(test_engine_steps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
