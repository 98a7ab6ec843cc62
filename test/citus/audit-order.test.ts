import { expect, it } from 'vitest';
import { newOperation } from '../engine/support/fixtures.js';
import { acquire, claim, complete, reportUnknown } from '../engine/support/settle.js';
import { describeCitus, useCitus } from './support/cluster.js';

const citus = useCitus();

describeCitus('audit order per operation without a global identity', () => {
  it("a key's rows written by its worker and by the coordinator are in (seq, audit_id) order, although audit_id is not", async () => {
    const [app, admin] = await Promise.all([citus.coordinator('settle_citus_app'), citus.coordinator()]);
    const op = newOperation('audit-order');
    // Delegated (the worker draws audit_id from its own, high range) ...
    const ticket = await acquire(app, op);
    await reportUnknown(app, ticket);
    // ... then inside a transaction block (the coordinator inserts, drawing from its low range) ...
    await app.query('begin');
    await claim(app, op);
    await app.query('commit');
    // ... then delegated again.
    await complete(app, ticket, { ok: true });
    const { rows } = await admin.query<{ seq: string; audit_id: string; event: string; outcome: string }>(
      `select seq::text, audit_id::text, event, outcome from settle.audit_log where tenant = $1 and key = $2 order by seq, audit_id`,
      [op.tenant, op.key],
    );
    expect(rows.map((r) => [r.seq, r.event, r.outcome])).toEqual([
      ['1', 'claim', 'acquired'],
      ['2', 'report_unknown', 'recorded'],
      ['3', 'claim', 'acquired'],
      ['4', 'complete', 'settled'],
    ]);
    const ids = rows.map((r) => BigInt(r.audit_id));
    const sortedById = [...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    expect(sortedById, 'audit_id alone would misorder this history').not.toEqual(ids);
  });
});
