import { summarizeRuns } from './summary.js';
import type { BenchReport, RunResult } from './types.js';

/**
 * Throughput (tps) against client count, one line per scenario label, as a self-contained SVG
 * written by hand (no chart dependency). A label measured at one client count is a dot; with
 * several rounds a point is the median tps of its rounds.
 */

const WIDTH = 760;
const HEIGHT = 440;
const MARGIN = { left: 70, right: 170, top: 40, bottom: 50 };
const COLORS = [
  '#1f77b4',
  '#d62728',
  '#2ca02c',
  '#ff7f0e',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf',
  '#393b79',
  '#637939',
];

const escapeXml = (s: string): string =>
  s.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;').replaceAll('"', '&quot;');

function niceMax(value: number): number {
  if (value <= 0) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  const step = [1, 2, 2.5, 5, 10].find((s) => s * magnitude >= value) ?? 10;
  return step * magnitude;
}

export function renderThroughputSvg(runs: readonly RunResult[], title: string): string {
  const series = new Map<string, { clients: number; tps: number }[]>();
  for (const summary of summarizeRuns(runs)) {
    const points = series.get(summary.label) ?? [];
    points.push({ clients: summary.clients, tps: summary.tpsMedian });
    series.set(summary.label, points);
  }
  const clientCounts = [...new Set(runs.map((r) => r.clients))].sort((a, b) => a - b);
  const maxTps = niceMax(Math.max(1, ...[...series.values()].flat().map((p) => p.tps)));
  const plotW = WIDTH - MARGIN.left - MARGIN.right;
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  // Client counts on a log2 axis (8, 32, 64 spread evenly enough); a single count sits mid-axis.
  const logs = clientCounts.map((c) => Math.log2(c));
  const minLog = Math.min(...logs);
  const maxLog = Math.max(...logs);
  const x = (clients: number): number =>
    MARGIN.left + (maxLog === minLog ? plotW / 2 : ((Math.log2(clients) - minLog) / (maxLog - minLog)) * plotW);
  const y = (tps: number): number => MARGIN.top + plotH - (tps / maxTps) * plotH;

  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="sans-serif" font-size="12">`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="white"/>`,
    `<text x="${WIDTH / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${escapeXml(title)}</text>`,
  ];
  for (let i = 0; i <= 5; i++) {
    const tps = (maxTps / 5) * i;
    parts.push(
      `<line x1="${MARGIN.left}" x2="${MARGIN.left + plotW}" y1="${y(tps)}" y2="${y(tps)}" stroke="#ddd"/>`,
      `<text x="${MARGIN.left - 8}" y="${y(tps) + 4}" text-anchor="end">${Math.round(tps)}</text>`,
    );
  }
  for (const clients of clientCounts) {
    parts.push(
      `<line x1="${x(clients)}" x2="${x(clients)}" y1="${MARGIN.top}" y2="${MARGIN.top + plotH}" stroke="#eee"/>`,
      `<text x="${x(clients)}" y="${MARGIN.top + plotH + 18}" text-anchor="middle">${clients}</text>`,
    );
  }
  parts.push(
    `<line x1="${MARGIN.left}" x2="${MARGIN.left + plotW}" y1="${MARGIN.top + plotH}" y2="${MARGIN.top + plotH}" stroke="black"/>`,
    `<line x1="${MARGIN.left}" x2="${MARGIN.left}" y1="${MARGIN.top}" y2="${MARGIN.top + plotH}" stroke="black"/>`,
    `<text x="${MARGIN.left + plotW / 2}" y="${HEIGHT - 12}" text-anchor="middle">clients (log scale)</text>`,
    `<text transform="translate(18 ${MARGIN.top + plotH / 2}) rotate(-90)" text-anchor="middle">transactions per second</text>`,
  );
  [...series.entries()].forEach(([label, points], index) => {
    const color = COLORS[index % COLORS.length] ?? 'black';
    const sorted = [...points].sort((a, b) => a.clients - b.clients);
    if (sorted.length > 1) {
      const d = sorted
        .map((p, i) => `${i === 0 ? 'M' : 'L'}${x(p.clients).toFixed(1)},${y(p.tps).toFixed(1)}`)
        .join(' ');
      parts.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="2"/>`);
    }
    for (const p of sorted) {
      parts.push(
        `<circle cx="${x(p.clients).toFixed(1)}" cy="${y(p.tps).toFixed(1)}" r="4" fill="${color}"><title>${escapeXml(label)} @ ${p.clients} clients: ${Math.round(p.tps)} tps</title></circle>`,
      );
    }
    const legendY = MARGIN.top + 10 + index * 18;
    parts.push(
      `<line x1="${WIDTH - MARGIN.right + 15}" x2="${WIDTH - MARGIN.right + 35}" y1="${legendY}" y2="${legendY}" stroke="${color}" stroke-width="3"/>`,
      `<text x="${WIDTH - MARGIN.right + 40}" y="${legendY + 4}">${escapeXml(label)}</text>`,
    );
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

/** The throughput chart of a whole run, titled with its kind and the machine's CPUs. */
export function renderReportSvg(report: BenchReport): string {
  return renderThroughputSvg(
    report.runs,
    `pg-settle throughput vs clients (${report.quick ? 'quick' : 'full'} run, ${report.machine.cpus} CPUs)`,
  );
}
