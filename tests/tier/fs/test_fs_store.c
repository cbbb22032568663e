/*
 * Tests for the filesystem store: round trip across restarts, chain queries, corruption of
 * every kind, injected disk-full and I/O errors, quota LRU with pinning, the tier's capture
 * budgets and restore walk over this store, two processes sharing a directory, and
 * telemetry.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <dirent.h>
#include <cjson/cJSON.h>

#include "tier/tier_test_util.h"
#include "tier/fs/fs_store_impl.h" /* fs__direct_reads */

typedef struct {
    char *root;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    f->root = t_mkroot();
    unsetenv("CAIRN_CACHE_DIR");
    unsetenv("CAIRN_COLD_QUOTA_MIB");
    unsetenv("CAIRN_COLD_TRACE");
    unsetenv("CAIRN_COLD_CAPTURE_BLOCKS_PER_TURN");
    unsetenv("CAIRN_COLD_CAPTURE_BUDGET_MS");
    unsetenv("CAIRN_COLD_WRITE_BATCH");
    unsetenv("CAIRN_COLD_URING");
    unsetenv("CAIRN_COLD_QUEUE_DEPTH");
    unsetenv("CAIRN_COLD_DIRECT");
    *state = f;
    return f->root ? 0 : -1;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    cairn_io_set_hook(NULL, NULL);
    t_rmrf(f->root);
    free(f->root);
    free(f);
    return 0;
}

static cairn_cold_store_t *open_store(const char *root, int variant, uint64_t quota)
{
    cairn_cold_config_t c = t_config(root, variant, quota);
    cairn_cold_store_t *s = NULL;
    assert_int_equal(cairn_cold_store_create(&c, &s), CAIRN_OK);
    return s;
}

/* Enqueues blocks [0, n) of chain `seed` and waits for the writer. */
static void write_chain(cairn_cold_store_t *s, uint32_t seed, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cairn_cold_block_t b;
        int32_t tk[T_TOKENS];
        static uint8_t pay[T_PAYLOAD];
        t_block(seed, i, &b.hash, &b.parent, tk, pay);
        b.tokens = tk;
        b.n_tokens = T_TOKENS;
        b.payload = pay;
        b.payload_size = T_PAYLOAD;
        assert_int_equal(cairn_cold_store_enqueue(s, &b, 10000, NULL), CAIRN_OK);
    }
    cairn_cold_store_flush(s);
}

static void chain_hashes(uint32_t seed, size_t n, cairn_tier_hash_t *hs, int32_t *tokens)
{
    for (size_t i = 0; i < n; i++)
        t_block(seed, i, &hs[i], NULL, tokens ? tokens + i * T_TOKENS : NULL, NULL);
}

/* Reads block i of chain seed; returns the status and checks the bytes on success. */
static int read_block(cairn_cold_store_t *s, uint32_t seed, size_t i)
{
    cairn_tier_hash_t h, p;
    int32_t tk[T_TOKENS];
    uint8_t want[T_PAYLOAD], got[T_PAYLOAD];
    t_block(seed, i, &h, &p, tk, want);
    int rc = cairn_cold_store_read(s, &h, &p, tk, T_TOKENS, got, sizeof got);
    if (rc == CAIRN_OK)
        assert_memory_equal(want, got, T_PAYLOAD);
    return rc;
}

static char *obj_path(cairn_cold_store_t *s, uint32_t seed, size_t i)
{
    cairn_tier_hash_t h;
    t_block(seed, i, &h, NULL, NULL, NULL);
    char hex[65];
    cairn_tier_hash_hex(&h, hex);
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/%.2s/%s.kv", cairn_cold_store_dir(s), hex, hex);
    return p;
}

static void test_round_trip_restart(void **state)
{
    fixture_t *f = *state;
    cairn_cold_store_t *s = open_store(f->root, 0, 0);
    write_chain(s, 1, 12);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.enqueued, 12);
    assert_int_equal(st.objects, 12);
    assert_int_equal(st.write_errors, 0);
    /* Re-enqueueing present blocks queues nothing and rewrites nothing. */
    write_chain(s, 1, 12);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.enqueued, 12);
    cairn_cold_store_destroy(s);

    /* Modes: directory 0700, objects 0600. */
    s = open_store(f->root, 0, 0);
    struct stat sb;
    assert_int_equal(stat(cairn_cold_store_dir(s), &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    char *p0 = obj_path(s, 1, 0);
    assert_int_equal(stat(p0, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    free(p0);

    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 12);
    assert_int_equal(st.reads, 0); /* the index came from headers, no payload read */
    cairn_tier_hash_t hs[20];
    int32_t toks[20 * T_TOKENS];
    chain_hashes(1, 20, hs, toks);
    assert_int_equal(cairn_cold_store_chain_length(s, hs, 20), 12);
    assert_int_equal(cairn_cold_store_chain_length(s, hs, 5), 5);
    cairn_tier_hash_t other[3];
    chain_hashes(2, 3, other, NULL);
    assert_int_equal(cairn_cold_store_chain_length(s, other, 3), 0);
    for (size_t i = 0; i < 12; i++)
        assert_int_equal(read_block(s, 1, i), CAIRN_OK);
    assert_int_equal(read_block(s, 1, 12), CAIRN_ENOENT);
    /* Wrong tokens or parent: the hash names the object but the request disagrees. */
    cairn_tier_hash_t h, p;
    int32_t tk[T_TOKENS];
    uint8_t buf[T_PAYLOAD];
    t_block(1, 3, &h, &p, tk, NULL);
    tk[5] ^= 1;
    assert_int_equal(cairn_cold_store_read(s, &h, &p, tk, T_TOKENS, buf, sizeof buf), CAIRN_ECORRUPT);
    assert_false(cairn_cold_store_contains(s, &h));
    assert_int_equal(cairn_cold_store_read(s, &h, &p, tk, T_TOKENS, buf, 10), CAIRN_ENOENT);
    t_block(1, 4, &h, &p, tk, NULL);
    assert_int_equal(cairn_cold_store_read(s, &h, &p, tk, T_TOKENS, buf, 10), CAIRN_ERANGE);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.hits, 12);
    assert_int_equal(st.misses, 2);
    assert_int_equal(st.corruptions, 1);
    assert_int_equal(st.bytes_restored, 12 * T_PAYLOAD);
    cairn_cold_store_destroy(s);

    /* Another model's store shares nothing. */
    s = open_store(f->root, 1, 0);
    assert_int_equal(cairn_cold_store_chain_length(s, hs, 20), 0);
    assert_int_equal(read_block(s, 1, 0), CAIRN_ENOENT);
    cairn_cold_store_destroy(s);
}

typedef struct {
    uint8_t (*bufs)[T_PAYLOAD];
    size_t decline_at;
    cairn_cold_store_t *prune_store;
    size_t prune_at;
    bool saw_pinned;
} dest_ctx_t;

static int find_pinned(void *user, const cairn_tier_entry_t *e)
{
    if (e->pinned)
        *(bool *)user = true;
    return 0;
}

static void *dest_cb(void *user, size_t i, size_t size)
{
    dest_ctx_t *d = user;
    assert_int_equal(size, T_PAYLOAD);
    if (i == d->decline_at)
        return NULL;
    if (d->prune_store && i == d->prune_at) {
        /* Evict everything evictable while block i is being read: it must survive. */
        cairn_cold_store_foreach(d->prune_store, find_pinned, &d->saw_pinned);
        size_t ev = 0;
        cairn_cold_store_prune(d->prune_store, 0, &ev);
        assert_true(ev > 0);
    }
    return d->bufs[i];
}

/* The tier's restore walk (cairn/tier.h) over blocks [start, n) of the chain hs. */
static int restore(cairn_cold_store_t *s, const cairn_tier_hash_t *hs, size_t n, const int32_t *toks, size_t start,
                   void *(*dest)(void *user, size_t i, size_t size), void *user, size_t *got)
{
    cairn_tier_key_t keys[64];
    assert_true(n <= 64);
    for (size_t i = 0; i < n; i++)
        keys[i] = (cairn_tier_key_t){.kind = CAIRN_TIER_BLOCK, .hash = hs[i]};
    cairn_tier_chain_t c = {keys, toks, T_TOKENS, n};
    cairn_tier_restore_sink_t sink = {NULL, dest, user};
    cairn_tier_restore_result_t res;
    int rc = cairn_tier_restore_chain(cairn_cold_store_tier(s), &c, start, &sink, &res);
    *got = res.loaded;
    return rc;
}

static void test_restore_chain(void **state)
{
    fixture_t *f = *state;
    cairn_cold_store_t *s = open_store(f->root, 0, 0);
    write_chain(s, 3, 40);
    cairn_tier_hash_t hs[48];
    int32_t toks[48 * T_TOKENS];
    chain_hashes(3, 48, hs, toks);
    static uint8_t bufs[48][T_PAYLOAD];
    dest_ctx_t d = {bufs, SIZE_MAX, NULL, 0, false};
    size_t got = 0;
    assert_int_equal(restore(s, hs, 48, toks, 0, dest_cb, &d, &got), CAIRN_OK);
    assert_int_equal(got, 40);
    for (size_t i = 0; i < 40; i++) {
        uint8_t want[T_PAYLOAD];
        t_block(3, i, &hs[i], NULL, NULL, want);
        assert_memory_equal(want, bufs[i], T_PAYLOAD);
    }
    /* From a start index, and stopping at a hole. */
    char *p = obj_path(s, 3, 20);
    unlink(p);
    free(p);
    assert_int_equal(restore(s, hs, 48, toks, 10, dest_cb, &d, &got), CAIRN_OK);
    assert_int_equal(got, 10);
    /* A declined destination stops the walk and counts. */
    d.decline_at = 5;
    assert_int_equal(restore(s, hs, 48, toks, 0, dest_cb, &d, &got), CAIRN_OK);
    assert_int_equal(got, 5);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.restore_declines, 1);
    assert_int_equal(st.hits, 40 + 10 + 5);
    /* Pinned during the read: prune(0) inside block 7's destination callback evicts every
     * object it may (block 7's descendants; not its ancestors 0..6, which anchor it), block
     * 7 still restores, and the walk stops at the evicted block 8. */
    d.decline_at = SIZE_MAX;
    d.prune_store = s;
    d.prune_at = 7;
    assert_int_equal(restore(s, hs, 48, toks, 7, dest_cb, &d, &got), CAIRN_OK);
    assert_int_equal(got, 1);
    assert_true(d.saw_pinned);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 8);
    for (size_t i = 0; i < 8; i++)
        assert_true(cairn_cold_store_contains(s, &hs[i]));
    cairn_cold_store_destroy(s);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    if (n)
        assert_int_equal(fwrite(data, 1, n, fp), n);
    fclose(fp);
}

static void copy_file(const char *from, const char *to)
{
    static uint8_t buf[1 << 16];
    FILE *in = fopen(from, "rb");
    assert_non_null(in);
    size_t n = fread(buf, 1, sizeof buf, in);
    fclose(in);
    write_file(to, buf, n);
}

/* Flips one bit of a file at offset off (from the end when negative). */
static void flip_bit(const char *path, long off)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    struct stat st;
    fstat(fd, &st);
    off_t o = off < 0 ? st.st_size + off : off;
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, o), 1);
    b ^= 0x10;
    assert_int_equal(pwrite(fd, &b, 1, o), 1);
    close(fd);
}


/* Whether a file under dir opens with O_DIRECT (tmpfs before Linux 6.6 refuses it). */
static bool has_o_direct(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/direct-probe", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_DIRECT, 0600);
    if (fd >= 0)
        close(fd);
    unlink(p);
    return fd >= 0;
}

/* Cuts the last byte of a file (delta -1) or appends one (delta 1). */
static void resize_by(const char *path, int delta)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    if (delta < 0) {
        assert_int_equal(truncate(path, st.st_size - 1), 0);
    } else {
        int fd = open(path, O_WRONLY | O_APPEND);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "x", 1), 1);
        close(fd);
    }
}

/* The restore walk's reads ahead (fs_ahead.c): with liburing and a filesystem that has
 * O_DIRECT, every block of a chain longer than the read buffers is served from a direct
 * read, with the bytes written; a flipped payload bit, a byte appended, a byte cut and a
 * flipped header bit (in the block hash) made after the store indexed the objects are
 * each a corruption that stops the walk at that block and deletes it. With
 * CAIRN_COLD_DIRECT=0 the same happens through the page cache, no direct read. */
static void test_direct_reads(void **state)
{
    fixture_t *f = *state;
    enum { N = 48 };
    static uint8_t bufs[N][T_PAYLOAD];
    cairn_tier_hash_t hs[N];
    int32_t toks[N * T_TOKENS];
    chain_hashes(11, N, hs, toks);
#ifdef CAIRN_TEST_URING
    const bool want_direct = has_o_direct(f->root);
#else
    const bool want_direct = false;
#endif
    for (int direct = 1; direct >= 0; direct--) {
        if (!direct)
            setenv("CAIRN_COLD_DIRECT", "0", 1);
        cairn_cold_store_t *s = open_store(f->root, 0, 0);
        write_chain(s, 11, N);
        memset(bufs, 0, sizeof bufs);
        dest_ctx_t d = {bufs, SIZE_MAX, NULL, 0, false};
        size_t got = 0;
        assert_int_equal(restore(s, hs, N, toks, 0, dest_cb, &d, &got), CAIRN_OK);
        assert_int_equal(got, N);
        for (size_t i = 0; i < N; i++) {
            uint8_t want[T_PAYLOAD];
            t_block(11, i, &hs[i], NULL, NULL, want);
            assert_memory_equal(want, bufs[i], T_PAYLOAD);
        }
        assert_int_equal(fs__direct_reads(s), direct && want_direct ? N : 0);
        /* Damage after indexing: the reads, not the open, must see it. All four before
         * the walks: a walk's hints read objects ahead, as they are at that moment. */
        const size_t at[4] = {10, 20, 30, 40};
        char *paths[4];
        for (int k = 0; k < 4; k++) {
            paths[k] = obj_path(s, 11, at[k]);
            if (k == 0)
                flip_bit(paths[k], -1); /* the payload's last byte */
            else if (k == 1)
                resize_by(paths[k], 1); /* one byte more than the header says */
            else if (k == 2)
                resize_by(paths[k], -1); /* truncated */
            else
                flip_bit(paths[k], 60); /* the block hash in the header */
        }
        for (int k = 0; k < 4; k++) {
            const size_t from = k ? at[k - 1] + 1 : 0;
            assert_int_equal(restore(s, hs, N, toks, from, dest_cb, &d, &got), CAIRN_OK);
            assert_int_equal(got, at[k] - from);
            assert_int_equal(access(paths[k], F_OK), -1); /* deleted */
            free(paths[k]);
        }
        cairn_tier_stats_t st;
        cairn_cold_store_stats(s, &st);
        assert_int_equal(st.corruptions, 4);
        assert_int_equal(restore(s, hs, N, toks, 41, dest_cb, &d, &got), CAIRN_OK);
        assert_int_equal(got, N - 41);
        cairn_cold_store_clear(s, NULL);
        cairn_cold_store_destroy(s);
    }
    unsetenv("CAIRN_COLD_DIRECT");
}

static void test_corruption_at_open(void **state)
{
    fixture_t *f = *state;
    cairn_cold_store_t *s = open_store(f->root, 0, 0);
    write_chain(s, 5, 10);
    cairn_cold_store_t *other = open_store(f->root, 1, 0);
    write_chain(other, 5, 1);
    char *foreign = obj_path(other, 5, 0); /* same block, another model's fingerprint */
    cairn_cold_store_destroy(other);
    char *paths[10];
    for (int i = 0; i < 10; i++)
        paths[i] = obj_path(s, 5, (size_t)i);
    char dir[2048];
    snprintf(dir, sizeof dir, "%s", cairn_cold_store_dir(s));
    cairn_cold_store_destroy(s);

    copy_file(foreign, paths[0]);    /* the same block written for another model */
    assert_int_equal(truncate(paths[1], 200), 0); /* truncated mid-header */
    write_file(paths[2], "", 0);     /* empty */
    flip_bit(paths[3], 20);          /* header bit -> header checksum */
    copy_file(paths[5], paths[4]);   /* block 5's object under block 4's name */
    assert_int_equal(truncate(paths[6], 4000), 0); /* truncated payload */
    char garbage[3][4096];
    snprintf(garbage[0], sizeof garbage[0], "%s/00", dir);
    mkdir(garbage[0], 0700);
    snprintf(garbage[0], sizeof garbage[0], "%s/00/notes.txt", dir);
    write_file(garbage[0], "hello", 5);
    snprintf(garbage[1], sizeof garbage[1], "%s", paths[7]);
    memcpy(strrchr(garbage[1], '/') + 1, "ffff", 4); /* a hex name in the wrong shard */
    write_file(garbage[1], "junkjunkjunkjunkjunk", 20);
    snprintf(garbage[2], sizeof garbage[2], "%s/stray.bin", dir); /* at the model level */
    write_file(garbage[2], "x", 1);

    s = open_store(f->root, 0, 0);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 4);     /* blocks 5, 7, 8, 9 */
    assert_int_equal(st.corruptions, 6 + 3); /* 6 bad objects + 3 garbage files */
    for (int i = 0; i < 7; i++)
        if (i != 5)
            assert_int_equal(access(paths[i], F_OK), -1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(access(garbage[i], F_OK), -1);
    assert_int_equal(read_block(s, 5, 5), CAIRN_OK);

    /* Damage after open is caught at read: payload bit, header bit, truncation. */
    flip_bit(paths[7], -1);
    flip_bit(paths[8], 150);
    assert_int_equal(truncate(paths[9], 1000), 0);
    assert_int_equal(read_block(s, 5, 7), CAIRN_ECORRUPT);
    assert_int_equal(read_block(s, 5, 8), CAIRN_ECORRUPT);
    assert_int_equal(read_block(s, 5, 9), CAIRN_ECORRUPT);
    assert_int_equal(read_block(s, 5, 7), CAIRN_ENOENT); /* pruned */
    assert_int_equal(access(paths[7], F_OK), -1);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.corruptions, 9 + 3);
    assert_int_equal(st.objects, 1);

    /* verify() reads payloads: damage that the header scan cannot see is found. */
    flip_bit(paths[5], -100);
    size_t checked = 0, bad = 0;
    assert_int_equal(cairn_cold_store_verify(s, &checked, &bad), CAIRN_OK);
    assert_int_equal(checked, 1);
    assert_int_equal(bad, 1);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 0);
    cairn_cold_store_destroy(s);
    for (int i = 0; i < 10; i++)
        free(paths[i]);
    free(foreign);
}

/* ---- STATE objects (sidecars) ---- */

static char *state_path(cairn_cold_store_t *s, uint32_t seed, size_t i, uint32_t group)
{
    cairn_tier_hash_t h;
    t_block(seed, i, &h, NULL, NULL, NULL);
    char hex[65];
    cairn_tier_hash_hex(&h, hex);
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/%.2s/%s.%u.st", cairn_cold_store_dir(s), hex, hex, group);
    return p;
}

static void put_state(cairn_cold_store_t *s, uint32_t seed, size_t i, uint32_t group)
{
    cairn_tier_object_t o;
    uint8_t lay[T_STATE_LAYOUT];
    static uint8_t pay[T_PAYLOAD];
    t_state(seed, i, group, &o, lay, pay);
    bool queued = false;
    assert_int_equal(cairn_tier_store_put(cairn_cold_store_tier(s), &o, 10000, &queued), CAIRN_OK);
    assert_true(queued);
}

typedef struct {
    uint8_t buf[T_PAYLOAD];
    size_t asked;
} state_dst_t;

static void *state_dest(void *user, size_t n)
{
    state_dst_t *d = user;
    d->asked = n;
    return n <= sizeof d->buf ? d->buf : NULL;
}

/* Reads sidecar i of chain seed as a restore would ask for it; checks the bytes on
 * success. */
static int get_state(cairn_cold_store_t *s, uint32_t seed, size_t i, uint32_t group)
{
    cairn_tier_object_t want;
    uint8_t lay[T_STATE_LAYOUT];
    static uint8_t expect[T_PAYLOAD];
    t_state(seed, i, group, &want, lay, expect);
    want.payload = NULL;
    want.payload_size = 0;
    state_dst_t d = {{0}, 0};
    int rc = cairn_tier_store_get(cairn_cold_store_tier(s), &want, state_dest, &d);
    if (rc == CAIRN_OK) {
        assert_int_equal(d.asked, t_state_bytes(i));
        assert_memory_equal(d.buf, expect, t_state_bytes(i));
    }
    return rc;
}

typedef struct {
    size_t blocks, states;
    uint64_t boundaries;
} kind_walk_t;

static int walk_kinds(void *user, const cairn_tier_entry_t *e)
{
    kind_walk_t *w = user;
    if (e->key.kind == CAIRN_TIER_STATE) {
        w->states++;
        w->boundaries += e->boundary;
        assert_int_equal(e->n_tokens, 0);
    } else {
        w->blocks++;
        assert_int_equal(e->boundary, 0);
    }
    return 0;
}

/* Sidecars next to blocks: their own file type (<hash>.<group>.st), the same hash as the
 * block ending at their boundary, indexed at open from their headers, variable sizes, the
 * same quota and maintenance. A store of blocks alone (every store before sidecars) opens
 * unchanged. */
static void test_state_objects(void **state)
{
    fixture_t *f = *state;
    cairn_cold_store_t *s = open_store(f->root, 0, 0);
    write_chain(s, 9, 6);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 6);
    assert_int_equal(st.state_objects, 0);
    for (size_t i = 0; i < 6; i++)
        put_state(s, 9, i, 0);
    put_state(s, 9, 2, 1);
    cairn_cold_store_flush(s);
    uint64_t state_bytes = 0;
    for (size_t i = 0; i < 6; i++) {
        char *sp = state_path(s, 9, i, 0), *bp = obj_path(s, 9, i);
        struct stat sb;
        assert_int_equal(stat(sp, &sb), 0);
        assert_int_equal((uint64_t)sb.st_size, 128 + T_STATE_LAYOUT + 16 + t_state_bytes(i));
        state_bytes += (uint64_t)sb.st_size;
        assert_int_equal(access(bp, F_OK), 0);
        free(sp);
        free(bp);
    }
    state_bytes += 128 + T_STATE_LAYOUT + 16 + t_state_bytes(2);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 13);
    assert_int_equal(st.state_objects, 7);
    assert_int_equal(st.state_bytes, state_bytes);
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(get_state(s, 9, i, 0), CAIRN_OK);
    assert_int_equal(get_state(s, 9, 2, 1), CAIRN_OK);
    assert_int_equal(get_state(s, 9, 3, 1), CAIRN_ENOENT);
    cairn_cold_store_destroy(s);

    /* Restart: the index is rebuilt from names and headers. */
    s = open_store(f->root, 0, 0);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 13);
    assert_int_equal(st.state_objects, 7);
    assert_int_equal(st.corruptions, 0);
    kind_walk_t w = {0, 0, 0};
    cairn_cold_store_foreach(s, walk_kinds, &w);
    assert_int_equal(w.blocks, 6);
    assert_int_equal(w.states, 7);
    assert_int_equal(w.boundaries, (1 + 2 + 3 + 4 + 5 + 6 + 3) * T_TOKENS);
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(get_state(s, 9, i, 0), CAIRN_OK);
        assert_int_equal(read_block(s, 9, i), CAIRN_OK);
    }
    /* Another model's sidecar under this model's name, and damage of every kind. */
    cairn_cold_store_t *other = open_store(f->root, 1, 0);
    put_state(other, 9, 0, 0);
    cairn_cold_store_flush(other);
    char *foreign = state_path(other, 9, 0, 0);
    cairn_cold_store_destroy(other);
    char *sp[6];
    for (size_t i = 0; i < 6; i++)
        sp[i] = state_path(s, 9, i, 0);
    char *g1 = state_path(s, 9, 2, 1);
    cairn_cold_store_destroy(s);
    copy_file(foreign, sp[0]);                    /* another fingerprint */
    flip_bit(sp[1], 100);                         /* header bit: header checksum */
    assert_int_equal(truncate(sp[2], 200), 0);    /* truncated payload */
    copy_file(sp[4], sp[3]);                      /* sidecar 4 under sidecar 3's name */
    char moved[4096];                             /* group 0's file under group 7's name */
    snprintf(moved, sizeof moved, "%.*s7.st", (int)(strlen(g1) - 4), g1);
    assert_int_equal(rename(g1, moved), 0);
    char junk[2][4096];                           /* names that are no object */
    snprintf(junk[0], sizeof junk[0], "%.*s01.st", (int)(strlen(g1) - 4), g1);
    snprintf(junk[1], sizeof junk[1], "%.*sx.st", (int)(strlen(g1) - 4), g1);
    write_file(junk[0], "x", 1);
    write_file(junk[1], "x", 1);
    s = open_store(f->root, 0, 0);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.corruptions, 5 + 2);
    assert_int_equal(st.state_objects, 2); /* sidecars 4 and 5 */
    assert_int_equal(st.objects, 6 + 2);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(access(sp[i], F_OK), -1);
    assert_int_equal(access(moved, F_OK), -1);
    assert_int_equal(access(junk[0], F_OK), -1);
    assert_int_equal(access(junk[1], F_OK), -1);
    assert_int_equal(get_state(s, 9, 4, 0), CAIRN_OK);
    /* Damage after open: caught by the read (payload) and by verify. */
    flip_bit(sp[5], -3);
    size_t checked = 0, bad = 0;
    assert_int_equal(cairn_cold_store_verify(s, &checked, &bad), CAIRN_OK);
    assert_int_equal(checked, 8);
    assert_int_equal(bad, 1);
    assert_int_equal(get_state(s, 9, 5, 0), CAIRN_ENOENT);
    /* Quota and clear cover both kinds. */
    size_t removed = 0;
    cairn_cold_store_clear(s, &removed);
    assert_int_equal(removed, 7);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 0);
    assert_int_equal(st.state_objects, 0);
    assert_int_equal(st.state_bytes, 0);
    cairn_cold_store_destroy(s);
    for (size_t i = 0; i < 6; i++)
        free(sp[i]);
    free(g1);
    free(foreign);
}

/* A writer stuck in fsync until released. */
static atomic_int g_hold_writer;
static atomic_int g_writer_held;

static int hold_hook(const char *op, const char *path, void *user)
{
    (void)path;
    (void)user;
    if (!strcmp(op, "fsync")) {
        atomic_store(&g_writer_held, 1);
        while (atomic_load(&g_hold_writer))
            usleep(1000);
    }
    return 0;
}

/* Blocks filling the queue leave the sidecar slots free: a turn's sidecar is never dropped
 * because its blocks filled the queue. */
static void test_state_slots(void **state)
{
    fixture_t *f = *state;
    setenv("CAIRN_COLD_QUEUE_DEPTH", "2", 1);
    setenv("CAIRN_COLD_WRITE_BATCH", "1", 1);
    cairn_cold_store_t *s = open_store(f->root, 0, 0);
    atomic_store(&g_hold_writer, 1);
    atomic_store(&g_writer_held, 0);
    cairn_io_set_hook(hold_hook, NULL);
    cairn_tier_store_t *t = cairn_cold_store_tier(s);
    cairn_tier_object_t o;
    int32_t tk[T_TOKENS];
    static uint8_t pay[T_PAYLOAD];
    t_object(3, 0, &o, tk, pay);
    assert_int_equal(cairn_tier_store_put(t, &o, 0, NULL), CAIRN_OK);
    while (!atomic_load(&g_writer_held))
        usleep(1000); /* the writer holds block 0 in its batch */
    for (size_t i = 1; i <= 2; i++) {
        t_object(3, i, &o, tk, pay);
        assert_int_equal(cairn_tier_store_put(t, &o, 0, NULL), CAIRN_OK);
    }
    t_object(3, 3, &o, tk, pay);
    assert_int_equal(cairn_tier_store_put(t, &o, 0, NULL), CAIRN_EEXHAUSTED); /* blocks: full */
    uint8_t lay[T_STATE_LAYOUT];
    static uint8_t spay[T_PAYLOAD];
    for (size_t i = 0; i < 2; i++) {
        t_state(3, i, 0, &o, lay, spay);
        assert_int_equal(cairn_tier_store_put(t, &o, 0, NULL), CAIRN_OK); /* the reserved slots */
    }
    t_state(3, 2, 0, &o, lay, spay);
    assert_int_equal(cairn_tier_store_put(t, &o, 0, NULL), CAIRN_EEXHAUSTED);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.queue_len, 4);
    assert_int_equal(st.queue_drops, 2);
    atomic_store(&g_hold_writer, 0);
    cairn_cold_store_flush(s);
    cairn_io_set_hook(NULL, NULL);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 5);
    assert_int_equal(st.state_objects, 2);
    assert_int_equal(get_state(s, 3, 0, 0), CAIRN_OK);
    assert_int_equal(get_state(s, 3, 1, 0), CAIRN_OK);
    cairn_cold_store_destroy(s);
    unsetenv("CAIRN_COLD_QUEUE_DEPTH");
    unsetenv("CAIRN_COLD_WRITE_BATCH");
}

/* ---- injected I/O errors ---- */

typedef struct {
    const char *op;
    int err;
    int calls;
} hook_ctx_t;

static int fail_hook(const char *op, const char *path, void *user)
{
    hook_ctx_t *h = user;
    (void)path;
    if (!strcmp(op, h->op)) {
        h->calls++;
        return -h->err;
    }
    return 0;
}

static void test_io_errors(void **state)
{
    fixture_t *f = *state;
    static const struct {
        const char *op;
        int err;
    } cases[] = {{"write", ENOSPC}, {"write", EIO}, {"fsync", EIO}, {"rename", EIO}, {"open", ENOSPC}, {"mkdir", EIO}};
    for (size_t c = 0; c < CAIRN_ARRAY_LEN(cases); c++) {
        cairn_cold_store_t *s = open_store(f->root, 0, 0);
        hook_ctx_t h = {cases[c].op, cases[c].err, 0};
        cairn_io_set_hook(fail_hook, &h);
        uint32_t seed = 100 + (uint32_t)c;
        write_chain(s, seed, 4); /* enqueue never fails because of I/O */
        cairn_io_set_hook(NULL, NULL);
        assert_true(h.calls > 0);
        cairn_tier_stats_t st;
        cairn_cold_store_stats(s, &st);
        assert_int_equal(st.enqueued, 4);
        assert_int_equal(st.write_errors, 4);
        assert_int_equal(st.bytes_written, 0);
        assert_int_equal(st.objects, 0);
        assert_int_equal(t_count_files(cairn_cold_store_dir(s), ".tmp."), 0);
        assert_int_equal(t_count_files(cairn_cold_store_dir(s), ""), 0);
        assert_int_equal(read_block(s, seed, 0), CAIRN_ENOENT);
        /* The disk recovers: the same blocks are written on the next capture. */
        write_chain(s, seed, 4);
        cairn_cold_store_stats(s, &st);
        assert_int_equal(st.objects, 4);
        assert_int_equal(read_block(s, seed, 3), CAIRN_OK);
        cairn_cold_store_clear(s, NULL);
        cairn_cold_store_destroy(s);
    }
    /* A failed directory fsync after the rename withdraws the object too. */
    cairn_cold_store_t *s = open_store(f->root, 0, 0);
    write_chain(s, 200, 1); /* creates the shard directory of block 0 */
    hook_ctx_t h = {"fsync", EIO, 0};
    cairn_io_set_hook(fail_hook, &h);
    write_chain(s, 200, 2);
    cairn_io_set_hook(NULL, NULL);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.write_errors, 1);
    assert_int_equal(st.objects, 1);
    assert_int_equal(read_block(s, 200, 1), CAIRN_ENOENT);
    cairn_cold_store_destroy(s);
}

/* At a shard directory's fsync, does what a store sharing the directory does when it clears
 * between this writer's rename and that fsync: removes the object and the emptied shard. */
static int vanish_hook(const char *op, const char *path, void *user)
{
    int *vanished = user;
    const char *base = strrchr(path, '/');
    if (strcmp(op, "fsync") || !base || strlen(base + 1) != 2)
        return 0; /* not a shard directory (the store's own fsync, a temp file's) */
    char obj[4096];
    DIR *d = opendir(path);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(obj, sizeof obj, "%s/%s", path, e->d_name);
        assert_int_equal(unlink(obj), 0);
    }
    closedir(d);
    assert_int_equal(rmdir(path), 0);
    ++*vanished;
    return 0;
}

/* test_stress_store's two stores in one directory: one cleared it while the other was
 * committing. The object that went with its directory is dropped without a write error
 * (nothing failed; it was counted one, and the stress test's quiet check failed). */
static void test_directory_cleared_under_commit(void **state)
{
    fixture_t *f = *state;
    cairn_cold_store_t *s = open_store(f->root, 0, 0);
    int vanished = 0;
    cairn_io_set_hook(vanish_hook, &vanished);
    write_chain(s, 300, 1);
    cairn_io_set_hook(NULL, NULL);
    assert_int_equal(vanished, 1);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.write_errors, 0);
    assert_int_equal(st.objects, 0);
    assert_int_equal(read_block(s, 300, 0), CAIRN_ENOENT);
    write_chain(s, 300, 1); /* the next capture writes it again */
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 1);
    assert_int_equal(read_block(s, 300, 0), CAIRN_OK);
    cairn_cold_store_destroy(s);
}

/* Two stores of one directory (two engines of one model): an object the other store wrote
 * since this one opened is indexed, not rewritten, when this one captures it, and it counts
 * against this store's quota like a write of its own (it was indexed without an eviction,
 * and test_stress_store found a store over its quota after the storm). */
static void test_adopted_objects_within_quota(void **state)
{
    fixture_t *f = *state;
    cairn_cold_store_t *b = open_store(f->root, 0, 0);
    write_chain(b, 310, 1);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(b, &st);
    const uint64_t obj = st.used_bytes;
    assert_true(obj > 0);
    cairn_cold_store_t *a = open_store(f->root, 0, 3 * obj); /* indexes 310's block */
    for (uint32_t seed = 311; seed < 318; seed++) /* one-block chains: each an evictable leaf */
        write_chain(b, seed, 1);
    for (uint32_t seed = 311; seed < 318; seed++)
        write_chain(a, seed, 1);
    cairn_cold_store_stats(a, &st);
    assert_int_equal(st.write_errors, 0);
    assert_int_equal(st.bytes_written, 0); /* all adopted */
    assert_true(st.used_bytes <= st.quota_bytes);
    assert_int_equal(st.objects, 3);
    cairn_cold_store_destroy(a);
    cairn_cold_store_destroy(b);
}

/* ---- group commit ---- */

/* Holds the writer in its first "write" until released, records the order of the ops on
 * each object of chain `seed` (by block index) and fails the ops it is told to. */
typedef struct {
    atomic_int hold, held;
    char hex[8][65];          /* hashes of blocks 0..7 */
    char fail_write[65], fail_fsync[65];
    char fail_dir[4096];      /* a shard directory whose fsync fails */
    char log[64][16];         /* "w3", "s3", "r3", "d" in call order */
    atomic_int n_log;
} batch_hook_t;

static int block_of(const batch_hook_t *h, const char *path)
{
    for (int i = 0; i < 8; i++)
        if (strstr(path, h->hex[i]))
            return i;
    return -1;
}

static int batch_hook(const char *op, const char *path, void *user)
{
    batch_hook_t *h = user;
    int b = block_of(h, path);
    int k = atomic_fetch_add(&h->n_log, 1);
    if (k < 64)
        snprintf(h->log[k], sizeof h->log[k], "%c%d", b < 0 ? 'd' : op[0], b);
    if (!strcmp(op, "write") && atomic_load(&h->hold)) {
        atomic_store(&h->held, 1);
        while (atomic_load(&h->hold))
            usleep(1000);
    }
    if (!strcmp(op, "write") && h->fail_write[0] && strstr(path, h->fail_write))
        return -EIO;
    if (!strcmp(op, "fsync") && h->fail_fsync[0] && strstr(path, h->fail_fsync))
        return -EIO;
    if (!strcmp(op, "fsync") && h->fail_dir[0] && !strcmp(path, h->fail_dir))
        return -EIO;
    return 0;
}

static int log_index(const batch_hook_t *h, const char *entry)
{
    int n = atomic_load(&h->n_log);
    for (int k = 0; k < n && k < 64; k++)
        if (!strcmp(h->log[k], entry))
            return k;
    return -1;
}

static void enqueue_block(cairn_cold_store_t *s, uint32_t seed, size_t i)
{
    cairn_cold_block_t b;
    int32_t tk[T_TOKENS];
    static uint8_t pay[T_PAYLOAD];
    t_block(seed, i, &b.hash, &b.parent, tk, pay);
    b.tokens = tk;
    b.n_tokens = T_TOKENS;
    b.payload = pay;
    b.payload_size = T_PAYLOAD;
    assert_int_equal(cairn_cold_store_enqueue(s, &b, 10000, NULL), CAIRN_OK);
}

/* Block 0 alone, then blocks 1..7 as one batch (the writer is held while they queue). */
static void run_batch(cairn_cold_store_t *s, batch_hook_t *h, uint32_t seed)
{
    for (int i = 0; i < 8; i++) {
        cairn_tier_hash_t hs;
        t_block(seed, (size_t)i, &hs, NULL, NULL, NULL);
        cairn_tier_hash_hex(&hs, h->hex[i]);
    }
    atomic_store(&h->hold, 1);
    cairn_io_set_hook(batch_hook, h);
    enqueue_block(s, seed, 0);
    while (!atomic_load(&h->held))
        usleep(1000);
    for (size_t i = 1; i < 8; i++)
        enqueue_block(s, seed, i);
    atomic_store(&h->hold, 0);
    cairn_cold_store_flush(s);
    cairn_io_set_hook(NULL, NULL);
}

static void test_batch_commit(void **state)
{
    fixture_t *f = *state;
    cairn_cold_store_t *s = open_store(f->root, 0, 0);
    static batch_hook_t h;
    memset(&h, 0, sizeof h);
    /* A write failure in the middle (block 3) and a payload fsync failure (block 5). */
    cairn_tier_hash_t h3, h5;
    t_block(300, 3, &h3, NULL, NULL, NULL);
    t_block(300, 5, &h5, NULL, NULL, NULL);
    cairn_tier_hash_hex(&h3, h.fail_write);
    cairn_tier_hash_hex(&h5, h.fail_fsync);
    run_batch(s, &h, 300);
    /* Group commit: every payload of the batch is written, then synced, before any rename;
     * block 0 (alone in the first batch) was renamed before the batch was written. */
    assert_true(log_index(&h, "r0") < log_index(&h, "w1"));
    for (int i = 1; i < 8; i++) {
        char w[8], sy[8];
        snprintf(w, sizeof w, "w%d", i);
        snprintf(sy, sizeof sy, "f%d", i);
        assert_true(log_index(&h, w) >= 0);
        assert_true(log_index(&h, w) < log_index(&h, "f1"));
        if (i != 3)
            assert_true(log_index(&h, sy) >= 0 && log_index(&h, sy) < log_index(&h, "r1"));
    }
    assert_int_equal(log_index(&h, "r3"), -1);
    assert_int_equal(log_index(&h, "r5"), -1);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.enqueued, 8);
    assert_int_equal(st.write_errors, 2);
    assert_int_equal(st.objects, 6);
    assert_int_equal(t_count_files(cairn_cold_store_dir(s), ".tmp."), 0);
    for (size_t i = 0; i < 8; i++) {
        char *p = obj_path(s, 300, i);
        bool failed = i == 3 || i == 5;
        assert_int_equal(access(p, F_OK) == 0, !failed);
        assert_int_equal(read_block(s, 300, i), failed ? CAIRN_ENOENT : CAIRN_OK);
        free(p);
    }
    cairn_cold_store_destroy(s);
    /* The others are durable and valid after a restart; the failed ones are written on the
     * next capture. */
    s = open_store(f->root, 0, 0);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 6);
    assert_int_equal(st.corruptions, 0);
    write_chain(s, 300, 8);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 8);
    cairn_cold_store_destroy(s);

    /* A failed directory fsync withdraws exactly the objects renamed into that directory. */
    s = open_store(f->root, 0, 0);
    memset(&h, 0, sizeof h);
    cairn_tier_hash_t h6;
    t_block(301, 6, &h6, NULL, NULL, NULL);
    char hex6[65];
    cairn_tier_hash_hex(&h6, hex6);
    snprintf(h.fail_dir, sizeof h.fail_dir, "%s/%.2s", cairn_cold_store_dir(s), hex6);
    run_batch(s, &h, 301);
    size_t lost = 0;
    for (size_t i = 0; i < 8; i++) {
        cairn_tier_hash_t hi;
        t_block(301, i, &hi, NULL, NULL, NULL);
        char hx[65];
        cairn_tier_hash_hex(&hi, hx);
        bool same_dir = i > 0 && !strncmp(hx, hex6, 2); /* block 0 committed alone, earlier */
        lost += same_dir;
        assert_int_equal(read_block(s, 301, i), same_dir ? CAIRN_ENOENT : CAIRN_OK);
    }
    cairn_cold_store_stats(s, &st);
    assert_true(lost >= 1);
    assert_int_equal(st.write_errors, lost);
    assert_int_equal(st.objects, 8 + 8 - lost);
    assert_int_equal(t_count_files(cairn_cold_store_dir(s), ".tmp."), 0);
    cairn_cold_store_destroy(s);

    /* A failed fsync of the store directory after the batch created shard directories:
     * every object renamed into a new directory is withdrawn with it, none is indexed. */
    cairn_cold_config_t c = t_config(f->root, 2, 0);
    assert_int_equal(cairn_cold_store_create(&c, &s), CAIRN_OK);
    memset(&h, 0, sizeof h);
    snprintf(h.fail_dir, sizeof h.fail_dir, "%s", cairn_cold_store_dir(s));
    run_batch(s, &h, 303);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 0);
    assert_int_equal(st.write_errors, 8);
    assert_int_equal(t_count_files(cairn_cold_store_dir(s), ""), 0);
    write_chain(s, 303, 8);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 8);
    cairn_cold_store_destroy(s);

    /* write_batch 1 is the object-at-a-time commit: each rename precedes the next write. */
    c = t_config(f->root, 1, 0);
    c.write_batch = 1;
    assert_int_equal(cairn_cold_store_create(&c, &s), CAIRN_OK);
    memset(&h, 0, sizeof h);
    run_batch(s, &h, 302);
    for (int i = 1; i < 8; i++) {
        char w[8], r[8];
        snprintf(w, sizeof w, "w%d", i);
        snprintf(r, sizeof r, "r%d", i - 1);
        assert_true(log_index(&h, r) >= 0 && log_index(&h, r) < log_index(&h, w));
    }
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 8);
    cairn_cold_store_destroy(s);
}

/* The same group commit with the syncs issued one after another (no io_uring). */
static void test_batch_commit_portable(void **state)
{
    setenv("CAIRN_COLD_URING", "0", 1);
    test_batch_commit(state);
    unsetenv("CAIRN_COLD_URING");
}

static void test_quota_lru(void **state)
{
    fixture_t *f = *state;
    /* Object size: header + payload; quota for exactly 5 objects. */
    size_t obj = 152 + 4 * T_TOKENS + 8 * T_LAYERS + 16 + T_PAYLOAD;
    cairn_cold_store_t *s = open_store(f->root, 0, 5 * obj);
    write_chain(s, 7, 5);
    /* Touch 0 and 1: they become the most recently used. */
    assert_int_equal(read_block(s, 7, 0), CAIRN_OK);
    assert_int_equal(read_block(s, 7, 1), CAIRN_OK);
    write_chain(s, 8, 3); /* 3 new objects evict 2, 3, 4 in that order */
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.evictions, 3);
    assert_int_equal(st.objects, 5);
    assert_true(st.used_bytes <= 5 * obj);
    assert_int_equal(read_block(s, 7, 0), CAIRN_OK);
    assert_int_equal(read_block(s, 7, 1), CAIRN_OK);
    for (size_t i = 2; i < 5; i++)
        assert_int_equal(read_block(s, 7, i), CAIRN_ENOENT);
    /* Prune to 2 objects: LRU order is now 8/0, 8/1, 8/2, 7/0, 7/1. */
    size_t ev = 0;
    cairn_cold_store_prune(s, 2 * obj, &ev);
    assert_int_equal(ev, 3);
    assert_int_equal(read_block(s, 7, 0), CAIRN_OK);
    assert_int_equal(read_block(s, 7, 1), CAIRN_OK);
    assert_int_equal(read_block(s, 8, 2), CAIRN_ENOENT);
    cairn_cold_store_destroy(s);
    /* The quota also applies at open (oldest files first). */
    s = open_store(f->root, 0, 1 * obj);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 1);
    cairn_cold_store_destroy(s);
}

/* Puts one block object named `id` (a byte) whose parent is `parent` (0: block 0). */
static void put_linked(cairn_cold_store_t *s, uint8_t id, uint8_t parent)
{
    cairn_tier_object_t o;
    memset(&o, 0, sizeof o);
    static int32_t tk[T_TOKENS];
    static uint8_t pay[T_PAYLOAD];
    o.key.kind = CAIRN_TIER_BLOCK;
    o.key.hash.bytes[0] = id;
    o.key.hash.bytes[31] = 0xA5;
    if (parent) {
        o.parent.bytes[0] = parent;
        o.parent.bytes[31] = 0xA5;
    }
    o.tokens = tk;
    o.n_tokens = T_TOKENS;
    o.payload = pay;
    o.payload_size = T_PAYLOAD;
    assert_int_equal(cairn_tier_store_put(cairn_cold_store_tier(s), &o, 10000, NULL), CAIRN_OK);
    cairn_cold_store_flush(s);
}

static bool holds(cairn_cold_store_t *s, uint8_t id)
{
    cairn_tier_hash_t h;
    memset(&h, 0, sizeof h);
    h.bytes[0] = id;
    h.bytes[31] = 0xA5;
    return cairn_cold_store_contains(s, &h);
}

/* The quota is chain-aware: a shared prefix (P0 <- P1, then A2 <- A3 and B2 <- B3) is
 * never evicted while a descendant is kept, although it is the least recently used; the
 * oldest leaf goes first, and a block goes right after its last child when the quota still
 * needs room. Plain LRU would evict P0 first and leave every other block unreachable. */
static void test_quota_chain_aware(void **state)
{
    fixture_t *f = *state;
    size_t obj = 152 + 4 * T_TOKENS + 8 * T_LAYERS + 16 + T_PAYLOAD;
    cairn_cold_store_t *s = open_store(f->root, 0, 6 * obj);
    enum { P0 = 1, P1, A2, A3, B2, B3, X, Y, Z };
    put_linked(s, P0, 0);
    put_linked(s, P1, P0);
    put_linked(s, A2, P1);
    put_linked(s, A3, A2);
    put_linked(s, B2, P1);
    put_linked(s, B3, B2);
    put_linked(s, X, 0); /* over quota by one: A3, the oldest leaf */
    assert_true(holds(s, P0) && holds(s, P1) && holds(s, A2) && !holds(s, A3));
    put_linked(s, Y, 0); /* A2 is a leaf now, and the oldest */
    put_linked(s, Z, 0); /* P0, P1 and B2 anchor B3: B3 goes */
    assert_false(holds(s, A2));
    assert_false(holds(s, B3));
    assert_true(holds(s, P0) && holds(s, P1) && holds(s, B2) && holds(s, X) && holds(s, Y) && holds(s, Z));
    /* Down to 3: B2, then the prefix it anchored, P1 then P0 (each a leaf in turn). */
    size_t ev = 0;
    cairn_cold_store_prune(s, 3 * obj, &ev);
    assert_int_equal(ev, 3);
    assert_false(holds(s, B2) || holds(s, P1) || holds(s, P0));
    assert_true(holds(s, X) && holds(s, Y) && holds(s, Z));
    cairn_cold_store_destroy(s);
    /* At open the counts are rebuilt from the files: a chain's head outlives its tail. */
    s = open_store(f->root, 0, 6 * obj);
    put_linked(s, P0, 0);
    put_linked(s, P1, P0);
    put_linked(s, A2, P1);
    cairn_cold_store_destroy(s);
    s = open_store(f->root, 0, 2 * obj); /* X, Y, Z (older files) and A2 go; plain LRU: P0 too */
    assert_true(holds(s, P0) && holds(s, P1));
    assert_false(holds(s, A2) || holds(s, X));
    cairn_cold_store_destroy(s);
}

typedef struct {
    uint32_t seed;
    size_t calls;
    int32_t tk[T_TOKENS];
    uint8_t pay[T_PAYLOAD];
} cap_ctx_t;

static int cap_cb(void *user, size_t i, cairn_tier_object_t *b)
{
    cap_ctx_t *c = user;
    c->calls++;
    b->key.kind = CAIRN_TIER_BLOCK;
    t_block(c->seed, i, &b->key.hash, &b->parent, c->tk, c->pay);
    b->tokens = c->tk;
    b->n_tokens = T_TOKENS;
    b->payload = c->pay;
    b->payload_size = T_PAYLOAD;
    return 0;
}

static void test_capture_budget(void **state)
{
    fixture_t *f = *state;
    cairn_cold_store_t *s = open_store(f->root, 0, 0);
    cap_ctx_t c = {.seed = 9};
    cairn_tier_capture_budget_t bud = {10, 10000};
    cairn_tier_capture_result_t r;
    /* 30 blocks with a budget of 10 per turn: the chain ratchets 10, 20, 30. */
    assert_int_equal(cairn_tier_capture_chain(cairn_cold_store_tier(s), 30, cap_cb, &c, &bud, &r), CAIRN_OK);
    assert_int_equal(r.stop, CAIRN_TIER_STOP_BUDGET);
    assert_int_equal(r.enqueued, 10);
    assert_int_equal(r.reached, 10);
    cairn_cold_store_flush(s);
    assert_int_equal(cairn_tier_capture_chain(cairn_cold_store_tier(s), 30, cap_cb, &c, &bud, &r), CAIRN_OK);
    assert_int_equal(r.already, 10); /* persisted blocks spend no budget */
    assert_int_equal(r.enqueued, 10);
    assert_int_equal(r.reached, 20);
    cairn_cold_store_flush(s);
    /* The environment overrides the caller's budget. */
    setenv("CAIRN_COLD_CAPTURE_BLOCKS_PER_TURN", "4", 1);
    assert_int_equal(cairn_tier_capture_chain(cairn_cold_store_tier(s), 30, cap_cb, &c, &bud, &r), CAIRN_OK);
    assert_int_equal(r.enqueued, 4);
    unsetenv("CAIRN_COLD_CAPTURE_BLOCKS_PER_TURN");
    cairn_cold_store_flush(s);
    assert_int_equal(cairn_tier_capture_chain(cairn_cold_store_tier(s), 30, cap_cb, &c, NULL, &r), CAIRN_OK);
    assert_int_equal(r.stop, CAIRN_TIER_STOP_END);
    assert_int_equal(r.reached, 30);
    assert_int_equal(r.enqueued, 6);
    cairn_cold_store_flush(s);
    cairn_tier_hash_t hs[30];
    chain_hashes(9, 30, hs, NULL);
    assert_int_equal(cairn_cold_store_chain_length(s, hs, 30), 30);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.queue_drops, 0); /* a momentarily full queue was waited for */
    cairn_cold_store_destroy(s);
}

static void test_capture_deadline(void **state)
{
    fixture_t *f = *state;
    /* A slow disk (every fsync fails after a delay is not possible through the hook, so
     * block the writer on a full queue with depth 1 and a 1 ms deadline instead). */
    cairn_cold_config_t cfg = t_config(f->root, 0, 0);
    cfg.queue_depth = 1;
    cairn_cold_store_t *s = NULL;
    assert_int_equal(cairn_cold_store_create(&cfg, &s), CAIRN_OK);
    cap_ctx_t c = {.seed = 11};
    cairn_tier_capture_budget_t bud = {1000, 1};
    cairn_tier_capture_result_t r;
    assert_int_equal(cairn_tier_capture_chain(cairn_cold_store_tier(s), 400, cap_cb, &c, &bud, &r), CAIRN_OK);
    assert_true(r.stop == CAIRN_TIER_STOP_DEADLINE || r.stop == CAIRN_TIER_STOP_END);
    assert_true(r.elapsed_ms < 1000);
    assert_int_equal(r.reached, r.enqueued);
    cairn_cold_store_flush(s);
    /* Whatever was reached is a gap-free prefix. */
    cairn_tier_hash_t hs[400];
    chain_hashes(11, 400, hs, NULL);
    assert_int_equal(cairn_cold_store_chain_length(s, hs, 400), r.reached);
    cairn_cold_store_destroy(s);
}

static void test_two_processes(void **state)
{
    fixture_t *f = *state;
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        assert_true(kids[k] >= 0);
        if (kids[k] == 0) {
            cairn_cold_config_t c = t_config(f->root, 0, 0);
            cairn_cold_store_t *s = NULL;
            if (cairn_cold_store_create(&c, &s))
                _exit(3);
            /* Both write chain 12 (overlapping), each also its own chain. */
            for (int round = 0; round < 3; round++) {
                for (size_t i = 0; i < 24; i++) {
                    cairn_cold_block_t b;
                    int32_t tk[T_TOKENS];
                    static uint8_t pay[T_PAYLOAD];
                    uint32_t seed = (i % 2) ? 12 : 20 + (uint32_t)k;
                    t_block(seed, i, &b.hash, &b.parent, tk, pay);
                    b.tokens = tk;
                    b.n_tokens = T_TOKENS;
                    b.payload = pay;
                    b.payload_size = T_PAYLOAD;
                    if (cairn_cold_store_enqueue(s, &b, 10000, NULL))
                        _exit(4);
                }
                cairn_cold_store_flush(s);
                uint8_t buf[T_PAYLOAD];
                for (size_t i = 1; i < 24; i += 2) {
                    cairn_tier_hash_t h, p;
                    int32_t tk[T_TOKENS];
                    t_block(12, i, &h, &p, tk, NULL);
                    int rc = cairn_cold_store_read(s, &h, &p, tk, T_TOKENS, buf, sizeof buf);
                    if (rc != CAIRN_OK && rc != CAIRN_ENOENT)
                        _exit(5);
                }
            }
            cairn_tier_stats_t st;
            cairn_cold_store_stats(s, &st);
            cairn_cold_store_destroy(s);
            _exit(st.corruptions || st.write_errors ? 6 : 0);
        }
    }
    for (int k = 0; k < 2; k++) {
        int status = 0;
        assert_int_equal(waitpid(kids[k], &status, 0), kids[k]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    cairn_cold_store_t *s = open_store(f->root, 0, 0);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.corruptions, 0);
    for (size_t i = 0; i < 24; i++) {
        if (i % 2)
            assert_int_equal(read_block(s, 12, i), CAIRN_OK);
        else {
            assert_int_equal(read_block(s, 20, i), CAIRN_OK);
            assert_int_equal(read_block(s, 21, i), CAIRN_OK);
        }
    }
    size_t checked, bad;
    assert_int_equal(cairn_cold_store_verify(s, &checked, &bad), CAIRN_OK);
    assert_int_equal(bad, 0);
    assert_int_equal(checked, 36);
    assert_int_equal(t_count_files(cairn_cold_store_dir(s), ".tmp."), 0);
    cairn_cold_store_destroy(s);
}

static void test_telemetry_trace(void **state)
{
    fixture_t *f = *state;
    char trace[4096];
    snprintf(trace, sizeof trace, "%s/trace.jsonl", f->root);
    setenv("CAIRN_COLD_TRACE", trace, 1);
    cairn_cold_store_t *s = open_store(f->root, 0, 0);
    cairn_tier_trace_t *tr = NULL;
    assert_int_equal(cairn_tier_trace_create(NULL, &tr), CAIRN_OK);
    assert_non_null(tr);
    unsetenv("CAIRN_COLD_TRACE");
    write_chain(s, 30, 3);
    cairn_tier_trace_turn(tr, cairn_cold_store_tier(s), "turn-1");
    assert_int_equal(read_block(s, 30, 0), CAIRN_OK);
    assert_int_equal(read_block(s, 30, 9), CAIRN_ENOENT);
    cairn_tier_trace_turn(tr, cairn_cold_store_tier(s), "turn-2");
    cairn_tier_trace_destroy(tr);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    char *js = cairn_tier_stats_json(&st, NULL);
    cJSON *o = cJSON_Parse(js);
    assert_non_null(o);
    static const char *fields[] = {"hits", "misses", "enqueued", "queue_drops", "bytes_written", "reads",
                                   "bytes_restored", "evictions", "corruptions", "write_errors",
                                   "restore_declines", "enabled", "root", "quota_bytes"};
    for (size_t i = 0; i < CAIRN_ARRAY_LEN(fields); i++)
        assert_non_null(cJSON_GetObjectItem(o, fields[i]));
    assert_int_equal(cJSON_GetObjectItem(o, "enqueued")->valuedouble, 3);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "enabled")));
    cJSON_Delete(o);
    cairn_free(js);
    cairn_cold_store_destroy(s);

    FILE *fp = fopen(trace, "r");
    assert_non_null(fp);
    char line[4096];
    assert_non_null(fgets(line, sizeof line, fp));
    o = cJSON_Parse(line);
    assert_string_equal(cJSON_GetObjectItem(o, "turn")->valuestring, "turn-1");
    cJSON *c = cJSON_GetObjectItem(o, "cold");
    assert_int_equal(cJSON_GetObjectItem(c, "enqueued")->valuedouble, 3);
    assert_int_equal(cJSON_GetObjectItem(c, "hits")->valuedouble, 0);
    cJSON_Delete(o);
    assert_non_null(fgets(line, sizeof line, fp));
    o = cJSON_Parse(line);
    c = cJSON_GetObjectItem(o, "cold");
    assert_int_equal(cJSON_GetObjectItem(c, "enqueued")->valuedouble, 0); /* a delta */
    assert_int_equal(cJSON_GetObjectItem(c, "hits")->valuedouble, 1);
    assert_int_equal(cJSON_GetObjectItem(c, "misses")->valuedouble, 1);
    cJSON_Delete(o);
    assert_null(fgets(line, sizeof line, fp));
    fclose(fp);

    cairn_cold_store_stats(NULL, &st);
    assert_false(st.enabled);
}

static void test_default_root_and_knobs(void **state)
{
    fixture_t *f = *state;
    setenv("CAIRN_CACHE_DIR", f->root, 1);
    char *r = cairn_cold_default_root("/elsewhere");
    assert_string_equal(r, f->root);
    cairn_free(r);
    unsetenv("CAIRN_CACHE_DIR");
    r = cairn_cold_default_root("/elsewhere");
    assert_string_equal(r, "/elsewhere");
    cairn_free(r);
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    r = cairn_cold_default_root(NULL);
    assert_string_equal(r, "/x/cache/cairn");
    cairn_free(r);
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    r = cairn_cold_default_root(NULL);
    assert_string_equal(r, "/home/u/.cache/cairn");
    cairn_free(r);

    setenv("CAIRN_COLD_QUOTA_MIB", "3", 1);
    cairn_cold_store_t *s = open_store(f->root, 0, 12345);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.quota_bytes, 3u << 20);
    cairn_cold_store_destroy(s);
    unsetenv("CAIRN_COLD_QUOTA_MIB");
    s = open_store(f->root, 0, 12345);
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.quota_bytes, 12345);
    /* Misuse is refused, not crashed on. */
    cairn_cold_block_t b = {0};
    assert_int_equal(cairn_cold_store_enqueue(s, &b, 0, NULL), CAIRN_EINVAL);
    cairn_cold_store_destroy(s);
}

static void test_alloc_failures(void **state)
{
    fixture_t *f = *state;
    cairn_cold_store_t *s = open_store(f->root, 0, 0);
    write_chain(s, 40, 3);
    cairn_cold_store_destroy(s);
    /* Every allocation of open failing in turn: a clean error, never a crash or leak. */
    for (long n = 0; n < 40; n++) {
        cairn_cold_config_t c = t_config(f->root, 0, 0);
        cairn_alloc_fail_after(n, false);
        s = NULL;
        int rc = cairn_cold_store_create(&c, &s);
        cairn_alloc_fail_after(-1, false);
        if (rc == CAIRN_OK) {
            cairn_tier_stats_t st;
            cairn_cold_store_stats(s, &st);
            assert_true(st.objects <= 3);
            cairn_cold_store_destroy(s);
        } else {
            assert_int_equal(rc, CAIRN_ENOMEM);
        }
    }
    s = open_store(f->root, 0, 0);
    cairn_tier_stats_t st;
    cairn_cold_store_stats(s, &st);
    assert_int_equal(st.objects, 3);
    assert_int_equal(st.corruptions, 0);
    cairn_cold_store_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_direct_reads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corruption_at_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_objects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_state_slots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_io_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_directory_cleared_under_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adopted_objects_within_quota, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_commit_portable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quota_lru, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quota_chain_aware, setup, teardown),
        cmocka_unit_test_setup_teardown(test_capture_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_capture_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_telemetry_trace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_default_root_and_knobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_failures, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
