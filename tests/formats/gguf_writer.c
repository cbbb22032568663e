/*
 * gguf_writer.c — the tests' GGUF writer (gguf_writer.h). Plain little-endian bytes into
 * growable buffers; no validation (the point is to write what the reader must refuse).
 */
#include "formats/gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *p;
    size_t len, cap;
} buf_t;

typedef struct {
    uint64_t offset;   /* where the bytes are placed */
    uint64_t declared; /* what the table says (gw_tensor_declare lies) */
    size_t info_pos;   /* position of the offset field inside infos */
    size_t bytes;
    uint8_t *data;
} tensor_t;

struct gw {
    uint32_t version, alignment;
    uint64_t n_kv;
    buf_t kvs, infos;
    tensor_t *tensors;
    size_t n_tensors;
    uint64_t next_offset;
};

static void put(buf_t *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->len + n)
            c *= 2;
        b->p = realloc(b->p, c);
        if (!b->p)
            abort();
        b->cap = c;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_le(buf_t *b, uint64_t v, int n)
{
    uint8_t x[8];
    for (int i = 0; i < n; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    put(b, x, (size_t)n);
}

static void put_str(buf_t *b, const char *s, size_t n)
{
    put_le(b, n, 8);
    put(b, s, n);
}

gw_t *gw_new(void)
{
    gw_t *w = calloc(1, sizeof *w);
    if (!w)
        abort();
    w->version = 3;
    w->alignment = 32;
    return w;
}

void gw_free(gw_t *w)
{
    if (!w)
        return;
    free(w->kvs.p);
    free(w->infos.p);
    for (size_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].data);
    free(w->tensors);
    free(w);
}

void gw_set_version(gw_t *w, uint32_t version) { w->version = version; }
void gw_set_alignment(gw_t *w, uint32_t alignment) { w->alignment = alignment; }

void gw_kv_raw(gw_t *w, const char *key, uint32_t type, const void *bytes, size_t n)
{
    put_str(&w->kvs, key, strlen(key));
    put_le(&w->kvs, type, 4);
    put(&w->kvs, bytes, n);
    w->n_kv++;
}

void gw_kv_u32(gw_t *w, const char *key, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    gw_kv_raw(w, key, GGUF_TYPE_U32, b, 4);
}

void gw_kv_i32(gw_t *w, const char *key, int32_t v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(u >> (8 * i));
    gw_kv_raw(w, key, GGUF_TYPE_I32, b, 4);
}

void gw_kv_u64(gw_t *w, const char *key, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    gw_kv_raw(w, key, GGUF_TYPE_U64, b, 8);
}

void gw_kv_f32(gw_t *w, const char *key, float v) { gw_kv_raw(w, key, GGUF_TYPE_F32, &v, 4); }

void gw_kv_bool(gw_t *w, const char *key, int v)
{
    uint8_t b = (uint8_t)v;
    gw_kv_raw(w, key, GGUF_TYPE_BOOL, &b, 1);
}

void gw_kv_strn(gw_t *w, const char *key, const char *v, size_t n)
{
    buf_t b = {0};
    put_str(&b, v, n);
    gw_kv_raw(w, key, GGUF_TYPE_STRING, b.p, b.len);
    free(b.p);
}

void gw_kv_str(gw_t *w, const char *key, const char *v) { gw_kv_strn(w, key, v, strlen(v)); }

static size_t elem_size(uint32_t t)
{
    switch (t) {
    case GGUF_TYPE_U8: case GGUF_TYPE_I8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_U16: case GGUF_TYPE_I16: return 2;
    case GGUF_TYPE_U32: case GGUF_TYPE_I32: case GGUF_TYPE_F32: return 4;
    default: return 8;
    }
}

void gw_kv_arr(gw_t *w, const char *key, uint32_t elem, const void *data, size_t n)
{
    buf_t b = {0};
    put_le(&b, elem, 4);
    put_le(&b, n, 8);
    put(&b, data, n * elem_size(elem));
    gw_kv_raw(w, key, GGUF_TYPE_ARRAY, b.p, b.len);
    free(b.p);
}

void gw_kv_arr_str(gw_t *w, const char *key, const char *const *v, const size_t *lens, size_t n)
{
    buf_t b = {0};
    put_le(&b, GGUF_TYPE_STRING, 4);
    put_le(&b, n, 8);
    for (size_t i = 0; i < n; i++)
        put_str(&b, v[i], lens ? lens[i] : strlen(v[i]));
    gw_kv_raw(w, key, GGUF_TYPE_ARRAY, b.p, b.len);
    free(b.p);
}

/* The encoded bytes of a parsed value (what follows its type tag). */
static void encode_value(buf_t *b, const gguf_kv_t *kv)
{
    if (kv->type == GGUF_TYPE_STRING) {
        put_str(b, kv->strs[0].p, kv->strs[0].n);
    } else if (kv->type == GGUF_TYPE_ARRAY) {
        put_le(b, kv->elem, 4);
        put_le(b, kv->n, 8);
        if (kv->elem == GGUF_TYPE_STRING)
            for (uint64_t i = 0; i < kv->n; i++)
                put_str(b, kv->strs[i].p, kv->strs[i].n);
        else
            put(b, kv->data, (size_t)kv->n * elem_size(kv->elem));
    } else {
        put(b, kv->data, elem_size(kv->type));
    }
}

void gw_copy_kvs(gw_t *w, const gguf_file_t *g, const char *skip)
{
    for (size_t i = 0; i < gguf_n_kvs(g); i++) {
        const gguf_kv_t *kv = gguf_kv(g, i);
        if (skip && gguf_str_eq(kv->key, skip))
            continue;
        buf_t b = {0};
        encode_value(&b, kv);
        put_str(&w->kvs, kv->key.p, kv->key.n);
        put_le(&w->kvs, kv->type, 4);
        put(&w->kvs, b.p, b.len);
        w->n_kv++;
        free(b.p);
    }
}

void gw_tensor(gw_t *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
               const void *data, size_t bytes, uint64_t offset)
{
    if (offset == UINT64_MAX)
        offset = w->next_offset;
    put_str(&w->infos, name, strlen(name));
    put_le(&w->infos, n_dims, 4);
    for (uint32_t d = 0; d < n_dims; d++)
        put_le(&w->infos, (uint64_t)ne[d], 8);
    put_le(&w->infos, type, 4);
    size_t info_pos = w->infos.len;
    put_le(&w->infos, offset, 8);
    w->tensors = realloc(w->tensors, (w->n_tensors + 1) * sizeof *w->tensors);
    if (!w->tensors)
        abort();
    tensor_t *t = &w->tensors[w->n_tensors++];
    t->offset = t->declared = offset;
    t->info_pos = info_pos;
    t->bytes = bytes;
    t->data = calloc(bytes ? bytes : 1, 1);
    if (!t->data)
        abort();
    if (data)
        memcpy(t->data, data, bytes);
    uint64_t end = offset + bytes;
    uint64_t a = w->alignment ? w->alignment : 1;
    end = (end + a - 1) / a * a;
    if (end > w->next_offset)
        w->next_offset = end;
}

void gw_copy_tensors(gw_t *w, const gguf_file_t *g, const char *skip)
{
    for (size_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor_t *t = gguf_tensor(g, i);
        if (skip && !strcmp(t->name, skip))
            continue;
        gw_tensor(w, t->name, t->n_dims, t->ne, t->type->id, t->data, (size_t)t->bytes,
                  UINT64_MAX);
    }
}

void gw_tensor_declare(gw_t *w, size_t i, uint64_t offset)
{
    w->tensors[i].declared = offset;
}

uint8_t *gw_finish(gw_t *w, size_t *len)
{
    for (size_t i = 0; i < w->n_tensors; i++)
        for (int b = 0; b < 8; b++)
            w->infos.p[w->tensors[i].info_pos + (size_t)b] = (uint8_t)(w->tensors[i].declared >> (8 * b));
    buf_t out = {0};
    put(&out, "GGUF", 4);
    put_le(&out, w->version, 4);
    put_le(&out, w->n_tensors, 8);
    put_le(&out, w->n_kv, 8);
    put(&out, w->kvs.p, w->kvs.len);
    put(&out, w->infos.p, w->infos.len);
    uint64_t a = w->alignment ? w->alignment : 1;
    size_t data0 = (size_t)((out.len + a - 1) / a * a);
    uint64_t end = 0;
    for (size_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].offset + w->tensors[i].bytes > end)
            end = w->tensors[i].offset + w->tensors[i].bytes;
    if (w->n_tensors) {
        size_t total = data0 + (size_t)end;
        uint8_t zero = 0;
        while (out.len < total)
            put(&out, &zero, 1);
        for (size_t i = 0; i < w->n_tensors; i++)
            memcpy(out.p + data0 + w->tensors[i].offset, w->tensors[i].data, w->tensors[i].bytes);
    }
    *len = out.len;
    return out.p;
}

int gw_write(gw_t *w, const char *path)
{
    size_t len;
    uint8_t *p = gw_finish(w, &len);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, len, f) == len;
    if (f && fclose(f) != 0)
        ok = 0;
    free(p);
    return ok ? 0 : -1;
}
