import { readFile } from 'node:fs/promises';
import type { DatabaseTransactionConnection } from 'slonik';
import { mapDatabaseError, OperationNotFoundError, SettleError } from '../../client/errors.js';
import {
  httpResultProblem,
  parseResolveInput,
  resolveOperation,
  storedResponseOf,
  type ResolveInput,
} from '../../client/reconcile.js';
import type { SettleClient } from '../../client/client.js';
import type { Json, OperationRecord, Status } from '../../client/types.js';
import { boolFlag, COMMON_HELP, stringFlag, withClient, type Command, type CommandInput } from '../command.js';
import { confirm } from '../confirm.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText, renderFields, renderTable } from '../output.js';
import { createProgress } from '../progress.js';
import { UsageError } from '../usage-error.js';
import { KEY_PREFIX_HELP, operationNotFound, storedKeyOf } from '../stored-key.js';
import { parseResolutionFile, type FileRow } from './resolution-file.js';

export const resolveCommand: Command = {
  name: 'resolve',
  summary: 'record the verified outcome of an unknown or conflict operation (one key, or a file)',
  help: `Usage: pg-settle resolve <tenant> <key> --expected-attempt N [--expected-status S]
                         (--completed (--result JSON | --http-status N --http-body @FILE|TEXT [--http-header 'Name: value']...)
                          | --failed --error JSON) --reason TEXT
                         [--evidence JSON] [--key-prefix PREFIX] [--dry-run] [--yes] [--database-url URL] [--json]
       pg-settle resolve --file PATH [--reason TEXT] [--key-prefix PREFIX] [--dry-run] [--yes] [--skip-refused] ...

Records what the downstream system says happened to an operation that lost its outcome (status
unknown or conflict, e.g. dead-lettered needs_reconciliation) with settle.resolve: who
(the login role), why (--reason, required) and the evidence are kept in its audit trail.
--completed: the effect happened, with the result the downstream reports (what replays answer).
--failed: an explicit assertion that no attempt took effect, with the error clients will read.
--expected-attempt (required): the attempt your evidence concerns, as you read it (pg-settle
inspect) when you checked the downstream. If a client retried since, the operation has a newer
attempt your check did not see, and the resolution is refused (SE053): read it again, check again.
A key of the HTTP Idempotency-Key middleware takes the HTTP response its retries replay
(--http-status, --http-body, --http-header), never a plain --result (docs/http.md).
Shows the operation and its attempts first, then asks (a terminal) or needs --yes (no terminal).
An operation already completed or failed is left alone (exit 0, "already final").

With --file, every row of a CSV (header: tenant,key,expected_attempt,outcome,result,error,reason,
evidence[,expected_status][,fingerprint]) or JSON file (an array of objects with those fields;
result, error and evidence are JSON, in CSV as JSON text) is checked first: any malformed row (a
missing expected_attempt included: it is never filled in at apply time) is reported with its line
and nothing is applied (exit 2). Then all rows are resolved in ONE transaction, with a progress
line on stderr: a row the engine refuses (SE050 pending or running, SE051 lease held, SE052
fingerprint, SE053 moved on since expected_attempt, SE013, not found) is reported and, unless
--skip-refused, nothing is committed (exit 1). The summary counts resolved, skipped (already
final) and refused rows.

  --completed          the downstream confirms the effect (needs --result; default: off)
  --failed             the downstream proves no effect happened (needs --error; default: off)
  --result JSON        the result to settle, e.g. '{"charge":"ch_1"}' (required with --completed)
  --error JSON         the error to record, e.g. '{"code":"declined"}' (required with --failed)
  --expected-attempt N the attempt the evidence concerns, as read with the operation (required)
  --expected-status S  the status read with it; another status is refused too (default: not compared)
  --http-status N      for a key of the HTTP middleware: the status its retries replay, 100-599 (with --completed)
  --http-body VALUE    the body they replay: @PATH reads a file, else the text itself (default: empty)
  --http-header TEXT   'Name: value' replayed with it, repeatable (default: content-type
                       application/json when the body is JSON, else none)
  --reason TEXT        why, and the ticket (required; with --file: for rows without a reason)
  --evidence JSON      what you checked, kept in the audit row (default: none)
  --file PATH          resolve every row of this CSV or JSON file instead of one <tenant> <key>
                       (default: none)
  --dry-run            show what would be resolved; change nothing (default: off)
  --yes                resolve without asking; required when stdin is not a terminal
  --skip-refused       with --file: commit the rows that resolved even if some were refused
                       (default: off, nothing is committed)
${KEY_PREFIX_HELP}; with --file, for every row

${COMMON_HELP}`,
  flags: {
    completed: { type: 'boolean' },
    failed: { type: 'boolean' },
    result: { type: 'string' },
    error: { type: 'string' },
    reason: { type: 'string' },
    evidence: { type: 'string' },
    'expected-attempt': { type: 'string' },
    'expected-status': { type: 'string' },
    'http-status': { type: 'string' },
    'http-body': { type: 'string' },
    'http-header': { type: 'string', multiple: true },
    file: { type: 'string' },
    'dry-run': { type: 'boolean' },
    yes: { type: 'boolean' },
    'skip-refused': { type: 'boolean' },
    'key-prefix': { type: 'string' },
  },
  positionals: ['tenant', 'key'],
  positionalsOptionalWith: 'file',
  async run(input) {
    if (stringFlag(input, 'file') !== undefined) return resolveFile(input);
    if (input.values['file'] === '') throw new UsageError('--file needs a path');
    return resolveOne(input);
  },
};

function jsonFlag(input: CommandInput, name: string): Json | undefined {
  const text = stringFlag(input, name);
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as Json;
  } catch (error) {
    throw new UsageError(`--${name} is not valid JSON: ${(error as Error).message}`);
  }
}

const STATUSES: readonly Status[] = ['pending', 'running', 'unknown', 'conflict', 'failed', 'completed'];

/** --expected-attempt (required) and --expected-status: the state the evidence was read in. */
function precondition(input: CommandInput): { expectedAttempt: number; expectedStatus?: Status } {
  const attempt = stringFlag(input, 'expected-attempt');
  if (attempt === undefined) {
    throw new UsageError(
      '--expected-attempt N is required: the attempt your evidence concerns, as you read it with the operation (pg-settle inspect) when you checked the downstream',
    );
  }
  if (!/^[1-9][0-9]{0,9}$/.test(attempt) || Number(attempt) > 2_147_483_647)
    throw new UsageError(`--expected-attempt must be a whole number >= 1 (got ${JSON.stringify(attempt)})`);
  const status = stringFlag(input, 'expected-status');
  if (status !== undefined && !(STATUSES as readonly string[]).includes(status)) {
    throw new UsageError(`--expected-status must be one of ${STATUSES.join(', ')} (got ${JSON.stringify(status)})`);
  }
  return { expectedAttempt: Number(attempt), ...(status === undefined ? {} : { expectedStatus: status as Status }) };
}

/** --http-status, --http-body, --http-header: the middleware's stored response, or undefined. */
async function httpResult(input: CommandInput): Promise<Json | undefined> {
  const statusText = stringFlag(input, 'http-status');
  const bodyText = stringFlag(input, 'http-body');
  const rawHeaders = input.values['http-header'] as unknown;
  const headerList = Array.isArray(rawHeaders)
    ? (rawHeaders as string[])
    : typeof rawHeaders === 'string'
      ? [rawHeaders]
      : [];
  if (statusText === undefined) {
    if (bodyText !== undefined || headerList.length > 0)
      throw new UsageError('--http-body and --http-header go with --http-status N');
    return undefined;
  }
  if (!/^[1-5][0-9][0-9]$/.test(statusText))
    throw new UsageError(`--http-status must be an HTTP status 100-599 (got ${JSON.stringify(statusText)})`);
  let body: Buffer = Buffer.alloc(0);
  if (bodyText !== undefined && bodyText.startsWith('@')) {
    try {
      body = await readFile(bodyText.slice(1));
    } catch (error) {
      throw new UsageError(`cannot read --http-body ${JSON.stringify(bodyText)}: ${(error as Error).message}`);
    }
  } else if (bodyText !== undefined) {
    body = Buffer.from(bodyText, 'utf8');
  }
  let headers: Record<string, string> | undefined;
  if (headerList.length > 0) {
    headers = {};
    for (const line of headerList) {
      const colon = line.indexOf(':');
      if (colon <= 0) throw new UsageError(`--http-header takes 'Name: value' (got ${JSON.stringify(line)})`);
      headers[line.slice(0, colon).trim()] = line.slice(colon + 1).trim();
    }
  } else if (body.length > 0 && isJsonText(body)) {
    headers = { 'content-type': 'application/json' };
  }
  try {
    return storedResponseOf({
      status: Number(statusText),
      body,
      ...(headers === undefined ? {} : { headers }),
    }) as unknown as Json;
  } catch (error) {
    throw new UsageError(`--http-*: ${(error as Error).message}`);
  }
}

function isJsonText(body: Buffer): boolean {
  const text = body.toString('utf8').trim();
  if (!text.startsWith('{') && !text.startsWith('[')) return false;
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

async function resolveOne(input: CommandInput): Promise<number> {
  for (const flag of ['skip-refused']) {
    if (input.values[flag] !== undefined) throw new UsageError(`--${flag} goes with --file`);
  }
  const [tenant = ''] = input.positionals;
  const key = storedKeyOf(input, input.positionals[1] ?? '');
  const completed = boolFlag(input, 'completed');
  const failed = boolFlag(input, 'failed');
  if (completed === failed)
    throw new UsageError('give exactly one of --completed (with --result or --http-status) or --failed (with --error)');
  const http = await httpResult(input);
  const plain = jsonFlag(input, 'result');
  const error = jsonFlag(input, 'error');
  if (http !== undefined && (failed || plain !== undefined))
    throw new UsageError('--http-status goes with --completed, instead of --result');
  const result = http ?? plain;
  if (completed && (result === undefined || error !== undefined))
    throw new UsageError('--completed takes --result JSON or --http-status N (and no --error)');
  if (failed && (error === undefined || result !== undefined))
    throw new UsageError('--failed takes --error JSON (and no --result)');
  const reason = stringFlag(input, 'reason');
  if (reason === undefined || reason.trim() === '')
    throw new UsageError('--reason TEXT is required: why, and the ticket');
  const evidence = jsonFlag(input, 'evidence');
  const expected = precondition(input);

  return withClient(input, async (client) => {
    const operation = await client.inspect({ tenant, key });
    if (operation === null) throw operationNotFound(tenant, key, input);
    const resolution = parseResolveInput({
      tenant,
      key,
      fingerprint: operation.fingerprint,
      reason,
      ...expected,
      ...(evidence === undefined ? {} : { evidence }),
      ...(completed ? { outcome: 'completed', result } : { outcome: 'failed', error }),
    });
    if (completed && result !== undefined) {
      const problem = httpResultProblem(operation.request, result);
      if (problem !== null) throw new UsageError(`refused: ${problem}`);
    }
    if (!input.json) await showOperation(client, operation);
    if (operation.status === 'completed' || operation.status === 'failed') {
      if (input.json)
        printJson({
          ok: true,
          command: 'resolve',
          outcome: 'already_final',
          status: operation.status,
          dryRun: boolFlag(input, 'dry-run'),
        });
      else printText(`\nalready final (${operation.status}): nothing to resolve`);
      return EXIT.ok;
    }
    const what =
      http !== undefined
        ? `completed with the HTTP response ${(http as { status: number }).status} its retries replay`
        : completed
          ? `completed with result ${JSON.stringify(result)}`
          : `failed with error ${JSON.stringify(error)} (asserting that no attempt took effect)`;
    const moved =
      operation.attempt !== expected.expectedAttempt ||
      (expected.expectedStatus !== undefined && operation.status !== expected.expectedStatus);
    if (boolFlag(input, 'dry-run')) {
      if (input.json) {
        printJson({
          ok: true,
          command: 'resolve',
          dryRun: true,
          wouldResolve: {
            tenant,
            key,
            from: operation.status,
            outcome: resolution.outcome,
            attempt: operation.attempt,
            expectedAttempt: expected.expectedAttempt,
            movedOn: moved,
          },
        });
      } else {
        printText(
          moved
            ? `\ndry run: would be refused (SE053): the operation is at attempt ${operation.attempt} (${operation.status}), your evidence concerns attempt ${expected.expectedAttempt}; nothing changed`
            : `\ndry run: would resolve ${tenant} / ${key} (${operation.status}) as ${what}; nothing changed`,
        );
      }
      return EXIT.ok;
    }
    const go = await confirm(
      `resolve ${tenant} / ${key} (${operation.status}, attempt ${expected.expectedAttempt}) as ${what}?`,
      { yes: boolFlag(input, 'yes'), command: 'resolve' },
    );
    if (!go) {
      if (input.json) printJson({ ok: false, command: 'resolve', aborted: true });
      else printText('aborted: nothing resolved');
      return EXIT.failure;
    }
    const answer = await resolveOperation(client, resolution);
    if (input.json) {
      printJson({ ok: true, command: 'resolve', ...answer });
    } else if (answer.outcome === 'resolved') {
      printText(
        `\nresolved: ${tenant} / ${key} ${answer.statusBefore} -> ${answer.status}${answer.settledAttempt === null ? '' : ` (settled by attempt ${answer.settledAttempt})`}`,
      );
    } else {
      printText(
        `\nalready final (${answer.status}${answer.matches ? ', as asserted' : ', NOT as asserted'}): nothing changed`,
      );
    }
    return EXIT.ok;
  });
}

async function showOperation(client: SettleClient, operation: OperationRecord): Promise<void> {
  printText(
    renderFields([
      ['tenant', operation.tenant],
      ['key', operation.key],
      ['status', operation.status],
      ['attempt', `${operation.attempt} of ${operation.maxAttempts}`],
      ['in flight', operation.inFlight],
      [
        'dead-lettered',
        operation.deadLetteredAt === null
          ? null
          : `${operation.deadLetteredAt.toISOString()} (${operation.deadLetterReason ?? 'no reason'})`,
      ],
      ['error', operation.error],
      ['request', operation.request],
      ['principal', operation.principal],
      ['created', operation.createdAt],
    ]),
  );
  const attempts = await client.attempts({ tenant: operation.tenant, key: operation.key });
  printText('\nattempts');
  printText(
    renderTable(
      ['attempt', 'worker', 'claimed', 'ended', 'end reason', 'observation', 'error'],
      attempts.map((a) => [a.attempt, a.worker, a.claimedAt, a.endedAt, a.endReason, a.observation, a.error]),
    ),
  );
}

type RowResult = { row: FileRow; result: 'resolved' | 'skipped' | 'refused'; detail: string };

async function resolveFile(input: CommandInput): Promise<number> {
  for (const flag of [
    'completed',
    'failed',
    'result',
    'error',
    'evidence',
    'expected-attempt',
    'expected-status',
    'http-status',
    'http-body',
    'http-header',
  ]) {
    if (input.values[flag] !== undefined)
      throw new UsageError(`--${flag} goes with one <tenant> <key>, not --file (put it in the file)`);
  }
  const path = stringFlag(input, 'file') ?? '';
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read --file ${JSON.stringify(path)}: ${(error as Error).message}`);
  }
  const parsed = parseResolutionFile(text, path, stringFlag(input, 'reason'));
  if (parsed.errors.length > 0) {
    if (input.json) printJson({ ok: false, command: 'resolve', file: path, applied: 0, errors: parsed.errors });
    else
      printText(
        `${path}: ${parsed.errors.length} bad row(s), nothing applied:\n${parsed.errors.map((e) => `  ${e}`).join('\n')}`,
      );
    return EXIT.usage;
  }
  // --key-prefix: every row's key is the client's; the engine stores it behind the prefix.
  const rows = parsed.rows.map((row) => ({ ...row, input: { ...row.input, key: storedKeyOf(input, row.input.key) } }));
  if (rows.length === 0) {
    if (input.json) printJson({ ok: true, command: 'resolve', file: path, resolved: 0, skipped: 0, refused: 0 });
    else printText(`${path}: no rows`);
    return EXIT.ok;
  }
  return withClient(input, async (client) => {
    if (boolFlag(input, 'dry-run')) {
      const counts = new Map<string, number>();
      for (const row of rows) {
        const op = await client.inspect({ tenant: row.input.tenant, key: row.input.key });
        const status = op === null ? 'not found' : op.status;
        counts.set(status, (counts.get(status) ?? 0) + 1);
      }
      const byStatus = Object.fromEntries(counts);
      if (input.json)
        printJson({ ok: true, command: 'resolve', file: path, dryRun: true, rows: rows.length, byStatus });
      else
        printText(
          `dry run: ${rows.length} rows; operations now: ${[...counts].map(([s, n]) => `${n} ${s}`).join(', ')}; nothing changed`,
        );
      return EXIT.ok;
    }
    const go = await confirm(`resolve the ${rows.length} operations of ${path}?`, {
      yes: boolFlag(input, 'yes'),
      command: 'resolve --file',
    });
    if (!go) {
      if (input.json) printJson({ ok: false, command: 'resolve', aborted: true });
      else printText('aborted: nothing resolved');
      return EXIT.failure;
    }
    const skipRefused = boolFlag(input, 'skip-refused');
    const progress = createProgress('resolve', { unit: 'operations' });
    const results: RowResult[] = [];
    const pool = await client.getPool();
    let committed = false;
    try {
      await pool.transaction(async (tx) => {
        for (const row of rows) {
          results.push(await resolveRow(client, tx, row));
          const refused = results.filter((r) => r.result === 'refused').length;
          progress.update(results.length, rows.length, refused === 0 ? undefined : `${refused} refused`);
        }
        if (!skipRefused && results.some((r) => r.result === 'refused')) throw new RollBack();
      });
      committed = true;
    } catch (error) {
      if (!(error instanceof RollBack)) throw mapDatabaseError(error);
    } finally {
      progress.finish();
    }
    const count = (what: RowResult['result']) => results.filter((r) => r.result === what).length;
    const refused = results.filter((r) => r.result === 'refused');
    const summary = { resolved: committed ? count('resolved') : 0, skipped: count('skipped'), refused: refused.length };
    if (input.json) {
      printJson({
        ok: committed && (refused.length === 0 || skipRefused),
        command: 'resolve',
        file: path,
        committed,
        ...summary,
        refusedRows: refused.map((r) => ({
          line: r.row.line,
          tenant: r.row.input.tenant,
          key: r.row.input.key,
          error: r.detail,
        })),
      });
    } else {
      for (const r of refused)
        printText(`  ${r.row.where}: ${r.row.input.tenant} / ${r.row.input.key}: refused: ${r.detail}`);
      printText(
        committed
          ? `resolved ${summary.resolved}, skipped ${summary.skipped} (already final), refused ${summary.refused}`
          : `nothing applied: ${refused.length} row(s) refused (fix or remove them, or pass --skip-refused); would have resolved ${count('resolved')}, skipped ${summary.skipped}`,
      );
    }
    return committed && refused.length === 0 ? EXIT.ok : EXIT.failure;
  });
}

class RollBack extends Error {}

async function resolveRow(client: SettleClient, tx: DatabaseTransactionConnection, row: FileRow): Promise<RowResult> {
  try {
    // A savepoint per row: a refused row is undone alone, the transaction goes on.
    return await tx.transaction(async (savepoint) => {
      let input: ResolveInput = row.input;
      // The fingerprint may be read now (it names the reservation, not the evidence); the
      // expected attempt never is: it comes from the file, as read when the downstream was checked.
      const op = await client.inspect({ tenant: row.input.tenant, key: row.input.key }, { connection: savepoint });
      if (op === null) throw new OperationNotFoundError('operation not found', { code: 'SE010', sqlstate: 'SE010' });
      if (row.input.fingerprint === '') input = { ...row.input, fingerprint: op.fingerprint };
      const problem = input.outcome === 'completed' ? httpResultProblem(op.request, input.result) : null;
      if (problem !== null) return { row, result: 'refused' as const, detail: `refused: ${problem}` };
      const answer = await resolveOperation(client, input, { connection: savepoint });
      return answer.outcome === 'resolved'
        ? { row, result: 'resolved' as const, detail: `${answer.statusBefore} -> ${answer.status}` }
        : { row, result: 'skipped' as const, detail: `already ${answer.status}` };
    });
  } catch (error) {
    const mapped = mapDatabaseError(error);
    if (!(mapped instanceof SettleError) || mapped.sqlstate === null || !/^(SE|42501)/.test(mapped.sqlstate))
      throw mapped;
    return { row, result: 'refused', detail: `${mapped.sqlstate} ${mapped.message}` };
  }
}
