/*
 * weights_folder.c — the weight tensors of a Hugging Face checkpoint folder
 * (formats/weights_folder.h).
 *
 * Layout accepted (docs/FORMAT.md, "safetensors and checkpoint folders"):
 * model.safetensors or, when that is absent, model.safetensors.index.json naming the
 * shards. As transformers does, the single file wins when both exist.
 *
 * Every safetensors file is mapped once, read-only and private, and its header validated
 * (safetensors.c); by default (knob CAIRN_WEIGHTS_ANON) a file that fits comfortably in
 * free memory is then copied into anonymous huge pages (copy_to_anon). All tensors of all
 * files go into one sorted table; a name in two files, a tensor the index places in
 * another shard and a shard the index names but the folder lacks are errors at open. The
 * family binds what it uses (fmt_tensors_bind: presence and shape); the loader then calls
 * fmt_tensors_check_used so a tensor the config gives no use to is an error too.
 *
 * Alignment: a tensor's data pointer is page base + file offset, so it is aligned to its
 * element size whenever the file offset is (every writer we know pads the header to 8
 * bytes). A misaligned tensor is copied into an aligned heap buffer owned by the table
 * rather than handing the kernels an unaligned pointer.
 *
 * Thread-safety: open/bind/close on one thread; afterwards immutable.
 */
#include "formats/weights_folder.h"

#include "formats/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/type_traits.h"
#include "util/json.h"
#include "util/util.h"

#define INDEX_MAX_LEN ((size_t)64 << 20)

typedef struct {
    char *name;       /* file name inside the folder */
    void *map;        /* whole file, PROT_READ, MAP_PRIVATE */
    size_t size;
    st_header_t hdr;
} ck_file_t;

/* One row of the global tensor table: a tensor, where its bytes are, and its file. */
typedef struct {
    const char *name;      /* the source's name: a header table's or the names store's */
    const char *type_name; /* the source's spelling of the element type (messages) */
    bool has_dtype;        /* false: a type Cairn does not compute in (bind refuses it) */
    cairn_dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS]; /* row-major, shape[0] slowest */
    const uint8_t *data;
    uint64_t bytes;
    int file;
    bool used;
    const uint8_t *converted; /* the --quantize conversion, made at the first bind (owned by copies) */
} ck_entry_t;

struct fmt_tensors {
    char *dir;             /* folder, or the file of a single-file source */
    const char *meta_name; /* what implies the shapes, for messages: "config.json" */
    ck_file_t *files;      /* [n_files], sorted by name; a single-file source has one
                              entry with only its name */
    int n_files;
    ck_entry_t *table;     /* [n_table], sorted by name */
    size_t n_table;
    char *names;           /* names store of a fmt_tensors_create table */
    void **copies;         /* aligned copies of misaligned tensors, restored row orders */
    size_t n_copies, cap_copies;
    uint8_t digest[32];
    uint64_t weight_bytes;
    fmt_tensor_name_fn rename; /* a single-file source's name map (NULL: names as bound) */
    void *rename_user;
    void *owner;           /* what the data points into (fmt_tensors_create) */
    void (*owner_free)(void *);
    bool quantizing;       /* fmt_tensors_set_quantize: float matrices become `quantize` at bind */
    cairn_dtype_t quantize;
};

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const ck_file_t *)a)->name, ((const ck_file_t *)b)->name);
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const ck_entry_t *)a)->name, ((const ck_entry_t *)b)->name);
}

static ck_entry_t *table_find(fmt_tensors_t *ck, const char *name)
{
    ck_entry_t key = {.name = name};
    return bsearch(&key, ck->table, ck->n_table, sizeof key, cmp_entry);
}

/* MemAvailable from /proc/meminfo in bytes, or 0 when it cannot be read. */
static uint64_t mem_available(void)
{
    FILE *fp = fopen("/proc/meminfo", "r");
    if (!fp)
        return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, fp))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            break;
    fclose(fp);
    return (uint64_t)kib * 1024;
}

/*
 * Replaces the file mapping with a read-only private anonymous copy advised MADV_HUGEPAGE
 * (2 MiB pages where the kernel grants them). Decode streams every weight byte once per
 * token, and through the 4 KiB page-cache pages of a file mapping the kernels stall on
 * page walks: measured on the development machine (docs/PERFORMANCE.md, Engine), qwen3-8l
 * decode went from 77 to 93 tok/s and the 1.2 GB Qwen3-0.6B shape from ~14 to ~26 tok/s.
 * Costs resident anonymous memory equal to the file size (the page-cache copy stays,
 * reclaimable) and one read of the file at open; the bytes are identical, so results are
 * too. Knob CAIRN_WEIGHTS_ANON (env > default): the default copies a file when it takes at
 * most half of MemAvailable at that moment (shards are judged one by one as memory
 * fills), so a model near the machine's memory keeps the reclaimable mapping. Where the
 * copy cannot be allocated or read the mapping is kept.
 */
static void copy_to_anon(ck_file_t *f, int fd)
{
    uint64_t avail = mem_available();
    bool fits = avail > 0 && (uint64_t)f->size <= avail / 2;
    if (!cairn_knob_bool("CAIRN_WEIGHTS_ANON", false, false, fits))
        return;
    void *a = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED)
        return;
#ifdef MADV_HUGEPAGE
    madvise(a, f->size, MADV_HUGEPAGE);
#endif
    /* pread, not a memcpy from the mapping: no page faults on the file side. */
    for (size_t off = 0; off < f->size;) {
        ssize_t n = pread(fd, (char *)a + off, f->size - off, (off_t)off);
        if (n <= 0) {
            munmap(a, f->size);
            return;
        }
        off += (size_t)n;
    }
    if (mprotect(a, f->size, PROT_READ) != 0) {
        munmap(a, f->size);
        return;
    }
    munmap(f->map, f->size);
    f->map = a;
}

int fmt_map_file(const char *path, bool weights, void **map, size_t *size, char *err,
                 size_t err_len)
{
    int rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *map = NULL;
    *size = 0;
    if (fd < 0) {
        rc = errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO;
        st_errf(err, err_len, "%s: %s", path, strerror(errno));
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        st_errf(err, err_len, "%s: not a readable regular file", path);
        rc = CAIRN_EIO;
        goto out;
    }
    if (st.st_size == 0) {
        st_errf(err, err_len, "%s: the file is empty", path);
        rc = CAIRN_EFORMAT;
        goto out;
    }
    ck_file_t f = {.size = (size_t)st.st_size};
    f.map = mmap(NULL, f.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f.map == MAP_FAILED) {
        rc = errno == ENOMEM ? CAIRN_ENOMEM : CAIRN_EIO;
        st_errf(err, err_len, "%s: mmap failed: %s", path, strerror(errno));
        goto out;
    }
    if (weights) {
        copy_to_anon(&f, fd);
        /* Weights are read front to back by every forward pass; start the readahead now. */
        madvise(f.map, f.size, MADV_WILLNEED);
    }
    *map = f.map;
    *size = f.size;
    rc = 0;
out:
    close(fd);
    return rc;
}

/* Maps dir/f->name and validates its header. */
static int map_file(const char *dir, ck_file_t *f, char *err, size_t err_len)
{
    int rc;
    char *path = cairn_path_join(dir, f->name);
    if (!path) {
        st_errf(err, err_len, "%s: out of memory", f->name);
        return CAIRN_ENOMEM;
    }
    if ((rc = fmt_map_file(path, true, &f->map, &f->size, err, err_len)))
        goto fail;
    if (f->size < 8) {
        st_errf(err, err_len, "%s: file is %zu bytes, too short for a safetensors header", path,
                f->size);
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    rc = st_parse_header(f->map, f->size, path, &f->hdr, err, err_len);
fail:
    cairn_free(path);
    return rc;
}

/* A shard file name from the index must stay inside the folder. */
static bool safe_file_name(const char *s)
{
    return s[0] != '\0' && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/*
 * Reads model.safetensors.index.json: fills ck->files with the distinct shard names
 * (sorted) and returns the parsed weight_map document in *index_out for the later
 * cross-check.
 */
static int read_index(fmt_tensors_t *ck, const char *path, cJSON **index_out, char *err,
                      size_t err_len)
{
    int rc;
    char *text = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    if ((rc = st_read_file(path, INDEX_MAX_LEN, &text, &len, err, err_len)))
        return rc;
    if ((rc = cairn_json_parse(text, len, NULL, &root, NULL))) {
        st_errf(err, err_len, "%s: %s", path, rc == CAIRN_ENOMEM ? "out of memory" : "not valid JSON");
        goto fail;
    }
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm) || !wm->child) {
        st_errf(err, err_len, "%s: missing or empty weight_map", path);
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    int n = cJSON_GetArraySize(wm);
    ck->files = cairn_calloc((size_t)n, sizeof *ck->files);
    if (!ck->files) {
        rc = CAIRN_ENOMEM;
        st_errf(err, err_len, "%s: out of memory", path);
        goto fail;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, wm)
    {
        if (!cJSON_IsString(e) || !safe_file_name(e->valuestring)) {
            st_errf(err, err_len, "%s: weight_map entry '%s' is not a file name in the folder",
                    path, e->string ? e->string : "?");
            rc = CAIRN_EFORMAT;
            goto fail;
        }
        bool seen = false;
        for (int i = 0; i < ck->n_files && !seen; i++)
            seen = !strcmp(ck->files[i].name, e->valuestring);
        if (seen)
            continue;
        ck->files[ck->n_files].name = cairn_strdup(e->valuestring);
        if (!ck->files[ck->n_files].name) {
            rc = CAIRN_ENOMEM;
            st_errf(err, err_len, "%s: out of memory", path);
            goto fail;
        }
        ck->n_files++;
    }
    qsort(ck->files, (size_t)ck->n_files, sizeof *ck->files, cmp_file);
    cairn_free(text);
    *index_out = root;
    return 0;

fail:
    cJSON_Delete(root);
    cairn_free(text);
    return rc;
}

/* Builds the sorted global tensor table; a name in two files is an error. */
static int build_table(fmt_tensors_t *ck, char *err, size_t err_len)
{
    size_t n = 0;
    for (int i = 0; i < ck->n_files; i++)
        n += ck->files[i].hdr.n_tensors;
    ck->table = cairn_calloc(n ? n : 1, sizeof *ck->table);
    if (!ck->table) {
        st_errf(err, err_len, "%s: out of memory", ck->dir);
        return CAIRN_ENOMEM;
    }
    for (int i = 0; i < ck->n_files; i++) {
        const ck_file_t *f = &ck->files[i];
        for (size_t j = 0; j < f->hdr.n_tensors; j++) {
            const st_tensor_t *t = &f->hdr.tensors[j];
            ck_entry_t *e = &ck->table[ck->n_table++];
            e->name = t->name;
            e->type_name = st_dtype_name(t->dtype);
            e->has_dtype = true;
            e->dtype = t->dtype;
            e->ndim = t->ndim;
            memcpy(e->shape, t->shape, sizeof e->shape);
            e->data = (const uint8_t *)f->map + f->hdr.data_offset + t->begin;
            e->bytes = t->end - t->begin;
            e->file = i;
        }
    }
    qsort(ck->table, ck->n_table, sizeof *ck->table, cmp_entry);
    for (size_t i = 1; i < ck->n_table; i++) {
        if (!strcmp(ck->table[i - 1].name, ck->table[i].name)) {
            st_errf(err, err_len, "%s: tensor '%s' appears in both %s and %s", ck->dir,
                    ck->table[i].name, ck->files[ck->table[i - 1].file].name,
                    ck->files[ck->table[i].file].name);
            return CAIRN_EFORMAT;
        }
    }
    return 0;
}

/* Every weight_map entry must name the shard that really holds the tensor. */
static int check_index(fmt_tensors_t *ck, const cJSON *index, char *err, size_t err_len)
{
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    const cJSON *e;
    cJSON_ArrayForEach(e, wm)
    {
        ck_entry_t *t = table_find(ck, e->string);
        if (!t) {
            st_errf(err, err_len, "%s: tensor '%s' is in the index but not in shard %s", ck->dir,
                    e->string, e->valuestring);
            return CAIRN_EFORMAT;
        }
        if (strcmp(ck->files[t->file].name, e->valuestring) != 0) {
            st_errf(err, err_len, "%s: the index places tensor '%s' in %s but it is in %s",
                    ck->dir, e->string, e->valuestring, ck->files[t->file].name);
            return CAIRN_EFORMAT;
        }
    }
    return 0;
}

static void format_dims(char *buf, size_t cap, int ndim, const int64_t *dims)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)dims[i]);
}

/* A single-file source (GGUF) compares shapes as ggml does: missing leading axes are 1. */
static bool same_shape(const ck_entry_t *e, int ndim, const int64_t *dims, bool pad)
{
    if (!pad) {
        if (e->ndim != ndim)
            return false;
        for (int i = 0; i < ndim; i++)
            if (e->shape[i] != dims[i])
                return false;
        return true;
    }
    int n = e->ndim > ndim ? e->ndim : ndim;
    for (int i = 0; i < n; i++) {
        int64_t a = i < n - e->ndim ? 1 : e->shape[i - (n - e->ndim)];
        int64_t b = i < n - ndim ? 1 : dims[i - (n - ndim)];
        if (a != b)
            return false;
    }
    return true;
}

/* Keeps a buffer the table owns (freed at close). */
static int keep_copy(fmt_tensors_t *ck, void *copy)
{
    void *arr = ck->copies;
    if (cairn_grow_array(&arr, &ck->cap_copies, ck->n_copies + 1, sizeof *ck->copies, 16))
        return CAIRN_ENOMEM;
    ck->copies = arr;
    ck->copies[ck->n_copies++] = copy;
    return 0;
}

/*
 * Undoes llama.cpp's q/k row permutation (its converter's LlamaModel.permute) into a
 * buffer the table owns. The file stores, within each head of D rows, HF row i of the
 * first half at 2i and row D/2 + i at 2i + 1 (llama.cpp rotates adjacent pairs, HF
 * rotates halves); HF order is the inverse. Rows are whole blocks of any element type, so
 * this is a copy of row bytes.
 */
static int unpermute_rows(fmt_tensors_t *ck, const ck_entry_t *e, int heads, const uint8_t **out,
                          char *err, size_t err_len)
{
    int64_t rows = e->shape[0];
    if (e->ndim < 1 || heads <= 0 || rows % heads != 0 || (rows / heads) % 2 != 0) {
        st_errf(err, err_len, "%s: tensor '%s' has %lld rows, which do not split into %d heads "
                "of an even size", ck->files[e->file].name, e->name, (long long)rows, heads);
        return CAIRN_EFORMAT;
    }
    size_t row_bytes = (size_t)(e->bytes / (uint64_t)rows);
    int64_t hd = rows / heads, half = hd / 2;
    uint8_t *dst = cairn_malloc(e->bytes ? (size_t)e->bytes : 1);
    if (!dst || keep_copy(ck, dst)) {
        cairn_free(dst);
        st_errf(err, err_len, "%s: out of memory", ck->dir);
        return CAIRN_ENOMEM;
    }
    for (int64_t h = 0; h < heads; h++)
        for (int64_t r = 0; r < hd; r++) {
            int64_t src = r < half ? 2 * r : 2 * (r - half) + 1;
            memcpy(dst + (size_t)(h * hd + r) * row_bytes, e->data + (size_t)(h * hd + src) * row_bytes,
                   row_bytes);
        }
    *out = dst;
    return 0;
}

/* The table name of what a family binds as `name`: itself, or a single-file source's. */
static const char *source_name(const fmt_tensors_t *ck, const char *name, char *buf, size_t cap,
                               int *permute_heads)
{
    *permute_heads = 0;
    if (!ck->rename)
        return name;
    return ck->rename(ck->rename_user, name, buf, cap, permute_heads) ? buf : NULL;
}

int fmt_tensors_set_quantize(fmt_tensors_t *ts, cairn_dtype_t t, char *err, size_t err_len)
{
    const compute_type_traits_t *tt = compute_type_traits(t);
    if (!tt || !tt->quantized || t == CAIRN_DTYPE_Q8_K || t == CAIRN_DTYPE_FP8_E4M3) {
        st_errf(err, err_len, "%s: cannot quantize weights to %s (q8_0, q4_0, q4_k, q5_k or q6_k)", ts->dir,
                cairn_dtype_name(t));
        return CAIRN_EINVAL;
    }
    /* The converted model is another model: its digest (and so the cold tier's fingerprint)
     * is the source's mixed with the target type's name. */
    uint8_t d[32];
    unsigned int len = 32;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) && EVP_DigestUpdate(c, ts->digest, 32) &&
             EVP_DigestUpdate(c, "quantize:", 9) && EVP_DigestUpdate(c, tt->name, strlen(tt->name)) &&
             EVP_DigestFinal_ex(c, d, &len);
    EVP_MD_CTX_free(c);
    if (!ok) {
        st_errf(err, err_len, "%s: out of memory", ts->dir);
        return CAIRN_ENOMEM;
    }
    memcpy(ts->digest, d, 32);
    ts->quantizing = true;
    ts->quantize = t;
    return 0;
}

/* Whether bind converts this tensor: a float matrix whose rows are whole blocks. */
static bool converts(const fmt_tensors_t *ts, const ck_entry_t *e, int ndim, const int64_t *dims)
{
    const compute_type_traits_t *src = compute_type_traits(e->dtype);
    return ts->quantizing && ndim == 2 && src && !src->quantized &&
           dims[1] % cairn_dtype_block_elems(ts->quantize) == 0;
}

/* data [rows][cols] of type from, rounded row by row to ts->quantize (the traits table's
 * reference rounding) into a buffer ts owns. */
static int convert_rows(fmt_tensors_t *ts, const uint8_t *data, cairn_dtype_t from, int64_t rows, int64_t cols,
                        const uint8_t **out, uint64_t *bytes, char *err, size_t err_len)
{
    const compute_type_traits_t *src = compute_type_traits(from), *dst = compute_type_traits(ts->quantize);
    const size_t in_row = cairn_dtype_row_bytes(from, cols), out_row = cairn_dtype_row_bytes(ts->quantize, cols);
    const size_t total = (size_t)rows * out_row;
    uint8_t *q = cairn_malloc(total ? total : 1);
    float *f = cairn_malloc((size_t)cols * sizeof(float));
    if (!q || !f || keep_copy(ts, q)) {
        cairn_free(q);
        cairn_free(f);
        st_errf(err, err_len, "%s: out of memory", ts->dir);
        return CAIRN_ENOMEM;
    }
    for (int64_t r = 0; r < rows; r++) {
        src->to_f32(f, data + (size_t)r * in_row, cols);
        dst->from_f32(q + (size_t)r * out_row, f, cols);
    }
    cairn_free(f);
    *out = q;
    *bytes = (uint64_t)rows * out_row;
    return 0;
}

int fmt_tensors_bind(fmt_tensors_t *ck, const char *name, int ndim, const int64_t *dims,
                     cairn_tensor_t *out, char *err, size_t err_len)
{
    char buf[256];
    int heads = 0;
    const char *key = source_name(ck, name, buf, sizeof buf, &heads);
    ck_entry_t *e = key ? table_find(ck, key) : NULL;
    if (!e) {
        st_errf(err, err_len, "%s: checkpoint lacks tensor '%s'", ck->dir, key ? key : name);
        return CAIRN_ENOENT;
    }
    const char *file = ck->files[e->file].name;
    if (ndim > 4 || !same_shape(e, ndim, dims, ck->rename != NULL)) {
        char got[96], want[96];
        format_dims(got, sizeof got, e->ndim, e->shape);
        format_dims(want, sizeof want, ndim, dims);
        st_errf(err, err_len, "%s: tensor '%s' has shape [%s] but %s implies [%s]", file, e->name,
                got, ck->meta_name, want);
        return CAIRN_EFORMAT;
    }
    if (!e->has_dtype) {
        st_errf(err, err_len, "%s: tensor '%s' is of type %s, which this build of Cairn does not "
                "compute in", file, e->name, e->type_name);
        return CAIRN_EUNSUPPORTED;
    }
    const uint8_t *data = e->data;
    size_t elem = cairn_dtype_size(e->dtype); /* 0 for block types: no alignment demand */
    int rc;
    if (heads) {
        if ((rc = unpermute_rows(ck, e, heads, &data, err, err_len)))
            return rc;
    } else if (elem && (uintptr_t)data % elem != 0) {
        void *copy = cairn_malloc(e->bytes ? (size_t)e->bytes : 1);
        if (!copy || keep_copy(ck, copy)) {
            cairn_free(copy);
            st_errf(err, err_len, "%s: out of memory", ck->dir);
            return CAIRN_ENOMEM;
        }
        memcpy(copy, data, (size_t)e->bytes);
        cairn_log(CAIRN_LOG_WARN, "%s: tensor '%s' is misaligned in the file; copied", file,
                  e->name);
        data = copy;
    }
    cairn_dtype_t dtype = e->dtype;
    uint64_t bytes = e->bytes;
    if (converts(ck, e, ndim, dims)) {
        if (!e->converted && (rc = convert_rows(ck, data, e->dtype, dims[0], dims[1], &e->converted, &bytes, err,
                                                err_len)))
            return rc;
        data = e->converted;
        dtype = ck->quantize;
        bytes = cairn_dtype_row_bytes(dtype, dims[1]) * (uint64_t)dims[0];
    }
    if (!e->used)
        ck->weight_bytes += bytes;
    e->used = true;
    memset(out, 0, sizeof *out);
    out->data = data;
    out->dtype = dtype;
    out->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        out->shape[i] = dims[i];
    return 0;
}

bool fmt_tensors_has(const fmt_tensors_t *ts, const char *name)
{
    char buf[256];
    int heads;
    const char *key = source_name(ts, name, buf, sizeof buf, &heads);
    return key && table_find((fmt_tensors_t *)ts, key) != NULL;
}

int fmt_tensors_check_used(const fmt_tensors_t *ts, fmt_tensor_ignore_fn ignore, void *user,
                           char *err, size_t err_len)
{
    /* A tensor the config does not use means the math would silently differ. */
    for (size_t i = 0; i < ts->n_table; i++) {
        const ck_entry_t *e = &ts->table[i];
        if (e->used || (ignore && ignore(user, e->name)))
            continue;
        st_errf(err, err_len, "%s: unexpected tensor '%s' (%s gives it no use)",
                ts->files[e->file].name, e->name, ts->meta_name);
        return CAIRN_EUNSUPPORTED;
    }
    return 0;
}

int fmt_tensors_create(const char *path, const char *meta_name, const fmt_tensor_desc_t *descs,
                       size_t n, const uint8_t digest[32], fmt_tensor_name_fn rename,
                       void *rename_user, void *owner, void (*owner_free)(void *),
                       fmt_tensors_t **out, char *err, size_t err_len)
{
    *out = NULL;
    fmt_tensors_t *ck = cairn_calloc(1, sizeof *ck);
    size_t name_bytes = 0;
    for (size_t i = 0; i < n; i++)
        name_bytes += strlen(descs[i].name) + 1;
    const char *slash = strrchr(path, '/');
    if (ck && (ck->files = cairn_calloc(1, sizeof *ck->files)))
        ck->n_files = 1; /* so that close frees its name */
    if (!ck || !ck->files || !(ck->dir = cairn_strdup(path)) ||
        !(ck->files[0].name = cairn_strdup(slash ? slash + 1 : path)) ||
        !(ck->table = cairn_calloc(n ? n : 1, sizeof *ck->table)) ||
        !(ck->names = cairn_malloc(name_bytes ? name_bytes : 1))) {
        fmt_tensors_close(ck);
        st_errf(err, err_len, "%s: out of memory", path);
        return CAIRN_ENOMEM;
    }
    ck->meta_name = meta_name;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const fmt_tensor_desc_t *d = &descs[i];
        ck_entry_t *e = &ck->table[i];
        CAIRN_ASSERT(d->ndim >= 0 && d->ndim <= ST_MAX_DIMS);
        size_t len = strlen(d->name) + 1;
        memcpy(ck->names + at, d->name, len);
        e->name = ck->names + at;
        at += len;
        e->type_name = d->type_name;
        e->has_dtype = d->has_dtype;
        e->dtype = d->dtype;
        e->ndim = d->ndim;
        memcpy(e->shape, d->shape, sizeof e->shape);
        e->data = d->data;
        e->bytes = d->bytes;
    }
    ck->n_table = n;
    qsort(ck->table, n, sizeof *ck->table, cmp_entry);
    for (size_t i = 1; i < n; i++) {
        if (!strcmp(ck->table[i - 1].name, ck->table[i].name)) {
            st_errf(err, err_len, "%s: tensor '%s' appears twice", path, ck->table[i].name);
            fmt_tensors_close(ck);
            return CAIRN_EFORMAT;
        }
    }
    memcpy(ck->digest, digest, 32);
    ck->rename = rename;
    ck->rename_user = rename_user;
    ck->owner = owner;
    ck->owner_free = owner_free;
    *out = ck;
    return 0;
}

static int sha_le(EVP_MD_CTX *md, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return EVP_DigestUpdate(md, b, (size_t)bytes);
}

/*
 * The weights digest of docs/FORMAT.md 1.5 (the same bytes cairn_tier_weights_digest()
 * hashes): "cairn.weights.v1", u64 file count, then per file in name order: u32 name
 * length + name, u64 header length, the header JSON bytes, u64 file size (little-endian).
 */
static int compute_digest(fmt_tensors_t *ck, char *err, size_t err_len)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) &&
             EVP_DigestUpdate(md, "cairn.weights.v1", 16) && sha_le(md, (uint64_t)ck->n_files, 8);
    for (int i = 0; ok && i < ck->n_files; i++) {
        const ck_file_t *f = &ck->files[i];
        size_t name_len = strlen(f->name);
        ok = sha_le(md, name_len, 4) && EVP_DigestUpdate(md, f->name, name_len) &&
             sha_le(md, f->hdr.header_len, 8) &&
             EVP_DigestUpdate(md, (const uint8_t *)f->map + 8, (size_t)f->hdr.header_len) &&
             sha_le(md, (uint64_t)f->size, 8);
    }
    unsigned int out_len = 0;
    ok = ok && EVP_DigestFinal_ex(md, ck->digest, &out_len) && out_len == 32;
    EVP_MD_CTX_free(md);
    if (!ok) {
        st_errf(err, err_len, "%s: SHA-256 failed", ck->dir);
        return CAIRN_ENOMEM;
    }
    return 0;
}

int fmt_tensors_open(const char *dir, fmt_tensors_t **out, char *err, size_t err_len)
{
    int rc;
    fmt_tensors_t *ck = NULL;
    char *path = NULL;
    cJSON *index = NULL;
    *out = NULL;
    cairn_init();
    ck = cairn_calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = cairn_strdup(dir))) {
        rc = CAIRN_ENOMEM;
        goto oom;
    }
    ck->meta_name = "config.json";
    /* Weight files: the single file wins over an index, as in transformers. */
    if (!(path = cairn_path_join(dir, "model.safetensors"))) {
        rc = CAIRN_ENOMEM;
        goto oom;
    }
    if (access(path, F_OK) == 0) {
        ck->files = cairn_calloc(1, sizeof *ck->files);
        if (!ck->files || !(ck->files[0].name = cairn_strdup("model.safetensors"))) {
            rc = CAIRN_ENOMEM;
            goto oom;
        }
        ck->n_files = 1;
    } else {
        cairn_free(path);
        if (!(path = cairn_path_join(dir, "model.safetensors.index.json"))) {
            rc = CAIRN_ENOMEM;
            goto oom;
        }
        rc = read_index(ck, path, &index, err, err_len);
        if (rc == CAIRN_ENOENT)
            st_errf(err, err_len,
                    "%s: no model.safetensors or model.safetensors.index.json in the folder", dir);
        if (rc)
            goto fail;
    }
    for (int i = 0; i < ck->n_files; i++) {
        if ((rc = map_file(dir, &ck->files[i], err, err_len)))
            goto fail;
    }
    if ((rc = build_table(ck, err, err_len)) ||
        (index && (rc = check_index(ck, index, err, err_len))) ||
        (rc = compute_digest(ck, err, err_len)))
        goto fail;

    cJSON_Delete(index);
    cairn_free(path);
    *out = ck;
    return 0;

oom:
    st_errf(err, err_len, "%s: out of memory", dir);
fail:
    cJSON_Delete(index);
    cairn_free(path);
    fmt_tensors_close(ck);
    return rc;
}

void fmt_tensors_close(fmt_tensors_t *ck)
{
    if (!ck)
        return;
    for (int i = 0; i < ck->n_files; i++) {
        ck_file_t *f = &ck->files[i];
        st_header_free(&f->hdr);
        if (f->map)
            munmap(f->map, f->size);
        cairn_free(f->name);
    }
    cairn_free(ck->files);
    for (size_t i = 0; i < ck->n_copies; i++)
        cairn_free(ck->copies[i]);
    cairn_free(ck->copies);
    cairn_free(ck->table);
    cairn_free(ck->names);
    cairn_free(ck->dir);
    if (ck->owner_free)
        ck->owner_free(ck->owner);
    cairn_free(ck);
}

const char *fmt_tensors_dir(const fmt_tensors_t *ts) { return ts->dir; }

void fmt_tensors_digest(const fmt_tensors_t *ck, uint8_t out[32]) { memcpy(out, ck->digest, 32); }

uint64_t fmt_tensors_bound_bytes(const fmt_tensors_t *ck) { return ck->weight_bytes; }
