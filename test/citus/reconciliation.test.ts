import type pg from 'pg';
import { beforeAll, expect, it } from 'vitest';
import { sqlStateOf } from '../engine/support/errors.js';
import { newOperation } from '../engine/support/fixtures.js';
import { acquire, complete, reportUnknown, type Ticket } from '../engine/support/settle.js';
import { describeCitus, remoteCommandsOf, uniqueTenant, useCitus } from './support/cluster.js';

// Reconciliation (00014) on Citus. settle.resolve is delegated to the key's
// worker through the STRICT entry settle._resolve (sql/citus/distribute.sql step 4): the
// resolution's audit row records the worker's transaction id, which the failure guard compares
// on the shard. lease_reconciliation scans every shard through the coordinator and leases
// per key (reconciliation_leases is colocated with the operations). Through real login roles.
const citus = useCitus();
const RECONCILER = 'settle_citus_reconciler';
const BOUND_RECONCILER = 'settle_citus_reconciler_bound';

async function needsReconciliation(app: pg.ClientBase, tenant: string, prefix: string): Promise<Ticket> {
  const ticket = await acquire(app, newOperation(prefix, { tenant, max_attempts: 1 }));
  expect(await reportUnknown(app, ticket)).toMatchObject({
    status: 'unknown',
    dead_letter_reason: 'needs_reconciliation',
  });
  return ticket;
}

/** The operation's state as the superuser reads it through the coordinator. */
async function stateOf(
  t: Pick<Ticket, 'tenant' | 'key'>,
): Promise<{ status: string; dead_letter_reason: string | null }> {
  const su = await citus.coordinator();
  const { rows } = await su.query<{ status: string; dead_letter_reason: string | null }>(
    `select status, dead_letter_reason from settle.operations where tenant = $1 and key = $2`,
    [t.tenant, t.key],
  );
  if (rows[0] === undefined) throw new Error(`no operation ${t.tenant}/${t.key}`);
  return rows[0];
}

// Every operation resolved here is read at its first attempt (max_attempts 1).
const RESOLVE = `select * from settle.resolve(tenant => $1, key => $2, fingerprint => $3, expected_attempt => 1, outcome => $4, reason => $5,
                                          result => $6::jsonb, error => $7::jsonb, evidence => $8::jsonb)`;

describeCitus('reconciliation on a coordinator and two workers', () => {
  beforeAll(async () => {
    const su = await citus.coordinator();
    for (const login of [RECONCILER, BOUND_RECONCILER]) {
      await su.query(`do $$ begin
          if not exists (select 1 from pg_roles where rolname = '${login}') then
            create role ${login} login in role settle_reconciler;
          end if;
        end $$`);
    }
  });

  it("lease_reconciliation through the coordinator leases across both workers; resolve (completed and failed) runs on the key's worker", async () => {
    const tenant = uniqueTenant('recon');
    const app = await citus.coordinator('settle_citus_app');
    const tickets: Ticket[] = [];
    const workers = new Set<number>();
    for (let i = 0; tickets.length < 4 || workers.size < 2; i++) {
      if (i > 40) throw new Error('40 random keys all hashed to one worker');
      const t = await needsReconciliation(app, tenant, `recon-${i}`);
      workers.add((await citus.placementOf(t.key)).worker);
      tickets.push(t);
    }
    const rec = await citus.node('coordinator', RECONCILER);
    const leased = (
      await rec.query<{ tenant: string; key: string; fingerprint: string; lease_token: string }>(
        `select * from settle.lease_reconciliation(holder => 'citus-reconciler', batch_size => 100000)`,
      )
    ).rows.filter((r) => r.tenant === tenant);
    expect(leased.map((r) => r.key).sort()).toEqual(tickets.map((t) => t.key).sort());
    // A second reconciler gets none of them while the leases hold.
    const rec2 = await citus.node('coordinator', RECONCILER);
    const second = (
      await rec2.query<{ tenant: string }>(
        `select * from settle.lease_reconciliation(holder => 'other', batch_size => 100000)`,
      )
    ).rows;
    expect(second.filter((r) => r.tenant === tenant)).toEqual([]);

    for (const [i, t] of tickets.entries()) {
      const outcome = i % 2 === 0 ? 'completed' : 'failed';
      const { value, commands } = await remoteCommandsOf(
        rec,
        async () =>
          (
            await rec.query(RESOLVE, [
              t.tenant,
              t.key,
              t.fingerprint,
              outcome,
              `TICKET-${i}: statement checked`,
              outcome === 'completed' ? JSON.stringify({ charge: `ch-${i}` }) : null,
              outcome === 'failed' ? JSON.stringify({ code: 'never_arrived' }) : null,
              JSON.stringify({ statement: i }),
            ])
          ).rows[0],
      );
      expect(value).toMatchObject({ outcome: 'resolved', status: outcome, status_before: 'unknown' });
      // Delegated: one remote command, the call of settle._resolve, on the key's worker.
      const { node } = await citus.placementOf(t.key);
      expect(commands.map((c) => c.node)).toEqual([`${RECONCILER}@${node}`]);
      expect(commands[0]?.command).toContain('settle._resolve(');
      expect(await stateOf(t)).toMatchObject({ status: outcome, dead_letter_reason: null });
      // A repeat is already_final and changes nothing.
      const again = (
        await rec.query(RESOLVE, [
          t.tenant,
          t.key,
          t.fingerprint,
          outcome,
          'repeat',
          outcome === 'completed' ? JSON.stringify({ charge: `ch-${i}` }) : null,
          outcome === 'failed' ? JSON.stringify({ code: 'never_arrived' }) : null,
          null,
        ])
      ).rows[0];
      expect(again).toMatchObject({ outcome: 'already_final', reason: 'matches', status: outcome });
    }
    // The resolutions are in the audit log (read through the admin's view) and the leases are gone.
    const admin = await citus.coordinator('settle_citus_admin');
    const { rows } = await admin.query<{ key: string; outcome: string; actor: string }>(
      `select key, outcome, actor from settle.audit_log where tenant = $1 and event = 'resolve' order by key, seq, audit_id`,
      [tenant],
    );
    expect(
      rows
        .filter((r) => r.outcome === 'resolved')
        .map((r) => r.key)
        .sort(),
    ).toEqual(tickets.map((t) => t.key).sort());
    expect(new Set(rows.map((r) => r.actor))).toEqual(new Set([RECONCILER]));
    const third = (
      await rec2.query<{ tenant: string }>(
        `select * from settle.lease_reconciliation(holder => 'third', batch_size => 100000)`,
      )
    ).rows;
    expect(third.filter((r) => r.tenant === tenant)).toEqual([]);
  });

  it("a reconciler bound to one tenant leases only that tenant's operations and cannot resolve another's", async () => {
    const [mine, theirs] = [uniqueTenant('recon-mine'), uniqueTenant('recon-theirs')];
    const su = await citus.coordinator();
    await su.query('select settle.grant_tenant($1, $2)', [BOUND_RECONCILER, mine]);
    const app = await citus.coordinator('settle_citus_app');
    const a = await needsReconciliation(app, mine, 'recon-bound');
    const b = await needsReconciliation(app, theirs, 'recon-other');
    const rec = await citus.node('coordinator', BOUND_RECONCILER);
    const leased = (
      await rec.query<{ tenant: string; key: string }>(
        `select * from settle.lease_reconciliation(holder => 'bound', batch_size => 100000)`,
      )
    ).rows;
    expect(leased.map((r) => r.tenant)).toEqual([mine]);
    expect(leased.map((r) => r.key)).toEqual([a.key]);
    expect(
      await sqlStateOf(rec.query(RESOLVE, [b.tenant, b.key, b.fingerprint, 'completed', 'not mine', '{}', null, null])),
    ).toBe('SE013');
    expect(
      (await rec.query(RESOLVE, [a.tenant, a.key, a.fingerprint, 'completed', 'mine', '{"ok":true}', null, null]))
        .rows[0],
    ).toMatchObject({ outcome: 'resolved' });
  });

  it('a late success racing a failed resolution: exactly one final outcome, the late success answered already_settled', async () => {
    const tenant = uniqueTenant('recon-race');
    const app = await citus.coordinator('settle_citus_app');
    const t = await needsReconciliation(app, tenant, 'recon-race');
    const rec = await citus.node('coordinator', RECONCILER);
    const late = await citus.coordinator('settle_citus_app');
    const [resolved, success] = await Promise.all([
      rec
        .query(RESOLVE, [
          t.tenant,
          t.key,
          t.fingerprint,
          'failed',
          'TICKET-9: never arrived',
          null,
          '{"code":"none"}',
          null,
        ])
        .then((r) => r.rows[0]),
      complete(late, t, { late: true }),
    ]);
    const final = await stateOf(t);
    if (final.status === 'completed') {
      // The late success came first: the resolution found it final.
      expect(resolved).toMatchObject({ outcome: 'already_final', reason: 'differs' });
      expect(success).toMatchObject({ status: 'completed' });
    } else {
      expect(final.status).toBe('failed');
      expect(resolved).toMatchObject({ outcome: 'resolved', status: 'failed' });
      expect(success).toMatchObject({ outcome: 'already_settled', status: 'failed' });
    }
  });

  it('inside BEGIN ... COMMIT (not delegated) a completed resolution works; a failed one is refused by the guard (SE021) and changes nothing', async () => {
    const tenant = uniqueTenant('recon-tx');
    const app = await citus.coordinator('settle_citus_app');
    const [ok, refused] = [
      await needsReconciliation(app, tenant, 'recon-tx-ok'),
      await needsReconciliation(app, tenant, 'recon-tx-no'),
    ];
    const rec = await citus.node('coordinator', RECONCILER);
    await rec.query('begin');
    expect(
      (
        await rec.query(RESOLVE, [
          ok.tenant,
          ok.key,
          ok.fingerprint,
          'completed',
          'in a transaction',
          '{"ok":1}',
          null,
          null,
        ])
      ).rows[0],
    ).toMatchObject({ outcome: 'resolved' });
    await rec.query('commit');
    await rec.query('begin');
    const state = await sqlStateOf(
      rec.query(RESOLVE, [
        refused.tenant,
        refused.key,
        refused.fingerprint,
        'failed',
        'in a transaction',
        null,
        '{"code":"x"}',
        null,
      ]),
    );
    await rec.query('rollback');
    expect(state).toBe('SE021');
    expect(await stateOf(refused)).toMatchObject({ status: 'unknown', dead_letter_reason: 'needs_reconciliation' });
    // Outside a transaction block the same resolution is delegated and succeeds.
    expect(
      (
        await rec.query(RESOLVE, [
          refused.tenant,
          refused.key,
          refused.fingerprint,
          'failed',
          'delegated',
          null,
          '{"code":"x"}',
          null,
        ])
      ).rows[0],
    ).toMatchObject({ outcome: 'resolved', status: 'failed' });
  });
});
