// gpt-oss tool calls through `pagoda serve` with the official openai npm
// client: the server renders the harmony prompt (tools, reasoning_effort),
// the scripted model (scripted_gpt_oss.py: greedy output is one fixed
// harmony tool call) answers, and the client reads message.tool_calls /
// streamed tool-call deltas with finish_reason "tool_calls".
// Env as openai.test.mjs (PAGODA_CMD, PAGODA_SERVE_MODEL = the scripted model).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { startServer, stopServer } from './serve.mjs';

const MODEL_DIR = process.env.PAGODA_SERVE_MODEL;

let server;
let client;

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const messages = [
  { role: 'system', content: 'You are a weather bot.' },
  { role: 'user', content: 'What is the weather in Paris?' },
];

before(async () => {
  const started = await startServer([MODEL_DIR]);
  server = started.proc;
  client = new OpenAI({ apiKey: 'unused', baseURL: started.baseURL, maxRetries: 0, timeout: 120000 });
});

after(async () => {
  if (server) await stopServer(server);
});

describe('gpt-oss tool calls (harmony) with the openai client', () => {
  test('non-streamed: message.tool_calls', async () => {
    const models = await client.models.list();
    const r = await client.chat.completions.create({
      model: models.data[0].id, messages, tools, temperature: 0, reasoning_effort: 'low',
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.role, 'assistant');
    assert.ok(!c.message.content, `content: ${JSON.stringify(c.message.content)}`);
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.ok(call.id.length > 0);
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
  });

  test('streamed: tool-call deltas add up to the same call', async () => {
    const models = await client.models.list();
    const stream = await client.chat.completions.create({
      model: models.data[0].id, messages, tools, temperature: 0, stream: true,
    });
    const calls = [];
    let finish = null;
    let content = '';
    for await (const chunk of stream) {
      for (const ch of chunk.choices) {
        if (ch.delta.content) content += ch.delta.content;
        for (const d of ch.delta.tool_calls ?? []) {
          if (!calls[d.index]) calls[d.index] = { id: d.id, name: d.function?.name, arguments: '' };
          if (d.function?.arguments) calls[d.index].arguments += d.function.arguments;
        }
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(content, '');
    assert.equal(calls.length, 1);
    assert.ok(calls[0].id.length > 0);
    assert.equal(calls[0].name, 'get_weather');
    assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris' });
  });

  test('the streaming helper of the client reads the final tool call', async () => {
    const models = await client.models.list();
    const runner = client.chat.completions.stream({
      model: models.data[0].id, messages, tools, temperature: 0,
    });
    const final = await runner.finalChatCompletion();
    const call = final.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
  });
});
