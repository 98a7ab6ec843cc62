import { html, type Html } from './escape.js';
import { EDGE, type MinuteRow } from './overview-data.js';
import type { AttemptRow, AuditRow, OperationRow } from './operation-data.js';

// Charts drawn by the server as inline SVG (no script, no external service): the last hour's
// outcomes per minute, and an operation's attempts on a time axis. Every text in them goes
// through the same escaping as the rest of the page (html``).

const OUTCOMES = ['completed', 'failed', 'unknown', 'conflict'] as const;

const fmt = (n: number): string => (Math.round(n * 10) / 10).toString();

/** What a minute's mark says (overview-data.ts, EDGE). */
const MARKED: Readonly<Record<string, string>> = {
  '≈': `, estimated from its first and last ${EDGE}`,
  '≥': `, at least: its operations arrive in batches of one timestamp, so the first ${2 * EDGE} give no rate`,
};

/** Stacked bars, one per minute of the last hour, by the status operations reached. */
export function throughputChart(rows: readonly MinuteRow[], now: Date): Html {
  const width = 720;
  const height = 180;
  const left = 44;
  const bottom = 22;
  // The top label sits right of the axis: it is wider than the margin.
  const end = Math.floor(now.getTime() / 60_000) * 60_000;
  const start = end - 59 * 60_000;
  const byMinute = new Map<number, Map<string, number>>();
  const marks = new Map<number, string>();
  for (const r of rows) {
    const m = r.minute.getTime();
    if (m < start || m > end) continue;
    const slot = byMinute.get(m) ?? new Map<string, number>();
    slot.set(r.status, (slot.get(r.status) ?? 0) + r.n);
    byMinute.set(m, slot);
    if (r.kind === 'estimated' && !marks.has(m)) marks.set(m, '≈');
    if (r.kind === 'at-least') marks.set(m, '≥');
  }
  const totals = [...byMinute.values()].map((s) => [...s.values()].reduce((a, b) => a + b, 0));
  const max = Math.max(1, ...totals);
  const barWidth = (width - left) / 60;
  const plot = height - bottom;
  const bars: Html[] = [];
  for (let i = 0; i < 60; i += 1) {
    const minute = start + i * 60_000;
    const slot = byMinute.get(minute);
    if (slot === undefined) continue;
    let y = plot;
    for (const outcome of OUTCOMES) {
      const n = slot.get(outcome) ?? 0;
      if (n === 0) continue;
      const h = (n / max) * (plot - 8);
      y -= h;
      bars.push(
        html`<rect class="bar ${outcome}" x="${fmt(left + i * barWidth + 1)}" y="${fmt(y)}" width="${fmt(barWidth - 2)}" height="${fmt(h)}"><title>${new Date(minute).toISOString().slice(11, 16)} UTC: ${marks.get(minute) ?? ''}${n} ${outcome} (${fmt(n / 60)}/s${MARKED[marks.get(minute) ?? ''] ?? ''})</title></rect>`,
      );
    }
  }
  const perSecondMax = (max / 60).toFixed(max < 60 ? 2 : 1);
  const sum = (outcome: string): number =>
    rows.filter((r) => r.status === outcome && r.minute.getTime() >= start).reduce((a, r) => a + r.n, 0);
  const legend = OUTCOMES.map(
    (o, i) =>
      html`<g transform="translate(${left + i * 130},${height - 4})"><rect class="bar ${o}" x="0" y="-9" width="10" height="10"></rect><text x="14" y="0">${o} ${marks.size > 0 && sum(o) > 0 ? (marks.size > 0 && [...marks.values()].includes('≥') ? '≥' : '≈') : ''}${sum(o)}</text></g>`,
  );
  return html`<svg class="chart" role="img" aria-label="operations per minute by outcome, last hour (the table below has the figures)" aria-describedby="chart-table" viewBox="0 0 ${width} ${height + 14}" width="${width}" height="${height + 14}">
<line class="axis" x1="${left}" y1="${plot}" x2="${width}" y2="${plot}"></line>
<text class="tick" x="${left + 4}" y="12">${max}/min (${perSecondMax}/s)</text>
<text class="tick" x="${left - 4}" y="${plot}" text-anchor="end">0</text>
<text class="tick" x="${left}" y="${plot + 14}">-60 min</text>
<text class="tick" x="${width}" y="${plot + 14}" text-anchor="end">now</text>
${bars}
<g class="legend" transform="translate(0,14)">${legend}</g>
</svg>
${chartTable(byMinute, marks, start)}`;
}

/** The chart as text: one row per minute that had operations, newest first. */
function chartTable(
  byMinute: ReadonlyMap<number, ReadonlyMap<string, number>>,
  marks: ReadonlyMap<number, string>,
  start: number,
): Html {
  const minutes = [...byMinute.keys()].filter((m) => m >= start).sort((a, b) => b - a);
  return html`<details id="chart-table"><summary>The chart as a table (${minutes.length} minute(s) with operations)</summary>
<table><tr><th>minute (UTC)</th>${OUTCOMES.map((o) => html`<th class="num">${o}</th>`)}<th>counted</th></tr>
${minutes.map((m) => html`<tr><td>${new Date(m).toISOString().slice(11, 16)}</td>${OUTCOMES.map((o) => html`<td class="num">${byMinute.get(m)?.get(o) ?? 0}</td>`)}<td>${marks.get(m) === '≈' ? `estimated from its first and last ${EDGE}` : marks.get(m) === '≥' ? 'at least (batches of one timestamp)' : 'exactly'}</td></tr>`)}
</table></details>`;
}

function attemptMarks(audit: readonly AuditRow[] | null, attempt: number): AuditRow[] {
  return (audit ?? []).filter((r) => r.attempt === attempt);
}

/**
 * One row per attempt: the bar from its claim to its end (or, for the attempt holding the lease,
 * to the lease's expiry; hatched once lapsed), a dot at its observation, a diamond at a late
 * result, crosses at fenced calls, ticks at heartbeats (as the audit trail records them), and the
 * end reason (superseded, expired, fenced, settled elsewhere) as its label.
 */
export function attemptTimeline(
  op: OperationRow,
  attempts: readonly AttemptRow[],
  audit: readonly AuditRow[] | null,
  now: Date,
): Html {
  if (attempts.length === 0) return html`<p class="muted">No attempt yet.</p>`;
  const times: number[] = [];
  for (const a of attempts) {
    times.push(a.claimed_at.getTime());
    if (a.ended_at !== null) times.push(a.ended_at.getTime());
    if (a.observed_at !== null) times.push(a.observed_at.getTime());
  }
  for (const r of audit ?? []) times.push(r.at.getTime());
  const open = attempts.find((a) => a.attempt === op.attempt && a.ended_at === null);
  if (open !== undefined && op.lease_expires_at !== null) times.push(op.lease_expires_at.getTime());
  if (open !== undefined) times.push(now.getTime());
  const t0 = Math.min(...times);
  const t1 = Math.max(t0 + 1000, ...times);
  const width = 720;
  const left = 90;
  const row = 26;
  const height = attempts.length * row + 30;
  const x = (t: number): number => left + ((t - t0) / (t1 - t0)) * (width - left - 10);
  const rows = attempts.map((a, i) => {
    const y = 8 + i * row;
    const isOpen = a === open;
    const endTime =
      a.ended_at?.getTime() ?? (isOpen && op.lease_expires_at !== null ? op.lease_expires_at.getTime() : now.getTime());
    const lapsed = isOpen && op.lease_expires_at !== null && op.lease_expires_at.getTime() < now.getTime();
    const kind = a.settled ? 'settled' : (a.end_reason ?? (isOpen ? (lapsed ? 'lapsed' : 'leased') : 'open'));
    const marks = attemptMarks(audit, a.attempt);
    const heartbeats = marks.filter((r) => r.event === 'heartbeat' && r.outcome !== 'fenced');
    const fenced = marks.filter((r) => r.outcome === 'fenced');
    const late = marks.filter((r) => r.outcome === 'already_settled' || r.event === 'late_result');
    const label = [
      a.observation ?? 'no observation',
      a.end_reason ?? (isOpen ? (lapsed ? 'lease lapsed' : 'lease held') : null),
    ]
      .filter((s) => s !== null)
      .join(', ');
    return html`<g class="attempt" data-attempt="${a.attempt}">
<text class="tick" x="${left - 6}" y="${y + 13}" text-anchor="end">attempt ${a.attempt}</text>
<rect class="span ${kind.replace(/[^a-z_]/g, '')}${lapsed ? ' lapsed' : ''}" x="${fmt(x(a.claimed_at.getTime()))}" y="${y}" width="${fmt(Math.max(2, x(endTime) - x(a.claimed_at.getTime())))}" height="16"><title>attempt ${a.attempt} (${a.worker ?? 'no worker'}): claimed ${a.claimed_at.toISOString()}, ${a.ended_at === null ? (isOpen && op.lease_expires_at !== null ? `lease until ${op.lease_expires_at.toISOString()}` : 'not ended') : `ended ${a.ended_at.toISOString()}`}; ${label}</title></rect>
${heartbeats.map((h) => html`<line class="heartbeat" x1="${fmt(x(h.at.getTime()))}" x2="${fmt(x(h.at.getTime()))}" y1="${y - 2}" y2="${y + 18}"><title>heartbeat ${h.at.toISOString()}</title></line>`)}
${a.observed_at === null ? '' : html`<circle class="observation ${a.observation ?? ''}" cx="${fmt(x(a.observed_at.getTime()))}" cy="${y + 8}" r="5"><title>observed ${a.observation ?? ''} at ${a.observed_at.toISOString()}</title></circle>`}
${late.map((l) => html`<path class="late" d="M${fmt(x(l.at.getTime()))} ${y} l6 8 l-6 8 l-6 -8 z"><title>late result at ${l.at.toISOString()} (${l.event}: ${l.outcome})</title></path>`)}
${a.late_result === null || a.late_result === undefined || late.length > 0 ? '' : html`<path class="late" d="M${fmt(x(endTime))} ${y} l6 8 l-6 8 l-6 -8 z"><title>late result recorded</title></path>`}
${fenced.map((f) => html`<path class="fenced" d="M${fmt(x(f.at.getTime()) - 5)} ${y + 3} l10 10 m0 -10 l-10 10"><title>${f.event} fenced at ${f.at.toISOString()}</title></path>`)}
<text class="label" x="${fmt(Math.min(width - 160, x(endTime) + 8))}" y="${y + 13}">${label}</text>
</g>`;
  });
  const axisY = attempts.length * row + 12;
  return html`<svg class="timeline" role="img" aria-label="attempts on a time axis (the attempts table below has the same)" aria-describedby="attempts" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}">
<line class="axis" x1="${left}" y1="${axisY}" x2="${width - 10}" y2="${axisY}"></line>
<text class="tick" x="${left}" y="${axisY + 14}">${new Date(t0).toISOString().replace('T', ' ').slice(0, 19)}</text>
<text class="tick" x="${width - 10}" y="${axisY + 14}" text-anchor="end">${new Date(t1).toISOString().replace('T', ' ').slice(0, 19)} UTC</text>
${rows}
</svg>`;
}
