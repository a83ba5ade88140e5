/**
 * The Groups view: groups, the models they may use and their limits.
 */
import { api, seg } from './api.js';
import { act, button, el, empty, errorSlot, field, input, table, td } from './dom.js';
import { fmtCredits, fmtInt, parseAmount } from './format.js';
import { confirmAction } from './dialogs.js';

/** Groups with their models and limits; create and edit. */
export async function viewGroups(frame) {
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
  const budget = input('budget', { value: g.budget ? String(g.budget.amount) : '', inputmode: 'decimal', placeholder: 'none', class: 'amount' });
  const period = el(
    'select',
    { name: 'budget_period' },
    ['daily', 'weekly', 'monthly'].map((p) => el('option', { value: p, selected: g.budget && g.budget.period === p }, p)),
  );
  return {
    nodes: [
      field('Models', models, 'Names or globs (* and ?), separated by commas'),
      field('Requests per minute', rpm),
      field('Tokens per minute', tpm),
      field('Max concurrent', conc),
      field('Budget per key', el('span', { class: 'inline-form' }, budget, period), 'For keys without their own; empty: none'),
    ],
    models,
    read: () => {
      const amount = parseAmount('budget', budget.value);
      return {
        models: parseModels(models.value),
        rpm: parseLimit('rpm', rpm.value),
        tpm: parseLimit('tpm', tpm.value),
        max_concurrent: parseLimit('max_concurrent', conc.value),
        budget: amount === null ? null : { amount, period: period.value },
      };
    },
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
    const remove = button('Delete', { class: 'button-danger-quiet delete' });
    const slot = errorSlot();
    remove.addEventListener('click', async () => {
      const ok = await confirmAction({
        title: 'Delete group',
        message: `Delete the group "${g.name}"? Only a group no key is in can be deleted (revoked keys count).`,
        confirm: 'Delete group',
      });
      if (!ok) return;
      act(remove, slot, async () => {
        await api.del(`/admin/groups/${seg(g.name)}`);
        await frame.load();
      });
    });
    const row = el(
      'tr',
      { data: { group: g.name } },
      td(el('span', { class: 'group-name', text: g.name })),
      td(g.models.length ? g.models.map((m) => el('code', { class: 'chip', text: m })) : el('span', { class: 'muted', text: 'no models' }), 'models'),
      td(limit(g.rpm), 'num rpm'),
      td(limit(g.tpm), 'num tpm'),
      td(limit(g.max_concurrent), 'num max-concurrent'),
      td(g.budget ? `${fmtCredits(g.budget.amount)} ${g.budget.period}` : el('span', { class: 'muted', text: 'none' }), 'budget'),
      td(fmtInt(active.get(g.name) || 0), 'num'),
      td([el('div', { class: 'row-actions' }, edit, remove), slot]),
    );
    edit.addEventListener('click', () => openGroupEditor(frame, row, g, edit));
    rows.push(row);
  }
  return el(
    'section',
    { class: 'panel' },
    el('h2', { text: 'Groups' }),
    table(
      [['Name'], ['Models'], ['Requests/min', 'num'], ['Tokens/min', 'num'], ['Max concurrent', 'num'], ['Budget per key'], ['Active keys', 'num'], ['']],
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
