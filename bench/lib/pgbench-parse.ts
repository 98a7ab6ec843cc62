/**
 * Typed view of what pgbench 15 prints on stdout (and, for an aborted run, stderr).
 * Line formats were captured from real runs (test/bench/fixtures/*.out).
 */

export interface PgbenchStatementLatency {
  /** Average latency of the command in milliseconds (`-r`). */
  readonly latencyMs: number;
  /** Failures in this command (printed with `-r` in pgbench 15). */
  readonly failures: number;
  /** Retries of this command; null when --max-tries is 1 (the column is absent). */
  readonly retries: number | null;
  /** First line of the command as pgbench prints it. */
  readonly command: string;
}

export interface PgbenchOutput {
  readonly pgbenchVersion: string | null;
  readonly transactionType: string | null;
  readonly queryMode: string | null;
  readonly clients: number | null;
  readonly threads: number | null;
  readonly maxTries: number | null;
  readonly durationS: number | null;
  readonly processed: number;
  readonly failed: number;
  /** Null when pgbench did not print the line (--failures-detailed not given). */
  readonly serializationFailures: number | null;
  readonly deadlockFailures: number | null;
  /** Null when --max-tries is 1 (pgbench prints no retry lines then). */
  readonly retriedTransactions: number | null;
  readonly totalRetries: number | null;
  readonly latencyAverageMs: number | null;
  /** Printed only with -P, -R or retries. */
  readonly latencyStddevMs: number | null;
  readonly initialConnectionTimeMs: number | null;
  /** tps without initial connection time; null when the run was aborted before the summary. */
  readonly tps: number | null;
  readonly statements: readonly PgbenchStatementLatency[];
  /** pgbench said "Run was aborted" (the numbers above are incomplete then). */
  readonly aborted: boolean;
  /** Lines starting with `pgbench: error:` (stderr), in order. */
  readonly errors: readonly string[];
}

const NUMBER = String.raw`(\d+(?:\.\d+)?)`;

function matchNumber(text: string, pattern: RegExp): number | null {
  const m = pattern.exec(text);
  return m?.[1] === undefined ? null : Number(m[1]);
}

function matchString(text: string, pattern: RegExp): string | null {
  const m = pattern.exec(text);
  return m?.[1] === undefined ? null : m[1].trim();
}

/** Parses pgbench's stdout (summary) and stderr (errors, abort notice). Never throws. */
export function parsePgbenchOutput(stdout: string, stderr = ''): PgbenchOutput {
  const errors = stderr
    .split('\n')
    .filter((line) => line.startsWith('pgbench: error:'))
    .map((line) => line.slice('pgbench: error:'.length).trim());
  return {
    pgbenchVersion: matchString(stdout, /^pgbench \((.+)\)$/m),
    transactionType: matchString(stdout, /^transaction type: (.+)$/m),
    queryMode: matchString(stdout, /^query mode: (.+)$/m),
    clients: matchNumber(stdout, /^number of clients: (\d+)$/m),
    threads: matchNumber(stdout, /^number of threads: (\d+)$/m),
    maxTries: matchNumber(stdout, /^maximum number of tries: (\d+)$/m),
    durationS: matchNumber(stdout, /^duration: (\d+) s$/m),
    processed: matchNumber(stdout, /^number of transactions actually processed: (\d+)/m) ?? 0,
    failed: matchNumber(stdout, /^number of failed transactions: (\d+)/m) ?? 0,
    serializationFailures: matchNumber(stdout, /^number of serialization failures: (\d+)/m),
    deadlockFailures: matchNumber(stdout, /^number of deadlock failures: (\d+)/m),
    retriedTransactions: matchNumber(stdout, /^number of transactions retried: (\d+)/m),
    totalRetries: matchNumber(stdout, /^total number of retries: (\d+)/m),
    latencyAverageMs: matchNumber(stdout, new RegExp(`^latency average = ${NUMBER} ms`, 'm')),
    latencyStddevMs: matchNumber(stdout, new RegExp(`^latency stddev = ${NUMBER} ms`, 'm')),
    initialConnectionTimeMs: matchNumber(stdout, new RegExp(`^initial connection time = ${NUMBER} ms`, 'm')),
    tps: matchNumber(stdout, new RegExp(`^tps = ${NUMBER} \\(without initial connection time\\)`, 'm')),
    statements: parseStatementLatencies(stdout),
    aborted: /Run was aborted/.test(stderr) || /Run was aborted/.test(stdout),
    errors,
  };
}

/**
 * The block after `statement latencies in milliseconds...` (`-r`): one line per command,
 * `latency failures [retries] command`. With several scripts only the first block is read.
 */
function parseStatementLatencies(stdout: string): PgbenchStatementLatency[] {
  const lines = stdout.split('\n');
  const header = lines.findIndex((line) => line.startsWith('statement latencies in milliseconds'));
  if (header < 0) return [];
  const withRetries = lines[header]?.includes('retries') ?? false;
  const row = withRetries
    ? new RegExp(String.raw`^\s+${NUMBER}\s+(\d+)\s+(\d+)\s{2}(.*)$`)
    : new RegExp(String.raw`^\s+${NUMBER}\s+(\d+)\s{2}(.*)$`);
  const statements: PgbenchStatementLatency[] = [];
  for (const line of lines.slice(header + 1)) {
    const m = row.exec(line);
    if (m === null) break;
    statements.push(
      withRetries
        ? { latencyMs: Number(m[1]), failures: Number(m[2]), retries: Number(m[3]), command: m[4] ?? '' }
        : { latencyMs: Number(m[1]), failures: Number(m[2]), retries: null, command: m[3] ?? '' },
    );
  }
  return statements;
}

/**
 * Per-transaction latencies in microseconds from a `-l` log (one file per thread). Line format:
 * `client_id transaction_no time_us script_no time_epoch time_us_part [schedule_lag] [retries]`;
 * a failed transaction logs `failed` or `serialization`/`deadlock` instead of the time.
 */
export function parseLatencyLog(text: string): { latenciesUs: number[]; failed: number } {
  const latenciesUs: number[] = [];
  let failed = 0;
  for (const line of text.split('\n')) {
    const fields = line.trim().split(/\s+/);
    if (fields.length < 6) continue;
    const time = fields[2] ?? '';
    if (/^\d+$/.test(time)) latenciesUs.push(Number(time));
    else failed++;
  }
  return { latenciesUs, failed };
}

/** Nearest-rank percentile (p in 0..100) of unsorted values; null for no values. */
export function percentile(values: readonly number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1] ?? null;
}
