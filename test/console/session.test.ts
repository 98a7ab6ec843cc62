import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { screenshot, SKIP_REASON, skipWithoutChromium } from './browser.js';
import { openHarness, type Harness } from './harness.js';

// Sessions in Chromium: a browser sends a cookie to every port of its host, so the console's
// session is bound to its own origin; two consoles in one browser keep their own sessions; after
// signing out or an idle session there is a way back in without restarting the console.

vi.setConfig({ testTimeout: 240_000 });

const TENANT = 'acme';
let h: Harness;
const skip = skipWithoutChromium();
if (skip) process.stderr.write(`test/console: ${SKIP_REASON}\n`);

/** A service on another port of 127.0.0.1 that keeps every Cookie header it receives. */
async function otherService(): Promise<{ url: string; cookies: string[]; close: () => void }> {
  const cookies: string[] = [];
  const server: Server = createServer((req, res) => {
    if (req.headers.cookie !== undefined) cookies.push(req.headers.cookie);
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<p>another local service</p>');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, cookies, close: () => server.close() };
}

describe.skipIf(skip)('console sessions in Chromium', () => {
  beforeAll(async () => {
    h = await openHarness('console_session');
  });
  afterAll(async () => {
    await h?.close();
  });

  it('a session cookie another local service receives does not let a plain HTTP client act with it', async () => {
    await h.deadLetter(TENANT, 'dead-1');
    const operator = await h.loginRole('oncall', ['settle_admin']);
    const { page, console: running } = await h.signedIn(operator.url);
    const other = await otherService();
    try {
      // Browsers ignore ports for cookies: the other service gets the console's session cookie.
      await page.goto(`${other.url}/`);
      const stolen = other.cookies.join('; ');
      expect(stolen).toContain('pg_settle_console');
      // It reads a page with it (as a plain client, no browser headers) for the CSRF token ...
      const op = await fetch(`${running.url}/op?tenant=${TENANT}&key=dead-1`, { headers: { cookie: stolen } });
      const csrf = /name="csrf" value="([^"]+)"/.exec(await op.text())?.[1] ?? '';
      // ... and posts a redrive: refused, it is not the console's page.
      const form = new URLSearchParams({ csrf, tenant: TENANT, key: 'dead-1', attempts: '1', step: 'apply' });
      const forged = await fetch(`${running.url}/actions/redrive`, {
        method: 'POST',
        headers: { cookie: stolen, 'content-type': 'application/x-www-form-urlencoded' },
        body: form.toString(),
        redirect: 'manual',
      });
      expect(forged.status).toBe(403);
      expect(await forged.text()).toContain('refused');
      // A page of the other service, in the browser, posting with the cookie: refused too (the
      // browser sends its Origin; Cross-Origin-Resource-Policy also hides the answer from it).
      const fromPage = await page.evaluate(
        async ([url, body]) =>
          fetch(url as string, { method: 'POST', credentials: 'include', mode: 'no-cors', body: body as string }).then(
            (r) => r.type,
            (e: Error) => e.message,
          ),
        [`${running.url}/actions/redrive`, form.toString()],
      );
      expect(fromPage).toBe('Failed to fetch');
      expect(await h.statusOf(TENANT, 'dead-1')).toBe('failed');
      const { rows } = await h.su.query<{ n: number }>(
        `select count(*)::int as n from settle.audit_log where tenant = $1 and key = 'dead-1' and event = 'redrive'`,
        [TENANT],
      );
      expect(rows[0]?.n).toBe(0);
      // The console's own page still acts.
      await page.goto(`${running.url}/op?tenant=${TENANT}&key=dead-1`);
      await page.click('#redrive-form button[type=submit]');
      await page.click('#confirm-form button[type=submit]');
      expect(await page.locator('#answer-summary').innerText()).toContain('redriven');
    } finally {
      other.close();
    }
  });

  it('two consoles in one browser keep their sessions; signed out, a new address from the running console signs in again', async () => {
    const alice = await h.loginRole('alice', ['settle_admin']);
    const reader = await h.loginRole('reader', ['settle_readonly']);
    const a = await h.start(alice.url);
    const b = await h.start(reader.url);
    expect(a.cookieName).not.toBe(b.cookieName);
    const context = await h.newContext();
    const page = await context.newPage();
    await page.goto(a.loginUrl);
    await page.goto(b.loginUrl);
    const first = await page.goto(`${a.url}/`);
    expect(first?.status()).toBe(200);
    expect(await page.locator('header .who').innerText()).toContain(alice.name);
    await page.goto(`${b.url}/`);
    expect(await page.locator('header .who').innerText()).toContain(reader.name);

    // Sign out of A: B stays signed in; A's page says how to get back in.
    await page.goto(`${a.url}/`);
    await page.click('header form[action="/logout"] button');
    expect(await page.locator('#sign-in-reason').innerText()).toContain('Signed out');
    expect(await page.locator('#sign-in-how').innerText()).toContain('press Enter');
    await screenshot(page, 'signed-out');
    expect((await page.goto(`${b.url}/`))?.status()).toBe(200);
    // The first address was spent; a new one from the running console, pasted into the page.
    expect((await page.goto(a.loginUrl))?.status()).toBe(401);
    await page.fill('#sign-in-token', a.newLoginUrl());
    await page.click('#sign-in-form button[type=submit]');
    expect(page.url()).toBe(`${a.url}/`);
    expect(await page.locator('header .who').innerText()).toContain(alice.name);
  });

  it('after the idle limit the sign-in page takes the operator back to the page asked for', async () => {
    await h.stuckPayout(TENANT, 'idle-1');
    const operator = await h.loginRole('idle', ['settle_admin']);
    let now = Date.now();
    const { page, console: running } = await h.signedIn(operator.url, { now: () => now });
    now += 31 * 60_000;
    const asked = `${running.url}/op?tenant=${TENANT}&key=idle-1`;
    const ended = await page.goto(asked);
    expect(ended?.status()).toBe(401);
    expect(await page.locator('#sign-in-reason').innerText()).toContain('The session ended');
    // A spent or foreign token is refused on the same page.
    await page.fill('#sign-in-token', running.loginUrl);
    await page.click('#sign-in-form button[type=submit]');
    expect(await page.locator('#sign-in-reason').innerText()).toContain('not valid');
    await page.fill('#sign-in-token', running.newLoginUrl());
    await page.click('#sign-in-form button[type=submit]');
    expect(page.url()).toBe(asked);
    expect((await page.locator('#op-key').innerText()).trim()).toBe('idle-1');
  });
});
