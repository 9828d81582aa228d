// `pagoda serve CHAT_MODEL WHISPER_MODEL` driven by the official openai npm
// client: audio.transcriptions.create / audio.translations.create in every
// response format, streaming events, jfk.wav and the 8 kHz wav converted
// here with ffmpeg to mp3 / flac / ogg / m4a, bad inputs (corrupt,
// truncated, empty, wrong content type, a chat model asked to transcribe,
// unsupported options), silent / 0.1 s / 10-minute files, a client that
// drops a streamed transcription, and chats answered while transcriptions
// run. The Whisper weights are random: the pipeline is checked, not the text.
// Env: PAGODA_CMD (JSON array: emulator args + pagoda binary),
// PAGODA_SERVE_MODEL (the chat model), PAGODA_CHAT_TEMPLATE ("" = completions
// instead of chats), PAGODA_WHISPER_MODEL, PAGODA_WHISPER_TOKENIZER,
// PAGODA_AUDIO_DIR (jfk.wav, OSR_us_000_0034_8k.wav).
import { spawn, spawnSync } from 'node:child_process';
import { createReadStream, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import OpenAI, { toFile } from 'openai';

const CMD = JSON.parse(process.env.PAGODA_CMD ?? '["pagoda"]');
const CHAT_DIR = process.env.PAGODA_SERVE_MODEL;
const TEMPLATE = process.env.PAGODA_CHAT_TEMPLATE ?? '';
const WHISPER_DIR = process.env.PAGODA_WHISPER_MODEL;
const WHISPER_TOK = process.env.PAGODA_WHISPER_TOKENIZER;
const AUDIO = process.env.PAGODA_AUDIO_DIR;
const KEY = 'test-key-456';
const JFK = join(AUDIO, 'jfk.wav');
const OSR = join(AUDIO, 'OSR_us_000_0034_8k.wav');

let server;
let stderr = '';
let baseURL;
let client;
let whisper; // served names
let chat;
let tmp;

function startServer() {
  const args = [...CMD.slice(1), 'serve', CHAT_DIR, WHISPER_DIR, '--tokenizer', WHISPER_TOK,
    '--port', '0', '--api-key', KEY, '--kv-cache-memory', '128MiB',
    // idle kept-alive sockets outlive the client's own 4 s idle limit: a
    // large upload never starts on a socket the server is closing
    '--keep-alive-timeout', '30'];
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

function ffmpeg(args) {
  const r = spawnSync('ffmpeg', ['-nostdin', '-hide_banner', '-loglevel', 'error', '-y', ...args]);
  assert.equal(r.status, 0, `ffmpeg ${args.join(' ')}: ${r.stderr}`);
}

function duration(path) {
  const r = spawnSync('ffprobe', ['-v', 'error', '-show_entries', 'format=duration', '-of', 'csv=p=0', path]);
  assert.equal(r.status, 0, `ffprobe ${path}: ${r.stderr}`);
  return Number(String(r.stdout).trim());
}

// A 16-bit mono WAV of `samples` (Int16Array) at `rate`.
function wav(samples, rate) {
  const b = Buffer.alloc(44 + samples.length * 2);
  b.write('RIFF', 0); b.writeUInt32LE(36 + samples.length * 2, 4); b.write('WAVE', 8);
  b.write('fmt ', 12); b.writeUInt32LE(16, 16); b.writeUInt16LE(1, 20); b.writeUInt16LE(1, 22);
  b.writeUInt32LE(rate, 24); b.writeUInt32LE(rate * 2, 28); b.writeUInt16LE(2, 32); b.writeUInt16LE(16, 34);
  b.write('data', 36); b.writeUInt32LE(samples.length * 2, 40);
  for (let i = 0; i < samples.length; i++) b.writeInt16LE(samples[i], 44 + 2 * i);
  return b;
}

async function metrics() {
  const r = await fetch(`${baseURL.replace(/\/v1$/, '')}/metrics`);
  return r.text();
}

function running(text, model) {
  const m = text.match(new RegExp(`^vllm:num_requests_running\\{model_name="${model}"\\} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

// SRT cue times: "HH:MM:SS,mmm --> HH:MM:SS,mmm" -> [[start, end] seconds].
function srtTimes(text) {
  const re = /^(\d{2}):(\d{2}):(\d{2}),(\d{3}) --> (\d{2}):(\d{2}):(\d{2}),(\d{3})$/gm;
  const sec = (h, m, s, ms) => Number(h) * 3600 + Number(m) * 60 + Number(s) + Number(ms) / 1000;
  return [...text.matchAll(re)].map((m) => [sec(m[1], m[2], m[3], m[4]), sec(m[5], m[6], m[7], m[8])]);
}

// Texts built from pieces decoded one by one equal the whole decode unless
// a multi-byte character was split between pieces (random weights emit any
// token order): then both hold U+FFFD and are only compared loosely.
function sameText(pieces, whole) {
  if (pieces.includes('\uFFFD') || whole.includes('\uFFFD')) return;
  assert.equal(pieces.trim(), whole.trim());
}

function checkVerbose(v, task, seconds) {
  assert.equal(v.task, task);
  assert.equal(typeof v.language, 'string');
  assert.ok(v.language.length > 0);
  assert.equal(typeof v.text, 'string');
  assert.ok(Math.abs(v.duration - seconds) < 0.2, `duration ${v.duration} vs ${seconds}`);
  assert.ok(Array.isArray(v.segments));
  v.segments.forEach((s, i) => {
    assert.equal(s.id, i);
    assert.equal(typeof s.text, 'string');
    assert.ok(s.start >= 0 && s.start <= s.end, `segment ${s.id}: ${s.start} > ${s.end}`);
    assert.ok(Array.isArray(s.tokens));
  });
  sameText(v.segments.map((s) => s.text).join(''), v.text);
}

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'pagoda-audio-'));
  const { proc, port } = await startServer();
  server = proc;
  baseURL = `http://127.0.0.1:${port}/v1`;
  client = new OpenAI({ apiKey: KEY, baseURL, maxRetries: 0, timeout: 600000 });
});

after(async () => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
  if (!server) return;
  const done = new Promise((r) => server.once('exit', r));
  server.kill('SIGTERM');
  await done;
});

describe('pagoda serve: audio endpoints with the openai client', () => {
  test('models.list: a chat model and a Whisper model', async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 2);
    const w = models.data.filter((m) => m.task === 'transcription');
    const c = models.data.filter((m) => m.task === 'generate');
    assert.equal(w.length, 1);
    assert.equal(c.length, 1);
    assert.deepEqual(w[0].capabilities, ['transcription', 'translation']);
    whisper = w[0].id;
    chat = c[0].id;
  });

  test('json (the defaults: temperature fallback), text', async () => {
    const r = await client.audio.transcriptions.create({ file: createReadStream(JFK), model: whisper });
    assert.equal(typeof r.text, 'string');
    // without `model` the first speech model answers
    const t = await client.audio.transcriptions.create({
      file: createReadStream(JFK), response_format: 'text', temperature: 0.2, language: 'en',
    });
    assert.equal(typeof t, 'string');
    assert.ok(t.endsWith('\n'));
  });

  test('verbose_json, srt, vtt are well formed', async () => {
    const base = { file: createReadStream(JFK), model: whisper, temperature: 0.2, seed: 3 };
    const v = await client.audio.transcriptions.create({
      ...base, response_format: 'verbose_json', timestamp_granularities: ['segment'],
    });
    checkVerbose(v, 'transcribe', duration(JFK));
    const srt = await client.audio.transcriptions.create({ ...base, file: createReadStream(JFK), response_format: 'srt' });
    assert.equal(typeof srt, 'string');
    const blocks = srt.split('\n\n').filter((b) => b.trim());
    const sc = srtTimes(srt);
    assert.equal(sc.length, blocks.length);
    blocks.forEach((b, i) => assert.equal(b.split('\n')[0], String(i + 1)));
    for (const [s, e] of sc) assert.ok(s <= e);
    const vtt = await client.audio.transcriptions.create({ ...base, file: createReadStream(JFK), response_format: 'vtt' });
    assert.ok(vtt.startsWith('WEBVTT\n'));
    const vc = [...vtt.matchAll(/^((?:\d{2}:)?\d{2}):(\d{2})\.(\d{3}) --> ((?:\d{2}:)?\d{2}):(\d{2})\.(\d{3})$/gm)];
    assert.equal(vc.length, vtt.split('\n\n').filter((b) => b.trim()).length - 1);
    for (const m of vc) {
      const sec = (hm, s, ms) => hm.split(':').reduce((a, x) => a * 60 + Number(x), 0) * 60 + Number(s) + Number(ms) / 1000;
      assert.ok(sec(m[1], m[2], m[3]) <= sec(m[4], m[5], m[6]));
    }
    // the same seeded request gives the same segments
    const v2 = await client.audio.transcriptions.create({
      ...base, file: createReadStream(JFK), response_format: 'verbose_json',
    });
    assert.deepEqual(v2.segments.map((s) => [s.start, s.end, s.text]), v.segments.map((s) => [s.start, s.end, s.text]));
  });

  test('translations', async () => {
    const v = await client.audio.translations.create({
      file: createReadStream(JFK), model: whisper, response_format: 'verbose_json', temperature: 0.2,
    });
    checkVerbose(v, 'translate', duration(JFK));
    const j = await client.audio.translations.create({ file: createReadStream(JFK), model: whisper, temperature: 0.2 });
    assert.equal(typeof j.text, 'string');
  });

  test('streaming: transcript.text.delta events, then transcript.text.done', async () => {
    const stream = await client.audio.transcriptions.create({
      file: createReadStream(JFK), model: whisper, stream: true, temperature: 0.2,
    });
    let text = '';
    let done = null;
    let deltas = 0;
    for await (const ev of stream) {
      assert.equal(done, null, 'nothing after transcript.text.done');
      if (ev.type === 'transcript.text.delta') {
        assert.equal(typeof ev.delta, 'string');
        text += ev.delta;
        deltas++;
      } else {
        assert.equal(ev.type, 'transcript.text.done');
        done = ev;
      }
    }
    assert.ok(done, 'a transcript.text.done event');
    sameText(text, done.text);
    assert.ok(deltas >= 1);
    assert.equal(done.usage.type, 'duration');
    assert.equal(done.usage.seconds, Math.ceil(duration(JFK)));
  });

  test('the 8 kHz wav and its mp3 / flac / ogg / m4a conversions', async () => {
    const files = [[OSR, duration(OSR)]];
    for (const [ext, codec] of [['mp3', ['-c:a', 'libmp3lame', '-b:a', '64k']], ['flac', ['-c:a', 'flac']],
      ['ogg', ['-c:a', 'libvorbis', '-q:a', '4']], ['m4a', ['-c:a', 'aac', '-b:a', '64k']]]) {
      const out = join(tmp, `osr.${ext}`);
      ffmpeg(['-i', OSR, ...codec, out]);
      files.push([out, duration(OSR)]);
    }
    for (const [path, seconds] of files) {
      const v = await client.audio.transcriptions.create({
        file: createReadStream(path), model: whisper, response_format: 'verbose_json', temperature: 0.2, seed: 1,
      });
      // lossy encoders pad the start/end by a few tens of ms
      assert.ok(Math.abs(v.duration - seconds) < 0.15, `${path}: duration ${v.duration} vs ${seconds}`);
      checkVerbose({ ...v, duration: seconds }, 'transcribe', seconds);
    }
  });

  test('bad files: corrupt, truncated, empty -> 400 naming the problem', async () => {
    const bytes = readFileSync(JFK);
    const cases = [
      ['noise.wav', Buffer.from(Array.from({ length: 4000 }, (_, i) => (i * 7919 + 13) % 251)), /cannot decode|not a recognised/],
      ['cut.wav', bytes.subarray(0, 20000), /truncated/],
      ['empty.wav', Buffer.alloc(0), /empty/],
    ];
    for (const [name, data, re] of cases) {
      await assert.rejects(
        client.audio.transcriptions.create({ file: await toFile(data, name), model: whisper }),
        (e) => {
          assert.equal(e.status, 400, `${name}: ${e.message}`);
          assert.match(e.message, re);
          if (name !== 'empty.wav') assert.match(e.message, new RegExp(name.replace('.', '\\.')));
          return true;
        },
      );
    }
  });

  test('bad requests: chat model, unknown format, word timestamps, wrong content type', async () => {
    const file = () => createReadStream(JFK);
    await assert.rejects(client.audio.transcriptions.create({ file: file(), model: chat }), (e) => {
      assert.equal(e.status, 400);
      assert.match(e.message, new RegExp(`\`${chat}\` does not transcribe`));
      return true;
    });
    await assert.rejects(client.audio.translations.create({ file: file(), model: chat }), (e) => e.status === 400);
    await assert.rejects(client.audio.transcriptions.create({ file: file(), model: whisper, response_format: 'docx' }),
      (e) => e.status === 400 && /response_format/.test(e.message));
    await assert.rejects(client.audio.transcriptions.create({
      file: file(), model: whisper, response_format: 'verbose_json', timestamp_granularities: ['word'],
    }), (e) => e.status === 400 && /'word' is not supported/.test(e.message));
    await assert.rejects(client.audio.transcriptions.create({ file: file(), model: whisper, language: 'xx' }),
      (e) => e.status === 400 && /language/.test(e.message));
    await assert.rejects(client.chat.completions.create({ model: whisper, messages: [{ role: 'user', content: 'hi' }] }),
      (e) => e.status === 400 && new RegExp(`\`${whisper}\` is a speech-to-text model`).test(e.message));
    const r = await fetch(`${baseURL}/audio/transcriptions`, {
      method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: whisper, file: 'jfk.wav' }),
    });
    assert.equal(r.status, 415);
    const body = await r.json();
    assert.match(body.error.message, /multipart\/form-data/);
  });

  test('silent and 0.1 s files transcribe', async () => {
    for (const [name, n] of [['silence.wav', 16000 * 5], ['short.wav', 1600]]) {
      const v = await client.audio.transcriptions.create({
        file: await toFile(wav(new Int16Array(n), 16000), name), model: whisper,
        response_format: 'verbose_json', temperature: 0.2,
      });
      assert.ok(Math.abs(v.duration - n / 16000) < 0.01, `${name}: ${v.duration}`);
      assert.equal(typeof v.text, 'string');
    }
  });

  // the long file: 10 minutes natively; the aarch64 build (qemu, ~50x
  // slower) sets PAGODA_AUDIO_LONG_S to a shorter length, same code paths
  const LONG_S = Number(process.env.PAGODA_AUDIO_LONG_S || 600);
  const DROP_S = Math.min(180, LONG_S);
  test(`a ${LONG_S} s file finishes while chats are answered; a dropped stream is aborted`, async () => {
    // LONG_S seconds of a quiet chirp at 16 kHz (10 minutes: 19.2 MB, under --max-audio-bytes 25 MiB)
    const n = 16000 * LONG_S;
    const s = new Int16Array(n);
    for (let i = 0; i < n; i++) s[i] = Math.round(3000 * Math.sin(2 * Math.PI * (200 + (i % 16000) / 40) * i / 16000));
    const long = client.audio.transcriptions.create({
      file: await toFile(wav(s, 16000), 'ten-minutes.wav'), model: whisper,
      response_format: 'verbose_json', temperature: 0.2,
    }, { maxRetries: 2 });
    let longDone = false;
    const longResult = long.then((v) => { longDone = true; return v; });
    // wait until the transcription runs on the engine
    for (let i = 0; i < 600 && running(await metrics(), whisper) < 1; i++) await new Promise((r) => setTimeout(r, 50));
    for (let k = 0; k < 3; k++) {
      if (TEMPLATE) {
        const c = await client.chat.completions.create({
          model: chat, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 24,
        });
        assert.ok(['stop', 'length'].includes(c.choices[0].finish_reason));
      } else {
        const c = await client.completions.create({ model: chat, prompt: 'Once upon a time', max_tokens: 24 });
        assert.ok(['stop', 'length'].includes(c.choices[0].finish_reason));
      }
    }
    assert.equal(longDone, false, 'the chats were answered while the transcription ran');
    // a client that drops its streamed transcription (3 minutes: six
    // windows) after the first delta: aborted, the server goes on
    const ac = new AbortController();
    const dropped = await client.audio.transcriptions.create({
      file: await toFile(wav(s.subarray(0, 16000 * DROP_S), 16000), 'three-minutes.wav'), model: whisper,
      stream: true, temperature: 0.2,
    }, { signal: ac.signal });
    // (the openai client ends an aborted stream's iteration quietly)
    for await (const ev of dropped) if (ev.type === 'transcript.text.delta') { ac.abort(); break; }
    const v = await longResult;
    checkVerbose(v, 'transcribe', LONG_S);
    // everything ends: no request left on either engine
    let m = '';
    for (let i = 0; i < 200; i++) {
      m = await metrics();
      if (running(m, whisper) === 0 && running(m, chat) === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(running(m, whisper), 0);
    assert.equal(running(m, chat), 0);
    for (let i = 0; i < 100 && !/aborted \(client went away\)/.test(stderr); i++) await new Promise((r) => setTimeout(r, 50));
    assert.match(stderr, new RegExp(`trsc-[0-9a-f]+: transcription of ${DROP_S}\\.0 s of audio by .*aborted \\(client went away\\)`));
  });

  test('a file over --max-audio-seconds is refused by the documented limit', async () => {
    // 31 minutes of 8 kHz silence (29.8 MB > 25 MiB): 413 by the upload limit
    const big = wav(new Int16Array(8000 * 60 * 31), 8000);
    await assert.rejects(client.audio.transcriptions.create({ file: await toFile(big, 'long.wav'), model: whisper },
      { maxRetries: 2 }),
      (e) => e.status === 413 && /--max-audio-bytes/.test(e.message));
    // 31 minutes of mp3 at 8 kbps (< 2 MB): decoded length over --max-audio-seconds 1800 -> 400
    const mp3 = join(tmp, 'long.mp3');
    ffmpeg(['-f', 'lavfi', '-i', 'anullsrc=r=8000:cl=mono', '-t', '1860', '-c:a', 'libmp3lame', '-b:a', '8k', mp3]);
    await assert.rejects(client.audio.transcriptions.create({ file: createReadStream(mp3), model: whisper }),
      (e) => e.status === 400 && /--max-audio-seconds 1800/.test(e.message));
    const h = await fetch(`${baseURL.replace(/\/v1$/, '')}/health`);
    assert.equal(h.status, 200);
  });
});
