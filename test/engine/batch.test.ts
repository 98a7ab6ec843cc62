import { describe, expect, it } from 'vitest';
import {
  claimMany,
  claimManyOf,
  completeMany,
  completeManyOf,
  ticketsOf,
  type ClaimManyArgs,
} from './support/batch.js';
import { uniqueKey, useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation, TENANT } from './support/fixtures.js';
import { acquire, claim, complete } from './support/settle.js';

// settle.claim_many / settle.complete_many (00016): each key answered exactly as its single call.
const db = useEngineDatabase('batch');

const ops = (prefix: string, n: number) =>
  Array.from({ length: n }, (_, i) => newOperation(`${prefix}${i}`, { request: { amount: `${i}.00` } }));

async function counts(tenant: string, keys: readonly string[]): Promise<Record<string, number>> {
  const admin = await db.connect();
  const { rows } = await admin.query<Record<string, number>>(
    `select (select count(*)::int from settle_private.operations where tenant = $1 and key = any ($2)) as operations,
            (select count(*)::int from settle.attempts where tenant = $1 and key = any ($2)) as attempts,
            (select count(*)::int from settle.attempts where tenant = $1 and key = any ($2) and settled) as settled,
            (select count(*)::int from settle_private.audit_log where tenant = $1 and key = any ($2)) as audit,
            (select count(*)::int from settle_private.feed_events where tenant = $1 and key = any ($2)) as feed`,
    [tenant, keys],
  );
  return rows[0] ?? {};
}

describe('claim_many and complete_many', () => {
  it('claims and completes new keys: each its own attempt, lease, fingerprint, settlement and feed event; answers in list order', async () => {
    const app = await db.app();
    const batch = ops('b', 5).reverse();
    const args = claimManyOf(batch);
    const claimed = await claimMany(app, args);
    expect(claimed.map((r) => [r.ordinal, r.key, r.outcome, r.attempt, r.status])).toEqual(
      batch.map((o, i) => [i + 1, o.key, 'acquired', 1, 'running']),
    );
    expect(new Set(claimed.map((r) => r.lease_token)).size).toBe(5);
    const fps = await app.query<{ fp: string }>('select settle.fingerprint(r) as fp from unnest($1::jsonb[]) r', [
      batch.map((o) => JSON.stringify(o.request)),
    ]);
    expect(claimed.map((r) => r.fingerprint)).toEqual(fps.rows.map((r) => r.fp));

    const tickets = ticketsOf(args, claimed);
    const done = await completeMany(
      app,
      completeManyOf(
        tickets,
        tickets.map((t) => ({ paid: t.key })),
      ),
    );
    expect(done.map((r) => [r.ordinal, r.key, r.outcome, r.reason, r.status, r.settled_attempt])).toEqual(
      batch.map((o, i) => [i + 1, o.key, 'settled', 'current_attempt', 'completed', 1]),
    );
    expect(done.map((r) => r.result)).toEqual(batch.map((o) => ({ paid: o.key })));
    expect(
      await counts(
        TENANT,
        batch.map((o) => o.key as string),
      ),
    ).toEqual({ operations: 5, attempts: 5, settled: 5, audit: 0, feed: 5 });

    // Replays, per key, as settle.claim answers them.
    const again = await claimMany(app, args);
    expect(again.map((r) => [r.outcome, r.settled_attempt])).toEqual(batch.map(() => ['replay', 1]));
    expect(again.map((r) => r.result)).toEqual(batch.map((o) => ({ paid: o.key })));
  });

  it('a key listed twice is answered as a second caller would be: in_progress, conflict, duplicate', async () => {
    const app = await db.app();
    const [a, b] = ops('dup', 2) as [ReturnType<typeof newOperation>, ReturnType<typeof newOperation>];
    const args: ClaimManyArgs = {
      ...claimManyOf([a, b]),
      keys: [a.key, b.key, a.key, b.key],
      requests: [a.request, b.request, a.request, { other: true }],
    };
    const rows = await claimMany(app, args);
    expect(rows.map((r) => [r.ordinal, r.key, r.outcome])).toEqual([
      [1, a.key, 'acquired'],
      [2, b.key, 'acquired'],
      [3, a.key, 'in_progress'],
      [4, b.key, 'conflict'],
    ]);
    expect(rows[3]?.conflict_on).toEqual(['request']);
    const tickets = ticketsOf(args, rows);
    const ta = tickets[0];
    if (ta === undefined) throw new Error('no ticket');
    const done = await completeMany(app, completeManyOf([ta, ta, ta], [{ n: 1 }, { n: 1 }, { n: 2 }]));
    expect(done.map((r) => [r.outcome, r.reason])).toEqual([
      ['settled', 'current_attempt'],
      ['duplicate', null],
      ['already_settled', 'attempt_already_observed'],
    ]);
  });

  it('mixes every single-key answer in one batch: replay, in_progress, conflict, acquired', async () => {
    const app = await db.app();
    const [done, running, other, fresh] = ops('mix', 4) as [
      ReturnType<typeof newOperation>,
      ReturnType<typeof newOperation>,
      ReturnType<typeof newOperation>,
      ReturnType<typeof newOperation>,
    ];
    await complete(app, await acquire(app, done), { ok: 1 });
    await acquire(app, running);
    await acquire(app, other);
    const rows = await claimMany(app, {
      ...claimManyOf([done, running, other, fresh]),
      requests: [done.request, running.request, { changed: true }, fresh.request],
    });
    expect(rows.map((r) => r.outcome)).toEqual(['replay', 'in_progress', 'conflict', 'acquired']);
    expect(rows[0]?.result).toEqual({ ok: 1 });
    expect(rows[1]?.retry_after_ms).toBeGreaterThan(0);
    // The same answers a single claim gives now.
    expect((await claim(app, done)).outcome).toBe('replay');
    expect((await claim(app, running)).outcome).toBe('in_progress');
  });

  it('complete_many answers a stale or wrong token per key (fenced), and settles the rest', async () => {
    const app = await db.app();
    const batch = ops('fence', 3);
    const args = claimManyOf(batch);
    const tickets = ticketsOf(args, await claimMany(app, args));
    const forged = tickets.map((t, i) => (i === 1 ? { ...t, lease_token: '00000000-0000-4000-8000-000000000000' } : t));
    const rows = await completeMany(app, completeManyOf(forged, [1, 2, 3]));
    expect(rows.map((r) => [r.outcome, r.reason])).toEqual([
      ['settled', 'current_attempt'],
      ['fenced', 'invalid_token'],
      ['settled', 'current_attempt'],
    ]);
  });
});

describe('bad input: a typed error, nothing written', () => {
  const base = () => claimManyOf(ops('bad', 3));

  async function rejects(args: ClaimManyArgs): Promise<{ code: string; detail: unknown }> {
    const app = await db.app();
    try {
      await claimMany(app, args);
    } catch (error) {
      const e = error as { code?: string; detail?: string };
      const keys = (args.keys ?? []).filter((k): k is string => typeof k === 'string');
      expect(await counts(TENANT, keys)).toMatchObject({ operations: 0, attempts: 0, audit: 0 });
      return { code: e.code ?? '', detail: e.detail ? JSON.parse(e.detail) : null };
    }
    throw new Error('expected an error');
  }

  it('SE061: no key (empty or NULL keys array is SE061 / SE063)', async () => {
    expect((await rejects({ ...base(), keys: [], requests: [] })).code).toBe('SE061');
    expect((await rejects({ ...base(), keys: null })).code).toBe('SE063');
  });

  it('SE060: more than max_batch_keys keys', async () => {
    const keys = Array.from({ length: 1001 }, (_, i) => `k-${i}`);
    const r = await rejects({ ...base(), keys, requests: keys.map(() => ({})) });
    expect(r).toEqual({ code: 'SE060', detail: { field: 'keys', max_keys: 1000, keys: 1001 } });
  });

  it('SE064: requests holding more than max_batch_bytes (16 MiB) of JSON text together; 16 MiB exactly is claimed', async () => {
    // 257 requests of 65,300 bytes of JSON text: each under the 64 KiB of a single claim, 16.8 MB
    // together.
    const pad = 'x'.repeat(65_300 - '{"p": ""}'.length);
    const keys = Array.from({ length: 257 }, (_, i) => uniqueKey(`bytes-${i}`));
    const r = await rejects({ ...base(), keys, requests: keys.map(() => ({ p: pad })) });
    expect(r).toEqual({
      code: 'SE064',
      detail: { field: 'requests', max_bytes: 16_777_216, bytes: 257 * 65_300 },
    });
    // 256 requests of 65,536 bytes: exactly the limit, claimed.
    const full = 'x'.repeat(65_536 - '{"p": ""}'.length);
    const app = await db.app();
    const rows = await claimMany(app, {
      ...base(),
      keys: keys.slice(1),
      requests: keys.slice(1).map(() => ({ p: full })),
    });
    expect(new Set(rows.map((row) => row.outcome))).toEqual(new Set(['acquired']));
  });

  it('SE064: complete_many results holding more than max_batch_bytes together, nothing settled', async () => {
    const app = await db.app();
    const batch = ops('big-results', 17);
    const args = claimManyOf(batch);
    const tickets = ticketsOf(args, await claimMany(app, args));
    const big = { p: 'y'.repeat(1_000_000) };
    const error = await completeMany(
      app,
      completeManyOf(
        tickets,
        tickets.map(() => big),
      ),
    ).catch((e: unknown) => e);
    const e = error as { code?: string; detail?: string };
    expect(e.code).toBe('SE064');
    expect(JSON.parse(e.detail ?? 'null')).toMatchObject({ field: 'results', max_bytes: 16_777_216 });
    const admin = await db.connect();
    const settled = await admin.query<{ n: number }>(
      `select count(*)::int as n from settle.attempts where tenant = $1 and key = any ($2) and settled`,
      [TENANT, batch.map((o) => o.key)],
    );
    expect(settled.rows[0]?.n).toBe(0);
    // 16 of them fit.
    const rows = await completeMany(
      app,
      completeManyOf(
        tickets.slice(1),
        tickets.slice(1).map(() => big),
      ),
    );
    expect(new Set(rows.map((row) => row.outcome))).toEqual(new Set(['settled']));
  });

  it('SE062: arrays of different lengths, or not one-dimensional', async () => {
    const args = base();
    expect((await rejects({ ...args, requests: (args.requests ?? []).slice(1) })).detail).toMatchObject({
      field: 'requests',
      keys: 3,
      elements: 2,
    });
    const app = await db.app();
    expect(
      await sqlStateOf(
        app.query(
          `select * from settle.claim_many(tenant => 'acme', keys => '{{a,b}}'::text[], requests => '{{"{}","{}"}}'::jsonb[], principal => 'p')`,
        ),
      ),
    ).toBe('SE062');
    expect(
      await sqlStateOf(
        app.query(
          `select * from settle.complete_many(tenant => 'acme', keys => '{a}', attempts => '{1,1}', lease_tokens => '{${'00000000-0000-4000-8000-000000000000'}}',
         fingerprints => '{x}', principal => 'p', scopes => '{}', binding_generation => 0, results => '{"{}"}')`,
        ),
      ),
    ).toBe('SE062');
  });

  it('SE063: a NULL element names its array and ordinal', async () => {
    const args = base();
    expect((await rejects({ ...args, keys: [args.keys?.[0] ?? '', null, 'x'] })).detail).toEqual({
      field: 'keys',
      ordinal: 2,
    });
    expect((await rejects({ ...args, requests: [{}, {}, null] })).detail).toEqual({ field: 'requests', ordinal: 3 });
  });

  it("an element that breaks the single-key rules raises the single call's SQLSTATE with its ordinal", async () => {
    const args = base();
    const badKey = await rejects({ ...args, keys: [args.keys?.[0] ?? '', ' padded', 'x'] });
    expect(badKey).toMatchObject({ code: 'SE002', detail: { field: 'key', ordinal: 2 } });
    const bigRequest = await rejects({ ...args, requests: [{}, {}, { blob: 'x'.repeat(70_000) }] });
    expect(bigRequest).toMatchObject({ code: 'SE004', detail: { field: 'request', ordinal: 3 } });
    expect((await rejects({ ...args, tenant: ' ' })).code).toBe('SE001');
    expect((await rejects({ ...args, principal: '' })).code).toBe('SE003');
    expect((await rejects({ ...args, lease: '0 seconds' })).code).toBe('SE007');
  });

  it('complete_many: SE004 fingerprint, SE005 result, SE008 attempt, each with its ordinal; nothing settles', async () => {
    const app = await db.app();
    const args = base();
    const tickets = ticketsOf(args, await claimMany(app, args));
    const call = (patch: (i: number) => Record<string, unknown>, results: unknown[] = [1, 2, 3]) =>
      completeMany(app, {
        ...completeManyOf(
          tickets.map((t, i) => ({ ...t, ...patch(i) })),
          results,
        ),
      }).then(
        () => ({ code: 'none', detail: null }),
        (e: { code: string; detail: string }) => ({ code: e.code, detail: JSON.parse(e.detail) as unknown }),
      );
    expect(await call((i) => (i === 2 ? { fingerprint: 'v1:zz' } : {}))).toMatchObject({
      code: 'SE004',
      detail: { ordinal: 3 },
    });
    expect(await call((i) => (i === 0 ? { attempt: 0 } : {}))).toMatchObject({
      code: 'SE008',
      detail: { field: 'attempt', ordinal: 1 },
    });
    expect(await call(() => ({}), [1, { big: 'x'.repeat(1_100_000) }, 3])).toMatchObject({
      code: 'SE005',
      detail: { ordinal: 2 },
    });
    expect(
      await counts(
        TENANT,
        tickets.map((t) => t.key),
      ),
    ).toMatchObject({ operations: 3, settled: 0, feed: 0 });
  });
});

describe('grants', () => {
  it('settle_app executes the batch calls; settle_readonly and settle_consumer do not', async () => {
    const admin = await db.connect();
    const { rows } = await admin.query<{ role: string; claim: boolean; complete: boolean }>(
      `select r as role,
              has_function_privilege(r, 'settle.claim_many(text, text[], jsonb[], text, text[], bigint, interval, text, integer, boolean)', 'execute') as claim,
              has_function_privilege(r, 'settle.complete_many(text, text[], integer[], uuid[], text[], text, text[], bigint, jsonb[])', 'execute') as complete
         from unnest(array['settle_app', 'settle_readonly', 'settle_consumer', 'settle_reconciler']) r`,
    );
    expect(rows).toEqual([
      { role: 'settle_app', claim: true, complete: true },
      { role: 'settle_readonly', claim: false, complete: false },
      { role: 'settle_consumer', claim: false, complete: false },
      { role: 'settle_reconciler', claim: false, complete: false },
    ]);
  });
});
