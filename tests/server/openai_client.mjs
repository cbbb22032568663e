// openai_client.mjs — drives the server with the official `openai` npm client.
// Usage: node openai_client.mjs PORT NPM_PREFIX MODEL_ID
// Exits 0 when every check passes; prints what failed otherwise.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const [port, prefix, model] = process.argv.slice(2);
const require = createRequire(prefix + '/');
const OpenAI = require('openai');

const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0 });
const messages = [
  { role: 'system', content: 'You are a terse assistant that answers in one line.' },
  { role: 'user', content: 'Name a color.' },
];

const models = await client.models.list();
assert.equal(models.data[0].id, model);

const full = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0 });
assert.equal(full.object, 'chat.completion');
assert.equal(full.choices[0].message.role, 'assistant');
assert.equal(typeof full.choices[0].message.content, 'string');
assert.ok(['stop', 'length'].includes(full.choices[0].finish_reason));
assert.ok(full.usage.prompt_tokens > 0);
assert.equal(full.usage.total_tokens, full.usage.prompt_tokens + full.usage.completion_tokens);

const stream = await client.chat.completions.create({
  model, messages, max_tokens: 10, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
let text = '';
let finish = null;
let usage = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    if (c.delta?.content) text += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
assert.equal(text, full.choices[0].message.content);
assert.equal(finish, full.choices[0].finish_reason);
assert.ok(usage && usage.completion_tokens === full.usage.completion_tokens);
assert.ok(usage.prompt_tokens_details.cached_tokens > 0, 'second request should hit the cache');

// The stream helper too.
const runner = client.chat.completions.stream({ model, messages, max_tokens: 10, temperature: 0 });
const final = await runner.finalChatCompletion();
assert.equal(final.choices[0].message.content, full.choices[0].message.content);

const comp = await client.completions.create({ model, prompt: 'Once upon', max_tokens: 5, temperature: 0 });
assert.equal(comp.object, 'text_completion');
assert.equal(typeof comp.choices[0].text, 'string');

// Errors surface as APIError with the server's status and message.
try {
  await client.chat.completions.create({ model, messages, temperature: 'hot' });
  assert.fail('expected a 400');
} catch (e) {
  assert.ok(e instanceof OpenAI.APIError, String(e));
  assert.equal(e.status, 400);
  assert.equal(e.param, 'temperature');
}
try {
  await client.chat.completions.create({ model: 'no-such-model', messages });
  assert.fail('expected a 404');
} catch (e) {
  assert.equal(e.status, 404);
}
console.log('openai client: all checks passed');
