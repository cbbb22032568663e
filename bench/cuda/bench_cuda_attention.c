/*
 * bench_cuda_attention — paged decode attention on the CUDA backend: effective K+V read
 * bandwidth (bytes of K and V the queries must read / kernel time) for GQA 32/8 heads,
 * head_dim 128, bf16 K/V in 16-position blocks scattered over the pool in a random order,
 * one query per sequence at its last position.
 *
 *   bench_cuda_attention [B:CTX ...]     default 32:4096 64:8192 8:32768
 *
 * Per shape and per variant (split rule: `inv` is the batch-invariant mode's, 512 keys
 * below position 2048, 1024 below 4096 and 2048 from there (numerics revision 3, session
 * 8), `r2` revision 2's (512 below 4096, 2048 from there: sessions 5-7), `one` one fixed
 * split for every row, as a mode fitted to the batch would choose; `split` is the one this shape's rows get; the
 * tuning: decode splits per work item, `run`, 0 = the backend's choice; `hd` K/V heads per
 * decode block (0: blocks of 4 warps each streaming its own head); `l2` 1: the copies'
 * L2 prefetch hint of 256 bytes; `ft` 1: the full tile, the decode softmax also over the
 * empty tile rows 8-15 as before session 6; `hw` warps per K/V head in blocks of heads,
 * 2 or 4: each computes part of the PV product's output dims, session 7; `fm` 1: the
 * split merge fused into the decode kernel, variant 30, session 7's branch cuda6; 0: the
 * merge kernel, the default), the kernels
 * alone (decode kernel + split merge; work lists planned once), timed two ways after 3
 * warm-ups with CUDA events:
 *   iso_ms   one run between two events, median of 20 (the GPU idles while the host
 *            launches, so this includes the first launch's latency: runs 1-6 used it);
 *   q_ms     20 runs queued back to back between two events, the per-run mean, median of
 *            5 such batches (how a decode step issues attention: the launches queue
 *            behind the previous kernels);
 *   dec_ms   the same with the decode kernel alone (no merge kernel): q_ms - dec_ms is
 *            the merge kernel's share (where `fm` is 1, the fused merge of session 7, the
 *            decode kernel merges itself: dec_ms = q_ms but for the host's work);
 *   mrg_ms   the merge kernel alone, queued the same way (session 8; 0 where `fm` is 1);
 *   graph_ms with CAIRN_BENCH_GRAPH=1 (else 0): the 20 runs captured in one CUDA graph,
 *            per-run mean, median of 5 launches (q_ms - graph_ms: the host launches'
 *            share, session 7).
 * TB/s is the K+V bytes over q_ms. Every variant of a split size must give the same output
 * bits as the first of that size (memcmp; the bench fails otherwise). For the invariant configuration
 * the whole op is also timed once planned each time (op_ms: host work lists from the
 * accessor included; wall clock, median of 5). bench/cuda/sdpa_decode.py times torch
 * SDPA on the same shapes, both ways. The device's copy bandwidth (cudaMemcpy device to
 * device of 2 GiB, bytes read + written) is printed first as the ceiling.
 *
 * CAIRN_BENCH_REPS (default 20) sets the runs per timing (1 under compute-sanitizer);
 * CAIRN_BENCH_VARIANTS=i,j,... runs only those variants (ncu); CAIRN_BENCH_CONTIGUOUS=1
 * places each sequence's blocks one after the other in the pool instead of in a random
 * order (what the paging costs, against contiguous K/V like SDPA's).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compute/cuda/cuda_host.h"

#define NH 32
#define NKV 8
#define HD 128
#define BS 16

static uint64_t rng = 0x1234567887654321ull;
static uint64_t rnd64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void log_stderr(cairn_log_level_t level, const char *msg, void *user)
{
    (void)user;
    if (level >= CAIRN_LOG_INFO)
        fprintf(stderr, "log: %s\n", msg);
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CK(x)                                                                                                   \
    do {                                                                                                        \
        cudaError_t e_ = (x);                                                                                   \
        if (e_ != cudaSuccess) {                                                                                \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                         \
            exit(1);                                                                                            \
        }                                                                                                       \
    } while (0)

typedef struct {
    unsigned char *k, *v; /* device pools [n_blocks][BS][NKV][HD] bf16 */
    const int *table;
} seq_t;

static int rows_fn(void *ctx, int layer, int pos, void **k, void **v)
{
    const seq_t *s = ctx;
    (void)layer;
    size_t off = ((size_t)s->table[pos / BS] * BS + pos % BS) * NKV * HD * 2;
    *k = s->k + off;
    *v = s->v + off;
    return BS - pos % BS;
}

/* Fills n bytes of device memory with bf16 values in about [-2, 2] (a 64 MiB random
 * pattern repeated). */
static void fill(void *d, size_t n)
{
    const size_t chunk = (size_t)64 << 20;
    uint16_t *h = malloc(chunk);
    for (size_t i = 0; i < chunk / 2; i++) {
        uint64_t r = rnd64();
        h[i] = (uint16_t)(((r >> 8) & 0x8000) | ((0x7c + (r & 3)) << 7) | ((r >> 16) & 0x7f)); /* [1/8, 2) */
    }
    for (size_t off = 0; off < n; off += chunk)
        CK(cudaMemcpy((char *)d + off, h, n - off < chunk ? n - off : chunk, cudaMemcpyHostToDevice));
    free(h);
}

/* What time_queued runs: the call's kernels, the decode kernel alone, the merge kernel alone. */
enum { RUN_ALL, RUN_DECODE, RUN_MERGE };

static void run_part(cuda_backend_t *b, const cuda_attn_plan_t *plan, int what)
{
    if (what == RUN_ALL) {
        cuda__attn_run(b, plan);
        return;
    }
    if (what == RUN_DECODE ? cuda_attn_decode(&plan->args, plan->head_dim, plan->n_dec, b->stream)
                           : cuda_attn_merge(&plan->args, plan->head_dim, b->stream)) {
        fprintf(stderr, "%s kernel launch failed\n", what == RUN_DECODE ? "decode" : "merge");
        exit(1);
    }
}

/* Median over 5 batches of the per-run mean of `reps` runs queued back to back. */
static float time_queued(cuda_backend_t *b, const cuda_attn_plan_t *plan, int reps, int what)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float ms[5];
    for (int i = 0; i < 3; i++)
        run_part(b, plan, what);
    for (int k = 0; k < 5; k++) {
        CK(cudaEventRecord(e0, b->stream));
        for (int i = 0; i < reps; i++)
            run_part(b, plan, what);
        CK(cudaEventRecord(e1, b->stream));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[k], e0, e1));
        ms[k] /= (float)reps;
    }
    qsort(ms, 5, sizeof(float), cmp_f);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    CK(cudaGetLastError());
    if (b->error) {
        fprintf(stderr, "attention failed (%s)\n", cairn_strerror(b->error));
        exit(1);
    }
    return ms[2];
}

/* CAIRN_BENCH_GRAPH=1: the per-run mean of `reps` runs captured in one CUDA graph and
 * launched as one (no host launch between kernels), median of 5 launches; 0 when the
 * capture fails (reported). */
static float time_graph(cuda_backend_t *b, const cuda_attn_plan_t *plan, int reps)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    cudaEvent_t e0, e1;
    float ms[5], med = 0.0f;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    cudaError_t e = cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {
        for (int i = 0; i < reps; i++)
            cuda__attn_run(b, plan);
        e = cudaStreamEndCapture(b->stream, &g);
    }
    if (e == cudaSuccess && !b->error)
        e = cudaGraphInstantiate(&x, g, 0);
    if (e != cudaSuccess || b->error) {
        fprintf(stderr, "graph capture failed (%s)\n", cudaGetErrorString(e));
        b->error = 0;
        (void)cudaGetLastError();
        goto done;
    }
    CK(cudaGraphLaunch(x, b->stream)); /* warm-up */
    for (int k = 0; k < 5; k++) {
        CK(cudaEventRecord(e0, b->stream));
        CK(cudaGraphLaunch(x, b->stream));
        CK(cudaEventRecord(e1, b->stream));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[k], e0, e1));
        ms[k] /= (float)reps;
    }
    qsort(ms, 5, sizeof(float), cmp_f);
    med = ms[2];
done:
    if (x)
        cudaGraphExecDestroy(x);
    if (g)
        cudaGraphDestroy(g);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return med;
}

static float time_plan(cuda_backend_t *b, const cuda_attn_plan_t *plan, int reps)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *ms = malloc((size_t)reps * sizeof(float));
    for (int i = 0; i < 3; i++)
        cuda__attn_run(b, plan);
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0, b->stream));
        cuda__attn_run(b, plan);
        CK(cudaEventRecord(e1, b->stream));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    qsort(ms, (size_t)reps, sizeof(float), cmp_f);
    float med = ms[reps / 2];
    free(ms);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (b->error) {
        fprintf(stderr, "attention failed (%s)\n", cairn_strerror(b->error));
        exit(1);
    }
    return med;
}

static void copy_ceiling(void)
{
    const size_t n = (size_t)2 << 30;
    void *a, *c;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&c, n));
    CK(cudaMemset(a, 1, n));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float ms[10];
    for (int i = 0; i < 12; i++) {
        CK(cudaEventRecord(e0, 0));
        CK(cudaMemcpy(c, a, n, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        if (i >= 2)
            CK(cudaEventElapsedTime(&ms[i - 2], e0, e1));
    }
    qsort(ms, 10, sizeof(float), cmp_f);
    printf("copy ceiling: device-to-device 2 GiB, %.3f ms median, %.2f TB/s (read + write)\n", ms[5],
           2.0 * n / (ms[5] * 1e-3) / 1e12);
    cudaFree(a);
    cudaFree(c);
}

int main(int argc, char **argv)
{
    cairn_log_set_handler(log_stderr, NULL);
    const char *defaults[] = {"32:4096", "64:8192", "8:32768"};
    int n_shapes = argc > 1 ? argc - 1 : 3;
    char err[256] = "";
    compute_backend_t *be = NULL;
    if (compute_backend_create("cuda", NULL, &be, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    cuda_backend_t *b = (cuda_backend_t *)be;
    bool failed = false; /* a variant's bits differed: reported, the run goes on, exit 1 */
    const bool contiguous = getenv("CAIRN_BENCH_CONTIGUOUS") != NULL;
    if (!getenv("CAIRN_BENCH_VARIANTS"))
        copy_ceiling();
    printf("%-10s %2s %-4s %5s %4s %4s %3s %2s %2s %2s %2s %9s %9s %9s %9s %9s %8s %8s %9s\n", "shape", "v", "rule",
           "split", "run", "item", "hd", "l2", "ft", "hw", "fm", "iso_ms", "q_ms", "dec_ms", "mrg_ms", "graph_ms",
           "iso_TB/s", "q_TB/s", "op_ms");
    char summary[16][160];
    for (int si = 0; si < n_shapes; si++) {
        int B = 0, ctx = 0;
        if (sscanf(argc > 1 ? argv[si + 1] : defaults[si], "%d:%d", &B, &ctx) != 2 || B < 1 || ctx < 1 ||
            ctx % BS) {
            fprintf(stderr, "bad shape '%s' (B:CTX, CTX a multiple of 16)\n", argc > 1 ? argv[si + 1] : defaults[si]);
            return 2;
        }
        const int nb = ctx / BS, total = B * nb;
        const size_t pool = (size_t)total * BS * NKV * HD * 2;
        unsigned char *k, *v;
        CK(cudaMalloc((void **)&k, pool));
        CK(cudaMalloc((void **)&v, pool));
        fill(k, pool);
        fill(v, pool);
        int *perm = malloc((size_t)total * sizeof(int));
        for (int i = 0; i < total; i++)
            perm[i] = i;
        for (int i = total - 1; i > 0 && !contiguous; i--) {
            int j = (int)(rnd64() % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        seq_t *seqs = malloc((size_t)B * sizeof(seq_t));
        attn_kv_t *kv = malloc((size_t)B * sizeof(attn_kv_t));
        attn_query_t *q = malloc((size_t)B * sizeof(attn_query_t));
        float *hq = malloc((size_t)B * NH * HD * sizeof(float));
        for (size_t i = 0; i < (size_t)B * NH * HD; i++)
            hq[i] = (float)((int)(rnd64() % 2001) - 1000) * 1e-3f;
        float *dq, *dout;
        CK(cudaMalloc((void **)&dq, (size_t)B * NH * HD * 4));
        CK(cudaMalloc((void **)&dout, (size_t)B * NH * HD * 4));
        CK(cudaMemcpy(dq, hq, (size_t)B * NH * HD * 4, cudaMemcpyHostToDevice));
        for (int s = 0; s < B; s++) {
            seqs[s] = (seq_t){k, v, perm + (size_t)s * nb};
            kv[s] = (attn_kv_t){rows_fn, &seqs[s]};
            q[s] = (attn_query_t){dq + (size_t)s * NH * HD, dout + (size_t)s * NH * HD, &kv[s], ctx - 1};
        }
        compute_attn_params_t ap = {NH, NKV, HD, CAIRN_DTYPE_BF16, ctx, 0, 0.0f, 0.0f};
        compute_attn_t *a = NULL;
        if (compute_attn_create(be, &ap, &a)) {
            fprintf(stderr, "attn_create failed\n");
            return 1;
        }
        const double bytes = 2.0 * B * (double)ctx * NKV * HD * 2;
        /* split (0: the invariant rule), then the tuning: run (0: the backend's choice),
         * heads per block (-1: all, the default since session 6), L2 prefetch (0: the default), full
         * tile (1: the decode softmax over all 16 tile rows, the kernel before session 6;
         * 0: the default). Variant 0 is the invariant mode's default tuning; the last
         * repeats it. (Device run 16 ran variants 0-15 with {0, 0, -1, 1} first and last
         * and the default at variant 3; session 6 added 16-21; device run 19 had variants 0
         * and 1 in the other order, {0, 0, 4, 0, 0} first and last, before the default
         * became all heads.) */
        static const int variants[][7] = {
            {0, 0, -1, 0, 0, 4}, {0, 0, 4, 0, 0},     {0, 0, 4, 1, 0},    {0, 0, -1, 1, 0},    {0, 0, 2, 1, 0},
            {0, 0, 1, 1, 0},    {0, 0, 0, 1, 0},     {0, 0, 0, 0, 0},    {512, 0, -1, 1, 0},  {512, 0, -1, 0, 0},
            {512, 0, 4, 1, 0},  {1024, 0, -1, 1, 0}, {1024, 0, -1, 0, 0}, {2048, 0, -1, 1, 0}, {2048, 0, -1, 0, 0},
            {2048, 0, 4, 1, 0}, {0, 0, 4, 0, 1},     {0, 0, -1, 0, 1},   {0, 0, 1, 0, 0},     {0, 0, 1, 0, 1},
            {512, 0, 1, 0, 0},  {512, 0, 1, 0, 1},
            /* session 7: warps per head (the 6th field; 2 or 4: the PV product's dims spread) */
            {0, 0, -1, 0, 0, 1}, {0, 0, 2, 0, 0, 4}, {0, 0, 1, 0, 0, 4}, {0, 0, 2, 0, 0, 2}, {0, 0, 1, 0, 0, 2},
            {1024, 0, 2, 0, 0, 4}, {1024, 0, 1, 0, 0, 4}, {0, 0, -1, 0, 0, 4},
            /* session 7, cuda6: the default with the split merge fused into the decode kernel
             * (the 7th field: 1), then the default (the merge kernel) again. Device run 23 had
             * them the other way round (its 0 and 31 fused, 30 the merge kernel). */
            {0, 0, -1, 0, 0, 4, 1}, {0, 0, -1, 0, 0, 4},
            /* session 8 (cuda7): numerics revision 2's rule (512 keys below position 4096, 2048
             * from there: the default of sessions 5-7) with the default tuning, then fused
             * (the merge by the last block's threads since session 8: variant 30 too) */
            {-1, 0, -1, 0, 0, 4}, {-1, 0, -1, 0, 0, 4, 1},
        };
        const int n_var = (int)(sizeof(variants) / sizeof(variants[0]));
        const size_t out_bytes = (size_t)B * NH * HD * 4;
        float *refs[4], *got = malloc(out_bytes);
        int ref_split[4] = {0}, n_refs = 0;
        float best = 1e30f, inv = 0, inv_iso = 0;
        int best_v = 0;
        const int reps = getenv("CAIRN_BENCH_REPS") ? atoi(getenv("CAIRN_BENCH_REPS")) : 20;
        const char *only = getenv("CAIRN_BENCH_VARIANTS");
        for (int i = 0; i < n_var; i++) {
            if (only) { /* a comma-separated list of variant numbers */
                bool want = false;
                for (const char *p = only; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
                    if (atoi(p) == i)
                        want = true;
                }
                if (!want)
                    continue;
            }
            const int *vr = variants[i];
            /* vr[0]: 0 the invariant rule (numerics revision 3), -1 revision 2's (512 keys
             * below position 4096, 2048 from there), > 0 one split for every row */
            const int split = vr[0] > 0 ? vr[0] : vr[0] < 0 ? (ctx - 1 < 4096 ? 512 : 2048) : cuda_attn_split_for(ctx - 1);
            if (vr[0] > 0)
                cuda__attn_set_split(a, vr[0], vr[0], vr[0], 0, 0);
            else if (vr[0] < 0)
                cuda__attn_set_split(a, 512, 512, 2048, 4096, 4096);
            else
                cuda__attn_set_split(a, CUDA_ATTN_SPLIT_SHORT, CUDA_ATTN_SPLIT_MID, CUDA_ATTN_SPLIT_LONG,
                                     CUDA_ATTN_SPLIT_MID_AT, CUDA_ATTN_SPLIT_AT);
            cuda__attn_set_tuning(a, &(cuda_attn_tuning_t){vr[1], vr[2], vr[3], vr[4], vr[5], vr[6]});
            cuda_attn_plan_t plan;
            if (!cuda__attn_plan(b, a, 0, q, B, &plan)) {
                fprintf(stderr, "plan failed\n");
                return 1;
            }
            CK(cudaMemsetAsync(dout, 0xff, out_bytes, b->stream)); /* NaN: every element must be written */
            float iso = time_plan(b, &plan, reps);
            float qd = time_queued(b, &plan, reps, RUN_ALL);
            float dec = time_queued(b, &plan, reps, RUN_DECODE);
            /* the merge kernel alone (after the decode kernel's partials are there) */
            float mrg = plan.args.fused_merge ? 0.0f : time_queued(b, &plan, reps, RUN_MERGE);
            const float gq = getenv("CAIRN_BENCH_GRAPH") ? time_graph(b, &plan, reps) : 0.0f;
            CK(cudaStreamSynchronize(b->stream));
            CK(cudaMemcpy(got, dout, out_bytes, cudaMemcpyDeviceToHost));
            for (size_t e = 0; e < out_bytes / 4; e++)
                if (got[e] != got[e]) {
                    fprintf(stderr, "variant %d: output element %zu not written (NaN)\n", i, e);
                    return 1;
                }
            int ri = 0;
            while (ri < n_refs && ref_split[ri] != split)
                ri++;
            if (ri == n_refs) {
                refs[n_refs] = malloc(out_bytes);
                memcpy(refs[n_refs], got, out_bytes);
                ref_split[n_refs++] = split;
            } else if (memcmp(refs[ri], got, out_bytes)) {
                fprintf(stderr, "variant %d (split %d run %d heads %d l2 %d full %d): output bits differ from the "
                        "first of that split\n", i, split, vr[1], vr[2], vr[3], vr[4]);
                failed = true;
            }
            double opm = 0;
            const bool invariant = i == 0;
            if (invariant) { /* the whole op: work lists from the accessor, upload, kernels */
                double op[5];
                for (int r = 0; r < 5; r++) {
                    CK(cudaStreamSynchronize(b->stream));
                    double t0 = now();
                    compute_attention(be, a, 0, q, B);
                    if (compute_sync(be)) {
                        fprintf(stderr, "attention failed\n");
                        return 1;
                    }
                    op[r] = (now() - t0) * 1e3;
                }
                qsort(op, 5, sizeof(double), cmp_d);
                opm = op[2];
                inv = qd;
                inv_iso = iso;
            }
            char shape[32];
            snprintf(shape, sizeof(shape), "%dx%d", B, ctx);
            printf("%-10s %2d %-4s %5d %4d %4d %3d %2d %2d %2d %2d %9.4f %9.4f %9.4f %9.4f %9.4f %8.3f %8.3f %9.4f%s\n",
                   shape, i, vr[0] > 0 ? "one" : vr[0] < 0 ? "r2" : "inv", split, vr[1], plan.n_dec, plan.args.heads,
                   vr[3], vr[4], plan.args.head_warps, plan.args.fused_merge, iso, qd, dec, mrg, gq,
                   bytes / (iso * 1e-3) / 1e12, bytes / (qd * 1e-3) / 1e12, opm,
                   invariant ? "   (invariant mode, default tuning)" : i + 1 == n_var ? "   (the first again)" : "");
            if (qd < best) {
                best = qd;
                best_v = i;
            }
        }
        for (int r = 0; r < n_refs; r++)
            free(refs[r]);
        free(got);
        snprintf(summary[si], sizeof(summary[si]),
                 "B=%-3d ctx=%-6d K+V %.3f GB  invariant %.2f TB/s queued (%.2f isolated)  best: variant %d %.2f TB/s"
                 "  invariant default's cost %+.1f%%",
                 B, ctx, bytes / 1e9, inv > 0 ? bytes / (inv * 1e-3) / 1e12 : 0.0,
                 inv_iso > 0 ? bytes / (inv_iso * 1e-3) / 1e12 : 0.0, best_v, bytes / (best * 1e-3) / 1e12,
                 inv > 0 ? (inv / best - 1.0) * 100.0 : 0.0);
        compute_attn_destroy(be, a);
        cudaFree(k);
        cudaFree(v);
        cudaFree(dq);
        cudaFree(dout);
        free(perm), free(seqs), free(kv), free(q), free(hq);
    }
    printf("summary (paged decode attention, GQA %d/%d x %d, bf16 K/V, block %d):\n", NH, NKV, HD, BS);
    for (int si = 0; si < n_shapes; si++)
        printf("  %s\n", summary[si]);
    compute_backend_destroy(be);
    return failed ? 1 : 0;
}
