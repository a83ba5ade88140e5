/**
 * tollgate operator console: a single page over the admin API (`/admin/...`, see docs/ACCESS.md, "Admin API").
 *
 * Plain JavaScript modules with DOM APIs, no framework and no build step. The files are served by
 * src/console/assets.rs under a strict Content-Security-Policy (no inline scripts or styles, nothing from
 * other origins), so nothing adds an inline script or style attribute either; the chart is SVG built with
 * createElementNS. Everything operators and clients typed reaches the page as text only: nothing assigns
 * innerHTML, outerHTML or insertAdjacentHTML.
 *
 * This entry module holds the shell (sign-in, navigation, the frame every view renders into) and starts
 * the page; each view is a module of its own (overview, usage, keys, groups, models, audit) on top of api, dom,
 * format, dialogs and nav. Views import shared modules, never each other or this one.
 */
import { api, authMessage, request, session, SIGNED_OUT } from './api.js';
import { $, act, button, clearError, el, errorSlot, showError } from './dom.js';
import { fmtTime, setCurrency } from './format.js';
import { closeDialogs } from './dialogs.js';
import { parseHash } from './nav.js';
import { viewOverview } from './overview.js';
import { viewUsage } from './usage.js';
import { viewKey, viewKeys } from './keys.js';
import { viewGroups } from './groups.js';
import { viewModels } from './models.js';
import { viewAudit } from './audit.js';

const VIEWS = {
  overview: { title: 'Overview', render: viewOverview },
  usage: { title: 'Usage', render: viewUsage },
  keys: { title: 'Keys', render: viewKeys },
  key: { title: 'Key', render: viewKey },
  groups: { title: 'Groups', render: viewGroups },
  models: { title: 'Models', render: viewModels },
  audit: { title: 'Audit', render: viewAudit },
};

function showSignIn(message) {
  $('shell').hidden = true;
  $('sign-out').hidden = true;
  $('view').replaceChildren();
  $('sign-in').hidden = false;
  document.title = 'Sign in · tollgate console';
  const slot = $('sign-in-error');
  if (message) showError(slot, message);
  else clearError(slot);
  $('token').focus();
}

function showShell() {
  $('sign-in').hidden = true;
  clearError($('sign-in-error'));
  $('shell').hidden = false;
  $('sign-out').hidden = false;
}

/** Checks the typed token with one admin call before keeping it. */
async function onSignIn(event) {
  event.preventDefault();
  const tokenInput = $('token');
  const slot = $('sign-in-error');
  const token = tokenInput.value.trim();
  if (!token) {
    showError(slot, 'Enter the admin token.');
    return;
  }
  await act($('sign-in-button'), slot, async () => {
    try {
      await request('GET', '/admin/groups', { token });
    } catch (err) {
      throw new Error(authMessage(err));
    }
    session.save(token);
    tokenInput.value = '';
    route();
  });
}

function signOut(message) {
  session.forget();
  closeDialogs();
  showSignIn(message);
}

let settings = null;

/** The operator's settings the page shows (the currency label), fetched once per page load. */
function loadSettings() {
  if (!settings) {
    settings = api
      .get('/admin/settings')
      .then((s) => setCurrency(s.currency))
      .catch(() => {
        settings = null;
      });
  }
  return settings;
}

function route() {
  if (!session.token()) {
    showSignIn();
    return;
  }
  showShell();
  let { name, params } = parseHash();
  if (!VIEWS[name]) {
    history.replaceState(null, '', '#overview');
    ({ name, params } = parseHash());
  }
  const view = VIEWS[name];
  for (const a of $('nav').querySelectorAll('a')) {
    const active = a.dataset.view === name;
    a.classList.toggle('active', active);
    if (active) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = `${view.title} · tollgate console`;
  const frame = viewFrame(name, view, params);
  $('view').replaceChildren(frame.section);
  loadSettings().finally(() => frame.load());
}

/**
 * The frame of a view: heading, status line, refresh button and body. `load(options)` calls the view's
 * render function and swaps the body only when the new content is ready, so refreshing after an action
 * does not make the page jump; a frame the operator navigated away from is left alone.
 */
function viewFrame(name, view, params) {
  const status = el('span', { class: 'view-status', role: 'status' });
  const failure = errorSlot();
  const refresh = button('Refresh', { class: 'button-quiet' });
  const body = el('div', { class: 'view-body' });
  const section = el(
    'section',
    { class: 'view-section', id: `view-${name}`, data: { view: name, state: 'loading' } },
    el('header', { class: 'view-header' }, el('h1', { text: view.title }), status, refresh),
    failure,
    body,
  );
  const frame = {
    section,
    params,
    async load(options = {}) {
      section.dataset.state = 'loading';
      status.textContent = options.busyText || 'Loading…';
      clearError(failure);
      try {
        const nodes = await view.render(frame, params, options);
        if (!section.isConnected) return;
        body.replaceChildren(...nodes.flat(Infinity).filter(Boolean));
        section.dataset.state = 'ready';
        status.textContent = `Updated ${fmtTime(new Date().toISOString()).slice(11)}`;
      } catch (err) {
        if (!section.isConnected) return;
        section.dataset.state = 'error';
        status.textContent = '';
        showError(failure, err);
      }
    },
  };
  refresh.addEventListener('click', () => frame.load());
  return frame;
}



function start() {
  $('host').textContent = location.host;
  $('sign-in-form').addEventListener('submit', onSignIn);
  $('sign-out').addEventListener('click', () => {
    signOut();
    history.replaceState(null, '', location.pathname);
  });
  // A click on the tab of the view already shown loads it again (no hashchange then).
  $('nav').addEventListener('click', (event) => {
    const link = event.target.closest('a');
    if (link && link.getAttribute('href') === location.hash) {
      event.preventDefault();
      route();
    }
  });
  window.addEventListener('hashchange', route);
  window.addEventListener(SIGNED_OUT, (event) => signOut(event.detail));
  route();
}

start();
