import { readdirSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { defaultMigrationsDir } from '../../src/db/migrations-dir.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';
import { drainKeys } from '../engine/support/feed.js';

// Upgrades keep every row. Each release is kept under test/upgrade/fixtures/<version>/: its
// migrations as released (frozen: migrations are append-only from 0.1.0, docs/operations.md) and
// a generator that fills a database through that release's own SQL API with the states an
// upgrade must keep: settled and retried operations, unknowns, dead letters of both kinds, audit
// rows of refused calls, operations running with live leases, a feed consumer part-way through
// the feed. A database migrated and filled by that release is then migrated by this version
// (what `pg-settle migrate` runs); every row must be there, the held attempts complete with the
// leases they took before the upgrade, and the consumer resumes with nothing lost or repeated.
const FIXTURES = path.join(import.meta.dirname, 'fixtures');
const CURRENT = process.env.PG_SETTLE_MIGRATIONS_DIR ?? defaultMigrationsDir();
const releases = readdirSync(FIXTURES, { withFileTypes: true })
  .filter((entry) => entry.isDirectory())
  .map((entry) => entry.name)
  .sort();

const sqlFiles = async (dir: string): Promise<string[]> =>
  (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort();

/** What an upgrade must keep, as the read views show it (settle.operations has no lease token). */
async function snapshot(c: pg.ClientBase, tenant: string): Promise<Record<string, unknown>> {
  const rows = async (sql: string) => (await c.query(sql, [tenant])).rows;
  return {
    operations: await rows(`select to_jsonb(o) as o from settle.operations o where tenant = $1 order by key`),
    attempts: await rows(`select to_jsonb(a) as a from settle.attempts a where tenant = $1 order by key, attempt`),
    audit: await rows(`select to_jsonb(l) as l from settle.audit_log l where tenant = $1 order by key, seq, audit_id`),
    feed: await rows(
      `select e.event_id, e.position_xid::text, e.key, e.status, e.attempt, e.result from settle_private.feed_events e
        where e.tenant = $1 order by e.position_xid, e.event_id`,
    ),
    lanes: (
      await c.query(
        `select consumer, lane, position_xid::text, position_id from settle_private.feed_lanes order by consumer, lane`,
      )
    ).rows,
  };
}

/** `after` with only the fields `before` had (a later release may add columns to a view). */
function sameFields(before: unknown, after: unknown): unknown {
  if (Array.isArray(before) && Array.isArray(after)) return after.map((a, i) => sameFields(before[i], a));
  if (before !== null && typeof before === 'object' && after !== null && typeof after === 'object') {
    return Object.fromEntries(
      Object.keys(before).map((k) => [k, sameFields((before as never)[k], (after as Record<string, unknown>)[k])]),
    );
  }
  return after;
}

const opened: TestDatabase[] = [];
afterAll(async () => {
  await Promise.all(opened.map((db) => db.drop()));
});

describe.each(releases)('an upgrade from %s', (release) => {
  const fixture = path.join(FIXTURES, release);
  const released = path.join(fixture, 'migrations');

  it('every migration file of that release is in this version, unchanged (migrations are append-only)', async () => {
    const current = await sqlFiles(CURRENT);
    for (const file of await sqlFiles(released)) {
      expect(current, `${release}'s ${file}`).toContain(file);
      expect(await readFile(path.join(CURRENT, file), 'utf8'), `${release}'s ${file}`).toBe(
        await readFile(path.join(released, file), 'utf8'),
      );
    }
  });

  it('keeps every row; held attempts complete with their old leases; the feed consumer resumes where it was', async () => {
    const db = await createTestDatabase(`upgrade_${release.replaceAll('.', '_')}`, { template: 'template0' });
    opened.push(db);
    await migrate(db.url, { dir: released });
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      const { generate } = (await import(
        path.join(fixture, 'generate.ts')
      )) as typeof import('./fixtures/0.1.0/generate.js');
      const generated = await generate(c);
      const before = await snapshot(c, generated.tenant);

      const { applied } = await migrate(db.url, { dir: CURRENT });
      expect(applied).toEqual(await newerThan(released));

      const after = await snapshot(c, generated.tenant);
      expect(sameFields(before, after)).toEqual(before);

      // The attempts held across the upgrade settle with the tokens they took before it.
      for (const held of generated.held) {
        const { rows } = await c.query<{ outcome: string; reason: string }>(
          `select outcome, reason from settle.complete(tenant => $1, key => $2, attempt => $3, lease_token => $4::uuid,
             fingerprint => $5, principal => $6, scopes => $7::text[], binding_generation => $8, result => $9::jsonb)`,
          [
            generated.tenant,
            held.key,
            held.attempt,
            held.leaseToken,
            held.fingerprint,
            generated.principal,
            generated.scopes,
            generated.generation,
            JSON.stringify({ after: 'upgrade' }),
          ],
        );
        expect(rows[0], held.key).toEqual({ outcome: 'settled', reason: 'current_attempt' });
      }

      // The consumer resumes after what it acknowledged: every other settlement, then the held
      // ones settled after the upgrade, each once.
      const pending = generated.settled.filter((k) => !generated.acknowledged.includes(k));
      const expected = [...pending, ...generated.held.map((h) => h.key)];
      const events = await drainKeys(c, generated.consumer, expected);
      expect(events.map((e) => e.key)).toEqual(expected);
    } finally {
      await c.end();
    }
  }, 120_000);
});

/** The migration files of this version that `released` does not have (what the upgrade applies). */
async function newerThan(released: string): Promise<string[]> {
  const old = new Set(await sqlFiles(released));
  return (await sqlFiles(CURRENT)).filter((f) => !old.has(f));
}
