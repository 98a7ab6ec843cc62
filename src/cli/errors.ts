import { SettleConnectionError, SettleError, SettleInputError } from '../client/errors.js';
import { MigrationHistoryError } from '../db/migration-errors.js';
import { SimulatorConfigError } from '../simulator/config.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import { printJson } from './output.js';
import { MissingPackageError, UnknownFlagError, UsageError } from './usage-error.js';

/** A failure to reach or prepare the database (provisioning, bad URL, migration). */
export class DatabaseUnavailableError extends Error {
  override readonly name = 'DatabaseUnavailableError';
}

/**
 * An operator command was given no database: exit 2, with what to do. Only `simulate` starts a
 * database of its own; every other command would otherwise answer from an empty one.
 */
export class MissingDatabaseError extends UsageError {
  override readonly name: string = 'MissingDatabaseError';
  constructor() {
    super(
      'no database given: pass --database-url URL or set DATABASE_URL (only `simulate` starts a throwaway database; this command never does, so an empty answer is never a false all-clear)',
    );
  }
}

/** Refused by the engine or a command's own check (not found, invariant failure): exit 1. */
export class CommandFailedError extends Error {
  override readonly name = 'CommandFailedError';
}

const SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
]);

interface ErrorFields {
  readonly name: string;
  readonly message: string;
  readonly code: string | null;
  readonly sqlstate: string | null;
  readonly detail: unknown;
  readonly hint: string | null;
}

function fieldsOf(error: unknown): ErrorFields {
  if (error instanceof SettleError) {
    return {
      name: error.name,
      message: error.message,
      code: error.code,
      sqlstate: error.sqlstate,
      detail: error.detail,
      hint: error.hint,
    };
  }
  const e = (typeof error === 'object' && error !== null ? error : {}) as Record<string, unknown>;
  const code = typeof e.code === 'string' ? e.code : null;
  return {
    name: typeof e.name === 'string' ? e.name : 'Error',
    message: error instanceof Error ? error.message : String(error),
    code,
    sqlstate: code !== null && /^[0-9A-Z]{5}$/.test(code) ? code : null,
    detail: typeof e.detail === 'string' && e.detail !== '' ? e.detail : null,
    hint: typeof e.hint === 'string' && e.hint !== '' ? e.hint : null,
  };
}

/** The exit code for an error: by class and SQLSTATE, never by message text. */
export function exitCodeFor(error: unknown): ExitCode {
  if (error instanceof UsageError || error instanceof SimulatorConfigError) return EXIT.usage;
  if (error instanceof MigrationHistoryError) return EXIT.migrationHistory;
  if (error instanceof DatabaseUnavailableError || error instanceof SettleConnectionError) return EXIT.database;
  if (error instanceof CommandFailedError) return EXIT.failure;
  // Bad input caught by the client before any round trip (sqlstate null) is a usage error.
  if (error instanceof SettleInputError && error.sqlstate === null) return EXIT.usage;
  const { sqlstate, code } = fieldsOf(error);
  if (sqlstate !== null && sqlstate.startsWith('SE')) return EXIT.failure;
  if (sqlstate !== null) return EXIT.database;
  if (code !== null && SOCKET_CODES.has(code)) return EXIT.database;
  return EXIT.failure;
}

/** Prints an error (stderr, or the JSON document on stdout with --json) and returns its exit code. */
export function reportError(error: unknown, json: boolean, usage?: string): ExitCode {
  const exitCode = exitCodeFor(error);
  const fields = fieldsOf(error);
  if (json) {
    printJson({ ok: false, exitCode, error: fields });
  } else {
    const lines = [`pg-settle: ${fields.message}`];
    if (fields.sqlstate !== null) lines.push(`  sqlstate: ${fields.sqlstate} (${fields.name})`);
    if (fields.detail !== null)
      lines.push(`  detail:   ${typeof fields.detail === 'string' ? fields.detail : JSON.stringify(fields.detail)}`);
    if (fields.hint !== null) lines.push(`  hint:     ${fields.hint}`);
    process.stderr.write(`${lines.join('\n')}\n`);
  }
  if (
    exitCode === EXIT.usage &&
    usage !== undefined &&
    !(error instanceof MissingDatabaseError) &&
    !(error instanceof UnknownFlagError) &&
    !(error instanceof MissingPackageError)
  ) {
    process.stderr.write(`\n${usage}\n`);
  }
  return exitCode;
}
