import { setTimeout as sleep } from 'node:timers/promises';
import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { boolFlag, COMMON_HELP, intFlag, stringFlag, withClient, type Command } from '../command.js';
import { parseDuration } from '../duration.js';
import { CommandFailedError } from '../errors.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText, toJsonText } from '../output.js';
import { viewQuery } from '../queries.js';
import { UsageError } from '../usage-error.js';

const runRow = z.object({ job: z.string(), outcome: z.string(), detail: z.unknown() });

/** The pg_cron job `pg-settle schedule` creates (and that `stats` looks for). */
export const CRON_JOB_NAME = 'pg-settle upkeep';
const CRON_COMMAND = 'select * from settle.run_upkeep()';

/** One settle.run_upkeep() call: one row per job (ran, failed, not_due, busy). */
export async function runUpkeep(
  pool: DatabasePool,
  force = false,
): Promise<{ job: string; outcome: string; detail: unknown }[]> {
  const rows = await viewQuery(pool, (p) =>
    p.any(sql.type(runRow)`select * from settle.run_upkeep(force => ${force})`),
  );
  return rows.map((r) => ({ job: r.job, outcome: r.outcome, detail: r.detail }));
}

export const maintainCommand: Command = {
  name: 'maintain',
  summary:
    'run the upkeep jobs (lease expiry, in-doubt hand-over, retention, feed trim) on a schedule (without pg_cron)',
  help: `Usage: pg-settle maintain [--interval D] [--once] [--count N] [--force] [--database-url URL] [--json]

Calls settle.run_upkeep() every --interval until Ctrl-C (SIGINT/SIGTERM): it runs each job that
is due (expire_leases, every minute by default; dead_letter_in_doubt, every minute: in-doubt
operations nobody touched for in_doubt_after become dead letters needing reconciliation; purge
with the retention stored in the database, every hour; trim_feed, every minute), records the run in settle.upkeep (\`pg-settle stats\` shows it) and answers busy when
another caller is running the job. Run one or more of these (e.g. one per app host): the job
row's lock elects one runner per job, and a job that ran recently is not run again. Needs a
login role with settle_admin. Use \`pg-settle schedule\` instead where pg_cron is installed.
Prints one line per job that ran or failed (--json: one JSON document per line).

  --interval D         how often to call it (1s-1h, default 30s)
  --once               call it once and exit (for cron or a CI step): exit 1 if a job failed
                       (default: off)
  --count N            stop after N calls (1-1000000, default: until interrupted)
  --force              run every job now, due or not (with --once; default: off)

${COMMON_HELP}`,
  flags: {
    interval: { type: 'string' },
    once: { type: 'boolean' },
    count: { type: 'string' },
    force: { type: 'boolean' },
  },
  positionals: [],
  async run(input) {
    const text = stringFlag(input, 'interval');
    const intervalMs = text === undefined ? 30_000 : parseDuration(text, '--interval');
    if (intervalMs < 1_000 || intervalMs > 3_600_000)
      throw new UsageError(`--interval must be between 1s and 1h (got ${intervalMs} ms)`);
    const once = boolFlag(input, 'once');
    const force = boolFlag(input, 'force');
    if (force && !once) throw new UsageError('--force goes with --once');
    const count = once ? 1 : input.values.count === undefined ? Infinity : intFlag(input, 'count', 1, 1, 1_000_000);
    return withClient(input, async (client) => {
      const pool = await client.getPool();
      const stop = new AbortController();
      const onSignal = () => stop.abort();
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      let failed = 0;
      try {
        for (let call = 0; call < count && !stop.signal.aborted; call += 1) {
          // SIGINT/SIGTERM abort the wait; the loop then ends.
          if (call > 0) await sleep(intervalMs, undefined, { signal: stop.signal }).catch(() => {});
          if (stop.signal.aborted) break;
          const at = new Date().toISOString();
          const rows = await runUpkeep(pool, force);
          for (const row of rows) {
            if (row.outcome === 'failed') failed += 1;
            if (input.json)
              process.stdout.write(`${toJsonText({ at, command: 'maintain', ...row }).replace(/\n\s*/g, ' ')}\n`);
            else if (row.outcome === 'ran' || row.outcome === 'failed' || once)
              printText(`${at}  ${row.job.padEnd(13)} ${row.outcome.padEnd(7)} ${JSON.stringify(row.detail)}`);
          }
        }
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
      return once && failed > 0 ? EXIT.failure : EXIT.ok;
    });
  },
};

export const scheduleCommand: Command = {
  name: 'schedule',
  summary: 'schedule lease expiry and retention with pg_cron (settle.run_upkeep every minute)',
  help: `Usage: pg-settle schedule [--cron EXPR] [--remove] [--database-url URL] [--json]

Creates (or replaces) the pg_cron job "${CRON_JOB_NAME}", which calls settle.run_upkeep() on the
--cron schedule, so lease expiry and retention run inside the database. pg_cron runs a job as
the role that scheduled it: connect as a login role that holds settle_admin and may use pg_cron
(a superuser, or one granted USAGE on schema cron). Exit 1 when pg_cron is not installed in this
database (then run \`pg-settle maintain\` instead). See docs/operations.md, "Upkeep".

  --cron EXPR          a cron expression, or (pg_cron 1.5+) '30 seconds' (default '* * * * *')
  --remove             remove this role's job instead (default: off)

${COMMON_HELP}`,
  flags: { cron: { type: 'string' }, remove: { type: 'boolean' } },
  positionals: [],
  async run(input) {
    const schedule = stringFlag(input, 'cron') ?? '* * * * *';
    const remove = boolFlag(input, 'remove');
    if (remove && input.values.cron !== undefined) throw new UsageError('--cron goes without --remove');
    if (schedule.trim() === '') throw new UsageError('--cron must not be empty');
    return withClient(input, async (client) => {
      const pool = await client.getPool();
      const installed = await viewQuery(pool, (p) =>
        p.oneFirst(sql.type(z.object({ installed: z.boolean() }))`
          select exists (select 1 from pg_catalog.pg_extension where extname = 'pg_cron') as installed`),
      );
      if (!installed) {
        throw new CommandFailedError(
          'pg_cron is not installed in this database: install it (shared_preload_libraries = pg_cron, cron.database_name = this database, CREATE EXTENSION pg_cron) or run `pg-settle maintain`',
        );
      }
      if (remove) {
        const removed = await viewQuery(pool, (p) =>
          p.any(sql.type(z.object({ removed: z.boolean() }))`
            select cron.unschedule(j.jobid) as removed from cron.job j where j.jobname = ${CRON_JOB_NAME} and j.username = current_user`),
        );
        if (input.json) printJson({ ok: true, command: 'schedule', removed: removed.length > 0 });
        else
          printText(
            removed.length > 0
              ? `removed the pg_cron job "${CRON_JOB_NAME}"`
              : `no pg_cron job "${CRON_JOB_NAME}" of this role`,
          );
        return EXIT.ok;
      }
      const jobId = await viewQuery(pool, (p) =>
        p.oneFirst(sql.type(z.object({ jobid: z.coerce.number() }))`
          select cron.schedule(${CRON_JOB_NAME}, ${schedule}, ${CRON_COMMAND}) as jobid`),
      );
      if (input.json)
        printJson({ ok: true, command: 'schedule', jobId, jobName: CRON_JOB_NAME, schedule, sql: CRON_COMMAND });
      else printText(`scheduled pg_cron job ${jobId} "${CRON_JOB_NAME}" (${schedule}): ${CRON_COMMAND}`);
      return EXIT.ok;
    });
  },
};
