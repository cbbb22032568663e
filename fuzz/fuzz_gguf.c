/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader and everything built on its
 * metadata: the parser (src/formats/gguf.c), the typed readers, a family's metadata ->
 * config map and tensor binding (src/models/, as cairn_checkpoint_open does), and the
 * tokenizer constructor (src/tokenizer/tokenizer_gguf.c: byte-level BPE and SentencePiece
 * vocabularies, seeds tokenizer_only.gguf and tokenizer_spm.gguf), whose tokenizer then
 * encodes, decodes and streams a fixed text.
 *
 * The input is a whole file image. A successful parse must satisfy the parser's
 * invariants (every key and tensor found by name is itself, tensor bytes inside the data
 * section at aligned offsets, no two non-empty tensors overlapping), re-checked here so a
 * logic error shows up as a crash, not only memory errors. Tensor bytes and strings are
 * touched so ASan flags any that lie outside the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "models/family.h"
#include "tokenizer/tok_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

static void check_invariants(const gguf_file_t *g, const uint8_t *data, size_t size)
{
    uint64_t data0 = gguf_data_offset(g);
    if (data0 > size || gguf_alignment(g) == 0 || (gguf_alignment(g) & (gguf_alignment(g) - 1)))
        abort();
    for (size_t i = 0; i < gguf_n_kvs(g); i++) {
        const gguf_kv_t *kv = gguf_kv(g, i);
        char key[300];
        if (kv->key.n >= sizeof key)
            continue;
        memcpy(key, kv->key.p, kv->key.n);
        key[kv->key.n] = 0;
        if (!memchr(key, 0, kv->key.n) && gguf_find(g, key) != kv)
            abort();
        if (kv->type == GGUF_TYPE_STRING || (kv->type == GGUF_TYPE_ARRAY && kv->elem == GGUF_TYPE_STRING))
            for (uint64_t j = 0; j < kv->n; j++)
                if (kv->strs[j].n)
                    sink ^= (uint8_t)kv->strs[j].p[kv->strs[j].n - 1];
        uint64_t u;
        float f;
        bool b;
        gguf_str_t s;
        char err[256];
        gguf_get_uint(g, key, true, 0, UINT64_MAX, &u, err, sizeof err);
        gguf_get_float(g, key, true, 0, &f, err, sizeof err);
        gguf_get_bool(g, key, false, &b, err, sizeof err);
        gguf_get_str(g, key, true, &s, err, sizeof err);
    }
    for (size_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor_t *t = gguf_tensor(g, i);
        if (gguf_find_tensor(g, t->name) != t || t->offset % gguf_alignment(g) ||
            t->data != data + data0 + t->offset || data0 + t->offset + t->bytes > size)
            abort();
        if (t->bytes)
            sink ^= t->data[t->bytes - 1];
        for (size_t j = 0; j < i; j++) {
            const gguf_tensor_t *o = gguf_tensor(g, j);
            if (t->bytes && o->bytes && t->offset < o->offset + o->bytes && o->offset < t->offset + t->bytes)
                abort();
        }
    }
}

static bool name_map(void *user, const char *name, char *buf, size_t cap, int *heads)
{
    const cairn_model_t *m = user;
    return m->family->gguf_tensor_name(m->priv, &m->cfg, name, buf, cap, heads);
}

/* The checkpoint path over the buffer: config from metadata, the weight table, binding. */
static void open_model(gguf_file_t *g)
{
    char err[512];
    cairn_model_t m;
    if (cairn_model_parse_gguf(g, &m, err, sizeof err) != 0) {
        gguf_close(g);
        return;
    }
    fmt_tensors_t *ts = NULL;
    if (gguf_tensors_open(g, name_map, &m, &ts, err, sizeof err) != 0) {
        gguf_close(g);
    } else if (m.family->bind(m.priv, &m.cfg, ts, err, sizeof err) == 0) {
        fmt_tensors_check_used(ts, NULL, NULL, err, sizeof err);
    }
    fmt_tensors_close(ts);
    cairn_model_fini(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool init;
    if (!init) {
        cairn_init();
        init = true;
    }
    gguf_file_t *g = NULL;
    char err[512];
    if (gguf_parse(data, size, "fuzz", &g, err, sizeof err) != 0) {
        if (g)
            abort();
        return 0;
    }
    check_invariants(g, data, size);
    cairn_tokenizer_t *t = NULL;
    if (tok_load_gguf(g, &t, err, sizeof err) == 0) {
        int32_t *ids = NULL;
        size_t n = 0;
        static const char text[] = "Hello world, it's 2024! <|im_end|> \xc3\xa9\n\n  x <s></s><unk>";
        for (unsigned flags = 0; flags < 2; flags++) {
            /* Special tokens added and matched, then neither (both tokenizer models). */
            unsigned f = flags ? CAIRN_TOKENIZE_SPLIT_SPECIAL : CAIRN_TOKENIZE_ADD_SPECIAL;
            if (cairn_tokenizer_encode_ex(t, text, sizeof text - 1, f, &ids, &n) != 0)
                continue;
            char *out = NULL;
            size_t len;
            if (cairn_tokenizer_decode(t, ids, n, flags == 1, &out, &len) == 0)
                cairn_free(out);
            cairn_tokenizer_stream_t *st = NULL;
            if (cairn_tokenizer_stream_create(t, false, &st) == 0) {
                const char *piece;
                for (size_t i = 0; i < n; i++)
                    if (cairn_tokenizer_stream_push(st, ids[i], &piece, &len) == 0 && len)
                        sink ^= (uint8_t)piece[len - 1];
                cairn_tokenizer_stream_destroy(st);
            }
            cairn_free(ids);
        }
        cairn_tokenizer_destroy(t);
    }
    open_model(g); /* takes g */
    return 0;
}
