import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { mustGetOperation } from './support/inspect.js';
import { acquire, complete, type Ticket } from './support/settle.js';

// The schema holds every writer to the lattice, the superuser in psql included.
const db = useEngineDatabase('guards');

/**
 * A completed operation, and a superuser connection to poke at it. The success is reported
 * twice: the claim and the settlement are logged on the attempt row, the repeat (duplicate)
 * writes the operation's one row in settle_private.audit_log.
 */
async function completedOperation(prefix: string): Promise<{ admin: pg.Client; ticket: Ticket }> {
  const [app, admin] = await Promise.all([db.app(), db.connect()]);
  const ticket = await acquire(app, newOperation(prefix));
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
    it(`an attempt the operation does not name cannot be marked the settlement (23503, as a foreign key)${mode}`, async () => {
      const [app, admin] = await Promise.all([db.app(), db.connect()]);
      const ticket = await acquire(app, newOperation('guard-settled-as'));
      if (replica) await admin.query('set session_replication_role = replica');
      const forge = `update settle_private.attempts set observation = 'completed', observed_at = now(), settled = true, settled_as = 1,
                       settled_seq = 2, settled_audit_id = 0, settled_reason = 'forged' ${WHERE} and attempt = 1`;
      const error = await admin.query(forge, [ticket.tenant, ticket.key]).then(
        () => null,
        (e: { code?: string; constraint?: string }) => e,
      );
      expect(error).toMatchObject({ code: '23503', constraint: 'attempts_settlement_is_the_operations' });
      expect(await mustGetOperation(admin, ticket.tenant, ticket.key)).toMatchObject({
        status: 'running',
        settled_attempt: null,
      });
    });

    it(`an attempt without its operation, or inserted as a settlement the operation does not name, is refused (23503)${mode}`, async () => {
      const [app, admin] = await Promise.all([db.app(), db.connect()]);
      const ticket = await acquire(app, newOperation('guard-orphan'));
      if (replica) await admin.query('set session_replication_role = replica');
      const insert = (key: string, attempt: number, settled: boolean): string =>
        `insert into settle_private.attempts (tenant, key, attempt, lease_token, claimed_at${settled ? ', observation, observed_at, settled, settled_as, settled_seq, settled_audit_id, settled_reason' : ''})
         values ('${ticket.tenant}', '${key}', ${attempt}, gen_random_uuid(), now()${settled ? `, 'completed', now(), true, ${attempt}, 9, 9, 'forged'` : ''})`;
      const codeOf = (sql: string) =>
        admin.query(sql).then(
          () => null,
          (e: { code?: string; constraint?: string }) => e,
        );
      expect(await codeOf(insert(`${ticket.key}-missing`, 1, false))).toMatchObject({
        code: '23503',
        constraint: 'attempts_belong_to_operation',
      });
      expect(await codeOf(insert(ticket.key, 2, true))).toMatchObject({
        code: '23503',
        constraint: 'attempts_settlement_is_the_operations',
      });
      const { rows } = await admin.query<{ n: number }>(
        `select count(*)::int as n from settle_private.attempts where tenant = $1 and key like $2 || '%'`,
        [ticket.tenant, ticket.key],
      );
      expect(rows[0]?.n).toBe(1);
    });
  }

  it("a writer's claimed_by and settled_by are replaced by its login, whatever it passes", async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const ticket = await acquire(app, newOperation('guard-logins'));
    const args = [ticket.tenant, ticket.key];
    const loginOf = async (client: pg.Client) =>
      (await client.query<{ login: string }>('select session_user::text as login')).rows[0]?.login;
    const [appLogin, login] = await Promise.all([loginOf(app), loginOf(admin)]);
    // A settlement written by hand, as a DBA would: the operation, then its attempt, each
    // naming someone else.
    await admin.query('begin');
    await admin.query(
      `update settle_private.operations set status = 'completed', result = '{"by":"hand"}', settled_attempt = 1,
              settled_at = now(), lease_token = null, lease_expires_at = null, updated_at = now() ${WHERE}`,
      args,
    );
    await admin.query(
      `update settle_private.attempts set observation = 'completed', observed_at = now(), settled = true, settled_as = 1,
              ended_at = now(), end_reason = 'observed', settled_seq = 2, settled_audit_id = 0, settled_reason = 'by_hand',
              settled_by = 'mallory' ${WHERE} and attempt = 1`,
      args,
    );
    await admin.query('commit');
    // A new attempt inserted by hand under someone else's name, and one naming nobody.
    for (const [attempt, name] of [
      [2, `'mallory'`],
      [3, 'null'],
    ] as const) {
      await admin.query(
        `insert into settle_private.attempts (tenant, key, attempt, lease_token, claimed_at, claimed_by)
         values ($1, $2, ${attempt}, gen_random_uuid(), now(), ${name})`,
        args,
      );
    }
    const { rows } = await admin.query<{ attempt: number; claimed_by: string; settled_by: string | null }>(
      `select attempt, claimed_by, settled_by from settle_private.attempts ${WHERE} order by attempt`,
      args,
    );
    expect(rows).toEqual([
      { attempt: 1, claimed_by: appLogin, settled_by: login },
      { attempt: 2, claimed_by: login, settled_by: null },
      { attempt: 3, claimed_by: login, settled_by: null },
    ]);
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
    const { admin, ticket } = await completedOperation('guard-delete');
    const args = [ticket.tenant, ticket.key];
    expect(await sqlStateOf(admin.query(`delete from settle_private.operations ${WHERE}`, args))).toBe('SE025');
    expect(await sqlStateOf(admin.query(`delete from settle_private.attempts ${WHERE}`, args))).toBe('SE025');
    expect(await sqlStateOf(admin.query('truncate settle_private.attempts'))).toBe('SE025');
    expect(await mustGetOperation(admin, ticket.tenant, ticket.key)).toMatchObject({ status: 'completed' });
  });

  it('an attempt with a second, different terminal observation fails with SE024', async () => {
    const { admin, ticket } = await completedOperation('guard-attempt');
    const args = [ticket.tenant, ticket.key];
    expect(
      await sqlStateOf(
        admin.query(
          `update settle_private.attempts set observation = 'failed', error = '{"code":"forged"}', retryable = false ${WHERE}`,
          args,
        ),
      ),
    ).toBe('SE024');
    expect(
      await sqlStateOf(
        admin.query(`update settle_private.attempts set late_result = '{"receipt":"forged"}' ${WHERE}`, args),
      ),
    ).toBe('SE024');
    // The attempt's log of its claim and of its settlement (settle.audit_log's claim:acquired and
    // complete:settled rows) is as append-only as the audit log.
    for (const set of [
      'claim_seq = claim_seq + 10',
      "claim_status_before = 'pending'",
      "settled_reason = 'forged'",
      'settled_audit_id = settled_audit_id + 1',
    ]) {
      expect(await sqlStateOf(admin.query(`update settle_private.attempts set ${set} ${WHERE}`, args)), set).toBe(
        'SE024',
      );
    }
  });

  it('session_replication_role = replica does not disable them (ENABLE ALWAYS)', async () => {
    const { admin, ticket } = await completedOperation('guard-replica');
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
    const { admin, ticket } = await completedOperation('guard-columns');
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
      for (const set of identity) {
        expect(await sqlStateOf(admin.query(`update settle_private.attempts set ${set} ${WHERE}`, args)), set).toBe(
          'SE024',
        );
      }
    }
    expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).row_text).toBe(before.row_text);
    const named = await admin.query(
      `update settle_private.operations set tenant = tenant, key = key, request = request, created_at = created_at ${WHERE}`,
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
