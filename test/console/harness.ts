import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { createSettleClient, type SettleClient } from '../../src/client/client.js';
import { startConsole, type ConsoleOptions, type RunningConsole } from '../../src/console/server.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';
import { launchChromium } from './browser.js';

// What the console's browser tests share: a database of their own, a superuser connection, a
// client, headless Chromium, database logins made per test, and consoles signed in as them.

export const binding = { principal: 'payout-service', scopes: ['payouts:write'], generation: 1 };

export interface Harness {
  readonly db: TestDatabase;
  readonly su: pg.Client;
  readonly client: SettleClient;
  readonly browser: Browser;
  /** A new login role with `grants`; its name and a database URL logged in as it. */
  loginRole(prefix: string, grants: readonly string[]): Promise<{ name: string; url: string }>;
  /** A console logged in as `databaseUrl`, and a page of a new browser context signed in to it. */
  signedIn(
    databaseUrl: string,
    options?: Partial<ConsoleOptions>,
  ): Promise<{ console: RunningConsole; page: Page; context: BrowserContext }>;
  /** A console without a browser. */
  start(databaseUrl: string, options?: Partial<ConsoleOptions>): Promise<RunningConsole>;
  newContext(): Promise<BrowserContext>;
  /** An operation whose only attempt lost its response: unknown, dead-lettered needs_reconciliation. */
  stuckPayout(tenant: string, key: string, request?: unknown): Promise<void>;
  /** An operation whose only attempt failed: failed, dead-lettered attempts_exhausted. */
  deadLetter(tenant: string, key: string, error?: unknown): Promise<void>;
  statusOf(tenant: string, key: string): Promise<string | undefined>;
  close(): Promise<void>;
}

export async function openHarness(name: string): Promise<Harness> {
  const db = await createTestDatabase(name);
  const su = new pg.Client({ connectionString: db.url });
  su.on('error', () => {});
  await su.connect();
  const client = createSettleClient({ connectionString: db.url, poolSize: 2 });
  const browser = await launchChromium();
  const roles: string[] = [];
  const consoles: RunningConsole[] = [];
  const contexts: BrowserContext[] = [];

  const newContext = async (): Promise<BrowserContext> => {
    const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
    contexts.push(context);
    return context;
  };
  const start = async (databaseUrl: string, options: Partial<ConsoleOptions> = {}): Promise<RunningConsole> => {
    const running = await startConsole({ databaseUrl, ...options });
    consoles.push(running);
    return running;
  };

  return {
    db,
    su,
    client,
    browser,
    async loginRole(prefix, grants) {
      const role = `${prefix}_${randomBytes(4).toString('hex')}`;
      await su.query(`create role "${role}" login`);
      roles.push(role);
      for (const grant of grants) await su.query(`grant ${grant} to "${role}"`);
      const url = new URL(db.url);
      url.username = role;
      url.password = '';
      return { name: role, url: url.toString() };
    },
    async signedIn(databaseUrl, options = {}) {
      const running = await start(databaseUrl, options);
      const context = await newContext();
      const page = await context.newPage();
      page.on('dialog', (dialog) => {
        throw new Error(`a dialog opened: ${dialog.message()}`);
      });
      await page.goto(running.loginUrl);
      return { console: running, page, context };
    },
    start,
    newContext,
    async stuckPayout(tenant, key, request = { amount_cents: 12_500, currency: 'EUR' }) {
      const claim = await client.claim({
        tenant,
        key,
        request: request as never,
        binding,
        maxAttempts: 1,
        workerId: 'payout-worker-7',
      } as never);
      if (claim.outcome !== 'acquired') throw new Error(`setup: ${claim.outcome}`);
      await client.heartbeat(claim.attempt);
      await client.reportUnknown(claim.attempt);
    },
    async deadLetter(tenant, key, error = { code: 'declined' }) {
      const claim = await client.claim({ tenant, key, request: { amount_cents: 5 }, binding, maxAttempts: 1 });
      if (claim.outcome !== 'acquired') throw new Error(`setup: ${claim.outcome}`);
      await client.fail(claim.attempt, error as never, { retryable: true });
    },
    async statusOf(tenant, key) {
      const { rows } = await su.query<{ status: string }>(
        'select status::text from settle.operations where tenant = $1 and key = $2',
        [tenant, key],
      );
      return rows[0]?.status;
    },
    async close() {
      for (const context of contexts) await context.close().catch(() => {});
      await browser.close().catch(() => {});
      for (const running of consoles) await running.close().catch(() => {});
      await client.end().catch(() => {});
      for (const role of roles)
        await su
          .query(`drop owned by "${role}"`)
          .then(() => su.query(`drop role if exists "${role}"`))
          .catch(() => {});
      await su.end().catch(() => {});
      await db.drop();
    },
  };
}
