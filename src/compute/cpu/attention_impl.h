/*
 * attention_impl.h — private: the primitives an attention implementation provides, and the
 * canonical order every implementation follows (so they agree bit for bit).
 *
 * CANONICAL ORDER, for one query row (a token at position p, one head). Key j is visible
 * when j <= p, j > p - W (with a window W; every j >= 0 without) and j has storage. Let
 * lo = the first position the window admits (0 without one) and b0 = lo rounded down to a
 * multiple of 16; the keys taken are b0..p.
 *  1. score s_j = dot(q, k_j) * scale, the dot in kern_dot's canonical order (16 fma lanes
 *     over blocks of 16, zero-padded tail, fixed tree; kernels_impl.h), then one rounded
 *     product with scale (default 1 / sqrtf(head_dim)); with a soft-cap c,
 *     s_j = c * tanhf(s_j / c) (libm tanhf, computed by the portable driver). A key that
 *     is not visible gets s_j = -inf.
 *  2. max m: 16 lanes M[l] = -inf; for each block of 16 keys from position b0 (the last
 *     one padded with -inf), M[l] = M[l] > s ? M[l] : s; then the tree of kernels_impl.h
 *     with x > y ? x : y in place of the sum.
 *  3. e_j = kern__exp(s_j - m) (the canonical exp; +0 for a key that is not visible), and
 *     l = the 16-lane sum of e_j over the same blocks (padding adds +0), reduced by the
 *     fixed tree.
 *  4. acc[d] = fma(e_j, v_j[d], acc[d]) from acc = +0, for j = b0..p in increasing order
 *     (a key without storage has v_j = 0); out[d] = acc[d] / l.
 * With q8_0 K (numerics revision 3, "q8 q.k") step 1's dot is an integer one instead:
 *  1q. the query row is rounded to q8_0 once (quant_q8_0_round_act: per block of 32 one
 *     f16 scale qd_b and int8 q), and s_j = D * scale with D = kern__qdot(Q8_0, k_j, q8(q),
 *     head_dim, +0) (quant_kernels.c): for each block b = 0, 1, ... in order, the exact
 *     int32 S_b = sum of q8(q)_i * k_i over the block's 32 elements, then
 *     D = fmaf((float)S_b, kd_b * qd_b, D) (kd_b, qd_b widened from f16, one rounded
 *     product). Every implementation computes the same integers (by any grouping: integer
 *     sums are exact) and the same float chain, so they agree bit for bit; the soft-cap,
 *     mask and steps 2-4 are unchanged (V stays widened to f32). head_dim is a multiple
 *     of 32 (a q8_0 head is whole blocks).
 * Starting at b0 instead of 0 changes no bit: the blocks before b0 hold only -inf scores
 * (max unchanged) and +0 terms. Without a window and without missing storage this is the
 * plain causal order over 0..p. Every step depends only on p, the window, head_dim and
 * the stored K/V bytes, never on which other rows or keys share a tile, so decode,
 * chunked prefill and batches give the same bits.
 *
 * THE PAIR ORDER ("bf16 pair" attention numerics; bf16 K/V only; attention_pair.c spells
 * it out in scalar code). What AMX-BF16 tiles of one pair per step compute on the device's
 * Xeon (RNE(c + RNE(a0 b0 + a1 b1)), docs/PERFORMANCE.md "AMX-BF16: what tdpbf16ps
 * computes there"), so that tiles, their AVX-512 emulation and the scalar reference agree
 * bit for bit. Steps 2 and 3 are the canonical ones above; 1 and 4 become:
 *  1'. q rounded to bf16 (round to nearest even, an input denormal to signed zero, NaN
 *      quieted: vcvtneps2bf16). hp = head_dim rounded up to even (zero-padded). For each
 *      key, acc = +0; for pair i = 0 .. hp/2 - 1 in increasing order:
 *        t = ftz(fma(q[2i+1], k[2i+1], ftz(q[2i] * k[2i])));  acc = ftz(acc + t)
 *      (q[2i] k[2i] is exact in f32 for bf16 operands, so t is the pair's exact sum
 *      rounded once); then s_j = ftz(acc * scale), and the soft-cap as in step 1.
 *  4'. p_j = e_j rounded to bf16 as q was (l stays the sum of the unrounded e_j). Per
 *      output d, acc[d] = +0 and for the pairs of positions (j, j+1), j even, from b0 to
 *      pos in increasing order: t = ftz(fma(p_{j+1}, v_{j+1}[d], ftz(p_j * v_j[d])));
 *      acc[d] = ftz(acc[d] + t), where a position after pos contributes p = v = 0 (never
 *      read); out[d] = acc[d] / l.
 * Every operand is read denormals-as-zero (daz: |x| < FLT_MIN reads as a zero of its
 * sign) and ftz flushes a result below FLT_MIN to a zero of its sign: the tiles' DAZ/FTZ,
 * MXCSR.DAZ|FTZ in the AVX-512 emulation. A product below FLT_MIN (operands near 2^-63)
 * is flushed before the pair's sum here; whether the tiles do the same was not
 * characterized (no attention input is that small).
 *
 * THE TILE ORDER ("bf16 tile" attention numerics, issue 12; bf16 K/V only; AMX-BF16
 * machines only: x86/attention_tile.c). Defined by the CPU's own tile instruction rather
 * than by a formula: let T32(c; a[0..32), b[0..32)) be what one tdpbf16ps of K = 32 (16
 * pairs) writes into one C element holding c, with A row a and B column b (on the device's
 * Xeon a fused sum of the 32 products with one rounding of finite internal width, not
 * characterized, so this order has no software emulation and exists only on tiles; its
 * numerics id names the CPU's family and model). Tile rows and columns are independent:
 * a C element depends only on its c, its A row and its B column, so a row computes the
 * same bits alone (a decode row: a tile with 1-2 valid rows) and among any other rows.
 * Steps 2 and 3 are the canonical ones; 1 and 4 become:
 *  1T. q rounded to bf16 as in step 1' (once per row); hd32 = head_dim rounded up to 32,
 *      q and k zero-padded to it. Per key: c = +0; for s = 0 .. hd32/32 - 1 in order,
 *      c = T32(c; q[32s .. 32s+32), k[32s .. 32s+32)); then s_j = c * scale (one f32
 *      product, MXCSR as the caller's: round to nearest, no flushing), the soft-cap and
 *      the mask as in step 1.
 *  4T. p_j = e_j rounded to bf16 as q was (vcvtneps2bf16: nearest even, denormals to
 *      zero), p_j = +0 for every key the row does not take (outside b0 .. pos, masked,
 *      without storage). For each block of 256 keys aligned to position 0
 *      (256n .. 256n+255) from the one holding b0 to the one holding pos, in increasing
 *      order, and each output d: T = the chain of 8 steps T32(.. T32(+0; p[256n ..
 *      +32), v[256n .. +32)[d]) ..; p[256n+224 .. +32), v[256n+224 .. +32)[d]) (all 8
 *      always, p = v = +0 past the keys stored, so the tile never reads unwritten cache
 *      memory: NaN bits there would survive 0 * NaN), acc[d] = acc[d] + T (f32, from
 *      acc = +0); out[d] = acc[d] / l (l the sum of the unrounded e_j). The tile's
 *      internal rounding thus only ever sees one block's 256 products, never the running
 *      output, and the f32 combine costs one add per 256 products. A block whose p are
 *      all +0 gives T = +0 and leaves acc unchanged (acc is never -0), so computing or skipping it (a prefill
 *      row tile holding rows that end before the block, or a decode row) is the same.
 * Every path (prefill tiles, decode, chunks, threads, prefix hits) follows exactly this,
 * so rows agree bit for bit across them on one CPU model; other CPU models, or CPUs
 * without the tiles, run the f32 order (another numerics id).
 */
#ifndef CAIRN_COMPUTE_CPU_ATTENTION_IMPL_H
#define CAIRN_COMPUTE_CPU_ATTENTION_IMPL_H

#include "compute/cpu/attention.h"
#include "compute/cpu/kernels_impl.h"

typedef struct attn_impl {
    const char *name;
    /* (K/V rows are widened by the kernel implementation's types[kv_type].rows_to_f32.) */
    /* s[k] = step 1 for the 16 f32 key rows kb[k][hd] (rows are contiguous, stride hd). */
    void (*scores16)(float *s, const float *q, const float *kb, int hd, float scale);
    /* Steps 2 and 3 over s[0..n): replaces s[j] by e_j for j < n and returns l. s must have
     * room up to n rounded up to 16 (the padding may be read, never written). */
    float (*softmax)(float *s, int n);
    /* Step 4 for `rows` rows sharing one count: acc[r*lda + d] = fma(p[r*ldp + j],
     * vb[j*hd + d], acc[r*lda + d]) for j < cnt in increasing order, d < hd. */
    void (*pv)(float *acc, int lda, const float *p, int ldp, int rows, int cnt,
               const float *vb, int hd);
    /* Optional (NULL: the driver scores every row with scores16). Step 1 for `rows` rows
     * against one group of 16 keys given transposed: kt[d*16 + k] = element d of key k for
     * d < hdp (hd rounded up to 16; zero for d >= hd), q rows zero-padded to hdp, row r at
     * q + r*hdp; s[r*lds + k] = the score of row r and key k. The same bits as scores16:
     * lane l of the canonical dot is a vector over the 16 keys, so the tree's levels are
     * vertical adds and one K load serves every row of the call. */
    void (*scores16_t)(float *s, size_t lds, const float *q, int rows, const float *kt, int hdp, float scale);
    /* With scores16_t: kt [hdp][16] = the transpose of kb [16][hd] (zeros for d >= hd). */
    void (*transpose16)(float *kt, const float *kb, int hd);
    /* Step 1q (q8_0 K), optional (NULL, or q8_usable() false: attn__generic's). The 16 keys
     * of a group come as int8 q, kq [16][hd], and are transposed by q8_transpose16 into
     * kt [hd4p][16] int32 (hd4p = hd / 4 rounded up to 16; kt[d4*16 + k] = bytes
     * 4*d4 .. 4*d4 + 3 of key k, zero for d4 >= hd / 4); their block scales kdt [nb][16]
     * (nb = hd / 32, kdt[b*16 + k] = kd_b of key k). The query rows: qq [rows][hd] int8,
     * qd [rows][nb] f32 scales, qsum [rows][nb] = the sum of qq over each block.
     * scores_q8t writes s[r*lds + k] = step 1q's score of row r and key k. */
    bool (*q8_usable)(void);
    void (*q8_transpose16)(int32_t *kt, const int8_t *kq, int hd);
    void (*scores_q8t)(float *s, size_t lds, const int8_t *qq, const float *qd, const int32_t *qsum, int rows,
                       const int32_t *kt, const float *kdt, int hd, float scale);
    /* Optional (NULL: attn__generic's): the q8_0 K rows src[r * stride] (hd elements of
     * one head, r < rows) split into kq [key0 + r][hd] int8 and their block scales widened
     * from f16 into kd[((key0 + r) / 16) * nb * 16 + b * 16 + (key0 + r) % 16]. Moves and
     * exact conversions only. */
    void (*q8_split)(int8_t *kq, float *kd, const void *src, size_t stride, int rows, int hd, int key0);
    /* Optional (NULL: a copy, zero-padded): writes one query row for scores16_t into its
     * slot of hdp floats (the pair order's: hdp bf16 values, q rounded, zero past hd). */
    void (*pack_q)(float *slot, const float *q, int hd, int hdp);
    /* The rendition of the pair order of this implementation (NULL: attn__generic_pair). */
    const struct attn_impl *pair;
    /* The tile order (step 4T), where an implementation renders it. Its scores16_t then
     * serves every row, whatever the count (step 1T on the tiles), and takes kt as the
     * transpose16 of the 16 keys' bf16 rows read as hd / 2 dwords: kt[i * 16 + k] = the
     * pair (2i, 2i+1) of key k (zero for i >= hd / 2, up to hd / 2 rounded up to 16); its
     * transpose16 moves bits only. pv_tile, for the block of keys [k0, k0 + nk) (k0 a
     * multiple of 256, nk <= 256) and `rows` rows of G consecutive rows per query: row r
     * takes the keys [k0 + j0[r / G], k0 + j1[r / G]) (empty when j0 >= j1) with e_j at
     * p[r * ldp + j - k0] (f32, rounded to bf16 here), the others p = +0; vb [nk][hd]
     * the block's V rows as stored (bf16); acc[r * lda + d] += T of step 4T for every
     * row with a key in the block (the others unchanged). head_dim even, <= 256. */
    void (*pv_tile)(float *acc, int lda, const float *p, size_t ldp, int rows, int G, const int *j0, const int *j1,
                    int nk, const uint16_t *vb, int hd);
    /* Optional (with pv_tile): the tile configuration loaded / released around one unit
     * of the driver (attention.c's attend_tile) on the calling thread. */
    void (*tiles_begin)(void);
    void (*tiles_end)(void);
    /* The tile order's rendition this implementation runs when the tile order is on
     * (NULL: the process's, kern__attn_tile_impl(); tests put a modelled one here). */
    const struct attn_impl *tile;
    /* Optional (with pv_tile; NULL: every unit packs V itself). pv_pack: V of one block of
     * 256 keys, vb [nk][hd] bf16 as stored, packed as pv_tile packs it: vp [128][hd16]
     * dwords (hd16 = hd rounded up to 16), vp[i * hd16 + d] = v[2i][d] | v[2i+1][d] << 16,
     * zero for positions >= nk and d >= hd; vp 64-byte aligned. pv_tile_vp: pv_tile for a
     * block given so packed, whose positions outside [a, b) read as +0 (so that a block
     * packed once for a whole call serves each unit with exactly the operands pv_tile
     * would have packed for it). Moves only. */
    void (*pv_pack)(uint32_t *vp, const uint16_t *vb, int nk, int hd);
    void (*pv_tile_vp)(float *acc, int lda, const float *p, size_t ldp, int rows, int G, const int *j0,
                       const int *j1, const uint32_t *vp, int a, int b, int hd);
} attn_impl_t;

/* Portable rendition (attention.c): the scalar dot, kern__exp and fmaf. Each kernel
 * implementation names its attention rendition (kern_impl_t.attn): x86/attention_avx2.c,
 * x86/attention_avx512.c. */
extern const attn_impl_t attn__generic;

/* The pair order spelled out in scalar code (attention_pair.c): scores16, softmax (the
 * canonical one, then e_j rounded to bf16), pv; pack_q for any rendition's scores16_t. */
extern const attn_impl_t attn__generic_pair;
void attn__pair_pack_q(float *slot, const float *q, int hd, int hdp);
/* x rounded to bf16 as step 1' says, returned as f32 (exposed for tests). */
float attn__bf16_round(float x);

/* Whether bf16 K/V attention runs the pair order in this process (attention_pair.c):
 * off by default (not yet verified on AMX hardware); CAIRN_ATTN_BF16PAIR=auto: where the
 * CPU's AMX-BF16 tiles passed their self-check against the emulation (x86/attention_amx.c)
 * (the intended default); =1 everywhere (the tiles where they passed, else the AVX-512
 * emulation, or the scalar reference without AVX-512). Decided once,
 * on the first call; thread-safe. kern__attn_pair_set (tests only): 1 / 0 forces the mode
 * from now on, -1 returns to the decision above. Changing it while a backend exists
 * makes its numerics id lie: tests set it before they create one. */
bool kern__attn_pair_on(void);
void kern__attn_pair_set(int mode);
/* Whether bf16 K/V attention runs the tile order in this process (attention_pair.c;
 * wins over the pair order). CAIRN_ATTN_BF16TILE: "0" off; unset (the default), "auto" or
 * "1" on where the CPU has AMX-BF16 tiles granted to the process and they
 * passed their sanity check (x86/attention_tile.c); the tile order cannot run without
 * tiles, so elsewhere it stays off. Decided once, on the first call; thread-safe.
 * kern__attn_tile_set (tests only): 1 / 0 forces the mode (1 with no rendition to run,
 * neither kern__attn_tile_impl() nor the impl's `tile`, aborts in attention), -1 returns
 * to the decision. kern__attn_tile_impl: the process's rendition (NULL without usable
 * tiles). kern__attn_tile_cpu: the CPU's name in the numerics id ("x86f6m207"; "none"
 * without tiles). kern__attn_tile_state: the decision in words. */
bool kern__attn_tile_on(void);
void kern__attn_tile_set(int mode);
const attn_impl_t *kern__attn_tile_impl(void);
const char *kern__attn_tile_cpu(void);
const char *kern__attn_tile_state(void);

/* The tile order's K/V packed once per call and K/V head (attention.c, attn_seg_t) where a
 * sequence of the call has several tiles: CAIRN_ATTN_TILE_PACK=0 turns it off (every unit
 * then loads its own K/V: the same bits). kern__attn_tile_pack_set (tests, benchmarks): 1 /
 * 0 forces it, -1 returns to the knob. kern__attn_tile_pack_drop frees the pack buffer kept
 * between calls (tests: the next call allocates again). Thread-safe. The phases: packing
 * all K/V heads at 8K positions takes 4 MiB per head of 128 (K and V). */
void kern__attn_tile_pack_set(int mode);
void kern__attn_tile_pack_drop(void);
/* Tests: the bytes packed at a time (0: the default, 64 MiB); a smaller one runs the K/V
 * heads in phases (or, below one head, keeps the per-unit loads). */
void kern__attn_tile_pack_budget(size_t bytes);

/* The pair order's AMX-BF16 tiles (x86/attention_amx.c) allowed (the default) or not (the
 * emulation computes every row: benchmarks, tests); and what serves the pair order on
 * this CPU, in words. No-ops / "no tiles in this build" without x86. */
void kern__attn_pair_tiles_allow(bool allow);
const char *kern__attn_pair_tiles_state(void);

/* attn_forward on an explicit kernel implementation (the CPU backend's) with window,
 * scale and soft-cap (math NULL: all zero). */
void kern__attn_forward(const kern_impl_t *k, cairn_thread_pool_t *tp, const attn_cfg_t *cfg,
                        const attn_math_t *math, int layer, const attn_query_t *queries, int n_queries);

#endif
