import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { countOperations, mustGetOperation } from './support/inspect.js';
import { acquire, claim, heartbeat } from './support/settle.js';

// Issue #8 §6: intervals are judged by what they do, not by their text; keys and tenants refuse
// the code points that make two different strings look the same.
const db = useEngineDatabase('input_bounds');

/** Seconds between the database clock now and the lease expiry the engine stored. */
async function leaseSeconds(admin: import('pg').ClientBase, tenant: string, key: string): Promise<number> {
  const { rows } = await admin.query<{ s: number }>(
    `select extract(epoch from lease_expires_at - clock_timestamp())::float8 as s from settle_private.operations where tenant = $1 and key = $2`,
    [tenant, key],
  );
  return rows[0]?.s ?? Number.NaN;
}

describe('interval arguments', () => {
  const refused = ['-12 mon +361 days', '1 mon -29 days', '1 year -364 days', '-1 day +25 hours -1 mon', '0.5 seconds', '1 day 1 second', '-1 second'];
  for (const lease of refused) {
    it(`claim refuses lease '${lease}' (SE007), nothing stored`, async () => {
      const [app, admin] = await Promise.all([db.app(), db.connect()]);
      const before = await countOperations(admin);
      expect(await sqlStateOf(claim(app, newOperation('lease', { lease })))).toBe('SE007');
      expect(await countOperations(admin)).toBe(before);
    });
    it(`heartbeat refuses lease '${lease}' (SE007), the lease is unchanged`, async () => {
      const [app, admin] = await Promise.all([db.app(), db.connect()]);
      const ticket = await acquire(app, newOperation('hb'));
      const before = await mustGetOperation(admin, ticket.tenant, ticket.key);
      expect(await sqlStateOf(heartbeat(app, ticket, lease))).toBe('SE007');
      expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).lease_expires_at).toEqual(before.lease_expires_at);
    });
  }

  it('the issue: two claims, each told acquired, can no longer overlap through a negative month lease', async () => {
    const app = await db.app();
    const op = newOperation('overlap');
    expect(await sqlStateOf(claim(app, { ...op, lease: '-12 mon +361 days' }))).toBe('SE007');
    expect((await claim(app, op)).outcome).toBe('acquired');
    expect((await claim(app, op)).outcome).toBe('in_progress');
  });

  it('a 1 day lease is 86400 seconds in a daylight-saving time zone, on the day the clocks change', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    for (const zone of ['America/New_York', 'Europe/Berlin', 'Australia/Lord_Howe']) {
      await app.query(`set time zone '${zone}'`);
      const op = newOperation('dst', { lease: '1 day' });
      await acquire(app, op);
      expect(Math.round(await leaseSeconds(admin, op.tenant ?? '', op.key ?? ''))).toBe(86400);
      const ticket = await acquire(app, newOperation('dst-hb', { lease: '1 second' }));
      await heartbeat(app, ticket, '1 day');
      expect(Math.round(await leaseSeconds(admin, ticket.tenant, ticket.key))).toBe(86400);
    }
    // The engine never reads the session time zone for expiry: prove it across a real DST
    // change by computing the stored expiry with the engine's own helper at a fixed instant.
    await admin.query(`set time zone 'America/New_York'`);
    const { rows } = await admin.query<{ s: number }>(
      `select extract(epoch from settle_private._expiry('2026-11-01 00:30:00-04'::timestamptz, interval '1 day')
                                  - '2026-11-01 00:30:00-04'::timestamptz)::float8 as s`,
    );
    expect(rows[0]?.s).toBe(86400);
  });

  it('purge and the sweeper refuse interval arguments with month parts (SE008)', async () => {
    const admin = await db.connect();
    await admin.query('set role settle_admin');
    for (const older of ['-12 mon +361 days', '1 mon', '-1 second']) {
      expect(await sqlStateOf(admin.query(`select settle.purge(older_than => $1::interval)`, [older]))).toBe('SE008');
    }
  });
});

describe('invisible and bidirectional code points in tenants and keys', () => {
  // The exact set is documented in docs/sql-api.md ("Input limits").
  const points = [
    0x00ad, 0x034f, 0x061c, 0x115f, 0x1160, 0x17b4, 0x17b5, 0x180b, 0x180e, 0x180f, 0x200b, 0x200c, 0x200d, 0x200e, 0x200f,
    0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2060, 0x2064, 0x2066, 0x2067, 0x2068, 0x2069, 0x206f, 0x3164, 0xfe00, 0xfe0f,
    0xfeff, 0xffa0, 0xfff0, 0xfff8, 0x1bca0, 0x1bca3, 0x1d173, 0x1d17a, 0xe0001, 0xe0020, 0xe007f, 0xe0100, 0xe01ef, 0xe0fff,
  ];
  it.each(points.map((p) => [`U+${p.toString(16).toUpperCase().padStart(4, '0')}`, p]))(
    '%s in a key (SE002) or a tenant (SE001) is refused, nothing stored',
    async (_name, point) => {
      const [app, admin] = await Promise.all([db.app(), db.connect()]);
      const before = await countOperations(admin);
      const c = String.fromCodePoint(point as number);
      expect(await sqlStateOf(claim(app, newOperation('cp', { key: `café${c}` })))).toBe('SE002');
      expect(await sqlStateOf(claim(app, newOperation('cp', { tenant: `ac${c}me` })))).toBe('SE001');
      expect(await countOperations(admin)).toBe(before);
    },
  );

  it('the issue: café and café + U+200B are no longer two operations that look identical', async () => {
    const app = await db.app();
    const op = newOperation('x', { key: 'café-order-1' });
    expect((await claim(app, op)).outcome).toBe('acquired');
    expect(await sqlStateOf(claim(app, { ...op, key: 'café-order-1\u200b' }))).toBe('SE002');
  });

  it('visible neighbours of the refused set are accepted (emoji, CJK, Arabic, Hangul, accents)', async () => {
    const app = await db.app();
    for (const key of ['ключ-1', '注文-1', 'طلب-١', '주문-1', 'naïve-Ω', 'pay-😀', 'a\u00b7b']) {
      expect((await claim(app, newOperation('ok', { key }))).outcome).toBe('acquired');
    }
  });
});
