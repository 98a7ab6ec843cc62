import { sql, type DatabasePool } from 'slonik';
import { z } from 'zod';
import { boolFlag, COMMON_HELP, stringFlag, withClient, type Command } from '../command.js';
import { confirm } from '../confirm.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText, renderFields, renderTable } from '../output.js';
import { viewQuery } from '../queries.js';
import { UsageError } from '../usage-error.js';

// pg-settle feed: the settlement feed's consumers (docs/feed.md), and `feed reset`.

const laneRow = z.object({
  consumer: z.string(),
  tenants: z.array(z.string()).nullable(),
  lanes: z.number(),
  lane: z.number(),
  position: z.string(),
  leased: z.boolean(),
  lease_expires_at: z.union([z.date(), z.number(), z.string()]).nullable(),
  acked_at: z.union([z.date(), z.number(), z.string()]).nullable(),
  lag_events: z.union([z.bigint(), z.number(), z.string()]).transform(Number),
  oldest_unacked_at: z.union([z.date(), z.number(), z.string()]).nullable(),
  lag_seconds: z.number(),
});

// The horizon and the oldest transaction holding it (settle.feed_horizon, docs/feed.md).
const horizonRow = z.object({
  horizon: z.string(),
  holder_pid: z.number().nullable(),
  holder_user: z.string().nullable(),
  holder_application: z.string().nullable(),
  holder_state: z.string().nullable(),
  holder_xact_age_seconds: z.number().nullable(),
  holder_xid_age: z.number().nullable(),
  holder_consumer: z.boolean().nullable(),
  holder_consumer_name: z.string().nullable(),
  holder_lane: z.number().nullable(),
});

type Horizon = z.infer<typeof horizonRow>;

/** One line naming the session that holds the horizon ('-' when none does). */
export function describeHolder(h: Horizon): string {
  if (h.holder_pid === null && h.holder_user === null && h.holder_xid_age === null) return '-';
  const who = [h.holder_user ?? 'login hidden', h.holder_application, h.holder_state]
    .filter((x) => x !== null && x !== '')
    .join(', ');
  const age =
    h.holder_xact_age_seconds === null
      ? `${h.holder_xid_age ?? '?'} transactions old`
      : `transaction open ${h.holder_xact_age_seconds.toFixed(1)} s`;
  const consumer =
    h.holder_consumer === true
      ? `; a feed consumer's open batch${h.holder_consumer_name === null ? '' : ` (${h.holder_consumer_name}, lane ${h.holder_lane ?? '?'})`}`
      : '';
  return `${h.holder_pid === null ? 'a prepared transaction' : `pid ${h.holder_pid}`} (${who}; ${age})${consumer}`;
}

const resetRow = z.object({
  consumer: z.string(),
  lane: z.number(),
  position_before: z.string(),
  position_after: z.string(),
  events_to_deliver: z.union([z.bigint(), z.number(), z.string()]).transform(Number),
  applied: z.boolean(),
});

const asDate = (v: Date | number | string | null): Date | null => (v === null ? null : new Date(v));

async function readLanes(pool: DatabasePool) {
  return pool.any(sql.type(laneRow)`select * from settle.feed_consumers order by consumer, lane`);
}

export async function readHorizon(pool: DatabasePool) {
  return pool.one(sql.type(horizonRow)`
    select pg_snapshot_xmin(pg_current_snapshot())::text as horizon, h.pid as holder_pid, h.login as holder_user,
           h.application_name as holder_application, h.state as holder_state, h.xact_age_seconds as holder_xact_age_seconds,
           h.xid_age as holder_xid_age, h.feed_consumer as holder_consumer, h.consumer as holder_consumer_name, h.lane as holder_lane
      from (select 1) one
      left join lateral (select * from settle.feed_horizon f where f.holds_horizon limit 1) h on true`);
}

const HELP = `Usage: pg-settle feed [--database-url URL] [--json]
       pg-settle feed reset <consumer> [--to TIME | --earliest] [--dry-run] [--yes] [--database-url URL] [--json]

The settlement feed (docs/feed.md): every final outcome, delivered exactly once to each
registered consumer. Without arguments: one line per lane of each consumer (position, lease,
lag in events and seconds, oldest unacknowledged event) and the horizon (the oldest running
transaction: a long one holds every consumer back; settle.feed_horizon names it: pid, login,
application_name, how long it has been open, and whether it is a feed consumer's open batch).

feed reset moves every lane of a consumer (settle.reset_consumer, as settle_admin); without
--to or --earliest it skips to now (everything committed is passed over):
  --to TIME            deliver again every retained event written at or after TIME (ISO 8601;
                       default: none, skip to now)
  --earliest           deliver again every retained event (default: off)
  --dry-run            only show what would move and how many events each lane would deliver
                       (default: off)
  --yes                reset without asking; required when stdin is not a terminal (default: off)

${COMMON_HELP}`;

export const feedCommand: Command = {
  name: 'feed',
  summary: 'settlement feed consumers: positions, lag; feed reset',
  help: HELP,
  flags: {
    to: { type: 'string' },
    earliest: { type: 'boolean' },
    'dry-run': { type: 'boolean' },
    yes: { type: 'boolean' },
  },
  positionals: [],
  variadicPositionals: true,
  async run(input) {
    const [sub, name, ...extra] = input.positionals;
    if (sub === undefined) return show(input);
    if (sub !== 'reset')
      throw new UsageError(`feed takes no argument, or \`reset <consumer>\` (got ${JSON.stringify(sub)})`);
    if (name === undefined || extra.length > 0) throw new UsageError('feed reset takes exactly one <consumer>');
    return reset(input, name);
  },
};

async function show(input: Parameters<Command['run']>[0]): Promise<number> {
  return withClient(input, async (client) => {
    const pool = await client.getPool();
    const lanes = await viewQuery(pool, readLanes);
    const horizon = await viewQuery(pool, readHorizon);
    if (input.json) {
      printJson({
        ok: true,
        command: 'feed',
        horizon: {
          xid: horizon.horizon,
          holderPid: horizon.holder_pid,
          holderUser: horizon.holder_user,
          holderApplicationName: horizon.holder_application,
          holderState: horizon.holder_state,
          holderTransactionAgeSeconds: horizon.holder_xact_age_seconds,
          holderXidAge: horizon.holder_xid_age,
          holderIsFeedConsumer: horizon.holder_consumer,
          holderConsumer: horizon.holder_consumer_name,
          holderLane: horizon.holder_lane,
        },
        lanes: lanes.map((l) => ({
          consumer: l.consumer,
          tenants: l.tenants,
          lanes: l.lanes,
          lane: l.lane,
          position: l.position,
          leased: l.leased,
          leaseExpiresAt: asDate(l.lease_expires_at),
          ackedAt: asDate(l.acked_at),
          lagEvents: l.lag_events,
          oldestUnackedAt: asDate(l.oldest_unacked_at),
          lagSeconds: l.lag_seconds,
        })),
      });
      return EXIT.ok;
    }
    if (lanes.length === 0) {
      printText('no feed consumers registered (settle.register_consumer, as settle_admin)');
    } else {
      printText(
        renderTable(
          ['consumer', 'lane', 'position', 'leased', 'lag events', 'lag s', 'oldest unacked', 'acked at'],
          lanes.map((l) => [
            l.consumer,
            `${l.lane}/${l.lanes}`,
            l.position,
            l.leased ? 'yes' : 'no',
            l.lag_events,
            l.lag_seconds.toFixed(1),
            asDate(l.oldest_unacked_at),
            asDate(l.acked_at),
          ]),
        ),
      );
    }
    printText('');
    printText(
      renderFields([
        ['horizon (xid)', horizon.horizon],
        ['held by', describeHolder(horizon)],
      ]),
    );
    return EXIT.ok;
  });
}

async function reset(input: Parameters<Command['run']>[0], name: string): Promise<number> {
  const to = stringFlag(input, 'to');
  const earliest = boolFlag(input, 'earliest');
  if (to !== undefined && earliest) throw new UsageError('feed reset takes --to or --earliest, not both');
  if (to !== undefined && Number.isNaN(Date.parse(to)))
    throw new UsageError(`--to must be an ISO 8601 time (got ${JSON.stringify(to)})`);
  const toTime = earliest ? '-infinity' : (to ?? null);
  const dryRun = boolFlag(input, 'dry-run');
  return withClient(input, async (client) => {
    const pool = await client.getPool();
    const call = (dry: boolean) =>
      viewQuery(pool, (p) =>
        p.any(
          sql.type(
            resetRow,
          )`select * from settle.reset_consumer(name => ${name}, to_time => ${toTime}::timestamptz, dry_run => ${dry})`,
        ),
      );
    const preview = await call(true);
    const total = preview.reduce((n, r) => n + r.events_to_deliver, 0);
    const what =
      toTime === null
        ? 'skip to now'
        : toTime === '-infinity'
          ? 'deliver every retained event again'
          : `deliver again from ${toTime}`;
    const table = (rows: typeof preview) =>
      renderTable(
        ['lane', 'position before', 'position after', 'events to deliver'],
        rows.map((r) => [r.lane, r.position_before, r.position_after, r.events_to_deliver]),
      );
    if (dryRun) {
      if (input.json)
        printJson({
          ok: true,
          command: 'feed reset',
          consumer: name,
          dryRun: true,
          toTime,
          lanes: preview,
          eventsToDeliver: total,
        });
      else printText(`dry run: ${name}: ${what}; ${total} events to deliver; nothing changed\n${table(preview)}`);
      return EXIT.ok;
    }
    const go = await confirm(`reset consumer ${name} (${what}; ${total} events to deliver)?`, {
      yes: boolFlag(input, 'yes'),
      command: 'feed reset',
    });
    if (!go) {
      if (input.json) printJson({ ok: false, command: 'feed reset', consumer: name, aborted: true });
      else printText('aborted: nothing changed');
      return EXIT.failure;
    }
    const applied = await call(false);
    if (input.json)
      printJson({ ok: true, command: 'feed reset', consumer: name, dryRun: false, toTime, lanes: applied });
    else printText(`reset ${name}: ${what}\n${table(applied)}`);
    return EXIT.ok;
  });
}
