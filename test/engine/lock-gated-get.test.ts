import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { auditTrail } from './support/inspect.js';
import { useLoginRoles } from './support/login-role.js';
import { acquire, claim, complete, get } from './support/settle.js';

// Reads are gated by the reservation lock. Every hostile call runs as a real login
// role granted settle_app (session_user is the caller), never as the superuser.
const db = useEngineDatabase('lock_gated_get');
const loginRole = useLoginRoles(db);

const SECRET = 'pay_secret_5d1e';

describe('settle.get is gated by the reservation lock', () => {
  it('mallory learns nothing from claim or get; alice reads her own result', async () => {
    const alice = await (await loginRole('alice', ['settle_app'])).connect();
    const mallory = await (await loginRole('mallory', ['settle_app'])).connect();
    const admin = await db.connect();
    const op = newOperation('secret', { request: { amt: 1 }, principal: 'alice', scopes: [] });
    await complete(alice, await acquire(alice, op), { payment_id: SECRET });

    const probe = { ...op, request: { amt: 1 }, principal: 'mallory', binding_generation: 0 };
    const claimed = await claim(mallory, probe);
    expect(claimed).toMatchObject({ outcome: 'conflict', result: null, status: null, fingerprint: null });
    const read = await get(mallory, probe);
    expect(read).toEqual({
      outcome: 'conflict',
      reason: 'lock_mismatch',
      status: null,
      attempt: null,
      settled_attempt: null,
      result: null,
      result_text: null,
      error: null,
      dead_lettered: null,
      in_flight: null,
      conflict_on: ['binding'],
      created_at: null,
    });
    expect(JSON.stringify([claimed, read])).not.toContain(SECRET);
    // The old unrestricted read is gone for settle_app: the two-argument form does not exist,
    // and settle.inspect is refused.
    expect(await sqlStateOf(mallory.query(`select * from settle.get('acme', $1)`, [op.key]))).toBe('42883');
    expect(await sqlStateOf(mallory.query(`select * from settle.inspect('acme', $1)`, [op.key]))).toBe('42501');

    const mine = await get(alice, op);
    expect(mine).toMatchObject({
      outcome: 'found',
      reason: null,
      status: 'completed',
      settled_attempt: 1,
      result: { payment_id: SECRET },
      conflict_on: null,
    });

    // The mismatched read is audited with what it presented, the granted read is not audited.
    const trail = await auditTrail(admin, op.tenant ?? '', op.key ?? '');
    const reads = trail.filter((row) => row.event === 'get');
    expect(reads).toHaveLength(1);
    expect(reads[0]).toMatchObject({ outcome: 'conflict', status_before: 'completed', status_after: 'completed' });
    expect(reads[0]?.detail).toMatchObject({
      conflict_on: ['principal', 'binding_generation'],
      presented: { principal: 'mallory', binding_generation: 0 },
    });
  });

  it('each part of the lock is checked: request, principal, scopes, generation', async () => {
    const app = await (await loginRole('svc', ['settle_app'])).connect();
    const op = newOperation('parts');
    await complete(app, await acquire(app, op), { ok: true });
    const cases: [Partial<typeof op>, string[]][] = [
      [{ request: { amount: '99.00', currency: 'EUR', to: 'acct-42' } }, ['request']],
      // Another binding learns only that it differs, never which part, nor
      // whether the request matched too (no oracle for recovering a lock part by part).
      [{ principal: 'someone-else' }, ['binding']],
      [{ scopes: ['payments:admin'] }, ['binding']],
      [{ binding_generation: 2 }, ['binding']],
      [{ principal: 'someone-else', request: { amount: '99.00', currency: 'EUR', to: 'acct-42' } }, ['binding']],
    ];
    for (const [change, conflictOn] of cases) {
      const read = await get(app, { ...op, ...change });
      expect(read).toMatchObject({
        outcome: 'conflict',
        status: null,
        result: null,
        error: null,
        conflict_on: conflictOn,
      });
    }
    // Scopes are a set, numbers are canonical: equivalent forms match.
    const same = await get(app, {
      ...op,
      scopes: ['payments:write', 'payments:write'],
      request: { to: 'acct-42', currency: 'EUR', amount: '10.00' },
    });
    expect(same).toMatchObject({ outcome: 'found', status: 'completed', result: { ok: true } });
  });

  it('not_found for a key nobody claimed, found with the live state while running', async () => {
    const app = await (await loginRole('svc', ['settle_app'])).connect();
    expect(await get(app, newOperation('nobody'))).toMatchObject({ outcome: 'not_found', status: null, result: null });
    const op = newOperation('running');
    await acquire(app, op);
    expect(await get(app, op)).toMatchObject({
      outcome: 'found',
      status: 'running',
      attempt: 1,
      in_flight: true,
      result: null,
    });
  });

  it('a get racing a settlement sees the state before or after it, never a half', async () => {
    const app = await (await loginRole('svc', ['settle_app'])).connect();
    const reader = await (await loginRole('reader', ['settle_app'])).connect();
    const op = newOperation('race');
    const ticket = await acquire(app, op);
    await app.query('begin');
    await complete(app, ticket, { n: 1 });
    // The settlement is not committed: the reader is not blocked and sees the running attempt.
    expect(await get(reader, op)).toMatchObject({ outcome: 'found', status: 'running', result: null });
    await app.query('commit');
    expect(await get(reader, op)).toMatchObject({ outcome: 'found', status: 'completed', result: { n: 1 } });
  });

  it('settle.inspect is the unrestricted read, for settle_readonly and settle_admin only', async () => {
    const app = await (await loginRole('svc', ['settle_app'])).connect();
    const ro = await (await loginRole('support', ['settle_readonly'])).connect();
    const op = newOperation('inspect');
    await complete(app, await acquire(app, op), { r: SECRET });
    const { rows } = await ro.query(`select status::text, result, principal, request from settle.inspect($1, $2)`, [
      op.tenant,
      op.key,
    ]);
    expect(rows).toEqual([
      { status: 'completed', result: { r: SECRET }, principal: op.principal, request: op.request },
    ]);
    const none = await ro.query(`select * from settle.inspect($1, 'no-such-key')`, [op.tenant]);
    expect(none.rows).toEqual([]);
  });

  it("no function settle_app may execute returns another lock's request, result, principal or fingerprint", async () => {
    const admin = await db.connect();
    // What settle_app can execute in schema settle, and can read: the allow-list below is the
    // whole surface. Every function on it answers a stranger with a conflict (tested above and
    // in claim-outcomes / settlement-orders; claim_many and complete_many decide each key by
    // claim and complete), or takes no key at all.
    const { rows } = await admin.query<{ fn: string }>(
      `select p.proname as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname = 'settle' and has_function_privilege('settle_app', p.oid, 'execute') order by 1`,
    );
    expect(rows.map((r) => r.fn)).toEqual([
      'claim',
      'claim_many',
      'complete',
      'complete_many',
      'fail',
      'fingerprint',
      'get',
      'heartbeat',
      'report_unknown',
      'status_rank',
    ]);
    // (settle.limits, if present, takes no key and returns only the engine's constants.)
    const views = await admin.query<{ relname: string }>(
      `select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'settle' and has_table_privilege('settle_app', c.oid, 'select')`,
    );
    expect(views.rows).toEqual([]);
  });
});
