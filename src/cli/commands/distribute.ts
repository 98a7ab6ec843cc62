import { distribute, type HotPathSummary } from '../../db/distribute.js';
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
pg_dist_authinfo). Where every worker's Citus caches the local plans of single-table statements
(a probe: Citus 13.5.0 does, 13.2.2 does not), the hot path is rewritten into such statements
(sql/citus/single-table.sql). Safe to repeat; run it again after each migration, after adding a worker and
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
      printText(hotPathLine(summary.hotPath));
      if (summary.hotPath.leftAsMigrated.length > 0) {
        printText(
          `hot path: step 12 does not know the text of ${summary.hotPath.leftAsMigrated.join(', ')}: left as migrated (correct, slower)`,
        );
      }
      if (summary.problems.length === 0) printText("every node admits the engine's logins from the other nodes");
      for (const p of summary.problems) printText(`missing on ${p.node} for ${p.role}: ${p.problem}`);
    }
    return EXIT.ok;
  },
};

/** One line on the hot path's form after step 12 (docs/scale-out.md, "Where a delegated cycle's CPU goes"). */
function hotPathLine(h: HotPathSummary): string {
  if (h.rewritten.length > 0) {
    return `hot path: single-table statements in ${h.rewritten.length} functions (${h.mode === 'on' ? 'forced' : "every worker's Citus caches local plans"})`;
  }
  if (h.mode === 'off') return 'hot path as migrated (single-table statements forced off)';
  if (h.localPlansCached === null) return 'hot path as migrated (no worker could be probed for a local plan cache)';
  if (h.localPlansCached) return 'hot path as migrated (steps 10-11 did not apply: see docs/scale-out.md)';
  return "hot path as migrated (a worker's Citus plans local shard queries at every execution: citusdata/citus#8824, fixed in Citus 13.5.0)";
}
