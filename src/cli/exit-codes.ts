/**
 * Exit codes of the pg-settle CLI (also listed in docs/cli.md).
 */
export const EXIT = {
  /** The command did what was asked (simulate: every invariant holds). */
  ok: 0,
  /** An invariant failed (simulate), or the engine refused the operation (SE0xx, e.g. redrive of a live operation, not found). */
  failure: 1,
  /** Bad command line: unknown command or flag, missing or malformed argument. */
  usage: 2,
  /** The database could not be reached or used: connection refused, authentication, unknown database, provisioning or migration failure. */
  database: 3,
  /** migrate: the database's migration history does not match this version (an applied migration edited or replaced, or one from a newer version); nothing applied. */
  migrationHistory: 4,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];
