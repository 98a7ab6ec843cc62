import { COMMON_HELP, intFlag, withClient, type Command } from '../command.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText } from '../output.js';
import { createProgress } from '../progress.js';
import { countLapsedLeases, viewQuery } from '../queries.js';

export const expireLeasesCommand: Command = {
  name: 'expire-leases',
  summary: 'end lapsed leases and dead-letter spent operations',
  help: `Usage: pg-settle expire-leases [--batch-size N] [--database-url URL] [--json]

Calls settle.expire_leases in batches until a batch comes back short: ends leases that lapsed
by the database clock and dead-letters operations whose attempt budget is spent. Correctness
never depends on it (a claim takes over a lapsed lease by itself); run it from cron to keep
dead letters visible. A progress line on stderr counts leases against those lapsed at start.

  --batch-size N       rows per call (1-100000, default 1000)

${COMMON_HELP}`,
  flags: { 'batch-size': { type: 'string' } },
  positionals: [],
  async run(input) {
    const batchSize = intFlag(input, 'batch-size', 1000, 1, 100_000);
    return withClient(input, async (client) => {
      const lapsed = await viewQuery(await client.getPool(), countLapsedLeases);
      const progress = createProgress('expire-leases', { unit: 'leases' });
      let expired = 0;
      let deadLettered = 0;
      let batches = 0;
      for (;;) {
        const batch = await client.expireLeases({ batchSize });
        batches += 1;
        expired += batch.expired;
        deadLettered += batch.deadLettered;
        progress.update(expired, Math.max(lapsed, expired), `${batches} batches`);
        if (batch.expired < batchSize) break;
      }
      progress.finish();
      if (input.json) printJson({ ok: true, command: 'expire-leases', expired, deadLettered, batches });
      else printText(`expired ${expired} leases, dead-lettered ${deadLettered} operations (${batches} batches)`);
      return EXIT.ok;
    });
  },
};
