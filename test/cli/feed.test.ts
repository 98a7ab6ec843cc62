import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/client/client.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';
import { waitForHorizon } from '../engine/support/feed.js';
import { type CliRun, runCli } from '../support/cli.js';

// `pg-settle feed` and `pg-settle feed reset` through the real binary (docs/cli.md, docs/feed.md).

function cli(args: readonly string[]): Promise<CliRun> {
  return runCli(args, { databaseUrl: db.url });
}

let db: TestDatabase;
let client: SettleClient;
let su: pg.Client;
const binding = { principal: 'cli-user', scopes: [], generation: 1 };

beforeAll(async () => {
  db = await createTestDatabase('cli_feed');
  client = createSettleClient({ connectionString: db.url, poolSize: 2 });
  su = new pg.Client({ connectionString: db.url });
  await su.connect();
  await su.query(`select settle.register_consumer(name => 'ledger', lanes => 2)`);
  for (const key of ['p-1', 'p-2', 'p-3']) {
    const outcome = await client.run({ tenant: 'acme', key, request: { amount: 1 }, binding }, async () => ({
      paid: true,
    }));
    if (outcome.outcome !== 'completed') throw new Error(`setup: ${outcome.outcome}`);
  }
});

afterAll(async () => {
  await client?.end();
  await su?.end();
  await db?.drop();
});

describe('pg-settle feed', () => {
  it('lists each lane with its lag, and the horizon', async () => {
    const run = await cli(['feed', '--json']);
    expect(run.code).toBe(0);
    const lanes = run.json.lanes as { consumer: string; lane: number; lagEvents: number }[];
    expect(lanes.map((l) => [l.consumer, l.lane])).toEqual([
      ['ledger', 0],
      ['ledger', 1],
    ]);
    expect(lanes.reduce((n, l) => n + l.lagEvents, 0)).toBe(3);
    expect((run.json.horizon as { xid: string }).xid).toMatch(/^\d+$/);
    const text = await cli(['feed']);
    expect(text.stdout).toMatch(/^consumer\s+lane\s+position/);
    expect(text.stdout).toContain('horizon (xid)');
  }, 240_000);

  it('feed and stats name a consumer whose open batch holds the horizon', async () => {
    const holder = new pg.Client({ connectionString: db.url, application_name: 'slow-ledger' });
    await holder.connect();
    try {
      const { rows } = await holder.query<{ pid: number }>('select pg_backend_pid() as pid');
      await holder.query('begin');
      await holder.query(`select settle.trim_feed(batch_size => 1)`); // takes a transaction id
      await holder.query(`select * from settle.read_feed(consumer => 'ledger')`);
      const feed = await cli(['feed', '--json']);
      const horizon = feed.json.horizon as { holderPid: number; holderApplicationName: string };
      // Another test file's transaction may be older: then this one is not the horizon. Each
      // output is checked on its own, as another file's transaction may begin or end between them.
      if (horizon.holderPid === rows[0]?.pid) {
        expect(horizon).toMatchObject({
          holderApplicationName: 'slow-ledger',
          holderIsFeedConsumer: true,
          holderConsumer: 'ledger',
        });
      }
      const stats = await cli(['stats']);
      const held = /^feed horizon held by: (.*)$/m.exec(stats.stdout)?.[1];
      expect(held).toBeDefined();
      if (held?.startsWith(`pid ${rows[0]?.pid} `)) {
        expect(held).toMatch(/\(.*slow-ledger.*\); a feed consumer's open batch \(ledger, lane \d\)/);
      }
      const statsJson = await cli(['stats', '--json']);
      expect(statsJson.json.feedHorizon).toHaveProperty('holderPid');
    } finally {
      await holder.query('rollback').catch(() => {});
      await holder.end();
    }
  }, 240_000);

  it('feed reset: --dry-run changes nothing, no terminal without --yes is refused, --yes skips the backlog', async () => {
    // The lane never goes above the horizon, which is cluster-wide: wait until it has passed
    // the three settlements, or another test file's open transaction keeps them in the backlog.
    await waitForHorizon(su);
    const dry = await cli(['feed', 'reset', 'ledger', '--dry-run', '--json']);
    expect(dry.code).toBe(0);
    expect(dry.json).toMatchObject({ dryRun: true, eventsToDeliver: 0 });
    const lag = async () =>
      (
        await su.query<{ n: number }>(
          `select sum(lag_events)::int as n from settle.feed_consumers where consumer = 'ledger'`,
        )
      ).rows[0]?.n;
    expect(await lag()).toBe(3);
    const refused = await cli(['feed', 'reset', 'ledger']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('--yes');
    const done = await cli(['feed', 'reset', 'ledger', '--yes']);
    expect(done.code).toBe(0);
    expect(await lag()).toBe(0);
    const back = await cli(['feed', 'reset', 'ledger', '--earliest', '--yes', '--json']);
    expect(back.code).toBe(0);
    expect(await lag()).toBe(3);
  }, 240_000);

  it('usage errors exit 2; an unknown consumer exits 1 with its SQLSTATE', async () => {
    expect((await cli(['feed', 'rewind'])).code).toBe(2);
    expect((await cli(['feed', 'reset'])).code).toBe(2);
    expect((await cli(['feed', 'reset', 'ledger', '--to', 'yesterday'])).code).toBe(2);
    const unknown = await cli(['feed', 'reset', 'nobody', '--dry-run']);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain('SE040');
  }, 240_000);
});
