/**
 * DOM helpers: elements built from props and text (never markup), form fields, tables, badges, and the
 * busy state of a button while its action runs.
 */

/**
 * Makes an element. props: `class` (string or list), `text`, `on` ({event: handler}), `data` (dataset);
 * anything else becomes an attribute (true: present, false/null/undefined: left out). Children are nodes
 * or strings; strings become text nodes, never markup.
 */
export function el(tag, props = {}, ...children) {
  return build(document.createElement(tag), props, children);
}

/** The same for SVG elements. */
export function svgEl(tag, props = {}, ...children) {
  return build(document.createElementNS('http://www.w3.org/2000/svg', tag), props, children);
}

function build(node, props, children) {
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') {
      const cls = Array.isArray(v) ? v.filter(Boolean).join(' ') : v;
      if (cls) node.setAttribute('class', cls);
    } else if (k === 'text') {
      node.textContent = String(v);
    } else if (k === 'on') {
      for (const [event, handler] of Object.entries(v)) node.addEventListener(event, handler);
    } else if (k === 'data') {
      for (const [dk, dv] of Object.entries(v)) node.dataset[dk] = String(dv);
    } else if (/^on/i.test(k) || k === 'style' || k === 'srcdoc') {
      throw new Error(`el(): refusing the attribute ${k}`);
    } else if (k === 'href' && !/^(#|blob:)/.test(String(v))) {
      throw new Error('el(): links go to views (#...) or downloads (blob:) only');
    } else {
      node.setAttribute(k, v === true ? '' : String(v));
    }
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export const $ = (id) => document.getElementById(id);

/** A paragraph for the error of one action, shown next to its button. */
export function errorSlot() {
  return el('p', { class: 'error', role: 'alert', hidden: true });
}

export function showError(slot, err) {
  slot.textContent = err instanceof Error ? err.message : String(err);
  slot.hidden = false;
}

export function clearError(slot) {
  slot.textContent = '';
  slot.hidden = true;
}

/** Runs `work` with `button` disabled; shows a thrown error in `slot`. Answers whether it succeeded. */
export async function act(button, slot, work) {
  if (slot) clearError(slot);
  button.disabled = true;
  button.setAttribute('aria-busy', 'true');
  try {
    await work();
    return true;
  } catch (err) {
    if (!slot) throw err;
    showError(slot, err);
    return false;
  } finally {
    button.disabled = false;
    button.removeAttribute('aria-busy');
  }
}

/** A labelled form field. */
export function field(label, input, hint) {
  return el('label', { class: 'field' }, el('span', { text: label }), input, hint && el('small', { class: 'hint', text: hint }));
}

export function input(name, props = {}) {
  return el('input', { type: 'text', name, autocomplete: 'off', spellcheck: 'false', ...props });
}

export function button(text, props = {}) {
  return el('button', { type: 'button', ...props }, text);
}

/** A table inside a horizontally scrolling box. `columns`: [label, class?]; `rows`: <tr> elements. */
export function table(columns, rows, props = {}) {
  return el(
    'div',
    { class: 'table-wrap' },
    el(
      'table',
      props,
      el('thead', {}, el('tr', {}, columns.map(([label, cls]) => el('th', { scope: 'col', class: cls }, label)))),
      el('tbody', {}, rows),
    ),
  );
}

export function td(content, cls) {
  return el('td', { class: cls }, content);
}

export function badge(text, kind) {
  return el('span', { class: ['badge', kind && `badge-${kind}`] }, text);
}

export function empty(text) {
  return el('p', { class: 'empty', text });
}
