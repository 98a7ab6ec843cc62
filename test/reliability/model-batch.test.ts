import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  EMPTY_WORLD,
  meets,
  step,
  type Answer,
  type Call,
  type Lock,
  type World,
} from '../../src/model/protocol-model.js';
import { useReliabilityDatabase } from './support/database.js';
import pg from 'pg';

// Batches against the reference model (src/model/protocol-model.ts): random sequences of
// settle.claim_many and settle.complete_many calls over three keys, as settle_app. A batch must be
// its single calls made at one instant: every element's answer must be one the model allows for
// that single call, taken in the batch's fixed order (key COLLATE "C", then ordinal), each in the
// world the previous element left. (The concurrent model-based test, model-based.test.ts, drives
// the single calls; this file adds the batch forms without touching its driver.)
const db = useReliabilityDatabase('model_batch');

const KEYS = ['a', 'b', 'c'] as const;
const REQUESTS = ['r1', 'r2'] as const;
const BINDING = { principal: 'svc', scopes: ['w'], generation: 1 } as const;
const LEASE_US = 30_000_000;
const NOW = `(extract(epoch from clock_timestamp()) * 1000000)::bigint::text as now_us`;
const usOf = (column: string) => `(extract(epoch from ${column}) * 1000000)::bigint::text`;

interface Ticket {
  readonly key: string;
  readonly attempt: number;
  readonly token: string;
  readonly fingerprint: string;
  readonly request: string;
}

const lockOf = (request: string): Lock => ({ request, ...BINDING, scopes: [...BINDING.scopes] });
const marker = (text: string | null): string | null => {
  if (text === null) return null;
  const value = JSON.parse(text) as unknown;
  return typeof value === 'object' && value !== null && 'm' in value ? String((value as { m: unknown }).m) : text;
};

function answerOf(row: Record<string, unknown>): Answer {
  const str = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
  return {
    outcome: String(row.outcome),
    reason: str(row.reason),
    status: str(row.status),
    attempt: (row.attempt as number | null) ?? null,
    result: marker(str(row.result_text)),
    settledAttempt: (row.settled_attempt as number | null) ?? null,
    error: marker(str(row.error_text)),
    deadLettered: (row.dead_lettered as boolean | null) ?? null,
    deadLetterReason: str(row.dead_letter_reason),
    conflictOn: (row.conflict_on as string[] | null) ?? null,
    leaseExpiresAt: row.lease_us === null || row.lease_us === undefined ? null : Number(row.lease_us),
    leaseToken: str(row.lease_token),
  };
}

type BatchStep =
  | { readonly kind: 'claim'; readonly items: readonly { readonly key: number; readonly request: number }[] }
  | { readonly kind: 'complete'; readonly items: readonly { readonly ticket: number; readonly result: number }[] };

const batchStep: fc.Arbitrary<BatchStep> = fc.oneof(
  fc.record({
    kind: fc.constant('claim' as const),
    items: fc.array(fc.record({ key: fc.nat(KEYS.length - 1), request: fc.nat(REQUESTS.length - 1) }), {
      minLength: 1,
      maxLength: 5,
    }),
  }),
  fc.record({
    kind: fc.constant('complete' as const),
    items: fc.array(fc.record({ ticket: fc.nat(7), result: fc.nat(2) }), { minLength: 1, maxLength: 5 }),
  }),
);

let sequence = 0;

describe('batches against the reference model', () => {
  it('every element of claim_many / complete_many answers as the model allows its single call, in the fixed order', async () => {
    const app = new pg.Client({ connectionString: db.url });
    await app.connect();
    await app.query('set role settle_app');
    try {
      await fc.assert(
        fc.asyncProperty(fc.array(batchStep, { minLength: 1, maxLength: 8 }), async (steps) => {
          sequence += 1;
          const tenant = `mb-${sequence}`;
          const id = (key: string) => `${tenant}/${key}`;
          let world: World = EMPTY_WORLD;
          const tickets: Ticket[] = [];
          for (const s of steps) {
            const lo = Number((await app.query<{ now_us: string }>(`select ${NOW}`)).rows[0]?.now_us);
            let calls: { call: Call; key: string }[];
            let rows: Record<string, unknown>[];
            if (s.kind === 'claim') {
              const keys = s.items.map((i) => KEYS[i.key] as string);
              const requests = s.items.map((i) => REQUESTS[i.request] as string);
              calls = s.items.map((_, n) => ({
                key: keys[n] as string,
                call: {
                  kind: 'claim',
                  id: id(keys[n] as string),
                  lock: lockOf(requests[n] as string),
                  leaseUs: LEASE_US,
                  maxAttempts: 3,
                },
              }));
              rows = (
                await app.query(
                  `select r.*, r.result::text as result_text, r.error::text as error_text, ${usOf('r.lease_expires_at')} as lease_us
                   from settle.claim_many(tenant => $1, keys => $2::text[], requests => $3::jsonb[], principal => $4,
                                          scopes => $5::text[], binding_generation => $6, lease => '30 seconds', max_attempts => 3) r`,
                  [
                    tenant,
                    keys,
                    requests.map((r) => JSON.stringify({ req: r })),
                    BINDING.principal,
                    BINDING.scopes,
                    BINDING.generation,
                  ],
                )
              ).rows;
              rows.forEach((row, n) => {
                if (row.outcome === 'acquired') {
                  tickets.push({
                    key: keys[n] as string,
                    attempt: row.attempt as number,
                    token: row.lease_token as string,
                    fingerprint: row.fingerprint as string,
                    request: requests[n] as string,
                  });
                }
              });
            } else {
              if (tickets.length === 0) continue;
              const chosen = s.items.map((i) => ({
                t: tickets[i.ticket % tickets.length] as Ticket,
                result: `res${i.result}`,
              }));
              calls = chosen.map(({ t, result }) => ({
                key: t.key,
                call: {
                  kind: 'complete',
                  id: id(t.key),
                  attempt: t.attempt,
                  token: t.token,
                  lock: lockOf(t.request),
                  result,
                },
              }));
              rows = (
                await app.query(
                  `select r.*, r.result::text as result_text, r.error::text as error_text
                   from settle.complete_many(tenant => $1, keys => $2::text[], attempts => $3::integer[], lease_tokens => $4::uuid[],
                                             fingerprints => $5::text[], principal => $6, scopes => $7::text[],
                                             binding_generation => $8, results => $9::jsonb[]) r`,
                  [
                    tenant,
                    chosen.map((c) => c.t.key),
                    chosen.map((c) => c.t.attempt),
                    chosen.map((c) => c.t.token),
                    chosen.map((c) => c.t.fingerprint),
                    BINDING.principal,
                    BINDING.scopes,
                    BINDING.generation,
                    chosen.map((c) => JSON.stringify({ m: c.result })),
                  ],
                )
              ).rows;
            }
            const hi = Number((await app.query<{ now_us: string }>(`select ${NOW}`)).rows[0]?.now_us);
            expect(rows.map((r) => r.ordinal)).toEqual(calls.map((_, n) => n + 1));
            // The fixed order: key (C collation: these keys are ASCII), then the ordinal.
            const order = calls
              .map((c, n) => ({ ...c, n }))
              .sort((x, y) => (x.key < y.key ? -1 : x.key > y.key ? 1 : x.n - y.n));
            for (const { call, n } of order) {
              const answer = answerOf(rows[n] as Record<string, unknown>);
              const branches = step(world, call, { lo, hi });
              const taken = branches.find((b) => meets(b.expect, answer));
              if (taken === undefined) {
                throw new Error(
                  `sequence ${sequence}: element ${n + 1} (${JSON.stringify(call)}) answered ${JSON.stringify(answer)}; the model allows ${JSON.stringify(branches.map((b) => b.expect))}`,
                );
              }
              world = taken.next(answer);
            }
          }
        }),
        {
          numRuns: Number(process.env.MODEL_RUNS ?? 30),
          ...(process.env.MODEL_SEED === undefined ? {} : { seed: Number(process.env.MODEL_SEED) }),
        },
      );
    } finally {
      await app.end();
    }
  }, 600_000);
});
