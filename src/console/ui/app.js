/**
 * tollgate operator console: a single page over the admin API (`/admin/...`, see the README's "Admin API").
 *
 * Plain JavaScript with DOM APIs, no framework and no build step. The file is served by
 * src/console/assets.rs under a strict Content-Security-Policy (no inline scripts or styles, nothing from
 * other origins), so it adds no inline script or style attribute either; the chart is SVG built with
 * createElementNS.
 *
 * Everything operators and clients typed (key, group and model names, client request ids, error messages)
 * reaches the page as text only: elements are made with createElement and filled with text nodes or
 * textContent. Nothing here assigns innerHTML, outerHTML or insertAdjacentHTML.
 *
 * Sections, in order: session and API calls · DOM helpers · formatting · dialogs · shell (sign-in and
 * navigation) · one function per view (overview, usage, keys, groups, models) with its helpers · start.
 */
'use strict';

(() => {
  // =========================================================================== session and API calls

  // The admin token is kept in sessionStorage: it survives a reload of this tab, is forgotten when the tab
  // closes or on "Sign out", and never goes to localStorage, a cookie or the URL. API keys are never kept
  // anywhere: a new key is shown once in its dialog, which empties itself when it closes.
  const TOKEN_STORAGE = 'tollgate-console-admin-token';

  const session = {
    token() {
      try {
        return sessionStorage.getItem(TOKEN_STORAGE) || '';
      } catch {
        return '';
      }
    },
    save(token) {
      sessionStorage.setItem(TOKEN_STORAGE, token);
    },
    forget() {
      try {
        sessionStorage.removeItem(TOKEN_STORAGE);
      } catch {
        /* storage unavailable: nothing was kept */
      }
    },
  };

  /** An error answer of the admin API: HTTP status and the body's `error.message`, `code` and `param`. */
  class ApiError extends Error {
    constructor(status, message, code = null, param = null) {
      super(message);
      this.status = status;
      this.code = code;
      this.param = param;
    }
  }

  /**
   * One admin call with `Authorization: Bearer <token>`. Answers the parsed JSON (or a Blob with
   * `as: 'blob'`); throws an ApiError. A 401 or a closed admin API while signed in signs out.
   */
  async function request(method, path, { body, token = session.token(), as = 'json' } = {}) {
    const headers = { Authorization: `Bearer ${token}` };
    const init = { method, headers, cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, `Cannot reach tollgate (${e.message}). Is it still running?`);
    }
    if (!res.ok) {
      const err = await errorOf(res);
      if (token && token === session.token() && isAuthFailure(err)) {
        signOut(authMessage(err, true));
      }
      throw err;
    }
    return as === 'blob' ? res.blob() : res.json();
  }

  async function errorOf(res) {
    let message = `${res.status} ${res.statusText}`.trim();
    let code = null;
    let param = null;
    try {
      const body = await res.json();
      if (body && body.error) {
        message = body.error.message || message;
        code = body.error.code ?? null;
        param = body.error.param ?? null;
      }
    } catch {
      /* not JSON: keep the status line */
    }
    return new ApiError(res.status, message, code, param);
  }

  const api = {
    get: (path) => request('GET', path),
    post: (path, body = {}) => request('POST', path, { body }),
    put: (path, body) => request('PUT', path, { body }),
    blob: (path) => request('GET', path, { as: 'blob' }),
  };

  /** A path segment (key, group or model name) for an admin URL. */
  const seg = (name) => encodeURIComponent(name);

  function isAuthFailure(err) {
    return err.status === 401 || (err.status === 403 && err.code === 'admin_disabled');
  }

  /** Plain words for a refused token or a closed admin API. */
  function authMessage(err, wasSignedIn = false) {
    if (err.status === 401) {
      return wasSignedIn
        ? 'tollgate no longer accepts this admin token (401): it may have restarted with another one. Sign in again.'
        : 'Wrong admin token: tollgate refused it (401). Check the value of the variable that admin_token_env names.';
    }
    if (err.code === 'admin_disabled') {
      return `The admin API is closed (403): ${err.message}`;
    }
    return err.message;
  }

  // ===================================================================================== DOM helpers

  /**
   * Makes an element. props: `class` (string or list), `text`, `on` ({event: handler}), `data` (dataset);
   * anything else becomes an attribute (true: present, false/null/undefined: left out). Children are nodes
   * or strings; strings become text nodes, never markup.
   */
  function el(tag, props = {}, ...children) {
    return build(document.createElement(tag), props, children);
  }

  /** The same for SVG elements. */
  function svgEl(tag, props = {}, ...children) {
    return build(document.createElementNS('http://www.w3.org/2000/svg', tag), props, children);
  }

  function build(node, props, children) {
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') {
        const cls = Array.isArray(v) ? v.filter(Boolean).join(' ') : v;
        if (cls) node.setAttribute('class', cls);
      } else if (k === 'text') {
        node.textContent = String(v);
      } else if (k === 'on') {
        for (const [event, handler] of Object.entries(v)) node.addEventListener(event, handler);
      } else if (k === 'data') {
        for (const [dk, dv] of Object.entries(v)) node.dataset[dk] = String(dv);
      } else if (/^on/i.test(k) || k === 'style' || k === 'srcdoc') {
        throw new Error(`el(): refusing the attribute ${k}`);
      } else if (k === 'href' && !/^(#|blob:)/.test(String(v))) {
        throw new Error('el(): links go to views (#...) or downloads (blob:) only');
      } else {
        node.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const $ = (id) => document.getElementById(id);

  /** A paragraph for the error of one action, shown next to its button. */
  function errorSlot() {
    return el('p', { class: 'error', role: 'alert', hidden: true });
  }

  function showError(slot, err) {
    slot.textContent = err instanceof Error ? err.message : String(err);
    slot.hidden = false;
  }

  function clearError(slot) {
    slot.textContent = '';
    slot.hidden = true;
  }

  /** Runs `work` with `button` disabled; shows a thrown error in `slot`. Answers whether it succeeded. */
  async function act(button, slot, work) {
    if (slot) clearError(slot);
    button.disabled = true;
    button.setAttribute('aria-busy', 'true');
    try {
      await work();
      return true;
    } catch (err) {
      if (!slot) throw err;
      showError(slot, err);
      return false;
    } finally {
      button.disabled = false;
      button.removeAttribute('aria-busy');
    }
  }

  /** A labelled form field. */
  function field(label, input, hint) {
    return el('label', { class: 'field' }, el('span', { text: label }), input, hint && el('small', { class: 'hint', text: hint }));
  }

  function input(name, props = {}) {
    return el('input', { type: 'text', name, autocomplete: 'off', spellcheck: 'false', ...props });
  }

  function button(text, props = {}) {
    return el('button', { type: 'button', ...props }, text);
  }

  /** A table inside a horizontally scrolling box. `columns`: [label, class?]; `rows`: <tr> elements. */
  function table(columns, rows, props = {}) {
    return el(
      'div',
      { class: 'table-wrap' },
      el(
        'table',
        props,
        el('thead', {}, el('tr', {}, columns.map(([label, cls]) => el('th', { scope: 'col', class: cls }, label)))),
        el('tbody', {}, rows),
      ),
    );
  }

  function td(content, cls) {
    return el('td', { class: cls }, content);
  }

  function badge(text, kind) {
    return el('span', { class: ['badge', kind && `badge-${kind}`] }, text);
  }

  function empty(text) {
    return el('p', { class: 'empty', text });
  }

  // ====================================================================================== formatting

  const NUMBER = new Intl.NumberFormat('en-US');
  const COMPACT = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 2 });
  const CREDITS = [2, 4, 6].map((d) => new Intl.NumberFormat('en-US', { maximumFractionDigits: d }));

  function fmtInt(n) {
    return n === null || n === undefined ? '—' : NUMBER.format(n);
  }

  /** Credits: two decimals from 100 up, more below so small costs stay visible. */
  function fmtCredits(n) {
    if (n === null || n === undefined) return '—';
    const a = Math.abs(n);
    return CREDITS[a === 0 || a >= 100 ? 0 : a >= 1 ? 1 : 2].format(n);
  }

  function fmtCompact(n) {
    return COMPACT.format(n);
  }

  function fmtPct(rate) {
    if (rate === null || rate === undefined) return '—';
    const p = rate * 100;
    return `${p > 0 && p < 10 ? p.toFixed(1) : p.toFixed(0)}%`;
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined) return '—';
    return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  }

  const pad = (n) => String(n).padStart(2, '0');

  /** An RFC 3339 time in the browser's time zone: 2026-11-22 10:04:05. */
  function fmtTime(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function fmtHour(iso) {
    const d = new Date(iso);
    return `${pad(d.getHours())}:00`;
  }

  function fmtAgo(iso) {
    const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
    if (!Number.isFinite(s)) return '';
    if (s < 5) return 'just now';
    if (s < 60) return `${s} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} days ago`;
  }

  /** A <time> with local time as text and the UTC value as tooltip; `ago` adds "(3 min ago)". */
  function timeEl(iso, { ago = false } = {}) {
    if (!iso) return el('span', { class: 'muted', text: '—' });
    return el('time', { datetime: iso, title: `${iso} (UTC)` }, fmtTime(iso), ago && el('span', { class: 'muted', text: ` (${fmtAgo(iso)})` }));
  }

  /** datetime-local value (local time) ↔ RFC 3339 (UTC). */
  function toLocalInput(iso) {
    const d = new Date(iso);
    if (!iso || Number.isNaN(d.getTime())) return '';
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
  }

  function fromLocalInput(value) {
    const d = new Date(value);
    return value && !Number.isNaN(d.getTime()) ? d.toISOString() : '';
  }

  // ========================================================================================= dialogs

  /** Opens a modal <dialog> built from `children`; it removes itself from the page when closed. */
  function openDialog(props, ...children) {
    const dialog = el('dialog', { ...props, class: ['dialog', props.class] }, children);
    dialog.addEventListener('close', () => dialog.remove());
    document.body.append(dialog);
    dialog.showModal();
    return dialog;
  }

  function closeDialogs() {
    for (const d of document.querySelectorAll('dialog')) d.close();
  }

  /** Asks before a change that cannot be undone; resolves to true when confirmed. */
  function confirmAction({ title, message, confirm }) {
    return new Promise((resolve) => {
      const yes = button(confirm, { class: 'button-danger', 'data-confirm': 'yes' });
      const no = button('Cancel', { class: 'button-quiet' });
      const dialog = openDialog(
        { class: 'confirm-dialog', role: 'alertdialog', 'aria-label': title },
        el('h2', { text: title }),
        el('p', { text: message }),
        el('div', { class: 'actions' }, no, yes),
      );
      let answer = false;
      yes.addEventListener('click', () => {
        answer = true;
        dialog.close();
      });
      no.addEventListener('click', () => dialog.close());
      dialog.addEventListener('close', () => resolve(answer));
      no.focus();
    });
  }

  /**
   * Shows a key's plaintext once (after creation or rotation) with a copy button. The text lives only in
   * this dialog: closing it empties the element and removes the dialog; nothing is stored.
   */
  function showSecret({ title, name, group, key }) {
    const secret = el('code', { class: 'secret', id: 'new-key' }, key);
    const copied = el('p', { class: 'muted small', role: 'status' });
    const copy = button('Copy', { class: 'button-primary', id: 'copy-key' });
    const done = button('Done', { class: 'button-quiet' });
    const dialog = openDialog(
      { class: 'secret-dialog', 'aria-label': title },
      el('h2', { text: title }),
      el('p', {}, 'Key ', el('strong', { class: 'key-name', text: name }), group ? [' in group ', el('strong', { text: group })] : '', ':'),
      el('div', { class: 'secret-row' }, secret, copy),
      copied,
      el(
        'p',
        { class: 'warning' },
        'Copy it now: it is shown only this once. tollgate keeps only a hash of it, so it cannot be shown again; if it is lost, rotate the key.',
      ),
      el('div', { class: 'actions' }, done),
    );
    copy.addEventListener('click', () => copyText(key, secret, copied));
    // The 'close' event fires a task after close() (and after Esc), so the plaintext is wiped and the
    // dialog removed at once here rather than waiting for it; the event handler covers Esc.
    const wipe = () => {
      secret.textContent = '';
      copied.textContent = '';
      dialog.remove();
    };
    done.addEventListener('click', () => {
      wipe();
      dialog.close();
    });
    dialog.addEventListener('cancel', wipe);
    dialog.addEventListener('close', wipe);
    copy.focus();
  }

  /** Copies with the Clipboard API; where that is unavailable (plain HTTP, denied), selects the text. */
  async function copyText(text, node, status) {
    try {
      if (!navigator.clipboard) throw new Error('no clipboard');
      await navigator.clipboard.writeText(text);
      status.textContent = 'Copied to the clipboard.';
    } catch {
      const range = document.createRange();
      range.selectNodeContents(node);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      status.textContent = 'Selected: press Ctrl+C (⌘C on a Mac) to copy.';
    }
  }

  // =========================================================================== shell: sign-in, navigation

  const VIEWS = {
    overview: { title: 'Overview', render: viewOverview },
    usage: { title: 'Usage', render: viewUsage },
    keys: { title: 'Keys', render: viewKeys },
    groups: { title: 'Groups', render: viewGroups },
    models: { title: 'Models', render: viewModels },
  };

  function showSignIn(message) {
    $('shell').hidden = true;
    $('sign-out').hidden = true;
    $('view').replaceChildren();
    $('sign-in').hidden = false;
    document.title = 'Sign in · tollgate console';
    const slot = $('sign-in-error');
    if (message) showError(slot, message);
    else clearError(slot);
    $('token').focus();
  }

  function showShell() {
    $('sign-in').hidden = true;
    clearError($('sign-in-error'));
    $('shell').hidden = false;
    $('sign-out').hidden = false;
  }

  /** Checks the typed token with one admin call before keeping it. */
  async function onSignIn(event) {
    event.preventDefault();
    const tokenInput = $('token');
    const slot = $('sign-in-error');
    const token = tokenInput.value.trim();
    if (!token) {
      showError(slot, 'Enter the admin token.');
      return;
    }
    await act($('sign-in-button'), slot, async () => {
      try {
        await request('GET', '/admin/groups', { token });
      } catch (err) {
        throw new Error(authMessage(err));
      }
      session.save(token);
      tokenInput.value = '';
      route();
    });
  }

  function signOut(message) {
    session.forget();
    closeDialogs();
    showSignIn(message);
  }

  /** The view and its parameters from the location hash: #usage?key=app&status=5xx. */
  function parseHash() {
    const raw = location.hash.replace(/^#/, '');
    const q = raw.indexOf('?');
    return {
      name: (q < 0 ? raw : raw.slice(0, q)) || 'overview',
      params: new URLSearchParams(q < 0 ? '' : raw.slice(q + 1)),
    };
  }

  function viewHash(name, params = {}) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== '' && v !== null && v !== undefined) q.set(k, v);
    const s = q.toString();
    return `#${name}${s ? `?${s}` : ''}`;
  }

  /** Goes to a hash; renders again when it is the current one (no hashchange then). */
  function navigate(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  }

  function route() {
    if (!session.token()) {
      showSignIn();
      return;
    }
    showShell();
    let { name, params } = parseHash();
    if (!VIEWS[name]) {
      history.replaceState(null, '', '#overview');
      ({ name, params } = parseHash());
    }
    const view = VIEWS[name];
    for (const a of $('nav').querySelectorAll('a')) {
      const active = a.dataset.view === name;
      a.classList.toggle('active', active);
      if (active) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    document.title = `${view.title} · tollgate console`;
    const frame = viewFrame(name, view, params);
    $('view').replaceChildren(frame.section);
    frame.load();
  }

  /**
   * The frame of a view: heading, status line, refresh button and body. `load(options)` calls the view's
   * render function and swaps the body only when the new content is ready, so refreshing after an action
   * does not make the page jump; a frame the operator navigated away from is left alone.
   */
  function viewFrame(name, view, params) {
    const status = el('span', { class: 'view-status', role: 'status' });
    const failure = errorSlot();
    const refresh = button('Refresh', { class: 'button-quiet' });
    const body = el('div', { class: 'view-body' });
    const section = el(
      'section',
      { class: 'view-section', id: `view-${name}`, data: { view: name, state: 'loading' } },
      el('header', { class: 'view-header' }, el('h1', { text: view.title }), status, refresh),
      failure,
      body,
    );
    const frame = {
      section,
      params,
      async load(options = {}) {
        section.dataset.state = 'loading';
        status.textContent = options.busyText || 'Loading…';
        clearError(failure);
        try {
          const nodes = await view.render(frame, params, options);
          if (!section.isConnected) return;
          body.replaceChildren(...nodes.flat(Infinity).filter(Boolean));
          section.dataset.state = 'ready';
          status.textContent = `Updated ${fmtTime(new Date().toISOString()).slice(11)}`;
        } catch (err) {
          if (!section.isConnected) return;
          section.dataset.state = 'error';
          status.textContent = '';
          showError(failure, err);
        }
      },
    };
    refresh.addEventListener('click', () => frame.load());
    return frame;
  }

  // ============================================================================================ overview

  /** Totals for the last hour and day, the hourly chart, top keys and models by spend. */
  async function viewOverview() {
    const o = await api.get('/admin/overview');
    return [
      el('div', { class: 'tiles' }, totalsPanel('Last hour', o.last_hour, 'totals-hour'), totalsPanel('Last 24 hours', o.last_day, 'totals-day')),
      el('section', { class: 'panel' }, el('h2', { text: 'Requests and cost per hour, last 24 hours' }), hourlyChart(o.hourly)),
      el(
        'div',
        { class: 'columns' },
        topPanel('Top keys by spend, last 24 hours', 'Key', o.top_keys, 'key', 'top-keys'),
        topPanel('Top models by spend, last 24 hours', 'Model', o.top_models, 'model', 'top-models'),
      ),
    ];
  }

  function totalsPanel(title, t, id) {
    return el(
      'section',
      { class: 'panel totals', id },
      el('h2', { text: title }),
      el(
        'dl',
        { class: 'stats' },
        stat('Requests', fmtInt(t.requests), 'requests'),
        stat('Tokens', fmtInt(t.tokens), 'tokens'),
        stat('Cost', fmtCredits(t.cost), 'cost', 'credits'),
        stat('Error rate', fmtPct(t.error_rate), 'error-rate', `${fmtInt(t.errors)} errors`),
      ),
    );
  }

  function stat(label, value, name, note) {
    return el(
      'div',
      { class: 'stat', data: { stat: name } },
      el('dt', { text: label }),
      el('dd', {}, el('span', { class: 'stat-value', text: value }), note && el('span', { class: 'stat-note', text: note })),
    );
  }

  /** "Nice" axis maximum: 1, 2, 2.5 or 5 times a power of ten, four ticks. */
  function niceMax(value, whole) {
    if (!(value > 0)) return whole ? 4 : 1;
    const raw = value / 4;
    const p = 10 ** Math.floor(Math.log10(raw));
    const f = raw / p;
    let step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * p;
    if (whole) step = Math.max(1, Math.ceil(step));
    return step * 4;
  }

  /** Bars: requests per hour (errors stacked in red); line: cost per hour on the right axis. */
  function hourlyChart(hours) {
    const W = 760;
    const H = 250;
    const L = 48;
    const R = 60;
    const T = 12;
    const B = 30;
    const iw = W - L - R;
    const ih = H - T - B;
    const reqMax = niceMax(Math.max(0, ...hours.map((h) => h.requests)), true);
    const costMax = niceMax(Math.max(0, ...hours.map((h) => h.cost)), false);
    const slot = iw / Math.max(1, hours.length);
    const barW = Math.max(2, slot * 0.62);
    const y = (v, max) => T + ih - (v / max) * ih;

    const svg = svgEl('svg', { class: 'chart', id: 'hourly-chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'Requests and cost per hour over the last 24 hours' });
    for (let i = 0; i <= 4; i++) {
      const yy = y((reqMax * i) / 4, reqMax);
      svg.append(
        svgEl('line', { class: 'grid', x1: L, x2: W - R, y1: yy, y2: yy }),
        svgEl('text', { class: 'axis', x: L - 6, y: yy + 4, 'text-anchor': 'end' }, fmtCompact((reqMax * i) / 4)),
        svgEl('text', { class: 'axis axis-cost', x: W - R + 6, y: yy + 4 }, fmtCompact((costMax * i) / 4)),
      );
    }
    svg.append(
      svgEl('text', { class: 'axis-title', x: 4, y: T + 2, transform: `rotate(-90 4 ${T + 2})`, 'text-anchor': 'end', 'dominant-baseline': 'hanging' }, 'requests'),
      svgEl('text', { class: 'axis-title axis-cost', x: W - 4, y: T + 2, transform: `rotate(90 ${W - 4} ${T + 2})`, 'dominant-baseline': 'hanging' }, 'credits'),
    );
    const points = [];
    hours.forEach((h, i) => {
      const x0 = L + i * slot;
      const x = x0 + (slot - barW) / 2;
      const top = y(h.requests, reqMax);
      const errTop = y(h.errors, reqMax);
      const tip = `${fmtTime(h.hour).slice(0, 16)}: ${fmtInt(h.requests)} requests, ${fmtInt(h.errors)} errors, ${fmtInt(h.tokens)} tokens, ${fmtCredits(h.cost)} credits`;
      const group = svgEl('g', { class: 'hour', data: { hour: h.hour, requests: h.requests } }, svgEl('title', {}, tip));
      group.append(svgEl('rect', { class: 'hit', x: x0, y: T, width: slot, height: ih }));
      group.append(svgEl('rect', { class: 'bar', x, y: top, width: barW, height: T + ih - top }));
      if (h.errors > 0) group.append(svgEl('rect', { class: 'bar-errors', x, y: errTop, width: barW, height: T + ih - errTop }));
      svg.append(group);
      points.push([x0 + slot / 2, y(h.cost, costMax)]);
      if ((hours.length - 1 - i) % 3 === 0) {
        svg.append(svgEl('text', { class: 'axis', x: x0 + slot / 2, y: H - 10, 'text-anchor': 'middle' }, fmtHour(h.hour)));
      }
    });
    svg.append(svgEl('polyline', { class: 'cost-line', points: points.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(' ') }));
    for (const [px, py] of points) svg.append(svgEl('circle', { class: 'cost-dot', cx: px.toFixed(1), cy: py.toFixed(1), r: 2.5 }));
    svg.append(svgEl('line', { class: 'baseline', x1: L, x2: W - R, y1: T + ih, y2: T + ih }));

    const legend = el(
      'figcaption',
      { class: 'legend' },
      el('span', {}, el('i', { class: 'swatch swatch-requests' }), 'Requests (left axis)'),
      el('span', {}, el('i', { class: 'swatch swatch-errors' }), 'of which errors'),
      el('span', {}, el('i', { class: 'swatch swatch-cost' }), 'Cost in credits (right axis)'),
      el('span', { class: 'muted' }, 'Hours in your time zone; hover a bar for its numbers.'),
    );
    return el('figure', { class: 'chart-wrap' }, svg, legend);
  }

  function topPanel(title, label, rows, field, id) {
    const body = rows.length
      ? table(
          [[label], ['Requests', 'num'], ['Tokens', 'num'], ['Cost', 'num'], ['Errors', 'num']],
          rows.map((r) =>
            el(
              'tr',
              {},
              td(el('a', { href: viewHash('usage', { [field]: r[field], range: '24h' }), text: r[field] })),
              td(fmtInt(r.requests), 'num'),
              td(fmtInt(r.tokens), 'num'),
              td(fmtCredits(r.cost), 'num'),
              td(fmtInt(r.errors), 'num'),
            ),
          ),
          { id, class: 'top-names' },
        )
      : empty('No requests in the last 24 hours.');
    return el('section', { class: 'panel' }, el('h2', { text: title }), body);
  }

  // =============================================================================================== usage

  const STATUSES = [
    ['', 'Any status'],
    ['2xx', 'Succeeded (2xx)'],
    ['4xx', 'Refused (4xx)'],
    ['429', 'Limited or out of credit (429)'],
    ['5xx', 'Upstream failure (5xx)'],
    ['client_closed', 'Client closed'],
    ['error', 'Any error'],
  ];
  const RANGES = [
    ['', 'Any time'],
    ['1h', 'Last hour'],
    ['24h', 'Last 24 hours'],
    ['7d', 'Last 7 days'],
    ['30d', 'Last 30 days'],
    ['custom', 'Custom…'],
  ];
  const RANGE_SECONDS = { '1h': 3600, '24h': 86400, '7d': 7 * 86400, '30d': 30 * 86400 };
  const PAGE_SIZES = [25, 50, 100, 250, 1000];
  const USAGE_FILTERS = ['key', 'model', 'status', 'request_id', 'client_request_id', 'range', 'since', 'until'];

  /** The API's filter (no paging) for the view's parameters; relative ranges count back from now. */
  function usageQuery(params) {
    const q = new URLSearchParams();
    for (const k of ['key', 'model', 'status', 'request_id', 'client_request_id']) {
      const v = (params.get(k) || '').trim();
      if (v) q.set(k, v);
    }
    const range = params.get('range') || '';
    if (RANGE_SECONDS[range]) {
      q.set('since', new Date(Date.now() - RANGE_SECONDS[range] * 1000).toISOString());
    } else if (range === 'custom') {
      for (const k of ['since', 'until']) if (params.get(k)) q.set(k, params.get(k));
    }
    return q;
  }

  /** Records newest first with filters, paging and a CSV download of everything that matches. */
  async function viewUsage(frame, params) {
    const limit = Math.min(1000, Math.max(1, Number.parseInt(params.get('limit') || '50', 10) || 50));
    const offset = Math.max(0, Number.parseInt(params.get('offset') || '0', 10) || 0);
    const query = usageQuery(params);
    const page = new URLSearchParams(query);
    page.set('limit', String(limit + 1)); // one more than shown: tells whether there is a next page
    page.set('offset', String(offset));
    const [usage, keys, models] = await Promise.all([
      api.get(`/admin/usage?${page}`),
      api.get('/admin/keys').catch(() => ({ data: [] })),
      api.get('/admin/models').catch(() => ({ data: [] })),
    ]);
    const records = usage.data.slice(0, limit);
    const more = usage.data.length > limit;
    return [
      usageFilters(params, limit, keys.data, models.data),
      usageToolbar(params, query, offset, limit, records.length, more),
      records.length
        ? table(
            [['Time'], ['Request'], ['Key'], ['Model'], ['Status'], ['Input', 'num'], ['Output', 'num'], ['Cost', 'num'], ['Latency', 'num']],
            records.map(usageRow),
            { id: 'usage-table' },
          )
        : empty(offset ? 'No more records.' : 'No records match these filters.'),
    ];
  }

  function usageFilters(params, limit, keys, models) {
    const keyList = el('datalist', { id: 'usage-key-names' }, keys.map((k) => el('option', { value: k.name })));
    const modelList = el('datalist', { id: 'usage-model-names' }, models.map((m) => el('option', { value: m.name })));
    const select = (name, options, value) =>
      el('select', { name }, options.map(([v, label]) => el('option', { value: v, selected: v === value }, label)));
    const range = select('range', RANGES, params.get('range') || '');
    const since = input('since', { type: 'datetime-local', value: toLocalInput(params.get('since')) });
    const until = input('until', { type: 'datetime-local', value: toLocalInput(params.get('until')) });
    const custom = el('div', { class: 'custom-range', hidden: range.value !== 'custom' }, field('From', since), field('Until', until));
    range.addEventListener('change', () => {
      custom.hidden = range.value !== 'custom';
    });
    const form = el(
      'form',
      { class: 'panel filters', id: 'usage-filters' },
      el(
        'div',
        { class: 'form-row' },
        field('Key', input('key', { value: params.get('key') || '', list: 'usage-key-names', placeholder: 'any key' })),
        field('Model', input('model', { value: params.get('model') || '', list: 'usage-model-names', placeholder: 'any model' })),
        field('Status', select('status', STATUSES, params.get('status') || '')),
        field('Time', range),
        field('Per page', select('limit', pageSizes(limit), String(limit))),
      ),
      custom,
      el(
        'div',
        { class: 'form-row' },
        field('Request id', input('request_id', { value: params.get('request_id') || '', placeholder: 'req_…' })),
        field('Client request id', input('client_request_id', { value: params.get('client_request_id') || '' })),
        el('div', { class: 'actions' }, el('button', { type: 'submit', class: 'button-primary' }, 'Apply'), button('Clear', { class: 'button-quiet', on: { click: () => navigate('#usage') } })),
      ),
      keyList,
      modelList,
    );
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const data = new FormData(form);
      const next = { limit: data.get('limit') === '50' ? '' : data.get('limit') };
      for (const k of USAGE_FILTERS) next[k] = String(data.get(k) || '').trim();
      if (next.range === 'custom') {
        next.since = fromLocalInput(next.since);
        next.until = fromLocalInput(next.until);
      } else {
        next.since = '';
        next.until = '';
      }
      navigate(viewHash('usage', next));
    });
    return form;
  }

  /** The page sizes to choose from, with the current one (a link may carry any size up to 1000). */
  function pageSizes(limit) {
    const sizes = PAGE_SIZES.includes(limit) ? PAGE_SIZES : [...PAGE_SIZES, limit].sort((a, b) => a - b);
    return sizes.map((n) => [String(n), String(n)]);
  }

  function usageToolbar(params, query, offset, limit, shown, more) {
    const here = Object.fromEntries(params);
    const to = (o) => () => navigate(viewHash('usage', { ...here, offset: o || '' }));
    const slot = errorSlot();
    const csv = button('Download CSV', { class: 'button-quiet', id: 'usage-csv', title: 'Every record matching the filters (up to 100,000), not only this page' });
    csv.addEventListener('click', () => act(csv, slot, () => downloadCsv(query)));
    return el(
      'div',
      { class: 'toolbar' },
      el('span', { class: 'muted', id: 'usage-range' }, shown ? `Records ${fmtInt(offset + 1)}–${fmtInt(offset + shown)}, newest first` : ''),
      el(
        'div',
        { class: 'pager' },
        button('← Newer', { id: 'usage-prev', disabled: offset === 0, on: { click: to(Math.max(0, offset - limit)) } }),
        button('Older →', { id: 'usage-next', disabled: !more, on: { click: to(offset + limit) } }),
      ),
      csv,
      slot,
    );
  }

  /** The CSV needs the Authorization header, so it is fetched and handed to the browser as a Blob. */
  async function downloadCsv(query) {
    const blob = await api.blob(`/admin/usage.csv?${query}`);
    const url = URL.createObjectURL(blob);
    const now = new Date();
    const name = `tollgate-usage-${now.getFullYear()}${pad(now.getMonth() + 1)}${pad(now.getDate())}-${pad(now.getHours())}${pad(now.getMinutes())}.csv`;
    const link = el('a', { href: url, download: name, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  }

  function statusBadge(status) {
    if (status === 'client_closed') return badge('client closed', 'muted');
    const kind = status < 300 ? 'ok' : status < 500 ? 'warn' : 'bad';
    return badge(String(status), kind);
  }

  function usageRow(r) {
    const approx = r.estimated ? '≈ ' : '';
    return el(
      'tr',
      { data: { requestId: r.request_id } },
      td(timeEl(r.ts), 'nowrap'),
      td([
        el('code', { class: 'request-id', text: r.request_id }),
        r.client_request_id && el('div', { class: 'sub' }, 'client: ', el('code', { class: 'client-request-id', text: r.client_request_id })),
      ]),
      td([el('a', { href: viewHash('usage', { key: r.key }), text: r.key }), el('div', { class: 'sub', text: `group ${r.group}` })]),
      td([el('span', { text: r.model }), el('div', { class: 'sub', text: `${r.protocol} → ${r.upstream}${r.stream ? ', streamed' : ''}` })]),
      td([statusBadge(r.status), r.error && el('div', { class: 'sub error-text', text: r.error })]),
      td([`${approx}${fmtInt(r.input_tokens)}`, r.cached_input_tokens > 0 && el('div', { class: 'sub', text: `${fmtInt(r.cached_input_tokens)} cached` })], 'num'),
      td([`${approx}${fmtInt(r.output_tokens)}`, r.reasoning_tokens > 0 && el('div', { class: 'sub', text: `${fmtInt(r.reasoning_tokens)} reasoning` })], 'num'),
      td(fmtCredits(r.cost), 'num cost'),
      td(fmtMs(r.latency_ms), 'num'),
    );
  }

  // ================================================================================================ keys

  /** Keys with credit, spend and balance; create, top up, rotate and revoke. */
  async function viewKeys(frame) {
    const [keys, groups] = await Promise.all([api.get('/admin/keys'), api.get('/admin/groups')]);
    return [keyCreateForm(frame, groups.data), keysTable(frame, keys.data)];
  }

  /** "12.5" → 12.5; "" → null; anything else throws naming the field. */
  function parseAmount(label, value, { positive = false } = {}) {
    const v = value.trim();
    if (!v) return null;
    const n = Number(v);
    if (!Number.isFinite(n) || n < 0 || (positive && n === 0) || !/^\d*\.?\d*(e\d+)?$/i.test(v)) {
      throw new Error(`${label}: expected ${positive ? 'an amount above 0' : 'an amount of 0 or more'}, got "${v}"`);
    }
    return n;
  }

  function keyCreateForm(frame, groups) {
    const name = input('name', { required: true, maxlength: 128, placeholder: 'e.g. my-app' });
    const group = el('select', { name: 'group' }, groups.map((g) => el('option', { value: g.name }, g.name)));
    const credit = input('credit', { inputmode: 'decimal', placeholder: 'unlimited' });
    const submit = el('button', { type: 'submit', class: 'button-primary' }, 'Create key');
    const slot = errorSlot();
    const form = el(
      'form',
      { class: 'panel', id: 'key-create' },
      el('h2', { text: 'New key' }),
      el(
        'div',
        { class: 'form-row' },
        field('Name', name, 'No spaces'),
        field('Group', group, 'Decides the models and limits'),
        field('Credit', credit, 'Empty: unlimited'),
        el('div', { class: 'actions' }, submit),
      ),
      slot,
    );
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      act(submit, slot, async () => {
        const body = { name: name.value.trim(), group: group.value };
        if (!body.name) throw new Error('name: give the key a name');
        const amount = parseAmount('credit', credit.value);
        if (amount !== null) body.credit = amount;
        const created = await api.post('/admin/keys', body);
        form.reset();
        showSecret({ title: 'Key created', name: created.name, group: created.group, key: created.key });
        await frame.load();
      });
    });
    return form;
  }

  function keysTable(frame, keys) {
    if (!keys.length) return el('section', { class: 'panel' }, empty('No keys yet.'));
    return el(
      'section',
      { class: 'panel' },
      el('h2', { text: 'Keys' }),
      table(
        [['Name'], ['Group'], ['Credit', 'num'], ['Spent', 'num'], ['Balance', 'num'], ['Status'], ['Created'], ['Actions']],
        keys.map((k) => keyRow(frame, k)),
        { id: 'keys-table' },
      ),
    );
  }

  function keyRow(frame, k) {
    const balance = k.balance;
    const status = k.disabled ? badge('revoked', 'bad') : balance !== null && balance <= 0 ? badge('out of credit', 'warn') : badge('active', 'ok');
    return el(
      'tr',
      { class: k.disabled && 'is-revoked', data: { key: k.name } },
      td(el('span', { class: 'key-name', text: k.name })),
      td(el('span', { class: 'group-name', text: k.group })),
      td(k.credit === null ? el('span', { class: 'muted', text: 'unlimited' }) : fmtCredits(k.credit), 'num credit'),
      td(fmtCredits(k.spent), 'num spent'),
      td(balance === null ? el('span', { class: 'muted', text: 'unlimited' }) : fmtCredits(balance), ['num balance', balance !== null && balance < 0 && 'negative']),
      td(status, 'status'),
      td(timeEl(k.created), 'nowrap'),
      td(k.disabled ? el('span', { class: 'muted', text: '—' }) : keyActions(frame, k), 'actions-cell'),
    );
  }

  function keyActions(frame, k) {
    const slot = errorSlot();
    const amount = input('amount', { inputmode: 'decimal', placeholder: 'amount', class: 'amount', 'aria-label': `Credit to add to ${k.name}` });
    const add = el('button', { type: 'submit' }, 'Add credit');
    const topUp = el('form', { class: 'inline-form top-up' }, amount, add);
    topUp.addEventListener('submit', (event) => {
      event.preventDefault();
      act(add, slot, async () => {
        const n = parseAmount('amount', amount.value, { positive: true });
        if (n === null) throw new Error('amount: enter the credit to add');
        await api.post(`/admin/keys/${seg(k.name)}/credit`, { add: n });
        await frame.load();
      });
    });
    const rotate = button('Rotate', { class: 'button-quiet rotate' });
    rotate.addEventListener('click', async () => {
      const ok = await confirmAction({
        title: 'Rotate key',
        message: `Rotate the key "${k.name}"? It gets a new secret at once (same name, group and credit); the current one stops working.`,
        confirm: 'Rotate key',
      });
      if (!ok) return;
      act(rotate, slot, async () => {
        const answer = await api.post(`/admin/keys/${seg(k.name)}/rotate`);
        showSecret({ title: 'Key rotated', name: answer.name, group: k.group, key: answer.key });
        await frame.load();
      });
    });
    const revoke = button('Revoke', { class: 'button-danger-quiet revoke' });
    revoke.addEventListener('click', async () => {
      const ok = await confirmAction({
        title: 'Revoke key',
        message: `Revoke the key "${k.name}"? Every request with it is refused from now on. A revoked key cannot be enabled again.`,
        confirm: 'Revoke key',
      });
      if (!ok) return;
      act(revoke, slot, async () => {
        await api.post(`/admin/keys/${seg(k.name)}/revoke`);
        await frame.load();
      });
    });
    return [el('div', { class: 'row-actions' }, topUp, rotate, revoke), slot];
  }

  // ============================================================================================== groups

  /** Groups with their models and limits; create and edit. */
  async function viewGroups(frame) {
    const [groups, keys] = await Promise.all([api.get('/admin/groups'), api.get('/admin/keys').catch(() => ({ data: [] }))]);
    const active = new Map();
    for (const k of keys.data) if (!k.disabled) active.set(k.group, (active.get(k.group) || 0) + 1);
    return [groupCreateForm(frame), groupsTable(frame, groups.data, active)];
  }

  /** "" → null (no limit); "60" → 60; anything else throws naming the field. */
  function parseLimit(label, value) {
    const v = value.trim();
    if (!v) return null;
    if (!/^\d+$/.test(v)) throw new Error(`${label}: expected a whole number, or empty for no limit`);
    return Number(v);
  }

  function parseModels(value) {
    return value
      .split(/[,\n]/)
      .map((s) => s.trim())
      .filter(Boolean);
  }

  /** The editable fields of a group; `read()` answers the request body or throws naming the bad field. */
  function groupFields(g = {}) {
    const models = input('models', { value: (g.models || []).join(', '), placeholder: 'e.g. mock, gpt-*', class: 'wide' });
    const limit = (name, value) => input(name, { value: value ?? '', inputmode: 'numeric', placeholder: 'no limit', class: 'limit' });
    const rpm = limit('rpm', g.rpm);
    const tpm = limit('tpm', g.tpm);
    const conc = limit('max_concurrent', g.max_concurrent);
    return {
      nodes: [
        field('Models', models, 'Names or globs (* and ?), separated by commas'),
        field('Requests per minute', rpm),
        field('Tokens per minute', tpm),
        field('Max concurrent', conc),
      ],
      models,
      read: () => ({
        models: parseModels(models.value),
        rpm: parseLimit('rpm', rpm.value),
        tpm: parseLimit('tpm', tpm.value),
        max_concurrent: parseLimit('max_concurrent', conc.value),
      }),
    };
  }

  function groupCreateForm(frame) {
    const name = input('name', { required: true, maxlength: 64, placeholder: 'e.g. team-a' });
    const fields = groupFields({ models: [] });
    const submit = el('button', { type: 'submit', class: 'button-primary' }, 'Create group');
    const slot = errorSlot();
    const form = el(
      'form',
      { class: 'panel', id: 'group-create' },
      el('h2', { text: 'New group' }),
      el('div', { class: 'form-row' }, field('Name', name, 'No spaces'), fields.nodes),
      el('div', { class: 'actions' }, submit),
      slot,
    );
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      act(submit, slot, async () => {
        const body = { name: name.value.trim(), ...fields.read() };
        await api.post('/admin/groups', body);
        form.reset();
        await frame.load();
      });
    });
    return form;
  }

  function groupsTable(frame, groups, active) {
    const limit = (v) => (v === null || v === undefined ? el('span', { class: 'muted', text: 'no limit' }) : fmtInt(v));
    const rows = [];
    for (const g of groups) {
      const edit = button('Edit', { class: 'button-quiet edit' });
      const row = el(
        'tr',
        { data: { group: g.name } },
        td(el('span', { class: 'group-name', text: g.name })),
        td(g.models.length ? g.models.map((m) => el('code', { class: 'chip', text: m })) : el('span', { class: 'muted', text: 'no models' }), 'models'),
        td(limit(g.rpm), 'num rpm'),
        td(limit(g.tpm), 'num tpm'),
        td(limit(g.max_concurrent), 'num max-concurrent'),
        td(fmtInt(active.get(g.name) || 0), 'num'),
        td(edit),
      );
      edit.addEventListener('click', () => openGroupEditor(frame, row, g, edit));
      rows.push(row);
    }
    return el(
      'section',
      { class: 'panel' },
      el('h2', { text: 'Groups' }),
      table(
        [['Name'], ['Models'], ['Requests/min', 'num'], ['Tokens/min', 'num'], ['Max concurrent', 'num'], ['Active keys', 'num'], ['']],
        rows,
        { id: 'groups-table' },
      ),
    );
  }

  /** Opens the edit form of one group in a row under it. */
  function openGroupEditor(frame, row, g, edit) {
    if (row.nextElementSibling && row.nextElementSibling.classList.contains('editor')) return;
    const fields = groupFields(g);
    const save = el('button', { type: 'submit', class: 'button-primary' }, 'Save');
    const cancel = button('Cancel', { class: 'button-quiet' });
    const slot = errorSlot();
    const form = el(
      'form',
      { class: 'group-editor' },
      el('h3', {}, 'Edit group ', el('span', { class: 'group-name', text: g.name })),
      el('div', { class: 'form-row' }, fields.nodes, el('div', { class: 'actions' }, save, cancel)),
      slot,
    );
    const editor = el('tr', { class: 'editor', data: { editing: g.name } }, el('td', { colspan: row.children.length }, form));
    row.after(editor);
    edit.disabled = true;
    cancel.addEventListener('click', () => {
      editor.remove();
      edit.disabled = false;
    });
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      act(save, slot, async () => {
        await api.put(`/admin/groups/${seg(g.name)}`, fields.read());
        await frame.load();
      });
    });
    fields.models.focus();
  }

  // ============================================================================================== models

  // The last probe of each upstream (from "Check upstreams now"), shown until the next one: plain status
  // data, kept in memory only.
  const lastProbes = new Map();

  /** The live model list: upstreams and their probes, prices, availability; disable, enable, reprice. */
  async function viewModels(frame, params, options = {}) {
    const models = await api.get(`/admin/models${options.probe ? '?probe=1' : ''}`);
    for (const m of models.data) for (const u of m.upstreams) if (u.probe) lastProbes.set(u.name, u.probe);
    const slot = errorSlot();
    const check = button('Check upstreams now', { class: 'button-primary', id: 'probe-upstreams' });
    check.addEventListener('click', () => act(check, slot, () => frame.load({ probe: true, busyText: 'Checking upstreams…' })));
    return [
      el(
        'div',
        { class: 'toolbar' },
        check,
        el('span', { class: 'muted small' }, 'Asks each upstream for its model list (3 s timeout; answers are cached for 15 s).'),
        slot,
      ),
      models.data.length ? models.data.map((m) => modelCard(frame, m)) : empty('No models are configured.'),
    ];
  }

  function modelCard(frame, m) {
    const slot = errorSlot();
    const toggle = button(m.disabled ? 'Enable' : 'Disable', { class: m.disabled ? 'button-primary toggle' : 'button-danger-quiet toggle' });
    toggle.addEventListener('click', () =>
      act(toggle, slot, async () => {
        await api.post(`/admin/models/${seg(m.name)}`, { disabled: !m.disabled });
        await frame.load();
      }),
    );
    return el(
      'article',
      { class: ['panel', 'model-card', m.disabled && 'is-disabled'], data: { model: m.name } },
      el(
        'header',
        { class: 'card-header' },
        el('h2', { class: 'model-name', text: m.name }),
        m.disabled ? badge('disabled', 'bad') : badge('enabled', 'ok'),
        m.upstream_model && m.upstream_model !== m.name && el('span', { class: 'muted' }, 'sent upstream as ', el('code', { text: m.upstream_model })),
        el('div', { class: 'card-actions' }, toggle),
      ),
      slot,
      el(
        'div',
        { class: 'card-grid' },
        el('section', { class: 'upstreams' }, el('h3', { text: m.upstreams.length > 1 ? 'Upstreams, tried in this order' : 'Upstream' }), upstreamTable(m.upstreams)),
        el('section', { class: 'availability' }, el('h3', { text: 'Availability' }), availabilityList(m.availability || {})),
        el('section', { class: 'prices' }, el('h3', { text: 'Prices, credits per 1M tokens' }), pricesBlock(frame, m)),
      ),
    );
  }

  // Breaker states as the gateway reports them (see GET /admin/models): what each means for traffic.
  const BREAKER_TEXT = {
    closed: ['closed', 'ok', 'receives traffic'],
    open: ['open', 'bad', 'stopped answering: skipped, then checked by one request at a time'],
    probing: ['probing', 'warn', 'one request is checking whether it answers again'],
    ejected: ['ejected', 'warn', 'answers with errors: passed over while a sibling upstream is healthy, never refused'],
  };

  function breakerCell(b) {
    if (!b) return el('span', { class: 'muted', text: '—' });
    const [label, tone, meaning] = BREAKER_TEXT[b.state] || [b.state, 'warn', ''];
    return [
      badge(label, tone),
      b.state !== 'closed' && el('div', { class: 'sub', text: meaning }),
      b.reason && b.state !== 'closed' && el('div', { class: 'sub error-text', text: b.reason }),
      b.until && b.state !== 'closed' && el('div', { class: 'sub' }, 'until ', timeEl(b.until)),
    ];
  }

  function upstreamTable(upstreams) {
    return table(
      [['Name'], ['Kind'], ['Breaker'], ['Probe'], ['HTTP', 'num'], ['Latency', 'num'], ['Detail']],
      upstreams.map((u) => {
        const p = u.probe || lastProbes.get(u.name);
        return el(
          'tr',
          { data: { upstream: u.name } },
          td(el('span', { text: u.name })),
          td(el('code', { text: u.kind })),
          td(breakerCell(u.breaker), 'breaker'),
          td(p ? badge(p.up ? 'up' : 'down', p.up ? 'ok' : 'bad') : el('span', { class: 'muted', text: 'not checked' }), 'probe'),
          td(p && p.status !== null ? String(p.status) : '—', 'num'),
          td(p ? fmtMs(p.latency_ms) : '—', 'num'),
          td(p ? [el('span', { text: p.detail || '' }), p.checked && el('div', { class: 'sub', text: `checked ${fmtAgo(p.checked)}` })] : ''),
        );
      }),
      { class: 'compact' },
    );
  }

  function availabilityList(a) {
    const item = (label, ...value) => [el('dt', { text: label }), el('dd', {}, value)];
    return el(
      'dl',
      { class: 'facts' },
      item('Last success', a.last_success ? timeEl(a.last_success, { ago: true }) : el('span', { class: 'muted', text: 'none since tollgate started' })),
      item(
        'Last error',
        a.last_error ? [timeEl(a.last_error, { ago: true }), a.last_error_message && el('div', { class: 'error-text', text: a.last_error_message })] : el('span', { class: 'muted', text: 'none since tollgate started' }),
      ),
      item('Latency p50 / p95', `${fmtMs(a.latency_p50_ms)} / ${fmtMs(a.latency_p95_ms)}`),
      item('Error rate', a.error_rate === null || a.error_rate === undefined ? '—' : `${fmtPct(a.error_rate)} of the last ${fmtInt(a.requests)} requests`),
    );
  }

  function pricesBlock(frame, m) {
    const price = (v, fallback) => (v === null || v === undefined ? el('span', { class: 'muted', text: fallback }) : fmtCredits(v));
    const facts = el(
      'dl',
      { class: 'facts' },
      el('dt', { text: 'Input' }),
      el('dd', { class: 'input-price' }, price(m.input_price, 'free')),
      el('dt', { text: 'Cached input' }),
      el('dd', { class: 'cached-input-price' }, price(m.cached_input_price, 'as input')),
      el('dt', { text: 'Output' }),
      el('dd', { class: 'output-price' }, price(m.output_price, 'free')),
      el('dt', { text: 'Max output tokens' }),
      el('dd', {}, fmtInt(m.max_output_tokens)),
    );
    const edit = button('Edit prices', { class: 'button-quiet edit-prices' });
    const wrap = el('div', {}, facts, edit);
    edit.addEventListener('click', () => {
      edit.hidden = true;
      wrap.append(priceEditor(frame, m, () => {
        edit.hidden = false;
      }));
    });
    return wrap;
  }

  function priceEditor(frame, m, onCancel) {
    const fieldFor = (name, v, hint) => input(name, { value: v ?? '', inputmode: 'decimal', placeholder: hint, class: 'amount' });
    const inputs = {
      input_price: fieldFor('input_price', m.input_price, 'unchanged'),
      cached_input_price: fieldFor('cached_input_price', m.cached_input_price, 'as input'),
      output_price: fieldFor('output_price', m.output_price, 'unchanged'),
    };
    const save = el('button', { type: 'submit', class: 'button-primary' }, 'Save prices');
    const cancel = button('Cancel', { class: 'button-quiet' });
    const slot = errorSlot();
    const form = el(
      'form',
      { class: 'price-editor' },
      el(
        'div',
        { class: 'form-row' },
        field('Input', inputs.input_price),
        field('Cached input', inputs.cached_input_price),
        field('Output', inputs.output_price),
      ),
      el('div', { class: 'actions' }, save, cancel),
      slot,
    );
    cancel.addEventListener('click', () => {
      form.remove();
      onCancel();
    });
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      act(save, slot, async () => {
        const body = {};
        for (const [k, node] of Object.entries(inputs)) {
          const v = parseAmount(k, node.value);
          if (v !== null) body[k] = v; // empty: left as it is (the API has no way to clear a price)
        }
        if (!Object.keys(body).length) throw new Error('Enter at least one price.');
        await api.post(`/admin/models/${seg(m.name)}`, body);
        await frame.load();
      });
    });
    return form;
  }

  // =============================================================================================== start

  function start() {
    $('host').textContent = location.host;
    $('sign-in-form').addEventListener('submit', onSignIn);
    $('sign-out').addEventListener('click', () => {
      signOut();
      history.replaceState(null, '', location.pathname);
    });
    // A click on the tab of the view already shown loads it again (no hashchange then).
    $('nav').addEventListener('click', (event) => {
      const link = event.target.closest('a');
      if (link && link.getAttribute('href') === location.hash) {
        event.preventDefault();
        route();
      }
    });
    window.addEventListener('hashchange', route);
    route();
  }

  start();
})();
