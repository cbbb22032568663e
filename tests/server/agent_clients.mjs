// agent_clients.mjs — the official `openai` and `@anthropic-ai/sdk` clients against the
// agent test model (tests/server/agent_model.h): tool calls, reasoning and cached prompt
// tokens through chat completions, the Responses API and Anthropic Messages, streamed and
// not. The model's answer is forced by logit_bias (see agent_model.h), so every check is
// exact. Usage: node agent_clients.mjs PORT NPM_PREFIX MODEL_ID BIAS_JSON XML_PORT
// BIAS_JSON: {"call": {...}, "answer": {...}, "bad": {...}, "xml": {...}}; XML_PORT: the
// same model served with --tool-parser qwen3_coder. Exits 0 when all pass.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const [port, prefix, model, biasJson, xmlPort] = process.argv.slice(2);
const bias = JSON.parse(biasJson);
const require = createRequire(prefix + '/');
const OpenAI = require('openai');
const AnthropicMod = require('@anthropic-ai/sdk');
const Anthropic = AnthropicMod.default ?? AnthropicMod;

const base = `http://127.0.0.1:${port}`;
const oai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
const ant = new Anthropic({ baseURL: base, apiKey: 'unused', maxRetries: 0 });

const REASONING = 'The user wants the weather in Paris.';
const ANSWER = 'It is sunny in Paris.';
// Cairn's sampling extensions ride along in the body (the SDKs pass unknown fields).
const force = (b) => ({ logit_bias: b, repetition_penalty: 1e6, temperature: 0 });
const checks = [];
const check = (name) => checks.push(name);

// ---- OpenAI chat completions ---------------------------------------------------------
const chatTools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const chatMsgs = [
  { role: 'system', content: 'You are a weather agent.' },
  { role: 'user', content: 'What is the weather in Paris?' },
];

const full = await oai.chat.completions.create({
  model, messages: chatMsgs, tools: chatTools, max_tokens: 16, ...force(bias.call),
});
const m = full.choices[0].message;
assert.equal(full.choices[0].finish_reason, 'tool_calls');
assert.equal(m.content, null);
assert.equal(m.reasoning_content, REASONING);
assert.equal(m.tool_calls.length, 1);
assert.equal(m.tool_calls[0].type, 'function');
assert.equal(m.tool_calls[0].function.name, 'get_weather');
assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: 'Paris' });
assert.match(m.tool_calls[0].id, /^call_[0-9a-f]+$/);
check('chat: tool call, reasoning_content, finish_reason tool_calls');

// Streamed, through the SDK's stream helper (it assembles tool-call deltas).
const runner = oai.chat.completions.stream({
  model, messages: chatMsgs, tools: chatTools, max_tokens: 16, ...force(bias.call),
  stream_options: { include_usage: true },
});
let sawArgDelta = false;
runner.on('chunk', (c) => {
  for (const ch of c.choices) if (ch.delta?.tool_calls?.length) sawArgDelta = true;
});
const streamed = await runner.finalChatCompletion();
const sm = streamed.choices[0].message;
assert.ok(sawArgDelta);
assert.equal(streamed.choices[0].finish_reason, 'tool_calls');
assert.equal(sm.tool_calls[0].function.name, 'get_weather');
assert.equal(sm.tool_calls[0].function.arguments, m.tool_calls[0].function.arguments);
assert.ok(streamed.usage.prompt_tokens_details.cached_tokens > 0, 'same prompt: cached');
check('chat stream: tool-call deltas assembled by the SDK, cached prompt tokens');

// The tool result, second turn: the text answer, and the first turn's prompt is cached.
const turn2 = await oai.chat.completions.create({
  model, max_tokens: 16, tools: chatTools, ...force(bias.answer),
  messages: [...chatMsgs, { role: 'assistant', content: null, tool_calls: m.tool_calls },
    { role: 'tool', tool_call_id: m.tool_calls[0].id, content: '{"sky": "clear"}' }],
});
assert.equal(turn2.choices[0].message.content, ANSWER);
assert.equal(turn2.choices[0].finish_reason, 'stop');
assert.ok(turn2.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(turn2.usage));
check('chat: tool result turn answers text, prompt prefix cached');

// A malformed call stays text; tool_choice none leaves calls as text too.
const bad = await oai.chat.completions.create({
  model, messages: chatMsgs, tools: chatTools, max_tokens: 8, ...force(bias.bad),
});
assert.equal(bad.choices[0].message.content, '<tool_call>\n{not json}\n</tool_call>');
assert.equal(bad.choices[0].message.tool_calls, undefined);
assert.equal(bad.choices[0].finish_reason, 'stop');
const none = await oai.chat.completions.create({
  model, messages: chatMsgs, tools: chatTools, tool_choice: 'none', max_tokens: 16,
  ...force(bias.call),
});
assert.ok(none.choices[0].message.content.includes('<tool_call>'));
assert.equal(none.choices[0].finish_reason, 'stop');
check('chat: malformed call and tool_choice none stay text');

// Logprobs, whole and streamed: one entry per generated token, each with its alternatives.
const lpFull = await oai.chat.completions.create({
  model, messages: chatMsgs, tools: chatTools, max_tokens: 16, logprobs: true, top_logprobs: 3,
  ...force(bias.call),
});
const lpc = lpFull.choices[0].logprobs.content;
assert.equal(lpc.length, lpFull.usage.completion_tokens);
assert.equal(lpc[0].token, `<think>\n${REASONING}\n</think>\n\n`);
assert.equal(lpc[0].top_logprobs.length, 3);
assert.ok(lpc.every((t) => t.logprob <= 0 && Array.isArray(t.bytes)));
const lpStream = await oai.chat.completions.stream({
  model, messages: chatMsgs, tools: chatTools, max_tokens: 16, logprobs: true, top_logprobs: 3,
  ...force(bias.call),
}).finalChatCompletion();
assert.deepEqual(lpStream.choices[0].logprobs.content.map((t) => t.token), lpc.map((t) => t.token));
assert.deepEqual(lpStream.choices[0].logprobs.content.map((t) => t.logprob), lpc.map((t) => t.logprob));
check('chat: logprobs with top_logprobs, streamed equal to whole');

// ---- OpenAI Responses ----------------------------------------------------------------
const respTools = [{
  type: 'function', name: 'get_weather', description: 'Current weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const rstream = oai.responses.stream({
  model, instructions: 'You are a weather agent.', input: 'What is the weather in Paris?',
  tools: respTools, max_output_tokens: 16, ...force(bias.call),
});
const events = [];
let argDeltas = '';
for await (const ev of rstream) {
  events.push(ev.type);
  if (ev.type === 'response.function_call_arguments.delta') argDeltas += ev.delta;
}
const resp = await rstream.finalResponse();
assert.equal(events[0], 'response.created');
assert.equal(events.at(-1), 'response.completed');
assert.ok(events.includes('response.function_call_arguments.delta'));
assert.ok(events.includes('response.reasoning_text.delta'));
assert.equal(resp.status, 'completed');
const fc = resp.output.find((it) => it.type === 'function_call');
const rs = resp.output.find((it) => it.type === 'reasoning');
assert.equal(fc.name, 'get_weather');
assert.equal(fc.arguments, argDeltas);
assert.deepEqual(JSON.parse(fc.arguments), { city: 'Paris' });
assert.equal(rs.content[0].text, REASONING);
check('responses stream: reasoning item, function_call with argument deltas, completed');

const r2 = await oai.responses.create({
  model, instructions: 'You are a weather agent.', tools: respTools, max_output_tokens: 16,
  ...force(bias.answer),
  input: [{ role: 'user', content: 'What is the weather in Paris?' },
    { type: 'function_call', call_id: fc.call_id, name: fc.name, arguments: fc.arguments },
    { type: 'function_call_output', call_id: fc.call_id, output: '{"sky": "clear"}' }],
});
assert.equal(r2.output_text, ANSWER);
assert.ok(r2.usage.input_tokens_details.cached_tokens >= 16, JSON.stringify(r2.usage));
check('responses: function_call_output turn, output_text, cached input tokens');

// ---- Anthropic Messages --------------------------------------------------------------
const antTools = [{
  name: 'get_weather', description: 'Current weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const antReq = {
  model, max_tokens: 16, system: [{ type: 'text', text: 'You are a weather agent.',
    cache_control: { type: 'ephemeral' } }], tools: antTools,
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
};
const a1 = await ant.messages.create({ ...antReq, ...force(bias.call) });
assert.equal(a1.type, 'message');
assert.equal(a1.stop_reason, 'tool_use');
assert.deepEqual(a1.content.map((b) => b.type), ['thinking', 'tool_use']);
assert.equal(a1.content[0].thinking, REASONING);
assert.equal(a1.content[1].name, 'get_weather');
assert.deepEqual(a1.content[1].input, { city: 'Paris' });
check('anthropic: thinking and tool_use blocks, stop_reason tool_use');

const astream = ant.messages.stream({ ...antReq, ...force(bias.call) });
const kinds = [];
astream.on('streamEvent', (e) => kinds.push(e.type));
const a2 = await astream.finalMessage();
assert.equal(kinds[0], 'message_start');
assert.equal(kinds.at(-1), 'message_stop');
assert.equal(a2.stop_reason, 'tool_use');
assert.deepEqual(a2.content[1].input, { city: 'Paris' });
assert.equal(a2.content[0].thinking, REASONING);
assert.ok(a2.usage.cache_read_input_tokens > 0, JSON.stringify(a2.usage));
check('anthropic stream: events, input_json_delta assembled, cache_read_input_tokens');

const a3 = await ant.messages.create({
  ...antReq, ...force(bias.answer),
  messages: [...antReq.messages, { role: 'assistant', content: a1.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: a1.content[1].id,
      content: '{"sky": "clear"}' }] }],
});
assert.equal(a3.stop_reason, 'end_turn');
assert.equal(a3.content[0].text, ANSWER);
assert.ok(a3.usage.cache_read_input_tokens >= 16, JSON.stringify(a3.usage));
const antModels = await ant.models.list();
assert.equal(antModels.data[0].id, model);
assert.equal(antModels.data[0].type, 'model');
const count = await ant.messages.countTokens({ model, messages: antReq.messages, system: 'x' });
assert.ok(count.input_tokens > 0);
check('anthropic: tool_result turn, cache_read_input_tokens, count_tokens, models.list');

try {
  await ant.messages.create({ model, messages: antReq.messages });
  assert.fail('expected a 400');
} catch (e) {
  assert.ok(e instanceof Anthropic.BadRequestError, String(e));
  assert.equal(e.error?.error?.type, 'invalid_request_error');
}
check('anthropic: errors in Anthropic shape');

// ---- The qwen3_coder (XML) format: parameters stream one by one, typed by the schema --
const xoai = new OpenAI({ baseURL: `http://127.0.0.1:${xmlPort}/v1`, apiKey: 'unused', maxRetries: 0 });
const xant = new Anthropic({ baseURL: `http://127.0.0.1:${xmlPort}`, apiKey: 'unused', maxRetries: 0 });
const xmlTools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather forecast of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } },
  },
}];
const argPieces = [];
const xrun = xoai.chat.completions.stream({
  model, messages: chatMsgs, tools: xmlTools, max_tokens: 16, ...force(bias.xml),
});
xrun.on('chunk', (c) => {
  for (const tc of c.choices[0]?.delta?.tool_calls ?? []) {
    if (tc.function?.arguments) argPieces.push(tc.function.arguments);
  }
});
const xs = await xrun.finalChatCompletion();
assert.equal(xs.choices[0].finish_reason, 'tool_calls');
assert.equal(xs.choices[0].message.reasoning_content, REASONING);
assert.equal(xs.choices[0].message.tool_calls[0].function.name, 'get_weather');
assert.deepEqual(JSON.parse(xs.choices[0].message.tool_calls[0].function.arguments),
  { city: 'Paris', days: 3 });
assert.ok(argPieces.length >= 2, `arguments in ${argPieces.length} deltas`);
const xa = await xant.messages.stream({
  model, max_tokens: 16, messages: antReq.messages, ...force(bias.xml),
  tools: [{ name: 'get_weather', input_schema: xmlTools[0].function.parameters }],
}).finalMessage();
assert.equal(xa.stop_reason, 'tool_use');
assert.deepEqual(xa.content.find((b) => b.type === 'tool_use').input, { city: 'Paris', days: 3 });
check('qwen3_coder: XML call streamed per parameter, typed by the schema (chat, anthropic)');

for (const c of checks) console.log('ok -', c);
console.log(`agent clients: ${checks.length} checks passed`);
