import { distribute } from '../../db/distribute.js';
import { stringFlag, type Command } from '../command.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText } from '../output.js';
import { UsageError } from '../usage-error.js';

export const distributeCommand: Command = {
  name: 'distribute',
  summary: 'shard the engine by operation key on a Citus coordinator (idempotent)',
  help: `Usage: pg-settle distribute --database-url URL [--json]

Runs sql/citus/distribute.sql on a Citus coordinator, as a superuser, after pg-settle migrate:
distributes settle_private.operations, attempts and audit_log by key (colocated), every engine
function to every node (the keyed API delegated to the worker holding the key), makes function
grants identical on every node and lets settle_readonly / settle_admin read the views' columns
on the shards. Safe to repeat; run it again after each migration and after adding a worker.
Refused with SQLSTATE SE031 (exit 1) where the citus extension is not installed in the database.
See docs/scale-out.md.

Flags:
  --database-url URL   the Citus coordinator's database (default: $DATABASE_URL; one of them is
                       required: a throwaway PostgreSQL has no Citus)
  --json               print one JSON document on stdout instead of text
  -h, --help           show this help`,
  flags: {},
  positionals: [],
  async run(input) {
    const url = stringFlag(input, 'database-url') ?? (process.env.DATABASE_URL === '' ? undefined : process.env.DATABASE_URL);
    if (url === undefined) {
      throw new UsageError('distribute needs --database-url (or DATABASE_URL): the Citus coordinator to distribute');
    }
    const summary = await distribute(url);
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
