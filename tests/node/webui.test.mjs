// The web chat page of `pagoda serve` (src/server/webui/) in headless
// Chromium (Debian's /usr/bin/chromium, driven by playwright-core): the
// page loads under its Content-Security-Policy with no console error, shows
// the model, streams an answer incrementally, stops an answer mid-stream
// (the server counts the request as aborted and frees it; the page takes
// the next message), keeps the conversation across a reload, renders a
// Markdown code block as <pre><code> while model output holding <script>
// or <img onerror> stays text, and shows the server's 400 for a prompt
// longer than the context. Issue 20's break-it pass: the oldest turns are
// left out (and marked) when the conversation outgrows the context, the
// model info loads as soon as an API key is entered, and an answer whose
// stream ends without a finish_reason (cut stream, server killed) is shown
// as interrupted; after a restart of the server the next message works.
// Env: PAGODA_CMD (JSON array: the pagoda binary), PAGODA_SERVE_MODEL,
// PAGODA_CHAT_TEMPLATE; CHROMIUM (default /usr/bin/chromium).
//
// Making answers long enough to catch mid-stream without timing: every chat
// request the page sends gets "ignore_eos": true added on its way (the
// request still goes to the real server), and while an answer must be
// caught in flight a "blocker" (one non-streamed completion with n = 64 x
// 480 tokens) shares every engine step, so the page's answer takes hundreds
// of slow steps; the test waits for events (text seen, button shown), never
// for a fixed time.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';
import { startServer, stopServer } from './serve.mjs';

const MODEL_DIR = process.env.PAGODA_SERVE_MODEL;
const TEMPLATE = process.env.PAGODA_CHAT_TEMPLATE;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
  "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
const WAIT = { timeout: 180000 }; // reached only by a hang

let server;
let origin;
let browser;
let page;
const consoleErrors = [];
let allowedErrors = 0; // "Failed to load resource" of the deliberate 400

before(async () => {
  assert.ok(TEMPLATE, 'PAGODA_CHAT_TEMPLATE is required');
  const s = await startServer([MODEL_DIR, '--chat-template', TEMPLATE, '--max-num-seqs', '128']);
  server = s.proc;
  origin = `http://127.0.0.1:${s.port}`;
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  const context = await browser.newContext();
  page = await context.newPage();
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(`page error: ${e.message}`));
  await page.route('**/v1/chat/completions', async (route) => {
    const body = JSON.parse(route.request().postData());
    body.ignore_eos = true;
    await route.continue({ postData: JSON.stringify(body) });
  });
});

after(async () => {
  if (browser) await browser.close();
  if (server) await stopServer(server);
});

async function metrics() {
  return (await fetch(`${origin}/metrics`)).text();
}

function sample(text, name) {
  const m = text.match(new RegExp(`^${name.replace(/[{}"]/g, '\\$&')}[^ ]* (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

async function aborts() {
  return sample(await metrics(), 'vllm:request_success_total{finished_reason="abort"');
}

// Start the blocker and wait until the engine runs it; returns its stopper.
async function slowEngineDown(at = origin, headers = {}) {
  const ctrl = new AbortController();
  const done = fetch(`${at}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, signal: ctrl.signal,
    body: JSON.stringify({ prompt: 'Once upon a time', n: 64, max_tokens: 480, ignore_eos: true }),
  }).then((r) => r.text()).catch((e) => e);
  for (;;) {
    const m = await (await fetch(`${at}/metrics`, { headers })).text();
    if (sample(m, 'vllm:num_requests_running') >= 1) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  return async () => { ctrl.abort(); await done; };
}

async function setSettings({ maxTokens, temperature, system }, p = page) {
  if (await p.locator('#settings').isHidden()) await p.click('#settings-toggle');
  await p.fill('#set-max-tokens', String(maxTokens));
  await p.fill('#set-temperature', String(temperature));
  await p.locator('#set-temperature').dispatchEvent('change');
  await p.locator('#set-max-tokens').dispatchEvent('change');
  if (system !== undefined) {
    await p.fill('#set-system', system);
    await p.locator('#set-system').dispatchEvent('change');
  }
}

async function sendMessage(text, p = page) {
  await p.fill('#input', text);
  await p.press('#input', 'Enter');
}

const idle = (p = page) => p.waitForSelector('#send:not([hidden])', WAIT);
const lastAnswer = (p = page) => p.locator('#messages .msg.assistant').last();

test('the page loads under its CSP and shows the model', async () => {
  const res = await page.goto(`${origin}/`);
  assert.equal(res.status(), 200);
  const h = res.headers();
  assert.equal(h['content-security-policy'], CSP);
  assert.equal(h['content-type'], 'text/html; charset=utf-8');
  assert.equal(h['x-content-type-options'], 'nosniff');
  await page.waitForFunction(() => document.getElementById('model-info').textContent.includes('context'),
    null, WAIT);
  const info = await page.textContent('#model-info');
  assert.match(info, /stories260K/);
  assert.match(info, /context 512/);
});

test('Markdown renders; <script> and <img onerror> in model output stay text', async () => {
  const content = 'Code:\n\n```c\nint x = 1 < 2;\n```\n\nand <script>window.__pwned = 1</script> ' +
    '<img src=x onerror="window.__pwned = 2"> **bold** `<b>`';
  const events = [
    { choices: [{ index: 0, delta: { role: 'assistant', reasoning_content: 'thinking <b>hard</b>' } }] },
    { choices: [{ index: 0, delta: { content: content.slice(0, 20) } }] },
    { choices: [{ index: 0, delta: { content: content.slice(20) }, finish_reason: 'stop' }] },
  ];
  const sse = events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('') + 'data: [DONE]\n\n';
  await page.route('**/v1/chat/completions', (route) =>
    route.fulfill({ status: 200, contentType: 'text/event-stream', body: sse }), { times: 1 });
  await sendMessage('show me <i>markup</i>');
  await idle();
  const user = page.locator('#messages .msg.user').last();
  assert.equal(await user.locator('.content').textContent(), 'show me <i>markup</i>');
  assert.equal(await user.locator('i').count(), 0);
  const ans = lastAnswer();
  assert.equal(await ans.locator('pre > code.language-c').textContent(), 'int x = 1 < 2;');
  assert.equal(await ans.locator('strong').textContent(), 'bold');
  assert.equal(await ans.locator(':not(pre) > code').textContent(), '<b>');
  const text = await ans.locator('.content').textContent();
  assert.ok(text.includes('<script>window.__pwned = 1</script>'), text);
  assert.ok(text.includes('<img src=x onerror="window.__pwned = 2">'), text);
  assert.equal(await page.locator('#messages script, #messages img').count(), 0);
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  const reasoning = ans.locator('details.reasoning');
  assert.ok(await reasoning.isVisible());
  assert.equal(await reasoning.locator('.reasoning-text').textContent(), 'thinking <b>hard</b>');
  assert.equal(await reasoning.locator('b').count(), 0);
  await page.click('#clear');
  assert.equal(await page.locator('#messages .msg').count(), 0);
});

test('the Markdown renderer: blocks, inline markup, only http(s) links, always escaped', async () => {
  const cases = [
    ['# Title\n\ntext', '<h1>Title</h1>\n<p>text</p>'],
    ['- a\n- b\n\n2. x\n3. y', '<ul><li>a</li><li>b</li></ul>\n<ol start="2"><li>x</li><li>y</li></ol>'],
    ['> quoted', '<blockquote><p>quoted</p></blockquote>'],
    ['line one\nline two', '<p>line one<br>line two</p>'],
    ['```\nunclosed <b>', '<pre><code>unclosed &lt;b&gt;</code></pre>'],
    ['```js\na\n```', '<pre><code class="language-js">a</code></pre>'],
    ['**b** *i* `c<d>`', '<p><strong>b</strong> <em>i</em> <code>c&lt;d&gt;</code></p>'],
    ['[ok](https://example.org/x)', '<p><a href="https://example.org/x" rel="noopener noreferrer" target="_blank">ok</a></p>'],
    ['[bad](javascript:alert(1))', '<p>[bad](javascript:alert(1))</p>'],
    ['[q](https://e.org/"onmouseover="x)', '<p><a href="https://e.org/&quot;onmouseover=&quot;x" rel="noopener noreferrer" target="_blank">q</a></p>'],
    ['a_b_c and x.__y__z', '<p>a_b_c and x.__y__z</p>'],
    ['<svg onload=alert(1)> & \'', '<p>&lt;svg onload=alert(1)&gt; &amp; &#39;</p>'],
    ['---', '<hr>'],
    // no emphasis inside a URL or across links' attributes (issue 20 D3)
    ['[init](https://github.com/a/b/blob/main/pkg/__init__.py)', '<p><a href="https://github.com/a/b/blob/main/pkg/__init__.py" rel="noopener noreferrer" target="_blank">init</a></p>'],
    ['[a](http://x/) and [b](http://y/_)', '<p><a href="http://x/" rel="noopener noreferrer" target="_blank">a</a> and <a href="http://y/_" rel="noopener noreferrer" target="_blank">b</a></p>'],
    ['[*hi*](https://e.org/a*b*c) **x** _y_', '<p><a href="https://e.org/a*b*c" rel="noopener noreferrer" target="_blank"><em>hi</em></a> <strong>x</strong> <em>y</em></p>'],
  ];
  for (const [src, want] of cases) {
    const got = await page.evaluate((t) => window.pagodaMarkdown.renderMarkdown(t), src);
    assert.equal(got, want, src);
  }
});

test('stop mid-answer: the server aborts the request, the page takes the next message', async (t) => {
  await page.click('#clear');
  await setSettings({ maxTokens: 400, temperature: 0 });
  const before = await aborts();
  const unblock = await slowEngineDown();
  try {
    await sendMessage('Tell me a long story.');
    await page.waitForSelector('#stop:not([hidden])', WAIT);
    await page.waitForFunction(() => {
      const a = [...document.querySelectorAll('#messages .msg.assistant .content')].pop();
      return a && a.textContent.trim().length > 0;
    }, null, WAIT);
    await page.click('#stop');
    await idle();
    assert.equal(await lastAnswer().locator('.note').textContent(), 'stopped');
    // the server saw the disconnect: the page's request ends as "abort"
    // (the blocker is aborted only after this)
    while ((await aborts()) < before + 1) await new Promise((r) => setTimeout(r, 50));
  } finally {
    await unblock();
  }
  const stoppedText = await lastAnswer().locator('.content').textContent();
  assert.ok(stoppedText.length > 0);
  t.diagnostic(`stopped after ${stoppedText.length} characters`);
  // usable again: the next message gets a full answer
  assert.ok(await page.locator('#input').isEnabled());
  await setSettings({ maxTokens: 8, temperature: 0 });
  await sendMessage('And then?');
  await idle();
  assert.equal(await lastAnswer().locator('.note').textContent(), 'stopped at max_tokens / the context length');
  assert.ok((await lastAnswer().locator('.content').textContent()).length > 0);
  await page.click('#clear');
});

test('an answer streams in incrementally and the conversation survives a reload', async (t) => {
  await page.click('#clear');
  await setSettings({ maxTokens: 120, temperature: 0 });
  await page.evaluate(() => {
    window.__seen = [];
    new MutationObserver(() => {
      const a = [...document.querySelectorAll('#messages .msg.assistant .content')].pop();
      const t = a ? a.textContent : '';
      if (t && window.__seen[window.__seen.length - 1] !== t) window.__seen.push(t);
    }).observe(document.getElementById('messages'), { subtree: true, childList: true, characterData: true });
  });
  const unblock = await slowEngineDown();
  try {
    await sendMessage('Hello there');
    await idle();
  } finally {
    await unblock();
  }
  const seen = await page.evaluate(() => window.__seen);
  const final = await lastAnswer().locator('.content').textContent();
  assert.ok(final.length > 0);
  const partial = seen.filter((t) => t.length < final.length);
  assert.ok(partial.length >= 2, `partial renders seen: ${partial.length}`);
  t.diagnostic(`${partial.length} partial renders before the final ${final.length} characters`);
  for (const t of partial) assert.ok(final.startsWith(t.slice(0, Math.max(0, t.length - 1))), t);
  assert.equal(await lastAnswer().locator('.note').textContent(), 'stopped at max_tokens / the context length');

  const html = await page.innerHTML('#messages');
  await page.reload();
  await page.waitForSelector('#messages .msg.assistant');
  assert.equal(await page.innerHTML('#messages'), html);
  assert.equal(await page.locator('#messages .msg.user .content').textContent(), 'Hello there');
  assert.equal(await page.inputValue('#set-max-tokens'), '120');
});

test('a prompt longer than the context shows the server\'s 400', async () => {
  const n = await page.locator('#messages .msg').count();
  const long = 'once upon a time '.repeat(400);
  allowedErrors = 1;
  await sendMessage(long);
  await page.waitForSelector('#error:not([hidden])', WAIT);
  const err = await page.textContent('#error');
  assert.match(err, /^HTTP 400: /);
  assert.match(err, /context|max_model_len|too long|512/i);
  await idle();
  assert.equal(await page.locator('#messages .msg').count(), n, 'the failed turn is not kept');
  assert.equal(await page.inputValue('#input'), long, 'the message is back in the input box');
});

test('a conversation longer than the context: the oldest turns are left out and marked', async () => {
  await page.click('#clear');
  await page.reload(); /* no leftover error banner */
  // max_tokens unset: every answer (ignore_eos) runs up to the 512-token context
  await setSettings({ maxTokens: '', temperature: 0, system: 'You tell stories.' });
  const sent = [];
  const spy = (req) => { if (req.url().endsWith('/v1/chat/completions')) sent.push(JSON.parse(req.postData())); };
  page.on('request', spy);
  try {
    for (const [i, q] of ['Hello there', 'Tell me more', 'And then?'].entries()) {
      await sendMessage(q);
      await idle();
      assert.equal(await page.locator('#error').isHidden(), true, await page.textContent('#error'));
      assert.equal(await lastAnswer().locator('.note').textContent(),
        'stopped at max_tokens / the context length', `turn ${i + 1}`);
      assert.ok((await lastAnswer().locator('.content').textContent()).length > 0);
      // the server got no max_tokens (it caps the answer to what fits), the
      // system prompt first, and from the second turn on only the new message
      const body = sent[sent.length - 1];
      assert.equal(body.max_tokens, undefined);
      assert.deepEqual(body.messages[0], { role: 'system', content: 'You tell stories.' });
      if (i === 0) assert.equal(body.messages.length, 2);
      else assert.deepEqual(body.messages.slice(1), [{ role: 'user', content: q }]);
      assert.equal(await page.locator('#messages .msg.dropped').count(), 2 * i);
    }
  } finally {
    page.off('request', spy);
  }
  assert.equal(sent.length, 3);
  const note = page.locator('#messages .dropped-note');
  assert.equal(await note.count(), 1);
  assert.match(await note.textContent(), /no longer fit in the model's context \(512 tokens\)/);
  // the marks survive a reload (they are part of the stored conversation)
  await page.reload();
  await page.waitForSelector('#messages .dropped-note');
  assert.equal(await page.locator('#messages .msg.dropped').count(), 4);
  await setSettings({ maxTokens: 8, temperature: 0, system: '' });
  await page.click('#clear');
});

test('a stream that ends without a finish_reason is shown as interrupted', async () => {
  const events = [{ choices: [{ index: 0, delta: { role: 'assistant', content: 'Once upon' } }] },
    { choices: [{ index: 0, delta: { content: ' a time' } }] }];
  const sse = events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join(''); // no finish_reason, no [DONE]
  await page.route('**/v1/chat/completions', (route) =>
    route.fulfill({ status: 200, contentType: 'text/event-stream', body: sse }), { times: 1 });
  await sendMessage('Tell me a story');
  await idle();
  assert.equal(await lastAnswer().locator('.content').textContent(), 'Once upon a time');
  assert.match(await lastAnswer().locator('.note').textContent(), /^interrupted/);
  // a complete one (finish_reason "stop", [DONE]) has no note
  const done = sse + `data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\ndata: [DONE]\n\n`;
  await page.route('**/v1/chat/completions', (route) =>
    route.fulfill({ status: 200, contentType: 'text/event-stream', body: done }), { times: 1 });
  await sendMessage('Again');
  await idle();
  assert.equal(await lastAnswer().locator('.note').textContent(), '');
  await page.click('#clear');
});

test('no console errors', async () => {
  const unexpected = consoleErrors.filter((e) => !/Failed to load resource.*400/.test(e));
  assert.deepEqual(unexpected, []);
  assert.ok(consoleErrors.length - unexpected.length <= allowedErrors, consoleErrors.join('\n'));
});

// A server started with --api-key: the page shows the 401 and asks for the
// key; entering it loads the model info without a reload. Then the server
// is killed in the middle of an answer (the answer is kept, marked
// interrupted) and started again on the same port: the next message is
// answered.
test('API key entered in the settings; the server killed and restarted mid-conversation', async (t) => {
  const KEY = 'sekrit-key';
  const args = [MODEL_DIR, '--chat-template', TEMPLATE, '--max-num-seqs', '128', '--api-key', KEY];
  let s2 = await startServer(args);
  const at = `http://127.0.0.1:${s2.port}`;
  const context = await browser.newContext();
  const p = await context.newPage();
  const errors = [];
  p.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  await p.route('**/v1/chat/completions', async (route) => {
    const body = JSON.parse(route.request().postData());
    body.ignore_eos = true;
    await route.continue({ postData: JSON.stringify(body) });
  });
  try {
    await p.goto(`${at}/`);
    await p.waitForSelector('#error:not([hidden])', WAIT);
    assert.match(await p.textContent('#error'), /HTTP 401/);
    assert.match(await p.textContent('#model-info'), /API key/);
    await p.click('#settings-toggle');
    await p.fill('#set-api-key', KEY);
    await p.locator('#set-api-key').dispatchEvent('change');
    await p.waitForFunction(() => document.getElementById('model-info').textContent.includes('context 512'),
      null, WAIT);
    assert.ok(await p.locator('#error').isHidden());
    await setSettings({ maxTokens: 400, temperature: 0 }, p);

    // killed mid-answer
    const auth = { Authorization: `Bearer ${KEY}` };
    const unblock = await slowEngineDown(at, auth);
    await sendMessage('Tell me a long story.', p);
    await p.waitForFunction(() => {
      const a = [...document.querySelectorAll('#messages .msg.assistant .content')].pop();
      return a && a.textContent.trim().length > 0;
    }, null, WAIT);
    const gone = new Promise((r) => s2.proc.once('exit', r));
    s2.proc.kill('SIGKILL');
    await gone;
    await unblock();
    await idle(p);
    const note = await lastAnswer(p).locator('.note').textContent();
    assert.match(note, /^interrupted/);
    const partial = await lastAnswer(p).locator('.content').textContent();
    assert.ok(partial.length > 0);
    t.diagnostic(`cut after ${partial.length} characters: ${note}`);

    // the same port again: the next message is answered
    s2 = await startServer(args, s2.port);
    await setSettings({ maxTokens: 8, temperature: 0 }, p);
    await sendMessage('And then?', p);
    await idle(p);
    assert.equal(await lastAnswer(p).locator('.note').textContent(), 'stopped at max_tokens / the context length');
    assert.equal(await p.locator('#messages .msg.assistant').count(), 2);
    assert.ok(await p.locator('#error').isHidden(), await p.textContent('#error'));
    assert.deepEqual(errors, []);
  } finally {
    await context.close();
    if (s2.proc.exitCode === null && s2.proc.signalCode === null) await stopServer(s2.proc);
  }
});
