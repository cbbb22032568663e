/*
 * cmd_serve.c — `cairn serve`: the OpenAI-compatible HTTP server (include/cairn/server.h).
 *
 * Loads a checkpoint folder (tokenizer and chat template from the same folder), creates
 * the engine and the server, prints how to call it, and waits for SIGINT or SIGTERM. On a
 * signal it stops accepting connections, lets in-flight requests finish for up to
 * --drain-ms, cancels the rest, persists the cached K/V blocks not on disk yet for up to
 * --persist-on-exit-ms (reporting written and skipped on stderr), and exits 0.
 *
 * Without MODEL (a folder or a .gguf file) it serves a default model that needs no download: the synth "tiny"
 * checkpoint (tools/synth.h), written once into <cache dir>/models/synth-tiny on the
 * first run. Its weights are seeded random numbers, so its text is gibberish; it exists
 * to try the API end to end.
 *
 * Signals are blocked in every thread (the mask is set before any thread starts) and
 * taken synchronously with sigwait, so no handler runs inside library code.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cairn/checkpoint.h"
#include "cairn/engine.h"
#include "cairn/server.h"
#include "cairn/tokenizer.h"
#include "cli/cli.h"
#include "tools/synth.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cairn serve [MODEL] [options]\n"
            "\n"
            "Serves an OpenAI-compatible HTTP API (POST /v1/chat/completions,\n"
            "POST /v1/completions, GET /v1/models, GET /health, GET /metrics; see docs/API.md).\n"
            "MODEL is a Hugging Face checkpoint folder (config.json, safetensors,\n"
            "tokenizer.json, chat template) or a .gguf file (all of it in one file).\n"
            "Without it, a small random 'tiny' model is\n"
            "synthesized once into <cache dir>/models/synth-tiny and served (no download;\n"
            "its output is gibberish, for trying the API).\n"
            "\n"
            "options:\n"
            "  --host ADDR          IPv4 address to bind (default 127.0.0.1)\n"
            "  --port N             TCP port, 0 for any free port (default 8080)\n"
            "  --threads N          engine compute threads (default: online CPUs, max 16)\n"
            "  --http-threads N     HTTP worker threads (default 4)\n"
            "  --kv-dtype T         K/V element type: bf16 | f16 | f32 | q8_0 | fp8_e4m3 (default bf16)\n"
            "  --quantize T         convert the float weight matrices at load: q8_0 | q4_k\n"
            "                       (also q4_0, q5_k, q6_k)\n"
            "  --pool-mib N         KV pool size in MiB (default: one full context of the model,\n"
            "                       at least 256, clamped to MemAvailable minus the weights and\n"
            "                       headroom; with a device backend, to the device's free memory\n"
            "                       after the weights minus headroom)\n"
            "  --memory-mib N       one budget for weights + KV pool: the pool gets what the\n"
            "                       weights leave (with --pool-mib: checked against it)\n"
            "  --tool-parser NAME   tool-call format of the model's output: hermes,\n"
            "                       qwen3_coder, llama3_json, pythonic, tool_code or none\n"
            "                       (default: from the chat template)\n"
            "  --backend B          compute backend: cpu (default) or cuda (a CUDA build)\n"
            "  --max-context N      tokens per sequence (default: the model's, max 32768)\n"
            "  --max-running N      requests decoding at once (default 16)\n"
            "  --max-queued N       waiting requests before 429 (default 64)\n"
            "  --api-keys FILE      require 'Authorization: Bearer KEY' with a key listed in\n"
            "                       FILE (one per line); each key is its own cache domain\n"
            "  --request-log FILE   append one JSON line per request to FILE\n"
            "  --max-body-bytes N   larger request bodies get 413 (default 4194304)\n"
            "  --idle-timeout-s N   close connections idle this long (default 120)\n"
            "  --max-connections N  open connections at most (default 512)\n"
            "  --model-id NAME      model id in /v1/models and responses (default: the\n"
            "                       folder's name)\n"
            "  --drain-ms N         on SIGINT/SIGTERM, let requests finish this long (default 5000)\n"
            "  --cache-dir DIR      cache root (default CAIRN_CACHE_DIR, else\n"
            "                       $XDG_CACHE_HOME/cairn, else ~/.cache/cairn); holds the\n"
            "                       default model and the SSD cold tier (K/V blocks of past\n"
            "                       prompts, restored after a restart)\n"
            "  --no-cold            neither restore nor persist K/V on disk (nor on a shared tier)\n"
            "  --cold-policy P      when full K/V blocks go to disk: write-through (after\n"
            "                       each turn, in the background; default), write-back (only\n"
            "                       before the pool evicts them, and at exit) or off\n"
            "  --persist-on-exit-ms N  on SIGINT/SIGTERM, after the drain, persist every cached\n"
            "                       block not on disk yet for at most N ms, then report how\n"
            "                       many were written and skipped (default: 5 s plus 1.5 x\n"
            "                       what awaits write at the disk speed measured so far)\n"
            "  --shared-tier URL    share K/V blocks with other servers of the same model through\n"
            "                       Redis: redis://HOST[:PORT][/DB] (default CAIRN_SHARED_TIER);\n"
            "                       tiers: hot pool, then the local SSD tier, then Redis\n"
            "  --shared-tier-ttl S  lifetime of each key written, seconds (default 86400; 0: none,\n"
            "                       Redis maxmemory + allkeys-lru then bounds the tier)\n"
            "  --shared-tier-auth-file FILE\n"
            "                       Redis AUTH: 'PASSWORD' or 'USERNAME PASSWORD' on the first line\n"
            "                       (default: the environment variable CAIRN_SHARED_TIER_AUTH);\n"
            "                       never on the command line\n"
            "  -v, --verbose        log informational messages\n");
}

static int parse_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "cairn serve: %s needs an integer in [%ld, %ld], got '%s'\n", opt, lo, hi,
                s);
        return -1;
    }
    *out = v;
    return 0;
}

static int cache_root(const char *opt, char *out, size_t cap)
{
    const char *env = getenv("CAIRN_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    int n;
    if (opt)
        n = snprintf(out, cap, "%s", opt);
    else if (env && env[0])
        n = snprintf(out, cap, "%s", env);
    else if (xdg && xdg[0])
        n = snprintf(out, cap, "%s/cairn", xdg);
    else if (home && home[0])
        n = snprintf(out, cap, "%s/.cache/cairn", home);
    else
        return -1;
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

static int mkdir_p(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir(path, 0755);
        *p = '/';
        if (rc && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0755) && errno != EEXIST ? -1 : 0;
}

/* The default model's folder, synthesized on first use. */
static int default_model(const char *cache_opt, char *dir, size_t cap)
{
    char root[PATH_MAX];
    if (cache_root(cache_opt, root, sizeof root)) {
        fprintf(stderr, "cairn serve: no MODEL and no cache directory (set --cache-dir, "
                        "CAIRN_CACHE_DIR or HOME)\n");
        return -1;
    }
    int n = snprintf(dir, cap, "%s/models/synth-tiny", root);
    if (n < 0 || (size_t)n >= cap)
        return -1;
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s/config.json", dir);
    struct stat st;
    if (stat(probe, &st) == 0)
        return 0;
    if (mkdir_p(dir)) {
        fprintf(stderr, "cairn serve: cannot create %s: %s\n", dir, strerror(errno));
        return -1;
    }
    cairn_synth_options_t o;
    cairn_synth_options_default(&o);
    char err[512] = "";
    int rc = cairn_synth_write(dir, &o, err, sizeof err);
    if (rc) {
        fprintf(stderr, "cairn serve: cannot write the default model into %s: %s\n", dir,
                err[0] ? err : cairn_strerror(rc));
        return -1;
    }
    fprintf(stderr, "cairn serve: wrote the default model (synth 'tiny', random weights) to %s\n",
            dir);
    return 0;
}

/* MemAvailable from /proc/meminfo in MiB, or 0 when it cannot be read. */
static uint64_t mem_available_mib(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            break;
    fclose(f);
    return kib / 1024;
}

/*
 * The KV pool's size when the operator did not give one (docs/API.md, "Memory"): enough
 * for one full context of the served model (and at least the historical 256 MiB), within
 * what is left of the budget after the weights and the recurrent-state checkpoints (their
 * own budget, state_ckpt_mib; 0 for models without recurrent layers): --memory-mib when
 * given, else MemAvailable minus headroom (the larger of 1 GiB and a tenth). The bytes
 * per block and the checkpoint budget are measured on a probe engine with a minimal pool
 * (the family decides the cache layout). A device backend (--backend cuda) keeps the
 * weights and the pool in device memory: there the room is the device's free memory
 * measured on the probe (weights and scratch already resident: cairn_engine_device_memory)
 * minus the same headroom, and host memory does not bound the pool. *ckpt_mib receives
 * the checkpoint budget. With pool_given, *pool_mib is kept and only checked against
 * --memory-mib and the device's free memory. Returns 0, or a code with a message printed.
 */
static int size_pool(const cairn_checkpoint_t *ck, const cairn_engine_options_t *eo_in,
                     long memory_mib, bool pool_given, int *pool_mib, uint64_t *ckpt_mib)
{
    cairn_engine_options_t eo = *eo_in;
    eo.pool_mib = 1;
    eo.cold = -1;
    cairn_engine_t *probe = NULL;
    char err[512] = "";
    int rc = cairn_engine_create(ck, &eo, &probe, err, sizeof err);
    if (rc) {
        fprintf(stderr, "cairn serve: engine: %s\n", err[0] ? err : cairn_strerror(rc));
        return rc;
    }
    cairn_kv_stats_t kv;
    cairn_engine_kv_stats(probe, &kv);
    cairn_engine_counters_t ec;
    cairn_engine_counters(probe, &ec);
    int ctx = cairn_engine_options(probe)->max_context;
    int bt = cairn_engine_options(probe)->block_tokens;
    uint64_t dev_free = 0, dev_total = 0;
    rc = cairn_engine_device_memory(probe, &dev_free, &dev_total);
    cairn_engine_destroy(probe);
    const bool device = rc == CAIRN_OK;
    if (rc && rc != CAIRN_EUNSUPPORTED) {
        fprintf(stderr, "cairn serve: the %s backend cannot report its device memory (%s); set --pool-mib\n",
                eo.backend ? eo.backend : "cpu", cairn_strerror(rc));
        return rc;
    }
    const uint64_t dev_free_mib = dev_free >> 20, dev_total_mib = dev_total >> 20;
    /* Device headroom: scratch that grows with the batch, cuBLAS workspaces. */
    const uint64_t dev_headroom = dev_free_mib / 10 > 1024 ? dev_free_mib / 10 : 1024;
    const uint64_t dev_room = dev_free_mib > dev_headroom ? dev_free_mib - dev_headroom : 0;
    *ckpt_mib = (ec.ckpt_budget + (1u << 20) - 1) >> 20;
    uint64_t weights_mib = ((cairn_checkpoint_weight_bytes(ck) + (1u << 20) - 1) >> 20) + *ckpt_mib;
    if (pool_given) {
        if (device && (uint64_t)*pool_mib + 1024 > dev_free_mib) {
            fprintf(stderr, "cairn serve: --pool-mib %d does not fit the %s device: %llu MiB of its %llu MiB are "
                            "free with the weights loaded, and 1024 MiB stay for scratch\n",
                    *pool_mib, eo.backend, (unsigned long long)dev_free_mib, (unsigned long long)dev_total_mib);
            return CAIRN_ENOMEM;
        }
        if (memory_mib > 0 && (uint64_t)*pool_mib + weights_mib > (uint64_t)memory_mib) {
            fprintf(stderr, "cairn serve: --memory-mib %ld cannot hold the weights and state "
                            "checkpoints (%llu MiB) and --pool-mib %d\n", memory_mib,
                    (unsigned long long)weights_mib, *pool_mib);
            return CAIRN_EINVAL;
        }
        return 0;
    }
    uint64_t need = (((uint64_t)ctx + (uint64_t)bt - 1) / (uint64_t)bt + 2) * kv.block_bytes;
    uint64_t need_mib = (need + (1u << 20) - 1) >> 20;
    uint64_t want = need_mib > 256 ? need_mib : 256, room;
    if (memory_mib > 0) {
        room = (uint64_t)memory_mib > weights_mib ? (uint64_t)memory_mib - weights_mib : 0;
        want = room; /* one budget: the pool gets what the weights leave */
        if (device && room > dev_room)
            room = dev_room;
    } else if (device) {
        room = dev_room;
    } else {
        uint64_t avail = mem_available_mib();
        uint64_t headroom = avail / 10 > 1024 ? avail / 10 : 1024;
        room = avail > weights_mib + headroom ? avail - weights_mib - headroom : 0;
        if (avail == 0)
            room = want; /* no /proc: trust the model */
    }
    if (want > room)
        want = room;
    if (want < 1) {
        if (device && (memory_mib <= 0 || room == dev_room))
            fprintf(stderr, "cairn serve: no %s device memory left for the KV pool: %llu MiB of %llu MiB are free "
                            "with the weights (%llu MiB) loaded, and %llu MiB stay as headroom; set --pool-mib\n",
                    eo.backend, (unsigned long long)dev_free_mib, (unsigned long long)dev_total_mib,
                    (unsigned long long)weights_mib, (unsigned long long)dev_headroom);
        else
            fprintf(stderr, "cairn serve: no memory left for the KV pool (weights %llu MiB, %s %llu MiB); "
                            "set --pool-mib or raise --memory-mib\n",
                    (unsigned long long)weights_mib, memory_mib > 0 ? "--memory-mib" : "room",
                    (unsigned long long)(memory_mib > 0 ? (uint64_t)memory_mib : room));
        return CAIRN_ENOMEM;
    }
    if (want > (1u << 20))
        want = 1u << 20;
    if (want < need_mib)
        fprintf(stderr, "cairn serve: warning: the KV pool (%llu MiB) holds less than one full "
                        "context (%d tokens need %llu MiB); max_model_len is cut to what it holds\n",
                (unsigned long long)want, ctx, (unsigned long long)need_mib);
    if (device)
        fprintf(stderr, "cairn serve: the KV pool is in %s device memory: %llu MiB of %llu MiB free with the "
                        "weights loaded, %llu MiB kept as headroom; pool %llu MiB\n",
                eo.backend, (unsigned long long)dev_free_mib, (unsigned long long)dev_total_mib,
                (unsigned long long)dev_headroom, (unsigned long long)want);
    *pool_mib = (int)want;
    return 0;
}

static int cmd_serve(int argc, char **argv)
{
    cairn_server_options_t so;
    cairn_server_options_default(&so);
    cairn_engine_options_t eo;
    bool quantize = false; /* --quantize: convert the float weight matrices at load */
    cairn_dtype_t quantize_to = CAIRN_DTYPE_Q8_0;
    cairn_engine_options_default(&eo);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    eo.n_threads = cpus < 1 ? 1 : cpus > 16 ? 16 : (int)cpus;
    const char *model = NULL, *cache_opt = NULL, *model_id = NULL;
    long drain_ms = 5000, persist_ms = -1, memory_mib = 0, v;
    bool pool_given = false;
    int verbose = 0;
    bool no_cold = false;
    const char *shared_url = getenv("CAIRN_SHARED_TIER"), *shared_auth = NULL;
    cairn_shared_tier_config_t shared;
    memset(&shared, 0, sizeof shared);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose++;
            continue;
        }
        if (!strcmp(a, "--no-cold")) {
            no_cold = true;
            continue;
        }
        if (a[0] != '-') {
            if (model) {
                fprintf(stderr, "cairn serve: more than one MODEL ('%s', '%s')\n", model, a);
                return 2;
            }
            model = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "cairn serve: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *val = argv[++i];
        int rc = 0;
        if (!strcmp(a, "--host"))
            so.host = val;
        else if (!strcmp(a, "--port") && !(rc = parse_int(a, val, 0, 65535, &v)))
            so.port = (int)v;
        else if (!strcmp(a, "--threads") && !(rc = parse_int(a, val, 1, 256, &v)))
            eo.n_threads = (int)v;
        else if (!strcmp(a, "--http-threads") && !(rc = parse_int(a, val, 1, 256, &v)))
            so.http_threads = (int)v;
        else if (!strcmp(a, "--pool-mib") && !(rc = parse_int(a, val, 1, 1 << 20, &v))) {
            eo.pool_mib = (int)v;
            pool_given = true;
        } else if (!strcmp(a, "--memory-mib") && !(rc = parse_int(a, val, 1, 1L << 30, &v)))
            memory_mib = v;
        else if (!strcmp(a, "--tool-parser"))
            so.tool_parser = val;
        else if (!strcmp(a, "--max-context") && !(rc = parse_int(a, val, 16, 1 << 20, &v)))
            eo.max_context = (int)v;
        else if (!strcmp(a, "--max-running") && !(rc = parse_int(a, val, 1, 4096, &v)))
            so.sched.max_running = (int)v;
        else if (!strcmp(a, "--max-queued") && !(rc = parse_int(a, val, 0, 1 << 20, &v)))
            so.sched.max_queued = (int)v;
        else if (!strcmp(a, "--max-body-bytes") && !(rc = parse_int(a, val, 1024, 1L << 30, &v)))
            so.max_body_bytes = (size_t)v;
        else if (!strcmp(a, "--idle-timeout-s") && !(rc = parse_int(a, val, 1, 86400, &v)))
            so.connection_timeout_s = (int)v;
        else if (!strcmp(a, "--max-connections") && !(rc = parse_int(a, val, 1, 65536, &v)))
            so.max_connections = (int)v;
        else if (!strcmp(a, "--drain-ms") && !(rc = parse_int(a, val, 0, 3600000, &v)))
            drain_ms = v;
        else if (!strcmp(a, "--persist-on-exit-ms") && !(rc = parse_int(a, val, 0, 24L * 3600000, &v)))
            persist_ms = v;
        else if (!strcmp(a, "--cold-policy")) {
            if (cairn_cold_policy_parse(val, &eo.cold_policy) != 0) {
                fprintf(stderr, "cairn serve: --cold-policy must be write-through, write-back or off, got '%s'\n",
                        val);
                return 2;
            }
        }
        else if (!strcmp(a, "--kv-dtype")) {
            if (cairn_dtype_parse(val, &eo.kv_dtype) != 0) {
                fprintf(stderr, "cairn serve: --kv-dtype must be bf16, f16, f32, q8_0 or fp8_e4m3, got '%s'\n", val);
                return 2;
            }
        } else if (!strcmp(a, "--quantize")) {
            if (cairn_dtype_parse(val, &quantize_to) != 0) {
                fprintf(stderr, "cairn serve: --quantize must be q8_0 or q4_k (or q4_0, q5_k, q6_k), got '%s'\n", val);
                return 2;
            }
            quantize = true;
        } else if (!strcmp(a, "--api-keys"))
            so.api_keys_file = val;
        else if (!strcmp(a, "--backend"))
            eo.backend = val;
        else if (!strcmp(a, "--request-log"))
            so.request_log_path = val;
        else if (!strcmp(a, "--model-id"))
            model_id = val;
        else if (!strcmp(a, "--cache-dir"))
            cache_opt = val;
        else if (!strcmp(a, "--shared-tier"))
            shared_url = val;
        else if (!strcmp(a, "--shared-tier-auth-file"))
            shared_auth = val;
        else if (!strcmp(a, "--shared-tier-ttl") && !(rc = parse_int(a, val, 0, 100L * 365 * 86400, &v))) {
            shared.has_ttl = true;
            shared.ttl_s = (uint32_t)v;
        } else if (!rc) {
            fprintf(stderr, "cairn serve: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (rc)
            return 2;
    }
    cairn_cli_install_logger(verbose);
    char shared_err[512] = "";
    char *shared_user = NULL, *shared_pass = NULL;
    if (shared_url && shared_url[0] && !no_cold) {
        if (cairn_shared_tier_check_url(shared_url, shared_err, sizeof shared_err)) {
            fprintf(stderr, "cairn serve: --shared-tier: %s\n", shared_err);
            return 2;
        }
        if (cairn_shared_tier_read_auth(shared_auth, &shared_user, &shared_pass, shared_err, sizeof shared_err)) {
            fprintf(stderr, "cairn serve: %s\n", shared_err);
            return 2;
        }
        shared.url = shared_url;
        shared.username = shared_user;
        shared.password = shared_pass;
        eo.shared_tier = &shared;
    }

    char default_dir[PATH_MAX];
    if (!model) {
        if (default_model(cache_opt, default_dir, sizeof default_dir)) {
            cairn_free(shared_user);
            cairn_free(shared_pass);
            return 1;
        }
        model = default_dir;
        if (!model_id)
            model_id = "synth-tiny";
    }
    char name[256];
    if (!model_id) {
        const char *slash = strrchr(model, '/');
        const char *base = slash && slash[1] ? slash + 1 : model;
        /* A model id longer than 255 bytes is cut; it only names the model in responses. */
        size_t l = strnlen(base, sizeof name - 1);
        memcpy(name, base, l);
        name[l] = '\0';
        while (l > 1 && name[l - 1] == '/')
            name[--l] = '\0';
        if (l > 5 && !strcmp(name + l - 5, ".gguf")) /* model.gguf serves as "model" */
            name[l - 5] = '\0';
        model_id = name;
    }
    so.model_id = model_id;

    /* Block the stop signals before any thread exists, so every thread inherits it. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    int status = 1;
    char err[512] = "";
    cairn_checkpoint_t *ck = NULL;
    cairn_engine_t *eng = NULL;
    cairn_tokenizer_t *tok = NULL;
    cairn_server_t *srv = NULL;
    char *cold_root = NULL;
    int rc = quantize ? cairn_checkpoint_open_quantized(model, quantize_to, &ck, err, sizeof err)
                      : cairn_checkpoint_open(model, &ck, err, sizeof err);
    if (rc) {
        fprintf(stderr, "cairn serve: %s\n", err[0] ? err : cairn_strerror(rc));
        goto out;
    }
    if ((rc = cairn_tokenizer_load(model, &tok, err, sizeof err))) {
        fprintf(stderr, "cairn serve: tokenizer: %s\n", err[0] ? err : cairn_strerror(rc));
        goto out;
    }
    uint64_t weights_mib = (cairn_checkpoint_weight_bytes(ck) + (1u << 20) - 1) >> 20;
    uint64_t ckpt_mib = 0;
    const bool device_backend = eo.backend && strcmp(eo.backend, "cpu") != 0; /* its pool: device memory */
    if ((!pool_given || memory_mib > 0 || device_backend)
        && size_pool(ck, &eo, memory_mib, pool_given, &eo.pool_mib, &ckpt_mib))
        goto out;
    if (no_cold)
        eo.cold = -1;
    else if ((cold_root = cairn_cold_default_root(cache_opt)))
        eo.cold_root = cold_root;
    if (persist_ms >= 0)
        eo.cold_drain_ms = persist_ms > 0 ? (int)persist_ms : 1;
    rc = cairn_engine_create(ck, &eo, &eng, err, sizeof err);
    if (shared_pass) { /* the store keeps its own copy */
        memset(shared_pass, 0, strlen(shared_pass));
        cairn_free(shared_pass);
        shared_pass = NULL;
    }
    if (rc) {
        fprintf(stderr, "cairn serve: engine: %s\n", err[0] ? err : cairn_strerror(rc));
        goto out;
    }
    if ((rc = cairn_server_create(eng, tok, &so, &srv, err, sizeof err))) {
        fprintf(stderr, "cairn serve: %s\n", err[0] ? err : cairn_strerror(rc));
        goto out;
    }
    int port = cairn_server_port(srv);
    const char *host = so.host;
    printf("cairn serve: memory: weights %llu MiB, KV pool %d MiB (max_model_len %d tokens), "
           "recurrent state checkpoints %llu MiB\n",
           (unsigned long long)weights_mib, eo.pool_mib, cairn_server_max_model_len(srv),
           (unsigned long long)ckpt_mib);
    printf("cairn serve: model '%s' from %s\n"
           "cairn serve: listening on http://%s:%d (Ctrl-C to stop)\n"
           "try:\n"
           "  curl -s http://%s:%d/v1/chat/completions -H 'Content-Type: application/json'%s \\\n"
           "    -d '{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], "
           "\"max_tokens\": 32}'\n",
           model_id, model, host, port, host, port,
           so.api_keys_file ? " -H 'Authorization: Bearer YOUR_KEY'" : "", model_id);
    fflush(stdout);

    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "cairn serve: %s: draining (up to %ld ms)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            drain_ms);
    cairn_server_destroy(srv, (int)drain_ms);
    srv = NULL;
    status = 0;
    /* Requests are done: the conversations still cached go to disk before the exit. */
    cairn_engine_cold_counters_t cc;
    cairn_engine_cold_counters(eng, &cc);
    if (cc.enabled) {
        cairn_cold_persist_report_t pr;
        if (persist_ms < 0) /* the default: what awaits write at the measured disk speed */
            persist_ms = cairn_engine_cold_exit_ms(eng);
        (void)cairn_engine_cold_persist(eng, (int)persist_ms, &pr);
        fprintf(stderr,
                "cairn serve: persisted at exit: %llu blocks written (%.1f MiB), %llu skipped, of %llu not on "
                "disk, in %.0f ms\n",
                (unsigned long long)pr.written, (double)pr.bytes / (1 << 20), (unsigned long long)pr.skipped,
                (unsigned long long)pr.queued, pr.ms);
    }
out:
    cairn_server_destroy(srv, 0);
    cairn_engine_destroy(eng);
    cairn_tokenizer_destroy(tok);
    cairn_checkpoint_close(ck);
    cairn_free(cold_root);
    cairn_free(shared_user);
    cairn_free(shared_pass);
    return status;
}

CAIRN_CLI_COMMAND(serve, "serve", "serve an OpenAI-compatible HTTP API (chat, completions, metrics)",
                  cmd_serve)
