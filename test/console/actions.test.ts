import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { drain, registerConsumer, waitForHorizon } from '../engine/support/feed.js';
import { screenshot, SKIP_REASON, skipWithoutChromium } from './browser.js';
import { binding, openHarness, type Harness } from './harness.js';

// The console's actions in Chromium, where one goes wrong quietly: a reset that skips events, a
// redrive of an operation whose effect may already have happened.

vi.setConfig({ testTimeout: 240_000 });

const TENANT = 'acme';
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

describe.skipIf(skip)('console actions in Chromium', () => {
  beforeAll(async () => {
    h = await openHarness('console_actions');
  });
  afterAll(async () => {
    await h?.close();
  });

  it('a reset defaults to re-delivery; skipping to now shows the unacknowledged events it skips and needs a yes', async () => {
    await registerConsumer(h.su, 'ledger', { lanes: 2, startAt: 'latest' });
    await settle(
      TENANT,
      Array.from({ length: 14 }, (_, i) => `payout-${i}`),
    );
    await waitForHorizon(h.su);
    const positions = async () =>
      (
        await h.su.query<{ p: string }>(
          `select position as p from settle.feed_consumers where consumer = 'ledger' order by lane`,
        )
      ).rows
        .map((r) => r.p)
        .join(' ');
    const before = await positions();
    const operator = await h.loginRole('oncall', ['settle_admin']);
    const { page } = await h.signedIn(operator.url);
    await page.click('#feed-lanes form[action="/actions/reset-consumer"] button');
    expect(await page.locator('#reset-form input[name=to]:checked').inputValue()).toBe('earliest');

    await page.check('#reset-form input[name=to][value=now]');
    await page.click('#reset-form button[type=submit]');
    expect((await page.locator('#to-deliver').innerText()).trim()).toBe('0');
    expect((await page.locator('#skipped').innerText()).trim()).toBe('14');
    expect(await page.locator('#skip-warning').innerText()).toContain('never receives them');
    await screenshot(page, 'reset-skip-confirm');
    // The acknowledgement is required by the server too, not only by the form.
    await page.evaluate(`document.querySelector('#skip-ok').removeAttribute('required')`);
    await page.click('#confirm-form button[type=submit]');
    expect(await page.locator('#problem').innerText()).toContain('Not reset');
    expect(await positions()).toBe(before);
    await page.check('#skip-ok');
    await page.click('#confirm-form button[type=submit]');
    expect(await page.locator('#answer-summary').innerText()).toContain(
      '0 event(s) to deliver, 14 unacknowledged event(s) skipped',
    );
    expect(await positions()).not.toBe(before);
    expect(await drain(h.su, 'ledger')).toHaveLength(0);
  });

  it('redriving a needs_reconciliation dead letter warns that the effect may repeat, offers resolve first and needs a reason', async () => {
    await h.stuckPayout(TENANT, 'in-doubt-1');
    await h.deadLetter(TENANT, 'declined-1');
    const operator = await h.loginRole('redrive', ['settle_admin']);
    const { page, console: running } = await h.signedIn(operator.url);
    await page.goto(`${running.url}/op?tenant=${TENANT}&key=in-doubt-1`);
    expect(await page.locator('#redrive-warning').innerText()).toContain('may already have taken effect');
    // Resolve comes first on the page.
    const forms = await page.locator('main form').evaluateAll((nodes) => nodes.map((n) => (n as { id: string }).id));
    expect(forms.indexOf('resolve-form')).toBeGreaterThanOrEqual(0);
    expect(forms.indexOf('resolve-form')).toBeLessThan(forms.indexOf('redrive-form'));
    expect(await page.locator('#redrive-reason').getAttribute('required')).not.toBeNull();
    await screenshot(page, 'redrive-needs-reconciliation');

    // The server refuses without a reason and without the acknowledgement, whatever the form did.
    await page.evaluate(
      `for (const e of document.querySelectorAll('#redrive-form [required]')) e.removeAttribute('required')`,
    );
    await page.click('#redrive-form button[type=submit]');
    expect(await page.locator('#answer-summary').innerText()).toMatch(/not redriven: a reason is required.*tick/);
    await page.goBack();
    await page.fill('#redrive-reason', 'INC-9: the bank shows no payout for this key');
    await page.check('#checked-downstream');
    await page.click('#redrive-form button[type=submit]');
    expect(await page.locator('#redrive-warning').innerText()).toContain('may already have taken effect');
    expect(await page.locator('#resolve-first').getAttribute('href')).toBe(
      `/op?tenant=${TENANT}&key=in-doubt-1#resolve-form`,
    );
    await page.click('#confirm-form button[type=submit]');
    expect(await page.locator('#answer-summary').innerText()).toContain('redriven');
    const { rows } = await h.su.query<{ reason: string }>(
      `select detail->>'reason' as reason from settle.audit_log where tenant = $1 and key = 'in-doubt-1' and event = 'redrive'`,
      [TENANT],
    );
    expect(rows.map((r) => r.reason)).toEqual(['INC-9: the bank shows no payout for this key']);

    // A dead letter whose every attempt failed redrives as before: no warning, no reason needed.
    await page.goto(`${running.url}/op?tenant=${TENANT}&key=declined-1`);
    expect(await page.locator('#redrive-warning').count()).toBe(0);
    await page.click('#redrive-form button[type=submit]');
    await page.click('#confirm-form button[type=submit]');
    expect(await page.locator('#answer-summary').innerText()).toBe('redriven: now pending');
  });
});
