import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { withPgClient } from '../../src/db/with-pg-client.js';
import { BATCH_KEYS } from './batch.js';
import { BENCH_DIR, type RunDatabase } from './database.js';
import { measurePgbench, type ProcessedRuns } from './measure.js';
import type { ScenarioContext } from './scenarios.js';
import type { Check, RunResult } from './types.js';
import { check } from './verify.js';

/**
 * The lean prototype (issue 51's performance anchor, bench/sql/prototype.sql and
 * prototype-batch.sql, schema `p`): a deliberately small PL/pgSQL design of the engine's shape,
 * measured beside the engine in the same run. `proto` runs its claim + complete
 * (bench/scripts/proto-cycle.sql), `proto-batch` its set-based claim_many + complete_many of 100
 * keys (bench/scripts/proto-batch.sql); the ladder (bench/ladder/run.ts) runs each of its steps,
 * built on the same prototype, the same way. The schema is loaded into each run's fresh clone of
 * the bench template, so the engine's own runs never carry it.
 */

export const PROTOTYPE_SQL = ['prototype.sql', 'prototype-batch.sql'] as const;

export async function prototypeSql(): Promise<string> {
  const files = await Promise.all(PROTOTYPE_SQL.map((f) => readFile(path.join(BENCH_DIR, 'sql', f), 'utf8')));
  return files.join('\n');
}

/**
 * Every transaction settled its operations in schema `p` (tenant `bench`): `perTransaction`
 * operations completed per processed transaction, at most `perTransaction` per client and run
 * cut off (claimed, not completed), one attempt row per operation, and, when the step writes
 * the feed, one feed event per completed operation.
 */
export async function verifyPrototypeCycles(
  db: pg.Client,
  run: ProcessedRuns,
  perTransaction = 1,
): Promise<{ counters: Record<string, number>; checks: Check[] }> {
  const row = (
    await db.query<{ completed: string; unfinished: string; attempts: string; feed: boolean }>(
      `select (select count(*) from p.operations where tenant = 'bench' and status = 'completed')::text as completed,
              (select count(*) from p.operations where tenant = 'bench' and status <> 'completed')::text as unfinished,
              (select count(*) from p.attempts)::text as attempts,
              to_regclass('p.feed_events') is not null as feed`,
    )
  ).rows[0];
  const feed = row?.feed
    ? Number((await db.query<{ n: string }>('select count(*)::text as n from p.feed_events')).rows[0]?.n ?? 0)
    : null;
  const completed = Number(row?.completed ?? 0);
  const unfinished = Number(row?.unfinished ?? 0);
  const attempts = Number(row?.attempts ?? 0);
  const expected = run.processed * perTransaction;
  const cutOff = run.maxInFlight * perTransaction;
  const checks = [
    check(
      'every transaction completed its operations',
      completed >= expected && completed - expected <= cutOff,
      `${completed} completed for ${run.processed} transactions of ${perTransaction}`,
    ),
    check('at most one transaction in flight per client and run', unfinished <= cutOff, `${unfinished} unfinished`),
    check('one attempt per operation', attempts === completed + unfinished, `${attempts} attempts`),
  ];
  if (feed !== null) {
    checks.push(
      check('one feed event per settlement', feed === completed, `${feed} feed events, ${completed} completed`),
    );
  }
  return { counters: { completed, unfinished, attempts }, checks };
}

interface SchemaCycle {
  readonly label: string;
  /** The schema `p` to load into the run's database. */
  readonly sql: string;
  /** A script of bench/scripts, or an absolute path. */
  readonly script: string;
  /** Operations per transaction (a batch's keys). */
  readonly perTransaction?: number;
}

/** One measured run of a schema-`p` script on a fresh database; a batch is reported per key. */
export async function runSchemaCycle(
  ctx: ScenarioContext,
  cycle: SchemaCycle,
  clients: number,
  round: number,
): Promise<RunResult> {
  if (ctx.pgbench === undefined) throw new Error(`${cycle.label} needs pgbench`);
  const keys = cycle.perTransaction ?? 1;
  const db: RunDatabase = await ctx.server.createRunDatabase(`${cycle.label}_${clients}`);
  try {
    await withPgClient(db.url, (c) => c.query(cycle.sql));
    const perBatch = (length: ScenarioContext['opts']['length']): ScenarioContext['opts']['length'] =>
      keys > 1 && length.kind === 'transactions'
        ? { kind: 'transactions', perClient: Math.max(2, Math.ceil(length.perClient / 10)) }
        : length;
    const run = await measurePgbench({
      pgbench: ctx.pgbench,
      db,
      clients,
      threads: ctx.opts.threads,
      length: perBatch(ctx.opts.length),
      warmup: ctx.opts.warmup === null ? null : perBatch(ctx.opts.warmup),
      round,
      scenario: keys > 1 ? 'proto-batch' : 'proto',
      label: cycle.label,
      script: cycle.script,
      ...(keys > 1 ? { defines: { batch_keys: keys } } : {}),
      verify: (client, processed) => verifyPrototypeCycles(client, processed, keys),
    });
    return keys === 1
      ? run
      : {
          ...run,
          tps: run.tps * keys,
          walBytesPerOp: run.walBytesPerOp === null ? null : run.walBytesPerOp / keys,
          fpiPerOp: run.fpiPerOp === null ? null : run.fpiPerOp / keys,
          counters: { ...run.counters, batchesPerSecond: run.tps, keysPerCall: keys },
        };
  } finally {
    await db.drop();
  }
}

/** proto: the prototype's claim + complete on fresh keys. */
export async function runProtoCycle(ctx: ScenarioContext, clients: number, round: number): Promise<RunResult> {
  return runSchemaCycle(ctx, { label: 'proto', sql: await prototypeSql(), script: 'proto-cycle.sql' }, clients, round);
}

/** proto-batch: the prototype's claim_many + complete_many of BATCH_KEYS fresh keys, in settled keys per second. */
export async function runProtoBatch(ctx: ScenarioContext, clients: number, round: number): Promise<RunResult> {
  return runSchemaCycle(
    ctx,
    { label: 'proto-batch', sql: await prototypeSql(), script: 'proto-batch.sql', perTransaction: BATCH_KEYS },
    clients,
    round,
  );
}
