/**
 * The Overview view: totals, the hourly chart and the top keys and models.
 */
import { api } from './api.js';
import { el, empty, field, svgEl, table, td } from './dom.js';
import { fmtCompact, fmtCredits, fmtHour, fmtInt, fmtPct, fmtTime } from './format.js';
import { viewHash } from './nav.js';

/** Totals for the last hour and day, the hourly chart, top keys and models by spend. */
export async function viewOverview() {
  const o = await api.get('/admin/overview');
  return [
    el(
      'div',
      { class: 'tiles' },
      totalsPanel('Last hour', o.last_hour, 'totals-hour', o.unauthorized_last_hour),
      totalsPanel('Last 24 hours', o.last_day, 'totals-day'),
    ),
    el('section', { class: 'panel' }, el('h2', { text: 'Requests and cost per hour, last 24 hours' }), hourlyChart(o.hourly)),
    el(
      'div',
      { class: 'columns' },
      topPanel('Top keys by spend, last 24 hours', 'Key', o.top_keys, 'key', 'top-keys'),
      topPanel('Top models by spend, last 24 hours', 'Model', o.top_models, 'model', 'top-models'),
    ),
  ];
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
      stat('Cost', fmtCredits(t.cost), 'cost', 'credits'),
      stat('Error rate', fmtPct(t.error_rate), 'error-rate', `${fmtInt(t.errors)} errors, refusals included`),
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
