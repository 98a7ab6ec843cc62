import type pg from 'pg';
import { expect, it } from 'vitest';
import { newOperation } from '../engine/support/fixtures.js';
import { acquire, claim, complete, fail, reportUnknown, type ClaimArgs } from '../engine/support/settle.js';
import { describeCitus, useCitus } from './support/cluster.js';

// The guard triggers fire on the shards: a superuser connected straight to the worker that
// holds an operation, writing to its shard tables, is held to the same invariants.
const citus = useCitus();

async function completedOnWorker(): Promise<{ op: ClaimArgs; w: pg.Client; shard: (table: string) => string }> {
  const app = await citus.coordinator('settle_citus_app');
  const op = newOperation('guard');
  const ticket = await acquire(app, op);
  // The attempt reports unknown (its record: a row of the attempts' shard), then its success
  // settles (the settlement is logged on the operation row); the conflicting claim writes a row
  // of the audit log's shard.
  await reportUnknown(app, ticket);
  await complete(app, ticket, { done: true });
  expect(await claim(app, { ...op, request: { other: true } })).toMatchObject({ outcome: 'conflict' });
  const { worker } = await citus.placementOf(op.key as string);
  const w = await citus.worker(worker);
  await w.query('set citus.enable_manual_changes_to_shards = on');
  const admin = await citus.coordinator();
  const ids: Record<string, string> = {};
  for (const table of ['operations', 'attempts', 'audit_log']) {
    const { rows } = await admin.query<{ id: string }>(
      `select get_shard_id_for_distribution_column('settle_private.${table}', $1::text)::text as id`,
      [op.key],
    );
    ids[table] = `settle_private.${table}_${rows[0]?.id}`;
  }
  return { op, w, shard: (table) => ids[table] as string };
}

describeCitus('guards as a superuser on a worker shard', () => {
  it('the lattice, the result and the reservation lock hold, also under session_replication_role = replica', async () => {
    const { op, w, shard } = await completedOnWorker();
    const where = `where tenant = '${op.tenant}' and key = '${op.key}'`;
    await expect(w.query(`update ${shard('operations')} set status = 'pending' ${where}`)).rejects.toMatchObject({
      code: 'SE021',
    });
    await expect(
      w.query(`update ${shard('operations')} set result = '{"done": false}' ${where}`),
    ).rejects.toMatchObject({ code: 'SE022' });
    await expect(w.query(`update ${shard('operations')} set principal = 'mallory' ${where}`)).rejects.toMatchObject({
      code: 'SE020',
    });
    await w.query('set session_replication_role = replica');
    await expect(
      w.query(`update ${shard('operations')} set status = 'failed', error = '{}' ${where}`),
    ).rejects.toMatchObject({ code: 'SE021' });
    await w.query('reset session_replication_role');
  });

  it('attempt settlement, the append-only audit log and the delete guard hold on the shards', async () => {
    const { op, w, shard } = await completedOnWorker();
    const where = `where tenant = '${op.tenant}' and key = '${op.key}'`;
    await expect(
      w.query(`update ${shard('attempts')} set observation = 'failed', error = '{}', retryable = false ${where}`),
    ).rejects.toMatchObject({ code: 'SE024' });
    await expect(w.query(`update ${shard('audit_log')} set outcome = 'forged' ${where}`)).rejects.toMatchObject({
      code: 'SE023',
    });
    await expect(w.query(`delete from ${shard('audit_log')} ${where}`)).rejects.toMatchObject({ code: 'SE025' });
    await expect(w.query(`delete from ${shard('attempts')} ${where}`)).rejects.toMatchObject({ code: 'SE025' });
    await expect(w.query(`delete from ${shard('operations')} ${where}`)).rejects.toMatchObject({ code: 'SE025' });
  });

  it('an operation is settled only through an attempt that recorded no other outcome, on the shard', async () => {
    const app = await citus.coordinator('settle_citus_app');
    const admin = await citus.coordinator();
    const op = newOperation('guard-settled');
    const ticket = await acquire(app, op);
    expect(await fail(app, ticket, { code: 'declined' }, true)).toMatchObject({ outcome: 'recorded' });
    const { worker } = await citus.placementOf(op.key as string);
    const w = await citus.worker(worker);
    await w.query('set citus.enable_manual_changes_to_shards = on');
    const { rows } = await admin.query<{ id: string }>(
      `select get_shard_id_for_distribution_column('settle_private.operations', $1::text)::text as id`,
      [op.key],
    );
    await expect(
      w.query(
        `update settle_private.operations_${rows[0]?.id} set status = 'completed', result = '{}', settled_attempt = 1,
                settled_at = now(), settled_seq = 9, settled_audit_id = 9, settled_reason = 'forged'
          where tenant = $1 and key = $2`,
        [op.tenant, op.key],
      ),
    ).rejects.toMatchObject({ code: 'SE024' });
  });

  it('TRUNCATE of a shard is refused too', async () => {
    const { w, shard } = await completedOnWorker();
    for (const table of ['audit_log', 'attempts', 'operations']) {
      await expect(w.query(`truncate ${shard(table)} cascade`), table).rejects.toMatchObject({ code: 'SE025' });
    }
  });
});
