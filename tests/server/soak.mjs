// The fault soak of `pagoda serve` (issue 21, "Faults under load"): CLIENTS
// concurrent clients for SECONDS, each looping over requests of mixed kinds:
//   stream      a streamed completion read to its end ([DONE], a finish_reason)
//   chat        a streamed chat completion read to its end
//   disconnect  a stream dropped by the client after a random number of chunks
//   slow        a stream read with pauses (a slow reader)
//   n3          n = 3 choices, streamed or not: every index finishes
//   logprobs    top-3 logprobs, streamed or not: one entry per output token
//   cancel      a non-streamed request the client abandons after a random delay
//   oversized   a body over --max-request-bytes (413) or a prompt past the
//               context (400)
// Every request must reach its expected outcome within HANG_S seconds:
// anything else is "lost" (an unexpected status, a stream cut short, a
// connection error the client did not cause) or "hung". Afterwards the
// server must be idle: no request running or waiting, KV cache usage 0
// (GET /metrics). The server's RSS is sampled every second from
// /proc/PID/status; the growth from the end of the warm-up (first third) to
// the end must stay below 10% + 16 MiB, and the least-squares slope over
// that span is reported.
// Uses Node's built-in fetch (undici); no npm package.
// env: PAGODA_URL, PAGODA_PID, SOAK_SECONDS, SOAK_CLIENTS (64), SOAK_SEED,
//      SOAK_MAX_BODY (the server's --max-request-bytes), SOAK_CTX (max_model_len)
import { readFileSync } from 'node:fs';

const URL_ = process.env.PAGODA_URL;
const PID = process.env.PAGODA_PID;
const SECONDS = Number(process.env.SOAK_SECONDS ?? 20);
const CLIENTS = Number(process.env.SOAK_CLIENTS ?? 64);
const MAX_BODY = Number(process.env.SOAK_MAX_BODY ?? 1048576);
const CTX = Number(process.env.SOAK_CTX ?? 512);
const HANG_S = 120;
const KINDS = ['stream', 'chat', 'disconnect', 'slow', 'n3', 'logprobs', 'cancel', 'oversized'];
const PROMPTS = ['Once upon a time', 'The little dog', 'Lily and Tom went to the park',
  'One day, a big bird', 'There was a girl who loved', 'The sun was shining and'];

// a small deterministic generator (xorshift32) so a failing run can be repeated
let rngState = (Number(process.env.SOAK_SEED ?? 12345) >>> 0) || 1;
function rand() {
  rngState ^= rngState << 13; rngState >>>= 0;
  rngState ^= rngState >>> 17;
  rngState ^= rngState << 5; rngState >>>= 0;
  return rngState / 4294967296;
}
const randInt = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const stats = {};
for (const k of KINDS) stats[k] = { sent: 0, ok: 0, lost: 0, hung: 0 };
const failures = [];

function rssKiB() {
  const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${PID}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

// Parse SSE text into the JSON events (and whether [DONE] came).
function sseEvents(text) {
  const events = [];
  let done = false;
  for (const block of text.split('\n\n')) {
    if (!block.startsWith('data: ')) continue;
    const data = block.slice(6);
    if (data === '[DONE]') { done = true; continue; }
    events.push(JSON.parse(data));
  }
  return { events, done };
}

function completionBody(extra) {
  return {
    prompt: PROMPTS[randInt(0, PROMPTS.length - 1)], max_tokens: randInt(4, 64),
    temperature: 0.8, seed: randInt(0, 1 << 30), ...extra,
  };
}

async function post(path, body, signal) {
  return fetch(URL_ + path, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body), signal,
  });
}

// Read a streamed response; stopAfter: drop after that many reads; pauseMs: slow reader.
async function readStream(res, { stopAfter = Infinity, pauseMs = 0, ctl } = {}) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let text = '';
  let reads = 0;
  for (;;) {
    if (reads >= stopAfter) { ctl.abort(); return { text, dropped: true }; }
    const { value, done } = await reader.read();
    if (done) break;
    text += dec.decode(value, { stream: true });
    reads++;
    if (pauseMs) await sleep(pauseMs);
  }
  return { text, dropped: false };
}

// Check a finished stream: [DONE] last, every choice index 0..n-1 finished.
function checkStream(text, n, kind) {
  const { events, done } = sseEvents(text);
  if (!done) throw new Error(`${kind}: stream without [DONE]: ${text.slice(-200)}`);
  const finished = new Set();
  for (const e of events) {
    if (e.error) throw new Error(`${kind}: error event ${JSON.stringify(e.error)}`);
    for (const c of e.choices ?? []) if (c.finish_reason) finished.add(c.index);
  }
  for (let i = 0; i < n; i++) if (!finished.has(i)) throw new Error(`${kind}: choice ${i} never finished`);
  return events;
}

async function one(kind) {
  const ctl = new AbortController();
  switch (kind) {
    case 'stream': {
      const res = await post('/v1/completions', completionBody({ stream: true, stream_options: { include_usage: true } }), ctl.signal);
      if (res.status !== 200) throw new Error(`stream: HTTP ${res.status}`);
      const ev = checkStream((await readStream(res)).text, 1, kind);
      if (!ev.some((e) => e.usage)) throw new Error('stream: no usage event');
      return;
    }
    case 'chat': {
      const res = await post('/v1/chat/completions', {
        messages: [{ role: 'user', content: PROMPTS[randInt(0, PROMPTS.length - 1)] }],
        max_tokens: randInt(4, 48), temperature: 0.7, stream: true,
      }, ctl.signal);
      if (res.status !== 200) throw new Error(`chat: HTTP ${res.status} ${await res.text()}`);
      checkStream((await readStream(res)).text, 1, kind);
      return;
    }
    case 'disconnect': {
      const res = await post('/v1/completions', completionBody({ max_tokens: 200, ignore_eos: true, stream: true }), ctl.signal);
      if (res.status !== 200) throw new Error(`disconnect: HTTP ${res.status}`);
      try {
        await readStream(res, { stopAfter: randInt(0, 6), ctl });
      } catch (e) {
        if (e.name !== 'AbortError') throw e;
      }
      return;
    }
    case 'slow': {
      const res = await post('/v1/completions', completionBody({ max_tokens: randInt(8, 40), stream: true }), ctl.signal);
      if (res.status !== 200) throw new Error(`slow: HTTP ${res.status}`);
      checkStream((await readStream(res, { pauseMs: randInt(20, 150) })).text, 1, kind);
      return;
    }
    case 'n3': {
      const stream = rand() < 0.5;
      const res = await post('/v1/completions', completionBody({ n: 3, stream }), ctl.signal);
      if (res.status !== 200) throw new Error(`n3: HTTP ${res.status}`);
      if (stream) { checkStream((await readStream(res)).text, 3, kind); return; }
      const js = await res.json();
      if (js.choices.length !== 3 || js.choices.some((c) => !c.finish_reason)) throw new Error(`n3: ${JSON.stringify(js).slice(0, 200)}`);
      return;
    }
    case 'logprobs': {
      const stream = rand() < 0.5;
      const res = await post('/v1/completions', completionBody({ logprobs: 3, stream, stream_options: stream ? { include_usage: true } : undefined }), ctl.signal);
      if (res.status !== 200) throw new Error(`logprobs: HTTP ${res.status}`);
      let tokens = 0;
      let usage;
      if (stream) {
        const ev = checkStream((await readStream(res)).text, 1, kind);
        for (const e of ev) {
          if (e.usage) usage = e.usage;
          for (const c of e.choices ?? []) tokens += c.logprobs?.tokens?.length ?? 0;
        }
      } else {
        const js = await res.json();
        tokens = js.choices[0].logprobs.tokens.length;
        usage = js.usage;
        if (js.choices[0].logprobs.top_logprobs.some((t) => Object.keys(t).length < 1)) throw new Error('logprobs: empty top_logprobs');
      }
      if (tokens !== usage.completion_tokens) throw new Error(`logprobs: ${tokens} entries for ${usage.completion_tokens} tokens`);
      return;
    }
    case 'cancel': {
      const t = setTimeout(() => ctl.abort(), randInt(1, 400));
      try {
        const res = await post('/v1/completions', completionBody({ max_tokens: randInt(50, 300), ignore_eos: true }), ctl.signal);
        const js = await res.json();
        if (res.status !== 200 || !js.choices?.[0]?.finish_reason) throw new Error(`cancel: HTTP ${res.status}`);
      } catch (e) {
        if (e.name !== 'AbortError') throw e;
      } finally {
        clearTimeout(t);
      }
      return;
    }
    case 'oversized': {
      if (rand() < 0.5) {
        const res = await post('/v1/completions', JSON.stringify({ prompt: 'x'.repeat(MAX_BODY + randInt(1, 4096)), max_tokens: 4 }), ctl.signal);
        await res.text();
        if (res.status !== 413) throw new Error(`oversized body: HTTP ${res.status}`);
      } else {
        const res = await post('/v1/completions', { prompt: Array.from({ length: CTX + randInt(1, 64) }, (_, i) => 3 + (i % 400)), max_tokens: 4 }, ctl.signal);
        const js = await res.json();
        if (res.status !== 400 || !/context|maximum/i.test(js.error?.message ?? '')) throw new Error(`oversized prompt: HTTP ${res.status} ${JSON.stringify(js).slice(0, 200)}`);
      }
      return;
    }
  }
}

async function withHangCheck(kind) {
  stats[kind].sent++;
  let timer;
  const hang = new Promise((resolve) => { timer = setTimeout(() => resolve('hung'), HANG_S * 1000); });
  try {
    const r = await Promise.race([one(kind).then(() => 'ok'), hang]);
    stats[kind][r]++;
    if (r === 'hung') failures.push(`${kind}: no outcome within ${HANG_S} s`);
  } catch (e) {
    stats[kind].lost++;
    const cause = e.cause ? ` (${e.cause.code ?? ''} ${e.cause.message ?? e.cause})` : '';
    failures.push(`${kind}: ${e.message ?? e}${cause} at ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  } finally {
    clearTimeout(timer);
  }
}

async function client(deadline) {
  while (Date.now() < deadline) await withHangCheck(KINDS[randInt(0, KINDS.length - 1)]);
}

async function metrics() {
  const text = await (await fetch(URL_ + '/metrics')).text();
  const get = (name) => {
    const m = new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text);
    return m ? Number(m[1]) : NaN;
  };
  return { running: get('vllm:num_requests_running'), waiting: get('vllm:num_requests_waiting'),
    kv: get('vllm:kv_cache_usage_perc'), preemptions: get('vllm:num_preemptions_total') };
}

const t0 = Date.now();
const samples = [];
const sampler = setInterval(() => samples.push([(Date.now() - t0) / 1000, rssKiB()]), 1000);
samples.push([0, rssKiB()]);
const deadline = t0 + SECONDS * 1000;
await Promise.all(Array.from({ length: CLIENTS }, () => client(deadline)));
clearInterval(sampler);
const elapsed = (Date.now() - t0) / 1000;
samples.push([elapsed, rssKiB()]);

let m;
for (let i = 0; i < 100; i++) {
  m = await metrics();
  if (m.running === 0 && m.waiting === 0 && m.kv === 0) break;
  await sleep(100);
}

// RSS: growth and least-squares slope after the warm-up (first third)
const after = samples.filter(([t]) => t >= SECONDS / 3);
const n = after.length;
const mt = after.reduce((a, [t]) => a + t, 0) / n;
const mr = after.reduce((a, [, r]) => a + r, 0) / n;
const slope = after.reduce((a, [t, r]) => a + (t - mt) * (r - mr), 0) /
  Math.max(1e-9, after.reduce((a, [t]) => a + (t - mt) ** 2, 0)); // KiB/s
const rssWarm = after[0][1];
const rssEnd = samples[samples.length - 1][1];
const limit = rssWarm + rssWarm / 10 + 16384;

let total = 0, lost = 0, hung = 0;
console.log(`soak: ${CLIENTS} clients, ${elapsed.toFixed(0)} s`);
console.log('kind        sent     ok   lost   hung');
for (const k of KINDS) {
  const s = stats[k];
  total += s.sent; lost += s.lost; hung += s.hung;
  console.log(`${k.padEnd(10)} ${String(s.sent).padStart(5)} ${String(s.ok).padStart(6)} ${String(s.lost).padStart(6)} ${String(s.hung).padStart(6)}`);
}
console.log(`total      ${String(total).padStart(5)}   lost ${lost}, hung ${hung}`);
console.log(`after: running ${m.running}, waiting ${m.waiting}, kv_cache_usage_perc ${m.kv}, preemptions ${m.preemptions}`);
console.log(`RSS: start ${samples[0][1]} KiB, after warm-up ${rssWarm} KiB, end ${rssEnd} KiB (limit ${Math.round(limit)} KiB), slope ${(slope * 60 / 1024).toFixed(3)} MiB/min over ${n} samples`);
for (const f of failures.slice(0, 20)) console.log(`  ${f}`);
let bad = 0;
if (lost || hung) { console.log(`FAIL: ${lost} lost, ${hung} hung`); bad = 1; }
if (m.running !== 0 || m.waiting !== 0 || m.kv !== 0) { console.log('FAIL: the server is not idle after the load'); bad = 1; }
if (!(rssEnd <= limit) && !process.env.SOAK_SKIP_RSS) { console.log('FAIL: RSS grew past the limit'); bad = 1; }
for (const k of KINDS) if (stats[k].ok < 1) { console.log(`FAIL: no ${k} request completed`); bad = 1; }
if (!bad) console.log('PASS');
process.exit(bad);
