/*
 * cmd_generate.c — `cairn generate MODEL -p TEXT`: one request through the scheduler,
 * streamed to stdout as it is generated.
 *
 * Loads the checkpoint and the tokenizer of MODEL (a folder or a GGUF file), builds the prompt (plain text with
 * the tokenizer's special tokens, or --chat through the model's chat template with
 * add_generation_prompt, or --prompt-ids for exact checks), creates a paged engine and a
 * scheduler, submits the request and writes each delta to stdout as the engine thread
 * delivers it. Loading progress and a one-line summary go to stderr: the prompt's tokens
 * split into hot (prefix cache), restored (cold tier) and computed, the prefill rate over
 * the computed ones only, and the decode rate. Exit status: 0 done, 1 failure, 2 usage
 * error.
 *
 * Thread-safety: the event callback runs on the scheduler's engine thread; the main
 * thread only waits for the final event.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cairn/chat_template.h"
#include "cairn/scheduler.h"
#include "cli/cli.h"
#include "util/util.h"

#define CMD "cairn generate"
#define MAX_STOPS 16

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cairn generate MODEL (-p TEXT | --chat [--system TEXT] --user TEXT) [options]\n"
            "\n"
            "Generates a continuation of a prompt with MODEL and streams it to stdout: a\n"
            "checkpoint folder (config.json, *.safetensors, tokenizer.json,\n"
            "tokenizer_config.json, chat_template.jinja) or a .gguf file (weights, tokenizer\n"
            "and chat template in one). Loading progress and a summary go to stderr.\n"
            "\n"
            "prompt:\n"
            "  -p, --prompt TEXT       the prompt (with --chat: the user message)\n"
            "      --chat              render the prompt through the model's chat template\n"
            "      --system TEXT       --chat: a system message first\n"
            "      --user TEXT         --chat: the user message\n"
            "      --prompt-ids LIST   exact prompt token ids, comma-separated (no tokenizing)\n"
            "sampling:\n"
            "      --max-tokens N      tokens to generate at most (default 256)\n"
            "      --temperature F     0 = greedy (default 1)\n"
            "      --top-p F           nucleus sampling, (0, 1] (default 1 = off)\n"
            "      --top-k N           keep the N most likely tokens (default off)\n"
            "      --min-p F           [0, 1] (default 0 = off)\n"
            "      --seed N            fixed seed: the same output on every run\n"
            "      --stop STR          stop before this text (repeatable, up to %d)\n"
            "      --ignore-eos        do not stop at the model's end-of-sequence tokens\n"
            "engine:\n"
            "      --threads N         compute threads (default: online CPUs, at most 16)\n"
            "      --kv-dtype T        K/V element type: bf16 (default), f16, f32, q8_0, fp8_e4m3\n"
            "      --quantize T        convert the float weight matrices at load: q8_0, q4_k\n"
            "                          (also q4_0, q5_k, q6_k)\n"
            "      --math M            matmul activations: f32 (default) or bf16\n"
            "      --pool-mib N        paged K/V pool budget in MiB (default 256)\n"
            "      --backend B         compute backend: cpu (default) or cuda (a CUDA build)\n"
            "      --salt STR          prefix cache domain (tenant salt)\n"
            "      --cache-dir DIR     cold tier root: prompts persist across runs (default:\n"
            "                          CAIRN_CACHE_DIR, else $XDG_CACHE_HOME/cairn or ~/.cache/cairn)\n"
            "      --no-cold           neither restore nor persist K/V on disk\n"
            "output:\n"
            "      --print-ids         print the generated token ids (comma-separated) instead\n"
            "                          of the text\n"
            "  -v, --verbose           log engine warnings and details\n"
            "  -h, --help              this help\n",
            MAX_STOPS);
}

/* ---- Argument parsing --------------------------------------------------------------- */

static int parse_long(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, CMD ": %s wants an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_float(const char *flag, const char *s, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, CMD ": %s wants a number, got '%s'\n", flag, s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

static int parse_u64(const char *flag, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, CMD ": %s wants a non-negative integer, got '%s'\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* "1,2,3" -> a cairn_malloc'd id array. */
static int parse_ids(const char *s, int32_t **ids, int *n)
{
    int cap = 16, len = 0;
    int32_t *a = cairn_malloc((size_t)cap * sizeof(int32_t));
    if (!a)
        return -1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, CMD ": --prompt-ids wants comma-separated token ids, got '%s'\n", s);
            cairn_free(a);
            return -1;
        }
        if (len == cap) {
            int32_t *b = cairn_realloc(a, (size_t)(cap *= 2) * sizeof(int32_t));
            if (!b) {
                cairn_free(a);
                return -1;
            }
            a = b;
        }
        a[len++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (len == 0) {
        fprintf(stderr, CMD ": --prompt-ids is empty\n");
        cairn_free(a);
        return -1;
    }
    *ids = a;
    *n = len;
    return 0;
}

/* ---- Prompt ------------------------------------------------------------------------- */

/* Renders system/user through the tokenizer's chat template; *text is cairn_malloc'd. */
static int render_chat(const cairn_tokenizer_t *tok, const char *system, const char *user,
                       char **text, size_t *len)
{
    const char *src = cairn_tokenizer_chat_template(tok, NULL);
    if (!src) {
        fprintf(stderr, CMD ": --chat: the model has no chat template\n");
        return -1;
    }
    char err[512] = "";
    cairn_chat_template_t *t = NULL;
    int rc = cairn_chat_template_compile(src, strlen(src), &t, err, sizeof(err));
    if (rc) {
        fprintf(stderr, CMD ": chat template: %s\n", err);
        return -1;
    }
    cJSON *ctx = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(ctx, "messages");
    if (system) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", system);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", user);
    cJSON_AddItemToArray(msgs, m);
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", 1);
    const char *bos = cairn_tokenizer_bos_token(tok), *eos = cairn_tokenizer_eos_token(tok);
    cJSON_AddStringToObject(ctx, "bos_token", bos ? bos : "");
    cJSON_AddStringToObject(ctx, "eos_token", eos ? eos : "");
    rc = cairn_chat_template_render(t, ctx, text, len, err, sizeof(err));
    cJSON_Delete(ctx);
    cairn_chat_template_destroy(t);
    if (rc) {
        fprintf(stderr, CMD ": chat template: %s\n", err);
        return -1;
    }
    return 0;
}

/* ---- Streaming ---------------------------------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool final, print_ids;
    int status;
    char message[256];
    cairn_finish_reason_t finish;
    cairn_req_usage_t usage;
    int n_printed;
} stream_t;

static void on_event(void *user, const cairn_req_event_t *ev)
{
    stream_t *st = user;
    if (ev->kind == CAIRN_REQ_EVENT_DELTA) {
        if (st->print_ids) {
            for (int i = 0; i < ev->n_tokens; i++)
                printf("%s%d", st->n_printed++ ? "," : "", (int)ev->tokens[i]);
        } else {
            fwrite(ev->text, 1, ev->text_len, stdout);
        }
        fflush(stdout);
        return;
    }
    pthread_mutex_lock(&st->mu);
    if (ev->usage)
        st->usage = *ev->usage;
    if (ev->kind == CAIRN_REQ_EVENT_DONE) {
        st->finish = ev->finish;
    } else {
        st->status = ev->status;
        snprintf(st->message, sizeof(st->message), "%s", ev->message ? ev->message : "");
    }
    if (ev->final) {
        st->final = true;
        pthread_cond_signal(&st->cv);
    }
    pthread_mutex_unlock(&st->mu);
}

/* ---- The command -------------------------------------------------------------------- */

typedef struct {
    const char *dir, *prompt, *system, *user, *prompt_ids, *salt, *cache_dir;
    bool chat, print_ids, no_cold;
    int verbose;
    const char *stops[MAX_STOPS];
    int n_stops;
    cairn_sampling_params_t sp;
    cairn_engine_options_t eo;
    bool quantize;          /* --quantize: convert the float weight matrices at load */
    cairn_dtype_t quantize_to;
} gen_args_t;

enum {
    OPT_CHAT = 256, OPT_SYSTEM, OPT_USER, OPT_PROMPT_IDS, OPT_MAX_TOKENS, OPT_TEMPERATURE,
    OPT_TOP_P, OPT_TOP_K, OPT_MIN_P, OPT_SEED, OPT_STOP, OPT_IGNORE_EOS, OPT_THREADS,
    OPT_KV_DTYPE, OPT_MATH, OPT_POOL, OPT_SALT, OPT_PRINT_IDS, OPT_CACHE_DIR, OPT_NO_COLD, OPT_QUANTIZE,
    OPT_BACKEND,
};

/* Returns 0, or the exit status of a usage error (2) or --help (-1 -> exit 0). */
static int parse_args(int argc, char **argv, gen_args_t *a)
{
    static const struct option opts[] = {
        {"prompt", required_argument, 0, 'p'},
        {"chat", no_argument, 0, OPT_CHAT},
        {"system", required_argument, 0, OPT_SYSTEM},
        {"user", required_argument, 0, OPT_USER},
        {"prompt-ids", required_argument, 0, OPT_PROMPT_IDS},
        {"max-tokens", required_argument, 0, OPT_MAX_TOKENS},
        {"temperature", required_argument, 0, OPT_TEMPERATURE},
        {"top-p", required_argument, 0, OPT_TOP_P},
        {"top-k", required_argument, 0, OPT_TOP_K},
        {"min-p", required_argument, 0, OPT_MIN_P},
        {"seed", required_argument, 0, OPT_SEED},
        {"stop", required_argument, 0, OPT_STOP},
        {"ignore-eos", no_argument, 0, OPT_IGNORE_EOS},
        {"threads", required_argument, 0, OPT_THREADS},
        {"kv-dtype", required_argument, 0, OPT_KV_DTYPE},
        {"quantize", required_argument, 0, OPT_QUANTIZE},
        {"math", required_argument, 0, OPT_MATH},
        {"pool-mib", required_argument, 0, OPT_POOL},
        {"salt", required_argument, 0, OPT_SALT},
        {"print-ids", no_argument, 0, OPT_PRINT_IDS},
        {"cache-dir", required_argument, 0, OPT_CACHE_DIR},
        {"no-cold", no_argument, 0, OPT_NO_COLD},
        {"backend", required_argument, 0, OPT_BACKEND},
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    cairn_sampling_params_init(&a->sp);
    a->sp.max_tokens = 256;
    cairn_engine_options_default(&a->eo);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    a->eo.n_threads = ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu;
    long v;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":p:vh", opts, NULL)) != -1) {
        switch (c) {
        case 'p': a->prompt = optarg; break;
        case OPT_CHAT: a->chat = true; break;
        case OPT_SYSTEM: a->system = optarg; break;
        case OPT_USER: a->user = optarg; break;
        case OPT_PROMPT_IDS: a->prompt_ids = optarg; break;
        case OPT_MAX_TOKENS:
            if (parse_long("--max-tokens", optarg, 1, INT32_MAX, &v))
                return 2;
            a->sp.max_tokens = (int32_t)v;
            break;
        case OPT_TEMPERATURE:
            if (parse_float("--temperature", optarg, &a->sp.temperature))
                return 2;
            break;
        case OPT_TOP_P:
            if (parse_float("--top-p", optarg, &a->sp.top_p))
                return 2;
            break;
        case OPT_TOP_K:
            if (parse_long("--top-k", optarg, -1, INT32_MAX, &v))
                return 2;
            a->sp.top_k = (int32_t)v;
            break;
        case OPT_MIN_P:
            if (parse_float("--min-p", optarg, &a->sp.min_p))
                return 2;
            break;
        case OPT_SEED:
            if (parse_u64("--seed", optarg, &a->sp.seed))
                return 2;
            a->sp.has_seed = true;
            break;
        case OPT_STOP:
            if (a->n_stops == MAX_STOPS || !optarg[0]) {
                fprintf(stderr, CMD ": --stop wants a non-empty string, at most %d of them\n", MAX_STOPS);
                return 2;
            }
            a->stops[a->n_stops++] = optarg;
            break;
        case OPT_IGNORE_EOS: a->sp.ignore_eos = true; break;
        case OPT_THREADS:
            if (parse_long("--threads", optarg, 1, 1024, &v))
                return 2;
            a->eo.n_threads = (int)v;
            break;
        case OPT_KV_DTYPE:
            if (cairn_dtype_parse(optarg, &a->eo.kv_dtype)) {
                fprintf(stderr, CMD ": --kv-dtype wants bf16, f16, f32, q8_0 or fp8_e4m3, got '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_QUANTIZE:
            if (cairn_dtype_parse(optarg, &a->quantize_to)) {
                fprintf(stderr, CMD ": --quantize wants q8_0 or q4_k (or q4_0, q5_k, q6_k), got '%s'\n", optarg);
                return 2;
            }
            a->quantize = true;
            break;
        case OPT_MATH:
            if (strcmp(optarg, "f32") == 0)
                a->eo.math = CAIRN_ENGINE_MATH_F32;
            else if (strcmp(optarg, "bf16") == 0)
                a->eo.math = CAIRN_ENGINE_MATH_BF16;
            else {
                fprintf(stderr, CMD ": --math wants f32 or bf16, got '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_POOL:
            if (parse_long("--pool-mib", optarg, 1, 1 << 20, &v))
                return 2;
            a->eo.pool_mib = (int)v;
            break;
        case OPT_SALT: a->salt = optarg; break;
        case OPT_PRINT_IDS: a->print_ids = true; break;
        case OPT_CACHE_DIR: a->cache_dir = optarg; break;
        case OPT_NO_COLD: a->no_cold = true; break;
        case OPT_BACKEND: a->eo.backend = optarg; break;
        case 'v': a->verbose++; break;
        case 'h': usage(stdout); return -1;
        case ':':
            fprintf(stderr, CMD ": %s needs a value\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, CMD ": unknown option '%s' (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, optind >= argc ? CMD ": missing MODEL_DIR (see --help)\n"
                                       : CMD ": one MODEL_DIR expected (see --help)\n");
        return 2;
    }
    a->dir = argv[optind];
    int sources = (a->prompt_ids != NULL) + (a->chat ? 1 : a->prompt != NULL);
    if (a->chat && !a->user && !a->prompt) {
        fprintf(stderr, CMD ": --chat needs --user TEXT (or -p TEXT)\n");
        return 2;
    }
    if ((a->system || a->user) && !a->chat) {
        fprintf(stderr, CMD ": --system and --user need --chat\n");
        return 2;
    }
    if (sources != 1) {
        fprintf(stderr, CMD ": give exactly one of -p TEXT, --chat or --prompt-ids (see --help)\n");
        return 2;
    }
    a->sp.stop = a->stops;
    a->sp.n_stop = (size_t)a->n_stops;
    return 0;
}

static int run(int argc, char **argv)
{
    gen_args_t a;
    memset(&a, 0, sizeof(a));
    int st = parse_args(argc, argv, &a);
    if (st)
        return st < 0 ? 0 : st;
    cairn_cli_install_logger(a.verbose);

    struct stat sb;
    if (stat(a.dir, &sb) != 0 || !(S_ISDIR(sb.st_mode) || S_ISREG(sb.st_mode))) {
        fprintf(stderr, CMD ": '%s' is not a model directory or a .gguf file\n", a.dir);
        return 1;
    }
    int status = 1;
    cairn_checkpoint_t *ck = NULL;
    cairn_tokenizer_t *tok = NULL;
    cairn_engine_t *engine = NULL;
    cairn_sched_t *sched = NULL;
    int32_t *ids = NULL;
    int n_ids = 0;
    char *text = NULL, *cold_root = NULL;
    char err[512] = "";
    stream_t sm;
    memset(&sm, 0, sizeof(sm));
    pthread_mutex_init(&sm.mu, NULL);
    pthread_cond_init(&sm.cv, NULL);
    sm.print_ids = a.print_ids;

    double t0 = cairn_now_ms();
    fprintf(stderr, "cairn: loading %s ...", a.dir);
    fflush(stderr);
    int rc = a.quantize ? cairn_checkpoint_open_quantized(a.dir, a.quantize_to, &ck, err, sizeof(err))
                        : cairn_checkpoint_open(a.dir, &ck, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "\n" CMD ": %s\n", err[0] ? err : cairn_strerror(rc));
        goto out;
    }
    rc = cairn_tokenizer_load(a.dir, &tok, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "\n" CMD ": tokenizer: %s\n", err[0] ? err : cairn_strerror(rc));
        goto out;
    }
    /* The cold tier persists the prompt's K/V, so the next invocation with the same
     * prefix restores it instead of recomputing (the engine drains the writes at exit). */
    if (a.no_cold)
        a.eo.cold = -1;
    else if ((cold_root = cairn_cold_default_root(a.cache_dir))) {
        a.eo.cold_root = cold_root;
        /* One turn, then exit: queue the whole sequence rather than the per-turn budget
         * a server keeps to bound its turn tail; exit waits for the writes (5 s at most). */
        a.eo.cold_capture_blocks = 1 << 20;
        a.eo.cold_capture_ms = 5000;
    }
    rc = cairn_engine_create(ck, &a.eo, &engine, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "\n" CMD ": %s\n", err[0] ? err : cairn_strerror(rc));
        goto out;
    }
    const cairn_model_config_t *cfg = cairn_engine_config(engine);
    fprintf(stderr, " done in %.0f ms (%s, %d layers, vocab %d, %d threads, K/V %s)\n",
            cairn_now_ms() - t0, cfg->model_type, cfg->n_layers, cfg->vocab, a.eo.n_threads,
            cairn_dtype_name(a.eo.kv_dtype));

    if (a.prompt_ids) {
        if (parse_ids(a.prompt_ids, &ids, &n_ids)) {
            status = 2;
            goto out;
        }
    } else {
        size_t len = 0, n = 0;
        bool add_special = true;
        if (a.chat) {
            if (render_chat(tok, a.system, a.user ? a.user : a.prompt, &text, &len))
                goto out;
            add_special = false; /* the template wrote the special tokens */
        } else {
            len = strlen(a.prompt);
        }
        rc = cairn_tokenizer_encode(tok, text ? text : a.prompt, len, add_special, &ids, &n);
        if (rc) {
            fprintf(stderr, CMD ": cannot tokenize the prompt (%s)\n", cairn_strerror(rc));
            goto out;
        }
        n_ids = (int)n;
    }

    rc = cairn_sched_create(engine, tok, NULL, &sched);
    if (rc) {
        fprintf(stderr, CMD ": cannot start the scheduler (%s)\n", cairn_strerror(rc));
        goto out;
    }
    cairn_req_params_t p = {0};
    p.prompt = ids;
    p.n_prompt = n_ids;
    p.cache_salt = a.salt;
    p.sampling = a.sp;
    p.n = 1;
    p.on_event = on_event;
    p.user = &sm;
    uint64_t id;
    rc = cairn_sched_submit(sched, &p, &id, err, sizeof(err));
    if (rc) {
        fprintf(stderr, CMD ": %s\n", err[0] ? err : cairn_strerror(rc));
        status = rc == CAIRN_EINVAL || rc == CAIRN_ERANGE ? 2 : 1;
        goto out;
    }
    pthread_mutex_lock(&sm.mu);
    while (!sm.final)
        pthread_cond_wait(&sm.cv, &sm.mu);
    pthread_mutex_unlock(&sm.mu);
    printf("\n");
    fflush(stdout);
    if (sm.status) {
        fprintf(stderr, CMD ": %s (%s)\n", sm.message, cairn_strerror(sm.status));
        goto out;
    }
    const cairn_req_usage_t *u = &sm.usage;
    /* Admission (queue_ms) includes the cold-tier restore, so prefill_ms is the time spent
     * computing the tokens neither cache supplied, and the rate is over those alone. */
    double prefill_ms = u->ttft_ms - u->queue_ms;
    int computed = u->prompt_tokens - u->cached_tokens - u->restored_tokens;
    fprintf(stderr,
            "cairn: prompt %d tokens: %d hot, %d restored, %d computed at %.1f tok/s; "
            "decode %.1f tok/s, %d tokens generated, finish %s\n",
            u->prompt_tokens, u->cached_tokens, u->restored_tokens, computed,
            prefill_ms > 0 ? computed / (prefill_ms / 1e3) : 0.0, u->decode_tps,
            u->completion_tokens, cairn_finish_reason_name(sm.finish));
    if (a.verbose && u->cold_reason) /* -v: what limited the cold tier's restore */
        fprintf(stderr, "cairn: cold tier: %d prompt tokens restored, reduced by: %s\n", u->restored_tokens,
                u->cold_reason);
    status = 0;
out:
    cairn_sched_destroy(sched, 0);
    cairn_engine_destroy(engine);
    cairn_tokenizer_destroy(tok);
    cairn_checkpoint_close(ck);
    cairn_free(ids);
    cairn_free(text);
    cairn_free(cold_root);
    pthread_mutex_destroy(&sm.mu);
    pthread_cond_destroy(&sm.cv);
    return status;
}

CAIRN_CLI_COMMAND(generate, "generate", "generate text from a prompt, streamed to stdout", run)
