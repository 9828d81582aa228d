/* pagoda web chat: a small, safe Markdown renderer for model output.
 *
 * renderMarkdown(text) -> HTML string. Safety: every piece of the input is
 * HTML-escaped (& < > " ') before any markup of ours is added, and the only
 * tags ever produced are the fixed ones below (p, br, pre, code, h1-h6,
 * ul, ol, li, blockquote, hr, strong, em, a). Link targets must be http(s)
 * URLs; anything else stays text. So model output such as <script> or
 * <img onerror=...> is shown as text, never parsed as HTML.
 *
 * Covered: fenced code blocks (``` or ~~~, an info string becomes
 * class="language-x"; an unclosed fence, as while streaming, runs to the
 * end), ATX headings, bullet and numbered lists (one level), block quotes,
 * horizontal rules, paragraphs (single newlines become <br>), and inline
 * `code`, **strong**, *em* / _em_, [text](URL) with an http(s) URL. A CommonMark subset,
 * not the whole specification. */
(function (root) {
  'use strict';

  function escapeHtml(s) {
    return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
      .replace(/"/g, '&quot;').replace(/'/g, '&#39;');
  }

  /* **strong**, __strong__, *em*, _em_ on already-escaped text with no
   * link in it. */
  function emphasis(s) {
    s = s.replace(/\*\*([^*\n]+)\*\*/g, '<strong>$1</strong>');
    s = s.replace(/(^|[^\w])__([^_\n]+)__(?!\w)/g, '$1<strong>$2</strong>'); /* not intraword */
    s = s.replace(/(^|[^*\w])\*([^*\s][^*\n]*?)\*(?!\w)/g, '$1<em>$2</em>');
    s = s.replace(/(^|[^_\w])_([^_\s][^_\n]*?)_(?!\w)/g, '$1<em>$2</em>');
    return s;
  }

  /* Inline markup of one already-split text run (no code spans in it): the
   * input is raw text; it is escaped first, then markup is added. Links are
   * cut out first and emphasis runs only on the text between them and on
   * their labels, never on a URL or across a link's tag (so
   * ".../pkg/__init__.py" stays a URL and two links' "_" do not pair up
   * through target="_blank"); emphasis therefore cannot span a link. */
  function inlineText(raw) {
    const s = escapeHtml(raw);
    const link = /\[([^\]\n]+)\]\((https?:\/\/[^\s()]+)\)/g;
    let out = '';
    let last = 0;
    let m;
    while ((m = link.exec(s))) {
      out += emphasis(s.slice(last, m.index)) + '<a href="' + m[2] +
        '" rel="noopener noreferrer" target="_blank">' + emphasis(m[1]) + '</a>';
      last = link.lastIndex;
    }
    return out + emphasis(s.slice(last));
  }

  /* Inline markup with `code spans` kept literal. */
  function inline(raw) {
    let out = '';
    let i = 0;
    while (i < raw.length) {
      const open = raw.indexOf('`', i);
      if (open < 0) break;
      let n = 1;
      while (raw[open + n] === '`') n++;
      const fence = '`'.repeat(n);
      const close = raw.indexOf(fence, open + n);
      if (close < 0) break;
      out += inlineText(raw.slice(i, open));
      out += '<code>' + escapeHtml(raw.slice(open + n, close).trim()) + '</code>';
      i = close + n;
    }
    return out + inlineText(raw.slice(i));
  }

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const BULLET = /^ {0,3}[-*+]\s+(.*)$/;
  const NUMBERED = /^ {0,3}(\d{1,9})[.)]\s+(.*)$/;
  const QUOTE = /^ {0,3}>\s?(.*)$/;
  const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;

  function renderMarkdown(text) {
    const lines = String(text).replace(/\r\n?/g, '\n').split('\n');
    const out = [];
    let para = [];
    const flushPara = () => {
      if (para.length) out.push('<p>' + para.map(inline).join('<br>') + '</p>');
      para = [];
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      let m;
      if ((m = FENCE.exec(line))) {
        flushPara();
        const marker = m[1];
        const lang = m[2];
        const body = [];
        i++;
        while (i < lines.length) {
          const t = lines[i].trimStart();
          if (t.startsWith(marker[0].repeat(marker.length)) && /^[`~]+\s*$/.test(t)) break;
          body.push(lines[i]);
          i++;
        }
        const cls = lang ? ' class="language-' + escapeHtml(lang) + '"' : '';
        out.push('<pre><code' + cls + '>' + escapeHtml(body.join('\n')) + '</code></pre>');
        continue;
      }
      if (!line.trim()) { flushPara(); continue; }
      if (RULE.test(line)) { flushPara(); out.push('<hr>'); continue; }
      if ((m = HEADING.exec(line))) {
        flushPara();
        const n = m[1].length;
        out.push('<h' + n + '>' + inline(m[2]) + '</h' + n + '>');
        continue;
      }
      if (BULLET.test(line) || NUMBERED.test(line)) {
        flushPara();
        const ordered = !BULLET.test(line);
        const re = ordered ? NUMBERED : BULLET;
        const items = [];
        let start = ordered ? parseInt(NUMBERED.exec(line)[1], 10) : 1;
        while (i < lines.length && re.test(lines[i])) {
          const mm = re.exec(lines[i]);
          items.push(inline(ordered ? mm[2] : mm[1]));
          i++;
        }
        i--;
        const tag = ordered ? 'ol' : 'ul';
        const startAttr = ordered && start !== 1 ? ' start="' + start + '"' : '';
        out.push('<' + tag + startAttr + '>' + items.map((x) => '<li>' + x + '</li>').join('') +
                 '</' + tag + '>');
        continue;
      }
      if (QUOTE.test(line)) {
        flushPara();
        const body = [];
        while (i < lines.length && QUOTE.test(lines[i])) body.push(QUOTE.exec(lines[i++])[1]);
        i--;
        out.push('<blockquote>' + renderMarkdown(body.join('\n')) + '</blockquote>');
        continue;
      }
      para.push(line);
    }
    flushPara();
    return out.join('\n');
  }

  root.pagodaMarkdown = { renderMarkdown, escapeHtml };
})(typeof window !== 'undefined' ? window : globalThis);
