/*
 * test_http_agent_clients.c — tool calls, reasoning and cached tokens end to end through
 * the official clients: an in-process server over the agent test model (agent_model.h,
 * whose answers a request forces), tests/server/setup_client.sh installs `openai` and
 * `@anthropic-ai/sdk` into the build tree, and agent_clients.mjs drives chat completions,
 * the Responses API and Anthropic Messages, and servers with the qwen3_coder (XML),
 * llama3_json, pythonic and tool_code tool parsers for those formats' streamed calls, and
 * one running a request at a time with a short keepalive (Anthropic's ping events while a
 * stream waits). No node, npm or registry is a failure, not a
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
    /* The other formats, each on a server with that tool parser. */
    static const char *const fmts[] = {"llama3_json", "pythonic", "tool_code"};
    test_server_t fs[3];
    for (int i = 0; i < 3; i++) {
        so.tool_parser = fmts[i];
        assert_int_equal(test_server_start_dir(&fs[i], dir, "agent", &so, 64, 4096), 0);
    }
    /* One request at a time and a short keepalive: a queued stream gets keepalives. */
    cairn_server_options_default(&so);
    so.port = 0;
    so.keepalive_ms = 100;
    so.sched.max_running = 1;
    test_server_t ka;
    assert_int_equal(test_server_start_dir(&ka, dir, "agent", &so, 64, 4096), 0);
    snprintf(cmd, sizeof cmd,
             "node '%s/tests/server/agent_clients.mjs' %d '%s' agent "
             "'{\"call\": %s, \"answer\": %s, \"bad\": %s, \"xml\": %s, \"llama3_json\": %s, "
             "\"pythonic\": %s, \"tool_code\": %s, \"gemma_json\": %s}' %d "
             "'{\"llama3_json\": %d, \"pythonic\": %d, \"tool_code\": %d}' %d",
             CAIRN_SOURCE_DIR, ts.port, prefix, agent_bias_tool_call(), agent_bias_answer(),
             agent_bias_bad_call(), agent_bias_xml_call(), agent_bias_format_call("llama3_json"),
             agent_bias_format_call("pythonic"), agent_bias_format_call("tool_code"),
             agent_bias_format_call("gemma_json"), xml.port, fs[0].port, fs[1].port, fs[2].port,
             ka.port);
    rc = system(cmd);
    test_server_stop(&ka);
    for (int i = 0; i < 3; i++)
        test_server_stop(&fs[i]);
    test_server_stop(&xml);
    test_server_stop(&ts);
    assert_int_equal(rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_agent_clients)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
