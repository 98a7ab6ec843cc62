import pg from 'pg';
import type { ClaimAnswer, ClaimCall, SettleDriver, Ticket } from './driver.js';
import type { Answer, StatusName } from './history.js';

/** A raw row of settle.claim_result / observation_result / heartbeat_result, every column. */
type Row = Record<string, unknown>;

const text = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
const int = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

/** Every column the engine returned, named as in Answer: nothing hidden from the checker. */
export function answerOf(row: Row): Answer {
  return {
    outcome: String(row.outcome),
    reason: text(row.reason),
    status: text(row.status) as StatusName | null,
    attempt: int(row.attempt),
    settledAttempt: int(row.settled_attempt),
    result: row.result ?? null,
    error: row.error ?? null,
    fingerprint: text(row.fingerprint),
    leaseToken: text(row.lease_token),
    deadLettered: (row.dead_lettered as boolean | null | undefined) ?? null,
    conflictOn: (row.conflict_on as string[] | null | undefined) ?? null,
  };
}

const OBSERVE_ARGS =
  'tenant => $1, key => $2, attempt => $3, lease_token => $4::uuid, fingerprint => $5, principal => $6, scopes => $7::text[], binding_generation => $8::bigint';

function ticketParams(t: Ticket): unknown[] {
  return [
    t.tenant,
    t.key,
    t.attempt,
    t.leaseToken,
    t.fingerprint,
    t.binding.principal,
    [...t.binding.scopes],
    t.binding.generation,
  ];
}

/** Runs one API call per query on `queryable` (a pg.Pool or a connected pg.Client). */
export function createSqlDriver(queryable: pg.Pool | pg.ClientBase, ownsPool = false): SettleDriver {
  const one = async (sql: string, params: unknown[]): Promise<Row> => {
    const { rows } = await queryable.query<Row>(sql, params);
    const [row] = rows;
    if (row === undefined || rows.length !== 1) throw new Error(`expected one row, got ${rows.length}: ${sql}`);
    return row;
  };
  return {
    async claim(call: ClaimCall): Promise<ClaimAnswer> {
      const row = await one(
        `select * from settle.claim(tenant => $1, key => $2, request => $3::jsonb, principal => $4, scopes => $5::text[],
           binding_generation => $6::bigint, lease => make_interval(secs => $7::double precision / 1000),
           worker => $8, max_attempts => $9)`,
        [
          call.tenant,
          call.key,
          JSON.stringify(call.request),
          call.binding.principal,
          [...call.binding.scopes],
          call.binding.generation,
          call.leaseMs ?? 30_000,
          call.worker ?? null,
          call.maxAttempts ?? 5,
        ],
      );
      const answer = answerOf(row);
      if (answer.outcome !== 'acquired') return answer;
      const ticket: Ticket = {
        tenant: call.tenant,
        key: call.key,
        attempt: Number(row.attempt),
        leaseToken: String(row.lease_token),
        fingerprint: String(row.fingerprint),
        binding: call.binding,
      };
      return { ...answer, ticket };
    },
    async heartbeat(t, leaseMs = 30_000) {
      return answerOf(
        await one(
          `select * from settle.heartbeat(tenant => $1, key => $2, attempt => $3, lease_token => $4::uuid,
           lease => make_interval(secs => $5::double precision / 1000))`,
          [t.tenant, t.key, t.attempt, t.leaseToken, leaseMs],
        ),
      );
    },
    async complete(t, result) {
      return answerOf(
        await one(`select * from settle.complete(${OBSERVE_ARGS}, result => $9::jsonb)`, [
          ...ticketParams(t),
          JSON.stringify(result),
        ]),
      );
    },
    async fail(t, error, retryable) {
      return answerOf(
        await one(`select * from settle.fail(${OBSERVE_ARGS}, error => $9::jsonb, retryable => $10)`, [
          ...ticketParams(t),
          JSON.stringify(error),
          retryable,
        ]),
      );
    },
    async reportUnknown(t) {
      return answerOf(await one(`select * from settle.report_unknown(${OBSERVE_ARGS})`, ticketParams(t)));
    },
    async get(call) {
      return answerOf(
        await one(
          `select * from settle.get(tenant => $1, key => $2, request => $3::jsonb, principal => $4, scopes => $5::text[],
           binding_generation => $6::bigint)`,
          [
            call.tenant,
            call.key,
            JSON.stringify(call.request),
            call.binding.principal,
            call.binding.scopes,
            call.binding.generation,
          ],
        ),
      );
    },
    async end() {
      if (ownsPool && queryable instanceof pg.Pool) await queryable.end();
    },
  };
}

/** A pool whose idle connections may be terminated by a nemesis without crashing the process. */
export function createQuietPool(connectionString: string, max: number): pg.Pool {
  const pool = new pg.Pool({ connectionString, max });
  pool.on('error', () => {});
  return pool;
}
