/*
 * checkpoint.c — cairn_checkpoint_open (include/cairn/checkpoint.h): a Hugging Face folder
 * or a GGUF file, read through src/formats and bound by the family it names.
 *
 * Folder (each step's errors name the file): config.json is read and parsed by its
 * family, generation_config.json (optional) adds eos ids, the weights are opened
 * (formats/weights_folder.h), the family binds what it uses, and every other tensor must
 * be one the family ignores on purpose. A GGUF file (formats/gguf.h): parsed and mapped
 * once, general.architecture picks the family, which maps the metadata and names its
 * tensors; binding and the unused-tensor check are the folder's. The checkpoint then
 * owns the bound model.
 *
 * Thread-safety: immutable after open; any number of threads may read it.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/safetensors.h"
#include "models/family.h"
#include "util/util.h"

#define CONFIG_MAX_LEN ((size_t)16 << 20)

struct cairn_checkpoint {
    char *dir;
    cairn_model_t model;
    fmt_tensors_t *tensors;
};

int cairn_model_config_parse(const char *json, size_t len, cairn_model_config_t *out,
                             char *err, size_t err_len)
{
    if (!json || !out) {
        st_errf(err, err_len, "config.json: no input");
        return CAIRN_EINVAL;
    }
    cairn_init();
    cairn_model_t m;
    int rc = cairn_model_parse_config(json, len, &m, err, err_len);
    if (rc)
        return rc;
    *out = m.cfg;
    cairn_model_fini(&m);
    return 0;
}

int cairn_generation_config_parse(const char *json, size_t len, cairn_model_config_t *cfg,
                                  char *err, size_t err_len)
{
    cairn_init();
    return hf_generation_config_merge(json, len, cfg, err, err_len);
}

typedef struct {
    const cairn_model_t *m;
} ignore_ctx_t;

static bool ignore_tensor(void *user, const char *name)
{
    const cairn_model_t *m = ((ignore_ctx_t *)user)->m;
    return m->family->ignore_tensor && m->family->ignore_tensor(m->priv, &m->cfg, name);
}

/* fmt_tensor_name_fn over the checkpoint's model: the family maps the names it binds. */
static bool gguf_name(void *user, const char *name, char *buf, size_t cap, int *permute_heads)
{
    const cairn_model_t *m = user;
    return m->family->gguf_tensor_name(m->priv, &m->cfg, name, buf, cap, permute_heads);
}

/* A GGUF file: its metadata parsed by the family of its architecture, its tensors as the
 * weight table (which then owns the mapping). */
static int open_gguf(cairn_checkpoint_t *ck, const char *path, char *err, size_t err_len)
{
    gguf_file_t *g = NULL;
    int rc = gguf_open(path, GGUF_OPEN_WEIGHTS, &g, err, err_len);
    if (rc)
        return rc;
    if ((rc = cairn_model_parse_gguf(g, &ck->model, err, err_len)) ||
        (rc = gguf_tensors_open(g, gguf_name, &ck->model, &ck->tensors, err, err_len)))
        gguf_close(g);
    return rc;
}

/* Binds the family's tensors (converted to `quantize` when quantizing); every other tensor
 * must be one it ignores on purpose. */
static int bind_all(cairn_checkpoint_t *ck, bool quantizing, cairn_dtype_t quantize, char *err, size_t err_len)
{
    ignore_ctx_t ic = {&ck->model};
    int rc = quantizing ? fmt_tensors_set_quantize(ck->tensors, quantize, err, err_len) : 0;
    if (rc)
        return rc;
    rc = ck->model.family->bind(ck->model.priv, &ck->model.cfg, ck->tensors, err, err_len);
    return rc ? rc : fmt_tensors_check_used(ck->tensors, ignore_tensor, &ic, err, err_len);
}

static int open_checkpoint(const char *dir, bool quantizing, cairn_dtype_t quantize, cairn_checkpoint_t **out,
                           char *err, size_t err_len)
{
    int rc;
    cairn_checkpoint_t *ck = NULL;
    char *path = NULL, *text = NULL;
    size_t len = 0;
    if (!dir || !out) {
        st_errf(err, err_len, "checkpoint: no folder given");
        return CAIRN_EINVAL;
    }
    *out = NULL;
    cairn_init();
    ck = cairn_calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = cairn_strdup(dir))) {
        rc = CAIRN_ENOMEM;
        goto oom;
    }
    struct stat sb;
    if (stat(dir, &sb) == 0 && S_ISREG(sb.st_mode)) {
        if ((rc = open_gguf(ck, dir, err, err_len)) || (rc = bind_all(ck, quantizing, quantize, err, err_len)))
            goto fail;
        *out = ck;
        return 0;
    }

    /* config.json (required), generation_config.json (optional). */
    if (!(path = cairn_path_join(dir, "config.json"))) {
        rc = CAIRN_ENOMEM;
        goto oom;
    }
    if ((rc = st_read_file(path, CONFIG_MAX_LEN, &text, &len, err, err_len)))
        goto fail;
    if ((rc = cairn_model_parse_config(text, len, &ck->model, err, err_len))) {
        /* Prefix the folder so the user knows which config.json. */
        if (err && err_len) {
            char tmp[512];
            snprintf(tmp, sizeof tmp, "%s", err);
            st_errf(err, err_len, "%s/%s", dir, tmp);
        }
        goto fail;
    }
    cairn_free(path);
    cairn_free(text);
    text = NULL;
    if (!(path = cairn_path_join(dir, "generation_config.json"))) {
        rc = CAIRN_ENOMEM;
        goto oom;
    }
    rc = st_read_file(path, CONFIG_MAX_LEN, &text, &len, err, err_len);
    if (rc == 0) {
        if ((rc = hf_generation_config_merge(text, len, &ck->model.cfg, err, err_len)))
            goto fail;
    } else if (rc != CAIRN_ENOENT) {
        goto fail;
    }
    cairn_free(path);
    path = NULL;
    cairn_free(text);
    text = NULL;

    /* Weights: opened by the format reader, bound by the family. */
    if ((rc = fmt_tensors_open(dir, &ck->tensors, err, err_len)) ||
        (rc = bind_all(ck, quantizing, quantize, err, err_len)))
        goto fail;
    *out = ck;
    return 0;

oom:
    st_errf(err, err_len, "%s: out of memory", dir);
fail:
    cairn_free(path);
    cairn_free(text);
    cairn_checkpoint_close(ck);
    return rc;
}

int cairn_checkpoint_open(const char *dir, cairn_checkpoint_t **out, char *err, size_t err_len)
{
    return open_checkpoint(dir, false, CAIRN_DTYPE_F32, out, err, err_len);
}

int cairn_checkpoint_open_quantized(const char *path, cairn_dtype_t quantize, cairn_checkpoint_t **out, char *err,
                                    size_t err_len)
{
    return open_checkpoint(path, true, quantize, out, err, err_len);
}

void cairn_checkpoint_close(cairn_checkpoint_t *ck)
{
    if (!ck)
        return;
    cairn_model_fini(&ck->model);
    fmt_tensors_close(ck->tensors);
    cairn_free(ck->dir);
    cairn_free(ck);
}

const cairn_model_config_t *cairn_checkpoint_config(const cairn_checkpoint_t *ck)
{
    return &ck->model.cfg;
}

const cairn_model_t *cairn_checkpoint_model(const cairn_checkpoint_t *ck) { return &ck->model; }

const char *cairn_checkpoint_dir(const cairn_checkpoint_t *ck) { return ck->dir; }

void cairn_checkpoint_weights_digest(const cairn_checkpoint_t *ck, uint8_t out[32])
{
    fmt_tensors_digest(ck->tensors, out);
}

uint64_t cairn_checkpoint_weight_bytes(const cairn_checkpoint_t *ck)
{
    return fmt_tensors_bound_bytes(ck->tensors);
}
