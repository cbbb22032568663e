/*
 * attention.c — causal grouped-query attention, written once for every K/V path.
 *
 * Model: query head h reads K/V head h / G, G = n_heads / n_kv_heads. For a query at
 * position p the span is positions 0..p of its sequence, fetched through the attn_kv_t
 * accessor in runs of contiguous rows.
 *
 * Work is cut into units of (tile, K/V head). A tile is up to `tq` consecutive queries of
 * one sequence; its rows are the G heads of each of those queries (G * tq <= TILE_ROWS
 * when G allows; fewer rows for spans beyond ~64K positions, SCORE_BUDGET). For each block of KEY_BLOCK keys the unit widens the K rows of its K/V
 * head to f32 once and scores every row against them; then it runs the softmax of every
 * row; then it widens the V rows once per block and accumulates every row. So a K/V row
 * is read once per tile instead of once per (query, head). Threads split the units, never
 * the keys of a row.
 *
 * Cost model (Qwen3-0.6B shape, 16/8 heads x 128, a 512-query prefill chunk: 64 rows per
 * unit). Per visible (row, key) the arithmetic is 8 + 8 zmm fmas (q.k and p.v), so the
 * AVX-512 core's one zmm fma per cycle bounds it; what the tiling has to remove is
 * everything else:
 *  - scores: a tile of >= TRANSPOSED_ROWS rows transposes each widened group of 16 keys
 *    once (kt [hdp][16]) and scores up to 4 rows per K load with the lanes of the
 *    canonical dot as vectors over the keys (scores16_t): 8 fmas + ~1 add per score
 *    instead of 8 fmas, 8 loads and ~3 shuffles/adds of the 16-key tree per row;
 *  - p.v: consecutive queries whose key range in the block is the same (all but the
 *    diagonal ones) go to pv in one call, 4 rows per V load;
 *  - K/V reads: a head's rows are a few cache lines every n_kv_heads * hd elements, which
 *    the hardware prefetchers follow poorly; the next block is prefetched into L2 while
 *    one is computed (4 blocks ahead for tiles of a few rows: decode), and 128 rows per
 *    unit read the span's K/V a quarter as often as the 32 rows before;
 *  - the score rows are padded by one group so that rows touched together do not alias
 *    in the caches' sets.
 * Measured (bench/bench_attention, docs/PERFORMANCE.md "Attention"): ~60-70 GFLOP/s per
 * thread at 2K-8K context against ~30-44 before; scratch per slot is 128 score rows of
 * the longest span (128 * 4 * max_positions bytes: 4.2 MB at 8K, 21 MB at 40K), 64 or 32
 * rows beyond 64K positions.
 *
 * With a window W a query at p takes keys from b0 (p - W + 1 rounded down to a multiple
 * of 16) on; the tile's key blocks start at the smallest b0 of its queries. A run of
 * positions the accessor reports without storage (k = v = NULL) is widened as zeros and
 * masked, like keys before the window.
 *
 * q8_0 K (step 1q of attention_impl.h, the integer q.k): the tile's query rows are rounded
 * to q8_0 once (qq, qd, qsum in the padded queries' room); each key block is split into
 * int8 q (kq) and f32 block scales grouped by 16 keys (kd) instead of widened, each group
 * of 16 keys transposed to dwords (q8_transpose16) and scored for every visible run of
 * rows (scores_q8t), whatever the tile's row count; V is widened to f32 as for every type.
 * The primitives are the implementation's where it has them (AVX-512 VNNI where
 * available, AVX2), else the generic ones: all compute the same exact integers.
 *
 * Invariant (determinism): every row follows the canonical order of attention_impl.h,
 * whose steps depend only on the row's position, the window and head_dim: scores in
 * blocks of 16 keys aligned to position 0, the max and exp-sum in 16 lanes over the same
 * blocks, the V rows by increasing position. Tiles only decide which rows share a widened
 * K/V block, never what is added to what, so flat, paged, chunked, batched and decode
 * runs agree bit for bit. The primitives (generic, AVX2 or AVX-512) are those of the
 * kernel implementation the call runs (its `attn` entry, resolved once), and all give the
 * same bits. bf16 K/V under the pair order (kern__attn_pair_on) run that entry's `pair`
 * rendition instead (attention_pair.c; AVX-512 emulation or AMX-BF16 tiles), with the
 * same driver: only the primitives and the packing of q change.
 *
 * The tile order (kern__attn_tile_on; attention_impl.h 1T / 4T; x86/attention_tile.c)
 * changes the driver in four places: K and V are copied as stored (bf16, load_block_bf16)
 * and each group of 16 keys is transposed as dwords (the tiles' B operand), every row is
 * scored through the tiles (a decode row too), p.v runs per block of TILE_PV_BLOCK keys
 * aligned to position 0 with every row of the unit in one pv_tile call (each query's key
 * range given; +0 elsewhere), and the rows per unit are chosen so that the call's score rows
 * fit TILE_S_BUDGET (tile_queries_tiled). The tile configuration is loaded once per unit.
 * Where a sequence of the call has several tiles (prefill chunks), its K/V are packed
 * once per call and K/V head in the tiles' operand layout (attn_seg_t: K's transposed
 * groups, V's pairs of positions) by a parallel packing phase, and every unit of that
 * head reads them in place: no per-unit copy, transpose, V packing or prefetch of the
 * cache's strided rows (each unit used to copy the whole span's K/V: 4 MB per unit at 8K
 * positions). A unit sees the same operands either way: its scores read only the columns
 * of its own keys (a tile's C[i][j] depends only on A row i and B column j), and its V
 * blocks are restricted to its positions [lo_min, span) (pv_tile_vp), what its own loads
 * leave. The pack is kept between calls; without memory for it (or
 * CAIRN_ATTN_TILE_PACK=0) every unit loads its own K/V, the same bits.
 *
 * Thread-safety: unit u runs on task u % n_tasks; each task writes only its own scratch
 * slot and the output heads of its units.
 */
#include <math.h>
#include <string.h>

#include "compute/cpu/attention_impl.h"
#include "compute/quant_blocks.h"

enum {
    TILE_ROWS = 128, /* rows (query x head) per tile: bounds the score rows of one unit */
    MIN_TILE_ROWS = 32, /* ... down to this many for long spans (SCORE_BUDGET) */
    KEY_BLOCK = 64, /* keys widened to f32 at a time (a multiple of 16) */
    TILE_PV_BLOCK = 256, /* the tile order's p.v blocks (step 4T; a multiple of KEY_BLOCK) */
    KV_ROOM = TILE_PV_BLOCK / 2, /* floats per head_dim of a slot's K/V block room: KEY_BLOCK f32
                                  * rows, or TILE_PV_BLOCK bf16 rows */
    TRANSPOSED_ROWS = 8, /* rows from which a tile scores against transposed key groups */
    PREFETCH_DEPTH_SMALL = 4, /* key blocks prefetched ahead by a tile of fewer rows */
};

/* ---- the generic implementation: the canonical order spelled out ------------------- */

static void gen_scores16(float *s, const float *q, const float *kb, int hd, float scale)
{
    const kern_type_ops_t *f32 = &kern__scalar.types[CAIRN_DTYPE_F32]; /* the canonical dot */
    for (int k = 0; k < 16; k++)
        s[k] = f32->dot(q, kb + (size_t)k * hd, hd) * scale;
}

static inline float max2(float a, float b) { return a > b ? a : b; }

static float gen_softmax(float *s, int n)
{
    float a[16], b[8], c[4], d[2];
    for (int j = 0; j < 16; j++)
        a[j] = -INFINITY;
    for (int k = 0; k < n; k += 16)
        for (int j = 0; j < 16; j++)
            a[j] = max2(a[j], k + j < n ? s[k + j] : -INFINITY);
    for (int j = 0; j < 8; j++)
        b[j] = max2(a[j], a[j + 8]);
    for (int j = 0; j < 4; j++)
        c[j] = max2(b[j], b[j + 4]);
    for (int j = 0; j < 2; j++)
        d[j] = max2(c[j], c[j + 2]);
    const float m = max2(d[0], d[1]);

    for (int j = 0; j < 16; j++)
        a[j] = 0.0f;
    for (int k = 0; k < n; k += 16)
        for (int j = 0; j < 16; j++) {
            float e = 0.0f; /* the padding adds +0 */
            if (k + j < n) {
                e = kern__exp(s[k + j] - m);
                s[k + j] = e;
            }
            a[j] = a[j] + e;
        }
    for (int j = 0; j < 8; j++)
        b[j] = a[j] + a[j + 8];
    for (int j = 0; j < 4; j++)
        c[j] = b[j] + b[j + 4];
    for (int j = 0; j < 2; j++)
        d[j] = c[j] + c[j + 2];
    return d[0] + d[1];
}

static void gen_pv(float *acc, int lda, const float *p, int ldp, int rows, int cnt,
                   const float *vb, int hd)
{
    for (int r = 0; r < rows; r++) {
        float *a = acc + (size_t)r * lda;
        for (int j = 0; j < cnt; j++) {
            const float pj = p[(size_t)r * ldp + j], *v = vb + (size_t)j * hd;
            for (int d = 0; d < hd; d++)
                a[d] = fmaf(pj, v[d], a[d]);
        }
    }
}

/* Step 1q's key layout: kt [hd4p][16] int32, dword d4 of key k at kt[d4*16 + k]. */
static void gen_q8_transpose16(int32_t *kt, const int8_t *kq, int hd)
{
    const int n4 = hd / 4, n4p = (n4 + 15) / 16 * 16;
    for (int d4 = 0; d4 < n4p; d4++)
        for (int k = 0; k < 16; k++) {
            int32_t w = 0;
            if (d4 < n4)
                memcpy(&w, kq + (size_t)k * hd + 4 * d4, sizeof(w));
            kt[d4 * 16 + k] = w;
        }
}

/* Step 1q spelled out: per key, the exact int32 of each block, folded in block order. */
static void gen_scores_q8t(float *s, size_t lds, const int8_t *qq, const float *qd, const int32_t *qsum, int rows,
                           const int32_t *kt, const float *kdt, int hd, float scale)
{
    (void)qsum; /* the integers are computed from the bytes themselves */
    const int nb = hd / QK8_0;
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < 16; k++) {
            float d = 0.0f;
            for (int b = 0; b < nb; b++) {
                int32_t S = 0;
                for (int i = b * QK8_0; i < (b + 1) * QK8_0; i++) {
                    const int8_t kb = (int8_t)(((uint32_t)kt[(i / 4) * 16 + k] >> (8 * (i % 4))) & 0xff);
                    S += (int32_t)qq[(size_t)r * hd + i] * kb;
                }
                d = fmaf((float)S, kdt[b * 16 + k] * qd[(size_t)r * nb + b], d);
            }
            s[(size_t)r * lds + k] = d * scale;
        }
}

static void gen_q8_split(int8_t *kq, float *kd, const void *src, size_t stride, int rows, int hd, int key0)
{
    const int nb = hd / QK8_0;
    for (int r = 0; r < rows; r++) {
        const blk_q8_0_t *blk = (const blk_q8_0_t *)((const unsigned char *)src + (size_t)r * stride);
        const int key = key0 + r;
        for (int b = 0; b < nb; b++) {
            memcpy(kq + (size_t)key * hd + b * QK8_0, blk[b].q, QK8_0);
            kd[(size_t)(key / 16) * nb * 16 + b * 16 + key % 16] = compute_f16_to_f32(blk[b].d);
        }
    }
}

const attn_impl_t attn__generic = {"generic", gen_scores16, gen_softmax, gen_pv, NULL, NULL,
                                   NULL, gen_q8_transpose16, gen_scores_q8t, gen_q8_split,
                                   NULL, &attn__generic_pair, NULL, NULL, NULL, NULL, NULL, NULL};

/* ---- the tiled driver -------------------------------------------------------------- */

typedef struct {
    const attn_cfg_t *cfg;
    attn_math_t m;
    const attn_impl_t *im;
    const attn_impl_t *q8; /* step 1q's primitives (q8_0 K), else NULL */
    const kern_type_ops_t *kv; /* the kernels of the K/V type */
    int layer;
    const attn_query_t *queries;
    int n_queries;
    int tq; /* queries per tile */
    /* The tile order's packed K/V (pack_plan; n_segs 0: every unit loads its own): the
     * packed segments, the buffer, and the K/V heads [kvh0, kvh1) of the current phase. */
    const struct attn_seg *segs;
    int n_segs, kvh0, kvh1;
    unsigned char *pack;
} attn_job_t;

/*
 * A segment of the tile order's packed K/V: the queries [q0, q1) of one accessor (at least
 * PACK_MIN_TILES tiles), whose K/V positions [base, span) are packed once per K/V head of
 * the phase, in the tiles' operand layout, and read in place by all its units:
 *  - K: per group of 16 keys, the transpose16 of their bf16 pairs, kts = (hd / 2 rounded
 *    up to 16) * 16 dwords (the B operand of step 1T);
 *  - V: per block of TILE_PV_BLOCK keys, pv_pack's [128][hd16] dwords (step 4T's B);
 *  - the missing-storage bits of each block of KEY_BLOCK keys (load_block_bf16's).
 * Positions before lo (the smallest window start of its queries) or without storage are
 * zero, positions at or past span too, as load_block_bf16 leaves them.
 */
typedef struct attn_seg {
    int q0, q1;        /* the segment's queries */
    int base, span;    /* packed positions [base, span); base a multiple of TILE_PV_BLOCK */
    int lo;            /* the smallest window_lo of its queries */
    int nblk;          /* blocks of TILE_PV_BLOCK positions */
    size_t head_bytes; /* one K/V head's pack (a multiple of 64) */
    size_t off;        /* bytes from the buffer to the pack of the phase's first K/V head */
} attn_seg_t;

static int group_size(const attn_cfg_t *cfg) { return cfg->n_heads / cfg->n_kv_heads; }

/* Score row stride: the span rounded up to whole key blocks, plus one group of 16 so
 * that consecutive rows (touched together, 16 floats each) do not fall into the same
 * cache sets when the span is a power of two times a small number (8192, 40960). */
static size_t score_stride(int max_positions)
{
    return ((size_t)max_positions + KEY_BLOCK - 1) / KEY_BLOCK * KEY_BLOCK + 16;
}

/* Score floats per slot above which tiles shrink (32 MiB): TILE_ROWS rows up to spans of
 * ~64K positions, halving down to MIN_TILE_ROWS beyond. */
#define SCORE_BUDGET ((size_t)1 << 23)

/* Queries per tile: as many as fill the tile's rows (one at least). */
static int tile_queries(int n_heads, int n_kv_heads, int max_positions)
{
    int g = n_heads / n_kv_heads, rows = TILE_ROWS;
    while (rows > MIN_TILE_ROWS && (size_t)rows * score_stride(max_positions) > SCORE_BUDGET)
        rows /= 2;
    return g >= rows ? 1 : rows / g;
}

/*
 * Queries per tile under the tile order (at most tq, the f32 order's): its score rows of
 * the call's span, rows * span * 4 bytes, within TILE_S_BUDGET, so that they stay in the
 * core's L2 cache between the scores, the softmax and p.v (the f32 order's 128 rows of
 * 8K positions, 4 MiB, do not), halving from TILE_ROWS down to 32 rows;
 * CAIRN_ATTN_TILE_ROWS=N (benchmarks) fixes N rows instead. Rows never change a bit.
 * 2 MiB (64 rows up to 8K positions, 128 up to 4K): with the K/V packed once per call,
 * fewer units each streaming the whole packed span pay more than score rows wholly in
 * L2 (device run attn9, the 8K chunk on one thread: 64 rows 221 ms, 128 rows 317 ms on
 * one core; 32 rows, the 1.5 MiB budget before, 343-354 ms on the next core).
 */
#define TILE_S_BUDGET ((size_t)2 << 20) /* 2 MiB */
static int tile_queries_tiled(const attn_cfg_t *cfg, int span, int tq)
{
    static int forced = -1; /* CAIRN_ATTN_TILE_ROWS, read once (0: not set) */
    int f = __atomic_load_n(&forced, __ATOMIC_RELAXED);
    if (f < 0) {
        f = (int)cairn_knob_int("CAIRN_ATTN_TILE_ROWS", false, 0, 0, 0, 1024);
        __atomic_store_n(&forced, f, __ATOMIC_RELAXED);
    }
    const int g = group_size(cfg);
    int rows = f > 0 ? f : TILE_ROWS;
    while (f <= 0 && rows > 32 && (size_t)rows * (size_t)span * sizeof(float) > TILE_S_BUDGET)
        rows /= 2;
    const int q = g >= rows ? 1 : rows / g;
    return q < tq ? q : tq;
}

/* head_dim rounded up to whole blocks of 16 (the canonical dot's zero-padded tail). */
static int padded_dim(int hd) { return (hd + 15) / 16 * 16; }

size_t attn_scratch_floats(int n_heads, int n_kv_heads, int head_dim, int max_positions)
{
    size_t rows = (size_t)tile_queries(n_heads, n_kv_heads, max_positions) * (size_t)(n_heads / n_kv_heads);
    /* scores [rows][stride], sums [rows], K/V block [KEY_BLOCK][hd] f32 (or [TILE_PV_BLOCK][hd]
     * bf16), accumulators [rows][hd],
     * padded queries [rows][hdp], a transposed key group [hdp][16] */
    return rows * score_stride(max_positions) + rows + (size_t)KV_ROOM * head_dim +
           rows * (size_t)head_dim + (rows + 16) * (size_t)padded_dim(head_dim);
}

/* The first position query position pos admits: p - W + 1 with a window W, else 0. */
static int window_lo(const attn_math_t *m, int pos)
{
    return m->window > 0 && pos - m->window + 1 > 0 ? pos - m->window + 1 : 0;
}

/* Whether the 16-key group at g0 holds keys of query position pos: b0 <= g0 <= pos. */
static bool group_visible(const attn_math_t *m, int pos, int g0)
{
    return g0 <= pos && window_lo(m, pos) / 16 * 16 <= g0;
}

/* The keys [*j0, *j1) of the block [k0, k0 + nk) that query position pos takes (from its
 * b0 to pos; empty when *j0 >= *j1). */
static void block_range(const attn_math_t *m, int pos, int k0, int nk, int *j0, int *j1)
{
    const int b0 = window_lo(m, pos) / 16 * 16;
    *j0 = b0 > k0 ? b0 : k0;
    *j1 = pos + 1 < k0 + nk ? pos + 1 : k0 + nk;
}

/* Bits [i, i + n) of a key block's mask. */
static uint64_t bit_run(int i, int n) { return (n >= 64 ? ~0ull : (1ull << n) - 1) << i; }

/*
 * Widens the K (or V) rows [k0, k0 + nk) of K/V head kvh into buf [KEY_BLOCK][hd], and
 * zeroes the rows after them up to the next multiple of 16 (scores16 reads whole groups).
 * Positions below lo_min (before the window of every query of the tile) are never asked
 * of the accessor, and positions it reports without storage are not read: both become
 * zero rows, and bit i of the result is set for such a position k0 + i.
 */
static uint64_t load_block(const attn_job_t *job, const attn_kv_t *kv, int k0, int nk, int lo_min, int kvh,
                           bool want_v, float *buf)
{
    const attn_cfg_t *cfg = job->cfg;
    const int hd = cfg->head_dim;
    const size_t row_bytes = cairn_dtype_row_bytes(cfg->kv_dtype, (int64_t)cfg->n_kv_heads * hd); /* one position */
    const size_t head_off = cairn_dtype_row_bytes(cfg->kv_dtype, (int64_t)kvh * hd);
    uint64_t missing = 0;
    int i = 0;
    if (lo_min > k0) {
        i = lo_min - k0 < nk ? lo_min - k0 : nk;
        memset(buf, 0, (size_t)i * hd * sizeof(float));
        missing = bit_run(0, i);
    }
    while (i < nk) {
        void *k = NULL, *v = NULL;
        int run = kv->rows(kv->ctx, job->layer, k0 + i, &k, &v);
        CAIRN_ASSERT(run > 0);
        if (run > nk - i)
            run = nk - i;
        const unsigned char *src = want_v ? v : k;
        if (!src) { /* no storage (a null block): masked, and read as zeros */
            memset(buf + (size_t)i * hd, 0, (size_t)run * hd * sizeof(float));
            missing |= bit_run(i, run);
        } else {
            job->kv->rows_to_f32(buf + (size_t)i * hd, src + head_off, row_bytes, run, hd);
        }
        i += run;
    }
    int padded = (nk + 15) / 16 * 16;
    memset(buf + (size_t)nk * hd, 0, (size_t)(padded - nk) * hd * sizeof(float));
    return missing;
}

/*
 * load_block for the tile order: the bf16 K (or V) rows [k0, k0 + nk) of kvh copied as
 * they are stored into buf [KEY_BLOCK][hd] bf16, the rows after them zero up to the next
 * multiple of 16; rows before lo_min or without storage are zero and flagged in the
 * result as load_block does. Moves only.
 */
static uint64_t load_block_bf16(const attn_job_t *job, const attn_kv_t *kv, int k0, int nk, int lo_min, int kvh,
                                bool want_v, uint16_t *buf)
{
    const attn_cfg_t *cfg = job->cfg;
    const int hd = cfg->head_dim;
    const size_t row_bytes = cairn_dtype_row_bytes(cfg->kv_dtype, (int64_t)cfg->n_kv_heads * hd);
    const size_t head_off = cairn_dtype_row_bytes(cfg->kv_dtype, (int64_t)kvh * hd);
    uint64_t missing = 0;
    int i = 0;
    if (lo_min > k0) {
        i = lo_min - k0 < nk ? lo_min - k0 : nk;
        memset(buf, 0, (size_t)i * hd * sizeof(uint16_t));
        missing = bit_run(0, i);
    }
    while (i < nk) {
        void *k = NULL, *v = NULL;
        int run = kv->rows(kv->ctx, job->layer, k0 + i, &k, &v);
        CAIRN_ASSERT(run > 0);
        if (run > nk - i)
            run = nk - i;
        const unsigned char *src = want_v ? v : k;
        if (!src) {
            memset(buf + (size_t)i * hd, 0, (size_t)run * hd * sizeof(uint16_t));
            missing |= bit_run(i, run);
        } else {
            for (int r = 0; r < run; r++)
                memcpy(buf + (size_t)(i + r) * hd, src + (size_t)r * row_bytes + head_off, (size_t)hd * sizeof(uint16_t));
        }
        i += run;
    }
    int padded = (nk + 15) / 16 * 16;
    memset(buf + (size_t)nk * hd, 0, (size_t)(padded - nk) * hd * sizeof(uint16_t));
    return missing;
}

/*
 * load_block for q8_0 K rows (step 1q): the int8 q of the rows [k0, k0 + nk) of kvh into
 * kq [KEY_BLOCK][hd] and their block scales into kd, grouped by 16 keys: key i's scale of
 * block b at kd[(i / 16) * nb * 16 + b * 16 + i % 16] (the kdt of each group). Rows before
 * lo_min, without storage, or after nk up to the next multiple of 16 are zero (and, but
 * for the padding, flagged in the result as load_block does).
 */
static uint64_t load_block_q8(const attn_job_t *job, const attn_kv_t *kv, int k0, int nk, int lo_min, int kvh,
                              int8_t *kq, float *kd)
{
    const attn_cfg_t *cfg = job->cfg;
    const int hd = cfg->head_dim, nb = hd / QK8_0, padded = (nk + 15) / 16 * 16;
    const size_t row_bytes = cairn_dtype_row_bytes(cfg->kv_dtype, (int64_t)cfg->n_kv_heads * hd);
    const size_t head_off = cairn_dtype_row_bytes(cfg->kv_dtype, (int64_t)kvh * hd);
    void (*const split_fn)(int8_t *, float *, const void *, size_t, int, int, int) =
        job->q8->q8_split ? job->q8->q8_split : attn__generic.q8_split;
    uint64_t missing = 0;
    memset(kd, 0, (size_t)padded * nb * sizeof(float));
    int i = 0;
    if (lo_min > k0) {
        i = lo_min - k0 < nk ? lo_min - k0 : nk;
        memset(kq, 0, (size_t)i * hd);
        missing = bit_run(0, i);
    }
    while (i < nk) {
        void *k = NULL, *v = NULL;
        int run = kv->rows(kv->ctx, job->layer, k0 + i, &k, &v);
        CAIRN_ASSERT(run > 0);
        if (run > nk - i)
            run = nk - i;
        if (!k) {
            memset(kq + (size_t)i * hd, 0, (size_t)run * hd);
            missing |= bit_run(i, run);
        } else {
            split_fn(kq, kd, (const unsigned char *)k + head_off, row_bytes, run, hd, i);
        }
        i += run;
    }
    memset(kq + (size_t)nk * hd, 0, (size_t)(padded - nk) * hd);
    return missing;
}

/* Step 1q's query rows: each of the tile's rows rounded to q8_0 by the kernels' from_f32
 * (the canonical rounding) and split into qq [rows][hd], qd and qsum [rows][nb]; tmp holds
 * one row's blocks. */
static void quantize_queries(const attn_job_t *job, const attn_query_t *qs, int rows, int kvh, int8_t *qq,
                             float *qd, int32_t *qsum, blk_q8_0_t *tmp)
{
    const int hd = job->cfg->head_dim, nb = hd / QK8_0, G = group_size(job->cfg);
    for (int r = 0; r < rows; r++) {
        job->kv->from_f32(tmp, qs[r / G].q + (size_t)(kvh * G + r % G) * hd, hd);
        for (int b = 0; b < nb; b++) {
            memcpy(qq + (size_t)r * hd + b * QK8_0, tmp[b].q, QK8_0);
            qd[(size_t)r * nb + b] = compute_f16_to_f32(tmp[b].d);
        }
        kern__q8_0_sums(qsum + (size_t)r * nb, tmp, nb);
    }
}

/*
 * Asks the caches for the K (or V) rows of kvh at positions [k0, k1) (the next block),
 * into L2, while the current one is computed: a head's rows are a few cache lines every
 * n_kv_heads * hd elements, a pattern the hardware prefetchers follow poorly. Only reads
 * the accessor; positions without storage are skipped.
 */
static void prefetch_block(const attn_job_t *job, const attn_kv_t *kv, int k0, int k1, int kvh, bool want_v)
{
    const attn_cfg_t *cfg = job->cfg;
    const size_t row_bytes = cairn_dtype_row_bytes(cfg->kv_dtype, (int64_t)cfg->n_kv_heads * cfg->head_dim);
    const size_t head_off = cairn_dtype_row_bytes(cfg->kv_dtype, (int64_t)kvh * cfg->head_dim);
    const size_t head_bytes = cairn_dtype_row_bytes(cfg->kv_dtype, cfg->head_dim);
    for (int p = k0; p < k1;) {
        void *k = NULL, *v = NULL;
        int run = kv->rows(kv->ctx, job->layer, p, &k, &v);
        if (run <= 0)
            return;
        if (run > k1 - p)
            run = k1 - p;
        const char *src = want_v ? v : k;
        for (int i = 0; src && i < run; i++)
            for (size_t b = 0; b < head_bytes; b += 64)
                __builtin_prefetch(src + (size_t)i * row_bytes + head_off + b, 0, 2);
        p += run;
    }
}

/* Step 1's soft-cap and mask over s[j0, j1) of one row (attention_impl.h): keys before lo
 * or without storage (bit j - k0 of missing) get -inf. */
static void finish_scores(const attn_math_t *m, float *s, int j0, int j1, int lo, int k0, uint64_t missing)
{
    if (m->softcap > 0.0f)
        for (int j = j0; j < j1; j++)
            s[j] = m->softcap * tanhf(s[j] / m->softcap);
    for (int j = j0; j < lo && j < j1; j++)
        s[j] = -INFINITY;
    for (uint64_t bits = missing; bits; bits &= bits - 1) {
        int j = k0 + __builtin_ctzll(bits);
        if (j >= j0 && j < j1)
            s[j] = -INFINITY;
    }
}

/* The prefetches of the block at k0 (the tile's first block is `first`): blocks depth
 * ahead, all of those up to there from the first block. */
static void prefetch_ahead(const attn_job_t *job, const attn_kv_t *kv, int k0, int first, int span, int kvh,
                           bool want_v, int depth)
{
    int lo = k0 == first ? k0 + KEY_BLOCK : k0 + depth * KEY_BLOCK, hi = k0 + (depth + 1) * KEY_BLOCK;
    if (hi > span)
        hi = span;
    if (lo < hi)
        prefetch_block(job, kv, lo, hi, kvh, want_v);
}

/* The end of the tile that starts at query q0. */
static int tile_end(const attn_job_t *job, int q0)
{
    int q1 = q0 + 1;
    while (q1 < job->n_queries && q1 - q0 < job->tq && job->queries[q1].kv == job->queries[q0].kv)
        q1++;
    return q1;
}

/* ---- the tile order's K/V packed once per call (attn_seg_t) ----------------------------- */

/* Tiles from which a segment's K/V are packed once instead of loaded by each unit (decode,
 * one tile per sequence, keeps the per-unit loads), and the most bytes packed at a time:
 * more K/V heads than fit are packed and run in phases, and a single head that does not fit
 * (spans beyond ~128K positions) keeps the per-unit loads. */
enum { PACK_MIN_TILES = 2 };
#define PACK_BUDGET ((size_t)64 << 20)
static size_t pack_budget_forced; /* atomic; kern__attn_tile_pack_budget (tests), 0: PACK_BUDGET */
void kern__attn_tile_pack_budget(size_t bytes) { __atomic_store_n(&pack_budget_forced, bytes, __ATOMIC_RELAXED); }

/* The pack of K/V head kvh (of the current phase) of segment sg: K groups, V blocks, the
 * missing bits. */
static void pack_ptrs(const attn_job_t *job, const attn_seg_t *sg, int kvh, const uint32_t **kp,
                      const uint32_t **vp, const uint64_t **miss)
{
    const int hd = job->cfg->head_dim;
    const size_t kts = (size_t)padded_dim(hd / 2) * 16, vbs = (size_t)TILE_PV_BLOCK / 2 * padded_dim(hd);
    const uint32_t *h = (const uint32_t *)(job->pack + sg->off + (size_t)(kvh - job->kvh0) * sg->head_bytes);
    *kp = h;
    *vp = h + (size_t)sg->nblk * (TILE_PV_BLOCK / 16) * kts;
    *miss = (const uint64_t *)(*vp + (size_t)sg->nblk * vbs);
}

/* Bytes of one K/V head's pack of nblk blocks (a multiple of 64, so that every head's
 * pack, and in it every K group and V block, stays 64-byte aligned). */
static size_t pack_head_bytes(int hd, int nblk)
{
    const size_t kts = (size_t)padded_dim(hd / 2) * 16, vbs = (size_t)TILE_PV_BLOCK / 2 * padded_dim(hd);
    const size_t b = (size_t)nblk * ((TILE_PV_BLOCK / 16) * kts * 4 + vbs * 4 + (TILE_PV_BLOCK / KEY_BLOCK) * 8);
    return (b + 63) / 64 * 64;
}

/* Packs block blk (TILE_PV_BLOCK positions) of K/V head kvh of segment sg, through raw
 * [TILE_PV_BLOCK][hd] bf16 (a slot's K/V room): the rows as load_block_bf16 copies them
 * for the segment's lo, K transposed per group of 16, V by pv_pack. Moves only. */
static void pack_block(const attn_job_t *job, const attn_seg_t *sg, int kvh, int blk, uint16_t *raw)
{
    const attn_impl_t *im = job->im;
    const int hd = job->cfg->head_dim, k0 = sg->base + blk * TILE_PV_BLOCK;
    const int nk = sg->span - k0 < TILE_PV_BLOCK ? sg->span - k0 : TILE_PV_BLOCK, ng = (nk + 15) / 16;
    const size_t kts = (size_t)padded_dim(hd / 2) * 16, vbs = (size_t)TILE_PV_BLOCK / 2 * padded_dim(hd);
    const attn_kv_t *kv = job->queries[sg->q0].kv;
    const uint32_t *ck, *cv;
    const uint64_t *cm;
    pack_ptrs(job, sg, kvh, &ck, &cv, &cm);
    uint32_t *kp = (uint32_t *)ck + (size_t)blk * (TILE_PV_BLOCK / 16) * kts;
    uint32_t *vp = (uint32_t *)cv + (size_t)blk * vbs;
    uint64_t *miss = (uint64_t *)cm + (size_t)blk * (TILE_PV_BLOCK / KEY_BLOCK);
    for (int b = 0; b < TILE_PV_BLOCK; b += KEY_BLOCK)
        miss[b / KEY_BLOCK] = b < nk ? load_block_bf16(job, kv, k0 + b, nk - b < KEY_BLOCK ? nk - b : KEY_BLOCK,
                                                       sg->lo, kvh, false, raw + (size_t)b * hd)
                                     : 0;
    for (int g = 0; g < ng; g++)
        im->transpose16((float *)(kp + (size_t)g * kts), (const float *)(raw + (size_t)g * 16 * hd), hd / 2);
    memset(kp + (size_t)ng * kts, 0, (size_t)(TILE_PV_BLOCK / 16 - ng) * kts * sizeof *kp); /* never read */
    for (int b = 0; b < nk; b += KEY_BLOCK)
        load_block_bf16(job, kv, k0 + b, nk - b < KEY_BLOCK ? nk - b : KEY_BLOCK, sg->lo, kvh, true,
                        raw + (size_t)b * hd);
    im->pv_pack(vp, raw, nk, hd);
}

/* The packing phase: the blocks of every packed segment and K/V head of the phase, item i
 * on task i % n_tasks, each through its own slot's K/V room. */
static void pack_task(void *ctx, int task, int n_tasks)
{
    const attn_job_t *job = ctx;
    const attn_cfg_t *cfg = job->cfg;
    float *slot = cfg->scratch + (size_t)task * attn_scratch_floats(cfg->n_heads, cfg->n_kv_heads,
                                                                     cfg->head_dim, cfg->max_positions);
    const size_t max_rows = (size_t)job->tq * group_size(cfg);
    uint16_t *raw = (uint16_t *)(slot + max_rows * score_stride(cfg->max_positions) + max_rows); /* attend_tile's kvbuf */
    int i = 0;
    for (int s = 0; s < job->n_segs; s++)
        for (int kvh = job->kvh0; kvh < job->kvh1; kvh++)
            for (int blk = 0; blk < job->segs[s].nblk; blk++, i++)
                if (i % n_tasks == task)
                    pack_block(job, &job->segs[s], kvh, blk, raw);
}

/* The pack buffer, kept between calls (taken and given back by atomic exchange, so that
 * concurrent calls each get their own): a header, then 64-byte aligned data. */
typedef struct {
    size_t cap; /* data bytes */
    unsigned char *data;
} pack_buf_t;
static pack_buf_t *pack_cache; /* atomic */

/* A buffer of at least `bytes` (the cached one when big enough), or NULL without memory. */
static pack_buf_t *pack_take(size_t bytes)
{
    pack_buf_t *b = __atomic_exchange_n(&pack_cache, NULL, __ATOMIC_ACQ_REL);
    if (b && b->cap >= bytes)
        return b;
    cairn_free(b);
    b = cairn_malloc(sizeof *b + 64 + bytes);
    if (!b)
        return NULL;
    b->cap = bytes;
    b->data = (unsigned char *)(((uintptr_t)(b + 1) + 63) & ~(uintptr_t)63);
    return b;
}

/* Keeps b for the next call (freeing the one another call may have kept meanwhile). */
static void pack_give(pack_buf_t *b) { cairn_free(__atomic_exchange_n(&pack_cache, b, __ATOMIC_ACQ_REL)); }

void kern__attn_tile_pack_drop(void) { cairn_free(__atomic_exchange_n(&pack_cache, NULL, __ATOMIC_ACQ_REL)); }

/* Whether the tile order packs K/V once per call: CAIRN_ATTN_TILE_PACK (default 1; 0:
 * every unit loads its own, the same bits), read once; kern__attn_tile_pack_set (tests). */
static int pack_forced = -1; /* atomic */
static int pack_knob = -1;   /* atomic */
void kern__attn_tile_pack_set(int mode) { __atomic_store_n(&pack_forced, mode, __ATOMIC_RELAXED); }
static bool pack_enabled(void)
{
    const int f = __atomic_load_n(&pack_forced, __ATOMIC_RELAXED);
    if (f >= 0)
        return f != 0;
    int k = __atomic_load_n(&pack_knob, __ATOMIC_RELAXED);
    if (k < 0) {
        k = (int)cairn_knob_int("CAIRN_ATTN_TILE_PACK", false, 0, 1, 0, 1);
        __atomic_store_n(&pack_knob, k, __ATOMIC_RELAXED);
    }
    return k != 0;
}

/*
 * The packed segments of a tile-order call (job->tq final): runs of consecutive tiles of
 * one accessor, PACK_MIN_TILES of them at least. On success *out holds the buffer (segment
 * descriptors first, then the packs of *per_phase K/V heads per segment) and job's segs,
 * n_segs and pack are set; 0 segments (nothing worth packing, packing off, a head over
 * PACK_BUDGET, or no memory: the per-unit loads, the same bits) leaves *out NULL.
 */
static void pack_plan(attn_job_t *job, pack_buf_t **out, int *per_phase)
{
    const attn_cfg_t *cfg = job->cfg;
    *out = NULL;
    *per_phase = cfg->n_kv_heads;
    if (!job->im->pv_pack || !job->im->pv_tile_vp || !pack_enabled())
        return;
    const size_t forced = __atomic_load_n(&pack_budget_forced, __ATOMIC_RELAXED), budget = forced ? forced : PACK_BUDGET;
    int n = 0;
    size_t head = 0; /* one K/V head's packs of every segment */
    for (int pass = 0; pass < 2; pass++) {
        attn_seg_t *segs = pass ? (attn_seg_t *)(*out)->data : NULL;
        n = 0;
        size_t off = 0;
        for (int q0 = 0, q1; q0 < job->n_queries; q0 = q1) {
            int tiles = 0;
            for (q1 = q0; q1 < job->n_queries && job->queries[q1].kv == job->queries[q0].kv; tiles++)
                q1 = tile_end(job, q1);
            if (tiles < PACK_MIN_TILES)
                continue;
            int span = 0, lo = cfg->max_positions;
            for (int q = q0; q < q1; q++) {
                span = job->queries[q].pos + 1 > span ? job->queries[q].pos + 1 : span;
                lo = window_lo(&job->m, job->queries[q].pos) < lo ? window_lo(&job->m, job->queries[q].pos) : lo;
            }
            const int base = lo / TILE_PV_BLOCK * TILE_PV_BLOCK, nblk = (span - base + TILE_PV_BLOCK - 1) / TILE_PV_BLOCK;
            const size_t hb = pack_head_bytes(cfg->head_dim, nblk);
            if (pass)
                segs[n] = (attn_seg_t){q0, q1, base, span, lo, nblk, hb, off};
            off += hb * (size_t)*per_phase;
            head += pass ? 0 : hb;
            n++;
        }
        if (!n || (!pass && head > budget))
            return;
        if (!pass) {
            *per_phase = budget / head < (size_t)cfg->n_kv_heads ? (int)(budget / head) : cfg->n_kv_heads;
            const size_t desc = ((size_t)n * sizeof(attn_seg_t) + 63) / 64 * 64;
            if (!(*out = pack_take(desc + head * (size_t)*per_phase))) {
                *per_phase = cfg->n_kv_heads; /* the per-unit loads, in one phase */
                return;
            }
            job->pack = (*out)->data + desc;
        }
    }
    job->segs = (const attn_seg_t *)(*out)->data;
    job->n_segs = n;
}

/* One unit: queries [q0, q1) of one sequence, K/V head kvh. Row r = t * G + g is query
 * q0 + t, head kvh * G + g. */
static void attend_tile(const attn_job_t *job, int q0, int q1, int kvh, float *slot)
{
    const attn_cfg_t *cfg = job->cfg;
    const attn_impl_t *im = job->im;
    const int hd = cfg->head_dim, G = group_size(cfg), nt = q1 - q0, rows = nt * G;
    const size_t ld = score_stride(cfg->max_positions);
    const size_t max_rows = (size_t)job->tq * G;
    float *S = slot;                  /* [max_rows][ld] scores, then e_j */
    float *sums = S + max_rows * ld;  /* [max_rows] */
    float *kvbuf = sums + max_rows;   /* [KEY_BLOCK][hd] */
    float *acc = kvbuf + (size_t)KV_ROOM * hd; /* [max_rows][hd] */
    const int hdp = padded_dim(hd);
    float *qpad = acc + max_rows * hd;            /* [max_rows][hdp] */
    float *kt = qpad + max_rows * hdp;            /* [hdp][16] */
    const attn_math_t *m = &job->m;
    const float scale = m->scale != 0.0f ? m->scale : 1.0f / sqrtf((float)hd);
    const bool masks = m->window > 0 || m->softcap > 0.0f;
    const attn_query_t *qs = job->queries + q0;
    const attn_kv_t *kv = qs[0].kv;

    /* The keys of the tile: [first, span), first on a key block boundary; none below
     * lo_min is visible to any of its queries. */
    int span = 0, lo_min = cfg->max_positions;
    for (int t = 0; t < nt; t++) {
        if (qs[t].pos + 1 > span)
            span = qs[t].pos + 1;
        int lo = window_lo(m, qs[t].pos);
        if (lo < lo_min)
            lo_min = lo;
    }
    const int first = lo_min / KEY_BLOCK * KEY_BLOCK;
    /* Enough rows to pay for transposing each key group: score them all per K load. The
     * tile order scores every row so (step 1T: a decode row is a tile of 1-2 rows). */
    const bool tiled = im->pv_tile != NULL;
    uint16_t *kraw = (uint16_t *)kvbuf; /* the tile order's bf16 K/V rows [TILE_PV_BLOCK][hd] */
    const bool transposed = im->scores16_t && (rows >= TRANSPOSED_ROWS || tiled);
    /* A few rows (decode) compute little per block: ask for K/V rows further ahead. */
    const int depth = rows >= TRANSPOSED_ROWS ? 1 : PREFETCH_DEPTH_SMALL;
    /* Step 1q (q8_0 K): the query rows rounded once, in the padded queries' room (hd + 8 nb
     * bytes a row, below 4 hdp); the keys as int8 in the K/V block's room. */
    const attn_impl_t *q8 = job->q8;
    const int nb = hd / QK8_0;
    int8_t *qq = (int8_t *)qpad, *kq = (int8_t *)kvbuf;
    float *qd = (float *)(qq + max_rows * hd), *kd = (float *)(kq + (size_t)KEY_BLOCK * hd);
    int32_t *qsum = (int32_t *)(qd + max_rows * nb), *kt8 = (int32_t *)kt;
    if (q8)
        quantize_queries(job, qs, rows, kvh, qq, qd, qsum, (blk_q8_0_t *)kt);
    if (transposed && !q8)
        for (int r = 0; r < rows; r++) {
            const float *q = qs[r / G].q + (size_t)(kvh * G + r % G) * hd;
            if (im->pack_q) {
                im->pack_q(qpad + (size_t)r * hdp, q, hd, hdp);
                continue;
            }
            memcpy(qpad + (size_t)r * hdp, q, (size_t)hd * sizeof(float));
            memset(qpad + (size_t)r * hdp + hd, 0, (size_t)(hdp - hd) * sizeof(float));
        }

    /* The tile order's K/V packed once for the call (pack_plan), when this unit's segment
     * has it: read in place, nothing loaded, transposed or prefetched here. */
    const uint32_t *pk = NULL, *pvp = NULL;
    const uint64_t *pmiss = NULL;
    int pbase = 0;
    const size_t kts = (size_t)padded_dim(hd / 2) * 16, vbs = (size_t)TILE_PV_BLOCK / 2 * padded_dim(hd);
    for (int i = 0; tiled && i < job->n_segs; i++) {
        const attn_seg_t *sg = &job->segs[i];
        if (q0 >= sg->q0 && q0 < sg->q1 && kvh >= job->kvh0 && kvh < job->kvh1) {
            pack_ptrs(job, sg, kvh, &pk, &pvp, &pmiss);
            pbase = sg->base;
            CAIRN_ASSERT(q1 <= sg->q1 && first >= pbase && span <= sg->span);
        }
    }

    if (tiled && im->tiles_begin)
        im->tiles_begin();

    /* Scores, in groups of 16 keys aligned to position 0, from each query's b0. */
    for (int k0 = first; k0 < span; k0 += KEY_BLOCK) {
        const int nk = span - k0 < KEY_BLOCK ? span - k0 : KEY_BLOCK;
        uint64_t missing;
        if (pk) { /* the pack's bits, and those below this unit's lo_min (load_block_bf16's) */
            missing = pmiss[(k0 - pbase) / KEY_BLOCK] | (lo_min > k0 ? bit_run(0, lo_min - k0 < nk ? lo_min - k0 : nk) : 0);
            missing &= bit_run(0, nk);
        } else {
            missing = q8      ? load_block_q8(job, kv, k0, nk, lo_min, kvh, kq, kd)
                      : tiled ? load_block_bf16(job, kv, k0, nk, lo_min, kvh, false, kraw)
                              : load_block(job, kv, k0, nk, lo_min, kvh, false, kvbuf);
            prefetch_ahead(job, kv, k0, first, span, kvh, false, depth);
        }
        if (q8) {
            for (int g0 = k0; g0 < k0 + nk; g0 += 16) {
                q8->q8_transpose16(kt8, kq + (size_t)(g0 - k0) * hd, hd);
                const float *kdt = kd + (size_t)(g0 - k0) * nb;
                for (int t0 = 0, t1; t0 < nt; t0 = t1 + 1) {
                    while (t0 < nt && !group_visible(m, qs[t0].pos, g0))
                        t0++;
                    for (t1 = t0; t1 < nt && group_visible(m, qs[t1].pos, g0);)
                        t1++;
                    if (t1 > t0)
                        q8->scores_q8t(S + (size_t)t0 * G * ld + g0, ld, qq + (size_t)t0 * G * hd,
                                       qd + (size_t)t0 * G * nb, qsum + (size_t)t0 * G * nb, (t1 - t0) * G, kt8,
                                       kdt, hd, scale);
                }
            }
        } else if (transposed) {
            for (int g0 = k0; g0 < k0 + nk; g0 += 16) {
                const float *ktg = kt;
                if (pk) /* the group's B operand, packed: the same bits as transposed here */
                    ktg = (const float *)(pk + (size_t)((g0 - pbase) / 16) * kts);
                else if (tiled) /* the bf16 pairs of 16 keys as dwords: kt [hd / 2 rounded to 16][16] */
                    im->transpose16(kt, (const float *)(kraw + (size_t)(g0 - k0) * hd), hd / 2);
                else
                    im->transpose16(kt, kvbuf + (size_t)(g0 - k0) * hd, hd);
                /* Each run of consecutive queries whose keys [b0, pos] include the group
                 * (one run when the positions increase) in one call. */
                for (int t0 = 0, t1; t0 < nt; t0 = t1 + 1) {
                    while (t0 < nt && !group_visible(m, qs[t0].pos, g0))
                        t0++;
                    for (t1 = t0; t1 < nt && group_visible(m, qs[t1].pos, g0);)
                        t1++;
                    if (t1 > t0)
                        im->scores16_t(S + (size_t)t0 * G * ld + g0, ld, qpad + (size_t)t0 * G * hdp,
                                       (t1 - t0) * G, ktg, hdp, scale);
                }
            }
        }
        for (int t = 0; t < nt; t++) {
            const int pos = qs[t].pos, lo = window_lo(m, pos), b0 = lo / 16 * 16;
            const int j0 = b0 > k0 ? b0 : k0, j1 = pos + 1 < k0 + nk ? pos + 1 : k0 + nk;
            for (int g = 0; g < G; g++) {
                const float *q = qs[t].q + (size_t)(kvh * G + g) * hd;
                float *s = S + (size_t)(t * G + g) * ld;
                for (int j = j0; j < j1 && !transposed && !q8; j += 16)
                    im->scores16(s + j, q, kvbuf + (size_t)(j - k0) * hd, hd, scale);
                if ((masks || missing) && j0 < j1)
                    finish_scores(m, s, j0, j1, lo, k0, missing);
            }
        }
    }

    for (int r = 0; r < rows; r++) {
        const int pos = qs[r / G].pos, b0 = window_lo(m, pos) / 16 * 16;
        sums[r] = im->softmax(S + (size_t)r * ld + b0, pos + 1 - b0);
    }

    /* Probabilities times V, by increasing position from each query's b0; a query's G
     * rows share one range. */
    memset(acc, 0, (size_t)rows * hd * sizeof(float));
    /* Step 4T (the tile order): every row of the tile at once, each with its own keys, per
     * block of TILE_PV_BLOCK keys aligned to position 0. */
    for (int k0 = lo_min / TILE_PV_BLOCK * TILE_PV_BLOCK; tiled && k0 < span; k0 += TILE_PV_BLOCK) {
        const int nk = span - k0 < TILE_PV_BLOCK ? span - k0 : TILE_PV_BLOCK;
        int j0s[TILE_ROWS], j1s[TILE_ROWS];
        for (int t = 0; t < nt; t++) {
            int j0, j1;
            block_range(m, qs[t].pos, k0, nk, &j0, &j1);
            j0s[t] = j0 - k0;
            j1s[t] = j1 > j0 ? j1 - k0 : j0 - k0;
        }
        if (pvp) { /* the packed block, restricted to [lo_min, span): what load_block_bf16 leaves */
            const int a = lo_min > k0 ? lo_min - k0 : 0;
            im->pv_tile_vp(acc, hd, S + k0, ld, rows, G, j0s, j1s, pvp + (size_t)((k0 - pbase) / TILE_PV_BLOCK) * vbs,
                           a, nk, hd);
            continue;
        }
        for (int b = 0; b < nk; b += KEY_BLOCK)
            load_block_bf16(job, kv, k0 + b, nk - b < KEY_BLOCK ? nk - b : KEY_BLOCK, lo_min, kvh, true,
                            kraw + (size_t)b * hd);
        if (k0 + nk < span)
            prefetch_block(job, kv, k0 + nk, span - k0 - nk < TILE_PV_BLOCK ? span : k0 + nk + TILE_PV_BLOCK, kvh,
                           true);
        im->pv_tile(acc, hd, S + k0, ld, rows, G, j0s, j1s, nk, kraw, hd);
    }
    for (int k0 = first; !tiled && k0 < span; k0 += KEY_BLOCK) {
        const int nk = span - k0 < KEY_BLOCK ? span - k0 : KEY_BLOCK;
        load_block(job, kv, k0, nk, lo_min, kvh, true, kvbuf);
        prefetch_ahead(job, kv, k0, first, span, kvh, true, depth);
        /* Consecutive queries with the same range (all but the diagonal ones, in a causal
         * tile) in one call, so that each V row loaded serves more rows. */
        for (int t = 0, t1; t < nt; t = t1) {
            int j0, j1;
            block_range(m, qs[t].pos, k0, nk, &j0, &j1);
            for (t1 = t + 1; t1 < nt; t1++) {
                int i0, i1;
                block_range(m, qs[t1].pos, k0, nk, &i0, &i1);
                if (i0 != j0 || i1 != j1)
                    break;
            }
            if (j0 < j1)
                im->pv(acc + (size_t)t * G * hd, hd, S + (size_t)t * G * ld + j0, (int)ld, (t1 - t) * G, j1 - j0,
                       kvbuf + (size_t)(j0 - k0) * hd, hd);
        }
    }

    if (tiled && im->tiles_end)
        im->tiles_end();

    for (int t = 0; t < nt; t++)
        for (int g = 0; g < G; g++) {
            float *out = qs[t].out + (size_t)(kvh * G + g) * hd;
            const float *a = acc + (size_t)(t * G + g) * hd;
            const float l = sums[t * G + g];
            for (int d = 0; d < hd; d++)
                out[d] = a[d] / l;
        }
}

static void attn_task(void *ctx, int task, int n_tasks)
{
    const attn_job_t *job = ctx;
    const attn_cfg_t *cfg = job->cfg;
    float *slot = cfg->scratch + (size_t)task * attn_scratch_floats(cfg->n_heads, cfg->n_kv_heads,
                                                                     cfg->head_dim, cfg->max_positions);
    int u = 0;
    for (int q0 = 0, q1; q0 < job->n_queries; q0 = q1) {
        q1 = tile_end(job, q0);
        for (int kvh = job->kvh0; kvh < job->kvh1; kvh++, u++)
            if (u % n_tasks == task)
                attend_tile(job, q0, q1, kvh, slot);
    }
}

void kern__attn_forward(const kern_impl_t *k, cairn_thread_pool_t *tp, const attn_cfg_t *cfg,
                        const attn_math_t *math, int layer, const attn_query_t *queries, int n_queries)
{
    for (int i = 0; i < n_queries; i++)
        CAIRN_ASSERT(queries[i].pos < cfg->max_positions);
    CAIRN_ASSERT((unsigned)cfg->kv_dtype < COMPUTE_DTYPE_COUNT && k->types[cfg->kv_dtype].rows_to_f32);
    const attn_impl_t *im = k->attn, *q8 = NULL;
    if (cfg->kv_dtype == CAIRN_DTYPE_Q8_0) { /* step 1q: the integer q.k (numerics revision 3) */
        CAIRN_ASSERT(cfg->head_dim % QK8_0 == 0 && k->types[CAIRN_DTYPE_Q8_0].from_f32);
        q8 = im->scores_q8t && (!im->q8_usable || im->q8_usable()) ? im : &attn__generic;
    }
    /* bf16 K/V under the tile order or the pair order (attention_impl.h): the
     * implementation's rendition of it (the tile order's: the process's tiles). */
    if (cfg->kv_dtype == CAIRN_DTYPE_BF16 && kern__attn_tile_on()) {
        im = im->tile ? im->tile : kern__attn_tile_impl();
        CAIRN_ASSERT(im && im->pv_tile && im->scores16_t && im->transpose16 && im->pack_q);
        CAIRN_ASSERT(cfg->head_dim % 2 == 0 && cfg->head_dim <= 256); /* step 4T's packing */
    } else if (cfg->kv_dtype == CAIRN_DTYPE_BF16 && kern__attn_pair_on()) {
        im = im->pair ? im->pair : &attn__generic_pair;
    }
    attn_job_t job = {cfg, math ? *math : (attn_math_t){0, 0.0f, 0.0f}, im, q8, &k->types[cfg->kv_dtype], layer,
                      queries, n_queries, tile_queries(cfg->n_heads, cfg->n_kv_heads, cfg->max_positions),
                      NULL, 0, 0, cfg->n_kv_heads, NULL};

    if (im->pv_tile) { /* the tile order: rows whose scores of the call's span fit TILE_S_BUDGET */
        int span = 0;
        for (int i = 0; i < n_queries; i++)
            span = queries[i].pos + 1 > span ? queries[i].pos + 1 : span;
        job.tq = tile_queries_tiled(cfg, span, job.tq);
    }
    int units = 0;
    for (int q0 = 0; q0 < n_queries; q0 = tile_end(&job, q0))
        units += cfg->n_kv_heads;
    /* Smaller tiles while there are fewer than two units per slot (a short chunk on many
     * threads): tiling never changes a bit, only how the work is shared. */
    while (job.tq > 1 && units < 2 * cfg->n_slots) {
        job.tq = (job.tq + 1) / 2;
        units = 0;
        for (int q0 = 0; q0 < n_queries; q0 = tile_end(&job, q0))
            units += cfg->n_kv_heads;
    }
    if (units < 1 || cfg->n_slots < 1)
        return;
    /* The tile order: K/V packed once per call and K/V head where a sequence has several
     * tiles, in phases of per_phase K/V heads (a packing run, then that phase's units). */
    pack_buf_t *pb = NULL;
    int per_phase = cfg->n_kv_heads;
    if (im->pv_tile)
        pack_plan(&job, &pb, &per_phase);
    const int tiles = units / cfg->n_kv_heads;
    for (int h0 = 0; h0 < cfg->n_kv_heads; h0 += per_phase) {
        job.kvh0 = h0;
        job.kvh1 = h0 + per_phase < cfg->n_kv_heads ? h0 + per_phase : cfg->n_kv_heads;
        if (job.n_segs) {
            int items = 0;
            for (int i = 0; i < job.n_segs; i++)
                items += job.segs[i].nblk * (job.kvh1 - job.kvh0);
            cairn_thread_pool_run(tp, pack_task, &job, cfg->n_slots < items ? cfg->n_slots : items);
        }
        const int pu = tiles * (job.kvh1 - job.kvh0);
        cairn_thread_pool_run(tp, attn_task, &job, cfg->n_slots < pu ? cfg->n_slots : pu);
    }
    if (pb)
        pack_give(pb);
}

void attn_forward(cairn_thread_pool_t *tp, const attn_cfg_t *cfg, int layer,
                  const attn_query_t *queries, int n_queries)
{
    kern__attn_forward(kern__current(), tp, cfg, NULL, layer, queries, n_queries);
}
