import { COMMON_HELP, intFlag, withClient, type Command } from '../command.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText, renderTable } from '../output.js';

export const deadLettersCommand: Command = {
  name: 'dead-letters',
  summary: 'list operations that spent their attempt budget, or were left in doubt',
  help: `Usage: pg-settle dead-letters [--limit N] [--database-url URL] [--json]

Lists dead-lettered operations, oldest first, with why:
  attempts_exhausted     every attempt recorded a failure (status failed)
  needs_reconciliation   an attempt may have taken effect (status unknown or conflict):
                         check the downstream system before anything else. Either the attempt
                         budget is spent, or nobody touched the operation for in_doubt_after
                         (15 minutes by default; the dead_letter_in_doubt upkeep job)
Re-open one with \`pg-settle redrive <tenant> <key>\` (never lowers an unknown operation).

  --limit N            at most N rows (1-10000, default 100)

${COMMON_HELP}`,
  flags: { limit: { type: 'string' } },
  positionals: [],
  async run(input) {
    const limit = intFlag(input, 'limit', 100, 1, 10_000);
    return withClient(input, async (client) => {
      const rows = await client.deadLetters({ limit });
      if (input.json) {
        printJson({ ok: true, command: 'dead-letters', count: rows.length, deadLetters: rows });
      } else if (rows.length === 0) {
        printText('no dead letters');
      } else {
        printText(
          renderTable(
            ['tenant', 'key', 'status', 'reason', 'attempts', 'dead-lettered at', 'redrives', 'error'],
            rows.map((r) => [
              r.tenant,
              r.key,
              r.status,
              r.reason,
              `${r.attempt}/${r.maxAttempts}`,
              r.deadLetteredAt,
              r.redriveCount,
              r.error,
            ]),
          ),
        );
      }
      return EXIT.ok;
    });
  },
};
