import fc from 'fast-check';
import pg from 'pg';
import {
  EMPTY_WORLD,
  meets,
  step,
  type Answer,
  type Call,
  type Lock,
  type World,
} from '../../../src/model/protocol-model.js';

// Batches against the reference model (src/model/protocol-model.ts): sequences of
// settle.claim_many and settle.complete_many calls over three keys, as settle_app, with the
// binding's revocation (settle.revoke_binding, as settle_admin) between them. A batch must be its
// single calls made at one instant: every element's answer must be one the model allows for that
// single call, taken in the batch's fixed order (key COLLATE "C", then ordinal), each in the world
// the previous element left. model-batch.test.ts runs random sequences against the engine;
// model-batch-mutants.test.ts runs them, and the scripted ones below, against the batch path's
// rules undone one at a time.

const KEYS = ['a', 'b', 'c'] as const;
const REQUESTS = ['r1', 'r2'] as const;
const BINDING = { principal: 'svc', scopes: ['w'], generation: 1 } as const;
const LEASE_US = 30_000_000;
const NOW = `(extract(epoch from clock_timestamp()) * 1000000)::bigint::text as now_us`;
const usOf = (column: string) => `(extract(epoch from ${column}) * 1000000)::bigint::text`;
/** A lease token no attempt holds. */
const FORGED_TOKEN = '00000000-0000-4000-8000-000000000000';

/**
 * What a complete element presents besides its ticket: the ticket as acquired (`none`), another
 * token (`token`: a forged success), or the other request's lock and fingerprint (`request`: a
 * mismatched success of the lease holder).
 */
export type Forgery = 'none' | 'token' | 'request';

export type BatchStep =
  | { readonly kind: 'claim'; readonly items: readonly { readonly key: number; readonly request: number }[] }
  | {
      readonly kind: 'complete';
      readonly items: readonly { readonly ticket: number; readonly result: number; readonly forge: Forgery }[];
    }
  /** settle.revoke_binding of the batches' binding (below its generation + 1): every later call is refused. */
  | { readonly kind: 'revoke' };

export const batchStep: fc.Arbitrary<BatchStep> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('claim' as const),
      items: fc.array(fc.record({ key: fc.nat(KEYS.length - 1), request: fc.nat(REQUESTS.length - 1) }), {
        minLength: 1,
        maxLength: 5,
      }),
    }),
  },
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('complete' as const),
      items: fc.array(
        fc.record({
          ticket: fc.nat(7),
          result: fc.nat(2),
          forge: fc.constantFrom<Forgery>('none', 'none', 'none', 'none', 'none', 'none', 'token', 'request'),
        }),
        { minLength: 1, maxLength: 5 },
      ),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'revoke' as const }) },
);

export const batchSequence = fc.array(batchStep, { minLength: 1, maxLength: 8 });

/** A sequence that reaches one rule of the set-based batch paths in a few calls. */
export interface BatchRegression {
  readonly name: string;
  readonly steps: readonly BatchStep[];
}

const claim = (...keys: number[]): BatchStep => ({
  kind: 'claim',
  items: keys.map((key) => ({ key, request: 0 })),
});
const complete = (...items: [ticket: number, forge?: Forgery][]): BatchStep => ({
  kind: 'complete',
  items: items.map(([ticket, forge]) => ({ ticket, result: ticket % 3, forge: forge ?? 'none' })),
});

export const BATCH_REGRESSIONS: readonly BatchRegression[] = [
  {
    // New keys listed out of key order, then completed by the tickets the answers handed out:
    // each answer must carry its own key's token.
    name: 'new keys out of order, then their holders complete',
    steps: [claim(2, 0, 1), complete([0], [1], [2])],
  },
  {
    // The lease holders complete out of key order, then complete again: the second batch is
    // answered from what the first stored for each key.
    name: 'holders complete out of order, then again',
    steps: [claim(0, 1, 2), complete([2], [0], [1]), complete([2], [0], [1])],
  },
  {
    // One holder presents the other request's lock among plain successes.
    name: 'a mismatched success among holders',
    steps: [claim(0, 1), complete([0], [1, 'request'])],
  },
  {
    // A forged token among plain successes.
    name: 'a forged token among holders',
    steps: [claim(0, 1), complete([0, 'token'], [1])],
  },
  {
    // The binding is revoked between the claims and the completes, and before new keys.
    name: 'revoked binding: holders complete, new keys claim',
    steps: [claim(0, 1), { kind: 'revoke' }, complete([0], [1]), claim(2)],
  },
];

interface Ticket {
  readonly key: string;
  readonly attempt: number;
  readonly token: string;
  readonly fingerprint: string;
  readonly request: string;
}

const lockOf = (request: string): Lock => ({ request, ...BINDING, scopes: [...BINDING.scopes] });
const requestJson = (request: string) => JSON.stringify({ req: request });
const otherRequest = (request: string) => (request === REQUESTS[0] ? REQUESTS[1] : REQUESTS[0]);
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

export interface BatchSession {
  /**
   * Runs one sequence on `tenant`, which no other sequence uses. Returns null when every answer
   * is one the model allows, else the first that is not; an SQL error is thrown.
   */
  run(steps: readonly BatchStep[], tenant: string): Promise<string | null>;
  close(): Promise<void>;
}

/** Two sessions on `url` (a superuser's): the batches as settle_app, revocations as settle_admin. */
export async function openBatchSession(url: string): Promise<BatchSession> {
  const app = new pg.Client({ connectionString: url, application_name: 'model-batch-app' });
  const admin = new pg.Client({ connectionString: url, application_name: 'model-batch-admin' });
  await app.connect();
  await admin.connect();
  await app.query('set role settle_app');
  await admin.query('set role settle_admin');
  const fingerprints = new Map<string, string>();
  for (const request of REQUESTS) {
    const row = (await app.query<{ f: string }>('select settle.fingerprint($1::jsonb) as f', [requestJson(request)]))
      .rows[0];
    fingerprints.set(request, row?.f as string);
  }
  const now = async () => Number((await app.query<{ now_us: string }>(`select ${NOW}`)).rows[0]?.now_us);

  async function run(steps: readonly BatchStep[], tenant: string): Promise<string | null> {
    const id = (key: string) => `${tenant}/${key}`;
    let world: World = EMPTY_WORLD;
    const tickets: Ticket[] = [];
    for (const s of steps) {
      if (s.kind === 'revoke') {
        const call: Call = {
          kind: 'revoke_binding',
          tenant,
          principal: BINDING.principal,
          below: BINDING.generation + 1,
        };
        const row = (
          await admin.query<{ floor: string }>(
            'select settle.revoke_binding(tenant => $1, principal => $2, below_generation => $3) as floor',
            [tenant, BINDING.principal, BINDING.generation + 1],
          )
        ).rows[0];
        const answer: Answer = { outcome: 'revoked', floor: Number(row?.floor) };
        const taken = step(world, call, { lo: 0, hi: 0 }).find((b) => meets(b.expect, answer));
        if (taken === undefined) return `${tenant}: revoke_binding answered ${JSON.stringify(answer)}`;
        world = taken.next(answer);
        continue;
      }
      const lo = await now();
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
            [tenant, keys, requests.map(requestJson), BINDING.principal, BINDING.scopes, BINDING.generation],
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
        const chosen = s.items.map((i) => {
          const t = tickets[i.ticket % tickets.length] as Ticket;
          const request = i.forge === 'request' ? otherRequest(t.request) : t.request;
          return {
            t,
            request,
            token: i.forge === 'token' ? FORGED_TOKEN : t.token,
            fingerprint: i.forge === 'request' ? (fingerprints.get(request) as string) : t.fingerprint,
            result: `res${i.result}`,
          };
        });
        calls = chosen.map((c) => ({
          key: c.t.key,
          call: {
            kind: 'complete',
            id: id(c.t.key),
            attempt: c.t.attempt,
            token: c.token,
            lock: lockOf(c.request),
            result: c.result,
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
              chosen.map((c) => c.token),
              chosen.map((c) => c.fingerprint),
              BINDING.principal,
              BINDING.scopes,
              BINDING.generation,
              chosen.map((c) => JSON.stringify({ m: c.result })),
            ],
          )
        ).rows;
      }
      const hi = await now();
      const ordinals = rows.map((r) => r.ordinal);
      if (JSON.stringify(ordinals) !== JSON.stringify(calls.map((_, n) => n + 1))) {
        return `${tenant}: ${s.kind}_many answered ordinals ${JSON.stringify(ordinals)} for ${calls.length} elements`;
      }
      // The fixed order: key (C collation: these keys are ASCII), then the ordinal.
      const order = calls
        .map((c, n) => ({ ...c, n }))
        .sort((x, y) => (x.key < y.key ? -1 : x.key > y.key ? 1 : x.n - y.n));
      for (const { call, n } of order) {
        const answer = answerOf(rows[n] as Record<string, unknown>);
        const branches = step(world, call, { lo, hi });
        const taken = branches.find((b) => meets(b.expect, answer));
        if (taken === undefined) {
          return `${tenant}: element ${n + 1} of ${s.kind}_many (${JSON.stringify(call)}) answered ${JSON.stringify(answer)}; the model allows ${JSON.stringify(branches.map((b) => b.expect))}`;
        }
        world = taken.next(answer);
      }
    }
    return null;
  }

  return {
    run,
    async close() {
      await Promise.all([app.end(), admin.end()]);
    },
  };
}
