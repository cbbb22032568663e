/*
 * attention.cu — paged grouped-query attention on tensor cores (mma.sync m16n8k16 bf16,
 * float32 accumulation): a decode kernel, a prefill kernel and the merge of key splits.
 *
 * Model. Query rows are grouped by sequence (cuda_internal.h: rows, groups, items, the
 * per-block K/V pointer table the host builds from the accessor). A warp computes one
 * 16-row mma tile: `tokens_per_warp` consecutive query tokens times the group_size query
 * heads that share one K/V head (GQA: each K/V chunk is read once for all of them). It
 * walks the keys of its splits (cuda_attn_split_for(pos) keys each: item.keys) in chunks
 * of 16 keys, block-aligned from position 0, with the online softmax (base 2) — S = Q K^T,
 * mask, running max and sum, P rounded to bf16, acc += P V — and writes each split's
 * partial (acc, m, l) per (row, head). The merge kernel then combines each row's splits
 * in split order; with a.fused_merge (a tuning, off by default: 0.5-2.4% slower in device
 * run 24), in a call of decode rows only, the decode kernel's last block of each (row, K/V
 * head group) does that itself with all its threads instead (merge_last, merge_block: the
 * same fold per element, merge_step, so the same bits). K/V chunks
 * are staged through shared memory by cp.async (three stages).
 * Three ways to map work onto blocks (attn_kernel's MODE): DECODE, each warp streams its
 * own item (a run of consecutive splits of one sequence; the warps of a block are
 * consecutive K/V heads); HEADS, blocks of a.heads consecutive K/V heads (all of them, or
 * a divisor) per decode item, the block's threads copying those heads' contiguous part
 * of each K/V row into one stage per chunk; PREFILL, the four warps of a
 * block share each chunk of one head (one item of up to 4 tiles of one sequence).
 *
 * Bit-exactness. Both kernels run the same per-row sequence of operations: the same
 * chunks in the same order (a chunk processed for another row of the tile but invisible to
 * this one leaves its state bit-for-bit unchanged: max unchanged, scale exactly 1, p = 0,
 * and keys past the tile's last position are zero-filled so 0 * V is 0), the same split
 * boundaries and the same merge. An mma output element depends only on its own row of A,
 * so a row's bits do not depend on which other rows share its tile: decode, prefill in any
 * chunking, and any batch give the same logits. Arithmetic that must not be contracted
 * uses __f*_rn; exp is ex2.approx (one instruction, the same everywhere).
 *
 * Layouts: a K/V block holds [block][n_kv_heads][head_dim] bf16 (kv_stride elements per
 * position). In shared memory a chunk is K [16][head_dim] then V [16][head_dim], 16-byte
 * units XOR-swizzled per row (swz) so the fragment reads below are free of bank conflicts.
 * The head dims of a thread's fragments are permuted (K: dims 32j + 8c + 0..7 per lane
 * quad position c; V and the output: dims (hd/4)c + 0..hd/4-1), the same permutation for
 * Q, so every load is 16 bytes.
 *
 * Thread-safety: launchers only enqueue on the given stream.
 */
#include <cuda_bf16.h>
#include <math.h>

#include "compute/cuda/cuda_internal.h"

namespace {

constexpr int kStages = 3;
constexpr int kPtrBytes = 2 * (CUDA_ATTN_MAX_SPLIT / CUDA_ATTN_CHUNK + 1) * sizeof(void *);
constexpr float kNegInf = -INFINITY;

__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* A 16-byte copy into shared memory; PF 1: the L2 told to fetch the whole 256-byte block
 * holding it (the rows are streamed whole). A template parameter, not a run-time flag: a
 * run-time choice between the two cost the all-heads kernel 57 registers and ~20% of its
 * speed (device run 13). */
template <int PF> __device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0; /* 0: zero-fill, nothing read */
    if constexpr (PF)
        asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(n) : "memory");
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}

__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* 16-byte unit `unit` of row `row` in a shared-memory chunk (U units per row). */
template <int U> __device__ __forceinline__ int swz(int row, int unit)
{
    if constexpr (U >= 8)
        return unit ^ (((row >> 1) & 1) | ((((row >> 2) ^ row) & 1) << 2));
    else
        return unit;
}

/* NT: the n-tiles of the PV product (output dims) this warp holds, HD / 8 unless the
 * tile's output columns are spread over HD / 8 / NT warps (each holds n-tiles j0 ..
 * j0 + NT - 1; acc[j] is n-tile j0 + j). */
template <int HD, int NT = HD / 8> struct Tile {
    float acc[NT][4]; /* n-tile j0 + j: (row g: dims D(2c)+j0+j, D(2c+1)+j0+j), (row g+8: same), D = hd/8 */
    float m[2], l[2]; /* rows g, g+8: running max (base 2) and this thread's part of the sum */
};

template <int HD, int NT> __device__ __forceinline__ void tile_reset(Tile<HD, NT> &t)
{
#pragma unroll
    for (int j = 0; j < NT; j++)
        t.acc[j][0] = t.acc[j][1] = t.acc[j][2] = t.acc[j][3] = 0.0f;
    t.m[0] = t.m[1] = kNegInf;
    t.l[0] = t.l[1] = 0.0f;
}

/* Queues a chunk (16 keys; kp, vp: its first key's K and V rows of this head) into stage:
 * 2 x 16 rows x hd/8 units, threads tid, tid + nthr, ...; keys past kmax are zero-filled. */
template <int HD, int PF>
__device__ __forceinline__ void issue_chunk(unsigned char *stage, const __nv_bfloat16 *kp, const __nv_bfloat16 *vp,
                                            int key0, int kmax, int kv_stride, int tid, int nthr)
{
    constexpr int U = HD / 8;
#pragma unroll 4
    for (int idx = tid; idx < 2 * 16 * U; idx += nthr) {
        const int tensor = idx / (16 * U), rem = idx % (16 * U), row = rem / U, unit = rem % U;
        const __nv_bfloat16 *base = tensor ? vp : kp;
        const bool valid = key0 + row <= kmax;
        const unsigned char *src = (const unsigned char *)(base + (size_t)row * kv_stride) + unit * 16;
        unsigned char *dst = stage + tensor * 16 * HD * 2 + row * HD * 2 + swz<U>(row, unit) * 16;
        cp_async16<PF>(dst, valid ? (const void *)src : (const void *)base, valid);
    }
}

/* Queues a chunk of n_kv consecutive K/V heads (16 keys; kp, vp: the K and V rows of its
 * first key and first head) into stage, by the block's 32 * n_kv threads: each row's part
 * is n_kv * hd * 2 contiguous bytes (all heads: the whole row, so the block reads each K/V
 * block as one contiguous run).
 * Layout: K [n_kv][16][hd] then V [n_kv][16][hd], each head's [16][hd] swizzled as
 * issue_chunk's, so a warp sees its head's part exactly as a per-warp stage. Each thread
 * keeps one 16-byte column (x) of the rows and takes every (32 / U)th tensor row. */
template <int HD, int PF, int W>
__device__ __forceinline__ void issue_chunk_heads(unsigned char *stage, const __nv_bfloat16 *kp,
                                                  const __nv_bfloat16 *vp, int key0, int kmax, int kv_stride,
                                                  int n_kv, int tid)
{
    /* W warps per head: 32 W n_kv threads, each takes U / W of the 32 tensor rows. */
    constexpr int U = HD / 8, STEP = 32 * W / U;
    static_assert(U % W == 0, "W divides the units of a row");
    const int RU = n_kv * U, x = tid % RU, head = x / U, unit = x % U, tr0 = tid / RU;
    const size_t half = (size_t)n_kv * 16 * HD * 2;
#pragma unroll
    for (int k = 0; k < U / W; k++) {
        const int tr = tr0 + k * STEP, tensor = tr >> 4, row = tr & 15;
        const __nv_bfloat16 *base = tensor ? vp : kp;
        const bool valid = key0 + row <= kmax;
        const unsigned char *src = (const unsigned char *)(base + (size_t)row * kv_stride) + x * 16;
        unsigned char *dst = stage + tensor * half + head * 16 * HD * 2 + row * HD * 2 + swz<U>(row, unit) * 16;
        cp_async16<PF>(dst, valid ? (const void *)src : (const void *)base, valid);
    }
}

/*
 * One chunk for one warp's tile: S = Q K^T, mask (rows g and g+8 at positions pg, pg8),
 * online softmax, acc += P V. key0 is the chunk's first key; ks, vs its K and V
 * [16][hd] in shared memory. LO: rows g+8 hold no query (decode with at most 8 query heads
 * per K/V head): their softmax is not computed and their P is zero, which is what the
 * full path gives them (no visible key: max -inf, p = 0), so rows g keep the same bits and
 * the warp issues fewer instructions (each decode warp is bound by its own instruction
 * stream: device run 18). NT < HD / 8: the warp computes the PV product for its n-tiles
 * j0 .. j0 + NT - 1 only (S, the softmax, m and l in full, as every warp of its head
 * does: the same bits in each), so W = HD / 8 / NT warps share one head's chunk and each
 * output element is the same mma of the same operands as with one warp.
 */
template <int HD, bool LO = false, int NT = HD / 8>
__device__ __forceinline__ void tile_chunk(const unsigned char *ks, const unsigned char *vs,
                                           const uint32_t (&qf)[HD / 16][4], Tile<HD, NT> &t, int key0, int pg,
                                           int pg8, const cuda_attn_args_t &a, int lane, int j0 = 0)
{
    static_assert(NT == HD / 8 || (NT >= 4 && NT % 4 == 0 && HD >= 64), "a warp's n-tiles: whole 8-byte V words");
    constexpr int U = HD / 8, DPT = HD / 8;
    const int g = lane >> 2, c = lane & 3;

    float s[2][4];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
        const int row = 8 * i + g;
#pragma unroll
        for (int jp = 0; jp < HD / 32; jp++) {
            const uint4 kk = *reinterpret_cast<const uint4 *>(ks + row * HD * 2 + swz<U>(row, 4 * jp + c) * 16);
            mma_bf16(s[i], qf[2 * jp], kk.x, kk.y);
            mma_bf16(s[i], qf[2 * jp + 1], kk.z, kk.w);
        }
    }

    /* Scale (soft-cap), mask, row max over the 16 keys (4 here, then the quad). */
    constexpr int NH = LO ? 1 : 2; /* tile row halves holding queries */
    float mx[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int h = 0; h < NH; h++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int key = key0 + 8 * i + 2 * c + e, p = h ? pg8 : pg;
                float x;
                if (a.softcap > 0.0f) /* c tanh(score / c), then to base 2 */
                    x = __fmul_rn(__fmul_rn(a.softcap, tanhf(__fdiv_rn(__fmul_rn(s[i][2 * h + e], a.scale),
                                                                        a.softcap))),
                                  1.44269504f);
                else
                    x = __fmul_rn(s[i][2 * h + e], a.scale_log2);
                const bool vis = key <= p && (a.window == 0 || key > p - a.window);
                x = vis ? x : kNegInf;
                s[i][2 * h + e] = x;
                mx[h] = fmaxf(mx[h], x);
            }
    float alpha[2] = {1.0f, 1.0f};
    bool rescale[2] = {false, false};
#pragma unroll
    for (int h = 0; h < NH; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        const float mo = t.m[h], mn = fmaxf(mo, mx[h]);
        alpha[h] = mn == mo ? 1.0f : ex2(__fsub_rn(mo, mn));
        /* acc * alpha changes acc only when the max moved from a finite one: alpha is
         * exactly 1 otherwise, or (the row's first visible key) acc is still all +0. */
        rescale[h] = mn != mo && mo != kNegInf;
        t.m[h] = mn;
    }

    /* P (bf16, the A fragment of the PV product) and its row sums. */
    uint32_t pa[4] = {0u, 0u, 0u, 0u}; /* LO: rows g+8 stay +0 (bf16 zeros) */
    float psum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int h = 0; h < NH; h++) {
            const bool none = t.m[h] == kNegInf;
            const float p0 = none ? 0.0f : ex2(__fsub_rn(s[i][2 * h], t.m[h]));
            const float p1 = none ? 0.0f : ex2(__fsub_rn(s[i][2 * h + 1], t.m[h]));
            __nv_bfloat162 pb = __floats2bfloat162_rn(p0, p1);
            pa[2 * i + h] = *reinterpret_cast<uint32_t *>(&pb);
            const float2 pf = __bfloat1622float2(pb);
            psum[h] = __fadd_rn(psum[h], __fadd_rn(pf.x, pf.y));
        }
#pragma unroll
    for (int h = 0; h < NH; h++)
        t.l[h] = __fadd_rn(__fmul_rn(t.l[h], alpha[h]), psum[h]);
    /* Rescaling by exactly 1, or +0 by anything finite, changes nothing: each half of the
     * accumulators (rows g, g+8) is rescaled only where its row's max moved from a finite
     * value (in decode, rows g+8 and the rows past the group are empty: never), the same
     * bits either way. */
    if (rescale[0]) {
#pragma unroll
        for (int j = 0; j < NT; j++) {
            t.acc[j][0] = __fmul_rn(t.acc[j][0], alpha[0]);
            t.acc[j][1] = __fmul_rn(t.acc[j][1], alpha[0]);
        }
    }
    if (!LO && rescale[1]) {
#pragma unroll
        for (int j = 0; j < NT; j++) {
            t.acc[j][2] = __fmul_rn(t.acc[j][2], alpha[1]);
            t.acc[j][3] = __fmul_rn(t.acc[j][3], alpha[1]);
        }
    }

    /* V rows 2c, 2c+1, 2c+8, 2c+9, dims DPT g + j0 .. DPT g + j0 + NT - 1 (NT / 2 words each). */
    uint32_t vw[4][NT / 2];
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const int key = (kk < 2 ? 2 * c : 2 * c + 8) + (kk & 1);
        if constexpr (NT < DPT && NT % 8) { /* NT = 4: 8 bytes, half of 16-byte unit (g DPT + j0) / 8 */
            const int unit = g * (DPT / 8) + j0 / 8;
            const uint2 v = *reinterpret_cast<const uint2 *>(vs + key * HD * 2 + swz<U>(key, unit) * 16 + (j0 % 8) * 2);
            vw[kk][0] = v.x;
            vw[kk][1] = v.y;
        } else if constexpr (NT < DPT) {
#pragma unroll
            for (int u = 0; u < NT / 8; u++) {
                const uint4 v = *reinterpret_cast<const uint4 *>(vs + key * HD * 2 +
                                                                 swz<U>(key, g * (DPT / 8) + j0 / 8 + u) * 16);
                vw[kk][4 * u] = v.x;
                vw[kk][4 * u + 1] = v.y;
                vw[kk][4 * u + 2] = v.z;
                vw[kk][4 * u + 3] = v.w;
            }
        } else if constexpr (HD >= 64) {
#pragma unroll
            for (int u = 0; u < DPT / 8; u++) {
                const uint4 v = *reinterpret_cast<const uint4 *>(vs + key * HD * 2 +
                                                                 swz<U>(key, g * (DPT / 8) + u) * 16);
                vw[kk][4 * u] = v.x;
                vw[kk][4 * u + 1] = v.y;
                vw[kk][4 * u + 2] = v.z;
                vw[kk][4 * u + 3] = v.w;
            }
        } else {
            const uint2 v = *reinterpret_cast<const uint2 *>(vs + key * HD * 2 + g * DPT * 2);
            vw[kk][0] = v.x;
            vw[kk][1] = v.y;
        }
    }
#pragma unroll
    for (int j = 0; j < NT; j++) { /* j0 is even: n-tile j0 + j has j's parity */
        const unsigned sel = (j & 1) ? 0x7632u : 0x5410u;
        const uint32_t b0 = __byte_perm(vw[0][j / 2], vw[1][j / 2], sel);
        const uint32_t b1 = __byte_perm(vw[2][j / 2], vw[3][j / 2], sel);
        mma_bf16(t.acc[j], pa, b0, b1);
    }
}

/* The Q fragments of rows g and g+8 (NULL: an unused row, zeros). */
template <int HD>
__device__ __forceinline__ void load_q(uint32_t (&qf)[HD / 16][4], const float *qg, const float *qg8, int lane)
{
    const int c = lane & 3;
#pragma unroll
    for (int j = 0; j < HD / 16; j++) {
        const int d0 = 32 * (j / 2) + 8 * c + 4 * (j % 2);
        float4 x = qg ? *reinterpret_cast<const float4 *>(qg + d0) : make_float4(0.f, 0.f, 0.f, 0.f);
        float4 y = qg8 ? *reinterpret_cast<const float4 *>(qg8 + d0) : make_float4(0.f, 0.f, 0.f, 0.f);
        qf[j][0] = pack_bf16(x.x, x.y);
        qf[j][1] = pack_bf16(y.x, y.y);
        qf[j][2] = pack_bf16(x.z, x.w);
        qf[j][3] = pack_bf16(y.z, y.w);
    }
}

/* Writes the split's partial of tile row (g or g+8) for query row `qi`, head `head`: the
 * accumulators of n-tiles j0 .. j0 + NT - 1, and m and l from the warp of n-tile 0. */
template <int HD, int NT>
__device__ __forceinline__ void store_partial(const Tile<HD, NT> &t, int h, const cuda_attn_row_t &row, int split,
                                              int head, const cuda_attn_args_t &a, int lane, int j0 = 0)
{
    constexpr int DPT = HD / 8;
    const int c = lane & 3;
    float l = t.l[h];
    l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
    l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 2));
    if (split < row.s_first || split >= row.s_first + row.n_splits)
        return;
    float *rec = a.partials + ((size_t)(row.part + split - row.s_first) * a.n_heads + head) * CUDA_ATTN_REC(HD);
    float *o = rec + (HD / 4) * c + j0;
    if constexpr (NT >= 4) {
#pragma unroll
        for (int k = 0; k < NT / 4; k++) {
            *reinterpret_cast<float4 *>(o + 4 * k) =
                make_float4(t.acc[4 * k][2 * h], t.acc[4 * k + 1][2 * h], t.acc[4 * k + 2][2 * h],
                            t.acc[4 * k + 3][2 * h]);
            *reinterpret_cast<float4 *>(o + DPT + 4 * k) =
                make_float4(t.acc[4 * k][2 * h + 1], t.acc[4 * k + 1][2 * h + 1], t.acc[4 * k + 2][2 * h + 1],
                            t.acc[4 * k + 3][2 * h + 1]);
        }
    } else {
#pragma unroll
        for (int j = 0; j < NT; j++) {
            o[j] = t.acc[j][2 * h];
            o[DPT + j] = t.acc[j][2 * h + 1];
        }
    }
    if (c == 0 && j0 == 0) {
        rec[HD] = t.m[h];
        rec[HD + 1] = l;
    }
}

/* N consecutive floats from the L2 (__ldcg) in one load: N = 4 (16 bytes) or 2 (8 bytes;
 * p aligned to them: partial records are 16-byte aligned, CUDA_ATTN_REC), else one by one. */
template <int N> __device__ __forceinline__ void ld_vec(float (&v)[N], const float *p)
{
    if constexpr (N == 4) {
        const float4 x = __ldcg(reinterpret_cast<const float4 *>(p));
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    } else if constexpr (N == 2) {
        const float2 x = __ldcg(reinterpret_cast<const float2 *>(p));
        v[0] = x.x, v[1] = x.y;
    } else {
#pragma unroll
        for (int d = 0; d < N; d++)
            v[d] = __ldcg(p + d);
    }
}

/* One step of the merge fold (merge_row_head's and merge_block's: the same operations in
 * the same order, so the same bits): split (ms, ls, v) into (M, L, acc); a split with no
 * visible key (ms -inf) is skipped, the first one taken as it is. */
template <int N>
__device__ __forceinline__ void merge_step(float &M, float &L, float (&acc)[N], bool &first, float ms, float ls,
                                           const float (&v)[N])
{
    if (ms == kNegInf)
        return;
    if (first) {
        M = ms;
        L = ls;
#pragma unroll
        for (int d = 0; d < N; d++)
            acc[d] = v[d];
        first = false;
        return;
    }
    const float mn = fmaxf(M, ms);
    const float a1 = M == mn ? 1.0f : ex2(__fsub_rn(M, mn)), a2 = ms == mn ? 1.0f : ex2(__fsub_rn(ms, mn));
    L = __fadd_rn(__fmul_rn(L, a1), __fmul_rn(ls, a2));
#pragma unroll
    for (int d = 0; d < N; d++)
        acc[d] = __fadd_rn(__fmul_rn(acc[d], a1), __fmul_rn(v[d], a2));
    M = mn;
}

/* The splits of (row, query head h) merged in split order into the row's output, by one
 * warp (lane: dims lane * hd/32 ..). Loads run ahead of the (sequential) arithmetic: each
 * lane holds one split's m and l, and the accumulators of AHEAD splits are loaded before
 * they are combined (one load latency per AHEAD splits: a 32K-token row has 64); AHEAD
 * changes no bit, the fold is the same. */
template <int HD, int AHEAD>
__device__ __forceinline__ void merge_row_head(const cuda_attn_args_t &a, const cuda_attn_row_t &row, int h, int lane)
{
    constexpr int DPL = HD / 32;
    float acc[DPL], M = kNegInf, L = 0.0f;
    bool first = true;
#pragma unroll
    for (int d = 0; d < DPL; d++)
        acc[d] = 0.0f;
    const float *base = a.partials + (size_t)row.part * a.n_heads * CUDA_ATTN_REC(HD) + (size_t)h * CUDA_ATTN_REC(HD);
    const size_t stride = (size_t)a.n_heads * CUDA_ATTN_REC(HD); /* between consecutive splits */
    for (int k0 = 0; k0 < row.n_splits; k0 += 32) {
        const int cnt = min(32, row.n_splits - k0);
        float mk = kNegInf, lk = 0.0f;
        if (lane < cnt) {
            mk = __ldcg(base + (size_t)(k0 + lane) * stride + HD);
            lk = __ldcg(base + (size_t)(k0 + lane) * stride + HD + 1);
        }
        for (int kb = 0; kb < cnt; kb += AHEAD) {
            float v[AHEAD][DPL];
#pragma unroll
            for (int j = 0; j < AHEAD; j++) {
                if (kb + j < cnt)
                    ld_vec<DPL>(v[j], base + (size_t)(k0 + kb + j) * stride + lane * DPL);
                else
#pragma unroll
                    for (int d = 0; d < DPL; d++)
                        v[j][d] = 0.0f;
            }
#pragma unroll
            for (int j = 0; j < AHEAD; j++) {
                const float ms = __shfl_sync(0xffffffffu, mk, (kb + j) & 31);
                const float ls = __shfl_sync(0xffffffffu, lk, (kb + j) & 31);
                if (kb + j < cnt)
                    merge_step<DPL>(M, L, acc, first, ms, ls, v[j]);
            }
        }
    }
    float *out = row.out + (size_t)h * HD + lane * DPL;
#pragma unroll
    for (int d = 0; d < DPL; d++)
        out[d] = first ? 0.0f : __fdiv_rn(acc[d], L);
}

/* Lets the next kernel on the stream, launched as a programmatic dependent (the merge),
 * start its blocks; they wait in dep_wait until this grid completed (sm_90). */
__device__ __forceinline__ void dep_launch()
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Waits until the grid this one depends on completed and its writes are visible. */
__device__ __forceinline__ void dep_wait()
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* One warp per (row, head). Launched as a programmatic dependent of the attention
 * kernels: the row (uploaded before them) is read first, the partials only once they
 * completed. */
template <int HD> __global__ void merge_kernel(const cuda_attn_args_t a)
{
    const int w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    const bool mine = w < a.n_rows * a.n_heads;
    cuda_attn_row_t row;
    if (mine)
        row = a.rows[w / a.n_heads];
    dep_wait();
    if (mine)
        merge_row_head<HD, CUDA_ATTN_MERGE_AHEAD>(a, row, w % a.n_heads, lane);
}

/*
 * The merge of query heads [h0, h0 + nh) of one row by a whole block (the fused merge's
 * last block): unit u is 4 output dims (head h0 + u / (hd/4), dims 4 (u % (hd/4)) ..);
 * each thread takes UA units at a time (tid + k * nthreads, k < UA) and folds the row's
 * splits into each in split order with merge_step, the merge kernel's fold per element
 * (the same operations in the same order: the same bits). The loads of AHEAD splits of
 * all UA units (m and l in one 8-byte load, 4 accumulators in one 16-byte load) are
 * issued before any is combined: at 32 x 4K (4 splits, 32 heads, 256 threads) one round.
 */
template <int HD, int UA, int AHEAD>
__device__ __forceinline__ void merge_block(const cuda_attn_args_t &a, const cuda_attn_row_t &row, int h0, int nh)
{
    constexpr int UPH = HD / 4; /* units per head */
    const size_t stride = (size_t)a.n_heads * CUDA_ATTN_REC(HD);
    const float *base = a.partials + (size_t)row.part * stride;
    const int n_units = nh * UPH, nthr = blockDim.x;
    for (int ub = threadIdx.x; ub < n_units; ub += UA * nthr) {
        float acc[UA][4], M[UA], L[UA];
        bool first[UA];
        const float *p[UA];
#pragma unroll
        for (int k = 0; k < UA; k++) {
            const int u = ub + k * nthr;
            acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.0f;
            M[k] = kNegInf;
            L[k] = 0.0f;
            first[k] = true;
            p[k] = u < n_units ? base + (size_t)(h0 + u / UPH) * CUDA_ATTN_REC(HD) : nullptr;
        }
        for (int kb = 0; kb < row.n_splits; kb += AHEAD) {
            float v[UA][AHEAD][4], ml[UA][AHEAD][2];
#pragma unroll
            for (int k = 0; k < UA; k++)
#pragma unroll
                for (int j = 0; j < AHEAD; j++)
                    if (p[k] && kb + j < row.n_splits) {
                        const float *r = p[k] + (size_t)(kb + j) * stride;
                        ld_vec<4>(v[k][j], r + 4 * ((ub + k * nthr) % UPH));
                        ld_vec<2>(ml[k][j], r + HD);
                    }
#pragma unroll
            for (int k = 0; k < UA; k++)
#pragma unroll
                for (int j = 0; j < AHEAD; j++)
                    if (p[k] && kb + j < row.n_splits)
                        merge_step<4>(M[k], L[k], acc[k], first[k], ml[k][j][0], ml[k][j][1], v[k][j]);
        }
#pragma unroll
        for (int k = 0; k < UA; k++) {
            const int u = ub + k * nthr;
            if (!p[k])
                continue;
            float *out = row.out + (size_t)(h0 + u / UPH) * HD + 4 * (u % UPH);
            *reinterpret_cast<float4 *>(out) =
                first[k] ? make_float4(0.f, 0.f, 0.f, 0.f)
                         : make_float4(__fdiv_rn(acc[k][0], L[k]), __fdiv_rn(acc[k][1], L[k]),
                                       __fdiv_rn(acc[k][2], L[k]), __fdiv_rn(acc[k][3], L[k]));
        }
    }
}

/*
 * The fused merge, at the end of a decode block (a.fused_merge): the block has stored the
 * partials of its splits of row it.row0 for K/V heads [kv0, kv0 + n_kv); the last of the
 * row's n_items blocks of those heads to finish merges the row's query heads of them with
 * all its threads (merge_block: the merge kernel's fold per element, so the same bits; in
 * session 7 one warp per (row, head) at a time ran merge_row_head, 3-5% slower than the
 * merge kernel in device run 23). The ticket: every thread fences its partial stores, the
 * block synchronizes (so every warp's stores are fenced before the ticket is taken; the
 * session 7 code took it without that barrier), then one atomicInc per block on the
 * (row, kv0) counter, which wraps to 0 at the last one (so it is 0 again for the next
 * call, also in a replayed CUDA graph); the last block fences again before it reads (the
 * reads go through the L2: __ldcg). A row of one work item needs no ticket: its block is
 * the only one.
 */
template <int HD, int UA>
__device__ __forceinline__ void merge_last(const cuda_attn_args_t &a, int row_idx, int kv0, int n_kv)
{
    const cuda_attn_row_t row = a.rows[row_idx];
    if (row.n_items > 1) {
        __threadfence();
        __syncthreads();
        bool mine = false;
        if (threadIdx.x == 0)
            mine = atomicInc(reinterpret_cast<unsigned *>(a.tickets + (size_t)row_idx * a.n_kv_heads + kv0),
                             (unsigned)row.n_items - 1) == (unsigned)row.n_items - 1;
        if (!__syncthreads_or(mine))
            return;
        __threadfence();
    } else {
        __syncthreads(); /* the other warps' partial stores are visible in the block */
    }
    merge_block<HD, UA, CUDA_ATTN_MERGE_BLOCK_AHEAD>(a, row, kv0 * a.group_size, n_kv * a.group_size);
}

/* The attention kernel's three ways of mapping work onto blocks (see attn_kernel). */
enum Mode { DECODE, PREFILL, HEADS };

template <int M> constexpr int mode_threads()
{
    return M == HEADS ? 32 * CUDA_ATTN_MAX_HEADS_WARPS : 32 * CUDA_ATTN_WARPS;
}

/*
 * One work item's splits for the tiles of this block.
 *   PREFILL: one item (one split) of one K/V head; the block's four warps take tokens
 *            [w R, (w+1) R) of it and share each chunk.
 *   DECODE:  each warp runs its own item (the block's warps are consecutive K/V heads of
 *            one item) with its own stages.
 *   HEADS:   one decode item for all K/V heads: warp h computes head h, and the block's
 *            threads copy each chunk of every head together (issue_chunk_heads), so each
 *            K/V block is read as one contiguous run instead of one 2 * hd-byte row piece
 *            per warp at a time.
 * Decode items (DECODE, HEADS) hold a run of consecutive splits: the copies flow on across
 * a split boundary, where the finished split's partial is stored and the tile reset (the
 * next split then starts from the same state as if it began a work item, so neither the
 * run's length nor the mode changes a bit). Each block first lets the merge kernel launch
 * (programmatic dependent launch), so the merge's blocks are scheduled while the last
 * ones here still stream. PF: cp_async16's L2 prefetch hint (no bit changes).
 */
template <int HD, int MODE, int PF, bool LO, int W = 1>
__global__ void __launch_bounds__(W > 1 ? 32 * CUDA_ATTN_HEAD_WARPS_MAX(W) : mode_threads<MODE>(),
                                  W > 1 ? CUDA_ATTN_HEAD_WARPS_BLOCKS(W) : MODE == HEADS ? 1 : 2)
    attn_kernel(const cuda_attn_args_t a)
{
    static_assert(!LO || MODE != PREFILL, "LO: decode only (one query token per item)");
    static_assert(W == 1 || MODE == HEADS, "W warps per head: HEADS only");
    constexpr int NT = HD / 8 / W; /* this warp's n-tiles of the PV product: j0 = sub * NT */
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int HSTAGE = 2 * 16 * HD * 2; /* one head's chunk: K then V */
    dep_launch();
    const int stage_bytes = MODE == HEADS ? a.heads * HSTAGE : HSTAGE;
    const int warp = threadIdx.x / 32 / W, lane = threadIdx.x % 32, j0 = (threadIdx.x / 32) % W * NT;
    int item_idx, head, head0 = 0, tok0, ntok, tid, nthr;
    unsigned char *ring;
    if constexpr (MODE == PREFILL) {
        item_idx = blockIdx.x / a.n_kv_heads;
        head = blockIdx.x % a.n_kv_heads;
        ring = smem;
        tid = threadIdx.x;
        nthr = blockDim.x;
    } else if constexpr (MODE == HEADS) {
        const int hg = a.n_kv_heads / a.heads;
        item_idx = blockIdx.x / hg;
        head0 = (blockIdx.x % hg) * a.heads;
        head = head0 + warp;
        ring = smem;
        tid = threadIdx.x;
        nthr = blockDim.x;
    } else {
        const int wpc = blockDim.x / 32, hg = a.n_kv_heads / wpc;
        item_idx = blockIdx.x / hg;
        head = (blockIdx.x % hg) * wpc + warp;
        ring = smem + warp * (kStages * HSTAGE + kPtrBytes);
        tid = lane;
        nthr = 32;
    }
    /* After the stages: each chunk's K and V row pointers for this head (HEADS: of the
     * block's first head; NULL: no storage). */
    const __nv_bfloat16 **cptr = reinterpret_cast<const __nv_bfloat16 **>(ring + kStages * stage_bytes);
    const cuda_attn_item_t it = a.items[item_idx];
    const int R = a.tokens_per_warp, G = a.group_size;
    tok0 = MODE == PREFILL ? warp * R : 0;
    ntok = it.n_rows - tok0;
    ntok = ntok < 0 ? 0 : ntok > R ? R : ntok;

    const cuda_attn_group_t grp = a.groups[a.rows[it.row0].group];
    int key_lo = it.split * it.keys;
    const int key_hi = min((it.split + it.n_split) * it.keys, it.pos_hi + 1);
    if (a.window > 0)
        key_lo = max(key_lo, it.pos_lo - a.window + 1);
    const int c_lo = key_lo / CUDA_ATTN_CHUNK, c_hi = (key_hi + CUDA_ATTN_CHUNK - 1) / CUDA_ATTN_CHUNK;

    /* This warp's rows g and g+8 of the tile: token r / G, query head within the group r % G. */
    const int g = lane >> 2;
    int pg = -1, pg8 = -1, qi_g = -1, qi_g8 = -1;
    const float *qp_g = nullptr, *qp_g8 = nullptr;
    {
        const int r0 = g, r1 = g + 8;
        if (r0 < R * G && r0 / G < ntok) {
            qi_g = it.row0 + tok0 + r0 / G;
            pg = a.rows[qi_g].pos;
            qp_g = a.rows[qi_g].q + (size_t)(head * G + r0 % G) * HD;
        }
        if (r1 < R * G && r1 / G < ntok) {
            qi_g8 = it.row0 + tok0 + r1 / G;
            pg8 = a.rows[qi_g8].pos;
            qp_g8 = a.rows[qi_g8].q + (size_t)(head * G + r1 % G) * HD;
        }
    }
    uint32_t qf[HD / 16][4];
    load_q<HD>(qf, qp_g, qp_g8, lane);
    Tile<HD, NT> t;
    tile_reset<HD, NT>(t);

    /* The chunk pointers, read from the block table once per item (the copies then never
     * wait on a dependent load). */
    const void *const *table = a.table + 2 * (size_t)grp.table;
    const size_t head_off = (size_t)(MODE == HEADS ? head0 : head) * HD;
    for (int i = tid; i < c_hi - c_lo; i += nthr) {
        const int key0 = (c_lo + i) * CUDA_ATTN_CHUNK, b = key0 / a.block;
        const __nv_bfloat16 *kb = (const __nv_bfloat16 *)table[2 * b], *vb = (const __nv_bfloat16 *)table[2 * b + 1];
        const size_t off = (size_t)(key0 % a.block) * a.kv_stride + head_off;
        cptr[2 * i] = kb ? kb + off : nullptr;
        cptr[2 * i + 1] = kb ? vb + off : nullptr;
    }
    auto issue = [&](int ci, int st) {
        const __nv_bfloat16 *kp = cptr[2 * (ci - c_lo)], *vp = cptr[2 * (ci - c_lo) + 1];
        if (!kp)
            return;
        if constexpr (MODE == HEADS)
            issue_chunk_heads<HD, PF, W>(ring + st * stage_bytes, kp, vp, ci * CUDA_ATTN_CHUNK, it.pos_hi,
                                      a.kv_stride, a.heads, tid);
        else
            issue_chunk<HD, PF>(ring + st * stage_bytes, kp, vp, ci * CUDA_ATTN_CHUNK, it.pos_hi, a.kv_stride, tid,
                                nthr);
    };
    auto sync = [] {
        if constexpr (MODE == DECODE)
            __syncwarp();
        else
            __syncthreads();
    };
    auto store = [&](int split) {
        if (ntok <= 0)
            return;
        if (qi_g >= 0)
            store_partial<HD, NT>(t, 0, a.rows[qi_g], split, head * G + g % G, a, lane, j0);
        else
            store_partial<HD, NT>(t, 0, a.rows[it.row0], -1, 0, a, lane, j0); /* keeps the quad's shuffles matched */
        if constexpr (LO) /* no row g+8 holds a query in any lane */
            return;
        if (qi_g8 >= 0)
            store_partial<HD, NT>(t, 1, a.rows[qi_g8], split, head * G + (g + 8) % G, a, lane, j0);
        else
            store_partial<HD, NT>(t, 1, a.rows[it.row0], -1, 0, a, lane, j0);
    };
    /* This warp's K and V [16][hd] within a stage. */
    const int k_off = MODE == HEADS ? warp * 16 * HD * 2 : 0;
    const int v_off = MODE == HEADS ? a.heads * 16 * HD * 2 + warp * 16 * HD * 2 : 16 * HD * 2;

    sync();
#pragma unroll
    for (int st = 0; st < kStages - 1; st++) {
        if (c_lo + st < c_hi)
            issue(c_lo + st, st);
        cp_commit();
    }
    /* The first chunk of the next split, and the split being computed. */
    const int chunks_per_split = it.keys / CUDA_ATTN_CHUNK;
    int split = key_lo / it.keys, boundary = (split + 1) * chunks_per_split;
    for (int ci = c_lo; ci < c_hi; ci++) {
        cp_wait<kStages - 2>();
        sync();
        const int nxt = ci + kStages - 1; /* into the stage chunk ci - 1 held */
        if (nxt < c_hi)
            issue(nxt, (nxt - c_lo) % kStages);
        cp_commit();
        if (ci == boundary) { /* decode runs only: prefill items hold one split */
            store(split);
            tile_reset<HD, NT>(t);
            split++;
            boundary += chunks_per_split;
        }
        if (ntok > 0 && cptr[2 * (ci - c_lo)]) {
            const unsigned char *st = ring + ((ci - c_lo) % kStages) * stage_bytes;
            tile_chunk<HD, LO, NT>(st + k_off, st + v_off, qf, t, ci * CUDA_ATTN_CHUNK, pg, pg8, a, lane, j0);
        }
    }
    cp_wait<0>();
    store(split);
    if constexpr (MODE != PREFILL)
        if (a.fused_merge)
            /* W > 1: the kernel's registers capped at 128-168 (units at once: fewer) */
            merge_last<HD, (W > 1 ? 1 : CUDA_ATTN_MERGE_BLOCK_UNITS)>(a, it.row0, MODE == HEADS ? head0 : head - warp,
                                                                 MODE == HEADS ? a.heads : blockDim.x / 32);
}

int decode_wpc(int n_kv_heads) { return n_kv_heads % 4 == 0 ? 4 : n_kv_heads % 2 == 0 ? 2 : 1; }

template <int HD, int MODE, int PF, bool LO, int W = 1>
int launch(const cuda_attn_args_t *a, int n_items, cudaStream_t s)
{
    if (n_items <= 0)
        return 0;
    constexpr int PART = kStages * 2 * 16 * HD * 2 + kPtrBytes;
    const int warps = MODE == PREFILL ? CUDA_ATTN_WARPS : MODE == HEADS ? a->heads * W : decode_wpc(a->n_kv_heads);
    /* PREFILL and HEADS: one ring of (the block's heads') stages per block; DECODE: one per warp. */
    const size_t smem = MODE == PREFILL ? (size_t)PART
                        : MODE == HEADS ? cuda_attn_heads_smem(a->heads, HD)
                                        : (size_t)warps * PART;
    static size_t attr = 0; /* per instantiation: the largest dynamic size set so far (one device) */
    if (smem > attr) {
        cudaError_t e = cudaFuncSetAttribute(attn_kernel<HD, MODE, PF, LO, W>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return (int)e;
        attr = smem;
    }
    const size_t blocks = MODE == HEADS     ? (size_t)n_items * (a->n_kv_heads / a->heads)
                          : MODE == PREFILL ? (size_t)n_items * a->n_kv_heads
                                            : (size_t)n_items * (a->n_kv_heads / warps);
    attn_kernel<HD, MODE, PF, LO, W><<<(unsigned)blocks, warps * 32, smem, s>>>(*a);
    return (int)cudaGetLastError();
}

template <int MODE, int PF, bool LO = false>
int dispatch_hd(const cuda_attn_args_t *a, int hd, int n_items, cudaStream_t s)
{
    switch (hd) {
    case 32: return launch<32, MODE, PF, LO>(a, n_items, s);
    case 64: return launch<64, MODE, PF, LO>(a, n_items, s);
    case 128: return launch<128, MODE, PF, LO>(a, n_items, s);
    }
    return (int)cudaErrorInvalidValue;
}

/* HEADS without the L2 hint (the default decode tuning) and at most 8 query heads per K/V
 * head: the LO kernels (tile_chunk); the others keep the full tile (the same bits; each
 * instantiation adds ~0.4 MiB to every binary). */
template <int MODE> int dispatch(const cuda_attn_args_t *a, int hd, int n_items, cudaStream_t s)
{
    if constexpr (MODE == HEADS)
        if (!a->l2_prefetch && !a->full_tile && a->group_size <= 8) {
            /* W warps per head: head_dim 128 only (cuda_attn_head_warps_ok) */
            if (a->head_warps == 2 && hd == 128)
                return launch<128, MODE, 0, true, 2>(a, n_items, s);
            if (a->head_warps == 4 && hd == 128)
                return launch<128, MODE, 0, true, 4>(a, n_items, s);
            if (a->head_warps > 1)
                return (int)cudaErrorInvalidValue;
            return dispatch_hd<MODE, 0, true>(a, hd, n_items, s);
        }
    if (MODE == HEADS && a->head_warps > 1) /* PREFILL ignores head_warps; DECODE has none (heads 0) */
        return (int)cudaErrorInvalidValue;
    return a->l2_prefetch ? dispatch_hd<MODE, 1>(a, hd, n_items, s) : dispatch_hd<MODE, 0>(a, hd, n_items, s);
}

} // namespace

extern "C" {

int cuda_attn_decode(const cuda_attn_args_t *a, int head_dim, int n_items, cudaStream_t s)
{
    if (a->heads && (!cuda_attn_heads_fit(a->heads, head_dim) || a->n_kv_heads % a->heads))
        return (int)cudaErrorInvalidValue;
    if (a->heads && a->head_warps > 1 && !cuda_attn_head_warps_ok(a->head_warps, a->heads, head_dim, a->group_size))
        return (int)cudaErrorInvalidValue;
    return a->heads ? dispatch<HEADS>(a, head_dim, n_items, s) : dispatch<DECODE>(a, head_dim, n_items, s);
}

int cuda_attn_prefill(const cuda_attn_args_t *a, int head_dim, int n_items, cudaStream_t s)
{
    return dispatch<PREFILL>(a, head_dim, n_items, s);
}

int cuda_attn_merge(const cuda_attn_args_t *a, int head_dim, cudaStream_t s)
{
    const size_t warps = (size_t)a->n_rows * a->n_heads;
    if (!warps)
        return 0;
    /* A programmatic dependent launch: its blocks may start while the attention kernel's
     * last ones run (merge_kernel waits for that grid before reading partials). */
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((warps + 3) / 4));
    cfg.blockDim = dim3(128);
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    switch (head_dim) {
    case 32: return (int)cudaLaunchKernelEx(&cfg, merge_kernel<32>, *a);
    case 64: return (int)cudaLaunchKernelEx(&cfg, merge_kernel<64>, *a);
    case 128: return (int)cudaLaunchKernelEx(&cfg, merge_kernel<128>, *a);
    }
    return (int)cudaErrorInvalidValue;
}

} // extern "C"
