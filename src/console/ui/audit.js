/**
 * The Audit view: every change an operator made (keys, groups, models), newest first, with who made it,
 * what it was before and after, and the request id of the admin call. It never shows a key.
 */
import { api } from './api.js';
import { el, empty, table, td } from './dom.js';
import { timeEl } from './format.js';

/** The newest 200 changes. */
export async function viewAudit() {
  const audit = await api.get('/admin/audit?limit=200');
  if (!audit.data.length) {
    return [el('section', { class: 'panel' }, empty('No changes yet: creating a key, editing a group or repricing a model shows here.'))];
  }
  const rows = audit.data.map((e) =>
    el(
      'tr',
      { data: { action: e.action } },
      td(timeEl(e.ts), 'nowrap'),
      td(el('span', { class: 'actor', text: e.actor })),
      td(el('code', { class: 'action', text: e.action })),
      td(el('span', { class: 'target', text: e.target })),
      td(changes(e.before, e.after), 'changes'),
      td(e.request_id ? el('code', { class: 'request-id', text: e.request_id }) : el('span', { class: 'muted', text: '—' })),
    ),
  );
  return [
    el(
      'section',
      { class: 'panel' },
      el('h2', { text: 'Changes, newest first' }),
      table([['When'], ['Who'], ['Action'], ['What'], ['Before → after'], ['Request id']], rows, { id: 'audit-table' }),
    ),
  ];
}

/** The fields that changed, as `field: before → after` lines (all of them for a creation or deletion). */
function changes(before, after) {
  const b = before || {};
  const a = after || {};
  const fields = [...new Set([...Object.keys(b), ...Object.keys(a)])].filter((k) => k !== 'name');
  const lines = fields
    .filter((k) => JSON.stringify(b[k]) !== JSON.stringify(a[k]))
    .map((k) => el('div', { class: 'change', text: `${k}: ${show(b[k])} → ${show(a[k])}` }));
  if (!before) lines.unshift(el('div', { class: 'muted', text: 'created' }));
  if (!after) lines.unshift(el('div', { class: 'muted', text: 'deleted' }));
  return lines.length ? lines : el('span', { class: 'muted', text: 'no field changed' });
}

function show(v) {
  if (v === undefined) return '—';
  if (v === null) return 'none';
  return typeof v === 'object' ? JSON.stringify(v) : String(v);
}
