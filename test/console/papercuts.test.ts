import { createServer, type Server, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { encodeCursor } from '../../src/console/search-data.js';
import { registerConsumer, waitForHorizon } from '../engine/support/feed.js';
import { screenshot, SKIP_REASON, skipWithoutChromium } from './browser.js';
import { binding, openHarness, type Harness } from './harness.js';

// The console's small failures, each in Chromium: an answer page that applied its action again
// on reload, consumer names that broke or faked the live figures, bad input answered as a
// database error, unlabelled fields, charts without text, a tenant-bound header without its
// tenants, a look-alike tenant.

vi.setConfig({ testTimeout: 240_000 });

let h: Harness;
const skip = skipWithoutChromium();
if (skip) process.stderr.write(`test/console: ${SKIP_REASON}\n`);

async function settle(tenant: string, keys: readonly string[]): Promise<void> {
  for (const key of keys) {
    const claim = await h.client.claim({ tenant, key, request: { n: 1 }, binding });
    if (claim.outcome !== 'acquired') throw new Error(`setup: ${claim.outcome}`);
    await h.client.complete(claim.attempt, { ok: key });
  }
}

/** A TCP proxy to the database that can be stopped: the console's database going away. */
async function databaseProxy(target: URL): Promise<{ url: string; stop: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = new Socket();
    sockets.add(client).add(upstream);
    upstream.connect(Number(target.port), target.hostname);
    client.pipe(upstream).pipe(client);
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const url = new URL(target);
  url.port = String((server.address() as { port: number }).port);
  url.hostname = '127.0.0.1';
  return {
    url: url.toString(),
    stop: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

describe.skipIf(skip)('console papercuts in Chromium', () => {
  beforeAll(async () => {
    h = await openHarness('console_papercuts');
  });
  afterAll(async () => {
    await h?.close();
  });

  it('reloading an answer page shows the answer again and applies nothing twice', async () => {
    await registerConsumer(h.su, 'audit-trail', { startAt: 'latest' });
    await settle('acme', ['reload-1', 'reload-2']);
    await waitForHorizon(h.su);
    const operator = await h.loginRole('reload', ['settle_admin']);
    const { page } = await h.signedIn(operator.url);
    await page.click('#feed-lanes form[action="/actions/reset-consumer"]:has(input[value="audit-trail"]) button');
    await page.click('#reset-form button[type=submit]');
    await page.click('#confirm-form button[type=submit]');
    const summary = await page.locator('#answer-summary').innerText();
    await page.reload();
    expect(await page.locator('#answer-summary').innerText()).toBe(summary);
    const { rows } = await h.su.query<{ n: number }>(
      `select count(*)::int as n from settle.admin_log where event = 'reset_consumer' and detail->>'consumer' = 'audit-trail'`,
    );
    expect(rows[0]?.n).toBe(1);
    // The answer has an address of its own (POST, redirect, GET).
    expect(page.url()).toMatch(/\/answer\?id=/);
  });

  it('live lag figures go to their own lanes, whatever a consumer is called', async () => {
    // A name built to land its figures in another consumer's cells, and one that breaks a selector.
    const forger = 'x"], [data-live="lag-events:ledger';
    await registerConsumer(h.su, 'ledger', { startAt: 'latest' });
    await registerConsumer(h.su, forger, { startAt: 'latest' });
    await registerConsumer(h.su, 'quote"breaker', { startAt: 'latest' });
    await settle('acme', ['live-1', 'live-2', 'live-3']);
    await waitForHorizon(h.su);
    // The forger and the breaker caught up; the ledger lags three events.
    for (const name of [forger, 'quote"breaker']) await h.su.query(`select settle.reset_consumer(name => $1)`, [name]);
    const operator = await h.loginRole('live', ['settle_admin']);
    const { page } = await h.signedIn(operator.url);
    const cells = page.locator('#feed-lanes td[data-live]');
    // Blank every live cell, then wait for the page's own poll (every 5 s) to fill them again.
    await page.evaluate(`for (const n of document.querySelectorAll('[data-live]')) n.textContent = '?'`);
    await expect
      .poll(() => page.evaluate(`[...document.querySelectorAll('[data-live]')].every((n) => n.textContent !== '?')`), {
        timeout: 60_000,
        interval: 500,
      })
      .toBe(true);
    const values = await cells.evaluateAll((nodes) =>
      nodes.map((n) => [n.getAttribute('data-consumer'), n.getAttribute('data-live'), n.textContent]),
    );
    const events = (consumer: string) =>
      values.filter(([c, what]) => c === consumer && what === 'lag-events').map(([, , v]) => Number(v));
    expect(events('ledger')).toEqual([3]);
    expect(events(forger)).toEqual([0]);
    expect(events('quote"breaker')).toEqual([0]);
  });

  it('bad input answers 400 and says what is wrong; a stopped database 503', async () => {
    const operator = await h.loginRole('input', ['settle_admin']);
    const { page, context, console: running } = await h.signedIn(operator.url);
    const csrf = await page.locator('header input[name=csrf]').inputValue();
    const bogus = await page.goto(`${running.url}/search?status=bogus&older=soon`);
    expect(bogus?.status()).toBe(400);
    expect(await page.locator('#problem').innerText()).toContain('status must be one of pending, running');
    expect(await page.locator('#problem').innerText()).toContain('older must be a whole number');
    const badDate = encodeCursor({ at: '2026-13-45 99:00:00+00', tenant: 'acme', key: 'k' });
    const cursor = await page.goto(`${running.url}/search?status=unknown&cursor=${badDate}`);
    expect(cursor?.status()).toBe(400);
    expect(await page.locator('#problem').innerText()).toContain('not a cursor of this page');
    const nul = await page.goto(`${running.url}/op?tenant=acme&key=a%00b`);
    expect(nul?.status()).toBe(400);
    expect(await page.locator('#answer-summary').innerText()).toContain('NUL');
    const malformed = await context.request.post(`${running.url}/actions/expire-leases`, {
      form: { csrf, step: 'apply' },
      headers: { origin: 'http://[not-a-host' },
    });
    expect(malformed.status()).toBe(400);
    expect(await malformed.text()).toContain('the Origin header cannot be read');
    const nulForm = await context.request.post(`${running.url}/actions/resolve`, {
      form: { csrf, tenant: 'acme', key: 'a\u0000b', step: 'confirm' },
      headers: { origin: running.url },
    });
    expect(nulForm.status()).toBe(400);

    // The database goes away under a running console: 503, in other words than an error's.
    const proxy = await databaseProxy(new URL(operator.url));
    const { page: down, console: behind } = await h.signedIn(proxy.url);
    await proxy.stop();
    const answer = await down.goto(`${behind.url}/`);
    expect(answer?.status()).toBe(503);
    expect(await down.locator('h1').innerText()).toBe('The database is not reachable');
  });

  it('every field has its own label, every reset button its own name, and the chart a table', async () => {
    await h.stuckPayout('acme', 'labels-1');
    await settle('acme', ['labels-done']);
    await registerConsumer(h.su, 'second-ledger', { startAt: 'latest' });
    const operator = await h.loginRole('labels', ['settle_admin']);
    const { page, console: running } = await h.signedIn(operator.url);
    const names = await page.locator('#feed-lanes button').allInnerTexts();
    expect(new Set(names).size).toBe(names.length);
    expect(await page.getByRole('button', { name: 'Reset second-ledger…' }).count()).toBe(1);
    const table = page.locator('#chart-table');
    await table.locator('summary').click();
    expect(await table.locator('tr').count()).toBeGreaterThan(1);
    expect(await table.innerText()).toMatch(/completed[\s\S]*\d+/);
    await screenshot(page, 'overview-chart-table');

    await page.goto(`${running.url}/op?tenant=acme&key=labels-1`);
    const problems = await page.evaluate(`(() => {
      const ids = [...document.querySelectorAll('[id]')].map((n) => n.id);
      const duplicates = ids.filter((id, i) => ids.indexOf(id) !== i);
      const unlabelled = [...document.querySelectorAll('input:not([type=hidden]), textarea, select')]
        .filter((n) => n.labels.length === 0 && !n.getAttribute('aria-label'))
        .map((n) => n.name);
      return { duplicates, unlabelled };
    })()`);
    expect(problems).toEqual({ duplicates: [], unlabelled: [] });
  });

  it("a tenant-bound login's header names its tenants; a look-alike tenant is marked", async () => {
    const lookalike = '\u0430cme'; // Cyrillic а, then "cme"
    await h.stuckPayout('acme', 'twin-1');
    await h.stuckPayout(lookalike, 'twin-1');
    const bound = await h.loginRole('acme_ops', ['settle_admin']);
    await h.su.query('select settle.grant_tenant(role => $1, tenant => $2)', [bound.name, 'acme']);
    await h.su.query('select settle.grant_tenant(role => $1, tenant => $2)', [bound.name, lookalike]);
    const { page, console: running } = await h.signedIn(bound.url);
    const tenants = page.locator('#who-tenants');
    expect(await tenants.innerText()).toContain('acme');
    expect(await tenants.locator('mark.nonascii[title="U+0430"]').count()).toBe(1);

    await page.goto(`${running.url}/search?status=unknown`);
    const rows = page.locator('#results tr').filter({ hasText: 'twin-1' });
    expect(await rows.count()).toBe(2);
    const marked = await rows.evaluateAll((trs) =>
      trs.map((tr) => tr.querySelectorAll('td:first-child mark.nonascii[title="U+0430"]').length),
    );
    expect(marked.sort()).toEqual([0, 1]);
    await screenshot(page, 'lookalike-tenant');
  });
});
