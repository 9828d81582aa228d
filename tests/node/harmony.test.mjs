// gpt-oss tool calls through `pagoda serve` with the official openai npm
// client: the server renders the harmony prompt (tools, reasoning_effort),
// the scripted model (scripted_gpt_oss.py: greedy output is one fixed
// harmony tool call) answers, and the client reads message.tool_calls /
// streamed tool-call deltas with finish_reason "tool_calls".
// Structured outputs constrain only the final channel's content: the
// scripted model's variant that answers in the final channel
// (PAGODA_FINAL_MODEL, scripted_gpt_oss.py ... final) is steered by a
// response_format after its <|channel|>final<|message|>, and the tool-call
// model's commentary stays free under one.
// Env as openai.test.mjs (PAGODA_CMD, PAGODA_SERVE_MODEL = the scripted model),
// and PAGODA_FINAL_MODEL.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import { startServer, stopServer } from './serve.mjs';

const MODEL_DIR = process.env.PAGODA_SERVE_MODEL;
const FINAL_DIR = process.env.PAGODA_FINAL_MODEL;

let server;
let client;
let finalServer;
let finalClient;

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
  assert.ok(FINAL_DIR, 'PAGODA_FINAL_MODEL (scripted_gpt_oss.py SRC OUT final) is not set');
  const fin = await startServer([FINAL_DIR]);
  finalServer = fin.proc;
  finalClient = new OpenAI({ apiKey: 'unused', baseURL: fin.baseURL, maxRetries: 0,
    timeout: 120000 });
});

after(async () => {
  if (server) await stopServer(server);
  if (finalServer) await stopServer(finalServer);
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

describe('gpt-oss structured outputs constrain the final channel (harmony)', () => {
  const schema = { type: 'object', properties: { city: { enum: ['Oslo', 'Tokyo'] } },
    required: ['city'], additionalProperties: false };
  const formats = [
    ['response_format', { response_format: { type: 'json_schema',
      json_schema: { name: 'place', schema, strict: true } } }],
    ['guided_json', { guided_json: schema }],
  ];

  test('free, the model answers {"city": "Paris"} in the final channel', async () => {
    const model = (await finalClient.models.list()).data[0].id;
    const r = await finalClient.chat.completions.create({ model, messages, temperature: 0 });
    assert.equal(r.choices[0].message.content, '{"city": "Paris"}');
    assert.equal(r.choices[0].finish_reason, 'stop');
  });

  test('a schema steers the final content; streamed the same', async () => {
    const model = (await finalClient.models.list()).data[0].id;
    for (const [name, extra] of formats) {
      const params = { model, messages, temperature: 0, max_tokens: 200, ...extra };
      const r = await finalClient.chat.completions.create(params);
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', name);
      const v = JSON.parse(c.message.content);
      assert.ok(['Oslo', 'Tokyo'].includes(v.city), `${name}: ${c.message.content}`);
      assert.deepEqual(Object.keys(v), ['city'], name);
      const stream = await finalClient.chat.completions.create({ ...params, stream: true });
      let content = '';
      for await (const chunk of stream)
        for (const ch of chunk.choices) content += ch.delta.content ?? '';
      assert.equal(content, c.message.content, name);
    }
  });

  test('the commentary channel stays free: a tool call under a response_format', async () => {
    const model = (await client.models.list()).data[0].id;
    const r = await client.chat.completions.create({ model, messages, tools, temperature: 0,
      response_format: { type: 'json_object' } });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(c.message.tool_calls[0].function.arguments), { city: 'Paris' });
  });
});
