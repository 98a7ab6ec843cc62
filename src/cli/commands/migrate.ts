import { migrate } from '../../db/migrate.js';
import { COMMON_HELP, stringFlag, type Command } from '../command.js';
import { openDatabase } from '../database.js';
import { DatabaseUnavailableError } from '../errors.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText } from '../output.js';

export const migrateCommand: Command = {
  name: 'migrate',
  summary: 'apply pending migrations (forward-only, idempotent)',
  help: `Usage: pg-settle migrate [--database-url URL] [--json]

Applies the pending files of sql/migrations to the database, in order, each in its own
transaction. Safe to repeat and to run from several processes at once.

${COMMON_HELP}`,
  flags: {},
  positionals: [],
  async run(input) {
    const url = stringFlag(input, 'database-url');
    if (url === undefined && (process.env.DATABASE_URL ?? '') === '') {
      // A throwaway database is migrated when it starts: report what that applied.
      const db = await openDatabase(undefined);
      await db.close();
      if (input.json) printJson({ ok: true, command: 'migrate', throwaway: true, applied: [] });
      else printText('migrated a throwaway database (it is gone now); pass --database-url to migrate yours');
      return EXIT.ok;
    }
    const db = await openDatabase(url);
    let applied: string[];
    try {
      applied = (await migrate(db.url)).applied;
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) throw error;
      throw new DatabaseUnavailableError(`migration failed: ${(error as Error).message}`, { cause: error });
    } finally {
      await db.close();
    }
    if (input.json) printJson({ ok: true, command: 'migrate', throwaway: false, applied });
    else printText(applied.length === 0 ? 'up to date: no migration to apply' : `applied:\n${applied.map((f) => `  ${f}`).join('\n')}`);
    return EXIT.ok;
  },
};
