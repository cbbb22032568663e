/*
 * test_http_agent_clients.c — tool calls, reasoning and cached tokens end to end through
 * the official clients: an in-process server over the agent test model (agent_model.h,
 * whose answers a request forces), tests/server/setup_client.sh installs `openai` and
 * `@anthropic-ai/sdk` into the build tree, and agent_clients.mjs drives chat completions,
 * the Responses API and Anthropic Messages, and a second server with the qwen3_coder (XML)
 * tool parser for the streamed XML calls. No node, npm or registry is a failure, not a
 * skip.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "agent_model.h"
#include "http_test_util.h"

#ifndef CAIRN_SOURCE_DIR
#error "CAIRN_SOURCE_DIR must be defined"
#endif

static void test_agent_clients(void **state)
{
    signal(SIGPIPE, SIG_IGN);
    char cmd[8192];
    const char *prefix = CAIRN_BINARY_DIR "/tests/server/npm";
    snprintf(cmd, sizeof cmd, "bash '%s/tests/server/setup_client.sh' '%s'", CAIRN_SOURCE_DIR, prefix);
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "setup_client.sh failed (%d): node/npm/registry unavailable?\n", rc);
    assert_int_equal(rc, 0);

    const char *dir = CAIRN_BINARY_DIR "/tests/server/agent-model";
    assert_int_equal(agent_model_write(dir, 2, 4096), 0);
    test_server_t ts, xml;
    assert_int_equal(test_server_start_dir(&ts, dir, "agent", NULL, 64, 4096), 0);
    /* The same model with the qwen3_coder (XML) tool parser, as a Qwen3.5 template picks. */
    cairn_server_options_t so;
    cairn_server_options_default(&so);
    so.port = 0;
    so.tool_parser = "qwen3_coder";
    assert_int_equal(test_server_start_dir(&xml, dir, "agent", &so, 64, 4096), 0);
    snprintf(cmd, sizeof cmd,
             "node '%s/tests/server/agent_clients.mjs' %d '%s' agent "
             "'{\"call\": %s, \"answer\": %s, \"bad\": %s, \"xml\": %s}' %d",
             CAIRN_SOURCE_DIR, ts.port, prefix, agent_bias_tool_call(), agent_bias_answer(),
             agent_bias_bad_call(), agent_bias_xml_call(), xml.port);
    rc = system(cmd);
    test_server_stop(&xml);
    test_server_stop(&ts);
    assert_int_equal(rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_agent_clients)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
