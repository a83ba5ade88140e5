/**
 * The requests-and-cost chart the Overview and a key's page draw: SVG built with createElementNS.
 */
import { el, svgEl } from './dom.js';
import { currency, fmtCompact, fmtCredits, fmtHour, fmtInt, fmtTime } from './format.js';

/**
 * A tick's label: compact for whole steps (1.2K), else with the decimals the step needs, so ticks of small
 * amounts (0.0025 credits) read apart instead of all as 0.
 */
export function fmtTick(v, step) {
  if (!(step > 0) || step >= 1) return fmtCompact(v);
  const decimals = Math.min(12, Math.ceil(-Math.log10(step) - 1e-9) + (String(step * 10 ** Math.ceil(-Math.log10(step))).includes('.') ? 1 : 0));
  return v.toFixed(decimals);
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

/**
 * Bars: requests per bucket (an hour, or a day for `bucketSecs` of 86400; errors stacked in red); line: cost
 * per bucket on the right axis.
 */
export function seriesChart(hours, bucketSecs = 3600) {
  const daily = bucketSecs >= 86_400;
  const unit = daily ? 'day' : 'hour';
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

  const svg = svgEl('svg', { class: 'chart', id: 'hourly-chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `Requests and cost per ${unit}` });
  for (let i = 0; i <= 4; i++) {
    const yy = y((reqMax * i) / 4, reqMax);
    svg.append(
      svgEl('line', { class: 'grid', x1: L, x2: W - R, y1: yy, y2: yy }),
      svgEl('text', { class: 'axis', x: L - 6, y: yy + 4, 'text-anchor': 'end' }, fmtTick((reqMax * i) / 4, reqMax / 4)),
      svgEl('text', { class: 'axis axis-cost', x: W - R + 6, y: yy + 4 }, fmtTick((costMax * i) / 4, costMax / 4)),
    );
  }
  svg.append(
    svgEl('text', { class: 'axis-title', x: 4, y: T + 2, transform: `rotate(-90 4 ${T + 2})`, 'text-anchor': 'end', 'dominant-baseline': 'hanging' }, 'requests'),
    svgEl('text', { class: 'axis-title axis-cost', x: W - 4, y: T + 2, transform: `rotate(90 ${W - 4} ${T + 2})`, 'dominant-baseline': 'hanging' }, currency()),
  );
  const points = [];
  hours.forEach((h, i) => {
    const x0 = L + i * slot;
    const x = x0 + (slot - barW) / 2;
    const top = y(h.requests, reqMax);
    const errTop = y(h.errors, reqMax);
    const when = daily ? fmtTime(h.hour).slice(0, 10) : fmtTime(h.hour).slice(0, 16);
    const tip = `${when}: ${fmtInt(h.requests)} requests, ${fmtInt(h.errors)} errors, ${fmtInt(h.tokens)} tokens, ${fmtCredits(h.cost)} ${currency()}`;
    const group = svgEl('g', { class: 'hour', data: { hour: h.hour, requests: h.requests } }, svgEl('title', {}, tip));
    group.append(svgEl('rect', { class: 'hit', x: x0, y: T, width: slot, height: ih }));
    group.append(svgEl('rect', { class: 'bar', x, y: top, width: barW, height: T + ih - top }));
    if (h.errors > 0) group.append(svgEl('rect', { class: 'bar-errors', x, y: errTop, width: barW, height: T + ih - errTop }));
    svg.append(group);
    points.push([x0 + slot / 2, y(h.cost, costMax)]);
    const every = Math.max(1, Math.round(hours.length / 8));
    if ((hours.length - 1 - i) % every === 0) {
      const label = daily ? fmtTime(h.hour).slice(5, 10) : hours.length > 24 ? fmtTime(h.hour).slice(5, 13).replace('T', ' ') : fmtHour(h.hour);
      svg.append(svgEl('text', { class: 'axis', x: x0 + slot / 2, y: H - 10, 'text-anchor': 'middle' }, label));
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
    el('span', {}, el('i', { class: 'swatch swatch-cost' }), `Cost in ${currency()} (right axis)`),
    el('span', { class: 'muted' }, `${daily ? 'Days' : 'Hours'} in your time zone; hover a bar for its numbers.`),
  );
  return el('figure', { class: 'chart-wrap' }, svg, legend);
}

