/*
 * test_http_openai_client.c — the official `openai` npm package against the server: an
 * in-process server on an ephemeral loopback port, tests/server/setup_client.sh installs
 * the package into the build tree, and openai_client.mjs streams and non-streams chat
 * completions, lists models, and checks error mapping. No node, npm or registry is a
 * failure, not a skip.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "http_test_util.h"

#ifndef CAIRN_SOURCE_DIR
#error "CAIRN_SOURCE_DIR must be defined"
#endif

static void test_openai_npm_client(void **state)
{
    signal(SIGPIPE, SIG_IGN);
    char cmd[4096];
    const char *prefix = CAIRN_BINARY_DIR "/tests/server/npm";
    snprintf(cmd, sizeof cmd, "bash '%s/tests/server/setup_client.sh' '%s'", CAIRN_SOURCE_DIR, prefix);
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "setup_client.sh failed (%d): node/npm/registry unavailable?\n", rc);
    assert_int_equal(rc, 0);

    test_server_t ts;
    assert_int_equal(test_server_start(&ts, "qwen3", NULL, 32), 0);
    snprintf(cmd, sizeof cmd, "node '%s/tests/server/openai_client.mjs' %d '%s' qwen3",
             CAIRN_SOURCE_DIR, ts.port, prefix);
    rc = system(cmd);
    test_server_stop(&ts);
    assert_int_equal(rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_openai_npm_client)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
