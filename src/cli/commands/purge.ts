import { COMMON_HELP, intFlag, stringFlag, withClient, type Command } from '../command.js';
import { parseDuration } from '../duration.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText } from '../output.js';
import { createProgress } from '../progress.js';
import { UsageError } from '../usage-error.js';

export const purgeCommand: Command = {
  name: 'purge',
  summary: 'delete settled operations older than a duration (retention)',
  help: `Usage: pg-settle purge --older-than DURATION [--batch-size N] [--database-url URL] [--json]

Deletes terminal (completed or failed) operations last updated before now - DURATION, with
their attempts and audit rows, leaving one tombstone audit row per key. The only path that
deletes. Calls settle.purge in batches until a batch comes back short.

  --older-than D       required: 7d, 12h, 30m, 45s, 1h30m (units ms s m h d w)
  --batch-size N       operations per call (1-100000, default 1000)

${COMMON_HELP}`,
  flags: { 'older-than': { type: 'string' }, 'batch-size': { type: 'string' } },
  positionals: [],
  async run(input) {
    const olderThan = stringFlag(input, 'older-than');
    if (olderThan === undefined) throw new UsageError('purge needs --older-than (e.g. --older-than 7d)');
    const olderThanMs = parseDuration(olderThan, '--older-than');
    const batchSize = intFlag(input, 'batch-size', 1000, 1, 100_000);
    return withClient(input, async (client) => {
      const progress = createProgress('purge', !input.json);
      let purged = 0;
      let batches = 0;
      for (;;) {
        const count = await client.purge({ olderThanMs, batchSize });
        batches += 1;
        purged += count;
        progress.update(purged, purged, `${batches} batches`);
        if (count < batchSize) break;
      }
      progress.finish();
      if (input.json) printJson({ ok: true, command: 'purge', olderThanMs, purged, batches });
      else printText(`purged ${purged} operations older than ${olderThan} (${batches} batches)`);
      return EXIT.ok;
    });
  },
};
