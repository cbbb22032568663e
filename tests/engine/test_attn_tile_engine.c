/*
 * test_attn_tile_engine.c — the tile order of bf16 K/V attention (attention_impl.h,
 * steps 1T and 4T; AMX-BF16 tiles only) in the engine, in one process over a cold tier
 * directory:
 *  - under the tile order, a prompt prefilled at once = in chunks of 37 = token by token
 *    (decode rows: tiles of 2 valid rows) bit for bit, and the logits differ from the f32
 *    order's (the switch switches);
 *  - a cache written under the f32 attention order is not restored under the tile order,
 *    nor the other way round (the numerics id names the tile order and the CPU model, so
 *    the model fingerprint differs), and each order restores its own blocks with logits
 *    and tokens bit-identical to the tier off.
 * Skips, with the reason, where the tile order cannot run (no AMX-BF16 tiles). The
 * engine's other bit-identity tests run under the tile order on such a machine with
 * `CAIRN_ATTN_BF16TILE=1 test_determinism` (the device scripts do).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cairn/engine.h"
#include "compute/cpu/attention_impl.h"
#include "engine/engine_fixtures.h"

#define MODEL "qwen3"
#define N_GEN 3
#define MAX_VOCAB 4096
#define BS 16

typedef struct {
    float logits[MAX_VOCAB]; /* last prompt position */
    int32_t ids[N_GEN];
    int restored;
} out_t;

static cairn_engine_t *engine(cairn_checkpoint_t *ck, const char *root)
{
    cairn_engine_options_t o;
    cairn_engine_options_default(&o);
    o.n_threads = 2;
    o.pool_mib = 64;
    o.cold = root ? 1 : -1;
    o.cold_root = root;
    o.cold_policy = CAIRN_COLD_WRITE_THROUGH;
    cairn_engine_t *e = NULL;
    char err[256];
    assert_int_equal(cairn_engine_create(ck, &o, &e, err, sizeof err), CAIRN_OK);
    assert_true(cairn_engine_config(e)->vocab <= MAX_VOCAB);
    return e;
}

/* The prompt fed in pieces of `chunk` tokens (0: at once), then N_GEN greedy tokens. */
static void run_once(cairn_checkpoint_t *ck, const char *store, const int32_t *p, int n, int chunk, out_t *r)
{
    memset(r, 0, sizeof *r);
    cairn_engine_t *e = engine(ck, store);
    cairn_seq_t *s = NULL;
    const int first = chunk ? chunk : n;
    assert_int_equal(cairn_seq_begin(e, NULL, p, first, &s, NULL), CAIRN_OK);
    r->restored = cairn_seq_restored_tokens(s);
    const int vocab = cairn_engine_config(e)->vocab;
    for (int fed = first;; ) {
        cairn_batch_item_t it = {s, 0, CAIRN_LOGITS_LAST};
        const float *lg = NULL;
        int rows = 0;
        assert_int_equal(cairn_engine_step(e, &it, 1, &lg, &rows), CAIRN_OK);
        if (fed < n) {
            const int k = n - fed < chunk ? n - fed : chunk;
            assert_int_equal(cairn_seq_feed(s, p + fed, k), CAIRN_OK);
            fed += k;
            continue;
        }
        const int g = fed - n;
        if (g == 0)
            memcpy(r->logits, lg, (size_t)vocab * sizeof(float));
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (lg[v] > lg[best])
                best = v;
        r->ids[g] = best;
        if (g + 1 == N_GEN)
            break;
        assert_int_equal(cairn_seq_feed(s, &r->ids[g], 1), CAIRN_OK);
        fed++;
    }
    cairn_seq_release(s);
    cairn_engine_destroy(e);
}

static void assert_same(const out_t *a, const out_t *b)
{
    assert_memory_equal(a->logits, b->logits, sizeof a->logits);
    assert_memory_equal(a->ids, b->ids, sizeof a->ids);
}

static int32_t *prompt(int n)
{
    int n_all = 0;
    int32_t *all = fixture_prompt(MODEL, "long_720", &n_all);
    int32_t *p = malloc((size_t)n * sizeof *p);
    assert_non_null(p);
    for (int i = 0; i < n; i++)
        p[i] = (all[i % n_all] + i / n_all) % 4093;
    free(all);
    return p;
}

static void test_orders_never_mix(void **state)
{
    (void)state;
    cairn_checkpoint_t *ck = fixture_open(MODEL);
    const int n = 200; /* 12 full blocks */
    int32_t *p = prompt(n);
    static out_t f32_off, tile_off, tile_chunks, tile_tokens, r;
    kern__attn_tile_set(0);
    run_once(ck, NULL, p, n, 0, &f32_off);
    kern__attn_tile_set(1);
    run_once(ck, NULL, p, n, 0, &tile_off);
    run_once(ck, NULL, p, n, 37, &tile_chunks);
    run_once(ck, NULL, p, n, 1, &tile_tokens);
    assert_same(&tile_chunks, &tile_off);
    assert_same(&tile_tokens, &tile_off);
    assert_memory_not_equal(tile_off.logits, f32_off.logits, sizeof tile_off.logits);

    char dir[] = "/tmp/cairn_attntile_XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *m = dir;
    kern__attn_tile_set(0); /* written under the f32 order */
    run_once(ck, m, p, n, 0, &r);
    assert_int_equal(r.restored, 0);
    assert_same(&r, &f32_off);
    kern__attn_tile_set(1); /* not restored under the tile order; written under it */
    run_once(ck, m, p, n, 0, &r);
    assert_int_equal(r.restored, 0);
    assert_same(&r, &tile_off);
    run_once(ck, m, p, n, 0, &r); /* its own blocks restore, bit-identical */
    assert_int_equal(r.restored, 12 * BS);
    assert_same(&r, &tile_off);
    kern__attn_tile_set(0); /* and the f32 order still finds its own */
    run_once(ck, m, p, n, 0, &r);
    assert_int_equal(r.restored, 12 * BS);
    assert_same(&r, &f32_off);
    kern__attn_tile_set(-1);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    cairn_checkpoint_close(ck);
    free(p);
}

int main(void)
{
    if (!kern__attn_tile_impl()) {
        printf("test_attn_tile_engine: skipped: %s\n", kern__attn_tile_state());
        return 0;
    }
    printf("test_attn_tile_engine: %s, CPU %s\n", kern__attn_tile_state(), kern__attn_tile_cpu());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders_never_mix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
