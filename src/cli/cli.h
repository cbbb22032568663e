/*
 * cli.h — the `cairn` command's subcommand registry.
 *
 * Each subcommand lives in its own file src/cli/cmd_<name>.c and registers itself with
 * CAIRN_CLI_COMMAND(name, summary, fn) at load time, so adding a command edits no shared
 * file. A command returns the process exit status (0 ok, 1 failure, 2 usage error) and
 * prints its own errors to stderr; `--help` goes to stdout.
 */
#ifndef CAIRN_CLI_H
#define CAIRN_CLI_H

typedef int (*cairn_cli_fn)(int argc, char **argv); /* argv[0] is the command name */

typedef struct cairn_cli_command {
    const char *name;
    const char *summary; /* one line for `cairn --help` */
    cairn_cli_fn run;
    struct cairn_cli_command *next;
} cairn_cli_command_t;

void cairn_cli_register(cairn_cli_command_t *cmd);

#define CAIRN_CLI_COMMAND(ident, name_, summary_, fn_)                              \
    static cairn_cli_command_t cli_cmd_##ident = {name_, summary_, fn_, 0};         \
    __attribute__((constructor)) static void cli_register_##ident(void)             \
    {                                                                               \
        cairn_cli_register(&cli_cmd_##ident);                                       \
    }

#include <stddef.h>

/* Prints s[0..n) to stdout as a double-quoted string with \n, \t, \r, quotes,
 * backslashes and other control bytes escaped (for showing token pieces and texts). */
void cairn_cli_print_escaped(const char *s, size_t n);

/* Installs a stderr log handler that prints warnings and errors ("cairn: warning: ..."). */
void cairn_cli_install_logger(int verbose);

#endif
