/* pagoda web chat (served at / by `pagoda serve`; docs/ARCHITECTURE.md
 * "Web chat page"). Vanilla JS, no dependencies, no external URLs.
 *
 * Talks to the same server's OpenAI endpoints: GET /v1/models for the model
 * name and context length (again whenever the API key changes), POST
 * /v1/chat/completions with "stream": true, read as server-sent events
 * through fetch + ReadableStream. Before each turn the history is fitted to
 * the context: POST /tokenize (vLLM's shape, {"messages"} -> {"count"})
 * counts the prompt as the template renders it, and the oldest turns are
 * left out (never the system prompt, never the new message) until prompt +
 * the answer's room fit in max_model_len; the page marks the turns left
 * out. An answer whose stream ends without a finish_reason (connection
 * lost, server gone) is marked interrupted, never shown as complete. Stop
 * aborts the fetch (AbortController): the browser closes the connection
 * and the server aborts the request and frees its KV blocks. Model text is shown
 * through markdown.js (escapes first) or textContent, never as raw HTML.
 * The conversation and the settings live in localStorage. */
(function () {
  'use strict';

  const STORE_CHAT = 'pagoda.webui.conversation';
  const STORE_SETTINGS = 'pagoda.webui.settings';
  const DEFAULTS = { system: '', temperature: 0.7, top_p: 1, max_tokens: '', api_key: '' };
  const md = window.pagodaMarkdown;

  const $ = (id) => document.getElementById(id);
  const els = {
    messages: $('messages'), input: $('input'), send: $('send'), stop: $('stop'),
    composer: $('composer'), error: $('error'), model: $('model-info'), clear: $('clear'),
    settings: $('settings'), toggle: $('settings-toggle'), system: $('set-system'),
    temperature: $('set-temperature'), topP: $('set-top-p'), maxTokens: $('set-max-tokens'),
    apiKey: $('set-api-key'),
  };

  let conversation = load(STORE_CHAT, []);
  if (!Array.isArray(conversation)) conversation = [];
  let settings = Object.assign({}, DEFAULTS, load(STORE_SETTINGS, {}));
  let modelId = null;
  let contextLen = 0; /* the model's max_model_len (0: unknown, no fitting) */
  let keyShown = settings.api_key; /* the API key the model info was loaded with */
  let controller = null;

  function load(key, fallback) {
    try {
      const v = localStorage.getItem(key);
      return v ? JSON.parse(v) : fallback;
    } catch (e) {
      return fallback;
    }
  }

  function save() {
    try {
      localStorage.setItem(STORE_CHAT, JSON.stringify(conversation));
      localStorage.setItem(STORE_SETTINGS, JSON.stringify(settings));
    } catch (e) {
      showError('could not save the conversation in this browser: ' + e.message);
    }
  }

  function showError(text) {
    els.error.textContent = text;
    els.error.hidden = !text;
  }

  function headers() {
    const h = { 'Content-Type': 'application/json' };
    if (settings.api_key) h.Authorization = 'Bearer ' + settings.api_key;
    return h;
  }

  /* The error text of a failed response: the OpenAI error object's message. */
  async function responseError(res) {
    let text = '';
    try {
      text = await res.text();
      const j = JSON.parse(text);
      if (j && j.error && j.error.message) text = j.error.message;
    } catch (e) { /* not JSON: keep the text */ }
    return 'HTTP ' + res.status + (text ? ': ' + text : '');
  }

  /* ---- rendering ---- */

  function messageNode(msg) {
    const div = document.createElement('div');
    div.className = 'msg ' + msg.role;
    const role = document.createElement('div');
    role.className = 'role';
    role.textContent = msg.role;
    div.appendChild(role);
    if (msg.role === 'assistant') {
      const det = document.createElement('details');
      det.className = 'reasoning';
      const sum = document.createElement('summary');
      sum.textContent = 'Reasoning';
      const rt = document.createElement('div');
      rt.className = 'reasoning-text';
      det.append(sum, rt);
      div.appendChild(det);
    }
    const content = document.createElement('div');
    content.className = 'content';
    div.appendChild(content);
    const note = document.createElement('div');
    note.className = 'note';
    div.appendChild(note);
    updateNode(div, msg);
    return div;
  }

  function updateNode(div, msg) {
    const content = div.querySelector('.content');
    if (msg.role === 'assistant') {
      content.innerHTML = md.renderMarkdown(msg.content || ''); /* escapes first */
      const det = div.querySelector('details.reasoning');
      det.hidden = !msg.reasoning;
      det.querySelector('.reasoning-text').textContent = msg.reasoning || '';
    } else {
      content.textContent = msg.content;
    }
    div.querySelector('.note').textContent = msg.note || '';
  }

  /* The conversation; turns no longer sent (m.dropped, set by send) are
   * dimmed, and a note after them says why. */
  function renderAll() {
    const nodes = [];
    conversation.forEach((m, i) => {
      const div = messageNode(m);
      if (m.dropped) div.classList.add('dropped');
      nodes.push(div);
      const next = conversation[i + 1];
      if (m.dropped && next && !next.dropped) {
        const note = document.createElement('div');
        note.className = 'dropped-note';
        note.textContent = 'The turns above no longer fit in the model\'s context' +
          (contextLen ? ' (' + contextLen + ' tokens)' : '') + ' and are not sent to it.';
        nodes.push(note);
      }
    });
    els.messages.replaceChildren(...nodes);
    els.messages.scrollTop = els.messages.scrollHeight;
  }

  function setBusy(busy) {
    els.send.hidden = busy;
    els.stop.hidden = !busy;
    els.send.disabled = busy;
    els.input.disabled = busy;
    document.body.classList.toggle('busy', busy);
    if (!busy) els.input.focus();
  }

  /* ---- settings ---- */

  function showSettings() {
    els.system.value = settings.system;
    els.temperature.value = settings.temperature;
    els.topP.value = settings.top_p;
    els.maxTokens.value = settings.max_tokens;
    els.apiKey.value = settings.api_key;
  }

  function readSettings() {
    settings.system = els.system.value;
    settings.temperature = els.temperature.value;
    settings.top_p = els.topP.value;
    settings.max_tokens = els.maxTokens.value;
    settings.api_key = els.apiKey.value.trim();
    save();
    /* a new key: the model info (and the 401 shown for the old one) again */
    if (settings.api_key !== keyShown) loadModel();
  }

  /* ---- talking to the server ---- */

  /* Fills modelId, contextLen and the header from GET /v1/models; true when
   * it could. A 401 asks for the API key in the settings. */
  async function loadModel() {
    keyShown = settings.api_key;
    modelId = null;
    contextLen = 0;
    try {
      const res = await fetch('/v1/models', { headers: headers() });
      if (!res.ok) {
        els.model.textContent = res.status === 401 ? 'API key needed (Settings)' : 'model list unavailable';
        showError('/v1/models: ' + (await responseError(res)));
        return false;
      }
      const j = await res.json();
      /* the first model that chats (a server may also serve a Whisper model) */
      const list = Array.isArray(j.data) ? j.data : [];
      const m = list.find((x) => Array.isArray(x.capabilities) && x.capabilities.includes('chat')) ||
        list.find((x) => x.task !== 'transcription') || list[0];
      if (!m) {
        els.model.textContent = 'no model served';
        return false;
      }
      modelId = m.id;
      contextLen = Number.isInteger(m.max_model_len) && m.max_model_len > 0 ? m.max_model_len : 0;
      els.model.textContent = m.id + (contextLen ? ' \u00b7 context ' + contextLen : '');
      if (/^\/v1\/models: |^cannot reach the server/.test(els.error.textContent)) showError('');
      return true;
    } catch (e) {
      els.model.textContent = 'server unreachable';
      showError('cannot reach the server: ' + e.message);
      return false;
    }
  }

  const num = (v) => (v === '' || v === null || v === undefined ? NaN : Number(v));

  /* The messages sent for conversation[from..]: the system prompt, then the
   * user messages and the answers that have text. */
  function messagesFrom(from) {
    const messages = [];
    if (settings.system.trim()) messages.push({ role: 'system', content: settings.system });
    for (const m of conversation.slice(from)) {
      if (m.role === 'user' || (m.role === 'assistant' && m.content))
        messages.push({ role: m.role, content: m.content });
    }
    return messages;
  }

  /* Prompt tokens of `messages` as the server's chat template renders them
   * (POST /tokenize); without that endpoint (another server), an upper
   * bound: no byte-level or byte-fallback tokenizer makes more tokens than
   * UTF-8 bytes, plus 16 per message for the template's markup. */
  async function countTokens(messages) {
    try {
      const res = await fetch('/tokenize', {
        method: 'POST', headers: headers(),
        body: JSON.stringify(Object.assign({ messages }, modelId ? { model: modelId } : {})),
      });
      if (res.ok) {
        const j = await res.json();
        if (Number.isInteger(j.count)) return j.count;
      }
    } catch (e) { /* estimated below */ }
    const enc = new TextEncoder();
    return messages.reduce((n, m) => n + enc.encode(m.content).length + 16, 16);
  }

  /* The room kept for the answer when fitting the history: max_tokens if
   * set, else a quarter of the context (at most 1024 tokens); the request
   * then leaves max_tokens unset and the server lets the answer run up to
   * whatever fits. */
  function answerRoom() {
    const mt = num(settings.max_tokens);
    return !isNaN(mt) && mt >= 1 ? Math.trunc(mt) : Math.min(1024, Math.max(1, contextLen >> 2));
  }

  /* The index of the first conversation message to send (the start of a
   * turn, i.e. a user message): 0 when everything fits, else the oldest
   * turn such that prompt + answerRoom() <= contextLen, found by bisection
   * over the turns (the count only shrinks as turns are left out). The new
   * message (the last user message) is always sent; if it does not fit
   * alone the server says so. */
  async function fitHistory() {
    if (!contextLen) return 0;
    const starts = [];
    conversation.forEach((m, i) => { if (m.role === 'user') starts.push(i); });
    if (starts.length <= 1) return 0;
    const room = answerRoom();
    const fits = async (k) => (await countTokens(messagesFrom(starts[k]))) + room <= contextLen;
    if (await fits(0)) return 0;
    let lo = 1, hi = starts.length - 1; /* fits(hi) is assumed: the new message must go */
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (await fits(mid)) hi = mid; else lo = mid + 1;
    }
    return starts[lo];
  }

  function requestBody(from) {
    const body = { messages: messagesFrom(from), stream: true };
    if (modelId) body.model = modelId;
    if (!isNaN(num(settings.temperature))) body.temperature = num(settings.temperature);
    if (!isNaN(num(settings.top_p))) body.top_p = num(settings.top_p);
    if (!isNaN(num(settings.max_tokens))) body.max_tokens = Math.trunc(num(settings.max_tokens));
    return body;
  }

  /* Read server-sent events from a fetch response body: calls onData for the
   * payload of every `data:` line, until `[DONE]` or the end. Rejects (a
   * TypeError) when the connection breaks. */
  async function readEvents(res, onData) {
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        onData(data);
      }
    }
  }

  async function send(text) {
    showError('');
    conversation.push({ role: 'user', content: text });
    const reply = { role: 'assistant', content: '', reasoning: '', pending: true };
    conversation.push(reply);
    save();
    renderAll();
    let node = els.messages.lastElementChild;
    controller = new AbortController();
    setBusy(true);
    let pending = false;
    let finished = false; /* a finish_reason came: the answer is complete */
    const redraw = () => {
      if (pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        updateNode(node, reply);
        save(); /* a reload mid-answer keeps what came so far */
        els.messages.scrollTop = els.messages.scrollHeight;
      });
    };
    try {
      /* after a restart of the server or a new API key the model may be unknown */
      if (!modelId) await loadModel();
      const from = await fitHistory();
      const res = await fetch('/v1/chat/completions', {
        method: 'POST', headers: headers(), body: JSON.stringify(requestBody(from)),
        signal: controller.signal,
      });
      if (!res.ok) throw new Error(await responseError(res));
      conversation.forEach((m, i) => {
        if (i < from) m.dropped = true;
        else delete m.dropped;
      });
      renderAll();
      node = els.messages.lastElementChild;
      await readEvents(res, (data) => {
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message || 'error from the server');
        const ch = j.choices && j.choices[0];
        if (!ch) return;
        const d = ch.delta || {};
        if (d.reasoning_content) reply.reasoning += d.reasoning_content;
        if (d.content) reply.content += d.content;
        if (ch.finish_reason) finished = true;
        if (ch.finish_reason === 'length') reply.note = 'stopped at max_tokens / the context length';
        else if (ch.finish_reason === 'abort') reply.note = 'aborted by the server';
        redraw();
      });
      if (!finished) reply.note = 'interrupted: the stream ended before the answer did';
    } catch (e) {
      if (e.name === 'AbortError') {
        reply.note = 'stopped';
      } else if (e instanceof TypeError && (reply.content || reply.reasoning)) {
        /* the connection broke mid-answer: keep what came */
        reply.note = 'interrupted: the connection to the server was lost';
        showError('the connection to the server was lost (' + e.message + ')');
        modelId = null; /* the next turn asks the (maybe restarted) server again */
      } else {
        reply.note = 'failed';
        showError(e.message);
        if (e instanceof TypeError) modelId = null;
      }
    } finally {
      controller = null;
      delete reply.pending;
      /* a failed turn with no answer is dropped from the history: the user
       * message goes back into the input box to be edited or sent again */
      if (!reply.content && !reply.reasoning && reply.note === 'failed') {
        conversation.splice(conversation.length - 2, 2);
        els.input.value = text;
      }
      save();
      renderAll();
      setBusy(false);
    }
  }

  /* ---- events ---- */

  els.composer.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = els.input.value;
    if (!text.trim() || controller) return;
    els.input.value = '';
    send(text);
  });
  els.input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      els.composer.requestSubmit();
    }
  });
  els.stop.addEventListener('click', () => {
    if (controller) controller.abort();
  });
  els.clear.addEventListener('click', () => {
    if (controller) controller.abort();
    conversation = [];
    showError('');
    save();
    renderAll();
  });
  els.toggle.addEventListener('click', () => {
    const open = els.settings.hidden;
    els.settings.hidden = !open;
    els.toggle.setAttribute('aria-expanded', String(open));
  });
  for (const el of [els.system, els.temperature, els.topP, els.maxTokens, els.apiKey])
    el.addEventListener('change', readSettings);

  /* an answer cut by a reload is kept as far as it came */
  for (const m of conversation)
    if (m.role === 'assistant' && m.pending) {
      delete m.pending;
      m.note = 'interrupted';
    }
  showSettings();
  renderAll();
  setBusy(false);
  loadModel();
})();
