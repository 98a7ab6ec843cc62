// Batches: claimMany / completeMany (settle.claim_many / settle.complete_many, one round trip and
// one commit for many keys of one tenant) and runMany, run() for many keys at once: one claim
// call, one effect that receives every acquired item, one complete call, answered per item with
// run()'s own outcomes. Each key keeps every single-key guarantee (the engine decides each key by
// its single-key call); what a batch saves is round trips and commits.
import { sql } from 'slonik';
import { z } from 'zod';
import type { ClientCore } from './core.js';
import {
  BatchTooLargeError,
  BatchTooManyBytesError,
  EffectResultError,
  SettleInputError,
  SettleRowValidationError,
} from './errors.js';
import { findJsonProblem, jsonbTextLength } from './json.js';
import { LazyAbortController } from './lazy-abort.js';
import { toClaimOutcome, toObservation } from './outcomes.js';
import { claimRow, observationRow } from './rows.js';
import {
  checkSchema,
  fromObservation,
  isAmbiguous,
  keepLease,
  notAcquiredOutcome,
  settleFailure,
  typed,
  unknownOutcome,
  type LeaseKeeper,
} from './run.js';
import type { AttemptArgs } from './queries.js';
import * as s from './schemas.js';
import type {
  AcquiredItem,
  AttemptHandle,
  BatchItem,
  CallOptions,
  ClaimManyInput,
  ClaimOutcome,
  ItemReport,
  Json,
  Observation,
  RunInput,
  RunManyContext,
  RunManyInput,
  RunManyOptions,
  RunOutcome,
  SettleClient,
} from './types.js';

export type {
  AcquiredItem,
  BatchItem,
  ClaimManyInput,
  IdempotentManyOptions,
  ItemReport,
  RunManyContext,
  RunManyInput,
  RunManyOptions,
} from './types.js';

const claimManyRow = z.intersection(z.object({ ordinal: z.number().int(), key: z.string() }), claimRow);
const completeManyRow = z.intersection(z.object({ ordinal: z.number().int(), key: z.string() }), observationRow);

const claimManyQuery = (a: {
  tenant: string;
  keys: readonly string[];
  requests: readonly string[];
  principal: string;
  scopes: readonly string[];
  generation: bigint;
  leaseMs: number;
  worker: string | null;
  maxAttempts: number;
  rerunAfterUnknown: boolean;
}) => sql.type(claimManyRow)`
  select * from settle.claim_many(
    tenant => ${a.tenant}, keys => ${sql.array(a.keys, 'text')}, requests => ${sql.array(a.requests, 'jsonb')},
    principal => ${a.principal}, scopes => ${sql.array(a.scopes, 'text')}, binding_generation => ${a.generation.toString()}::bigint,
    lease => make_interval(secs => ${a.leaseMs}::float8 / 1000), worker => ${a.worker}::text,
    max_attempts => ${a.maxAttempts}::integer, rerun_after_unknown => ${a.rerunAfterUnknown}::boolean)`;

const completeManyQuery = (handles: readonly AttemptArgs[], results: readonly string[]) => {
  const first = handles[0] as AttemptArgs;
  return sql.type(completeManyRow)`
    select * from settle.complete_many(
      tenant => ${first.tenant}, keys => ${sql.array(
        handles.map((h) => h.key),
        'text',
      )},
      attempts => ${sql.array(
        handles.map((h) => h.attempt),
        'int4',
      )},
      lease_tokens => ${sql.array(
        handles.map((h) => h.leaseToken),
        'uuid',
      )},
      fingerprints => ${sql.array(
        handles.map((h) => h.fingerprint),
        'text',
      )},
      principal => ${first.binding.principal}, scopes => ${sql.array(first.binding.scopes, 'text')},
      binding_generation => ${first.binding.generation.toString()}::bigint, results => ${sql.array(results, 'jsonb')})`;
};

function checkBatchSize(count: number): void {
  if (count > s.LIMITS.maxBatchKeys) {
    throw new BatchTooLargeError(`a batch holds at most ${s.LIMITS.maxBatchKeys} keys (got ${count})`, {
      code: 'SE060',
      detail: { max_keys: s.LIMITS.maxBatchKeys, keys: count },
      hint: 'Split the keys into batches of at most LIMITS.maxBatchKeys.',
    });
  }
}

/** SE064, before a round trip: `field`'s values hold more than LIMITS.maxBatchBytes of JSON text together. */
function checkBatchBytes(field: 'requests' | 'results', values: readonly Json[]): void {
  const bytes = values.reduce<number>((sum, value) => sum + jsonbTextLength(value), 0);
  if (bytes > s.LIMITS.maxBatchBytes) {
    throw new BatchTooManyBytesError(
      `a batch's ${field} hold at most ${s.LIMITS.maxBatchBytes} bytes of JSON text together (got ${bytes})`,
      {
        code: 'SE064',
        detail: { field, max_bytes: s.LIMITS.maxBatchBytes, bytes },
        hint: `Split the keys into smaller batches: each call's ${field} at most LIMITS.maxBatchBytes together.`,
      },
    );
  }
}

/**
 * `items` in consecutive runs whose values (`valueOf`) hold at most LIMITS.maxBatchBytes of JSON
 * text together (an item larger than that alone is a run of its own: each value is at most
 * LIMITS.resultBytes, far below it).
 */
function chunksByBytes<I>(items: readonly I[], valueOf: (item: I) => Json): I[][] {
  const chunks: I[][] = [];
  let bytes = 0;
  for (const item of items) {
    const size = jsonbTextLength(valueOf(item));
    const last = chunks.at(-1);
    if (last === undefined || bytes + size > s.LIMITS.maxBatchBytes) {
      chunks.push([item]);
      bytes = size;
    } else {
      last.push(item);
      bytes += size;
    }
  }
  return chunks;
}

/** The input error of item `index`, its paths placed under items[index] and its ordinal in `detail`. */
function itemError(error: unknown, index: number): unknown {
  if (!(error instanceof SettleInputError)) return error;
  const ErrorClass = error.constructor as typeof SettleInputError;
  return new ErrorClass(`items[${index}]: ${error.message}`, {
    code: error.code,
    sqlstate: error.sqlstate,
    detail: { ...error.detail, ordinal: index + 1 },
    hint: error.hint,
    issues: error.issues.map((issue) => ({ ...issue, path: ['items', index, ...issue.path] })),
    cause: error,
  });
}

/**
 * settle.claim_many: claim every item in one round trip; one ClaimOutcome per item, in input
 * order (exactly what claim() answers for that key). No items: no call, no outcomes.
 */
export async function claimMany(
  core: ClientCore,
  issue: (handle: AttemptHandle) => void,
  input: ClaimManyInput,
  options?: CallOptions,
): Promise<ClaimOutcome[]> {
  if (input.items.length === 0) return [];
  checkBatchSize(input.items.length);
  const { items, ...shared } = input;
  const parsed = items.map((item, index) => {
    try {
      return s.parseClaimInput({ ...shared, key: item.key, request: item.request });
    } catch (error) {
      throw itemError(error, index);
    }
  });
  checkBatchBytes(
    'requests',
    parsed.map((p) => p.request),
  );
  const first = parsed[0] as (typeof parsed)[number];
  const rows = await core.rows(
    'claimMany',
    claimManyQuery({
      tenant: first.tenant,
      keys: parsed.map((p) => p.key),
      requests: parsed.map((p) => JSON.stringify(p.request)),
      principal: first.binding.principal,
      scopes: first.binding.scopes,
      generation: first.binding.generation,
      leaseMs: first.leaseMs,
      worker: first.worker ?? null,
      maxAttempts: first.maxAttempts,
      rerunAfterUnknown: first.rerunAfterUnknown ?? true,
    }),
    options,
    first.tenant,
  );
  if (rows.length !== parsed.length || rows.some((row, i) => row.ordinal !== i + 1 || row.key !== parsed[i]?.key)) {
    throw new SettleRowValidationError(
      `claimMany: ${rows.length} rows for ${parsed.length} items, or not in item order`,
      [],
    );
  }
  return rows.map((row, i) => {
    const p = parsed[i] as (typeof parsed)[number];
    const outcome = toClaimOutcome(row, p.tenant, p.key, p.binding, p.request);
    if (outcome.outcome === 'acquired') issue(outcome.attempt);
    return outcome;
  });
}

/**
 * settle.complete_many: complete every handle (all of one tenant and one binding) with its
 * result in one round trip; one Observation per handle, in order. No handles: no call.
 */
export async function completeMany(
  core: ClientCore,
  checkHandle: (handle: AttemptHandle) => AttemptArgs,
  handles: readonly AttemptHandle[],
  results: readonly Json[],
  options?: CallOptions,
): Promise<Observation[]> {
  if (handles.length === 0) return [];
  checkBatchSize(handles.length);
  if (results.length !== handles.length) {
    throw new SettleInputError(`completeMany: ${results.length} results for ${handles.length} handles`, {
      code: 'SE062',
    });
  }
  const checked = handles.map((handle, index) => {
    try {
      return checkHandle(handle);
    } catch (error) {
      throw itemError(error, index);
    }
  });
  const first = checked[0] as AttemptArgs;
  checked.forEach((h, index) => {
    if (
      h.tenant !== first.tenant ||
      h.binding.principal !== first.binding.principal ||
      h.binding.generation !== first.binding.generation ||
      h.binding.scopes.join('\u0000') !== first.binding.scopes.join('\u0000')
    ) {
      throw itemError(
        new SettleInputError('every handle of a batch must have the tenant and binding of the first', {
          code: 'SE008',
        }),
        index,
      );
    }
  });
  const parsedResults = results.map((result, index) => {
    try {
      return s.parseResult(result);
    } catch (error) {
      throw itemError(error, index);
    }
  });
  checkBatchBytes('results', parsedResults);
  const texts = parsedResults.map((result) => JSON.stringify(result));
  const rows = await core.rows('completeMany', completeManyQuery(checked, texts), options, first.tenant);
  if (rows.length !== checked.length || rows.some((row, i) => row.ordinal !== i + 1)) {
    throw new SettleRowValidationError(
      `completeMany: ${rows.length} rows for ${checked.length} handles, or not in order`,
      [],
    );
  }
  return rows.map((row) => toObservation(row));
}

/**
 * run() for many keys of one tenant at once. One claim call for every item; the effect gets the
 * acquired items together and reports one ItemReport per item (Promise.allSettled's shape); one
 * complete call stores every fulfilled item's result, and each rejected item is failed (or
 * reported unknown) as run() would. The answer is one RunOutcome per input item, in input order.
 * runMany does not wait for another worker's lease: such an item answers in_progress.
 */
export async function runMany<T>(
  client: SettleClient,
  claimBatch: (input: ClaimManyInput, options?: CallOptions) => Promise<ClaimOutcome[]>,
  completeBatch: (
    handles: readonly AttemptHandle[],
    results: readonly Json[],
    options?: CallOptions,
  ) => Promise<Observation[]>,
  input: RunManyInput,
  effect: (context: RunManyContext) => Promise<readonly ItemReport<T>[]>,
  options?: RunManyOptions<T>,
): Promise<RunOutcome<T>[]> {
  const call: CallOptions = options?.connection === undefined ? {} : { connection: options.connection };
  const leaseMs = input.leaseMs ?? 30_000;
  const schema = options?.result;
  const { items, classify, errorToJson, heartbeatIntervalMs, ...claimSettings } = input;
  const claimedAt = Date.now();
  const claimed = await claimBatch(
    { ...claimSettings, items, rerunAfterUnknown: options?.rerunAfterUnknown === true },
    call,
  );
  const outcomes: (RunOutcome<T> | undefined)[] = claimed.map((c, index): RunOutcome<T> | undefined => {
    if (c.outcome === 'acquired') return undefined;
    if (c.outcome === 'in_progress') {
      return {
        outcome: 'in_progress',
        attempt: c.attempt,
        leaseExpiresAt: c.leaseExpiresAt,
        retryAfterMs: c.retryAfterMs,
      };
    }
    return typed(
      notAcquiredOutcome(c, { tenant: input.tenant, key: (items[index] as BatchItem).key }) as RunOutcome<Json>,
      schema,
    );
  });
  const acquired: AcquiredItem[] = claimed.flatMap((c, index): AcquiredItem[] =>
    c.outcome === 'acquired'
      ? [
          {
            index,
            key: c.attempt.key,
            request: (items[index] as BatchItem).request,
            attempt: c.attempt,
            earlier: {
              count: c.attempt.attempt - 1,
              reportedUnknown: c.status === 'unknown',
              mayHaveTakenEffect: c.attempt.attempt > 1,
            },
          },
        ]
      : [],
  );
  if (acquired.length === 0) return outcomes as RunOutcome<T>[];

  const controller = new LazyAbortController();
  const onCallerAbort = (): void => controller.abort(options?.signal?.reason);
  options?.signal?.addEventListener('abort', onCallerAbort, { once: true });
  const keepers: LeaseKeeper[] = acquired.map((item) =>
    keepLease(client, item.attempt, {
      leaseMs,
      intervalMs: heartbeatIntervalMs ?? Math.max(1, Math.floor(leaseMs / 3)),
      localDeadline: claimedAt + leaseMs,
      controller,
      call,
    }),
  );
  const stop = async (): Promise<void> => {
    options?.signal?.removeEventListener('abort', onCallerAbort);
    await Promise.all(keepers.map((k) => k.stop()));
  };
  const context: RunManyContext = {
    items: acquired,
    get signal() {
      return controller.signal;
    },
    async heartbeat() {
      await Promise.all(keepers.map((k) => k.beatNow()));
    },
  };
  const runInput: RunInput = {
    ...input,
    key: '',
    request: null,
    ...(classify === undefined ? {} : { classify }),
    ...(errorToJson === undefined ? {} : { errorToJson }),
  };

  let reports: readonly ItemReport<T>[];
  try {
    reports = await effect(context);
    if (!Array.isArray(reports) || reports.length !== acquired.length) {
      throw new Error(
        `runMany: the effect reported ${Array.isArray(reports) ? reports.length : 'no array of'} items for ${acquired.length} acquired`,
      );
    }
  } catch (error) {
    // The effect as a whole threw: every item is settled as run() settles a thrown effect.
    await stop();
    const failed = await Promise.all(
      acquired.map((item) => settleFailure(client, item.attempt, error, runInput, call, schema)),
    );
    acquired.forEach((item, i) => (outcomes[item.index] = failed[i]));
    return outcomes as RunOutcome<T>[];
  }
  await stop();

  // Fulfilled items with a storable result are completed in one call; the others one by one.
  const toComplete: { item: AcquiredItem; result: Json }[] = [];
  await Promise.all(
    acquired.map(async (item, i) => {
      const report = reports[i] as ItemReport<T>;
      if (report.status === 'rejected') {
        outcomes[item.index] = await settleFailure(client, item.attempt, report.reason, runInput, call, schema);
        return;
      }
      const stored = report.value === undefined ? null : report.value;
      const problem = findJsonProblem(stored);
      try {
        if (problem !== null)
          throw new EffectResultError(`result: ${problem.message}`, {
            code: 'EFFECT_RESULT',
            issues: [{ path: problem.path, message: problem.message }],
          });
        checkSchema(schema, stored, (message) => new EffectResultError(message, { code: 'EFFECT_RESULT' }));
        toComplete.push({ item, result: stored as Json });
      } catch (error) {
        // The effect ran but its result cannot be stored: recorded unknown, never re-run blindly.
        await client.reportUnknown(item.attempt, call).catch(() => {});
        outcomes[item.index] = {
          outcome: 'unknown',
          reason: 'effect_outcome_unknown',
          attempt: item.attempt.attempt,
          record: null,
          cause: error as Error,
        };
      }
    }),
  );
  // One complete call per run of results within LIMITS.maxBatchBytes (the effects already ran:
  // their results are never refused for their size together).
  toComplete.sort((a, b) => a.item.index - b.item.index);
  const chunks = chunksByBytes(toComplete, (c) => c.result);
  for (const [n, chunk] of chunks.entries()) {
    let observations: Observation[];
    try {
      observations = await completeBatch(
        chunk.map((c) => c.item.attempt),
        chunk.map((c) => c.result),
        call,
      );
    } catch (error) {
      const unsettled = chunks.slice(n).flat();
      if (!isAmbiguous(error)) {
        await Promise.all(unsettled.map((c) => client.reportUnknown(c.item.attempt, call).catch(() => {})));
        throw error;
      }
      const unknown = await Promise.all(
        unsettled.map((c) => unknownOutcome(client, c.item.attempt, error, call, { leaseMs, schema })),
      );
      unsettled.forEach((c, i) => (outcomes[c.item.index] = unknown[i]));
      return outcomes as RunOutcome<T>[];
    }
    const mapped = await Promise.all(
      chunk.map(async (c, i) =>
        typed(await fromObservation(client, c.item.attempt, observations[i] as Observation, call), schema),
      ),
    );
    chunk.forEach((c, i) => (outcomes[c.item.index] = mapped[i]));
  }
  return outcomes as RunOutcome<T>[];
}
