import type pg from 'pg';
import { beforeAll, expect, it } from 'vitest';
import { newOperation } from '../engine/support/fixtures.js';
import { acquire, complete, reportUnknown, type Ticket } from '../engine/support/settle.js';
import { citusUrl, describeCitus, uniqueTenant, useCitus } from './support/cluster.js';
import { type CliRun, runCli } from '../support/cli.js';

// settle.metrics on Citus (its counting subqueries read an outer row, which Citus
// cannot plan over distributed tables: sql/citus/distribute.sql step 8 runs the same query in
// PL/pgSQL), and the CLI's `inspect` (settle.inspect plus the attempts and audit_log views, which
// read through SECURITY DEFINER functions on Citus) as each role that reads: a settle_readonly
// login, a settle_readonly login bound to one tenant, a settle_admin login, the superuser.
const citus = useCitus();
const BOUND_READER = 'settle_citus_reader_bound';

function cli(args: readonly string[], url: string): Promise<CliRun> {
  return runCli([...args, '--json'], { databaseUrl: url, timeoutMs: 120_000 });
}

async function needsReconciliation(app: pg.ClientBase, tenant: string, prefix: string): Promise<Ticket> {
  const ticket = await acquire(app, newOperation(prefix, { tenant, max_attempts: 1 }));
  await reportUnknown(app, ticket);
  return ticket;
}

interface MetricsRow {
  operations_unknown: string;
  dead_letters_needs_reconciliation: string;
  operations_in_flight: string;
  recent_window_seconds: number;
  feed_events_retained: string;
}

describeCitus('settle.metrics and the CLI inspect on a coordinator and two workers', () => {
  const [mine, theirs] = [uniqueTenant('metrics-mine'), uniqueTenant('metrics-theirs')];
  let done: Ticket;
  let other: Ticket;

  beforeAll(async () => {
    const su = await citus.coordinator();
    await su.query(`do $$ begin
        if not exists (select 1 from pg_roles where rolname = '${BOUND_READER}') then
          create role ${BOUND_READER} login in role settle_readonly;
        end if;
      end $$`);
    await su.query('select settle.grant_tenant($1, $2)', [BOUND_READER, mine]);
    const app = await citus.coordinator('settle_citus_app');
    await needsReconciliation(app, mine, 'metrics-unknown');
    other = await needsReconciliation(app, theirs, 'metrics-unknown-theirs');
    done = await acquire(app, newOperation('metrics-done', { tenant: mine }));
    await complete(app, done, { charge: 'ch-1' });
  });

  it('settle.metrics answers one row for every reading role; a bound reader counts its tenant only', async () => {
    for (const role of [undefined, 'settle_citus_readonly', 'settle_citus_admin', BOUND_READER] as const) {
      const c = role === undefined ? await citus.coordinator() : await citus.node('coordinator', role);
      const { rows } = await c.query<MetricsRow>('select * from settle.metrics');
      expect(rows, role ?? 'superuser').toHaveLength(1);
      const m = rows[0] as MetricsRow;
      expect(m.recent_window_seconds).toBe(300);
      if (role === BOUND_READER) {
        expect(Number(m.operations_unknown)).toBe(1);
        expect(Number(m.dead_letters_needs_reconciliation)).toBe(1);
      } else {
        expect(Number(m.operations_unknown)).toBeGreaterThanOrEqual(2);
      }
    }
    // The counts are the operations' own: the superuser's equals a count through the view.
    const su = await citus.coordinator();
    const [m, counted] = await Promise.all([
      su.query<MetricsRow>('select * from settle.metrics'),
      su.query<{ n: string }>(`select count(*) as n from settle.operations where status = 'unknown'`),
    ]);
    expect(Number(m.rows[0]?.operations_unknown)).toBe(Number(counted.rows[0]?.n));
  });

  it('pg-settle inspect works for the superuser, readonly, admin and a bound reader; the bound reader gets nothing of another tenant', async () => {
    for (const role of [undefined, 'settle_citus_readonly', 'settle_citus_admin', BOUND_READER]) {
      const run = await cli(['inspect', mine, done.key], citusUrl('coordinator', role));
      expect({ role, code: run.code, stderr: run.stderr }).toEqual({ role, code: 0, stderr: '' });
      expect(run.json).toMatchObject({
        ok: true,
        command: 'inspect',
        operation: { tenant: mine, key: done.key, status: 'completed', settledAttempt: 1 },
      });
      const attempts = run.json.attempts as { attempt: number }[];
      const audit = run.json.audit as { event: string }[];
      expect(attempts.map((a) => a.attempt)).toEqual([1]);
      expect(audit.length).toBeGreaterThan(0);
    }
    const refused = await cli(['inspect', theirs, other.key], citusUrl('coordinator', BOUND_READER));
    expect(refused.code).not.toBe(0);
    expect(refused.json).toMatchObject({ ok: false });
    expect(JSON.stringify(refused.json)).not.toContain('acct-42'); // nothing of the request
  }, 600_000);
});
