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

#include "util/json.h"
#include "util/util.h"

#define INDEX_MAX_LEN ((size_t)64 << 20)

typedef struct {
    char *name;       /* file name inside the folder */
    void *map;        /* whole file, PROT_READ, MAP_PRIVATE */
    size_t size;
    st_header_t hdr;
} ck_file_t;

/* One row of the global tensor table: a tensor and the file it lives in. */
typedef struct {
    const char *name; /* points into the file's header table */
    const st_tensor_t *t;
    int file;
    bool used;
} ck_entry_t;

struct fmt_tensors {
    char *dir;
    ck_file_t *files; /* [n_files], sorted by name */
    int n_files;
    ck_entry_t *table; /* [n_table], sorted by name */
    size_t n_table;
    void **copies; /* aligned copies of misaligned tensors */
    size_t n_copies;
    uint8_t digest[32];
    uint64_t weight_bytes;
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

/* Maps dir/f->name and validates its header. */
static int map_file(const char *dir, ck_file_t *f, char *err, size_t err_len)
{
    int rc;
    char *path = cairn_path_join(dir, f->name);
    int fd = -1;
    if (!path) {
        st_errf(err, err_len, "%s: out of memory", f->name);
        return CAIRN_ENOMEM;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO;
        st_errf(err, err_len, "%s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        st_errf(err, err_len, "%s: not a readable regular file", path);
        rc = CAIRN_EIO;
        goto fail;
    }
    if (st.st_size < 8) {
        st_errf(err, err_len, "%s: file is %lld bytes, too short for a safetensors header", path,
                (long long)st.st_size);
        rc = CAIRN_EFORMAT;
        goto fail;
    }
    f->size = (size_t)st.st_size;
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        rc = errno == ENOMEM ? CAIRN_ENOMEM : CAIRN_EIO;
        st_errf(err, err_len, "%s: mmap failed: %s", path, strerror(errno));
        goto fail;
    }
    copy_to_anon(f, fd);
    close(fd);
    fd = -1;
    rc = st_parse_header(f->map, f->size, path, &f->hdr, err, err_len);
    if (rc)
        goto fail;
    /* Weights are read front to back by every forward pass; start the readahead now. */
    madvise(f->map, f->size, MADV_WILLNEED);
    cairn_free(path);
    return 0;

fail:
    if (fd >= 0)
        close(fd);
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
        for (size_t j = 0; j < ck->files[i].hdr.n_tensors; j++) {
            ck_entry_t *e = &ck->table[ck->n_table++];
            e->t = &ck->files[i].hdr.tensors[j];
            e->name = e->t->name;
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

int fmt_tensors_bind(fmt_tensors_t *ck, const char *name, int ndim, const int64_t *dims,
                     cairn_tensor_t *out, char *err, size_t err_len)
{
    ck_entry_t *e = table_find(ck, name);
    if (!e) {
        st_errf(err, err_len, "%s: checkpoint lacks tensor '%s'", ck->dir, name);
        return CAIRN_ENOENT;
    }
    const st_tensor_t *t = e->t;
    bool match = t->ndim == ndim;
    for (int i = 0; match && i < ndim; i++)
        match = t->shape[i] == dims[i];
    if (!match) {
        char got[96] = "", want[96] = "";
        size_t g = 0, w = 0;
        for (int i = 0; i < t->ndim && g < sizeof got; i++)
            g += (size_t)snprintf(got + g, sizeof got - g, "%s%lld", i ? ", " : "",
                                  (long long)t->shape[i]);
        for (int i = 0; i < ndim && w < sizeof want; i++)
            w += (size_t)snprintf(want + w, sizeof want - w, "%s%lld", i ? ", " : "",
                                  (long long)dims[i]);
        st_errf(err, err_len, "%s: tensor '%s' has shape [%s] but config.json implies [%s]",
                ck->files[e->file].name, name, got, want);
        return CAIRN_EFORMAT;
    }
    const ck_file_t *f = &ck->files[e->file];
    const uint8_t *data = (const uint8_t *)f->map + f->hdr.data_offset + t->begin;
    size_t bytes = (size_t)(t->end - t->begin);
    if ((uintptr_t)data % cairn_dtype_size(t->dtype) != 0) {
        void *copy = cairn_malloc(bytes);
        void **grown = cairn_realloc(ck->copies, (ck->n_copies + 1) * sizeof *grown);
        if (!copy || !grown) {
            cairn_free(copy);
            if (grown)
                ck->copies = grown;
            st_errf(err, err_len, "%s: out of memory", ck->dir);
            return CAIRN_ENOMEM;
        }
        memcpy(copy, data, bytes);
        ck->copies = grown;
        ck->copies[ck->n_copies++] = copy;
        cairn_log(CAIRN_LOG_WARN, "%s: tensor '%s' is misaligned in the file; copied", f->name,
                  name);
        data = copy;
    }
    if (!e->used)
        ck->weight_bytes += bytes;
    e->used = true;
    memset(out, 0, sizeof *out);
    out->data = data;
    out->dtype = t->dtype;
    out->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        out->shape[i] = dims[i];
    return 0;
}

bool fmt_tensors_has(const fmt_tensors_t *ts, const char *name)
{
    return table_find((fmt_tensors_t *)ts, name) != NULL;
}

int fmt_tensors_check_used(const fmt_tensors_t *ts, fmt_tensor_ignore_fn ignore, void *user,
                           char *err, size_t err_len)
{
    /* A tensor the config does not use means the math would silently differ. */
    for (size_t i = 0; i < ts->n_table; i++) {
        const ck_entry_t *e = &ts->table[i];
        if (e->used || (ignore && ignore(user, e->name)))
            continue;
        st_errf(err, err_len, "%s: unexpected tensor '%s' (config.json gives it no use)",
                ts->files[e->file].name, e->name);
        return CAIRN_EUNSUPPORTED;
    }
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
 * The weights digest of docs/FORMAT.md 1.5 (the same bytes cairn_cold_weights_digest()
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
    cairn_free(ck->dir);
    cairn_free(ck);
}

const char *fmt_tensors_dir(const fmt_tensors_t *ts) { return ts->dir; }

void fmt_tensors_digest(const fmt_tensors_t *ck, uint8_t out[32]) { memcpy(out, ck->digest, 32); }

uint64_t fmt_tensors_bound_bytes(const fmt_tensors_t *ck) { return ck->weight_bytes; }
