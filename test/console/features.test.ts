import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { registerConsumer } from '../engine/support/feed.js';
import { screenshot, SKIP_REASON, skipWithoutChromium } from './browser.js';
import { binding, openHarness, type Harness } from './harness.js';

// What on-call gets elsewhere, in Chromium: a large result collapsed to a link, ids to copy,
// refresh on every page, the admin log, and a page's address a colleague opens on their own.

vi.setConfig({ testTimeout: 240_000 });

let h: Harness;
const skip = skipWithoutChromium();
if (skip) process.stderr.write(`test/console: ${SKIP_REASON}\n`);

describe.skipIf(skip)('console features in Chromium', () => {
  beforeAll(async () => {
    h = await openHarness('console_features');
  });
  afterAll(async () => {
    await h?.close();
  });

  it('a 1 MB result is collapsed on the page and served whole at its own address', async () => {
    const result = { rows: Array.from({ length: 20_000 }, (_, i) => ({ line: i, text: `statement line ${i} <&>` })) };
    const claim = await h.client.claim({ tenant: 'acme', key: 'big-result', request: { n: 1 }, binding });
    if (claim.outcome !== 'acquired') throw new Error('setup');
    await h.client.complete(claim.attempt, result);
    expect(JSON.stringify(result).length).toBeGreaterThan(900_000);
    const operator = await h.loginRole('big', ['settle_admin']);
    const { page, context, console: running } = await h.signedIn(operator.url);
    const address = `${running.url}/op?tenant=acme&key=big-result`;
    const html = await (await context.request.get(address)).text();
    expect(html.length).toBeLessThan(64_000);
    await page.goto(address);
    const block = page.locator('#op-result details.json-large');
    expect(await block.getAttribute('open')).toBeNull();
    expect(await block.locator('summary').innerText()).toMatch(/^\d+(\.\d)? (KB|MB) of JSON/);
    const whole = await block.locator('a.json-whole').getAttribute('href');
    const served = await context.request.get(`${running.url}${whole}`);
    expect(served.headers()['content-type']).toContain('application/json');
    expect(await served.json()).toEqual(result);
    await screenshot(page, 'large-result');
  });

  it('copies ids and the page address; a colleague opens that address on their own console', async () => {
    await h.stuckPayout('acme', 'copy-me/1');
    const operator = await h.loginRole('copy', ['settle_admin']);
    const { page, context, console: running } = await h.signedIn(operator.url);
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: running.url });
    await page.goto(`${running.url}/op?tenant=acme&key=${encodeURIComponent('copy-me/1')}`);
    await page.getByRole('button', { name: 'Copy key' }).click();
    expect(await page.evaluate('navigator.clipboard.readText()')).toBe('copy-me/1');
    await page.getByRole('button', { name: 'Copy fingerprint' }).click();
    expect(await page.evaluate('navigator.clipboard.readText()')).toMatch(/^v\d+:[0-9a-f]{64}$/);
    await page.getByRole('button', { name: 'Copy link to this page' }).click();
    const link = (await page.evaluate('navigator.clipboard.readText()')) as string;
    expect(link).toBe(page.url());

    // A colleague's browser: no session yet; signs in with an address from the console and is
    // taken on to the page the link names.
    const colleague = await (await h.newContext()).newPage();
    const first = await colleague.goto(link);
    expect(first?.status()).toBe(401);
    expect(await colleague.locator('#sign-in-next').innerText()).toContain('copy-me');
    await colleague.fill('#sign-in-token', running.newLoginUrl());
    await colleague.click('#sign-in-form button[type=submit]');
    expect(colleague.url()).toBe(link);
    expect((await colleague.locator('#op-key').innerText()).trim()).toBe('copy-me/1');
  });

  it('every page can be read again, by its link or by itself when asked', async () => {
    const operator = await h.loginRole('refresh', ['settle_readonly']);
    const { page, console: running } = await h.signedIn(operator.url);
    for (const path of [
      '/',
      '/search?status=unknown',
      '/dead-letters',
      '/admin-log',
      '/op?tenant=acme&key=big-result',
    ]) {
      await page.goto(`${running.url}${path}`);
      expect(await page.locator('#refresh').count(), path).toBe(1);
      expect(await page.locator('#auto-refresh').isChecked(), path).toBe(path === '/' || path === '/dead-letters');
    }
    const read = async () => page.locator('#read-at').getAttribute('datetime');
    await page.goto(`${running.url}/search?status=unknown`);
    const before = await read();
    await page.click('#refresh');
    await expect.poll(read).not.toBe(before);
    // Ticked, the page reloads itself (every 30 s), and stays ticked for the tab.
    await page.check('#auto-refresh');
    const ticked = await read();
    await page.waitForEvent('load', { timeout: 90_000 });
    expect(await read()).not.toBe(ticked);
    expect(await page.locator('#auto-refresh').isChecked()).toBe(true);
  });

  it('the admin log lists changes newest first, by event and actor, within a bound login’s tenants', async () => {
    await registerConsumer(h.su, 'ledger', { startAt: 'latest' });
    const ops = await h.loginRole('acme_ops', ['settle_admin']);
    await h.su.query('select settle.grant_tenant(role => $1, tenant => $2)', [ops.name, 'acme']);
    await h.su.query('select settle.grant_tenant(role => $1, tenant => $2)', [ops.name, 'acme-eu']);
    const other = await h.loginRole('globex_ops', ['settle_admin']);
    await h.su.query('select settle.grant_tenant(role => $1, tenant => $2)', [other.name, 'globex']);
    const admin = await h.loginRole('admin', ['settle_admin']);
    const { page, console: running } = await h.signedIn(admin.url);
    await page.goto(`${running.url}/admin-log`);
    const events = (await page.locator('#admin-log tr td:nth-child(3)').allInnerTexts()).map((t) => t.trim());
    expect(events.slice(0, 4)).toEqual(['grant_tenant', 'grant_tenant', 'grant_tenant', 'register_consumer']);
    await page.selectOption('#event', 'register_consumer');
    await page.click('#admin-log-form button[type=submit]');
    expect((await page.locator('#admin-log tr td:nth-child(3)').allInnerTexts()).map((t) => t.trim())).toEqual([
      'register_consumer',
    ]);
    await screenshot(page, 'admin-log');
    const bound = await h.signedIn(ops.url);
    await bound.page.goto(`${bound.console.url}/admin-log`);
    const seen = await bound.page.locator('#admin-log').innerText();
    expect(seen).toContain('acme-eu');
    expect(seen).not.toContain('globex');
  });
});
