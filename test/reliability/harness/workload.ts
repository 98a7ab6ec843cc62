import pg from 'pg';
import { createSettleClient } from '../../../src/client/client.js';
import { expireLease } from '../../../src/testing/clock.js';
import { mulberry32, deriveSeed, type Prng } from '../../../src/shared/prng.js';
import { roleUrl } from './app-url.js';
import { createClientDriver } from './client-driver.js';
import type { SettleDriver, Ticket } from './driver.js';
import { History, sqlState, type Answer, type BindingArgs } from './history.js';
import { recording, type Recorded, type RecordingDriver } from './recorder.js';
import { createQuietPool, createSqlDriver } from './sql-driver.js';

/**
 * A seeded random workload: `processes` logical processes, each on its own connection pool,
 * drive claims, heartbeats, observations and retries (same and mismatched lock) over `keys`
 * key slots concurrently, an operator resolves operations (settle.resolve on a settle_admin
 * login, as after checking the downstream), and a nemesis moves leases into the past and
 * terminates backends.
 * Every call is recorded in a History for the checker. Half the processes use the typed
 * client, half raw SQL (which sees every column of every answer, for the disclosure checks).
 */
export interface WorkloadOptions {
  /** Superuser connection string of the database under test. */
  readonly url: string;
  readonly seed: number;
  readonly tenant?: string;
  readonly processes?: number;
  readonly keys?: number;
  /** Total calls across all processes (nemesis actions included). */
  readonly operations?: number;
  /** Probability per call that the nemesis terminates a random workload backend. */
  readonly killRate?: number;
}

export interface WorkloadRun {
  readonly history: History;
  readonly tenant: string;
  readonly keysUsed: number;
  readonly faults: { expiredLeases: number; killedConnections: number };
  /** The operator's settle.resolve calls by answer: resolved_completed, already_final, SE050, ... */
  readonly resolutions: Record<string, number>;
  readonly elapsedMs: number;
}

export const CANONICAL_BINDING: BindingArgs = { principal: 'alice', scopes: ['pay', 'write'], generation: '1' };

/** The four ways a retry can present a different lock than the reservation. */
const MISMATCHES: readonly ((b: BindingArgs) => BindingArgs)[] = [
  (b) => ({ ...b, principal: 'mallory' }),
  (b) => ({ ...b, scopes: ['pay'] }),
  (b) => ({ ...b, generation: '2' }),
];
const FOREIGN_FINGERPRINT = `v1:${'0'.repeat(64)}`;

/**
 * Ways to present the canonical binding's scopes that the engine must treat as the same lock
 * (it stores them sorted and distinct): a retry must never conflict over their order.
 */
const SAME_SCOPES: readonly (readonly string[])[] = [
  ['pay', 'write'],
  ['write', 'pay'],
  ['pay', 'write', 'pay'],
];

interface World {
  readonly tenant: string;
  /** Current key of each slot; a slot moves to a fresh key once its operation is over. */
  readonly slots: string[];
  readonly history: History;
  /** Superuser connections of the nemesis. */
  readonly admin: pg.Pool;
  /** The operator's settle_admin connections. */
  readonly operator: pg.Pool;
  readonly resolutions: Record<string, number>;
  /** Keys whose reservation a canonical claim made: mismatched retries target only these. */
  readonly reserved: Set<string>;
  readonly options: Required<Omit<WorkloadOptions, 'url' | 'tenant'>>;
  issued: number;
  keysUsed: number;
  expiredLeases: number;
  killedConnections: number;
}

const requestOf = (key: string) => ({ key, amount: 1250, currency: 'EUR' });

export async function runWorkload(options: WorkloadOptions): Promise<WorkloadRun> {
  const started = Date.now();
  const opts = {
    seed: options.seed,
    processes: options.processes ?? 8,
    keys: options.keys ?? 50,
    operations: options.operations ?? 4000,
    killRate: options.killRate ?? 0.002,
  };
  const tenant = options.tenant ?? `wl-${opts.seed}`;
  const admin = new pg.Pool({ connectionString: options.url, application_name: 'reliability-nemesis', max: 2 });
  admin.on('error', () => {});
  const operator = new pg.Pool({
    connectionString: roleUrl(options.url, 'reliability-operator', 'settle_admin'),
    max: 1,
  });
  operator.on('error', () => {});
  const world: World = {
    tenant,
    slots: Array.from({ length: opts.keys }, (_, i) => `k${i}.0`),
    history: new History(),
    admin,
    operator,
    resolutions: {},
    reserved: new Set(),
    options: opts,
    issued: 0,
    keysUsed: opts.keys,
    expiredLeases: 0,
    killedConnections: 0,
  };
  const drivers: SettleDriver[] = [];
  try {
    const workers = Array.from({ length: opts.processes }, (_, p) => {
      const url = roleUrl(options.url, `reliability-p${p}`);
      const driver =
        p % 2 === 0
          ? createClientDriver(
              createSettleClient({ connectionString: url, poolSize: 2, retry: { maxRetries: 5, baseDelayMs: 5 } }),
            )
          : createSqlDriver(createQuietPool(url, 2), true);
      drivers.push(driver);
      return runProcess(world, recording(driver, world.history, p), mulberry32(deriveSeed(opts.seed, p)));
    });
    await Promise.all(workers);
  } finally {
    await Promise.all(drivers.map((d) => d.end().catch(() => {})));
    await admin.end().catch(() => {});
    await operator.end().catch(() => {});
  }
  return {
    history: world.history,
    tenant,
    keysUsed: world.keysUsed,
    faults: { expiredLeases: world.expiredLeases, killedConnections: world.killedConnections },
    resolutions: world.resolutions,
    elapsedMs: Date.now() - started,
  };
}

async function runProcess(world: World, driver: RecordingDriver, rnd: Prng): Promise<void> {
  const tickets = new Map<string, Ticket[]>();
  const results = new Map<Ticket, unknown>();
  let n = 0;
  while (world.issued < world.options.operations) {
    world.issued += 1;
    n += 1;
    const slot = rnd.int(0, world.slots.length - 1);
    const key = world.slots[slot] ?? 'unreachable';
    const mine = tickets.get(key) ?? [];
    // Mostly the latest attempt this process holds, sometimes an older (stale) one.
    const ticket =
      mine.length === 0 ? undefined : rnd.chance(0.75) ? mine[mine.length - 1] : mine[rnd.int(0, mine.length - 1)];
    const roll = rnd.next();
    const tag = { key, process: driver.process, n };

    if (rnd.chance(world.options.killRate)) {
      await killRandomBackend(world, rnd, driver.process);
    } else if (roll < 0.08) {
      await nemesisExpire(world, key, driver.process);
    } else if (ticket === undefined || roll < 0.36) {
      const mismatched = world.reserved.has(key) && rnd.chance(0.12);
      // Another request, another binding, or both (a request-only mismatch must conflict too).
      const otherRequest = mismatched && rnd.chance(0.5);
      const otherBinding = mismatched && (!otherRequest || rnd.chance(0.5));
      const call = {
        tenant: world.tenant,
        key,
        request: otherRequest ? { ...requestOf(key), amount: 9999 } : requestOf(key),
        binding: otherBinding
          ? pick(rnd, MISMATCHES)(CANONICAL_BINDING)
          : { ...CANONICAL_BINDING, scopes: pick(rnd, SAME_SCOPES) },
        maxAttempts: 6,
        worker: `p${driver.process}`,
      };
      const r = await driver.claim(call);
      if (r.type === 'ok' && r.answer.ticket !== undefined) {
        tickets.set(key, [...mine, r.answer.ticket]);
        if (!mismatched) world.reserved.add(key);
      }
      if (r.type === 'ok' && (r.answer.outcome === 'replay' || r.answer.outcome === 'failed') && rnd.chance(0.5)) {
        retire(world, slot, key);
      }
    } else if (roll < 0.46) {
      await driver.heartbeat(ticket);
    } else if (roll < 0.64) {
      const previous = results.get(ticket);
      const repeat = previous !== undefined && rnd.chance(0.3);
      const result = repeat ? previous : { ...tag, attempt: ticket.attempt, receipt: `r-${driver.process}-${n}` };
      if (!repeat) results.set(ticket, result);
      await driver.complete(ticket, result);
    } else if (roll < 0.68) {
      const forged = rnd.chance(0.5)
        ? { ...ticket, fingerprint: FOREIGN_FINGERPRINT }
        : { ...ticket, binding: pick(rnd, MISMATCHES)(ticket.binding) };
      await driver.complete(forged, { ...tag, forged: true });
    } else if (roll < 0.8) {
      await driver.fail(ticket, { code: 'upstream_unavailable', ...tag }, true);
    } else if (roll < 0.83) {
      await driver.fail(ticket, { code: 'card_declined', ...tag }, false);
    } else if (roll < 0.93) {
      await driver.reportUnknown(ticket);
    } else if (roll < 0.95) {
      const r = await operatorResolve(world, key, rnd, driver.process, tag);
      if (r.type === 'ok' && rnd.chance(0.5)) retire(world, slot, key);
    } else {
      // The lock-gated read: the reserved lock mostly, a stranger's lock or request sometimes.
      const stranger = rnd.chance(0.3);
      await driver.get({
        tenant: world.tenant,
        key,
        request: stranger && rnd.chance(0.5) ? { ...requestOf(key), amount: 9999 } : requestOf(key),
        binding: stranger
          ? pick(rnd, MISMATCHES)(CANONICAL_BINDING)
          : { ...CANONICAL_BINDING, scopes: pick(rnd, SAME_SCOPES) },
      });
    }
  }
}

function pick<T>(rnd: Prng, items: readonly T[]): T {
  const item = items[rnd.int(0, items.length - 1)];
  if (item === undefined) throw new Error('pick: empty list');
  return item;
}

/** Moves the slot to a fresh key (once per key, whichever process sees the end first). */
function retire(world: World, slot: number, key: string): void {
  if (world.slots[slot] !== key) return;
  const [base, version] = key.split('.');
  world.slots[slot] = `${base}.${Number(version) + 1}`;
  world.keysUsed += 1;
}

/**
 * The operator resolves the key's operation with a verified outcome: completed with
 * a result no attempt proposed, or failed; one call in ten presents another request's
 * fingerprint (SE052). Only an unknown or conflict operation is resolved (SE050 otherwise), a
 * failed resolution never while an attempt holds a lease (SE051): the checker judges what it did
 * from the audit trail.
 */
async function operatorResolve(
  world: World,
  key: string,
  rnd: Prng,
  process: number,
  tag: Record<string, unknown>,
): Promise<{ type: 'ok'; answer: Answer } | { type: 'fail' | 'info'; error: unknown }> {
  const completed = rnd.chance(0.6);
  const request = rnd.chance(0.1) ? { ...requestOf(key), amount: 9999 } : requestOf(key);
  const value = { ...tag, resolvedBy: 'operator' };
  const r = await world.history.record(
    { process, tenant: world.tenant, key, op: 'resolve' },
    completed ? { request, result: value } : { request, error: value },
    async () => {
      const { rows } = await world.operator.query<Record<string, unknown>>(
        `select outcome, reason, status::text as status, attempt, settled_attempt, result, error
           from settle.resolve(tenant => $1, key => $2, fingerprint => settle.fingerprint($3::jsonb), outcome => $4,
                               expected_attempt => coalesce((select o.attempt from settle.inspect($1, $2) o), 1),
                               reason => 'workload: checked the downstream', result => $5::jsonb, error => $6::jsonb)`,
        [
          world.tenant,
          key,
          JSON.stringify(request),
          completed ? 'completed' : 'failed',
          completed ? JSON.stringify(value) : null,
          completed ? null : JSON.stringify(value),
        ],
      );
      const row = rows[0];
      if (row === undefined) throw new Error('settle.resolve answered no row');
      return {
        outcome: String(row.outcome),
        reason: row.reason as string | null,
        status: row.status as Answer['status'],
        attempt: row.attempt as number | null,
        settledAttempt: row.settled_attempt as number | null,
        result: row.result,
        error: row.error,
      };
    },
  );
  const label =
    r.type === 'ok'
      ? r.answer.outcome === 'resolved'
        ? `resolved_${r.answer.status ?? ''}`
        : r.answer.outcome
      : (sqlState(r.error) ?? r.type);
  world.resolutions[label] = (world.resolutions[label] ?? 0) + 1;
  return r;
}

async function nemesisExpire(world: World, key: string, process: number): Promise<Recorded> {
  return world.history.record({ process, tenant: world.tenant, key, op: 'expire_lease' }, {}, async () => {
    const client = await world.admin.connect();
    const moved = await expireLease(client, world.tenant, key).finally(() => client.release());
    if (moved) world.expiredLeases += 1;
    return { outcome: moved ? 'expired' : 'no_lease' };
  });
}

/**
 * Terminates one random backend of the workload (never the nemesis's own). Spared: the
 * short-lived session slonik opens once per pool to look up type OIDs (its only query reads
 * pg_type; before that query arrives its `query` is still empty). slonik 49 leaves that
 * pg.Client without an 'error' listener, so terminating it is an uncaught exception in the
 * caller's process: an upstream hazard of pool creation documented in docs/client.md, not a
 * settle call this suite can judge. A pool connection becomes a target after its first query.
 */
async function killRandomBackend(world: World, rnd: Prng, process: number): Promise<void> {
  await world.history.record({ process, tenant: world.tenant, key: '-', op: 'kill_connection' }, {}, async () => {
    const { rows } = await world.admin.query<{ pid: number }>(
      `select pid from pg_stat_activity
        where datname = current_database() and application_name like 'reliability-p%'
          and query <> '' and query not like '%FROM pg_type%'
        order by pid`,
    );
    const victim = rows.length === 0 ? undefined : rows[rnd.int(0, rows.length - 1)];
    if (victim === undefined) return { outcome: 'no_backend' };
    await world.admin.query('select pg_terminate_backend($1)', [victim.pid]);
    world.killedConnections += 1;
    return { outcome: 'killed' };
  });
}
