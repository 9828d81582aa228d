// Tool calls, reasoning and the request-field audit of `pagoda serve` with
// the official openai npm client, on a random-weight Qwen3 model with the
// real Qwen3 tokenizer and chat template (hermes <tool_call> syntax, <think>
// reasoning; detected from the template), served with
// --enable-auto-tool-choice. A random model never calls a tool on its own,
// so validity is checked with the forced modes (tool_choice "required" and a
// named function: grammar-constrained in the <tool_call> syntax), every call
// validated with ajv against its function's schema, in both response shapes
// (streamed deltas reassembled == the non-streamed message); "auto" on
// output that only looks like a call comes back as content; reasoning is
// split from forced "<think>..</think>.." output. A second server without
// --enable-auto-tool-choice gives vLLM's 400 for "auto", and with
// --tool-call-parser llama3_json forces calls in that syntax; a third with
// --tool-call-parser mistral forces [TOOL_CALLS] lists. Both stream their
// arguments in pieces (id and name first), as the hermes parser does.
// Env: PAGODA_CMD, PAGODA_SERVE_MODEL (the generated model, see
// cmake/server_tests.cmake).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import { startServer, stopServer } from './serve.mjs';

const MODEL_DIR = process.env.PAGODA_SERVE_MODEL;
const TOOL_CALL_TOKEN = 151657; // Qwen3's <tool_call>

const servers = [];
let client; // --enable-auto-tool-choice
let plain;  // without it, --tool-call-parser llama3_json
let mistral; // --tool-call-parser mistral
let baseURL;
const ajv = new Ajv2020({ strict: false, allErrors: true });

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather in a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', enum: ['Paris', 'Oslo', 'Tokyo'] },
          unit: { enum: ['C', 'F'] },
          days: { type: 'integer', minimum: 1, maximum: 7 },
        },
        required: ['city'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      description: 'The time now',
      parameters: { type: 'object', properties: { tz: { enum: ['UTC', 'CET'] } } },
    },
  },
  { type: 'function', function: { name: 'ping' } }, // no parameters: {}
];
const schemaOf = Object.fromEntries(tools.map((t) => [t.function.name,
  t.function.parameters ?? { type: 'object', properties: {}, additionalProperties: false }]));
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
// The forced calls are asked without thinking (Qwen3's enable_thinking:
// false closes an empty <think> block in the prompt): with thinking on, the
// grammar applies after the reasoning and a random model, free to open
// <think> as its first token, would rarely close it (docs/ARCHITECTURE.md
// "After the reasoning"; tests/test_server_reasoning.c covers that path).
const noThink = { chat_template_kwargs: { enable_thinking: false } };

async function start(extra) {
  const { proc, baseURL: url } = await startServer([MODEL_DIR, '--max-num-seqs', '8', ...extra]);
  servers.push(proc);
  return url;
}

before(async () => {
  baseURL = await start(['--enable-auto-tool-choice']);
  client = new OpenAI({ apiKey: 'unused', baseURL, maxRetries: 0, timeout: 300000 });
  plain = new OpenAI({ apiKey: 'unused', baseURL: await start(['--tool-call-parser',
    'llama3_json']), maxRetries: 0,
    timeout: 300000 });
  mistral = new OpenAI({ apiKey: 'unused', baseURL: await start(['--tool-call-parser',
    'mistral']), maxRetries: 0, timeout: 300000 });
});

after(async () => {
  for (const s of servers) await stopServer(s);
});

// Every call of a message: a known function, arguments valid for its schema.
function checkCalls(calls) {
  for (const c of calls) {
    assert.match(c.id, /^call_[0-9a-f]{24}$/);
    assert.equal(c.type, 'function');
    const schema = schemaOf[c.function.name];
    assert.ok(schema, `unknown function ${c.function.name}`);
    const args = JSON.parse(c.function.arguments);
    assert.ok(ajv.validate(schema, args),
      `${c.function.name}(${c.function.arguments}): ${ajv.errorsText()}`);
  }
  assert.equal(new Set(calls.map((c) => c.id)).size, calls.length, 'ids are unique');
}

// A streamed chat reassembled per choice: content, reasoning, tool calls
// (OpenAI's deltas: index, id, type and name first, then arguments).
async function streamed(params, via = client) {
  const stream = await via.chat.completions.create({ ...params, stream: true });
  const out = [];
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      const o = out[ch.index] ??= { content: '', reasoning: '', calls: [], finish: null };
      if (ch.delta.content) o.content += ch.delta.content;
      if (ch.delta.reasoning_content) o.reasoning += ch.delta.reasoning_content;
      for (const d of ch.delta.tool_calls ?? []) {
        if (d.id) {
          assert.equal(d.index, o.calls.length, 'a new call takes the next index');
          assert.equal(d.type, 'function');
          assert.ok(d.function.name, 'the first delta names the function');
          o.calls.push({ id: d.id, type: d.type, function: { name: d.function.name, arguments: '' } });
        } else {
          assert.ok(d.index < o.calls.length, 'arguments of a started call');
          assert.equal(d.function.name, undefined);
        }
        o.calls[d.index].function.arguments += d.function.arguments ?? '';
      }
      if (ch.finish_reason) o.finish = ch.finish_reason;
    }
  }
  return out;
}

function shape(calls) {
  return (calls ?? []).map((c) => [c.function.name, c.function.arguments]);
}

describe('tool calls with the openai client (random Qwen3, hermes syntax)', () => {
  test('required: valid calls, finish_reason tool_calls, streamed == not streamed', async () => {
    const params = { model: (await client.models.list()).data[0].id, messages, tools,
      tool_choice: 'required', n: 2, seed: 11, temperature: 1, max_tokens: 400, ...noThink };
    const r = await client.chat.completions.create(params);
    const s = await streamed(params);
    assert.equal(r.choices.length, 2);
    for (const c of r.choices) {
      assert.equal(c.finish_reason, 'tool_calls');
      assert.equal(c.message.content, null);
      assert.ok(c.message.tool_calls.length >= 1);
      checkCalls(c.message.tool_calls);
      const o = s[c.index];
      assert.equal(o.finish, 'tool_calls');
      assert.equal(o.content, '');
      checkCalls(o.calls);
      assert.deepEqual(shape(o.calls), shape(c.message.tool_calls));
    }
  });

  test('named function: exactly one call of it', async () => {
    const params = { model: (await client.models.list()).data[0].id, messages, tools,
      tool_choice: { type: 'function', function: { name: 'get_time' } }, n: 3, seed: 3,
      temperature: 1, max_tokens: 200, ...noThink };
    const r = await client.chat.completions.create(params);
    const s = await streamed(params);
    for (const c of r.choices) {
      assert.equal(c.finish_reason, 'tool_calls');
      assert.equal(c.message.tool_calls.length, 1);
      assert.equal(c.message.tool_calls[0].function.name, 'get_time');
      checkCalls(c.message.tool_calls);
      assert.deepEqual(shape(s[c.index].calls), shape(c.message.tool_calls));
    }
    const p = await client.chat.completions.create({ ...params, n: 1,
      tool_choice: { type: 'function', function: { name: 'ping' } } });
    assert.deepEqual(shape(p.choices[0].message.tool_calls), [['ping', '{}']]);
  });

  test('parallel_tool_calls: false gives one call, true allows several', async () => {
    const model = (await client.models.list()).data[0].id;
    const one = await client.chat.completions.create({ model, messages, tools,
      tool_choice: 'required', parallel_tool_calls: false, n: 4, seed: 1, temperature: 1,
      max_tokens: 200, ...noThink });
    for (const c of one.choices) {
      assert.equal(c.finish_reason, 'tool_calls');
      assert.equal(c.message.tool_calls.length, 1);
      checkCalls(c.message.tool_calls);
    }
    // with several allowed, some seed of a random model writes more than one
    let most = 0;
    for (let seed = 1; seed <= 6 && most < 2; seed++) {
      const r = await client.chat.completions.create({ model, messages, tools,
        tool_choice: 'required', n: 4, seed, temperature: 1, max_tokens: 400, ...noThink });
      for (const c of r.choices) {
        if (c.finish_reason !== 'tool_calls') continue; // cut by max_tokens mid-call
        checkCalls(c.message.tool_calls);
        most = Math.max(most, c.message.tool_calls.length);
      }
    }
    assert.ok(most >= 2, 'no choice made parallel calls');
  });

  test('auto: text that only looks like a call is content; none: no calls', async () => {
    const model = (await client.models.list()).data[0].id;
    const params = { model, messages, tools, seed: 2, temperature: 1, max_tokens: 24,
      logit_bias: { [TOOL_CALL_TOKEN]: 100 } };
    const r = await client.chat.completions.create(params);
    const c = r.choices[0];
    assert.equal(c.message.tool_calls, undefined);
    assert.ok(c.message.content.startsWith('<tool_call>'), c.message.content);
    assert.equal(c.finish_reason, 'length');
    const s = await streamed(params);
    assert.equal(s[0].content, c.message.content);
    assert.equal(s[0].calls.length, 0);
    const none = await client.chat.completions.create({ ...params, tool_choice: 'none' });
    assert.equal(none.choices[0].message.tool_calls, undefined);
    assert.equal(typeof none.choices[0].message.content, 'string');
  });

  test('"auto" without --enable-auto-tool-choice is a 400; forcing works, in the syntax of '
    + '--tool-call-parser', async () => {
    const model = (await plain.models.list()).data[0].id;
    await assert.rejects(plain.chat.completions.create({ model, messages, tools, max_tokens: 8 }),
      (e) => e.status === 400 && e.param === 'tool_choice' &&
        /--enable-auto-tool-choice/.test(e.message));
    const r = await plain.chat.completions.create({ model, messages, tools, max_tokens: 200,
      ...noThink, tool_choice: { type: 'function', function: { name: 'ping' } } });
    assert.deepEqual(shape(r.choices[0].message.tool_calls), [['ping', '{}']]);
    // the forced text is llama3_json's: the same tokens decode to it
    const lp = await plain.chat.completions.create({ model, messages, tools, max_tokens: 200,
      ...noThink, logprobs: true, tool_choice: { type: 'function', function: { name: 'ping' } } });
    const text = lp.choices[0].logprobs.content.map((t) => t.token).join('');
    assert.match(text, /^\{"name": "ping", "parameters": \{\s*\}\}/);
  });

  // A streamed call is begun (id, name) as soon as its head is written and
  // its arguments follow as they are generated: cut by max_tokens inside
  // its arguments, the call is there with the arguments so far, in both
  // response shapes (a whole-call parser would return the text as content).
  test('llama3_json and mistral calls stream their arguments', async () => {
    for (const [name, via, head] of [['llama3_json', plain, '"parameters": '],
      ['mistral', mistral, '"arguments": ']]) {
      const model = (await via.models.list()).data[0].id;
      const params = { model, messages, tools, seed: 5, temperature: 1, max_tokens: 200,
        ...noThink, tool_choice: { type: 'function', function: { name: 'get_weather' } } };
      const full = await via.chat.completions.create({ ...params, logprobs: true });
      const c = full.choices[0];
      assert.equal(c.finish_reason, 'tool_calls', name);
      checkCalls(c.message.tool_calls);
      const s = await streamed(params, via);
      assert.deepEqual(shape(s[0].calls), shape(c.message.tool_calls), name);
      assert.equal(s[0].finish, 'tool_calls', name);
      // the token that writes the arguments' '{', and one more
      const toks = c.logprobs.content.map((t) => t.token);
      const text = toks.join('');
      if (name === 'mistral') assert.match(text, /^\[TOOL_CALLS\]\s*\[\s*\{"name": "get_weather"/);
      else assert.match(text, /^\{"name": "get_weather"/);
      const open = text.indexOf(head) + head.length;
      let k = 0;
      for (let len = 0; len <= open; k++) len += toks[k].length;
      const cut = await via.chat.completions.create({ ...params, max_tokens: k + 1 });
      const cc = cut.choices[0];
      assert.equal(cc.finish_reason, 'length', name);
      assert.ok(cc.message.tool_calls?.length === 1, `${name}: ${JSON.stringify(cc.message)}`);
      assert.equal(cc.message.tool_calls[0].function.name, 'get_weather');
      const part = cc.message.tool_calls[0].function.arguments;
      const whole = c.message.tool_calls[0].function.arguments;
      assert.ok(part.startsWith('{') && part.length < whole.length && whole.startsWith(part),
        `${name}: ${part} of ${whole}`);
      const sc = await streamed({ ...params, max_tokens: k + 1 }, via);
      assert.deepEqual(shape(sc[0].calls), shape(cc.message.tool_calls), name);
    }
  });

  test('tool errors name their field', async () => {
    const model = (await client.models.list()).data[0].id;
    const cases = [
      [{ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice',
        /Tool 'nope' has not been passed/],
      [{ tool_choice: 'required' }, 'tool_choice', /`tools` must be set/],
      [{ tools: [{ type: 'function', function: { name: 'bad name' } }] }, 'tools', /letters/],
      [{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object',
        properties: { a: { not: {} } } } } }], tool_choice: 'required' }, 'tools', /not/],
    ];
    for (const [extra, param, re] of cases) {
      await assert.rejects(client.chat.completions.create({ model, messages, max_tokens: 8,
        ...extra }), (e) => e.status === 400 && e.param === param && re.test(e.message),
      JSON.stringify(extra));
    }
  });

  test('an assistant tool call and the tool result round-trip through the template',
    async () => {
      const model = (await client.models.list()).data[0].id;
      const conv = [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
          function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 20}' },
      ];
      const r = await client.chat.completions.create({ model, messages: conv, tools,
        tool_choice: 'none', max_tokens: 4 });
      assert.equal(r.choices.length, 1);
      const root = baseURL.replace(/\/v1$/, '');
      const tok = await (await fetch(`${root}/tokenize`, { method: 'POST',
        body: JSON.stringify({ model, messages: conv, tools }) })).json();
      assert.equal(tok.count, r.usage.prompt_tokens);
      const text = (await (await fetch(`${root}/detokenize`, { method: 'POST',
        body: JSON.stringify({ model, tokens: tok.tokens }) })).json()).prompt;
      assert.ok(text.includes('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'), text);
      assert.ok(text.includes('<tool_response>\n{"temp": 20}\n</tool_response>'), text);
      assert.ok(text.includes('"name": "get_weather"') && text.includes('<tools>'), text);
    });
});

describe('reasoning with the openai client (qwen3 <think>)', () => {
  const regex = '<think>[a-z]{1,12}</think>\\n\\n[a-z]{1,12}';
  test('reasoning_content and content split, streamed as deltas too', async () => {
    const model = (await client.models.list()).data[0].id;
    const params = { model, messages, n: 2, seed: 4, temperature: 1, max_tokens: 64,
      structured_outputs: { regex } };
    const r = await client.chat.completions.create(params);
    const s = await streamed(params);
    for (const c of r.choices) {
      assert.match(c.message.reasoning_content, /^[a-z]{1,12}$/);
      assert.match(c.message.content, /^[a-z]{1,12}$/);
      assert.equal(s[c.index].reasoning, c.message.reasoning_content);
      assert.equal(s[c.index].content, c.message.content);
    }
    const hidden = await client.chat.completions.create({ ...params, include_reasoning: false });
    for (const c of hidden.choices) {
      assert.equal(c.message.reasoning_content, null);
      assert.match(c.message.content, /^[a-z]{1,12}$/);
    }
  });

  test('chat_template_kwargs.enable_thinking reaches the template', async () => {
    const model = (await client.models.list()).data[0].id;
    const root = baseURL.replace(/\/v1$/, '');
    const prompt = async (kw) => {
      const t = await (await fetch(`${root}/tokenize`, { method: 'POST',
        body: JSON.stringify({ model, messages, chat_template_kwargs: kw }) })).json();
      return (await (await fetch(`${root}/detokenize`, { method: 'POST',
        body: JSON.stringify({ model, tokens: t.tokens }) })).json()).prompt;
    };
    assert.ok((await prompt({ enable_thinking: false })).endsWith('<think>\n\n</think>\n\n'));
    assert.ok(!(await prompt({})).includes('<think>'));
    // an empty think block in the prompt: the answer is content
    const r = await client.chat.completions.create({ model, messages, max_tokens: 8, seed: 1,
      chat_template_kwargs: { enable_thinking: false } });
    assert.equal(r.choices[0].message.reasoning_content, null);
    assert.equal(typeof r.choices[0].message.content, 'string');
  });
});

describe('request fields: unsupported ones are 400s naming them', () => {
  const chat = [
    ['audio', { voice: 'alloy', format: 'wav' }], ['modalities', ['text', 'audio']],
    ['prediction', { type: 'content', content: 'x' }], ['functions', [{ name: 'f' }]],
    ['function_call', 'auto'], ['store', true], ['web_search_options', {}],
    ['use_beam_search', true], ['best_of', 3], ['prompt_logprobs', 1], ['echo', true],
    ['logits_processors', ['x']], ['priority', 5], ['allowed_token_ids', [1, 2]],
    ['service_tier', 'flex'], ['chat_template', '{{ messages }}'], ['length_penalty', 0.5],
    ['max_repetition_pattern_size', 4], ['min_repetition_pattern_size', 2],
    ['repetition_min_count', 3], ['metadata', { a: 1 }], ['prompt_cache_key', 7],
  ];
  test('chat', async () => {
    const model = (await client.models.list()).data[0].id;
    for (const [name, value] of chat) {
      await assert.rejects(client.chat.completions.create({ model, messages, max_tokens: 4,
        [name]: value }), (e) => e.status === 400 && e.param === name && e.message.includes(name),
      name);
    }
    // their do-nothing values and label fields are accepted
    const r = await client.chat.completions.create({ model, messages, max_tokens: 2,
      store: false, modalities: ['text'], service_tier: 'auto', use_beam_search: false,
      best_of: 1, metadata: { a: 'b' }, user: 'u', prompt_cache_key: 'k',
      safety_identifier: 's', request_id: 'abc123', spaces_between_special_tokens: true,
      max_repetition_pattern_size: 0, repetition_min_count: 0 });
    assert.equal(r.id, 'chatcmpl-abc123');
  });

  test('completions', async () => {
    const model = (await client.models.list()).data[0].id;
    for (const [name, value] of [['suffix', 'x'], ['best_of', 2], ['use_beam_search', true],
      ['prompt_logprobs', 0], ['prompt_embeds', 'AAAA'], ['truncate_prompt_tokens', 3]]) {
      await assert.rejects(client.completions.create({ model, prompt: 'Hi', max_tokens: 2,
        [name]: value }), (e) => e.status === 400 && e.param === name, name);
    }
    const r = await client.completions.create({ model, prompt: 'Hi', max_tokens: 2, n: 2,
      best_of: 2, echo: true });
    assert.equal(r.choices.length, 2);
  });
});
