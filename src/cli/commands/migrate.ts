import path from 'node:path';
import { writeExportedMigrations } from '../../db/export-migrations.js';
import { MigrationHistoryError, migrate, type OwnerMember } from '../../db/migrate.js';
import { COMMON_HELP, stringFlag, type Command } from '../command.js';
import { openDatabase } from '../database.js';
import { DatabaseUnavailableError } from '../errors.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText } from '../output.js';
import { UsageError } from '../usage-error.js';

export const migrateCommand: Command = {
  name: 'migrate',
  summary: 'apply pending migrations (forward-only, idempotent); --print DIR writes them for your own tool',
  help: `Usage: pg-settle migrate [--database-url URL] [--json]
       pg-settle migrate --print DIR [--json]

Applies the pending files of sql/migrations to the database, in order, each in its own
transaction. Safe to repeat and to run from several processes at once. Upgrading is the same
command: releases only add migration files. A database whose applied migrations differ from
this version's files (edited, replaced, or from a newer version) is refused, nothing applied,
exit 4, naming each file with both hashes and what to do. Needs a role that may
create schemas and roles (a superuser, or the database owner with CREATEROLE; on PostgreSQL
16+ where the roles exist already, that login needs ADMIN OPTION on settle_owner). A non-superuser
login is a member of settle_owner only while the migrations run; any login still able to act
as settle_owner afterwards is named, with the REVOKE that drops it (--json: ownerMembers).

Flags:
  --print DIR          write the migrations as versioned SQL files (NNNNN_name.sql) into DIR
                       (created if missing) instead of applying them, for your own migration
                       tool (docs/migrations-in-your-tool.md); connects to no database
                       (default: off, apply them). Apply the files in order, each in its own
                       transaction: each also does what migrate does around it (the login acts
                       as settle_owner only while the file runs). Refused (exit 2) when DIR
                       holds NNNNN_*.sql files this version does not have

${COMMON_HELP}`,
  flags: { print: { type: 'string' } },
  positionals: [],
  async run(input) {
    const printTo = stringFlag(input, 'print');
    if (printTo !== undefined) {
      const { written, stale } = await writeExportedMigrations(printTo);
      if (stale.length > 0) {
        throw new UsageError(
          `${printTo} holds migration files this version of pg-settle does not have (${stale.join(', ')}): ` +
            'they were printed by a version whose migrations were numbered differently, and a tool would apply them too; ' +
            'print into an empty directory',
        );
      }
      if (input.json) printJson({ ok: true, command: 'migrate', print: path.resolve(printTo), files: written });
      else
        printText(`wrote ${written.length} migration files to ${printTo}:\n${written.map((f) => `  ${f}`).join('\n')}`);
      return EXIT.ok;
    }
    const db = await openDatabase(stringFlag(input, 'database-url'));
    let applied: string[];
    let ownerMembers: readonly OwnerMember[];
    try {
      ({ applied, ownerMembers } = await migrate(db.url));
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (error instanceof MigrationHistoryError) throw error;
      if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) throw error;
      throw new DatabaseUnavailableError(`migration failed: ${(error as Error).message}`, { cause: error });
    } finally {
      await db.close();
    }
    if (input.json) printJson({ ok: true, command: 'migrate', throwaway: false, applied, ownerMembers });
    else {
      printText(
        applied.length === 0
          ? 'up to date: no migration to apply'
          : `applied:\n${applied.map((f) => `  ${f}`).join('\n')}`,
      );
      for (const member of ownerMembers) {
        printText(
          `warning: login ${member.role} can still act as settle_owner (disable guard triggers, rewrite results); as a superuser: ${member.revoke}`,
        );
      }
    }
    return EXIT.ok;
  },
};
