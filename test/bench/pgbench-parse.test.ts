import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseLatencyLog, parsePgbenchOutput, percentile } from '../../bench/lib/pgbench-parse.js';

// Fixtures are real pgbench 15.18 output captured on this project's machines (see fixtures/README.md).
const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures');
const fixture = (name: string): string => readFileSync(path.join(fixtures, name), 'utf8');

describe('parsePgbenchOutput', () => {
  it('reads the summary, failure details, retries and per-statement latencies of a cycle run', () => {
    const out = parsePgbenchOutput(fixture('cycle.out'));
    expect(out).toMatchObject({
      pgbenchVersion: '15.18 (Debian 15.18-0+deb12u1)',
      transactionType: 'bench/scripts/cycle.sql',
      queryMode: 'prepared',
      clients: 4,
      threads: 2,
      maxTries: 3,
      durationS: 3,
      processed: 3329,
      failed: 0,
      serializationFailures: 0,
      deadlockFailures: 0,
      retriedTransactions: 0,
      totalRetries: 0,
      latencyAverageMs: 3.606,
      latencyStddevMs: null,
      initialConnectionTimeMs: 7.759,
      tps: 1109.415569,
      aborted: false,
      errors: [],
    });
    expect(out.statements).toEqual([
      { latencyMs: 0.001, failures: 0, retries: 0, command: '\\set k random(100000000000, 999999999999)' },
      { latencyMs: 1.709, failures: 0, retries: 0, command: 'SELECT c.attempt, c.lease_token, c.fingerprint' },
      { latencyMs: 1.882, failures: 0, retries: 0, command: 'SELECT r.outcome AS complete_outcome' },
    ]);
  });

  it('reads every command of a script with \\if branches and explicit transactions', () => {
    const out = parsePgbenchOutput(fixture('stripe.out'));
    expect(out.tps).toBe(1570.304116);
    expect(out.statements.map((s) => s.command)).toEqual([
      '\\set k random(100000000000, 999999999999)',
      'BEGIN;',
      'SELECT coalesce((SELECT id FROM bench.stripe_keys',
      '\\if :key_id = 0',
      'INSERT INTO bench.stripe_keys (idempotency_key, locked_at, request_method, request_params, request_path,',
      '\\else',
      "SELECT (request_params = jsonb_build_object('amount', cast(:k as bigint) % 10000, 'currency', 'EUR'))::int AS params_match",
      'UPDATE bench.stripe_keys SET last_run_at = now(), locked_at = now() WHERE id = :key_id;',
      '\\endif',
      'COMMIT;',
      'BEGIN;',
      'UPDATE bench.stripe_keys',
      'COMMIT;',
    ]);
    expect(out.statements[9]?.latencyMs).toBe(0.865);
  });

  it('reads failure kinds, retries, stddev and per-statement failures of a contended serializable run', () => {
    const out = parsePgbenchOutput(fixture('serialization-failures.out'));
    expect(out).toMatchObject({
      maxTries: 2,
      processed: 971,
      failed: 2195,
      serializationFailures: 2195,
      deadlockFailures: 0,
      retriedTransactions: 2528,
      totalRetries: 2528,
      latencyAverageMs: 3.344,
      latencyStddevMs: 3.884,
      tps: 485.389331,
    });
    expect(out.statements[1]).toEqual({
      latencyMs: 0.366,
      failures: 2159,
      retries: 2497,
      command: "UPDATE bench.lww SET updated_at = now() WHERE key = 'contended';",
    });
  });

  it('without --max-tries > 1 there are no retry lines nor retry column', () => {
    const out = parsePgbenchOutput(fixture('replay-default-tries.out'));
    expect(out).toMatchObject({
      maxTries: 1,
      processed: 4213,
      failed: 0,
      serializationFailures: null,
      deadlockFailures: null,
      retriedTransactions: null,
      totalRetries: null,
      tps: 2111.990118,
    });
    expect(out.statements[1]).toEqual({
      latencyMs: 1.884,
      failures: 0,
      retries: null,
      command: 'SELECT c.settled_attempt',
    });
  });

  it('flags an aborted run and keeps pgbench errors', () => {
    const out = parsePgbenchOutput(fixture('aborted.out'), fixture('aborted.err'));
    expect(out.aborted).toBe(true);
    expect(out.tps).toBeNull();
    expect(out.processed).toBe(0);
    expect(out.errors).toEqual([
      'client 3 script 0 aborted in command 1 query 0: ERROR:  prepared statement "P_0" does not exist',
      'Run was aborted; the above results are incomplete.',
    ]);
  });

  it('reads a hotkey run summary', () => {
    const out = parsePgbenchOutput(fixture('hotkey.out'));
    expect(out.clients).toBe(16);
    expect(out.processed).toBe(4368);
    expect(out.statements.map((s) => s.latencyMs)).toEqual([0.001, 10.759, 0.002, 18.386, 0.001]);
  });
});

describe('parseLatencyLog', () => {
  it('reads per-transaction latencies in microseconds from a -l log', () => {
    const { latenciesUs, failed } = parseLatencyLog(fixture('hotkey-latency.txt'));
    expect(failed).toBe(0);
    expect(latenciesUs).toHaveLength(40);
    expect(latenciesUs.slice(0, 3)).toEqual([58715, 63229, 72870]);
  });

  it('counts failed transactions instead of reading a time', () => {
    expect(parseLatencyLog('0 1 failed 0 1796016748 253232 2\n1 1 1200 0 1796016748 253300 0\n')).toEqual({
      latenciesUs: [1200],
      failed: 1,
    });
  });
});

describe('percentile', () => {
  it('uses the nearest rank', () => {
    const values = Array.from({ length: 100 }, (_, i) => 100 - i);
    expect(percentile(values, 50)).toBe(50);
    expect(percentile(values, 99)).toBe(99);
    expect(percentile(values, 100)).toBe(100);
    expect(percentile([], 99)).toBeNull();
  });
});
