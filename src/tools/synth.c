/*
 * synth.c — seeded random checkpoints in the Hugging Face layout (see tools/synth.h).
 *
 * Values: projection and embedding weights are approximately normal(0, 0.02) (an
 * Irwin–Hall sum of four uniforms, scaled to that deviation), norm weights are
 * 1 + normal(0, 0.02)·1, so a forward pass of any depth stays finite (gemma3 and qwen3_5
 * norms are applied as 1 + w, so they are written as plain noise, except qwen3_5's gated
 * norm's plain w). Each tensor has its
 * own xoshiro256** stream seeded from splitmix64(seed ^ fnv1a(name)); only integer and
 * exactly-rounded float arithmetic is used, so the bytes are the same on every platform.
 *
 * Tokenizer: a byte-level BPE. Ids 0..255 are the byte tokens in the GPT-2
 * bytes_to_unicode order (as Qwen and the shared fixtures have them); ids 256..vocab-4 are
 * merged tokens, token k = token p + byte token q enumerated in (p, q) order, each with
 * its merge rule, so every id decodes to real bytes; vocab-3..vocab-1 are <|endoftext|>,
 * <|im_start|> and <|im_end|> (eos).
 *
 * Files are written through cairn_io_check() ("open", "write", "fsync", "rename") so tests
 * can inject failures; every file goes to a temp name first and is renamed into place.
 */
#include "tools/synth.h"

#include "formats/safetensors.h"
#include "util/util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const cairn_synth_preset_names[] = {"tiny", "llama-8l", "qwen3-8l", "qwen3-0.6b",
                                                "gemma3-1b", "lfm2-1.2b", "qwen3.5-0.8b",
                                                NULL};

void cairn_synth_options_default(cairn_synth_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->dtype = CAIRN_DTYPE_BF16;
    o->seed = 0;
    o->n_shards = 1;
    cairn_synth_options_preset("tiny", o);
}

int cairn_synth_options_preset(const char *name, cairn_synth_options_t *o)
{
    static const struct {
        const char *name;
        cairn_synth_arch_t arch;
        int layers, hidden, heads, kv_heads, head_dim, ffn, vocab, max_pos;
        bool tied;
        double theta, eps;
        uint64_t attn_layers;
        int conv_taps;
    } presets[] = {
        {"tiny", CAIRN_SYNTH_LLAMA, 2, 64, 4, 2, 16, 192, 512, 2048, false, 10000.0, 1e-6, 0, 0},
        {"llama-8l", CAIRN_SYNTH_LLAMA, 8, 512, 8, 2, 64, 1536, 32000, 8192, false, 500000.0,
         1e-5, 0, 0},
        {"qwen3-8l", CAIRN_SYNTH_QWEN3, 8, 1024, 16, 8, 128, 3072, 32000, 40960, true, 1e6,
         1e-6, 0, 0},
        {"qwen3-0.6b", CAIRN_SYNTH_QWEN3, 28, 1024, 16, 8, 128, 3072, 151936, 40960, true, 1e6,
         1e-6, 0, 0},
        /* google/gemma-3-1b-it (window 512, pattern 6: the gemma3 defaults below) */
        {"gemma3-1b", CAIRN_SYNTH_GEMMA3, 26, 1152, 4, 1, 256, 6912, 262144, 32768, true, 1e6,
         1e-6, 0, 0},
        /* LiquidAI/LFM2-1.2B: block_ff_dim 12288 auto-adjusted to int(2*12288/3) = 8192. */
        {"lfm2-1.2b", CAIRN_SYNTH_LFM2, 16, 2048, 32, 8, 64, 8192, 65536, 128000, true, 1e6,
         1e-5, (1u << 2) | (1u << 5) | (1u << 8) | (1u << 10) | (1u << 12) | (1u << 14), 3},
        /* Qwen/Qwen3.5-0.8B text_config; GDN sizes set below. */
        {"qwen3.5-0.8b", CAIRN_SYNTH_QWEN35, 24, 1024, 8, 2, 256, 3584, 248320, 262144, true,
         1e7, 1e-6, 0, 0},
    };
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(presets); i++) {
        if (strcmp(presets[i].name, name) != 0)
            continue;
        o->arch = presets[i].arch;
        o->n_layers = presets[i].layers;
        o->hidden = presets[i].hidden;
        o->n_heads = presets[i].heads;
        o->n_kv_heads = presets[i].kv_heads;
        o->head_dim = presets[i].head_dim;
        o->ffn = presets[i].ffn;
        o->vocab = presets[i].vocab;
        o->max_pos = presets[i].max_pos;
        o->tied = presets[i].tied;
        o->rope_theta = presets[i].theta;
        o->rms_eps = presets[i].eps;
        o->sliding_window = o->sliding_pattern = 0;
        o->attn_layers = presets[i].attn_layers;
        o->conv_taps = presets[i].conv_taps;
        if (o->arch == CAIRN_SYNTH_QWEN35) {
            o->lin_k_heads = o->lin_v_heads = 16;
            o->lin_k_dim = o->lin_v_dim = 128;
            o->conv_kernel = 4;
            o->full_interval = 4;
            o->partial_rotary = 0.25;
        }
        return 0;
    }
    return CAIRN_EINVAL;
}

/* ---- deterministic random numbers ---- */

typedef struct {
    uint64_t s[4];
} rng_t;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

static void rng_seed(rng_t *r, uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    uint64_t x = seed ^ h;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

/*
 * Approximately standard normal: the sum of four 16-bit uniforms has mean 2 and variance
 * 4/12; centring and scaling by sqrt(3) gives unit variance. Exact in float.
 */
static float rng_normal(rng_t *r)
{
    uint64_t v = rng_next(r);
    uint32_t sum = (uint32_t)(v & 0xffff) + (uint32_t)((v >> 16) & 0xffff) +
                   (uint32_t)((v >> 32) & 0xffff) + (uint32_t)(v >> 48);
    float u = (float)sum * (1.0f / 65536.0f) - 2.0f; /* exact: sum < 2^18 */
    return u * 1.7320508f;
}

/* ---- float conversions (round to nearest even) ---- */

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffff;
    if (ax > 0x7f800000)
        return sign | 0x7e00;
    if (ax >= 0x477ff000) /* rounds to >= 65520: infinity */
        return sign | 0x7c00;
    if (ax < 0x38800000) { /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000)
            return sign; /* below half the smallest subnormal */
        uint32_t mant = (ax & 0x7fffff) | 0x800000;
        int shift = 126 - (int)(ax >> 23); /* onto the 2^-24 grid of half subnormals */
        uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return sign | (uint16_t)half;
    }
    uint32_t h = ((ax >> 13) - (112u << 10));
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++;
    return sign | (uint16_t)h;
}

/* ---- atomic file output ---- */

typedef struct {
    int fd;
    char *tmp;
    char *path;
} out_file_t;

static int io_status(int neg_errno) { return neg_errno == -ENOSPC ? CAIRN_ENOSPC : CAIRN_EIO; }

static void of_abort(out_file_t *f)
{
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp)
        unlink(f->tmp);
    cairn_free(f->tmp);
    cairn_free(f->path);
    f->fd = -1;
    f->tmp = f->path = NULL;
}

static int of_open(out_file_t *f, const char *dir, const char *name, char *err, size_t err_len)
{
    f->fd = -1;
    f->tmp = NULL;
    f->path = cairn_path_join(dir, name);
    if (!f->path)
        goto oom;
    size_t n = strlen(f->path) + 32;
    f->tmp = cairn_malloc(n);
    if (!f->tmp)
        goto oom;
    snprintf(f->tmp, n, "%s.tmp.%ld", f->path, (long)getpid());
    int hook = cairn_io_check("open", f->tmp);
    if (hook == 0) {
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        hook = f->fd < 0 ? -errno : 0;
    }
    if (hook) {
        st_errf(err, err_len, "%s: cannot create: %s", f->tmp, strerror(-hook));
        cairn_free(f->tmp);
        f->tmp = NULL; /* nothing was created */
        of_abort(f);
        return io_status(hook);
    }
    return 0;
oom:
    st_errf(err, err_len, "%s/%s: out of memory", dir, name);
    of_abort(f);
    return CAIRN_ENOMEM;
}

static int of_write(out_file_t *f, const void *buf, size_t len, char *err, size_t err_len)
{
    const uint8_t *p = buf;
    int hook = cairn_io_check("write", f->tmp);
    while (hook == 0 && len > 0) {
        ssize_t w = write(f->fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            hook = w < 0 ? -errno : -EIO;
            break;
        }
        p += w;
        len -= (size_t)w;
    }
    if (hook) {
        st_errf(err, err_len, "%s: write failed: %s", f->tmp, strerror(-hook));
        return io_status(hook);
    }
    return 0;
}

/* fsync, close and rename into place; on failure the temp file is removed. */
static int of_commit(out_file_t *f, char *err, size_t err_len)
{
    int hook = cairn_io_check("fsync", f->tmp);
    if (hook == 0 && fsync(f->fd) != 0)
        hook = -errno;
    if (hook == 0) {
        int fd = f->fd;
        f->fd = -1;
        if (close(fd) != 0)
            hook = -errno;
    }
    if (hook == 0)
        hook = cairn_io_check("rename", f->path);
    if (hook == 0 && rename(f->tmp, f->path) != 0)
        hook = -errno;
    if (hook) {
        st_errf(err, err_len, "%s: cannot commit: %s", f->path, strerror(-hook));
        of_abort(f);
        return io_status(hook);
    }
    cairn_free(f->tmp);
    f->tmp = NULL;
    of_abort(f);
    return 0;
}

/* Writes a whole small file atomically. */
static int write_text(const char *dir, const char *name, const char *text, char *err,
                      size_t err_len)
{
    out_file_t f;
    int rc = of_open(&f, dir, name, err, err_len);
    if (rc)
        return rc;
    if ((rc = of_write(&f, text, strlen(text), err, err_len))) {
        of_abort(&f);
        return rc;
    }
    return of_commit(&f, err, err_len);
}

/* Prints a cJSON document (formatted, newline-terminated) into dir/name. */
static int write_json(const char *dir, const char *name, const cJSON *doc, bool formatted,
                      char *err, size_t err_len)
{
    char *text = formatted ? cJSON_Print(doc) : cJSON_PrintUnformatted(doc);
    if (!text) {
        st_errf(err, err_len, "%s/%s: out of memory", dir, name);
        return CAIRN_ENOMEM;
    }
    size_t n = strlen(text);
    char *with_nl = cairn_malloc(n + 2);
    if (!with_nl) {
        cairn_free(text);
        st_errf(err, err_len, "%s/%s: out of memory", dir, name);
        return CAIRN_ENOMEM;
    }
    memcpy(with_nl, text, n);
    memcpy(with_nl + n, "\n", 2);
    cairn_free(text);
    int rc = write_text(dir, name, with_nl, err, err_len);
    cairn_free(with_nl);
    return rc;
}

/* ---- the tensor list ---- */

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[3];
    bool is_norm;   /* 1 + noise instead of noise */
    int shard;
    uint64_t begin; /* offset in its shard's data section */
} syn_tensor_t;

static uint64_t tensor_elems(const syn_tensor_t *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (uint64_t)t->shape[d];
    return n;
}

static void add_tensor3(syn_tensor_t *t, int *k, const char *name, int ndim, int64_t d0,
                        int64_t d1, int64_t d2, bool is_norm)
{
    syn_tensor_t *x = &t[(*k)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->ndim = ndim;
    x->shape[0] = d0;
    x->shape[1] = d1;
    x->shape[2] = d2;
    x->is_norm = is_norm;
}

static void add_tensor(syn_tensor_t *t, int *k, const char *name, int ndim, int64_t d0,
                       int64_t d1, bool is_norm)
{
    add_tensor3(t, k, name, ndim, d0, d1, 1, is_norm);
}

static int gemma3_window(const cairn_synth_options_t *o) { return o->sliding_window ? o->sliding_window : 512; }
static int gemma3_pattern(const cairn_synth_options_t *o) { return o->sliding_pattern ? o->sliding_pattern : 6; }

/* gemma3 tensors in model order. Its norms multiply by (1 + w), so their w is the noise
 * alone (is_norm false): an identity norm, like the other layouts' 1 + noise. */
static int list_tensors_gemma3(const cairn_synth_options_t *o, syn_tensor_t **out, int *n_out)
{
    int n = 2 + (o->tied ? 0 : 1) + 13 * o->n_layers;
    syn_tensor_t *t = cairn_calloc((size_t)n, sizeof *t);
    if (!t)
        return CAIRN_ENOMEM;
    int k = 0;
    int64_t h = o->hidden, q = (int64_t)o->n_heads * o->head_dim;
    int64_t kv = (int64_t)o->n_kv_heads * o->head_dim;
    add_tensor(t, &k, "model.embed_tokens.weight", 2, o->vocab, h, false);
    for (int l = 0; l < o->n_layers; l++) {
        const struct {
            const char *suffix;
            int ndim;
            int64_t d0, d1;
        } per_layer[] = {
            {"input_layernorm", 1, h, 0},           {"self_attn.q_proj", 2, q, h},
            {"self_attn.k_proj", 2, kv, h},         {"self_attn.v_proj", 2, kv, h},
            {"self_attn.o_proj", 2, h, q},          {"self_attn.q_norm", 1, o->head_dim, 0},
            {"self_attn.k_norm", 1, o->head_dim, 0}, {"post_attention_layernorm", 1, h, 0},
            {"pre_feedforward_layernorm", 1, h, 0}, {"post_feedforward_layernorm", 1, h, 0},
            {"mlp.gate_proj", 2, o->ffn, h},        {"mlp.up_proj", 2, o->ffn, h},
            {"mlp.down_proj", 2, h, o->ffn},
        };
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(per_layer); i++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, per_layer[i].suffix);
            add_tensor(t, &k, name, per_layer[i].ndim, per_layer[i].d0, per_layer[i].d1, false);
        }
    }
    add_tensor(t, &k, "model.norm.weight", 1, h, 0, false);
    if (!o->tied)
        add_tensor(t, &k, "lm_head.weight", 2, o->vocab, h, false);
    CAIRN_ASSERT(k == n);
    *out = t;
    *n_out = n;
    return 0;
}

/* lfm2: which layers attend (the default pattern when none is given). */
static bool lfm2_attends(const cairn_synth_options_t *o, int l)
{
    if (o->attn_layers)
        return (o->attn_layers >> l) & 1;
    return o->n_layers < 3 ? l == o->n_layers - 1 : l % 3 == 2;
}

static int lfm2_taps(const cairn_synth_options_t *o) { return o->conv_taps ? o->conv_taps : 3; }

/* lfm2 tensors in model order (embed, layers, embedding_norm, lm_head). */
static int list_tensors_lfm2(const cairn_synth_options_t *o, syn_tensor_t **out, int *n_out)
{
    int n = 2 + (o->tied ? 0 : 1);
    for (int l = 0; l < o->n_layers; l++)
        n += lfm2_attends(o, l) ? 11 : 8;
    syn_tensor_t *t = cairn_calloc((size_t)n, sizeof *t);
    if (!t)
        return CAIRN_ENOMEM;
    int k = 0;
    int64_t h = o->hidden, q = (int64_t)o->n_heads * o->head_dim;
    int64_t kv = (int64_t)o->n_kv_heads * o->head_dim;
    add_tensor(t, &k, "model.embed_tokens.weight", 2, o->vocab, h, false);
    for (int l = 0; l < o->n_layers; l++) {
        const bool attn = lfm2_attends(o, l);
        const struct {
            const char *suffix;
            int ndim;
            int64_t d0, d1, d2;
            bool is_norm;
            int kind; /* 0 both, 1 conv, 2 attention */
        } per_layer[] = {
            {"operator_norm", 1, h, 0, 0, true, 0},
            {"conv.in_proj", 2, 3 * h, h, 0, false, 1},
            {"conv.conv", 3, h, 1, lfm2_taps(o), false, 1},
            {"conv.out_proj", 2, h, h, 0, false, 1},
            {"self_attn.q_proj", 2, q, h, 0, false, 2},
            {"self_attn.k_proj", 2, kv, h, 0, false, 2},
            {"self_attn.v_proj", 2, kv, h, 0, false, 2},
            {"self_attn.out_proj", 2, h, q, 0, false, 2},
            {"self_attn.q_layernorm", 1, o->head_dim, 0, 0, true, 2},
            {"self_attn.k_layernorm", 1, o->head_dim, 0, 0, true, 2},
            {"ffn_norm", 1, h, 0, 0, true, 0},
            {"feed_forward.w1", 2, o->ffn, h, 0, false, 0},
            {"feed_forward.w3", 2, o->ffn, h, 0, false, 0},
            {"feed_forward.w2", 2, h, o->ffn, 0, false, 0},
        };
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(per_layer); i++) {
            if (per_layer[i].kind == (attn ? 1 : 2))
                continue;
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, per_layer[i].suffix);
            add_tensor3(t, &k, name, per_layer[i].ndim, per_layer[i].d0, per_layer[i].d1,
                        per_layer[i].d2, per_layer[i].is_norm);
        }
    }
    add_tensor(t, &k, "model.embedding_norm.weight", 1, h, 0, true);
    if (!o->tied)
        add_tensor(t, &k, "lm_head.weight", 2, o->vocab, h, false);
    CAIRN_ASSERT(k == n);
    *out = t;
    *n_out = n;
    return 0;
}

static bool qwen35_full_layer(const cairn_synth_options_t *o, int l)
{
    return (l + 1) % o->full_interval == 0;
}

/* The qwen3_5_text tensors in model order: per layer the Gated DeltaNet mixer
 * (linear_attn.*) or the gated attention (self_attn.*, q_proj twice as wide), then the
 * MLP. Norms are stored as w of (1 + w), so plain noise; the gated norm's w is 1 + noise. */
static int list_tensors_qwen35(const cairn_synth_options_t *o, syn_tensor_t **out, int *n_out)
{
    int n = 2 + (o->tied ? 0 : 1);
    for (int l = 0; l < o->n_layers; l++)
        n += 5 + (qwen35_full_layer(o, l) ? 6 : 9);
    syn_tensor_t *t = cairn_calloc((size_t)n, sizeof *t);
    if (!t)
        return CAIRN_ENOMEM;
    int k = 0;
    const int64_t h = o->hidden, q = (int64_t)o->n_heads * o->head_dim;
    const int64_t kv = (int64_t)o->n_kv_heads * o->head_dim;
    const int64_t kd = (int64_t)o->lin_k_heads * o->lin_k_dim, vd = (int64_t)o->lin_v_heads * o->lin_v_dim;
    const int64_t conv = 2 * kd + vd;
    add_tensor(t, &k, "model.embed_tokens.weight", 2, o->vocab, h, false);
    for (int l = 0; l < o->n_layers; l++) {
        char name[96];
#define QT(suffix, nd, a, b, norm)                                                          \
    do {                                                                                   \
        snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);                      \
        add_tensor(t, &k, name, nd, a, b, norm);                                           \
    } while (0)
        QT("input_layernorm.weight", 1, h, 0, false);
        if (qwen35_full_layer(o, l)) {
            QT("self_attn.q_proj.weight", 2, 2 * q, h, false);
            QT("self_attn.k_proj.weight", 2, kv, h, false);
            QT("self_attn.v_proj.weight", 2, kv, h, false);
            QT("self_attn.o_proj.weight", 2, h, q, false);
            QT("self_attn.q_norm.weight", 1, o->head_dim, 0, false);
            QT("self_attn.k_norm.weight", 1, o->head_dim, 0, false);
        } else {
            QT("linear_attn.in_proj_qkv.weight", 2, conv, h, false);
            QT("linear_attn.in_proj_z.weight", 2, vd, h, false);
            QT("linear_attn.in_proj_b.weight", 2, o->lin_v_heads, h, false);
            QT("linear_attn.in_proj_a.weight", 2, o->lin_v_heads, h, false);
            snprintf(name, sizeof name, "model.layers.%d.linear_attn.conv1d.weight", l);
            add_tensor3(t, &k, name, 3, conv, 1, o->conv_kernel, false);
            QT("linear_attn.A_log", 1, o->lin_v_heads, 0, false);
            QT("linear_attn.dt_bias", 1, o->lin_v_heads, 0, false);
            QT("linear_attn.norm.weight", 1, o->lin_v_dim, 0, true);
            QT("linear_attn.out_proj.weight", 2, h, vd, false);
        }
        QT("post_attention_layernorm.weight", 1, h, 0, false);
        QT("mlp.gate_proj.weight", 2, o->ffn, h, false);
        QT("mlp.up_proj.weight", 2, o->ffn, h, false);
        QT("mlp.down_proj.weight", 2, h, o->ffn, false);
#undef QT
    }
    add_tensor(t, &k, "model.norm.weight", 1, h, 0, false);
    if (!o->tied)
        add_tensor(t, &k, "lm_head.weight", 2, o->vocab, h, false);
    CAIRN_ASSERT(k == n);
    *out = t;
    *n_out = n;
    return 0;
}

/* Lists the tensors in model order (embed, layers, norm, lm_head). */
static int list_tensors(const cairn_synth_options_t *o, syn_tensor_t **out, int *n_out)
{
    if (o->arch == CAIRN_SYNTH_GEMMA3)
        return list_tensors_gemma3(o, out, n_out);
    if (o->arch == CAIRN_SYNTH_LFM2)
        return list_tensors_lfm2(o, out, n_out);
    if (o->arch == CAIRN_SYNTH_QWEN35)
        return list_tensors_qwen35(o, out, n_out);
    bool qwen = o->arch == CAIRN_SYNTH_QWEN3;
    int n = 2 + (o->tied ? 0 : 1) + (qwen ? 11 : 9) * o->n_layers;
    syn_tensor_t *t = cairn_calloc((size_t)n, sizeof *t);
    if (!t)
        return CAIRN_ENOMEM;
    int k = 0;
    int64_t h = o->hidden, q = (int64_t)o->n_heads * o->head_dim;
    int64_t kv = (int64_t)o->n_kv_heads * o->head_dim;
    add_tensor(t, &k, "model.embed_tokens.weight", 2, o->vocab, h, false);
    for (int l = 0; l < o->n_layers; l++) {
        const struct {
            const char *suffix;
            int ndim;
            int64_t d0, d1;
            bool is_norm, qwen_only;
        } per_layer[] = {
            {"input_layernorm", 1, h, 0, true, false},
            {"self_attn.q_proj", 2, q, h, false, false},
            {"self_attn.k_proj", 2, kv, h, false, false},
            {"self_attn.v_proj", 2, kv, h, false, false},
            {"self_attn.o_proj", 2, h, q, false, false},
            {"self_attn.q_norm", 1, o->head_dim, 0, true, true},
            {"self_attn.k_norm", 1, o->head_dim, 0, true, true},
            {"post_attention_layernorm", 1, h, 0, true, false},
            {"mlp.gate_proj", 2, o->ffn, h, false, false},
            {"mlp.up_proj", 2, o->ffn, h, false, false},
            {"mlp.down_proj", 2, h, o->ffn, false, false},
        };
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(per_layer); i++) {
            if (per_layer[i].qwen_only && !qwen)
                continue;
            char name[96];
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, per_layer[i].suffix);
            add_tensor(t, &k, name, per_layer[i].ndim, per_layer[i].d0, per_layer[i].d1,
                       per_layer[i].is_norm);
        }
    }
    add_tensor(t, &k, "model.norm.weight", 1, h, 0, true);
    if (!o->tied)
        add_tensor(t, &k, "lm_head.weight", 2, o->vocab, h, false);
    CAIRN_ASSERT(k == n);
    *out = t;
    *n_out = n;
    return 0;
}

static int cmp_tensor_ptr_name(const void *a, const void *b)
{
    return strcmp((*(const syn_tensor_t *const *)a)->name, (*(const syn_tensor_t *const *)b)->name);
}

static const char *dtype_torch_name(cairn_dtype_t t)
{
    return t == CAIRN_DTYPE_F32 ? "float32" : t == CAIRN_DTYPE_F16 ? "float16" : "bfloat16";
}

/* Streams one tensor's values into f. buf holds `cap` bytes. */
static int write_tensor(out_file_t *f, const syn_tensor_t *t, const cairn_synth_options_t *o,
                        uint8_t *buf, size_t cap, char *err, size_t err_len)
{
    rng_t r;
    rng_seed(&r, o->seed, t->name);
    size_t es = cairn_dtype_size(o->dtype), per = cap / es;
    uint64_t left = tensor_elems(t);
    while (left > 0) {
        size_t n = left < per ? (size_t)left : per;
        for (size_t i = 0; i < n; i++) {
            float v = 0.02f * rng_normal(&r);
            if (t->is_norm)
                v += 1.0f;
            if (o->dtype == CAIRN_DTYPE_F32) {
                memcpy(buf + 4 * i, &v, 4);
            } else {
                uint16_t h = o->dtype == CAIRN_DTYPE_BF16 ? f32_to_bf16(v) : f32_to_f16(v);
                buf[2 * i] = (uint8_t)h;
                buf[2 * i + 1] = (uint8_t)(h >> 8);
            }
        }
        int rc = of_write(f, buf, n * es, err, err_len);
        if (rc)
            return rc;
        left -= n;
    }
    return 0;
}

/* Writes one safetensors file holding the tensors of `shard`, header sorted by name. */
static int write_shard(const char *dir, const char *fname, syn_tensor_t *ts, int n, int shard,
                       const cairn_synth_options_t *o, uint8_t *buf, size_t cap, char *err,
                       size_t err_len)
{
    int rc;
    cJSON *hdr = NULL;
    char *text = NULL;
    syn_tensor_t **mine = NULL;
    out_file_t f = {.fd = -1};
    int m = 0;
    mine = cairn_malloc((size_t)n * sizeof *mine);
    hdr = cJSON_CreateObject();
    if (!mine || !hdr)
        goto oom;
    for (int i = 0; i < n; i++)
        if (ts[i].shard == shard)
            mine[m++] = &ts[i];
    qsort(mine, (size_t)m, sizeof *mine, cmp_tensor_ptr_name);
    cJSON *meta = cJSON_AddObjectToObject(hdr, "__metadata__");
    if (!meta || !cJSON_AddStringToObject(meta, "format", "pt"))
        goto oom;
    uint64_t off = 0;
    for (int i = 0; i < m; i++) {
        syn_tensor_t *t = mine[i];
        uint64_t bytes = tensor_elems(t) * cairn_dtype_size(o->dtype);
        t->begin = off;
        cJSON *e = cJSON_AddObjectToObject(hdr, t->name);
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *offs = shape ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        if (!offs || !cJSON_AddStringToObject(e, "dtype", st_dtype_name(o->dtype)))
            goto oom;
        for (int d = 0; d < t->ndim; d++) {
            cJSON *num = cJSON_CreateNumber((double)t->shape[d]);
            if (!num || !cJSON_AddItemToArray(shape, num)) {
                cJSON_Delete(num);
                goto oom;
            }
        }
        double be[2] = {(double)off, (double)(off + bytes)};
        for (int d = 0; d < 2; d++) {
            cJSON *num = cJSON_CreateNumber(be[d]);
            if (!num || !cJSON_AddItemToArray(offs, num)) {
                cJSON_Delete(num);
                goto oom;
            }
        }
        off += bytes;
    }
    text = cJSON_PrintUnformatted(hdr);
    if (!text)
        goto oom;
    /* Pad with spaces so the data section starts 8-byte aligned. */
    size_t hlen = strlen(text), padded = (hlen + 7) & ~(size_t)7;
    uint8_t len8[8];
    for (int b = 0; b < 8; b++)
        len8[b] = (uint8_t)((uint64_t)padded >> (8 * b));
    static const char spaces[8] = "        ";
    if ((rc = of_open(&f, dir, fname, err, err_len)))
        goto fail;
    if ((rc = of_write(&f, len8, 8, err, err_len)) ||
        (rc = of_write(&f, text, hlen, err, err_len)) ||
        (rc = of_write(&f, spaces, padded - hlen, err, err_len)))
        goto fail;
    for (int i = 0; i < m; i++)
        if ((rc = write_tensor(&f, mine[i], o, buf, cap, err, err_len)))
            goto fail;
    rc = of_commit(&f, err, err_len);
    if (rc)
        goto fail;
    cairn_free(text);
    cJSON_Delete(hdr);
    cairn_free(mine);
    return 0;

oom:
    st_errf(err, err_len, "%s/%s: out of memory", dir, fname);
    rc = CAIRN_ENOMEM;
fail:
    of_abort(&f);
    cairn_free(text);
    cJSON_Delete(hdr);
    cairn_free(mine);
    return rc;
}

/* ---- JSON documents ---- */

/* Appends a new object / array / string to arr (NULL on failure, nothing leaked). */
static cJSON *append(cJSON *arr, cJSON *item)
{
    if (!item)
        return NULL;
    if (!arr || !cJSON_AddItemToArray(arr, item)) {
        cJSON_Delete(item);
        return NULL;
    }
    return item;
}

/* gemma3_text's config.json in the transformers 5 spelling (Gemma3TextConfig):
 * layer_types, and rope_parameters keyed by layer kind. */
static cJSON *config_doc_gemma3(const cairn_synth_options_t *o)
{
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = c ? cJSON_AddArrayToObject(c, "architectures") : NULL;
    if (!append(arch, cJSON_CreateString("Gemma3ForCausalLM")))
        goto fail;
    bool ok = cJSON_AddFalseToObject(c, "attention_bias") &&
              cJSON_AddNumberToObject(c, "attention_dropout", 0) &&
              cJSON_AddNullToObject(c, "attn_logit_softcapping") &&
              cJSON_AddNullToObject(c, "bos_token_id") &&
              cJSON_AddStringToObject(c, "dtype", dtype_torch_name(o->dtype)) &&
              cJSON_AddNumberToObject(c, "eos_token_id", o->vocab - 1) &&
              cJSON_AddNullToObject(c, "final_logit_softcapping") &&
              cJSON_AddNumberToObject(c, "head_dim", o->head_dim) &&
              cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh") &&
              cJSON_AddNumberToObject(c, "hidden_size", o->hidden) &&
              cJSON_AddNumberToObject(c, "initializer_range", 0.02) &&
              cJSON_AddNumberToObject(c, "intermediate_size", o->ffn);
    cJSON *lt = ok ? cJSON_AddArrayToObject(c, "layer_types") : NULL;
    ok = lt != NULL;
    for (int l = 0; ok && l < o->n_layers; l++)
        ok = append(lt, cJSON_CreateString((l + 1) % gemma3_pattern(o) ? "sliding_attention"
                                                                        : "full_attention")) != NULL;
    ok = ok && cJSON_AddNumberToObject(c, "max_position_embeddings", o->max_pos) &&
         cJSON_AddStringToObject(c, "model_type", "gemma3_text") &&
         cJSON_AddNumberToObject(c, "num_attention_heads", o->n_heads) &&
         cJSON_AddNumberToObject(c, "num_hidden_layers", o->n_layers) &&
         cJSON_AddNumberToObject(c, "num_key_value_heads", o->n_kv_heads) &&
         cJSON_AddNumberToObject(c, "pad_token_id", o->vocab - 3) &&
         cJSON_AddNumberToObject(c, "query_pre_attn_scalar", o->head_dim) &&
         cJSON_AddNumberToObject(c, "rms_norm_eps", o->rms_eps);
    cJSON *rp = ok ? cJSON_AddObjectToObject(c, "rope_parameters") : NULL;
    cJSON *full = rp ? cJSON_AddObjectToObject(rp, "full_attention") : NULL;
    cJSON *slid = full ? cJSON_AddObjectToObject(rp, "sliding_attention") : NULL;
    ok = slid && cJSON_AddNumberToObject(full, "rope_theta", o->rope_theta) &&
         cJSON_AddStringToObject(full, "rope_type", "default") &&
         cJSON_AddNumberToObject(slid, "rope_theta", 10000.0) &&
         cJSON_AddStringToObject(slid, "rope_type", "default") &&
         cJSON_AddNumberToObject(c, "sliding_window", gemma3_window(o)) &&
         cJSON_AddBoolToObject(c, "tie_word_embeddings", o->tied) &&
         cJSON_AddFalseToObject(c, "use_bidirectional_attention") &&
         cJSON_AddTrueToObject(c, "use_cache") &&
         cJSON_AddNumberToObject(c, "vocab_size", o->vocab);
    if (!ok)
        goto fail;
    return c;
fail:
    cJSON_Delete(c);
    return NULL;
}

/* lfm2's config.json in the transformers 5 spelling (Lfm2Config), with the feed-forward
 * width given as is (block_auto_adjust_ff_dim false). */
static cJSON *config_doc_lfm2(const cairn_synth_options_t *o)
{
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = c ? cJSON_AddArrayToObject(c, "architectures") : NULL;
    if (!append(arch, cJSON_CreateString("Lfm2ForCausalLM")))
        goto fail;
    bool ok = cJSON_AddFalseToObject(c, "block_auto_adjust_ff_dim") &&
              cJSON_AddNumberToObject(c, "block_ffn_dim_multiplier", 1.0) &&
              cJSON_AddNumberToObject(c, "block_multiple_of", 256) &&
              cJSON_AddNullToObject(c, "bos_token_id") &&
              cJSON_AddNumberToObject(c, "conv_L_cache", lfm2_taps(o)) &&
              cJSON_AddFalseToObject(c, "conv_bias") &&
              cJSON_AddStringToObject(c, "dtype", dtype_torch_name(o->dtype)) &&
              cJSON_AddNumberToObject(c, "eos_token_id", o->vocab - 1);
    cJSON *idx = ok ? cJSON_AddArrayToObject(c, "full_attn_idxs") : NULL;
    ok = idx != NULL;
    for (int l = 0; ok && l < o->n_layers; l++)
        if (lfm2_attends(o, l))
            ok = append(idx, cJSON_CreateNumber(l)) != NULL;
    ok = ok && cJSON_AddNumberToObject(c, "hidden_size", o->hidden) &&
         cJSON_AddNumberToObject(c, "initializer_range", 0.02) &&
         cJSON_AddNumberToObject(c, "intermediate_size", o->ffn);
    cJSON *lt = ok ? cJSON_AddArrayToObject(c, "layer_types") : NULL;
    ok = lt != NULL;
    for (int l = 0; ok && l < o->n_layers; l++)
        ok = append(lt, cJSON_CreateString(lfm2_attends(o, l) ? "full_attention" : "conv")) != NULL;
    ok = ok && cJSON_AddNumberToObject(c, "max_position_embeddings", o->max_pos) &&
         cJSON_AddStringToObject(c, "model_type", "lfm2") &&
         cJSON_AddNumberToObject(c, "norm_eps", o->rms_eps) &&
         cJSON_AddNumberToObject(c, "num_attention_heads", o->n_heads) &&
         cJSON_AddNumberToObject(c, "num_hidden_layers", o->n_layers) &&
         cJSON_AddNumberToObject(c, "num_key_value_heads", o->n_kv_heads) &&
         cJSON_AddNumberToObject(c, "pad_token_id", o->vocab - 3);
    cJSON *rp = ok ? cJSON_AddObjectToObject(c, "rope_parameters") : NULL;
    ok = rp && cJSON_AddNumberToObject(rp, "rope_theta", o->rope_theta) &&
         cJSON_AddStringToObject(rp, "rope_type", "default") &&
         cJSON_AddBoolToObject(c, "tie_word_embeddings", o->tied) &&
         cJSON_AddTrueToObject(c, "use_cache") &&
         cJSON_AddNumberToObject(c, "vocab_size", o->vocab);
    if (!ok)
        goto fail;
    return c;
fail:
    cJSON_Delete(c);
    return NULL;
}

/* config.json of a qwen3_5_text model (Qwen3_5TextConfig field names). */
static cJSON *config_doc_qwen35(const cairn_synth_options_t *o)
{
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = c ? cJSON_AddArrayToObject(c, "architectures") : NULL;
    if (!append(arch, cJSON_CreateString("Qwen3_5ForCausalLM")))
        goto fail;
    bool ok = cJSON_AddFalseToObject(c, "attention_bias") &&
              cJSON_AddNumberToObject(c, "attention_dropout", 0) &&
              cJSON_AddNullToObject(c, "bos_token_id") &&
              cJSON_AddStringToObject(c, "dtype", dtype_torch_name(o->dtype)) &&
              cJSON_AddNumberToObject(c, "eos_token_id", o->vocab - 1) &&
              cJSON_AddNumberToObject(c, "head_dim", o->head_dim) &&
              cJSON_AddStringToObject(c, "hidden_act", "silu") &&
              cJSON_AddNumberToObject(c, "hidden_size", o->hidden) &&
              cJSON_AddNumberToObject(c, "initializer_range", 0.02) &&
              cJSON_AddNumberToObject(c, "intermediate_size", o->ffn);
    cJSON *lt = ok ? cJSON_AddArrayToObject(c, "layer_types") : NULL;
    ok = lt != NULL;
    for (int l = 0; ok && l < o->n_layers; l++)
        ok = append(lt, cJSON_CreateString(qwen35_full_layer(o, l) ? "full_attention"
                                                                   : "linear_attention")) != NULL;
    ok = ok && cJSON_AddNumberToObject(c, "linear_conv_kernel_dim", o->conv_kernel) &&
         cJSON_AddNumberToObject(c, "linear_key_head_dim", o->lin_k_dim) &&
         cJSON_AddNumberToObject(c, "linear_num_key_heads", o->lin_k_heads) &&
         cJSON_AddNumberToObject(c, "linear_num_value_heads", o->lin_v_heads) &&
         cJSON_AddNumberToObject(c, "linear_value_head_dim", o->lin_v_dim) &&
         cJSON_AddNumberToObject(c, "max_position_embeddings", o->max_pos) &&
         cJSON_AddStringToObject(c, "model_type", "qwen3_5_text") &&
         cJSON_AddNumberToObject(c, "num_attention_heads", o->n_heads) &&
         cJSON_AddNumberToObject(c, "num_hidden_layers", o->n_layers) &&
         cJSON_AddNumberToObject(c, "num_key_value_heads", o->n_kv_heads) &&
         cJSON_AddNumberToObject(c, "pad_token_id", o->vocab - 3) &&
         cJSON_AddNumberToObject(c, "rms_norm_eps", o->rms_eps);
    cJSON *rp = ok ? cJSON_AddObjectToObject(c, "rope_parameters") : NULL;
    ok = rp && cJSON_AddNumberToObject(rp, "partial_rotary_factor", o->partial_rotary) &&
         cJSON_AddNumberToObject(rp, "rope_theta", o->rope_theta) &&
         cJSON_AddStringToObject(rp, "rope_type", "default") &&
         cJSON_AddBoolToObject(c, "tie_word_embeddings", o->tied) &&
         cJSON_AddTrueToObject(c, "use_cache") &&
         cJSON_AddNumberToObject(c, "vocab_size", o->vocab);
    if (!ok)
        goto fail;
    return c;
fail:
    cJSON_Delete(c);
    return NULL;
}

static cJSON *config_doc(const cairn_synth_options_t *o)
{
    if (o->arch == CAIRN_SYNTH_GEMMA3)
        return config_doc_gemma3(o);
    if (o->arch == CAIRN_SYNTH_LFM2)
        return config_doc_lfm2(o);
    if (o->arch == CAIRN_SYNTH_QWEN35)
        return config_doc_qwen35(o);
    bool qwen = o->arch == CAIRN_SYNTH_QWEN3;
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = c ? cJSON_AddArrayToObject(c, "architectures") : NULL;
    if (!append(arch, cJSON_CreateString(qwen ? "Qwen3ForCausalLM" : "LlamaForCausalLM")))
        goto fail;
    bool ok = cJSON_AddFalseToObject(c, "attention_bias") &&
              cJSON_AddNumberToObject(c, "attention_dropout", 0) &&
              cJSON_AddNullToObject(c, "bos_token_id") &&
              cJSON_AddStringToObject(c, "dtype", dtype_torch_name(o->dtype)) &&
              cJSON_AddNumberToObject(c, "eos_token_id", o->vocab - 1) &&
              cJSON_AddNumberToObject(c, "head_dim", o->head_dim) &&
              cJSON_AddStringToObject(c, "hidden_act", "silu") &&
              cJSON_AddNumberToObject(c, "hidden_size", o->hidden) &&
              cJSON_AddNumberToObject(c, "initializer_range", 0.02) &&
              cJSON_AddNumberToObject(c, "intermediate_size", o->ffn) &&
              cJSON_AddNumberToObject(c, "max_position_embeddings", o->max_pos);
    if (ok && qwen) {
        cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
        ok = lt != NULL;
        for (int l = 0; ok && l < o->n_layers; l++)
            ok = append(lt, cJSON_CreateString("full_attention")) != NULL;
        ok = ok && cJSON_AddNumberToObject(c, "max_window_layers", o->n_layers);
    }
    if (ok && !qwen)
        ok = cJSON_AddFalseToObject(c, "mlp_bias") != NULL;
    ok = ok && cJSON_AddStringToObject(c, "model_type", qwen ? "qwen3" : "llama") &&
         cJSON_AddNumberToObject(c, "num_attention_heads", o->n_heads) &&
         cJSON_AddNumberToObject(c, "num_hidden_layers", o->n_layers) &&
         cJSON_AddNumberToObject(c, "num_key_value_heads", o->n_kv_heads) &&
         cJSON_AddNumberToObject(c, "pad_token_id", o->vocab - 3) &&
         cJSON_AddNumberToObject(c, "rms_norm_eps", o->rms_eps);
    cJSON *rp = ok ? cJSON_AddObjectToObject(c, "rope_parameters") : NULL;
    ok = rp && cJSON_AddNumberToObject(rp, "rope_theta", o->rope_theta) &&
         cJSON_AddStringToObject(rp, "rope_type", "default");
    if (ok && qwen)
        ok = cJSON_AddNullToObject(c, "sliding_window") &&
             cJSON_AddFalseToObject(c, "use_sliding_window");
    ok = ok && cJSON_AddBoolToObject(c, "tie_word_embeddings", o->tied) &&
         cJSON_AddTrueToObject(c, "use_cache") &&
         cJSON_AddNumberToObject(c, "vocab_size", o->vocab);
    if (!ok)
        goto fail;
    return c;
fail:
    cJSON_Delete(c);
    return NULL;
}

static cJSON *generation_doc(const cairn_synth_options_t *o)
{
    cJSON *g = cJSON_CreateObject();
    if (!g || !cJSON_AddNullToObject(g, "bos_token_id") ||
        !cJSON_AddNumberToObject(g, "eos_token_id", o->vocab - 1) ||
        !cJSON_AddNumberToObject(g, "pad_token_id", o->vocab - 3)) {
        cJSON_Delete(g);
        return NULL;
    }
    return g;
}

static const char chat_template[] =
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt "
    "%}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

static const char *const specials[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

/* The GPT-2 byte-level alphabet: byte b is shown as code point cp[b]; order[i] is the
 * byte whose token id is i (printable bytes first, as bytes_to_unicode lists them). */
static void byte_alphabet(uint32_t cp[256], uint8_t order[256])
{
    int k = 0, extra = 0;
    bool direct[256] = {false};
    for (int b = 0; b < 256; b++)
        direct[b] = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    for (int b = 0; b < 256; b++)
        if (direct[b]) {
            cp[b] = (uint32_t)b;
            order[k++] = (uint8_t)b;
        }
    for (int b = 0; b < 256; b++)
        if (!direct[b]) {
            cp[b] = 256u + (uint32_t)extra++;
            order[k++] = (uint8_t)b;
        }
}

static size_t utf8_put(char *s, uint32_t c)
{
    if (c < 0x80) {
        s[0] = (char)c;
        return 1;
    }
    s[0] = (char)(0xC0 | (c >> 6)); /* the alphabet stays below U+0800 */
    s[1] = (char)(0x80 | (c & 0x3F));
    return 2;
}

static cJSON *added_token(int id, const char *content)
{
    cJSON *t = cJSON_CreateObject();
    if (!t || (id >= 0 && !cJSON_AddNumberToObject(t, "id", id)) ||
        !cJSON_AddStringToObject(t, "content", content) ||
        !cJSON_AddFalseToObject(t, "single_word") || !cJSON_AddFalseToObject(t, "lstrip") ||
        !cJSON_AddFalseToObject(t, "rstrip") || !cJSON_AddFalseToObject(t, "normalized") ||
        !cJSON_AddTrueToObject(t, "special")) {
        cJSON_Delete(t);
        return NULL;
    }
    return t;
}

/* Builds tokenizer.json (see the file comment for the id layout). */
static cJSON *tokenizer_doc(const cairn_synth_options_t *o)
{
    int n_bpe = o->vocab - 3;
    char **tok = cairn_calloc((size_t)n_bpe, sizeof *tok);
    cJSON *doc = cJSON_CreateObject();
    if (!tok || !doc)
        goto fail;
    uint32_t cp[256];
    uint8_t order[256];
    byte_alphabet(cp, order);
    for (int i = 0; i < 256; i++) {
        char s[4] = {0};
        utf8_put(s, cp[order[i]]);
        if (!(tok[i] = cairn_strdup(s)))
            goto fail;
    }
    bool ok = cJSON_AddStringToObject(doc, "version", "1.0") &&
              cJSON_AddNullToObject(doc, "truncation") && cJSON_AddNullToObject(doc, "padding");
    cJSON *added = ok ? cJSON_AddArrayToObject(doc, "added_tokens") : NULL;
    ok = added != NULL;
    for (int i = 0; ok && i < 3; i++)
        ok = append(added, added_token(n_bpe + i, specials[i])) != NULL;
    cJSON *norm = ok ? cJSON_AddObjectToObject(doc, "normalizer") : NULL;
    ok = norm && cJSON_AddStringToObject(norm, "type", "NFC");
    /* Pre-tokenizer: the Qwen2 split regex, then ByteLevel without its own regex. */
    cJSON *pre = ok ? cJSON_AddObjectToObject(doc, "pre_tokenizer") : NULL;
    cJSON *seq = pre && cJSON_AddStringToObject(pre, "type", "Sequence")
                     ? cJSON_AddArrayToObject(pre, "pretokenizers")
                     : NULL;
    cJSON *split = append(seq, cJSON_CreateObject());
    cJSON *bl = append(seq, cJSON_CreateObject());
    if (!split || !bl)
        goto fail;
    ok = cJSON_AddStringToObject(split, "type", "Split");
    cJSON *pat = ok ? cJSON_AddObjectToObject(split, "pattern") : NULL;
    ok = pat &&
         cJSON_AddStringToObject(pat, "Regex",
                                 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                 "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                                 "\\s+(?!\\S)|\\s+") &&
         cJSON_AddStringToObject(split, "behavior", "Isolated") &&
         cJSON_AddFalseToObject(split, "invert") &&
         cJSON_AddStringToObject(bl, "type", "ByteLevel") &&
         cJSON_AddFalseToObject(bl, "add_prefix_space") &&
         cJSON_AddFalseToObject(bl, "trim_offsets") && cJSON_AddFalseToObject(bl, "use_regex");
    ok = ok && cJSON_AddNullToObject(doc, "post_processor");
    cJSON *dec = ok ? cJSON_AddObjectToObject(doc, "decoder") : NULL;
    ok = dec && cJSON_AddStringToObject(dec, "type", "ByteLevel") &&
         cJSON_AddTrueToObject(dec, "add_prefix_space") &&
         cJSON_AddTrueToObject(dec, "trim_offsets") && cJSON_AddTrueToObject(dec, "use_regex");
    cJSON *model = ok ? cJSON_AddObjectToObject(doc, "model") : NULL;
    ok = model && cJSON_AddStringToObject(model, "type", "BPE") &&
         cJSON_AddNullToObject(model, "dropout") && cJSON_AddNullToObject(model, "unk_token") &&
         cJSON_AddNullToObject(model, "continuing_subword_prefix") &&
         cJSON_AddNullToObject(model, "end_of_word_suffix") &&
         cJSON_AddFalseToObject(model, "fuse_unk") &&
         cJSON_AddFalseToObject(model, "byte_fallback") &&
         cJSON_AddFalseToObject(model, "ignore_merges");
    cJSON *vocab = ok ? cJSON_AddObjectToObject(model, "vocab") : NULL;
    cJSON *merges = vocab ? cJSON_AddArrayToObject(model, "merges") : NULL;
    if (!merges)
        goto fail;
    /* Merged tokens: token k = tok[p] + tok[q], (p, q) walking p = 0, 1, ... and q over
     * the 256 byte tokens, so each string is new and its parts already exist. */
    for (int k = 256, p = 0, q = 0; k < n_bpe; k++) {
        size_t a = strlen(tok[p]), b = strlen(tok[q]);
        if (!(tok[k] = cairn_malloc(a + b + 1)))
            goto fail;
        memcpy(tok[k], tok[p], a);
        memcpy(tok[k] + a, tok[q], b + 1);
        cJSON *pair = append(merges, cJSON_CreateArray());
        if (!append(pair, cJSON_CreateString(tok[p])) ||
            !append(pair, cJSON_CreateString(tok[q])))
            goto fail;
        if (++q == 256) {
            q = 0;
            p++;
        }
    }
    for (int i = 0; i < n_bpe; i++)
        if (!cJSON_AddNumberToObject(vocab, tok[i], i))
            goto fail;
    for (int i = 0; i < n_bpe; i++)
        cairn_free(tok[i]);
    cairn_free(tok);
    return doc;

fail:
    if (tok)
        for (int i = 0; i < n_bpe; i++)
            cairn_free(tok[i]);
    cairn_free(tok);
    cJSON_Delete(doc);
    return NULL;
}

static cJSON *tokenizer_config_doc(const cairn_synth_options_t *o)
{
    cJSON *c = cJSON_CreateObject();
    bool ok = c && cJSON_AddFalseToObject(c, "add_bos_token") &&
              cJSON_AddFalseToObject(c, "add_eos_token");
    cJSON *dec = ok ? cJSON_AddObjectToObject(c, "added_tokens_decoder") : NULL;
    ok = dec != NULL;
    for (int i = 0; ok && i < 3; i++) {
        char id[16];
        snprintf(id, sizeof id, "%d", o->vocab - 3 + i);
        cJSON *t = added_token(-1, specials[i]);
        ok = t && cJSON_AddItemToObject(dec, id, t);
        if (!ok)
            cJSON_Delete(t);
    }
    ok = ok && cJSON_AddNullToObject(c, "bos_token") &&
         cJSON_AddStringToObject(c, "chat_template", chat_template) &&
         cJSON_AddFalseToObject(c, "clean_up_tokenization_spaces") &&
         cJSON_AddStringToObject(c, "eos_token", specials[2]) &&
         cJSON_AddNumberToObject(c, "model_max_length", o->max_pos) &&
         cJSON_AddStringToObject(c, "pad_token", specials[0]) &&
         cJSON_AddStringToObject(c, "tokenizer_class", "PreTrainedTokenizerFast") &&
         cJSON_AddNullToObject(c, "unk_token");
    if (!ok) {
        cJSON_Delete(c);
        return NULL;
    }
    return c;
}

/* ---- the whole folder ---- */

static int check_options(const cairn_synth_options_t *o, char *err, size_t err_len)
{
    const struct {
        const char *name;
        int v;
        int max;
    } sizes[] = {
        {"layers", o->n_layers, 4096}, {"hidden", o->hidden, 1 << 16},
        {"heads", o->n_heads, 1024},   {"kv-heads", o->n_kv_heads, 1024},
        {"head-dim", o->head_dim, 1024}, {"ffn", o->ffn, 1 << 18},
        {"vocab", o->vocab, 1 << 22},  {"max-pos", o->max_pos, 1 << 30},
        {"shards", o->n_shards, 99999},
    };
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(sizes); i++) {
        if (sizes[i].v < 1 || sizes[i].v > sizes[i].max) {
            st_errf(err, err_len, "synth: %s = %d is outside [1, %d]", sizes[i].name, sizes[i].v,
                    sizes[i].max);
            return CAIRN_EINVAL;
        }
    }
    if (o->arch != CAIRN_SYNTH_LLAMA && o->arch != CAIRN_SYNTH_QWEN3 &&
        o->arch != CAIRN_SYNTH_GEMMA3 && o->arch != CAIRN_SYNTH_LFM2 &&
        o->arch != CAIRN_SYNTH_QWEN35) {
        st_errf(err, err_len, "synth: unknown architecture");
        return CAIRN_EINVAL;
    }
    if (o->sliding_window < 0 || o->sliding_pattern < 0 || o->sliding_pattern > 4096) {
        st_errf(err, err_len, "synth: the sliding window and pattern must be positive (0: default)");
        return CAIRN_EINVAL;
    }
    if (o->arch == CAIRN_SYNTH_LFM2) {
        if (o->n_layers > 64 || (o->n_layers < 64 && (o->attn_layers >> o->n_layers) != 0) ||
            o->conv_taps < 0 || o->conv_taps > 64) {
            st_errf(err, err_len, "synth: lfm2 needs at most 64 layers, attention layers "
                    "among them and 1..64 conv taps");
            return CAIRN_EINVAL;
        }
    }
    if (o->arch == CAIRN_SYNTH_QWEN35) {
        const struct {
            const char *name;
            int v, max;
        } lin[] = {{"lin-k-heads", o->lin_k_heads, 1024}, {"lin-v-heads", o->lin_v_heads, 1024},
                   {"lin-k-dim", o->lin_k_dim, 1024},     {"lin-v-dim", o->lin_v_dim, 1024},
                   {"conv-kernel", o->conv_kernel, 64},   {"full-interval", o->full_interval, 4096}};
        for (size_t i = 0; i < CAIRN_ARRAY_LEN(lin); i++) {
            if (lin[i].v < 1 || lin[i].v > lin[i].max) {
                st_errf(err, err_len, "synth: %s = %d is outside [1, %d]", lin[i].name, lin[i].v,
                        lin[i].max);
                return CAIRN_EINVAL;
            }
        }
        if (o->lin_v_heads % o->lin_k_heads != 0 || !(o->partial_rotary > 0 && o->partial_rotary <= 1)) {
            st_errf(err, err_len, "synth: lin-v-heads must be a multiple of lin-k-heads and "
                    "partial_rotary in (0, 1]");
            return CAIRN_EINVAL;
        }
    }
    if (o->dtype != CAIRN_DTYPE_F32 && o->dtype != CAIRN_DTYPE_F16 &&
        o->dtype != CAIRN_DTYPE_BF16) {
        st_errf(err, err_len, "synth: unknown dtype");
        return CAIRN_EINVAL;
    }
    if (o->vocab < 259) {
        st_errf(err, err_len, "synth: vocab %d is below 259 (256 bytes + 3 special tokens)",
                o->vocab);
        return CAIRN_EINVAL;
    }
    if (o->n_heads % o->n_kv_heads != 0) {
        st_errf(err, err_len, "synth: heads %d is not a multiple of kv-heads %d", o->n_heads,
                o->n_kv_heads);
        return CAIRN_EINVAL;
    }
    if (o->head_dim % 2 != 0) {
        st_errf(err, err_len, "synth: head-dim %d must be even", o->head_dim);
        return CAIRN_EINVAL;
    }
    if (!(o->rope_theta > 0 && o->rope_theta < 1e30) || !(o->rms_eps > 0 && o->rms_eps < 1)) {
        st_errf(err, err_len, "synth: rope-theta must be positive and rms-eps in (0, 1)");
        return CAIRN_EINVAL;
    }
    return 0;
}

/* Removes dir/name if it exists (a stale file of the other weight layout). */
static int remove_stale(const char *dir, const char *name, char *err, size_t err_len)
{
    char *p = cairn_path_join(dir, name);
    if (!p) {
        st_errf(err, err_len, "%s: out of memory", dir);
        return CAIRN_ENOMEM;
    }
    int rc = 0;
    if (unlink(p) != 0 && errno != ENOENT) {
        st_errf(err, err_len, "%s: cannot remove stale file: %s", p, strerror(errno));
        rc = CAIRN_EIO;
    }
    cairn_free(p);
    return rc;
}

/*
 * Assigns tensors, in model order, to n_shards shards of roughly equal byte size. A shard
 * is closed once it reaches its share, or when the tensors left are just enough to give
 * each later shard one, so no shard is empty (n >= n_shards is checked by the caller).
 */
static void assign_shards(syn_tensor_t *ts, int n, int n_shards, size_t es)
{
    uint64_t total = 0, acc = 0;
    for (int i = 0; i < n; i++)
        total += tensor_elems(&ts[i]) * es;
    int shard = 0;
    for (int i = 0; i < n; i++) {
        ts[i].shard = shard;
        acc += tensor_elems(&ts[i]) * es;
        uint64_t target = total / (uint64_t)n_shards * (uint64_t)(shard + 1);
        if (shard < n_shards - 1 && (acc >= target || n - i - 1 == n_shards - 1 - shard))
            shard++;
    }
}

int cairn_synth_write(const char *dir, const cairn_synth_options_t *o, char *err,
                      size_t err_len)
{
    int rc;
    syn_tensor_t *ts = NULL;
    int n = 0;
    uint8_t *buf = NULL;
    cJSON *doc = NULL;
    char *cfg_text = NULL;
    const size_t cap = (size_t)1 << 20;

    if (!dir || !o) {
        st_errf(err, err_len, "synth: no folder or options");
        return CAIRN_EINVAL;
    }
    if ((rc = check_options(o, err, err_len)))
        return rc;
    cairn_init();
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        st_errf(err, err_len, "%s: cannot create folder: %s", dir, strerror(errno));
        return errno == ENOSPC ? CAIRN_ENOSPC : CAIRN_EIO;
    }
    if ((rc = list_tensors(o, &ts, &n))) {
        st_errf(err, err_len, "%s: out of memory", dir);
        goto fail;
    }
    if (o->n_shards > n) {
        st_errf(err, err_len, "synth: %d shards for only %d tensors", o->n_shards, n);
        rc = CAIRN_EINVAL;
        goto fail;
    }

    /* config.json first, and checked by the real parser so the two never disagree. */
    if (!(doc = config_doc(o)) || !(cfg_text = cJSON_Print(doc)))
        goto oom;
    cairn_model_config_t check;
    if ((rc = cairn_model_config_parse(cfg_text, strlen(cfg_text), &check, err, err_len)))
        goto fail;
    if ((rc = write_json(dir, "config.json", doc, true, err, err_len)))
        goto fail;
    cJSON_Delete(doc);
    if (!(doc = generation_doc(o)))
        goto oom;
    if ((rc = write_json(dir, "generation_config.json", doc, true, err, err_len)))
        goto fail;
    cJSON_Delete(doc);
    doc = NULL;

    /* Weights. */
    if (!(buf = cairn_malloc(cap)))
        goto oom;
    assign_shards(ts, n, o->n_shards, cairn_dtype_size(o->dtype));
    if (o->n_shards == 1) {
        if ((rc = remove_stale(dir, "model.safetensors.index.json", err, err_len)) ||
            (rc = write_shard(dir, "model.safetensors", ts, n, 0, o, buf, cap, err, err_len)))
            goto fail;
    } else {
        if ((rc = remove_stale(dir, "model.safetensors", err, err_len)))
            goto fail;
        if (!(doc = cJSON_CreateObject()))
            goto oom;
        cJSON *meta = cJSON_AddObjectToObject(doc, "metadata");
        cJSON *wm = meta ? cJSON_AddObjectToObject(doc, "weight_map") : NULL;
        uint64_t total = 0;
        for (int i = 0; i < n; i++)
            total += tensor_elems(&ts[i]) * cairn_dtype_size(o->dtype);
        if (!wm || !cJSON_AddNumberToObject(meta, "total_size", (double)total))
            goto oom;
        /* weight_map sorted by tensor name, as transformers writes it. */
        const syn_tensor_t **sorted = cairn_malloc((size_t)n * sizeof *sorted);
        if (!sorted)
            goto oom;
        for (int i = 0; i < n; i++)
            sorted[i] = &ts[i];
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_tensor_ptr_name);
        for (int s = 0; s < o->n_shards; s++) {
            char fname[64];
            snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, o->n_shards);
            if ((rc = write_shard(dir, fname, ts, n, s, o, buf, cap, err, err_len))) {
                cairn_free(sorted);
                goto fail;
            }
        }
        for (int i = 0; i < n; i++) {
            char fname[64];
            snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", sorted[i]->shard + 1,
                     o->n_shards);
            if (!cJSON_AddStringToObject(wm, sorted[i]->name, fname)) {
                cairn_free(sorted);
                goto oom;
            }
        }
        cairn_free(sorted);
        if ((rc = write_json(dir, "model.safetensors.index.json", doc, true, err, err_len)))
            goto fail;
        cJSON_Delete(doc);
        doc = NULL;
    }

    /* Tokenizer and chat template. */
    if (!(doc = tokenizer_doc(o)))
        goto oom;
    if ((rc = write_json(dir, "tokenizer.json", doc, false, err, err_len)))
        goto fail;
    cJSON_Delete(doc);
    if (!(doc = tokenizer_config_doc(o)))
        goto oom;
    if ((rc = write_json(dir, "tokenizer_config.json", doc, true, err, err_len)) ||
        (rc = write_text(dir, "chat_template.jinja", chat_template, err, err_len)))
        goto fail;

    /* Make the renames durable. */
    int hook = cairn_io_check("fsync", dir);
    int dfd = hook == 0 ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (hook == 0 && (dfd < 0 || fsync(dfd) != 0))
        hook = -errno;
    if (dfd >= 0)
        close(dfd);
    if (hook) {
        st_errf(err, err_len, "%s: fsync of the folder failed: %s", dir, strerror(-hook));
        rc = io_status(hook);
        goto fail;
    }

    cJSON_Delete(doc);
    cairn_free(cfg_text);
    cairn_free(buf);
    cairn_free(ts);
    return 0;

oom:
    st_errf(err, err_len, "%s: out of memory", dir);
    rc = CAIRN_ENOMEM;
fail:
    cJSON_Delete(doc);
    cairn_free(cfg_text);
    cairn_free(buf);
    cairn_free(ts);
    return rc;
}
