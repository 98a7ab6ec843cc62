import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation, TENANT } from './support/fixtures.js';
import { countOperations, mustGetOperation } from './support/inspect.js';
import { acquire, type ClaimArgs, claim, complete, heartbeat } from './support/settle.js';

// Bad input gets a typed SQLSTATE and stores nothing, as settle_app: sizes and NULLs, intervals
// judged by what they do rather than by their text, and the code points that would make two
// different tenants or keys look the same. (test/engine/limits.test.ts holds the limits
// themselves to one definition.)
const db = useEngineDatabase('bad_input');

/** Seconds between the database clock now and the lease expiry the engine stored. */
async function leaseSeconds(admin: pg.ClientBase, tenant: string, key: string): Promise<number> {
  const { rows } = await admin.query<{ s: number }>(
    `select extract(epoch from lease_expires_at - clock_timestamp())::float8 as s from settle_private.operations where tenant = $1 and key = $2`,
    [tenant, key],
  );
  return rows[0]?.s ?? Number.NaN;
}

describe('interval arguments', () => {
  const refused = [
    '-12 mon +361 days',
    '1 mon -29 days',
    '1 year -364 days',
    '-1 day +25 hours -1 mon',
    '0.5 seconds',
    '1 day 1 second',
    '-1 second',
  ];
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
      expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).lease_expires_at).toEqual(
        before.lease_expires_at,
      );
    });
  }

  it('two claims, each told acquired, cannot overlap through a negative month lease', async () => {
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
    0x00ad, 0x034f, 0x061c, 0x115f, 0x1160, 0x17b4, 0x17b5, 0x180b, 0x180e, 0x180f, 0x200b, 0x200c, 0x200d, 0x200e,
    0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2060, 0x2064, 0x2066, 0x2067, 0x2068, 0x2069, 0x206f, 0x3164,
    0xfe00, 0xfe0f, 0xfeff, 0xffa0, 0xfff0, 0xfff8, 0x1bca0, 0x1bca3, 0x1d173, 0x1d17a, 0xe0001, 0xe0020, 0xe007f,
    0xe0100, 0xe01ef, 0xe0fff,
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

  it('café and café + U+200B are not two operations that look identical', async () => {
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

const claims: { code: string; what: string; change: Partial<ClaimArgs> }[] = [
  { code: 'SE001', what: 'NULL tenant', change: { tenant: null } },
  { code: 'SE001', what: 'empty tenant', change: { tenant: '' } },
  { code: 'SE001', what: 'whitespace-only tenant', change: { tenant: ' \t ' } },
  { code: 'SE001', what: '65-byte tenant', change: { tenant: 't'.repeat(65) } },
  { code: 'SE001', what: 'tenant of 33 two-byte characters (66 bytes)', change: { tenant: 'é'.repeat(33) } },
  { code: 'SE002', what: 'NULL key', change: { key: null } },
  { code: 'SE002', what: 'empty key', change: { key: '' } },
  { code: 'SE002', what: '256-byte key', change: { key: 'k'.repeat(256) } },
  { code: 'SE002', what: 'key with a tab', change: { key: 'order\t42' } },
  { code: 'SE002', what: 'non-NFC key', change: { key: 'caf' + 'e\u0301' } },
  { code: 'SE003', what: 'NULL principal', change: { principal: null } },
  { code: 'SE003', what: 'empty principal', change: { principal: '' } },
  { code: 'SE003', what: '65 scopes', change: { scopes: Array.from({ length: 65 }, (_, i) => `s${i}`) } },
  { code: 'SE003', what: 'a NULL scope', change: { scopes: ['a', null] } },
  { code: 'SE003', what: 'NULL scopes', change: { scopes: null } },
  { code: 'SE003', what: 'negative binding generation', change: { binding_generation: -1 } },
  { code: 'SE004', what: 'request over 64 KiB', change: { request: { pad: 'x'.repeat(64 * 1024) } } },
  { code: 'SE004', what: 'NULL request', change: { request: null } },
  { code: 'SE007', what: 'lease of 0 s', change: { lease: '0 seconds' } },
  { code: 'SE007', what: 'lease of 2 days', change: { lease: '2 days' } },
  { code: 'SE008', what: 'max_attempts 0', change: { max_attempts: 0 } },
  { code: 'SE008', what: 'blank worker', change: { worker: '  ' } },
];

describe('input limits of settle.claim', () => {
  for (const { code, what, change } of claims) {
    it(`${what}: ${code}, nothing stored`, async () => {
      const [app, admin] = await Promise.all([db.app(), db.connect()]);
      const before = await countOperations(admin);
      expect(await sqlStateOf(claim(app, newOperation('limits', change)))).toBe(code);
      expect(await countOperations(admin)).toBe(before);
    });
  }

  it('the limits are inclusive: a 64-byte tenant and a 255-byte key are accepted', async () => {
    const app = await db.app();
    const row = await claim(app, newOperation('x', { tenant: 't'.repeat(64), key: 'k'.repeat(255) }));
    expect(row.outcome).toBe('acquired');
  });
});

// The read-only answers to the reservation exactly as stored, replay of a completed key and
// in_progress of a key whose lease is live, are decided before the input rules when every
// compared argument equals the stored reservation (00008): the arguments these answers do not
// compare are still judged, and any other change goes through the rules. Every bad argument
// above, against such a key, gets the same code and changes nothing.
const readOnlyAnswers = [
  {
    state: 'a completed key (the replay path)',
    answer: 'replay',
    prepare: async (app: pg.ClientBase, op: ClaimArgs) => {
      await complete(app, await acquire(app, op), { ok: true });
    },
  },
  {
    state: 'a key in progress (the in_progress path)',
    answer: 'in_progress',
    prepare: async (app: pg.ClientBase, op: ClaimArgs) => {
      await acquire(app, op);
    },
  },
] as const;

for (const { state, answer, prepare } of readOnlyAnswers) {
  describe(`input limits of settle.claim on ${state}`, () => {
    const bad = [
      ...claims,
      { code: 'SE008', what: 'NULL rerun_after_unknown', change: { rerun_after_unknown: null } },
      { code: 'SE008', what: 'worker with a control character', change: { worker: 'worker\u0001' } },
      { code: 'SE008', what: 'max_attempts over the limit', change: { max_attempts: 1001 } },
    ];
    for (const { code, what, change } of bad) {
      it(`${what}: ${code}, nothing written`, async () => {
        const [app, admin] = await Promise.all([db.app(), db.connect()]);
        const op = newOperation('read-only-limits');
        const key = op.key ?? '';
        await prepare(app, op);
        expect((await claim(app, op)).outcome).toBe(answer);
        const before = await mustGetOperation(admin, TENANT, key);
        const operations = await countOperations(admin);
        expect(await sqlStateOf(claim(app, { ...op, ...change }))).toBe(code);
        expect(await countOperations(admin)).toBe(operations);
        expect((await mustGetOperation(admin, TENANT, key)).row_text).toBe(before.row_text);
      });
    }

    it(`the stored reservation and the same scopes unsorted, duplicated or with another worker all answer ${answer}`, async () => {
      const app = await db.app();
      const op = newOperation('read-only-forms', { scopes: ['b', 'a'] });
      await prepare(app, op);
      for (const variant of [
        { scopes: ['a', 'b'] },
        { scopes: ['b', 'a', 'a'] },
        { worker: 'wörker-2' },
        { worker: null },
        { lease: '1 hour', max_attempts: 3, rerun_after_unknown: false },
      ]) {
        const row = await claim(app, { ...op, ...variant });
        expect(row.outcome).toBe(answer);
        expect(row.lease_token).toBeNull();
      }
    });
  });
}

describe('input limits of the observations', () => {
  it('result over 1 MiB: SE005, the operation stays unsettled', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const ticket = await acquire(app, newOperation('big-result'));
    const before = await mustGetOperation(admin, ticket.tenant, ticket.key);
    expect(await sqlStateOf(complete(app, ticket, { pad: 'x'.repeat(1024 * 1024) }))).toBe('SE005');
    expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).row_text).toBe(before.row_text);
  });

  it('an observation on an unknown key: SE010, nothing stored', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const ticket = await acquire(app, newOperation('known'));
    const before = await countOperations(admin);
    expect(await sqlStateOf(complete(app, { ...ticket, key: 'no-such-key' }, { ok: true }))).toBe('SE010');
    expect(await countOperations(admin)).toBe(before);
  });

  it('a malformed fingerprint: SE004, the operation unchanged', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const ticket = await acquire(app, newOperation('bad-fingerprint'));
    const before = await mustGetOperation(admin, ticket.tenant, ticket.key);
    for (const fingerprint of ['v1:xyz', ticket.fingerprint.toUpperCase(), '', `${ticket.fingerprint}0`]) {
      expect(await sqlStateOf(complete(app, { ...ticket, fingerprint }, { ok: true }))).toBe('SE004');
    }
    expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).row_text).toBe(before.row_text);
  });
});
