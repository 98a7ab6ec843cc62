import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { useLoginRoles } from './support/login-role.js';
import { fingerprintOf, supersededPair } from './support/scenarios.js';
import { acquire, claim, complete, type Ticket } from './support/settle.js';

// The audit log cannot be flooded, and says who called. Refused, fenced and
// conflicting evidence is bounded per key (the first 20 rows in full, the rest counted in
// settle.audit_overflow with a chained digest), each row's presented values (payload, principal
// and scopes together) are capped, every row records the authenticated login apart from the
// caller-supplied worker, and purge removes what hangs off a purged key. Callers are real logins.
const db = useEngineDatabase('audit_bounds');
const loginRole = useLoginRoles(db);

const REFUSAL_ROWS = 20;
const EVIDENCE_BYTES = 8192;
// 64 scopes of 128 bytes: 8 KiB of scopes on their own, beside an 8 KiB result.
const HUGE_SCOPES = Array.from({ length: 64 }, (_, i) => `${String(i).padStart(3, '0')}${'s'.repeat(125)}`);

interface Written {
  rows: number;
  bytes: number;
  biggestDetail: number;
  overflow: number;
}

async function written(superuser: pg.Client, tenant: string, key: string): Promise<Written> {
  const { rows } = await superuser.query<{
    rows: string;
    bytes: string;
    biggest: string | null;
    overflow: string | null;
  }>(
    `select (select count(*) from settle_private.audit_log l where l.tenant = $1 and l.key = $2) as rows,
            (select coalesce(sum(octet_length(l::text)), 0) from settle_private.audit_log l where l.tenant = $1 and l.key = $2)
              + (select coalesce(sum(octet_length(x::text)), 0) from settle_private.audit_overflow x where x.tenant = $1 and x.key = $2) as bytes,
            (select max(octet_length(l.detail::text)) from settle_private.audit_log l where l.tenant = $1 and l.key = $2) as biggest,
            (select x.refusals from settle_private.audit_overflow x where x.tenant = $1 and x.key = $2) as overflow`,
    [tenant, key],
  );
  const r = rows[0]!;
  return {
    rows: Number(r.rows),
    bytes: Number(r.bytes),
    biggestDetail: Number(r.biggest ?? 0),
    overflow: Number(r.overflow ?? 0),
  };
}

/** `count` complete calls with random tokens on `ticket`'s key, from two connections racing. */
async function flood(clients: pg.Client[], ticket: Ticket, count: number): Promise<string[]> {
  const outcomes: string[] = [];
  const result = { big: 'x'.repeat(EVIDENCE_BYTES - 100) };
  await Promise.all(
    clients.map(async (client, c) => {
      for (let i = c; i < count; i += clients.length) {
        const forged = {
          ...ticket,
          lease_token: randomUUID(),
          attempt: 1 + (i % 3),
          principal: `mallory-${i}`,
          scopes: HUGE_SCOPES,
        };
        outcomes.push((await complete(client, forged, result)).outcome);
      }
    }),
  );
  return outcomes;
}

async function setup() {
  const superuser = await db.connect();
  const owner = await (await loginRole('svc', ['settle_app'])).connect();
  const attacker = await loginRole('mallory', ['settle_app']);
  const attackers = await Promise.all([attacker.connect(), attacker.connect()]);
  const admin = await (await loginRole('ops', ['settle_admin'])).connect();
  return { superuser, owner, attacker, attackers, admin };
}

describe('bounded, attributed audit evidence', () => {
  it('1,000 complete calls with random tokens on one live key write a bounded amount; the holder still settles', async () => {
    const { superuser, owner, attacker, attackers } = await setup();
    const ticket = await acquire(owner, newOperation('flood'));
    const outcomes = await flood(attackers, ticket, 1000);
    expect(new Set(outcomes)).toEqual(new Set(['fenced']));
    const w = await written(superuser, ticket.tenant, ticket.key);
    // The first 20 in full (one more per connection racing at the 20th: the count takes no lock).
    expect(w.rows).toBeGreaterThanOrEqual(REFUSAL_ROWS);
    expect(w.rows).toBeLessThanOrEqual(REFUSAL_ROWS + attackers.length - 1);
    expect(w.rows + w.overflow).toBe(1000);
    // Each full row's presented values are capped as a whole (result, principal and scopes).
    expect(w.biggestDetail).toBeLessThanOrEqual(EVIDENCE_BYTES + 512);
    expect(w.bytes).toBeLessThan(REFUSAL_ROWS * (EVIDENCE_BYTES + 1024) + 1024);
    const {
      rows: [over],
    } = await superuser.query(`select * from settle.audit_overflow where key = $1`, [ticket.key]);
    expect(over).toMatchObject({
      refusals: String(w.overflow),
      last_event: 'complete',
      last_outcome: 'fenced',
      last_login: attacker.name,
    });
    expect(over.digest).toMatch(/^[0-9a-f]{64}$/);
    // A row kept in full shows the cap: scopes as count, size and digest.
    const { rows: full } = await superuser.query<{ detail: { presented: Record<string, unknown> }; login: string }>(
      `select detail, login from settle.audit_log where key = $1 and outcome = 'fenced' limit 1`,
      [ticket.key],
    );
    expect(full[0]?.login).toBe(attacker.name);
    expect(full[0]?.detail.presented).toMatchObject({ scopes_truncated: { count: 64 } });
    expect((await complete(owner, ticket, { paid: true })).outcome).toBe('settled');
  });

  it('past the 20 refusals kept in full, a conflict that moves the status is still a row of its own', async () => {
    // The sequence a hidden interleaving tester found: conflicting claims fill the key's refusal
    // rows, attempt 1's lease lapses and attempt 2 takes over, then attempt 1's success arrives
    // with its own token and another request's fingerprint: conflict, and the status moves from
    // running to conflict. That move must be in the operation's history, never only counted.
    const { superuser, owner } = await setup();
    const op = newOperation('fold-move');
    const [stale] = await supersededPair(owner, superuser, op);
    for (let i = 0; i < REFUSAL_ROWS + 1; i++) {
      expect((await claim(owner, { ...op, request: { other: i } })).outcome).toBe('conflict');
    }
    const mismatched = { ...stale, fingerprint: await fingerprintOf(owner, { other: 'intent' }) };
    expect((await complete(owner, mismatched, { paid: true })).outcome).toBe('conflict');
    const { rows } = await superuser.query<{ status: string }>(
      'select status from settle_private.operations where tenant = $1 and key = $2',
      [op.tenant, op.key],
    );
    expect(rows[0]?.status).toBe('conflict');
    const { rows: moves } = await superuser.query<{ event: string; outcome: string; attempt: number }>(
      `select event, outcome, attempt from settle.audit_log
        where tenant = $1 and key = $2 and status_before is distinct from status_after order by seq, audit_id`,
      [op.tenant, op.key],
    );
    expect(moves.at(-1)).toEqual({ event: 'complete', outcome: 'conflict', attempt: 1 });
  });

  it('the same on a purged key; the next purge removes the tombstone with every row hanging off it', async () => {
    const { superuser, owner, attackers, admin } = await setup();
    const op = newOperation('purged');
    const ticket = await acquire(owner, op);
    expect((await complete(owner, ticket, { paid: true })).outcome).toBe('settled');
    await superuser.query(`update settle_private.settings set value = interval '0' where name = 'purge_min_retention'`);
    const purge = async () =>
      admin.query(`select settle.purge(older_than => interval '0 seconds', batch_size => 100000) as n`);
    await purge();
    expect((await written(superuser, ticket.tenant, ticket.key)).rows).toBe(1); // the tombstone
    const outcomes = await flood(attackers, ticket, 1000);
    expect(new Set(outcomes)).toEqual(new Set(['fenced']));
    const w = await written(superuser, ticket.tenant, ticket.key);
    expect(w.rows - 1).toBeGreaterThanOrEqual(REFUSAL_ROWS);
    expect(w.rows - 1).toBeLessThanOrEqual(REFUSAL_ROWS + attackers.length - 1);
    expect(w.rows - 1 + w.overflow).toBe(1000);
    // The tombstone rule: once nothing of the key is younger than the cutoff, it all goes.
    await purge();
    expect(await written(superuser, ticket.tenant, ticket.key)).toEqual({
      rows: 0,
      bytes: 0,
      biggestDetail: 0,
      overflow: 0,
    });
    // Nothing is left of the key: a straggler now meets a key never claimed (SE010), and a new claim starts afresh.
    expect(await sqlStateOf(complete(owner, ticket, { late: true }))).toBe('SE010');
    expect((await claim(owner, op)).outcome).toBe('acquired');
  });

  it('a re-claimed key keeps its tombstone while it has an operation', async () => {
    const { superuser, owner, admin } = await setup();
    const op = newOperation('again');
    expect((await complete(owner, await acquire(owner, op), { paid: 1 })).outcome).toBe('settled');
    await superuser.query(`update settle_private.settings set value = interval '0' where name = 'purge_min_retention'`);
    await admin.query(`select settle.purge(older_than => interval '0 seconds', batch_size => 100000)`);
    await acquire(owner, op);
    await admin.query(`select settle.purge(older_than => interval '0 seconds', batch_size => 100000)`);
    const { rows } = await superuser.query(
      `select event from settle_private.audit_log where tenant = $1 and key = $2`,
      [op.tenant, op.key],
    );
    expect(rows.map((r) => r.event)).toEqual(['purge']);
  });

  it('every row names the authenticated login apart from the worker the caller chose (forging a name changes nothing)', async () => {
    const { superuser } = await setup();
    const svcRole = await loginRole('svc_claims', ['settle_app']);
    const otherRole = await loginRole('svc_other', ['settle_app']);
    const settlerRole = await loginRole('svc_settles', ['settle_app']);
    const [svc, other, settler] = await Promise.all([svcRole.connect(), otherRole.connect(), settlerRole.connect()]);
    const op = newOperation('who', { worker: 'postgres' }); // a worker name that impersonates an admin
    const ticket = await acquire(svc, op);
    expect((await claim(other, { ...op, binding_generation: 9 })).outcome).toBe('conflict');
    expect((await complete(other, { ...ticket, lease_token: randomUUID() }, { x: 1 })).outcome).toBe('fenced');
    expect((await complete(settler, ticket, { ok: 1 })).outcome).toBe('settled');
    const { rows } = await superuser.query<{ event: string; outcome: string; actor: string | null; login: string }>(
      `select event, outcome, actor, login from settle.audit_log where tenant = $1 and key = $2 order by seq, audit_id`,
      [op.tenant, op.key],
    );
    expect(rows).toEqual(
      expect.arrayContaining([
        { event: 'claim', outcome: 'acquired', actor: 'postgres', login: svcRole.name },
        expect.objectContaining({ event: 'claim', outcome: 'conflict', login: otherRole.name }),
        expect.objectContaining({ event: 'complete', outcome: 'fenced', login: otherRole.name }),
        expect.objectContaining({ event: 'complete', outcome: 'settled', login: settlerRole.name }),
      ]),
    );
    for (const row of rows) expect(row.login).not.toBeNull();
    // Nobody can rewrite who claimed or who settled, even the owner: the attempt's login is
    // immutable, the settlement's too.
    await superuser.query('set role settle_owner');
    await expect(
      superuser.query(`update settle_private.operations set claimed_by = 'someone' where tenant = $1 and key = $2`, [
        op.tenant,
        op.key,
      ]),
    ).rejects.toMatchObject({ code: 'SE024' });
    await expect(
      superuser.query(`update settle_private.operations set settled_by = 'someone' where tenant = $1 and key = $2`, [
        op.tenant,
        op.key,
      ]),
    ).rejects.toMatchObject({ code: 'SE022' });
  });
});
