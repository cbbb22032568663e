/*
 * registry.c — which family reads a model_type (models/family.h).
 *
 * Built-in families come from families.def; tests and embedders add more at run time
 * with cairn_family_register(). Lookup (by config.json model_type, or by GGUF
 * general.architecture) checks registered families first (newest first), so a test
 * double can stand in for a built-in one, then the built-ins in order.
 *
 * Thread-safety: the registered list is guarded by a mutex; built-ins are constant.
 */
#include <pthread.h>
#include <string.h>

#include "models/family.h"

#define MAX_REGISTERED 16

#define CAIRN_FAMILY(x) extern const cairn_family_t cairn_family_##x;
#include "models/families.def"
#undef CAIRN_FAMILY

static const cairn_family_t *const builtins[] = {
#define CAIRN_FAMILY(x) &cairn_family_##x,
#include "models/families.def"
#undef CAIRN_FAMILY
    NULL,
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const cairn_family_t *registered[MAX_REGISTERED]; /* [n_registered], oldest first */
static int n_registered;

const cairn_family_t *const *cairn_family_builtins(void) { return builtins; }

static bool listed(const char *const *names, const char *name)
{
    for (size_t i = 0; names && names[i]; i++)
        if (!strcmp(names[i], name))
            return true;
    return false;
}

/* Registered families first (newest first), then the built-ins; gguf picks the list. */
static const cairn_family_t *find(const char *name, bool gguf)
{
    if (!name)
        return NULL;
    const cairn_family_t *found = NULL;
    pthread_mutex_lock(&lock);
    for (int i = n_registered - 1; i >= 0 && !found; i--)
        if (listed(gguf ? registered[i]->gguf_architectures : registered[i]->model_types, name))
            found = registered[i];
    pthread_mutex_unlock(&lock);
    for (size_t i = 0; !found && builtins[i]; i++)
        if (listed(gguf ? builtins[i]->gguf_architectures : builtins[i]->model_types, name))
            found = builtins[i];
    return found;
}

const cairn_family_t *cairn_family_find(const char *model_type) { return find(model_type, false); }

const cairn_family_t *cairn_family_find_gguf(const char *arch) { return find(arch, true); }

int cairn_family_register(const cairn_family_t *f)
{
    if (!f || !f->name || !f->name[0] || strlen(f->name) >= sizeof(((cairn_model_config_t *)0)->family) ||
        !f->model_types || !f->model_types[0] || !f->parse_config || !f->bind || !f->destroy ||
        !f->cache_layout || !f->describe || !f->fwd_create || !f->fwd_destroy || !f->fwd_step ||
        (f->gguf_architectures && (!f->gguf_architectures[0] || !f->parse_gguf ||
                                   !f->gguf_tensor_name)))
        return CAIRN_EINVAL;
    int rc = CAIRN_OK;
    pthread_mutex_lock(&lock);
    if (n_registered == MAX_REGISTERED)
        rc = CAIRN_ERANGE;
    else
        registered[n_registered++] = f;
    pthread_mutex_unlock(&lock);
    return rc;
}

int cairn_family_unregister(const cairn_family_t *f)
{
    int rc = CAIRN_ENOENT;
    pthread_mutex_lock(&lock);
    for (int i = n_registered - 1; i >= 0; i--) {
        if (registered[i] != f)
            continue;
        memmove(&registered[i], &registered[i + 1],
                (size_t)(n_registered - i - 1) * sizeof registered[0]);
        n_registered--;
        rc = CAIRN_OK;
        break;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- Cold-tier eligibility (include/cairn/engine.h) --------------------------------- */

/* The built-in families' cold_model_types, concatenated once. Registered families are
 * never eligible: their restart parity is not proven by test_cold_restart. */
#define MAX_COLD_TYPES 64
static const char *cold_types[MAX_COLD_TYPES + 1];

static void collect_cold_types(void)
{
    size_t n = 0;
    for (size_t i = 0; builtins[i]; i++) {
        const char *const *t = builtins[i]->cold_model_types;
        for (size_t j = 0; t && t[j]; j++) {
            CAIRN_ASSERT(n < MAX_COLD_TYPES);
            cold_types[n++] = t[j];
        }
    }
    cold_types[n] = NULL;
}

const char *const *cairn_cold_eligible_families(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, collect_cold_types);
    return cold_types;
}

bool cairn_cold_family_eligible(const char *model_type)
{
    if (!model_type)
        return false;
    const char *const *t = cairn_cold_eligible_families();
    for (size_t i = 0; t[i]; i++)
        if (!strcmp(t[i], model_type))
            return true;
    return false;
}
