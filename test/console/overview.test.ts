import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { screenshot, SKIP_REASON, skipWithoutChromium } from './browser.js';
import { openHarness, type Harness } from './harness.js';

// The overview in Chromium: what holds the feed's horizon, the alert table, the live figures.

vi.setConfig({ testTimeout: 240_000 });

let h: Harness;
const skip = skipWithoutChromium();
if (skip) process.stderr.write(`test/console: ${SKIP_REASON}\n`);

describe.skipIf(skip)('the console overview in Chromium', () => {
  beforeAll(async () => {
    h = await openHarness('console_overview');
  });
  afterAll(async () => {
    await h?.close();
  });

  it("names another service's open transaction as the horizon's holder, never the console's own sessions", async () => {
    const service = await h.loginRole('ledger_svc', []);
    const holder = new pg.Client({ connectionString: service.url, application_name: 'ledger-service' });
    await holder.connect();
    try {
      await holder.query('begin');
      await holder.query('select pg_current_xact_id()');
      const pid = (await holder.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid;
      const operator = await h.loginRole('oncall_alice', ['settle_admin']);
      const { page, console: running } = await h.signedIn(operator.url);
      // Several loads: the console reads the overview on several connections at once, and each
      // of them, mid-read, is a session with a snapshot that an older query mistook for the holder.
      // Transaction ids are cluster-wide: other test files' transactions may be listed too.
      for (let i = 0; i < 3; i += 1) {
        await page.goto(`${running.url}/`);
        const table = await page.locator('#horizon-holders').innerText();
        expect(table).not.toContain('pg-settle console');
        expect(table).not.toContain(operator.name);
        const row = page.locator('#horizon-holders tr').filter({ has: page.locator(`td:text-is("${pid}")`) });
        expect(await row.innerText()).toMatch(
          new RegExp(`^${pid}\\s+${service.name}\\s+ledger-service\\s+idle in transaction\\s+\\d+`),
        );
      }
      await screenshot(page, 'overview-horizon-held');
      const alerts = await page.locator('#alerts').innerText();
      expect(alerts).toContain('PgSettleFeedHorizonHeld');
      expect(alerts).toContain('PgSettleInDoubtNotDeadLettered');
    } finally {
      await holder.query('rollback').catch(() => {});
      await holder.end();
    }
  });
});
