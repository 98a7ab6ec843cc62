import './polyfills.js';
import { createPool, type DatabasePool, type QuerySqlToken } from 'slonik';
import type { z } from 'zod';
import { notMigratedError, OperationNotFoundError, SettleRowValidationError } from './errors.js';
import { settleInterceptors, settleTypeParsers, validateRow, wasValidated } from './interceptors.js';
import { unconfirmedCommit } from './notices.js';
import { toClaimOutcome, toHeartbeatOutcome, toObservation } from './outcomes.js';
import * as q from './queries.js';
import { type ResolvedRetryPolicy, resolveRetryPolicy, withRetry } from './retry.js';
import { createPreparedStatementsInterceptor } from './prepared-statements.js';
import { createSessionResetInterceptor } from './session-reset.js';
import { runEffect, type RunInput, type RunOutcome, type RunContext, type RunOptions } from './run.js';
import * as s from './schemas.js';
import { createClientTelemetry, registerClientTelemetry } from './telemetry.js';
import {
  runInTransaction,
  type TransactionEffectContext,
  type TransactionOutcome,
  type TransactionRunInput,
} from './transaction.js';
import type {
  AttemptHandle,
  AttemptRecord,
  AuditRecord,
  CallOptions,
  ClaimInput,
  ClaimOutcome,
  DeadLetterRecord,
  ExpireResult,
  HeartbeatOutcome,
  Json,
  Observation,
  OperationRecord,
  OperationRef,
  Queryable,
  RedriveInput,
  SettleClientOptions,
  TenantStats,
} from './types.js';

export interface SettleClient {
  /** The slonik pool the client runs on (yours, or the one it created on first use). */
  getPool(): Promise<DatabasePool>;

  /** Reserve (tenant, key) on first call, or join it. Never throws for an outcome. */
  claim(input: ClaimInput, options?: CallOptions): Promise<ClaimOutcome>;
  /** Extend the lease of the attempt (default 30 s from now, by the database clock). */
  heartbeat(handle: AttemptHandle, options?: CallOptions & { readonly leaseMs?: number }): Promise<HeartbeatOutcome>;
  /** This attempt's effect committed with `result`: the binding-gated success merge. */
  complete(handle: AttemptHandle, result: Json, options?: CallOptions): Promise<Observation>;
  /** This attempt's effect definitely did not happen (retryable: default true). */
  fail(handle: AttemptHandle, error: Json, options?: CallOptions & { readonly retryable?: boolean }): Promise<Observation>;
  /** This attempt lost the response of its effect: unknown, never failure. */
  reportUnknown(handle: AttemptHandle, options?: CallOptions): Promise<Observation>;
  /** The canonical record, or null when the operation does not exist. */
  get(ref: OperationRef, options?: CallOptions): Promise<OperationRecord | null>;

  /** Run an effect exactly once per (tenant, key): claim, heartbeat, settle (see docs/client.md). */
  run<T extends Json>(input: RunInput, effect: (context: RunContext) => Promise<T>, options?: RunOptions): Promise<RunOutcome>;
  /** Claim, run your SQL and complete in one transaction: effect and settlement commit together. */
  runInTransaction<T extends Json>(
    input: TransactionRunInput,
    effect: (context: TransactionEffectContext) => Promise<T>,
    options?: RunOptions,
  ): Promise<TransactionOutcome>;

  /** Admin: end lapsed leases and dead-letter spent operations (settle_admin). */
  expireLeases(input?: { readonly batchSize?: number }, options?: CallOptions): Promise<ExpireResult>;
  /** Admin: re-open a dead-lettered operation (settle_admin). */
  redrive(input: RedriveInput, options?: CallOptions): Promise<OperationRecord>;
  /** Admin: delete terminal operations older than olderThanMs; returns how many (settle_admin). */
  purge(input: { readonly olderThanMs: number; readonly batchSize?: number }, options?: CallOptions): Promise<number>;
  /** Per-tenant counts (settle_readonly or settle_admin). */
  stats(options?: CallOptions): Promise<TenantStats[]>;
  /** Dead-lettered operations, oldest first (settle_readonly or settle_admin). */
  deadLetters(input?: { readonly limit?: number }, options?: CallOptions): Promise<DeadLetterRecord[]>;
  /** Every attempt of one operation (settle_readonly or settle_admin). */
  attempts(ref: OperationRef, options?: CallOptions): Promise<AttemptRecord[]>;
  /** The audit trail of one operation (settle_readonly or settle_admin). */
  auditLog(ref: OperationRef, options?: CallOptions): Promise<AuditRecord[]>;

  /** Ends the pool if the client created it; a pool you passed in stays open. */
  end(): Promise<void>;
}

/** Internals shared with run() and runInTransaction(). */
export interface ClientCore {
  getPool(): Promise<DatabasePool>;
  readonly retry: ResolvedRetryPolicy;
  /** Runs one settle call (with transparent retries); `tenant` is for opt-in telemetry only. */
  rows<S extends z.ZodType>(operation: string, query: QuerySqlToken<S>, options?: CallOptions, tenant?: string): Promise<z.output<S>[]>;
}

/** Creates a client over a new slonik pool (connectionString) or over your own pool. */
export function createSettleClient(options: SettleClientOptions): SettleClient {
  const ownsPool = !('pool' in options);
  let poolPromise: Promise<DatabasePool> | undefined;
  // createPool is async: create it on first use so createSettleClient stays synchronous.
  const getPool = (): Promise<DatabasePool> =>
    (poolPromise ??=
      'pool' in options
        ? Promise.resolve(options.pool)
        : createPool(options.connectionString, {
            maxPoolSize: options.poolSize ?? 10,
            typeParsers: settleTypeParsers(),
            // slonik's default reset (DISCARD ALL after every checkout) moves to the session-reset
            // interceptor, which skips it after the client's own single statements only and
            // keeps the prepared statements of the client's own statements.
            interceptors: [
              ...settleInterceptors(),
              createSessionResetInterceptor(),
              ...(options.preparedStatements === false ? [] : [createPreparedStatementsInterceptor()]),
            ],
            resetConnection: async () => {},
            // The client retries transient conflicts itself, with backoff and an onRetry hook.
            queryRetryLimit: 0,
            ...(options.statementTimeoutMs === undefined ? {} : { statementTimeout: options.statementTimeoutMs }),
          }).catch((error: unknown) => {
            poolPromise = undefined; // a database that was down at startup may come back
            throw error;
          }));

  const telemetry = createClientTelemetry(options.telemetry);
  const onRetry = options.onRetry;
  const core: ClientCore = {
    getPool,
    retry: resolveRetryPolicy(options.retry, (event) => {
      telemetry.retry(event);
      onRetry?.(event);
    }),
    rows(operation, query, callOptions = {}, tenant) {
      return telemetry.call(operation, tenant, async () => {
        const given: Queryable | undefined = callOptions.connection;
        const retryable = given === undefined || !('transactionDepth' in given);
        const raw = await withRetry(operation, core.retry, retryable, async () => {
          const result = await (given ?? (await getPool())).query(query);
          // Rows that come with a cancelled synchronous-replication wait are no acknowledgement.
          const unconfirmed = unconfirmedCommit(operation, result.notices);
          if (unconfirmed !== null) throw unconfirmed;
          return result.rows;
        }).catch((error: unknown) => {
          throw (error instanceof Error ? notMigratedError(error) : null) ?? error;
        });
        // Rows of a pool without the result-parser interceptor are validated here.
        const parsed = raw.map((row): unknown => (wasValidated(row) ? row : validateRow(query.parser, row, query.sql)));
        return parsed as z.output<typeof query.parser>[];
      });
    },
  };

  const one = async <S extends z.ZodType>(operation: string, query: QuerySqlToken<S>, options?: CallOptions, tenant?: string) => {
    const [row, ...rest] = await core.rows(operation, query, options, tenant);
    if (row === undefined || rest.length > 0) {
      throw new SettleRowValidationError(`${operation} returned ${rest.length + (row === undefined ? 0 : 1)} rows, expected 1`, []);
    }
    return row;
  };

  const attemptArgs = (handle: AttemptHandle) => s.parseInput(s.handleSchema, handle);

  const client: SettleClient = {
    getPool,

    async claim(input, options) {
      const parsed = s.parseInput(s.claimInputSchema, input);
      const row = await one('claim', q.claimQuery(parsed), options, parsed.tenant);
      return toClaimOutcome(row, parsed.tenant, parsed.key, parsed.binding);
    },

    async heartbeat(handle, options = {}) {
      const args = attemptArgs(handle);
      const leaseMs = s.parseInput(s.leaseMsSchema, options.leaseMs ?? 30_000, ['leaseMs']);
      return toHeartbeatOutcome(await one('heartbeat', q.heartbeatQuery(args, leaseMs), options, args.tenant));
    },

    async complete(handle, result, options) {
      const args = attemptArgs(handle);
      const value = s.parseInput(s.resultSchema, result, ['result']);
      return toObservation(await one('complete', q.completeQuery(args, value), options, args.tenant));
    },

    async fail(handle, error, options = {}) {
      const args = attemptArgs(handle);
      const failure = s.parseInput(s.failureSchema, { error, retryable: options.retryable ?? true });
      return toObservation(await one('fail', q.failQuery(args, failure.error, failure.retryable), options, args.tenant));
    },

    async reportUnknown(handle, options) {
      const args = attemptArgs(handle);
      return toObservation(await one('reportUnknown', q.reportUnknownQuery(args), options, args.tenant));
    },

    async get(ref, options) {
      const { tenant, key } = s.parseInput(s.refSchema, ref);
      const [record] = await core.rows('get', q.getQuery(tenant, key), options, tenant);
      return record ?? null;
    },

    run: (input, effect, options) => telemetry.run('run', input.tenant, (timed) => runEffect(client, input, timed(effect), options)),
    runInTransaction: (input, effect, options) =>
      telemetry.run('run_in_transaction', input.tenant, (timed) => runInTransaction(client, core, input, timed(effect), options)),

    async expireLeases(input = {}, options) {
      const batchSize = s.parseInput(s.batchSizeSchema, input.batchSize ?? 1000, ['batchSize']);
      return one('expireLeases', q.expireLeasesQuery(batchSize), options);
    },

    async redrive(input, options) {
      const parsed = s.parseInput(s.redriveInputSchema, input);
      const record = (await core.rows('redrive', q.redriveQuery(parsed), options, parsed.tenant))[0];
      if (record === undefined) {
        throw new OperationNotFoundError('operation not found', { code: 'SE010', detail: { tenant: parsed.tenant, key: parsed.key } });
      }
      return record;
    },

    async purge(input, options) {
      const parsed = s.parseInput(s.purgeInputSchema, input);
      return (await one('purge', q.purgeQuery(parsed.olderThanMs, parsed.batchSize), options)).purged;
    },

    stats: (options) => core.rows('stats', q.statsQuery(), options),

    async deadLetters(input = {}, options) {
      const limit = s.parseInput(s.limitSchema, input.limit ?? 100, ['limit']);
      return core.rows('deadLetters', q.deadLettersQuery(limit), options);
    },

    async attempts(ref, options) {
      const { tenant, key } = s.parseInput(s.refSchema, ref);
      return core.rows('attempts', q.attemptsQuery(tenant, key), options);
    },

    async auditLog(ref, options) {
      const { tenant, key } = s.parseInput(s.refSchema, ref);
      return core.rows('auditLog', q.auditLogQuery(tenant, key), options);
    },

    async end() {
      if (ownsPool && poolPromise !== undefined) await (await poolPromise).end();
    },
  };
  registerClientTelemetry(client, telemetry);
  return client;
}
