import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import {
  BINDING,
  checkFailover,
  connectApp,
  emptyHistory,
  redriveUnknowns,
  requestFor,
  runSettleLoad,
  violationCount,
  type LoadHistory,
} from './harness/failover.js';
import { recordFigures } from './harness/figures.js';
import {
  detachStandby,
  promote,
  replicationUnavailableReason,
  startReplicationPair,
  type PgNode,
  type ReplicationPair,
} from '../../src/dev-server/replication-pair.js';
import { createSettleClient, SettleCommitUnconfirmedError, type Json } from '../../src/index.js';
import { roleUrl } from './harness/app-url.js';
import { settleCall } from './harness/settle-call.js';
import { expireLease } from '../../src/testing/clock.js';

// Failover of a primary with a synchronous (remote_apply) standby, an asynchronous control, and
// a commit whose synchronous-replication wait was cancelled. Each test starts its own pair of
// local clusters from the Debian binaries. RELIABILITY_FAILOVER=1 runs the heavy version
// (more connections and acknowledgements before the crash); the default is bounded for CI.
const HEAVY = process.env.RELIABILITY_FAILOVER === '1';
const CONNECTIONS = HEAVY ? 8 : 4;
/** Acknowledged settlements before the primary is killed. */
const CRASH_AFTER = HEAVY ? 2000 : 120;
// Alone a test takes 5-15 s; on a loaded 2-core machine up to 55 s was seen. The watchdog fails
// a stuck test before vitest's timeout does, naming the step and what both servers were doing.
const TIMEOUT_MS = HEAVY ? 600_000 : 300_000;
const WATCHDOG_MS = TIMEOUT_MS - 30_000;
const DB = 'settle';

const unavailable = replicationUnavailableReason();
const pairs: ReplicationPair[] = [];
const clients: pg.Client[] = [];

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.end().catch(() => {})));
  await Promise.all(pairs.splice(0).map((p) => p.stop()));
});

/** The step the running test is in, for the watchdog's report. */
let step = '';

async function inStep<T>(name: string, run: () => Promise<T>): Promise<T> {
  step = name;
  return run();
}

/**
 * `body` as a test that cannot hang silently: past WATCHDOG_MS it fails with the step it was
 * in, every backend of every running node (with its wait event) and the tail of each server log.
 */
function watched(body: () => Promise<void>): () => Promise<void> {
  return async () => {
    step = 'starting';
    let timer: NodeJS.Timeout | undefined;
    const stuck = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        void describeNodes().then((nodes) =>
          reject(new Error(`no progress within ${WATCHDOG_MS} ms; stuck in step: ${step}\n${nodes}`)),
        );
      }, WATCHDOG_MS);
    });
    try {
      await Promise.race([body(), stuck]);
    } finally {
      clearTimeout(timer);
    }
  };
}

async function describeNodes(): Promise<string> {
  const parts: string[] = [];
  for (const node of pairs.flatMap((pair) => [pair.primary, pair.standby])) {
    parts.push(`--- ${node.name} (:${node.port}, ${node.running() ? 'running' : 'exited'})`);
    if (node.running()) {
      const client = new pg.Client({
        connectionString: node.url(),
        connectionTimeoutMillis: 5_000,
        query_timeout: 5_000,
      });
      client.on('error', () => {});
      try {
        await client.connect();
        const { rows } = await client.query(
          `select pid, backend_type, application_name, state, wait_event_type, wait_event, left(query, 120) as query
             from pg_stat_activity where pid <> pg_backend_pid()`,
        );
        const { rows: replication } = await client.query(
          'select application_name, state, sync_state, replay_lsn::text from pg_stat_replication',
        );
        parts.push(`backends: ${JSON.stringify(rows)}`, `replication: ${JSON.stringify(replication)}`);
      } catch (error) {
        parts.push(`unreachable: ${String(error)}`);
      } finally {
        await client.end().catch(() => {});
      }
    }
    const log = await readFile(node.logFile, 'utf8').catch(() => '');
    parts.push(`log tail:\n${log.split('\n').slice(-30).join('\n')}`);
  }
  return parts.join('\n');
}

async function migratedPair(synchronous: boolean): Promise<ReplicationPair> {
  step = 'start the pair';
  const pair = await startReplicationPair({ synchronous, log: (msg) => (step = `start the pair: ${msg}`) });
  pairs.push(pair);
  step = 'create the database and migrate';
  const admin = await connect(pair.primary.url());
  await admin.query(`create database ${DB} template template0 encoding 'UTF8'`);
  await migrate(pair.primary.url(DB));
  return pair;
}

/**
 * Cancels the client backend matching `match` once it waits for the standby (wait_event
 * SyncRep). Fails, naming what every client backend of the primary was doing, when the call
 * returned without waiting (`returned()`) or no such wait came within 60 s: never a silent hang.
 */
async function cancelOnceWaitingForStandby(
  admin: pg.Client,
  match: { applicationName?: string; pid?: number },
  returned: () => boolean,
  what: string,
): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const { rows } = await admin.query<{ pid: number }>(
      `select pid from pg_stat_activity where wait_event = 'SyncRep' and (application_name = $1 or pid = $2)`,
      [match.applicationName ?? null, match.pid ?? null],
    );
    if (rows[0] !== undefined) {
      await admin.query('select pg_cancel_backend($1)', [rows[0].pid]);
      return;
    }
    if (returned() || Date.now() > deadline) {
      const { rows: backends } = await admin.query(
        `select pid, application_name, state, wait_event_type, wait_event, left(query, 160) as query
           from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()`,
      );
      throw new Error(
        `${what}: ${returned() ? 'returned before it waited for the standby' : 'no wait for the standby within 60 s'}; ` +
          `backends: ${JSON.stringify(backends)}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  clients.push(client);
  await client.connect();
  return client;
}

/** Load until `after` settlements were acknowledged, then crash `node` (the workers see their connections die). */
async function loadThenCrash(
  node: PgNode,
  tenant: string,
  after: number,
  history: LoadHistory,
  prefix = '',
): Promise<number> {
  let crashing: Promise<number> | undefined;
  await runSettleLoad(
    {
      url: node.url(DB),
      tenant,
      connections: CONNECTIONS,
      maxPerWorker: 1_000_000,
      keyPrefix: prefix,
      onAck: (h) => {
        if (crashing === undefined && h.acked.length >= after) crashing = node.crash();
      },
    },
    history,
  );
  if (crashing === undefined) throw new Error('the load ended before the crash');
  return crashing;
}

/** Waits until the standby has replayed everything the primary wrote so far. */
async function waitForReplay(pair: ReplicationPair): Promise<void> {
  const primary = await connect(pair.primary.url());
  const standby = await connect(pair.standby.url());
  const { rows } = await primary.query<{ lsn: string }>('select pg_current_wal_lsn()::text as lsn');
  const target = rows[0]?.lsn;
  for (;;) {
    const { rows: r } = await standby.query<{ done: boolean }>(
      'select pg_last_wal_replay_lsn() >= $1::pg_lsn as done',
      [target],
    );
    if (r[0]?.done === true) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe.skipIf(unavailable !== undefined)(
  `failover${unavailable === undefined ? '' : ` (skipped: ${unavailable})`}`,
  () => {
    it(
      'kill -9 of the primary under load, synchronous standby (remote_apply) promoted: no acknowledged settlement lost, none changed, none doubled',
      watched(async () => {
        const pair = await migratedPair(true);
        const tenant = 'failover-sync';
        const history = emptyHistory();
        const killed = await inStep('load, then kill the primary', () =>
          loadThenCrash(pair.primary, tenant, CRASH_AFTER, history),
        );
        await inStep('promote the standby', () => promote(pair.standby));

        const admin = await connect(pair.standby.url(DB));
        const afterFailover = await checkFailover(admin, tenant, history.acked);
        expect(history.acked.length).toBeGreaterThanOrEqual(CRASH_AFTER);
        expect(history.failed, JSON.stringify(history.failed.slice(0, 3))).toEqual([]);
        expect(afterFailover).toEqual({
          lostAcknowledgements: [],
          changedResults: [],
          downgrades: [],
          doubleSettlements: [],
        });

        // The calls cut by the crash are unknown; the client re-reads and retries on the new primary.
        const app = await connectApp(pair.standby.url(DB));
        clients.push(app);
        const resettled = await inStep('retry the unknown calls on the new primary', () =>
          redriveUnknowns(app, tenant, history.unknown, (key) => expireLease(admin, tenant, key), history),
        );
        const final = await checkFailover(admin, tenant, history.acked);
        expect(violationCount(final)).toBe(0);
        const { rows } = await admin.query<{ open: number }>(
          `select count(*)::int as open from settle_private.operations where tenant = $1 and status <> 'completed'`,
          [tenant],
        );
        expect(rows[0]?.open).toBe(0);

        recordFigures({
          scenario: 'failover/synchronous',
          operations: history.invocations,
          faults: 1,
          violations: violationCount(final),
          details: {
            acknowledged: history.acked.length,
            unknownAtCrash: history.unknown.length,
            resettledAfterFailover: resettled.length,
            processesKilled: killed,
          },
        });
      }),
      TIMEOUT_MS,
    );

    it(
      'control: with an asynchronous standby cut off before the crash, the checker reports the lost acknowledgements',
      watched(async () => {
        const pair = await migratedPair(false);
        const tenant = 'failover-async';
        const replicated = emptyHistory();
        await inStep('replicated load', () =>
          runSettleLoad(
            {
              url: pair.primary.url(DB),
              tenant,
              connections: CONNECTIONS,
              maxPerWorker: Math.ceil(CRASH_AFTER / 2 / CONNECTIONS),
              keyPrefix: 'a-',
            },
            replicated,
          ),
        );
        await inStep('wait for the standby to replay', () => waitForReplay(pair));
        // Stop the walreceiver: every commit from now on is acknowledged by the primary alone.
        await inStep('detach the standby', () => detachStandby(pair.standby));
        const unreplicated = emptyHistory();
        await inStep('unreplicated load, then kill the primary', () =>
          loadThenCrash(pair.primary, tenant, Math.ceil(CRASH_AFTER / 2), unreplicated, 'b-'),
        );
        await inStep('promote the standby', () => promote(pair.standby));

        const admin = await connect(pair.standby.url(DB));
        const report = await checkFailover(admin, tenant, [...replicated.acked, ...unreplicated.acked]);
        // The checker can fail: exactly the acknowledgements made after the cut are reported lost.
        expect(unreplicated.acked.length).toBeGreaterThanOrEqual(Math.ceil(CRASH_AFTER / 2));
        expect(report.lostAcknowledgements.map((a) => a.key).sort()).toEqual(
          unreplicated.acked.map((a) => a.key).sort(),
        );
        expect(report.changedResults).toEqual([]);
        expect(violationCount(report)).toBe(unreplicated.acked.length);

        recordFigures({
          scenario: 'failover/asynchronous-control',
          operations: replicated.invocations + unreplicated.invocations,
          faults: 2,
          violations: 0,
          details: {
            acknowledged: replicated.acked.length + unreplicated.acked.length,
            lostAcknowledgementsCaught: report.lostAcknowledgements.length,
          },
        });
      }),
      TIMEOUT_MS,
    );

    it(
      'a commit whose synchronous-replication wait was cancelled is unknown, not success; after failover it is not completed and the retry settles once',
      watched(async () => {
        const pair = await migratedPair(true);
        const tenant = 'failover-cancel';
        const key = 'cancelled-commit';
        const history = emptyHistory();
        const app = await connectApp(pair.primary.url(DB));
        clients.push(app);
        const admin = await connect(pair.primary.url(DB));

        step = 'claim on the primary';
        const claim = await settleCall<{ outcome: string; attempt: number; lease_token: string; fingerprint: string }>(
          app,
          `select outcome, attempt, lease_token, fingerprint from settle.claim(tenant => $1, key => $2, request => $3::jsonb,
         principal => $4, scopes => $5::text[], binding_generation => $6)`,
          [tenant, key, JSON.stringify(requestFor(key)), BINDING.principal, BINDING.scopes, BINDING.binding_generation],
        );
        expect(claim.kind).toBe('ok');
        const ticket = claim.kind === 'ok' ? claim.rows[0] : undefined;
        expect(ticket?.outcome).toBe('acquired');
        if (ticket === undefined) return;

        // The same through the typed client: run() claims while the standby is attached, the effect
        // cuts the standby off, so complete's commit waits in SyncRep until it is cancelled. The
        // client must answer `unknown` with the local record, never `completed`.
        const typedKey = 'cancelled-commit-typed';
        const typed = createSettleClient({
          connectionString: roleUrl(pair.primary.url(DB), 'failover-typed-client'),
          poolSize: 2,
        });
        let typedReturned = false;
        // The claim's commit waits for the (still attached) standby too: cancel only once the effect
        // has detached it, when the one wait left to come is complete's.
        let standbyDetached!: () => void;
        const detached = new Promise<void>((resolve) => (standbyDetached = resolve));
        const typedRun = typed
          .run(
            {
              tenant,
              key: typedKey,
              request: requestFor(typedKey) as Json,
              binding: { principal: BINDING.principal, scopes: BINDING.scopes, generation: BINDING.binding_generation },
              leaseMs: 600_000, // no lease renewal (a heartbeat would wait for the standby too)
            },
            async () => {
              await detachStandby(pair.standby);
              standbyDetached();
              return { receipt: 'never-acknowledged-typed' };
            },
          )
          .finally(() => {
            typedReturned = true;
            standbyDetached(); // the canceller then fails, naming the early return, instead of waiting
          });
        step = "the typed client's run, its complete's standby wait cancelled";
        const [typedOutcome] = await Promise.all([
          typedRun,
          detached.then(() =>
            cancelOnceWaitingForStandby(
              admin,
              { applicationName: 'failover-typed-client' },
              () => typedReturned,
              "the typed client's complete",
            ),
          ),
        ]);
        step = "end the typed client's pool";
        await Promise.race([
          typed.end(),
          new Promise((_, reject) =>
            setTimeout(
              () =>
                reject(new Error("the typed client's pool did not end within 30 s (a connection still checked out?)")),
              30_000,
            ).unref(),
          ),
        ]);
        expect(typedOutcome).toMatchObject({
          outcome: 'unknown',
          attempt: 1,
          record: { status: 'completed', settledAttempt: 1 },
        });
        expect(typedOutcome.outcome === 'unknown' ? typedOutcome.cause : undefined).toBeInstanceOf(
          SettleCommitUnconfirmedError,
        );

        // No standby: the commit of complete waits for standby1 forever, until cancelled.
        await inStep('detach the standby', () => detachStandby(pair.standby));
        const appPid = (await app.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid;
        let answered = false;
        const answer = settleCall<{ outcome: string; result_text: string }>(
          app,
          `select outcome, result::text as result_text from settle.complete(tenant => $1, key => $2, attempt => $3,
         lease_token => $4, fingerprint => $5, principal => $6, scopes => $7::text[], binding_generation => $8,
         result => $9::jsonb)`,
          [
            tenant,
            key,
            ticket.attempt,
            ticket.lease_token,
            ticket.fingerprint,
            BINDING.principal,
            BINDING.scopes,
            BINDING.binding_generation,
            JSON.stringify({ receipt: 'never-acknowledged' }),
          ],
        ).finally(() => {
          answered = true;
        });
        await inStep('cancel the standby wait of complete', () =>
          cancelOnceWaitingForStandby(admin, { pid: appPid }, () => answered, 'settle.complete from psql'),
        );
        const cancelled = await inStep('the cancelled complete answers', () => answer);

        // PostgreSQL returns the row (the engine said `settled`) with a WARNING: committed locally only.
        expect(cancelled.kind).toBe('unknown');
        expect(cancelled.kind === 'unknown' ? cancelled.rows?.[0]?.outcome : undefined).toBe('settled');
        const local = await admin.query<{ status: string }>('select status::text from settle.inspect($1, $2)', [
          tenant,
          key,
        ]);
        expect(local.rows[0]?.status).toBe('completed');
        history.unknown.push({ tenant, key, call: 'complete', why: cancelled.kind === 'unknown' ? cancelled.why : '' });

        await inStep('kill the primary', () => pair.primary.crash());
        await inStep('promote the standby', () => promote(pair.standby));
        const newAdmin = await connect(pair.standby.url(DB));
        const after = await newAdmin.query<{ status: string; attempt: number }>(
          'select status::text, attempt from settle.inspect($1, $2)',
          [tenant, key],
        );
        expect(after.rows[0]).toEqual({ status: 'running', attempt: 1 });
        // The typed client's `unknown` was right: its locally completed settlement is gone too.
        const typedAfter = await newAdmin.query<{ status: string; attempt: number }>(
          'select status::text, attempt from settle.inspect($1, $2)',
          [tenant, typedKey],
        );
        expect(typedAfter.rows[0]).toEqual({ status: 'running', attempt: 1 });

        // Had the client taken that answer as success, the checker would report it lost.
        const ifTrusted = await checkFailover(newAdmin, tenant, [
          {
            tenant,
            key,
            attempt: 1,
            resultText: cancelled.kind === 'unknown' ? (cancelled.rows?.[0]?.result_text ?? '') : '',
          },
        ]);
        expect(ifTrusted.lostAcknowledgements).toHaveLength(1);

        // Re-read semantics: not completed, so the retry (same key, request, binding) takes over and settles once.
        const newApp = await connectApp(pair.standby.url(DB));
        clients.push(newApp);
        const resettled = await inStep('retry on the new primary', () =>
          redriveUnknowns(newApp, tenant, history.unknown, (k) => expireLease(newAdmin, tenant, k), history),
        );
        expect(resettled).toEqual([key]);
        expect(history.acked).toEqual([expect.objectContaining({ key, attempt: 2 })]);
        const final = await checkFailover(newAdmin, tenant, history.acked);
        expect(violationCount(final)).toBe(0);

        recordFigures({
          scenario: 'failover/cancelled-sync-wait',
          operations: history.invocations + 2,
          faults: 3,
          violations: violationCount(final),
          details: { classifiedUnknown: 1 },
        });
      }),
      TIMEOUT_MS,
    );
  },
);
