import { median } from './targets.js';
import type { RunResult } from './types.js';

/**
 * The ladder's table (bench/ladder/run.ts): per row, its rate against the Stripe pattern and
 * against the row it is compared with (its base: the previous step), each the median of the
 * per-round ratios of runs in the same round, at every client count; the server CPU per cycle
 * of one backend and its ratio to the base's (median of per-round ratios); WAL bytes per
 * operation (median at the first client count) and its difference from the base; the top wait
 * events.
 */

export const STRIPE_LABEL = 'stripe';

export interface LadderRowSpec {
  readonly label: string;
  readonly title: string;
  /** The label this row's delta is measured against (null: none). */
  readonly base: string | null;
}

export interface WaitShare {
  readonly wait: string;
  readonly share: number;
}

export interface LadderCell {
  /** Median tps (for a batch: keys per second) over the rounds. */
  readonly tps: number | null;
  /** Median of the per-round ratios to the Stripe pattern. */
  readonly vsStripe: number | null;
  readonly vsStripeRounds: readonly number[];
  /** Median of the per-round ratios to the base, minus one (-0.05: 5% slower than its base). */
  readonly delta: number | null;
}

/** Server CPU per cycle (us) of each row, indexed by round - 1 (undefined: not measured in that round). */
export type CpuByRound = ReadonlyMap<string, readonly (number | undefined)[]>;

export interface LadderRow extends LadderRowSpec {
  readonly byClients: Readonly<Record<number, LadderCell>>;
  /** Median server CPU per cycle (us) over the rounds. */
  readonly cpuUs: number | null;
  /** Median of the per-round CPU ratios to the base, minus one (+0.05: 5% more CPU than its base). */
  readonly cpuDelta: number | null;
  /** Median WAL bytes per operation at the first client count. */
  readonly walPerOp: number | null;
  /** walPerOp minus the base's. */
  readonly walDelta: number | null;
  readonly waits: readonly WaitShare[];
}

const tpsOf = (runs: readonly RunResult[], label: string, clients: number, round: number): number | undefined =>
  runs.find((r) => r.label === label && r.clients === clients && r.round === round && r.tps > 0)?.tps;

/** Per round in which both were measured at `clients`: num tps / den tps. */
export function perRoundRatios(runs: readonly RunResult[], num: string, den: string, clients: number): number[] {
  const rounds = [...new Set(runs.filter((r) => r.clients === clients).map((r) => r.round))].sort((a, b) => a - b);
  return rounds.flatMap((round) => {
    const a = tpsOf(runs, num, clients, round);
    const b = tpsOf(runs, den, clients, round);
    return a === undefined || b === undefined ? [] : [a / b];
  });
}

const walOf = (runs: readonly RunResult[], label: string, clients: number): number | null =>
  median(
    runs
      .filter((r) => r.label === label && r.clients === clients && r.walBytesPerOp !== null)
      .map((r) => r.walBytesPerOp ?? 0),
  );

export function summarizeLadder(
  runs: readonly RunResult[],
  specs: readonly LadderRowSpec[],
  clientCounts: readonly number[],
  waits: ReadonlyMap<string, readonly WaitShare[]> = new Map(),
  cpu: CpuByRound = new Map(),
): LadderRow[] {
  const first = clientCounts[0] ?? 0;
  const measured = (xs: readonly (number | undefined)[] | undefined): number[] =>
    (xs ?? []).filter((x): x is number => x !== undefined);
  return specs.map((spec) => {
    const byClients: Record<number, LadderCell> = {};
    for (const clients of clientCounts) {
      const vsStripeRounds = perRoundRatios(runs, spec.label, STRIPE_LABEL, clients);
      const delta = spec.base === null ? null : median(perRoundRatios(runs, spec.label, spec.base, clients));
      byClients[clients] = {
        tps: median(runs.filter((r) => r.label === spec.label && r.clients === clients).map((r) => r.tps)),
        vsStripe: median(vsStripeRounds),
        vsStripeRounds,
        delta: delta === null ? null : delta - 1,
      };
    }
    const walPerOp = walOf(runs, spec.label, first);
    const baseWal = spec.base === null ? null : walOf(runs, spec.base, first);
    const mine = cpu.get(spec.label) ?? [];
    const base = spec.base === null ? [] : (cpu.get(spec.base) ?? []);
    const cpuRatios = mine.flatMap((us, i) => {
      const b = base[i];
      return us === undefined || b === undefined ? [] : [us / b];
    });
    const cpuRatio = median(cpuRatios);
    return {
      ...spec,
      byClients,
      cpuUs: median(measured(mine)),
      cpuDelta: cpuRatio === null ? null : cpuRatio - 1,
      walPerOp,
      walDelta: walPerOp === null || baseWal === null ? null : walPerOp - baseWal,
      waits: waits.get(spec.label) ?? [],
    };
  });
}

const ratio = (x: number | null): string => (x === null ? '-' : `${x.toFixed(2)}x`);
const percent = (x: number | null): string =>
  x === null ? '' : `${x >= 0 ? '+' : '−'}${Math.abs(x * 100).toFixed(1)}%`;
const bytes = (x: number | null): string => (x === null ? '-' : x.toFixed(0));
const signedBytes = (x: number | null): string => (x === null ? '' : `${x >= 0 ? '+' : '−'}${Math.abs(x).toFixed(0)}`);

/** The table as Markdown: one row per step, ratios at each client count, WAL, waits. */
export function renderLadderTable(rows: readonly LadderRow[], clientCounts: readonly number[], topWaits = 3): string {
  const waitClients = clientCounts[clientCounts.length - 1] ?? 0;
  const head = [
    'step',
    ...clientCounts.flatMap((c) => [`${c} clients: x Stripe`, `${c}: vs previous`]),
    'server CPU us/op',
    'vs previous',
    `WAL B/op (${clientCounts[0] ?? '-'} clients)`,
    'vs previous',
    `top waits at ${waitClients} clients`,
  ];
  const lines = [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
  for (const row of rows) {
    const cells = [
      `${row.label}: ${row.title}`,
      ...clientCounts.flatMap((c) => {
        const cell = row.byClients[c];
        return [ratio(cell?.vsStripe ?? null), percent(cell?.delta ?? null)];
      }),
      row.cpuUs === null ? '-' : row.cpuUs.toFixed(0),
      percent(row.cpuDelta),
      bytes(row.walPerOp),
      signedBytes(row.walDelta),
      row.waits
        .slice(0, topWaits)
        .map((w) => `${w.wait} ${(w.share * 100).toFixed(0)}%`)
        .join(', '),
    ];
    lines.push(`| ${cells.join(' | ')} |`);
  }
  return lines.join('\n');
}
