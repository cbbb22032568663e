/*
 * The engine on the CUDA backend (built with -DCAIRN_CUDA=ON, run on a GPU): GPU logits are
 * bit-identical (memcmp) whatever the batch, the chunking, the sub-batch size, a prefix
 * hit, or a restore from the cold tier — in the same process and in another process —
 * in the batch-invariant mode. On the qwen3 fixture (GQA 4/2, per-head q/k norms) with
 * long_720 (two attention splits) and shared_prefix_672 (its first 512 tokens), bf16 K/V.
 *
 * Also: the cold tier keeps GPU K/V apart from CPU K/V (the numerics id enters the
 * fingerprint: a CPU engine over the same directory restores nothing), and the engine
 * refuses the flat path, f32 K/V and a host-memory family (gemma3) on the GPU with a message.
 *
 * `test_cuda_engine write DIR` and `test_cuda_engine restore DIR` are the two processes of
 * the cross-process check (the cmocka test spawns them).
 */
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "cairn/engine.h"
#include "engine/engine_fixtures.h"

#define MODEL "qwen3"
#define VOCAB 4096

extern char **environ;

static cairn_checkpoint_t *ck;
static int32_t *lng, *shr;
static int n_lng, n_shr;
static float *ref_long, *ref_shared; /* [n][VOCAB] one step each, cold */

static cairn_engine_t *engine_on(const char *backend, int max_step, const char *cold_root)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.backend = backend;
    o.kv_dtype = CAIRN_DTYPE_BF16;
    o.math = CAIRN_ENGINE_MATH_BF16;
    o.pool_mib = 64;
    o.max_step_tokens = max_step;
    o.cold = cold_root ? 1 : -1;
    o.cold_root = cold_root;
    o.cold_capture_blocks = 1 << 20;
    o.cold_capture_ms = 60000;
    cairn_engine_t *e = NULL;
    char err[256] = "";
    int rc = cairn_engine_create(ck, &o, &e, err, sizeof(err));
    if (rc)
        fprintf(stderr, "engine: %s\n", err);
    assert_int_equal(rc, 0);
    return e;
}

static cairn_engine_t *engine(int max_step) { return engine_on("cuda", max_step, NULL); }

/* ids in chunks of `chunk` (0: one step), logits at every computed position. */
static float *run(cairn_engine_t *e, const char *salt, const int32_t *ids, int n, int chunk, int *cached,
                  int *restored)
{
    cairn_seq_t *s;
    int hit = 0;
    assert_int_equal(cairn_seq_begin(e, salt, ids, n, &s, &hit), 0);
    if (cached)
        *cached = hit;
    if (restored)
        *restored = cairn_seq_restored_tokens(s);
    const int first = cairn_seq_n_past(s);
    float *out = malloc((size_t)(n - first) * VOCAB * sizeof(float));
    int done = 0;
    while (cairn_seq_n_pending(s) > 0) {
        int len = chunk ? chunk : n;
        if (len > cairn_seq_n_pending(s))
            len = cairn_seq_n_pending(s);
        cairn_batch_item_t it = {s, len, CAIRN_LOGITS_ALL};
        const float *lg;
        int rows;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
        assert_int_equal(rows, len);
        memcpy(out + (size_t)done * VOCAB, lg, (size_t)rows * VOCAB * sizeof(float));
        done += rows;
    }
    assert_int_equal(done, n - first);
    assert_int_equal(cairn_seq_end_turn(s), 0);
    cairn_seq_release(s);
    return out;
}

static const size_t ROW = VOCAB * sizeof(float);

static void test_chunks_and_sub_batches(void **state)
{
    (void)state;
    cairn_engine_t *e = engine(512);
    const int chunks[] = {1, 7, 16, 100};
    char salt[32];
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(chunks); i++) {
        snprintf(salt, sizeof(salt), "chunks-%d", chunks[i]);
        int cached = -1;
        float *x = run(e, salt, lng, n_lng, chunks[i], &cached, NULL);
        assert_int_equal(cached, 0);
        if (memcmp(x, ref_long, (size_t)n_lng * ROW))
            fail_msg("long_720 in chunks of %d differs from one step", chunks[i]);
        free(x);
    }
    cairn_engine_destroy(e);
    e = engine(64); /* sub-batches of 64 rows */
    float *x = run(e, NULL, lng, n_lng, 0, NULL, NULL);
    assert_memory_equal(x, ref_long, (size_t)n_lng * ROW);
    free(x);
    cairn_engine_destroy(e);
}

static void test_prefix_hit(void **state)
{
    (void)state;
    cairn_engine_t *e = engine(512);
    float *x = run(e, NULL, lng, n_lng, 0, NULL, NULL);
    free(x);
    int cached = -1;
    x = run(e, NULL, shr, n_shr, 0, &cached, NULL);
    assert_int_equal(cached, 512);
    assert_memory_equal(x, ref_shared + (size_t)512 * VOCAB, (size_t)(n_shr - 512) * ROW);
    free(x);
    cairn_engine_destroy(e);
}

static void test_batch(void **state)
{
    (void)state;
    cairn_engine_t *e = engine(512);
    cairn_seq_t *a, *b;
    assert_int_equal(cairn_seq_begin(e, "batch-a", shr, n_shr, &a, NULL), 0);
    assert_int_equal(cairn_seq_begin(e, "batch-b", lng, n_lng, &b, NULL), 0);
    cairn_batch_item_t items[2] = {{a, 0, CAIRN_LOGITS_ALL}, {b, 0, CAIRN_LOGITS_ALL}};
    const float *lg;
    int rows;
    assert_int_equal(cairn_engine_step(e, items, 2, &lg, &rows), 0);
    assert_int_equal(rows, n_shr + n_lng);
    assert_memory_equal(lg, ref_shared, (size_t)n_shr * ROW);
    assert_memory_equal(lg + (size_t)n_shr * VOCAB, ref_long, (size_t)n_lng * ROW);
    const int32_t ta = 77, tb = 1234;
    assert_int_equal(cairn_seq_feed(a, &ta, 1), 0);
    assert_int_equal(cairn_seq_feed(b, &tb, 1), 0);
    items[0] = (cairn_batch_item_t){a, 1, CAIRN_LOGITS_LAST};
    items[1] = (cairn_batch_item_t){b, 1, CAIRN_LOGITS_LAST};
    assert_int_equal(cairn_engine_step(e, items, 2, &lg, &rows), 0);
    float both[2][VOCAB];
    memcpy(both, lg, sizeof(both));
    cairn_seq_t *solo;
    assert_int_equal(cairn_seq_begin(e, "solo", lng, n_lng, &solo, NULL), 0);
    assert_int_equal(cairn_seq_feed(solo, &tb, 1), 0);
    cairn_batch_item_t it = {solo, 0, CAIRN_LOGITS_LAST};
    assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), 0);
    assert_memory_equal(lg, both[1], ROW);
    cairn_seq_release(solo);
    cairn_seq_release(a);
    cairn_seq_release(b);
    cairn_engine_destroy(e);
}

static char *temp_dir(void)
{
    char *d = strdup("/tmp/cairn_cuda_XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

/* Runs long_720 on a GPU engine with the cold tier under dir, captured at release. */
static void write_cold(const char *dir)
{
    cairn_engine_t *e = engine_on("cuda", 512, dir);
    float *x = run(e, NULL, lng, n_lng, 0, NULL, NULL);
    free(x);
    cairn_engine_cold_flush(e);
    cairn_engine_destroy(e);
}

/* A fresh GPU engine over dir restores long_720's blocks; the computed tail matches the
 * cold reference bit for bit. Returns the tokens restored. */
static int check_restored(const char *dir)
{
    cairn_engine_t *e = engine_on("cuda", 512, dir);
    int restored = 0, cached = -1;
    float *x = run(e, NULL, lng, n_lng, 0, &cached, &restored);
    const int first = n_lng - (n_lng - cached - restored);
    assert_int_equal(cached, 0);
    assert_int_equal(first, restored);
    if (memcmp(x, ref_long + (size_t)first * VOCAB, (size_t)(n_lng - first) * ROW))
        fail_msg("logits after restoring %d tokens differ from the cold run", restored);
    free(x);
    cairn_engine_destroy(e);
    return restored;
}

static void test_restore_same_process(void **state)
{
    (void)state;
    char *dir = temp_dir();
    write_cold(dir);
    assert_int_equal(check_restored(dir), 704); /* 44 full blocks; the last token stays pending */
    /* CPU K/V never come from GPU objects: another fingerprint, nothing restored. */
    cairn_engine_t *c = engine_on("cpu", 512, dir);
    cairn_seq_t *s;
    assert_int_equal(cairn_seq_begin(c, NULL, lng, n_lng, &s, NULL), 0);
    assert_int_equal(cairn_seq_restored_tokens(s), 0);
    cairn_seq_release(s);
    cairn_engine_destroy(c);
    free(dir);
}

static int spawn_self(const char *mode, const char *dir)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    assert_true(n > 0);
    self[n] = 0;
    char *argv[] = {self, (char *)mode, (char *)dir, NULL};
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, self, NULL, NULL, argv, environ), 0);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void test_restore_across_processes(void **state)
{
    (void)state;
    char *dir = temp_dir();
    assert_int_equal(spawn_self("write", dir), 0);
    assert_int_equal(spawn_self("restore", dir), 0);
    free(dir);
}

static void test_refusals(void **state)
{
    (void)state;
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.backend = "cuda";
    o.kv_path = CAIRN_KV_FLAT;
    cairn_engine_t *e = NULL;
    char err[256] = "";
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof(err)), CAIRN_EUNSUPPORTED);
    assert_non_null(strstr(err, "paged"));
    o.kv_path = CAIRN_KV_PAGED;
    o.kv_dtype = CAIRN_DTYPE_F32;
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof(err)), CAIRN_EUNSUPPORTED);
    assert_non_null(strstr(err, "f32"));
    /* A family whose weights and activations are host memory (gemma3) is refused with a
     * message naming it, not run into a device fault. */
    cairn_checkpoint_t *g = fixture_open("gemma3");
    o.kv_dtype = CAIRN_DTYPE_BF16;
    assert_int_equal(cairn_engine_create(g, &o, &e, err, sizeof(err)), CAIRN_EUNSUPPORTED);
    assert_non_null(strstr(err, "gemma3"));
    assert_non_null(strstr(err, "cuda"));
    cairn_checkpoint_close(g);
}

static void load_fixtures(void)
{
    ck = fixture_open(MODEL);
    lng = fixture_prompt(MODEL, "long_720", &n_lng);
    shr = fixture_prompt(MODEL, "shared_prefix_672", &n_shr);
    cairn_engine_t *e = engine(512);
    ref_long = run(e, "ref-long", lng, n_lng, 0, NULL, NULL);
    ref_shared = run(e, "ref-shared", shr, n_shr, 0, NULL, NULL);
    cairn_engine_destroy(e);
}

static void log_stderr(cairn_log_level_t level, const char *msg, void *user)
{
    (void)user;
    if (level >= CAIRN_LOG_WARN)
        fprintf(stderr, "log: %s\n", msg);
}

static int setup(void **state)
{
    (void)state;
    cairn_log_set_handler(log_stderr, NULL);
    load_fixtures();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(ref_long);
    free(ref_shared);
    free(lng);
    free(shr);
    cairn_checkpoint_close(ck);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && (!strcmp(argv[1], "write") || !strcmp(argv[1], "restore"))) {
        /* One side of test_restore_across_processes (cmocka asserts abort on failure). */
        load_fixtures();
        if (!strcmp(argv[1], "write"))
            write_cold(argv[2]);
        else if (check_restored(argv[2]) != 704)
            return 1;
        teardown(NULL);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_chunks_and_sub_batches),
        cmocka_unit_test(test_prefix_hit),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_restore_same_process),
        cmocka_unit_test(test_restore_across_processes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
