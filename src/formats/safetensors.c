/*
 * safetensors.c — parses and validates safetensors headers from memory (format:
 * docs/FORMAT.md, "safetensors and checkpoint folders"), plus the loader's small helpers.
 *
 * Invariant on success: every tensor's [begin, end) lies inside the data section, its
 * length equals product(shape) * dtype size, no two non-empty tensors overlap, and names
 * are unique and sorted. Nothing is trusted before it is checked: the header length, each
 * number (finite, integral, below 2^53) and each product (checked multiplication).
 *
 * Thread-safety: reentrant.
 */
#include "formats/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/json.h"

void st_errf(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || err_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

const char *st_dtype_name(cairn_dtype_t t)
{
    switch (t) {
    case CAIRN_DTYPE_F32: return "F32";
    case CAIRN_DTYPE_F16: return "F16";
    case CAIRN_DTYPE_BF16: return "BF16";
    case CAIRN_DTYPE_Q8_0:
    case CAIRN_DTYPE_Q4_0:
    case CAIRN_DTYPE_Q4_K:
    case CAIRN_DTYPE_Q5_K:
    case CAIRN_DTYPE_Q6_K:
    case CAIRN_DTYPE_Q8_K:
    case CAIRN_DTYPE_FP8_E4M3: return cairn_dtype_name(t); /* no safetensors dtype: the GGUF name */
    }
    return "?";
}

/* Other dtypes of the safetensors specification: valid files we cannot compute in. */
static const char *const foreign_dtypes[] = {
    "BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64", "F64",
    "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64",
};

/* A JSON number that is an exact non-negative integer a file offset can hold. */
static bool json_u53(const cJSON *n, uint64_t *out)
{
    if (!cJSON_IsNumber(n))
        return false;
    double v = n->valuedouble;
    if (!(v >= 0.0) || v > 9007199254740992.0 || v != floor(v))
        return false;
    *out = (uint64_t)v;
    return true;
}

static int cmp_by_name(const void *a, const void *b)
{
    return strcmp(((const st_tensor_t *)a)->name, ((const st_tensor_t *)b)->name);
}

static int cmp_by_offset(const void *a, const void *b)
{
    const st_tensor_t *x = *(const st_tensor_t *const *)a, *y = *(const st_tensor_t *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

void st_header_free(st_header_t *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < h->n_tensors; i++)
        cairn_free(h->tensors[i].name);
    cairn_free(h->tensors);
    h->tensors = NULL;
    h->n_tensors = 0;
}

const st_tensor_t *st_header_find(const st_header_t *h, const char *name)
{
    size_t lo = 0, hi = h->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, h->tensors[mid].name);
        if (c == 0)
            return &h->tensors[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* Parses one tensor entry `item` into *t (name already set). */
static int parse_entry(const cJSON *item, const char *what, st_tensor_t *t, uint64_t data_len,
                       char *err, size_t err_len)
{
    if (!cJSON_IsObject(item)) {
        st_errf(err, err_len, "%s: tensor '%s': entry is not an object", what, t->name);
        return CAIRN_EFORMAT;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!cJSON_IsString(dt)) {
        st_errf(err, err_len, "%s: tensor '%s': missing dtype", what, t->name);
        return CAIRN_EFORMAT;
    }
    if (!strcmp(dt->valuestring, "BF16")) {
        t->dtype = CAIRN_DTYPE_BF16;
    } else if (!strcmp(dt->valuestring, "F16")) {
        t->dtype = CAIRN_DTYPE_F16;
    } else if (!strcmp(dt->valuestring, "F32")) {
        t->dtype = CAIRN_DTYPE_F32;
    } else {
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(foreign_dtypes); i++) {
            if (!strcmp(dt->valuestring, foreign_dtypes[i])) {
                st_errf(err, err_len,
                        "%s: tensor '%s' has dtype %s; only BF16, F16 and F32 are supported",
                        what, t->name, dt->valuestring);
                return CAIRN_EUNSUPPORTED;
            }
        }
        st_errf(err, err_len, "%s: tensor '%s': unknown dtype '%.32s'", what, t->name,
                dt->valuestring);
        return CAIRN_EFORMAT;
    }

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    if (!cJSON_IsArray(shape)) {
        st_errf(err, err_len, "%s: tensor '%s': missing shape", what, t->name);
        return CAIRN_EFORMAT;
    }
    int nd = cJSON_GetArraySize(shape);
    if (nd > ST_MAX_DIMS) {
        st_errf(err, err_len, "%s: tensor '%s': %d dimensions (at most %d supported)", what,
                t->name, nd, ST_MAX_DIMS);
        return CAIRN_EUNSUPPORTED;
    }
    uint64_t bytes = cairn_dtype_size(t->dtype);
    t->ndim = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape)
    {
        uint64_t v;
        if (!json_u53(d, &v)) {
            st_errf(err, err_len, "%s: tensor '%s': shape entries must be non-negative integers",
                    what, t->name);
            return CAIRN_EFORMAT;
        }
        if (__builtin_mul_overflow(bytes, v, &bytes)) {
            st_errf(err, err_len, "%s: tensor '%s': shape product overflows", what, t->name);
            return CAIRN_EFORMAT;
        }
        t->shape[t->ndim++] = (int64_t)v;
    }

    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !json_u53(cJSON_GetArrayItem(offs, 0), &t->begin) ||
        !json_u53(cJSON_GetArrayItem(offs, 1), &t->end)) {
        st_errf(err, err_len, "%s: tensor '%s': data_offsets must be [begin, end] integers", what,
                t->name);
        return CAIRN_EFORMAT;
    }
    if (t->begin > t->end || t->end > data_len) {
        st_errf(err, err_len,
                "%s: tensor '%s': data_offsets [%llu, %llu] outside the data section (%llu bytes)",
                what, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                (unsigned long long)data_len);
        return CAIRN_EFORMAT;
    }
    if (t->end - t->begin != bytes) {
        st_errf(err, err_len,
                "%s: tensor '%s': data_offsets span %llu bytes but dtype %s x shape needs %llu",
                what, t->name, (unsigned long long)(t->end - t->begin), dt->valuestring,
                (unsigned long long)bytes);
        return CAIRN_EFORMAT;
    }
    return 0;
}

int st_parse_header(const uint8_t *buf, size_t buf_len, const char *what, st_header_t *out,
                    char *err, size_t err_len)
{
    int rc;
    cJSON *root = NULL;
    const st_tensor_t **by_off = NULL;
    memset(out, 0, sizeof *out);

    if (buf_len < 8) {
        st_errf(err, err_len, "%s: file is %zu bytes, too short for a safetensors header", what,
                buf_len);
        return CAIRN_EFORMAT;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | buf[i];
    if (n > buf_len - 8 || n > ST_MAX_HEADER_LEN || n < 2) {
        st_errf(err, err_len,
                "%s: header length %llu does not fit the file (%zu bytes) or the %llu-byte limit",
                what, (unsigned long long)n, buf_len, (unsigned long long)ST_MAX_HEADER_LEN);
        return CAIRN_EFORMAT;
    }
    out->header_len = n;
    out->data_offset = 8 + n;
    out->data_len = buf_len - out->data_offset;

    const char *text = (const char *)buf + 8;
    const char *end = NULL;
    size_t pos = 0;
    rc = cairn_json_parse(text, (size_t)n, &end, &root, &pos);
    if (rc == CAIRN_EFORMAT)
        st_errf(err, err_len, "%s: header is not valid JSON (near byte %zu)", what, pos);
    if (rc)
        goto fail;
    /* Writers pad the header with spaces so the data section is aligned. */
    for (const char *p = end; p < text + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '\0') {
            st_errf(err, err_len, "%s: trailing bytes after the header JSON", what);
            rc = CAIRN_EFORMAT;
            goto fail;
        }
    }
    if (!cJSON_IsObject(root)) {
        st_errf(err, err_len, "%s: header is not a JSON object", what);
        rc = CAIRN_EFORMAT;
        goto fail;
    }

    size_t count = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root)
    {
        if (!item->string) {
            st_errf(err, err_len, "%s: header entry without a name", what);
            rc = CAIRN_EFORMAT;
            goto fail;
        }
        if (!strcmp(item->string, "__metadata__")) {
            if (!cJSON_IsObject(item) && !cJSON_IsNull(item)) {
                st_errf(err, err_len, "%s: __metadata__ is not an object", what);
                rc = CAIRN_EFORMAT;
                goto fail;
            }
            continue;
        }
        count++;
    }
    out->tensors = cairn_calloc(count ? count : 1, sizeof *out->tensors);
    if (!out->tensors) {
        rc = CAIRN_ENOMEM;
        goto fail;
    }
    cJSON_ArrayForEach(item, root)
    {
        if (!strcmp(item->string, "__metadata__"))
            continue;
        st_tensor_t *t = &out->tensors[out->n_tensors];
        t->name = cairn_strdup(item->string);
        if (!t->name) {
            rc = CAIRN_ENOMEM;
            goto fail;
        }
        out->n_tensors++;
        if (strlen(t->name) == 0) {
            st_errf(err, err_len, "%s: tensor with an empty name", what);
            rc = CAIRN_EFORMAT;
            goto fail;
        }
        rc = parse_entry(item, what, t, out->data_len, err, err_len);
        if (rc)
            goto fail;
    }

    qsort(out->tensors, out->n_tensors, sizeof *out->tensors, cmp_by_name);
    for (size_t i = 1; i < out->n_tensors; i++) {
        if (!strcmp(out->tensors[i - 1].name, out->tensors[i].name)) {
            st_errf(err, err_len, "%s: tensor '%s' appears twice", what, out->tensors[i].name);
            rc = CAIRN_EFORMAT;
            goto fail;
        }
    }

    /* Overlap check: sort views by offset; each non-empty tensor starts after the last. */
    by_off = cairn_malloc((out->n_tensors ? out->n_tensors : 1) * sizeof *by_off);
    if (!by_off) {
        rc = CAIRN_ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < out->n_tensors; i++)
        by_off[i] = &out->tensors[i];
    qsort(by_off, out->n_tensors, sizeof *by_off, cmp_by_offset);
    const st_tensor_t *prev = NULL;
    for (size_t i = 0; i < out->n_tensors; i++) {
        const st_tensor_t *t = by_off[i];
        if (t->begin == t->end)
            continue;
        if (prev && t->begin < prev->end) {
            st_errf(err, err_len, "%s: tensors '%s' and '%s' overlap in the data section", what,
                    prev->name, t->name);
            rc = CAIRN_EFORMAT;
            goto fail;
        }
        prev = t;
    }

    cairn_free(by_off);
    cJSON_Delete(root);
    return 0;

fail:
    cairn_free(by_off);
    cJSON_Delete(root);
    st_header_free(out);
    if (rc == CAIRN_ENOMEM)
        st_errf(err, err_len, "%s: out of memory", what);
    return rc;
}

int st_read_file(const char *path, size_t max_len, char **out, size_t *out_len, char *err,
                 size_t err_len)
{
    int rc;
    char *buf = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO;
        st_errf(err, err_len, "%s: %s", path, strerror(errno));
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        st_errf(err, err_len, "%s: %s", path, strerror(errno));
        rc = CAIRN_EIO;
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        st_errf(err, err_len, "%s: not a regular file", path);
        rc = CAIRN_EIO;
        goto fail;
    }
    if ((uint64_t)st.st_size > max_len) {
        st_errf(err, err_len, "%s: %lld bytes, larger than the %zu-byte limit", path,
                (long long)st.st_size, max_len);
        rc = CAIRN_ERANGE;
        goto fail;
    }
    size_t len = (size_t)st.st_size;
    buf = cairn_malloc(len + 1);
    if (!buf) {
        st_errf(err, err_len, "%s: out of memory", path);
        rc = CAIRN_ENOMEM;
        goto fail;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            st_errf(err, err_len, "%s: read failed: %s", path, r < 0 ? strerror(errno) : "short");
            rc = CAIRN_EIO;
            goto fail;
        }
        got += (size_t)r;
    }
    buf[len] = '\0';
    close(fd);
    *out = buf;
    *out_len = len;
    return 0;

fail:
    cairn_free(buf);
    close(fd);
    return rc;
}
