import { ConnectionError, createPool, type DatabasePool, type QuerySqlToken } from 'slonik';
import type { z } from 'zod';
import { notMigratedError, OperationNotFoundError, SettleRowValidationError } from './errors.js';
import { settleInterceptors, settleTypeParsers, validateRow, wasValidated } from './interceptors.js';
import { unconfirmedCommit } from './notices.js';
import { toClaimOutcome, toHeartbeatOutcome, toLockedRead, toObservation } from './outcomes.js';
import * as q from './queries.js';
import type { AttemptArgs } from './queries.js';
import { resolveRetryPolicy, withRetry } from './retry.js';
import { createCitusRouter } from './citus-routing.js';
import { createSettleDriverFactory } from './pg-driver.js';
import { createPreparedStatementsInterceptor } from './prepared-statements.js';
import { createSessionResetInterceptor } from './session-reset.js';
import type { ClientCore } from './core.js';
import { makeIdempotent } from './idempotent.js';
import { makeIdempotentMany } from './idempotent-many.js';
import { claimMany, completeMany, runMany } from './run-many.js';
import { runEffect } from './run.js';
import * as s from './schemas.js';
import { consumeCitusFeed } from './citus-feed.js';
import { consumeFeed } from './feed.js';
import { createClientTelemetry, registerClientTelemetry } from './telemetry.js';
import { runInTransaction } from './transaction.js';
import type {
  AttemptHandle,
  CallOptions,
  ItemReport,
  Queryable,
  RunContext,
  RunInput,
  RunManyContext,
  RunManyInput,
  RunManyOptions,
  RunOptions,
  RunOutcome,
  SettleClient,
  SettleClientOptions,
  VoidToNull,
} from './types.js';

export type { SettleClient } from './types.js';

/** Creates a client over a new slonik pool (connectionString) or over your own pool. */
export function createSettleClient(options: SettleClientOptions): SettleClient {
  const ownsPool = !('pool' in options);
  let poolPromise: Promise<DatabasePool> | undefined;
  // The pool once created: each call uses it without awaiting poolPromise again.
  let pool: DatabasePool | undefined = 'pool' in options ? options.pool : undefined;
  // The client's own pools: the one of connectionString and, with citusRouting, one per node.
  const makePool = (
    connectionString: string,
    poolSize: number | undefined,
    preparedStatements: boolean | undefined,
    statementTimeoutMs: number | undefined,
  ): Promise<DatabasePool> =>
    createPool(connectionString, {
      maxPoolSize: poolSize ?? 10,
      typeParsers: settleTypeParsers(),
      // slonik's default reset (DISCARD ALL after every checkout) moves to the session-reset
      // interceptor, which skips it after the client's own single statements only and
      // keeps the prepared statements of the client's own statements.
      interceptors: [
        ...settleInterceptors(),
        createSessionResetInterceptor(),
        ...(preparedStatements === false ? [] : [createPreparedStatementsInterceptor()]),
      ],
      resetConnection: async () => {},
      // slonik's pg driver, except that a named statement is described once per connection
      // (src/client/pg-driver.ts); without prepared statements, slonik's own driver.
      ...(preparedStatements === false ? {} : { driverFactory: createSettleDriverFactory() }),
      // The client retries transient conflicts itself, with backoff and an onRetry hook.
      queryRetryLimit: 0,
      ...(statementTimeoutMs === undefined ? {} : { statementTimeout: statementTimeoutMs }),
    });
  // createPool is async: create it on first use so createSettleClient stays synchronous.
  const getPool = (): Promise<DatabasePool> =>
    (poolPromise ??=
      'pool' in options
        ? Promise.resolve(options.pool)
        : makePool(
            options.connectionString,
            options.poolSize,
            options.preparedStatements,
            options.statementTimeoutMs,
          ).then(
            (created) => (pool = created),
            (error: unknown) => {
              poolPromise = undefined; // a database that was down at startup may come back
              throw error;
            },
          ));
  const router =
    'connectionString' in options && options.citusRouting !== undefined
      ? createCitusRouter(options.citusRouting, getPool, (url) =>
          makePool(url, options.poolSize, options.preparedStatements, options.statementTimeoutMs),
        )
      : undefined;
  // The pool a keyed call goes to: the node holding the key (citusRouting), else the client's own.
  // A node that cannot be reached is reported and skipped for this call (the client's own
  // connection delegates it), and the map is read again.
  const routed = async <T>(key: string | undefined, use: (target: Queryable) => Promise<T>): Promise<T> => {
    if (router !== undefined && key !== undefined) {
      const unreachable = async (error: unknown): Promise<undefined> => {
        await router.unreachable(key, error);
        return undefined;
      };
      const nodePool = await router.poolFor(key).catch(unreachable);
      if (nodePool !== undefined) {
        try {
          return await use(nodePool);
        } catch (error) {
          // Only a connection that could not be made: the call was not sent, so sending it again
          // through the client's own connection cannot run it twice.
          if (!(error instanceof ConnectionError)) throw error;
          await unreachable(error);
        }
      }
    }
    return use(pool ?? (await getPool()));
  };

  const telemetry = createClientTelemetry(options.telemetry);
  const onRetry = options.onRetry;
  const core: ClientCore = {
    getPool,
    retry: resolveRetryPolicy(options.retry, (event) => {
      telemetry.retry(event);
      onRetry?.(event);
    }),
    rows(operation, query, callOptions = {}, tenant, key) {
      return telemetry.call(operation, tenant, async () => {
        const given: Queryable | undefined = callOptions.connection;
        const retryable = given === undefined || !('transactionDepth' in given);
        const raw = await withRetry(operation, core.retry, retryable, async () => {
          const result =
            given !== undefined
              ? await given.query(query)
              : router === undefined
                ? await (pool ?? (await getPool())).query(query)
                : await routed(key, (target) => target.query(query));
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

  const one = async <S extends z.ZodType>(
    operation: string,
    query: QuerySqlToken<S>,
    options?: CallOptions,
    tenant?: string,
    key?: string,
  ) => {
    const rows = await core.rows(operation, query, options, tenant, key);
    const row = rows[0];
    if (row === undefined || rows.length > 1) {
      throw new SettleRowValidationError(`${operation} returned ${rows.length} rows, expected 1`, []);
    }
    return row;
  };

  // A handle this client issued (claim's `acquired`, frozen so it cannot be edited afterwards) is
  // used as built; anything else (a copy, an edited or forged handle) is validated first.
  const issued = new WeakSet<AttemptHandle>();
  const attemptArgs = (handle: AttemptHandle): AttemptArgs =>
    issued.has(handle) ? handle : s.parseInput(s.handleSchema, handle);

  const client: SettleClient = {
    getPool,

    async claim(input, options) {
      const parsed = s.parseClaimInput(input);
      const row = await one('claim', q.claimQuery(parsed), options, parsed.tenant, parsed.key);
      const outcome = toClaimOutcome(row, parsed.tenant, parsed.key, parsed.binding, parsed.request);
      if (outcome.outcome === 'acquired') issued.add(freezeHandle(outcome.attempt));
      return outcome;
    },

    async heartbeat(handle, options = {}) {
      const args = attemptArgs(handle);
      const leaseMs = s.parseInput(s.leaseMsSchema, options.leaseMs ?? 30_000, ['leaseMs']);
      return toHeartbeatOutcome(
        await one('heartbeat', q.heartbeatQuery(args, leaseMs), options, args.tenant, args.key),
      );
    },

    async complete(handle, result, options) {
      const args = attemptArgs(handle);
      const value = s.parseResult(result);
      return toObservation(await one('complete', q.completeQuery(args, value), options, args.tenant, args.key));
    },

    async fail(handle, error, options = {}) {
      const args = attemptArgs(handle);
      const failure = s.parseInput(s.failureSchema, { error, retryable: options.retryable ?? true });
      return toObservation(
        await one('fail', q.failQuery(args, failure.error, failure.retryable), options, args.tenant, args.key),
      );
    },

    async reportUnknown(handle, options) {
      const args = attemptArgs(handle);
      return toObservation(await one('reportUnknown', q.reportUnknownQuery(args), options, args.tenant, args.key));
    },

    async get(input, options) {
      const parsed = s.parseInput(s.getInputSchema, input);
      return toLockedRead(await one('get', q.getQuery(parsed), options, parsed.tenant, parsed.key));
    },

    async inspect(ref, options) {
      const { tenant, key } = s.parseInput(s.refSchema, ref);
      const [record] = await core.rows('inspect', q.inspectQuery(tenant, key), options, tenant, key);
      return record ?? null;
    },

    run: <T>(input: RunInput, effect: (context: RunContext) => Promise<T>, options?: RunOptions<T>) =>
      telemetry.run('run', input.tenant, (timed) => runEffect(client, input, timed(effect), options)) as Promise<
        RunOutcome<VoidToNull<T>>
      >,
    idempotent: (fn, idempotentOptions) => makeIdempotent(client, fn, idempotentOptions),
    claimMany: (input, options) => claimMany(core, (handle) => issued.add(freezeHandle(handle)), input, options),
    completeMany: (handles, results, options) => completeMany(core, attemptArgs, handles, results, options),
    runMany: <T>(
      input: RunManyInput,
      effect: (context: RunManyContext) => Promise<readonly ItemReport<T>[]>,
      options?: RunManyOptions<T>,
    ) =>
      telemetry.runMany(input.tenant, Array.isArray(input.items) ? input.items.length : 0, (timed) =>
        runMany(client, client.claimMany, client.completeMany, input, timed(effect), options),
      ) as Promise<RunOutcome<VoidToNull<T>>[]>,
    idempotentMany: (fn, manyOptions) => makeIdempotentMany(client, fn, manyOptions),
    runInTransaction: (input, effect, options) =>
      telemetry.run('run_in_transaction', input.tenant, (timed) =>
        runInTransaction(client, core, input, timed(effect), options),
      ),

    async expireLeases(input = {}, options) {
      const batchSize = s.parseInput(s.batchSizeSchema, input.batchSize ?? 1000, ['batchSize']);
      return one('expireLeases', q.expireLeasesQuery(batchSize), options);
    },

    async redrive(input, options) {
      const parsed = s.parseInput(s.redriveInputSchema, input);
      const record = (await core.rows('redrive', q.redriveQuery(parsed), options, parsed.tenant, parsed.key))[0];
      if (record === undefined) {
        throw new OperationNotFoundError('operation not found', {
          code: 'SE010',
          detail: { tenant: parsed.tenant, key: parsed.key },
        });
      }
      return record;
    },

    async purge(input, options) {
      const parsed = s.parseInput(s.purgeInputSchema, input);
      return (await one('purge', q.purgeQuery(parsed.olderThanMs, parsed.batchSize), options)).purged;
    },

    stats: (options) => core.rows('stats', q.statsQuery(), options),
    metrics: (options) => one('metrics', q.metricsQuery(), options),

    async deadLetters(input = {}, options) {
      const limit = s.parseInput(s.limitSchema, input.limit ?? 100, ['limit']);
      return core.rows('deadLetters', q.deadLettersQuery(limit), options);
    },

    async attempts(ref, options) {
      const { tenant, key } = s.parseInput(s.refSchema, ref);
      return core.rows('attempts', q.attemptsQuery(tenant, key), options, tenant, key);
    },

    async auditLog(ref, options) {
      const { tenant, key } = s.parseInput(s.refSchema, ref);
      return core.rows('auditLog', q.auditLogQuery(tenant, key), options, tenant, key);
    },

    consume: (name, handler, consumeOptions) =>
      // On a Citus cluster (citusRouting) every node holding shards has its own feed.
      router !== undefined && 'connectionString' in options && options.citusRouting !== undefined
        ? consumeCitusFeed({ router, telemetry, nodes: options.citusRouting.nodes }, name, handler, consumeOptions)
        : consumeFeed(
            {
              getPool,
              telemetry,
              connectionString:
                'connectionString' in options ? options.connectionString : consumeOptions?.listenConnectionString,
            },
            name,
            handler,
            consumeOptions,
          ),

    async end() {
      await router?.end();
      if (ownsPool && poolPromise !== undefined) await (await poolPromise).end();
    },
  };
  registerClientTelemetry(client, telemetry);
  return client;
}

function freezeHandle(handle: AttemptHandle): AttemptHandle {
  Object.freeze(handle.binding.scopes);
  Object.freeze(handle.binding);
  return Object.freeze(handle);
}
