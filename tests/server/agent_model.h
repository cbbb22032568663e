/*
 * agent_model.h — a model for agent tests whose output a request can force: seeded random
 * weights (synth, 'tiny' shape in the qwen3 layout), the real Qwen3 tokenizer and chat
 * template (tools, <think>, <tool_call>), and a few extra added tokens whose texts are
 * whole pieces of an agent's answer. A request with logit_bias on those tokens in falling
 * order, repetition_penalty 1e6 (a generated token's biased logit drops to ~0, so the
 * next biased one wins) and a bias on <|endoftext|> (an eos id here) below them makes
 * the greedy output exactly that sequence of pieces, then stops. Test code.
 */
#ifndef CAIRN_TESTS_AGENT_MODEL_H
#define CAIRN_TESTS_AGENT_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#define AGENT_EOT 151643        /* <|endoftext|>: an eos id of the agent model */
#define AGENT_T_THINK 151669    /* "<think>\nThe user wants the weather in Paris.\n</think>\n\n" */
#define AGENT_T_CALL1 151670    /* "<tool_call>\n{\"name\": \"get_weather\", " */
#define AGENT_T_CALL2 151671    /* "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>" */
#define AGENT_T_ANSWER 151672   /* "It is sunny in Paris." */
#define AGENT_T_BAD 151673      /* "<tool_call>\n{not json}\n</tool_call>" */
#define AGENT_HELLO 9707        /* "Hello": the quick_stop model's whole answer */
#define AGENT_VOCAB 151680      /* embedding rows (the tokenizer has 151674 ids) */

/* Writes the model into dir (created; reused when dir/.complete exists): n_layers layers,
 * max_pos positions. quick_stop: the weights are patched so that every answer is "Hello"
 * then <|im_end|> (for clients that cannot force the answer, like an agent CLI;
 * logit_bias no longer steers it). Returns 0 or -1 with a message on stderr. */
int agent_model_write(const char *dir, int n_layers, int max_pos, bool quick_stop);

/* The logit_bias JSON object that forces the tool-call answer (reasoning, then the
 * get_weather call, then eos), or the text answer, e.g. {"151669": 100, ...}. Static. */
const char *agent_bias_tool_call(void);
const char *agent_bias_answer(void);
const char *agent_bias_bad_call(void);

#endif
