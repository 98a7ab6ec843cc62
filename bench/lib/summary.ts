import { median } from './targets.js';
import type { RunResult } from './types.js';

/** One scenario label at one client count over its rounds: medians and spread. */
export interface RunSummary {
  readonly label: string;
  readonly clients: number;
  readonly rounds: number;
  readonly tpsMedian: number;
  readonly tpsMin: number;
  readonly tpsMax: number;
  readonly walBytesPerOp: number | null;
  readonly fpiPerOp: number | null;
  readonly latencyAverageMs: number | null;
  readonly p99Ms: number | null;
  readonly checkpointsDuring: number;
}

const medianOf = (values: readonly (number | null)[]): number | null =>
  median(values.filter((v): v is number => v !== null));

/** Groups runs by (label, clients) in first-seen order. */
export function summarizeRuns(runs: readonly RunResult[]): RunSummary[] {
  const groups = new Map<string, RunResult[]>();
  for (const run of runs) {
    const id = `${run.label}\u0000${run.clients}`;
    groups.set(id, [...(groups.get(id) ?? []), run]);
  }
  return [...groups.values()].map((group) => {
    const first = group[0] as RunResult;
    const tps = group.map((r) => r.tps);
    return {
      label: first.label,
      clients: first.clients,
      rounds: group.length,
      tpsMedian: median(tps) ?? 0,
      tpsMin: Math.min(...tps),
      tpsMax: Math.max(...tps),
      walBytesPerOp: medianOf(group.map((r) => r.walBytesPerOp)),
      fpiPerOp: medianOf(group.map((r) => r.fpiPerOp)),
      latencyAverageMs: medianOf(group.map((r) => r.latencyAverageMs)),
      p99Ms: medianOf(group.map((r) => r.p99Ms)),
      checkpointsDuring: group.reduce((sum, r) => sum + r.checkpointsDuring, 0),
    };
  });
}
