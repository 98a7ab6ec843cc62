import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { mustGetOperation } from './support/inspect.js';
import { acquire, complete, fail, reportUnknown, type Ticket } from './support/settle.js';

// The schema holds every writer to the lattice, the superuser in psql included.
const db = useEngineDatabase('guards');

/**
 * A completed operation, and a superuser connection to poke at it. The success is reported
 * twice: the claim and the settlement are logged on the operation row, the repeat (duplicate)
 * writes the operation's one row in settle_private.audit_log. With `reportFirst` the attempt
 * reports unknown before its success settles (lease_released): its record is then in
 * settle_private.attempts too (observation unknown).
 */
async function completedOperation(
  prefix: string,
  options: { reportFirst?: boolean } = {},
): Promise<{ admin: pg.Client; ticket: Ticket }> {
  const [app, admin] = await Promise.all([db.app(), db.connect()]);
  const ticket = await acquire(app, newOperation(prefix));
  if (options.reportFirst) expect((await reportUnknown(app, ticket)).outcome).toBe('recorded');
  await complete(app, ticket, { receipt: 'r-1' });
  expect(await complete(app, ticket, { receipt: 'r-1' })).toMatchObject({ outcome: 'duplicate' });
  return { admin, ticket };
}

const WHERE = 'where tenant = $1 and key = $2';

describe('guard triggers hold for the superuser', () => {
  const updates = [
    { code: 'SE021', what: 'a status downgrade (completed -> unknown)', set: `status = 'unknown'` },
    { code: 'SE021', what: 'a status downgrade (completed -> failed)', set: `status = 'failed', error = '{}'` },
    { code: 'SE022', what: 'a change of the result after completion', set: `result = '{"receipt":"forged"}'` },
    { code: 'SE022', what: 'a change of the settled attempt', set: 'settled_attempt = null' },
    { code: 'SE020', what: 'a change of the fingerprint', set: `fingerprint = 'v1:' || repeat('0', 64)` },
    { code: 'SE020', what: 'a change of the principal', set: `principal = 'mallory'` },
    { code: 'SE020', what: 'a change of the request', set: `request = '{"amount":"1000000.00"}'` },
    { code: 'SE020', what: 'a change of the binding generation', set: 'binding_generation = binding_generation + 1' },
  ] as const;

  for (const { code, what, set } of updates) {
    it(`UPDATE with ${what} fails with ${code}`, async () => {
      const { admin, ticket } = await completedOperation('guard-update');
      const before = await mustGetOperation(admin, ticket.tenant, ticket.key);
      expect(
        await sqlStateOf(
          admin.query(`update settle_private.operations set ${set} ${WHERE}`, [ticket.tenant, ticket.key]),
        ),
      ).toBe(code);
      expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).row_text).toBe(before.row_text);
    });
  }

  for (const replica of [false, true]) {
    const mode = replica ? ', also under session_replication_role = replica' : '';
    it(`an operation is settled only through an attempt that recorded no other outcome (SE024)${mode}`, async () => {
      const [app, admin] = await Promise.all([db.app(), db.connect()]);
      const ticket = await acquire(app, newOperation('guard-settled-by-failed'));
      expect((await fail(app, ticket, { code: 'declined' }, true)).outcome).toBe('recorded');
      if (replica) await admin.query('set session_replication_role = replica');
      const forge = `update settle_private.operations set status = 'completed', result = '{}', settled_attempt = 1,
                       settled_at = now(), settled_seq = 9, settled_audit_id = 9, settled_reason = 'forged' ${WHERE}`;
      expect(await sqlStateOf(admin.query(forge, [ticket.tenant, ticket.key]))).toBe('SE024');
      expect(await mustGetOperation(admin, ticket.tenant, ticket.key)).toMatchObject({
        status: 'pending',
        settled_attempt: null,
      });
    });

    it(`a record without its operation, or not of its current attempt, is refused (23503)${mode}`, async () => {
      const [app, admin] = await Promise.all([db.app(), db.connect()]);
      const ticket = await acquire(app, newOperation('guard-orphan'));
      if (replica) await admin.query('set session_replication_role = replica');
      const insert = (key: string, attempt: number): string =>
        `insert into settle_private.attempts (tenant, key, attempt, lease_token, claimed_at)
         values ('${ticket.tenant}', '${key}', ${attempt}, gen_random_uuid(), now())`;
      const codeOf = (sql: string) =>
        admin.query(sql).then(
          () => null,
          (e: { code?: string; constraint?: string }) => e,
        );
      expect(await codeOf(insert(`${ticket.key}-missing`, 1))).toMatchObject({
        code: '23503',
        constraint: 'attempts_belong_to_operation',
      });
      for (const attempt of [1, 2]) {
        expect(await codeOf(insert(ticket.key, attempt))).toMatchObject({
          code: '23503',
          constraint: 'attempts_record_the_current_attempt',
        });
      }
      const { rows } = await admin.query<{ n: number }>(
        `select count(*)::int as n from settle_private.attempts where tenant = $1 and key like $2 || '%'`,
        [ticket.tenant, ticket.key],
      );
      expect(rows[0]?.n).toBe(0);
    });

    it(`a new attempt epoch needs a token of its own and the record of the one it supersedes (SE024)${mode}`, async () => {
      const [app, admin] = await Promise.all([db.app(), db.connect()]);
      const ticket = await acquire(app, newOperation('guard-epoch'));
      if (replica) await admin.query('set session_replication_role = replica');
      for (const set of ['attempt = 2', 'attempt = 2, attempt_token = gen_random_uuid()']) {
        expect(
          await sqlStateOf(
            admin.query(`update settle_private.operations set ${set} ${WHERE}`, [ticket.tenant, ticket.key]),
          ),
          set,
        ).toBe('SE024');
      }
      expect(await mustGetOperation(admin, ticket.tenant, ticket.key)).toMatchObject({ attempt: 1, status: 'running' });
    });
  }

  it("a writer's claimed_by and settled_by are replaced by its login, whatever it passes", async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const loginOf = async (client: pg.Client) =>
      (await client.query<{ login: string }>('select session_user::text as login')).rows[0]?.login;
    const login = await loginOf(admin);
    // An operation inserted by hand naming someone else as its claimer, then settled by hand
    // naming someone else as its settler.
    const key = `guard-logins-${Date.now()}`;
    await admin.query(
      `insert into settle_private.operations (tenant, key, fingerprint, request, principal, scopes, binding_generation,
         max_attempts, created_at, attempt, attempt_token, claimed_at, claimed_by, claim_seq, claim_audit_id,
         claim_status_after, status, lease_token, lease_expires_at, updated_at)
       values ('acme', $1, 'v1:' || repeat('a', 64), '{}', 'dba', '{}', 0, 3, now(), 1,
               '00000000-0000-4000-8000-000000000001', now(), 'mallory', 1, 0, 'running', 'running',
               '00000000-0000-4000-8000-000000000001', now() + interval '1 minute', now())`,
      [key],
    );
    await admin.query(
      `update settle_private.operations set status = 'completed', result = '{"by":"hand"}', settled_attempt = 1,
              settled_at = now(), settled_seq = 2, settled_audit_id = 0, settled_reason = 'by_hand', settled_by = 'mallory',
              lease_token = null, lease_expires_at = null, updated_at = now() where tenant = 'acme' and key = $1`,
      [key],
    );
    const { rows } = await admin.query<{ claimed_by: string; settled_by: string }>(
      `select claimed_by, settled_by from settle_private.operations where tenant = 'acme' and key = $1`,
      [key],
    );
    expect(rows).toEqual([{ claimed_by: login, settled_by: login }]);
    // A new epoch written by hand (the record of the one it supersedes first) under another name.
    const ticket = await acquire(app, newOperation('guard-logins-epoch'));
    const args = [ticket.tenant, ticket.key];
    expect((await fail(app, ticket, { code: 'declined' }, true)).outcome).toBe('recorded');
    await admin.query(
      `update settle_private.operations set attempt = 2, attempt_token = gen_random_uuid(), claimed_by = 'mallory',
              claim_seq = null, claim_audit_id = null, claim_status_before = null, claim_status_after = null ${WHERE}`,
      args,
    );
    const { rows: epoch } = await admin.query<{ claimed_by: string }>(
      `select claimed_by from settle_private.operations ${WHERE}`,
      args,
    );
    expect(epoch).toEqual([{ claimed_by: login }]);
  });

  it('audit_log: UPDATE fails with SE023, DELETE and TRUNCATE with SE025', async () => {
    const { admin, ticket } = await completedOperation('guard-audit');
    const args = [ticket.tenant, ticket.key];
    expect(await sqlStateOf(admin.query(`update settle_private.audit_log set outcome = 'forged' ${WHERE}`, args))).toBe(
      'SE023',
    );
    expect(await sqlStateOf(admin.query(`delete from settle_private.audit_log ${WHERE}`, args))).toBe('SE025');
    expect(await sqlStateOf(admin.query('truncate settle_private.audit_log'))).toBe('SE025');
    const { rows } = await admin.query<{ n: number }>(
      `select count(*)::int as n from settle_private.audit_log ${WHERE}`,
      args,
    );
    expect(rows[0]?.n).toBe(1);
  });

  it('DELETE from operations and attempts, TRUNCATE of attempts fail with SE025', async () => {
    const { admin, ticket } = await completedOperation('guard-delete', { reportFirst: true });
    const args = [ticket.tenant, ticket.key];
    expect(await sqlStateOf(admin.query(`delete from settle_private.operations ${WHERE}`, args))).toBe('SE025');
    expect(await sqlStateOf(admin.query(`delete from settle_private.attempts ${WHERE}`, args))).toBe('SE025');
    expect(await sqlStateOf(admin.query('truncate settle_private.attempts'))).toBe('SE025');
    expect(await mustGetOperation(admin, ticket.tenant, ticket.key)).toMatchObject({ status: 'completed' });
  });

  it('an attempt with a second, different terminal observation fails with SE024', async () => {
    // Attempt 1 reported unknown (its record: observation unknown), then its success settled the
    // operation (lease_released): it observed completed, the operation's settlement.
    const { admin, ticket } = await completedOperation('guard-attempt', { reportFirst: true });
    const args = [ticket.tenant, ticket.key];
    expect(
      await sqlStateOf(
        admin.query(
          `update settle_private.attempts set observation = 'failed', error = '{"code":"forged"}', retryable = false ${WHERE}`,
          args,
        ),
      ),
    ).toBe('SE024');
    // A failed attempt's record keeps its failure.
    const [app] = await Promise.all([db.app()]);
    const failed = await acquire(app, newOperation('guard-attempt-failed'));
    expect((await fail(app, failed, { code: 'declined' }, true)).outcome).toBe('recorded');
    const failedArgs = [failed.tenant, failed.key];
    for (const set of [
      `observation = 'completed', late_result = '{"receipt":"forged"}'`,
      `error = '{"code":"forged"}'`,
    ]) {
      expect(await sqlStateOf(admin.query(`update settle_private.attempts set ${set} ${WHERE}`, failedArgs)), set).toBe(
        'SE024',
      );
    }
    // The log of an attempt's claim (settle.audit_log's claim:acquired rows) and of the
    // settlement (complete:settled) is as append-only as the audit log.
    for (const set of ['claim_seq = claim_seq + 10', "claim_status_before = 'pending'"]) {
      expect(await sqlStateOf(admin.query(`update settle_private.attempts set ${set} ${WHERE}`, args)), set).toBe(
        'SE024',
      );
    }
    for (const set of ["settled_reason = 'forged'", 'settled_audit_id = settled_audit_id + 1', "settled_by = 'x'"]) {
      expect(await sqlStateOf(admin.query(`update settle_private.operations set ${set} ${WHERE}`, args)), set).toBe(
        'SE022',
      );
    }
  });

  it('session_replication_role = replica does not disable them (ENABLE ALWAYS)', async () => {
    const { admin, ticket } = await completedOperation('guard-replica', { reportFirst: true });
    const args = [ticket.tenant, ticket.key];
    await admin.query('set session_replication_role = replica');
    expect(
      await sqlStateOf(admin.query(`update settle_private.operations set status = 'running' ${WHERE}`, args)),
    ).toBe('SE021');
    expect(await sqlStateOf(admin.query(`update settle_private.operations set result = '{}' ${WHERE}`, args))).toBe(
      'SE022',
    );
    expect(await sqlStateOf(admin.query(`update settle_private.operations set principal = 'x' ${WHERE}`, args))).toBe(
      'SE020',
    );
    expect(await sqlStateOf(admin.query(`delete from settle_private.operations ${WHERE}`, args))).toBe('SE025');
    expect(await sqlStateOf(admin.query(`update settle_private.audit_log set outcome = 'x' ${WHERE}`, args))).toBe(
      'SE023',
    );
    expect(
      await sqlStateOf(
        admin.query(
          `update settle_private.attempts set observation = 'failed', error = '{}', retryable = true ${WHERE}`,
          args,
        ),
      ),
    ).toBe('SE024');
    const { rows } = await admin.query<{ tgname: string; tgenabled: string }>(
      `select tgname, tgenabled from pg_trigger t join pg_class c on c.oid = t.tgrelid
         join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'settle_private' and not t.tgisinternal and t.tgenabled <> 'A'`,
    );
    expect(rows).toEqual([]);
  });

  // The reservation lock of an operation and the identity of an attempt are guarded by triggers
  // that fire only for an UPDATE naming one of their columns (BEFORE UPDATE OF): every
  // such column is held, also named next to others, for the superuser and in replica mode; an
  // UPDATE naming one without changing it (as a logically replicated row does) passes.
  it("every column of the reservation lock and of an attempt's identity is held by the column triggers", async () => {
    const { admin, ticket } = await completedOperation('guard-columns', { reportFirst: true });
    const args = [ticket.tenant, ticket.key];
    const before = await mustGetOperation(admin, ticket.tenant, ticket.key);
    const lock = [
      `tenant = 'other'`,
      `key = key || 'x'`,
      `fingerprint = 'v1:' || repeat('1', 64)`,
      `request = '{}'`,
      `principal = 'mallory'`,
      `scopes = '{admin}'`,
      'binding_generation = 7',
      "created_at = created_at - interval '1 day'",
    ];
    // The current attempt on the operation row (trigger _060_guard_attempt) ...
    const current = [
      `claimed_by = 'mallory'`,
      'attempt_token = gen_random_uuid()',
      `worker = 'mallory'`,
      'claimed_at = now()',
      'claim_seq = claim_seq + 1',
      'claim_audit_id = claim_audit_id + 1',
      `claim_status_before = 'unknown'`,
      `claim_status_after = 'unknown'`,
    ];
    // ... and an attempt's record (_050_guard_identity).
    const identity = [
      `tenant = 'other'`,
      `key = key || 'x'`,
      `claimed_by = 'mallory'`,
      'attempt = 2',
      'lease_token = gen_random_uuid()',
      `worker = 'mallory'`,
      'claimed_at = now()',
      'claim_seq = claim_seq + 1',
      'claim_audit_id = claim_audit_id + 1',
      `claim_status_before = 'unknown'`,
      `claim_status_after = 'unknown'`,
    ];
    for (const replica of [false, true]) {
      await admin.query(`set session_replication_role = ${replica ? 'replica' : 'origin'}`);
      for (const set of lock) {
        expect(
          await sqlStateOf(
            admin.query(`update settle_private.operations set updated_at = now(), ${set} ${WHERE}`, args),
          ),
          set,
        ).toBe('SE020');
      }
      for (const set of current) {
        expect(
          await sqlStateOf(
            admin.query(`update settle_private.operations set updated_at = now(), ${set} ${WHERE}`, args),
          ),
          set,
        ).toBe('SE024');
      }
      for (const set of identity) {
        expect(await sqlStateOf(admin.query(`update settle_private.attempts set ${set} ${WHERE}`, args)), set).toBe(
          'SE024',
        );
      }
    }
    expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).row_text).toBe(before.row_text);
    const named = await admin.query(
      `update settle_private.operations set tenant = tenant, key = key, request = request, created_at = created_at,
              attempt = attempt, attempt_token = attempt_token, claim_seq = claim_seq ${WHERE}`,
      args,
    );
    expect(named.rowCount).toBe(1);
    const namedAttempt = await admin.query(
      `update settle_private.attempts set claimed_by = claimed_by, lease_token = lease_token, claim_seq = claim_seq ${WHERE}`,
      args,
    );
    expect(namedAttempt.rowCount).toBe(1);
  });
});
