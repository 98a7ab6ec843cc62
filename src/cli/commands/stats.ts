import { COMMON_HELP, withClient, type Command } from '../command.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText, renderTable } from '../output.js';

export const statsCommand: Command = {
  name: 'stats',
  summary: 'per-tenant counts by status, dead letters, leases and attempts',
  help: `Usage: pg-settle stats [--database-url URL] [--json]

Per-tenant counts from the settle.stats view: operations by status, dead letters, live and
lapsed leases, and attempts opened.

${COMMON_HELP}`,
  flags: {},
  positionals: [],
  async run(input) {
    return withClient(input, async (client) => {
      const rows = await client.stats();
      if (input.json) {
        printJson({ ok: true, command: 'stats', tenants: rows });
      } else if (rows.length === 0) {
        printText('no operations');
      } else {
        printText(
          renderTable(
            ['tenant', 'operations', 'pending', 'running', 'unknown', 'conflict', 'failed', 'completed', 'dead', 'in flight', 'lapsed', 'attempts'],
            rows.map((r) => [
              r.tenant, r.operations, r.pending, r.running, r.unknown, r.conflict, r.failed, r.completed,
              r.deadLettered, r.inFlight, r.lapsedLeases, r.attempts,
            ]),
          ),
        );
      }
      return EXIT.ok;
    });
  },
};
