import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { drainKeys, registerConsumer, waitForHorizon, drain } from '../engine/support/feed.js';
import { screenshot, SKIP_REASON, skipWithoutChromium } from './browser.js';
import { binding, openHarness, type Harness } from './harness.js';

// The console in a real browser (Debian's headless Chromium) against a real database and a
// running console, one console per database login: an operator (settle_admin), a reader
// (settle_readonly) and an operator bound to one tenant. Screenshots go to test-output/console/.

vi.setConfig({ testTimeout: 240_000 });

const TENANT = 'acme-payouts';
const OTHER_TENANT = 'globex-payouts';

let h: Harness;
const loginRole = (prefix: string, grants: readonly string[]) => h.loginRole(prefix, grants);
const signedIn = (databaseUrl: string) => h.signedIn(databaseUrl);
const stuckPayout = (tenant: string, key: string, request?: unknown) => h.stuckPayout(tenant, key, request);
const statusOf = (tenant: string, key: string) => h.statusOf(tenant, key);

const skip = skipWithoutChromium();
if (skip) process.stderr.write(`test/console: ${SKIP_REASON}\n`);

describe.skipIf(skip)('pg-settle console in Chromium', () => {
  beforeAll(async () => {
    h = await openHarness('console');
  });

  afterAll(async () => {
    await h?.close();
  });

  it('an operator finds a stuck payout, reads its timeline and resolves it; the feed delivers it once; a stale page is refused', async () => {
    const key = `payout-${randomBytes(3).toString('hex')}`;
    await registerConsumer(h.su, 'ledger');
    await stuckPayout(TENANT, key);
    const operator = await loginRole('oncall', ['settle_admin']);
    const { page, console: running } = await signedIn(operator.url);

    // The token left the address bar for a cookie; it does not work a second time.
    expect(page.url()).toBe(`${running.url}/`);
    const again = await h.newContext();
    const replay = await (await again.newPage()).goto(running.loginUrl);
    expect(replay?.status()).toBe(401);

    expect(await page.locator('#attention').innerText()).toContain('needs_reconciliation');
    expect(await page.locator('#alerts').innerText()).toContain('PgSettleNeedsReconciliation');
    await screenshot(page, 'overview', 860);

    await page.click('a.tile[href="/search?reason=needs_reconciliation"]');
    expect(await page.locator('#results').innerText()).toContain(key);
    await screenshot(page, 'search');
    await page.click(`#results a:text-is("${key}")`);

    expect((await page.locator('#op-status').innerText()).trim()).toBe('unknown');
    expect((await page.locator('#lattice li.current').innerText()).trim()).toBe('unknown');
    expect(await page.locator('svg.timeline g.attempt').count()).toBe(1);
    expect(await page.locator('svg.timeline circle.observation.unknown').count()).toBe(1);
    expect(await page.locator('#reservation').innerText()).toContain('payout-service');
    expect(await page.locator('#audit').innerText()).toContain('report_unknown');
    const operationUrl = page.url();

    // A colleague's tab, opened now: it will be stale once the payout is resolved.
    const stale = await page.context().newPage();
    await stale.goto(operationUrl);
    expect((await stale.locator('#op-attempt').innerText()).trim()).toBe('1');

    await page.check('input[name=outcome][value=completed]');
    await page.fill('#result', '{"payout_id": "po_81"}');
    await page.fill('#reason', 'INC-4711: the bank statement shows the payout');
    await page.fill('#evidence', '{"statement": "st_2026_12_02", "line": 17}');
    await screenshot(page, 'operation');
    await page.click('#resolve-form button[type=submit]');
    expect(await page.locator('#confirm').innerText()).toContain('looked at in attempt 1');
    await screenshot(page, 'resolve-confirm');
    await page.click('#confirm-form button[type=submit]');
    expect((await page.locator('#answer-summary').innerText()).trim()).toBe('resolved: unknown → completed');
    await screenshot(page, 'resolve-answer');
    expect(await statusOf(TENANT, key)).toBe('completed');

    // In the audit trail with the operator's login, the reason and the evidence.
    await page.click('#back');
    expect((await page.locator('#op-status').innerText()).trim()).toBe('completed');
    const resolveRow = page
      .locator('#audit tr')
      .filter({ has: page.locator('td:nth-child(3)', { hasText: /^resolve$/ }) });
    expect(await resolveRow.innerText()).toContain(operator.name);
    expect(await resolveRow.innerText()).toContain('INC-4711');
    expect(await resolveRow.innerText()).toContain('st_2026_12_02');

    // The feed delivers the settlement once.
    const events = await drainKeys(h.su, 'ledger', [key]);
    expect(events.filter((e) => e.key === key)).toHaveLength(1);
    expect(events.find((e) => e.key === key)).toMatchObject({ status: 'completed', result: { payout_id: 'po_81' } });
    await waitForHorizon(h.su);
    expect((await drain(h.su, 'ledger')).filter((e) => e.key === key)).toHaveLength(0);
    await page.reload();
    expect(await page.locator('#feed-events').innerText()).toContain('ledger');
    await screenshot(page, 'operation-resolved', 1300);

    // The stale tab still shows attempt 1, unknown: its resolution is refused, and says why.
    await stale.check('input[name=outcome][value=failed]');
    await stale.fill('#result', '{"code": "declined"}');
    await stale.fill('#reason', 'INC-4711: second look');
    await stale.click('#resolve-form button[type=submit]');
    await stale.click('#confirm-form button[type=submit]');
    expect(await stale.locator('#answer').getAttribute('class')).toMatch(/refused/);
    // The operation is final now: settle.resolve answers already_final (its first test after the
    // fingerprint, so a repeated resolution is harmless) and changes nothing; a stale page of an
    // operation that is not final yet is refused by its precondition (SE053, tested in
    // test/engine/resolve.test.ts).
    expect(await stale.locator('#answer').innerText()).toMatch(/already final \(completed, differs\): nothing changed/);
    await screenshot(stale, 'resolve-stale-refused');
    expect(await statusOf(TENANT, key)).toBe('completed');
    const { rows } = await h.su.query<{ n: number }>(
      `select count(*)::int as n from settle.audit_log where tenant = $1 and key = $2 and event = 'resolve' and outcome = 'resolved'`,
      [TENANT, key],
    );
    expect(rows[0]?.n).toBe(1);
  });

  it('keys and results crafted as HTML or script render as text and run nothing', async () => {
    const hostile = [
      '<img src=x onerror=window.__pwned=1>',
      '</script><script>window.__pwned=2</script>',
      'javascript:window.__pwned=3',
      '"><svg onload=window.__pwned=4>',
    ];
    for (const key of hostile) await stuckPayout(TENANT, key, { note: '<b>bold</b></script>' });
    const done = await h.client.claim({ tenant: TENANT, key: 'hostile-result', request: { n: 1 }, binding } as never);
    if (done.outcome !== 'acquired') throw new Error('setup');
    await h.client.complete(done.attempt, {
      url: 'javascript:window.__pwned=5',
      html: '<img src=x onerror=window.__pwned=6></script>',
    });

    const operator = await loginRole('xss', ['settle_admin']);
    const { page, console: running } = await signedIn(operator.url);
    const violations: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error') violations.push(m.text());
    });
    for (const path of ['/', `/search?status=unknown&tenant=${TENANT}`]) {
      await page.goto(running.url + path);
      for (const key of hostile) expect(await page.locator('main').innerText()).toContain(key);
    }
    for (const key of [...hostile, 'hostile-result']) {
      await page.goto(`${running.url}/op?tenant=${TENANT}&key=${encodeURIComponent(key)}`);
      expect((await page.locator('#op-key').innerText()).trim()).toBe(key);
      expect(await page.locator('main img, main script, main iframe, main svg[onload]').count()).toBe(0);
      expect(await page.locator('a[href^="javascript:" i]').count()).toBe(0);
    }
    expect(await page.locator('#op-result').innerText()).toContain('<img src=x onerror=window.__pwned=6></script>');
    await screenshot(page, 'hostile-result');
    expect(await page.evaluate('window.__pwned')).toBeUndefined();
    // Escaping, not the Content-Security-Policy, kept them inert: no inline script was even tried.
    expect(violations.filter((v) => /Content Security Policy/i.test(v))).toEqual([]);
  });

  it('refuses a forged POST: without the CSRF token, and from another origin', async () => {
    const key = `forged-${randomBytes(3).toString('hex')}`;
    await stuckPayout(TENANT, key);
    const operator = await loginRole('csrf', ['settle_admin']);
    const { page, context, console: running } = await signedIn(operator.url);
    const form = {
      tenant: TENANT,
      key,
      outcome: 'completed',
      payload: '{"forged": true}',
      reason: 'forged',
      expected_attempt: '1',
      step: 'apply',
      fingerprint: 'x',
    };

    // The session's cookie, no token.
    // As the console's own page would send it (its Origin), but without the token.
    const origin = { origin: running.url };
    const noToken = await context.request.post(`${running.url}/actions/resolve`, { form, headers: origin });
    expect(noToken.status()).toBe(403);
    expect(await noToken.text()).toContain('no valid CSRF token');
    const wrongToken = await context.request.post(`${running.url}/actions/resolve`, {
      form: { ...form, csrf: 'guessed' },
      headers: origin,
    });
    expect(wrongToken.status()).toBe(403);

    // A page on another origin of the same host (same-site: SameSite=Strict does not stop it)
    // posting a form into the console; the browser sends the cookie and its Origin.
    const evil: Server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(
        `<form method="post" action="${running.url}/actions/resolve">${Object.entries(form)
          .map(([n, v]) => `<input type="hidden" name="${n}" value='${v}'>`)
          .join('')}<button id="go">win a prize</button></form>`,
      );
    });
    await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', () => resolve()));
    try {
      await page.goto(`http://127.0.0.1:${(evil.address() as AddressInfo).port}/`);
      const [response] = await Promise.all([page.waitForResponse(`${running.url}/actions/resolve`), page.click('#go')]);
      expect(response.status()).toBe(403);
    } finally {
      evil.close();
    }
    expect(await statusOf(TENANT, key)).toBe('unknown');
    // Every response carries the policy that forbids inline script.
    const home = await context.request.get(`${running.url}/`);
    expect(home.headers()['content-security-policy']).toContain("script-src 'self'");
    expect(home.headers()['content-security-policy']).not.toContain('unsafe-inline');
  });

  it('a settle_readonly login sees no action, and its POSTs are refused', async () => {
    const key = `readonly-${randomBytes(3).toString('hex')}`;
    await stuckPayout(TENANT, key);
    const reader = await loginRole('reader', ['settle_readonly']);
    const { page, context, console: running } = await signedIn(reader.url);
    expect((await page.locator('#read-only').innerText()).trim()).toBe('read-only');
    expect(await page.locator('main form[method=post]').count()).toBe(0);
    await page.goto(`${running.url}/op?tenant=${TENANT}&key=${key}`);
    expect((await page.locator('#op-status').innerText()).trim()).toBe('unknown');
    expect(await page.locator('main form[method=post]').count()).toBe(0);
    // No action: the only buttons copy ids and the page's address.
    expect(await page.locator('main button:not(.copy)').count()).toBe(0);
    await screenshot(page, 'operation-readonly');
    const csrf = await page.locator('header input[name=csrf]').inputValue();
    for (const action of ['resolve', 'redrive', 'expire-leases', 'reset-consumer']) {
      const answer = await context.request.post(`${running.url}/actions/${action}`, {
        form: { csrf, tenant: TENANT, key, step: 'apply', consumer: 'ledger' },
        headers: { origin: running.url },
      });
      expect(answer.status(), action).toBe(403);
      expect(await answer.text(), action).toContain('may not');
    }
    expect(await statusOf(TENANT, key)).toBe('unknown');
  });

  it('a tenant-bound login sees nothing of another tenant, also by guessing URLs', async () => {
    const mine = `mine-${randomBytes(3).toString('hex')}`;
    const theirs = `theirs-${randomBytes(3).toString('hex')}`;
    await stuckPayout(TENANT, mine);
    await stuckPayout(OTHER_TENANT, theirs);
    const bound = await loginRole('acme_ops', ['settle_admin']);
    await h.su.query('select settle.grant_tenant(role => $1, tenant => $2)', [bound.name, TENANT]);
    const { page, context, console: running } = await signedIn(bound.url);
    const leaks = async () => {
      const text = await page.locator('body').innerText();
      expect(text).not.toContain(OTHER_TENANT);
      expect(text).not.toContain(theirs);
    };
    await page.locator('#attention').waitFor();
    await leaks();
    await page.goto(`${running.url}/search?status=unknown`);
    expect(await page.locator('#results').innerText()).toContain(mine);
    await leaks();
    await page.goto(`${running.url}/search?reason=needs_reconciliation`);
    await leaks();
    const guessed = await page.goto(`${running.url}/op?tenant=${OTHER_TENANT}&key=${theirs}`);
    expect(guessed?.status()).toBe(404);
    await page.locator('#not-found').waitFor();
    await screenshot(page, 'tenant-bound-guessed-url');
    const listed = await page.goto(`${running.url}/search?tenant=${OTHER_TENANT}`);
    expect(listed?.status()).toBe(200);
    await page.locator('#no-results').waitFor();
    const redirected = await page.goto(`${running.url}/search?tenant=${OTHER_TENANT}&key=${theirs}`);
    expect(redirected?.status()).toBe(404);
    // A forged action on the other tenant's key, with a valid CSRF token: the engine refuses it.
    const csrf = await page.locator('header input[name=csrf]').inputValue();
    const fingerprint =
      (
        await h.su.query<{ fingerprint: string }>(
          'select fingerprint from settle.operations where tenant = $1 and key = $2',
          [OTHER_TENANT, theirs],
        )
      ).rows[0]?.fingerprint ?? '';
    const answer = await context.request.post(`${running.url}/actions/resolve`, {
      headers: { origin: running.url },
      form: {
        csrf,
        tenant: OTHER_TENANT,
        key: theirs,
        outcome: 'failed',
        payload: '{"code": "x"}',
        reason: 'guess',
        expected_attempt: '1',
        step: 'apply',
        fingerprint,
      },
    });
    expect(answer.status()).toBe(409);
    expect(await answer.text()).toContain('SE013');
    expect(await statusOf(OTHER_TENANT, theirs)).toBe('unknown');
  });
});
