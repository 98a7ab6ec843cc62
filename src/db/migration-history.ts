import type pg from 'pg';
// CommonJS: a default import is its module.exports (see migrate.ts).
import postgresMigrations from 'postgres-migrations';
import { type MigrationHistoryMismatch, MigrationHistoryError } from './migration-errors.js';

/** The advisory lock postgres-migrations holds while it migrates (its with-lock.js). */
export const MIGRATION_LOCK_KEY = '-8525285245963000605';

interface AppliedRow {
  readonly id: number;
  readonly name: string;
  readonly hash: string;
}

/** The file name an applied row stands for (postgres-migrations records the number and the name only). */
function appliedFileName(row: AppliedRow): string {
  return row.id === 0 ? `0_${row.name}.sql` : `${String(row.id).padStart(5, '0')}_${row.name}.sql`;
}

/**
 * Compares the database's `migrations` table with the files of `dir`, hashed as
 * postgres-migrations hashes them (SHA-1 of file name and contents), and throws a
 * MigrationHistoryError naming every applied migration the files do not account for: edited,
 * replaced by a file of another name, or absent (a newer version's). postgres-migrations itself
 * catches only the first kind, with a plain "Hashes don't match" error, and applies the pending
 * files of a database that holds a newer version's migrations as if nothing were amiss.
 * Run it holding MIGRATION_LOCK_KEY, so that no other migrate adds rows meanwhile.
 */
export async function checkMigrationHistory(client: pg.Client | pg.PoolClient, dir: string): Promise<void> {
  const { rows: exists } = await client.query<{ present: boolean }>(
    `select to_regclass('migrations') is not null as present`,
  );
  if (exists[0]?.present !== true) return;
  const files = await postgresMigrations.loadMigrationFiles(dir);
  const byId = new Map(files.map((file) => [file.id, file]));
  const { rows } = await client.query<AppliedRow>('select id, name, hash from migrations order by id');
  const mismatches: MigrationHistoryMismatch[] = [];
  for (const row of rows) {
    const file = byId.get(row.id);
    const appliedFile = appliedFileName(row);
    if (file === undefined) {
      mismatches.push({
        problem: 'unknown',
        id: row.id,
        appliedFile,
        appliedHash: row.hash,
        file: null,
        fileHash: null,
      });
    } else if (file.hash !== row.hash) {
      mismatches.push({
        problem: file.name === row.name ? 'edited' : 'replaced',
        id: row.id,
        appliedFile,
        appliedHash: row.hash,
        file: file.fileName,
        fileHash: file.hash,
      });
    }
  }
  if (mismatches.length > 0) throw new MigrationHistoryError(mismatches, dir);
}
