/**
 * The Models view: each model's upstreams, breakers, availability, answer cache and prices.
 */
import { api, seg } from './api.js';
import { act, badge, button, el, empty, errorSlot, field, input, table, td } from './dom.js';
import { currency, fmtAgo, fmtCredits, fmtInt, fmtMs, fmtPct, fmtPrice, parseAmount, timeEl } from './format.js';
import { confirmAction } from './dialogs.js';

// The last probe of each upstream (from "Check upstreams now"), shown until the next one: plain status
// data, kept in memory only.
const lastProbes = new Map();

/** The live model list: upstreams and their probes, prices, availability; disable, enable, reprice. */
export async function viewModels(frame, params, options = {}) {
  const [models, overview] = await Promise.all([
    api.get(`/admin/models${options.probe ? '?probe=1' : ''}`),
    api.get('/admin/overview').catch(() => null),
  ]);
  for (const m of models.data) for (const u of m.upstreams) if (u.probe) lastProbes.set(u.name, u.probe);
  const slot = errorSlot();
  const check = button('Check upstreams now', { class: 'button-primary', id: 'probe-upstreams' });
  check.addEventListener('click', () => act(check, slot, () => frame.load({ probe: true, busyText: 'Checking upstreams…' })));
  // Problems first: models with an upstream down or a breaker not closed, then by error rate.
  const sorted = [...models.data].sort((a, b) => trouble(b) - trouble(a) || a.name.localeCompare(b.name));
  return [
    triage(models.data, overview && overview.last_hour),
    el(
      'div',
      { class: 'toolbar' },
      check,
      el('span', { class: 'muted small' }, 'Asks each upstream for its model list (3 s timeout; answers are cached for 15 s).'),
      slot,
    ),
    sorted.length ? sorted.map((m) => modelCard(frame, m)) : empty('No models are configured.'),
  ];
}

/** How much is wrong with a model: 2 for an upstream down or a breaker not closed, plus its error rate. */
function trouble(m) {
  const down = m.upstreams.some((u) => {
    const p = u.probe || lastProbes.get(u.name);
    return (p && !p.up) || (u.breaker && u.breaker.state !== 'closed');
  });
  return (down ? 2 : 0) + ((m.availability && m.availability.error_rate) || 0);
}

/** The summary at the top: models with a problem, breakers not closed, the error rate of the last hour. */
function triage(models, lastHour) {
  const down = models.filter((m) => !m.disabled && trouble(m) >= 2).length;
  const open = models.reduce((n, m) => n + m.upstreams.filter((u) => u.breaker && u.breaker.state !== 'closed').length, 0);
  const rate = lastHour ? lastHour.error_rate : null;
  return el(
    'section',
    { class: ['panel', 'triage', down || open ? 'has-problems' : 'all-well'], id: 'models-triage' },
    el(
      'dl',
      { class: 'stats' },
      el('div', { class: 'stat', data: { stat: 'down' } }, el('dt', { text: 'Models with a problem' }), el('dd', {}, el('span', { class: 'stat-value', text: fmtInt(down) }))),
      el('div', { class: 'stat', data: { stat: 'breakers' } }, el('dt', { text: 'Breakers not closed' }), el('dd', {}, el('span', { class: 'stat-value', text: fmtInt(open) }))),
      el('div', { class: 'stat', data: { stat: 'error-rate' } }, el('dt', { text: 'Error rate, last hour' }), el('dd', {}, el('span', { class: 'stat-value', text: fmtPct(rate) }))),
    ),
  );
}

function modelCard(frame, m) {
  const slot = errorSlot();
  const toggle = button(m.disabled ? 'Enable' : 'Disable', { class: m.disabled ? 'button-primary toggle' : 'button-danger-quiet toggle' });
  toggle.addEventListener('click', async () => {
    if (!m.disabled) {
      const ok = await confirmAction({
        title: 'Disable model',
        message: `Disable "${m.name}"? Every request for it gets 404 until it is enabled again.`,
        confirm: 'Disable model',
      });
      if (!ok) return;
    }
    act(toggle, slot, async () => {
      await api.post(`/admin/models/${seg(m.name)}`, { disabled: !m.disabled });
      await frame.load();
    });
  });
  return el(
    'article',
    { class: ['panel', 'model-card', m.disabled && 'is-disabled'], data: { model: m.name } },
    el(
      'header',
      { class: 'card-header' },
      el('h2', { class: 'model-name', text: m.name }),
      m.disabled ? badge('disabled', 'bad') : badge('enabled', 'ok'),
      m.upstream_model && m.upstream_model !== m.name && el('span', { class: 'muted' }, 'sent upstream as ', el('code', { text: m.upstream_model })),
      m.discovered && el('span', { class: 'discovered' }, badge('discovered', 'ok'), ' at ', el('code', { text: m.discovered })),
      m.aliases && m.aliases.length > 0 && el('span', { class: 'muted aliases' }, `also: ${m.aliases.join(', ')}`),
      el('div', { class: 'card-actions' }, toggle),
    ),
    slot,
    el(
      'div',
      { class: 'card-grid' },
      el('section', { class: 'upstreams' }, el('h3', { text: m.upstreams.length > 1 ? 'Upstreams, tried in this order' : 'Upstream' }), upstreamTable(m.upstreams)),
      el('section', { class: 'availability' }, el('h3', { text: 'Availability' }), availabilityList(m.availability || {})),
      m.cache && el('section', { class: 'answer-cache', data: { cache: m.name } }, el('h3', { text: 'Answer cache' }), cacheList(m.cache)),
      el('section', { class: 'prices' }, el('h3', { text: `Prices, ${currency()} per 1M tokens` }), pricesBlock(frame, m)),
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

/** An upstream that answered 429 and gets no new requests until its retry-after passes. */
function coolingCell(r) {
  if (!r || !r.cooling_until) return null;
  return el('div', { class: 'sub cooling' }, badge('cooling', 'warn'), ' after a 429, until ', timeEl(r.cooling_until));
}

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
        td([breakerCell(u.breaker), coolingCell(u.routing)], 'breaker'),
        td(p ? badge(p.up ? 'up' : 'down', p.up ? 'ok' : 'bad') : el('span', { class: 'muted', text: 'not checked' }), 'probe'),
        td(p && p.status !== null ? String(p.status) : '—', 'num'),
        // A failed probe has no latency worth showing (it timed out or was refused).
        td(p && p.up ? fmtMs(p.latency_ms) : '—', 'num latency'),
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

/** `n` and the word for one or for several. */
function count(n, one, many) {
  return `${fmtInt(n)} ${n === 1 ? one : many}`;
}

/** A cached model's answer cache: how long answers are kept, who shares them, what the cache did here. */
function cacheList(c) {
  const item = (label, value, name) => [el('dt', { text: label }), el('dd', { data: { cacheStat: name } }, value)];
  const shared = { key: 'each key its own', group: 'shared within a group', all: 'shared by every key' }[c.scope] || c.scope;
  return el(
    'dl',
    { class: 'facts' },
    item('Kept', `${fmtInt(c.ttl_secs)} s, ${shared}`, 'ttl'),
    item(
      'Hit rate',
      c.hit_rate === null || c.hit_rate === undefined
        ? el('span', { class: 'muted', text: 'no requests since tollgate started' })
        : `${fmtPct(c.hit_rate)}: ${count(c.hits, 'hit', 'hits')}, ${count(c.misses, 'miss', 'misses')}, ${fmtInt(c.bypasses)} bypassed`,
      'hit-rate',
    ),
    item('Held', `${(c.bytes / 1024).toLocaleString(undefined, { maximumFractionDigits: 1 })} KB, ${fmtInt(c.evictions)} evicted`, 'bytes'),
  );
}

/** Where a model's prices come from, as a badge: the built-in list (with its model and date), none on purpose. */
function priceSource(m) {
  if (m.price_source === 'list') {
    return el('span', { class: 'price-source' }, badge('list price', 'ok'), el('span', { class: 'muted', text: ` ${m.list_model}, as of ${m.list_date}` }));
  }
  if (m.price_source === 'none') return el('span', { class: 'price-source' }, badge('free', 'muted'));
  if (m.price_source === 'unset') return el('span', { class: 'price-source' }, badge('no price', 'warn'));
  return null;
}

function pricesBlock(frame, m) {
  const price = (v, fallback) => (v === null || v === undefined ? el('span', { class: 'muted', text: fallback }) : fmtPrice(v));
  const perUse = (prices, unit) => {
    const names = Object.keys(prices || {});
    if (!names.length) return el('span', { class: 'muted', text: 'none allowed' });
    return names.map((n) => `${n} ${fmtCredits(prices[n])} ${unit}`).join(', ');
  };
  const tierText = (t) =>
    [
      ['input', t.input_price],
      ['cache reads', t.cached_input_price],
      ['5m writes', t.cache_write_price],
      ['1h writes', t.cache_write_1h_price],
      ['output', t.output_price],
    ]
      .filter(([, v]) => v !== null && v !== undefined)
      .map(([k, v]) => `${k} ${fmtPrice(v)}`)
      .join(', ');
  const facts = el(
    'dl',
    { class: 'facts' },
    el('dt', { text: 'Source' }),
    el('dd', {}, priceSource(m) || el('span', { class: 'muted', text: 'config' })),
    el('dt', { text: 'Input' }),
    el('dd', { class: 'input-price' }, price(m.input_price, 'free')),
    el('dt', { text: 'Cache reads' }),
    el('dd', { class: 'cached-input-price' }, price(m.cached_input_price, 'as input')),
    el('dt', { text: 'Cache writes (5m)' }),
    el('dd', { class: 'cache-write-price' }, price(m.cache_write_price, 'as input')),
    el('dt', { text: 'Cache writes (1h)' }),
    el('dd', { class: 'cache-write-1h-price' }, price(m.cache_write_1h_price, 'as 5m writes')),
    el('dt', { text: 'Output' }),
    el('dd', { class: 'output-price' }, price(m.output_price, 'free')),
    ...(m.tiers || []).flatMap((t) => [
      el('dt', { text: `Above ${fmtInt(t.above_input_tokens)} input tokens` }),
      el('dd', { class: 'tier-prices', text: `the whole request at ${tierText(t)} (the rest as above)` }),
    ]),
    el('dt', { text: 'Max output tokens' }),
    el('dd', {}, fmtInt(m.max_output_tokens)),
    el('dt', { text: 'Hosted tools' }),
    el('dd', { class: 'hosted-tools' }, perUse(m.allow_hosted_tools, `per use (at most ${fmtInt(m.max_hosted_uses)} per request)`)),
    el('dt', { text: 'Service tiers' }),
    el('dd', { class: 'service-tiers' }, perUse(m.allow_service_tiers, 'per request')),
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
    cache_write_price: fieldFor('cache_write_price', m.cache_write_price, 'as input'),
    cache_write_1h_price: fieldFor('cache_write_1h_price', m.cache_write_1h_price, 'as 5m writes'),
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
      field('Cache reads', inputs.cached_input_price),
      field('Cache writes (5m)', inputs.cache_write_price),
      field('Cache writes (1h)', inputs.cache_write_1h_price),
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
        if (v !== null) body[k] = v;
        // An emptied cache price goes back to its default ("as input", "as 5m writes"); other empty prices
        // are left as they are.
        else if (k.startsWith('cache') && m[k] !== null && m[k] !== undefined) body[k] = null;
      }
      if (!Object.keys(body).length) throw new Error('Enter at least one price.');
      await api.post(`/admin/models/${seg(m.name)}`, body);
      await frame.load();
    });
  });
  return form;
}
