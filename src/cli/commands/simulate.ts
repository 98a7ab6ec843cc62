import { redactPassword } from '../../db/database-url.js';
import { configFromFlags, DEFAULT_CONFIG, FAULTS, SIMULATOR_FLAGS } from '../../simulator/config.js';
import { formatReport } from '../../simulator/report.js';
import { runSimulation } from '../../simulator/run.js';
import { MetricsEndpointUnavailableError, startMetricsEndpoint } from '../../simulator/prometheus.js';
import { intFlag, stringFlag, type Command, type CommandInput } from '../command.js';
import { openDatabase } from '../database.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText } from '../output.js';
import { createProgress } from '../progress.js';
import { offerNewSignIns } from './console.js';
import { MissingPackageError, UsageError } from '../usage-error.js';

const faultHelp = FAULTS.map(
  (f) => `  --fault-${f.name}=RATE`.padEnd(36) + `0-1, default ${f.defaultRate}: ${f.summary}`,
).join('\n');

/**
 * The simulator writes a workload (operations under run-unique tenants, a payout ledger in the
 * schema settle_sim) into the database it runs in. It never does so in a database the user
 * pointed it at unless asked: --database-url together with --write-to-database. Otherwise it
 * runs in a throwaway database of its own, even when DATABASE_URL is set.
 */
function simulationDatabaseUrl(input: CommandInput): string | undefined {
  const flagUrl = stringFlag(input, 'database-url');
  const write = input.values['write-to-database'] === true;
  if (flagUrl !== undefined && !write) {
    throw new UsageError(
      'simulate writes its workload (operations, and a payout ledger in schema settle_sim) into the database it runs in: add --write-to-database to run it in the --database-url you gave, or leave --database-url out for a throwaway database',
    );
  }
  if (write && flagUrl === undefined)
    throw new UsageError('--write-to-database needs --database-url URL (the database to write into)');
  if (!write && (process.env.DATABASE_URL ?? '') !== '') {
    process.stderr.write(
      'pg-settle: DATABASE_URL is set, but simulate runs in a throwaway database of its own (pass --database-url URL --write-to-database to run it in yours)\n',
    );
  }
  return flagUrl;
}

/** How to look at the run in the console (stderr: stdout holds the report). */
function consoleHint(throwaway: boolean, url: string): string {
  return throwaway
    ? 'pg-settle: to look at this run in the web console, run it again with --console (npm start -- --console): its throwaway database is deleted now\n'
    : `pg-settle: to look at this run in the web console: pg-settle console --database-url '${redactPassword(url)}'\n`;
}

/** `pg-settle console` on the simulator's database until SIGINT or SIGTERM. */
async function serveConsole(url: string): Promise<void> {
  const { startConsole } = await import('../../console/server.js');
  const running = await startConsole({ databaseUrl: url, port: 0 });
  process.stderr.write(
    `pg-settle: the console on this run's database: open ${running.loginUrl}\n(the address works once; Enter prints a new one; Ctrl-C stops the console and deletes a throwaway database)\n`,
  );
  const lines = offerNewSignIns(running, (open) =>
    process.stderr.write(`pg-settle: a new sign-in address (works once, for 15 minutes): ${open}\n`),
  );
  await new Promise<void>((resolve) => {
    process.once('SIGINT', () => resolve());
    process.once('SIGTERM', () => resolve());
  });
  lines.close();
  await running.close();
}

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
  --skip-baseline                   do not also run the naive last-write-wins baseline (default: off, it runs)
  --console                         after the run, serve \`pg-settle console\` on the simulator's database
                                    (its address on stderr) until Ctrl-C, then stop (default: off)
  --metrics-port N                  serve the client's metrics at http://127.0.0.1:N/metrics while it runs
                                    (0-65535, 0: a free port, printed on stderr; default: off; docs/observability.md)

Common flags:
  --database-url URL                a PostgreSQL to run in, only together with --write-to-database
                                    (default: none: a throwaway PostgreSQL is started, migrated and
                                    deleted on exit, even when $DATABASE_URL is set)
  --write-to-database               allow writing the workload into --database-url (default: off)
  --json                            print one JSON document on stdout instead of text (default: off)
  -h, --help                        show this help`,
  flags: {
    ...SIMULATOR_FLAGS,
    'unsafe-downstream': { type: 'boolean' },
    'skip-baseline': { type: 'boolean' },
    'write-to-database': { type: 'boolean' },
    'metrics-port': { type: 'string' },
    console: { type: 'boolean' },
  },
  positionals: [],
  async run(input) {
    const config = configFromFlags(input.values);
    const metricsPort =
      input.values['metrics-port'] === undefined ? null : intFlag(input, 'metrics-port', 0, 0, 65_535);
    const databaseUrl = simulationDatabaseUrl(input);
    // The endpoint first: without the OpenTelemetry SDK (an app's install) it fails at once, as a
    // usage error (exit 2), before a server is started; exit 1 is kept for invariant failures.
    const metrics =
      metricsPort === null
        ? null
        : await startMetricsEndpoint({ port: metricsPort }).catch((error: unknown) => {
            if (error instanceof MetricsEndpointUnavailableError)
              throw new MissingPackageError(error.message, { cause: error });
            throw error;
          });
    const db = await openDatabase(databaseUrl, { migrateAlways: true, provision: true, ignoreEnvironment: true }).catch(
      async (error: unknown) => {
        await metrics?.stop();
        throw error;
      },
    );
    if (metrics !== null) process.stderr.write(`pg-settle: serving metrics at ${metrics.url}\n`);
    try {
      const progress = createProgress('simulate', { unit: 'payouts final' });
      const report = await runSimulation({
        config,
        connectionString: db.url,
        unsafeDownstream: input.values['unsafe-downstream'] === true,
        baseline: input.values['skip-baseline'] !== true,
        ...(metrics === null ? {} : { telemetry: { meterProvider: metrics.meterProvider } }),
        onProgress: (p) => progress.update(p.final, p.total, `${p.issued} issued`),
      });
      progress.finish();
      if (input.json) printJson({ command: 'simulate', throwaway: db.throwaway, ...report });
      else printText(formatReport(report));
      if (input.values.console === true) await serveConsole(db.url);
      else process.stderr.write(consoleHint(db.throwaway, db.url));
      return report.ok ? EXIT.ok : EXIT.failure;
    } finally {
      await metrics?.stop();
      await db.close();
    }
  },
};
