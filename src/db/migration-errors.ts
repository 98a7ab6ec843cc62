/**
 * A migration failed. postgres-migrations rethrows a plain Error that keeps only the message;
 * this one also carries the failing statement's database error as `cause` and its `code`
 * (SQLSTATE), `detail` and `hint`, so that mapDatabaseError turns e.g. SE030 (not a UTF8
 * database) into its class. `code` is undefined when no statement failed (a bad file name);
 * a history that does not match the files is a MigrationHistoryError.
 */
export class MigrationError extends Error {
  readonly code: string | undefined;
  readonly detail: string | undefined;
  readonly hint: string | undefined;

  constructor(message: string, databaseError: DatabaseErrorFields | undefined, cause: unknown) {
    super(message, { cause: databaseError ?? cause });
    this.name = 'MigrationError';
    this.code = databaseError?.code;
    this.detail = databaseError?.detail;
    this.hint = databaseError?.hint;
  }
}

/** The SQLSTATE, DETAIL and HINT of a database error. */
export interface DatabaseErrorFields {
  readonly code: string;
  readonly detail?: string | undefined;
  readonly hint?: string | undefined;
}

/**
 * How one applied migration differs from this version's files:
 * - `edited`: the file of the same number and name has other contents than when it was applied;
 * - `replaced`: the file of that number has another name (and so another hash);
 * - `unknown`: no file of that number here: applied by a newer version (or a file was removed).
 */
export type MigrationHistoryProblem = 'edited' | 'replaced' | 'unknown';

/** One row of the database's `migrations` table that this version's files do not account for. */
export interface MigrationHistoryMismatch {
  readonly problem: MigrationHistoryProblem;
  /** The migration's number (`00003` of `00003_input_rules.sql` is 3). */
  readonly id: number;
  /** The file name the database applied (`NNNNN_<name>.sql`, from the `name` it recorded). */
  readonly appliedFile: string;
  /** The SHA-1 of file name and contents recorded when it was applied. */
  readonly appliedHash: string;
  /** This version's file of that number; null for `unknown`. */
  readonly file: string | null;
  /** That file's SHA-1 (file name and contents, as postgres-migrations computes it); null for `unknown`. */
  readonly fileHash: string | null;
}

/**
 * The database's migration history does not match this version's migration files: an applied
 * migration was edited or replaced (a database migrated by a pre-release build, or a changed
 * file), or the database holds migrations this version does not have (migrated by a newer
 * version). Nothing was applied. `code` is `MIGRATION_HISTORY_MISMATCH`; `detail` names each file
 * with both hashes, `mismatches` lists them, `hint` says what to do. `pg-settle migrate` exits 4.
 */
export class MigrationHistoryError extends MigrationError {
  override readonly code = 'MIGRATION_HISTORY_MISMATCH';
  override readonly detail: string;
  override readonly hint: string;
  readonly mismatches: readonly MigrationHistoryMismatch[];

  constructor(mismatches: readonly MigrationHistoryMismatch[], dir: string) {
    const changed = mismatches.filter((m) => m.problem !== 'unknown');
    const unknown = mismatches.filter((m) => m.problem === 'unknown');
    const parts: string[] = [];
    if (changed.length > 0)
      parts.push(
        `${changed.map((m) => m.appliedFile).join(', ')} differ${changed.length === 1 ? 's' : ''} from this version's file`,
      );
    if (unknown.length > 0)
      parts.push(
        `${unknown.map((m) => m.appliedFile).join(', ')} ${unknown.length === 1 ? 'was' : 'were'} applied but this version has no such file`,
      );
    super(
      `the database's migration history does not match this version of pg-settle: ${parts.join('; ')}; nothing was applied`,
      undefined,
      undefined,
    );
    this.name = 'MigrationHistoryError';
    this.mismatches = mismatches;
    this.detail = mismatches.map(describe).join('; ') + ` (migrations directory: ${dir})`;
    this.hint = hintFor(changed.length > 0, unknown.length > 0);
  }
}

function describe(m: MigrationHistoryMismatch): string {
  switch (m.problem) {
    case 'edited':
      return `${m.appliedFile} was applied with hash ${m.appliedHash}; this version's file hashes to ${m.fileHash}`;
    case 'replaced':
      return `migration ${m.id} was applied as ${m.appliedFile} (hash ${m.appliedHash}); this version's migration ${m.id} is ${m.file} (hash ${m.fileHash})`;
    case 'unknown':
      return `${m.appliedFile} (hash ${m.appliedHash}) was applied; this version has no migration ${m.id}`;
  }
}

function hintFor(changed: boolean, unknown: boolean): string {
  const hints: string[] = [];
  if (changed) {
    hints.push(
      'From 0.1.0 on, released migrations are append-only: a release never changes an applied file, so a changed one means the database was migrated by a pre-release build of pg-settle (before 0.1.0) or a file was edited by hand. ' +
        'Migrate a new database with this version and move your data over, or run the version that migrated this database; never edit an applied migration (ship a new file)',
    );
  }
  if (unknown) {
    hints.push(
      'The database was migrated by a newer pg-settle than this one: run `pg-settle migrate` and the application from that version or later (downgrades are not supported)',
    );
  }
  return `${hints.join('. ')} (docs/operations.md, "Upgrading pg-settle").`;
}
