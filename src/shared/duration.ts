const UNIT_MS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};

/**
 * The one duration grammar (`purge --older-than`, `simulate --duration`): `7d`, `12h`, `30m`,
 * `45s`, `500ms`, `1h30m`, `0s`, decimals allowed (`1.5s`), into whole milliseconds. Units: ms,
 * s, m, h, d, w. A bare number is refused (say which unit you mean). Returns undefined for
 * anything else; callers raise their own error (the CLI's parseDuration, src/cli/duration.ts).
 */
export function durationMs(text: string): number | undefined {
  const trimmed = text.trim();
  const part = /(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/gy;
  let total = 0;
  let consumed = 0;
  for (let match = part.exec(trimmed); match !== null; match = part.exec(trimmed)) {
    total += Number(match[1]) * (UNIT_MS[match[2] ?? ''] ?? Number.NaN);
    consumed = part.lastIndex;
  }
  if (trimmed === '' || consumed !== trimmed.length || !Number.isFinite(total)) return undefined;
  return Math.round(total);
}
