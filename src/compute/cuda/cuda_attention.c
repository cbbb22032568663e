/*
 * cuda_attention.c — the host half of the CUDA backend's attention (attention.cu): turns
 * one call's query rows and their K/V accessors into the work lists the kernels read.
 *
 * Per call: adjacent query rows with the same accessor form a group (one sequence); the
 * group's block table is read through the accessor, one call per block of `block`
 * positions (the K and V base pointers of each block, NULL for a block without storage;
 * blocks below every row's window are not asked for), so block ids and tables never
 * leave the host. Every row's visible keys [max(0, pos - W + 1), pos] are cut at
 * multiples of its split size (a function of its position: cuda_attn_split_for); a group
 * of one row (decode) gets one work item per run of consecutive splits (a block of
 * `heads` K/V heads, or one warp), a group of several rows (prefill) one item per split
 * and per run of at most 4 * tokens_per_warp rows of one split size (one block each).
 * Everything is written into one pinned slot and copied to the device in one transfer,
 * then the decode kernel, the prefill kernel and the merge run (tuning fused_merge, in a
 * call of decode rows only: the decode kernel merges, no merge kernel).
 *
 * Invariant: the split size is cuda_attn_split_for(pos) in both modes (see
 * cuda_backend.h; with CAIRN_CUDA_LONG_SPLITS=0 the short split at every position), so a
 * row's splits, and therefore its bits, depend on its own position only; the tuning (run,
 * heads per block, L2 prefetch, full tile, separate or fused merge) changes no bit.
 * Thread-safety: one thread at a time per backend object.
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "compute/cuda/cuda_host.h"
#include "util/util.h"

struct compute_attn {
    compute_attn_params_t p;
    int group_size, tokens_per_warp;
    float scale;
    int split_keys[3], split_at[2]; /* keys per split: [0] below position at[0], [1] below at[1], [2] from there */
    cuda_attn_tuning_t tune;               /* heads resolved: 0 or a divisor of n_kv_heads that fits */
    int *g_first, *g_count, *g_min, *g_max; /* [g_cap] scratch: per group of the call */
    int g_cap;
};

int cuda__attn_create(cuda_backend_t *b, const compute_attn_params_t *p, compute_attn_t **out)
{
    *out = NULL;
    if (p->n_heads < 1 || p->n_kv_heads < 1 || p->n_heads % p->n_kv_heads || p->head_dim < 1 ||
        p->max_positions < 1 || p->window < 0 || !(p->scale >= 0.0f) || !(p->softcap >= 0.0f))
        return CAIRN_EINVAL;
    const int g = p->n_heads / p->n_kv_heads;
    if (p->kv_type != CAIRN_DTYPE_BF16 || !cuda_attn_head_dim_ok(p->head_dim) || g > 16) {
        cairn_log(CAIRN_LOG_ERROR,
                  "cuda backend: no attention kernel for %s K/V, head_dim %d, %d query heads per K/V head "
                  "(it has bf16 K/V, head_dim 32, 64 or 128, at most 16 query heads per K/V head)",
                  cairn_dtype_name(p->kv_type), p->head_dim, g);
        return CAIRN_EUNSUPPORTED;
    }
    compute_attn_t *a = cairn_calloc(1, sizeof(*a));
    if (!a)
        return CAIRN_ENOMEM;
    a->p = *p;
    a->group_size = g;
    a->tokens_per_warp = 16 / g;
    a->scale = p->scale > 0.0f ? p->scale : 1.0f / sqrtf((float)p->head_dim);
    a->split_keys[0] = CUDA_ATTN_SPLIT_SHORT;
    a->split_keys[1] = CUDA_ATTN_SPLIT_MID;
    a->split_keys[2] = CUDA_ATTN_SPLIT_LONG;
    /* CAIRN_CUDA_LONG_SPLITS=0: short everywhere (numerics revision 1) */
    a->split_at[0] = b->long_splits ? CUDA_ATTN_SPLIT_MID_AT : INT_MAX;
    a->split_at[1] = b->long_splits ? CUDA_ATTN_SPLIT_AT : INT_MAX;
    cuda__attn_set_tuning(a, NULL);
    *out = a;
    return CAIRN_OK;
}

void cuda__attn_destroy(cuda_backend_t *b, compute_attn_t *a)
{
    (void)b;
    cairn_free(a->g_first);
    cairn_free(a->g_count);
    cairn_free(a->g_min);
    cairn_free(a->g_max);
    cairn_free(a);
}

/* The four per-group arrays grown together to n entries (a->g_cap counts all four). */
static bool grow_groups(compute_attn_t *a, int n)
{
    int **arr[4] = {&a->g_first, &a->g_count, &a->g_min, &a->g_max};
    int cap = a->g_cap;
    for (int i = 0; i < 4; i++) {
        cap = a->g_cap; /* each array grows from the same capacity to the same new one */
        if (cairn_grow_array_int((void **)arr[i], &cap, n, sizeof(int), 64))
            return false;
    }
    a->g_cap = cap;
    return true;
}

static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

static bool split_ok(int s) { return s >= CUDA_ATTN_CHUNK && s <= CUDA_ATTN_MAX_SPLIT && s % CUDA_ATTN_CHUNK == 0; }

void cuda__attn_set_split(compute_attn_t *a, int s0, int s1, int s2, int at1, int at2)
{
    CAIRN_ASSERT(split_ok(s0) && split_ok(s1) && split_ok(s2) && at1 >= 0 && at1 <= at2);
    a->split_keys[0] = s0;
    a->split_keys[1] = s1;
    a->split_keys[2] = s2;
    a->split_at[0] = at1;
    a->split_at[1] = at2;
}

void cuda__attn_set_tuning(compute_attn_t *a, const cuda_attn_tuning_t *t)
{
    const cuda_attn_tuning_t def = CUDA_ATTN_TUNING_DEFAULT;
    if (!t)
        t = &def;
    CAIRN_ASSERT(t->run >= 0 && (t->run & (t->run - 1)) == 0 && (t->l2_prefetch == 0 || t->l2_prefetch == 1) &&
                 (t->full_tile == 0 || t->full_tile == 1) && t->head_warps >= 0 && t->head_warps <= 4 &&
                 t->head_warps != 3 && (t->fused_merge == 0 || t->fused_merge == 1));
    a->tune = *t;
    const int n_kv = a->p.n_kv_heads;
    int h = t->heads < 0 ? n_kv : t->heads;
    /* The most heads per block, at most h, that divide n_kv and fit; 0 (blocks of 4 warps) if none. */
    while (h > 0 && (n_kv % h || !cuda_attn_heads_fit(h, a->p.head_dim)))
        h--;
    a->tune.heads = h;
}

/* Keys per split of a row at pos (the invariant rule: cuda_attn_split_for's constants). */
static int split_of(const compute_attn_t *a, int pos)
{
    return a->split_keys[pos < a->split_at[0] ? 0 : pos < a->split_at[1] ? 1 : 2];
}

/* The end of the prefill run of rows starting at j (of a group ending at `end`): at most
 * T rows, all of one split size. */
static int run_end(const compute_attn_t *a, const attn_query_t *q, int j, int end, int T)
{
    const int s = split_of(a, q[j].pos);
    int i = j + 1;
    while (i < end && i < j + T && split_of(a, q[i].pos) == s)
        i++;
    return i;
}

/* Warps per head of decode blocks of nh heads: the tuning's where the kernel has them.
 * cuda__attn_plan applies them only where the call's blocks of single splits are fewer
 * than the device's SMs (device run 21: 4 warps per head gain 1.49x at 1 x 32K, 16
 * splits of 8 heads, 1.52x at 1 x 8K, but lose 20% at 4 x 32K, 512 such blocks). */
static int head_warps(const compute_attn_t *a, int nh)
{
    const int w = a->tune.head_warps; /* the kernels have them with the tile that skips its empty rows */
    return w > 1 && !a->tune.l2_prefetch && !a->tune.full_tile &&
                   cuda_attn_head_warps_ok(w, nh, a->p.head_dim, a->group_size)
               ? w
               : 1;
}

/* Decode blocks of nh heads (w warps each) one SM holds at once (shared memory;
 * registers: up to 255 per thread and 8 warps with w = 1; w > 1: the kernel's cap,
 * CUDA_ATTN_HEAD_WARPS_BLOCKS(w) blocks of the most warps). */
static int heads_per_sm(int nh, int w, int hd)
{
    int by_smem = (int)(CUDA_ATTN_SMEM_MAX / (cuda_attn_heads_smem(nh, hd) + 1024));
    int by_regs = w > 1 ? CUDA_ATTN_HEAD_WARPS_BLOCKS(w) * CUDA_ATTN_HEAD_WARPS_MAX(w) / (nh * w) : 8 / nh;
    int n = by_smem < by_regs ? by_smem : by_regs;
    return n < 1 ? 1 : n;
}

/* Warps per head the call's decode blocks of nh heads run: the tuning's (head_warps) where
 * its blocks of single splits (n_single = single-split items * n_kv_heads / nh) are fewer
 * than the SMs, one otherwise (cuda__attn_plan sets the kernel's head_warps so). */
static int call_warps(const cuda_backend_t *b, const compute_attn_t *a, int nh, size_t n_single)
{
    return n_single < (size_t)b->sm_count ? head_warps(a, nh) : 1;
}

/* Decode block slots of the device for blocks of nh heads of a call with n_single blocks
 * of single splits: as many as its SMs hold at once (with the warps per head the call
 * runs: session 8; before, those of the tuning even where the call then ran one warp per
 * head, so at 32 x 3K (96 items of 1024 keys) blocks of 2 heads seemed to fill the device
 * at 231 slots when they hold 462: 256 blocks of 2 warps, 2.57 TB/s, against 3.35 with
 * 768 blocks of one head, device run 24), of which 7/8 is enough (one wave of long items
 * beat two waves of short ones in device run 7b). */
static size_t heads_slots(const cuda_backend_t *b, const compute_attn_t *a, int nh, size_t n_single)
{
    const size_t n = (size_t)b->sm_count * heads_per_sm(nh, call_warps(b, a, nh, n_single), a->p.head_dim);
    return n - n / 8;
}

/* Decode splits per work item for blocks of nh heads (0: of 4 warps, each its own head,
 * two per SM): the longest run (a power of two, at most CUDA_ATTN_MAX_SPLIT keys) that
 * still gives (nearly) every block slot a work item (items[k]: the call's decode items
 * with runs of 2^k splits; n_kv_heads / nh blocks per item), so each block's copies flow
 * across split boundaries instead of ending and refilling at each; 1 when even single
 * splits leave slots empty. The run never changes a bit (attention.cu). */
static int pick_run(const cuda_backend_t *b, const compute_attn_t *a, int nh, const size_t *items, int n_k)
{
    const int wpc = a->p.n_kv_heads % 4 == 0 ? 4 : a->p.n_kv_heads % 2 == 0 ? 2 : 1;
    const size_t per_item = (size_t)(a->p.n_kv_heads / (nh ? nh : wpc));
    const size_t slots = nh ? heads_slots(b, a, nh, items[0] * per_item) : (size_t)b->sm_count * 2;
    for (int k = n_k - 1; k > 0; k--)
        if (items[k] * per_item >= slots)
            return 1 << k;
    return 1;
}

bool cuda__attn_plan(cuda_backend_t *b, compute_attn_t *a, int layer, const attn_query_t *q, int n,
                     cuda_attn_plan_t *plan)
{
    memset(plan, 0, sizeof(*plan));
    if (n <= 0)
        return false;
    if (!grow_groups(a, n)) {
        cuda__fail(b, CAIRN_ENOMEM, "attention work lists", 0);
        return false;
    }
    const int W = a->p.window, T = CUDA_ATTN_WARPS * a->tokens_per_warp;
    /* Groups: adjacent rows of one accessor. */
    int ng = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || q[i].kv != q[i - 1].kv) {
            a->g_first[ng] = i;
            a->g_count[ng] = 0;
            a->g_min[ng] = q[i].pos;
            a->g_max[ng] = q[i].pos;
            ng++;
        }
        int g = ng - 1;
        a->g_count[g]++;
        if (q[i].pos < a->g_min[g])
            a->g_min[g] = q[i].pos;
        if (q[i].pos > a->g_max[g])
            a->g_max[g] = q[i].pos;
    }
    /* The block size: the run the accessor reports at position 0. */
    void *k0, *v0;
    const attn_kv_t *kv0 = q[0].kv;
    const int P = kv0->rows(kv0->ctx, layer, 0, &k0, &v0);
    if (P < CUDA_ATTN_CHUNK || P % CUDA_ATTN_CHUNK) {
        cuda__fail(b, CAIRN_EUNSUPPORTED, "attention (K/V blocks must hold a multiple of 16 positions)", 0);
        return false;
    }
    /* Decode items per run length 2^k (k < n_k), then the run. */
    enum { MAX_K = 4 };
    size_t dec_k[MAX_K] = {0};
    int n_k = 1;
    int s_min = a->split_keys[0];
    for (int i = 1; i < 3; i++)
        s_min = a->split_keys[i] < s_min ? a->split_keys[i] : s_min;
    while (n_k < MAX_K && (s_min << n_k) <= CUDA_ATTN_MAX_SPLIT)
        n_k++;
    size_t n_blocks = 0, n_records = 0, n_dec = 0, n_pre = 0;
    for (int g = 0; g < ng; g++) {
        n_blocks += (size_t)(a->g_max[g] / P + 1);
        const int f = a->g_first[g], cnt = a->g_count[g];
        for (int i = f; i < f + cnt; i++) {
            const int lo = W > 0 && q[i].pos - W + 1 > 0 ? q[i].pos - W + 1 : 0, S = split_of(a, q[i].pos);
            n_records += (size_t)(q[i].pos / S - lo / S + 1);
        }
        if (cnt == 1) {
            const int lo = W > 0 && q[f].pos - W + 1 > 0 ? q[f].pos - W + 1 : 0, S = split_of(a, q[f].pos);
            const size_t ns = (size_t)(q[f].pos / S - lo / S + 1), r_max = CUDA_ATTN_MAX_SPLIT / S;
            for (int k = 0; k < n_k; k++) {
                const size_t r = ((size_t)1 << k) < r_max ? ((size_t)1 << k) : r_max;
                dec_k[k] += (ns + r - 1) / r;
            }
        } else {
            for (int j = f, je; j < f + cnt; j = je) {
                je = run_end(a, q, j, f + cnt, T);
                const int S = split_of(a, q[j].pos);
                int lo_pos = q[j].pos, hi_pos = q[j].pos;
                for (int i = j; i < je; i++) {
                    lo_pos = q[i].pos < lo_pos ? q[i].pos : lo_pos;
                    hi_pos = q[i].pos > hi_pos ? q[i].pos : hi_pos;
                }
                const int lo = W > 0 && lo_pos - W + 1 > 0 ? lo_pos - W + 1 : 0;
                n_pre += (size_t)(hi_pos / S - lo / S + 1);
            }
        }
    }
    /* Heads per decode block: the tuning's when its run is fixed; otherwise the most, up
     * to the tuning's, whose blocks of single splits still give (nearly) every block slot
     * of the device one, and one head per block (the most blocks) when none does (a few
     * rows: a batch-1 decode at 32K positions has 16 splits of 2048 keys). Then the run. */
    int nh = a->tune.heads;
    if (nh && !a->tune.run) {
        int h = nh;
        while (h > 1 && (a->p.n_kv_heads % h ||
                         dec_k[0] * (size_t)(a->p.n_kv_heads / h) <
                             heads_slots(b, a, h, dec_k[0] * (size_t)(a->p.n_kv_heads / h))))
            h--;
        nh = h;
    }
    int split_run = a->tune.run ? a->tune.run : pick_run(b, a, nh, dec_k, n_k);
    if (split_run > 1 << (n_k - 1))
        split_run = 1 << (n_k - 1);
    for (int k = 0; k < n_k; k++)
        if (split_run == 1 << k)
            n_dec = dec_k[k];
    CAIRN_ASSERT(split_run * s_min <= CUDA_ATTN_MAX_SPLIT && (split_run & (split_run - 1)) == 0);
    const size_t off_groups = align16((size_t)n * sizeof(cuda_attn_row_t));
    const size_t off_dec = off_groups + align16((size_t)ng * sizeof(cuda_attn_group_t));
    const size_t off_pre = off_dec + n_dec * sizeof(cuda_attn_item_t);
    const size_t off_table = align16(off_pre + n_pre * sizeof(cuda_attn_item_t));
    const size_t bytes = off_table + 2 * n_blocks * sizeof(void *);
    int slot;
    unsigned char *h = cuda__stage(b, bytes, &slot);
    if (!h)
        return false;
    cuda_attn_row_t *rows = (cuda_attn_row_t *)h;
    cuda_attn_group_t *groups = (cuda_attn_group_t *)(h + off_groups);
    cuda_attn_item_t *dec = (cuda_attn_item_t *)(h + off_dec), *pre = (cuda_attn_item_t *)(h + off_pre);
    const void **table = (const void **)(h + off_table);
    int part = 0, tab = 0;
    size_t di = 0, pi = 0;
    for (int g = 0; g < ng; g++) {
        const int f = a->g_first[g], cnt = a->g_count[g], nb = a->g_max[g] / P + 1;
        const attn_kv_t *kv = q[f].kv;
        groups[g] = (cuda_attn_group_t){tab, nb};
        for (int blk = 0; blk < nb; blk++) {
            void *kp = NULL, *vp = NULL;
            const int pos = blk * P;
            if (!(W > 0 && pos + P - 1 <= a->g_min[g] - W)) { /* some row's window reaches the block */
                const int run = kv->rows(kv->ctx, layer, pos, &kp, &vp);
                if (run < P && pos + run <= a->g_max[g]) {
                    cuda__fail(b, CAIRN_EUNSUPPORTED, "attention (a K/V run shorter than its block)", 0);
                    return false;
                }
            }
            table[2 * (size_t)(tab + blk)] = kp;
            table[2 * (size_t)(tab + blk) + 1] = vp;
        }
        tab += nb;
        for (int i = f; i < f + cnt; i++) {
            const int lo = W > 0 && q[i].pos - W + 1 > 0 ? q[i].pos - W + 1 : 0, S = split_of(a, q[i].pos);
            const int s_first = lo / S, ns = q[i].pos / S - s_first + 1;
            rows[i] = (cuda_attn_row_t){q[i].q, q[i].out, q[i].pos, g, s_first, ns, part, 0};
            part += ns;
        }
        if (cnt == 1) {
            const int end = rows[f].s_first + rows[f].n_splits, S = split_of(a, q[f].pos);
            const int r = split_run < CUDA_ATTN_MAX_SPLIT / S ? split_run : CUDA_ATTN_MAX_SPLIT / S;
            for (int s = rows[f].s_first; s < end; s += r) {
                dec[di++] = (cuda_attn_item_t){f, 1, s, q[f].pos, q[f].pos, end - s < r ? end - s : r, S, 0};
                rows[f].n_items++;
            }
        } else {
            for (int j = f, je; j < f + cnt; j = je) {
                je = run_end(a, q, j, f + cnt, T);
                const int m = je - j, S = split_of(a, q[j].pos);
                int lo_pos = q[j].pos, hi_pos = q[j].pos;
                for (int i = j; i < j + m; i++) {
                    lo_pos = q[i].pos < lo_pos ? q[i].pos : lo_pos;
                    hi_pos = q[i].pos > hi_pos ? q[i].pos : hi_pos;
                }
                const int lo = W > 0 && lo_pos - W + 1 > 0 ? lo_pos - W + 1 : 0;
                for (int s = lo / S; s <= hi_pos / S; s++)
                    pre[pi++] = (cuda_attn_item_t){j, m, s, lo_pos, hi_pos, 1, S, 0};
            }
        }
    }
    CAIRN_ASSERT(di == n_dec && pi == n_pre && (size_t)part == n_records);
    unsigned char *d = cuda__stage_to_blob(b, slot, bytes);
    const size_t rec_bytes = n_records * (size_t)a->p.n_heads * CUDA_ATTN_REC(a->p.head_dim) * sizeof(float);
    if (!d || !cuda__grow(b, (void **)&b->partials, &b->partials_cap, rec_bytes))
        return false;
    /* The fused merge (tuning fused_merge; decode rows only): its counters, zeroed when
     * (re)allocated. */
    const bool fused = a->tune.fused_merge && n_pre == 0;
    if (fused) {
        const size_t t_bytes = (size_t)n * a->p.n_kv_heads * sizeof(int), had = b->tickets_cap;
        if (!cuda__grow(b, (void **)&b->tickets, &b->tickets_cap, t_bytes))
            return false;
        if (b->tickets_cap != had &&
            !cuda__check(b, cudaMemsetAsync(b->tickets, 0, b->tickets_cap, b->stream), "zeroing the merge counters"))
            return false;
    }

    plan->args = (cuda_attn_args_t){
        .rows = (const cuda_attn_row_t *)d,
        .groups = (const cuda_attn_group_t *)(d + off_groups),
        .items = (const cuda_attn_item_t *)(d + off_dec),
        .table = (const void *const *)(d + off_table),
        .partials = b->partials,
        .n_items = (int)n_dec,
        .n_heads = a->p.n_heads,
        .n_kv_heads = a->p.n_kv_heads,
        .group_size = a->group_size,
        .tokens_per_warp = a->tokens_per_warp,
        .kv_stride = a->p.n_kv_heads * a->p.head_dim,
        .block = P,
        .window = W,
        .scale = a->scale,
        .scale_log2 = a->scale * 1.44269504f,
        .softcap = a->p.softcap,
        .n_rows = n,
        .heads = nh,
        .l2_prefetch = a->tune.l2_prefetch,
        .full_tile = a->tune.full_tile,
        .head_warps = nh ? call_warps(b, a, nh, dec_k[0] * (size_t)(a->p.n_kv_heads / nh)) : 1,
        .fused_merge = fused,
        .tickets = fused ? b->tickets : NULL,
    };
    plan->items_pre = (const cuda_attn_item_t *)(d + off_pre);
    plan->n_dec = (int)n_dec;
    plan->n_pre = (int)n_pre;
    plan->head_dim = a->p.head_dim;
    return true;
}

void cuda__attn_run(cuda_backend_t *b, const cuda_attn_plan_t *plan)
{
    cuda_attn_args_t args = plan->args;
    if (plan->n_dec &&
        !cuda__check(b, cuda_attn_decode(&args, plan->head_dim, plan->n_dec, b->stream), "the decode attention kernel"))
        return;
    args.items = plan->items_pre;
    args.n_items = plan->n_pre;
    if (plan->n_pre &&
        !cuda__check(b, cuda_attn_prefill(&args, plan->head_dim, plan->n_pre, b->stream),
                     "the prefill attention kernel"))
        return;
    if (!args.fused_merge)
        cuda__check(b, cuda_attn_merge(&args, plan->head_dim, b->stream), "the attention merge kernel");
}

void cuda__attention(cuda_backend_t *b, compute_attn_t *a, int layer, const attn_query_t *q, int n)
{
    cuda_attn_plan_t plan;
    if (cuda__attn_plan(b, a, layer, q, n, &plan))
        cuda__attn_run(b, &plan);
}
