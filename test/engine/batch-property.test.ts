import fc from 'fast-check';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { claimMany, completeMany, type ClaimManyRow, type CompleteManyRow } from './support/batch.js';
import { useEngineDatabase } from './support/database.js';
import {
  acquire,
  claim,
  complete,
  fail,
  reportUnknown,
  type ClaimArgs,
  type ClaimRow,
  type ObservationRow,
  type Ticket,
} from './support/settle.js';

// A batch is its single calls made at one instant: from the same state, claim_many and
// complete_many answer every element exactly as settle.claim and settle.complete called one
// after the other in list order do, and leave the same rows. Two tenants start from the same
// state (built by single calls); one gets the batch, the other the single calls.
const db = useEngineDatabase('batch_property');

const KEYS = ['k-a', 'k-b', 'k-c', 'k-d'] as const;
const SETUPS = ['new', 'running', 'completed', 'failed_final', 'retryable_failed', 'unknown'] as const;
type Setup = (typeof SETUPS)[number];
const REQUESTS = [{ amount: '1.00' }, { amount: '2.00' }] as const;

const op = (tenant: string, key: string, request: unknown, rerun = true): ClaimArgs => ({
  tenant,
  key,
  request,
  principal: 'svc-prop',
  scopes: ['payments:write'],
  binding_generation: 3,
  lease: '30 seconds',
  worker: 'w',
  rerun_after_unknown: rerun,
});

async function prepare(app: pg.Client, tenant: string, setups: readonly Setup[]): Promise<void> {
  for (const [i, setup] of setups.entries()) {
    if (setup === 'new') continue;
    const ticket = await acquire(app, op(tenant, KEYS[i] as string, REQUESTS[0]));
    if (setup === 'completed') await complete(app, ticket, { done: i });
    if (setup === 'failed_final') await fail(app, ticket, { code: 'x' }, false);
    if (setup === 'retryable_failed') await fail(app, ticket, { code: 'y' }, true);
    if (setup === 'unknown') await reportUnknown(app, ticket);
  }
}

/** What must be equal between the two sides: everything but the random tokens and the clock. */
function claimAnswer(row: ClaimRow | ClaimManyRow): Record<string, unknown> {
  const { lease_token, lease_expires_at, retry_after_ms, ...rest } = row as ClaimManyRow;
  delete (rest as Partial<ClaimManyRow>).ordinal;
  delete (rest as Partial<ClaimManyRow>).key;
  return { ...rest, leased: lease_token !== null, expires: lease_expires_at !== null, retry: retry_after_ms !== null };
}

function observationAnswer(row: ObservationRow | CompleteManyRow): Record<string, unknown> {
  const rest: Partial<CompleteManyRow> = { ...row };
  delete rest.ordinal;
  delete rest.key;
  return rest;
}

async function stateOf(admin: pg.Client, tenant: string): Promise<unknown[]> {
  const { rows } = await admin.query(
    `select o.key, o.status, o.attempt, o.settled_attempt, o.result, o.error, o.dead_lettered_at is not null as dead,
            (select array_agg(a.observation::text || ':' || a.settled::text || ':' || coalesce(a.end_reason, '-') order by a.attempt)
               from settle.attempts a where a.tenant = o.tenant and a.key = o.key) as attempts,
            (select array_agg(l.event || ':' || l.outcome order by l.seq) from settle_private.audit_log l
              where l.tenant = o.tenant and l.key = o.key) as audit,
            (select array_agg(e.status::text || ':' || e.attempt order by e.event_id) from settle_private.feed_events e
              where e.tenant = o.tenant and e.key = o.key) as feed
       from settle_private.operations o where o.tenant = $1 order by o.key`,
    [tenant],
  );
  return rows;
}

interface Entry {
  readonly key: number;
  readonly request: number;
}

const scenario = fc.record({
  setups: fc.array(fc.constantFrom(...SETUPS), { minLength: KEYS.length, maxLength: KEYS.length }),
  claims: fc.array(fc.record({ key: fc.nat(KEYS.length - 1), request: fc.nat(1) }), { minLength: 1, maxLength: 8 }),
  rerun: fc.boolean(),
  // Per acquired claim, in order: how often it is completed (0-2) and with which result.
  completes: fc.array(fc.record({ times: fc.nat(2), result: fc.nat(1) }), { minLength: 8, maxLength: 8 }),
});

let run = 0;

describe('a batch is its single calls made at one instant', () => {
  it('claim_many and complete_many answer and write as settle.claim and settle.complete in list order', async () => {
    const app = await db.app();
    const admin = await db.connect();
    await fc.assert(
      fc.asyncProperty(scenario, async ({ setups, claims, rerun, completes }) => {
        run += 1;
        const batchTenant = `pa-${run}`;
        const singleTenant = `pb-${run}`;
        await prepare(app, batchTenant, setups);
        await prepare(app, singleTenant, setups);

        const list = (tenant: string) =>
          claims.map((e: Entry) => op(tenant, KEYS[e.key] as string, REQUESTS[e.request], rerun));
        const batchArgs = list(batchTenant);
        const first = batchArgs[0] as ClaimArgs;
        const batchRows = await claimMany(app, {
          tenant: batchTenant,
          keys: batchArgs.map((a) => a.key),
          requests: batchArgs.map((a) => a.request),
          principal: first.principal,
          scopes: first.scopes ?? [],
          binding_generation: first.binding_generation ?? 0,
          lease: '30 seconds',
          worker: 'w',
          rerun_after_unknown: rerun,
        });
        const singleRows: ClaimRow[] = [];
        for (const args of list(singleTenant)) singleRows.push(await claim(app, args));
        expect(batchRows.map((r) => r.ordinal)).toEqual(claims.map((_, i) => i + 1));
        expect(batchRows.map(claimAnswer)).toEqual(singleRows.map(claimAnswer));

        // The acquired claims, completed 0-2 times each (a repeat: duplicate or already_settled).
        const ticket = (tenant: string, row: ClaimRow, key: string): Ticket => ({
          tenant,
          key,
          attempt: row.attempt as number,
          lease_token: row.lease_token as string,
          fingerprint: row.fingerprint as string,
          principal: first.principal,
          scopes: first.scopes ?? [],
          binding_generation: first.binding_generation ?? 0,
        });
        const batchTickets: { t: Ticket; result: unknown }[] = [];
        const singleTickets: { t: Ticket; result: unknown }[] = [];
        batchRows.forEach((row, i) => {
          const single = singleRows[i] as ClaimRow;
          if (row.outcome !== 'acquired') return;
          const plan = completes[i] ?? { times: 1, result: 0 };
          for (let n = 0; n < plan.times; n++) {
            const result = { r: (plan.result + n) % 2 };
            batchTickets.push({ t: ticket(batchTenant, row, row.key), result });
            singleTickets.push({ t: ticket(singleTenant, single, row.key), result });
          }
        });
        if (batchTickets.length > 0) {
          const done = await completeMany(app, {
            tenant: batchTenant,
            keys: batchTickets.map((x) => x.t.key),
            attempts: batchTickets.map((x) => x.t.attempt),
            lease_tokens: batchTickets.map((x) => x.t.lease_token),
            fingerprints: batchTickets.map((x) => x.t.fingerprint),
            principal: first.principal,
            scopes: first.scopes ?? [],
            binding_generation: first.binding_generation ?? 0,
            results: batchTickets.map((x) => x.result),
          });
          const singles: ObservationRow[] = [];
          for (const x of singleTickets) singles.push(await complete(app, x.t, x.result));
          expect(done.map(observationAnswer)).toEqual(singles.map(observationAnswer));
        }
        expect(await stateOf(admin, batchTenant)).toEqual(await stateOf(admin, singleTenant));
      }),
      {
        numRuns: Number(process.env.BATCH_RUNS ?? 40),
        seed: process.env.BATCH_SEED === undefined ? undefined : Number(process.env.BATCH_SEED),
      },
    );
  }, 300_000);
});
