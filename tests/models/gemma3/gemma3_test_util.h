/*
 * gemma3_test_util.h — a standalone Gemma 3 model for the family's tests: one
 * model.safetensors mapped and indexed with the engine's header parser, the family's
 * config and weights bound over it, and a one-sequence flat K/V runner.
 *
 * This is deliberately independent of the checkpoint loader and the engine, so the
 * numerics are proven on their own (issue 10, phase 1).
 */
#ifndef CAIRN_TEST_GEMMA3_UTIL_H
#define CAIRN_TEST_GEMMA3_UTIL_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/kv_flat.h"
#include "engine/safetensors.h"
#include "models/gemma3/gemma3.h"

typedef struct {
    void *map;
    size_t size;
    st_header_t hdr;
    gemma3_config_t cfg;
    gemma3_weights_t w;
} g3_model_t;

static inline bool g3_has(void *ctx, const char *name)
{
    return st_header_find(&((g3_model_t *)ctx)->hdr, name) != NULL;
}

static inline int g3_get(void *ctx, const char *name, int ndim, const int64_t *dims,
                         cairn_tensor_t *out, char *err, size_t err_len)
{
    g3_model_t *m = ctx;
    const st_tensor_t *t = st_header_find(&m->hdr, name);
    if (!t) {
        snprintf(err, err_len, "no tensor %s", name);
        return CAIRN_ENOENT;
    }
    if (t->ndim != ndim)
        return CAIRN_EFORMAT;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < ndim; i++) {
        if (t->shape[i] != dims[i]) {
            snprintf(err, err_len, "%s: shape mismatch in dim %d", name, i);
            return CAIRN_EFORMAT;
        }
        out->shape[i] = dims[i];
    }
    out->ndim = ndim;
    out->dtype = t->dtype;
    out->data = (const uint8_t *)m->map + m->hdr.data_offset + t->begin;
    return 0;
}

static inline char *g3_read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        *len = (size_t)n;
    }
    return buf;
}

/* Opens dir/config.json + dir/model.safetensors; aborts the test on failure. */
static inline g3_model_t *g3_open(const char *dir)
{
    char path[1024], err[512] = "";
    size_t len = 0;
    g3_model_t *m = calloc(1, sizeof *m);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = g3_read_text(path, &len);
    if (!m || !text || gemma3_config_parse(text, len, &m->cfg, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        abort();
    }
    free(text);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "%s: cannot open\n", path);
        abort();
    }
    m->size = (size_t)st.st_size;
    m->map = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED || st_parse_header(m->map, m->size, path, &m->hdr, err, sizeof err) ||
        gemma3_weights_bind(&m->w, &m->cfg, g3_get, g3_has, m, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", path, err);
        abort();
    }
    return m;
}

static inline void g3_close(g3_model_t *m)
{
    gemma3_weights_fini(&m->w);
    st_header_free(&m->hdr);
    munmap(m->map, m->size);
    free(m);
}

/* One sequence over a flat K/V store: feed tokens in chunks, get logits of every row. */
typedef struct {
    g3_model_t *m;
    gemma3_fwd_t fwd;
    kv_flat_t kv;
    int n_past;
    int max_rows;
    gemma3_row_t *rows;
} g3_seq_t;

static inline void g3_seq_init(g3_seq_t *s, g3_model_t *m, cairn_thread_pool_t *tp,
                               cairn_dtype_t kv_dtype, int max_rows, int max_positions)
{
    memset(s, 0, sizeof *s);
    s->m = m;
    s->max_rows = max_rows;
    s->rows = calloc((size_t)max_rows, sizeof *s->rows);
    if (gemma3_fwd_init(&s->fwd, &m->cfg, &m->w, tp, CAIRN_MATH_F32, kv_dtype, max_rows,
                        max_positions) ||
        kv_flat_init(&s->kv, m->cfg.n_layers, m->cfg.n_kv_heads * m->cfg.head_dim, kv_dtype))
        abort();
}

static inline void g3_seq_fini(g3_seq_t *s)
{
    gemma3_fwd_fini(&s->fwd);
    kv_flat_fini(&s->kv);
    free(s->rows);
}

/* Runs tokens [n] (n <= max_rows) and writes logits [n][vocab] (every row). */
static inline void g3_seq_feed(g3_seq_t *s, const int32_t *tokens, int n, float *logits)
{
    if (kv_flat_reserve(&s->kv, s->n_past + n))
        abort();
    for (int i = 0; i < n; i++)
        s->rows[i] = (gemma3_row_t){0, s->n_past + i, tokens[i], i};
    attn_kv_t view = {kv_flat_rows, &s->kv};
    gemma3_fwd_run(&s->fwd, s->rows, n, &view, logits);
    s->n_past += n;
}

#endif
