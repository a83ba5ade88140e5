/**
 * Formatting numbers, money, durations and times for the page, and reading amounts typed into forms.
 */
import { el } from './dom.js';

const NUMBER = new Intl.NumberFormat('en-US');
const COMPACT = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 2 });
const CREDITS = [2, 6].map((d) => new Intl.NumberFormat('en-US', { minimumFractionDigits: d, maximumFractionDigits: d }));

export function fmtInt(n) {
  return n === null || n === undefined ? '—' : NUMBER.format(n);
}

let CURRENCY = 'credits';

/** The label money is shown with (the config's `currency`). */
export function currency() {
  return CURRENCY;
}

export function setCurrency(label) {
  if (typeof label === 'string' && label) CURRENCY = label;
}

/** Money, the same way everywhere: two decimals; amounts below 0.01 with six, so small costs stay visible. */
export function fmtCredits(n) {
  if (n === null || n === undefined) return '—';
  const a = Math.abs(n);
  return (a === 0 || a >= 0.01 ? CREDITS[0] : CREDITS[1]).format(n);
}

const PRICE = new Intl.NumberFormat('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 6 });

/** A price per 1M tokens, exact (prices have at most 6 decimals): 0.125 stays 0.125, 3 shows as 3.00. */
export function fmtPrice(n) {
  return n === null || n === undefined ? '—' : PRICE.format(n);
}

export function fmtCompact(n) {
  return COMPACT.format(n);
}

export function fmtPct(rate) {
  if (rate === null || rate === undefined) return '—';
  const p = rate * 100;
  return `${p > 0 && p < 10 ? p.toFixed(1) : p.toFixed(0)}%`;
}

export function fmtMs(ms) {
  if (ms === null || ms === undefined) return '—';
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}

export const pad = (n) => String(n).padStart(2, '0');

/** An RFC 3339 time in the browser's time zone: 2026-11-22 10:04:05. */
export function fmtTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fmtHour(iso) {
  const d = new Date(iso);
  return `${pad(d.getHours())}:00`;
}

export function fmtAgo(iso) {
  const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  if (!Number.isFinite(s)) return '';
  if (s < 5) return 'just now';
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} days ago`;
}

/** A <time> with local time as text and the UTC value as tooltip; `ago` adds "(3 min ago)". */
export function timeEl(iso, { ago = false } = {}) {
  if (!iso) return el('span', { class: 'muted', text: '—' });
  return el('time', { datetime: iso, title: `${iso} (UTC)` }, fmtTime(iso), ago && el('span', { class: 'muted', text: ` (${fmtAgo(iso)})` }));
}

/**
 * A record's tokens by kind, as sub-lines under its input and output counts (the same breakdown as the CSV
 * and /metrics): cache reads, 5-minute and 1-hour cache writes and the long-context tier under the input;
 * reasoning under the output. Each line has its own class (`kind-reads`, `kind-write-5m`, `kind-write-1h`,
 * `kind-tier`, `kind-reasoning`).
 */
export function tokenKinds(r) {
  const line = (cls, n, text) => n > 0 && el('div', { class: `sub ${cls}`, text: `${fmtInt(n)} ${text}` });
  return {
    input: [
      line('kind-reads', r.cached_input_tokens, 'cache reads'),
      line('kind-write-5m', r.cache_write_5m_tokens, '5m cache writes'),
      line('kind-write-1h', r.cache_write_1h_tokens, '1h cache writes'),
      r.tier_above_input_tokens != null && el('div', { class: 'sub kind-tier', text: `tier above ${fmtInt(r.tier_above_input_tokens)}` }),
    ],
    output: [line('kind-reasoning', r.reasoning_tokens, 'reasoning')],
  };
}

/** datetime-local value (local time) ↔ RFC 3339 (UTC). */
export function toLocalInput(iso) {
  const d = new Date(iso);
  if (!iso || Number.isNaN(d.getTime())) return '';
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

export function fromLocalInput(value) {
  const d = new Date(value);
  return value && !Number.isNaN(d.getTime()) ? d.toISOString() : '';
}


/** "12.5" → 12.5; "" → null; anything else throws naming the field. */
export function parseAmount(label, value, { positive = false } = {}) {
  const v = value.trim();
  if (!v) return null;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || (positive && n === 0) || !/^\d*\.?\d*(e\d+)?$/i.test(v)) {
    throw new Error(`${label}: expected ${positive ? 'an amount above 0' : 'an amount of 0 or more'}, got "${v}"`);
  }
  return n;
}
