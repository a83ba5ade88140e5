/**
 * The Keys view: creating keys (the plaintext is shown once), credits, budgets, expiry, moving a key to
 * another group, revoking, enabling, deleting and rotating.
 */
import { api, request, seg } from './api.js';
import { seriesChart } from './chart.js';
import { act, badge, button, el, empty, errorSlot, field, input, table, td } from './dom.js';
import { currency, fmtCredits, fmtInt, fmtMs, parseAmount, timeEl, tokenKinds } from './format.js';
import { confirmAction, showSecret } from './dialogs.js';
import { viewHash } from './nav.js';

/** Keys with credit, spend and balance; create, top up, rotate and revoke. */
export async function viewKeys(frame) {
  const [keys, groups] = await Promise.all([api.get('/admin/keys'), api.get('/admin/groups')]);
  return [keyCreateForm(frame, groups.data), keysTable(frame, keys.data, groups.data)];
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

const SORTS = {
  name: (a, b) => a.name.localeCompare(b.name),
  spent: (a, b) => b.spent - a.spent,
  last_used: (a, b) => (b.last_used || '').localeCompare(a.last_used || ''),
  created: (a, b) => (b.created || '').localeCompare(a.created || ''),
};

/** The keys, with a search (name, group, hint) and a sort that apply at once, in the page. */
function keysTable(frame, keys, groups) {
  if (!keys.length) return el('section', { class: 'panel' }, empty('No keys yet.'));
  const search = input('key-search', { type: 'search', placeholder: 'Search name, group or key hint', 'aria-label': 'Search keys' });
  const sort = el('select', { name: 'key-sort', 'aria-label': 'Sort keys' }, Object.keys(SORTS).map((k) => el('option', { value: k }, `by ${k.replace('_', ' ')}`)));
  const body = el('tbody');
  const draw = () => {
    const q = search.value.trim().toLowerCase();
    const shown = keys
      .filter((k) => !q || [k.name, k.group, k.hint || ''].some((t) => t.toLowerCase().includes(q)))
      .sort(SORTS[sort.value]);
    body.replaceChildren(...shown.map((k) => keyRow(frame, k, groups)));
  };
  search.addEventListener('input', draw);
  sort.addEventListener('change', draw);
  const headers = [['Name'], ['Group'], ['Credit', 'num'], ['Spent', 'num'], ['Balance', 'num'], ['Budget'], ['Status'], ['Last used'], ['Actions']];
  const tableEl = table(headers, [], { id: 'keys-table' });
  tableEl.querySelector('tbody').replaceWith(body);
  draw();
  return el('section', { class: 'panel' }, el('h2', { text: 'Keys' }), el('div', { class: 'toolbar' }, search, sort), tableEl);
}

/** The budget in force: amount per period (its own or its group's), spent in this period, when it resets. */
function budgetCell(k) {
  const b = k.budget;
  if (!b) return el('span', { class: 'muted', text: 'none' });
  return [
    el('span', { text: `${fmtCredits(b.amount)} ${b.period}${b.from === 'group' ? ' (group)' : ''}` }),
    el('div', { class: 'sub', text: `${fmtCredits(b.spent)} spent, resets ${b.resets.slice(0, 16).replace('T', ' ')} UTC` }),
  ];
}

function keyRow(frame, k, groups) {
  const balance = k.balance;
  const status = k.disabled ? badge('revoked', 'bad') : balance !== null && balance <= 0 ? badge('out of credit', 'warn') : badge('active', 'ok');
  return el(
    'tr',
    { class: k.disabled && 'is-revoked', data: { key: k.name } },
    td([
      el('a', { class: 'key-name', href: viewHash('key', { name: k.name }), text: k.name }),
      k.hint && el('div', { class: 'sub key-hint', text: k.hint }),
    ]),
    td(el('span', { class: 'group-name', text: k.group })),
    td(k.credit === null ? el('span', { class: 'muted', text: 'unlimited' }) : fmtCredits(k.credit), 'num credit'),
    td(fmtCredits(k.spent), 'num spent'),
    td(balance === null ? el('span', { class: 'muted', text: 'unlimited' }) : fmtCredits(balance), ['num balance', balance !== null && balance < 0 && 'negative']),
    td(budgetCell(k), 'budget'),
    td([status, k.expires && el('div', { class: 'sub', text: `expires ${k.expires.slice(0, 16).replace('T', ' ')} UTC` })], 'status'),
    td(k.last_used ? timeEl(k.last_used) : el('span', { class: 'muted', text: 'never' }), 'nowrap last-used'),
    td(k.disabled ? revokedActions(frame, k) : [keyActions(frame, k), keySettings(frame, k, groups)], 'actions-cell'),
  );
}

/**
 * The key's settings behind a "Settings" toggle: set the credit or make it unlimited, set or remove its
 * budget, set or clear its expiry, move it to another group.
 */
function keySettings(frame, k, groups) {
  const slot = errorSlot();
  const call = (btn, path, body) => act(btn, slot, async () => {
    await api.post(`/admin/keys/${seg(k.name)}/${path}`, body);
    await frame.load();
  });
  const credit = input('set-credit', { inputmode: 'decimal', placeholder: 'credit', class: 'amount', 'aria-label': `Credit of ${k.name}` });
  const setCredit = button('Set credit', { class: 'button-quiet set-credit' });
  setCredit.addEventListener('click', () => {
    const n = parseAmount('credit', credit.value);
    call(setCredit, 'credit', n === null ? { unlimited: true } : { set: n });
  });
  const amount = input('budget', { inputmode: 'decimal', placeholder: 'budget', class: 'amount', 'aria-label': `Budget of ${k.name}` });
  const period = el('select', { name: 'period', 'aria-label': 'Budget period' }, ['daily', 'weekly', 'monthly'].map((p) => el('option', { value: p }, p)));
  const setBudget = button('Set budget', { class: 'button-quiet set-budget' });
  setBudget.addEventListener('click', () => {
    const n = parseAmount('budget', amount.value);
    call(setBudget, 'budget', n === null ? { none: true } : { amount: n, period: period.value });
  });
  const expires = input('expires', { type: 'datetime-local', 'aria-label': `Expiry of ${k.name} (UTC)` });
  const setExpiry = button('Set expiry', { class: 'button-quiet set-expiry' });
  setExpiry.addEventListener('click', () =>
    call(setExpiry, 'expires', expires.value ? { at: `${expires.value.length === 16 ? `${expires.value}:00` : expires.value}Z` } : { never: true }),
  );
  const group = el('select', { name: 'move-group', 'aria-label': 'Move to group' }, groups.map((g) => el('option', { value: g.name, selected: g.name === k.group }, g.name)));
  const move = button('Move', { class: 'button-quiet move' });
  move.addEventListener('click', () => call(move, 'group', { group: group.value }));
  return el(
    'details',
    { class: 'key-settings' },
    el('summary', { text: 'Settings' }),
    el('div', { class: 'inline-form' }, credit, setCredit, el('span', { class: 'muted small', text: 'empty: unlimited' })),
    el('div', { class: 'inline-form' }, amount, period, setBudget, el('span', { class: 'muted small', text: 'empty: none' })),
    el('div', { class: 'inline-form' }, expires, setExpiry, el('span', { class: 'muted small', text: 'UTC; empty: never' })),
    el('div', { class: 'inline-form' }, group, move),
    slot,
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
      message: `Revoke the key "${k.name}"? Every request with it is refused from now on, until it is enabled again.`,
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

/** A revoked key: enable it again (the same secret works), or delete it for good (its name stays taken). */
function revokedActions(frame, k) {
  const slot = errorSlot();
  const enable = button('Enable', { class: 'button-quiet enable' });
  enable.addEventListener('click', () =>
    act(enable, slot, async () => {
      await api.post(`/admin/keys/${seg(k.name)}/enable`);
      await frame.load();
    }),
  );
  const remove = button('Delete', { class: 'button-danger-quiet delete' });
  remove.addEventListener('click', async () => {
    const ok = await confirmAction({
      title: 'Delete key',
      message: `Delete the key "${k.name}"? It leaves this list for good. Its usage records stay, and its name is not given to another key.`,
      confirm: 'Delete key',
    });
    if (!ok) return;
    act(remove, slot, async () => {
      await api.del(`/admin/keys/${seg(k.name)}`);
      await frame.load();
    });
  });
  return [el('div', { class: 'row-actions' }, enable, remove), slot];
}

/**
 * A key's page: what it spent and asked for over time, its budget and limits, its group's models, its
 * recent records (refusals included) and the actions.
 */
export async function viewKey(frame, params) {
  const name = params.get('name') || '';
  const [keys, groups, o, usage] = await Promise.all([
    api.get('/admin/keys'),
    api.get('/admin/groups'),
    api.get(`/admin/overview?range=7d&key=${encodeURIComponent(name)}`),
    api.get(`/admin/usage?key=${encodeURIComponent(name)}&limit=20`),
  ]);
  const k = keys.data.find((x) => x.name === name);
  if (!k) return [el('section', { class: 'panel' }, empty(`No key named "${name}".`))];
  const group = groups.data.find((g) => g.name === k.group);
  const limit = (v) => (v === null || v === undefined ? 'no limit' : fmtInt(v));
  const facts = el(
    'dl',
    { class: 'facts', id: 'key-facts' },
    el('dt', { text: 'Key' }), el('dd', {}, el('strong', { class: 'key-name', text: k.name }), k.hint ? ` (${k.hint})` : ''),
    el('dt', { text: 'Group' }), el('dd', { text: k.group }),
    el('dt', { text: 'Models' }), el('dd', {}, (group ? group.models : []).map((m) => el('code', { class: 'chip', text: m }))),
    el('dt', { text: 'Limits' }), el('dd', { text: group ? `${limit(group.rpm)} requests/min, ${limit(group.tpm)} tokens/min, ${limit(group.max_concurrent)} at once` : '—' }),
    el('dt', { text: 'Credit' }), el('dd', { text: k.credit === null ? 'unlimited' : `${fmtCredits(k.credit)} ${currency()} (${fmtCredits(k.balance)} left)` }),
    el('dt', { text: 'Budget' }), el('dd', {}, budgetCell(k)),
    el('dt', { text: 'Spent' }), el('dd', { text: `${fmtCredits(k.spent)} ${currency()} in all` }),
    el('dt', { text: 'Last used' }), el('dd', {}, k.last_used ? timeEl(k.last_used) : 'never'),
    el('dt', { text: 'Expires' }), el('dd', { text: k.expires || 'never' }),
  );
  const actions = k.disabled ? revokedActions(frame, k) : [keyActions(frame, k), keySettings(frame, k, groups.data)];
  const rows = usage.data.map((r) =>
    el(
      'tr',
      { data: { requestId: r.request_id } },
      td(timeEl(r.ts), 'nowrap'),
      td([el('span', { text: String(r.status) }), r.reason && el('div', { class: 'sub reason', text: r.reason }), r.error && el('div', { class: 'sub error-text', text: r.error })]),
      td(el('span', { text: r.model })),
      td([fmtInt(r.input_tokens), ...tokenKinds(r).input], 'num input-tokens'),
      td([fmtInt(r.output_tokens), ...tokenKinds(r).output], 'num output-tokens'),
      td(fmtCredits(r.cost), 'num cost'),
      td(fmtMs(r.latency_ms), 'num'),
    ),
  );
  return [
    el('section', { class: 'panel', id: 'key-page' }, el('h2', { text: `Key ${k.name}` }), facts, el('div', { class: 'row-actions' }, actions)),
    el('section', { class: 'panel' }, el('h2', { text: 'Requests and cost per hour, last 7 days' }), seriesChart(o.hourly, o.bucket_secs)),
    el(
      'section',
      { class: 'panel' },
      el('h2', {}, 'Recent requests ', el('a', { href: viewHash('usage', { key: k.name }), text: '(all in Usage)' })),
      rows.length ? table([['When'], ['Status'], ['Model'], ['Input', 'num'], ['Output', 'num'], ['Cost', 'num'], ['Latency', 'num']], rows, { id: 'key-records' }) : empty('No requests yet.'),
    ),
  ];
}
