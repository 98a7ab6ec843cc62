import pg from 'pg';
import { type CallAnswer, settleCall, watchNotices } from './settle-call.js';

/**
 * The failover workload and its checker: claim + complete cycles from several connections
 * (as settle_app), every acknowledged settlement recorded; after a crash and promotion, the
 * new primary is checked against what was acknowledged.
 */

export const BINDING = { principal: 'svc-failover', scopes: ['payments:write'], binding_generation: 1 } as const;

/** A settlement the client saw acknowledged: `complete` answered `settled`, cleanly. */
export interface AckedSettlement {
  readonly tenant: string;
  readonly key: string;
  readonly attempt: number;
  /** The result as jsonb text, exactly as the complete call returned it. */
  readonly resultText: string;
}

/** A call whose outcome the client cannot know (connection lost, or a commit warning). */
export interface UnknownCall {
  readonly tenant: string;
  readonly key: string;
  readonly call: 'claim' | 'complete';
  readonly why: string;
}

export interface LoadHistory {
  /** Calls issued (claims + completes). */
  invocations: number;
  readonly acked: AckedSettlement[];
  readonly unknown: UnknownCall[];
  /** Calls that failed with an SQL error (rolled back); none are expected in this workload. */
  readonly failed: { key: string; call: string; sqlstate: string; message: string }[];
}

export interface LoadOptions {
  readonly url: string;
  readonly tenant: string;
  readonly connections: number;
  /** Each worker stops after this many settlements, or at its first unknown answer. */
  readonly maxPerWorker: number;
  /** Prefix of the generated keys (`<prefix>w<worker>-op<i>`), to run several loads on one tenant. */
  readonly keyPrefix?: string;
  /** Called after each acknowledged settlement (e.g. to crash the primary mid-load). */
  readonly onAck?: (history: LoadHistory) => void;
}

const CLAIM_SQL = `select outcome, attempt, lease_token, fingerprint
  from settle.claim(tenant => $1, key => $2, request => $3::jsonb, principal => $4, scopes => $5::text[],
                    binding_generation => $6, lease => '30 seconds', worker => $7)`;
const COMPLETE_SQL = `select outcome, reason, settled_attempt, result::text as result_text
  from settle.complete(tenant => $1, key => $2, attempt => $3, lease_token => $4, fingerprint => $5,
                       principal => $6, scopes => $7::text[], binding_generation => $8, result => $9::jsonb)`;

interface ClaimRow {
  outcome: string;
  attempt: number;
  lease_token: string;
  fingerprint: string;
}
interface CompleteRow {
  outcome: string;
  reason: string | null;
  settled_attempt: number | null;
  result_text: string | null;
}

export function requestFor(key: string): Record<string, unknown> {
  return { key, amount: '10.50', currency: 'EUR' };
}

export function resultFor(key: string, attempt: number): Record<string, unknown> {
  return { receipt: `r-${key}-${attempt}`, amount: 10.5, ok: true };
}

/** Runs the workload until every worker stopped; resolves with the history (never rejects on a crash). */
export async function runSettleLoad(opts: LoadOptions, history: LoadHistory = emptyHistory()): Promise<LoadHistory> {
  const workers = Array.from({ length: opts.connections }, (_, w) => runWorker(opts, w, history));
  await Promise.all(workers);
  return history;
}

export function emptyHistory(): LoadHistory {
  return { invocations: 0, acked: [], unknown: [], failed: [] };
}

async function runWorker(opts: LoadOptions, worker: number, history: LoadHistory): Promise<void> {
  const client = await connectApp(opts.url);
  try {
    for (let i = 0; i < opts.maxPerWorker; i++) {
      const key = `${opts.keyPrefix ?? ''}w${worker}-op${i}`;
      if (!(await settleOne(client, opts.tenant, key, `worker-${worker}`, history))) return;
      opts.onAck?.(history);
    }
  } finally {
    await client.end().catch(() => {});
  }
}

/** The rows of an answered call; undefined once an unknown or failed call is recorded in `history`. */
function answeredRows<R>(answer: CallAnswer<R>, call: Omit<UnknownCall, 'why'>, history: LoadHistory): R[] | undefined {
  if (answer.kind === 'unknown') {
    history.unknown.push({ ...call, why: answer.why });
    return undefined;
  }
  if (answer.kind === 'fail') {
    history.failed.push({ key: call.key, call: call.call, sqlstate: answer.sqlstate, message: answer.message });
    return undefined;
  }
  return answer.rows;
}

/** One claim + complete; true when it ended with an acknowledged settlement. */
export async function settleOne(
  client: pg.Client,
  tenant: string,
  key: string,
  worker: string,
  history: LoadHistory,
): Promise<boolean> {
  history.invocations++;
  const claim = await settleCall<ClaimRow>(client, CLAIM_SQL, [
    tenant,
    key,
    JSON.stringify(requestFor(key)),
    BINDING.principal,
    BINDING.scopes,
    BINDING.binding_generation,
    worker,
  ]);
  const claimed = answeredRows(claim, { tenant, key, call: 'claim' }, history);
  if (claimed === undefined) return false;
  const ticket = claimed[0];
  // A retry of a key that did settle (its answer was lost) replays; it is already counted.
  if (ticket?.outcome === 'replay') return true;
  if (ticket?.outcome !== 'acquired') throw new Error(`claim of ${key} answered ${ticket?.outcome}`);
  return completeTicket(client, tenant, key, ticket, history);
}

export async function completeTicket(
  client: pg.Client,
  tenant: string,
  key: string,
  ticket: { attempt: number; lease_token: string; fingerprint: string },
  history: LoadHistory,
): Promise<boolean> {
  history.invocations++;
  const done = await settleCall<CompleteRow>(client, COMPLETE_SQL, [
    tenant,
    key,
    ticket.attempt,
    ticket.lease_token,
    ticket.fingerprint,
    BINDING.principal,
    BINDING.scopes,
    BINDING.binding_generation,
    JSON.stringify(resultFor(key, ticket.attempt)),
  ]);
  const completed = answeredRows(done, { tenant, key, call: 'complete' }, history);
  if (completed === undefined) return false;
  const row = completed[0];
  if (row?.outcome !== 'settled' || row.result_text === null || row.settled_attempt === null) {
    throw new Error(`complete of ${key} answered ${row?.outcome}/${row?.reason}`);
  }
  history.acked.push({ tenant, key, attempt: row.settled_attempt, resultText: row.result_text });
  return true;
}

/** A superuser connection switched to settle_app, with its notices watched. */
export async function connectApp(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  watchNotices(client);
  await client.query('set role settle_app');
  return client;
}

// ---------------------------------------------------------------------------------------
// The checker
// ---------------------------------------------------------------------------------------

export interface FailoverViolations {
  /** Acknowledged settlements missing on the new primary (not completed there). */
  readonly lostAcknowledgements: AckedSettlement[];
  /** Acknowledged settlements present with another result or settled attempt. */
  readonly changedResults: { ack: AckedSettlement; found: { attempt: number | null; resultText: string | null } }[];
  /** Audit rows whose status is lower in the lattice than the key's previous status. */
  readonly downgrades: { key: string; auditId: string; from: string; to: string }[];
  /** Operations with more than one settled attempt, or a completed one without exactly one. */
  readonly doubleSettlements: { key: string; settledAttempts: number }[];
}

export function violationCount(v: FailoverViolations): number {
  return v.lostAcknowledgements.length + v.changedResults.length + v.downgrades.length + v.doubleSettlements.length;
}

/**
 * Checks the database behind `admin` (a superuser connection to the new primary) against the
 * acknowledged settlements: each is completed with the identical result text and settled
 * attempt; in the audit trail of `tenant` no status went down; no operation settled twice.
 */
export async function checkFailover(
  admin: pg.ClientBase,
  tenant: string,
  acked: readonly AckedSettlement[],
): Promise<FailoverViolations> {
  const { rows: found } = await admin.query<{
    key: string;
    status: string;
    settled_attempt: number | null;
    result_text: string | null;
  }>(
    `select key, status::text, settled_attempt, result::text as result_text
       from settle_private.operations where tenant = $1 and key = any($2::text[])`,
    [tenant, acked.map((a) => a.key)],
  );
  const byKey = new Map(found.map((row) => [row.key, row]));
  const lostAcknowledgements: AckedSettlement[] = [];
  const changedResults: FailoverViolations['changedResults'] = [];
  for (const ack of acked) {
    const row = byKey.get(ack.key);
    if (row === undefined || row.status !== 'completed') {
      lostAcknowledgements.push(ack);
    } else if (row.result_text !== ack.resultText || row.settled_attempt !== ack.attempt) {
      changedResults.push({ ack, found: { attempt: row.settled_attempt, resultText: row.result_text } });
    }
  }

  const { rows: downgrades } = await admin.query<{ key: string; audit_id: string; from: string; to: string }>(
    `select key, audit_id::text, prev::text as from, status_after::text as to
       from (select key, audit_id, status_after,
                    lag(status_after) over (partition by key order by audit_id) as prev
               from settle.audit_log where tenant = $1) s
      where prev is not null and status_after is not null
        and settle.status_rank(status_after) < settle.status_rank(prev)`,
    [tenant],
  );

  const { rows: doubles } = await admin.query<{ key: string; settled_attempts: number }>(
    `select o.key, count(a.*) filter (where a.settled)::int as settled_attempts
       from settle_private.operations o
       left join settle.attempts a on a.tenant = o.tenant and a.key = o.key
      where o.tenant = $1
      group by o.key, o.status
     having count(a.*) filter (where a.settled) > 1
         or (o.status = 'completed') <> (count(a.*) filter (where a.settled) = 1)`,
    [tenant],
  );

  return {
    lostAcknowledgements,
    changedResults,
    downgrades: downgrades.map((d) => ({ key: d.key, auditId: d.audit_id, from: d.from, to: d.to })),
    doubleSettlements: doubles.map((d) => ({ key: d.key, settledAttempts: d.settled_attempts })),
  };
}

/**
 * What a client does after a lost answer (docs/protocol.md §7): re-read with the lock-gated settle.get
 * (same request and binding as the claim); if
 * the operation is not completed, retry with the same key, request and binding (after its
 * lease lapsed; the test makes it lapse with `expireLease`) and complete the new attempt.
 * Returns the keys that had to be settled again.
 */
export async function redriveUnknowns(
  app: pg.Client,
  tenant: string,
  unknown: readonly UnknownCall[],
  expire: (key: string) => Promise<unknown>,
  history: LoadHistory,
): Promise<string[]> {
  const resettled: string[] = [];
  for (const call of unknown) {
    const { rows } = await app.query<{ status: string }>(
      'select status::text from settle.get(tenant => $1, key => $2, request => $3::jsonb, principal => $4, scopes => $5::text[], binding_generation => $6)',
      [
        tenant,
        call.key,
        JSON.stringify(requestFor(call.key)),
        BINDING.principal,
        BINDING.scopes,
        BINDING.binding_generation,
      ],
    );
    if (rows[0]?.status === 'completed') continue;
    await expire(call.key);
    if (!(await settleOne(app, tenant, call.key, 'retry', history))) {
      throw new Error(`retry of ${call.key} after failover did not settle`);
    }
    resettled.push(call.key);
  }
  return resettled;
}
