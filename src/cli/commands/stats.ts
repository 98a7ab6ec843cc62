import { citusFeedLag } from '../../client/citus-feed.js';
import { boolFlag, COMMON_HELP, intFlag, stringFlag, withClient, type Command } from '../command.js';
import { parseDuration } from '../duration.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText, renderTable } from '../output.js';
import { UsageError } from '../usage-error.js';
import { watchStats } from '../watch.js';
import { renderUpkeep, upkeepJobs } from '../upkeep.js';
import { describeHolder, readHorizon } from './feed.js';

export const statsCommand: Command = {
  name: 'stats',
  summary: 'per-tenant counts by status, dead letters, leases and attempts (--watch: live view)',
  help: `Usage: pg-settle stats [--watch [--interval D] [--census-interval D] [--count N]] [--database-url URL] [--json]

Per-tenant counts from the settle.stats view: operations by status, dead letters, live and
lapsed leases, and attempts opened. settle.stats scans every operation. Then the operations in
doubt (unknown or conflict, not dead-lettered) by how long nobody touched them: the
dead_letter_in_doubt upkeep job hands them to the reconciler after in_doubt_after (15 minutes
by default; see \`pg-settle dead-letters\`). Then the upkeep jobs
(settle.upkeep: lease expiry and retention): when each last ran, whether it failed, and a
WARNING for each job that is overdue (nothing runs settle.run_upkeep: see \`pg-settle schedule\`
and \`pg-settle maintain\`). Last, the session holding the settlement feed's horizon back, if any
(settle.feed_horizon: pid, login, application_name, how long its transaction has been open,
whether it is a feed consumer's open batch; docs/feed.md).

With --watch, a live view until Ctrl-C: the settle.metrics gauges (in flight, lapsed leases,
unknown and the oldest's age, conflict, dead letters by reason, recent conflicts and refused
observations; read from partial indexes, cheap) every --interval, and the per-tenant census
with rates per second every --census-interval. On a terminal the screen is redrawn; piped, each
refresh is a plain block (--json: one JSON document per line). See docs/observability.md.

  --watch                  refresh until interrupted (default: off, print once)
  --interval D             gauges every D (100ms-1h, default 2s)
  --census-interval D      settle.stats every D (1s-1d, default 30s; it scans every operation)
  --count N                stop after N refreshes (1-1000000, default: until Ctrl-C)

${COMMON_HELP}`,
  flags: {
    watch: { type: 'boolean' },
    interval: { type: 'string' },
    'census-interval': { type: 'string' },
    count: { type: 'string' },
  },
  positionals: [],
  async run(input) {
    const watch = boolFlag(input, 'watch');
    const between = (flag: string, fallback: number, min: number, max: number): number => {
      const text = stringFlag(input, flag);
      const ms = text === undefined ? fallback : parseDuration(text, `--${flag}`);
      if (ms < min || ms > max)
        throw new UsageError(`--${flag} must be between ${min} ms and ${max} ms (got ${ms} ms)`);
      return ms;
    };
    const intervalMs = between('interval', 2_000, 100, 3_600_000);
    const censusIntervalMs = between('census-interval', 30_000, 1_000, 86_400_000);
    const count = input.values.count === undefined ? null : intFlag(input, 'count', 1, 1, 1_000_000);
    if (
      !watch &&
      (input.values.interval !== undefined || input.values['census-interval'] !== undefined || count !== null)
    ) {
      throw new UsageError('--interval, --census-interval and --count go with --watch');
    }
    return withClient(input, async (client) => {
      if (watch) {
        const stopped = new Promise<void>((resolve) => {
          process.once('SIGINT', () => resolve());
          process.once('SIGTERM', () => resolve());
        });
        await watchStats(client, {
          intervalMs,
          censusIntervalMs,
          count,
          json: input.json,
          out: process.stdout,
          tty: process.stdout.isTTY === true,
          stopped,
        });
        return EXIT.ok;
      }
      const rows = await client.stats();
      const pool = await client.getPool();
      const upkeep = await upkeepJobs(pool);
      const horizon = await readHorizon(pool);
      const feedHorizon = {
        holderPid: horizon.holder_pid,
        holderUser: horizon.holder_user,
        holderApplicationName: horizon.holder_application,
        holderTransactionAgeSeconds: horizon.holder_xact_age_seconds,
        holderXidAge: horizon.holder_xid_age,
        holderIsFeedConsumer: horizon.holder_consumer,
        holderConsumer: horizon.holder_consumer_name,
        holderLane: horizon.holder_lane,
      };
      // On a Citus coordinator every node has its own feed: how far behind each consumer is there.
      const feedNodes = await citusFeedLag(pool);
      const { inDoubt } = await client.metrics();
      if (input.json) {
        printJson({
          ok: true,
          command: 'stats',
          tenants: rows,
          inDoubt,
          upkeep,
          feedHorizon,
          ...(feedNodes.length === 0 ? {} : { feedNodes }),
        });
      } else if (rows.length === 0) {
        printText('no operations');
      } else {
        printText(
          renderTable(
            [
              'tenant',
              'operations',
              'pending',
              'running',
              'unknown',
              'conflict',
              'failed',
              'completed',
              'dead',
              'in flight',
              'lapsed',
              'attempts',
            ],
            rows.map((r) => [
              r.tenant,
              r.operations,
              r.pending,
              r.running,
              r.unknown,
              r.conflict,
              r.failed,
              r.completed,
              r.deadLettered,
              r.inFlight,
              r.lapsedLeases,
              r.attempts,
            ]),
          ),
        );
      }
      if (!input.json)
        printText(
          `\nin doubt, not dead-lettered (untouched for): under 5m ${inDoubt.under5m}, 5m-1h ${inDoubt.from5mTo1h}, over 1h ${inDoubt.over1h}`,
        );
      if (!input.json) printText(`\n${renderUpkeep(upkeep)}\nfeed horizon held by: ${describeHolder(horizon)}`);
      if (!input.json && feedNodes.length > 0) {
        printText(
          `\nfeed per node (Citus: each node has its own feed)\n${renderTable(
            ['node', 'consumer', 'lag events', 'lag seconds', 'error'],
            feedNodes.map((r) => [r.node, r.consumer ?? '-', r.lagEvents ?? '-', r.lagSeconds ?? '-', r.error ?? '']),
          )}`,
        );
      }
      return EXIT.ok;
    });
  },
};
