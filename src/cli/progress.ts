/**
 * Progress for long work, on stderr (stdout stays for the result, so `--json` output is clean):
 * a redrawn bar on a TTY, plain periodic lines otherwise (logs and CI). Every line says what is
 * counted: `purge 300/1000 operations (30%)  412/s  elapsed 0.7s  ETA 1.7s`.
 */
export interface Progress {
  /** `total` undefined: the total is not known (no bar, no ETA). */
  update(done: number, total: number | undefined, note?: string): void;
  finish(): void;
}

export interface ProgressOptions {
  /** What is counted, plural (`operations`, `leases`). */
  readonly unit?: string;
  /** False: print nothing. */
  readonly enabled?: boolean;
  /** Plain-line interval when stderr is not a TTY (default $PG_SETTLE_PROGRESS_EVERY_MS, else 2000 ms). */
  readonly lineEveryMs?: number;
}

const TTY_REDRAW_MS = 100;
const BAR_WIDTH = 28;

export function formatSeconds(ms: number): string {
  if (!Number.isFinite(ms)) return '-';
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  const m = Math.floor(s / 60);
  return `${m}m${String(Math.round(s - m * 60)).padStart(2, '0')}s`;
}

/** One progress line (exported for tests): label, done/total unit, percent, rate, elapsed, ETA. */
export function progressText(
  label: string,
  unit: string,
  done: number,
  total: number | undefined,
  elapsedMs: number,
  note?: string,
): string {
  const rate = elapsedMs > 0 ? (done * 1000) / elapsedMs : 0;
  const parts = [`${label} ${done}${total === undefined ? '' : `/${total}`}${unit === '' ? '' : ` ${unit}`}`];
  if (total !== undefined && total > 0) parts[0] += ` (${Math.round(Math.min(1, done / total) * 100)}%)`;
  parts.push(`${rate >= 100 ? Math.round(rate) : rate.toFixed(1)}/s`, `elapsed ${formatSeconds(elapsedMs)}`);
  if (total !== undefined && rate > 0) parts.push(`ETA ${formatSeconds((Math.max(0, total - done) / rate) * 1000)}`);
  if (note !== undefined) parts.push(note);
  return parts.join('  ');
}

export function createProgress(label: string, options: ProgressOptions | boolean = {}): Progress {
  const opts: ProgressOptions = typeof options === 'boolean' ? { enabled: options } : options;
  if (opts.enabled === false) return { update() {}, finish() {} };
  const stream = process.stderr;
  const tty = stream.isTTY === true;
  const started = Date.now();
  const unit = opts.unit ?? '';
  // PG_SETTLE_PROGRESS_EVERY_MS: plain-line interval for logs (0: a line per update).
  const fromEnv = Number(process.env.PG_SETTLE_PROGRESS_EVERY_MS ?? Number.NaN);
  const lineEveryMs = opts.lineEveryMs ?? (Number.isFinite(fromEnv) && fromEnv >= 0 ? fromEnv : 2000);
  let last = tty ? 0 : started;
  let drawn = false;
  return {
    update(done, total, note) {
      const now = Date.now();
      if (now - last < (tty ? TTY_REDRAW_MS : lineEveryMs)) return;
      last = now;
      const text = progressText(label, unit, done, total, now - started, note);
      if (tty) {
        const fraction = total !== undefined && total > 0 ? Math.min(1, done / total) : 0;
        const filled = Math.round(fraction * BAR_WIDTH);
        const bar = total === undefined ? '' : `[${'#'.repeat(filled)}${'.'.repeat(BAR_WIDTH - filled)}] `;
        stream.write(`\r\x1b[2K${bar}${text}`);
        drawn = true;
      } else {
        stream.write(`${text}\n`);
      }
    },
    finish() {
      if (tty && drawn) stream.write('\r\x1b[2K');
    },
  };
}
