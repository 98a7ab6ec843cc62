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
grants identical on every node and lets settle_readonly / settle_admin read the views' columns
on the shards. Safe to repeat; run it again after each migration and after adding a worker.
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
    }
    return EXIT.ok;
  },
};
