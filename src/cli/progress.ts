/**
 * Progress for long work, on stderr: a redrawn bar on a TTY, plain periodic lines otherwise
 * (logs and CI). Silent when `enabled` is false.
 */
export interface Progress {
  update(done: number, total: number, note?: string): void;
  finish(): void;
}

const TTY_REDRAW_MS = 100;
const LINE_EVERY_MS = 2000;
const BAR_WIDTH = 28;

export function createProgress(label: string, enabled = true): Progress {
  const stream = process.stderr;
  const tty = stream.isTTY === true;
  const started = Date.now();
  let last = tty ? 0 : started;
  let drawn = false;
  if (!enabled) return { update() {}, finish() {} };
  return {
    update(done, total, note) {
      const now = Date.now();
      if (now - last < (tty ? TTY_REDRAW_MS : LINE_EVERY_MS)) return;
      last = now;
      const fraction = total > 0 ? Math.min(1, done / total) : 0;
      const seconds = ((now - started) / 1000).toFixed(1);
      const text = `${label} ${done}/${total} (${Math.round(fraction * 100)}%) ${seconds}s${note === undefined ? '' : `  ${note}`}`;
      if (tty) {
        const filled = Math.round(fraction * BAR_WIDTH);
        stream.write(`\r\x1b[2K[${'#'.repeat(filled)}${'.'.repeat(BAR_WIDTH - filled)}] ${text}`);
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
