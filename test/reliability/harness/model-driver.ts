import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { deriveSeed, mulberry32, type Prng } from '../../../src/shared/prng.js';
import {
  EMPTY_WORLD,
  meets,
  mustNotWait,
  overlay,
  RANK,
  step,
  windowAfterWait,
  type Answer,
  type Call,
  type Lock,
  type Operation,
  type Status,
  type Window,
  type World,
} from '../../../src/model/protocol-model.js';
import { FeedHarness, type FeedStep } from './feed-harness.js';

/**
 * Drives the real engine through sequences of steps over three application connections (a login
 * granted settle_app), one admin login (settle_admin) and a superuser observer, and checks every
 * answer against the reference model (src/model/protocol-model.ts) plus global invariants.
 *
 * A sequence works on two operations with the same key in two tenants, of two principals. Steps:
 * a call (autocommit, or inside the connection's open transaction), begin / commit / rollback,
 * a lapse (the observer moves the lease into the past, as src/testing/clock.ts does), and admin
 * calls. While one connection holds a transaction open, others' calls are sent and each is seen
 * either answered or waiting on a lock (pg_stat_activity), never guessed by sleeping; the holder
 * then reads the clock (the earliest instant a waiter can decide) and commits or rolls back.
 * A "long wait" holds the lock until the waiter has waited longer than its 1-second lease.
 */

export type TicketRef = 'latest' | 'previous' | 'first' | 'forged';
export type ClaimVariant = 'same' | 'request' | 'principal' | 'scopes' | 'newer' | 'tenant';
export type CallSpec =
  | {
      readonly kind: 'claim';
      readonly op: number;
      readonly variant: ClaimVariant;
      readonly short: boolean;
      /** rerun_after_unknown => false: a reported unknown answers in_doubt (absent: true). */
      readonly answerUnknown?: boolean;
    }
  | { readonly kind: 'heartbeat'; readonly op: number; readonly ticket: TicketRef; readonly short: boolean }
  | {
      readonly kind: 'complete';
      readonly op: number;
      readonly ticket: TicketRef;
      readonly mismatch?: 'fingerprint' | 'generation';
    }
  | { readonly kind: 'fail'; readonly op: number; readonly ticket: TicketRef; readonly retryable: boolean }
  | { readonly kind: 'report_unknown'; readonly op: number; readonly ticket: TicketRef }
  | { readonly kind: 'get'; readonly op: number; readonly variant: 'same' | 'newer' | 'principal' };
export type Step =
  | { readonly t: 'call'; readonly conn: number; readonly call: CallSpec }
  | { readonly t: 'begin'; readonly conn: number }
  | { readonly t: 'end'; readonly commit: boolean; readonly longWait?: boolean }
  | { readonly t: 'lapse'; readonly op: number }
  | { readonly t: 'expire' }
  | { readonly t: 'purge' }
  | { readonly t: 'redrive'; readonly op: number }
  | { readonly t: 'resolve'; readonly op: number; readonly outcome: 'completed' | 'failed'; readonly forged?: boolean }
  /**
   * The reconciler reads the operation (its attempt and status) and checks the downstream: the
   * evidence a later resolve presents as its precondition. A resolve without a check reads the
   * operation right before it.
   */
  | { readonly t: 'check'; readonly op: number }
  | { readonly t: 'revoke'; readonly op: number }
  | FeedStep;

export interface Violation {
  readonly sequence: number;
  readonly step: number;
  readonly kind: string;
  readonly detail: string;
  /** The steps run so far in this sequence (a regression case). */
  readonly steps: readonly Step[];
  readonly maxAttempts: readonly number[];
}

export interface RunFigures {
  sequences: number;
  steps: number;
  calls: number;
  /** Calls seen waiting behind another connection's row lock. */
  waits: number;
  /** Waits held past the waiter's own 1-second lease. */
  longWaits: number;
  rollbacks: number;
  revokesDuringWait: number;
  /** Distinct interleavings: sequences of (step kind, connection, outcome). */
  interleavings: number;
  /** settle.resolve answers by outcome (resolved completed / failed, already_final, SE0xx refusals). */
  resolutions: Record<string, number>;
}

export interface Connections {
  readonly app: readonly pg.Client[];
  readonly admin: pg.Client;
  readonly observer: pg.Client;
  /** A login granted settle_consumer and one granted settle_reconciler: the feed and its views (feed-harness.ts). */
  readonly consumer?: pg.Client;
  readonly reconciler?: pg.Client;
}

const LONG_US = 3600 * 1_000_000;
const SHORT_US = 1_000_000;
const SCOPES = ['payments:write'];

interface Ticket {
  readonly id: string;
  readonly attempt: number;
  readonly token: string;
  readonly fingerprint: string;
  readonly lock: Lock;
}

interface OpDef {
  readonly tenant: string;
  readonly key: string;
  readonly id: string;
  readonly lock: Lock;
  readonly marker: string;
}

/** One full model configuration: the committed world and the open transaction's own view. */
interface Scenario {
  readonly committed: World;
  readonly tx: {
    readonly conn: number;
    readonly own: Readonly<Record<string, Operation | null>>;
    readonly touched: readonly string[];
  } | null;
}

interface Pending {
  readonly conn: number;
  readonly call: Call;
  readonly spec: CallSpec;
  readonly answer: Promise<Answer>;
  readonly pid: number;
  readonly short: boolean;
  /** The model clock when the call was sent. */
  readonly sent: number;
  /** A claim of a key no committed state holds: it waits on another session's first insert. */
  readonly firstClaim: boolean;
}

class Stop extends Error {}

const us = (text: string | null | undefined): number | null =>
  text === null || text === undefined ? null : Number(text);
const NOW = `(extract(epoch from clock_timestamp()) * 1000000)::bigint::text as now_us`;
const usOf = (col: string): string => `(extract(epoch from ${col}) * 1000000)::bigint::text`;

/** A JSON payload as the marker the driver wrote, or its full text when it is anything else. */
function markerOf(text: string | null): string | null {
  if (text === null) return null;
  const value = JSON.parse(text) as unknown;
  if (typeof value === 'object' && value !== null && Object.keys(value).length === 1 && 'm' in value)
    return String((value as { m: unknown }).m);
  return text;
}

export class ModelRun {
  readonly figures: RunFigures = {
    sequences: 0,
    steps: 0,
    calls: 0,
    waits: 0,
    longWaits: 0,
    rollbacks: 0,
    revokesDuringWait: 0,
    interleavings: 0,
    resolutions: {},
  };
  readonly violations: Violation[] = [];
  private readonly shapes = new Set<string>();
  private clock = 0;
  private pids: number[] = [];

  // Per-sequence state.
  private seq = 0;
  private ops: OpDef[] = [];
  private maxAttempts: number[] = [];
  private tickets: Ticket[][] = [];
  /** Per operation: the attempt and status the last check read (the evidence's epoch). */
  private evidence: ({ readonly attempt: number; readonly status: Status } | null)[] = [];
  private scenarios: Scenario[] = [];
  private txConn: number | null = null;
  /** The open transaction raised an error: PostgreSQL aborted it (its end is a rollback). */
  private txAborted = false;
  /** Operations the open transaction made a call on that may take the row lock (R3: only those). */
  private txMayLock = new Set<string>();
  private pending: Pending[] = [];
  private trace: Step[] = [];
  private shape: string[] = [];
  private ledger = new Ledger();
  readonly feed: FeedHarness | null;

  constructor(
    private readonly c: Connections,
    private readonly prefix: string,
  ) {
    this.feed =
      c.consumer === undefined || c.reconciler === undefined
        ? null
        : new FeedHarness(
            { consumer: c.consumer, reconciler: c.reconciler, admin: c.admin, observer: c.observer },
            { fail: (kind, detail) => this.violate(kind, detail), txOpen: () => this.txConn !== null },
          );
  }

  async init(): Promise<void> {
    this.pids = await Promise.all(
      this.c.app.map(async (client) =>
        Number((await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid),
      ),
    );
    await this.c.admin.query(`select settle.set_purge_min_retention(interval '0 seconds')`);
  }

  /** Runs one random sequence (seeded); returns false when a violation was found. */
  async randomSequence(seed: number, index: number, length: number): Promise<boolean> {
    const rng = mulberry32(deriveSeed(seed, index));
    const maxAttempts = [rng.int(2, 4), rng.int(2, 4)];
    return this.sequence(
      index,
      maxAttempts,
      (done) => (done >= length ? undefined : this.generate(rng)),
      deriveSeed(seed, index),
    );
  }

  /** Runs a fixed list of steps (a regression case). */
  async script(index: number, maxAttempts: readonly number[], steps: readonly Step[]): Promise<boolean> {
    let i = 0;
    return this.sequence(index, maxAttempts, () => steps[i++]);
  }

  private async sequence(
    index: number,
    maxAttempts: readonly number[],
    next: (done: number) => Step | Step[] | undefined,
    feedSeed: number | null = null,
  ): Promise<boolean> {
    this.seq = index;
    const tag = `${this.prefix}s${index}`;
    const lockOf = (i: number, principal: string): Lock => ({
      request: `r${i}`,
      principal,
      scopes: SCOPES,
      generation: 1,
    });
    this.ops = [0, 1].map((i) => {
      const tenant = `${tag}t${i}`;
      return { tenant, key: 'k', id: `${tenant}/k`, lock: lockOf(i, i === 0 ? 'alice' : 'bob'), marker: `${tag}-${i}` };
    });
    this.maxAttempts = [...maxAttempts];
    this.tickets = [[], []];
    this.evidence = [null, null];
    this.scenarios = [{ committed: EMPTY_WORLD, tx: null }];
    this.txConn = null;
    this.pending = [];
    this.trace = [];
    this.shape = [];
    this.ledger = new Ledger();
    this.figures.sequences++;
    try {
      await this.feed?.begin(
        tag,
        this.ops.map((d) => d.tenant),
        feedSeed,
      );
      for (let done = 0; ; ) {
        const produced = next(done);
        if (produced === undefined) break;
        for (const s of Array.isArray(produced) ? produced : [produced]) {
          this.trace.push(s);
          await this.run(s);
          await this.checkDatabase();
          await this.feed?.afterStep();
          this.figures.steps++;
          done++;
        }
      }
      if (this.txConn !== null) {
        await this.run({ t: 'end', commit: true });
        await this.checkDatabase();
      }
      await this.feed?.end();
      this.shapes.add(this.shape.join(' '));
      this.figures.interleavings = this.shapes.size;
      return true;
    } catch (error) {
      if (!(error instanceof Stop)) {
        this.record('exception', error instanceof Error ? `${error.message}\n${error.stack ?? ''}` : String(error));
      }
      await this.cleanUp();
      return false;
    }
  }

  private async cleanUp(): Promise<void> {
    if (this.txConn !== null) await this.c.app[this.txConn]?.query('rollback').catch(() => {});
    await Promise.allSettled(this.pending.map((p) => p.answer));
    this.txConn = null;
    this.txAborted = false;
    this.txMayLock.clear();
    this.pending = [];
    await this.feed?.abandon();
  }

  private record(kind: string, detail: string): void {
    this.violations.push({
      sequence: this.seq,
      step: this.trace.length,
      kind,
      detail,
      steps: [...this.trace],
      maxAttempts: [...this.maxAttempts],
    });
  }

  private violate(kind: string, detail: string): never {
    this.record(kind, detail);
    throw new Stop(kind);
  }

  // -------------------------------------------------------------------------------------------
  // The generator: random steps, biased towards the interleavings the rules are about.

  private generate(rng: Prng): Step | Step[] {
    const feed = this.feed?.generate(this.txConn !== null);
    if (feed !== undefined) return feed;
    const op = rng.int(0, 1);
    if (this.txConn === null && rng.chance(0.22)) return this.episode(rng);
    if (this.txConn === null && rng.chance(0.1)) return this.verdictRace(rng, op);
    const r = rng.next();
    if (r < 0.05) return { t: 'lapse', op };
    if (r < 0.09) return { t: 'expire' };
    if (r < 0.11) return { t: 'purge' };
    if (r < 0.14) return { t: 'redrive', op };
    if (r < 0.15) return { t: 'revoke', op };
    // settle.resolve mostly where it applies: an operation that lost its outcome, often with
    // evidence read some steps earlier (a check), so that attempts opened since meet a verdict
    // that did not see them.
    const lost = ['unknown', 'conflict'].includes(this.scenarios[0]?.committed.ops[this.def(op).id]?.status ?? '');
    const checked = this.evidence[op] !== null && this.evidence[op] !== undefined;
    if (lost && checked && this.txConn === null && r < 0.45 && rng.chance(0.6)) {
      // A client retry races a verdict read earlier: a new attempt runs (and may take effect, then
      // lose its response) between the check and the resolve.
      const conn = rng.int(0, 2);
      const report: CallSpec = rng.chance(0.7)
        ? { kind: 'report_unknown', op, ticket: 'latest' }
        : { kind: 'fail', op, ticket: 'latest', retryable: true };
      return [
        { t: 'call', conn, call: { kind: 'claim', op, variant: 'same', short: false } },
        { t: 'call', conn, call: report },
        { t: 'resolve', op, outcome: rng.chance(0.7) ? 'failed' : 'completed' },
      ];
    }
    if (lost && r < (checked ? 0.18 : 0.24)) return { t: 'check', op };
    if (r < 0.16 || (lost && r < 0.33))
      return {
        t: 'resolve',
        op,
        outcome: rng.chance(0.5) ? 'completed' : 'failed',
        ...(rng.chance(0.1) ? { forged: true } : {}),
      };
    return { t: 'call', conn: rng.int(0, 2), call: this.randomCall(rng, op, false) };
  }

  /**
   * A verdict and a client retry race: the attempt loses its response, the reconciler reads the
   * operation and checks the downstream, the client retries (a new attempt runs and reports), and
   * the verdict arrives: it concerns the attempt the check saw, never the newer one.
   */
  private verdictRace(rng: Prng, op: number): Step[] {
    const conn = rng.int(0, 2);
    const steps: Step[] = [];
    if (rng.chance(0.7)) steps.push({ t: 'call', conn, call: { kind: 'report_unknown', op, ticket: 'latest' } });
    steps.push({ t: 'check', op });
    const retries = rng.int(0, 2);
    for (let i = 0; i < retries; i++) {
      const c = rng.int(0, 2);
      steps.push({ t: 'call', conn: c, call: { kind: 'claim', op, variant: 'same', short: false } });
      const r = rng.next();
      steps.push({
        t: 'call',
        conn: c,
        call:
          r < 0.6
            ? { kind: 'report_unknown', op, ticket: 'latest' }
            : r < 0.8
              ? { kind: 'fail', op, ticket: 'latest', retryable: true }
              : { kind: 'complete', op, ticket: 'latest' },
      });
    }
    steps.push({ t: 'resolve', op, outcome: rng.chance(0.7) ? 'failed' : 'completed' });
    return steps;
  }

  /** One connection opens a transaction, calls, others call (and may wait), then it ends. */
  private episode(rng: Prng): Step[] {
    const holder = rng.int(0, 2);
    const op = rng.int(0, 1);
    const steps: Step[] = [
      { t: 'begin', conn: holder },
      { t: 'call', conn: holder, call: this.randomCall(rng, op, true) },
    ];
    if (rng.chance(0.3)) steps.push({ t: 'call', conn: holder, call: this.randomCall(rng, op, true) });
    const others = [0, 1, 2].filter((c) => c !== holder);
    const waiters = rng.int(0, 2);
    for (let i = 0; i < waiters; i++)
      steps.push({
        t: 'call',
        conn: others[i] as number,
        call: this.randomCall(rng, rng.chance(0.85) ? op : 1 - op, false),
      });
    if (rng.chance(0.12)) steps.push({ t: 'revoke', op });
    if (rng.chance(0.1)) steps.push({ t: 'expire' });
    steps.push({ t: 'end', commit: rng.chance(0.6), longWait: rng.chance(0.35) });
    return steps;
  }

  private randomCall(rng: Prng, op: number, holder: boolean): CallSpec {
    const ticket = (): TicketRef => {
      const r = rng.next();
      return r < 0.6 ? 'latest' : r < 0.8 ? 'previous' : r < 0.92 ? 'first' : 'forged';
    };
    const r = rng.next();
    const claimP = holder ? 0.4 : 0.35;
    if (r < claimP) {
      const v = rng.next();
      const variant: ClaimVariant =
        v < 0.82
          ? 'same'
          : v < 0.86
            ? 'request'
            : v < 0.9
              ? 'principal'
              : v < 0.93
                ? 'scopes'
                : v < 0.97
                  ? 'newer'
                  : 'tenant';
      return {
        kind: 'claim',
        op,
        variant,
        short: rng.chance(0.3),
        ...(rng.chance(0.35) ? { answerUnknown: true } : {}),
      };
    }
    if (r < claimP + 0.1) return { kind: 'heartbeat', op, ticket: ticket(), short: rng.chance(0.3) };
    if (r < claimP + 0.27) {
      const m = rng.next();
      return {
        kind: 'complete',
        op,
        ticket: ticket(),
        ...(m < 0.1 ? { mismatch: 'generation' as const } : m < 0.15 ? { mismatch: 'fingerprint' as const } : {}),
      };
    }
    if (r < claimP + 0.45) return { kind: 'fail', op, ticket: ticket(), retryable: rng.chance(0.7) };
    if (r < claimP + 0.57) return { kind: 'report_unknown', op, ticket: ticket() };
    const g = rng.next();
    return { kind: 'get', op, variant: g < 0.75 ? 'same' : g < 0.9 ? 'newer' : 'principal' };
  }

  // -------------------------------------------------------------------------------------------
  // Running a step.

  private async run(s: Step): Promise<void> {
    switch (s.t) {
      case 'begin':
        if (this.txConn !== null) return; // one open transaction at a time
        await this.c.app[s.conn]?.query('begin');
        this.txConn = s.conn;
        this.scenarios = this.scenarios.map((sc) => ({ ...sc, tx: { conn: s.conn, own: {}, touched: [] } }));
        this.shape.push(`B${s.conn}`);
        return;
      case 'end':
        return this.end(s.commit, s.longWait === true);
      case 'call':
        return this.call(s.conn, s.call);
      case 'lapse':
        return this.lapse(s.op);
      case 'expire':
        return this.admin(
          { kind: 'expire_leases' },
          `select expired, dead_lettered, ${NOW} from settle.expire_leases(batch_size => 1000)`,
          [],
          () => ({ outcome: 'expired' }),
        );
      case 'purge':
        return this.admin(
          { kind: 'purge' },
          `select settle.purge(older_than => interval '0 seconds', batch_size => 1000) as n, ${NOW}`,
          [],
          () => ({ outcome: 'purged' }),
        );
      case 'redrive': {
        const def = this.def(s.op);
        return this.admin(
          { kind: 'redrive', id: def.id, additional: 1 },
          `select r.status::text as status, r.attempt, r.max_attempts, ${NOW} from settle.redrive(tenant => $1, key => $2, additional_attempts => 1) r`,
          [def.tenant, def.key],
          (row) => ({
            outcome: 'redriven',
            status: row.status as string,
            attempt: row.attempt as number,
            maxAttempts: row.max_attempts as number,
          }),
        );
      }
      case 'resolve':
        return this.resolve(s);
      case 'feed':
        return this.feed?.run(s);
      case 'check': {
        this.evidence[s.op] = await this.read(s.op);
        this.shape.push(`check${s.op}`);
        return;
      }
      case 'revoke': {
        const def = this.def(s.op);
        const below = def.lock.generation + 1;
        if (this.pending.length > 0) this.figures.revokesDuringWait++;
        return this.admin(
          { kind: 'revoke_binding', tenant: def.tenant, principal: def.lock.principal, below },
          `select settle.revoke_binding(tenant => $1, principal => $2, below_generation => $3) as floor, ${NOW}`,
          [def.tenant, def.lock.principal, below],
          (row) => ({ outcome: 'revoked', floor: Number(row.floor) }),
        );
      }
    }
  }

  private def(op: number): OpDef {
    return this.ops[op] as OpDef;
  }

  /** Maintenance calls run autocommit on the admin login; they never wait (SKIP LOCKED / no row lock). */
  private async admin(
    call: Call,
    sql: string,
    params: unknown[],
    answer: (row: Record<string, unknown>) => Answer,
  ): Promise<void> {
    const lo = this.clock;
    let a: Answer;
    try {
      const row = (await this.c.admin.query(sql, params)).rows[0] as Record<string, unknown>;
      this.tick(row.now_us as string);
      a = answer(row);
    } catch (error) {
      a = { outcome: 'error', sqlstate: (error as { code?: string }).code ?? 'none' };
      this.tick(await this.now());
    }
    this.figures.calls++;
    this.shape.push(`${call.kind}:${a.outcome}`);
    const maybeLocked = this.scenarios[0]?.tx?.touched ?? [];
    this.apply(null, call, a, { lo, hi: this.clock }, maybeLocked);
    if (call.kind === 'redrive' && a.outcome === 'redriven') this.ledger.redriven(call.id, a.status ?? null);
    if (call.kind === 'resolve') {
      const tally =
        a.outcome === 'resolved'
          ? `resolved_${a.status ?? ''}`
          : a.outcome === 'error'
            ? (a.sqlstate ?? 'error')
            : a.outcome;
      this.figures.resolutions[tally] = (this.figures.resolutions[tally] ?? 0) + 1;
      if (a.outcome === 'resolved') this.ledger.resolved(this, call.id, a.status ?? null, call.expectedAttempt);
    }
    this.ledger.onAnswer(this, call, a, true);
  }

  /**
   * settle.resolve on the admin login, outside any open transaction (it takes the row lock). It
   * presents the fingerprint of the request of this operation's own lock, or (forged) of the
   * other operation's; the reservation may have been made with either (a `tenant` claim).
   */
  private async resolve(s: Extract<Step, { t: 'resolve' }>): Promise<void> {
    if (this.txConn !== null) return;
    const def = this.def(s.op);
    const presented = s.forged === true ? this.def(1 - s.op) : def;
    const payload = `${def.marker}-resolved-${randomUUID().slice(0, 8)}`;
    const value = JSON.stringify({ m: payload });
    // The evidence's epoch: what the last check read, or (no check) the operation read now.
    const evidence = this.evidence[s.op] ?? (await this.read(s.op)) ?? { attempt: 1, status: undefined };
    await this.admin(
      {
        kind: 'resolve',
        id: def.id,
        outcome: s.outcome,
        payload,
        request: presented.lock.request,
        expectedAttempt: evidence.attempt,
        ...(evidence.status === undefined ? {} : { expectedStatus: evidence.status }),
      },
      `select r.outcome, r.reason, r.status::text as status, r.attempt, r.settled_attempt, r.result::text as result, r.error::text as error, ${NOW}
         from settle.resolve(tenant => $1, key => $2, fingerprint => settle.fingerprint($3::jsonb), outcome => $4,
                             reason => 'model-based test: verified downstream', result => $5::jsonb, error => $6::jsonb,
                             expected_attempt => $7::integer, expected_status => $8::settle.status) r`,
      [
        def.tenant,
        def.key,
        this.requestOf(presented.lock, presented),
        s.outcome,
        s.outcome === 'completed' ? value : null,
        s.outcome === 'failed' ? value : null,
        evidence.attempt,
        evidence.status ?? null,
      ],
      (row) => normalizeRow(row),
    );
  }

  /** The operation's attempt and status as committed now (the observer reads them). */
  private async read(op: number): Promise<{ attempt: number; status: Status } | null> {
    const def = this.def(op);
    const { rows } = await this.c.observer.query<{ attempt: number; status: Status }>(
      `select attempt, status::text as status from settle_private.operations where tenant = $1 and key = $2`,
      [def.tenant, def.key],
    );
    return rows[0] ?? null;
  }

  private async lapse(op: number): Promise<void> {
    if (this.txConn !== null) return; // the UPDATE would wait for the open transaction
    const def = this.def(op);
    const { rows } = await this.c.observer.query<{ lease_us: string; now_us: string }>(
      `update settle_private.operations set lease_expires_at = now() - interval '1 second'
        where tenant = $1 and key = $2 and lease_token is not null
        returning ${usOf('lease_expires_at')} as lease_us, ${NOW}`,
      [def.tenant, def.key],
    );
    const row = rows[0];
    this.shape.push(`lapse${op}:${row === undefined ? 'none' : 'moved'}`);
    if (row === undefined) return;
    this.tick(row.now_us);
    const e = Number(row.lease_us);
    this.scenarios = this.scenarios.flatMap((sc) => {
      const o = sc.committed.ops[def.id];
      if (o === undefined || o.lease === null) return o === undefined ? [] : [sc];
      return [
        {
          ...sc,
          committed: {
            ...sc.committed,
            ops: { ...sc.committed.ops, [def.id]: { ...o, lease: { ...o.lease, expiresAt: e } } },
          },
        },
      ];
    });
    if (this.scenarios.length === 0)
      this.violate('lease', `a lease was lapsed on ${def.id} that the model does not know`);
    this.ledger.lapsed(def.id, e);
  }

  private async now(): Promise<string> {
    return (await this.c.observer.query<{ now_us: string }>(`select ${NOW}`)).rows[0]?.now_us ?? '0';
  }

  private tick(nowUs: string | null | undefined): void {
    const n = us(nowUs);
    if (n !== null && n > this.clock) this.clock = n;
  }

  // -------------------------------------------------------------------------------------------
  // Application calls.

  private resolveTicket(op: number, ref: TicketRef): Ticket {
    const list = this.tickets[op] ?? [];
    const def = this.def(op);
    const pick =
      ref === 'latest' ? list.at(-1) : ref === 'previous' ? list.at(-2) : ref === 'first' ? list[0] : undefined;
    if (pick !== undefined) return pick;
    const last = list.at(-1);
    return {
      id: def.id,
      attempt: last?.attempt ?? 1,
      token: randomUUID(),
      fingerprint: last?.fingerprint ?? `v1:${'0'.repeat(64)}`,
      lock: def.lock,
    };
  }

  /** The request JSON of a lock presented for an operation (the model's request names it). */
  private requestOf(lock: Lock, d: OpDef): string {
    return JSON.stringify({ amount: lock.request.endsWith('b') ? 11 : 10, op: d.marker });
  }

  /** The model call and the SQL for a call spec. */
  private prepare(spec: CallSpec): { call: Call; sql: string; params: unknown[]; short: boolean; ticketOp?: number } {
    const def = this.def(spec.op);
    if (spec.kind === 'claim' || spec.kind === 'get') {
      const target = spec.kind === 'claim' && spec.variant === 'tenant' ? this.def(1 - spec.op) : def;
      const floor = this.floor(def.tenant, def.lock.principal);
      const lock: Lock =
        spec.variant === 'request'
          ? { ...def.lock, request: `${def.lock.request}b` }
          : spec.variant === 'principal'
            ? { ...def.lock, principal: 'mallory' }
            : spec.variant === 'scopes'
              ? { ...def.lock, scopes: [...SCOPES, 'refunds:write'] }
              : spec.variant === 'newer'
                ? { ...def.lock, generation: Math.max(def.lock.generation + 1, floor) }
                : def.lock;
      const request = this.requestOf(lock, def);
      if (spec.kind === 'get') {
        return {
          call: { kind: 'get', id: target.id, lock },
          sql: `select r.outcome, r.reason, r.status::text as status, r.attempt, r.settled_attempt, r.result::text as result, r.error::text as error,
                       r.dead_lettered, r.in_flight, r.conflict_on, ${NOW}
                  from settle.get(tenant => $1, key => $2, request => $3::jsonb, principal => $4, scopes => $5::text[], binding_generation => $6::bigint) r`,
          params: [target.tenant, target.key, request, lock.principal, lock.scopes, lock.generation],
          short: false,
        };
      }
      const short = spec.short;
      return {
        call: {
          kind: 'claim',
          id: target.id,
          lock,
          leaseUs: short ? SHORT_US : LONG_US,
          maxAttempts: this.maxAttempts[spec.variant === 'tenant' ? 1 - spec.op : spec.op] ?? 3,
          rerunAfterUnknown: spec.answerUnknown !== true,
        },
        sql: `select r.outcome, r.status::text as status, r.attempt, r.lease_token::text as lease_token, ${usOf('r.lease_expires_at')} as lease_us,
                     r.fingerprint, r.result::text as result, r.settled_attempt, r.error::text as error, r.dead_lettered, r.conflict_on, r.reason,
                     r.dead_letter_reason, ${NOW}
                from settle.claim(tenant => $1, key => $2, request => $3::jsonb, principal => $4, scopes => $5::text[],
                                  binding_generation => $6::bigint, lease => $7::interval, worker => $8, max_attempts => $9,
                                  rerun_after_unknown => $10::boolean) r`,
        params: [
          target.tenant,
          target.key,
          request,
          lock.principal,
          lock.scopes,
          lock.generation,
          short ? '1 second' : '1 hour',
          'model',
          this.maxAttempts[spec.variant === 'tenant' ? 1 - spec.op : spec.op] ?? 3,
          spec.answerUnknown !== true,
        ],
        short,
        ticketOp: spec.variant === 'tenant' ? 1 - spec.op : spec.op,
      };
    }
    const t = this.resolveTicket(spec.op, spec.ticket);
    if (spec.kind === 'heartbeat') {
      return {
        call: {
          kind: 'heartbeat',
          id: t.id,
          attempt: t.attempt,
          token: t.token,
          leaseUs: spec.short ? SHORT_US : LONG_US,
        },
        sql: `select r.outcome, r.reason, r.status::text as status, ${usOf('r.lease_expires_at')} as lease_us, ${NOW}
                from settle.heartbeat(tenant => $1, key => $2, attempt => $3, lease_token => $4::uuid, lease => $5::interval) r`,
        params: [def.tenant, def.key, t.attempt, t.token, spec.short ? '1 second' : '1 hour'],
        short: spec.short,
      };
    }
    let lock = t.lock;
    let fingerprint = t.fingerprint;
    if (spec.kind === 'complete' && spec.mismatch === 'generation')
      lock = { ...lock, generation: lock.generation + 50 };
    if (spec.kind === 'complete' && spec.mismatch === 'fingerprint') {
      lock = { ...lock, request: 'forged' };
      fingerprint = `v1:${'e'.repeat(64)}`;
    }
    const base = [def.tenant, def.key, t.attempt, t.token, fingerprint, lock.principal, lock.scopes, lock.generation];
    const cols = `r.outcome, r.reason, r.status::text as status, r.attempt, r.settled_attempt, r.result::text as result, r.error::text as error,
                  r.conflict_on, r.dead_lettered, r.dead_letter_reason, ${NOW}`;
    const args = `tenant => $1, key => $2, attempt => $3, lease_token => $4::uuid, fingerprint => $5, principal => $6, scopes => $7::text[], binding_generation => $8::bigint`;
    const nonce = randomUUID().slice(0, 8);
    if (spec.kind === 'complete') {
      // A repeated success of one attempt repeats its result (the same payload: `duplicate`).
      const result = `${def.marker}-a${t.attempt}-${t.token.slice(0, 8)}`;
      return {
        call: { kind: 'complete', id: t.id, attempt: t.attempt, token: t.token, lock, result },
        sql: `select ${cols} from settle.complete(${args}, result => $9::jsonb) r`,
        params: [...base, JSON.stringify({ m: result })],
        short: false,
      };
    }
    if (spec.kind === 'fail') {
      const error = `${def.marker}-e${t.attempt}-${t.token.slice(0, 8)}`;
      void nonce;
      return {
        call: { kind: 'fail', id: t.id, attempt: t.attempt, token: t.token, lock, error, retryable: spec.retryable },
        sql: `select ${cols} from settle.fail(${args}, error => $9::jsonb, retryable => $10) r`,
        params: [...base, JSON.stringify({ m: error }), spec.retryable],
        short: false,
      };
    }
    return {
      call: { kind: 'report_unknown', id: t.id, attempt: t.attempt, token: t.token, lock },
      sql: `select ${cols} from settle.report_unknown(${args}) r`,
      params: base,
      short: false,
    };
  }

  private floor(tenant: string, principal: string): number {
    return this.scenarios[0]?.committed.floors[`${tenant}/${principal}`] ?? 0;
  }

  private async call(conn: number, spec: CallSpec): Promise<void> {
    if (this.pending.some((w) => w.conn === conn)) return; // that connection is still waiting
    if (this.txAborted && this.txConn === conn) return; // an aborted transaction answers nothing
    const client = this.c.app[conn] as pg.Client;
    const p = this.prepare(spec);
    const lo = this.clock;
    const answer = this.send(client, p.sql, p.params);
    this.figures.calls++;
    const other = this.txConn !== null && this.txConn !== conn;
    if (other) {
      const waited = await this.answeredOrWaiting(answer, this.pids[conn] as number);
      if (waited !== false) {
        this.figures.waits++;
        const holder = this.pids[this.txConn as number] as number;
        const on = `(waits on lock ${waited.lock} held by backends ${JSON.stringify(waited.blockers)}; the open transaction's is ${holder})`;
        // R3: a call that cannot change the record must not wait on the row.
        if (this.scenarios.every((sc) => mustNotWait(sc.committed, p.call))) {
          this.violate(
            'hostage',
            `${p.call.kind} waited for the row lock although it can change nothing (R3) ${on}: ${JSON.stringify(p.call)}`,
          );
        }
        // R3 the other way round: the open transaction made only calls that cannot change the
        // record (a wrong token, a revoked generation): they must not hold anyone's row. Judged
        // on what the waiter waits for: the open transaction's backend among its blockers.
        if ('id' in p.call && !this.txMayLock.has(p.call.id) && waited.blockers.includes(holder)) {
          this.violate(
            'hostage',
            `${p.call.kind} on ${p.call.id} waits behind an open transaction whose calls on it could change nothing (R3) ${on}`,
          );
        }
        const firstClaim =
          p.call.kind === 'claim' &&
          this.scenarios.every((sc) => sc.committed.ops[(p.call as { id: string }).id] === undefined);
        this.pending.push({
          conn,
          call: p.call,
          spec,
          answer,
          pid: this.pids[conn] as number,
          short: p.short,
          sent: lo,
          firstClaim,
        });
        this.shape.push(`${conn}:${spec.kind}:wait`);
        return;
      }
    }
    const inTx = this.txConn === conn;
    if (inTx && 'id' in p.call) {
      const call = p.call;
      if (!this.scenarios.every((sc) => mustNotWait(overlay(sc.committed, sc.tx?.own ?? {}), call)))
        this.txMayLock.add(call.id);
    }
    const a = await answer;
    this.shape.push(`${conn}:${spec.kind}:${a.outcome}`);
    if (inTx && a.outcome === 'error') this.txAborted = true;
    this.apply(inTx ? conn : null, p.call, a, { lo, hi: this.clock }, []);
    this.afterAnswer(spec, p, a, !inTx);
  }

  private afterAnswer(spec: CallSpec, p: ReturnType<ModelRun['prepare']>, a: Answer, committed: boolean): void {
    this.ledger.onAnswer(this, p.call, a, committed, this.txConn);
    if (p.call.kind === 'claim' && a.outcome === 'acquired' && a.leaseToken && a.attempt) {
      const op = p.ticketOp ?? spec.op;
      const fingerprint = (a as Answer & { fingerprint?: string }).fingerprint ?? '';
      this.tickets[op]?.push({
        id: p.call.id,
        attempt: a.attempt,
        token: a.leaseToken,
        fingerprint,
        lock: p.call.lock,
      });
    }
    this.checkDisclosure(p.call, a);
  }

  private async send(client: pg.Client, sql: string, params: unknown[]): Promise<Answer> {
    try {
      const row = (await client.query(sql, params)).rows[0] as Record<string, unknown>;
      this.tick(row.now_us as string);
      return normalizeRow(row);
    } catch (error) {
      this.tick(await this.now());
      return {
        outcome: 'error',
        sqlstate: (error as { code?: string }).code ?? 'none',
        reason: (error as Error).message,
      };
    }
  }

  /**
   * Resolves with what the backend waits on once it waits on a lock (the lock's wait event and
   * the backends holding it, pg_blocking_pids), false when the answer came first.
   */
  private async answeredOrWaiting(
    answer: Promise<Answer>,
    pid: number,
  ): Promise<false | { readonly lock: string; readonly blockers: readonly number[] }> {
    let answered = false;
    void answer.then(() => {
      answered = true;
    });
    const deadline = Date.now() + 30_000;
    for (;;) {
      await new Promise((r) => setTimeout(r, 3));
      if (answered) return false;
      const { rows } = await this.c.observer.query<{ lock: string | null; blockers: number[] }>(
        `select case when wait_event_type = 'Lock' then wait_event end as lock, pg_blocking_pids(pid) as blockers
           from pg_stat_activity where pid = $1`,
        [pid],
      );
      const lock = rows[0]?.lock;
      if (lock !== null && lock !== undefined) return { lock, blockers: rows[0]?.blockers ?? [] };
      if (answered) return false;
      if (Date.now() > deadline)
        this.violate('stuck', `backend ${pid} neither answered nor waited on a lock within 30 s`);
    }
  }

  private async end(commitWanted: boolean, longWait: boolean): Promise<void> {
    let commit = commitWanted;
    const conn = this.txConn;
    if (conn === null) return;
    const client = this.c.app[conn] as pg.Client;
    if (longWait && this.pending.some((p) => p.short)) {
      // Hold the lock until every short-lease waiter has waited longer than its lease (bounded).
      const pids = this.pending.filter((p) => p.short).map((p) => p.pid);
      const deadline = Date.now() + 10_000;
      for (;;) {
        const { rows } = await this.c.observer.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity where pid = any($1::int[]) and clock_timestamp() > query_start + interval '1.05 seconds'`,
          [pids],
        );
        if (rows[0]?.n === pids.length) break;
        if (Date.now() > deadline) this.violate('stuck', 'a long wait did not pass the lease within 10 s');
        await new Promise((r) => setTimeout(r, 50));
      }
      this.figures.longWaits += pids.length;
      this.shape.push('longwait');
    }
    // The earliest instant a waiter can decide: read inside the holder's transaction, after
    // every waiter was seen waiting, right before the lock is released.
    const release =
      (await (this.txAborted ? this.c.observer : client).query<{ now_us: string }>(`select ${NOW}`)).rows[0]?.now_us ??
      '0';
    this.tick(release);
    if (this.txAborted) commit = false;
    this.txAborted = false;
    await client.query(commit ? 'commit' : 'rollback');
    if (!commit) this.figures.rollbacks++;
    this.shape.push(commit ? 'C' : 'R');
    this.txConn = null;
    this.txMayLock.clear();
    this.scenarios = this.scenarios.map((sc) => ({
      committed: commit && sc.tx !== null ? overlay(sc.committed, sc.tx.own) : sc.committed,
      tx: null,
    }));
    this.ledger.endTx(commit);
    const waiters = this.pending;
    this.pending = [];
    const answers = await Promise.all(waiters.map((p) => p.answer));
    const hi = this.clock;
    waiters.forEach((p, i) => this.shape.push(`${p.conn}:${p.spec.kind}:${(answers[i] as Answer).outcome}`));
    // Waiters decide after the release, in lock-queue order; both orders are tried for two.
    const orders =
      waiters.length === 2
        ? [
            [0, 1],
            [1, 0],
          ]
        : [waiters.map((_, i) => i)];
    const before = this.scenarios;
    const after: Scenario[] = [];
    const failures: string[] = [];
    for (const order of orders) {
      this.scenarios = before;
      try {
        for (const i of order)
          this.applyQuiet(
            null,
            (waiters[i] as Pending).call,
            answers[i] as Answer,
            windowAfterWait(Number(release), hi, waiters[i] as Pending),
            [],
          );
        after.push(...this.scenarios);
      } catch (error) {
        failures.push(error instanceof Error ? error.message : String(error));
      }
    }
    if (after.length === 0)
      this.violate('answer', `waiters after ${commit ? 'commit' : 'rollback'}:\n${failures.join('\n---\n')}`);
    this.scenarios = dedupe(after);
    waiters.forEach((p, i) => {
      const prepared = {
        call: p.call,
        sql: '',
        params: [],
        short: p.short,
        ticketOp: p.spec.kind === 'claim' && p.spec.variant === 'tenant' ? 1 - p.spec.op : p.spec.op,
      };
      this.afterAnswer(p.spec, prepared, answers[i] as Answer, true);
    });
  }

  // -------------------------------------------------------------------------------------------
  // Checking.

  /** Keeps the scenarios that allow `a`; a violation when none does. */
  private apply(txConn: number | null, call: Call, a: Answer, win: Window, maybeLocked: readonly string[]): void {
    try {
      this.applyQuiet(txConn, call, a, win, maybeLocked);
    } catch (error) {
      this.violate('answer', error instanceof Error ? error.message : String(error));
    }
  }

  private applyQuiet(txConn: number | null, call: Call, a: Answer, win: Window, maybeLocked: readonly string[]): void {
    const next: Scenario[] = [];
    const allowed: string[] = [];
    const id = 'id' in call ? call.id : undefined;
    for (const sc of this.scenarios) {
      const inTx = txConn !== null && sc.tx !== null && sc.tx.conn === txConn;
      const world = inTx && sc.tx !== null ? overlay(sc.committed, sc.tx.own) : sc.committed;
      for (const b of step(world, call, win, maybeLocked)) {
        allowed.push(JSON.stringify(b.expect));
        if (!meets(b.expect, a)) continue;
        const w = b.next(a);
        if (inTx && sc.tx !== null) {
          const own =
            id !== undefined && w.ops[id] !== world.ops[id] ? { ...sc.tx.own, [id]: w.ops[id] ?? null } : sc.tx.own;
          const touched = id !== undefined ? [...new Set([...sc.tx.touched, id])] : sc.tx.touched;
          next.push({ committed: sc.committed, tx: { ...sc.tx, own, touched } });
        } else {
          next.push({ ...sc, committed: w });
        }
      }
    }
    if (next.length === 0) {
      throw new Error(
        `${call.kind} answered ${JSON.stringify(a)}\n  call: ${JSON.stringify(call)}\n  window: ${JSON.stringify(win)}\n  allowed: ${[...new Set(allowed)].join('\n           ')}\n  worlds: ${this.scenarios.map((s) => JSON.stringify(s)).join('\n          ')}`,
      );
    }
    this.scenarios = dedupe(next);
  }

  /** Nothing of another operation, tenant or principal in any answer; nothing at all in a refusal. */
  private checkDisclosure(call: Call, a: Answer): void {
    if (!('id' in call)) return;
    const own = this.ops.find((d) => d.id === call.id)?.marker ?? '?';
    for (const field of [a.result, a.error]) {
      if (field === null || field === undefined) continue;
      const foreign = this.ops.some((d) => d.marker !== own && field.includes(d.marker));
      if (
        foreign ||
        (!field.startsWith(own) && !field.includes('binding_revoked') && !field.includes('attempts_exhausted'))
      ) {
        this.violate('disclosure', `${call.kind} on ${call.id} disclosed ${field}`);
      }
    }
    const silent =
      a.outcome === 'conflict' || a.outcome === 'refused' || (a.outcome === 'fenced' && a.reason === 'invalid_token');
    if (silent && (a.status != null || a.result != null || a.error != null || a.attempt != null)) {
      this.violate('disclosure', `${call.kind} answered ${a.outcome} but disclosed state: ${JSON.stringify(a)}`);
    }
  }

  /** The committed state in the database must be one the model allows; global invariants. */
  private async checkDatabase(): Promise<void> {
    const tenants = this.ops.map((d) => d.tenant);
    const { rows } = await this.c.observer.query<{
      tenant: string;
      key: string;
      status: Status;
      attempt: number;
      max_attempts: number;
      settled_attempt: number | null;
      result: string | null;
      dead_letter_reason: string | null;
      lease_us: string | null;
      attempts: number;
      settled: number;
      audited: Status | null;
      now_us: string;
    }>(
      `select o.tenant, o.key, o.status::text as status, o.attempt, o.max_attempts, o.settled_attempt, o.result::text as result,
              o.dead_letter_reason, ${usOf('o.lease_expires_at')} as lease_us,
              (select count(*)::int from settle.attempts a where a.tenant = o.tenant and a.key = o.key) as attempts,
              (select count(*)::int from settle.attempts a where a.tenant = o.tenant and a.key = o.key and a.settled) as settled,
              (select l.status_after::text from settle.audit_log l
                where l.tenant = o.tenant and l.key = o.key and l.status_before is distinct from l.status_after
                order by l.seq desc, l.audit_id desc limit 1) as audited, ${NOW}
         from settle.operations o where o.tenant = any($1::text[])`,
      [tenants],
    );
    const db = new Map(rows.map((r) => [`${r.tenant}/${r.key}`, r]));
    for (const r of rows) {
      if (r.settled > 1) this.violate('single-settlement', `${r.tenant}/${r.key} has ${r.settled} settled attempts`);
      // Every move of the status is in the operation's history: its last move ends where the
      // status is. (A row that moved nothing may be numbered beside a move it raced: not these.)
      if (r.audited !== r.status)
        this.violate('audit', `${r.tenant}/${r.key} is ${r.status}; its audit trail's last move is to ${r.audited}`);
      this.ledger.onState(
        this,
        `${r.tenant}/${r.key}`,
        r.status,
        r.dead_letter_reason,
        markerOf(r.result),
        r.settled_attempt,
      );
    }
    // A purged key's history ended with it: its next reservation (an acquired first claim, or
    // one a refused claim left converted) starts a new one.
    for (const d of this.ops) if (!db.has(d.id)) this.ledger.forget(d.id);
    const consistent = this.scenarios.filter((sc) => {
      for (const d of this.ops) {
        const m = sc.committed.ops[d.id];
        const r = db.get(d.id);
        if (m === undefined || r === undefined) {
          if (m !== r) return false;
          continue;
        }
        if (r.attempt !== m.attempts.length || r.attempts !== m.attempts.length) return false;
        if (r.settled_attempt !== m.settledAttempt || markerOf(r.result) !== m.result) return false;
        if (m.revoked !== null) {
          if ((m.status === 'completed') !== (r.status === 'completed')) return false;
          continue;
        }
        if (
          r.status !== m.status ||
          r.max_attempts !== m.maxAttempts ||
          (r.dead_letter_reason ?? null) !== m.deadLetter
        )
          return false;
        if (us(r.lease_us) !== (m.lease?.expiresAt ?? null)) return false;
      }
      return true;
    });
    if (consistent.length === 0) {
      this.violate(
        'state',
        `the database holds ${JSON.stringify(rows)}\n  the model allows: ${this.scenarios.map((s) => JSON.stringify(s.committed)).join('\n                    ')}`,
      );
    }
    this.scenarios = consistent;
  }

  /** The latest database clock reading (microseconds). */
  get clockUs(): number {
    return this.clock;
  }

  /** Called by the ledger. */
  fail(kind: string, detail: string): never {
    return this.violate(kind, detail);
  }
}

/**
 * Global invariants kept apart from the model, from the committed answers and stored states:
 * never two valid leases at once; `failed` never while an attempt may have taken effect;
 * `unknown` and `conflict` never lowered (redrive re-opens only a clean failure); the result and
 * the settling attempt never change once seen.
 */
class Ledger {
  private readonly byId = new Map<
    string,
    {
      leases: Map<number, number>;
      effect: Set<number>;
      failedAttempts: Set<number>;
      doubt: boolean;
      rank: number;
      failedSeen: boolean;
      result: string | null;
      settled: number | null;
    }
  >();
  private txEffects: (() => void)[] = [];
  /** Leases the open transaction released (`id#attempt`): gone for its own later calls. */
  private txReleased = new Set<string>();

  private of(id: string) {
    let e = this.byId.get(id);
    if (e === undefined) {
      e = {
        leases: new Map(),
        effect: new Set(),
        failedAttempts: new Set(),
        doubt: false,
        rank: 0,
        failedSeen: false,
        result: null,
        settled: null,
      };
      this.byId.set(id, e);
    }
    return e;
  }

  endTx(commit: boolean): void {
    if (commit) for (const f of this.txEffects) f();
    this.txEffects = [];
    this.txReleased.clear();
  }

  forget(id: string): void {
    this.byId.delete(id);
  }

  lapsed(id: string, e: number): void {
    const led = this.of(id);
    for (const a of led.leases.keys()) led.leases.set(a, Math.min(led.leases.get(a) ?? e, e));
  }

  redriven(id: string, status: string | null): void {
    const led = this.of(id);
    if (status === 'pending') {
      led.rank = 1;
      led.failedSeen = false;
    }
  }

  /**
   * A failed resolution is the operator's verified assertion that no attempt took effect, valid
   * for the attempts its evidence saw: a later attempt that may have taken effect must not be
   * judged by it.
   */
  resolved(run: ModelRun, id: string, status: string | null, expectedAttempt: number): void {
    if (status !== 'failed') return;
    const led = this.of(id);
    const later = [...led.effect].filter((a) => a > expectedAttempt && !led.failedAttempts.has(a));
    if (later.length > 0) {
      run.fail(
        'false-failed',
        `${id}: a failed resolution of the evidence of attempt ${expectedAttempt} judged attempt ${later.join(', ')}, which may have taken effect`,
      );
    }
    led.failedSeen = true;
  }

  onAnswer(run: ModelRun, call: Call, a: Answer, committed: boolean, txConn: number | null = null): void {
    void txConn;
    if (!('id' in call)) return;
    const id = call.id;
    const led = this.of(id);
    const later = (f: () => void): void => {
      if (committed) f();
      else this.txEffects.push(f);
    };
    if (
      (a.outcome === 'acquired' || a.outcome === 'extended') &&
      a.leaseExpiresAt != null &&
      a.leaseExpiresAt <= run.clockUs
    ) {
      run.fail(
        'lapsed-lease',
        `${id}: ${call.kind} answered ${a.outcome} with a lease that ended at ${a.leaseExpiresAt}, before its answer arrived (${run.clockUs})`,
      );
    }
    if (call.kind === 'claim' && a.outcome === 'acquired' && a.attempt != null && a.leaseExpiresAt != null) {
      const attempt = a.attempt;
      const e = a.leaseExpiresAt;
      if (attempt === 1) later(() => this.byId.delete(id));
      // Never two valid leases: every other attempt's lease told to its holder has lapsed by now.
      for (const [other, told] of attempt === 1 ? [] : led.leases) {
        if (other !== attempt && told > run.clockUs && !this.txReleased.has(`${id}#${other}`)) {
          run.fail(
            'two-leases',
            `${id}: attempt ${attempt} acquired while attempt ${other} holds a lease told to end at ${told} (now <= ${run.clockUs})`,
          );
        }
      }
      later(() => {
        const l = this.of(id);
        l.leases.set(attempt, e);
        l.effect.add(attempt);
      });
    }
    if (call.kind === 'heartbeat' && a.outcome === 'extended' && a.leaseExpiresAt != null) {
      const e = a.leaseExpiresAt;
      later(() => this.of(id).leases.set(call.attempt, e));
    }
    const released =
      a.outcome === 'recorded' ||
      a.outcome === 'settled' ||
      a.outcome === 'conflict' ||
      (a.outcome === 'fenced' && a.reason !== 'invalid_token');
    if ('attempt' in call && released) {
      if (!committed) this.txReleased.add(`${id}#${call.attempt}`);
      later(() => this.of(id).leases.delete(call.attempt));
    }
    if (call.kind === 'fail' && (a.outcome === 'recorded' || (a.outcome === 'settled' && a.status === 'failed'))) {
      later(() => this.of(id).failedAttempts.add(call.attempt));
    }
    if (
      (call.kind === 'report_unknown' && a.outcome === 'recorded') ||
      (call.kind === 'complete' && a.outcome === 'conflict')
    ) {
      later(() => {
        this.of(id).doubt = true;
      });
    }
    if (a.status === 'completed') later(() => this.of(id).leases.clear());
    // A plain read inside the open transaction reports the committed state of its time: only
    // answers that changed the record count at commit (the stored state is read after each step).
    const changes = ['acquired', 'settled', 'recorded', 'conflict', 'already_settled', 'extended'].includes(a.outcome);
    if (a.status != null && (committed || changes)) {
      const status = a.status as Status;
      later(() =>
        this.onState(
          run,
          id,
          status,
          a.deadLetterReason ?? null,
          status === 'completed' ? (a.result ?? null) : null,
          a.settledAttempt ?? null,
        ),
      );
    }
  }

  onState(
    run: ModelRun,
    id: string,
    status: Status,
    deadLetter: string | null,
    result: string | null,
    settled: number | null,
  ): void {
    const led = this.of(id);
    const rank = RANK[status] ?? 0;
    if (rank === 2 || rank === 3) led.doubt = true;
    if (rank < led.rank && led.rank >= 2)
      run.fail('lowered', `${id}: status ${status} after rank ${led.rank} was seen`);
    led.rank = Math.max(led.rank, rank);
    if (status === 'failed' && !led.failedSeen) {
      led.failedSeen = true;
      const possible = led.doubt || [...led.effect].some((a) => !led.failedAttempts.has(a));
      if (possible)
        run.fail('false-failed', `${id}: failed (${deadLetter ?? 'final'}) while an attempt may have taken effect`);
    }
    if (status === 'completed' && result !== null) {
      if (led.result !== null && led.result !== result)
        run.fail('result-changed', `${id}: result ${led.result} became ${result}`);
      if (led.settled !== null && settled !== null && led.settled !== settled)
        run.fail('result-changed', `${id}: settled attempt ${led.settled} became ${settled}`);
      led.result = result;
      led.settled = settled ?? led.settled;
    }
  }
}

function normalizeRow(row: Record<string, unknown>): Answer & { fingerprint?: string } {
  const str = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
  return {
    outcome: String(row.outcome),
    reason: str(row.reason),
    status: str(row.status),
    attempt: (row.attempt as number | null | undefined) ?? null,
    result: markerOf(str(row.result)),
    settledAttempt: (row.settled_attempt as number | null | undefined) ?? null,
    error: errorOf(str(row.error)),
    deadLettered: (row.dead_lettered as boolean | null | undefined) ?? null,
    deadLetterReason: str(row.dead_letter_reason),
    conflictOn: (row.conflict_on as string[] | null | undefined) ?? null,
    leaseExpiresAt: us(str(row.lease_us)),
    leaseToken: str(row.lease_token),
    inFlight: (row.in_flight as boolean | null | undefined) ?? null,
    mayHaveTakenEffect: mayOf(str(row.error)),
    ...(row.fingerprint === undefined || row.fingerprint === null ? {} : { fingerprint: String(row.fingerprint) }),
  };
}

/** An error is compared as the driver's marker; the engine's own errors by their text. */
function errorOf(text: string | null): string | null {
  return markerOf(text);
}

function mayOf(text: string | null): boolean | null {
  if (text === null) return null;
  const v = JSON.parse(text) as { may_have_taken_effect?: unknown };
  return typeof v.may_have_taken_effect === 'boolean' ? v.may_have_taken_effect : null;
}

function dedupe(list: Scenario[]): Scenario[] {
  const seen = new Map<string, Scenario>();
  for (const s of list) seen.set(JSON.stringify(s), s);
  return [...seen.values()];
}
