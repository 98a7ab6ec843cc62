import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSettleClient, SettleInputError } from '../../src/client/index.js';
import { recordFigures } from './harness/figures.js';
import {
  backendPeakKiB,
  catalogExposure,
  HOSTILE_NAMES,
  sqlErrorOf,
  storedCounts,
  type StoredCounts,
} from './harness/hostile-inputs.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';

// As the application role, every hostile input gets a typed error (an SQLSTATE of
// the registry or PostgreSQL's own, or a typed client error) or a defined outcome, with nothing
// stored (row counts of the private tables before/after) and nothing disclosed (no answer or
// error text ever contains the stored request or result).
const SECRET_REQUEST = 'S3CRET-REQUEST-7f1c';
const SECRET_RESULT = 'S3CRET-RESULT-9a2e';
const TENANT = 'acme';
const BINDING = { principal: 'svc', scopes: ['pay'], generation: 1 };
/** Hundreds of MiB, generated server-side: 250 MiB is about the largest a jsonb value can hold (268435455 bytes). */
const HUGE_MIB = 250;

let db: TestDatabase;
let admin: pg.Client;
let app: pg.Client;
let appPid: number;
/** Every text a hostile caller got back (answers, error messages, details, hints). */
const seen: string[] = [];
let hostileCalls = 0;
let open: { attempt: number; lease_token: string; fingerprint: string };

async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  return client;
}

const CLAIM = `select r.*, r.result::text as result_text from settle.claim(tenant => $1::text, key => $2::text,
  request => $3::jsonb, principal => $4::text, scopes => $5::text[], binding_generation => $6::bigint) r`;
const COMPLETE = `select r.*, r.result::text as result_text from settle.complete(tenant => $1, key => $2, attempt => $3,
  lease_token => $4, fingerprint => $5, principal => $6, scopes => $7::text[], binding_generation => $8, result => $9::jsonb) r`;
const GET = `select r.*, r.result::text as result_text from settle.get(tenant => $1, key => $2, request => $3::jsonb,
  principal => $4, scopes => $5::text[], binding_generation => $6) r`;

function claimArgs(over: { tenant?: unknown; key?: unknown; request?: unknown; generation?: number } = {}): unknown[] {
  return [
    'tenant' in over ? over.tenant : TENANT,
    'key' in over ? over.key : 'fresh-key',
    'request' in over ? over.request : JSON.stringify({ amount: 1 }),
    BINDING.principal,
    BINDING.scopes,
    over.generation ?? BINDING.generation,
  ];
}

/** Runs `run` expecting SQLSTATE `code`, with the stored row counts unchanged. */
async function expectRefused(code: string, run: () => Promise<unknown>): Promise<void> {
  hostileCalls++;
  const before = await storedCounts(admin);
  const error = await sqlErrorOf(run());
  seen.push(error.message, error.detail ?? '', error.hint ?? '');
  expect({ code: error.code, message: error.message }).toEqual({ code, message: expect.any(String) });
  expect(await storedCounts(admin)).toEqual(before);
}

/** The app connection after an error (a failed statement outside a transaction leaves it usable). */
async function appQuery<R extends pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<R[]> {
  const { rows } = await app.query<R>(text, values);
  seen.push(JSON.stringify(rows));
  return rows;
}

beforeAll(async () => {
  db = await createTestDatabase('hostile_input');
  admin = await connect(db.url);
  app = await connect(db.url);
  await app.query('set role settle_app');
  appPid = (await app.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid ?? 0;

  // A settled reservation holding secrets, and an open attempt to send observations to.
  const seed = (await app.query(CLAIM, claimArgs({ key: 'seed', request: JSON.stringify({ secret: SECRET_REQUEST }) })))
    .rows[0];
  await app.query(COMPLETE, [
    TENANT,
    'seed',
    seed.attempt,
    seed.lease_token,
    seed.fingerprint,
    BINDING.principal,
    BINDING.scopes,
    BINDING.generation,
    JSON.stringify({ secret: SECRET_RESULT }),
  ]);
  open = (await app.query(CLAIM, claimArgs({ key: 'open' }))).rows[0];
}, 120_000);

afterAll(async () => {
  recordFigures({ scenario: 'hostile-input', operations: hostileCalls, faults: hostileCalls, violations: 0 });
  await app?.end().catch(() => {});
  await admin?.end().catch(() => {});
  await db?.drop();
});

describe('malformed tenants and keys (as settle_app)', () => {
  for (const c of HOSTILE_NAMES) {
    it(`${c.label} -> ${c.sqlstate} from claim, complete and get`, async () => {
      await expectRefused(c.sqlstate, () => app.query(CLAIM, claimArgs({ [c.field]: c.value })));
      const ref = { tenant: TENANT, key: 'open', [c.field]: c.value };
      await expectRefused(c.sqlstate, () =>
        app.query(COMPLETE, [
          ref.tenant,
          ref.key,
          open.attempt,
          open.lease_token,
          open.fingerprint,
          BINDING.principal,
          BINDING.scopes,
          BINDING.generation,
          '{}',
        ]),
      );
      await expectRefused(c.sqlstate, () =>
        app.query(GET, [
          ref.tenant,
          ref.key,
          JSON.stringify({ amount: 1 }),
          BINDING.principal,
          BINDING.scopes,
          BINDING.generation,
        ]),
      );
    });
  }
});

describe('invalid UTF-8 and invalid JSON', () => {
  const invalidUtf8: [string, number[]][] = [
    ['a stray 0xFF byte', [0x61, 0xff, 0x62]],
    ['an overlong encoding of "/" (C0 AF)', [0x61, 0xc0, 0xaf]],
    ['an encoded UTF-16 surrogate (ED A0 80)', [0x61, 0xed, 0xa0, 0x80]],
    ['a truncated sequence (C3 at the end)', [0x61, 0xc3]],
  ];
  for (const [label, bytes] of invalidUtf8) {
    it(`${label} in a key sent as raw bytes -> 22021`, async () => {
      // pg sends a Buffer parameter in binary format: textrecv verifies the encoding.
      await expectRefused('22021', () => app.query(CLAIM, claimArgs({ key: Buffer.from(bytes) })));
    });
    it(`${label} through convert_from -> 22021`, async () => {
      await expectRefused('22021', () =>
        app.query(
          `select * from settle.claim(tenant => $1, key => convert_from($2::bytea, 'UTF8'), request => '{}', principal => 'svc')`,
          [TENANT, Buffer.from(bytes)],
        ),
      );
    });
  }

  it('invalid UTF-8 inside a binary jsonb request -> 22021', async () => {
    const body = Buffer.concat([Buffer.from([1]), Buffer.from('{"a":"x'), Buffer.from([0xff]), Buffer.from('"}')]);
    await expectRefused('22021', () => app.query(CLAIM, claimArgs({ request: body })));
  });

  it.each([
    ['NaN', 'NaN', '22P02'],
    ['Infinity', '{"amount": Infinity}', '22P02'],
    ['-Infinity', '{"amount": -Infinity}', '22P02'],
    ['a lone surrogate escape', '{"a": "\\ud800"}', '22P02'],
    ['a \\u0000 escape', '{"a": "\\u0000"}', '22P05'],
    ['trailing garbage', '{"a": 1} x', '22P02'],
  ])('request JSON with %s -> %s', async (_label, text, code) => {
    await expectRefused(code, () => app.query(CLAIM, claimArgs({ request: text })));
  });

  it('a numeric NaN converted with to_jsonb is the JSON string "NaN", never a number', async () => {
    const rows = await appQuery<{ t: string; v: string }>(
      `select jsonb_typeof(to_jsonb('NaN'::numeric)) as t, to_jsonb('NaN'::numeric)::text as v`,
    );
    expect(rows).toEqual([{ t: 'string', v: '"NaN"' }]);
  });

  it('through the client, NaN and Infinity are rejected before any SQL (typed SettleInputError, sqlstate null)', async () => {
    // Plain JSON.stringify would silently turn them into null: that is why the client must refuse.
    expect(JSON.stringify({ amount: Number.NaN })).toBe('{"amount":null}');
    const client = createSettleClient({ connectionString: db.url });
    try {
      for (const amount of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
        hostileCalls++;
        const before = await storedCounts(admin);
        const error: unknown = await client
          .claim({ tenant: TENANT, key: `nan-${String(amount)}`, request: { amount }, binding: BINDING })
          .then(
            () => undefined,
            (e: unknown) => e,
          );
        expect(error).toBeInstanceOf(SettleInputError);
        expect((error as SettleInputError).sqlstate).toBeNull();
        expect(await storedCounts(admin)).toEqual(before);
      }
    } finally {
      await client.end();
    }
  });
});

describe('oversized requests and results', () => {
  /** `{"x": "<n chars>"}` renders as n + 9 bytes of jsonb text. */
  const padded = (bytes: number): string => JSON.stringify({ x: 'a'.repeat(bytes - 9) });

  it('a request of exactly 64 KiB is accepted; one byte more -> SE004, nothing stored', async () => {
    await expectRefused('SE004', () => app.query(CLAIM, claimArgs({ key: 'big-request', request: padded(65_537) })));
    const before = await storedCounts(admin);
    const rows = await appQuery<{ outcome: string }>(CLAIM, claimArgs({ key: 'max-request', request: padded(65_536) }));
    expect(rows[0]?.outcome).toBe('acquired');
    expect((await storedCounts(admin)).operations).toBe(before.operations + 1);
  });

  it('a result one byte over 1 MiB -> SE005; the operation stays open without a result', async () => {
    await expectRefused('SE005', () =>
      app.query(COMPLETE, [
        TENANT,
        'open',
        open.attempt,
        open.lease_token,
        open.fingerprint,
        BINDING.principal,
        BINDING.scopes,
        BINDING.generation,
        padded(1_048_577),
      ]),
    );
    const { rows } = await admin.query(
      `select status::text, result from settle_private.operations where tenant = $1 and key = 'open'`,
      [TENANT],
    );
    expect(rows).toEqual([{ status: 'running', result: null }]);
  });

  it(`a ${HUGE_MIB} MiB request and result built server-side -> SE004 / SE005; 300 MiB cannot even be jsonb (54000)`, async () => {
    const huge = `jsonb_build_object('x', repeat('a', ${HUGE_MIB} * 1024 * 1024))`;
    const started = performance.now();
    await expectRefused('SE004', () =>
      app.query(`select * from settle.claim(tenant => $1, key => 'huge', request => ${huge}, principal => 'svc')`, [
        TENANT,
      ]),
    );
    await expectRefused('SE005', () =>
      app.query(
        `select * from settle.complete(tenant => $1, key => 'open', attempt => $2, lease_token => $3, fingerprint => $4,
        principal => $5, scopes => $6::text[], binding_generation => $7, result => ${huge})`,
        [
          TENANT,
          open.attempt,
          open.lease_token,
          open.fingerprint,
          BINDING.principal,
          BINDING.scopes,
          BINDING.generation,
        ],
      ),
    );
    await expectRefused('54000', () =>
      app.query(
        `select * from settle.claim(tenant => $1, key => 'huger', request => jsonb_build_object('x', repeat('a', 300 * 1024 * 1024)), principal => 'svc')`,
        [TENANT],
      ),
    );
    const seconds = (performance.now() - started) / 1000;
    const peakMiB = ((await backendPeakKiB(appPid)) ?? 0) / 1024;
    recordFigures({
      scenario: 'hostile-input/huge-payloads',
      operations: 3,
      faults: 3,
      violations: 0,
      details: { payloadMiB: HUGE_MIB, seconds: Number(seconds.toFixed(1)), backendPeakMiB: Math.round(peakMiB) },
    });
    // Bounded in memory: the backend holds several copies of the value (the text from repeat(),
    // the jsonb, and the jsonb::text rendering _check_json measures): ~2 GiB peak measured for
    // 250 MiB, recorded in docs/reliability.md; fail if it grows past 12 copies. The seconds are
    // recorded, not asserted (a loaded 2-core machine took 109 s where a quiet one takes ~20).
    if (peakMiB > 0) expect(peakMiB).toBeLessThan(HUGE_MIB * 12);
  }, 600_000);
});

describe('a different binding than the reservation', () => {
  it('claim with another binding generation -> conflict on binding_generation, nothing disclosed, only an audit row', async () => {
    const before = await storedCounts(admin);
    const rows = await appQuery<Record<string, unknown>>(
      CLAIM,
      claimArgs({ key: 'seed', request: JSON.stringify({ secret: SECRET_REQUEST }), generation: 2 }),
    );
    hostileCalls++;
    expect(rows[0]).toMatchObject({
      outcome: 'conflict',
      conflict_on: ['binding'],
      status: null,
      result: null,
      fingerprint: null,
      error: null,
      lease_token: null,
      attempt: null,
      settled_attempt: null,
    });
    const after: StoredCounts = await storedCounts(admin);
    expect(after).toEqual({ ...before, audit: before.audit + 1 });
    const stored = await admin.query(
      `select binding_generation::int as g, status::text from settle_private.operations where tenant = $1 and key = 'seed'`,
      [TENANT],
    );
    expect(stored.rows).toEqual([{ g: 1, status: 'completed' }]);
  });

  it('an observation under another generation -> conflict: a failure changes nothing, a success never settles or sees the result', async () => {
    const failRows = await appQuery<Record<string, unknown>>(
      `select r.* from settle.fail(tenant => $1, key => 'open', attempt => $2, lease_token => $3, fingerprint => $4,
         principal => $5, scopes => $6::text[], binding_generation => 2, error => '{"e":1}') r`,
      [TENANT, open.attempt, open.lease_token, open.fingerprint, BINDING.principal, BINDING.scopes],
    );
    const doneRows = await appQuery<Record<string, unknown>>(COMPLETE, [
      TENANT,
      'open',
      open.attempt,
      open.lease_token,
      open.fingerprint,
      BINDING.principal,
      BINDING.scopes,
      2,
      '{"paid":true}',
    ]);
    hostileCalls += 2;
    expect(failRows[0]).toMatchObject({ outcome: 'conflict', conflict_on: ['binding'], status: null, result: null });
    expect(doneRows[0]).toMatchObject({ outcome: 'conflict', conflict_on: ['binding'], status: null, result: null });
    const { rows } = await admin.query(
      `select status::text, result, settled_attempt from settle_private.operations where tenant = $1 and key = 'open'`,
      [TENANT],
    );
    // Order C of the protocol: flagged conflict, never completed, no result stored.
    expect(rows).toEqual([{ status: 'conflict', result: null, settled_attempt: null }]);
  });
});

describe('going around the API (as settle_app)', () => {
  const tables = ['settle_private.operations', 'settle_private.attempts', 'settle_private.audit_log'];
  const statements = tables.flatMap((t) => [
    `update ${t} set tenant = tenant`,
    `delete from ${t}`,
    `truncate ${t}`,
    `insert into ${t} (tenant, key) values ('x', 'y')`,
    `select * from ${t}`,
    `alter table ${t} disable trigger all`,
    `alter table ${t} disable trigger _900_refuse_delete`,
    `alter table ${t} no force row level security`,
    `drop trigger _900_refuse_truncate on ${t}`,
  ]);
  it.each(statements)('%s -> 42501', async (sql) => {
    await expectRefused('42501', () => app.query(sql));
  });

  it.each([
    'select * from settle.operations',
    'select * from settle.audit_log',
    'select * from settle.settlements',
    `select * from settle.redrive('acme', 'seed', 1, '{}', 'x')`,
    `select * from settle.purge('0 seconds')`,
    'select * from settle.expire_leases()',
    `select settle_private._canonical_json('{}')`,
  ])('%s -> 42501 (views and maintenance are not granted to settle_app)', async (sql) => {
    await expectRefused('42501', () => app.query(sql));
  });

  it('SET session_replication_role = replica -> 42501', async () => {
    await expectRefused('42501', () => app.query('set session_replication_role = replica'));
    expect((await appQuery<{ r: string }>(`select current_setting('session_replication_role') as r`))[0]?.r).toBe(
      'origin',
    );
  });

  it.each([
    'create table settle.shadow (id int)',
    'create table settle_private.shadow (id int)',
    `create view settle.shadow as select 1 as one`,
    `create function settle.claim(tenant text) returns int language sql as 'select 1'`,
    `create function settle_private._raise(code text) returns int language sql as 'select 1'`,
    'create sequence settle_private.shadow_seq',
    `create type settle.shadow as (a int)`,
  ])('%s -> 42501', async (sql) => {
    await expectRefused('42501', () => app.query(sql));
  });
});

describe('grants, from the catalog', () => {
  it('no function of settle / settle_private is executable by PUBLIC; settle_app holds no table, column or sequence privilege; nobody may CREATE there', async () => {
    expect(await catalogExposure(admin)).toEqual({
      publicExecutable: [],
      appRelationPrivileges: [],
      appColumnPrivileges: [],
      publicRelationPrivileges: [],
      createOnSchemas: [],
    });
    // The probe itself works: settle_app does execute the API.
    const { rows } = await admin.query<{ ok: boolean }>(
      `select has_function_privilege('settle_app', 'settle.claim(text, text, jsonb, text, text[], bigint, interval, text, integer, boolean)', 'EXECUTE') as ok`,
    );
    expect(rows[0]?.ok).toBe(true);
  });
});

describe('nothing disclosed', () => {
  it('no answer or error text a hostile caller received contains the stored request or result', () => {
    expect(seen.length).toBeGreaterThan(50);
    const leaks = seen.filter((text) => text.includes(SECRET_REQUEST) || text.includes(SECRET_RESULT));
    expect(leaks).toEqual([]);
  });
});
