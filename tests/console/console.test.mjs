/**
 * Browser test of tollgate's operator console (/console), run by scripts/console-tests.sh, which starts the
 * gateways and passes them in the environment:
 *   CONSOLE_URL, CONSOLE_ADMIN_TOKEN, CONSOLE_FIRST_KEY   a gateway with an admin token and the mock model
 *   CONSOLE_CLOSED_URL                                    a gateway without admin token (admin API closed)
 *   CONSOLE_ARTIFACTS                                     where the screenshots go
 *   CHROMIUM, CONSOLE_TMP                                 the browser, and a directory for its profile
 *
 * Headless Chromium (Debian's package) is driven by playwright-core. The steps run in order, each depending on
 * the ones before; the first failure stops the run. Every wait is for a selector, a text or a condition, with
 * a deadline: nothing sleeps for a fixed time. Prints one line per step and "N passed, N failed".
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const env = (name) => {
  const v = process.env[name];
  if (!v) {
    console.error(`console test: ${name} is not set (run scripts/console-tests.sh)`);
    process.exit(2);
  }
  return v;
};
const BASE = env('CONSOLE_URL');
const CLOSED = env('CONSOLE_CLOSED_URL');
const TOKEN = env('CONSOLE_ADMIN_TOKEN');
const FIRST_KEY = env('CONSOLE_FIRST_KEY');
const ARTIFACTS = env('CONSOLE_ARTIFACTS');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const TMP = process.env.CONSOLE_TMP || '/tmp';

const RUN = Date.now().toString(36);
const KEY_NAME = `e2e-key-${RUN}`;
const GROUP_NAME = `e2e-team-${RUN}`;
// Operator input that would become an element if the console ever put names into the page as HTML. Names
// may not contain spaces, hence the slashes.
const HOSTILE = '<img/src=x/onerror=alert(1)>';
const CREDIT = 1000;

// ------------------------------------------------------------------------------------------- helpers

function check(cond, message) {
  if (!cond) throw new Error(message);
}

function near(a, b) {
  return Math.abs(a - b) < 0.005;
}

/** "1,234.5" → 1234.5 */
function num(text) {
  return Number(String(text).replace(/[,\s≈]/g, ''));
}

/** Polls `probe` until it answers something truthy, up to `ms`; fails naming `what`. */
async function until(what, probe, ms = 10_000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await probe();
      if (last) return last;
    } catch (e) {
      last = e.message;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function admin(path) {
  const res = await fetch(BASE + path, { headers: { Authorization: `Bearer ${TOKEN}` } });
  if (!res.ok) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

/** One Chat Completions request through the gateway with the mock model. */
async function chat(key, clientRequestId) {
  const headers = { Authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  if (clientRequestId) headers['x-client-request-id'] = clientRequestId;
  const res = await fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ model: 'mock', messages: [{ role: 'user', content: 'Hello from the console test' }] }),
  });
  return { status: res.status, requestId: res.headers.get('x-request-id'), body: await res.json().catch(() => null) };
}

// ------------------------------------------------------------------------------------------ the steps

const steps = [];
const step = (name, fn) => steps.push({ name, fn });

let context;
let page;
const problems = []; // console errors, page errors and CSP violations seen in the browser
const dialogsSeen = []; // alert()/confirm() the page opened (the console never uses them)
let newKey; // the plaintext of the key created in the UI
let usageRecord;

const view = (name) => page.locator(`section[data-view="${name}"][data-state="ready"]`);

/** Clicks a view's tab and waits until its data is shown. */
async function open(name) {
  await page.click(`#nav a[data-view="${name}"]`);
  await view(name).waitFor();
}

async function screenshot(name) {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

const keyRow = (name) => page.locator('#keys-table tbody tr').filter({ has: page.locator('.key-name', { hasText: name }) });

step('the console is served with its Content-Security-Policy', async () => {
  const res = await fetch(`${BASE}/console`);
  check(res.status === 200, `/console answered ${res.status}`);
  const csp = res.headers.get('content-security-policy') || '';
  check(csp.includes("script-src 'self'") && csp.includes("default-src 'self'"), `unexpected CSP: ${csp}`);
  // Every module the entry imports, followed to the end: each is served with the same policy and none
  // writes HTML from strings.
  const seen = new Set();
  const queue = ['app.js'];
  while (queue.length) {
    const name = queue.shift();
    if (seen.has(name)) continue;
    seen.add(name);
    const mod = await fetch(`${BASE}/console/${name}`);
    check(mod.status === 200, `/console/${name} answered ${mod.status}`);
    check((mod.headers.get('content-type') || '').startsWith('text/javascript'), `${name} is not served as JavaScript`);
    check((mod.headers.get('content-security-policy') || '') === csp, `${name} has another CSP`);
    const js = await mod.text();
    check(!/\.(innerHTML|outerHTML)\s*\+?=(?!=)|\.insertAdjacentHTML\s*\(|document\.write/.test(js), `${name} writes HTML from strings`);
    for (const m of js.matchAll(/^import .* from '\.\/([\w-]+\.js)';$/gm)) queue.push(m[1]);
  }
  check(seen.size >= 10, `only ${seen.size} console modules found: ${[...seen].join(', ')}`);
});

step('a closed admin API is explained at sign-in', async () => {
  await page.goto(`${CLOSED}/console`);
  await page.fill('#token', 'anything');
  await page.click('#sign-in-button');
  const error = page.locator('#sign-in-error');
  await error.filter({ hasText: 'admin API is closed' }).waitFor();
  const text = await error.textContent();
  check(text.includes('TG_CONSOLE_ADMIN'), `the message should name the variable to set: ${text}`);
  check(await page.locator('#shell').isHidden(), 'the console opened without a working token');
});

step('a wrong token is refused with a clear message', async () => {
  await page.goto(`${BASE}/console`);
  await page.fill('#token', 'not-the-admin-token');
  await page.click('#sign-in-button');
  await page.locator('#sign-in-error').filter({ hasText: 'Wrong admin token' }).waitFor();
  await screenshot('sign-in');
  check(await page.locator('#shell').isHidden(), 'the console opened with a wrong token');
  check((await page.evaluate(() => sessionStorage.length)) === 0, 'a wrong token was stored');
});

step('signs in with the admin token and keeps it for this tab only', async () => {
  await page.fill('#token', TOKEN);
  await page.click('#sign-in-button');
  await view('overview').waitFor();
  const stored = await page.evaluate(() => Object.values({ ...sessionStorage }));
  check(stored.includes(TOKEN), 'the token is not in sessionStorage');
  check((await page.evaluate(() => localStorage.length)) === 0, 'something was put in localStorage');
  await page.reload();
  await view('overview').waitFor(); // still signed in after a reload of the tab
});

step('creates a key with a credit and shows it once', async () => {
  await open('keys');
  await page.fill('#key-create input[name="name"]', KEY_NAME);
  await page.selectOption('#key-create select[name="group"]', 'default');
  await page.fill('#key-create input[name="credit"]', String(CREDIT));
  await page.click('#key-create button[type="submit"]');
  const dialog = page.locator('dialog.secret-dialog[open]');
  await dialog.waitFor();
  newKey = (await dialog.locator('#new-key').textContent()).trim();
  check(/^tg_[A-Za-z0-9]{40}$/.test(newKey), `the dialog does not show a key: ${newKey}`);
  check((await dialog.locator('.key-name').textContent()) === KEY_NAME, 'the dialog names another key');
  await screenshot('key-created');
  await dialog.locator('#copy-key').click();
  await dialog.locator('[role="status"]').filter({ hasText: /Copied|Selected/ }).waitFor();
  const copied = await page.evaluate(() => navigator.clipboard.readText().catch(() => window.getSelection().toString()));
  check(copied.trim() === newKey, `copy gave ${JSON.stringify(copied)}`);
  await dialog.getByRole('button', { name: 'Done' }).click();
  await dialog.waitFor({ state: 'detached' });
  await keyRow(KEY_NAME).waitFor();
  const html = await page.content();
  check(!html.includes(newKey), 'the key is still in the page after its dialog closed');
  const stored = await page.evaluate(() => JSON.stringify({ ...sessionStorage }) + JSON.stringify({ ...localStorage }));
  check(!stored.includes(newKey), 'the key was stored in the browser');
});

step('a request with the new key goes through the gateway', async () => {
  const clientId = `console-e2e-${RUN}`;
  const r = await chat(newKey, clientId);
  check(r.status === 200, `the request failed: ${r.status} ${JSON.stringify(r.body)}`);
  check(r.requestId && r.requestId.startsWith('req_'), 'no x-request-id');
  usageRecord = await until(`the usage record of ${r.requestId}`, async () => {
    const { data } = await admin(`/admin/usage?request_id=${r.requestId}`);
    return data[0];
  });
  check(usageRecord.client_request_id === clientId, 'the record lost the client request id');
  check(usageRecord.cost > 0, `the request cost nothing: ${usageRecord.cost}`);
});

step('the Usage view shows the record, filters it and exports it as CSV', async () => {
  await open('usage');
  const row = page.locator(`#usage-table tbody tr[data-request-id="${usageRecord.request_id}"]`);
  await row.waitFor();
  const text = await row.textContent();
  check(text.includes(usageRecord.client_request_id), 'the row does not show the client request id');
  check(text.includes(KEY_NAME), 'the row does not show the key');
  check(near(num(await row.locator('td.cost').textContent()), usageRecord.cost), 'the row shows another cost');
  await screenshot('usage');

  // Filters: a status the record does not have hides it; the key filter brings it back.
  await page.fill('#usage-filters input[name="key"]', KEY_NAME);
  await page.selectOption('#usage-filters select[name="status"]', '5xx');
  await page.click('#usage-filters button[type="submit"]');
  await page.waitForURL(/#usage\?.*status=5xx/);
  await view('usage').locator('.empty').filter({ hasText: 'No records match' }).waitFor();
  await page.selectOption('#usage-filters select[name="status"]', '2xx');
  await page.selectOption('#usage-filters select[name="range"]', '1h');
  await page.click('#usage-filters button[type="submit"]');
  await page.waitForURL(/#usage\?.*status=2xx/);
  await row.waitFor();
  check((await page.locator('#usage-table tbody tr').count()) === 1, 'the key filter shows other keys\' records');

  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#usage-csv')]);
  const csv = readFileSync(await download.path(), 'utf8');
  const lines = csv.trim().split('\n');
  check(lines[0].startsWith('ts,request_id,client_request_id,key'), `not the usage CSV: ${lines[0]}`);
  check(lines.length === 2 && lines[1].includes(usageRecord.request_id), `the CSV is not the filtered set: ${csv}`);

  // A custom time range starting tomorrow matches nothing, and is linkable as RFC 3339.
  const tomorrow = new Date(Date.now() + 86_400_000);
  const pad = (n) => String(n).padStart(2, '0');
  await page.selectOption('#usage-filters select[name="range"]', 'custom');
  await page.fill('#usage-filters input[name="since"]', `${tomorrow.getFullYear()}-${pad(tomorrow.getMonth() + 1)}-${pad(tomorrow.getDate())}T00:00`);
  await page.click('#usage-filters button[type="submit"]');
  await page.waitForURL(/#usage\?.*range=custom.*since=\d{4}-\d\d-\d\dT[\d%A:.]+Z/);
  await view('usage').locator('.empty').filter({ hasText: 'No records match' }).waitFor();

  // Paging, one record per page, over the first key's two requests (newest first).
  const ids = [`page-a-${RUN}`, `page-b-${RUN}`];
  for (const id of ids) check((await chat(FIRST_KEY, id)).status === 200, 'a request with the first key failed');
  await until('both paging records', async () => (await admin('/admin/usage?key=default')).data.length === 2);
  await page.goto(`${BASE}/console#usage?key=default&limit=1`);
  const firstPage = view('usage').locator('#usage-table tbody tr');
  await firstPage.filter({ hasText: ids[1] }).waitFor();
  check((await firstPage.count()) === 1, 'a page of one shows more records');
  check(await page.locator('#usage-prev').isDisabled(), '"Newer" is enabled on the first page');
  await page.click('#usage-next');
  await page.waitForURL(/offset=1/);
  await view('usage').locator('#usage-table tbody tr').filter({ hasText: ids[0] }).waitFor();
  check(await page.locator('#usage-next').isDisabled(), '"Older" is enabled on the last page');
  check(await page.locator('#usage-prev').isEnabled(), '"Newer" is disabled on the second page');
});

step('the Keys view shows the spend and the new balance, and tops up credit', async () => {
  await open('keys');
  const row = keyRow(KEY_NAME);
  await row.waitFor();
  const balance = num(await row.locator('td.balance').textContent());
  const spent = num(await row.locator('td.spent').textContent());
  check(near(spent, usageRecord.cost), `spent shows ${spent}, the record cost ${usageRecord.cost}`);
  check(near(balance, CREDIT - usageRecord.cost), `balance shows ${balance}, expected ${CREDIT - usageRecord.cost}`);
  await screenshot('keys');

  // A wrong amount is refused next to the button, without a call.
  await row.locator('input[name="amount"]').fill('-5');
  await row.locator('.top-up button').click();
  await row.locator('.error').filter({ hasText: 'amount' }).waitFor();
  await row.locator('input[name="amount"]').fill('500');
  await row.locator('.top-up button').click();
  const want = CREDIT + 500 - usageRecord.cost;
  await page.waitForFunction(
    ([name, value]) => [...document.querySelectorAll('#keys-table tbody tr')].some(
      (tr) => tr.querySelector('.key-name')?.textContent === name && Math.abs(Number(tr.querySelector('td.balance').textContent.replace(/,/g, '')) - value) < 0.005,
    ),
    [KEY_NAME, want],
  );
  const { data } = await admin('/admin/keys');
  check(data.find((k) => k.name === KEY_NAME).credit === CREDIT + 500, 'the credit was not topped up');
});

step('a daily budget set in the Keys view refuses with its reset time, and removing it lifts it', async () => {
  const row = keyRow(KEY_NAME);
  await row.locator('details.key-settings summary').click();
  await row.locator('input[name="budget"]').fill('0');
  await row.locator('select[name="period"]').selectOption('daily');
  await row.locator('button.set-budget').click();
  await keyRow(KEY_NAME).locator('td.budget').filter({ hasText: 'daily' }).waitFor();
  const refused = await chat(newKey);
  check(refused.status === 429, `over budget got ${refused.status}`);
  const message = refused.body.error.message;
  check(message.includes('daily budget') && message.includes('resets at'), `the 429 does not say when it resets: ${message}`);
  const again = keyRow(KEY_NAME);
  await again.locator('details.key-settings summary').click();
  await again.locator('input[name="budget"]').fill('');
  await again.locator('button.set-budget').click();
  await keyRow(KEY_NAME).locator('td.budget').filter({ hasText: 'none' }).waitFor();
  const ok = await chat(newKey);
  check(ok.status === 200, `without the budget got ${ok.status}`);
});

step("a key's page shows its spend, budget, limits and recent records; the Keys table searches and shows hints", async () => {
  await open('keys');
  const row = keyRow(KEY_NAME);
  check(/^tg_\w{4}…$/.test(await row.locator('.key-hint').textContent()), 'no key hint in the table');
  check(!(await row.textContent()).includes(newKey), 'the key itself is in the table');
  check((await row.locator('td.last-used').textContent()) !== 'never', 'the key shows no last use');
  await page.fill('#keys-table-search, input[name="key-search"]', 'no-such-key-anywhere');
  await row.waitFor({ state: 'detached' });
  await page.fill('input[name="key-search"]', KEY_NAME);
  await keyRow(KEY_NAME).waitFor();
  await keyRow(KEY_NAME).locator('a.key-name').click();
  const facts = page.locator('#key-facts');
  await facts.waitFor();
  check((await facts.textContent()).includes('default'), "the key's page does not name its group");
  const records = page.locator('#key-records tbody tr');
  check((await records.count()) >= 2, "the key's page lists no records");
  check((await page.locator('#key-records').textContent()).includes('insufficient_quota'), 'the refusal is not among the records');
  check((await page.locator('#hourly-chart g.hour').count()) === 168, "the key's chart is not 7 days of hours");
  await screenshot('key-page');
  await open('keys');
});

step('a record shows every kind of token: cache reads, writes by lifetime, at list prices', async () => {
  // The fake Anthropic upstream reports 1,200 uncached input tokens, 30,000 cache reads, 2,000 5-minute and
  // 3,000 1-hour cache writes and 400 output tokens; claude-cached takes Claude Haiku 5.5's list prices
  // (0.1 / reads 0.01 / 5m writes 0.125 / 1h writes 0.2 / output 0.5 per 1M tokens): 0.00147.
  const res = await fetch(`${BASE}/v1/messages`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${newKey}`, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude-cached', max_tokens: 1000, messages: [{ role: 'user', content: 'Hello, cache' }] }),
  });
  check(res.status === 200, `the cached request failed: ${res.status} ${await res.text()}`);
  const id = res.headers.get('x-request-id');
  const rec = await until(`the usage record of ${id}`, async () => (await admin(`/admin/usage?request_id=${id}`)).data[0]);
  const kinds = [rec.input_tokens, rec.cached_input_tokens, rec.cache_write_5m_tokens, rec.cache_write_1h_tokens, rec.output_tokens];
  check(JSON.stringify(kinds) === '[36200,30000,2000,3000,400]', `the record's kinds: ${JSON.stringify(rec)}`);
  check(rec.cost === 0.00147, `the record costs ${rec.cost}, not the list price 0.00147`);

  await page.goto(`${BASE}/console#usage?request_id=${id}`);
  const row = page.locator(`#usage-table tbody tr[data-request-id="${id}"]`);
  await row.waitFor();
  const input = await row.locator('td.input-tokens').textContent();
  for (const part of ['36,200', '30,000 cache reads', '2,000 5m cache writes', '3,000 1h cache writes']) {
    check(input.includes(part), `the Usage row's input shows no "${part}": ${input}`);
  }
  check((await row.locator('td.cost').textContent()).includes('0.001470'), `the Usage row shows another cost: ${await row.textContent()}`);
  check((await page.locator('#usage-totals').textContent()).includes('3,000 1h cache writes'), 'the totals do not break the tokens down');
  await screenshot('usage-breakdown');

  await open('keys');
  await page.fill('input[name="key-search"]', KEY_NAME);
  await keyRow(KEY_NAME).locator('a.key-name').click();
  const keyRecord = page.locator(`#key-records tbody tr[data-request-id="${id}"]`);
  await keyRecord.waitFor();
  const keyInput = await keyRecord.locator('td.input-tokens').textContent();
  check(keyInput.includes('30,000 cache reads') && keyInput.includes('3,000 1h cache writes'), `the key's page shows no breakdown: ${keyInput}`);

  await open('models');
  const card = page.locator('article.model-card[data-model="claude-cached"]');
  await card.waitFor();
  const source = await card.locator('.price-source').textContent();
  check(source.includes('list price') && source.includes('claude-haiku-5-5'), `the model is not marked as at list price: ${source}`);
  check((await card.locator('dd.cache-write-price').textContent()).includes('0.125'), 'the 5-minute write price is not shown exactly');
  check((await card.locator('dd.cache-write-1h-price').textContent()).includes('0.20'), 'the 1-hour write price is not shown');
  check((await card.locator('dd.tier-prices').textContent()).includes('5m writes 0.625'), 'the long-context tier is not shown');
  await open('keys');
});

step('rotating a key shows the new one once (copy falls back to selecting it); the old one stops working', async () => {
  const row = keyRow(KEY_NAME);
  await row.locator('button.rotate').click();
  await page.locator('dialog.confirm-dialog[open] button[data-confirm="yes"]').click();
  const dialog = page.locator('dialog.secret-dialog[open]');
  await dialog.waitFor();
  const rotated = (await dialog.locator('#new-key').textContent()).trim();
  check(/^tg_[A-Za-z0-9]{40}$/.test(rotated) && rotated !== newKey, 'no new key after rotation');
  // Where the Clipboard API refuses (plain HTTP on another host, denied permission), Copy selects the key.
  await page.evaluate(() => {
    navigator.clipboard.writeText = () => Promise.reject(new Error('denied'));
  });
  await dialog.locator('#copy-key').click();
  await dialog.locator('[role="status"]').filter({ hasText: 'Selected' }).waitFor();
  check((await page.evaluate(() => window.getSelection().toString())) === rotated, 'the fallback did not select the key');
  await dialog.getByRole('button', { name: 'Done' }).click();
  await dialog.waitFor({ state: 'detached' });
  check((await chat(newKey)).status === 401, 'the old key still works after rotation');
  check((await chat(rotated)).status === 200, 'the rotated key does not work');
  newKey = rotated;
});

step('revoking a key in the UI refuses its next request (401)', async () => {
  const row = keyRow(KEY_NAME);
  await row.locator('button.revoke').click();
  const confirm = page.locator('dialog.confirm-dialog[open]');
  await confirm.waitFor();
  await confirm.getByRole('button', { name: 'Cancel' }).click();
  await confirm.waitFor({ state: 'detached' });
  check((await chat(newKey)).status === 200, 'cancelling the confirmation revoked the key');
  await row.locator('button.revoke').click();
  await page.locator('dialog.confirm-dialog[open] button[data-confirm="yes"]').click();
  await row.locator('td.status').filter({ hasText: 'revoked' }).waitFor();
  const r = await chat(newKey);
  check(r.status === 401, `a revoked key got ${r.status}`);
});

step('a revoked key can be enabled again, then deleted for good', async () => {
  const row = keyRow(KEY_NAME);
  await row.locator('button.enable').click();
  await row.locator('td.status').filter({ hasNotText: 'revoked' }).waitFor();
  const back = await chat(newKey);
  check(back.status === 200, `the enabled key got ${back.status}`);
  await row.locator('button.revoke').click();
  await page.locator('dialog.confirm-dialog[open] button[data-confirm="yes"]').click();
  await row.locator('button.delete').click();
  await page.locator('dialog.confirm-dialog[open] button[data-confirm="yes"]').click();
  await row.waitFor({ state: 'detached' });
  const r = await chat(newKey);
  check(r.status === 401, `a deleted key got ${r.status}`);
});

step('names are shown as text, never as HTML', async () => {
  await open('groups');
  await page.fill('#group-create input[name="name"]', HOSTILE);
  await page.fill('#group-create input[name="models"]', 'mock');
  await page.click('#group-create button[type="submit"]');
  const groupCell = page.locator('#groups-table .group-name').filter({ hasText: HOSTILE });
  await groupCell.waitFor();
  check((await groupCell.textContent()) === HOSTILE, 'the group name is not shown literally');

  await open('keys');
  await page.fill('#key-create input[name="name"]', HOSTILE);
  await page.selectOption('#key-create select[name="group"]', HOSTILE);
  await page.click('#key-create button[type="submit"]');
  const dialog = page.locator('dialog.secret-dialog[open]');
  await dialog.waitFor();
  check((await dialog.locator('.key-name').textContent()) === HOSTILE, 'the dialog does not show the name literally');
  const plaintext = (await dialog.locator('#new-key').textContent()).trim();
  await dialog.getByRole('button', { name: 'Done' }).click();
  // The row is found by its data attribute, so that a name rendered as HTML fails with what it showed.
  const shown = await (
    await page.waitForFunction((name) => {
      const tr = [...document.querySelectorAll('#keys-table tbody tr')].find((r) => r.dataset.key === name);
      return tr && [tr.querySelector('.key-name').textContent, tr.querySelector('.group-name').textContent];
    }, HOSTILE)
  ).jsonValue();
  check(shown[0] === HOSTILE, `the key name is shown as ${JSON.stringify(shown[0])}`);
  check(shown[1] === HOSTILE, `the group name is shown as ${JSON.stringify(shown[1])}`);
  // A request under that key puts the name in the Usage view and the overview's top keys too.
  const r = await chat(plaintext, HOSTILE);
  check(r.status === 200, `a request with the key named ${HOSTILE} got ${r.status}`);
  await until('its usage record', async () => (await admin(`/admin/usage?request_id=${r.requestId}`)).data.length === 1);
  await open('overview');
  await page.locator('#top-keys a').filter({ hasText: HOSTILE }).waitFor();
  await open('usage');
  const usageRow = page.locator(`#usage-table tbody tr[data-request-id="${r.requestId}"]`);
  await usageRow.waitFor();
  check((await usageRow.locator('.client-request-id').textContent()) === HOSTILE, 'the client request id is not shown literally');
  const images = await page.evaluate(() => document.querySelectorAll('img, [onerror]').length);
  check(images === 0, `${images} element(s) were made from a name`);
  check(dialogsSeen.length === 0, `the page opened dialogs: ${dialogsSeen.join(', ')}`);
});

step('creates and edits a group: models and limits (empty means no limit)', async () => {
  await open('groups');
  await page.fill('#group-create input[name="name"]', GROUP_NAME);
  await page.fill('#group-create input[name="models"]', 'mock');
  await page.fill('#group-create input[name="rpm"]', '60');
  await page.click('#group-create button[type="submit"]');
  const row = page.locator(`#groups-table tbody tr[data-group="${GROUP_NAME}"]`);
  await row.waitFor();
  check((await row.locator('td.rpm').textContent()) === '60', 'the new group has no rpm 60');

  await row.locator('button.edit').click();
  const editor = page.locator(`#groups-table tr.editor[data-editing="${GROUP_NAME}"]`);
  await editor.waitFor();
  await editor.locator('input[name="models"]').fill('mock, gpt-*');
  await editor.locator('input[name="rpm"]').fill('');
  await editor.locator('input[name="tpm"]').fill('abc');
  await editor.locator('button[type="submit"]').click();
  await editor.locator('.error').filter({ hasText: 'tpm: expected a whole number' }).waitFor();
  await editor.locator('input[name="tpm"]').fill('10000');
  await editor.locator('input[name="max_concurrent"]').fill('0');
  await editor.locator('button[type="submit"]').click();
  // The API's own message, next to the button.
  await editor.locator('.error').filter({ hasText: 'max_concurrent: expected a limit greater than 0' }).waitFor();
  await editor.locator('input[name="max_concurrent"]').fill('2');
  await editor.locator('input[name="budget"]').fill('25');
  await editor.locator('select[name="budget_period"]').selectOption('monthly');
  await screenshot('groups-editing');
  await editor.locator('button[type="submit"]').click();
  await row.locator('td.tpm').filter({ hasText: '10,000' }).waitFor();
  check((await row.locator('td.rpm').textContent()) === 'no limit', 'rpm is not shown as no limit');
  check((await row.locator('td.models').textContent()).includes('gpt-*'), 'the models were not updated');
  const { data } = await admin('/admin/groups');
  const g = data.find((x) => x.name === GROUP_NAME);
  check(g && g.rpm === null && g.tpm === 10000 && g.max_concurrent === 2, `the group was saved as ${JSON.stringify(g)}`);
  check(JSON.stringify(g.models) === '["mock","gpt-*"]', `models saved as ${JSON.stringify(g.models)}`);
  check(g.budget && g.budget.amount === 25 && g.budget.period === 'monthly', `the budget saved as ${JSON.stringify(g.budget)}`);
  check((await row.locator('td.budget').textContent()) === '25.00 monthly', 'the budget is not shown');
  await screenshot('groups');
});

step('disables and enables a model, reprices it, and checks upstreams', async () => {
  await open('models');
  const card = page.locator('article.model-card[data-model="mock"]');
  await card.waitFor();
  await card.locator('.availability time').first().waitFor(); // the last success is known
  check((await page.locator('#models-triage [data-stat="down"] .stat-value').textContent()) === '0', 'the triage summary counts a problem');
  await card.locator('button.toggle', { hasText: 'Disable' }).click();
  // Disabling asks first.
  await page.locator('dialog.confirm-dialog[open] button[data-confirm="yes"]').click();
  await card.locator('.badge', { hasText: 'disabled' }).waitFor();
  const refused = await chat(FIRST_KEY);
  check(refused.status === 404 && /disabled/.test(refused.body?.error?.message), `a disabled model answered ${refused.status}`);
  await card.locator('button.toggle', { hasText: 'Enable' }).click();
  await card.locator('.badge', { hasText: 'enabled' }).waitFor();
  check((await chat(FIRST_KEY)).status === 200, 'the enabled model refuses requests');

  await card.locator('button.edit-prices').click();
  await card.locator('.price-editor input[name="output_price"]').fill('3000000');
  await card.locator('.price-editor button[type="submit"]').click();
  await card.locator('dd.output-price').filter({ hasText: '3,000,000' }).waitFor();
  const { data } = await admin('/admin/models');
  check(data.find((m) => m.name === 'mock').output_price === 3000000, 'the price was not saved');

  await page.click('#probe-upstreams');
  await card.locator('td.probe .badge', { hasText: 'up' }).waitFor();
  // Each upstream shows its breaker state, as GET /admin/models reports it.
  await card.locator('td.breaker .badge', { hasText: 'closed' }).waitFor();
  const mock = (await admin('/admin/models')).data.find((m) => m.name === 'mock');
  check(mock.upstreams[0].breaker.state === 'closed', `breaker reported as ${JSON.stringify(mock.upstreams[0].breaker)}`);
  await screenshot('models');
});

step('the overview covers 7 and 30 days too, and Usage totals and searches what matches', async () => {
  await page.goto(`${BASE}/console#overview?range=30d`);
  await page.locator('#hourly-chart').waitFor();
  check((await page.locator('#hourly-chart g.hour').count()) === 30, 'the 30-day chart is not 30 days');
  await page.goto(`${BASE}/console#usage?q=${encodeURIComponent(KEY_NAME)}`);
  const totals = page.locator('#usage-totals');
  await totals.waitFor();
  const shown = await page.locator('#usage-table tbody tr').count();
  check((await totals.textContent()).includes(`${shown} requests`), `the totals do not count the ${shown} records shown: ${await totals.textContent()}`);
  const id = await page.locator('#usage-table .request-id').first().getAttribute('title');
  check(/^req_/.test(id) && !(await page.locator('#usage-table .request-id').first().textContent()).includes(id.slice(8, -4)), 'ids are not shortened with the full one on hover');
});

step('the overview shows the traffic, the hourly chart and the top keys', async () => {
  await open('overview');
  const requests = num(await page.locator('#totals-hour [data-stat="requests"] .stat-value').textContent());
  const { last_hour: lastHour } = await admin('/admin/overview');
  check(requests === lastHour.requests && requests >= 5, `the overview shows ${requests} requests, the API ${lastHour.requests}`);
  check((await page.locator('#hourly-chart g.hour').count()) === 24, 'the chart has no 24 hourly bars');
  const charted = await page.$$eval('#hourly-chart g.hour', (gs) => gs.reduce((n, g) => n + Number(g.dataset.requests), 0));
  const { hourly } = await admin('/admin/overview');
  const counted = hourly.reduce((n, h) => n + h.requests, 0);
  check(charted === counted && charted >= lastHour.requests, `the chart shows ${charted} requests, the API ${counted}`);
  check((await page.locator('#top-keys').textContent()).includes(KEY_NAME), 'the top keys miss the test key');
  await screenshot('overview');
  await page.setViewportSize({ width: 390, height: 800 });
  await page.locator('#nav a[data-view="usage"]').waitFor({ state: 'visible' });
  await screenshot('overview-narrow');
  await page.setViewportSize({ width: 1280, height: 900 });
});

step('a refused request shows in Usage with its reason, and the overview counts it and the 401s', async () => {
  const res = await fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${FIRST_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: `no-such-model-${RUN}`, messages: [{ role: 'user', content: 'x' }] }),
  });
  check(res.status === 404, `an unknown model got ${res.status}`);
  const refusedId = res.headers.get('x-request-id');
  const bad = await chat(`tg_${'0'.repeat(40)}`);
  check(bad.status === 401, `a wrong key got ${bad.status}`);
  await page.goto(`${BASE}/console#usage?status=4xx`);
  const row = page.locator(`#usage-table tr[data-request-id="${refusedId}"]`);
  await row.waitFor();
  check((await row.locator('.reason').textContent()) === 'model_not_found', 'the refusal shows no reason');
  check((await row.textContent()).includes('refused by tollgate'), 'the refusal names an upstream');
  await open('overview');
  const errors = await page.locator('#totals-hour [data-stat="error-rate"] .stat-note').textContent();
  check(!errors.startsWith('0 errors'), `the overview counts no errors: ${errors}`);
  const unauthorized = num(await page.locator('#totals-hour [data-stat="unauthorized"] .stat-value').textContent());
  check(unauthorized >= 1, `the overview shows ${unauthorized} 401s`);
});

step('a key moves to another group and gets an expiry; an unused group is deleted', async () => {
  await open('keys');
  const row = keyRow(HOSTILE);
  await row.locator('details.key-settings summary').click();
  await row.locator('select[name="move-group"]').selectOption(GROUP_NAME);
  await row.locator('button.move').click();
  await keyRow(HOSTILE).locator('.group-name').filter({ hasText: GROUP_NAME }).waitFor();
  const again = keyRow(HOSTILE);
  await again.locator('details.key-settings summary').click();
  await again.locator('input[name="expires"]').fill('2030-01-01T00:00');
  await again.locator('button.set-expiry').click();
  await keyRow(HOSTILE).locator('td.status').filter({ hasText: 'expires 2030-01-01 00:00' }).waitFor();
  // Back to default, so that the group has no key left and can be deleted.
  const back = keyRow(HOSTILE);
  await back.locator('details.key-settings summary').click();
  await back.locator('select[name="move-group"]').selectOption('default');
  await back.locator('button.move').click();
  await keyRow(HOSTILE).locator('.group-name').filter({ hasText: 'default' }).waitFor();
  await open('groups');
  const group = page.locator(`#groups-table tbody tr[data-group="${GROUP_NAME}"]`);
  await group.locator('button.delete').click();
  await page.locator('dialog.confirm-dialog[open] button[data-confirm="yes"]').click();
  await group.waitFor({ state: 'detached' });
});

step('cache hits: Usage filters them, Models and the overview show the hit rate', async () => {
  const ask = async () => {
    const res = await fetch(`${BASE}/v1/chat/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${FIRST_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-cached', max_tokens: 50, messages: [{ role: 'user', content: `cache ${RUN}` }] }),
    });
    check(res.status === 200, `mock-cached answered ${res.status}`);
    await res.json();
    return { cache: res.headers.get('x-tollgate-cache'), id: res.headers.get('x-request-id') };
  };
  const miss = await ask();
  const hit = await ask();
  check(miss.cache === 'miss' && hit.cache === 'hit', `miss then hit, got ${miss.cache} then ${hit.cache}`);
  // Usage: the filter keeps the hit (marked, at no cost) and leaves the miss out; "not hits" the other way.
  await open('usage');
  await page.fill('#usage-filters input[name="model"]', 'mock-cached');
  await page.selectOption('#usage-filters select[name="cache"]', 'hit');
  await page.click('#usage-filters button[type="submit"]');
  await page.waitForURL(/#usage\?.*cache=hit/);
  // The hash changes before the view is drawn again: wait for the drawing of the filtered query (the miss gone,
  // the hit shown), not for the unfiltered table still on the page.
  await page.waitForFunction(
    ([hitId, missId]) => {
      const section = document.querySelector('section[data-view="usage"][data-state="ready"]');
      return !!section && !!section.querySelector(`#usage-table tr[data-request-id="${hitId}"]`) && !section.querySelector(`#usage-table tr[data-request-id="${missId}"]`);
    },
    [hit.id, miss.id],
  );
  const rows = view('usage').locator('#usage-table tbody tr');
  check((await rows.count()) === 1, `the hit filter shows ${await rows.count()} rows`);
  check((await rows.first().getAttribute('data-request-id')) === hit.id, 'the row is not the hit');
  check(num(await rows.first().locator('td.cost').textContent()) === 0, 'a hit costs something');
  await screenshot('usage-cache-hits');
  await page.selectOption('#usage-filters select[name="cache"]', 'not_hit');
  await page.click('#usage-filters button[type="submit"]');
  await page.waitForURL(/#usage\?.*cache=not_hit/);
  await view('usage').locator(`#usage-table tbody tr[data-request-id="${miss.id}"]`).waitFor();
  check((await view('usage').locator('#usage-table tbody tr .cache-hit').count()) === 0, '"not hits" shows a hit');
  // Models: the cached model's card says how long answers are kept and its hit rate.
  await open('models');
  const card = page.locator('article.model-card[data-model="mock-cached"] section.answer-cache');
  await card.waitFor();
  const rate = await card.locator('[data-cache-stat="hit-rate"]').textContent();
  check(rate.startsWith('50%') && rate.includes('1 hit,') && rate.includes('1 miss,'), `the model's hit rate: ${rate}`);
  check((await card.locator('[data-cache-stat="ttl"]').textContent()).includes('600 s'), 'the TTL is not shown');
  check((await page.locator('article.model-card[data-model="mock"] section.answer-cache').count()) === 0, 'an uncached model shows a cache');
  await screenshot('models-cache');
  // The overview: the share of requests to cached models answered from the cache.
  await open('overview');
  const tile = page.locator('#totals-hour [data-stat="cache-hit-rate"]');
  await tile.waitFor();
  check((await tile.locator('.stat-value').textContent()) === '50%', `overview hit rate: ${await tile.textContent()}`);
});

step('the Audit view lists the changes made in this run, newest first, without any key', async () => {
  await open('audit');
  const table = page.locator('#audit-table');
  await table.waitFor();
  const text = await table.textContent();
  for (const action of ['key.created', 'key.credited', 'key.rotated', 'key.revoked', 'key.enabled', 'key.deleted', 'key.budget_set', 'key.moved', 'key.expiry_set', 'group.created', 'group.changed', 'group.deleted', 'model.disabled', 'model.enabled', 'model.repriced']) {
    check(text.includes(action), `the audit view misses ${action}`);
  }
  check(text.includes(`key ${KEY_NAME}`), 'the audit view does not name the test key');
  check(!text.includes(newKey) && !text.includes('sha256:'), 'a key or its hash is in the audit view');
  const first = await table.locator('tbody tr').first().getAttribute('data-action');
  check(first !== null, 'the audit rows carry their action');
  await screenshot('audit');
});

step('the overview\'s range links are separate controls, and the cost axis reads small amounts', async () => {
  await open('overview');
  const boxes = await page.$$eval('.range-picker a', (as) => as.map((a) => a.getBoundingClientRect()).map((r) => [r.left, r.right]));
  check(boxes.length === 3, `${boxes.length} range links`);
  for (let i = 1; i < boxes.length; i++) check(boxes[i][0] - boxes[i - 1][1] >= 4, `range links ${i - 1} and ${i} touch: ${JSON.stringify(boxes)}`);
  check((await page.locator('.range-picker a.active').count()) === 1, 'no range marked as chosen');
  // Costs below one credit an hour: the cost axis's ticks read apart, not 0, 0, 0.
  const ticks = await page.evaluate(async () => {
    const { seriesChart } = await import('/console/chart.js');
    const hours = Array.from({ length: 24 }, (_, i) => ({ hour: 1796600000 + i * 3600, requests: i, errors: 0, tokens: 10, cost: 0.0004 * i }));
    const fig = seriesChart(hours, 3600);
    return Array.from(fig.querySelectorAll('text.axis-cost')).map((t) => t.textContent).filter((t) => t !== '');
  });
  const labels = ticks.filter((t) => /\d/.test(t));
  check(new Set(labels).size === labels.length && labels.length === 5, `cost axis ticks ${JSON.stringify(ticks)}`);
});

step('signing out forgets the token', async () => {
  await page.click('#sign-out');
  await page.locator('#sign-in-form').waitFor();
  check((await page.evaluate(() => sessionStorage.length)) === 0, 'the token is still stored');
  await page.reload();
  await page.locator('#sign-in-form').waitFor();
  check(await page.locator('#shell').isHidden(), 'the console opened after signing out');
});

step('no script error or CSP violation in the browser', async () => {
  check(problems.length === 0, problems.join('\n'));
});

// --------------------------------------------------------------------------------------------- runner

async function main() {
  const started = Date.now();
  context = await chromium.launchPersistentContext(mkdtempSync(join(TMP, 'chromium-profile-')), {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 900 },
    acceptDownloads: true,
  });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: BASE });
  page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(15_000);
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    // Refused calls (wrong token, closed API, invalid input) are part of the test; Chromium logs each as a
    // failed resource. Anything else logged as an error (script errors, CSP violations) fails the run.
    if (m.type() === 'error' && !/^Failed to load resource: the server responded with a status of 4\d\d/.test(m.text())) {
      problems.push(`console error: ${m.text()}`);
    }
  });
  page.on('dialog', (d) => {
    dialogsSeen.push(`${d.type()}: ${d.message()}`);
    d.dismiss().catch(() => {});
  });

  let passed = 0;
  let failed = 0;
  for (const [i, s] of steps.entries()) {
    const t0 = Date.now();
    try {
      await s.fn();
      passed++;
      console.log(`ok ${i + 1} - ${s.name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`not ok ${i + 1} - ${s.name}\n  ${String(e.message).split('\n').join('\n  ')}`);
      await page.screenshot({ path: join(ARTIFACTS, 'failure.png'), fullPage: true }).catch(() => {});
      console.log(`  screenshot of the page: ${join(ARTIFACTS, 'failure.png')}`);
      break;
    }
  }
  await context.close();
  const skipped = steps.length - passed - failed;
  console.log(`console test took ${((Date.now() - started) / 1000).toFixed(1)} s`);
  console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(`console test: ${e.stack || e}`);
  process.exit(1);
});
