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
// binding's revocation (settle.revoke_binding, as settle_admin) between them or during a batch's
// wait. A batch must be its single calls made at one instant, the instant after every wait it
// made: every element's answer must be one the model allows for that single call, taken in the
// batch's fixed order (key COLLATE "C", then ordinal), each in the world the previous element
// left, with whatever committed during the batch's wait already in that world. A batch may be
// made to wait on one of its keys: another session holds the key's row lock (or its uncommitted
// first claim) until the batch is seen waiting (pg_stat_activity), then the binding is revoked, or
// a tenth of the lease passes, and the lock is released (a rollback: the holder changes nothing).
// After such a wait every lease the batch acquired must end at least 0.9 of its length after the
// release (docs/sql-api.md: no lease loses more than a tenth of its length to a wait).
// A batch that never waits on the key (its answer needs no lock there) is an ordinary batch.
// model-batch.test.ts runs random sequences against the engine;
// model-batch-mutants.test.ts runs them, and the scripted ones below, against the batch path's
// rules undone one at a time.

const KEYS = ['a', 'b', 'c'] as const;
const REQUESTS = ['r1', 'r2'] as const;
const BINDING = { principal: 'svc', scopes: ['w'], generation: 1 } as const;
const LEASE_US = 30_000_000;
/** The lease of a batch made to wait a tenth of it: a short one, so that the wait is short too. */
const SHORT_LEASE_US = 2_000_000;
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

/**
 * A wait of the batch on the key of its item `at` (modulo the items): during it the binding is
 * revoked (`revoke`) or a tenth of the lease passes (`time`; the batch's claims then take a
 * 2-second lease).
 */
export interface BatchWait {
  readonly at: number;
  readonly during: 'revoke' | 'time';
}

export type BatchStep =
  | {
      readonly kind: 'claim';
      readonly items: readonly { readonly key: number; readonly request: number }[];
      readonly wait?: BatchWait;
    }
  | {
      readonly kind: 'complete';
      readonly items: readonly { readonly ticket: number; readonly result: number; readonly forge: Forgery }[];
      readonly wait?: BatchWait;
    }
  /** settle.revoke_binding of the batches' binding (below its generation + 1): every later call is refused. */
  | { readonly kind: 'revoke' };

const batchWait: fc.Arbitrary<BatchWait> = fc.record({
  at: fc.nat(4),
  during: fc.constantFrom<BatchWait['during']>('revoke', 'time'),
});

export const batchStep: fc.Arbitrary<BatchStep> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record(
      {
        kind: fc.constant('claim' as const),
        items: fc.array(fc.record({ key: fc.nat(KEYS.length - 1), request: fc.nat(REQUESTS.length - 1) }), {
          minLength: 1,
          maxLength: 5,
        }),
        wait: fc.option(batchWait, { freq: 5, nil: undefined }),
      },
      { requiredKeys: ['kind', 'items'] },
    ),
  },
  {
    weight: 6,
    arbitrary: fc.record(
      {
        kind: fc.constant('complete' as const),
        items: fc.array(
          fc.record({
            ticket: fc.nat(7),
            result: fc.nat(2),
            forge: fc.constantFrom<Forgery>('none', 'none', 'none', 'none', 'none', 'none', 'token', 'request'),
          }),
          { minLength: 1, maxLength: 5 },
        ),
        wait: fc.option(batchWait, { freq: 5, nil: undefined }),
      },
      { requiredKeys: ['kind', 'items'] },
    ),
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
const waiting = (step: BatchStep, at: number, during: BatchWait['during']): BatchStep =>
  step.kind === 'revoke' ? step : { ...step, wait: { at, during } };

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
  {
    // New keys (set-based) wait behind another session's first claim of the last one, and the
    // binding is revoked meanwhile: every key refused, as each single claim after that wait.
    name: 'a binding revoked while a set-based claim waits',
    steps: [waiting(claim(0, 1, 2), 2, 'revoke')],
  },
  {
    name: 'a binding revoked while set-based completes wait',
    steps: [claim(0, 1), waiting(complete([0], [1]), 1, 'revoke')],
  },
  {
    // Key c exists, so the batch is decided key by key: a is acquired before the wait on b.
    name: 'a binding revoked while a key-by-key claim waits on a later key',
    steps: [claim(2), waiting(claim(0, 1, 2), 1, 'revoke')],
  },
  {
    // A key listed twice sends the completes key by key: a settles before the wait on b.
    name: 'a binding revoked while key-by-key completes wait on a later key',
    steps: [claim(0, 1), waiting(complete([0], [0], [1]), 2, 'revoke')],
  },
  {
    name: 'a set-based claim that waited a tenth of its lease measures every lease from after the wait',
    steps: [waiting(claim(0, 1, 2), 2, 'time')],
  },
  {
    name: 'a key-by-key claim that waited a tenth of its lease measures every lease from after the wait',
    steps: [claim(2), waiting(claim(0, 1, 2), 1, 'time')],
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

/**
 * Sessions on `url` (a superuser's): the batches as settle_app, revocations as settle_admin, and
 * the lock holders of a batch's wait: a superuser (another session's row lock on an existing
 * key) and a settle_app login (another session's uncommitted first claim of a new key).
 */
export async function openBatchSession(url: string): Promise<BatchSession> {
  const client = (name: string) => new pg.Client({ connectionString: url, application_name: `model-batch-${name}` });
  const [app, admin, holdRow, holdInsert, observer] = ['app', 'admin', 'hold-row', 'hold-insert', 'observer'].map(
    client,
  ) as [pg.Client, pg.Client, pg.Client, pg.Client, pg.Client];
  await Promise.all([app, admin, holdRow, holdInsert, observer].map((c) => c.connect()));
  await app.query('set role settle_app');
  await admin.query('set role settle_admin');
  await holdInsert.query('set role settle_app');
  const appPid = (await app.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid as number;
  const fingerprints = new Map<string, string>();
  for (const request of REQUESTS) {
    const row = (await app.query<{ f: string }>('select settle.fingerprint($1::jsonb) as f', [requestJson(request)]))
      .rows[0];
    fingerprints.set(request, row?.f as string);
  }
  const now = async () => Number((await app.query<{ now_us: string }>(`select ${NOW}`)).rows[0]?.now_us);

  /** Another session takes `key`'s lock in an open transaction: its row lock, or a first claim of it. */
  async function hold(tenant: string, key: string): Promise<pg.Client> {
    const { rows } = await holdRow.query('select 1 from settle_private.operations where tenant = $1 and key = $2', [
      tenant,
      key,
    ]);
    const holder = rows.length > 0 ? holdRow : holdInsert;
    await holder.query('begin');
    if (holder === holdRow) {
      await holder.query('select 1 from settle_private.operations where tenant = $1 and key = $2 for update', [
        tenant,
        key,
      ]);
    } else {
      await holder.query(
        `select settle.claim(tenant => $1, key => $2, request => $3::jsonb, principal => $4, scopes => $5::text[],
                             binding_generation => $6)`,
        [tenant, key, requestJson(REQUESTS[0]), BINDING.principal, BINDING.scopes, BINDING.generation],
      );
    }
    return holder;
  }

  /** Resolves true once the batch waits on a lock, false when it answered without waiting. */
  async function waitsOrAnswers(answer: Promise<unknown>): Promise<boolean> {
    let answered = false;
    answer.then(
      () => (answered = true),
      () => (answered = true),
    );
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (answered) return false;
      const { rows } = await observer.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity where pid = $1 and wait_event_type = 'Lock'`,
        [appPid],
      );
      if (rows[0]?.n === 1) return true;
      if (Date.now() > deadline) throw new Error('the batch neither answered nor waited within 30 s');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  async function revoke(tenant: string, world: World): Promise<World | string> {
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
    return taken.next(answer);
  }

  async function run(steps: readonly BatchStep[], tenant: string): Promise<string | null> {
    const id = (key: string) => `${tenant}/${key}`;
    let world: World = EMPTY_WORLD;
    const tickets: Ticket[] = [];
    for (const s of steps) {
      if (s.kind === 'revoke') {
        const next = await revoke(tenant, world);
        if (typeof next === 'string') return next;
        world = next;
        continue;
      }
      const leaseUs = s.wait?.during === 'time' ? SHORT_LEASE_US : LEASE_US;
      let calls: { call: Call; key: string }[];
      let query: { text: string; values: unknown[] };
      if (s.kind === 'claim') {
        const keys = s.items.map((i) => KEYS[i.key] as string);
        const requests = s.items.map((i) => REQUESTS[i.request] as string);
        calls = s.items.map((_, n) => ({
          key: keys[n] as string,
          call: {
            kind: 'claim',
            id: id(keys[n] as string),
            lock: lockOf(requests[n] as string),
            leaseUs,
            maxAttempts: 3,
          },
        }));
        query = {
          text: `select r.*, r.result::text as result_text, r.error::text as error_text, ${usOf('r.lease_expires_at')} as lease_us
                   from settle.claim_many(tenant => $1, keys => $2::text[], requests => $3::jsonb[], principal => $4,
                                          scopes => $5::text[], binding_generation => $6,
                                          lease => make_interval(secs => $7::float8 / 1000000), max_attempts => 3) r`,
          values: [
            tenant,
            keys,
            requests.map(requestJson),
            BINDING.principal,
            BINDING.scopes,
            BINDING.generation,
            leaseUs,
          ],
        };
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
        query = {
          text: `select r.*, r.result::text as result_text, r.error::text as error_text
                   from settle.complete_many(tenant => $1, keys => $2::text[], attempts => $3::integer[], lease_tokens => $4::uuid[],
                                             fingerprints => $5::text[], principal => $6, scopes => $7::text[],
                                             binding_generation => $8, results => $9::jsonb[]) r`,
          values: [
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
        };
      }
      const holder = s.wait === undefined ? null : await hold(tenant, calls[s.wait.at % calls.length]?.key as string);
      const lo = await now();
      const answer = app.query(query.text, query.values);
      answer.catch(() => {});
      // The end of the batch's wait (the holder's clock right before its rollback), when it waited.
      let released: number | null = null;
      if (holder !== null && s.wait !== undefined) {
        const waited = await waitsOrAnswers(answer);
        if (waited && s.wait.during === 'revoke') {
          // Committed during the wait: the batch's instant is after it.
          const next = await revoke(tenant, world);
          if (typeof next === 'string') return next;
          world = next;
        } else if (waited) {
          await observer.query('select pg_sleep($1)', [(leaseUs / 10 + 50_000) / 1_000_000]);
        }
        const clock = (await holder.query<{ now_us: string }>(`select ${NOW}`)).rows[0]?.now_us;
        await holder.query('rollback');
        if (waited) released = Number(clock);
      }
      const rows: Record<string, unknown>[] = (await answer).rows;
      const hi = await now();
      const ordinals = rows.map((r) => r.ordinal);
      if (JSON.stringify(ordinals) !== JSON.stringify(calls.map((_, n) => n + 1))) {
        return `${tenant}: ${s.kind}_many answered ordinals ${JSON.stringify(ordinals)} for ${calls.length} elements`;
      }
      if (s.kind === 'claim') {
        rows.forEach((row, n) => {
          if (row.outcome === 'acquired') {
            tickets.push({
              key: calls[n]?.key as string,
              attempt: row.attempt as number,
              token: row.lease_token as string,
              fingerprint: row.fingerprint as string,
              request: REQUESTS[s.items[n]?.request as number] as string,
            });
          }
        });
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
        if (
          released !== null &&
          answer.outcome === 'acquired' &&
          (answer.leaseExpiresAt ?? 0) < released + leaseUs * 0.9
        ) {
          return `${tenant}: element ${n + 1} of ${s.kind}_many acquired a lease ending ${(answer.leaseExpiresAt ?? 0) - released} us after the end of its wait (at least ${leaseUs * 0.9})`;
        }
        world = taken.next(answer);
      }
    }
    return null;
  }

  return {
    run,
    async close() {
      await Promise.all([app, admin, holdRow, holdInsert, observer].map((c) => c.end()));
    },
  };
}
