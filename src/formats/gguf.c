/*
 * gguf.c — parses and validates GGUF files from memory (formats/gguf.h; format:
 * docs/FORMAT.md section 3), and maps them from disk.
 *
 * Nothing is trusted before it is checked: every read goes through a cursor that knows
 * how many bytes remain, and every count is compared with the smallest number of bytes
 * its entries could take before anything is allocated for them, so a lying count is an
 * error, never a huge allocation. A string array (the tokenizer's 150K tokens) is indexed
 * once into gguf_str_t views; nothing is copied except tensor names (NUL-terminated for
 * the lookups).
 *
 * Invariant on success: keys and tensor names are unique; every tensor's bytes lie inside
 * the file after the data offset, at an aligned offset, and no two non-empty tensors
 * overlap; every tensor's type is a known ggml type and its rows are whole blocks.
 *
 * Thread-safety: reentrant; a parsed file is immutable.
 */
#include "formats/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "compute/type_traits.h"
#include "formats/safetensors.h"
#include "formats/weights_folder.h"

/* Tensor names longer than this are refused (llama.cpp's own limit is 63 bytes). */
#define GGUF_MAX_NAME 1024
/* general.alignment is a power of two no larger than this. */
#define GGUF_MAX_ALIGNMENT ((uint32_t)1 << 20)

struct gguf_file {
    const char *what;          /* for messages: path or caller's name (owned copy) */
    const uint8_t *buf;
    size_t len;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    gguf_kv_t *kvs;            /* [n_kvs] file order */
    size_t n_kvs;
    const gguf_kv_t **kv_sorted; /* [n_kvs] by key bytes */
    gguf_tensor_t *tensors;    /* [n_tensors] file order */
    size_t n_tensors;
    const gguf_tensor_t **t_sorted; /* [n_tensors] by name */
    gguf_str_t *strs;          /* backing store of every kv's strs */
    char *names;               /* backing store of tensor names */
    uint8_t digest[32];
    void *map;                 /* gguf_open's mapping (NULL for gguf_parse) */
    size_t map_len;
};

/* ---- the ggml type table ---------------------------------------------------------- */

/* Block geometry of every type id the format defines (ggml's ggml.h/ggml-common.h);
 * ids 4, 5 and 31..33, 36..38 were removed from GGUF and are unknown here. */
static const gguf_tensor_type_t tensor_types[] = {
    {0, "f32", 1, 4},        {1, "f16", 1, 2},          {2, "q4_0", 32, 18},
    {3, "q4_1", 32, 20},     {6, "q5_0", 32, 22},       {7, "q5_1", 32, 24},
    {8, "q8_0", 32, 34},     {9, "q8_1", 32, 36},       {10, "q2_k", 256, 84},
    {11, "q3_k", 256, 110},  {12, "q4_k", 256, 144},    {13, "q5_k", 256, 176},
    {14, "q6_k", 256, 210},  {15, "q8_k", 256, 292},    {16, "iq2_xxs", 256, 66},
    {17, "iq2_xs", 256, 74}, {18, "iq3_xxs", 256, 98},  {19, "iq1_s", 256, 50},
    {20, "iq4_nl", 32, 18},  {21, "iq3_s", 256, 110},   {22, "iq2_s", 256, 82},
    {23, "iq4_xs", 256, 136},{24, "i8", 1, 1},          {25, "i16", 1, 2},
    {26, "i32", 1, 4},       {27, "i64", 1, 8},         {28, "f64", 1, 8},
    {29, "iq1_m", 256, 56},  {30, "bf16", 1, 2},        {34, "tq1_0", 256, 54},
    {35, "tq2_0", 256, 66},  {39, "mxfp4", 32, 17},
};

const gguf_tensor_type_t *gguf_tensor_type(uint32_t id)
{
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(tensor_types); i++)
        if (tensor_types[i].id == id)
            return &tensor_types[i];
    return NULL;
}

int gguf_tensor_dtype(const gguf_tensor_type_t *t, cairn_dtype_t *out)
{
    cairn_dtype_t d;
    if (!t || cairn_dtype_parse(t->name, &d) != CAIRN_OK)
        return CAIRN_EUNSUPPORTED;
    /* Same name, same blocks: the row describes this format. */
    const compute_type_traits_t *tt = compute_type_traits(d);
    if (!tt || (uint32_t)tt->block_elems != t->block_elems ||
        (uint32_t)tt->block_bytes != t->block_bytes)
        return CAIRN_EUNSUPPORTED;
    *out = d;
    return CAIRN_OK;
}

const char *gguf_type_name(uint32_t type)
{
    static const char *const names[] = {"u8",  "i8",  "u16",    "i16",   "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return type < CAIRN_ARRAY_LEN(names) ? names[type] : "?";
}

/* Bytes of one fixed-size value, 0 for STRING and ARRAY, -1 for an unknown tag. */
static int scalar_size(uint32_t type)
{
    switch (type) {
    case GGUF_TYPE_U8: case GGUF_TYPE_I8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_U16: case GGUF_TYPE_I16: return 2;
    case GGUF_TYPE_U32: case GGUF_TYPE_I32: case GGUF_TYPE_F32: return 4;
    case GGUF_TYPE_U64: case GGUF_TYPE_I64: case GGUF_TYPE_F64: return 8;
    case GGUF_TYPE_STRING: case GGUF_TYPE_ARRAY: return 0;
    }
    return -1;
}

/* ---- the cursor ------------------------------------------------------------------- */

typedef struct {
    const uint8_t *buf;
    size_t len, off;
    const char *what;
    char *err;
    size_t err_len;
} cursor_t;

static size_t remaining(const cursor_t *c) { return c->len - c->off; }

static int truncated(cursor_t *c, const char *reading)
{
    st_errf(c->err, c->err_len, "%s: truncated at byte %zu (the file ends while reading %s)",
            c->what, c->len, reading);
    return CAIRN_EFORMAT;
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int read_u32(cursor_t *c, uint32_t *out, const char *reading)
{
    if (remaining(c) < 4)
        return truncated(c, reading);
    *out = (uint32_t)le(c->buf + c->off, 4);
    c->off += 4;
    return 0;
}

static int read_u64(cursor_t *c, uint64_t *out, const char *reading)
{
    if (remaining(c) < 8)
        return truncated(c, reading);
    *out = le(c->buf + c->off, 8);
    c->off += 8;
    return 0;
}

static int read_str(cursor_t *c, gguf_str_t *out, const char *reading)
{
    uint64_t n;
    int rc = read_u64(c, &n, reading);
    if (rc)
        return rc;
    if (n > remaining(c))
        return truncated(c, reading);
    out->p = (const char *)c->buf + c->off;
    out->n = (size_t)n;
    c->off += (size_t)n;
    return 0;
}

/* ---- parsing ---------------------------------------------------------------------- */

/* For messages: a key, cut and with non-printable bytes replaced. */
static const char *show(gguf_str_t s, char *buf, size_t cap)
{
    size_t n = s.n < cap - 1 ? s.n : cap - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        buf[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    buf[n] = 0;
    return buf;
}

static int cmp_str(gguf_str_t a, gguf_str_t b)
{
    size_t n = a.n < b.n ? a.n : b.n;
    int r = n ? memcmp(a.p, b.p, n) : 0;
    return r ? r : (a.n > b.n) - (a.n < b.n);
}

static int cmp_kv(const void *a, const void *b)
{
    return cmp_str((*(const gguf_kv_t *const *)a)->key, (*(const gguf_kv_t *const *)b)->key);
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const gguf_tensor_t *const *)a)->name, (*(const gguf_tensor_t *const *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    const gguf_tensor_t *x = *(const gguf_tensor_t *const *)a, *y = *(const gguf_tensor_t *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Reads the value of kv (its type already read); strings go to g->strs from *n_strs on. */
static int read_value(cursor_t *c, gguf_file_t *g, gguf_kv_t *kv, size_t *n_strs, char *keybuf)
{
    int rc;
    char reading[160];
    snprintf(reading, sizeof reading, "the value of metadata key '%s'", keybuf);
    if (kv->type == GGUF_TYPE_STRING) {
        kv->n = 1;
        kv->strs = &g->strs[*n_strs];
        if ((rc = read_str(c, &g->strs[*n_strs], reading)))
            return rc;
        (*n_strs)++;
        return 0;
    }
    if (kv->type == GGUF_TYPE_ARRAY) {
        uint32_t elem;
        uint64_t n;
        if ((rc = read_u32(c, &elem, reading)) || (rc = read_u64(c, &n, reading)))
            return rc;
        int es = scalar_size(elem);
        if (elem == GGUF_TYPE_ARRAY) {
            st_errf(c->err, c->err_len, "%s: metadata key '%s' is an array of arrays (not supported)",
                    c->what, keybuf);
            return CAIRN_EUNSUPPORTED;
        }
        if (es < 0) {
            st_errf(c->err, c->err_len, "%s: metadata key '%s' has unknown array element type %u",
                    c->what, keybuf, elem);
            return CAIRN_EFORMAT;
        }
        kv->elem = (gguf_type_t)elem;
        kv->n = n;
        kv->data = c->buf + c->off;
        if (elem != GGUF_TYPE_STRING) {
            if (n > remaining(c) / (size_t)es)
                return truncated(c, reading);
            c->off += (size_t)n * (size_t)es;
            if (elem == GGUF_TYPE_BOOL)
                for (uint64_t i = 0; i < n; i++)
                    if (kv->data[i] > 1) {
                        st_errf(c->err, c->err_len, "%s: metadata key '%s' element %llu is "
                                "not a bool (byte %u)", c->what, keybuf, (unsigned long long)i,
                                kv->data[i]);
                        return CAIRN_EFORMAT;
                    }
            return 0;
        }
        /* Each string takes at least its 8-byte length. */
        if (n > remaining(c) / 8)
            return truncated(c, reading);
        kv->strs = &g->strs[*n_strs];
        for (uint64_t i = 0; i < n; i++)
            if ((rc = read_str(c, &g->strs[(*n_strs)++], reading)))
                return rc;
        return 0;
    }
    int es = scalar_size(kv->type);
    if (es <= 0) {
        st_errf(c->err, c->err_len, "%s: metadata key '%s' has unknown value type %u", c->what,
                keybuf, (unsigned)kv->type);
        return CAIRN_EFORMAT;
    }
    if (remaining(c) < (size_t)es)
        return truncated(c, reading);
    kv->n = 1;
    kv->data = c->buf + c->off;
    c->off += (size_t)es;
    if (kv->type == GGUF_TYPE_BOOL && kv->data[0] > 1) {
        st_errf(c->err, c->err_len, "%s: metadata key '%s' is not a bool (byte %u)", c->what,
                keybuf, kv->data[0]);
        return CAIRN_EFORMAT;
    }
    return 0;
}

/*
 * A first pass over the metadata counts the strings (the store is then allocated once);
 * the second pass fills it. Both passes run the same bounds checks, so the first one is
 * where a truncated or lying entry is reported.
 */
static int count_strings(cursor_t c, uint64_t n_kv, size_t *n_strs)
{
    size_t n = 0;
    int rc;
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_str_t key;
        uint32_t type;
        if ((rc = read_str(&c, &key, "a metadata key")) ||
            (rc = read_u32(&c, &type, "a metadata value type")))
            return rc;
        if (type == GGUF_TYPE_STRING) {
            gguf_str_t s;
            if ((rc = read_str(&c, &s, "a metadata string")))
                return rc;
            n++;
        } else if (type == GGUF_TYPE_ARRAY) {
            uint32_t elem;
            uint64_t cnt;
            if ((rc = read_u32(&c, &elem, "a metadata array type")) ||
                (rc = read_u64(&c, &cnt, "a metadata array length")))
                return rc;
            int es = scalar_size(elem);
            if (elem == GGUF_TYPE_STRING) {
                if (cnt > remaining(&c) / 8)
                    return truncated(&c, "a metadata string array");
                for (uint64_t j = 0; j < cnt; j++) {
                    gguf_str_t s;
                    if ((rc = read_str(&c, &s, "a metadata string array")))
                        return rc;
                }
                n += (size_t)cnt;
            } else if (es > 0) {
                if (cnt > remaining(&c) / (size_t)es)
                    return truncated(&c, "a metadata array");
                c.off += (size_t)cnt * (size_t)es;
            } else {
                break; /* the second pass names the bad element type */
            }
        } else {
            int es = scalar_size(type);
            if (es <= 0)
                break; /* named by the second pass */
            if (remaining(&c) < (size_t)es)
                return truncated(&c, "a metadata value");
            c.off += (size_t)es;
        }
    }
    *n_strs = n;
    return 0;
}

static int parse_kvs(cursor_t *c, gguf_file_t *g, uint64_t n_kv)
{
    int rc;
    size_t n_strs = 0;
    /* Each entry takes at least 8 (key length) + 4 (type) + 1 (a u8 value) bytes. */
    if (n_kv > remaining(c) / 13)
        return truncated(c, "the metadata (its count is larger than the file can hold)");
    if ((rc = count_strings(*c, n_kv, &n_strs)))
        return rc;
    g->kvs = cairn_calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kvs);
    g->kv_sorted = cairn_calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv_sorted);
    g->strs = cairn_calloc(n_strs ? n_strs : 1, sizeof *g->strs);
    if (!g->kvs || !g->kv_sorted || !g->strs)
        return CAIRN_ENOMEM;
    size_t used = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv_t *kv = &g->kvs[i];
        char keybuf[96];
        uint32_t type;
        if ((rc = read_str(c, &kv->key, "a metadata key")))
            return rc;
        show(kv->key, keybuf, sizeof keybuf);
        if (kv->key.n == 0) {
            st_errf(c->err, c->err_len, "%s: metadata entry %llu has an empty key", c->what,
                    (unsigned long long)i);
            return CAIRN_EFORMAT;
        }
        if ((rc = read_u32(c, &type, "a metadata value type")))
            return rc;
        kv->type = (gguf_type_t)type;
        if (scalar_size(type) < 0) {
            st_errf(c->err, c->err_len, "%s: metadata key '%s' has unknown value type %u",
                    c->what, keybuf, type);
            return CAIRN_EFORMAT;
        }
        if ((rc = read_value(c, g, kv, &used, keybuf)))
            return rc;
        CAIRN_ASSERT(used <= n_strs);
        g->kv_sorted[i] = kv;
    }
    g->n_kvs = (size_t)n_kv;
    qsort(g->kv_sorted, g->n_kvs, sizeof *g->kv_sorted, cmp_kv);
    for (size_t i = 1; i < g->n_kvs; i++) {
        if (cmp_str(g->kv_sorted[i - 1]->key, g->kv_sorted[i]->key) == 0) {
            char keybuf[96];
            st_errf(c->err, c->err_len, "%s: metadata key '%s' appears twice", c->what,
                    show(g->kv_sorted[i]->key, keybuf, sizeof keybuf));
            return CAIRN_EFORMAT;
        }
    }
    return 0;
}

/* Multiplies into *acc, false on overflow past INT64_MAX. */
static bool mul_ok(uint64_t *acc, uint64_t v)
{
    if (v && *acc > (uint64_t)INT64_MAX / v)
        return false;
    *acc *= v;
    return true;
}

static int parse_tensors(cursor_t *c, gguf_file_t *g, uint64_t n_tensors)
{
    int rc;
    /* Each entry takes at least 8 + 1 (name) + 4 (n_dims) + 8 (one dim) + 4 + 8 bytes. */
    if (n_tensors > remaining(c) / 33)
        return truncated(c, "the tensor table (its count is larger than the file can hold)");
    g->tensors = cairn_calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    g->t_sorted = cairn_calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->t_sorted);
    if (!g->tensors || !g->t_sorted)
        return CAIRN_ENOMEM;
    /* Names: one store, sized by a pass that only reads their lengths. */
    gguf_str_t *names = cairn_calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *names);
    if (!names)
        return CAIRN_ENOMEM;
    size_t name_bytes = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor_t *t = &g->tensors[i];
        char reading[96];
        snprintf(reading, sizeof reading, "tensor %llu of the tensor table", (unsigned long long)i);
        if ((rc = read_str(c, &names[i], reading)))
            goto out;
        char nb[80];
        show(names[i], nb, sizeof nb);
        if (names[i].n == 0 || names[i].n > GGUF_MAX_NAME || memchr(names[i].p, 0, names[i].n)) {
            st_errf(c->err, c->err_len, "%s: tensor %llu has an empty, over-long (> %d bytes) or "
                    "NUL-containing name '%s'", c->what, (unsigned long long)i, GGUF_MAX_NAME, nb);
            rc = CAIRN_EFORMAT;
            goto out;
        }
        name_bytes += names[i].n + 1;
        uint32_t type;
        if ((rc = read_u32(c, &t->n_dims, reading)))
            goto out;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
            st_errf(c->err, c->err_len, "%s: tensor '%s' has %u dimensions (1 to %d allowed)",
                    c->what, nb, t->n_dims, GGUF_MAX_DIMS);
            rc = CAIRN_EFORMAT;
            goto out;
        }
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t v;
            if ((rc = read_u64(c, &v, reading)))
                goto out;
            if (v > (uint64_t)INT64_MAX) {
                st_errf(c->err, c->err_len, "%s: tensor '%s' dimension %u is negative", c->what,
                        nb, d);
                rc = CAIRN_EFORMAT;
                goto out;
            }
            t->ne[d] = (int64_t)v;
        }
        if ((rc = read_u32(c, &type, reading)) || (rc = read_u64(c, &t->offset, reading)))
            goto out;
        t->type = gguf_tensor_type(type);
        if (!t->type) {
            st_errf(c->err, c->err_len, "%s: tensor '%s' has unknown ggml type id %u", c->what,
                    nb, type);
            rc = CAIRN_EUNSUPPORTED;
            goto out;
        }
        if (t->ne[0] % t->type->block_elems != 0) {
            st_errf(c->err, c->err_len, "%s: tensor '%s' rows of %lld elements are not whole "
                    "%s blocks of %u", c->what, nb, (long long)t->ne[0], t->type->name,
                    t->type->block_elems);
            rc = CAIRN_EFORMAT;
            goto out;
        }
        uint64_t bytes = (uint64_t)t->ne[0] / t->type->block_elems;
        bool ok = mul_ok(&bytes, t->type->block_bytes);
        for (int d = 1; d < GGUF_MAX_DIMS && ok; d++)
            ok = mul_ok(&bytes, (uint64_t)t->ne[d]);
        uint64_t elems = 1;
        for (int d = 0; d < GGUF_MAX_DIMS && ok; d++)
            ok = mul_ok(&elems, (uint64_t)t->ne[d]);
        if (!ok) {
            st_errf(c->err, c->err_len, "%s: tensor '%s' is too large (its size overflows)",
                    c->what, nb);
            rc = CAIRN_EFORMAT;
            goto out;
        }
        t->bytes = bytes;
    }
    g->names = cairn_malloc(name_bytes ? name_bytes : 1);
    if (!g->names) {
        rc = CAIRN_ENOMEM;
        goto out;
    }
    size_t at = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        memcpy(g->names + at, names[i].p, names[i].n);
        g->names[at + names[i].n] = 0;
        g->tensors[i].name = g->names + at;
        at += names[i].n + 1;
        g->t_sorted[i] = &g->tensors[i];
    }
    g->n_tensors = (size_t)n_tensors;
    qsort(g->t_sorted, g->n_tensors, sizeof *g->t_sorted, cmp_tensor_name);
    for (size_t i = 1; i < g->n_tensors; i++) {
        if (!strcmp(g->t_sorted[i - 1]->name, g->t_sorted[i]->name)) {
            st_errf(c->err, c->err_len, "%s: tensor '%.80s' appears twice", c->what,
                    g->t_sorted[i]->name);
            rc = CAIRN_EFORMAT;
            goto out;
        }
    }
    rc = 0;
out:
    cairn_free(names);
    return rc;
}

/* Offsets, alignment and overlaps, once the data offset is known. */
static int check_layout(cursor_t *c, gguf_file_t *g)
{
    uint64_t data_len = g->len - g->data_offset;
    const gguf_tensor_t **by_off = cairn_malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *by_off);
    if (!by_off)
        return CAIRN_ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor_t *t = &g->tensors[i];
        by_off[i] = t;
        if (t->offset % g->alignment != 0) {
            st_errf(c->err, c->err_len, "%s: tensor '%.80s' offset %llu is not a multiple of the "
                    "alignment %u", c->what, t->name, (unsigned long long)t->offset, g->alignment);
            rc = CAIRN_EFORMAT;
            goto out;
        }
        if (t->offset > data_len || t->bytes > data_len - t->offset) {
            st_errf(c->err, c->err_len, "%s: tensor '%.80s' (%llu bytes at offset %llu) ends past "
                    "the end of the file (data section of %llu bytes)", c->what, t->name,
                    (unsigned long long)t->bytes, (unsigned long long)t->offset,
                    (unsigned long long)data_len);
            rc = CAIRN_EFORMAT;
            goto out;
        }
        t->data = g->buf + g->data_offset + t->offset;
    }
    qsort(by_off, g->n_tensors, sizeof *by_off, cmp_tensor_offset);
    const gguf_tensor_t *prev = NULL;
    for (size_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor_t *t = by_off[i];
        if (t->bytes == 0)
            continue;
        if (prev && prev->offset + prev->bytes > t->offset) {
            st_errf(c->err, c->err_len, "%s: tensors '%.80s' and '%.80s' overlap", c->what,
                    prev->name, t->name);
            rc = CAIRN_EFORMAT;
            goto out;
        }
        prev = t;
    }
out:
    cairn_free(by_off);
    return rc;
}

static int sha_le(EVP_MD_CTX *md, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return EVP_DigestUpdate(md, b, (size_t)bytes);
}

/* docs/FORMAT.md 1.5 over one "file" named model.gguf with header [0, data_offset). */
static int compute_digest(gguf_file_t *g)
{
    static const char name[] = "model.gguf";
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned int out_len = 0;
    int ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) &&
             EVP_DigestUpdate(md, "cairn.weights.v1", 16) && sha_le(md, 1, 8) &&
             sha_le(md, sizeof name - 1, 4) && EVP_DigestUpdate(md, name, sizeof name - 1) &&
             sha_le(md, g->data_offset, 8) &&
             EVP_DigestUpdate(md, g->buf, (size_t)g->data_offset) && sha_le(md, g->len, 8) &&
             EVP_DigestFinal_ex(md, g->digest, &out_len) && out_len == 32;
    EVP_MD_CTX_free(md);
    return ok ? 0 : CAIRN_ENOMEM;
}

int gguf_parse(const uint8_t *buf, size_t len, const char *what, gguf_file_t **out, char *err,
               size_t err_len)
{
    int rc;
    if (!out || (!buf && len)) {
        st_errf(err, err_len, "gguf: no input");
        return CAIRN_EINVAL;
    }
    *out = NULL;
    if (!what)
        what = "gguf";
    cursor_t c = {buf, len, 0, what, err, err_len};
    gguf_file_t *g = cairn_calloc(1, sizeof *g);
    if (!g || !(g->what = cairn_strdup(what))) {
        cairn_free(g);
        st_errf(err, err_len, "%s: out of memory", what);
        return CAIRN_ENOMEM;
    }
    g->buf = buf;
    g->len = len;
    if (len < 4 || memcmp(buf, "GGUF", 4) != 0) {
        st_errf(err, err_len, "%s: not a GGUF file (no \"GGUF\" magic)", what);
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    c.off = 4;
    uint64_t n_tensors, n_kv;
    if ((rc = read_u32(&c, &g->version, "the version")))
        goto fail;
    if (g->version == 1 || ((g->version & 0xffff) == 0 && g->version != 0)) {
        st_errf(err, err_len, "%s: GGUF %s is not supported (versions 2 and 3 are)", what,
                g->version == 1 ? "version 1" : "in big-endian byte order");
        rc = CAIRN_EUNSUPPORTED;
        goto fail;
    }
    if (g->version != 2 && g->version != 3) {
        st_errf(err, err_len, "%s: unknown GGUF version %u (versions 2 and 3 are read)", what,
                g->version);
        rc = CAIRN_EUNSUPPORTED;
        goto fail;
    }
    if ((rc = read_u64(&c, &n_tensors, "the tensor count")) ||
        (rc = read_u64(&c, &n_kv, "the metadata count")) || (rc = parse_kvs(&c, g, n_kv)) ||
        (rc = parse_tensors(&c, g, n_tensors)))
        goto fail;

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv_t *al = gguf_find(g, "general.alignment");
    if (al) {
        uint32_t a = al->type == GGUF_TYPE_U32 ? (uint32_t)le(al->data, 4) : 0;
        if (!a || (a & (a - 1)) || a > GGUF_MAX_ALIGNMENT) {
            st_errf(err, err_len, "%s: general.alignment must be a u32 power of two up to %u",
                    what, GGUF_MAX_ALIGNMENT);
            rc = CAIRN_EFORMAT;
            goto fail;
        }
        g->alignment = a;
    }
    /* The data section starts at the next multiple of the alignment. */
    uint64_t data = ((uint64_t)c.off + g->alignment - 1) / g->alignment * g->alignment;
    if (data > len) {
        if (g->n_tensors) {
            st_errf(err, err_len, "%s: truncated at byte %zu (the file ends before its data "
                    "section at byte %llu)", what, len, (unsigned long long)data);
            rc = CAIRN_EFORMAT;
            goto fail;
        }
        data = len; /* metadata only: nothing follows */
    }
    g->data_offset = data;
    if ((rc = check_layout(&c, g)) || (rc = compute_digest(g)))
        goto fail;
    *out = g;
    return 0;
fail:
    if (rc == CAIRN_ENOMEM)
        st_errf(err, err_len, "%s: out of memory", what);
    gguf_close(g);
    return rc;
}

int gguf_open(const char *path, gguf_open_mode_t mode, gguf_file_t **out, char *err,
              size_t err_len)
{
    void *map = NULL;
    size_t size = 0;
    int rc = fmt_map_file(path, mode == GGUF_OPEN_WEIGHTS, &map, &size, err, err_len);
    if (rc)
        return rc;
    if ((rc = gguf_parse(map, size, path, out, err, err_len))) {
        munmap(map, size);
        return rc;
    }
    (*out)->map = map;
    (*out)->map_len = size;
    return 0;
}

void gguf_close(gguf_file_t *g)
{
    if (!g)
        return;
    if (g->map)
        munmap(g->map, g->map_len);
    cairn_free((void *)g->what);
    cairn_free(g->kvs);
    cairn_free(g->kv_sorted);
    cairn_free(g->strs);
    cairn_free(g->tensors);
    cairn_free(g->t_sorted);
    cairn_free(g->names);
    cairn_free(g);
}

bool gguf_file_is_gguf(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char magic[4];
    bool yes = pread(fd, magic, 4, 0) == 4 && memcmp(magic, "GGUF", 4) == 0;
    close(fd);
    return yes;
}

/* ---- accessors -------------------------------------------------------------------- */

const char *gguf_what(const gguf_file_t *g) { return g->what; }
uint32_t gguf_version(const gguf_file_t *g) { return g->version; }
uint32_t gguf_alignment(const gguf_file_t *g) { return g->alignment; }
uint64_t gguf_data_offset(const gguf_file_t *g) { return g->data_offset; }

const uint8_t *gguf_bytes(const gguf_file_t *g, size_t *len)
{
    if (len)
        *len = g->len;
    return g->buf;
}

size_t gguf_n_kvs(const gguf_file_t *g) { return g->n_kvs; }
const gguf_kv_t *gguf_kv(const gguf_file_t *g, size_t i) { return i < g->n_kvs ? &g->kvs[i] : NULL; }
size_t gguf_n_tensors(const gguf_file_t *g) { return g->n_tensors; }

const gguf_tensor_t *gguf_tensor(const gguf_file_t *g, size_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gguf_kv_t *gguf_find(const gguf_file_t *g, const char *key)
{
    gguf_str_t k = {key, strlen(key)};
    size_t lo = 0, hi = g->n_kvs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = cmp_str(g->kv_sorted[mid]->key, k);
        if (r == 0)
            return g->kv_sorted[mid];
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const gguf_tensor_t *gguf_find_tensor(const gguf_file_t *g, const char *name)
{
    size_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = strcmp(g->t_sorted[mid]->name, name);
        if (r == 0)
            return g->t_sorted[mid];
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void gguf_weights_digest(const gguf_file_t *g, uint8_t out[32]) { memcpy(out, g->digest, 32); }

bool gguf_str_eq(gguf_str_t a, const char *s)
{
    size_t n = strlen(s);
    return a.n == n && (n == 0 || memcmp(a.p, s, n) == 0);
}

static bool is_int_type(uint32_t t)
{
    return t == GGUF_TYPE_U8 || t == GGUF_TYPE_I8 || t == GGUF_TYPE_U16 || t == GGUF_TYPE_I16 ||
           t == GGUF_TYPE_U32 || t == GGUF_TYPE_I32 || t == GGUF_TYPE_U64 || t == GGUF_TYPE_I64;
}

/* An integer value of type t at p, sign-extended; *neg for negative values. */
static uint64_t int_value(uint32_t t, const uint8_t *p, bool *neg)
{
    int n = scalar_size(t);
    uint64_t v = le(p, n);
    *neg = false;
    if ((t == GGUF_TYPE_I8 || t == GGUF_TYPE_I16 || t == GGUF_TYPE_I32 || t == GGUF_TYPE_I64) &&
        (v >> (8 * n - 1)) & 1) {
        *neg = true;
        if (n < 8)
            v |= ~(uint64_t)0 << (8 * n);
    }
    return v;
}

int64_t gguf_array_int(const gguf_kv_t *kv, uint64_t i)
{
    CAIRN_ASSERT(kv->type == GGUF_TYPE_ARRAY && is_int_type(kv->elem) && i < kv->n);
    bool neg;
    return (int64_t)int_value(kv->elem, kv->data + i * (uint64_t)scalar_size(kv->elem), &neg);
}

static int missing(const gguf_file_t *g, const char *key, char *err, size_t err_len)
{
    st_errf(err, err_len, "%s: missing metadata %s", g->what, key);
    return CAIRN_ENOENT;
}

static int wrong_type(const gguf_file_t *g, const gguf_kv_t *kv, const char *key, const char *want,
                      char *err, size_t err_len)
{
    st_errf(err, err_len, "%s: metadata %s is %s%s%s, expected %s", g->what, key,
            gguf_type_name(kv->type), kv->type == GGUF_TYPE_ARRAY ? " of " : "",
            kv->type == GGUF_TYPE_ARRAY ? gguf_type_name(kv->elem) : "", want);
    return CAIRN_EFORMAT;
}

int gguf_get_uint(const gguf_file_t *g, const char *key, bool required, uint64_t dflt,
                  uint64_t max, uint64_t *out, char *err, size_t err_len)
{
    const gguf_kv_t *kv = gguf_find(g, key);
    if (!kv) {
        if (required)
            return missing(g, key, err, err_len);
        *out = dflt;
        return 0;
    }
    if (!is_int_type(kv->type))
        return wrong_type(g, kv, key, "an integer", err, err_len);
    bool neg;
    uint64_t v = int_value(kv->type, kv->data, &neg);
    if (neg || v > max) {
        st_errf(err, err_len, "%s: metadata %s = %s%llu is out of range (0 to %llu)", g->what, key,
                neg ? "-" : "", (unsigned long long)(neg ? -v : v), (unsigned long long)max);
        return CAIRN_EFORMAT;
    }
    *out = v;
    return 0;
}

int gguf_get_float(const gguf_file_t *g, const char *key, bool required, float dflt, float *out,
                   char *err, size_t err_len)
{
    const gguf_kv_t *kv = gguf_find(g, key);
    if (!kv) {
        if (required)
            return missing(g, key, err, err_len);
        *out = dflt;
        return 0;
    }
    double v;
    if (kv->type == GGUF_TYPE_F32) {
        uint32_t u = (uint32_t)le(kv->data, 4);
        float f;
        memcpy(&f, &u, 4);
        v = f;
    } else if (kv->type == GGUF_TYPE_F64) {
        uint64_t u = le(kv->data, 8);
        memcpy(&v, &u, 8);
    } else {
        return wrong_type(g, kv, key, "a float", err, err_len);
    }
    if (!isfinite(v) || !isfinite((float)v)) {
        st_errf(err, err_len, "%s: metadata %s is not a finite float", g->what, key);
        return CAIRN_EFORMAT;
    }
    *out = (float)v;
    return 0;
}

int gguf_get_bool(const gguf_file_t *g, const char *key, bool dflt, bool *out, char *err,
                  size_t err_len)
{
    const gguf_kv_t *kv = gguf_find(g, key);
    if (!kv) {
        *out = dflt;
        return 0;
    }
    if (kv->type != GGUF_TYPE_BOOL)
        return wrong_type(g, kv, key, "a bool", err, err_len);
    *out = kv->data[0] != 0;
    return 0;
}

int gguf_get_str(const gguf_file_t *g, const char *key, bool required, gguf_str_t *out,
                 char *err, size_t err_len)
{
    const gguf_kv_t *kv = gguf_find(g, key);
    out->p = NULL;
    out->n = 0;
    if (!kv)
        return required ? missing(g, key, err, err_len) : 0;
    if (kv->type != GGUF_TYPE_STRING)
        return wrong_type(g, kv, key, "a string", err, err_len);
    *out = kv->strs[0];
    return 0;
}

int gguf_get_array(const gguf_file_t *g, const char *key, gguf_type_t elem, bool required,
                   const gguf_kv_t **out, char *err, size_t err_len)
{
    const gguf_kv_t *kv = gguf_find(g, key);
    *out = NULL;
    if (!kv)
        return required ? missing(g, key, err, err_len) : 0;
    /* Integer arrays are read whatever their integer width (writers differ: i32, u32). */
    bool ok = kv->type == GGUF_TYPE_ARRAY &&
              (kv->elem == elem || (is_int_type(elem) && is_int_type(kv->elem)));
    if (!ok) {
        char want[32];
        snprintf(want, sizeof want, "an array of %s", gguf_type_name(elem));
        return wrong_type(g, kv, key, want, err, err_len);
    }
    *out = kv;
    return 0;
}
