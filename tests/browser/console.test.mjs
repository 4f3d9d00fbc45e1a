// The web console in a real browser (Debian's chromium, driven by
// playwright-core) against real delayd servers on ephemeral loopback ports:
// every page renders with real data, a job found by key is retried from
// it, a timer created in it fires, a bulk retry of the dead letters of one
// error completes, the token prompt refuses a wrong token, read-only hides
// the actions, the cluster page shows two nodes sharing a PostgreSQL (when
// DELAYD_TEST_PG_FILE names the suite's), and a screenshot of every page is
// written to SCREENSHOT_DIR.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const BIN = process.env.DELAYD_BIN;
const SHOTS = process.env.SCREENSHOT_DIR || path.join(os.tmpdir(), 'delayd-console-screenshots');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
assert.ok(BIN, 'DELAYD_BIN names the delayd binary');
fs.mkdirSync(SHOTS, { recursive: true });
for (const f of fs.readdirSync(SHOTS)) if (f.endsWith('.png')) fs.rmSync(path.join(SHOTS, f));  // this run's only

const servers = [];
let browser;
let pgAdmin = '';  // the suite's PostgreSQL, for the cluster page
const clusterDb = `console_cluster_${process.pid}`;

async function waitFor(what, fn, ms = 10000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise(r => setTimeout(r, 50));
  }
}

// delayd on ephemeral ports in a fresh data dir; resolves once it serves.
async function startDelayd(extra = [], token = '') {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'delayd-console-'));
  const proc = spawn(BIN, ['--data-dir', dir, '--beanstalk', '127.0.0.1:0', '--http', '127.0.0.1:0', ...extra],
                     { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', d => { log += d; });
  const port = await waitFor('delayd to listen', () => (/http=127\.0\.0\.1:(\d+)/.exec(log) || [])[1]);
  const base = `http://127.0.0.1:${port}`;
  const api = async (method, p, body, extra = {}) => {
    const headers = { 'Content-Type': 'application/json', ...extra };
    if (token) headers.Authorization = `Bearer ${token}`;
    const res = await fetch(base + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, json: text && (res.headers.get('content-type') || '').includes('json') ? JSON.parse(text) : text };
  };
  const server = { base, api, proc, dir, stop: () => proc.kill('SIGTERM') };
  servers.push(server);
  return server;
}

// Push targets: /gone answers 410 (a dead letter at once); others 200.
const received = [];
const receiver = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    received.push({ path: req.url, key: req.headers['delayd-key'] || '', traceparent: req.headers.traceparent || '' });
    res.writeHead(req.url === '/gone' ? 410 : 200).end('ok');
  });
});
await new Promise(r => receiver.listen(0, '127.0.0.1', r));
const target = p => `http://127.0.0.1:${receiver.address().port}${p}`;

const pageErrors = [];
async function newPage(server, viewport = { width: 1280, height: 800 }) {
  const context = await browser.newContext({ viewport, colorScheme: 'light' });
  const page = await context.newPage();
  page.on('pageerror', e => pageErrors.push(`${e.message}`));
  // Answers the pages expect (401 before the token, 404 of /v1/cluster on one
  // node, 400 of a schedule half typed) are logged by the browser as failed
  // loads; anything else logged as an error is a fault.
  page.on('console', m => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) pageErrors.push(m.text());
  });
  await page.goto(`${server.base}/`);
  return page;
}
// Signs in with `token` at the prompt, then opens the page of the job with
// key `key` in topic t.
async function signInAndOpenJob(page, server, token, key) {
  await page.getByLabel('API token', { exact: true }).fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await heading(page, 'Overview');
  const job = (await server.api('GET', `/v1/topics/t/keys/${key}`)).json;
  await page.goto(`${server.base}/#/jobs/${job.id}`);
  await heading(page, `Job ${job.id}`);
}
const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
const nav = (page, name) => page.getByRole('navigation').getByRole('link', { name, exact: true });
const heading = (page, name) => page.getByRole('heading', { level: 1, name }).waitFor();

try {
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  const d = await startDelayd();

  // Data: delayed orders, dead letters of two errors (one with a key).
  assert.equal((await d.api('PUT', '/v1/topics/orders', { rate_limit_per_s: 50 })).status, 200);
  assert.equal((await d.api('POST', '/v1/topics/orders/jobs', [
    { key: 'order-1', delay: '5m', body: { order: 1 } }, { key: 'order-2', delay: '20m', body: { order: 2, total: 1.5 } },
    { key: 'order-3', delay: '2h' }])).status, 201);
  const gone = { url: target('/gone') };
  assert.equal((await d.api('POST', '/v1/topics/hooks/jobs', [
    { target: gone }, { target: gone }, { key: 'pay-7', target: gone },
    { target: { url: 'http://127.0.0.1:1/refused' }, retry: { max_attempts: 1 } }])).status, 201);
  await waitFor('4 dead letters', async () => (await d.api('GET', '/v1/topics/hooks')).json.counts.buried === 4);

  // Overview: real counts, and live figures without a reload.
  const page = await newPage(d);
  await heading(page, 'Overview');
  const stats = (await d.api('GET', '/v1/stats')).json;
  await page.getByText('dead letters (buried)').waitFor();
  const card = label => page.locator('.card', { hasText: label }).locator('.n');
  assert.equal(await card('delayed').first().innerText(), String(stats.jobs.delayed));
  assert.equal(await card('dead letters (buried)').innerText(), '4');
  await waitFor('the throughput figures to refresh by themselves',
    async () => (await card('submitted / s').innerText()) !== '-');
  await page.getByText(/jobs due in the next 60 minutes/).waitFor();
  await shot(page, 'overview');

  // Keyboard: the nav is reachable with Tab and followed with Enter.
  await page.keyboard.press('Tab');  // the skip link
  for (let i = 0; i < 8; ++i) {
    await page.keyboard.press('Tab');
    if (await page.evaluate(() => document.activeElement.textContent) === 'Topics') break;
  }
  await page.keyboard.press('Enter');
  await heading(page, 'Topics');
  await page.getByRole('link', { name: 'orders' }).waitFor();
  await shot(page, 'topics');

  // A topic: pause, resume and edit its settings.
  await page.getByRole('link', { name: 'orders' }).click();
  await heading(page, 'Topic orders');
  await page.getByRole('button', { name: 'Pause' }).click();
  await page.getByText('Paused.').waitFor();
  assert.equal((await d.api('GET', '/v1/topics/orders')).json.paused, true);
  await page.getByRole('button', { name: 'Resume' }).click();
  await page.getByText('Resumed.').waitFor();
  assert.equal((await d.api('GET', '/v1/topics/orders')).json.paused, false);
  await page.getByLabel(/target, retry/).fill('{"rate_limit_per_s": 25}');
  await page.getByRole('button', { name: 'Save settings' }).click();
  await page.getByText('Saved.').waitFor();
  assert.equal((await d.api('GET', '/v1/topics/orders')).json.rate_limit_per_s, 25);
  await shot(page, 'topic');

  // Jobs: found by key, then retried from its page.
  await nav(page, 'Jobs').click();
  await heading(page, 'Jobs');
  await page.getByLabel('Topic', { exact: true }).fill('hooks');
  await page.getByLabel('Key (with topic)').fill('pay-7');
  await page.getByRole('button', { name: 'Search' }).click();
  const pay = (await d.api('GET', '/v1/topics/hooks/keys/pay-7')).json;
  await page.getByRole('link', { name: String(pay.id), exact: true }).click();
  await heading(page, `Job ${pay.id}`);
  await page.getByText('HTTP 410').first().waitFor();
  await page.getByRole('row').filter({ hasText: 'target kind' }).filter({ hasText: 'http' }).waitFor();
  await shot(page, 'job');
  const before = received.filter(r => r.key === 'pay-7').length;
  await page.getByRole('button', { name: 'Retry' }).click();
  await waitFor('the retried job to be delivered again', () => received.filter(r => r.key === 'pay-7').length === before + 1);
  await waitFor('its second attempt recorded', async () => (await d.api('GET', `/v1/jobs/${pay.id}/attempts`)).json.attempts.length === 2);

  // A job submitted with a W3C trace context: its page shows the trace id,
  // and each attempt the parent id it sent (the receiver's span's parent).
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const traced = (await d.api('POST', '/v1/topics/traced/jobs', { key: 'traced', target: { url: target('/ok') } },
    { traceparent: `00-${traceId}-00f067aa0ba902b7-01`, tracestate: 'rojo=1' })).json;
  await waitFor('the traced job to be done', async () => (await d.api('GET', `/v1/jobs/${traced.id}`)).json.state === 'done');
  const sent = received.find(r => r.key === 'traced');
  await page.goto(`${d.base}/#/jobs/${traced.id}`);
  await heading(page, `Job ${traced.id}`);
  await page.getByRole('row').filter({ hasText: 'trace id' }).filter({ hasText: traceId }).waitFor();
  await page.getByRole('cell', { name: sent.traceparent.slice(36, 52) }).waitFor();
  await shot(page, 'job-traced');

  // A search over the list, with its filters.
  await page.goto(`${d.base}/#/jobs?topic=orders&key_prefix=order-`);
  await page.getByRole('cell', { name: 'order-3' }).waitFor();
  assert.equal(await page.locator('tbody tr').count(), 3, page.url() + await page.locator('main').innerText());
  // By a field of the body, typed into the form.
  await page.getByLabel('Body field').fill('order');
  await page.getByLabel('Body value').fill('2');
  await page.getByRole('button', { name: 'Search' }).click();
  await page.waitForURL(/body_field=order&body_value=2/);
  // order-2 was in the list before the search too: wait for the list to change.
  await waitFor('the search by a body field to list one job', async () => (await page.locator('tbody tr').count()) === 1);
  await page.getByRole('cell', { name: 'order-2' }).waitFor();
  assert.doesNotMatch(await page.locator('main').innerText(), /^(null|undefined)$/m);
  await shot(page, 'jobs-by-body');
  // An operator parks a delayed job (bury) and brings it back (kick).
  const o3 = (await d.api('GET', '/v1/topics/orders/keys/order-3')).json;
  await page.goto(`${d.base}/#/jobs/${o3.id}`);
  await heading(page, `Job ${o3.id}`);
  await page.getByRole('button', { name: 'Bury' }).click();
  await page.getByText('Bury: done.').waitFor();
  assert.equal((await d.api('GET', `/v1/jobs/${o3.id}`)).json.state, 'buried');
  await page.getByRole('button', { name: 'Kick' }).click();
  await page.getByText('Kick: done.').waitFor();
  assert.equal((await d.api('GET', `/v1/jobs/${o3.id}`)).json.state, 'ready');

  // Dead letters: grouped by error; a bulk retry of the 410s completes.
  // The groups are read from the store, which may be a commit behind the counts.
  await waitFor('pay-7 dead again', async () => (await d.api('GET', '/v1/dead-letters')).json.jobs === 4);
  await nav(page, 'Dead letters').click();
  await heading(page, 'Dead letters');
  await page.getByText('4 buried jobs in 2 groups by last error.').waitFor();  // the server's groups
  const group = page.getByRole('row').filter({ hasText: 'HTTP 410' });
  await group.first().waitFor();
  await shot(page, 'dead-letters');
  const deliveries = received.length;
  await group.first().getByRole('button', { name: 'Retry all matching' }).click();
  await page.getByText(/Bulk retry \d+: done, 3 matched, 3 applied/).waitFor();
  const ops = (await d.api('GET', '/v1/bulk')).json.operations;
  assert.equal(ops[0].state, 'done');
  assert.equal(ops[0].applied, 3);
  assert.equal(ops[0].filter.error.includes('410'), true);
  await waitFor('the three redelivered', () => received.length === deliveries + 3);
  await shot(page, 'dead-letters-after-bulk');

  // Timers: a timer made in the console, with its live preview, fires.
  await nav(page, 'Timers').click();
  await heading(page, 'Timers');
  await page.getByLabel('Name').fill('tick');
  await page.getByLabel('Topic').fill('ticks');
  await page.getByLabel('Time zone').fill('Asia/Shanghai');
  await page.getByLabel(/^Schedule/).fill('@every 1s');
  await waitFor('the preview', async () => (await page.locator('#preview li').count()) === 5);
  assert.match(await page.locator('#preview li').first().innerText(), /Asia\/Shanghai/);
  await shot(page, 'timers');
  await page.getByRole('button', { name: 'Create timer' }).click();
  await heading(page, 'Timer tick');
  await waitFor('the timer to fire', async () => {
    const t = (await d.api('GET', '/v1/topics/ticks')).json;
    return t.counts && t.counts.ready + t.counts.delayed >= 1;
  });
  await page.getByRole('cell', { name: 'created' }).first().waitFor({ timeout: 10000 });  // a fire's job, after a refresh
  // Editing shows the next fires as edited, in the zone typed.
  await page.getByLabel('Time zone', { exact: true }).fill('UTC');
  await page.getByLabel('Schedule', { exact: true }).fill('0 9 * * *');
  // The preview answers each keystroke; the one for the whole edit comes last
  // (five fires of the old schedule in the new zone may show first).
  await waitFor('the edit preview', async () => (await page.locator('#edit-preview li').count()) === 5 &&
    /09:00:00 UTC/.test(await page.locator('#edit-preview li').first().innerText()));
  await shot(page, 'timer');
  await page.getByRole('button', { name: 'Save' }).click();
  await waitFor('the new schedule', async () => (await d.api('GET', '/v1/timers?limit=10')).json.timers[0].schedule === '0 9 * * *');
  await page.getByRole('button', { name: 'Pause' }).click();
  await waitFor('the timer paused', async () => (await d.api('GET', '/v1/timers?limit=10')).json.timers[0].active === false);

  // Cluster: a single node says so.
  await nav(page, 'Cluster').click();
  await heading(page, 'Cluster');
  await page.getByText(/single node/).waitFor();
  await shot(page, 'cluster');

  // Dark, and a phone's width without sideways scrolling.
  await nav(page, 'Overview').click();
  await heading(page, 'Overview');
  await page.getByRole('button', { name: /light and dark/ }).click();
  assert.equal(await page.evaluate(() => getComputedStyle(document.body).backgroundColor), 'rgb(13, 17, 23)');
  await shot(page, 'overview-dark');
  await page.setViewportSize({ width: 390, height: 844 });
  await page.getByRole('button', { name: /light and dark/ }).click();
  assert.equal(await page.evaluate(() => getComputedStyle(document.body).backgroundColor), 'rgb(255, 255, 255)');
  assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1),
            'no sideways scrolling at 390 px');
  await shot(page, 'overview-phone');

  // A token: the console asks, refuses a wrong one, works with the right one.
  // Read-only: no actions offered.
  const t = await startDelayd(['--api-token', 's3cret', '--console', 'read-only'], 's3cret');
  assert.equal((await t.api('POST', '/v1/topics/t/jobs', { key: 'k', delay: '1h' })).status, 201);
  const guarded = await newPage(t);
  const dialog = guarded.getByRole('dialog', { name: 'This server needs its API token' });
  await dialog.waitFor();
  await shot(guarded, 'token-prompt');
  await guarded.getByLabel('API token', { exact: true }).fill('wrong');
  await guarded.getByRole('button', { name: 'Sign in' }).click();
  await guarded.getByText('The server refused this token.').waitFor();
  await shot(guarded, 'token-refused');
  await signInAndOpenJob(guarded, t, 's3cret', 'k');
  assert.equal(await guarded.getByRole('button', { name: 'Run now' }).isVisible(), false, 'read-only: no actions');
  assert.equal(await guarded.getByRole('button', { name: 'Delete' }).isVisible(), false);
  await shot(guarded, 'job-read-only');

  // The read-only token: the console signs in with it and offers no actions,
  // on a server whose console is otherwise full.
  const ro = await startDelayd(['--api-token', 'full-secret', '--api-read-token', 'read-secret'], 'full-secret');
  assert.equal((await ro.api('POST', '/v1/topics/t/jobs', { key: 'r', delay: '1h' })).status, 201);
  const reader = await newPage(ro);
  await reader.getByRole('dialog', { name: 'This server needs its API token' }).waitFor();
  await signInAndOpenJob(reader, ro, 'read-secret', 'r');
  assert.equal(await reader.getByRole('button', { name: 'Run now' }).isVisible(), false,
               'the read-only token: no actions');
  await reader.getByText('read-only access').waitFor();

  // A write token: acts on jobs, but a topic's settings and pause are the
  // admin token's, so the topic page offers neither.
  const wr = await startDelayd(['--api-token', 'admin-secret', '--api-write-token', 'write-secret'], 'admin-secret');
  assert.equal((await wr.api('POST', '/v1/topics/t/jobs', { key: 'w', delay: '1h' })).status, 201);
  const writer = await newPage(wr);
  await writer.getByRole('dialog', { name: 'This server needs its API token' }).waitFor();
  await signInAndOpenJob(writer, wr, 'write-secret', 'w');
  await writer.getByText('write access (no topic settings)').waitFor();
  await writer.getByRole('button', { name: 'Run now' }).click();
  await waitFor('the write token to run the job', async () =>
    (await wr.api('GET', '/v1/topics/t/keys/w')).json.state === 'ready');
  await writer.goto(`${wr.base}/#/topics/t`);
  await heading(writer, 'Topic t');
  assert.equal(await writer.getByRole('button', { name: 'Pause' }).isVisible(), false, 'write token: no pause');
  assert.equal(await writer.getByRole('button', { name: 'Save settings' }).isVisible(), false);
  await shot(writer, 'topic-write-token');

  // A page of another origin (a site the operator happens to open) tries
  // what a browser lets any page send without asking: a text/plain POST, and
  // a JSON one (which needs a CORS preflight delayd never grants). Nothing
  // happens to the server's jobs.
  const victim = await startDelayd();
  assert.equal((await victim.api('POST', '/v1/topics/orders/jobs', { key: 'o1', delay: '1h' })).status, 201);
  const attack = `<!doctype html><script>
    (async () => {
      const base = ${JSON.stringify(victim.base)};
      const tries = [
        fetch(base + '/v1/bulk', { method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' },
          body: JSON.stringify({ action: 'cancel', filter: { topic: 'orders' } }) }),
        fetch(base + '/v1/topics/evil/jobs', { method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' },
          body: JSON.stringify({ body: 1 }) }),
        fetch(base + '/v1/topics/evil/jobs', { method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ body: 2 }) }),
      ];
      await Promise.allSettled(tries);
      document.title = 'done';
    })();
  </script>`;
  const evil = http.createServer((req, res) => res.writeHead(200, { 'Content-Type': 'text/html' }).end(attack));
  await new Promise(res => evil.listen(0, '127.0.0.1', res));
  const evilPage = await (await browser.newContext()).newPage();
  await evilPage.goto(`http://127.0.0.1:${evil.address().port}/`);
  await waitFor('the attack page to finish', async () => (await evilPage.title()) === 'done');
  evil.close();
  assert.equal((await victim.api('GET', '/v1/topics/orders')).json.counts.delayed, 1, 'nothing cancelled');
  assert.equal((await victim.api('GET', '/v1/topics/evil')).status, 404, 'nothing created');

  // Off: no console at all.
  const off = await startDelayd(['--console', 'off']);
  assert.equal((await fetch(`${off.base}/`)).status, 404);
  assert.equal((await fetch(`${off.base}/console/console.js`)).status, 404);

  // Cluster: two nodes sharing the suite's PostgreSQL, when it has one.
  const pgFile = process.env.DELAYD_TEST_PG_FILE;
  if (pgFile) {
    pgAdmin = fs.readFileSync(pgFile, 'utf8').trim();
    execFileSync('psql', [pgAdmin, '-qc', `CREATE DATABASE ${clusterDb}`]);
    const uri = pgAdmin.slice(0, pgAdmin.lastIndexOf('/') + 1) + clusterDb;
    const n1 = await startDelayd(['--store', uri, '--cluster', '--node-id', 'n1']);
    await startDelayd(['--store', uri, '--cluster', '--node-id', 'n2']);
    await waitFor('both nodes to own shards', async () => {
      const v = (await n1.api('GET', '/v1/cluster')).json;
      return v.nodes && v.nodes.filter(n => n.live && n.shards_owned > 0).length === 2;
    }, 30000);
    const c = await newPage(n1);
    await c.goto(`${n1.base}/#/cluster`);
    await heading(c, 'Cluster');
    await c.getByText(/^This node: n1\./).waitFor();
    const nodes = c.locator('table').first().locator('tbody tr');
    await waitFor('two nodes in the table', async () => await nodes.count() === 2);
    assert.deepEqual((await nodes.locator('td:first-child').allInnerTexts()).sort(), ['n1', 'n2']);
    const owners = await c.locator('table').nth(1).locator('tbody td:first-child').allInnerTexts();
    assert.deepEqual(owners.sort(), ['n1', 'n2'], 'every shard owned by one of the two');
    await shot(c, 'cluster-two-nodes');
  } else {
    console.log('no DELAYD_TEST_PG_FILE: the cluster page of two nodes is not checked');
  }

  assert.deepEqual(pageErrors, [], 'no script errors in the pages');
  console.log(`console: every page rendered with real data; screenshots in ${SHOTS}: ` +
              fs.readdirSync(SHOTS).filter(f => f.endsWith('.png')).sort().join(' '));
} catch (e) {
  // What the page showed when it failed.
  for (const c of browser ? browser.contexts() : []) {
    for (const p of c.pages()) {
      console.error(`page ${p.url()}:\n${await p.locator('main').innerText().catch(() => '?')}`);
      await p.screenshot({ path: path.join(SHOTS, 'failure.png') }).catch(() => {});
    }
  }
  throw e;
} finally {
  if (browser) await browser.close();
  for (const s of servers) s.stop();
  receiver.close();
  if (pgAdmin) {
    await Promise.all(servers.map(s => new Promise(r => s.proc.exitCode !== null ? r() : s.proc.once('exit', r))));
    execFileSync('psql', [pgAdmin, '-qc', `DROP DATABASE IF EXISTS ${clusterDb} WITH (FORCE)`]);
  }
}
