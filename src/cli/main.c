/*
 * main.c — entry point of the `cairn` command: dispatches to registered subcommands.
 */
#include <stdio.h>
#include <string.h>

#include "cairn/common.h"
#include "cli/cli.h"

static cairn_cli_command_t *commands;

void cairn_cli_register(cairn_cli_command_t *cmd)
{
    /* Keep the list sorted by name so --help is stable. */
    cairn_cli_command_t **p = &commands;
    while (*p && strcmp((*p)->name, cmd->name) < 0)
        p = &(*p)->next;
    cmd->next = *p;
    *p = cmd;
}

static void log_to_stderr(cairn_log_level_t level, const char *msg, void *user)
{
    int verbose = (int)(long)user;
    if (level == CAIRN_LOG_DEBUG && verbose < 2)
        return;
    if (level == CAIRN_LOG_INFO && verbose < 1)
        return;
    static const char *names[] = {"debug", "info", "warning", "error"};
    fprintf(stderr, "cairn: %s: %s\n", names[level], msg);
}

void cairn_cli_install_logger(int verbose) { cairn_log_set_handler(log_to_stderr, (void *)(long)verbose); }

void cairn_cli_print_escaped(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c < 0x20 || c == 0x7F)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cairn COMMAND [ARGS...]\n"
            "\n"
            "Cairn is an LLM inference runtime with a block-paged, prefix-shared,\n"
            "tenant-isolated KV cache.\n"
            "\n"
            "commands:\n");
    for (cairn_cli_command_t *c = commands; c; c = c->next)
        fprintf(out, "  %-16s %s\n", c->name, c->summary);
    fprintf(out, "  %-16s %s\n", "version", "print the version");
    fprintf(out, "\nRun `cairn COMMAND --help` for a command's options.\n");
}

int main(int argc, char **argv)
{
    cairn_init(); /* before any command parses JSON (include/cairn/common.h) */
    cairn_cli_install_logger(0);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(name, "version") || !strcmp(name, "--version")) {
        printf("cairn %s\n", cairn_version());
        return 0;
    }
    for (cairn_cli_command_t *c = commands; c; c = c->next)
        if (!strcmp(c->name, name))
            return c->run(argc - 1, argv + 1);
    fprintf(stderr, "cairn: unknown command '%s' (see `cairn --help`)\n", name);
    return 2;
}
