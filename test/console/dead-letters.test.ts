import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { screenshot, SKIP_REASON, skipWithoutChromium } from './browser.js';
import { openHarness, type Harness } from './harness.js';

// After an outage: the dead letters grouped by reason and error code, with counts and a list per
// group, and one redrive for a group, with a preview and a reason, audited per key with the
// operator's login; never for dead letters that need reconciliation, never beyond a bound
// login's tenants.

vi.setConfig({ testTimeout: 240_000 });

let h: Harness;
const skip = skipWithoutChromium();
if (skip) process.stderr.write(`test/console: ${SKIP_REASON}\n`);

async function statuses(tenant: string, prefix: string): Promise<Record<string, number>> {
  const { rows } = await h.su.query<{ status: string; n: number }>(
    `select status::text as status, count(*)::int as n from settle.operations
      where tenant = $1 and key like $2 group by 1`,
    [tenant, `${prefix}%`],
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

describe.skipIf(skip)('dead letters in Chromium', () => {
  beforeAll(async () => {
    h = await openHarness('console_dead_letters');
    for (let i = 0; i < 20; i += 1) await h.deadLetter('acme', `declined-${i}`, { code: 'declined' });
    for (let i = 0; i < 10; i += 1) await h.deadLetter('acme', `timeout-${i}`, { code: 'timeout' });
    for (let i = 0; i < 3; i += 1) await h.stuckPayout('acme', `in-doubt-${i}`);
    for (let i = 0; i < 4; i += 1) await h.deadLetter('globex', `declined-${i}`, { code: 'declined' });
  });
  afterAll(async () => {
    await h?.close();
  });

  it('groups dead letters by error code with counts, lists a group, and redrives it with one reason', async () => {
    const operator = await h.loginRole('outage', ['settle_admin']);
    const { page, console: running } = await h.signedIn(operator.url);
    await page.goto(`${running.url}/dead-letters?tenant=acme`);
    const groups = await page.locator('#dead-letter-groups tr').allInnerTexts();
    expect(groups.slice(1).map((r) => r.split('\t').slice(0, 3).join(' | '))).toEqual([
      'attempts_exhausted | declined | 20',
      'attempts_exhausted | timeout | 10',
      'needs_reconciliation | (no error) | 3',
    ]);
    const inDoubt = page.locator('#dead-letter-groups tr').filter({ hasText: 'needs_reconciliation' });
    expect(await inDoubt.locator('button').count()).toBe(0);
    await screenshot(page, 'dead-letter-groups');

    const declined = page.locator('#dead-letter-groups tr').filter({ hasText: 'declined' });
    await declined.locator('a:text-is("list")').click();
    expect((await page.locator('#total').innerText()).trim()).toBe('20 operation(s) match.');

    await page.goBack();
    await declined.locator('button').click();
    expect((await page.locator('#group-total').innerText()).trim()).toBe('20');
    expect(await page.locator('#group-keys li').count()).toBe(10);
    // The reason is required by the server too.
    await page.evaluate(`document.querySelector('#group-reason').removeAttribute('required')`);
    await page.click('#confirm-form button[type=submit]');
    expect(await page.locator('#problem').innerText()).toContain('a reason is required');
    await page.fill('#group-reason', 'INC-77: the acquirer is back');
    await page.click('#confirm-form button[type=submit]');
    expect((await page.locator('#answer-summary').innerText()).trim()).toBe('redrove 20 dead letter(s)');
    expect(await statuses('acme', 'declined-')).toEqual({ pending: 20 });
    expect(await statuses('acme', 'timeout-')).toEqual({ failed: 10 });
    expect(await statuses('acme', 'in-doubt-')).toEqual({ unknown: 3 });
    expect(await statuses('globex', 'declined-')).toEqual({ failed: 4 });
    const { rows } = await h.su.query<{ n: number }>(
      `select count(*)::int as n from settle.audit_log where tenant = 'acme' and event = 'redrive'
          and login = $1 and detail->>'reason' = 'INC-77: the acquirer is back'`,
      [operator.name],
    );
    expect(rows[0]?.n).toBe(20);

    // A group of dead letters that need reconciliation is refused, whatever the form says.
    const csrf = await page.locator('header input[name=csrf]').inputValue();
    const forged = await page.context().request.post(`${running.url}/actions/redrive-group`, {
      headers: { origin: running.url },
      form: { csrf, step: 'apply', reason_group: 'needs_reconciliation', code_json: 'null', reason: 'x' },
    });
    expect(forged.status()).toBe(400);
    expect(await statuses('acme', 'in-doubt-')).toEqual({ unknown: 3 });
  });

  it("a tenant-bound login's groups and group redrive stay within its tenants", async () => {
    const bound = await h.loginRole('globex_ops', ['settle_admin']);
    await h.su.query('select settle.grant_tenant(role => $1, tenant => $2)', [bound.name, 'globex']);
    const { page, console: running } = await h.signedIn(bound.url);
    await page.goto(`${running.url}/dead-letters`);
    expect(await page.locator('main').innerText()).not.toContain('timeout');
    const declined = page.locator('#dead-letter-groups tr').filter({ hasText: 'declined' });
    expect(await declined.innerText()).toContain('4');
    await declined.locator('button').click();
    await page.fill('#group-reason', 'INC-78');
    await page.click('#confirm-form button[type=submit]');
    expect((await page.locator('#answer-summary').innerText()).trim()).toBe('redrove 4 dead letter(s)');
    expect(await statuses('globex', 'declined-')).toEqual({ pending: 4 });
    expect(await statuses('acme', 'timeout-')).toEqual({ failed: 10 });
  });
});
