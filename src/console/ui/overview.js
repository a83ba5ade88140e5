/**
 * The Overview view: totals, the requests-and-cost chart over 24 hours, 7 or 30 days, the top keys and
 * models, and the usage ledger's files and free disk space.
 */
import { api } from './api.js';
import { seriesChart } from './chart.js';
import { el, empty, table, td } from './dom.js';
import { currency, fmtCredits, fmtInt, fmtPct, fmtTime } from './format.js';
import { viewHash } from './nav.js';

const RANGES = { '24h': 'last 24 hours', '7d': 'last 7 days', '30d': 'last 30 days' };

/** Totals for the last hour and the range (24 h, 7 d or 30 d), the chart, top keys and models by spend. */
export async function viewOverview(frame, params) {
  const range = RANGES[params.get('range')] ? params.get('range') : '24h';
  const [o, settings] = await Promise.all([
    api.get(`/admin/overview?range=${range}`),
    api.get('/admin/settings').catch(() => null),
  ]);
  const picker = el(
    'div',
    { class: 'range-picker', role: 'group', 'aria-label': 'Range' },
    Object.keys(RANGES).map((r) =>
      el(
        'a',
        {
          href: viewHash('overview', { range: r }),
          class: r === range ? 'active' : null,
          'aria-current': r === range ? 'true' : null,
          title: RANGES[r],
          data: { range: r },
        },
        r,
      ),
    ),
  );
  return [
    el(
      'div',
      { class: 'tiles' },
      totalsPanel('Last hour', o.last_hour, 'totals-hour', o.unauthorized_last_hour),
      totalsPanel(`The ${RANGES[range]}`, o.last_day, 'totals-day'),
    ),
    el(
      'section',
      { class: 'panel' },
      el('h2', { text: `Requests and cost per ${o.bucket_secs >= 86400 ? 'day' : 'hour'}, ${RANGES[range]}` }),
      picker,
      seriesChart(o.hourly, o.bucket_secs),
    ),
    el(
      'div',
      { class: 'columns' },
      topPanel(`Top keys by spend, ${RANGES[range]}`, 'Key', o.top_keys, 'key', 'top-keys'),
      topPanel(`Top models by spend, ${RANGES[range]}`, 'Model', o.top_models, 'model', 'top-models'),
    ),
    settings && settings.ledger && ledgerPanel(settings.ledger),
  ];
}

/** Megabytes with one decimal. */
function fmtMb(bytes) {
  return `${(bytes / 1048576).toLocaleString(undefined, { maximumFractionDigits: 1 })} MB`;
}

/** The usage ledger's files and the data disk: size, files, the oldest record kept, free space. */
function ledgerPanel(l) {
  const kept = l.retention_days ? `records kept ${fmtInt(l.retention_days)} days` : 'every record kept';
  return el(
    'section',
    { class: 'panel', id: 'ledger-files' },
    el('h2', { text: 'Usage ledger' }),
    l.disk_warning && el('p', { class: 'warning', role: 'status', text: `Low disk space: ${l.disk_warning}.` }),
    el(
      'dl',
      { class: 'stats' },
      stat('Size', fmtMb(l.bytes), 'ledger-bytes', kept),
      stat('Files', fmtInt(l.files), 'ledger-files', `${fmtInt(l.compressed_files)} compressed`),
      stat('Oldest record', l.oldest_record ? fmtTime(l.oldest_record) : '–', 'ledger-oldest'),
      stat(
        'Free disk',
        l.free_disk_bytes == null ? '–' : fmtMb(l.free_disk_bytes),
        'disk-free',
        `warns under ${fmtInt(l.min_free_disk_mb)} MB`,
      ),
    ),
  );
}

/**
 * Requests, tokens, cost and the error rate (refusals included). `unauthorized`: requests without a valid key,
 * which leave no record (shown for the last hour only).
 */
function totalsPanel(title, t, id, unauthorized) {
  return el(
    'section',
    { class: 'panel totals', id },
    el('h2', { text: title }),
    el(
      'dl',
      { class: 'stats' },
      stat('Requests', fmtInt(t.requests), 'requests'),
      stat('Tokens', fmtInt(t.tokens), 'tokens'),
      stat('Cost', fmtCredits(t.cost), 'cost', currency()),
      stat('Error rate', fmtPct(t.error_rate), 'error-rate', `${fmtInt(t.errors)} errors, refusals included`),
      t.cache_requests > 0 &&
        stat('Cache hit rate', fmtPct(t.cache_hit_rate), 'cache-hit-rate', `${fmtInt(t.cache_hits)} of ${fmtInt(t.cache_requests)} requests to cached models`),
      unauthorized !== undefined &&
        stat('401s', fmtInt(unauthorized), 'unauthorized', 'without a valid key (no record)'),
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
