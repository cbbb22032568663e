/*
 * bench_tokenizer.c — tokenizer load time and encode/decode throughput.
 *
 * usage: bench_tokenizer TOKENIZER_DIR... [--mb N] [--reps R]
 *
 * For each tokenizer: the median wall time of R loads; then encode throughput on N MB of
 * deterministic English-like text (a Zipf mix of common words and generated rarer words,
 * with punctuation, numbers and newlines, so the word cache sees realistic hit rates), as
 * one call and as 4 KB calls; then decode throughput. Prints medians of R repetitions.
 * Not a test: built by CMake, never run by ctest.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cairn/tokenizer.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU time of this thread: on a shared, busy machine it is steadier than wall time. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static const char *common[] = {
    "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on",
    "are", "with", "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "or",
    "had", "by", "not", "word", "but", "what", "some", "we", "can", "out", "other", "were",
    "all", "there", "when", "up", "use", "your", "how", "said", "an", "each", "she", "which",
    "do", "their", "time", "if", "will", "way", "about", "many", "then", "them", "write",
    "would", "like", "so", "these", "her", "long", "make", "thing", "see", "him", "two",
    "has", "look", "more", "day", "could", "go", "come", "did", "number", "sound", "no",
    "most", "people", "my", "over", "know", "water", "than", "call", "first", "who", "may",
    "down", "side", "been", "now", "find", "cache", "memory", "block", "request", "model",
    "system", "design", "between", "through", "because", "different", "important", "However",
    "The", "In", "It", "This", "We", "performance", "latency", "throughput", "tokens",
};

/* Appends a generated word for rank r (deterministic: same rank, same word). */
static size_t gen_word(char *out, uint64_t r)
{
    static const char *syl[] = {"ka", "ro", "mi", "ten", "sul", "pre", "con", "ver", "ing",
                                "al", "tion", "ex", "ment", "ly", "de", "par", "ous", "in",
                                "st", "ab", "ic", "or", "un", "ble", "tra", "ph", "ze", "qu"};
    uint64_t h = r * 0x9E3779B97F4A7C15ull + 12345;
    int ns = 1 + (int)(h % 4);
    size_t n = 0;
    for (int i = 0; i < ns; i++) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        const char *s = syl[(h >> 33) % (sizeof syl / sizeof syl[0])];
        size_t k = strlen(s);
        memcpy(out + n, s, k);
        n += k;
    }
    return n;
}

static char *make_text(size_t bytes)
{
    char *t = malloc(bytes + 64);
    if (!t) return NULL;
    size_t n = 0;
    int in_sentence = 0;
    while (n < bytes) {
        uint64_t x = rng();
        double u = (double)(x >> 11) * (1.0 / 9007199254740992.0);
        if (n) t[n++] = ' ';
        if (u < 0.75) {
            const char *w = common[(size_t)(pow(u / 0.75, 2.0) * (sizeof common / sizeof common[0]))];
            size_t k = strlen(w);
            memcpy(t + n, w, k);
            n += k;
        } else if (u < 0.97) {
            /* Zipf-like rank over 50,000 generated words. */
            uint64_t r = (uint64_t)exp(log(50000.0) * ((u - 0.75) / 0.22));
            n += gen_word(t + n, r);
        } else {
            n += (size_t)sprintf(t + n, "%u", (unsigned)(x % 100000));
        }
        if (++in_sentence > 8 + (int)(x % 12)) {
            t[n++] = (x >> 20) % 5 == 0 ? ',' : '.';
            if ((x >> 24) % 6 == 0) t[n++] = '\n';
            in_sentence = 0;
        }
    }
    t[n] = '\0';
    return t;
}

int main(int argc, char **argv)
{
    double mb = 4.0;
    int reps = 5;
    const char *dirs[16];
    int ndirs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (ndirs < 16) dirs[ndirs++] = argv[i];
    }
    if (!ndirs || reps < 1 || reps > 100 || mb <= 0) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER_DIR... [--mb N] [--reps R]\n"
                        "(e.g. build/fixtures/tokenizers/qwen3, decompressed by the test build)\n");
        return 2;
    }
    size_t bytes = (size_t)(mb * 1024 * 1024);
    char *text = make_text(bytes);
    if (!text) return 1;
    bytes = strlen(text);
    double *v = calloc((size_t)reps, sizeof *v), *c = calloc((size_t)reps, sizeof *c);
    if (!v || !c) return 1;

    for (int d = 0; d < ndirs; d++) {
        char err[256];
        cairn_tokenizer_t *tok = NULL;
        for (int r = 0; r < reps; r++) {
            cairn_tokenizer_destroy(tok);
            double t0 = now_s(), c0 = cpu_s();
            int rc = cairn_tokenizer_load(dirs[d], &tok, err, sizeof err);
            v[r] = now_s() - t0;
            c[r] = cpu_s() - c0;
            if (rc) {
                fprintf(stderr, "%s: %s\n", dirs[d], err);
                return 1;
            }
        }
        printf("%s: vocab %zu, load median %.1f ms wall, %.1f ms CPU\n", dirs[d],
               cairn_tokenizer_vocab_size(tok), median(v, reps) * 1e3, median(c, reps) * 1e3);

        int32_t *ids = NULL;
        size_t n = 0;
        for (int r = 0; r < reps; r++) {
            cairn_free(ids);
            double t0 = now_s(), c0 = cpu_s();
            if (cairn_tokenizer_encode(tok, text, bytes, false, &ids, &n)) return 1;
            v[r] = now_s() - t0;
            c[r] = cpu_s() - c0;
        }
        double mbytes = (double)bytes / 1048576.0;
        printf("  encode %.1f MB in one call: median %.1f MB/s wall, %.1f MB/s CPU (%zu tokens, %.2f bytes/token)\n",
               mbytes, mbytes / median(v, reps), mbytes / median(c, reps), n, (double)bytes / (double)n);

        for (int r = 0; r < reps; r++) {
            double t0 = now_s(), c0 = cpu_s();
            for (size_t off = 0; off < bytes;) {
                size_t len = bytes - off < 4096 ? bytes - off : 4096;
                while (off + len < bytes && ((unsigned char)text[off + len] & 0xC0) == 0x80) len++;
                int32_t *ci;
                size_t cn;
                if (cairn_tokenizer_encode(tok, text + off, len, false, &ci, &cn)) return 1;
                cairn_free(ci);
                off += len;
            }
            v[r] = now_s() - t0;
            c[r] = cpu_s() - c0;
        }
        printf("  encode in 4 KB calls: median %.1f MB/s wall, %.1f MB/s CPU\n", mbytes / median(v, reps),
               mbytes / median(c, reps));

        for (int r = 0; r < reps; r++) {
            char *out;
            size_t olen;
            double t0 = now_s(), c0 = cpu_s();
            if (cairn_tokenizer_decode(tok, ids, n, false, &out, &olen)) return 1;
            v[r] = now_s() - t0;
            c[r] = cpu_s() - c0;
            if (olen != bytes || memcmp(out, text, bytes) != 0) {
                fprintf(stderr, "decode(encode(text)) != text\n");
                return 1;
            }
            cairn_free(out);
        }
        printf("  decode: median %.1f MB/s wall, %.1f MB/s CPU\n", mbytes / median(v, reps),
               mbytes / median(c, reps));
        cairn_free(ids);
        cairn_tokenizer_destroy(tok);
    }
    free(v);
    free(c);
    free(text);
    return 0;
}
