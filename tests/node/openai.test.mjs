// `pagoda serve` driven by the official openai npm client: completions and
// chat, streaming and not, n > 1, logprobs, errors as the client's typed
// exceptions, a stream aborted by the client, greedy == `pagoda generate`.
// Env: PAGODA_CMD (JSON array: emulator args + pagoda binary),
// PAGODA_SERVE_MODEL, PAGODA_CHAT_TEMPLATE ("" = skip the chat cases).
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI from 'openai';

const CMD = JSON.parse(process.env.PAGODA_CMD ?? '["pagoda"]');
const MODEL_DIR = process.env.PAGODA_SERVE_MODEL;
const TEMPLATE = process.env.PAGODA_CHAT_TEMPLATE ?? '';
const KEY = 'test-key-123';

let server;
let stderr = '';
let baseURL;
let client;
let modelName;

function startServer() {
  // one running sequence at a time: the abort test queues work behind a long request
  const args = [...CMD.slice(1), 'serve', MODEL_DIR, '--port', '0', '--api-key', KEY, '--max-num-seqs', '1'];
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

async function metrics() {
  const r = await fetch(`${baseURL.replace(/\/v1$/, '')}/metrics`);
  return r.text();
}

before(async () => {
  const { proc, port } = await startServer();
  server = proc;
  baseURL = `http://127.0.0.1:${port}/v1`;
  client = new OpenAI({ apiKey: KEY, baseURL, maxRetries: 0, timeout: 120000 });
});

after(async () => {
  if (!server) return;
  const done = new Promise((r) => server.once('exit', r));
  server.kill('SIGTERM');
  await done;
});

describe('pagoda serve with the openai client', () => {
  test('models.list', async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    modelName = models.data[0].id;
    assert.ok(modelName.length > 0);
  });

  test('completion, streamed == not streamed (greedy)', async () => {
    const params = { model: modelName, prompt: 'Once upon a time', max_tokens: 20, temperature: 0 };
    const r = await client.completions.create(params);
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices.length, 1);
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage = null;
    let finish = null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        text += c.text;
        if (c.finish_reason) finish = c.finish_reason;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, r.choices[0].text);
    assert.equal(finish, r.choices[0].finish_reason);
    assert.equal(usage.completion_tokens, r.usage.completion_tokens);
  });

  test('greedy completion == pagoda generate', async () => {
    const gen = spawnSync(CMD[0], [...CMD.slice(1), 'generate', MODEL_DIR, '--prompt', 'Once upon a time',
      '--max-tokens', '20', '--temperature', '0', '--json'], { encoding: 'utf8' });
    assert.equal(gen.status, 0, gen.stderr);
    const want = JSON.parse(gen.stdout);
    const r = await client.completions.create({ model: modelName, prompt: 'Once upon a time', max_tokens: 20, temperature: 0 });
    assert.equal(r.choices[0].text, want.text);
    assert.equal(r.usage.completion_tokens, want.token_ids.length);
  });

  test('n > 1 with a seed: streamed == not streamed per choice', async () => {
    const params = { model: modelName, prompt: 'The cat', max_tokens: 12, temperature: 1, seed: 7, n: 3 };
    const r = await client.completions.create(params);
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    const texts = ['', '', ''];
    for await (const chunk of await client.completions.create({ ...params, stream: true })) {
      for (const c of chunk.choices) texts[c.index] += c.text;
    }
    assert.deepEqual(texts, r.choices.map((c) => c.text));
  });

  // The server matches stop strings on the connection's thread (the engine
  // hands over token ids); `pagoda generate` lets the engine match them:
  // text, usage and finish_reason must agree, also for a string split
  // across tokens (and so across steps), with logprobs (one entry per kept
  // token), n > 1 and streaming.
  test('stop strings == pagoda generate; with logprobs, n > 1, streamed', async () => {
    for (const stop of ['e g', 'as a l', 'Lily', ', th', 'zzz']) {
      const gen = spawnSync(CMD[0], [...CMD.slice(1), 'generate', MODEL_DIR, '--prompt', 'Once upon a time',
        '--max-tokens', '30', '--temperature', '0', '--json', '--stop', stop], { encoding: 'utf8' });
      assert.equal(gen.status, 0, gen.stderr);
      const want = JSON.parse(gen.stdout);
      const params = { model: modelName, prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop: [stop], logprobs: 1 };
      const r = await client.completions.create(params);
      const c = r.choices[0];
      assert.equal(c.text, want.text, stop);
      assert.equal(c.finish_reason, want.finish_reason, stop);
      if (stop !== 'zzz') assert.equal(c.stop_reason, stop); // they do match in this text
      assert.equal(r.usage.completion_tokens, want.token_ids.length, stop);
      assert.equal(c.logprobs.tokens.length, want.token_ids.length, stop);
      let text = '';
      let finish = null;
      let usage = null;
      let n_lp = 0;
      for await (const chunk of await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } })) {
        for (const ch of chunk.choices) {
          text += ch.text;
          n_lp += ch.logprobs?.tokens?.length ?? 0;
          if (ch.finish_reason) finish = ch.finish_reason;
        }
        if (chunk.usage) usage = chunk.usage;
      }
      assert.equal(text, want.text, stop);
      assert.equal(finish, want.finish_reason, stop);
      assert.equal(usage.completion_tokens, want.token_ids.length, stop);
      assert.equal(n_lp, want.token_ids.length, stop);
    }
    // n > 1, sampled: each choice ends at its own stop, streamed == not
    const params = { model: modelName, prompt: 'The cat', max_tokens: 24, temperature: 1, seed: 5, n: 3, stop: ['a', 'he'], logprobs: 1 };
    const r = await client.completions.create(params);
    const texts = ['', '', ''];
    const n_lp = [0, 0, 0];
    for await (const chunk of await client.completions.create({ ...params, stream: true })) {
      for (const c of chunk.choices) {
        texts[c.index] += c.text;
        n_lp[c.index] += c.logprobs?.tokens?.length ?? 0;
      }
    }
    assert.deepEqual(texts, r.choices.map((c) => c.text));
    assert.deepEqual(n_lp, r.choices.map((c) => c.logprobs.tokens.length));
    let sum = 0;
    for (const c of r.choices) {
      for (const s of params.stop) assert.ok(!c.text.includes(s), c.text);
      if (typeof c.stop_reason === 'string') assert.ok(params.stop.includes(c.stop_reason), c.stop_reason);
      sum += c.logprobs.tokens.length;
    }
    assert.equal(r.usage.completion_tokens, sum);
  });

  test('completion logprobs', async () => {
    const r = await client.completions.create({ model: modelName, prompt: 'Once', max_tokens: 5, temperature: 0, logprobs: 2 });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, r.usage.completion_tokens);
    assert.equal(lp.token_logprobs.length, lp.tokens.length);
    for (const t of lp.top_logprobs) assert.ok(Object.keys(t).length <= 2);
    for (const v of lp.token_logprobs) assert.ok(v <= 0);
  });

  test('chat, streamed == not streamed', { skip: !TEMPLATE && 'no chat template engine' }, async () => {
    const messages = [{ role: 'system', content: 'Be nice.' }, { role: 'user', content: 'Once upon a time' }];
    const r = await client.chat.completions.create({ model: modelName, messages, max_tokens: 16, temperature: 0 });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    let text = '';
    let role = null;
    for await (const chunk of await client.chat.completions.create({ model: modelName, messages, max_tokens: 16, temperature: 0, stream: true })) {
      const d = chunk.choices[0]?.delta;
      if (d?.role) role = d.role;
      if (d?.content) text += d.content;
    }
    assert.equal(role, 'assistant');
    assert.equal(text, r.choices[0].message.content);
    // the same tokens as a completion give the same greedy text
    const tok = await (await fetch(`${baseURL.replace(/\/v1$/, '')}/tokenize`, {
      method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages }),
    })).json();
    const c = await client.completions.create({ model: modelName, prompt: tok.tokens, max_tokens: 16, temperature: 0 });
    assert.equal(c.choices[0].text, r.choices[0].message.content);
    // ... and so does `pagoda generate` on the rendered chat prompt
    const dir = mkdtempSync(join(tmpdir(), 'pagoda-chat-'));
    const file = join(dir, 'p.jsonl');
    writeFileSync(file, JSON.stringify({ prompt_token_ids: tok.tokens }) + '\n');
    const gen = spawnSync(CMD[0], [...CMD.slice(1), 'generate', MODEL_DIR, '--prompts-file', file,
      '--max-tokens', '16', '--temperature', '0', '--json'], { encoding: 'utf8' });
    rmSync(dir, { recursive: true, force: true });
    assert.equal(gen.status, 0, gen.stderr);
    assert.equal(JSON.parse(gen.stdout).text, r.choices[0].message.content);
  });

  test('chat logprobs and n', { skip: !TEMPLATE && 'no chat template engine' }, async () => {
    const r = await client.chat.completions.create({
      model: modelName, messages: [{ role: 'user', content: 'Hi' }], max_completion_tokens: 4,
      logprobs: true, top_logprobs: 2, n: 2, seed: 3,
    });
    assert.equal(r.choices.length, 2);
    assert.equal(r.usage.completion_tokens, r.choices[0].logprobs.content.length + r.choices[1].logprobs.content.length);
    for (const e of r.choices[0].logprobs.content) {
      assert.ok(e.top_logprobs.length <= 2);
      assert.ok(Array.isArray(e.bytes));
    }
  });

  test('errors arrive as the client\'s typed exceptions', async () => {
    await assert.rejects(client.completions.create({ model: modelName, prompt: 'x', max_tokens: 0 }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /max_tokens/.test(e.message));
    await assert.rejects(client.completions.create({ model: modelName, prompt: 'x', temperature: -1 }),
      (e) => e instanceof OpenAI.BadRequestError);
    await assert.rejects(client.completions.create({ model: modelName, prompt: 'x', top_p: 2 }),
      (e) => e instanceof OpenAI.BadRequestError);
    await assert.rejects(client.completions.create({ model: modelName, prompt: 'x', n: 0 }),
      (e) => e instanceof OpenAI.BadRequestError);
    await assert.rejects(client.completions.create({ model: modelName, prompt: '' }),
      (e) => e instanceof OpenAI.BadRequestError);
    await assert.rejects(client.completions.create({ model: modelName, prompt: 'Once', max_tokens: 1000000 }),
      (e) => e instanceof OpenAI.BadRequestError && /maximum context length/.test(e.message));
    await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x' }),
      (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
    const bad = new OpenAI({ apiKey: 'wrong', baseURL, maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
    // the server is still fine
    const r = await client.completions.create({ model: modelName, prompt: 'Once', max_tokens: 2 });
    assert.equal(r.choices.length, 1);
  });

  test('requests whose clients go away are aborted and free their KV blocks', async () => {
    const gauge = (text, name) => Number((text.match(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm')) ?? [])[1]);
    // a long non-streamed request (64 choices x 480 tokens, one at a time) ...
    const blockerCtrl = new AbortController();
    const blocker = client.completions.create(
      { model: modelName, prompt: 'Once upon a time', n: 64, max_tokens: 480, ignore_eos: true },
      { signal: blockerCtrl.signal }).catch((e) => e);
    for (let i = 0; i < 200 && gauge(await metrics(), 'vllm:num_requests_running') < 1; i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    // ... and a stream queued behind it, both abandoned by their client
    // (the stream as soon as its response headers arrive)
    const ctrl = new AbortController();
    let chunks = 0;
    try {
      const stream = await client.completions.create(
        { model: modelName, prompt: 'Once', max_tokens: 50, stream: true }, { signal: ctrl.signal });
      ctrl.abort();
      for await (const _ of stream) chunks++; // eslint-disable-line no-unused-vars
    } catch (e) {
      assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', String(e));
    }
    assert.equal(chunks, 0, 'the queued stream produced tokens before its abort');
    blockerCtrl.abort();
    assert.ok((await blocker) instanceof Error);
    let text = '';
    for (let i = 0; i < 200; i++) {
      text = await metrics();
      if (gauge(text, 'vllm:num_requests_running') === 0 && gauge(text, 'vllm:num_requests_waiting') === 0 &&
          gauge(text, 'vllm:kv_cache_usage_perc') === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(gauge(text, 'vllm:num_requests_running'), 0);
    assert.equal(gauge(text, 'vllm:num_requests_waiting'), 0);
    assert.equal(gauge(text, 'vllm:kv_cache_usage_perc'), 0);
    const aborts = Number(text.match(/^vllm:request_success_total\{finished_reason="abort",[^}]*\} (\d+)$/m)[1]);
    assert.ok(aborts >= 2, `aborts counted: ${aborts}`);
  });
});
