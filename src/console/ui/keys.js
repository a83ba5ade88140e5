/**
 * The Keys view: creating keys (the plaintext is shown once), credits, revoking and rotating.
 */
import { api, request, seg } from './api.js';
import { act, badge, button, el, empty, errorSlot, field, input, table, td } from './dom.js';
import { fmtCredits, parseAmount, timeEl } from './format.js';
import { confirmAction, showSecret } from './dialogs.js';

/** Keys with credit, spend and balance; create, top up, rotate and revoke. */
export async function viewKeys(frame) {
  const [keys, groups] = await Promise.all([api.get('/admin/keys'), api.get('/admin/groups')]);
  return [keyCreateForm(frame, groups.data), keysTable(frame, keys.data)];
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
    td(k.disabled ? revokedActions(frame, k) : keyActions(frame, k), 'actions-cell'),
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
