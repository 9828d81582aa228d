// Structured outputs of `pagoda serve` through the official openai client:
// response_format json_object / json_schema on chat, vLLM's guided_json,
// guided_regex, guided_choice, guided_grammar and structured_outputs on
// completions; every output parses and validates against its schema with
// ajv (+ ajv-formats), for every supported schema feature, streamed and not,
// n > 1, logprobs and stop strings; unsupported keywords are 400s naming them.
// Env: PAGODA_CMD, PAGODA_SERVE_MODEL, PAGODA_CHAT_TEMPLATE (see run.sh).
// Structural tokens (", }, ], ...) get a logit_bias (applied after the
// grammar mask, so it never lets a disallowed token through) so that
// free-form strings and json_object outputs end within max_tokens.
// STRUCT_RANDOM=1: the model has random weights (a 128k Llama-3 vocabulary):
// a larger bias.
import { spawn } from 'node:child_process';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const CMD = JSON.parse(process.env.PAGODA_CMD ?? '["pagoda"]');
const MODEL_DIR = process.env.PAGODA_SERVE_MODEL;
const TEMPLATE = process.env.PAGODA_CHAT_TEMPLATE ?? '';
const RANDOM = process.env.STRUCT_RANDOM === '1';

let server;
let stderr = '';
let client;
let baseURL;
let bias = {};

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

function startServer() {
  const args = [...CMD.slice(1), 'serve', MODEL_DIR, '--port', '0', '--max-num-seqs', '8'];
  if (TEMPLATE) args.push('--chat-template', TEMPLATE);
  const proc = spawn(CMD[0], args, { stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stderr.on('data', (d) => { stderr += d; });
  return new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/^PORT=(\d+)$/m);
      if (m) resolve({ proc, port: Number(m[1]) });
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}): ${stderr}`)));
  });
}

async function tokenIds(text) {
  const r = await fetch(`${baseURL.replace(/\/v1$/, '')}/tokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: text, add_special_tokens: false }),
  });
  return (await r.json()).tokens;
}

before(async () => {
  const { proc, port } = await startServer();
  server = proc;
  baseURL = `http://127.0.0.1:${port}/v1`;
  client = new OpenAI({ apiKey: 'none', baseURL, maxRetries: 0, timeout: 300000 });
  // single-token structural pieces: the grammar decides where they are
  // allowed; the bias only makes free-form strings end soon
  // (after an 'x', so that SentencePiece's dummy space prefix is not in it)
  const x = await tokenIds('x');
  for (const [s, b] of [['"', 6], ['}', 10], [']', 10], ['":', 6]]) {
    const ids = await tokenIds(`x${s}`);
    if (ids.length === x.length + 1 && ids[0] === x[0]) bias[ids[ids.length - 1]] = RANDOM ? 12 : b;
  }
  assert.ok(Object.keys(bias).length >= 2, `structural tokens: ${JSON.stringify(bias)}`);
});

after(async () => {
  if (!server) return;
  const done = new Promise((r) => server.once('exit', r));
  server.kill('SIGTERM');
  await done;
});

const SCHEMAS = {
  types: {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 10 },
      age: { type: 'integer', minimum: 0, maximum: 120 },
      score: { type: 'number', minimum: -5, maximum: 5 },
      ok: { type: 'boolean' },
      nothing: { type: 'null' },
      nick: { type: ['string', 'null'], maxLength: 4 },
    },
    required: ['name', 'age', 'ok'],
    additionalProperties: false,
  },
  enum_const: {
    type: 'object',
    properties: {
      color: { enum: ['red', 'green', 'blue', 3, null] },
      version: { const: 'v1' },
      pair: { const: [1, { a: 'b' }] },
    },
    required: ['color', 'version', 'pair'],
  },
  any_one_of: {
    type: 'object',
    properties: {
      id: { anyOf: [{ type: 'integer', minimum: 1, maximum: 9 }, { type: 'string', pattern: '^x[0-9]$' }] },
      shape: { oneOf: [{ type: 'object', properties: { r: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['r'] },
        { type: 'object', properties: { w: { type: 'boolean' } }, required: ['w'] }] },
    },
    required: ['id', 'shape'],
  },
  arrays: {
    type: 'object',
    properties: {
      tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, minItems: 1, maxItems: 3 },
      empty: { type: 'array', maxItems: 0 },
      tuple: { type: 'array', prefixItems: [{ type: 'integer', minimum: 0, maximum: 3 }, { type: 'boolean' }], items: false, minItems: 2 },
    },
    required: ['tags', 'tuple'],
  },
  refs: {
    $defs: {
      leaf: { type: 'integer', minimum: 10, maximum: 20 },
      node: {
        type: 'object',
        properties: { v: { $ref: '#/$defs/leaf' }, kids: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 1 } },
        required: ['v'],
      },
    },
    $ref: '#/$defs/node',
  },
  pattern: {
    type: 'object',
    properties: { code: { type: 'string', pattern: '^[A-Z]{2}-[0-9]{3}$' }, loose: { type: 'string', pattern: '^ab?c' } },
    required: ['code', 'loose'],
    additionalProperties: false,
  },
  formats: {
    type: 'object',
    properties: {
      d: { type: 'string', format: 'date' },
      t: { type: 'string', format: 'time' },
      dt: { type: 'string', format: 'date-time' },
      u: { type: 'string', format: 'uuid' },
      e: { type: 'string', format: 'email' },
      ip: { type: 'string', format: 'ipv4' },
    },
    required: ['d', 't', 'dt', 'u', 'e', 'ip'],
  },
  bounds: {
    type: 'object',
    properties: {
      neg: { type: 'integer', minimum: -50, maximum: -3 },
      ex: { type: 'integer', exclusiveMinimum: 5, exclusiveMaximum: 9 },
      frac: { type: 'number', exclusiveMinimum: 0, maximum: 2 },
    },
    required: ['neg', 'ex', 'frac'],
  },
  additional: {
    type: 'object',
    properties: { k: { type: 'integer', minimum: 0, maximum: 5 } },
    required: ['k'],
    additionalProperties: { type: 'boolean' },
  },
};

function checkJSON(text, schema, what) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    assert.fail(`${what}: output is not JSON: ${JSON.stringify(text)} (${e.message})`);
  }
  if (schema) {
    const validate = ajv.compile(schema);
    assert.ok(validate(v), `${what}: ${JSON.stringify(text)} fails the schema: ${ajv.errorsText(validate.errors)}`);
  } else {
    assert.equal(typeof v, 'object', `${what}: not an object: ${text}`);
    assert.ok(v !== null && !Array.isArray(v), `${what}: not an object: ${text}`);
  }
  return v;
}

const MAX = RANDOM ? 600 : 400;
const messages = [{ role: 'user', content: 'Tell me about a cat as JSON.' }];

describe('structured outputs with the openai client', () => {
  let model;
  test('model name', async () => {
    model = (await client.models.list()).data[0].id;
  });

  for (const [name, schema] of Object.entries(SCHEMAS)) {
    test(`json_schema ${name}: chat, n=2, not streamed`, { skip: !TEMPLATE && 'no chat template' }, async () => {
      const r = await client.chat.completions.create({
        model, messages, max_tokens: MAX, temperature: 1, seed: 11, n: 2, logit_bias: bias,
        response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
      });
      assert.equal(r.choices.length, 2);
      for (const c of r.choices) {
        assert.equal(c.finish_reason, 'stop', `did not finish: ${c.message.content}`);
        checkJSON(c.message.content, schema, name);
      }
    });

    test(`json_schema ${name}: completions guided_json, streamed, n=2`, async () => {
      const params = { model, prompt: 'Once upon a time', max_tokens: MAX, temperature: 1, seed: 5, n: 2, logit_bias: bias, guided_json: schema };
      const r = await client.completions.create(params);
      const texts = ['', ''];
      const finish = [null, null];
      for await (const chunk of await client.completions.create({ ...params, stream: true })) {
        for (const c of chunk.choices) {
          texts[c.index] += c.text;
          if (c.finish_reason) finish[c.index] = c.finish_reason;
        }
      }
      for (let i = 0; i < 2; i++) {
        assert.equal(finish[i], 'stop', `did not finish: ${texts[i]}`);
        assert.equal(texts[i], r.choices[i].text, 'stream == not streamed');
        checkJSON(texts[i], schema, name);
      }
    });
  }

  test('json_object: chat, streamed with logprobs', { skip: !TEMPLATE && 'no chat template' }, async () => {
    const stream = await client.chat.completions.create({
      model, messages, max_tokens: MAX, temperature: 1, seed: 3, n: 2, logit_bias: bias, stream: true,
      logprobs: true, top_logprobs: 3, response_format: { type: 'json_object' },
    });
    const texts = ['', ''];
    let nlp = 0;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        if (c.delta?.content) texts[c.index] += c.delta.content;
        for (const lp of c.logprobs?.content ?? []) {
          nlp++;
          assert.ok(lp.logprob <= 0);
          assert.ok(lp.top_logprobs.length <= 3);
        }
      }
    }
    assert.ok(nlp > 0);
    for (const t of texts) checkJSON(t, null, 'json_object');
  });

  test('structured_outputs.json on completions (vLLM >= 0.10 field)', async () => {
    const schema = SCHEMAS.enum_const;
    const r = await client.completions.create({ model, prompt: 'A', max_tokens: MAX, temperature: 1, seed: 2, logit_bias: bias, structured_outputs: { json: schema } });
    checkJSON(r.choices[0].text, schema, 'structured_outputs');
  });

  test('guided_regex, guided_choice, guided_grammar', async () => {
    const re = await client.completions.create({ model, prompt: 'Once', max_tokens: 40, temperature: 1, seed: 1, n: 3, guided_regex: '[0-9]{3}-[a-z]{2,4}(!|\\?)' });
    for (const c of re.choices) assert.match(c.text, /^[0-9]{3}-[a-z]{2,4}(!|\?)$/);
    const ch = await client.chat.completions.create({ model, messages, max_tokens: 20, temperature: 1, seed: 4, n: 4, guided_choice: ['happy', 'sad', 'on the fence'] });
    for (const c of ch.choices) assert.ok(['happy', 'sad', 'on the fence'].includes(c.message.content), c.message.content);
    const grammar = 'root ::= item ("," item){0,3}\nitem ::= "cat" | "dog" | [0-9]{1,2}';
    const gr = await client.completions.create({ model, prompt: 'Once', max_tokens: 40, temperature: 1, seed: 9, n: 3, guided_grammar: grammar });
    for (const c of gr.choices) assert.match(c.text, /^(cat|dog|[0-9]{1,2})(,(cat|dog|[0-9]{1,2})){0,3}$/);
  });

  test('stop strings still end a constrained output', async () => {
    const r = await client.completions.create({ model, prompt: 'Once', max_tokens: 40, temperature: 1, seed: 1, n: 2, guided_regex: 'ab{1,6}c{1,6}q', stop: ['c'] });
    for (const c of r.choices) {
      assert.match(c.text, /^ab{1,6}$/);
      assert.equal(c.finish_reason, 'stop');
    }
  });

  const unsupported = [
    [{ type: 'object', not: { required: ['a'] } }, "'not'"],
    [{ type: 'array', items: { type: 'integer' }, uniqueItems: true }, "'uniqueItems'"],
    [{ type: 'string', format: 'hostname' }, "'hostname'"],
    [{ type: 'integer', multipleOf: 3 }, "'multipleOf'"],
    [{ type: 'object', patternProperties: { '^a': { type: 'string' } } }, "'patternProperties'"],
    [{ type: 'number', minimum: 0.5 }, "'minimum'"],
    [{ type: 'string', pattern: '(a)\\1' }, 'backreferences'],
    [{ type: 'string', pattern: '(?=a)a' }, 'lookaround'],
  ];
  for (const [schema, word] of unsupported) {
    test(`unsupported: ${JSON.stringify(schema)} -> 400 naming ${word}`, async () => {
      await assert.rejects(
        client.chat.completions.create({ model, messages, max_tokens: 5, response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } }),
        (e) => {
          assert.equal(e.status, 400);
          assert.ok(e.message.includes(word), e.message);
          return true;
        });
    });
  }

  test('bad requests: two constraints, bad regex, bad grammar, bad response_format', async () => {
    const cases = [
      [{ guided_regex: 'a', guided_choice: ['a'] }, 'only one'],
      [{ guided_regex: '(ab' }, "')'"],
      [{ guided_grammar: 'root ::= foo' }, "'foo'"],
      [{ guided_grammar: 'root ::= "a" root' }, 'never complete'],
      [{ response_format: { type: 'xml' } }, 'xml'],
      [{ guided_choice: [] }, 'guided_choice'],
    ];
    for (const [extra, word] of cases) {
      await assert.rejects(client.completions.create({ model, prompt: 'A', max_tokens: 5, ...extra }), (e) => {
        assert.equal(e.status, 400, JSON.stringify(extra));
        assert.ok(e.message.includes(word), `${JSON.stringify(extra)}: ${e.message}`);
        return true;
      });
    }
  });
});
