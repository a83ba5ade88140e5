/**
 * The Usage view: usage records with filters (a text search among them; cache hits or not), totals of everything that matches,
 * pages, CSV download and an auto-refresh toggle.
 */
import { api } from './api.js';
import { act, badge, button, el, empty, errorSlot, field, input, table, td } from './dom.js';
import { currency, fmtCredits, fmtInt, fmtMs, fromLocalInput, pad, timeEl, toLocalInput, tokenKinds } from './format.js';
import { navigate, viewHash } from './nav.js';

const STATUSES = [
  ['', 'Any status'],
  ['2xx', 'Succeeded (2xx)'],
  ['4xx', 'Refused (4xx)'],
  ['429', 'Limited or out of credit (429)'],
  ['5xx', 'Upstream failure (5xx)'],
  ['client_closed', 'Client closed'],
  ['error', 'Any error'],
];
const CACHE = [
  ['', 'Any'],
  ['hit', 'Cache hits'],
  ['not_hit', 'Not cache hits'],
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
const USAGE_FILTERS = ['key', 'model', 'status', 'cache', 'request_id', 'client_request_id', 'q', 'range', 'since', 'until'];

/** The API's filter (no paging) for the view's parameters; relative ranges count back from now. */
function usageQuery(params) {
  const q = new URLSearchParams();
  for (const k of ['key', 'model', 'status', 'cache', 'request_id', 'client_request_id', 'q']) {
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
export async function viewUsage(frame, params) {
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
  const t = usage.totals;
  const totals = el(
    'p',
    { class: 'usage-totals', id: 'usage-totals' },
    `All that match: ${fmtInt(t.requests)} requests, ${fmtInt(t.tokens)} tokens (${fmtInt(t.input_tokens)} in, of which ${fmtInt(t.cached_input_tokens)} cache reads, ${fmtInt(t.cache_write_5m_tokens)} 5m and ${fmtInt(t.cache_write_1h_tokens)} 1h cache writes; ${fmtInt(t.output_tokens)} out, of which ${fmtInt(t.reasoning_tokens)} reasoning), ${fmtCredits(t.cost)} ${currency()}, ${fmtInt(t.errors)} errors${t.cache_requests ? `, ${fmtInt(t.cache_hits)} answered from the cache` : ''}`,
  );
  return [
    usageFilters(params, limit, keys.data, models.data),
    usageToolbar(params, query, offset, limit, records.length, more),
    autoRefresh(frame),
    totals,
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
      field('Answer cache', select('cache', CACHE, params.get('cache') || '')),
      field('Time', range),
      field('Per page', select('limit', pageSizes(limit), String(limit))),
    ),
    custom,
    el(
      'div',
      { class: 'form-row' },
      field('Request id', input('request_id', { value: params.get('request_id') || '', placeholder: 'req_…' })),
      field('Client request id', input('client_request_id', { value: params.get('client_request_id') || '' })),
      field('Search', input('q', { type: 'search', value: params.get('q') || '', placeholder: 'text in key, model or error' })),
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
  const kinds = tokenKinds(r);
  return el(
    'tr',
    { data: { requestId: r.request_id } },
    td(timeEl(r.ts), 'nowrap'),
    td([
      el('code', { class: 'request-id', title: r.request_id, data: { full: r.request_id } }, shortId(r.request_id)),
      r.client_request_id && el('div', { class: 'sub' }, 'client: ', el('code', { class: 'client-request-id', text: r.client_request_id })),
    ]),
    td([el('a', { href: viewHash('usage', { key: r.key }), text: r.key }), el('div', { class: 'sub', text: `group ${r.group}` })]),
    td([
      el('span', { text: r.model }),
      el('div', { class: 'sub', text: `${r.protocol}${r.endpoint ? ` ${r.endpoint}` : ''} → ${r.upstream ?? 'refused by tollgate'}${r.stream ? ', streamed' : ''}` }),
      r.instance && el('div', { class: 'sub instance', text: `on ${r.instance}` }),
    ]),
    td([
      statusBadge(r.status),
      r.cache === 'hit' && el('span', { class: 'cache-hit' }, ' ', badge('cache hit', 'ok')),
      r.reason && el('div', { class: 'sub reason', text: r.reason }),
      r.error && el('div', { class: 'sub error-text', text: r.error }),
    ]),
    td([`${approx}${fmtInt(r.input_tokens)}`, ...kinds.input], 'num input-tokens'),
    td([`${approx}${fmtInt(r.output_tokens)}`, ...kinds.output], 'num output-tokens'),
    td(fmtCredits(r.cost), 'num cost'),
    td(fmtMs(r.latency_ms), 'num'),
  );
}

/** An id shortened for the table (`req_AbCd…wXyZ`); the whole one is its title and its data. */
function shortId(id) {
  return id.length > 16 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

let refreshTimer = null;

/** A toggle that loads the view again every 10 s while it is shown. */
function autoRefresh(frame) {
  const box = el('input', { type: 'checkbox', id: 'usage-auto-refresh', checked: refreshTimer !== null });
  box.addEventListener('change', () => {
    clearInterval(refreshTimer);
    refreshTimer = null;
    if (box.checked) {
      refreshTimer = setInterval(() => {
        if (!frame.section.isConnected) {
          clearInterval(refreshTimer);
          refreshTimer = null;
          return;
        }
        frame.load({ busyText: 'Refreshing…' });
      }, 10_000);
    }
  });
  return el('label', { class: 'auto-refresh' }, box, ' Refresh every 10 s');
}
