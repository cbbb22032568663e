/*
 * Determinism of quantized models and 8-bit K/V (issue 12): on each quantized GGUF
 * fixture (q256: Q8_0, Q4_0, Q4_K_M, Q5_K_M, Q6_K) and each K/V type (f32, q8_0,
 * fp8_e4m3), with every kernel implementation this CPU runs, a token's logits are
 * bit-identical (memcmp) on the flat and the paged path, in one step or chunks of 1 and 7
 * (the row kernel and the packed kernel of the quantized matmul meet here), on 1 or 2
 * threads, with a 512-token prefix served by the hot cache, and after a restore of that
 * prefix from the cold tier; and every implementation gives the portable one's bits. An
 * implementation this CPU lacks (AMX) is reported as skipped. The K/V type enters the
 * cold tier's fingerprint: blocks stored under one type are never restored under another.
 *
 * CI runs each file with f32 K/V and one 8-bit K/V type (q8_0 and fp8_e4m3 alternate over
 * the files, so each meets several weight types) and compares the implementations over 48
 * tokens (the row kernel in chunks of 5; the packed and AMX tile kernels in one step);
 * CAIRN_TEST_FULL=1 runs every file with every K/V type and 200 tokens (~10x longer).
 * Under the sanitizers (CAIRN_SANITIZED, scripts/test.sh's ASan stage; not with
 * CAIRN_TEST_FULL) every check still runs on every file, at smaller sizes: one K/V type
 * per file (f32, q8_0, fp8_e4m3 in turn over the files, so each type meets at least one
 * weight type and every type is compared across the implementations); the first 528 and
 * 560 tokens of the prompts (the same 512-token prefix hit); 48 tokens for the
 * token-by-token decode (96); and for the implementations 16 tokens, or 32 on a CPU with
 * AMX (still a tile step), of which the first 16 in chunks of 5.
 *
 * The same contract for q256-bf16.gguf in BF16 math (test_bf16_math): the "amx"
 * implementation's AMX-BF16 tiles take the prefill steps (>= 32 rows), AVX-512 the decode
 * steps and the chunks, and both give the portable bits. The fixtures are read from
 * $CAIRN_FIXTURES when set (another machine, e.g. the AMX device), else the build's folder.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cairn/engine.h"
#include "compute/backend.h"
#include "compute/cpu/kernels.h"
#include "engine/engine_cold.h"
#include "engine/engine_fixtures.h"

#define VOCAB 4096

static const char *const files[] = {"q256-Q8_0.gguf", "q256-Q4_0.gguf", "q256-Q4_K_M.gguf", "q256-Q5_K_M.gguf",
                                    "q256-Q6_K.gguf"};
static const char *const impls[] = {"scalar", "avx2", "avx512", "amx"};
static int32_t *lng, *shr;
static int n_lng, n_shr;

static cairn_engine_math_t math = CAIRN_ENGINE_MATH_F32; /* of the engines below */

/* The fixtures' folder: $CAIRN_FIXTURES when set, else the build's. */
static const char *fixtures_root(void)
{
    const char *root = getenv("CAIRN_FIXTURES");
    return root && root[0] ? root : CAIRN_FIXTURES_DIR;
}

static cairn_checkpoint_t *open_gguf(const char *name)
{
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/gguf/q256/%s", fixtures_root(), name);
    cairn_checkpoint_t *ck = NULL;
    if (cairn_checkpoint_open(path, &ck, err, sizeof err))
        fail_msg("%s: %s", path, err);
    return ck;
}

static cairn_engine_t *engine(cairn_checkpoint_t *ck, cairn_dtype_t kv, cairn_kv_path_t path, int threads,
                              const char *cold_root)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.kv_path = path;
    o.kv_dtype = kv;
    o.math = math;
    o.n_threads = threads;
    o.pool_mib = 32;
    o.max_step_tokens = 512;
    o.cold = cold_root ? 1 : -1;
    o.cold_root = cold_root;
    o.cold_capture_ms = 60000; /* a loaded machine must not cut the turn's capture short */
    o.cold_drain_ms = 60000;   /* nor the writes queued when the engine is destroyed */
    cairn_engine_t *e = NULL;
    char err[256] = "";
    if (cairn_engine_create(ck, &o, &e, err, sizeof err))
        fail_msg("engine: %s", err);
    return e;
}

/* ids in chunks of `chunk` (0: one step), logits at every computed position, malloc'd. */
static float *run(cairn_engine_t *e, const char *salt, const int32_t *ids, int n, int chunk, int *cached,
                  int *restored)
{
    cairn_seq_t *s;
    int hit = 0;
    assert_int_equal(cairn_seq_begin(e, salt, ids, n, &s, &hit), 0);
    int from_disk = cairn_seq_restored_tokens(s);
    if (cached)
        *cached = hit;
    if (restored)
        *restored = from_disk;
    const int skip = hit + from_disk;
    float *out = malloc((size_t)(n - skip) * VOCAB * sizeof(float));
    assert_non_null(out);
    int done = 0;
    while (cairn_seq_n_pending(s) > 0) {
        int len = chunk ? chunk : n;
        if (len > cairn_seq_n_pending(s))
            len = cairn_seq_n_pending(s);
        cairn_batch_item_t it = {s, len, CAIRN_LOGITS_ALL};
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
        memcpy(out + (size_t)done * VOCAB, lg, (size_t)rows * VOCAB * sizeof(float));
        done += rows;
    }
    assert_int_equal(done, n - skip);
    assert_int_equal(cairn_seq_end_turn(s), 0);
    cairn_seq_release(s);
    return out;
}

static void same(const float *a, const float *b, int rows, const char *what, const char *file, const char *impl,
                 cairn_dtype_t kv)
{
    if (memcmp(a, b, (size_t)rows * VOCAB * sizeof(float)))
        fail_msg("%s, kernels %s, K/V %s: %s differs", file, impl, cairn_dtype_name(kv), what);
}

static bool usable(const char *impl)
{
    if (kern_impl_available(impl))
        return true;
    static char told[64];
    if (!strstr(told, impl)) {
        printf("    skipped: kernel implementation '%s' is not in this build or not supported by this CPU%s\n", impl,
               strcmp(impl, "amx") ? "" : " (no AMX-INT8 tiles, or the kernel refused the tile state)");
        strncat(told, impl, sizeof told - strlen(told) - 2);
        strcat(told, " ");
    }
    return false;
}

static bool full_sweep(void)
{
    const char *e = getenv("CAIRN_TEST_FULL");
    return e && strcmp(e, "0") != 0;
}

/* The sanitizers' sizes (the file's comment): CAIRN_SANITIZED set, no full sweep. */
static bool sanitized(void) { return getenv("CAIRN_SANITIZED") != NULL && !full_sweep(); }

/* Tokens of check_impls under the sanitizers: 32 where this CPU has AMX (one step of two
 * tiles), else 16 (the VNNI and row kernels have no row threshold above 8). */
static int sanitized_impl_tokens(void) { return kern_impl_available("amx") ? 32 : 16; }

/* The contract on the process's implementation (the best this CPU runs): flat = paged,
 * one step = token by token (decode) = chunks of 7, 1 = 2 threads, cold = prefix hit. */
static void check_paths(cairn_checkpoint_t *ck, const char *file, cairn_dtype_t kv)
{
    const char *impl = kern_impl_name();
    /* long_720 and shared_prefix_672, or under the sanitizers their first 528 and 560
     * tokens: the same 512-token prefix, one block of long_720 past it. */
    const int nl = sanitized() ? 528 : n_lng, ns = sanitized() ? 560 : n_shr;
    cairn_engine_t *flat1 = engine(ck, kv, CAIRN_KV_FLAT, 1, NULL);
    float *ref = run(flat1, NULL, lng, nl, 0, NULL, NULL);
    float *ref_shr = run(flat1, NULL, shr, ns, 0, NULL, NULL);
    const int n_decode = sanitized() ? 48 : 96;
    float *x = run(flat1, NULL, lng, n_decode, 1, NULL, NULL); /* decode, token by token */
    same(x, ref, n_decode, "token-by-token decode", file, impl, kv);
    free(x);
    cairn_engine_destroy(flat1);

    cairn_engine_t *paged = engine(ck, kv, CAIRN_KV_PAGED, 2, NULL);
    int cached = -1;
    x = run(paged, "c7", lng, nl, 7, &cached, NULL);
    assert_int_equal(cached, 0);
    same(x, ref, nl, "paged, 2 threads, chunks of 7", file, impl, kv);
    free(x);
    x = run(paged, "c7", shr, ns, 0, &cached, NULL);
    assert_int_equal(cached, 512);
    same(x, ref_shr + (size_t)512 * VOCAB, ns - 512, "a 512-token prefix hit", file, impl, kv);
    free(x);
    cairn_engine_destroy(paged);
    free(ref);
    free(ref_shr);
}

/* Every implementation = the portable one: the first n tokens of long_720 in one step
 * (the packed kernel, and AMX's tiles from 32 rows) and in chunks of 5 (the row kernel;
 * under the sanitizers the first 16 of them), flat path, K/V kv. */
static void check_impls(cairn_checkpoint_t *ck, const char *file, cairn_dtype_t kv, int n)
{
    const int n_chunked = sanitized() && n > 16 ? 16 : n;
    const char *const first = kern_impl_name();
    float *portable = NULL;
    for (size_t i = 0; i < sizeof impls / sizeof impls[0]; i++) {
        if (!usable(impls[i]))
            continue;
        assert_int_equal(kern_set_impl(impls[i]), CAIRN_OK); /* engines below take it */
        cairn_engine_t *e = engine(ck, kv, CAIRN_KV_FLAT, 2, NULL);
        float *ref = run(e, NULL, lng, n, 0, NULL, NULL);
        float *x = run(e, NULL, lng, n_chunked, 5, NULL, NULL);
        same(x, ref, n_chunked, "chunks of 5", file, impls[i], kv);
        free(x);
        cairn_engine_destroy(e);
        if (!portable) {
            portable = ref;
            continue;
        }
        same(ref, portable, n, "this implementation against the portable one", file, impls[i], kv);
        free(ref);
    }
    free(portable);
    assert_int_equal(kern_set_impl(first), CAIRN_OK);
}

static void check_file(int index)
{
    const char *file = files[index];
    cairn_checkpoint_t *ck = open_gguf(file);
    const bool full = full_sweep();
    /* f32 and one 8-bit type in CI (alternating over the files), all three in full. */
    const cairn_dtype_t kvs[] = {CAIRN_DTYPE_F32, index % 2 ? CAIRN_DTYPE_FP8_E4M3 : CAIRN_DTYPE_Q8_0,
                                 index % 2 ? CAIRN_DTYPE_Q8_0 : CAIRN_DTYPE_FP8_E4M3};
    if (sanitized()) {
        static const cairn_dtype_t turn[] = {CAIRN_DTYPE_F32, CAIRN_DTYPE_Q8_0, CAIRN_DTYPE_FP8_E4M3};
        const cairn_dtype_t kv = turn[index % 3];
        check_paths(ck, file, kv);
        check_impls(ck, file, kv, sanitized_impl_tokens());
        cairn_checkpoint_close(ck);
        return;
    }
    const size_t n_kv = full ? 3 : 2;
    for (size_t k = 0; k < n_kv; k++)
        check_paths(ck, file, kvs[k]);
    const int n = full ? 200 : 48;
    for (size_t k = 0; k < (full ? 2 : 1); k++)
        check_impls(ck, file, kvs[k], n);
    cairn_checkpoint_close(ck);
}

static void test_q8_0(void **state) { (void)state; check_file(0); }
static void test_q4_0(void **state) { (void)state; check_file(1); }
static void test_q4_k_m(void **state) { (void)state; check_file(2); }
static void test_q5_k_m(void **state) { (void)state; check_file(3); }
static void test_q6_k(void **state) { (void)state; check_file(4); }

/* bf16 weights in BF16 math: the paths' contract on the process's implementation (on an
 * AMX machine: the AMX-BF16 tiles for the prefill steps, AVX-512 for decode and chunks of
 * 7), and every implementation = the portable one. */
static void test_bf16_math(void **state)
{
    (void)state;
    cairn_checkpoint_t *ck = open_gguf("q256-bf16.gguf");
    math = CAIRN_ENGINE_MATH_BF16;
    check_paths(ck, "q256-bf16.gguf (bf16 math)", CAIRN_DTYPE_F32);
    check_impls(ck, "q256-bf16.gguf (bf16 math)", CAIRN_DTYPE_F32, full_sweep() ? 200 : sanitized() ? sanitized_impl_tokens() : 48);
    math = CAIRN_ENGINE_MATH_F32;
    cairn_checkpoint_close(ck);
}

/* Cold-tier restore parity with 8-bit K/V: a prefix persisted by one engine and restored
 * by another gives the logits of the cold computation; the K/V type is part of the
 * fingerprint, so an engine with another type restores nothing from the same root. */
static void test_cold_restore(void **state)
{
    (void)state;
    char root[] = "/tmp/cairn-quant-cold-XXXXXX";
    assert_non_null(mkdtemp(root));
    cairn_checkpoint_t *ck = open_gguf("q256-Q4_K_M.gguf");
    const cairn_dtype_t kvs[] = {CAIRN_DTYPE_Q8_0, CAIRN_DTYPE_FP8_E4M3};
    for (size_t k = 0; k < 2; k++) {
        cairn_engine_t *ref_e = engine(ck, kvs[k], CAIRN_KV_FLAT, 1, NULL);
        float *ref = run(ref_e, NULL, shr, n_shr, 0, NULL, NULL);
        cairn_engine_destroy(ref_e);

        cairn_engine_t *a = engine(ck, kvs[k], CAIRN_KV_PAGED, 2, root);
        free(run(a, "tenant", shr, n_shr, 0, NULL, NULL));
        cairn_engine_destroy(a); /* drains the writer: the prompt's full blocks are on disk */

        cairn_engine_t *b = engine(ck, kvs[k], CAIRN_KV_PAGED, 2, root);
        int cached = -1, restored = -1;
        float *x = run(b, "tenant", shr, n_shr, 0, &cached, &restored);
        cairn_engine_destroy(b);
        assert_int_equal(cached, 0);
        assert_int_equal(restored, n_shr / 16 * 16 == n_shr ? n_shr - 16 : n_shr / 16 * 16);
        same(x, ref + (size_t)restored * VOCAB, n_shr - restored, "a cold-tier restore", "q256-Q4_K_M.gguf", "default",
             kvs[k]);
        free(x);
        free(ref);
    }
    /* The fingerprints: q8_0 K/V under numerics revision 3 of its attention (the integer
     * q.k), in a directory other than the one earlier builds wrote q8_0 K/V to (their
     * objects are never found); fp8 K/V's directory as before. */
    for (size_t k = 0; k < 2; k++) {
        cairn_engine_options_t o;
        cairn_engine_options_default(&o);
        o.kv_dtype = kvs[k];
        o.math = math;
        /* The CPU backend's id for this K/V type (the engine's, as it enters the
         * fingerprint), against the bare id of the same math, which earlier builds used. */
        compute_backend_t *be = NULL;
        char err[128];
        assert_int_equal(compute_backend_create("cpu", NULL, &be, err, sizeof err), 0);
        const char *now = compute_numerics_id(be, (cairn_math_t)math, kvs[k]);
        char bare[96];
        snprintf(bare, sizeof bare, "%s", compute_numerics_id(be, (cairn_math_t)math, CAIRN_DTYPE_BF16));
        compute_backend_destroy(be);
        if (kvs[k] == CAIRN_DTYPE_Q8_0) {
            char want[128];
            snprintf(want, sizeof want, "%s+qk8.3", bare);
            assert_string_equal(now, want);
        } else {
            assert_string_equal(now, bare);
        }
        cairn_tier_hash_t fp_now, fp_before;
        assert_int_equal(engine_cold_fingerprint(ck, &o, now, 16, &fp_now), 0);
        assert_int_equal(engine_cold_fingerprint(ck, &o, bare, 16, &fp_before), 0);
        char dir_now[512], dir_before[512];
        int at = snprintf(dir_now, sizeof dir_now, "%s/", root), at2 = snprintf(dir_before, sizeof dir_before, "%s/", root);
        for (int i = 0; i < CAIRN_TIER_HASH_BYTES; i++) {
            at += snprintf(dir_now + at, sizeof dir_now - (size_t)at, "%02x", fp_now.bytes[i]);
            at2 += snprintf(dir_before + at2, sizeof dir_before - (size_t)at2, "%02x", fp_before.bytes[i]);
        }
        assert_int_equal(access(dir_now, F_OK), 0); /* where this build wrote */
        if (kvs[k] == CAIRN_DTYPE_Q8_0)
            assert_int_not_equal(access(dir_before, F_OK), 0);
    }
    /* f32 K/V over the same root: another fingerprint, nothing restored. */
    cairn_engine_t *c = engine(ck, CAIRN_DTYPE_F32, CAIRN_KV_PAGED, 2, root);
    int restored = -1;
    free(run(c, "tenant", shr, n_shr, 0, NULL, &restored));
    assert_int_equal(restored, 0);
    cairn_engine_destroy(c);
    cairn_checkpoint_close(ck);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

/* --quantize: the HF folder of q256 converted at load. q4_k moves the logits by
 * a quantization's worth but keeps them correlated; both are other models to the cold
 * tier (another digest), and the converted bytes are what the checkpoint reports. q8_0
 * rounds weights as llama-quantize does, so the converted folder computes exactly what
 * llama-quantize's Q8_0 file of the same weights computes. */
static void test_quantize_at_load(void **state)
{
    (void)state;
    char hf[1024], err[512] = "";
    snprintf(hf, sizeof hf, "%s/gguf/q256/hf", fixtures_root());
    cairn_checkpoint_t *plain = NULL, *q8 = NULL, *q4 = NULL, *bad = NULL;
    assert_int_equal(cairn_checkpoint_open(hf, &plain, err, sizeof err), 0);
    assert_int_equal(cairn_checkpoint_open_quantized(hf, CAIRN_DTYPE_Q8_0, &q8, err, sizeof err), 0);
    assert_int_equal(cairn_checkpoint_open_quantized(hf, CAIRN_DTYPE_Q4_K, &q4, err, sizeof err), 0);
    assert_int_equal(cairn_checkpoint_open_quantized(hf, CAIRN_DTYPE_FP8_E4M3, &bad, err, sizeof err), CAIRN_EINVAL);
    assert_non_null(strstr(err, "cannot quantize weights to fp8_e4m3"));
    cairn_checkpoint_t *gg = open_gguf("q256-Q8_0.gguf");

    /* Bytes: the matrices in the new type, the norms (bf16) as they were. */
    const cairn_model_config_t *c = cairn_checkpoint_config(plain);
    const uint64_t norms = (uint64_t)(c->n_layers * (2 * c->hidden + 2 * c->head_dim) + c->hidden) * 2;
    const uint64_t mats = cairn_checkpoint_weight_bytes(plain) - norms; /* bf16 matrices: 2 bytes each */
    assert_int_equal(cairn_checkpoint_weight_bytes(q8), norms + mats / 2 / 32 * 34);
    assert_int_equal(cairn_checkpoint_weight_bytes(q4), norms + mats / 2 / 256 * 144);
    uint8_t d0[32], d1[32], d2[32];
    cairn_checkpoint_weights_digest(plain, d0);
    cairn_checkpoint_weights_digest(q8, d1);
    cairn_checkpoint_weights_digest(q4, d2);
    assert_memory_not_equal(d0, d1, 32);
    assert_memory_not_equal(d1, d2, 32);

    const int n = 256;
    float *lg[4];
    cairn_checkpoint_t *cks[4] = {plain, q8, q4, gg};
    for (int i = 0; i < 4; i++) {
        cairn_engine_t *e = engine(cks[i], CAIRN_DTYPE_F32, CAIRN_KV_FLAT, 2, NULL);
        lg[i] = run(e, NULL, lng, n, 0, NULL, NULL);
        cairn_engine_destroy(e);
    }
    double d_q8_gg = 0, d_q8 = 0, d_q4 = 0, ss = 0;
    for (size_t i = 0; i < (size_t)n * VOCAB; i++) {
        d_q8_gg = fmax(d_q8_gg, fabs(lg[1][i] - lg[3][i]));
        d_q8 += (lg[1][i] - lg[0][i]) * (double)(lg[1][i] - lg[0][i]);
        d_q4 += (lg[2][i] - lg[0][i]) * (double)(lg[2][i] - lg[0][i]);
        ss += lg[0][i] * (double)lg[0][i];
    }
    printf("    --quantize q8_0 vs llama-quantize's Q8_0: max |d| %.4f; relative RMS vs bf16: q8_0 %.4f, q4_k %.4f\n",
           d_q8_gg, sqrt(d_q8 / ss), sqrt(d_q4 / ss));
    /* The same rounding as llama-quantize's and the same norms: the same model, bit for bit. */
    assert_memory_equal(lg[1], lg[3], (size_t)n * VOCAB * sizeof(float));
    assert_true(sqrt(d_q8 / ss) > 0 && sqrt(d_q8 / ss) < 0.05);
    assert_true(sqrt(d_q4 / ss) > sqrt(d_q8 / ss) && sqrt(d_q4 / ss) < 0.5);
    for (int i = 0; i < 4; i++) {
        free(lg[i]);
        cairn_checkpoint_close(cks[i]);
    }
}

/* --quantize through every family's forward pass: each fixture folder converted to q8_0
 * computes logits close to its float ones (q8_0's rounding: a few percent of their RMS),
 * not another model's. A family that offsets into weight rows by element size computes
 * garbage here (every row range at row 0), which this catches. */
static void test_quantize_every_family(void **state)
{
    (void)state;
    static const char *const models[] = {"llama", "qwen3", "gemma3", "lfm2", "qwen3_5"};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        char dir[1024], err[512] = "";
        snprintf(dir, sizeof dir, "%s/models/%s", fixtures_root(), models[m]);
        cairn_checkpoint_t *ck[2] = {NULL, NULL};
        if (cairn_checkpoint_open(dir, &ck[0], err, sizeof err) ||
            cairn_checkpoint_open_quantized(dir, CAIRN_DTYPE_Q8_0, &ck[1], err, sizeof err))
            fail_msg("%s: %s", dir, err);
        assert_true(cairn_checkpoint_weight_bytes(ck[1]) < cairn_checkpoint_weight_bytes(ck[0]));
        const int vocab = cairn_checkpoint_config(ck[0])->vocab, n = 48;
        int32_t ids[48];
        for (int i = 0; i < n; i++)
            ids[i] = (int32_t)((i * 131 + 17) % (vocab - 8));
        float *lg[2];
        for (int k = 0; k < 2; k++) {
            cairn_engine_t *e = engine(ck[k], CAIRN_DTYPE_F32, CAIRN_KV_PAGED, 1, NULL);
            cairn_seq_t *s;
            int hit = 0;
            assert_int_equal(cairn_seq_begin(e, NULL, ids, n, &s, &hit), 0);
            cairn_batch_item_t it = {s, n, CAIRN_LOGITS_ALL};
            const float *out;
            int rows;
            assert_int_equal(cairn_engine_step(e, &it, 1, &out, &rows), 0);
            assert_int_equal(rows, n);
            lg[k] = malloc((size_t)n * vocab * sizeof(float));
            assert_non_null(lg[k]);
            memcpy(lg[k], out, (size_t)n * vocab * sizeof(float));
            cairn_seq_release(s);
            cairn_engine_destroy(e);
        }
        double dd = 0, ss = 0;
        for (size_t i = 0; i < (size_t)n * vocab; i++) {
            dd += (lg[1][i] - lg[0][i]) * (double)(lg[1][i] - lg[0][i]);
            ss += lg[0][i] * (double)lg[0][i];
        }
        printf("    --quantize q8_0, %s: relative RMS of the logits' change %.4f\n", models[m], sqrt(dd / ss));
        if (!(sqrt(dd / ss) < 0.1))
            fail_msg("%s: --quantize q8_0 moved the logits by %.3f of their RMS", models[m], sqrt(dd / ss));
        for (int k = 0; k < 2; k++) {
            free(lg[k]);
            cairn_checkpoint_close(ck[k]);
        }
    }
}

static int setup(void **state)
{
    (void)state;
    lng = fixture_prompt("qwen3", "long_720", &n_lng);
    shr = fixture_prompt("qwen3", "shared_prefix_672", &n_shr);
    return memcmp(lng, shr, 512 * sizeof(int32_t)) != 0 || n_shr <= 512;
}

static int teardown(void **state)
{
    (void)state;
    free(lng);
    free(shr);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0),      cmocka_unit_test(test_q4_0), cmocka_unit_test(test_q4_k_m),
        cmocka_unit_test(test_q5_k_m),    cmocka_unit_test(test_q6_k), cmocka_unit_test(test_bf16_math),
        cmocka_unit_test(test_cold_restore),
        cmocka_unit_test(test_quantize_at_load), cmocka_unit_test(test_quantize_every_family),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
