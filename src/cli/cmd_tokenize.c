/*
 * cmd_tokenize.c — `cairn tokenize TOKENIZER_DIR TEXT`: prints the ids of TEXT (one line,
 * space-separated), or with --pieces one token per line (id, vocab string, decoded bytes).
 * TEXT "-" reads standard input. Exit status 0, 1 on a load/encode error, 2 on usage.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn/tokenizer.h"
#include "cli/cli.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cairn tokenize TOKENIZER_DIR TEXT [--pieces] [--add-special] [--split-special]\n"
            "\n"
            "Encodes TEXT (\"-\" reads standard input) with the tokenizer.json in TOKENIZER_DIR\n"
            "(a directory or the file itself), or the tokenizer of a .gguf file, and prints\n"
            "the ids on one line.\n"
            "\n"
            "  --pieces         one token per line: id, vocab string, decoded bytes (escaped)\n"
            "  --add-special    run the post-processor (BOS/EOS), like add_special_tokens=True\n"
            "  --split-special  treat special tokens in TEXT as plain text\n");
}

static char *read_stdin(size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n, stdin);
        n += k;
        if (k == 0) break;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); return NULL; }
            buf = nb;
        }
    }
    *len = n;
    return buf;
}

static int run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"pieces", no_argument, 0, 'p'},
        {"add-special", no_argument, 0, 'a'},
        {"split-special", no_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    bool pieces = false;
    unsigned flags = 0;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "pash", opts, NULL)) != -1) {
        switch (c) {
        case 'p': pieces = true; break;
        case 'a': flags |= CAIRN_TOKENIZE_ADD_SPECIAL; break;
        case 's': flags |= CAIRN_TOKENIZE_SPLIT_SPECIAL; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 2) {
        usage(stderr);
        return 2;
    }
    const char *dir = argv[optind], *arg = argv[optind + 1];
    char err[512];
    cairn_tokenizer_t *tok = NULL;
    int rc = cairn_tokenizer_load(dir, &tok, err, sizeof err);
    if (rc) {
        fprintf(stderr, "cairn tokenize: %s: %s (%s)\n", dir, err, cairn_strerror(rc));
        return 1;
    }
    char *owned = NULL;
    size_t len = strlen(arg);
    if (strcmp(arg, "-") == 0) {
        owned = read_stdin(&len);
        if (!owned) {
            fprintf(stderr, "cairn tokenize: cannot read standard input\n");
            cairn_tokenizer_destroy(tok);
            return 1;
        }
        arg = owned;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    rc = cairn_tokenizer_encode_ex(tok, arg, len, flags, &ids, &n);
    if (rc) {
        fprintf(stderr, "cairn tokenize: %s\n",
                rc == CAIRN_EINVAL ? "the text is not valid UTF-8" : cairn_strerror(rc));
    } else if (pieces) {
        for (size_t i = 0; i < n; i++) {
            char buf[256];
            size_t plen = 0;
            cairn_tokenizer_token_to_piece(tok, ids[i], buf, sizeof buf, &plen);
            printf("%d\t%s\t", ids[i], cairn_tokenizer_token_text(tok, ids[i]));
            cairn_cli_print_escaped(buf, plen < sizeof buf ? plen : sizeof buf);
            putchar('\n');
        }
    } else {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    cairn_free(ids);
    free(owned);
    cairn_tokenizer_destroy(tok);
    return rc ? 1 : 0;
}

CAIRN_CLI_COMMAND(tokenize, "tokenize", "print the token ids (or pieces) of a text", run)
