import { boolFlag, COMMON_HELP, intFlag, stringFlag, withClient, type Command } from '../command.js';
import { confirm } from '../confirm.js';
import { parseDuration } from '../duration.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText } from '../output.js';
import { createProgress } from '../progress.js';
import { countPurgeable, viewQuery, type PurgeCounts } from '../queries.js';
import { UsageError } from '../usage-error.js';

const describeCounts = (c: PurgeCounts): string =>
  `${c.total} operations (completed ${c.completed}, failed ${c.failed}; ${c.deadLettered} dead letters kept)`;

export const purgeCommand: Command = {
  name: 'purge',
  summary: 'delete settled operations older than a duration (retention)',
  help: `Usage: pg-settle purge --older-than DURATION [--dry-run] [--yes] [--batch-size N] [--database-url URL] [--json]

Deletes terminal (completed or failed) operations last updated before now - DURATION, with
their attempts and audit rows, leaving one tombstone audit row per key. The only path that
deletes. First counts what would go, by status; then asks (a terminal) or needs --yes (no
terminal: cron, CI, a pipe); then calls settle.purge in batches until a batch comes back short,
with a progress line on stderr. The engine refuses an age below its minimum retention (exit 1).

  --older-than D       required: 7d, 12h, 30m, 45s, 1h30m (units ms s m h d w; >= 0, and at
                       least the engine's minimum retention)
  --dry-run            only count what would be purged, by status, and delete nothing (default: off)
  --yes                purge without asking; required when stdin is not a terminal (default: off)
  --batch-size N       operations per call (1-100000, default 1000)

${COMMON_HELP}`,
  flags: {
    'older-than': { type: 'string' },
    'batch-size': { type: 'string' },
    'dry-run': { type: 'boolean' },
    yes: { type: 'boolean' },
  },
  positionals: [],
  async run(input) {
    const olderThan = stringFlag(input, 'older-than');
    if (olderThan === undefined) throw new UsageError('purge needs --older-than (e.g. --older-than 30d)');
    const olderThanMs = parseDuration(olderThan, '--older-than');
    const batchSize = intFlag(input, 'batch-size', 1000, 1, 100_000);
    const dryRun = boolFlag(input, 'dry-run');
    return withClient(input, async (client) => {
      const pool = await client.getPool();
      // Before counting, the engine's own rules (minimum retention SE014, input checks): one
      // real settle.purge call of batch 1 in a transaction that is always rolled back. So the
      // dry run refuses whatever the real run refuses, with the same error and exit code, and
      // "nothing to purge" is never said for an age the engine would refuse.
      const rollback = new Error('purge: rules checked, rolled back');
      await pool
        .transaction(async (transaction) => {
          await client.purge({ olderThanMs, batchSize: 1 }, { connection: transaction });
          throw rollback;
        })
        .catch((error: unknown) => {
          if (error !== rollback) throw error;
        });
      const counts = await viewQuery(pool, (p) => countPurgeable(p, olderThanMs));
      if (dryRun) {
        if (input.json) printJson({ ok: true, command: 'purge', dryRun: true, olderThanMs, wouldPurge: counts });
        else
          printText(
            `dry run: would purge ${describeCounts(counts)} last updated more than ${olderThan} ago; nothing deleted`,
          );
        return EXIT.ok;
      }
      if (counts.total === 0) {
        if (input.json) printJson({ ok: true, command: 'purge', dryRun: false, olderThanMs, purged: 0, batches: 0 });
        else printText(`nothing to purge: no terminal operation last updated more than ${olderThan} ago`);
        return EXIT.ok;
      }
      const go = await confirm(`purge ${describeCounts(counts)} last updated more than ${olderThan} ago?`, {
        yes: boolFlag(input, 'yes'),
        command: 'purge',
      });
      if (!go) {
        if (input.json) printJson({ ok: false, command: 'purge', aborted: true, olderThanMs, purged: 0 });
        else printText('aborted: nothing purged');
        return EXIT.failure;
      }
      const progress = createProgress('purge', { unit: 'operations' });
      let purged = 0;
      let batches = 0;
      for (;;) {
        const count = await client.purge({ olderThanMs, batchSize });
        batches += 1;
        purged += count;
        progress.update(purged, Math.max(counts.total, purged), `${batches} batches`);
        if (count < batchSize) break;
      }
      progress.finish();
      if (input.json) printJson({ ok: true, command: 'purge', dryRun: false, olderThanMs, purged, batches });
      else printText(`purged ${purged} operations older than ${olderThan} (${batches} batches)`);
      return EXIT.ok;
    });
  },
};
