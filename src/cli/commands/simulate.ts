import { configFromFlags, DEFAULT_CONFIG, FAULTS, SIMULATOR_FLAGS } from '../../simulator/config.js';
import { formatReport } from '../../simulator/report.js';
import { runSimulation } from '../../simulator/run.js';
import { startMetricsEndpoint } from '../../simulator/prometheus.js';
import { intFlag, stringFlag, type Command } from '../command.js';
import { openDatabase } from '../database.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText } from '../output.js';
import { createProgress } from '../progress.js';

const faultHelp = FAULTS.map((f) => `  --fault-${f.name}=RATE`.padEnd(36) + `0-1, default ${f.defaultRate}: ${f.summary}`).join('\n');

export const simulateCommand: Command = {
  name: 'simulate',
  summary: 'run the fault-injecting settlement simulator and check the invariants',
  help: `Usage: pg-settle simulate [flags] [--database-url URL] [--json]

Runs a seeded workload of payouts through the engine with injected faults, then reads back the
operations, attempts, audit trail and payout ledger and checks the invariants (see
docs/simulator.md). Exit code 0 when every invariant holds, 1 when one fails.

  --seed N                          fault schedule seed (0-4294967295, default ${DEFAULT_CONFIG.seed}); same seed, same faults
  --workers N                       concurrent workers and pool size (1-200, default ${DEFAULT_CONFIG.workers})
  --operations N                    operations to run (1-1000000, default ${DEFAULT_CONFIG.operations})
  --duration D                      stop issuing new operations after D (500ms, 30s, 2m; default: none)
  --tenants N                       tenants to spread operations over (1-1000, default ${DEFAULT_CONFIG.tenants})
  --lease S                         lease in whole seconds (1-60, default ${DEFAULT_CONFIG.leaseSeconds})
  --max-attempts N                  attempt budget per operation (2-1000, default ${DEFAULT_CONFIG.maxAttempts})
  --faults=RATE                     every fault rate at once, 0-1 (default: each fault's own; 0: no injection)
${faultHelp}
  --unsafe-downstream               the payout ledger forgets idempotency (default: off): the checker catches double pay
  --metrics-port N                  serve the client's metrics at http://127.0.0.1:N/metrics while it runs
                                    (0-65535, 0: a free port, printed on stderr; default: off; docs/observability.md)

Common flags:
  --database-url URL                PostgreSQL to run in (default: $DATABASE_URL; with neither, a
                                    throwaway PostgreSQL is started, migrated, and deleted on exit)
  --json                            print one JSON document on stdout instead of text (default: off)
  -h, --help                        show this help`,
  flags: { ...SIMULATOR_FLAGS, 'unsafe-downstream': { type: 'boolean' }, 'metrics-port': { type: 'string' } },
  positionals: [],
  async run(input) {
    const config = configFromFlags(input.values);
    const metricsPort = input.values['metrics-port'] === undefined ? null : intFlag(input, 'metrics-port', 0, 0, 65_535);
    const db = await openDatabase(stringFlag(input, 'database-url'), { migrateAlways: true, provision: true });
    const metrics = metricsPort === null ? null : await startMetricsEndpoint({ port: metricsPort }).catch(async (error: unknown) => {
      await db.close();
      throw error;
    });
    if (metrics !== null) process.stderr.write(`pg-settle: serving metrics at ${metrics.url}\n`);
    try {
      const progress = createProgress('simulate', true);
      const report = await runSimulation({
        config,
        connectionString: db.url,
        unsafeDownstream: input.values['unsafe-downstream'] === true,
        ...(metrics === null ? {} : { telemetry: { meterProvider: metrics.meterProvider } }),
        onProgress: (p) => progress.update(p.final, p.total, `${p.issued} issued`),
      });
      progress.finish();
      if (input.json) printJson({ command: 'simulate', throwaway: db.throwaway, ...report });
      else printText(formatReport(report));
      return report.ok ? EXIT.ok : EXIT.failure;
    } finally {
      await metrics?.stop();
      await db.close();
    }
  },
};
