/*
 * lfm2_model.c — opens an LFM2 checkpoint folder standalone: config.json,
 * generation_config.json and one model.safetensors, memory-mapped read-only.
 *
 * This is the family's own minimal loader until the family interface supplies a shared
 * one (sharded checkpoints are refused with a message saying so). Every tensor in the
 * file must be one the config uses (lfm2_weights_uses), as the dense loader requires.
 *
 * Thread-safety: immutable after open.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/safetensors.h"
#include "models/lfm2/lfm2_model.h"

#define CONFIG_MAX_LEN ((size_t)16 << 20)

struct lfm2_model {
    lfm2_config_t cfg;
    lfm2_weights_t w;
    void *map;
    size_t size;
    st_header_t hdr;
    cairn_tensor_t *tensors; /* [hdr.n_tensors], parallel to hdr.tensors (sorted by name) */
};

/* lfm2_bind_fn over the mapped file: find by name, check the shape. */
static int bind_tensor(void *ctx, const char *name, int ndim, const int64_t *dims,
                       cairn_tensor_t *out, char *err, size_t err_len)
{
    lfm2_model_t *m = ctx;
    const st_tensor_t *st = st_header_find(&m->hdr, name);
    if (!st) {
        st_errf(err, err_len, "checkpoint lacks tensor '%s'", name);
        return CAIRN_ENOENT;
    }
    const cairn_tensor_t *t = &m->tensors[st - m->hdr.tensors];
    bool ok = t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++)
        ok = t->shape[d] == dims[d];
    if (!ok) {
        char want[96] = "", got[96] = "";
        for (int d = 0; d < ndim; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
                     (long long)dims[d]);
        for (int d = 0; d < t->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                     (long long)t->shape[d]);
        st_errf(err, err_len, "tensor '%s' has shape [%s] but config.json implies [%s]", name,
                got, want);
        return CAIRN_EFORMAT;
    }
    *out = *t;
    return 0;
}

static int read_text(const char *dir, const char *name, bool optional, char **out, size_t *len,
                     char *err, size_t err_len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = st_read_file(path, CONFIG_MAX_LEN, out, len, err, err_len);
    if (rc == CAIRN_ENOENT && optional) {
        *out = NULL;
        if (err && err_len)
            err[0] = 0;
        return 0;
    }
    return rc;
}

static int map_weights(lfm2_model_t *m, const char *dir, char *err, size_t err_len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        if (access(path, F_OK) == 0) {
            st_errf(err, err_len, "%s: sharded lfm2 checkpoints are not supported yet", dir);
            return CAIRN_EUNSUPPORTED;
        }
        st_errf(err, err_len, "%s/model.safetensors: %s", dir, strerror(errno));
        return errno == ENOENT ? CAIRN_ENOENT : CAIRN_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 8) {
        close(fd);
        st_errf(err, err_len, "%s: not a safetensors file", path);
        return CAIRN_EFORMAT;
    }
    m->size = (size_t)st.st_size;
    m->map = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        st_errf(err, err_len, "%s: mmap failed: %s", path, strerror(errno));
        return CAIRN_EIO;
    }
    int rc = st_parse_header(m->map, m->size, path, &m->hdr, err, err_len);
    if (rc)
        return rc;
    m->tensors = cairn_calloc(m->hdr.n_tensors + 1, sizeof(*m->tensors));
    if (!m->tensors)
        return CAIRN_ENOMEM;
    for (size_t i = 0; i < m->hdr.n_tensors; i++) {
        const st_tensor_t *t = &m->hdr.tensors[i];
        if (!lfm2_weights_uses(&m->cfg, t->name)) {
            st_errf(err, err_len, "%s: tensor %s has no use in this lfm2 config", path, t->name);
            return CAIRN_EUNSUPPORTED;
        }
        if (t->ndim > 4 || (m->hdr.data_offset + t->begin) % cairn_dtype_size(t->dtype) != 0) {
            st_errf(err, err_len, "%s: tensor %s is misaligned or of rank > 4", path, t->name);
            return CAIRN_EFORMAT;
        }
        cairn_tensor_t *ct = &m->tensors[i];
        ct->data = (const unsigned char *)m->map + m->hdr.data_offset + t->begin;
        ct->dtype = t->dtype;
        ct->ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++)
            ct->shape[d] = t->shape[d];
    }
    madvise(m->map, m->size, MADV_WILLNEED);
    return 0;
}

int lfm2_model_open(const char *dir, lfm2_model_t **out, char *err, size_t err_len)
{
    char *text = NULL;
    size_t len = 0;
    int rc;
    *out = NULL;
    lfm2_model_t *m = cairn_calloc(1, sizeof(*m));
    if (!m) {
        st_errf(err, err_len, "out of memory");
        return CAIRN_ENOMEM;
    }
    if ((rc = read_text(dir, "config.json", false, &text, &len, err, err_len)) ||
        (rc = lfm2_config_parse_text(text, len, &m->cfg, err, err_len)))
        goto fail;
    cairn_free(text);
    text = NULL;
    if ((rc = read_text(dir, "generation_config.json", true, &text, &len, err, err_len)))
        goto fail;
    if (text && (rc = cairn_generation_config_parse(text, len, &m->cfg.base, err, err_len)))
        goto fail;
    cairn_free(text);
    text = NULL;
    if ((rc = map_weights(m, dir, err, err_len)) ||
        (rc = lfm2_weights_bind(&m->cfg, bind_tensor, m, &m->w, err, err_len)))
        goto fail;
    *out = m;
    return 0;
fail:
    cairn_free(text);
    lfm2_model_close(m);
    return rc;
}

void lfm2_model_close(lfm2_model_t *m)
{
    if (!m)
        return;
    lfm2_weights_fini(&m->w);
    cairn_free(m->tensors);
    st_header_free(&m->hdr);
    if (m->map)
        munmap(m->map, m->size);
    cairn_free(m);
}

const lfm2_config_t *lfm2_model_config(const lfm2_model_t *m) { return &m->cfg; }
const lfm2_weights_t *lfm2_model_weights(const lfm2_model_t *m) { return &m->w; }
