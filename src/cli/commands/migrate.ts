import { migrate, type OwnerMember } from '../../db/migrate.js';
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
transaction. Safe to repeat and to run from several processes at once. Needs a role that may
create schemas and roles (a superuser, or the database owner with CREATEROLE; on PostgreSQL
16+ where the roles exist already, that login needs ADMIN OPTION on settle_owner). A non-superuser
login is a member of settle_owner only while the migrations run; any login still able to act
as settle_owner afterwards is named, with the REVOKE that drops it (--json: ownerMembers).

${COMMON_HELP}`,
  flags: {},
  positionals: [],
  async run(input) {
    const db = await openDatabase(stringFlag(input, 'database-url'));
    let applied: string[];
    let ownerMembers: readonly OwnerMember[];
    try {
      ({ applied, ownerMembers } = await migrate(db.url));
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) throw error;
      throw new DatabaseUnavailableError(`migration failed: ${(error as Error).message}`, { cause: error });
    } finally {
      await db.close();
    }
    if (input.json) printJson({ ok: true, command: 'migrate', throwaway: false, applied, ownerMembers });
    else {
      printText(applied.length === 0 ? 'up to date: no migration to apply' : `applied:\n${applied.map((f) => `  ${f}`).join('\n')}`);
      for (const member of ownerMembers) {
        printText(`warning: login ${member.role} can still act as settle_owner (disable guard triggers, rewrite results); as a superuser: ${member.revoke}`);
      }
    }
    return EXIT.ok;
  },
};
