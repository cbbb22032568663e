/*
 * agent_model.h — a model for agent tests whose output a request can force: seeded random
 * weights (synth, 'tiny' shape in the qwen3 layout), the real Qwen3 tokenizer and chat
 * template (tools, <think>, <tool_call>), and a few extra added tokens whose texts are
 * whole pieces of an agent's answer. A request with logit_bias on those tokens in falling
 * order, repetition_penalty 1e6 (a generated token's biased logit drops to ~0, so the
 * next biased one wins; the penalty covers the prompt too, so a piece already in the
 * conversation is skipped) and a bias on <|endoftext|> (an eos id here) below them makes
 * the greedy output exactly that sequence of pieces, then stops. Test code.
 */
#ifndef CAIRN_TESTS_AGENT_MODEL_H
#define CAIRN_TESTS_AGENT_MODEL_H

#include <stddef.h>

#define AGENT_EOT 151643        /* <|endoftext|>: an eos id of the agent model */
#define AGENT_T_THINK 151669    /* "<think>\nThe user wants the weather in Paris.\n</think>\n\n" */
#define AGENT_T_CALL1 151670    /* "<tool_call>\n{\"name\": \"get_weather\", " */
#define AGENT_T_CALL2 151671    /* "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>" */
#define AGENT_T_ANSWER 151672   /* "It is sunny in Paris." */
#define AGENT_T_BAD 151673      /* "<tool_call>\n{not json}\n</tool_call>" */
#define AGENT_T_XML1 151674    /* "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n" */
#define AGENT_T_XML2 151675    /* "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>" */
#define AGENT_T_BASH 151676    /* a hermes call of Claude Code's Bash tool: echo cairn-tool-ok */
#define AGENT_T_MARKER 151677  /* "cairn-tool-ok", an eos id: ends the Bash call's turn, and
                                * is in the next prompt (the tool's output) */
#define AGENT_T_TURN0 151678   /* + t (t < AGENT_TURNS): a whole get_weather call whose
                                * arguments name day t (each turn of a replay its own) */
#define AGENT_TURNS 16
#define AGENT_HELLO 9707        /* "Hello", an ordinary token */
#define AGENT_VOCAB 151700      /* embedding rows (the tokenizer has 151694 ids) */

/* Writes the model into dir (created; reused when dir/.complete names this version):
 * n_layers layers, max_pos positions. Returns 0 or -1 with a message on stderr. (A client
 * that cannot add logit_bias to its requests, like an agent CLI, can often be given
 * extra body fields: Claude Code's CLAUDE_CODE_EXTRA_BODY.) */
int agent_model_write(const char *dir, int n_layers, int max_pos);

/* The logit_bias JSON object that forces the tool-call answer (reasoning, then the
 * get_weather call, then eos), or the text answer, e.g. {"151669": 100, ...}. Static. */
const char *agent_bias_tool_call(void);
const char *agent_bias_answer(void);
const char *agent_bias_bad_call(void);
/* The same call in the qwen3_coder (XML) format, for a server with that tool parser. */
const char *agent_bias_xml_call(void);
/* Turn t's call (reasoning, then call AGENT_T_TURN0 + t, then eos): the pieces of earlier
 * turns are in the prompt and penalized, so a conversation can call again every turn.
 * Returns a static buffer (one thread), NULL when t >= AGENT_TURNS. */
const char *agent_bias_turn_call(int t);

#endif
