/*
 * metrics.c — Prometheus counters and histograms for GET /metrics.
 *
 * Model. HTTP responses are counted per route (the server's table: each API's paths,
 * then its own routes) and status; finished generations add their
 * prompt, completion, hot-cached and cold-restored tokens, and their TTFT and time per
 * output token (1 / decode tokens/s) to fixed-bucket histograms. The scheduler's snapshot
 * (queue depth, running requests, the KV core's pool figures and the cold tier's counters,
 * both refreshed on the engine thread after each step) is read at render time and passed
 * in.
 * Names use the cairn_ prefix and the base units Prometheus recommends (seconds).
 *
 * Thread-safety: every function takes the one mutex; HTTP threads call them.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "server/server_impl.h"

static const double ttft_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double tpot_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
#define N_TTFT CAIRN_ARRAY_LEN(ttft_bounds)
#define N_TPOT CAIRN_ARRAY_LEN(tpot_bounds)

typedef struct {
    uint64_t bucket[16]; /* non-cumulative; the last used slot is +Inf */
    uint64_t count;
    double sum;
} hist_t;

static const int status_codes[] = {200, 400, 401, 404, 405, 413, 429, 500, 503};
#define N_STATUS CAIRN_ARRAY_LEN(status_codes)

struct metrics {
    pthread_mutex_t mu;
    const char *const *routes; /* [n_routes] labels, borrowed */
    int n_routes, n_always;
    uint64_t (*http)[N_STATUS + 1]; /* [n_routes]; last column: any other status */
    uint64_t gen_ok, gen_failed, gen_canceled;
    uint64_t prompt_tokens, completion_tokens, cached_tokens, restored_tokens;
    hist_t ttft, tpot;
};

int metrics_create(const char *const *routes, int n_routes, int n_always, metrics_t **out)
{
    *out = NULL;
    if (n_routes < 1 || n_always < 0 || n_always > n_routes)
        return CAIRN_EINVAL;
    metrics_t *m = cairn_calloc(1, sizeof *m);
    if (!m)
        return CAIRN_ENOMEM;
    if (!(m->http = cairn_calloc((size_t)n_routes, sizeof *m->http))) {
        cairn_free(m);
        return CAIRN_ENOMEM;
    }
    m->routes = routes;
    m->n_routes = n_routes;
    m->n_always = n_always;
    pthread_mutex_init(&m->mu, NULL);
    *out = m;
    return 0;
}

void metrics_destroy(metrics_t *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    cairn_free(m->http);
    cairn_free(m);
}

void metrics_http(metrics_t *m, int route, int status)
{
    if (route < 0 || route >= m->n_routes)
        return;
    size_t col = N_STATUS;
    for (size_t i = 0; i < N_STATUS; i++)
        if (status_codes[i] == status)
            col = i;
    pthread_mutex_lock(&m->mu);
    m->http[route][col]++;
    pthread_mutex_unlock(&m->mu);
}

static void observe(hist_t *h, const double *bounds, size_t nb, double v)
{
    size_t i = 0;
    while (i < nb && v > bounds[i])
        i++;
    h->bucket[i]++;
    h->count++;
    h->sum += v;
}

void metrics_generation(metrics_t *m, const cairn_req_usage_t *u, bool ok, bool canceled)
{
    pthread_mutex_lock(&m->mu);
    if (ok)
        m->gen_ok++;
    else if (canceled)
        m->gen_canceled++;
    else
        m->gen_failed++;
    if (u) {
        m->prompt_tokens += (uint64_t)(u->prompt_tokens > 0 ? u->prompt_tokens : 0);
        m->completion_tokens += (uint64_t)(u->completion_tokens > 0 ? u->completion_tokens : 0);
        m->cached_tokens += (uint64_t)(u->cached_tokens > 0 ? u->cached_tokens : 0);
        m->restored_tokens += (uint64_t)(u->restored_tokens > 0 ? u->restored_tokens : 0);
        if (ok && u->completion_tokens > 0 && u->ttft_ms >= 0)
            observe(&m->ttft, ttft_bounds, N_TTFT, u->ttft_ms / 1000.0);
        if (ok && u->completion_tokens > 1 && u->decode_tps > 0)
            observe(&m->tpot, tpot_bounds, N_TPOT, 1.0 / u->decode_tps);
    }
    pthread_mutex_unlock(&m->mu);
}

typedef struct {
    char *p;
    size_t len, cap;
    bool failed;
} sbuf_t;

__attribute__((format(printf, 2, 3))) static void put(sbuf_t *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t nc = (b->cap + (size_t)n + 1) * 2;
        char *np = cairn_realloc(b->p, nc);
        if (!np) {
            b->failed = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
}

static void put_hist(sbuf_t *b, const char *name, const char *help, const hist_t *h,
                     const double *bounds, size_t nb)
{
    put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < nb; i++) {
        cum += h->bucket[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    cum += h->bucket[nb];
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
        (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->count);
}

static void put_counter(sbuf_t *b, const char *name, const char *help, uint64_t v)
{
    put(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

static void put_gauge(sbuf_t *b, const char *name, const char *help, double v)
{
    put(b, "# HELP %s %s\n# TYPE %s gauge\n%s %g\n", name, help, name, name, v);
}

char *metrics_render(metrics_t *m, const cairn_sched_stats_t *st)
{
    sbuf_t b = {cairn_malloc(4096), 0, 4096, false};
    if (!b.p)
        return NULL;
    b.p[0] = '\0';
    pthread_mutex_lock(&m->mu);
    put(&b, "# HELP cairn_http_requests_total HTTP responses by route and status.\n"
            "# TYPE cairn_http_requests_total counter\n");
    for (int r = 0; r < m->n_routes; r++)
        for (size_t c = 0; c <= N_STATUS; c++)
            if (m->http[r][c] || (c == 0 && r < m->n_always)) {
                char code[8];
                if (c < N_STATUS)
                    snprintf(code, sizeof code, "%d", status_codes[c]);
                else
                    snprintf(code, sizeof code, "other");
                put(&b, "cairn_http_requests_total{route=\"%s\",status=\"%s\"} %llu\n",
                    m->routes[r], code, (unsigned long long)m->http[r][c]);
            }
    put(&b, "# HELP cairn_generations_total Generation requests by outcome.\n"
            "# TYPE cairn_generations_total counter\n"
            "cairn_generations_total{outcome=\"ok\"} %llu\n"
            "cairn_generations_total{outcome=\"canceled\"} %llu\n"
            "cairn_generations_total{outcome=\"failed\"} %llu\n",
        (unsigned long long)m->gen_ok, (unsigned long long)m->gen_canceled,
        (unsigned long long)m->gen_failed);
    put_counter(&b, "cairn_prompt_tokens_total", "Prompt tokens of finished requests.",
                m->prompt_tokens);
    put_counter(&b, "cairn_completion_tokens_total", "Generated tokens.", m->completion_tokens);
    put(&b, "# HELP cairn_cache_hit_tokens_total Prompt tokens served from cache, by tier.\n"
            "# TYPE cairn_cache_hit_tokens_total counter\n"
            "cairn_cache_hit_tokens_total{tier=\"hot\"} %llu\n"
            "cairn_cache_hit_tokens_total{tier=\"cold\"} %llu\n",
        (unsigned long long)m->cached_tokens, (unsigned long long)m->restored_tokens);
    put_hist(&b, "cairn_ttft_seconds", "Time from submit to the first generated token.", &m->ttft,
             ttft_bounds, N_TTFT);
    put_hist(&b, "cairn_time_per_output_token_seconds", "Decode time per generated token.",
             &m->tpot, tpot_bounds, N_TPOT);
    pthread_mutex_unlock(&m->mu);

    put_gauge(&b, "cairn_queue_depth", "Requests waiting for admission.", st->queued);
    put_gauge(&b, "cairn_running_requests", "Requests admitted and generating.", st->running);
    put_gauge(&b, "cairn_pool_blocks_total", "KV pool blocks at the budget.",
              (double)st->pool_blocks_total);
    put_gauge(&b, "cairn_pool_blocks_used", "KV pool blocks referenced by sequences.",
              (double)st->pool_blocks_used);
    put_gauge(&b, "cairn_pool_blocks_cached", "KV pool blocks held only by the prefix cache.",
              (double)st->pool_blocks_cached);
    put_gauge(&b, "cairn_pool_blocks_free", "KV pool blocks neither used nor cached.",
              (double)st->pool_blocks_free);
    put_gauge(&b, "cairn_pool_occupancy", "Fraction of KV pool blocks in use.",
              st->pool_blocks_total ? (double)st->pool_blocks_used / (double)st->pool_blocks_total
                                    : 0.0);
    put_gauge(&b, "cairn_pool_block_bytes", "Bytes of one KV block (K and V, every layer).",
              (double)st->pool_block_bytes);
    put_gauge(&b, "cairn_pool_committed_bytes", "KV pool storage committed.",
              (double)st->pool_bytes_committed);
    put_counter(&b, "cairn_pool_grows_total", "KV pool grows.", st->pool_grows);
    put_counter(&b, "cairn_pool_evictions_total", "Cached KV blocks evicted for space.",
                st->pool_evictions);
    put(&b, "# HELP cairn_pool_prefix_lookups_total Sequence begins by prefix cache outcome.\n"
            "# TYPE cairn_pool_prefix_lookups_total counter\n"
            "cairn_pool_prefix_lookups_total{result=\"hit\"} %llu\n"
            "cairn_pool_prefix_lookups_total{result=\"miss\"} %llu\n",
        (unsigned long long)st->pool_hits, (unsigned long long)st->pool_misses);
    put_counter(&b, "cairn_state_checkpoints_saved_total",
                "Recurrent states saved at a block boundary.", st->ckpt_saves);
    put_counter(&b, "cairn_state_checkpoints_restored_total",
                "Recurrent states restored (prefix hits, truncations).", st->ckpt_restores);
    put_counter(&b, "cairn_state_checkpoints_evicted_total",
                "Recurrent checkpoints dropped for their byte budget.", st->ckpt_evictions);
    put_gauge(&b, "cairn_state_checkpoints", "Recurrent checkpoints held.", (double)st->ckpt_count);
    put_gauge(&b, "cairn_state_checkpoint_bytes", "Bytes the recurrent checkpoints take.",
              (double)st->ckpt_bytes);
    put_gauge(&b, "cairn_cold_enabled", "1 when the cold tier (SSD prefix store) is open.",
              st->cold_enabled ? 1.0 : 0.0);
    put_counter(&b, "cairn_cold_restored_blocks_total", "KV blocks restored from the cold tier.",
                st->cold_restored_blocks);
    put_counter(&b, "cairn_cold_restored_tokens_total", "Prompt tokens restored from the cold tier.",
                st->cold_restored_tokens);
    put_counter(&b, "cairn_cold_captured_blocks_total", "KV blocks queued for the cold tier.",
                st->cold_captured_blocks);
    put_counter(&b, "cairn_cold_corruptions_total", "Invalid cold-tier objects found and deleted.",
                st->cold_corruptions);
    put_counter(&b, "cairn_cold_write_errors_total", "Cold-tier writes that failed.",
                st->cold_write_errors);
    put_counter(&b, "cairn_cold_queue_drops_total", "KV blocks not queued: writer queue full.",
                st->cold_queue_drops);
    put_counter(&b, "cairn_cold_written_bytes_total", "Bytes committed to the cold tier.",
                st->cold_bytes_written);
    put_gauge(&b, "cairn_cold_used_bytes", "Bytes held by the cold tier.",
              (double)st->cold_used_bytes);
    put_gauge(&b, "cairn_cold_objects", "Objects held by the cold tier.", (double)st->cold_objects);
    /* Sidecars (hybrid families' state at a boundary) beside the blocks above. */
    put_counter(&b, "cairn_cold_sidecars_captured_total", "STATE sidecars queued for the cold tier.",
                st->cold_sidecars_captured);
    put_counter(&b, "cairn_cold_sidecars_installed_total",
                "STATE sidecars restored and installed (recurrent states, sliding windows).",
                st->cold_sidecars_installed);
    put_counter(&b, "cairn_cold_sidecar_corruptions_total", "Invalid STATE sidecars found and deleted.",
                st->cold_sidecar_corruptions);
    put_counter(&b, "cairn_cold_sidecar_drops_total", "STATE sidecars not queued: writer queue full.",
                st->cold_sidecar_drops);
    put_gauge(&b, "cairn_cold_sidecar_objects", "STATE sidecars held by the cold tier.",
              (double)st->cold_sidecar_objects);
    put_gauge(&b, "cairn_cold_sidecar_bytes", "Bytes of STATE sidecars held by the cold tier.",
              (double)st->cold_sidecar_bytes);
    put_counter(&b, "cairn_cold_restores_reduced_total",
                "Restores installed below the length the stored chain proposed.", st->cold_restores_reduced);
    put_counter(&b, "cairn_cold_restores_suppressed_total",
                "Restores the sidecar policy reduced to nothing.", st->cold_restores_suppressed);
    put(&b, "# HELP cairn_cold_restore_miss_total Cold-tier restores by the rule that reduced them.\n"
            "# TYPE cairn_cold_restore_miss_total counter\n");
    for (int i = 0; i < CAIRN_ENGINE_COLD_MISS_REASONS; i++)
        put(&b, "cairn_cold_restore_miss_total{reason=\"%s\"} %llu\n", cairn_tier_miss_name((cairn_tier_miss_t)i),
            (unsigned long long)st->cold_restore_miss[i]);
    put_counter(&b, "cairn_cold_capture_queued_total",
                "Full KV blocks found not on disk at the end of a turn and queued for persistence.",
                st->cold_capture_queued);
    /* Capture and restore events (issue 11's list), blocks and sidecars apart: a run that
     * reused nothing is explained by these lines. */
    put_counter(&b, "cairn_cold_capture_walks_total", "Capture walks over a chain with a full block.",
                st->cold_capture_walks);
    put_counter(&b, "cairn_cold_capture_chain_empty_total", "Capture walks that found no full block.",
                st->cold_capture_chain_empty);
    put_counter(&b, "cairn_cold_capture_reached_total",
                "Leading KV blocks the capture walks found persisted or queued (already + queued).",
                st->cold_capture_already + st->cold_capture_queued);
    put_counter(&b, "cairn_cold_capture_already_total", "KV blocks the capture walks found persisted or queued already.",
                st->cold_capture_already);
    put_counter(&b, "cairn_cold_capture_failed_total", "KV blocks the store refused (layout, memory).",
                st->cold_capture_failed);
    put_counter(&b, "cairn_cold_sidecars_reached_total",
                "Anchors whose STATE sidecar the capture found persisted or queued (already + queued).",
                st->cold_sidecars_already + st->cold_sidecars_captured);
    put_counter(&b, "cairn_cold_sidecars_already_total", "Anchors whose STATE sidecar was persisted or queued already.",
                st->cold_sidecars_already);
    put_counter(&b, "cairn_cold_sidecar_skips_total", "Anchors skipped: their state was no longer in memory.",
                st->cold_sidecar_skips);
    put_counter(&b, "cairn_cold_sidecar_chain_empty_total",
                "Capture walks of a model with sidecars whose persisted chain reached no anchor.",
                st->cold_sidecar_chain_empty);
    put_counter(&b, "cairn_cold_restore_lookups_total", "Sequence begins that consulted the cold tier.",
                st->cold_restore_lookups);
    put_counter(&b, "cairn_cold_sidecar_reads_total", "STATE sidecars read and validated at a chosen boundary.",
                st->cold_sidecar_reads);
    put_counter(&b, "cairn_cold_candidates_refused_total", "Restore boundaries tried and refused.",
                st->cold_candidates_refused);
    put_counter(&b, "cairn_cold_install_failures_total", "Restore boundaries the pool or state bank could not take.",
                st->cold_install_failures);
    put_counter(&b, "cairn_cold_capture_deferrals_total",
                "Times the background capture waited: its budget of pinned bytes was full.",
                st->cold_capture_deferrals);
    put_counter(&b, "cairn_cold_writeback_holds_total",
                "Evictions held back until the cached block was persisted (write-back).",
                st->cold_writeback_holds);
    put_counter(&b, "cairn_cold_capture_lost_total", "Queued KV blocks gone from the pool before their copy.",
                st->cold_capture_lost);
    put_gauge(&b, "cairn_cold_awaiting_blocks", "KV blocks queued for persistence, not yet handed to the store.",
              (double)st->cold_awaiting_blocks);
    put_gauge(&b, "cairn_cold_awaiting_bytes", "Bytes of KV blocks awaiting write.",
              (double)st->cold_awaiting_bytes);
    put_gauge(&b, "cairn_cold_pinned_bytes", "Bytes of pool blocks pinned for a copy in flight.",
              (double)st->cold_pinned_bytes);
    put_gauge(&b, "cairn_shared_tier_enabled", "1 when a shared tier (Redis) is configured.",
              st->shared_enabled ? 1.0 : 0.0);
    put_gauge(&b, "cairn_shared_tier_connected", "1 while the shared tier's server is reachable.",
              st->shared_connected ? 1.0 : 0.0);
    put_counter(&b, "cairn_shared_tier_restored_blocks_total",
                "KV blocks restored from the shared tier (the local tier lacked them).",
                st->shared_restored_blocks);
    put_counter(&b, "cairn_shared_tier_promoted_blocks_total",
                "Blocks read from the shared tier and written to the local tier.", st->shared_promoted_blocks);
    put_counter(&b, "cairn_shared_tier_hits_total", "Shared-tier reads that found a valid object.",
                st->shared_hits);
    put_counter(&b, "cairn_shared_tier_misses_total", "Shared-tier reads of absent objects.", st->shared_misses);
    put_counter(&b, "cairn_shared_tier_corruptions_total", "Invalid shared-tier values found and deleted.",
                st->shared_corruptions);
    put_counter(&b, "cairn_shared_tier_enqueued_total", "Objects queued for the shared tier.",
                st->shared_enqueued);
    put_counter(&b, "cairn_shared_tier_written_bytes_total", "Bytes written to the shared tier.",
                st->shared_bytes_written);
    put_counter(&b, "cairn_shared_tier_restored_bytes_total", "Payload bytes read from the shared tier.",
                st->shared_bytes_restored);
    put_counter(&b, "cairn_shared_tier_write_errors_total", "Shared-tier writes that failed.",
                st->shared_write_errors);
    put_counter(&b, "cairn_shared_tier_queue_drops_total", "Objects not queued: shared-tier queue full.",
                st->shared_queue_drops);
    put_counter(&b, "cairn_shared_tier_unavailable_total",
                "Shared-tier operations answered without the server (unreachable).", st->shared_unavailable);
    put_counter(&b, "cairn_shared_tier_faults_total",
                "Shared-tier faults: timeouts, connection and server errors, failed connects, bad values.",
                st->shared_faults);
    put_counter(&b, "cairn_shared_tier_outages_total", "Times the shared tier became unreachable.",
                st->shared_outages);
    put_counter(&b, "cairn_shared_tier_reconnects_total", "Times the shared tier became reachable again.",
                st->shared_reconnects);
    put_counter(&b, "cairn_shared_tier_timeouts_total", "Shared-tier operations past their timeout.",
                st->shared_timeouts);
    put_gauge(&b, "cairn_shared_tier_queue_len", "Objects awaiting their shared-tier write.",
              (double)st->shared_queue_len);
    put_counter(&b, "cairn_sched_requests_canceled_total", "Requests canceled (disconnects).",
                st->requests_canceled);
    put_counter(&b, "cairn_sched_preemptions_total", "Requests preempted for pool space.",
                st->preemptions);
    put_counter(&b, "cairn_sched_steps_total", "Engine steps.", st->steps);
    if (b.failed) {
        cairn_free(b.p);
        return NULL;
    }
    return b.p;
}
