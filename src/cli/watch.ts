import type { SettleClient, SettleMetrics, TenantStats } from '../client/types.js';
import { renderTable, toJsonText } from './output.js';

/**
 * `pg-settle stats --watch`: the settle.metrics gauges (partial indexes, cheap) every
 * `intervalMs`, and the per-tenant census of settle.stats (a scan of every operation) every
 * `censusIntervalMs`, with rates from the difference between two censuses. On a terminal the
 * screen is redrawn in place; otherwise (a pipe, a file, `watch`-less cron) each refresh is
 * printed as a plain block, and with --json as one JSON document per line.
 */
export interface WatchOptions {
  readonly intervalMs: number;
  readonly censusIntervalMs: number;
  /** Stop after this many refreshes (default: until SIGINT/SIGTERM). */
  readonly count: number | null;
  readonly json: boolean;
  readonly out: NodeJS.WriteStream | NodeJS.WritableStream;
  readonly tty: boolean;
  /** Resolves when the watch should stop early (a signal). */
  readonly stopped: Promise<void>;
}

interface Census {
  readonly at: number;
  readonly tenants: readonly TenantStats[];
}

interface Totals {
  readonly operations: bigint;
  readonly completed: bigint;
  readonly failed: bigint;
  readonly attempts: bigint;
}

const CLEAR = '\x1b[H\x1b[2J';

export async function watchStats(client: SettleClient, options: WatchOptions): Promise<void> {
  let census: Census | null = null;
  let previous: Census | null = null;
  let stop = false;
  void options.stopped.then(() => {
    stop = true;
  });
  for (let refresh = 1; !stop; refresh += 1) {
    const now = Date.now();
    const metrics = await client.metrics();
    if (census === null || now - census.at >= options.censusIntervalMs) {
      previous = census;
      census = { at: now, tenants: await client.stats() };
    }
    const rates = previous === null ? null : ratesBetween(previous, census);
    if (options.json) {
      options.out.write(
        `${toJsonText({ ok: true, command: 'stats', at: new Date(now).toISOString(), metrics, tenants: census.tenants, ratesPerSecond: rates }).replace(/\n\s*/g, ' ')}\n`,
      );
    } else {
      const text = renderWatch(new Date(now), metrics, census, rates, options);
      options.out.write(options.tty ? `${CLEAR}${text}\n` : `${text}\n\n`);
    }
    if (options.count !== null && refresh >= options.count) break;
    await Promise.race([new Promise((resolve) => setTimeout(resolve, options.intervalMs)), options.stopped]);
  }
}

function totals(tenants: readonly TenantStats[]): Totals {
  return tenants.reduce(
    (sum, t) => ({
      operations: sum.operations + t.operations,
      completed: sum.completed + t.completed,
      failed: sum.failed + t.failed,
      attempts: sum.attempts + t.attempts,
    }),
    { operations: 0n, completed: 0n, failed: 0n, attempts: 0n },
  );
}

/** Per-second rates between two censuses (purges make a difference negative: shown as 0). */
function ratesBetween(before: Census, after: Census): Record<keyof Totals, number> {
  const seconds = Math.max(0.001, (after.at - before.at) / 1000);
  const a = totals(before.tenants);
  const b = totals(after.tenants);
  const rate = (x: bigint, y: bigint): number => Math.max(0, Math.round((Number(y - x) / seconds) * 10) / 10);
  return {
    operations: rate(a.operations, b.operations),
    completed: rate(a.completed, b.completed),
    failed: rate(a.failed, b.failed),
    attempts: rate(a.attempts, b.attempts),
  };
}

/** 0s, 42s, 3m07s, 2h05m, 3d04h. */
export function formatAge(seconds: number): string {
  const s = Math.floor(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
  return `${Math.floor(s / 86_400)}d${String(Math.floor((s % 86_400) / 3600)).padStart(2, '0')}h`;
}

function renderWatch(
  at: Date,
  m: SettleMetrics,
  census: Census,
  rates: Record<keyof Totals, number> | null,
  o: WatchOptions,
): string {
  const every = (ms: number): string => formatAge(ms / 1000).replace(/^0s$/, `${ms}ms`);
  const unknownAge = m.operationsUnknown > 0n ? ` (oldest ${formatAge(m.oldestUnknownAgeSeconds)})` : '';
  const deadAge =
    m.deadLettersFailed + m.deadLettersNeedsReconciliation > 0n
      ? ` (oldest ${formatAge(m.oldestDeadLetterAgeSeconds)})`
      : '';
  const window = formatAge(m.recentWindowSeconds);
  const lines = [
    `pg-settle stats --watch  ${at.toISOString()}  gauges every ${every(o.intervalMs)}, census every ${every(o.censusIntervalMs)}`,
    '',
    `in flight ${m.operationsInFlight}   lapsed leases ${m.lapsedLeases}   unknown ${m.operationsUnknown}${unknownAge}   conflict ${m.operationsConflict}`,
    `dead letters: failed ${m.deadLettersFailed}, needs reconciliation ${m.deadLettersNeedsReconciliation}${deadAge}`,
    `last ${window}: conflicts ${m.conflictsRecent}, refused observations ${m.refusedObservationsRecent}`,
    rates === null
      ? 'rates: after the second census'
      : `rates /s: new operations ${rates.operations}, completed ${rates.completed}, failed ${rates.failed}, attempts ${rates.attempts}`,
    '',
  ];
  // The census is up to --census-interval old, the gauges are fresh: a lease that lapsed in
  // between would show as in flight in one and lapsed in the other on the same screen. So lease
  // counts appear once, in the gauges; the table carries what a lapse does not change, and says
  // how old it is.
  lines.push(
    `per tenant (settle.stats, read ${formatAge((at.getTime() - census.at) / 1000)} ago; live and lapsed leases: the gauges above)`,
  );
  if (census.tenants.length === 0) {
    lines.push('no operations');
  } else {
    lines.push(
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
          'attempts',
        ],
        census.tenants.map((r) => [
          r.tenant,
          r.operations,
          r.pending,
          r.running,
          r.unknown,
          r.conflict,
          r.failed,
          r.completed,
          r.deadLettered,
          r.attempts,
        ]),
      ),
    );
  }
  return lines.join('\n');
}
