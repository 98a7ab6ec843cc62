import { distribute } from '../../db/distribute.js';
import { COMMON_HELP, stringFlag, type Command } from '../command.js';
import { openDatabase } from '../database.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText } from '../output.js';

export const distributeCommand: Command = {
  name: 'distribute',
  summary: 'shard the engine by operation key on a Citus coordinator (idempotent)',
  help: `Usage: pg-settle distribute [--database-url URL] [--json]

Runs sql/citus/distribute.sql on a Citus coordinator, as a superuser, after pg-settle migrate:
distributes settle_private.operations, attempts and audit_log by key (colocated), every engine
function to every node (the keyed API delegated to the worker holding the key), makes function
grants identical on every node and keeps settle_private closed to every caller (the views read
through SECURITY DEFINER functions). Then reports, per node, what the engine's logins lack there
(a pg_hba.conf rule admitting them from the other nodes, a password Citus can present:
pg_dist_authinfo). Safe to repeat; run it again after each migration, after adding a worker and
after creating login roles.
Refused with SQLSTATE SE031 (exit 1) where the citus extension is not installed in the database.
See docs/scale-out.md.

${COMMON_HELP}`,
  flags: {},
  positionals: [],
  async run(input) {
    const db = await openDatabase(stringFlag(input, 'database-url'));
    const summary = await distribute(db.url);
    if (input.json) printJson({ ok: true, command: 'distribute', ...summary });
    else {
      printText(
        `distributed ${summary.tables} tables by key and ${summary.functions} functions ` +
          `(${summary.delegated} delegated by key) over ${summary.workers} workers`,
      );
      if (summary.problems.length === 0) printText('every node admits the engine\'s logins from the other nodes');
      for (const p of summary.problems) printText(`missing on ${p.node} for ${p.role}: ${p.problem}`);
    }
    return EXIT.ok;
  },
};
