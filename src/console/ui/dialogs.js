/**
 * Dialogs: confirmation before a change that cannot be undone, and the one-time display of a new key.
 */
import { button, el } from './dom.js';

/** Opens a modal <dialog> built from `children`; it removes itself from the page when closed. */
function openDialog(props, ...children) {
  const dialog = el('dialog', { ...props, class: ['dialog', props.class] }, children);
  dialog.addEventListener('close', () => dialog.remove());
  document.body.append(dialog);
  dialog.showModal();
  return dialog;
}

export function closeDialogs() {
  for (const d of document.querySelectorAll('dialog')) d.close();
}

/** Asks before a change that cannot be undone; resolves to true when confirmed. */
export function confirmAction({ title, message, confirm }) {
  return new Promise((resolve) => {
    const yes = button(confirm, { class: 'button-danger', 'data-confirm': 'yes' });
    const no = button('Cancel', { class: 'button-quiet' });
    const dialog = openDialog(
      { class: 'confirm-dialog', role: 'alertdialog', 'aria-label': title },
      el('h2', { text: title }),
      el('p', { text: message }),
      el('div', { class: 'actions' }, no, yes),
    );
    let answer = false;
    yes.addEventListener('click', () => {
      answer = true;
      dialog.close();
    });
    no.addEventListener('click', () => dialog.close());
    dialog.addEventListener('close', () => resolve(answer));
    no.focus();
  });
}

/**
 * Shows a key's plaintext once (after creation or rotation) with a copy button. The text lives only in
 * this dialog: closing it empties the element and removes the dialog; nothing is stored.
 */
export function showSecret({ title, name, group, key }) {
  const secret = el('code', { class: 'secret', id: 'new-key' }, key);
  const copied = el('p', { class: 'muted small', role: 'status' });
  const copy = button('Copy', { class: 'button-primary', id: 'copy-key' });
  const done = button('Done', { class: 'button-quiet' });
  const dialog = openDialog(
    { class: 'secret-dialog', 'aria-label': title },
    el('h2', { text: title }),
    el('p', {}, 'Key ', el('strong', { class: 'key-name', text: name }), group ? [' in group ', el('strong', { text: group })] : '', ':'),
    el('div', { class: 'secret-row' }, secret, copy),
    copied,
    el(
      'p',
      { class: 'warning' },
      'Copy it now: it is shown only this once. tollgate keeps only a hash of it, so it cannot be shown again; if it is lost, rotate the key.',
    ),
    el('div', { class: 'actions' }, done),
  );
  copy.addEventListener('click', () => copyText(key, secret, copied));
  // The 'close' event fires a task after close() (and after Esc), so the plaintext is wiped and the
  // dialog removed at once here rather than waiting for it; the event handler covers Esc.
  const wipe = () => {
    secret.textContent = '';
    copied.textContent = '';
    dialog.remove();
  };
  done.addEventListener('click', () => {
    wipe();
    dialog.close();
  });
  dialog.addEventListener('cancel', wipe);
  dialog.addEventListener('close', wipe);
  copy.focus();
}

/** Copies with the Clipboard API; where that is unavailable (plain HTTP, denied), selects the text. */
async function copyText(text, node, status) {
  try {
    if (!navigator.clipboard) throw new Error('no clipboard');
    await navigator.clipboard.writeText(text);
    status.textContent = 'Copied to the clipboard.';
  } catch {
    const range = document.createRange();
    range.selectNodeContents(node);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    status.textContent = 'Selected: press Ctrl+C (⌘C on a Mac) to copy.';
  }
}
